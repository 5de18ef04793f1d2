import AudioPolicy
import DBusService
import Dispatch
import FoundationEssentials
import Glibc
import Logging
import PulseBackend
import PulseLoop

/// The engine, run against the real sound server: feeds it what the backend sees, carries out its stream
/// effects and timers, and hands every step's effects to whoever listens (the D-Bus service, tests).
///
/// Everything runs on the loop thread, the engine included: a D-Bus request, the decision and the server
/// operation follow each other without a thread hop, which is what keeps "a client asks → another app is silenced"
/// close to the floor (docs/BENCHMARKS.md). Not Sendable: other threads hold it only as a `LoopBound`
/// (`loop.bind`), which they open inside `loop.execute`/`loop.sync`.
public final class Arbiter {

    public let loop: MainLoop
    public private(set) var engine: Engine
    public let backend: PulseBackend
    var logger: Logger
    private var timers: [TimerID: LoopTimer] = [:]
    private let epoch = DispatchTime.now().uptimeNanoseconds
    private var nextRequest: UInt64 = 1
    private var shuttingDown = false
    /// While stopping: an engine that decides nothing (`Settings.restoreOnly`) and only puts back the policy values
    /// a stream starts with from the server's restore database. Correcting a leak is not a decision (POLICY §8),
    /// so a stream that starts during the stop is put back to the user's values too.
    private var restorer: Engine?

    /// Called after every engine step with the event and what it produced (stream effects already sent).
    public var onStep: ((Event, [Effect]) -> Void)?
    /// Steps whose stream operations are on their way, waiting to be announced (`onStep`) in order.
    private var unpublished: [(Event, [Effect])] = []
    /// Called when the server connection comes or goes (`ServerConnected`, `ServerName`).
    public var onServerStatus: ((ServerInfo?) -> Void)?
    /// Reads the config file for `Reload` and SIGHUP: its settings and path, nil when there is none; throws what is
    /// wrong with a broken one. Unset: audiod runs on built-in settings only.
    public var readSettings: (() throws -> (settings: Settings, file: String)?)?

    /// Called after a reload took new settings (`Reload`, SIGHUP), for what the daemon applies outside the engine.
    public var onReload: ((Settings) -> Void)?

    /// Where silent mode and D-Bus app rules are saved; nil for nowhere.
    let statePath: String?
    /// Saved-state writes leave the loop: a burst of rule changes costs one write per `persistDelay`, on this
    /// queue, and nobody's activation waits for the disk.
    private let stateWriter = DispatchQueue(label: "audiod.state")
    private var persistTimer: LoopTimer?
    private var settleTimer: LoopTimer?
    private var announceDeadline: LoopDeadline?
    /// The longest the bus waits for the server to acknowledge a step's stream operations.
    static let announceWithinNanoseconds: UInt64 = 20_000_000
    /// The newest state a step asked to save, not yet handed to the writer.
    private var toPersist: PersistentState?
    static let persistDelayNanoseconds: UInt64 = 100_000_000

    /// Where the sessions of the next run are numbered from (beside the journal, so per login: `$XDG_RUNTIME_DIR`
    /// lives as long as the user's login); nil: nowhere, and each run numbers from 1.
    let sessionIDPath: String?
    /// Where the `lifetime=process` sessions are kept for the next run (beside the journal); nil: nowhere.
    public let processSessionsPath: String?
    /// Ids below this are reserved on disk: a crash loses at most the rest of the block, never reuses an id.
    private var sessionIDsReserved: UInt64 = 0
    static let sessionIDBlock: UInt64 = 1024

    public init(
        loop: MainLoop, settings: Settings, backend options: PulseBackend.Options, statePath: String? = nil,
        logger: Logger
    ) {
        self.loop = loop
        self.statePath = statePath
        self.sessionIDPath = options.journalPath.map(SessionIDFile.path(besideJournal:))
        self.processSessionsPath = options.journalPath.map(ProcessSessionFile.path(besideJournal:))
        self.engine = Engine(settings: settings)
        self.logger = logger
        self.backend = PulseBackend(
            loop: loop, options: options, volumeTolerance: settings.volumeTolerance, logger: logger)
    }

