import Dispatch
import FoundationEssentials
import Glibc

/// Reads the process tree from `/proc`: which process plays a stream, and whose child it is (docs/API.md, "Stream
/// ownership": a session owns the streams of its pid and of that pid's descendants).
public enum ProcessTable {
    /// `pid`, its parent, grandparent, … up to (not including) pid 1's parent 0. Empty when `pid` does not exist.
    /// Stops after 64 steps, in case /proc changes under it.
    public static func chain(_ pid: UInt32) -> [UInt32] { chainAndStart(pid).chain }

    /// The chain, and the start time of `pid` itself (nil when it is gone), read in the same walk.
    package static func chainAndStart(_ pid: UInt32) -> (chain: [UInt32], start: UInt64?) {
        var out: [UInt32] = []
        var start: UInt64?
        var p = pid
        while p > 0, out.count < 64, !out.contains(p) {
            guard let s = stat(p) else { break }
            if p == pid { start = s.start }
            out.append(p)
            p = s.parent
        }
        return (out, start)
    }

    /// The parent pid from `/proc/<pid>/stat`, nil when the process is gone.
    public static func parent(of pid: UInt32) -> UInt32? { stat(pid)?.parent }

    /// The parent and the start time (in clock ticks since boot: with the pid, it names one process for good) from
    /// `/proc/<pid>/stat`.
    package static func stat(_ pid: UInt32) -> (parent: UInt32, start: UInt64)? {
        guard let bytes = read("/proc/\(pid)/stat") else { return nil }
        // "pid (comm) state ppid …": comm may hold spaces and parentheses, so read after the last ')'.
        guard let close = bytes.lastIndex(of: UInt8(ascii: ")")) else { return nil }
        let fields = bytes[(close + 1)...].split(separator: UInt8(ascii: " "))
        // state, ppid, …; starttime is field 22 of the line, the 20th after the command.
        guard fields.count >= 20, let ppid = number(fields[1]), let start = number(fields[19]) else { return nil }
        return (UInt32(truncatingIfNeeded: ppid), start)
    }

    /// The real user id of a process (`Uid:` in `/proc/<pid>/status`), nil when it is gone.
    public static func owner(of pid: UInt32) -> uid_t? {
        statusField(pid, "Uid:").flatMap { number($0.first) }.map { uid_t(truncatingIfNeeded: $0) }
    }

    /// The numbers of a `/proc/<pid>/status` line (`Uid:\t1000\t1000…`), nil when the process or line is missing.
    static func statusField(_ pid: UInt32, _ name: String) -> [ArraySlice<UInt8>]? {
        guard let bytes = read("/proc/\(pid)/status") else { return nil }
        let key = Array(name.utf8)
        for line in bytes.split(separator: UInt8(ascii: "\n")) where line.starts(with: key) {
            return line.dropFirst(key.count).split { $0 == UInt8(ascii: "\t") || $0 == UInt8(ascii: " ") }
        }
        return nil
    }

    static func number(_ digits: ArraySlice<UInt8>?) -> UInt64? {
        guard let digits, !digits.isEmpty else { return nil }
        var n: UInt64 = 0
        for d in digits {
            guard d >= 48, d <= 57 else { return nil }
            n = n &* 10 &+ UInt64(d - 48)
        }
        return n
    }

    /// A small /proc file in one `read(2)`, without Foundation: these reads sit on the path of every new stream.
    /// Never blocks: a file under a process's root (`.flatpak-info`) is the process's to make, and a FIFO there
    /// must not hold the loop. Only a regular file (or a /proc file, which says so too) is read.
    static func read(_ path: String, limit: Int = 4096) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = Glibc.stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        var buffer = [UInt8](repeating: 0, count: limit)
        var total = 0
        while total < limit {
            let n = buffer.withUnsafeMutableBytes { raw -> Int in
                guard let base = raw.baseAddress else { return -1 }
                return Glibc.read(fd, base + total, limit - total)
            }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            total += n
        }
        guard total > 0 else { return nil }
        buffer.removeLast(limit - total)
        return buffer
    }
}

extension ProcessTable {
    /// Whether the host process `pid` plausibly is the one a stream (or bus peer) says plays: it belongs to the
    /// user audiod runs as, and its executable (or, for one whose executable cannot be read, its name) is the
    /// binary the stream names. A sandboxed app reports its pid inside its pid namespace — `2` for most Flatpak
    /// apps, which on the host is kthreadd — so a pid is believed only when the host agrees.
    public static func plausiblyRuns(_ pid: UInt32, binary: String?) -> Bool {
        guard pid > 0, owner(of: pid) == getuid() else { return false }
        guard let binary, !binary.isEmpty else { return true }
        if let exe = ProcessReader.executableName(pid) { return exe == binary }
        guard let comm = read("/proc/\(pid)/comm") else { return false }
        // The kernel keeps 15 bytes of a process's name.
        return trimmed(String(decoding: comm, as: UTF8.self)) == String(decoding: binary.utf8.prefix(15), as: UTF8.self)
    }

