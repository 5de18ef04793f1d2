import AudioPolicy
import DBusTransport
import Dispatch
import FoundationEssentials
import Glibc
import Logging
import Platform

/// What the service needs from the daemon: the engine and its step (`PlatformHost`), and a few facts about
/// processes. (`AudiodCore.Arbiter` provides it; the service never sees libpulse.) Every step's effects reach
/// `AudioSessionService.publish`.
public protocol PolicyHost: PlatformHost {
    func makeRequestID() -> RequestID
    /// `ServerName`, or nil while not connected.
    var connectedServerName: String? { get }
    /// False once audiod has begun to stop: nothing new is decided (calls are answered `ShuttingDown`).
    var acceptsRequests: Bool { get }
    /// The pid, its parent, grandparent… (empty when it does not exist).
    func processChain(_ pid: UInt32) -> [UInt32]
    /// The real uid of a live process.
    func processOwner(_ pid: UInt32) -> UInt32?
    /// A live process's start time (clock ticks since boot): with the pid, it names the process across a restart.
    func processStartTime(_ pid: UInt32) -> UInt64?
    /// The host pid of what the process `viewer` calls `pid` (it may live in a pid namespace of its own); nil when
    /// there is no such process.
    func hostPid(_ pid: UInt32, seenBy viewer: UInt32) -> UInt32?
    /// Calls `handler` once when the process exits; the returned token stops the watch when released.
    func watchExit(of pid: UInt32, _ handler: @escaping () -> Void) -> AnyObject?
    /// Re-reads the config file and hands its settings to the engine (`Reload`, SIGHUP).
    func reloadConfig() -> ConfigReload
}

/// What re-reading the config file came to.
public enum ConfigReload: Equatable, Sendable {
    /// The file's settings are in force; nil: there is no config file, and the built-in settings are.
    case reloaded(file: String?)
    /// The file is broken (the message names file, line and key); the settings in force stay.
    case invalid(String)
}

/// org.audiod.AudioSession1 on a bus connection: every method, property and signal of docs/API.md, served from the
/// interface tables (ServiceTables.swift). Who owns which session is `owners`' (in the platform target); what the
/// platform says (players, calls, the lock screen, sleep…) is `platform`'s. Confined to the loop thread, like the
/// connection and the engine.
public final class AudioSessionService {
    public static let version = Release.version

    let bus: DBusConnection
    weak var host: PolicyHost?
    var logger: Logger
    let limits: Limits
    /// The uid audiod runs as: audiod-wide writes belong to it (`Access.user`).
    private let ownUID = getuid()

    /// Calls waiting for the engine's reply, and answers held behind them (ReplyOrder.swift).
    private var order = ReplyOrder()
    /// Who owns which session, followed to its going (in the platform target: the API server keeps none of it).
    let owners: SessionOwners
    private var lastServerName: String?
    /// Every session's properties as the bus last saw them (`InterfacesAdded`, `PropertiesChanged`), and the
    /// manager's: what `Get` and `GetAll` answer, and which session objects exist on the bus.
    private(set) var publishedSessions: [SessionID: SessionView] = [:]
    /// Where each session property sits in `SessionView.property(at:)`, by name (read from the first view).
    private(set) var sessionPropertySlots: [String: Int] = [:]
    private(set) var publishedManager: [String: DBusValue] = [:]
    /// Every source of the desktop and the phone, and the bus links they are followed on.
    public let platform: Platform
    /// Gets the `lifetime=process` sessions whenever they change (ProcessSessions.swift): what the daemon keeps
    /// beside the journal for its next run.
    public var onProcessSessions: (([KeptProcessSession]) -> Void)?
    /// What `onProcessSessions` got last, and those sessions' ids.
    var lastKeptProcessSessions: [KeptProcessSession] = [] {
        didSet {
            keptProcessSessionIDs = Set(publishedSessions.keys.filter { owners.owner(of: $0)?.lifetime == .process })
        }
    }
    private(set) var keptProcessSessionIDs: Set<SessionID> = []

