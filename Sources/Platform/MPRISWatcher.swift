import AppIdentity
import AudioPolicy
import DBusTransport
import Logging

/// Follows MPRIS players on the session bus (POLICY §7) and carries out the engine's `Pause`/`Play` on them.
///
/// A player is known by its first well-known name; other names of the same process are aliases (some players
/// register two). Proxies that stand for other players (playerctld) are ignored. Players come and go under one
/// `arg0namespace='org.mpris.MediaPlayer2'` match; every call goes to a player's unique name. Confined to the loop
/// thread.
final class MPRISWatcher {
    static let prefix = "org.mpris.MediaPlayer2."
    static let path = "/org/mpris/MediaPlayer2"
    static let playerInterface = "org.mpris.MediaPlayer2.Player"
    /// Names that re-export other players rather than play themselves.
    static let proxies: Set<String> = ["org.mpris.MediaPlayer2.playerctld"]

    private struct Player {
        var name: String
        var unique: String
        var pid: UInt32
        /// The Flatpak app id of its connection's process (for a real Flatpak, xdg-dbus-proxy's, whose root is the
        /// app's), when it is sandboxed.
        var app: String?
    }

    private let link: BusLink
    private weak var host: PlatformHost?
    private var logger: Logger
    /// By the player's (first) well-known name.
    private var players: [String: Player] = [:]
    /// Unique connection name → player name, for PropertiesChanged (whose sender is the unique name).
    private var byUnique: [String: String] = [:]
    /// A player's status as last signalled since it was followed, and the timer of the Get that confirms it.
    private var confirmations: [String: any DBusLoopTimer] = [:]
    private var signalledSinceFollowed: Set<String> = []
    /// Names being looked up (GetNameOwner → pid → Get), and what each answer still counts for (PlayerLookups.swift).
    /// Their owners' signals are followed from the moment the owner is known (a status signalled then was once
    /// dropped, and the player stayed `Stopped` while it played).
    private var lookups = PlayerLookups()
    private let maximumPlayers: Int
    /// Names one connection may have followed or being looked up at once. A player registers one or two (an alias
    /// is dropped once looked up); an app that takes hundreds — a sandboxed app may own any number of
    /// `org.mpris.MediaPlayer2.<appid>.N` — must not fill `maximumPlayers` so that real players go unfollowed.
    static let namesPerConnection = 4
    /// Connections told once that they hold too many names (bounded).
    private var flooding: Set<String> = []
    /// Sandboxed apps told once that they have too many players (bounded). One app may open many connections, each
    /// under `namesPerConnection`: its players are counted together, by its Flatpak app id.
    private var floodingApps: Set<String> = []
    /// Names not looked up for want of a free slot, in order, looked up as slots free (bounded): with a flood of
    /// names on the bus at start, a real player among them must still get its turn.
    private var deferred: [String] = []
    private var deferredSet: Set<String> = []
    static let maximumDeferred = 4_096
    /// The largest `PropertiesChanged` dictionary a followed player may send, and its most entries: MPRIS players
    /// send a few KB (the Player interface has 14 properties; a track's metadata with a cover-art URL). A player that
    /// sends more is dropped at its first such message: libdbus has validated it already (~1 ms per MB, measured
    /// on a 32 MB message), and nothing of it is decoded.
    static let maximumChangeBytes = 1 << 20
    static let maximumChangeEntries = 256
    /// Connections dropped for an oversized message: none of their names is followed again (bounded; said once).
    private var oversized: Set<String> = []

    init(link: BusLink, host: PlatformHost, maximumPlayers: Int, logger: Logger) {
        self.link = link
        self.host = host
        self.maximumPlayers = maximumPlayers
        self.logger = logger
    }

    /// Whether `sender` is the current connection of a player followed or being looked up: only its signals are
    /// believed (and decoded).
    func follows(_ sender: String) -> Bool {
        byUnique[sender] != nil || lookups.follows(sender)
    }