    /// The host pid of the process a client reported as `reported`: itself when the host process with that pid
    /// plausibly runs `binary`; else, for a client in a pid namespace of its own, the one process of this user that
    /// has `reported` as its pid inside its namespace and runs `binary` — nil when there is none or more than one.
    public static func hostPid(reported: UInt32, binary: String?) -> UInt32? {
        if plausiblyRuns(reported, binary: binary) { return reported }
        guard let binary, !binary.isEmpty else { return nil }
        let candidates = sandboxed(nsPid: reported, binary: binary)
        return candidates.count == 1 ? candidates[0] : nil
    }

    /// The host pid of the process that the process `viewer` calls `pid` (a sandboxed app names its own pids as
    /// its pid namespace numbers them): `pid` itself when both are in audiod's pid namespace, else the process in
    /// the viewer's namespace whose innermost pid is `pid`.
    public static func hostPid(_ pid: UInt32, seenBy viewer: UInt32) -> UInt32? {
        // Unreadable (another user's process): their pids are taken as audiod's, and the uid check decides.
        guard let theirs = pidNamespace(viewer), theirs != pidNamespace(UInt32(getpid())) else { return pid }
        guard let dir = opendir("/proc") else { return nil }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard let candidate = UInt32(name), pidNamespace(candidate) == theirs,
                innermostPid(candidate) == pid
            else { continue }
            return candidate
        }
        return nil
    }

    static func pidNamespace(_ pid: UInt32) -> String? {
        var buffer = [CChar](repeating: 0, count: 64)
        let n = readlink("/proc/\(pid)/ns/pid", &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        return String(decoding: buffer.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The pid a process has in its own (innermost) pid namespace (`NSpid:` of /proc/PID/status).
    static func innermostPid(_ pid: UInt32) -> UInt32? {
        statusField(pid, "NSpid:").flatMap { number($0.last) }.map { UInt32(truncatingIfNeeded: $0) }
    }

    /// Host pids of this user's processes that have `nsPid` as their pid inside their own (inner) pid namespace
    /// and run `binary`.
    static func sandboxed(nsPid: UInt32, binary: String) -> [UInt32] {
        guard let dir = opendir("/proc") else { return [] }
        defer { closedir(dir) }
        var found: [UInt32] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard let pid = UInt32(name), pid != nsPid, innermostPid(pid) == nsPid, plausiblyRuns(pid, binary: binary)
            else { continue }
            found.append(pid)
        }
        return found
    }

    /// Where a process runs, as far as the kernel says: on the host, or in a sandbox (with its Flatpak app id when
    /// the sandbox's root carries `.flatpak-info`).
    public enum Place: Equatable, Sendable {
        case host
        case sandboxed(appID: String?, why: String)
        /// No such process (it exited).
        case gone
    }

    /// A host process has a single `NSpid` entry (audiod's own pid namespace — audiod runs on the host), the same
    /// root as audiod's, and no `.flatpak-info` at its root.
    public static func place(of pid: UInt32) -> Place {
        guard let ns = statusField(pid, "NSpid:") else { return .gone }
        var why: String?
        if ns.count > 1 {
            why = "in a pid namespace of its own"
        } else {
            switch sameRoot(pid) {
            case true?: break
            case false?: why = "with a root of its own"
            case nil:
                // Another user's process (a system service) keeps its root from us, and is no sandbox of ours; one of
                // ours that does is not believed; one that exited meanwhile is gone.
                guard let uid = owner(of: pid) else { return .gone }
                if uid == getuid() { why = "whose root cannot be read" }
            }
        }
        let app = flatpakApp(of: pid)?.id
        if why == nil, app == nil { return .host }
        return .sandboxed(appID: app, why: why ?? "with .flatpak-info at its root")
    }

    /// Nil when the process's root cannot be read.
    private static func sameRoot(_ pid: UInt32) -> Bool? {
        var theirs = Glibc.stat()
        var mine = Glibc.stat()
        guard fstatat(AT_FDCWD, "/proc/\(pid)/root/", &theirs, 0) == 0 else { return nil }
        guard fstatat(AT_FDCWD, "/proc/self/root/", &mine, 0) == 0 else { return false }
        return theirs.st_dev == mine.st_dev && theirs.st_ino == mine.st_ino
    }

    /// A Flatpak app's id and instance from `.flatpak-info` in the root of a (verified) host process, nil for a
    /// process that is not in a Flatpak sandbox.
    public static func flatpakApp(of pid: UInt32) -> (id: String, instance: String?)? {
        guard let bytes = read("/proc/\(pid)/root/.flatpak-info", limit: 65536) else { return nil }
        let text = String(decoding: bytes, as: UTF8.self)
        var section = ""
        var id: String?
        var instance: String?
        for raw in text.split(separator: "\n") {
            let line = trimmed(raw)
            if line.hasPrefix("[") {
                section = line
                continue
            }
            let parts = line.split(separator: "=", maxSplits: 1).map { trimmed($0) }
            guard parts.count == 2 else { continue }
            if section == "[Application]", parts[0] == "name" { id = parts[1] }
            if section == "[Instance]", parts[0] == "instance-id" { instance = parts[1] }
        }
        return id.map { ($0, instance) }
    }
}

private func trimmed<S: StringProtocol>(_ s: S) -> String {
    String(s.drop { $0.isWhitespace }.reversed().drop { $0.isWhitespace }.reversed())
}

/// Who plays a stream, as far as the server and the kernel can vouch for it (docs/IDENTITY.md).
public struct StreamIdentity: Equatable, Sendable {
    /// A host pid audiod believes: the kernel's (`pipewire.sec.pid`, from the socket's peer credentials), or the
    /// one the client reported when the host process plausibly is the stream's.
    public var pid: UInt32?
    /// When no pid is believed: the Flatpak app and instance, else the client connection.
    public var identity: String?
    /// The Flatpak app id, for app rules (`SetApplicationCategory org.mozilla.firefox`).
    public var flatpakApp: String?

    /// The properties an identity is settled from.
    package static let sourceKeys = [
        "application.process.id", "application.process.binary", "pipewire.sec.pid", "pipewire.access.portal.app_id",
        "pipewire.access.portal.instance_id",
    ]

    /// What the host says of the process behind a stream: the expensive half of `of` (it reads /proc), which does
    /// not depend on the client connection and so can be kept for a burst of streams from one process.
    public struct Host: Equatable, Sendable {
        public var pid: UInt32?
        public var app: String?
        public var instance: String?

        public init(pid: UInt32?, app: String? = nil, instance: String? = nil) {
            self.pid = pid
            self.app = app
            self.instance = instance
        }
    }

    public static func of(_ properties: [String: String], client: UInt32?) -> StreamIdentity {
        of(host(properties), client: client)
    }

    public static func host(_ properties: [String: String]) -> Host {
        var pid: UInt32?
        if let kernel = properties["pipewire.sec.pid"].flatMap({ UInt32($0) }), kernel > 0 {
            pid = kernel
        } else if let reported = properties["application.process.id"].flatMap({ UInt32($0) }) {
            pid = ProcessTable.hostPid(reported: reported, binary: properties["application.process.binary"])
        }
        // pipewire-pulse names a Flatpak client's app itself; otherwise the sandbox's .flatpak-info says, when a
        // verified host pid leads to it.
        var app = properties["pipewire.access.portal.app_id"].flatMap { $0.isEmpty ? nil : $0 }
        var instance = properties["pipewire.access.portal.instance_id"]
        if app == nil, let pid, let info = ProcessTable.flatpakApp(of: pid) {
            app = info.id
            instance = info.instance
        }
        // PulseAudio 16 tells no peer credentials: for a pid no host process vouches for, the Flatpak app is still
        // known when every sandboxed process of this user that has that pid inside its namespace and runs that
        // binary belongs to one app. (Its instance stays unknown: the client connection keeps two apart.)
        // (A pid found that way counted above only when there was exactly one such process.)
        if app == nil, pid == nil, let reported = properties["application.process.id"].flatMap({ UInt32($0) }),
            let binary = properties["application.process.binary"]
        {
            let apps = Set(
                ProcessTable.sandboxed(nsPid: reported, binary: binary).compactMap {
                    ProcessTable.flatpakApp(of: $0)?.id
                })
            if apps.count == 1 { app = apps.first }
        }
        return Host(pid: pid, app: app, instance: instance)
    }

    public static func of(_ host: Host, client: UInt32?) -> StreamIdentity {
        var identity: String?
        if host.pid == nil {
            if let app = host.app {
                identity = "flatpak:\(app)" + (host.instance.map { "/\($0)" } ?? client.map { "/client-\($0)" } ?? "")
            } else if let client {
                identity = "client:\(client)"
            }
        }
        return StreamIdentity(pid: host.pid, identity: identity, flatpakApp: host.app)
    }
}