    public init(bus: DBusConnection, host: PolicyHost, limits: Limits = Limits(), logger: Logger) {
        self.bus = bus
        self.host = host
        self.limits = limits
        self.logger = logger
        publishedManager = Dictionary(
            host.engine.managerProperties.map(Self.value), uniquingKeysWith: { _, last in last })
        publishedManager["ServerName"] = .string(host.connectedServerName ?? "")
        publishedManager["ServerConnected"] = .bool(host.connectedServerName != nil)
        lastServerName = host.connectedServerName
        platform = Platform(session: bus, host: host, logger: logger)
        owners = SessionOwners(link: platform.sessionLink, host: host, logger: logger) { [weak host] pid, exited in
            host?.watchExit(of: pid, exited)
        }
        platform.sessionLink.onMethodCall = { [weak self] m in self?.methodCall(m) }
    }

    /// Starts following MPRIS players: their status feeds the engine, its Pause/Play reach them.
    public func followMediaPlayers() { platform.followMediaPlayers(maximumPlayers: limits.players) }

    /// Starts following GameMode: its registered games are game evidence (SPEC §7).
    public func followGameMode() { platform.followGameMode() }

    /// Starts following the platform (SPEC §10): calls, feedbackd, and on the system bus ModemManager and logind.
    public func followPlatform(systemBusAddress: String? = nil) {
        platform.followPlatform(systemBusAddress: systemBusAddress)
    }

    /// Owns the well-known name (after the objects are ready: owning it is what "ready" means for systemd).
    public func claimName() throws(DBusError) {
        try bus.requestName(API.busName)
    }

    /// Gives the well-known name up and writes what is still queued for the bus, waiting at most `nanoseconds`
    /// (the last phase of stopping, after the streams are restored: a bus daemon that reads nothing must not keep
    /// audiod from exiting).
    public func releaseName(within nanoseconds: UInt64 = 1_000_000_000) {
        bus.releaseName(API.busName)
        bus.flush(within: nanoseconds)
    }

    /// Ends the service on the loop thread: player and process watches stop, and the connection closes without
    /// writing anything more.
    public func close() {
        platform.close()
        owners.close()
        bus.onMessage = nil
        bus.close()
    }

    // MARK: Incoming

    /// `args` are taken when the answer leaves, not when it is made: a `Get` held behind an earlier call's reply
    /// shows what that call's step published.
    func reply(_ m: DBusMessage, _ args: @escaping @autoclosure () -> [DBusValue], request: UInt64? = nil) {
        guard !m.noReply else { return }
        deliver(request) { [weak self] in
            guard let self, !self.bus.reply(to: m, args()) else { return }
            let e = DBusError.failed("audiod could not encode its reply")
            self.bus.replyError(to: m, name: e.name, message: e.message)
        }
    }

    func fail(_ m: DBusMessage, _ e: DBusError, request: UInt64? = nil) {
        guard !m.noReply else { return }
        deliver(request) { [weak self] in self?.bus.replyError(to: m, name: e.name, message: e.message) }
    }

    /// Sends an answer in the order of the calls: after the replies of every engine request made before it. A
    /// pipelined `Get` that follows a `SetActive` is answered after it — and after the signals of its step, so that it
    /// shows what they announced — not before, while the step's stream operations are still on their way.
    /// `request`: the order of the engine request this answers (nil: an answer made now, after every request so far).
    private func deliver(_ request: UInt64?, _ send: @escaping () -> Void) {
        for s in order.deliver(request, send) { s() }
    }

    private func releaseHeld() {
        for s in order.released() { s() }
    }

    /// Answers a call whose arguments passed the signature check but did not decode (the tables' guards): every
    /// call gets an answer, even on a path that cannot be reached today.
    func unreadable(_ c: VTable.Call) {
        fail(
            c.message,
            Self.invalidArgs(
                "audiod could not read the arguments of \(c.message.member ?? "this call") (\(c.message.signature))"))
    }

