import AudioPolicy
import Dispatch
import FoundationEssentials
import Glibc

/// What audiod has changed on the server, kept on disk so that a run that crashed (or lost its connection) can be
/// undone by the next one: docs/POLICY.md §8, "nothing left behind".
///
/// It lives in `$XDG_RUNTIME_DIR/audiod/journal` (a tmpfs that dies with the login session, like the streams it
/// describes), written as a log by `JournalLog`.
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
        /// A volume audiod set before `appliedVolume`, whose replacement may not have reached the server yet: the
        /// stream may still show it (a duck at the previous level). Put back the same way.
        public var earlierAppliedVolume: [UInt32]? = nil
        /// A volume set before that, while both replacements may not have landed (two writes unanswered).
        public var olderAppliedVolume: [UInt32]? = nil

        /// The volumes of audiod's the stream may show besides `appliedVolume`.
        public var otherAppliedVolumes: [[UInt32]] { [earlierAppliedVolume, olderAppliedVolume].compactMap { $0 } }
    }

    /// A policy value that outlived its stream: the server's restore database (module-stream-restore,
    /// WirePlumber) may hand it to the app's next stream, which audiod then puts back to the user's values.
    public struct Leak: Codable, Equatable, Sendable {
        public var unmute: Bool
        public var appliedVolume: [UInt32]?
        public var restoreVolume: [UInt32]?
        /// The user's own mute on the stream that left a duck behind (audiod did not mute it): what a repair that
        /// must write the whole entry (pipewire-pulse's, which writes the mute with every entry) puts there. Nil
        /// when audiod muted the stream (then the user had not) or when it is not known.
        public var userMuted: Bool?
        /// The highest stream index of the entry's kind audiod had seen when the entry came to hold the value, in
        /// the server run the journal names: a stream of that run with an index up to this one existed before, and
        /// the server gave it its values from the entry then, not this one. Nil: not known (any stream may carry it).
        public var existedBefore: UInt32?
        /// Other policy volumes the entry may hold besides `appliedVolume`, each put back to `restoreVolume` like it:
        /// a key ducked at two levels (the duck level changed, or lost with a restart) while the server had not yet
        /// saved the first may come back with either (random test, seeds 930699 and 868802 on PipeWire 0.3.65: a
        /// journal that kept one of two ducks left a later stream at the other, taken for the user's volume).
        public var otherVolumes: [[UInt32]] = []
        /// At most this many `otherVolumes`: a key is ducked at one level at a time and the level changes by hand, but
        /// siblings at different user volumes each add their own duck within the server's unsaved second.
        public static let otherVolumesLimit = 15

        private enum CodingKeys: String, CodingKey {
            case unmute, appliedVolume, restoreVolume, userMuted, existedBefore
        }

        public init(
            unmute: Bool, appliedVolume: [UInt32]?, restoreVolume: [UInt32]?, userMuted: Bool? = nil,
            existedBefore: UInt32? = nil, otherVolumes: [[UInt32]] = []
        ) {
            self.unmute = unmute
            self.appliedVolume = appliedVolume
            self.restoreVolume = restoreVolume
            self.userMuted = userMuted
            self.existedBefore = existedBefore
            self.otherVolumes = otherVolumes
        }

        /// Every policy volume the entry may hold.
        public var policyVolumes: [[UInt32]] { (appliedVolume.map { [$0] } ?? []) + otherVolumes }

        /// A stream of the server run the leak was recorded in cannot carry it: it existed before the entry held it.
        public func olderThanLeak(_ index: UInt32) -> Bool { existedBefore.map { index <= $0 } ?? false }

        /// The mute a repair writes: unmuted where audiod muted, the user's own mute where it only ducked.
        public var userMute: Bool { unmute ? false : userMuted ?? false }
    }

    /// A policy value a server that saves late (WirePlumber: 1 s after the last change it saw) may still hold in
    /// its saved state, though not in what it gives new streams now: written to or lifted from the key's streams
    /// since the server's last quiet second. A server that dies before its next save comes back with it.
    public struct Unsaved: Equatable, Sendable {
        public var leak: Leak
        /// When it was written (`CLOCK_REALTIME`, seconds): an audiod started again much later takes the server to
        /// have saved since.
        public var at: UInt64
        public init(leak: Leak, at: UInt64) {
            self.leak = leak
            self.at = at
        }
    }

    /// `pa_server_info.cookie` of the server run the entries refer to.
    public var serverCookie: UInt32
    public var entries: [Entry]
    /// By restore key.
    public var leaks: [String: Leak]
    /// By restore key (not in the JSON of earlier releases).
    public var unsaved: [String: Unsaved] = [:]

    private enum CodingKeys: String, CodingKey { case serverCookie, entries, leaks }

    public init(
        serverCookie: UInt32 = 0, entries: [Entry] = [], leaks: [String: Leak] = [:], unsaved: [String: Unsaved] = [:]
    ) {
        self.serverCookie = serverCookie
        self.entries = entries
        self.leaks = leaks
        self.unsaved = unsaved
    }

    public var isEmpty: Bool { entries.isEmpty && leaks.isEmpty }

    /// `$XDG_RUNTIME_DIR/audiod/journal`, nil when `XDG_RUNTIME_DIR` is unset.
    /// A file of audiod's beside the journal (the keys' user values, the session ids): the same directory, the
    /// working one for a journal named without one.
    public static func sibling(_ name: String, of journal: String) -> String {
        let dir = journal.lastIndex(of: "/").map { String(journal[..<$0]) } ?? "."
        return dir + "/" + name
    }

    public static func defaultPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        guard let dir = environment["XDG_RUNTIME_DIR"], !dir.isEmpty else { return nil }
        return dir + "/audiod/journal"
    }

    /// Reads a journal; nil when there is none. A file that cannot be parsed is an error (and is left in place
    /// for a person to look at).
    public static func load(from path: String) throws(JournalError) -> Journal? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        guard let data = try? Data(contentsOf: URL(fileURLWithPath: path)) else {
            throw JournalError("cannot be read: \(String(cString: strerror(errno)))")
        }
        // An earlier release wrote the whole journal as JSON.
        if data.first == UInt8(ascii: "{") {
            guard let j = try? JSONDecoder().decode(Journal.self, from: data) else {
                throw JournalError("is neither audiod's journal lines nor the JSON of an earlier release")
            }
            return j
        }
        return try JournalLog.replay(String(decoding: data, as: UTF8.self))
    }
}

