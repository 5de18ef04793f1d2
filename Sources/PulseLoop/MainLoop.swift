// The daemon's one loop: a `pa_mainloop` on its own thread, with the fd watches and monotonic timers that the
// sound-server connection, the bus connection and the process watches all run on.
//
// Threading: every object here is confined to the loop thread. Other threads reach it only through
// `MainLoop.execute(_:)` or `sync(_:)`, which queue a closure and wake the loop through an eventfd it watches.
//
// Lifetimes (STYLE.md §5): the loop owns every fd watch, the timers' among them. When the loop thread ends it frees
// every watch still registered, on that thread, before the `pa_mainloop` can be freed; a watch or timer dropped
// later (by a deinit on another thread, at exit) finds itself already ended and touches libpulse no more.

import CPulse
import CSystem
import Dispatch
import Glibc
import LoopThread

/// Why the loop could not be made.
public struct LoopError: Error, Equatable, Sendable, CustomStringConvertible {
    public var call: String
    public var errno: Int32
    public var description: String { "\(call): \(String(cString: strerror(errno)))" }
}

/// One `pa_mainloop` on its own thread: the only thread that touches libpulse (and, later, libdbus).
///
/// Idle, it sleeps in `poll` with no timeout: no wakeups. Work from other threads arrives through `execute(_:)`.
public final class MainLoop: @unchecked Sendable {
    // The pointers below are only used on the loop thread.
    let mainloop: OpaquePointer
    /// What a `pa_context` is created on (PulseBackend's connection). Loop thread only.
    package let api: UnsafeMutablePointer<pa_mainloop_api>
    private let thread: LoopThread
    private let wakeFD: Int32
    /// Every fd watch registered on this loop: the one owner that ends them all before the loop goes.
    package let watches: Watches

    /// Creates the loop (`pa_mainloop_new`); call `start()` to run it.
    public init() throws(LoopError) {
        let fd = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
        guard fd >= 0 else { throw LoopError(call: "eventfd", errno: errno) }
        guard let m = pa_mainloop_new() else {
            close(fd)
            throw LoopError(call: "pa_mainloop_new", errno: ENOMEM)
        }
        wakeFD = fd
        mainloop = m
        api = pa_mainloop_get_api(m)
        watches = Watches(api: api)
        thread = LoopThread(name: "MainLoop") {
            var one: UInt64 = 1
            _ = write(fd, &one, 8)
        }
    }

    deinit {
        // A loop that never ran (or whose thread has ended) has nobody else touching it: end what is left here.
        watches.endAll()
        pa_mainloop_free(mainloop)
        close(wakeFD)
    }

    /// Starts the loop thread (`pa_mainloop_iterate`, blocking, until `stop()`).
    public func start() {
        thread.start { [self] in run() }
    }

    private func run() {
        // Cross-thread work arrives through an eventfd that the loop watches like any other fd. Not
        // pa_mainloop_wakeup: it only writes its pipe while the loop is inside poll, so a wakeup sent between two
        // iterations is lost and the loop sleeps with work queued (seen here as a hang).
        let watch = self.watch(fd: wakeFD) { [self] in
            var value: UInt64 = 0
            _ = read(wakeFD, &value, 8)
            thread.drain()
            runAfterWrites()
        }
        while thread.isRunning {
            thread.drain()
            // Blocks in poll until an fd or a timer wakes it: zero wakeups when idle.
            if pa_mainloop_iterate(mainloop, 1, nil) < 0 { break }
        }
        watch.cancel()
        // Work queued up to now still runs (LoopThread), then every watch and timer left is ended here, on the loop
        // thread: nothing dropped afterwards can reach the pa_mainloop (a timer's deinit on the main thread at exit
        // once called io_free on the freed loop: SIGSEGV after "every stream change undone").
        thread.drain()
        watches.endAll()
    }

    /// Work for after libpulse has written what is queued now. libpulse sends requests from a deferred event on the
    /// next loop iteration, and pa_mainloop dispatches deferred events before any fd watch: running this from the
    /// wake-up fd's watch puts it after that write.
    private var afterWrites: [() -> Void] = []

