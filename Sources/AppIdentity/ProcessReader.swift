import Glibc

/// The one reader of what identity resolution needs from `/proc`: a process's cgroup, environment and
/// executable. Small reads, bounded; a process that exits mid-read, or an environment that cannot be read (another
/// user's process), leaves the field empty and a note for the debug log.
public enum ProcessReader {
    /// What `/proc/PID` says of the process, for `IdentityResolver`. `chain` is the pid and its ancestors.
    public static func facts(
        pid: UInt32, chain: [UInt32], applicationID: String?, flatpakID: String?
    ) -> (facts: ProcessFacts, notes: [String]) {
        var notes: [String] = []
        var f = ProcessFacts(pid: pid, chain: chain, flatpakID: flatpakID, applicationID: applicationID)
        if let cgroup = cgroup(pid) {
            f.scopeID = LauncherIDs.desktopID(cgroup: cgroup)
        } else {
            notes.append("cgroup of \(pid) unreadable")
        }
        // Only the user's own processes: another user's environment is not audiod's to read (and not readable).
        if let env = read("/proc/\(pid)/environ", limit: 128 * 1024) {
            let e = LauncherIDs.environment(env)
            f.launchedID = LauncherIDs.launchedDesktopID(environment: e, chain: chain)?.id
            f.steamGame = LauncherIDs.steamGame(environment: e)
            if e["GIO_LAUNCHED_DESKTOP_FILE"] != nil, f.launchedID == nil {
                notes.append("GIO_LAUNCHED_DESKTOP_FILE of \(pid) not valid for it (its pid is no live ancestor)")
            }
        } else {
            notes.append("environment of \(pid) unreadable")
        }
        f.program = executableName(pid) ?? argv0(pid)
        return (f, notes)
    }

    /// The desktop id of the process's launcher scope or service, nil when it has none or its cgroup cannot be read.
    public static func scopeID(_ pid: UInt32) -> String? { cgroup(pid).flatMap(LauncherIDs.desktopID(cgroup:)) }

    private static func cgroup(_ pid: UInt32) -> String? {
        read("/proc/\(pid)/cgroup", limit: 4096).map { String(decoding: $0, as: UTF8.self) }
    }

    /// The file name of a process's executable (`/proc/PID/exe`), nil when it cannot be read.
    public static func executableName(_ pid: UInt32) -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/\(pid)/exe", &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        var path = String(decoding: buffer.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if path.hasSuffix(" (deleted)") { path.removeLast(" (deleted)".count) }
        return path.split(separator: "/").last.map(String.init)
    }

    static func argv0(_ pid: UInt32) -> String? {
        guard let cmd = read("/proc/\(pid)/cmdline", limit: 4096), let first = cmd.split(separator: 0).first else {
            return nil
        }
        return String(decoding: first, as: UTF8.self).split(separator: "/").last.map(String.init)
    }

    static func read(_ path: String, limit: Int) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while out.count < limit {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, min($0.count, limit - out.count)) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { break }
            out += buffer[..<n]
        }
        return out.isEmpty ? nil : out
    }
}
