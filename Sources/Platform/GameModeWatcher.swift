import AppIdentity
import AudioPolicy
import DBusTransport
import Logging

/// Follows GameMode (`com.feralinteractive.GameMode`, from Debian's gamemode package) on the session bus: which host
/// pids are registered as games, handed to the engine as game evidence (SPEC §7). It never starts gamemoded (it is
/// bus-activatable): its `NameWatch` asks only the owner, and believes signals only from it. A registration counts
/// for the registered process and what it starts, so one of a process no app is (`NotAnApp`: PID 1, the user's
/// service manager, a session leader, audiod or an ancestor of it — the list `CreateSession` refuses) would make
/// every app a game: it is not evidence, and says so once. Confined to the loop thread.
final class GameModeWatcher {
    static let name = "com.feralinteractive.GameMode"
    static let path = "/com/feralinteractive/GameMode"

    private let watch: NameWatch
    private weak var host: PlatformHost?
    private var logger: Logger
    private var games: [UInt32: GameRegistration] = [:]
    /// Registrations refused (kept so that the log says it once per pid), bounded like `games`.
    private var refusedPids: Set<UInt32> = []
    private let notAnApp: (UInt32) -> NotAnApp?
    /// More registrations than any desktop has are dropped (a misbehaving owner must not grow audiod).
    static let maximumGames = 1024

    var owner: String? { watch.owner }
    /// Why the name's owner is not believed; empty when it is (or there is none).
    var refused: String { watch.refused }

    init(link: BusLink, host: PlatformHost, logger: Logger, notAnApp: @escaping (UInt32) -> NotAnApp?) {
        self.host = host
        self.logger = logger
        self.notAnApp = notAnApp
        watch = link.follow(
            Self.name, signals: ["type='signal',sender='\(Self.name)',interface='\(Self.name)',path='\(Self.path)'"],
            speakers: [])
        watch.onAppeared = { [weak self] _ in self?.appeared() }
        watch.onVanished = { [weak self] _ in self?.vanished() }
        link.onSignal { [weak self] m in
            guard let self, self.watch.isOwner(m.sender), m.interface == Self.name, m.path == Self.path,
                m.signature == "io", let member = m.member
            else { return }
            self.signal(member: member, m.arguments)
        }
    }

    func start() { watch.start() }

    /// `GameRegistered(i pid, o)` / `GameUnregistered(i pid, o)` from the owner.
    func signal(member: String, _ args: [DBusValue]) {
        guard case .int32(let pid)? = args.first, pid > 0 else {
            logger.debug("GameMode: a signal without a pid, ignored", metadata: ["member": "\(member)"])
            return
        }
        switch member {
        case "GameRegistered":
            guard games.count < Self.maximumGames, admits(UInt32(pid)) else { return }
            games[UInt32(pid)] = Self.registration(UInt32(pid))
        case "GameUnregistered":
            refusedPids.remove(UInt32(pid))
            guard games.removeValue(forKey: UInt32(pid)) != nil else { return }
        default: return
        }
        logger.debug("GameMode: \(member) \(pid)")
        host?.handle(.gameModeGames(games))
    }

    private func appeared() {
        logger.info("GameMode found: its registered games count as games")
        watch.call(Self.path, Self.name, "ListGames") { [weak self] r in
            guard let self else { return }
            guard r?.kind == .methodReturn, case .array(_, let items)? = r?.arguments.first else {
                self.logger.debug("GameMode: ListGames did not answer with a(io)")
                return
            }
            for case .structure(let fields) in items.prefix(Self.maximumGames) {
                if case .int32(let pid)? = fields.first, pid > 0, self.games[UInt32(pid)] == nil,
                    self.games.count < Self.maximumGames, self.admits(UInt32(pid))
                {
                    self.games[UInt32(pid)] = Self.registration(UInt32(pid))
                }
            }
            self.host?.handle(.gameModeGames(self.games))
        }
    }

    /// What says which app the registered process is: what it starts counts as its game only when it is the same app
    /// (`GameRegistration.covers`).
    /// A process whose program cannot be read (it exited, or /proc hides it) counts as a launcher: its registration
    /// covers itself only.
    static func registration(_ pid: UInt32) -> GameRegistration {
        let program = ProcessReader.executableName(pid)
        return GameRegistration(
            pid: pid, flatpakID: ProcessTable.flatpakApp(of: pid)?.id, scopeID: ProcessReader.scopeID(pid),
            isLauncher: program.map(IdentityResolver.isLauncher) ?? true, program: program)
    }

    /// Whether a registration of `pid` is game evidence: not when the process is no app's (logged once per pid).
    private func admits(_ pid: UInt32) -> Bool {
        guard let not = notAnApp(pid) else { return true }
        if refusedPids.count < Self.maximumGames, refusedPids.insert(pid).inserted {
            logger.notice(
                "GameMode registered pid \(pid), which is \(not.what): not taken for a game (it would make \(not.holds) a game's)"
            )
        }
        return false
    }

    private func vanished() {
        refusedPids.removeAll()
        guard !games.isEmpty else { return }
        games.removeAll()
        logger.info("GameMode went away")
        host?.handle(.gameModeGames([:]))
    }
}
