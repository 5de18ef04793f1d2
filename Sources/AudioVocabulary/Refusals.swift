/// What audiod refuses in a category, mode, option or duck level, in the words it refuses it with.
///
/// Shared by the engine and audioctl: a value audioctl checks before it asks audiod (so that a failed command
/// creates nothing) is refused with the same name and sentence audiod would answer.
public struct Refusal: Error, Sendable, Hashable, CustomStringConvertible {
    /// The full D-Bus error name.
    public let busName: String
    public let message: String

    public var description: String { message }

    init(_ name: ErrorName, _ message: String) {
        busName = name.busName
        self.message = message
    }

    init(standard name: String, _ message: String) {
        busName = "org.freedesktop.DBus.Error." + name
        self.message = message
    }

    public static func invalidCategory(_ raw: String) -> Refusal {
        Refusal(.invalidCategory, "category '\(raw)' is not one of \(words(Category.allCases))")
    }

    public static func invalidMode(_ raw: String) -> Refusal {
        Refusal(.invalidMode, "mode '\(raw)' is not one of \(words(Mode.allCases))")
    }

    public static func incompatibleMode(_ mode: Mode, category: Category) -> Refusal {
        Refusal(
            .incompatibleMode,
            "mode '\(mode.rawValue)' is not accepted by category '\(category.rawValue)', "
                + "which accepts \(words(category.acceptedModes))")
    }

    public static func invalidCategoryOption(_ raw: String) -> Refusal {
        Refusal(
            .invalidOption, "'\(raw)' is not a category option; category options are \(words(CategoryOption.allCases))")
    }

    public static func invalidActivationOption(_ raw: String) -> Refusal {
        Refusal(
            .invalidOption,
            "'\(raw)' is not an activation option; the only activation option is "
                + "\(words(ActivationOption.allCases)) (with SetActive(false))")
    }

    public static func optionNotAccepted(_ raw: String, by category: Category) -> Refusal {
        let accepted = category.acceptedOptions
        return Refusal(
            .incompatibleOption,
            "option '\(raw)' is not accepted by category '\(category.rawValue)', which accepts "
                + (accepted.isEmpty ? "no options" : words(accepted)))
    }

    public static func onlyOnDeactivation(_ raw: String) -> Refusal {
        Refusal(.incompatibleOption, "option '\(raw)' is only accepted with SetActive(false)")
    }

    public static func duckLevelOutOfRange(_ level: Double) -> Refusal {
        Refusal(
            standard: "InvalidArgs", "DuckLevel \(level) is out of range: it must be greater than 0 and less than 1")
    }

    /// The first problem of a configuration, in the order audiod checks: category, mode, then options in list order.
    public static func check(category: String, mode: String, options: [String]) -> Refusal? {
        guard let c = Category(rawValue: category) else { return invalidCategory(category) }
        guard let m = Mode(rawValue: mode) else { return invalidMode(mode) }
        guard c.acceptedModes.contains(m) else { return incompatibleMode(m, category: c) }
        for raw in options {
            guard let o = CategoryOption(rawValue: raw) else { return invalidCategoryOption(raw) }
            guard c.acceptedOptions.contains(o) else { return optionNotAccepted(raw, by: c) }
        }
        return nil
    }

    /// Whether audiod takes this duck level: greater than 0, less than 1.
    public static func check(duckLevel level: Double) -> Refusal? {
        level > 0 && level < 1 && level.isFinite ? nil : duckLevelOutOfRange(level)
    }

    /// Whether audiod takes this duck level beside the strong one in force: it may not go below it.
    public static func check(duckLevel level: Double, strongDuckLevel strong: Double) -> Refusal? {
        if let r = check(duckLevel: level) { return r }
        guard level >= strong else {
            return Refusal(
                standard: "InvalidArgs",
                "DuckLevel \(level) would be below StrongDuckLevel \(strong): the ordinary duck may not be deeper than "
                    + "the strong one; lower StrongDuckLevel first (audioctl duck-level --strong)")
        }
        return nil
    }

    /// The strong level's range alone: greater than 0, less than 1 (audiod also holds it to at most DuckLevel).
    public static func check(strongDuckLevel strong: Double) -> Refusal? {
        guard strong > 0, strong < 1, strong.isFinite else {
            return Refusal(
                standard: "InvalidArgs",
                "StrongDuckLevel \(strong) is out of range: it must be greater than 0, less than 1 and at most DuckLevel"
            )
        }
        return nil
    }

    /// Whether audiod takes this strong duck level beside the ordinary one in force: greater than 0, at most it.
    public static func check(strongDuckLevel strong: Double, duckLevel level: Double) -> Refusal? {
        if let r = check(strongDuckLevel: strong) { return r }
        guard strong <= level else {
            return Refusal(
                standard: "InvalidArgs",
                "StrongDuckLevel \(strong) would be above DuckLevel \(level): the strong duck may not be shallower than "
                    + "the ordinary one; raise DuckLevel first (audioctl duck-level)")
        }
        return nil
    }

    private static func words<T: RawRepresentable>(_ values: [T]) -> String where T.RawValue == String {
        values.map(\.rawValue).joined(separator: ", ")
    }
}