/// The journal on disk as a log: one line per change, appended with a single `write(2)` before the operations it
/// records leave, and rewritten whole (to a temporary file, then renamed) only when the lines outnumber what
/// they describe — so a step costs a few dozen bytes, not the whole journal encoded again.
///
/// No `fsync`: the journal must survive audiod crashing or being killed, and the page cache does; a machine that
/// crashes takes the sound server's streams (and the tmpfs under `$XDG_RUNTIME_DIR`) with it.
///
/// Lines (fields separated by spaces, text fields percent-encoded):
/// - `audiod-journal 1 <server cookie>` — first line;
/// - `+ <p|r> <index> <unmute 0|1> <applied volume|-> <user volume|-> <restore key|-> <application name> [<earlier
///   applied volume>]` — audiod holds this change on the stream (replacing any earlier line for it); while a write
///   that lifts or changes a value is in flight, the line still names what the stream may show until it lands;
/// - `- <p|r> <index>` — it holds nothing there any more;
/// - `L <key> <unmute 0|1> <applied volume|-> <user volume|-> [<user's mute 0|1|-> [<highest index seen|-> [<other
///   applied volumes, `;`-separated>]]]` — a restore-database entry may hold a policy value (streams of the journal's
///   server run up to that index existed before it did);
/// - `l <key>` — it does not;
/// - `U <key> <unmute 0|1> <applied volume|-> <user volume|-> <user's mute 0|1|-> <written at> [<other applied
///   volumes>]` — a server that saves late may still hold this policy value in its saved state (`Journal.Unsaved`);
/// - `u <key>` — it has saved since.
public final class JournalLog {
    public let path: String
    private var fd: Int32 = -1
    private var cookie: UInt32 = 0
    private var entries: [UInt64: Journal.Entry] = [:]
    private var leaks: [String: Journal.Leak] = [:]
    private var unsaved: [String: Journal.Unsaved] = [:]
    private var lines = 0
    private var exists = false

