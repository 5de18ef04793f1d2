/// An error the arbiter answers a request with: one of docs/API.md's named errors plus a message that says what was
/// wrong and what is accepted.
///
/// A struct with a private code (rather than a public enum) so that adding an error breaks no caller's switch.
public struct PolicyError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The error's name without the `org.audiod.AudioSession1.Error.` prefix (or the full `org.freedesktop.DBus`
    /// name for the two standard errors).
    public let name: String
    /// A sentence for a person: what was wrong and what is accepted.
    public let message: String

    public init(name: String, message: String) {
        self.name = name
        self.message = message
    }

    public var description: String { "\(name): \(message)" }

    /// Whether `name` is one of audiod's own (as opposed to a standard D-Bus error).
    public var isAudiodError: Bool { !name.hasPrefix("org.freedesktop.DBus.") }

    public enum OptionKind: Sendable { case category, activation }
    public enum IncompatibleBecause: Sendable {
        case notAcceptedBy(Category)
        case onlyOnDeactivation
    }

    public static func invalidCategory(_ raw: String) -> PolicyError {
        PolicyError(
            name: ErrorName.invalidCategory.rawValue,
            message: "category '\(raw)' is not one of \(joined(Category.allCases))")
    }

    public static func invalidMode(_ raw: String) -> PolicyError {
        PolicyError(name: ErrorName.invalidMode.rawValue, message: "mode '\(raw)' is not one of \(joined(Mode.allCases))")
    }

    public static func incompatibleMode(_ mode: Mode, category: Category) -> PolicyError {
        PolicyError(
            name: ErrorName.incompatibleMode.rawValue,
            message: "mode '\(mode.rawValue)' is not accepted by category '\(category.rawValue)', "
                + "which accepts \(joined(category.acceptedModes))")
    }

    public static func invalidOption(_ raw: String, kind: OptionKind) -> PolicyError {
        switch kind {
        case .category:
            return PolicyError(
                name: ErrorName.invalidOption.rawValue,
                message: "'\(raw)' is not a category option; category options are \(joined(CategoryOption.allCases))")
        case .activation:
            return PolicyError(
                name: ErrorName.invalidOption.rawValue,
                message: "'\(raw)' is not an activation option; the only activation option is "
                    + "\(joined(ActivationOption.allCases)) (with SetActive(false))")
        }
    }

    public static func incompatibleOption(_ raw: String, because: IncompatibleBecause) -> PolicyError {
        switch because {
        case .notAcceptedBy(let category):
            let accepted = category.acceptedOptions
            return PolicyError(
                name: ErrorName.incompatibleOption.rawValue,
                message: "option '\(raw)' is not accepted by category '\(category.rawValue)', which accepts "
                    + (accepted.isEmpty ? "no options" : joined(accepted)))
        case .onlyOnDeactivation:
            return PolicyError(
                name: ErrorName.incompatibleOption.rawValue,
                message: "option '\(raw)' is only accepted with SetActive(false)")
        }
    }

    public static func insufficientPriority(call: SessionID) -> PolicyError {
        PolicyError(
            name: ErrorName.insufficientPriority.rawValue,
            message: "a call (session \(call.rawValue)) holds the audio; during a call only a call or mixable "
                + "playback/ambient sessions may activate")
    }

    public static func noSuchSession(_ what: String) -> PolicyError {
        PolicyError(name: ErrorName.noSuchSession.rawValue, message: what)
    }

    public static func noSuchRule(_ application: String) -> PolicyError {
        PolicyError(
            name: ErrorName.noSuchRule.rawValue,
            message: "there is no rule for '\(application)' set over D-Bus (rules from the config file are "
                + "changed in the file)")
    }

    public static func accessDenied(_ what: String) -> PolicyError {
        PolicyError(name: "org.freedesktop.DBus.Error.AccessDenied", message: what)
    }

    public static func invalidArgs(_ what: String) -> PolicyError {
        PolicyError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: what)
    }
}