    /// Restores the saved state and connects to the server. Call on the loop thread.
    public func start() {
        loop.assertOnLoop()
        if let path = sessionIDPath {
            switch SessionIDFile.read(path) {
            case .success(let first): engine.numberSessions(from: first)
            case .failure(let problem):
                logger.warning(
                    "the session-id file \(path) is damaged (\(problem)); numbering sessions from 1, so an id an earlier run gave out may name a new session"
                )
            }
            reserveSessionIDs()
        }
        if let path = statePath {
            do {
                for e in try StateFile.load(from: path, requestID: makeRequestID) {
                    let effects = engine.handle(e, at: now)
                    for case .reply(_, .error(let err)) in effects {
                        logger.warning("a saved rule no longer holds", metadata: ["error": "\(err)"])
                    }
                    // Published like every step: the bus shows the saved silent mode from its first answer.
                    onStep?(e, effects)
                }
            } catch {
                logger.warning(
                    "the saved state \(path) is damaged (\(StateFile.describe(error))); starting with silent mode off and no saved app rules"
                )
            }
        }
        backend.onEvent = { [weak self] e in self?.backendEvent(e) }
        backend.start()
    }

    /// The process sessions the last run kept (none when it kept none, or the file is damaged: said in the log).
    public func keptProcessSessions() -> [KeptProcessSession] {
        guard let path = processSessionsPath else { return [] }
        switch ProcessSessionFile.read(path) {
        case .success(let kept): return kept
        case .failure(let problem):
            logger.warning(
                "the process-session file \(path) is damaged (\(problem)); the shells' sessions of the last run are not made again"
            )
            return []
        }
    }

    /// Keeps the process sessions for the next run, written off the loop in order.
    public func keepProcessSessions(_ sessions: [KeptProcessSession]) {
        guard let path = processSessionsPath else { return }
        let log = logger
        stateWriter.async {
            do { try ProcessSessionFile.write(sessions, to: path) } catch {
                log.error(
                    "cannot keep the process sessions; a restart will not make them again",
                    metadata: ["path": "\(path)", "error": "\(error)"])
            }
        }
    }

    /// Writes the next block of session ids as given out. Once per 1,024 sessions, on the loop: a small file on the
    /// runtime directory's tmpfs.
    private func reserveSessionIDs() {
        guard let path = sessionIDPath else { return }
        sessionIDsReserved = engine.nextSessionID + Self.sessionIDBlock
        do {
            try SessionIDFile.write(sessionIDsReserved, to: path)
        } catch {
            logger.error(
                "cannot write the session-id file; a restart may give out ids this run gave",
                metadata: ["path": "\(path)", "error": "\(error)"])
        }
    }

    /// The loop's monotonic clock, as the engine's time.
    public var now: Instant { Instant(nanoseconds: DispatchTime.now().uptimeNanoseconds - epoch) }

    /// A fresh request number for a request event.
    public func makeRequestID() -> RequestID {
        defer { nextRequest += 1 }
        return RequestID(nextRequest)
    }

    public var serverInfo: ServerInfo? { backend.isConnected ? backend.server : nil }

    /// False once `shutdown` has begun: the engine takes no more input.
    public var acceptsRequests: Bool { !shuttingDown }

    private func backendEvent(_ e: BackendEvent) {
        switch e {
        case .policy(let event): handle(event)
        case .connected(let info): onServerStatus?(info)
        case .disconnected: if !shuttingDown { onServerStatus?(nil) }
        }
    }

