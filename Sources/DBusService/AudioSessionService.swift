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
/// interface tables (ServiceTables.swift), and who owns which session. What the platform says (players, calls, the
/// lock screen, sleep…) is `platform`'s. Confined to the loop thread, like the connection and the engine.
public final class AudioSessionService {
    public static let version = Release.version

    let bus: DBusConnection
    weak var host: PolicyHost?
    var logger: Logger
    let limits: Limits
    /// The uid audiod runs as: audiod-wide writes belong to it (`Access.user`).
    private let ownUID = getuid()

    private struct Caller {
        var pid: UInt32
        var uid: UInt32
    }
    private struct Owner {
        var busName: String
        var uid: UInt32
        var lifetime: NewSession.Lifetime
        var pid: UInt32
    }

    /// Calls waiting for the engine's reply, numbered in the order their requests were made.
    private var pending: [RequestID: (message: DBusMessage, encode: (Reply) -> [DBusValue]?, order: UInt64)] = [:]
    /// The orders of `pending`, ascending.
    private var pendingOrders: [UInt64] = []
    private var requestsMade: UInt64 = 0
    /// Answers that may not leave yet because a request made before them is still waiting for the engine (its reply
    /// leaves once the step's stream operations have): sorted by `key`, sent in that order (`deliver`).
    private var held: [(key: UInt64, send: () -> Void)] = []
    private var owners: [SessionID: Owner] = [:]
    private var sessionsByBusName: [String: Set<SessionID>] = [:]
    /// Each session owner's connection, followed while it owns a session: its going ends its `connection` sessions.
    private var ownerWatches: [String: NameWatch] = [:]
    /// Callers' credentials by unique name (never reused while the bus runs), the oldest forgotten past the bound
    /// unless it owns a session.
    private var credentials: [String: Caller] = [:]
    private var credentialsOrder: [String] = []
    static let maximumCachedCallers = 512
    /// Exit watches by pid, and which sessions care.
    private var exitWatches: [UInt32: AnyObject] = [:]
    private var sessionsByPid: [UInt32: Set<SessionID>] = [:]
    /// Implicit sessions by the pid they were made for: their process's exit ends them at once (POLICY §7).
    private var implicitPids: [SessionID: UInt32] = [:]
    private var lastServerName: String?
    /// Every session's properties as the bus last saw them (`InterfacesAdded`, `PropertiesChanged`), and the
    /// manager's: what `Get` and `GetAll` answer, and which session objects exist on the bus.
    private(set) var publishedSessions: [SessionID: SessionView] = [:]
    /// Where each session property sits in `SessionView.property(at:)`, by name (read from the first view).
    private(set) var sessionPropertySlots: [String: Int] = [:]
    private(set) var publishedManager: [String: DBusValue] = [:]
    /// Every source of the desktop and the phone, and the bus links they are followed on.
    public let platform: Platform

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
        ownerWatches.removeAll()
        exitWatches.removeAll()
        bus.onMessage = nil
        bus.close()
    }

    static func sessionPath(_ id: SessionID) -> String { API.sessionPathPrefix + "\(id.rawValue)" }

    /// The session a path names: the prefix and a number written as `sessionPath` writes it (no sign, no leading
    /// zero). Read byte by byte: every call to a session parses its path.
    static func sessionID(path: String) -> SessionID? {
        let prefix = API.sessionPathPrefix
        guard path.hasPrefix(prefix) else { return nil }
        let digits = path.utf8.dropFirst(prefix.utf8.count)
        guard !digits.isEmpty else { return nil }
        guard digits.first != UInt8(ascii: "0") || digits.count == 1 else { return nil }
        var n: UInt64 = 0
        for c in digits {
            guard c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") else { return nil }
            let (times10, o1) = n.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times10.addingReportingOverflow(UInt64(c - UInt8(ascii: "0")))
            guard !o1, !o2 else { return nil }
            n = sum
        }
        return SessionID(n)
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
        // Ranks: an engine request's answer just after the calls made before it, another answer after every request
        // made before it.
        let key = request.map { $0 * 2 + 1 } ?? requestsMade * 2
        if held.isEmpty, !blocked(key) { return send() }
        let at = held.firstIndex { $0.key > key } ?? held.endIndex
        held.insert((key, send), at: at)
        releaseHeld()
    }

    /// A request made before an answer of this rank is still waiting for the engine.
    private func blocked(_ key: UInt64) -> Bool { pendingOrders.first.map { $0 * 2 + 1 < key } ?? false }

    private func releaseHeld() {
        while let first = held.first, !blocked(first.key) {
            held.removeFirst()
            first.send()
        }
    }

    private func takePending(_ r: RequestID) -> (message: DBusMessage, encode: (Reply) -> [DBusValue]?, order: UInt64)?
    {
        guard let p = pending.removeValue(forKey: r) else { return nil }
        if pendingOrders.first == p.order {
            pendingOrders.removeFirst()
        } else if let i = pendingOrders.firstIndex(of: p.order) {
            pendingOrders.remove(at: i)
        }
        return p
    }

    /// Answers a call whose arguments passed the signature check but did not decode (the tables' guards): every
    /// call gets an answer, even on a path that cannot be reached today.
    func unreadable(_ c: VTable.Call) {
        fail(
            c.message,
            Self.invalidArgs(
                "audiod could not read the arguments of \(c.message.member ?? "this call") (\(c.message.signature))"))
    }

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
            guard let owner = owners[session], let sender = m.sender else { return false }
            return sender == owner.busName
        case .user: return false
        }
    }

    private func objectPaths() -> [String] {
        [API.managerPath] + publishedSessions.keys.map(Self.sessionPath)
    }

    func children(of path: String) -> [String] {
        let prefix = path == "/" ? "/" : path + "/"
        var names = Set<String>()
        for p in objectPaths() where p.hasPrefix(prefix) {
            if let first = p.dropFirst(prefix.count).split(separator: "/").first { names.insert(String(first)) }
        }
        return names.sorted { a, b in
            if let x = UInt64(a), let y = UInt64(b) { return x < y }
            return a < b
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
        pending[r] = (m, encode, requestsMade)
        pendingOrders.append(requestsMade)
        requestsMade += 1
        let effects = host.handle(make(r))
        // A request the engine did not answer would hang the caller: never let that happen silently. (The answer
        // itself may be published a little later, after the step's stream operations have left.)
        let answered = effects.contains { if case .reply(r, _) = $0 { return true } else { return false } }
        if !answered, let p = takePending(r) {
            fail(m, .failed("audiod did not decide this request"), request: p.order)
        }
        return effects
    }

    /// Carries out the engine's effects on the bus: replies, signals, objects and property changes. Call with every
    /// step's effects, in order.
    public func publish(_ effects: [Effect]) {
        defer { platform.carryOut(effects) }
        for e in effects {
            switch e {
            case .reply(let r, let answer):
                guard let p = takePending(r) else { continue }
                if case .error(let pe) = answer {
                    fail(p.message, Self.dbusError(pe), request: p.order)
                } else if let args = p.encode(answer) {
                    reply(p.message, args, request: p.order)
                }
                releaseHeld()
            case .sessionAdded(let view):
                if view.isImplicit { watchImplicit(view.id, pid: view.processID) }
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
                forget(id)
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

    /// What audiod follows of the platform (`ListPlatformSources`, `audioctl status`).
    func platformSources() -> [DBusValue] {
        platform.sources().map { row in
            .properties([
                ("name", .string(row.name)), ("bus", .string(row.bus)), ("found", .bool(row.found)),
                ("detail", .string(row.detail)),
            ])
        }
    }

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
        let path = Self.sessionPath(id)
        switch s {
        case .interruptionBegan(let reason, let interrupter):
            var details: [(String, DBusValue)] = []
            if let i = interrupter { details.append(("interrupter", .objectPath(Self.sessionPath(i)))) }
            emit(path, API.session.name, "InterruptionBegan", [.string(reason.rawValue), .properties(details)])
        case .interruptionEnded(let resume):
            emit(path, API.session.name, "InterruptionEnded", [.bool(resume), .properties([])])
        case .silenceSecondaryAudioHint(let type):
            emit(path, API.session.name, "SilenceSecondaryAudioHint", [.string(type.rawValue)])
        case .routeChanged(let reason, let previous, let current):
            var details: [(String, DBusValue)] = []
            if let p = previous { details.append(("previous-device", .string(p))) }
            if let c = current { details.append(("current-device", .string(c))) }
            emit(path, API.session.name, "RouteChanged", [.string(reason.rawValue), .properties(details)])
        }
    }

    // MARK: Properties

    /// A session property as D-Bus carries it: the one mapping from the engine's values to the bus.
    static func value(_ p: SessionProperty) -> (String, DBusValue) {
        switch p {
        case .category(let c): (p.name, .string(c.rawValue))
        case .mode(let m): (p.name, .string(m.rawValue))
        case .options(let o): (p.name, .strings(o.map(\.rawValue)))
        case .active(let b), .interrupted(let b), .mixable(let b), .secondaryAudioShouldBeSilencedHint(let b),
            .otherAudioPlaying(let b), .handlesSecondaryAudio(let b), .prefersNoInterruptionsFromSystemAlerts(let b):
            (p.name, .bool(b))
        case .applicationName(let s): (p.name, .string(s))
        case .processID(let pid): (p.name, .uint32(pid))
        case .streams(let s), .recordStreams(let s): (p.name, .array(element: "u", s.map { .uint32($0) }))
        case .identity(let i):
            (
                p.name,
                .properties([
                    ("app-id", .string(i.appID)), ("source", .string(i.source)),
                    ("desktop-entry", .string(i.desktopEntry)), ("category-reason", .string(i.categoryReason.text)),
                ])
            )
        }
    }

    static func value(_ p: ManagerProperty) -> (String, DBusValue) {
        switch p {
        case .silentMode(let b), .otherAudioPlaying(let b): (p.name, .bool(b))
        case .primaryAudioSession(let s): (p.name, .objectPath(s.map(sessionPath) ?? "/"))
        case .duckLevel(let d): (p.name, .double(d))
        case .callState(let c): (p.name, .string(c.rawValue))
        case .screenLocked(let b): (p.name, .bool(b))
        }
    }

    /// A session object's interfaces and their properties (`InterfacesAdded`, `GetManagedObjects`).
    private func sessionInterfaces(_ id: SessionID) -> DBusValue {
        .dict(
            key: "s", value: "a{sv}", Self.sessionTables.map { t in (.string(t.name), .properties(t.values(self, id))) }
        )
    }

    func managedObjects() -> DBusValue {
        .dict(
            key: "o", value: "a{sa{sv}}",
            publishedSessions.keys.sorted().map { id in
                (.objectPath(Self.sessionPath(id)), sessionInterfaces(id))
            })
    }

    // MARK: Manager methods

    func setApplicationCategory(_ c: VTable.Call) {
        guard let host else { return fail(c.message, Self.shuttingDown) }
        guard let app = c.args[0].stringValue, let category = c.args[1].stringValue,
            let mode = c.args[2].stringValue, let opts = c.args[3].stringArray
        else { return unreadable(c) }
        guard !app.isEmpty else { return fail(c.message, Self.invalidArgs("the application name must not be empty")) }
        if let e = nameTooLong(app, "the application name") ?? tooManyOptions(opts) { return fail(c.message, e) }
        if !host.engine.applicationRules.contains(where: { $0.application == app }),
            host.engine.applicationRules.count >= limits.rules
        {
            return fail(
                c.message,
                Self.limitExceeded(
                    "audiod holds \(limits.rules) application rules, its limit; remove one first (RemoveApplicationCategory)"
                ))
        }
        request(c.message) {
            .setApplicationCategory($0, application: app, category: category, mode: mode, options: opts)
        }
    }

    static func ruleEntry(_ r: ApplicationRule) -> DBusValue {
        var entry: [(String, DBusValue)] = [
            ("application", .string(r.application)), ("category", .string(r.configuration.category.rawValue)),
            ("mode", .string(r.configuration.mode.rawValue)),
            ("options", .strings(r.configuration.options.map(\.rawValue))), ("source", .string(r.source.rawValue)),
        ]
        if let file = r.file { entry.append(("file", .string(file))) }
        if let line = r.line { entry.append(("line", .uint32(UInt32(clamping: line)))) }
        return .properties(entry)
    }

    static func streamEntry(_ s: StreamView) -> DBusValue {
        .properties([
            ("index", .uint32(s.info.id.index)),
            ("kind", .string(s.info.id.kind.rawValue)),
            ("pid", .uint32(s.info.pid ?? 0)),
            ("application-name", .string(s.info.applicationName)),
            ("media-role", .string(s.info.role ?? "")),
            ("session", .objectPath(s.session.map(sessionPath) ?? "/")),
            ("policy-muted", .bool(s.policyMuted)),
            ("duck-factor", .double(s.duckFactor)),
            ("corked", .bool(s.info.corked)),
            ("user-muted", .bool(s.userMuted)),
            ("device", .string(s.info.device)),
            ("audible", .bool(s.audible)),
            ("policy-reasons", .strings(s.reasons.map(\.text))),
        ])
    }

    func createSession(_ m: DBusMessage, _ hints: [String: DBusValue]) {
        // Types first: a hint of the wrong type is InvalidArgs, whatever else is wrong.
        var name = ""
        if let v = hints["application-name"] {
            guard let s = v.stringValue else {
                return fail(m, Self.invalidArgs("hint 'application-name' must be a string (s), not \(v.signature)"))
            }
            if let e = nameTooLong(s, "hint 'application-name'") { return fail(m, e) }
            name = s
        }
        var pidHint: UInt32?
        if let v = hints["pid"] {
            guard let p = v.uint32Value else {
                return fail(
                    m, Self.invalidArgs("hint 'pid' must be an unsigned 32-bit integer (u), not \(v.signature)"))
            }
            pidHint = p
        }
        var lifetime = NewSession.Lifetime.connection
        if let v = hints["lifetime"] {
            guard let s = v.stringValue else {
                return fail(m, Self.invalidArgs("hint 'lifetime' must be a string (s), not \(v.signature)"))
            }
            guard let l = NewSession.Lifetime(rawValue: s) else {
                return fail(m, Self.invalidArgs("lifetime '\(s)' is not one of connection, process"))
            }
            lifetime = l
        }
        guard let sender = m.sender else { return fail(m, .failed("a call without a sender")) }
        if let e = sessionLimitReached(sender) { return fail(m, e) }
        withCaller(sender, m) { [weak self] caller in
            guard let self else { return }
            guard let host = self.host else { return self.fail(m, Self.shuttingDown) }
            // Checked again: calls queued behind the credentials look-up all passed the first check.
            if let e = self.sessionLimitReached(sender) { return self.fail(m, e) }
            // A caller in a sandbox names pids as its pid namespace numbers them; the bus gives its host pid.
            guard let pid = pidHint.map({ host.hostPid($0, seenBy: caller.pid) }) ?? caller.pid, pid > 0,
                let uid = host.processOwner(pid)
            else {
                return self.fail(
                    m,
                    DBusError(
                        name: ErrorName.noSuchProcess.busName, message: "no process has pid \(pidHint ?? caller.pid)"))
            }
            guard uid == caller.uid else {
                return self.fail(
                    m,
                    DBusError(
                        name: "org.freedesktop.DBus.Error.AccessDenied",
                        message: "pid \(pid) belongs to another user; a session may only hold your own processes"))
            }
            if pidHint != nil, let why = self.captureRefusal(pid, named: pidHint ?? pid) {
                return self.fail(m, Self.invalidArgs(why))
            }
            let owner = Owner(busName: sender, uid: caller.uid, lifetime: lifetime, pid: pid)
            let effects = self.request(
                m,
                encode: { reply in
                    guard case .session(let id) = reply else { return [] }
                    return [.objectPath(Self.sessionPath(id))]
                }
            ) { .createSession($0, NewSession(pid: pid, applicationName: name, lifetime: lifetime)) }
            // Owned from the step that made it (its reply may be published later), so that the limit counts it.
            for case .reply(_, .session(let id)) in effects { self.adopt(id, owner: owner) }
        }
    }

    /// Why a pid hint names a process no app is (docs/API.md `CreateSession`): a session for it would hold every
    /// stream its descendants play — all of the user's, or the system's. Nil when the pid may be held.
    private func captureRefusal(_ pid: UInt32, named: UInt32) -> String? {
        let tail =
            "; a session holds an app's own process and its children (to set how an app is treated, use SetApplicationCategory)"
        if pid == 1 {
            return "pid \(named) is PID 1, the init system: a session for it would hold every stream on the system"
                + tail
        }
        if Self.isServiceManager(pid) {
            return
                "pid \(named) is your service manager (systemd --user): a session for it would hold every stream you play"
                + tail
        }
        if platform.isSessionLeader(pid) {
            return
                "pid \(named) is the leader of one of your login sessions: a session for it would hold every stream you play"
                + tail
        }
        let me = UInt32(getpid())
        if pid == me { return "pid \(named) is audiod itself" + tail }
        if host?.processChain(me).dropFirst().contains(pid) == true {
            return
                "pid \(named) is an ancestor of audiod: a session for it would hold every stream audiod's siblings play"
                + tail
        }
        return nil
    }

    /// A user's `systemd --user`: its cgroup is `…/user@UID.service/init.scope`.
    static func isServiceManager(_ pid: UInt32) -> Bool {
        guard let fd = fopen("/proc/\(pid)/cgroup", "r") else { return false }
        defer { fclose(fd) }
        var line = [CChar](repeating: 0, count: 4096)
        while fgets(&line, Int32(line.count), fd) != nil {
            let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let parts = text.split(separator: "\n").first?.split(separator: "/") ?? []
            if parts.count >= 2, parts[parts.count - 1] == "init.scope", parts[parts.count - 2].hasPrefix("user@"),
                parts[parts.count - 2].hasSuffix(".service")
            {
                return true
            }
        }
        return false
    }

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

    private static func limitExceeded(_ message: String) -> DBusError {
        DBusError(name: ErrorName.limitExceeded.busName, message: message)
    }

    private func sessionLimitReached(_ sender: String) -> DBusError? {
        guard sessionsByBusName[sender, default: []].count >= limits.sessionsPerConnection else { return nil }
        return Self.limitExceeded(
            "this connection owns \(limits.sessionsPerConnection) sessions, the limit per connection; release one first"
        )
    }

    func nameTooLong(_ s: String, _ what: String) -> DBusError? {
        guard s.utf8.count > limits.nameBytes else { return nil }
        return Self.limitExceeded("\(what) has \(s.utf8.count) bytes; at most \(limits.nameBytes) are accepted")
    }

    func tooManyOptions(_ o: [String]) -> DBusError? {
        guard o.count > limits.options else { return nil }
        return Self.limitExceeded("\(o.count) options given; at most \(limits.options) are accepted")
    }

    /// Runs `body` if the caller may change session `id` (docs/API.md: its owner connection; for a `process` session,
    /// any connection of the same user); answers AccessDenied otherwise.
    private func withOwner(_ m: DBusMessage, _ id: SessionID, _ body: @escaping () -> Void) {
        guard let owner = owners[id] else {
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

    /// The caller's pid and uid (`GetConnectionCredentials`), cached per connection.
    private func withCaller(_ sender: String, _ m: DBusMessage, _ body: @escaping (Caller) -> Void) {
        if let c = credentials[sender] { return body(c) }
        guard
            let q = DBusMessage.methodCall(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "GetConnectionCredentials")
        else { return fail(m, .failed("cannot ask the bus who is calling")) }
        q.append([.string(sender)])
        bus.call(q, timeoutMilliseconds: 5_000) { [weak self] r in
            guard let self else { return }
            guard let r, r.kind == .methodReturn, let map = r.arguments.first?.propertyMap,
                let pid = map["ProcessID"]?.uint32Value, let uid = map["UnixUserID"]?.uint32Value
            else { return self.fail(m, .failed("the bus did not say which process is calling")) }
            let c = Caller(pid: pid, uid: uid)
            self.remember(sender, c)
            body(c)
        }
    }

    private func remember(_ sender: String, _ c: Caller) {
        if credentials.updateValue(c, forKey: sender) == nil { credentialsOrder.append(sender) }
        guard credentialsOrder.count > Self.maximumCachedCallers else { return }
        if let i = credentialsOrder.firstIndex(where: { sessionsByBusName[$0] == nil }) {
            credentials[credentialsOrder.remove(at: i)] = nil
        }
    }

    // MARK: Owners

    private func adopt(_ id: SessionID, owner: Owner) {
        owners[id] = owner
        sessionsByBusName[owner.busName, default: []].insert(id)
        if ownerWatches[owner.busName] == nil {
            let name = owner.busName
            let w = platform.sessionLink.follow(name)
            w.onVanished = { [weak self] _ in self?.busNameGone(name) }
            ownerWatches[name] = w
            w.start()
        }
        // The caller may have gone between its call and now: ask, so that its session is not kept forever.
        if let q = DBusMessage.methodCall(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "NameHasOwner")
        {
            q.append([.string(owner.busName)])
            bus.call(q, timeoutMilliseconds: 5_000) { [weak self] r in
                if let r, r.kind == .methodReturn, r.arguments.first?.boolValue == false {
                    self?.busNameGone(owner.busName)
                }
            }
        }
        watchPid(owner.pid, id)
    }

    /// An implicit session ends as soon as its process exits, not when its streams have gone and the linger has
    /// passed (a call app that quits gives the music back at once).
    private func watchImplicit(_ id: SessionID, pid: UInt32) {
        guard pid > 0 else { return }
        implicitPids[id] = pid
        watchPid(pid, id)
    }

    private func watchPid(_ pid: UInt32, _ id: SessionID) {
        sessionsByPid[pid, default: []].insert(id)
        if exitWatches[pid] == nil, let host {
            exitWatches[pid] = host.watchExit(of: pid) { [weak self] in self?.processExited(pid) }
        }
    }

    private func unwatchPid(_ pid: UInt32, _ id: SessionID) {
        sessionsByPid[pid]?.remove(id)
        if sessionsByPid[pid]?.isEmpty == true {
            sessionsByPid[pid] = nil
            exitWatches[pid] = nil
        }
    }

    private func forget(_ id: SessionID) {
        if let pid = implicitPids.removeValue(forKey: id) { unwatchPid(pid, id) }
        guard let owner = owners.removeValue(forKey: id) else { return }
        sessionsByBusName[owner.busName]?.remove(id)
        if sessionsByBusName[owner.busName]?.isEmpty == true {
            sessionsByBusName[owner.busName] = nil
            ownerWatches[owner.busName] = nil
        }
        unwatchPid(owner.pid, id)
    }

    private func busNameGone(_ name: String) {
        if let i = credentialsOrder.firstIndex(of: name) { credentials[credentialsOrder.remove(at: i)] = nil }
        guard let ids = sessionsByBusName[name] else { return }
        for id in ids.sorted() where owners[id]?.lifetime == .connection {
            logger.debug("session owner left the bus", metadata: ["session": "\(id.rawValue)", "owner": "\(name)"])
            host?.handle(.ownerVanished(id))
        }
    }

    private func processExited(_ pid: UInt32) {
        exitWatches[pid] = nil
        let ids = sessionsByPid[pid] ?? []
        for id in ids.sorted() where owners[id]?.lifetime == .process {
            logger.debug("session process exited", metadata: ["session": "\(id.rawValue)", "pid": "\(pid)"])
            host?.handle(.ownerVanished(id))
        }
        host?.handle(.processExited(pid: pid))
    }
}