    public init(path: String) { self.path = path }
    deinit { if fd >= 0 { Glibc.close(fd) } }

    /// What the file says now.
    public var written: Journal {
        Journal(
            serverCookie: cookie, entries: entries.keys.sorted().compactMap { entries[$0] }, leaks: leaks,
            unsaved: unsaved)
    }

    /// Brings the file to `journal` (the whole of it: for connecting and the rare changes of leaks).
    public func write(_ journal: Journal) throws {
        let new = Dictionary(journal.entries.map { (Self.key($0), $0) }, uniquingKeysWith: { _, b in b })
        var changed: [(UInt64, Journal.Entry?)] = journal.entries.map { (Self.key($0), $0) }
        for k in entries.keys where new[k] == nil { changed.append((k, nil)) }
        var leakChanges: [(String, Journal.Leak?)] = journal.leaks.map { ($0.key, $0.value) }
        for k in leaks.keys where journal.leaks[k] == nil { leakChanges.append((k, nil)) }
        var unsavedChanges: [(String, Journal.Unsaved?)] = journal.unsaved.map { ($0.key, $0.value) }
        for k in unsaved.keys where journal.unsaved[k] == nil { unsavedChanges.append((k, nil)) }
        try update(
            cookie: journal.serverCookie, entries: changed, leaks: leakChanges, unsaved: unsavedChanges,
            removeWhenEmpty: true)
    }

    /// Records what the server may not have saved yet, by key (nil: it has saved since).
    public func update(cookie newCookie: UInt32, unsaved changes: [(String, Journal.Unsaved?)]) throws {
        try update(cookie: newCookie, entries: [], leaks: [], unsaved: changes)
    }

    /// Records these streams' entries (nil: audiod holds nothing there any more), without looking at the others:
    /// what a step costs is what it changed.
    public func update(cookie newCookie: UInt32, streams: [(record: Bool, index: UInt32, entry: Journal.Entry?)]) throws
    {
        try update(
            cookie: newCookie, entries: streams.map { (UInt64($0.index) << 1 | ($0.record ? 1 : 0), $0.entry) },
            leaks: [])
    }

    /// Records one restore-database entry's leak (nil: it holds no policy value any more).
    public func update(cookie newCookie: UInt32, leak key: String, _ leak: Journal.Leak?) throws {
        try update(cookie: newCookie, entries: [], leaks: [(key, leak)])
    }

