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

    /// audiod's own error from a refusal the vocabulary words (the short name, as `name` holds it).
    public init(_ r: Refusal) {
        self.init(
            name: r.busName.hasPrefix(BusNames.errorPrefix)
                ? String(r.busName.dropFirst(BusNames.errorPrefix.count)) : r.busName,
            message: r.message)
    }

    public static func invalidCategory(_ raw: String) -> PolicyError { PolicyError(.invalidCategory(raw)) }
    public static func invalidMode(_ raw: String) -> PolicyError { PolicyError(.invalidMode(raw)) }

    public static func incompatibleMode(_ mode: Mode, category: Category) -> PolicyError {
        PolicyError(.incompatibleMode(mode, category: category))
    }

    public static func invalidOption(_ raw: String, kind: OptionKind) -> PolicyError {
        switch kind {
        case .category: PolicyError(.invalidCategoryOption(raw))
        case .activation: PolicyError(.invalidActivationOption(raw))
        }
    }

    public static func incompatibleOption(_ raw: String, because: IncompatibleBecause) -> PolicyError {
        switch because {
        case .notAcceptedBy(let category): PolicyError(.optionNotAccepted(raw, by: category))
        case .onlyOnDeactivation: PolicyError(.onlyOnDeactivation(raw))
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
