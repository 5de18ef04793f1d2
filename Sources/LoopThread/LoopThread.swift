// What audiod's two event loops share: PulseBackend's MainLoop (pa_mainloop, in the daemon) and DBusTransport's
// PollLoop (poll(2), in clients). Each brings its own way to wait and to be woken; this is the thread, the work
// handed in from other threads and from the loop itself, and the start/stop handshake.

import Dispatch
import Glibc
import Synchronization

public final class LoopThread: @unchecked Sendable {
    // @unchecked: `local` is touched only on the loop thread; the rest are Mutexes or thread-safe.
    private let queue = Mutex<[@Sendable () -> Void]>([])
    /// The thread has ended: work handed in now runs at once on the caller's thread (nothing else runs the loop's
    /// state any more), so that a caller waiting for it is never stranded.
    private let ended = Mutex(false)
    private var local: [() -> Void] = []
    private let running = Mutex(false)
    private let thread = Mutex<pthread_t?>(nil)
    private let finished = DispatchSemaphore(value: 0)
    private let wake: @Sendable () -> Void
    private let name: String

    /// `wake` makes the loop's wait return (it writes the loop's wake-up fd); `name` appears in messages.
    public init(name: String, wake: @escaping @Sendable () -> Void) {
        self.name = name
        self.wake = wake
    }

    /// Until `stop()`: the loop body checks it between waits.
    public var isRunning: Bool { running.withLock { $0 } }

    /// Whether the caller runs on the loop thread.
    public var isOnLoop: Bool { thread.withLock { t in t.map { pthread_equal($0, pthread_self()) != 0 } ?? false } }

    /// Debug builds trap when a loop-confined entry point is called from another thread while the loop runs: the
    /// state behind it has no lock, and a race there shows up much later as a wrong decision, not as a crash.
    public func assertOnLoop(_ function: StaticString, file: StaticString, line: UInt) {
        assert(isOnLoop || !isRunning, "\(name): \(function) called off the loop thread", file: file, line: line)
    }

    /// Starts the thread. `body` loops while `isRunning`, calling `drain()` between waits; queued work left when it
    /// returns still runs.
    public func start(_ body: @escaping @Sendable () -> Void) {
        running.withLock { $0 = true }
        ended.withLock { $0 = false }
        startThread { [self] in
            thread.withLock { $0 = pthread_self() }
            nameThisThread(name)
            body()
            // Work queued up to the moment the thread is marked ended still runs here; after it, in `execute`.
            while true {
                drain()
                let done = ended.withLock { e in
                    e = queue.withLock { $0.isEmpty }
                    return e
                }
                if done { break }
            }
            thread.withLock { $0 = nil }
            finished.signal()
        }
    }

    /// Stops the loop after the queued work has run, and waits for the thread to end (unless called on it).
    public func stop() {
        guard
            running.withLock({ r in
                defer { r = false }
                return r
            })
        else { return }
        wake()
        if !isOnLoop { finished.wait() }
    }

    /// Runs `work` on the loop thread, soon. From the loop thread itself it still queues, so that the caller's
    /// stack unwinds first.
    public func execute(_ work: @escaping @Sendable () -> Void) {
        let late = ended.withLock { e in
            if !e { queue.withLock { $0.append(work) } }
            return e
        }
        if late { return work() }
        wake()
    }

    /// Runs `work` on the loop thread after the current callback returns. Loop thread only (the closure need not
    /// be Sendable: it never leaves the thread).
    ///
    /// No wake-up: it is called on the loop thread, whose body drains before every wait (see `start`), so the work
    /// runs before the loop can block. A wake-up here cost every D-Bus call an eventfd write, a read and one more
    /// turn of the loop.
    public func soon(_ work: @escaping () -> Void) {
        assertOnLoop(#function, file: #fileID, line: #line)
        local.append(work)
    }

    /// Runs `work` on the loop thread and waits for its result. Never call it from the loop thread.
    public func sync<T: Sendable>(_ work: @escaping @Sendable () -> T) -> T {
        precondition(!isOnLoop, "\(name).sync called on the loop thread would deadlock")
        let box = Mutex<T?>(nil)
        let done = DispatchSemaphore(value: 0)
        execute {
            let r = work()
            box.withLock { $0 = r }
            done.signal()
        }
        done.wait()
        // The work ran and stored its result before signalling.
        guard let result = box.withLock({ $0 }) else { preconditionFailure("\(name).sync: no result") }
        return result
    }

    /// Runs everything queued, including what that work queues. Loop thread only.
    public func drain() {
        while true {
            if !local.isEmpty {
                let work = local
                local.removeAll(keepingCapacity: true)
                for w in work { w() }
                continue
            }
            let work = queue.withLock { q -> [@Sendable () -> Void] in
                defer { q.removeAll(keepingCapacity: true) }
                return q
            }
            if work.isEmpty { return }
            for w in work { w() }
        }
    }
}

/// Names the calling thread for `ps -L`, `top -H` and /proc/PID/task/*/comm, where the thread whose scheduling
/// priority matters is found (the kernel keeps 15 bytes). Through /proc/thread-self/comm: Swift's Glibc exports
/// neither `pthread_setname_np` nor (variadic) `prctl`.
private func nameThisThread(_ name: String) {
    let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
    guard fd >= 0 else { return }
    let bytes = Array(name.utf8.prefix(15))
    _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    close(fd)
}

/// A detached thread running `body` (Foundation's Thread would pull libFoundation and ICU into the daemon: ~6 MB
/// of resident size for one class).
private func startThread(_ body: @escaping @Sendable () -> Void) {
    final class Body {
        let run: @Sendable () -> Void
        init(_ r: @escaping @Sendable () -> Void) { run = r }
    }
    let arg = Unmanaged.passRetained(Body(body)).toOpaque()
    var thread = pthread_t()
    let rc = pthread_create(
        &thread, nil,
        { arg in
            guard let arg else { return nil }
            Unmanaged<Body>.fromOpaque(arg).takeRetainedValue().run()
            return nil
        }, arg)
    // Out of threads at start-up is not something audiod can work around (Foundation's Thread traps too).
    precondition(rc == 0, "pthread_create failed: \(rc)")
    pthread_detach(thread)
}
