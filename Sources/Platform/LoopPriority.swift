import DBusTransport
import Glibc
import Logging

/// The scheduling priority of audiod's loop thread, where every decision is made and every mute is written.
///
/// A mute must reach the sound server before the new sound's first period is mixed. When a call starts, the
/// machine is busy exactly then: the phone app starts, WirePlumber runs its linking policy and pipewire-pulse sets
/// up the stream — and those run at nice −11 (PipeWire's and PulseAudio's own main threads ask for it), so a loop at
/// nice 0 waits behind the very work that links the call. Measured on two CPUs (docs/BENCHMARKS.md, "What is
/// heard"): a phone-role stream over music on PipeWire was heard together with it for one quantum in 13 of 800
/// rounds at nice 0, and in 1 of 1,200 at −11.
///
/// The level is asked for the way the sound servers ask: `setpriority` first (enough with `CAP_SYS_NICE` or an
/// `RLIMIT_NICE` that allows it), else RealtimeKit on the system bus — the desktop's broker for exactly this,
/// which grants a user's process a nice level down to its `MinNiceLevel` (−15 by default). Not real-time
/// scheduling: the loop does little per event and must never starve the machine; a nice level only decides who
/// runs first when the CPUs are all busy.
///
/// The one call audiod makes to a well-known name, and without NO_AUTO_START: RealtimeKit is a broker asked once,
/// not a source followed, and starting it is what asking it means (the sound server has normally started it
/// already; where it is not installed the call fails at once). Every other platform call goes to an owner's unique
/// name through a `NameWatch`.
final class LoopPriority {
    static let rtkitName = "org.freedesktop.RealtimeKit1"
    static let rtkitPath = "/org/freedesktop/RealtimeKit1"
    static let rtkitInterface = "org.freedesktop.RealtimeKit1"

    /// What the loop thread runs at, and how it came to.
    enum State: Equatable {
        /// Not asked yet.
        case unset
        /// `nice-level = 0`: left as started.
        case leftAlone(Int32)
        /// `setpriority` did it.
        case direct(Int32)
        /// Waiting for RealtimeKit's answer.
        case asking(Int32)
        /// RealtimeKit did it (the level it granted; lower than asked when its `MinNiceLevel` is higher).
        case granted(Int32)
        /// Neither could: the level the thread runs at, the one asked, and why.
        case refused(running: Int32, asked: Int32, why: String)
    }

    private(set) var state = State.unset
    /// The loop thread's kernel id, found on it (`/proc/thread-self`).
    private let thread: pid_t?
    private let logger: Logger
    /// Answers to an older request are dropped: a reload may ask again while RealtimeKit answers.
    private var generation = 0

    /// Call on the loop thread.
    init(logger: Logger) {
        self.logger = logger
        thread = Self.currentThreadID()
    }

    /// The calling thread's kernel id (what `gettid` returns; Swift's Glibc does not export it).
    static func currentThreadID() -> pid_t? {
        var buffer = [CChar](repeating: 0, count: 64)
        let n = readlink("/proc/thread-self", &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        let path = String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return path.split(separator: "/").last.flatMap { pid_t($0) }
    }

    /// A thread's nice level now, nil when it cannot be read.
    static func niceLevel(of thread: pid_t) -> Int32? {
        errno = 0
        let n = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(thread))
        return n == -1 && errno != 0 ? nil : n
    }