    func start() {
        link.followNamespace(String(Self.prefix.dropLast())) { [weak self] name, old, new in
            self?.nameOwnerChanged(name: name, old: old, new: new)
        }
        link.connection?.addMatch(
            "type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',path='\(Self.path)'")
        link.onSignal { [weak self] m in
            guard let self, m.interface == "org.freedesktop.DBus.Properties", m.member == "PropertiesChanged",
                m.path == Self.path, m.signature == "sa{sv}as", let sender = m.sender, self.follows(sender)
            else { return }
            // Only the interface and the status are read: the rest (the track's metadata, cover art as a data URI)
            // may be any size a player sends.
            guard m.peekFirstString() == Self.playerInterface,
                let peek = m.peekDictionaryEntry(
                    argument: 1, key: "PlaybackStatus", maxBytes: Self.maximumChangeBytes,
                    maxEntries: Self.maximumChangeEntries)
            else { return }
            switch peek {
            case .value(.variant(let v)?): self.propertiesChanged(sender: sender, status: v.stringValue)
            case .value: return
            case .tooLarge(let bytes, let entries): self.tooLarge(sender, bytes: bytes, entries: entries)
            }
        }
        busCall("ListNames", []) { [weak self] r in
            guard let self, case .array(_, let names)? = r?.arguments.first else { return }
            for case .string(let n) in names where n.hasPrefix(Self.prefix) { self.appeared(n, owner: nil) }
        }
    }

    private func busCall(_ member: String, _ args: [DBusValue], _ reply: @escaping (DBusMessage?) -> Void) {
        link.busCall(member, args, reply)
    }

    /// A call to a player's current connection (its unique name: nothing is started), never waiting past 5 s.
    private func playerCall(
        _ unique: String, _ interface: String, _ member: String, _ args: [DBusValue],
        _ reply: @escaping (DBusMessage?) -> Void
    ) {
        guard let c = link.connection,
            let m = DBusMessage.methodCall(destination: unique, path: Self.path, interface: interface, member: member)
        else { return reply(nil) }
        m.setNoAutoStart()
        guard m.append(args) else { return reply(nil) }
        c.call(m, timeoutMilliseconds: 5_000, reply: reply)
    }

    // MARK: Bus events

    /// `NameOwnerChanged` for a name under `org.mpris.MediaPlayer2`.
    func nameOwnerChanged(name: String, old: String, new: String) {
        guard name.hasPrefix(Self.prefix) else { return }
        if !old.isEmpty { vanished(name) }
        if !new.isEmpty { appeared(name, owner: new) }
    }

    /// `PropertiesChanged` of the player interface on /org/mpris/MediaPlayer2, with the status it carried (nil:
    /// none).
    func propertiesChanged(sender: String, status raw: String?) {
        guard let raw, let status = PlaybackStatus(rawValue: raw) else { return }
        if let name = byUnique[sender] {
            logger.debug("MPRIS status", metadata: ["player": "\(name)", "status": "\(raw)"])
            signalledSinceFollowed.insert(name)
            host?.handle(.playerStatusChanged(PlayerID(name), status))
            return
        }
        for name in lookups.signalled(sender, status) {
            logger.debug("MPRIS status during look-up", metadata: ["player": "\(name)", "status": "\(raw)"])
        }
    }

    /// A followed player (or one being looked up) sent a `PropertiesChanged` larger than the bound: it is no longer
    /// followed, nor is any other name of its connection; its streams are arbitrated as any app's.
    private func tooLarge(_ unique: String, bytes: Int, entries: Int) {
        let names = players.values.filter { $0.unique == unique }.map(\.name) + lookups.names(ownedBy: unique)
        defer { for name in Set(names) { vanished(name) } }
        // Remembered (and said) for at most 1,024 connections; each is dropped whatever the count.
        guard oversized.count < 1_024, oversized.insert(unique).inserted else { return }
        logger.warning(
            "MPRIS player dropped: its PropertiesChanged is larger than audiod reads",
            metadata: [
                "connection": "\(unique)", "names": "\(names.sorted().joined(separator: ","))",
                "bytes": "\(bytes)", "entries": "\(entries)",
                "limit": "\(Self.maximumChangeBytes) bytes, \(Self.maximumChangeEntries) entries",
            ])
    }

