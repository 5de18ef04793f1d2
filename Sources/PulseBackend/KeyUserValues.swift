import FoundationEssentials
import Glibc

/// The last mute and volume the user gave each restore-database key (an app's or a role's entry), kept in
/// `$XDG_RUNTIME_DIR/audiod/user-values` so that an audiod started again — after a crash, a stop, `--restore` —
/// still knows what to put back when a key's next stream starts with a policy value the server saved over the
/// user's (random test, seed 139779: the user set the phone role to 80 %, audiod was killed and started again, and a
/// leaked duck on the next phone stream went back to a sibling's 100 %). The server's own list would say it, but
/// pipewire-pulse lists nothing.
///
/// Lines (fields separated by spaces, the key percent-encoded as in the journal):
/// - `audiod-user-values 1` — first line;
/// - `<key> <mute 0|1|-> <volume|->`.
///
/// What the user changes while audiod is down is not here: the server saves it into the entry, which then holds no
/// policy value to put back. Written whole (a temporary file, then renamed) at most once a second while keys get
/// new values — an app's own volume fade counts as a change that is not audiod's — and at a stop.
public struct KeyUserValues: Equatable, Sendable {
    public var muted: [String: Bool] = [:]
    public var volume: [String: [UInt32]] = [:]
    /// At most this many keys are kept (the ledger's own bound).
    public static let limit = 1024

    public init(muted: [String: Bool] = [:], volume: [String: [UInt32]] = [:]) {
        self.muted = muted
        self.volume = volume
    }

    /// `user-values` beside the journal.
    public static func path(besideJournal journal: String) -> String {
        let dir = journal.lastIndex(of: "/").map { String(journal[..<$0]) } ?? "."
        return dir + "/user-values"
    }

    /// Reads the file; empty when there is none. A damaged file is an error (the caller logs it and goes on without).
    public static func load(from path: String) throws(JournalError) -> KeyUserValues {
        guard FileManager.default.fileExists(atPath: path) else { return KeyUserValues() }
        guard let data = try? Data(contentsOf: URL(fileURLWithPath: path)) else {
            throw JournalError("cannot be read: \(String(cString: strerror(errno)))")
        }
        var v = KeyUserValues()
        let lines = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: true)
        for (n, line) in lines.enumerated() {
            let f = line.split(separator: " ", omittingEmptySubsequences: false)
            func fail() -> JournalError { JournalError("line \(n + 1) is not a user-values line", line: n + 1) }
            if n == 0 {
                guard f.count == 2, f[0] == "audiod-user-values", f[1] == "1" else { throw fail() }
                continue
            }
            guard f.count == 3 else { throw fail() }
            let key: String
            do { key = try JournalLog.decode(f[0]) } catch { throw fail() }
            switch f[1] {
            case "0": v.muted[key] = false
            case "1": v.muted[key] = true
            case "-": break
            default: throw fail()
            }
            if f[2] != "-" {
                let parts = f[2].split(separator: ",").map { UInt32($0) }
                guard !parts.isEmpty, parts.allSatisfy({ $0 != nil }) else { throw fail() }
                v.volume[key] = parts.compactMap { $0 }
            }
            guard v.muted.count <= limit, v.volume.count <= limit else { throw fail() }
        }
        return v
    }

    /// Replaces the file with these values.
    public func write(to path: String) throws(JournalError) {
        var text = "audiod-user-values 1\n"
        for key in Set(muted.keys).union(volume.keys).sorted() {
            let m = muted[key].map { $0 ? "1" : "0" } ?? "-"
            let v = volume[key].map { $0.map(String.init).joined(separator: ",") } ?? "-"
            text += "\(JournalLog.encode(key)) \(m) \(v.isEmpty ? "-" : v)\n"
        }
        try JournalLog.makeDirectory(for: path)
        let temp = path + ".new"
        let fd = open(temp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw JournalError("cannot write \(temp): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        try JournalLog.writeAll(fd, text, path: temp)
        guard rename(temp, path) == 0 else {
            throw JournalError("cannot rename \(temp): \(String(cString: strerror(errno)))")
        }
    }
}
