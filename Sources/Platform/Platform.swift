import AudioPolicy
import DBusTransport
import Logging

/// Everything audiod learns from the desktop and the phone (SPEC §7, §10), in one room: MPRIS players and GameMode,
/// the calls of GNOME Calls, Plasma's dialer, callaudiod and ModemManager, feedbackd's profile, logind's lock screen,
/// sleep and session leaders, and the loop's priority through RealtimeKit. Each source is followed through a
/// `NameWatch` on its bus's `BusLink`; what they say reaches the engine as events, and the engine's effects that
/// concern them (pause or play a player, write the profile) come back through `carryOut`. Confined to the loop
/// thread.
public final class Platform {
    public let sessionLink: BusLink
    public private(set) var systemLink: BusLink?
    private weak var host: PlatformHost?
    private var logger: Logger
    private var mpris: MPRISWatcher?
    private var gameMode: GameModeWatcher?
    private var calls: PlatformCalls?
    private var sessionCallSources: [CallSource] = []
    private var systemCallSources: [CallSource] = []
    private var feedbackd: Feedbackd?
    private var logind: LogindWatcher?
    private var lockAndSleep: LockAndSleep?
    private var loopPriority: LoopPriority?
    private let sleepGate: SleepGate

    /// On the session bus `connection`; the system bus joins in `followPlatform`.
    public init(session connection: DBusConnection, host: PlatformHost, logger: Logger) {
        sessionLink = BusLink(session: connection, logger: logger)
        self.host = host
        self.logger = logger
        sleepGate = SleepGate(loop: connection.loop, host: host)
    }

    /// MPRIS players: their status feeds the engine, its Pause/Play reach them.
    public func followMediaPlayers(maximumPlayers: Int) {
        guard mpris == nil, let host else { return }
        let w = MPRISWatcher(link: sessionLink, host: host, maximumPlayers: maximumPlayers, logger: logger)
        mpris = w
        w.start()
    }

    /// GameMode: its registered games are game evidence (SPEC §7).
    public func followGameMode() {
        guard gameMode == nil, let host else { return }
        let w = GameModeWatcher(link: sessionLink, host: host, logger: logger) { [weak self] in self?.notAnApp($0) }
        gameMode = w
        w.start()
    }

    /// The platform of SPEC §10: the calls of GNOME Calls, Plasma's dialer and callaudiod and feedbackd's profile on
    /// the session bus; on the system bus (`systemBusAddress`, else `$DBUS_SYSTEM_BUS_ADDRESS` or the well-known
    /// socket) ModemManager's calls and logind — the lock screen, sleep, and the session leaders `CreateSession`
    /// refuses. Every source is optional and followed as it appears and vanishes; the system bus is reconnected
    /// when it is lost or was not there at start.
    public func followPlatform(systemBusAddress: String? = nil) {
        guard calls == nil, let host else { return }
        let calls = PlatformCalls(host: host, logger: logger)
        self.calls = calls
        sessionCallSources = [CallSource.Kind.gnomeCalls, .plasma, .callaudiod].map {
            CallSource($0, link: sessionLink, calls: calls, logger: logger)
        }
        for s in sessionCallSources { s.start() }
        let fb = Feedbackd(link: sessionLink, host: host, logger: logger)
        feedbackd = fb
        fb.start()

        let system = BusLink(
            system: systemBusAddress ?? BusLink.systemBusAddress, loop: sessionLink.loop, logger: logger)
        systemLink = system
        logind = LogindWatcher(link: system, logger: logger)
        systemCallSources = [CallSource(.modemManager, link: system, calls: calls, logger: logger)]
        lockAndSleep = LockAndSleep(link: system, host: host, logger: logger) { [weak self] players, within, then in
            self?.sleepGate.afterPauses(of: players, within: within, then)
        }
        logind?.start()
        lockAndSleep?.start()
        for s in systemCallSources { s.start() }
        system.connect()
    }

    /// Puts the loop thread at nice `level` (the config's `nice-level`), through RealtimeKit on the system bus when
    /// the kernel refuses audiod. Call after `followPlatform`, and again after a reload.
    public func setLoopPriority(nice level: Int32) {
        if loopPriority == nil { loopPriority = LoopPriority(logger: logger) }
        loopPriority?.apply(level, systemBus: systemLink?.connection)
    }

    /// Carries out the effects of one engine step that concern the platform. Call with every step's effects.
    public func carryOut(_ effects: [Effect]) {
        for e in effects {
            switch e {
            case .mprisPause(let player):
                guard let mpris else { continue }
                sleepGate.pauseSent()
                mpris.send("Pause", to: player) { [weak self] in self?.sleepGate.pauseAnswered() }
            case .mprisPlay(let player):
                mpris?.send("Play", to: player)
            case .managerPropertiesChanged(let props):
                for case .silentMode(let on) in props { feedbackd?.silentModeChanged(on) }
            default:
                continue
            }
        }
        // A player's Paused (a step of its own) may be what a sleep waits for.
        sleepGate.check()
    }

