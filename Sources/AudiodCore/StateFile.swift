import AudioPolicy
import Dispatch
import FoundationEssentials
import Glibc

/// What survives a restart (POLICY §4, docs/API.md): silent mode and the app rules set over D-Bus, in
/// `$XDG_STATE_HOME/audiod/state.json` (default `~/.local/state`).
public enum StateFile {
    struct Stored: Codable {
        struct Rule: Codable {
            var application: String
            var category: String
            var mode: String
            var options: [String]
        }
        var silentMode: Bool
        var rules: [Rule]
    }

    public static func defaultPath(environment env: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        if let s = env["XDG_STATE_HOME"], !s.isEmpty { return s + "/audiod/state.json" }
        if let h = env["HOME"], !h.isEmpty { return h + "/.local/state/audiod/state.json" }
        return nil
    }

    static func save(_ state: PersistentState, to path: String) throws {
        let stored = Stored(
            silentMode: state.silentMode,
            rules: state.rules.map {
                .init(
                    application: $0.application, category: $0.configuration.category.rawValue,
                    mode: $0.configuration.mode.rawValue, options: $0.configuration.options.map(\.rawValue))
            })
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(
            at: url.deletingLastPathComponent(), withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(stored).write(to: url, options: .atomic)
    }

    /// What is wrong with a saved-state file, in words that never quote its content (it may hold anything).
    static func describe(_ error: Error) -> String {
        switch error {
        case DecodingError.dataCorrupted: return "not valid JSON"
        case DecodingError.keyNotFound(let key, _): return "the key \"\(key.stringValue)\" is missing"
        case DecodingError.typeMismatch(_, let c), DecodingError.valueNotFound(_, let c):
            return "a value of the wrong type at \(c.codingPath.map(\.stringValue).joined(separator: "."))"
        case let e as CocoaError where e.code == .fileReadNoPermission: return "not readable"
        default: return "unreadable"
        }
    }

    /// The events that bring an engine to the saved state (their replies say whether each rule still holds).
    static func load(from path: String, requestID: () -> RequestID) throws -> [Event] {
        guard FileManager.default.fileExists(atPath: path) else { return [] }
        let stored = try JSONDecoder().decode(Stored.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
        var events: [Event] = [.setSilentMode(requestID(), stored.silentMode)]
        for r in stored.rules {
            events.append(
                .setApplicationCategory(
                    requestID(), application: r.application, category: r.category, mode: r.mode, options: r.options))
        }
        return events
    }
}