    /// One engine step: the engine decides, then `interpret` carries the effects out. Returns the effects (the
    /// reply among them). Call on the loop thread.
    @discardableResult
    public func handle(_ event: Event) -> [Effect] {
        loop.assertOnLoop()
        // Stopping has begun: nothing new is decided, so no call or stream event can leave a new mute behind.
        guard !shuttingDown else { return correctWhileStopping(event) }
        let tracing = logger.logLevel <= .trace
        let t0 = tracing ? DispatchTime.now().uptimeNanoseconds : 0
        let unsettled = engine.settleOverflows
        let effects = engine.handle(event, at: now)
        // Before anything is published: a crash after the bus showed a new id must not give it out again.
        if sessionIDPath != nil, engine.nextSessionID >= sessionIDsReserved { reserveSessionIDs() }
        let t1 = tracing ? DispatchTime.now().uptimeNanoseconds : 0
        if engine.settleOverflows != unsettled {
            logger.error(
                "the policy did not settle within its round limit; the rest of the step was dropped",
                metadata: [
                    "event": "\(event.sentence)"
                ])
        }
        if logger.logLevel <= .debug { logDecisions(event.sentence, effects) }
        let t2 = tracing ? DispatchTime.now().uptimeNanoseconds : 0
        interpret(event, effects, timing: tracing ? StepTiming(start: t0, decided: t1, logged: t2) : nil)
        return effects
    }

    /// `--log-level trace`: where a step's time goes, from the event's arrival to the server's acknowledgement.
    struct StepTiming {
        var start: UInt64, decided: UInt64, logged: UInt64, journaled: UInt64 = 0, queued: UInt64 = 0
    }

    private func trace(_ event: Event, _ t: StepTiming, written: UInt64, acknowledged: UInt64) {
        func us(_ a: UInt64, _ b: UInt64) -> String { b >= a ? "\((b - a) / 1000)" : "-" }
        // One line per step, in microseconds from the event's arrival (`at`, CLOCK_MONOTONIC in ns, comparable with
        // other processes' clocks): engine → journal → operations queued → written to the server's socket →
        // acknowledged by the server. ("logged" is the debug log of the decision, which only a trace run pays.)
        logger.trace(
            "step timing",
            metadata: [
                "event": "\(event)", "at": "\(t.start)", "decided": "\(us(t.start, t.decided))",
                "logged": "\(us(t.start, t.logged))", "journaled": "\(us(t.start, t.journaled))",
                "queued": "\(us(t.start, t.queued))", "written": "\(us(t.start, written))",
                "acknowledged": "\(us(t.start, acknowledged))",
            ])
    }

    /// The one interpreter of engine effects, always in this order:
    /// 1. the journal records what audiod holds after the step (a crash after it leaves at most an entry for a
    ///    change never made, never a change without an entry);
    /// 2. the stream operations go to the server;
    /// 3. timers and saved state;
    /// 4. the bus — replies, signals, objects, properties, MPRIS — through `onStep`, once the stream operations
    ///    have left: D-Bus signals about a hundred sessions take milliseconds to send, and libpulse writes only on
    ///    the next loop pass. Later steps queue behind, so the bus hears every step, in order.
    private func interpret(_ event: Event, _ effects: [Effect], timing: StepTiming? = nil) {
        var timing = timing
        let (touched, touchesStreams) = heldMayHaveChanged(event, effects, engine.heldChangedUnwritten)
        // 1 and 2.
        if !touched.isEmpty {
            backend.updateApplied(touched.map { ($0, engine.appliedChange(of: $0)) })
            timing?.journaled = DispatchTime.now().uptimeNanoseconds
            backend.apply(effects)
            timing?.queued = DispatchTime.now().uptimeNanoseconds
        }
        if let t = timing, touchesStreams {
            // Written: libpulse sends on the loop pass after this step; acknowledged: the server answered them all.
            loop.afterServerWrites { [weak self] in
                let written = DispatchTime.now().uptimeNanoseconds
                self?.backend.flush { [weak self] in
                    self?.trace(event, t, written: written, acknowledged: DispatchTime.now().uptimeNanoseconds)
                }
            }
        }
        // 3.
        for e in effects {
            switch e {
            case .scheduleTimer(let id, let ns):
                timers[id]?.cancel()
                timers[id] = loop.timer(afterNanoseconds: ns) { [weak self] in
                    self?.timers[id] = nil
                    self?.handle(.timerFired(id))
                }
            case .cancelTimer(let id):
                timers.removeValue(forKey: id)?.cancel()
            case .persist(let state):
                toPersist = state
                if statePath != nil, persistTimer == nil {
                    persistTimer = loop.timer(afterNanoseconds: Self.persistDelayNanoseconds) { [weak self] in
                        self?.persistTimer = nil
                        self?.saveState()
                    }
                }
            default: break
            }
        }
        // 4.
        if touchesStreams || !unpublished.isEmpty {
            unpublished.append((event, effects))
            if unpublished.count == 1 {
                // After the server has acknowledged the operations — then it has applied them, and the signals no
                // longer compete with it for the CPU — or after `announceWithinNanoseconds`, whichever comes first
                // (a busy or hung server must not hold the bus back).
                let once = Once()
                let publish = { [weak self] in
                    guard once.first(), let self else { return }
                    self.announceDeadline?.disarm()
                    let steps = self.unpublished
                    self.unpublished.removeAll()
                    for (e, fx) in steps { self.onStep?(e, fx) }
                }
                loop.afterServerWrites { [weak self] in
                    guard let self else { return }
                    if self.announceDeadline == nil { self.announceDeadline = LoopDeadline(loop: self.loop) }
                    self.announceDeadline?.arm(afterNanoseconds: Self.announceWithinNanoseconds) { publish() }
                    self.backend.flush { publish() }
                }
            }
        } else {
            onStep?(event, effects)
        }
    }