    /// `owner`: the unique name, when NameOwnerChanged said it (then signals are followed from this moment on).
    private func appeared(_ name: String, owner: String?) {
        guard !Self.proxies.contains(name), players[name] == nil, !lookups.isLookingUp(name) else { return }
        guard players.count + lookups.count < maximumPlayers else {
            if deferred.count < Self.maximumDeferred, deferredSet.insert(name).inserted {
                deferred.append(name)
            } else if !deferredSet.contains(name) {
                logger.warning(
                    "MPRIS player not followed: too many players",
                    metadata: ["name": "\(name)", "limit": "\(maximumPlayers)"])
            }
            return
        }
        if let owner, oversized.contains(owner) || tooMany(name, owner, counting: 0) { return }
        lookups.begin(name, owner: owner)
        if let owner { return lookUp(name, unique: owner) }
        busCall("GetNameOwner", [.string(name)]) { [weak self] r in
            var unique: String?
            if case .string(let u)? = r?.arguments.first { unique = u }
            guard let self else { return }
            defer { self.lookUpDeferred() }
            guard self.lookups.ownerAnswered(name, unique), let unique else { return }
            if self.oversized.contains(unique) { return self.lookups.failed(name, unique) }
            // This look-up counts already.
            if self.tooMany(name, unique, counting: 1) { return self.lookups.failed(name, unique) }
            self.lookUp(name, unique: unique)
        }
    }

    /// Whether the connection `unique` holds `namesPerConnection` names followed or looked up besides `counting` of
    /// them (said once per connection).
    private func tooMany(_ name: String, _ unique: String, counting: Int) -> Bool {
        let held = players.values.count { $0.unique == unique } + lookups.owned(by: unique) - counting
        guard held >= Self.namesPerConnection else { return false }
        if flooding.count < 64, flooding.insert(unique).inserted {
            logger.notice(
                "MPRIS: \(unique) owns more than \(Self.namesPerConnection) player names; the others (\(name) first) are not followed"
            )
        }
        return true
    }

    /// Whether the sandboxed app `app` has `namesPerConnection` players followed already — or followed and being
    /// looked up, `countingLookUps` (said once per app).
    private func tooManyOfApp(_ app: String?, _ name: String, countingLookUps: Bool = false) -> Bool {
        guard let app else { return false }
        let held =
            players.values.count(where: { $0.app == app })
            + (countingLookUps ? lookups.owned(byApp: app, besides: name) : 0)
        guard held >= Self.namesPerConnection else { return false }
        if floodingApps.count < 64, floodingApps.insert(app).inserted {
            logger.notice(
                "MPRIS: the sandboxed app \(app) has \(Self.namesPerConnection) players followed; its others (\(name) first) are not"
            )
        }
        return true
    }

    private func lookUp(_ name: String, unique: String) {
        // Each answer is for the look-up of this owner only: after a change of owner, the old one's answers are
        // dropped rather than ending or completing the new look-up.
        busCall("GetConnectionUnixProcessID", [.string(unique)]) { [weak self] r in
            guard let self, self.lookups.isCurrent(name, unique) else { return }
            guard let pid = r?.arguments.first?.uint32Value else {
                self.lookups.failed(name, unique)
                return self.lookUpDeferred()
            }
            let app = ProcessTable.flatpakApp(of: pid)?.id
            if self.tooManyOfApp(app, name, countingLookUps: true) {
                self.lookups.failed(name, unique)
                return self.lookUpDeferred()
            }
            if let app { self.lookups.owner(of: name, isOf: app) }
            self.readStatus(name, unique: unique, attemptsLeft: 5) { [weak self] read in
                guard let self else { return }
                defer { self.lookUpDeferred() }
                guard let status = self.lookups.finish(name, unique, read: read) else { return }
                // One process, several names: the first is the player; the rest add nothing.
                if let other = self.players.values.first(where: { $0.pid == pid }) {
                    self.logger.debug("MPRIS alias ignored", metadata: ["name": "\(name)", "player": "\(other.name)"])
                    return
                }
                // Look-ups of one app run side by side: counted again as each ends.
                if self.tooManyOfApp(app, name) { return }
                self.players[name] = Player(name: name, unique: unique, pid: pid, app: app)
                self.byUnique[unique] = name
                self.logger.info(
                    "MPRIS player", metadata: ["name": "\(name)", "pid": "\(pid)", "status": "\(status.rawValue)"])
                self.host?.handle(.playerAppeared(PlayerInfo(id: PlayerID(name), pid: pid, status: status)))
                self.confirmLater(name, status)
            }
        }
    }