    /// Runs `work` on the loop thread once the requests queued so far have gone to the sound server. Loop thread
    /// only. This is how audiod mutes first and announces after: a D-Bus signal sent before the mute would delay it.
    public func afterServerWrites(_ work: @escaping () -> Void) {
        afterWrites.append(work)
        if afterWrites.count == 1 { wake() }
    }

    private func runAfterWrites() {
        let work = afterWrites
        afterWrites.removeAll()
        for w in work { w() }
    }

    private func wake() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    /// Whether the caller runs on the loop thread.
    public var isOnLoop: Bool { thread.isOnLoop }

    /// `value`, to hand to other threads that may only give it back to this loop (`execute`): opened off the loop
    /// thread, it traps.
    public func bind<Value>(_ value: Value, file: StaticString = #fileID, line: UInt = #line) -> LoopBound<Value> {
        LoopBound(value, on: thread, file: file, line: line)
    }

    /// Traps in debug builds when called off the loop thread while it runs (`LoopThread.assertOnLoop`).
    public func assertOnLoop(_ function: StaticString = #function, file: StaticString = #fileID, line: UInt = #line) {
        thread.assertOnLoop(function, file: file, line: line)
    }

    /// Runs `work` on the loop thread, soon. From the loop thread itself it still queues,
    /// so that the caller's stack unwinds first.
    public func execute(_ work: @escaping @Sendable () -> Void) { thread.execute(work) }

    /// Runs `work` on the loop thread and waits for its result. Never call it from the loop thread.
    public func sync<T: Sendable>(_ work: @escaping @Sendable () -> T) -> T { thread.sync(work) }

    /// Stops the loop after the queued work has run, and waits for the thread to end.
    public func stop() { thread.stop() }

    /// Watches `fd` for input on the loop (`pa_mainloop_api.io_new`). The handler runs on the loop thread.
    func watch(fd: Int32, _ handler: @escaping () -> Void) -> IOWatch {
        IOWatch(watches, fd: fd, events: .input) { _ in handler() }
    }

    /// Watches `fd` for `events`; the handler gets what happened. Loop thread only.
    public func watch(fd: Int32, events: IOEvents, _ handler: @escaping (IOEvents) -> Void) -> IOWatch {
        IOWatch(watches, fd: fd, events: events, handler: handler)
    }

    /// Runs `work` on the loop thread after the current callback returns. Loop thread only (the closure need not
    /// be Sendable: it never leaves the thread).
    public func soon(_ work: @escaping () -> Void) { thread.soon(work) }

    /// A one-shot timer on the monotonic clock (a `timerfd` watched by the loop, so that wall-clock jumps do not
    /// move it and it outlives any sound-server connection). The handler runs on the loop thread.
    public func timer(afterNanoseconds ns: UInt64, _ handler: @escaping () -> Void) -> LoopTimer? {
        LoopTimer(loop: self, afterNanoseconds: ns, handler: handler)
    }
}

/// What an fd watch waits for / what happened (`pa_io_event_flags_t`).
public struct IOEvents: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let input = IOEvents(rawValue: PA_IO_EVENT_INPUT.rawValue)
    public static let output = IOEvents(rawValue: PA_IO_EVENT_OUTPUT.rawValue)
    public static let hangup = IOEvents(rawValue: PA_IO_EVENT_HANGUP.rawValue)
    public static let error = IOEvents(rawValue: PA_IO_EVENT_ERROR.rawValue)
}

/// The fd watches of one loop. A registered watch is held here (libpulse's io event points at it), so it lives
/// while the C side may call it; `endAll()` frees every one on the loop thread as the loop ends, and after that no
/// new watch is registered. Loop thread only (after the loop has ended, nothing here touches libpulse).
package final class Watches {
    fileprivate let api: UnsafeMutablePointer<pa_mainloop_api>
    private var live: [ObjectIdentifier: IOWatch] = [:]
    private(set) var ended = false

    init(api: UnsafeMutablePointer<pa_mainloop_api>) { self.api = api }

    fileprivate func register(_ w: IOWatch) -> Bool {
        guard !ended else { return false }
        live[ObjectIdentifier(w)] = w
        return true
    }

    fileprivate func unregister(_ w: IOWatch) { live[ObjectIdentifier(w)] = nil }

    /// How many watches are registered now (tests: nothing leaks a watch).
    package var count: Int { live.count }

    func endAll() {
        ended = true
        let all = live.values
        live.removeAll()
        for w in all { w.end() }
    }
}