    /// `removeWhenEmpty`: a journal that describes nothing goes (stopping, `--restore`). A step keeps the file and
    /// appends its lines instead: a call that mutes and unmutes one stream would otherwise create, rename and
    /// unlink the file every time, on the path of the mute.
    private func update(
        cookie newCookie: UInt32, entries changed: [(UInt64, Journal.Entry?)],
        leaks leakChanges: [(String, Journal.Leak?)], unsaved unsavedChanges: [(String, Journal.Unsaved?)] = [],
        removeWhenEmpty: Bool = false
    ) throws {
        var out = ""
        var added = 0
        for (k, e) in changed where entries[k] != e {
            entries[k] = e
            if let e {
                out += Self.line(e)
            } else {
                out += "- \(k & 1 == 1 ? "r" : "p") \(k >> 1)\n"
            }
            added += 1
        }
        for (k, l) in leakChanges.sorted(by: { $0.0 < $1.0 }) where leaks[k] != l {
            leaks[k] = l
            out += l.map { Self.line(leak: k, $0) } ?? "l \(Self.encode(k))\n"
            added += 1
        }
        for (k, u) in unsavedChanges.sorted(by: { $0.0 < $1.0 }) where unsaved[k] != u {
            unsaved[k] = u
            out += u.map { Self.line(unsaved: k, $0) } ?? "u \(Self.encode(k))\n"
            added += 1
        }
        let empty = entries.isEmpty && leaks.isEmpty && unsaved.isEmpty
        let cookieChanged = newCookie != cookie
        cookie = newCookie
        guard
            added > 0 || cookieChanged || (!exists && !empty) || (removeWhenEmpty && exists && empty)
        else { return }
        if empty && (removeWhenEmpty || !exists) {
            if fd >= 0 { Glibc.close(fd) }
            fd = -1
            if exists || FileManager.default.fileExists(atPath: path) { unlink(path) }
            exists = false
            lines = 0
            return
        }
        if !exists || fd < 0 || cookieChanged || lines + added > 2 * (entries.count + leaks.count + unsaved.count) + 32
        {
            try rewrite()
            return
        }
        try append(out)
        lines += added
    }

    private func append(_ text: String) throws {
        try Self.writeAll(fd, text, path: path)
    }

