import AudioPolicy
import Dispatch
import FoundationEssentials
import Glibc
import Logging
import PulseBackend

/// The engine, run against the real sound server: feeds it what the backend sees, carries out its stream
/// effects and timers, and hands every step's effects to whoever listens (the D-Bus service, tests).
///
/// Everything runs on the loop thread, the engine included: a D-Bus request, the decision and the server
/// operation follow each other without a thread hop, which is what keeps "a client asks → another app is silenced"
/// close to the floor (docs/BENCHMARKS.md). Other threads use `loop.execute`/`loop.sync`.
public final class Arbiter: @unchecked Sendable {
    // @unchecked: every stored property is touched only on `loop`'s thread (see the type's comment).

    public let loop: MainLoop
    public private(set) var engine: Engine
    public let backend: PulseBackend
    var logger: Logger
    private var timers: [TimerID: LoopTimer] = [:]
    private let epoch = DispatchTime.now().uptimeNanoseconds
    private var nextRequest: UInt64 = 1
    private var shuttingDown = false

    /// Called after every engine step with the event and what it produced (stream effects already sent).
    public var onStep: ((Event, [Effect]) -> Void)?
    /// Steps whose stream operations are on their way, waiting to be announced (`onStep`) in order.
    private var unpublished: [(Event, [Effect])] = []
    /// Called when the server connection comes or goes (`ServerConnected`, `ServerName`).
    public var onServerStatus: ((ServerInfo?) -> Void)?

    /// Where silent mode and D-Bus app rules are saved; nil for nowhere.
    let statePath: String?

    public init(
        loop: MainLoop, settings: Settings, backend options: PulseBackend.Options, statePath: String? = nil,
        logger: Logger
    ) {
        self.loop = loop
        self.statePath = statePath
        self.engine = Engine(settings: settings)
        self.logger = logger
        self.backend = PulseBackend(loop: loop, options: options, logger: logger)
    }

    /// Restores the saved state and connects to the server. Call on the loop thread.
    public func start() {
        if let path = statePath {
            do {
                for e in try StateFile.load(from: path, requestID: makeRequestID) {
                    for case .reply(_, .error(let err)) in engine.handle(e, at: now) {
                        logger.warning("a saved rule no longer holds", metadata: ["error": "\(err)"])
                    }
                }
            } catch {
                logger.error("saved state unreadable; starting without it", metadata: ["path": "\(path)", "error": "\(error)"])
            }
        }
        backend.onEvent = { [weak self] e in self?.backendEvent(e) }
        backend.start()
    }

    /// The loop's monotonic clock, as the engine's time.
    public var now: Instant { Instant(nanoseconds: DispatchTime.now().uptimeNanoseconds - epoch) }

    /// A fresh request number for a request event.
    public func makeRequestID() -> RequestID {
        defer { nextRequest += 1 }
        return RequestID(nextRequest)
    }

    public var serverInfo: ServerInfo? { backend.isConnected ? backend.server : nil }

    private func backendEvent(_ e: BackendEvent) {
        switch e {
        case .policy(let event): handle(event)
        case .connected(let info): onServerStatus?(info)
        case .disconnected: if !shuttingDown { onServerStatus?(nil) }
        }
    }

    /// One engine step: the engine decides, the journal records, the server operations go out, the timers are set,
    /// and `onStep` sees it all. Returns the effects (the reply among them). Call on the loop thread.
    @discardableResult
    public func handle(_ event: Event) -> [Effect] {
        let effects = engine.handle(event, at: now)
        if logger.logLevel <= .debug { logDecisions(event, effects) }
        var touchesStreams = false
        for e in effects {
            switch e {
            case .setStreamMute, .setStreamVolume: touchesStreams = true
            case .scheduleTimer(let id, let ns):
                timers[id]?.cancel()
                timers[id] = loop.timer(afterNanoseconds: ns) { [weak self] in
                    self?.timers[id] = nil
                    self?.handle(.timerFired(id))
                }
            case .cancelTimer(let id):
                timers.removeValue(forKey: id)?.cancel()
            case .persist:
                if let path = statePath {
                    do { try StateFile.save(engine.persistentState, to: path) } catch {
                        logger.error("cannot save state", metadata: ["path": "\(path)", "error": "\(error)"])
                    }
                }
            default: break
            }
        }
        if touchesStreams || isStreamEvent(event) {
            // Journal first: a crash between the two leaves at most an entry for a change never made.
            backend.updateApplied(engine.appliedChanges)
            backend.apply(effects)
        }
        // The mutes leave before the news of them: D-Bus signals about a hundred sessions take milliseconds to
        // send, and libpulse writes only on the next loop pass. Later steps queue behind, so order is kept.
        if touchesStreams || !unpublished.isEmpty {
            unpublished.append((event, effects))
            if unpublished.count == 1 {
                loop.afterServerWrites { [weak self] in
                    guard let self else { return }
                    let steps = self.unpublished
                    self.unpublished.removeAll()
                    for (e, fx) in steps { self.onStep?(e, fx) }
                }
            }
        } else {
            onStep?(event, effects)
        }
        return effects
    }

    /// `--log-level debug` answers "why did this go quiet": every step that touched a stream, a player or a
    /// session's signals, with the event that caused it.
    private func logDecisions(_ event: Event, _ effects: [Effect]) {
        let decisions = effects.filter {
            switch $0 {
            case .setStreamMute, .setStreamVolume, .mprisPause, .mprisPlay, .signal, .sessionAdded, .sessionRemoved:
                return true
            default: return false
            }
        }
        guard !decisions.isEmpty else { return }
        logger.debug("decided", metadata: [
            "event": "\(event)", "effects": "\(decisions.map { "\($0)" }.joined(separator: ", "))",
        ])
    }

    private func isStreamEvent(_ e: Event) -> Bool {
        switch e {
        case .streamAppeared, .streamChanged, .streamRemoved: return true
        default: return false
        }
    }

    /// Undoes every mute and duck audiod applied, waits until the server has acknowledged them, clears the
    /// journal's stream entries and disconnects; then calls `done`. Call on the loop thread.
    public func shutdown(_ done: @escaping () -> Void) {
        guard !shuttingDown else { return done() }
        shuttingDown = true
        for t in timers.values { t.cancel() }
        timers.removeAll()
        let effects = engine.restoreEverything()
        logger.info("restoring \(effects.count) stream change(s) before exit")
        backend.apply(effects)
        backend.flush { [weak self] in
            guard let self else { return done() }
            if self.backend.isConnected { self.backend.updateApplied(self.engine.appliedChanges) }
            self.backend.stop()
            done()
        }
    }
}
