import FoundationEssentials
import PulseBackend

/// The first session id the next run of audiod may give out: one decimal number and a newline, in
/// `$XDG_RUNTIME_DIR/audiod/session-ids` beside the journal. A run reserves ids in blocks (`Arbiter`), so the number
/// is ahead of the ids actually given out.
public enum SessionIDFile {
    /// The largest number kept: numbering on from it never overflows, and every id fits a double (JSON, shells).
    public static let largest: UInt64 = 1 << 52

    public static func path(besideJournal journal: String) -> String {
        Journal.sibling("session-ids", of: journal)
    }

    /// What is wrong with the file, in words that never quote its content.
    public enum Problem: Error, CustomStringConvertible, Equatable {
        case unreadable, notARegularFile, notANumber
        public var description: String {
            switch self {
            case .unreadable: "not readable"
            case .notARegularFile: "not a regular file"
            case .notANumber: "not one decimal number from 1 to 2^52"
            }
        }
    }

    /// The first id to give out: 1 when there is no file (the login's first run). Reads at most 64 bytes of a
    /// regular file: whatever is at the path (a FIFO, a device) never holds up the start.
    public static func read(_ path: String) -> Result<UInt64, Problem> {
        let bytes: [UInt8]
        switch SmallFile.read(path, limit: 64) {
        case .failure(.unreadable): return .failure(.unreadable)
        case .failure(.notARegularFile): return .failure(.notARegularFile)
        case .failure(.tooLarge): return .failure(.notANumber)
        case .success(nil): return .success(1)
        case .success(let read?): bytes = read
        }
        let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let value = UInt64(text), value >= 1, value <= largest else { return .failure(.notANumber) }
        return .success(value)
    }

    /// Writes `first` (at most `largest`), readable by the user alone, as the journal is.
    public static func write(_ first: UInt64, to path: String) throws {
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(
            at: url.deletingLastPathComponent(), withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        try Data("\(min(first, largest))\n".utf8).write(to: url, options: .atomic)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
    }
}
