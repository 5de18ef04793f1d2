import AudioPolicy
import DBusTransport
import Logging

/// Follows GameMode (`com.feralinteractive.GameMode`, from Debian's gamemode package) on the session bus: which host
/// pids are registered as games, handed to the engine as game evidence (SPEC §7). It never starts gamemoded (it is
/// bus-activatable): it asks only a name that has an owner, with NO_AUTO_START, and believes signals only from that
/// owner. Confined to the loop thread.
final class GameModeWatcher {
    static let name = "com.feralinteractive.GameMode"
    static let path = "/com/feralinteractive/GameMode"

    private let bus: DBusConnection
    private weak var host: PolicyHost?
    private var logger: Logger
    /// The current owner's unique name; nil while GameMode is not running.
    private(set) var owner: String?
    private var games: Set<UInt32> = []
    /// More registrations than any desktop has are dropped (a misbehaving owner must not grow audiod).
    static let maximumGames = 1024

    init(bus: DBusConnection, host: PolicyHost, logger: Logger) {
        self.bus = bus
        self.host = host
        self.logger = logger
    }

    func start() {
        bus.addMatch("type='signal',sender='\(Self.name)',interface='\(Self.name)',path='\(Self.path)'")
        bus.nameOwner(of: Self.name) { [weak self] unique in
            guard let self, let unique, self.owner == nil else { return }
            self.appeared(unique)
        }
    }

    func nameOwnerChanged(name: String, old: String, new: String) {
        guard name == Self.name else { return }
        if !old.isEmpty { vanished() }
        if !new.isEmpty { appeared(new) }
    }

    func follows(_ sender: String) -> Bool { owner == sender }

    /// `GameRegistered(i pid, o)` / `GameUnregistered(i pid, o)` from the owner.
    func signal(member: String, _ args: [DBusValue]) {
        guard case .int32(let pid)? = args.first, pid > 0 else {
            logger.debug("GameMode: a signal without a pid, ignored", metadata: ["member": "\(member)"])
            return
        }
        switch member {
        case "GameRegistered":
            guard games.count < Self.maximumGames else { return }
            games.insert(UInt32(pid))
        case "GameUnregistered": games.remove(UInt32(pid))
        default: return
        }
        logger.debug("GameMode: \(member) \(pid)")
        host?.handle(.gameModeGames(games))
    }

    private func appeared(_ unique: String) {
        owner = unique
        logger.info("GameMode found: its registered games count as games")
        guard let m = DBusMessage.methodCall(destination: unique, path: Self.path, interface: Self.name, member: "ListGames")
        else { return }
        m.setNoAutoStart()
        bus.call(m, timeoutMilliseconds: 5_000) { [weak self] r in
            guard let self, self.owner == unique else { return }
            guard r?.kind == .methodReturn, case .array(_, let items)? = r?.arguments.first else {
                self.logger.debug("GameMode: ListGames did not answer with a(io)")
                return
            }
            var pids: Set<UInt32> = []
            for case .structure(let fields) in items.prefix(Self.maximumGames) {
                if case .int32(let pid)? = fields.first, pid > 0 { pids.insert(UInt32(pid)) }
            }
            self.games.formUnion(pids)
            self.host?.handle(.gameModeGames(self.games))
        }
    }

    private func vanished() {
        owner = nil
        guard !games.isEmpty else { return }
        games.removeAll()
        logger.info("GameMode went away")
        host?.handle(.gameModeGames([]))
    }
}
