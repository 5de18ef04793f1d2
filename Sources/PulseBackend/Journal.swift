import AudioPolicy
import Dispatch
import FoundationEssentials
import Glibc

/// What audiod has changed on the server, kept on disk so that a run that crashed (or lost its connection) can be
/// undone by the next one: docs/POLICY.md §8, "nothing left behind".
///
/// It lives in `$XDG_RUNTIME_DIR/audiod/journal.json` (a tmpfs that dies with the login session, like the streams
/// it describes) and is replaced atomically (write, then rename) whenever what audiod applied changes.
public struct Journal: Codable, Equatable, Sendable {
    /// One stream audiod changed.
    public struct Entry: Codable, Equatable, Sendable {
        public var record: Bool
        public var index: UInt32
        public var applicationName: String
        /// The key under which the server's restore database files this stream's app (see `RestoreKey`).
        public var restoreKey: String?
        /// audiod muted it: undo by unmuting.
        public var unmute: Bool
        /// The volume audiod set, and the user's volume to put back (only if the stream still has audiod's).
        public var appliedVolume: [UInt32]?
        public var restoreVolume: [UInt32]?
    }

    /// A policy value that outlived its stream: the server's restore database (module-stream-restore,
    /// WirePlumber) may hand it to the app's next stream, which audiod then puts back to the user's values.
    public struct Leak: Codable, Equatable, Sendable {
        public var unmute: Bool
        public var appliedVolume: [UInt32]?
        public var restoreVolume: [UInt32]?
    }

    /// `pa_server_info.cookie` of the server run the entries refer to.
    public var serverCookie: UInt32
    public var entries: [Entry]
    /// By restore key.
    public var leaks: [String: Leak]

    public init(serverCookie: UInt32 = 0, entries: [Entry] = [], leaks: [String: Leak] = [:]) {
        self.serverCookie = serverCookie
        self.entries = entries
        self.leaks = leaks
    }

    public var isEmpty: Bool { entries.isEmpty && leaks.isEmpty }

    /// `$XDG_RUNTIME_DIR/audiod/journal.json`, nil when `XDG_RUNTIME_DIR` is unset.
    public static func defaultPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        guard let dir = environment["XDG_RUNTIME_DIR"], !dir.isEmpty else { return nil }
        return dir + "/audiod/journal.json"
    }

    /// Reads a journal; nil when there is none. A file that cannot be parsed is an error (and is left in place
    /// for a person to look at).
    public static func load(from path: String) throws -> Journal? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        return try JSONDecoder().decode(Journal.self, from: data)
    }

    /// Writes atomically (temporary file + rename), creating the directory (mode 0700) if needed. An empty journal
    /// removes the file.
    public func save(to path: String) throws {
        let url = URL(fileURLWithPath: path)
        if isEmpty {
            if FileManager.default.fileExists(atPath: path) { try FileManager.default.removeItem(at: url) }
            return
        }
        try FileManager.default.createDirectory(
            at: url.deletingLastPathComponent(), withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try encoder.encode(self).write(to: url, options: .atomic)
    }
}

/// The key a restore database files a stream under: its media role, else its application id, else its
/// application name — the order module-stream-restore and WirePlumber's restore-stream both use.
enum RestoreKey {
    static func of(_ properties: [String: String], record: Bool) -> String? {
        let prefix = record ? "source-output-by-" : "sink-input-by-"
        // module-stream-restore tags each stream with the name of its entry: use it as it is.
        if let id = properties["module-stream-restore.id"], !id.isEmpty { return id }
        if let r = properties["media.role"], !r.isEmpty { return prefix + "media-role:" + r }
        if let a = properties["application.id"], !a.isEmpty { return prefix + "application-id:" + a }
        if let n = properties["application.name"], !n.isEmpty { return prefix + "application-name:" + n }
        if let m = properties["media.name"], !m.isEmpty { return prefix + "media-name:" + m }
        return nil
    }
}

extension Journal.Leak {
    /// What a stream leaves in its restore-database entry if it ends (or is saved) with this change on it.
    init(_ change: AppliedChange) {
        self.init(
            unmute: change.unmute, appliedVolume: change.appliedVolume?.channels,
            restoreVolume: change.restoreVolume?.channels)
    }
}
