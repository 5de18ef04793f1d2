import AppIdentity
import DBusTransport
import Glibc
import Logging

/// One bus and everything audiod follows on it. The link owns the connection's life: it is the one reader of
/// `NameOwnerChanged` (each follower gets the changes of its own name, matched with `arg0` or `arg0namespace`, never
/// a catch-all rule), hands every other signal to the followers that subscribed, and tells them when the connection
/// is lost and when it is back.
///
/// The session bus is audiod's lifeline: it is never reconnected (audiod restores the streams and exits when it
/// loses it, docs/LIFECYCLE). The system bus can drop and come back — a restarted dbus-daemon, a test's private bus —
/// and is reconnected with a bounded backoff, also when there was none at start (SPEC §10). Confined to the loop
/// thread.
public final class BusLink {
    public enum Kind: String, Sendable {
        case session
        case system
    }

    public let kind: Kind
    public private(set) var connection: DBusConnection?
    /// Method calls (the session bus's are the API server's) and anything no follower wants.
    public var onMethodCall: ((DBusMessage) -> Void)?
    /// Why there is no connection, while there is none: what `ListPlatformSources` says of the bus's sources.
    public private(set) var downReason: String?
    let loop: any DBusLoop
    private var logger: Logger
    private let address: String?
    private var watches: [Weak<NameWatch>] = []
    /// Flatpak app ids the user trusts to own any followed platform name from a sandbox (the config's
    /// `[platform] trusted-apps`): someone who knowingly runs such a service sandboxed.
    public var trustedAppIDs: Set<String> = []
    private var namespaces: [(namespace: String, rule: String, changed: (String, String, String) -> Void)] = []
    private var signalHandlers: [(DBusMessage) -> Void] = []
    private var upHandlers: [() -> Void] = []
    private var lostHandlers: [() -> Void] = []
    /// Reconnection: the next delay, and the pending attempt.
    private var backoff = BusLink.firstRetryNanoseconds
    private var retry: (any DBusLoopTimer)?
    private var closed = false

    static let lostReason = "system bus lost; reconnecting"
    private var connectedAt: UInt64 = 0
    static func monotonic() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    static let firstRetryNanoseconds: UInt64 = 100_000_000
    static let lastRetryNanoseconds: UInt64 = 5_000_000_000

    /// The session bus: the connection audiod serves its API on, already open.
    public init(session connection: DBusConnection, logger: Logger) {
        kind = .session
        self.connection = connection
        loop = connection.loop
        address = nil
        self.logger = logger
        attach(connection)
    }

    /// The system bus at `address`, connected now if it can be and again whenever it is lost.
    public init(system address: String, loop: any DBusLoop, logger: Logger) {
        kind = .system
        self.address = address
        self.loop = loop
        self.logger = logger
        downReason = "not connected yet"
    }

    /// The system bus's address: `$DBUS_SYSTEM_BUS_ADDRESS`, or the well-known socket.
    public static var systemBusAddress: String {
        let env = getenvString("DBUS_SYSTEM_BUS_ADDRESS") ?? ""
        return env.isEmpty ? "unix:path=/run/dbus/system_bus_socket" : env
    }

    /// Connects the system bus (no-op for the session bus, or when connected). Call after the followers exist.
    public func connect() {
        guard kind == .system, connection == nil, !closed, let address else { return }
        do {
            let c = try DBusConnection(address: address, loop: loop)
            let wasLost = downReason == Self.lostReason
            connection = c
            downReason = nil
            connectedAt = Self.monotonic()
            attach(c)
            if wasLost { logger.notice("the system bus is back: following logind and ModemManager again") }
            for h in upHandlers { h() }
            for w in watches { w.value?.linkUp() }
            for n in namespaces { c.addMatch(n.rule) }
        } catch {
            if downReason == "not connected yet" {
                logger.info(
                    "no system bus (\(error.message)): modem calls, the lock screen and sleep are not followed, and session leaders are not checked, until it appears"
                )
                downReason = "no system bus; retrying"
            }
            scheduleRetry()
        }
    }

    private func scheduleRetry() {
        guard !closed, retry == nil else { return }
        let delay = backoff
        backoff = min(backoff * 2, Self.lastRetryNanoseconds)
        retry = loop.dbusTimer(afterNanoseconds: delay) { [weak self] in
            self?.retry = nil
            self?.connect()
        }
    }

    private func attach(_ c: DBusConnection) {
        c.onMessage = { [weak self] m in self?.received(m) }
        // The session bus's loss is audiod's end, which the daemon handles; the system bus's is the link's.
        if kind == .system { c.onDisconnect = { [weak self] in self?.lost() } }
    }