    /// Waits `first`, then while new streams are still to be linked (their saved values may still come), every 20 ms
    /// up to `end` on the engine's clock; then `done`.
    private func settle(untilNanoseconds end: UInt64, first: UInt64, _ done: @escaping () -> Void) {
        guard first > 0 || backend.hasUnlinkedNewStreams, now.nanoseconds < end else { return done() }
        settleTimer = loop.timer(afterNanoseconds: max(first, 20_000_000)) { [weak self] in
            guard let self else { return }
            self.settleTimer = nil
            self.settle(untilNanoseconds: end, first: 0, done)
        }
    }

    /// The streams on which what audiod holds may have changed in a step: those it wrote (`wrote`: any), the one its
    /// event was about, and those the engine changed with nothing written.
    private func heldMayHaveChanged(_ event: Event, _ effects: [Effect], _ unwritten: [StreamID]) -> (
        [StreamID], wrote: Bool
    ) {
        var ids: [StreamID] = []
        for e in effects {
            switch e {
            case .setStreamMute(let id, _), .setStreamVolume(let id, _), .rampStreamUnmute(let id, _),
                .rampStreamVolume(let id, _, _):
                ids.append(id)
            default: break
            }
        }
        let wrote = !ids.isEmpty
        if let id = streamOfEvent(event) { ids.append(id) }
        return (ids + unwritten, wrote)
    }

    /// A stream event while stopping goes to the restore-only engine: its only effects put back what a stream
    /// started with from a restore-database entry that audiod's values leaked into.
    private func correctWhileStopping(_ event: Event) -> [Effect] {
        guard var engine = restorer, streamOfEvent(event) != nil else { return [] }
        let effects = engine.handle(event, at: now).filter {
            switch $0 {
            case .setStreamMute, .setStreamVolume, .rampStreamUnmute, .rampStreamVolume: return true
            default: return false
            }
        }
        restorer = engine
        // Journaled before the operations leave, as every step's are.
        let (touched, _) = heldMayHaveChanged(event, effects, engine.heldChangedUnwritten)
        backend.updateApplied(touched.map { ($0, engine.appliedChange(of: $0)) })
        guard !effects.isEmpty else { return [] }
        if logger.logLevel <= .debug { logDecisions(event.sentence + ", while stopping", effects) }
        backend.apply(effects)
        return effects
    }

    /// `--log-level debug` answers "why did this go quiet": every step that touched a stream, a player or a
    /// session's signals, with the event that caused it.
    private func logDecisions(_ cause: String, _ effects: [Effect]) {
        let decisions = effects.filter {
            switch $0 {
            case .setStreamMute, .setStreamVolume, .rampStreamUnmute, .rampStreamVolume, .mprisPause, .mprisPlay,
                .signal, .sessionAdded,
                .sessionRemoved:
                return true
            default: return false
            }
        }
        guard !decisions.isEmpty else { return }
        logger.debug("\(cause) → \(decisions.map(\.sentence).joined(separator: "; "))")
    }