    /// Whether `pid` leads one of the user's login sessions (false where logind is not followed).
    public func isSessionLeader(_ pid: UInt32) -> Bool { logind?.leaders.contains(pid) == true }

    /// Whether `pid` is a process no app is (`NotAnApp`: PID 1, the service manager, a session leader, audiod or its
    /// ancestor), for `CreateSession` and GameMode alike.
    public func notAnApp(_ pid: UInt32) -> NotAnApp? { NotAnApp.of(pid, sessionLeader: isSessionLeader) }

    /// One row per source (`ListPlatformSources`, `audioctl status`): name, bus, found, a sentence, and why its
    /// owner is not believed (empty when it is, or when nobody owns the name).
    public func sources() -> [(name: String, bus: String, found: Bool, detail: String, refused: String)] {
        var rows: [(String, String, Bool, String, String)] = []
        let systemDown =
            systemLink.map { $0.connection == nil ? $0.downReason ?? "no system bus" : nil } ?? "not followed"
        if let l = lockAndSleep, systemDown == nil {
            let st = l.status
            rows.append(("logind", "system", st.found, st.detail, ""))
        } else {
            rows.append(("logind", "system", false, systemDown ?? "not followed", ""))
        }
        if let f = feedbackd {
            let st = f.status
            rows.append(("feedbackd", "session", st.found, f.refused.isEmpty ? st.detail : "not believed", f.refused))
        }
        for s in sessionCallSources {
            let detail =
                s.owner != nil ? "its calls interrupt others" : s.refused.isEmpty ? "not running" : "not believed"
            rows.append((s.kind.rawValue, "session", s.owner != nil, detail, s.refused))
        }
        for s in systemCallSources {
            let detail = systemDown ?? (s.owner != nil ? "its calls interrupt others" : "not running")
            rows.append((s.kind.rawValue, "system", s.owner != nil, detail, s.refused))
        }
        if let p = loopPriority {
            let st = p.status
            rows.append(("RealtimeKit", "system", st.found, st.detail, ""))
        }
        if let g = gameMode {
            let detail =
                g.owner != nil ? "its games count as games" : g.refused.isEmpty ? "not running" : "not believed"
            rows.append(("GameMode", "session", g.owner != nil, detail, g.refused))
        }
        return rows
    }

    /// Stops following everything; the system bus closes (the session bus is its owner's to close).
    public func close() {
        mpris = nil
        gameMode = nil
        lockAndSleep = nil
        logind = nil
        feedbackd = nil
        sleepGate.cancel()
        systemCallSources = []
        sessionCallSources = []
        calls = nil
        systemLink?.close()
        systemLink = nil
        sessionLink.close()
    }
}

/// The one owner of "the players have paused" before sleep: counts the `Pause` calls in flight and runs each
/// waiter once they are answered and the players it waits for say they paused — or after its time is up, at most
/// once. Confined to the loop thread.
final class SleepGate {
    private let loop: any DBusLoop
    private weak var host: PlatformHost?
    private var pausesInFlight = 0
    private var waiters: [(players: [PlayerID], run: () -> Void)] = []

    init(loop: any DBusLoop, host: PlatformHost) {
        self.loop = loop
        self.host = host
    }

    func pauseSent() { pausesInFlight += 1 }

    func pauseAnswered() {
        pausesInFlight -= 1
        check()
    }

    /// Runs the waiters whose pauses are all answered and whose players paused (`Engine.playerStillPlays`).
    func check() {
        guard !waiters.isEmpty, pausesInFlight == 0, let host else { return }
        let engine = host.engine
        var waiting: [(players: [PlayerID], run: () -> Void)] = []
        for w in waiters {
            if w.players.contains(where: engine.playerStillPlays) { waiting.append(w) } else { w.run() }
        }
        waiters = waiting
    }

    /// Runs `then` once every `Pause` sent so far is answered and `players` have paused, or after `within` at most
    /// — once.
    func afterPauses(of players: [PlayerID], within: UInt64, _ then: @escaping () -> Void) {
        final class Once {
            var done = false
            var timer: (any DBusLoopTimer)?
        }
        let once = Once()
        let run = {
            guard !once.done else { return }
            once.done = true
            once.timer?.cancel()
            once.timer = nil
            then()
        }
        waiters.append((players, run))
        once.timer = loop.dbusTimer(afterNanoseconds: within, run)
        check()
    }

    func cancel() { waiters = [] }
}