    /// The connection dropped: every follower hears that its name has no owner it can reach.
    private func lost() {
        guard let c = connection else { return }
        connection = nil
        c.onMessage = nil
        // Closed after the dispatch that reported the loss has returned.
        loop.dbusSoon { c.close() }
        guard kind == .system, !closed else { return }
        // A bus that stayed up a while starts the backoff afresh; one that drops at once keeps backing off.
        if Self.monotonic() &- connectedAt > 10_000_000_000 { backoff = Self.firstRetryNanoseconds }
        downReason = Self.lostReason
        logger.warning(
            "the system bus connection was lost: the screen counts as unlocked, a sleep in progress ends, modem calls end without resuming anyone; reconnecting"
        )
        for w in watches { w.value?.linkLost() }
        for h in lostHandlers { h() }
        scheduleRetry()
    }

    /// Stops following and closes the connection (the session bus's is closed by its owner).
    public func close() {
        closed = true
        retry?.cancel()
        retry = nil
        watches.removeAll()
        signalHandlers.removeAll()
        upHandlers.removeAll()
        lostHandlers.removeAll()
        if kind == .system {
            connection?.onMessage = nil
            connection?.close()
        }
        connection = nil
    }

    // MARK: Followers

    /// A watch of `name`'s owner on this bus, with `signals` (match rules) added while the link is up. Call `start`.
    /// `speakers`: for a platform name whose owner audiod believes (a call, the ring/silent profile, a game), the
    /// Flatpak app ids that may own it from a sandbox; an owner is believed only on the host or as one of these
    /// (or of `trustedAppIDs`). Nil: whoever owns the name is its owner.
    public func follow(_ name: String, signals: [String] = [], speakers: Set<String>? = nil) -> NameWatch {
        watches.removeAll { $0.value == nil }
        let w = NameWatch(name: name, link: self, signals: signals, speakers: speakers)
        watches.append(Weak(w))
        return w
    }

    /// Every name under `namespace` (`org.mpris.MediaPlayer2` covers `org.mpris.MediaPlayer2.vlc`): `changed(name,
    /// old owner, new owner)` on each change of owner, matched with `arg0namespace`.
    public func followNamespace(_ namespace: String, _ changed: @escaping (String, String, String) -> Void) {
        let rule =
            "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0namespace='\(namespace)'"
        namespaces.append((namespace, rule, changed))
        connection?.addMatch(rule)
    }

    /// Every signal that reaches the connection (through some follower's match), after the bus's own were taken.
    /// The handler checks who sent it.
    public func onSignal(_ handler: @escaping (DBusMessage) -> Void) { signalHandlers.append(handler) }

    /// A line of the log for a follower (a refused owner).
    func say(_ line: String) { logger.notice("\(line)") }

    /// Runs when the connection comes (again) — for the system bus, after a loss.
    public func onUp(_ handler: @escaping () -> Void) { upHandlers.append(handler) }

    /// Runs when the connection is lost (the system bus only), after every watch has heard of it.
    public func onLost(_ handler: @escaping () -> Void) { lostHandlers.append(handler) }

    private func received(_ m: DBusMessage) {
        switch m.kind {
        case .methodCall:
            onMethodCall?(m)
        case .signal:
            if m.interface == "org.freedesktop.DBus", m.member == "NameOwnerChanged" {
                // Only the bus driver speaks for the bus.
                guard m.isFromBus, m.signature == "sss" else { return }
                let a = m.arguments
                guard a.count == 3, let name = a[0].stringValue, let old = a[1].stringValue, let new = a[2].stringValue
                else { return }
                for w in watches where w.value?.name == name { w.value?.ownerChanged(old: old, new: new) }
                for n in namespaces where name == n.namespace || name.hasPrefix(n.namespace + ".") {
                    n.changed(name, old, new)
                }
                return
            }
            for h in signalHandlers { h(m) }
        default:
            break
        }
    }

    /// A call to the bus driver itself.
    func busCall(_ member: String, _ args: [DBusValue], _ reply: @escaping (DBusMessage?) -> Void) {
        guard let connection,
            let m = DBusMessage.methodCall(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: member)
        else { return reply(nil) }
        m.append(args)
        connection.call(m, timeoutMilliseconds: 5_000) { r in reply(r?.kind == .methodReturn ? r : nil) }
    }
}

/// Follows one name on one bus, in the shape of GLib's `g_bus_watch_name`: its owner appears and vanishes, signals
/// are believed only from the current owner, and every call goes to the owner's unique name — never to a well-known
/// name, so no call can start a service — with NO_AUTO_START; an answer from a previous owner (or from before the bus
/// was lost) is dropped. Confined to the loop thread.
public final class NameWatch {
    public enum Loss: Sendable {
        /// The name lost its owner (the service stopped or gave it up).
        case released
        /// The bus connection was lost: the service may still be running.
        case busLost
    }

    public let name: String
    /// The owner's unique name while there is one.
    public private(set) var owner: String?
    public var onAppeared: ((String) -> Void)?
    public var onVanished: ((Loss) -> Void)?
    /// Why the name's current owner is not believed (empty while it is, or while there is none): it is then not the
    /// owner here — no signal of it is believed, no call goes to it.
    public private(set) var refused = ""
    /// Whose voice the name carries (`BusLink.follow`'s `speakers`): nil, anyone's.
    private let speakers: Set<String>?
    /// Owners refused, said once each in the log.
    private var refusedOwners: Set<String> = []
    /// Weak: the link outlives its watches in the daemon, and a watch must not trap if it does not.
    private weak var link: BusLink?
    private let signalRules: [String]
    private let ownerRule: String
    /// Bumped when the owner changes or the bus is lost: answers to older calls are dropped.
    public private(set) var generation = 0
    private var started = false