/// An fd watched by the loop (`pa_mainloop_api.io_new`); `update(_:)` changes what it waits for (`io_enable`),
/// `cancel()` stops it (`io_free`). Loop thread only. Once its loop has ended it is inert.
public final class IOWatch {
    private unowned let owner: Watches
    private var event: OpaquePointer?
    let handler: (IOEvents) -> Void

    init(_ owner: Watches, fd: Int32, events: IOEvents, handler: @escaping (IOEvents) -> Void) {
        self.owner = owner
        self.handler = handler
        guard owner.register(self) else { return }
        let api = owner.api
        event = api.pointee.io_new?(
            api, fd, pa_io_event_flags_t(rawValue: events.rawValue),
            { _, _, _, flags, userdata in
                guard let userdata else { return }
                Unmanaged<IOWatch>.fromOpaque(userdata).takeUnretainedValue().handler(
                    IOEvents(rawValue: flags.rawValue))
            }, Unmanaged.passUnretained(self).toOpaque())
        if event == nil { owner.unregister(self) }
    }

    public func update(_ events: IOEvents) {
        guard let e = event else { return }
        owner.api.pointee.io_enable?(e, pa_io_event_flags_t(rawValue: events.rawValue))
    }

    /// Stops watching; the loop lets go of the watch.
    public func cancel() {
        guard event != nil else { return }
        end()
        owner.unregister(self)
    }

    fileprivate func end() {
        guard let e = event else { return }
        event = nil
        owner.api.pointee.io_free?(e)
    }
}

/// Arms a timerfd to expire once after `ns` (0 disarms it).
private func setTimerfd(_ fd: Int32, _ ns: UInt64) -> Bool {
    var spec = itimerspec()
    spec.it_value.tv_sec = Int(ns / 1_000_000_000)
    spec.it_value.tv_nsec = Int(ns % 1_000_000_000)
    return timerfd_settime(fd, 0, &spec, nil) == 0
}

/// A deadline set and cleared often (once per step): one timerfd and one watch for its whole life, so arming and
/// disarming cost a `timerfd_settime` each instead of a new fd, watch and close. Loop thread only.
public final class LoopDeadline {
    private var fd: Int32
    private var watch: IOWatch?
    private var handler: (() -> Void)?

    public init?(loop: MainLoop) {
        fd = timerfd_create(CLOCK_MONOTONIC, Int32(TFD_CLOEXEC | TFD_NONBLOCK))
        guard fd >= 0 else { return nil }
        watch = loop.watch(fd: fd) { [weak self] in self?.fire() }
    }

    deinit {
        watch?.cancel()
        if fd >= 0 { close(fd) }
    }

    /// Runs `handler` once after `ns`, unless `disarm()` or another `arm` comes first.
    public func arm(afterNanoseconds ns: UInt64, _ handler: @escaping () -> Void) {
        self.handler = handler
        _ = setTimerfd(fd, max(ns, 1))
    }

    public func disarm() {
        guard handler != nil else { return }
        handler = nil
        _ = setTimerfd(fd, 0)
    }

    private func fire() {
        var expirations: UInt64 = 0
        _ = read(fd, &expirations, 8)
        let h = handler
        handler = nil
        h?()
    }
}

/// A one-shot monotonic timer on the loop. Cancelling (or firing) closes its fd.
public final class LoopTimer {
    private var fd: Int32
    private var watch: IOWatch?
    private var handler: (() -> Void)?