    private func streamOfEvent(_ e: Event) -> StreamID? {
        switch e {
        case .streamAppeared(let info), .streamChanged(let info): return info.id
        case .streamRemoved(let id): return id
        default: return nil
        }
    }

    /// Hands the newest state a step carried to the writer queue.
    private func saveState() {
        guard let path = statePath, let state = toPersist else { return }
        toPersist = nil
        let log = logger
        stateWriter.async {
            do { try StateFile.save(state, to: path) } catch {
                log.error("cannot save state", metadata: ["path": "\(path)", "error": "\(error)"])
            }
        }
    }

    /// Stopping, in phases: stop deciding (calls get `ShuttingDown`, stream events are ignored), undo every mute
    /// and duck audiod applied, wait for the server's acknowledgement — at most `deadlineNanoseconds`, a server
    /// that hangs must not keep audiod (and the user's logout) waiting — clear the journal's stream entries,
    /// repair the restore-database entries that hold policy values, and disconnect; then `done`. Call on the loop
    /// thread.
    public func shutdown(deadlineNanoseconds: UInt64 = 3_000_000_000, _ done: @escaping () -> Void) {
        loop.assertOnLoop()
        guard !shuttingDown else { return done() }
        shuttingDown = true
        for t in timers.values { t.cancel() }
        timers.removeAll()
        if persistTimer != nil {
            persistTimer?.cancel()
            persistTimer = nil
            saveState()
        }
        let effects = engine.restoreEverything()
        var stopping = Settings.restoreOnly
        stopping.volumeTolerance = engine.volumeTolerance
        restorer = Engine(settings: stopping)
        logger.info("restoring \(effects.count) stream change(s) before exit")
        if logger.logLevel <= .debug { logDecisions("audiod stopping", effects) }
        backend.apply(effects)
        // Whichever comes first, the server's answers or the deadline, ends the stop.
        let once = Once()
        let finish = { [weak self] in
            self?.backend.stop()
            self?.stateWriter.sync {}
            done()
        }
        let deadline = loop.timer(afterNanoseconds: deadlineNanoseconds) { [weak self] in
            guard once.first() else { return }
            self?.logger.warning(
                "the sound server did not confirm the restore in time; the journal keeps what is unconfirmed")
            finish()
        }
        backend.flush { [weak self] in
            guard let self else { return done() }
            if self.backend.isConnected {
                self.backend.updateApplied(
                    all: self.engine.appliedChanges + (self.restorer?.appliedChanges ?? []), written: true)
            }
            // Policy values that streams left in the restore database are written back now, so that a stop
            // without systemd's ExecStopPost leaves nothing behind either — after the server has saved what it
            // still had to save of audiod's last changes (WirePlumber saves a change only once its node reports
            // it), so that no late save lands on a repaired entry. Streams that start meanwhile are corrected.
            self.settle(
                untilNanoseconds: self.now.nanoseconds + 1_000_000_000,
                first: self.backend.restoreSettleBeforeRepairNanoseconds
            ) { [weak self] in
                guard let self else { return }
                self.backend.repairRecordedLeaks { [weak self] repaired, left in
                    guard let self else { return }
                    if repaired + left > 0 {
                        self.logger.info(
                            "restore database: \(repaired) entr\(repaired == 1 ? "y" : "ies") repaired, \(left) left for the next start"
                        )
                    }
                    // Streams the server made before the repair reached it, not yet heard of: corrected now, and
                    // (on PipeWire) once linked, when their saved values have come.
                    self.backend.sweep { [weak self] in
                        guard let self else { return }
                        self.settle(untilNanoseconds: self.now.nanoseconds + 1_000_000_000, first: 0) { [weak self] in
                            self?.backend.flush(ramps: true) { [weak self] in
                                guard once.first() else { return }
                                deadline?.cancel()
                                // The server has everything; audiod stays until it has saved it.
                                guard let self else { return finish() }
                                self.backend.afterServerSaved(wrote: !effects.isEmpty || repaired > 0, finish)
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A flag that lets exactly one of several callbacks through (loop thread only).
private final class Once {
    private var done = false
    func first() -> Bool {
        defer { done = true }
        return !done
    }
}