    /// Puts the loop thread at `level` (−20…19; 0 leaves it as started), through `systemBus`'s RealtimeKit when
    /// the kernel refuses it to audiod itself.
    func apply(_ level: Int32, systemBus: DBusConnection?) {
        generation += 1
        guard let thread else {
            state = .refused(
                running: 0, asked: level, why: "the loop thread's id cannot be read from /proc/thread-self")
            logger.warning(
                "cannot set audiod's scheduling priority: the loop thread's id cannot be read from /proc/thread-self")
            return
        }
        let running = Self.niceLevel(of: thread) ?? 0
        if level == 0 {
            state = .leftAlone(running)
            return
        }
        if level == running {
            state = .direct(level)
            return
        }
        errno = 0
        if setpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(thread), level) == 0 {
            state = .direct(level)
            logger.info("audiod decides at nice \(level)", metadata: ["thread": "\(thread)"])
            return
        }
        let why = String(cString: strerror(errno))
        guard let systemBus else {
            refused(running: running, asked: level, why: "\(why), and there is no system bus to ask RealtimeKit")
            return
        }
        state = .asking(level)
        let mine = generation
        minNiceLevel(systemBus) { [weak self] floor in
            guard let self, self.generation == mine else { return }
            // RealtimeKit refuses a level below its floor outright: ask for the floor instead.
            let asked = max(level, floor ?? level)
            self.makeHighPriority(systemBus, thread: thread, asked, withPID: true) { [weak self] error in
                guard let self, self.generation == mine else { return }
                if let error {
                    self.refused(running: running, asked: level, why: "\(why), and RealtimeKit said: \(error)")
                } else {
                    self.state = .granted(Self.niceLevel(of: thread) ?? asked)
                    self.logger.info(
                        "audiod decides at nice \(asked), granted by RealtimeKit",
                        metadata: [
                            "thread": "\(thread)", "asked": "\(level)",
                        ])
                }
            }
        }
    }

    private func refused(running: Int32, asked: Int32, why: String) {
        state = .refused(running: running, asked: asked, why: why)
        logger.notice(
            "audiod decides at nice \(running), not \(asked): \(why). On a busy machine a new call's first period may sound over the music it interrupts"
        )
    }

    /// RealtimeKit's lowest nice level for a user's thread; nil when it does not say.
    private func minNiceLevel(_ bus: DBusConnection, _ done: @escaping (Int32?) -> Void) {
        guard
            let m = DBusMessage.methodCall(
                destination: Self.rtkitName, path: Self.rtkitPath, interface: "org.freedesktop.DBus.Properties",
                member: "Get")
        else { return done(nil) }
        _ = m.append([.string(Self.rtkitInterface), .string("MinNiceLevel")])
        bus.call(m, timeoutMilliseconds: 5_000) { r in
            guard r?.kind == .methodReturn, case .variant(.int32(let n))? = r?.arguments.first else { return done(nil) }
            done(n)
        }
    }

    /// `MakeThreadHighPriorityWithPID` names the process, so that it works from inside a PID namespace too; an
    /// older RealtimeKit has only `MakeThreadHighPriority`, which takes the caller's own process.
    private func makeHighPriority(
        _ bus: DBusConnection, thread: pid_t, _ level: Int32, withPID: Bool, _ done: @escaping (String?) -> Void
    ) {
        let member = withPID ? "MakeThreadHighPriorityWithPID" : "MakeThreadHighPriority"
        guard
            let m = DBusMessage.methodCall(
                destination: Self.rtkitName, path: Self.rtkitPath, interface: Self.rtkitInterface, member: member)
        else { return done("cannot build the call") }
        let args: [DBusValue] =
            withPID
            ? [.uint64(UInt64(getpid())), .uint64(UInt64(thread)), .int32(level)]
            : [.uint64(UInt64(thread)), .int32(level)]
        _ = m.append(args)
        bus.call(m, timeoutMilliseconds: 5_000) { [weak self] r in
            guard let r else { return done("no answer") }
            if r.kind == .methodReturn { return done(nil) }
            let name = r.errorName ?? "an error"
            if withPID, name == "org.freedesktop.DBus.Error.UnknownMethod" {
                self?.makeHighPriority(bus, thread: thread, level, withPID: false, done)
                return
            }
            let text = r.arguments.first?.stringValue.map { " (\($0))" } ?? ""
            done(name + text)
        }
    }

    /// For `ListPlatformSources`: whether the loop runs at the level asked, and a sentence.
    var status: (found: Bool, detail: String) {
        switch state {
        case .unset: (false, "not asked yet")
        case .leftAlone(let n): (true, "nice-level = 0: audiod runs at nice \(n), as it was started")
        case .direct(let n): (true, "audiod decides at nice \(n), set by itself")
        case .asking(let n): (false, "asking for nice \(n)")
        case .granted(let n): (true, "audiod decides at nice \(n), granted by RealtimeKit")
        case .refused(let running, let asked, let why):
            (false, "audiod decides at nice \(running), not \(asked): \(why)")
        }
    }
}