    /// A player that has just appeared may not have said everything yet: its object may be exported after its
    /// name (a Get fails then), and a status it set before anyone followed it was never signalled. One more Get a
    /// second later settles it, unless the player has signalled a status since.
    private func confirmLater(_ name: String, _ status: PlaybackStatus) {
        signalledSinceFollowed.remove(name)
        confirmations[name] = link.loop.dbusTimer(afterNanoseconds: 1_000_000_000) { [weak self] in
            guard let self else { return }
            self.confirmations[name] = nil
            guard self.players[name] != nil, !self.signalledSinceFollowed.contains(name) else { return }
            guard let unique = self.players[name]?.unique else { return }
            self.readStatus(name, unique: unique, attemptsLeft: 1) { [weak self] read in
                guard let self, let read, read != status, self.players[name] != nil,
                    !self.signalledSinceFollowed.contains(name)
                else { return }
                self.logger.debug(
                    "MPRIS status confirmed differently", metadata: ["player": "\(name)", "status": "\(read.rawValue)"])
                self.host?.handle(.playerStatusChanged(PlayerID(name), read))
            }
        }
    }

    /// `Get PlaybackStatus`; nil when the player did not answer with a status (its object may not be exported
    /// yet: asked again every 200 ms, `attemptsLeft` times in all).
    private func readStatus(
        _ name: String, unique: String, attemptsLeft: Int, _ done: @escaping (PlaybackStatus?) -> Void
    ) {
        playerCall(
            unique, "org.freedesktop.DBus.Properties", "Get",
            [.string(Self.playerInterface), .string("PlaybackStatus")]
        ) {
            [weak self] r in
            // Only a reply of one variant holding a string is read, and only that string: a player may answer with
            // anything, of any size.
            if let r, r.kind == .methodReturn, r.signature == "v", let s = r.peekVariantString(),
                let status = PlaybackStatus(rawValue: s)
            {
                return done(status)
            }
            guard let self, attemptsLeft > 1, r?.kind == .error else { return done(nil) }
            self.confirmations["get " + name] = self.link.loop.dbusTimer(afterNanoseconds: 200_000_000) { [weak self] in
                self?.confirmations["get " + name] = nil
                self?.readStatus(name, unique: unique, attemptsLeft: attemptsLeft - 1, done)
            }
        }
    }

    /// Looks up names that waited for a free slot, while there is one (each asks for its owner anew: it may have
    /// gone, or changed, meanwhile).
    private func lookUpDeferred() {
        while !deferred.isEmpty, players.count + lookups.count < maximumPlayers {
            let name = deferred.removeFirst()
            deferredSet.remove(name)
            appeared(name, owner: nil)
        }
    }

    private func vanished(_ name: String) {
        defer { lookUpDeferred() }
        if deferredSet.remove(name) != nil { deferred.removeAll { $0 == name } }
        lookups.vanished(name)
        confirmations.removeValue(forKey: name)?.cancel()
        confirmations.removeValue(forKey: "get " + name)?.cancel()
        signalledSinceFollowed.remove(name)
        guard let p = players.removeValue(forKey: name) else { return }
        byUnique[p.unique] = nil
        host?.handle(.playerRemoved(PlayerID(name)))
    }

    // MARK: Effects

    /// MPRIS `Pause` or `Play` (never `Stop` or `PlayPause`: POLICY §8).
    /// `done` runs when the player answered (or did not within the timeout).
    func send(_ method: String, to player: PlayerID, done: @escaping () -> Void = {}) {
        logger.debug("MPRIS \(method)", metadata: ["player": "\(player.busName)"])
        // To the connection audiod follows as that player, never to the well-known name (which a newcomer may own
        // by now, or which might start something).
        guard method == "Pause" || method == "Play", let unique = players[player.busName]?.unique else { return done() }
        playerCall(unique, Self.playerInterface, method, []) { [weak self] r in
            done()
            if r == nil || r?.kind == .error {
                self?.logger.warning(
                    "MPRIS \(method) failed",
                    metadata: [
                        "player": "\(player.busName)", "error": "\(r?.errorName ?? "no reply")",
                    ])
            }
        }
    }
}