    init(name: String, link: BusLink, signals: [String], speakers: Set<String>?) {
        self.name = name
        self.link = link
        self.speakers = speakers
        signalRules = signals
        ownerRule =
            "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='\(name)'"
    }

    deinit {
        guard started, let c = link?.connection else { return }
        c.removeMatch(ownerRule)
        for r in signalRules { c.removeMatch(r) }
    }

    /// Adds the matches and asks who owns the name now (again whenever the bus comes back).
    public func start() {
        guard !started else { return }
        started = true
        linkUp()
    }

    /// Whether `sender` is the current owner.
    public func isOwner(_ sender: String?) -> Bool { sender != nil && sender == owner }

    func linkUp() {
        guard started, let link, let c = link.connection else { return }
        c.addMatch(ownerRule)
        for r in signalRules { c.addMatch(r) }
        let mine = generation
        link.busCall("GetNameOwner", [.string(name)]) { [weak self] r in
            guard let self, self.generation == mine, self.owner == nil, self.checking == nil else { return }
            guard case .string(let unique)? = r?.arguments.first, !unique.isEmpty else { return }
            self.appeared(unique)
        }
    }

    func linkLost() {
        generation += 1
        checking = nil
        refused = ""
        guard owner != nil else { return }
        owner = nil
        onVanished?(.busLost)
    }

    func ownerChanged(old: String, new: String) {
        guard started else { return }
        checking = nil
        refused = ""
        if owner != nil {
            owner = nil
            generation += 1
            onVanished?(.released)
        } else {
            generation += 1
        }
        if !new.isEmpty { appeared(new) }
    }

    /// The owner being checked (`speakers`), until the bus says who it is.
    private var checking: String?

    private func appeared(_ unique: String, attempt: Int = 1) {
        guard let speakers, let link else { return believe(unique) }
        generation += 1
        let mine = generation
        checking = unique
        link.busCall("GetConnectionUnixProcessID", [.string(unique)]) { [weak self] r in
            guard let self, self.generation == mine, self.checking == unique else { return }
            var pid: UInt32?
            if case .uint32(let p)? = r?.arguments.first { pid = p }
            // No answer (a busy bus at login timed out): asked again before the owner is refused for good.
            if r == nil, attempt < 3 { return self.appeared(unique, attempt: attempt + 1) }
            self.checking = nil
            guard let why = Self.refusal(of: pid, speakers: speakers.union(link.trustedAppIDs), name: self.name) else {
                self.refused = ""
                return self.believe(unique)
            }
            self.refused = why
            if self.refusedOwners.count < 64, self.refusedOwners.insert(unique).inserted {
                link.say("\(self.name) is owned by \(why): not believed (no call, lock or profile it announces counts)")
            }
        }
    }

    private func believe(_ unique: String) {
        owner = unique
        generation += 1
        onAppeared?(unique)
    }

    /// Why the owner with `pid` may not speak for `name`; nil when it may: a host process, or a sandboxed app whose
    /// Flatpak id is one of `speakers`. A sandbox without an app id is refused.
    static func refusal(of pid: UInt32?, speakers: Set<String>, name: String) -> String? {
        guard let pid else { return "a connection whose process the bus does not name" }
        switch ProcessTable.place(of: pid) {
        case .host: return nil
        case .gone: return "pid \(pid), which has exited"
        case .sandboxed(let app?, let why):
            if speakers.contains(app) { return nil }
            return "pid \(pid), a sandboxed app (\(app), \(why)) that is not \(name)'s own"
        case .sandboxed(nil, let why):
            return "pid \(pid), a sandboxed process (\(why)) with no app id"
        }
    }

    /// A method call to the current owner. `reply` gets the answer (an error reply included; nil when nothing
    /// came) — unless the owner changed or the bus was lost meanwhile, or there is no owner: then it is not called
    /// (an answer carrying a descriptor is closed with the message).
    public func call(
        _ path: String, _ interface: String, _ member: String, _ args: [DBusValue] = [],
        timeoutMilliseconds: Int32 = 5_000, _ reply: @escaping (DBusMessage?) -> Void = { _ in }
    ) {
        guard let owner, let c = link?.connection,
            let m = DBusMessage.methodCall(destination: owner, path: path, interface: interface, member: member)
        else { return }
        m.setNoAutoStart()
        guard m.append(args) else { return }
        let mine = generation
        c.call(m, timeoutMilliseconds: timeoutMilliseconds) { [weak self] r in
            guard let self, self.generation == mine else { return }
            reply(r)
        }
    }
}

final class Weak<T: AnyObject> {
    weak var value: T?
    init(_ value: T) { self.value = value }
}

func getenvString(_ name: String) -> String? {
    guard let p = getenv(name) else { return nil }
    return String(cString: p)
}
