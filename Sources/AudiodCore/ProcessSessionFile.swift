import DBusService
import FoundationEssentials
import PulseBackend

/// The `lifetime=process` sessions of the running audiod, for the next run (`KeptProcessSession`): JSON in
/// `$XDG_RUNTIME_DIR/audiod/process-sessions` beside the journal, readable by the user alone. Per login, like the
/// runtime directory; an entry whose process has gone is dropped by the next run.
public enum ProcessSessionFile {
    /// The largest file read: a thousand sessions of long names fit; anything bigger is not audiod's.
    public static let largestBytes = 1 << 20

    public static func path(besideJournal journal: String) -> String {
        Journal.sibling("process-sessions", of: journal)
    }

    /// What is wrong with the file, in words that never quote its content.
    public enum Problem: Error, CustomStringConvertible, Equatable {
        case unreadable, notARegularFile, tooLarge, notAList
        public var description: String {
            switch self {
            case .unreadable: "not readable"
            case .notARegularFile: "not a regular file"
            case .tooLarge: "larger than \(ProcessSessionFile.largestBytes >> 20) MB"
            case .notAList: "not a list of process sessions in JSON"
            }
        }
    }

    /// The kept sessions, none when there is no file. Never blocks on what is at the path (a FIFO, a device).
    public static func read(_ path: String) -> Result<[KeptProcessSession], Problem> {
        switch SmallFile.read(path, limit: largestBytes) {
        case .failure(.unreadable): return .failure(.unreadable)
        case .failure(.notARegularFile): return .failure(.notARegularFile)
        case .failure(.tooLarge): return .failure(.tooLarge)
        case .success(nil): return .success([])
        case .success(let bytes?):
            guard let list = try? JSONDecoder().decode([KeptProcessSession].self, from: Data(bytes)) else {
                return .failure(.notAList)
            }
            return .success(list)
        }
    }

    /// Writes the list atomically (a crash leaves the old file or the new one), readable by the user alone.
    public static func write(_ sessions: [KeptProcessSession], to path: String) throws {
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(
            at: url.deletingLastPathComponent(), withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        try JSONEncoder().encode(sessions).write(to: url, options: .atomic)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
    }
}