    init?(loop: MainLoop, afterNanoseconds ns: UInt64, handler: @escaping () -> Void) {
        fd = timerfd_create(CLOCK_MONOTONIC, Int32(TFD_CLOEXEC | TFD_NONBLOCK))
        guard fd >= 0 else { return nil }
        // A zero it_value disarms a timerfd: wait at least 1 ns.
        guard setTimerfd(fd, max(ns, 1)) else {
            close(fd)
            return nil
        }
        self.handler = handler
        watch = loop.watch(fd: fd) { [weak self] in self?.fire() }
    }

    private func fire() {
        let h = handler
        cancel()
        h?()
    }

    /// Stops the timer; its handler will not run.
    public func cancel() {
        handler = nil
        watch?.cancel()
        watch = nil
        if fd >= 0 {
            close(fd)
            fd = -1
        }
    }

    deinit {
        // Dropped without cancel: stop the watch too, or it would stay registered on a closed (reusable) fd.
        cancel()
    }
}

/// Watches a process for its exit with a pidfd on the loop: the handler runs once, on the loop thread, as soon as
/// the process exits (or at once if it is already gone). Dropping the watch stops it.
public final class ProcessExitWatch {
    private var watch: IOWatch?
    private var fd: Int32
    private var poll: LoopTimer?

    /// Opens a pidfd for `pid`: the descriptor, or -1 and errno.
    public typealias Opener = @Sendable (pid_t) -> (fd: Int32, error: Int32)
    public static let pidfdOpener: Opener = { pid in
        let fd = pidfd_open(pid, 0)
        return (fd, fd < 0 ? errno : 0)
    }
    /// How often a process is checked when no pidfd could be opened for it.
    static let pollNanoseconds: UInt64 = 500_000_000
    /// Makes the loop timer of the next check: the loop's, or nil when none can be made.
    public typealias TimerMaker = @Sendable (MainLoop, UInt64, @escaping () -> Void) -> LoopTimer?
    public static let loopTimer: TimerMaker = { loop, ns, handler in loop.timer(afterNanoseconds: ns, handler) }
    private let makeTimer: TimerMaker

    /// `open` and `timer` are the seams for tests (a pidfd_open that fails, a timerfd that cannot be made); the
    /// daemon uses `pidfd_open` and the loop's timers.
    public init(
        pid: UInt32, loop: MainLoop, open: Opener = ProcessExitWatch.pidfdOpener,
        timer: @escaping TimerMaker = ProcessExitWatch.loopTimer, _ handler: @escaping () -> Void
    ) {
        makeTimer = timer
        guard pid > 0, pid <= UInt32(Int32.max) else {
            fd = -1
            loop.soon(handler)
            return
        }
        let (opened, error) = open(pid_t(pid))
        fd = opened
        if opened >= 0 {
            watch = loop.watch(fd: opened, events: .input) { [weak self] _ in
                self?.stop()
                handler()
            }
        } else if error == ESRCH {
            // No such process: it has exited.
            loop.soon(handler)
        } else {
            // Out of descriptors, no pidfd support, a seccomp filter: that says nothing of the process, which may
            // well be running (ending its sessions would be wrong). It is checked every half second instead.
            check(pid_t(pid), loop, handler)
        }
    }

    private func check(_ pid: pid_t, _ loop: MainLoop, _ handler: @escaping () -> Void) {
        let next = { [weak self] in
            guard let self else { return }
            self.poll = nil
            if kill(pid, 0) == -1 && errno == ESRCH { return handler() }
            self.check(pid, loop, handler)
        }
        poll = makeTimer(loop, Self.pollNanoseconds, next)
        guard poll == nil else { return }
        // No timer either (the same shortage of descriptors): Dispatch waits, and the check runs on the loop. The
        // checks must not stop, or the app's sessions would outlive it.
        let bound = loop.bind(next)
        DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(Self.pollNanoseconds))) {
            loop.execute { bound.value() }
        }
    }

    private func stop() {
        watch?.cancel()
        watch = nil
        poll?.cancel()
        poll = nil
        if fd >= 0 {
            close(fd)
            fd = -1
        }
    }

    deinit { stop() }
}
