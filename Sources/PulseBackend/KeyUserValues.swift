import AudioPolicy
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
/// - `audiod-user-values 2` — first line (version 1 has no stream lines, and is read too);
/// - `<key> <mute 0|1|-> <volume|->`;
/// - `stream <server cookie> <p|r> <index> <key> <mute 0|1> <volume>` — each live stream's own user values (what it
///   shows, with audiod's policy mute and duck taken off), so that the next run can tell a change the user made while
///   audiod was down: a stream of the same server run showing something else than both these and what the journal
///   says audiod left there (random test, seed 776710 on PipeWire 1.4: the user set a game stream to 50 % while audiod
///   was down; a leaked duck on the role's next game stream went back to a sibling's 100 %).
///
/// Written whole (a temporary file, then renamed) at most once a second while keys get
/// new values — an app's own volume fade counts as a change that is not audiod's — and at a stop.
public struct KeyUserValues: Equatable, Sendable {
    public var muted: [String: Bool] = [:]
    public var volume: [String: [UInt32]] = [:]
    /// The live streams' user values, and the server run (`pa_server_info.cookie`) their indices belong to.
    public var serverCookie: UInt32?
    public var streams: [StreamID: StreamRecord] = [:]
    /// At most this many keys (the ledger's own bound), and this many streams, are kept.
    public static let limit = 1024

    /// A stream's key and its own mute and volume, as the user (or the app) last left them.
    public struct StreamRecord: Equatable, Sendable {
        public var key: String
        public var muted: Bool
        public var volume: [UInt32]
        public init(key: String, muted: Bool, volume: [UInt32]) {
            self.key = key
            self.muted = muted
            self.volume = volume
        }
    }

    public init(
        muted: [String: Bool] = [:], volume: [String: [UInt32]] = [:], serverCookie: UInt32? = nil,
        streams: [StreamID: StreamRecord] = [:]
    ) {
        self.muted = muted
        self.volume = volume
        self.serverCookie = serverCookie
        self.streams = streams
    }

    /// `user-values` beside the journal.
    public static func path(besideJournal journal: String) -> String {
        Journal.sibling("user-values", of: journal)
    }

    /// Reads the file; empty when there is none. A damaged file is an error (the caller logs it and goes on without).
    public static func load(from path: String) throws(JournalError) -> KeyUserValues {
        guard let lines = try JournalLog.readLines(path) else { return KeyUserValues() }
        var v = KeyUserValues()
        for (n, line) in lines.enumerated() {
            let f = line.split(separator: " ", omittingEmptySubsequences: false)
            func fail() -> JournalError { JournalError("line \(n + 1) is not a user-values line", line: n + 1) }
            if n == 0 {
                guard f.count == 2, f[0] == "audiod-user-values", f[1] == "1" || f[1] == "2" else { throw fail() }
                continue
            }
            if f.count == 7, f[0] == "stream" {
                guard let cookie = UInt32(f[1]), f[2] == "p" || f[2] == "r", let index = UInt32(f[3]),
                    v.serverCookie == nil || v.serverCookie == cookie, f[5] == "0" || f[5] == "1",
                    let volume = volumeField(f[6]), v.streams.count < limit
                else { throw fail() }
                let key: String
                do { key = try JournalLog.decode(f[4]) } catch { throw fail() }
                v.serverCookie = cookie
                v.streams[StreamID(f[2] == "p" ? .playback : .record, index)] = StreamRecord(
                    key: key, muted: f[5] == "1", volume: volume)
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
                guard let volume = volumeField(f[2]) else { throw fail() }
                v.volume[key] = volume
            }
            guard v.muted.count <= limit, v.volume.count <= limit else { throw fail() }
        }
        return v
    }

    private static func volumeField(_ field: Substring) -> [UInt32]? {
        let parts = field.split(separator: ",").map { UInt32($0) }
        guard !parts.isEmpty, parts.count <= 32, parts.allSatisfy({ $0 != nil }) else { return nil }
        return parts.compactMap { $0 }
    }

    /// Replaces the file with these values.
    public func write(to path: String) throws(JournalError) {
        var text = "audiod-user-values 2\n"
        for key in Set(muted.keys).union(volume.keys).sorted() {
            let m = muted[key].map { $0 ? "1" : "0" } ?? "-"
            let v = volume[key].map { $0.map(String.init).joined(separator: ",") } ?? "-"
            text += "\(JournalLog.encode(key)) \(m) \(v.isEmpty ? "-" : v)\n"
        }
        if let cookie = serverCookie {
            for (id, r) in streams.sorted(by: { $0.key < $1.key }).prefix(Self.limit) where !r.volume.isEmpty {
                let kind = id.kind == .playback ? "p" : "r"
                let volume = r.volume.map(String.init).joined(separator: ",")
                text +=
                    "stream \(cookie) \(kind) \(id.index) \(JournalLog.encode(r.key)) \(r.muted ? 1 : 0) \(volume)\n"
            }
        }
        try JournalLog.replaceFile(path, with: text)
    }
}
