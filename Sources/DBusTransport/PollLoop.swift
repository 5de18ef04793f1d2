import Dispatch
import FoundationEssentials
import Glibc
import LoopThread
import Synchronization

/// A `DBusLoop` of its own for clients (the Swift client library, `audioctl`), which have no sound-server loop to
/// share: one thread in `poll(2)`, fd watches, timers, and work queued from other threads through a pipe.
public final class PollLoop: DBusLoop, @unchecked Sendable {
    // @unchecked: `watches` and `timers` are touched only on the loop thread.

    final class Watch: DBusLoopWatch {
        let fd: Int32
        var readable: Bool
        var writable: Bool
        var cancelled = false
        let handler: (Bool, Bool, Bool) -> Void
        init(fd: Int32, readable: Bool, writable: Bool, handler: @escaping (Bool, Bool, Bool) -> Void) {
            self.fd = fd
            self.readable = readable
            self.writable = writable
            self.handler = handler
        }
        func update(readable: Bool, writable: Bool) {
            self.readable = readable
            self.writable = writable
        }
        func cancel() { cancelled = true }
    }

    final class Timer: DBusLoopTimer {
        let deadline: UInt64
        var cancelled = false
        let handler: () -> Void
        init(deadline: UInt64, handler: @escaping () -> Void) {
            self.deadline = deadline
            self.handler = handler
        }
        func cancel() { cancelled = true }
    }

    private var watches: [Watch] = []
    private var timers: [Timer] = []
    private let thread: LoopThread
    private let wakeRead: Int32
    private let wakeWrite: Int32

    public init() throws(DBusError) {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw .failed("pipe: \(String(cString: strerror(errno)))") }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        wakeRead = fds[0]
        wakeWrite = fds[1]
        let w = fds[1]
        thread = LoopThread(name: "PollLoop") {
            var b: UInt8 = 1
            _ = write(w, &b, 1)
        }
    }

    deinit {
        close(wakeRead)
        close(wakeWrite)
    }

    public func start() {
        thread.start { [self] in run() }
    }

    public func stop() { thread.stop() }

    public var isOnLoop: Bool { thread.isOnLoop }

    /// `value`, to hand to other threads that may only give it back to this loop: opened off the loop thread, it
    /// traps.
    public func bind<Value>(_ value: Value, file: StaticString = #fileID, line: UInt = #line) -> LoopBound<Value> {
        LoopBound(value, on: thread, file: file, line: line)
    }

    /// Runs `work` on the loop thread, soon.
    public func execute(_ work: @escaping @Sendable () -> Void) { thread.execute(work) }

    /// Runs `work` on the loop thread and waits for its result (never from the loop thread).
    public func sync<T: Sendable>(_ work: @escaping @Sendable () -> T) -> T { thread.sync(work) }

    private static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    private func run() {
        while thread.isRunning {
            thread.drain()
            watches.removeAll { $0.cancelled }
            timers.removeAll { $0.cancelled }
            var fds = [pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
            let active = watches.filter { $0.readable || $0.writable }
            for w in active {
                var ev: Int16 = 0
                if w.readable { ev |= Int16(POLLIN) }
                if w.writable { ev |= Int16(POLLOUT) }
                fds.append(pollfd(fd: w.fd, events: ev, revents: 0))
            }
            var timeout: Int32 = -1
            if let next = timers.map(\.deadline).min() {
                let n = Self.now()
                timeout = next <= n ? 0 : Int32(min((next - n + 999_999) / 1_000_000, UInt64(Int32.max)))
            }
            let r = poll(&fds, nfds_t(fds.count), timeout)
            if r < 0, errno != EINTR { break }
            if fds[0].revents != 0 {
                var buf = [UInt8](repeating: 0, count: 64)
                while read(wakeRead, &buf, buf.count) > 0 {}
            }
            for (i, w) in active.enumerated() where !w.cancelled {
                let re = fds[i + 1].revents
                guard re != 0 else { continue }
                w.handler(re & Int16(POLLIN) != 0, re & Int16(POLLOUT) != 0, re & Int16(POLLHUP | POLLERR) != 0)
            }
            let n = Self.now()
            let due = timers.filter { !$0.cancelled && $0.deadline <= n }
            timers.removeAll { $0.deadline <= n }
            for t in due where !t.cancelled { t.handler() }
        }
    }

    // MARK: DBusLoop

    public func dbusWatch(fd: Int32, readable: Bool, writable: Bool, _ handler: @escaping (Bool, Bool, Bool) -> Void)
        -> any DBusLoopWatch
    {
        let w = Watch(fd: fd, readable: readable, writable: writable, handler: handler)
        watches.append(w)
        return w
    }

    public func dbusTimer(afterNanoseconds ns: UInt64, _ handler: @escaping () -> Void) -> (any DBusLoopTimer)? {
        let t = Timer(deadline: Self.now() + ns, handler: handler)
        timers.append(t)
        return t
    }

    public func dbusSoon(_ work: @escaping () -> Void) {
        thread.soon(work)  // run() drains before it polls
    }
}