    /// The most bytes of arguments a call to audiod may carry: every bound of a call's content (16 options, names of
    /// 255 bytes) fits many times over.
    static let maximumArgumentBytes = 64 * 1024

    static func invalidArgs(_ message: String) -> DBusError {
        DBusError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: message)
    }

    private static func dbusError(_ e: PolicyError) -> DBusError {
        DBusError(name: e.isAudiodError ? API.errorPrefix + e.name : e.name, message: e.message)
    }

    private func methodCall(_ m: DBusMessage) {
        let path = m.path ?? "/"
        let member = m.member ?? ""
        let tables: [VTable]
        var session: SessionID?
        if path == API.managerPath {
            tables = Self.managerTables
        } else if let id = Self.sessionID(path: path), publishedSessions[id] != nil {
            tables = Self.sessionTables
            session = id
        } else if path == "/" || (API.managerPath + "/session").hasPrefix(path)
            || objectPaths().contains(where: { $0.hasPrefix(path + "/") })
        {
            // An intermediate node: only introspection (so that tools can walk the tree from "/").
            if member == "Introspect", m.interface == nil || m.interface == API.introspectable.name {
                return reply(
                    m, [.string(API.introspection(interfaces: [API.introspectable], children: self.children(of: path)))]
                )
            }
            return fail(
                m,
                DBusError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "\(path) only offers Introspect"))
        } else {
            return fail(m, DBusError(name: "org.freedesktop.DBus.Error.UnknownObject", message: "no object at \(path)"))
        }
        let table: VTable
        if let name = m.interface {
            guard let t = tables.first(where: { $0.name == name }) else {
                return fail(
                    m,
                    DBusError(
                        name: "org.freedesktop.DBus.Error.UnknownInterface",
                        message:
                            "\(path) has no interface \(name); it has \(tables.map(\.name).joined(separator: ", "))"))
            }
            table = t
        } else {
            guard let t = tables.first(where: { $0.method(member) != nil }) else {
                return fail(
                    m,
                    DBusError(
                        name: "org.freedesktop.DBus.Error.UnknownMethod", message: "no method \(member) at \(path)"))
            }
            table = t
        }
        guard let method = table.method(member) else {
            return fail(
                m,
                DBusError(
                    name: "org.freedesktop.DBus.Error.UnknownMethod",
                    message:
                        "\(table.name) has no method \(member); it has \(table.methods.map(\.name).joined(separator: ", "))"
                ))
        }
        guard m.signature == method.inputSignature else {
            return fail(
                m,
                Self.invalidArgs(
                    "\(member) takes (\(method.inputSignature)), not (\(m.signature))"))
        }
        // Counted before anything is decoded: any peer may send a message as large as the bus allows (libdbus has
        // validated it by now, ~1 ms per MB), and decoding a dictionary of a million entries would hold the loop for
        // everyone.
        let bytes = m.argumentBytes(upTo: Self.maximumArgumentBytes)
        guard bytes <= Self.maximumArgumentBytes else {
            return fail(
                m,
                Self.limitExceeded(
                    "\(member)'s arguments are over \(Self.maximumArgumentBytes) bytes (audiod's calls take under 4 KB); nothing of them was read"
                ))
        }
        if method.decides, host?.acceptsRequests != true { return fail(m, Self.shuttingDown) }
        let call = VTable.Call(message: m, args: m.arguments, session: session)
        if allowedNow(m, method.access, session) { return method.handler(self, call) }
        authorize(m, method.access, session) { [weak self] in
            guard let self else { return }
            method.handler(self, call)
        }
    }

    /// The calls `authorize` would let through at once — open methods, and a session's owner calling it — run
    /// without the closure it takes (they are nearly every call); the rest go through it.
    private func allowedNow(_ m: DBusMessage, _ access: InterfaceDescription.Access, _ session: SessionID?) -> Bool {
        switch access {
        case .anyone: return true
        case .owner:
            guard let session else { return true }
            guard let owner = owners.owner(of: session), let sender = m.sender else { return false }
            return sender == owner.busName
        case .user: return false
        }
    }

    // MARK: Requests into the engine

    /// Sends a request event; the engine's reply (through `publish`) answers `m` with `encode`'s arguments.
    @discardableResult
    func request(
        _ m: DBusMessage, encode: @escaping (Reply) -> [DBusValue]? = { _ in [] },
        _ make: (RequestID) -> Event
    ) -> [Effect] {
        guard let host, host.acceptsRequests else {
            fail(m, Self.shuttingDown)
            return []
        }
        let r = host.makeRequestID()
        order.expect(r, m, encode: encode)
        let effects = host.handle(make(r))
        // A request the engine did not answer would hang the caller: never let that happen silently. (The answer
        // itself may be published a little later, after the step's stream operations have left.)
        let answered = effects.contains { if case .reply(r, _) = $0 { return true } else { return false } }
        if !answered, let p = order.take(r) {
            fail(m, .failed("audiod did not decide this request"), request: p.order)
        }
        return effects
    }

    /// Carries out the engine's effects on the bus: replies, signals, objects and property changes. Call with every
    /// step's effects, in order.
    public func publish(_ effects: [Effect]) {
        defer { platform.carryOut(effects) }
        defer { if onProcessSessions != nil, touchesProcessSession(effects) { processSessionsMayHaveChanged() } }
        for e in effects {
            switch e {
            case .reply(let r, let answer):
                guard let p = order.take(r) else { continue }
                if case .error(let pe) = answer {
                    fail(p.message, Self.dbusError(pe), request: p.order)
                } else if let args = p.encode(answer) {
                    reply(p.message, args, request: p.order)
                }
                releaseHeld()
            case .sessionAdded(let view):
                if view.isImplicit { owners.watchImplicit(view.id, pid: view.processID) }
                if sessionPropertySlots.isEmpty {
                    for (i, p) in view.properties.enumerated() { sessionPropertySlots[p.name] = i }
                }
                publishedSessions[view.id] = view
                emit(
                    API.managerPath, API.objectManager.name, "InterfacesAdded",
                    [
                        .objectPath(Self.sessionPath(view.id)), sessionInterfaces(view.id),
                    ])
            case .sessionRemoved(let id):
                owners.forget(id)
                publishedSessions[id] = nil
                emit(
                    API.managerPath, API.objectManager.name, "InterfacesRemoved",
                    [
                        .objectPath(Self.sessionPath(id)),
                        .strings(Self.sessionTables.map(\.name)),
                    ])
            case .signal(let id, let s):
                emitSignal(id, s)
            case .sessionPropertiesChanged(let id, let changed):
                publishedSessions[id]?.apply(changed)
                emit(
                    Self.sessionPath(id), API.properties.name, "PropertiesChanged",
                    [
                        .string(API.session.name), .properties(changed.map(Self.value)), .strings([]),
                    ])
            case .managerPropertiesChanged(let props):
                let changed = props.map(Self.value)
                for (name, v) in changed { publishedManager[name] = v }
                emit(
                    API.managerPath, API.properties.name, "PropertiesChanged",
                    [
                        .string(API.manager.name), .properties(changed), .strings([]),
                    ])
            default:
                continue
            }
        }
    }

    /// Puts the loop thread — the one this service, the engine and the sound-server connection share — at nice
    /// `level` (the config's `nice-level`). Call after `followPlatform`, and again after a reload.
    public func setLoopPriority(nice level: Int32) { platform.setLoopPriority(nice: level) }

    /// The config's `[platform] trusted-apps`: sandboxed apps trusted to own a platform name. Counts for the next
    /// owner a name gets (an owner already refused stays refused until it lets go).
    public func setTrustedPlatformApps(_ ids: [String]) { platform.sessionLink.trustedAppIDs = Set(ids) }

    /// The sound server came or went: `ServerConnected` / `ServerName` changed.
    public func serverStatusChanged() {
        var changed: [(String, DBusValue)] = [("ServerConnected", .bool(host?.connectedServerName != nil))]
        if let name = host?.connectedServerName, name != lastServerName {
            lastServerName = name
            changed.append(("ServerName", .string(name)))
        }
        for (name, v) in changed { publishedManager[name] = v }
        emit(
            API.managerPath, API.properties.name, "PropertiesChanged",
            [
                .string(API.manager.name), .properties(changed), .strings([]),
            ])
    }

    private func emit(_ path: String, _ iface: String, _ member: String, _ args: [DBusValue]) {
        if !bus.emit(path: path, interface: iface, member: member, args) {
            logger.error("could not encode a signal", metadata: ["member": "\(member)"])
        }
    }

    private func emitSignal(_ id: SessionID, _ s: Signal) {
        let (member, args) = Self.signalArguments(s)
        emit(Self.sessionPath(id), API.session.name, member, args)
    }

    // MARK: Properties

    // MARK: Access and bounds

    /// Runs `body` if the caller has `access` (the interface table says which each method and property needs);
    /// answers AccessDenied otherwise.
    func authorize(
        _ m: DBusMessage, _ access: InterfaceDescription.Access, _ session: SessionID?,
        _ body: @escaping () -> Void
    ) {
        switch access {
        case .anyone:
            body()
        case .owner:
            guard let session else { return body() }
            withOwner(m, session, body)
        case .user:
            guard let sender = m.sender else { return fail(m, .failed("a call without a sender")) }
            withCaller(sender, m) { [weak self] caller in
                guard let self else { return }
                guard caller.uid == self.ownUID else {
                    return self.fail(
                        m,
                        DBusError(
                            name: "org.freedesktop.DBus.Error.AccessDenied",
                            message:
                                "\(m.member ?? "this") changes audiod for its user (uid \(self.ownUID)); uid \(caller.uid) may not"
                        ))
                }
                body()
            }
        }
    }

    static let shuttingDown = DBusError(
        name: ErrorName.shuttingDown.busName, message: "audiod is stopping and decides nothing new")

    /// Runs `body` if the caller may change session `id` (docs/API.md: its owner connection; for a `process` session,
    /// any connection of the same user); answers AccessDenied otherwise.
    private func withOwner(_ m: DBusMessage, _ id: SessionID, _ body: @escaping () -> Void) {
        guard let owner = owners.owner(of: id) else {
            return fail(
                m,
                DBusError(
                    name: "org.freedesktop.DBus.Error.AccessDenied",
                    message:
                        "session \(id.rawValue) is an implicit session audiod made for an app; change it with SetApplicationCategory"
                ))
        }
        guard let sender = m.sender else { return fail(m, .failed("a call without a sender")) }
        if sender == owner.busName { return body() }
        guard owner.lifetime == .process else {
            return fail(
                m,
                DBusError(
                    name: "org.freedesktop.DBus.Error.AccessDenied",
                    message: "session \(id.rawValue) belongs to another connection; only its owner may change it"))
        }
        withCaller(sender, m) { [weak self] caller in
            guard caller.uid == owner.uid else {
                self?.fail(
                    m,
                    DBusError(
                        name: "org.freedesktop.DBus.Error.AccessDenied",
                        message: "session \(id.rawValue) belongs to another user"))
                return
            }
            body()
        }
    }

    /// The caller's pid and uid (`GetConnectionCredentials`, cached by `owners`); a failed call if the bus did not say.
    func withCaller(_ sender: String, _ m: DBusMessage, _ body: @escaping (SessionOwners.Caller) -> Void) {
        owners.caller(sender) { [weak self] c in
            guard let c else {
                self?.fail(m, .failed("the bus did not say which process is calling"))
                return
            }
            body(c)
        }
    }
}
