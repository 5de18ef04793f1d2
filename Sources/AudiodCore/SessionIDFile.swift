import FoundationEssentials

/// The first session id the next run of audiod may give out: one decimal number and a newline, in
/// `$XDG_RUNTIME_DIR/audiod/session-ids` beside the journal. A run reserves ids in blocks (`Arbiter`), so the number
/// is ahead of the ids actually given out.
public enum SessionIDFile {
    public static func path(besideJournal journal: String) -> String {
        guard let slash = journal.lastIndex(of: "/") else { return "session-ids" }
        return String(journal[..<slash]) + "/session-ids"
    }

    /// What is wrong with the file, in words that never quote its content.
    public enum Problem: Error, CustomStringConvertible, Equatable {
        case unreadable, notANumber
        public var description: String {
            switch self {
            case .unreadable: "not readable"
            case .notANumber: "not one decimal number from 1 to 2^48"
            }
        }
    }

    /// The first id to give out: 1 when there is no file (the login's first run).
    public static func read(_ path: String) -> Result<UInt64, Problem> {
        guard FileManager.default.fileExists(atPath: path) else { return .success(1) }
        guard let data = FileManager.default.contents(atPath: path), data.count <= 64 else {
            return .failure(.unreadable)
        }
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        // Bounded, so that numbering on from it never overflows, and any id fits a double (JSON, shells).
        guard let n = UInt64(text), n >= 1, n <= 1 << 48 else { return .failure(.notANumber) }
        return .success(n)
    }

    public static func write(_ first: UInt64, to path: String) throws {
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(
            at: url.deletingLastPathComponent(), withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        try Data("\(first)\n".utf8).write(to: url, options: .atomic)
    }
}
