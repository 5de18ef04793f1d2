import Dispatch
import FoundationEssentials
import Glibc
import Synchronization

/// A `DBusLoop` of its own for clients (the Swift client library, `audioctl`), which have no sound-server loop to
/// share: one thread in `poll(2)`, fd watches, timers, and work queued from other threads through a pipe.
public final class PollLoop: DBusLoop, @unchecked Sendable {
    // @unchecked: `watches`, `timers` and `local` are touched only on the loop thread; `queue` is a Mutex.

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
    private var local: [() -> Void] = []
    private let queue = Mutex<[@Sendable () -> Void]>([])
    private let running = Mutex(false)
    private let onLoop = Mutex<pthread_t?>(nil)
    private let finished = DispatchSemaphore(value: 0)
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
    }

    deinit {
        close(wakeRead)
        close(wakeWrite)
    }

    public func start() {
        running.withLock { $0 = true }
        startThread { [self] in run() }
    }

    public func stop() {
        guard running.withLock({ r in defer { r = false }; return r }) else { return }
        wake()
        if !isOnLoop { finished.wait() }
    }

    public var isOnLoop: Bool { onLoop.withLock { t in t.map { pthread_equal($0, pthread_self()) != 0 } ?? false } }

    /// Runs `work` on the loop thread, soon.
    public func execute(_ work: @escaping @Sendable () -> Void) {
        queue.withLock { $0.append(work) }
        wake()
    }

    /// Runs `work` on the loop thread and waits for its result (never from the loop thread).
    public func sync<T: Sendable>(_ work: @escaping @Sendable () -> T) -> T {
        precondition(!isOnLoop, "PollLoop.sync called on the loop thread would deadlock")
        let box = Mutex<T?>(nil)
        let done = DispatchSemaphore(value: 0)
        execute {
            let r = work()
            box.withLock { $0 = r }
            done.signal()
        }
        done.wait()
        guard let result = box.withLock({ $0 }) else { preconditionFailure("PollLoop.sync: no result") }
        return result
    }

    private func wake() {
        var b: UInt8 = 1
        _ = write(wakeWrite, &b, 1)
    }

    private static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    private func run() {
        onLoop.withLock { $0 = pthread_self() }
        while running.withLock({ $0 }) {
            drain()
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
        drain()
        onLoop.withLock { $0 = nil }
        finished.signal()
    }

    private func drain() {
        while true {
            if !local.isEmpty {
                let l = local
                local.removeAll()
                for w in l { w() }
                continue
            }
            let work = queue.withLock { q -> [@Sendable () -> Void] in
                defer { q.removeAll() }
                return q
            }
            if work.isEmpty { return }
            for w in work { w() }
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
        local.append(work)
        // Even on the loop thread: the loop may be about to block in poll.
        wake()
    }
}

/// A detached thread running `body` (Foundation's Thread would pull libFoundation and ICU into the daemon: ~6 MB
/// of resident size for one class).
func startThread(_ body: @escaping @Sendable () -> Void) {
    final class Body { let run: @Sendable () -> Void; init(_ r: @escaping @Sendable () -> Void) { run = r } }
    let arg = Unmanaged.passRetained(Body(body)).toOpaque()
    var thread = pthread_t()
    let rc = pthread_create(&thread, nil, { arg in
        guard let arg else { return nil }
        Unmanaged<Body>.fromOpaque(arg).takeRetainedValue().run()
        return nil
    }, arg)
    // Out of threads at start-up is not something audiod can work around (Foundation's Thread traps too).
    precondition(rc == 0, "pthread_create failed: \(rc)")
    pthread_detach(thread)
}