    /// All of `text` to `fd` (one `write(2)` when the kernel takes it whole), retried on EINTR.
    static func writeAll(_ fd: Int32, _ text: String, path: String) throws(JournalError) {
        let bytes = Array(text.utf8)
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { buf in
                guard let base = buf.baseAddress else { return 0 }
                return Glibc.write(fd, base + off, buf.count - off)
            }
            if n < 0 {
                if errno == EINTR { continue }
                throw JournalError("cannot write \(path): \(String(cString: strerror(errno)))")
            }
            off += n
        }
    }

    /// A small file beside the journal replaced whole: a temporary file, then renamed over it.
    static func replaceFile(_ path: String, with text: String) throws(JournalError) {
        try makeDirectory(for: path)
        let temp = path + ".new"
        let fd = open(temp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw JournalError("cannot write \(temp): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        try writeAll(fd, text, path: temp)
        guard rename(temp, path) == 0 else {
            throw JournalError("cannot rename \(temp): \(String(cString: strerror(errno)))")
        }
    }

    /// The lines of a small file beside the journal; nil when there is none.
    static func readLines(_ path: String) throws(JournalError) -> [Substring]? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        guard let data = try? Data(contentsOf: URL(fileURLWithPath: path)) else {
            throw JournalError("cannot be read: \(String(cString: strerror(errno)))")
        }
        return String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: true)
    }

    /// The directory `path` goes in, made private to the user if missing.
    static func makeDirectory(for path: String) throws(JournalError) {
        let dir = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? ""
        guard !dir.isEmpty else { return }
        do {
            try FileManager.default.createDirectory(
                atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw JournalError("cannot create \(dir): \(error)")
        }
    }

    private func rewrite() throws {
        try Self.makeDirectory(for: path)
        var text = "audiod-journal 1 \(cookie)\n"
        for k in entries.keys.sorted() { if let e = entries[k] { text += Self.line(e) } }
        for (k, l) in leaks.sorted(by: { $0.key < $1.key }) { text += Self.line(leak: k, l) }
        for (k, u) in unsaved.sorted(by: { $0.key < $1.key }) { text += Self.line(unsaved: k, u) }
        let temp = path + ".new"
        let t = open(temp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard t >= 0 else { throw JournalError("cannot write \(temp): \(String(cString: strerror(errno)))") }
        if fd >= 0 { Glibc.close(fd) }
        fd = t
        try append(text)
        guard rename(temp, path) == 0 else {
            Glibc.close(fd)
            fd = -1
            throw JournalError("cannot rename \(temp): \(String(cString: strerror(errno)))")
        }
        // The descriptor now writes the renamed file: appends go on where the rewrite ended.
        exists = true
        lines = entries.count + leaks.count + unsaved.count
    }

    // MARK: Lines

    private static func key(_ e: Journal.Entry) -> UInt64 { UInt64(e.index) << 1 | (e.record ? 1 : 0) }

    private static func line(_ e: Journal.Entry) -> String {
        "+ \(e.record ? "r" : "p") \(e.index) \(e.unmute ? 1 : 0) \(volume(e.appliedVolume)) \(volume(e.restoreVolume)) "
            + "\(e.restoreKey.map(encode) ?? "-") \(encode(e.applicationName))"
            + (e.earlierAppliedVolume != nil || e.olderAppliedVolume != nil ? " " + volume(e.earlierAppliedVolume) : "")
            + (e.olderAppliedVolume.map { " " + volume($0) } ?? "") + "\n"
    }

    private static func line(leak key: String, _ l: Journal.Leak) -> String {
        var line = "L \(encode(key)) \(l.unmute ? 1 : 0) \(volume(l.appliedVolume)) \(volume(l.restoreVolume))"
        let others = !l.otherVolumes.isEmpty
        if l.userMuted != nil || l.existedBefore != nil || others {
            line += " " + (l.userMuted.map { $0 ? "1" : "0" } ?? "-")
        }
        if l.existedBefore != nil || others { line += " " + (l.existedBefore.map(String.init) ?? "-") }
        if others { line += " " + volumes(l.otherVolumes) }
        return line + "\n"
    }

    private static func line(unsaved key: String, _ u: Journal.Unsaved) -> String {
        let l = u.leak
        return "U \(encode(key)) \(l.unmute ? 1 : 0) \(volume(l.appliedVolume)) \(volume(l.restoreVolume)) "
            + "\(l.userMuted.map { $0 ? "1" : "0" } ?? "-") \(u.at)"
            + (l.otherVolumes.isEmpty ? "" : " " + volumes(l.otherVolumes)) + "\n"
    }

    private static func volume(_ v: [UInt32]?) -> String {
        guard let v, !v.isEmpty else { return "-" }
        return v.map(String.init).joined(separator: ",")
    }

    /// Several volumes in one field: `a,b;c,d`.
    private static func volumes(_ list: [[UInt32]]) -> String { list.map { volume($0) }.joined(separator: ";") }

    /// Each put back to a user volume of `width` channels: a list without one is damaged.
    private static func parseVolumes(_ s: Substring, width: Int?) throws -> [[UInt32]] {
        let list = try s.split(separator: ";", omittingEmptySubsequences: false).map { v in
            guard let parsed = try parseVolume(v), parsed.count == width else {
                throw JournalError("a list of other policy volumes does not match the user's volume")
            }
            return parsed
        }
        guard !list.isEmpty else { throw JournalError("a list of other policy volumes is empty") }
        return list
    }

    private static func parseVolume(_ s: Substring) throws -> [UInt32]? {
        if s == "-" { return nil }
        let parts = s.split(separator: ",").map { UInt32($0) }
        guard !parts.isEmpty, parts.allSatisfy({ $0 != nil }) else {
            throw JournalError("a volume is not a list of numbers")
        }
        return parts.compactMap { $0 }
    }

    /// Percent-encodes what would break a line into fields: `%`, spaces, control characters; `-` alone stands for
    /// "none", so a text that is exactly `-` is encoded too.
    static func encode(_ s: String) -> String {
        if s == "-" { return "%2D" }
        var bytes: [UInt8] = []
        for b in s.utf8 {
            if b == UInt8(ascii: "%") || b <= 0x20 || b == 0x7F {
                let hex = Array("0123456789ABCDEF".utf8)
                bytes += [UInt8(ascii: "%"), hex[Int(b >> 4)], hex[Int(b & 0xF)]]
            } else {
                bytes.append(b)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    static func decode(_ s: Substring) throws -> String {
        var bytes: [UInt8] = []
        var it = Array(s.utf8)[...]
        while let b = it.popFirst() {
            if b == UInt8(ascii: "%") {
                guard it.count >= 2, let v = UInt8(String(decoding: it.prefix(2), as: UTF8.self), radix: 16) else {
                    throw JournalError("a text field has a broken %-escape")
                }
                bytes.append(v)
                it = it.dropFirst(2)
            } else {
                bytes.append(b)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The journal a log describes: its lines applied in order.
    static func replay(_ text: String) throws(JournalError) -> Journal {
        do {
            return try replayLines(text)
        } catch let e as JournalError {
            throw e
        } catch {
            throw JournalError("unreadable")
        }
    }

    private static func replayLines(_ text: String) throws -> Journal {
        var j = Journal()
        var entries: [UInt64: Journal.Entry] = [:]
        var order: [UInt64] = []
        for (n, raw) in text.split(separator: "\n", omittingEmptySubsequences: true).enumerated() {
            let f = raw.split(separator: " ", omittingEmptySubsequences: false)
            // The line's number and what is wrong with it, never its bytes: a damaged file may hold anything.
            func fail() -> JournalError { JournalError("line \(n + 1) is not a journal line", line: n + 1) }
            guard let kind = f.first else { continue }
            if n == 0 {
                guard kind == "audiod-journal", f.count == 3, f[1] == "1", let cookie = UInt32(f[2]) else {
                    throw fail()
                }
                j.serverCookie = cookie
                continue
            }
            do {
                switch kind {
                case "+":
                    // The ninth and tenth fields (earlier applied volumes, while their replacements are in flight)
                    // were added later: journals without them still read.
                    guard (8...10).contains(f.count), f[1] == "p" || f[1] == "r", let index = UInt32(f[2]),
                        f[3] == "0" || f[3] == "1"
                    else {
                        throw fail()
                    }
                    let e = Journal.Entry(
                        record: f[1] == "r", index: index, applicationName: try decode(f[7]),
                        restoreKey: f[6] == "-" ? nil : try decode(f[6]), unmute: f[3] == "1",
                        appliedVolume: try parseVolume(f[4]), restoreVolume: try parseVolume(f[5]),
                        earlierAppliedVolume: f.count >= 9 ? try parseVolume(f[8]) : nil,
                        olderAppliedVolume: f.count == 10 ? try parseVolume(f[9]) : nil)
                    let k = key(e)
                    if entries[k] == nil { order.append(k) }
                    entries[k] = e
                case "-":
                    guard f.count == 3, f[1] == "p" || f[1] == "r", let index = UInt32(f[2]) else { throw fail() }
                    let k = UInt64(index) << 1 | (f[1] == "r" ? 1 : 0)
                    if entries.removeValue(forKey: k) != nil { order.removeAll { $0 == k } }
                case "L":
                    // The sixth field (the user's mute under a duck), the seventh (the highest index seen) and the
                    // eighth (other policy volumes) were added later: journals without them still read.
                    guard (5...8).contains(f.count), f[2] == "0" || f[2] == "1",
                        f.count < 6 || ["0", "1", "-"].contains(f[5])
                    else { throw fail() }
                    var before: UInt32?
                    // "-" for the index only where the eighth field needs the seventh.
                    if f.count == 7 || (f.count == 8 && f[6] != "-") {
                        guard let b = UInt32(f[6]) else { throw fail() }
                        before = b
                    }
                    let restore = try parseVolume(f[4])
                    j.leaks[try decode(f[1])] = Journal.Leak(
                        unmute: f[2] == "1", appliedVolume: try parseVolume(f[3]), restoreVolume: restore,
                        userMuted: f.count >= 6 && f[5] != "-" ? f[5] == "1" : nil, existedBefore: before,
                        otherVolumes: f.count == 8 ? try parseVolumes(f[7], width: restore?.count) : [])
                case "l":
                    guard f.count == 2 else { throw fail() }
                    j.leaks[try decode(f[1])] = nil
                case "U":
                    // The eighth field (other policy volumes) was added later.
                    guard f.count == 7 || f.count == 8, f[2] == "0" || f[2] == "1", ["0", "1", "-"].contains(f[5]),
                        let at = UInt64(f[6])
                    else { throw fail() }
                    j.unsaved[try decode(f[1])] = Journal.Unsaved(
                        leak: Journal.Leak(
                            unmute: f[2] == "1", appliedVolume: try parseVolume(f[3]),
                            restoreVolume: try parseVolume(f[4]), userMuted: f[5] == "-" ? nil : f[5] == "1",
                            otherVolumes: f.count == 8
                                ? try parseVolumes(f[7], width: f[4] == "-" ? nil : f[4].split(separator: ",").count)
                                : []),
                        at: at)
                case "u":
                    guard f.count == 2 else { throw fail() }
                    j.unsaved[try decode(f[1])] = nil
                default:
                    throw fail()
                }
            } catch let e as JournalError where e.line == nil {
                throw JournalError("line \(n + 1): \(e.description)", line: n + 1)
            }
        }
        j.entries = order.compactMap { entries[$0] }
        return j
    }
}

/// What is wrong with a journal (or writing one), in words that never quote the file's content.
public struct JournalError: Error, CustomStringConvertible {
    public let description: String
    /// The line of the journal that could not be read, when reading failed.
    public let line: Int?
    init(_ d: String, line: Int? = nil) {
        description = d
        self.line = line
    }
}

/// The key a restore database files a stream under: its media role, else its application id, else its
/// application name — the order module-stream-restore and WirePlumber's restore-stream both use.
enum RestoreKey {
    /// The key WirePlumber itself files the stream under (its `state-stream.lua`, which knows nothing of
    /// module-stream-restore's tag): where it saves a stream's PipeWire factor.
    static func wirePlumber(_ properties: [String: String], record: Bool) -> String? {
        var p = properties
        p["module-stream-restore.id"] = nil
        return of(p, record: record)
    }

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
    /// One leak for an entry that an earlier leak of the same entry may still be in: the entry keeps whichever of
    /// its streams the server saved last, so a mute and a duck of two siblings may both be there to undo.
    func merged(with earlier: Journal.Leak?) -> Journal.Leak {
        guard let earlier else { return self }
        var m = self
        m.unmute = unmute || earlier.unmute
        // A stream may carry the merged value if it may carry either.
        m.existedBefore = existedBefore.flatMap { a in earlier.existedBefore.map { min(a, $0) } }
        if appliedVolume == nil {
            m.appliedVolume = earlier.appliedVolume
            m.restoreVolume = earlier.restoreVolume
            m.userMuted = earlier.userMuted
            m.otherVolumes = []
        }
        // The first volume is put back to the first leak's user volume; the others are kept beside it, so that a
        // stream that starts with any of them is corrected.
        // Only volumes of the user's volume's width can be put back (and read back: the journal refuses others).
        let width = m.restoreVolume?.count
        let candidates = m.otherVolumes + earlier.policyVolumes
        m.otherVolumes = []
        for v in candidates where v.count == width && v != m.appliedVolume && !m.otherVolumes.contains(v) {
            m.otherVolumes.append(v)
        }
        // The newer ones first: what the earlier leaks add is dropped first.
        if m.otherVolumes.count > Self.otherVolumesLimit {
            m.otherVolumes = Array(m.otherVolumes.prefix(Self.otherVolumesLimit))
        }
        return m
    }

    /// What a stream leaves in its restore-database entry if it ends (or is saved) with this change on it.
    init(_ change: AppliedChange) {
        self.init(
            unmute: change.unmute, appliedVolume: change.appliedVolume?.channels,
            restoreVolume: change.restoreVolume?.channels)
    }
}
