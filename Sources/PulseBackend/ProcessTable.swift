import CPulse
import Dispatch
import FoundationEssentials
import Glibc

/// Reads the process tree from `/proc`: which process plays a stream, and whose child it is (API.md, "Stream
/// ownership": a session owns the streams of its pid and of that pid's descendants).
public enum ProcessTable {
    /// `pid`, its parent, grandparent, … up to (not including) pid 1's parent 0. Empty when `pid` does not exist.
    /// Stops after 64 steps, in case /proc changes under it.
    public static func chain(_ pid: UInt32) -> [UInt32] {
        var out: [UInt32] = []
        var p = pid
        while p > 0, out.count < 64, !out.contains(p) {
            guard let parent = parent(of: p) else { break }
            out.append(p)
            p = parent
        }
        return out
    }

    /// The parent pid from `/proc/<pid>/stat`, nil when the process is gone.
    public static func parent(of pid: UInt32) -> UInt32? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return nil }
        // "pid (comm) state ppid …": comm may hold spaces and parentheses, so read after the last ')'.
        guard let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count >= 2, let ppid = UInt32(fields[1]) else { return nil }
        return ppid
    }

    /// The real user id of a process (`Uid:` in `/proc/<pid>/status`), nil when it is gone.
    public static func owner(of pid: UInt32) -> uid_t? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("Uid:") {
            let parts = line.split(whereSeparator: { $0 == "\t" || $0 == " " })
            if parts.count >= 2, let uid = uid_t(parts[1]) { return uid }
        }
        return nil
    }
}

/// Watches a process for its exit with a pidfd on the loop: the handler runs once, on the loop thread, as soon as
/// the process exits (or at once if it is already gone). Dropping the watch stops it.
public final class ProcessExitWatch {
    private var watch: IOWatch?
    private var fd: Int32

    public init(pid: UInt32, loop: MainLoop, _ handler: @escaping () -> Void) {
        fd = pid <= UInt32(Int32.max) ? pidfd_open(pid_t(pid), 0) : -1
        guard fd >= 0 else {
            // No such process (or no pidfd support): it counts as gone.
            loop.soon(handler)
            return
        }
        watch = loop.watch(fd: fd, events: .input) { [weak self] _ in
            self?.stop()
            handler()
        }
    }

    private func stop() {
        watch?.cancel()
        watch = nil
        if fd >= 0 {
            close(fd)
            fd = -1
        }
    }

    deinit { stop() }
}
