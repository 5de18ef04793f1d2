import AudioPolicy
import DBusTransport
import Dispatch
import FoundationEssentials
import Glibc
import Logging

/// What the service needs from the daemon: the engine and its step, and a few facts about processes.
/// (`AudiodCore.Arbiter` provides it; the service never sees libpulse.)
public protocol PolicyHost: AnyObject {
    /// The engine's read model. (A copy through the protocol: hot paths ask the questions below instead.)
    var engine: Engine { get }
    /// Whether the session exists: asked for every call to a session object.
    func hasSession(_ id: SessionID) -> Bool
    func makeRequestID() -> RequestID
    /// One engine step. Every step's effects, this one's included, also reach `AudioSessionService.publish`.
    @discardableResult func handle(_ event: Event) -> [Effect]
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

/// org.audiod.AudioSession1 on a bus connection: every method, property and signal of docs/API.md, derived from the
/// interface descriptions. Confined to the loop thread, like the connection and the engine.
public final class AudioSessionService {
    public static let version = Release.version

    let bus: DBusConnection
    weak var host: PolicyHost?
    var logger: Logger
    let limits: Limits
    /// The uid audiod runs as: audiod-wide writes belong to it (`Access.user`).
    private let ownUID = getuid()

    private struct Caller { var pid: UInt32; var uid: UInt32 }
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
    private var credentials: [String: Caller] = [:]
    /// Exit watches by pid, and which sessions care.
    private var exitWatches: [UInt32: AnyObject] = [:]
    private var sessionsByPid: [UInt32: Set<SessionID>] = [:]
    /// Implicit sessions by the pid they were made for: their process's exit ends them at once (POLICY §7).
    private var implicitPids: [SessionID: UInt32] = [:]
    private var lastServerName: String?
    private var mpris: MPRISWatcher?
    private var gameMode: GameModeWatcher?
    private var logind: LogindWatcher?
    /// The system bus (logind, ModemManager), while there is one.
    private var systemBus: DBusConnection?
    private var platformCalls: PlatformCalls?
    /// Call sources on the session bus (GNOME Calls, callaudiod) and on the system bus (ModemManager).
    private var sessionCallSources: [CallSource] = []
    private var systemCallSources: [CallSource] = []
    private var lockAndSleep: LockAndSleep?
    private var feedbackd: Feedbackd?
    /// `Pause` calls sent to players and not yet answered, and who waits for them (sleep waits to release logind's
    /// inhibitor until the players have paused).
    private var pausesInFlight = 0
    private var pauseWaiters: [(players: [PlayerID], run: () -> Void)] = []

    public init(bus: DBusConnection, host: PolicyHost, limits: Limits = Limits(), logger: Logger) {
        self.bus = bus
        self.host = host
        self.limits = limits
        self.logger = logger
        bus.onMessage = { [weak self] m in self?.received(m) }
        bus.addMatch("type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged'")
    }

    /// Starts following MPRIS players: their status feeds the engine, its Pause/Play reach them.
    public func followMediaPlayers() {
        guard mpris == nil, let host else { return }
        let w = MPRISWatcher(bus: bus, host: host, maximumPlayers: limits.players, logger: logger)
        mpris = w
        w.start()
    }

    /// Starts following GameMode: its registered games are game evidence (SPEC §7).
    public func followGameMode() {
        guard gameMode == nil, let host else { return }
        let w = GameModeWatcher(bus: bus, host: host, logger: logger)
        gameMode = w
        w.start()
    }

    /// Starts following the platform (SPEC §10): the calls of GNOME Calls and callaudiod on the session bus, and on
    /// the system bus — when there is one — ModemManager's calls and logind (for `CreateSession`'s check of session
    /// leaders). Every source is optional and followed as it appears and vanishes.
    public func followPlatform(systemBusAddress: String? = nil) {
        guard platformCalls == nil, let host else { return }
        let calls = PlatformCalls(host: host, logger: logger)
        platformCalls = calls
        sessionCallSources = [CallSource.Kind.gnomeCalls, .plasma, .callaudiod].map { CallSource($0, bus: bus, calls: calls, logger: logger) }
        for s in sessionCallSources { s.start() }
        let fb = Feedbackd(bus: bus, host: host, logger: logger)
        feedbackd = fb
        fb.start()
        do {
            let system = try DBusConnection(address: systemBusAddress ?? LogindWatcher.systemBusAddress, loop: bus.loop)
            systemBus = system
            let w = LogindWatcher(bus: system, logger: logger)
            logind = w
            systemCallSources = [CallSource(.modemManager, bus: system, calls: calls, logger: logger)]
            let ls = LockAndSleep(bus: system, host: host, logger: logger) { [weak self] players, within, then in
                self?.afterPauses(of: players, within: within, then)
            }
            lockAndSleep = ls
            system.onMessage = { [weak self] m in
                guard let self, m.kind == .signal else { return }
                for s in self.systemCallSources where s.received(m) { return }
                self.logind?.received(m)
                self.lockAndSleep?.received(m)
            }
            w.start()
            ls.start()
            for s in systemCallSources { s.start() }
        } catch {
            logger.info("no system bus (\(error.message)): modem calls, the lock screen and sleep are not followed, and session leaders are not checked")
        }
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
        mpris = nil
        gameMode = nil
        logind = nil
        lockAndSleep = nil
        feedbackd = nil
        pauseWaiters = []
        systemCallSources = []
        sessionCallSources = []
        platformCalls = nil
        systemBus?.close()
        systemBus = nil
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

    private func received(_ m: DBusMessage) {
        switch m.kind {
        case .methodCall: methodCall(m)
        case .signal:
            // Who sent it is checked before anything is decoded: only the bus driver speaks for the bus, and only
            // a player's current connection for that player (the transport already dropped unicast signals).
            if m.interface == "org.freedesktop.DBus", m.member == "NameOwnerChanged", m.isFromBus, m.signature == "sss" {
                let a = m.arguments
                guard a.count == 3, let name = a[0].stringValue, let old = a[1].stringValue, let new = a[2].stringValue
                else { return }
                if new.isEmpty {
                    credentials[name] = nil
                    busNameGone(name)
                }
                mpris?.nameOwnerChanged(name: name, old: old, new: new)
                gameMode?.nameOwnerChanged(name: name, old: old, new: new)
                feedbackd?.nameOwnerChanged(name: name, new: new)
                for s in sessionCallSources { _ = s.received(m) }
            } else if m.interface == "org.freedesktop.DBus.Properties", m.member == "PropertiesChanged",
                m.path == MPRISWatcher.path, m.signature == "sa{sv}as", let sender = m.sender,
                mpris?.follows(sender) == true
            {
                mpris?.propertiesChanged(sender: sender, m.arguments)
            } else if m.interface == "org.freedesktop.DBus.Properties", m.member == "PropertiesChanged",
                m.path == Feedbackd.path, m.signature == "sa{sv}as", let sender = m.sender, feedbackd?.follows(sender) == true
            {
                feedbackd?.propertiesChanged(m.arguments)
            } else if m.interface == GameModeWatcher.name, m.path == GameModeWatcher.path, m.signature == "io",
                let sender = m.sender, gameMode?.follows(sender) == true, let member = m.member
            {
                gameMode?.signal(member: member, m.arguments)
            } else if let sender = m.sender, sessionCallSources.contains(where: { $0.owner == sender }) {
                for s in sessionCallSources where s.received(m) { break }
            }
        default: break
        }
    }

    private func reply(_ m: DBusMessage, _ args: [DBusValue], request: UInt64? = nil) {
        guard !m.noReply else { return }
        deliver(request) { [weak self] in
            guard let self, !self.bus.reply(to: m, args) else { return }
            let e = DBusError.failed("audiod could not encode its reply")
            self.bus.replyError(to: m, name: e.name, message: e.message)
        }
    }

    private func fail(_ m: DBusMessage, _ e: DBusError, request: UInt64? = nil) {
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

    private func takePending(_ r: RequestID) -> (message: DBusMessage, encode: (Reply) -> [DBusValue]?, order: UInt64)? {
        guard let p = pending.removeValue(forKey: r) else { return nil }
        if pendingOrders.first == p.order {
            pendingOrders.removeFirst()
        } else if let i = pendingOrders.firstIndex(of: p.order) {
            pendingOrders.remove(at: i)
        }
        return p
    }

    private static func invalidArgs(_ message: String) -> DBusError {
        DBusError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: message)
    }

    private static func dbusError(_ e: PolicyError) -> DBusError {
        DBusError(name: e.isAudiodError ? API.errorPrefix + e.name : e.name, message: e.message)
    }

    private func methodCall(_ m: DBusMessage) {
        let path = m.path ?? "/"
        let member = m.member ?? ""
        let interfaces: [InterfaceDescription]
        var session: SessionID?
        if path == API.managerPath {
            interfaces = API.managerInterfaces
        } else if let id = Self.sessionID(path: path), host?.hasSession(id) == true {
            interfaces = API.sessionInterfaces
            session = id
        } else if path == "/" || (API.managerPath + "/session").hasPrefix(path) || objectPaths().contains(where: { $0.hasPrefix(path + "/") }) {
            // An intermediate node: only introspection (so that tools can walk the tree from "/").
            if member == "Introspect", m.interface == nil || m.interface == API.introspectable.name {
                return reply(m, [.string(API.introspection(interfaces: [API.introspectable], children: children(of: path)))])
            }
            return fail(m, DBusError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "\(path) only offers Introspect"))
        } else {
            return fail(m, DBusError(name: "org.freedesktop.DBus.Error.UnknownObject", message: "no object at \(path)"))
        }
        let iface: InterfaceDescription
        if let name = m.interface {
            guard let i = interfaces.first(where: { $0.name == name }) else {
                return fail(m, DBusError(
                    name: "org.freedesktop.DBus.Error.UnknownInterface",
                    message: "\(path) has no interface \(name); it has \(interfaces.map(\.name).joined(separator: ", "))"))
            }
            iface = i
        } else {
            guard let i = interfaces.first(where: { $0.method(member) != nil }) else {
                return fail(m, DBusError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "no method \(member) at \(path)"))
            }
            iface = i
        }
        guard let method = iface.method(member) else {
            return fail(m, DBusError(
                name: "org.freedesktop.DBus.Error.UnknownMethod",
                message: "\(iface.name) has no method \(member); it has \(iface.methods.map(\.name).joined(separator: ", "))"))
        }
        guard m.signature == method.inputSignature else {
            return fail(m, Self.invalidArgs(
                "\(member) takes (\(method.inputSignature)), not (\(m.signature))"))
        }
        if iface.name == API.manager.name || iface.name == API.session.name
            || (iface.name == API.properties.name && member == "Set"), host?.acceptsRequests != true
        {
            return fail(m, Self.shuttingDown)
        }
        let args = m.arguments
        if allowedNow(m, method.access, session) { return dispatch(m, iface, member, args, interfaces, session) }
        authorize(m, method.access, session) { [weak self] in self?.dispatch(m, iface, member, args, interfaces, session) }
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

    private func dispatch(
        _ m: DBusMessage, _ iface: InterfaceDescription, _ member: String, _ args: [DBusValue],
        _ interfaces: [InterfaceDescription], _ session: SessionID?
    ) {
        let path = m.path ?? "/"
        switch (iface.name, member) {
        case (API.introspectable.name, "Introspect"):
            reply(m, [.string(API.introspection(interfaces: interfaces, children: children(of: path)))])
        case (API.peer.name, "Ping"):
            reply(m, [])
        case (API.peer.name, "GetMachineId"):
            let id = (try? String(contentsOfFile: "/etc/machine-id", encoding: .utf8))?.filter { !$0.isWhitespace }
            reply(m, [.string(id ?? "")])
        case (API.properties.name, _):
            propertiesCall(m, member, args, interfaces: interfaces, session: session)
        case (API.objectManager.name, "GetManagedObjects"):
            reply(m, [managedObjects()])
        case (API.manager.name, _):
            managerCall(m, member, args)
        case (API.session.name, _):
            if let session { sessionCall(m, member, args, session) }
        default:
            fail(m, DBusError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "no method \(member)"))
        }
    }

    private func objectPaths() -> [String] {
        [API.managerPath] + (host?.engine.sessionIDs.map(Self.sessionPath) ?? [])
    }

    private func children(of path: String) -> [String] {
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
    private func request(_ m: DBusMessage, encode: @escaping (Reply) -> [DBusValue]? = { _ in [] },
                         _ make: (RequestID) -> Event) -> [Effect] {
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
        // A player's Paused (a step of its own) may be what a sleep waits for.
        defer { if !pauseWaiters.isEmpty { checkPauseWaiters() } }
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
                emit(API.managerPath, API.objectManager.name, "InterfacesAdded", [
                    .objectPath(Self.sessionPath(view.id)),
                    .dict(key: "s", value: "a{sv}", [
                        (.string(API.session.name), sessionProperties(view)),
                        (.string(API.properties.name), .properties([])),
                        (.string(API.introspectable.name), .properties([])),
                        (.string(API.peer.name), .properties([])),
                    ]),
                ])
            case .sessionRemoved(let id):
                forget(id)
                emit(API.managerPath, API.objectManager.name, "InterfacesRemoved", [
                    .objectPath(Self.sessionPath(id)),
                    .strings(API.sessionInterfaces.map(\.name)),
                ])
            case .signal(let id, let s):
                emitSignal(id, s)
            case .sessionPropertiesChanged(let id, let changed):
                emit(Self.sessionPath(id), API.properties.name, "PropertiesChanged", [
                    .string(API.session.name), .properties(changed.map(Self.value)), .strings([]),
                ])
            case .mprisPause(let player):
                guard let mpris else { continue }
                pausesInFlight += 1
                mpris.send("Pause", to: player) { [weak self] in self?.pauseAnswered() }
            case .mprisPlay(let player):
                mpris?.send("Play", to: player)
            case .managerPropertiesChanged(let props):
                for case .silentMode(let on) in props { feedbackd?.silentModeChanged(on) }
                let changed = props.map(Self.value)
                emit(API.managerPath, API.properties.name, "PropertiesChanged", [
                    .string(API.manager.name), .properties(changed), .strings([]),
                ])
            default:
                continue
            }
        }
    }

    private func pauseAnswered() {
        pausesInFlight -= 1
        checkPauseWaiters()
    }

    /// Sleep waits on these: every `Pause` answered, and every player it paused paused (`Engine.playerStillPlays`).
    private func checkPauseWaiters() {
        guard !pauseWaiters.isEmpty, pausesInFlight == 0, let host else { return }
        let engine = host.engine
        var waiting: [(players: [PlayerID], run: () -> Void)] = []
        for w in pauseWaiters {
            if w.players.contains(where: engine.playerStillPlays) { waiting.append(w) } else { w.run() }
        }
        pauseWaiters = waiting
    }

    /// Runs `then` once every `Pause` sent so far is answered and `players` have paused, or after
    /// `within` at most — once.
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
        pauseWaiters.append((players, run))
        once.timer = bus.loop.dbusTimer(afterNanoseconds: within, run)
        checkPauseWaiters()
    }

    /// What audiod follows of the platform (`ListPlatformSources`, `audioctl status`).
    func platformSources() -> [DBusValue] {
        var rows: [(String, String, Bool, String)] = []
        if let l = lockAndSleep {
            let st = l.status
            rows.append(("logind", "system", st.found, st.detail))
        } else {
            rows.append(("logind", "system", false, systemBus == nil ? "no system bus" : "not followed"))
        }
        if let f = feedbackd {
            let st = f.status
            rows.append(("feedbackd", "session", st.found, st.detail))
        }
        for s in sessionCallSources + systemCallSources {
            rows.append((s.kind.rawValue, s.kind == .modemManager ? "system" : "session", s.owner != nil,
                         s.owner != nil ? "its calls interrupt others" : "not running"))
        }
        if let g = gameMode {
            rows.append(("GameMode", "session", g.owner != nil, g.owner != nil ? "its games count as games" : "not running"))
        }
        return rows.map { name, bus, found, detail in
            .properties([("name", .string(name)), ("bus", .string(bus)), ("found", .bool(found)), ("detail", .string(detail))])
        }
    }

    /// The sound server came or went: `ServerConnected` / `ServerName` changed.
    public func serverStatusChanged() {
        var changed: [(String, DBusValue)] = [("ServerConnected", .bool(host?.connectedServerName != nil))]
        if let name = host?.connectedServerName, name != lastServerName {
            lastServerName = name
            changed.append(("ServerName", .string(name)))
        }
        emit(API.managerPath, API.properties.name, "PropertiesChanged", [
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
            (p.name, .properties([
                ("app-id", .string(i.appID)), ("source", .string(i.source)),
                ("desktop-entry", .string(i.desktopEntry)), ("category-reason", .string(i.categoryReason.text)),
            ]))
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

    /// All of a session's properties (`GetAll`, `InterfacesAdded`): the engine's, and `Implicit`, which never
    /// changes.
    private func sessionPropertyValues(_ v: SessionView) -> [(String, DBusValue)] {
        var all = v.properties.map(Self.value)
        let streams = all.firstIndex { $0.0 == "Streams" } ?? all.endIndex
        all.insert(("Implicit", .bool(v.isImplicit)), at: streams)
        return all
    }

    private func sessionProperties(_ v: SessionView) -> DBusValue { .properties(sessionPropertyValues(v)) }

    private func managerPropertyValues() -> [(String, DBusValue)] {
        guard let host else { return [] }
        let e = host.engine
        return [
            Self.value(.silentMode(e.silentMode)),
            Self.value(ManagerProperty.otherAudioPlaying(e.otherAudioPlaying)),
            Self.value(.primaryAudioSession(e.primaryAudioSession)),
            ("ServerName", .string(host.connectedServerName ?? lastServerName ?? "")),
            ("ServerConnected", .bool(host.connectedServerName != nil)),
            Self.value(.duckLevel(e.duckLevel)),
            ("Version", .string(Self.version)),
            Self.value(.callState(e.callState)),
            Self.value(.screenLocked(e.screenLocked)),
        ]
    }

    private func managedObjects() -> DBusValue {
        let views = (host?.engine.sessionIDs ?? []).compactMap { host?.engine.session($0) }
        return .dict(key: "o", value: "a{sa{sv}}", views.map { v in
            (.objectPath(Self.sessionPath(v.id)), .dict(key: "s", value: "a{sv}", [
                (.string(API.session.name), sessionProperties(v)),
                (.string(API.properties.name), .properties([])),
                (.string(API.introspectable.name), .properties([])),
                (.string(API.peer.name), .properties([])),
            ]))
        })
    }

    private func propertiesCall(
        _ m: DBusMessage, _ member: String, _ args: [DBusValue], interfaces: [InterfaceDescription], session: SessionID?
    ) {
        guard case .string(let ifaceName)? = args.first else { return fail(m, Self.invalidArgs("the first argument names an interface")) }
        let values: [(String, DBusValue)]
        let iface: InterfaceDescription
        if ifaceName == API.manager.name, session == nil {
            iface = API.manager
            values = managerPropertyValues()
        } else if ifaceName == API.session.name, let s = session, let v = host?.engine.session(s) {
            iface = API.session
            values = sessionPropertyValues(v)
        } else if interfaces.contains(where: { $0.name == ifaceName }) {
            iface = InterfaceDescription(name: ifaceName, methods: [], properties: [], signals: [])
            values = []
        } else {
            return fail(m, DBusError(
                name: "org.freedesktop.DBus.Error.UnknownInterface",
                message: "\(m.path ?? "") has no interface \(ifaceName)"))
        }
        switch member {
        case "GetAll":
            reply(m, [.properties(values)])
        case "Get":
            guard case .string(let name)? = args.dropFirst().first, let value = values.first(where: { $0.0 == name })?.1 else {
                return fail(m, DBusError(
                    name: "org.freedesktop.DBus.Error.UnknownProperty",
                    message: "\(ifaceName) has no property \(args.dropFirst().first?.stringValue ?? ""); it has \(iface.properties.map(\.name).joined(separator: ", "))"))
            }
            reply(m, [.variant(value)])
        case "Set":
            guard case .string(let name)? = args.dropFirst().first, case .variant(let value)? = args.last else {
                return fail(m, Self.invalidArgs("Set takes (ssv)"))
            }
            guard let p = iface.property(name) else {
                return fail(m, DBusError(name: "org.freedesktop.DBus.Error.UnknownProperty", message: "\(ifaceName) has no property \(name)"))
            }
            guard let access = p.writeAccess else {
                return fail(m, DBusError(name: "org.freedesktop.DBus.Error.PropertyReadOnly", message: "\(name) is read-only"))
            }
            guard value.signature == p.type else {
                return fail(m, Self.invalidArgs("\(name) is of type \(p.type), not \(value.signature)"))
            }
            authorize(m, access, session) { [weak self] in
                guard let self else { return }
                switch (name, value) {
                case ("SilentMode", .bool(let on)):
                    self.request(m) { .setSilentMode($0, on) }
                case ("DuckLevel", .double(let level)):
                    self.request(m) { .setDuckLevel($0, level) }
                case ("HandlesSecondaryAudio", .bool(let on)):
                    guard let s = session else { return }
                    self.request(m) { .setHandlesSecondaryAudio($0, s, on) }
                case ("PrefersNoInterruptionsFromSystemAlerts", .bool(let on)):
                    guard let s = session else { return }
                    self.request(m) { .setPrefersNoInterruptions($0, s, on) }
                default:
                    self.fail(m, Self.invalidArgs("\(name) cannot be set"))
                }
            }
        default:
            fail(m, DBusError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "no method \(member)"))
        }
    }

    // MARK: Manager methods

    private func managerCall(_ m: DBusMessage, _ member: String, _ args: [DBusValue]) {
        guard let host else { return fail(m, .failed("audiod is shutting down")) }
        switch member {
        case "CreateSession":
            createSession(m, args.first?.propertyMap ?? [:])
        case "FindSession":
            guard let pid = args.first?.uint32Value else { return }
            if let id = host.engine.findSession(pid: pid) {
                reply(m, [.objectPath(Self.sessionPath(id))])
            } else {
                fail(m, DBusError(name: ErrorName.noSuchSession.busName, message: "no session was created with pid \(pid)"))
            }
        case "GetSessionForProcess":
            guard let pid = args.first?.uint32Value else { return }
            let chain = host.processChain(pid)
            if let id = host.engine.sessionForProcess(chain: chain.isEmpty ? [pid] : chain) {
                reply(m, [.objectPath(Self.sessionPath(id))])
            } else {
                fail(m, DBusError(name: ErrorName.noSuchSession.busName, message: "no session owns the streams of pid \(pid)"))
            }
        case "ListStreams":
            guard host.connectedServerName != nil else {
                return fail(m, DBusError(
                    name: ErrorName.serverUnavailable.busName,
                    message: "audiod is not connected to the sound server right now; it reconnects by itself"))
            }
            reply(m, [.array(element: "a{sv}", host.engine.streamViews.map(streamEntry))])
        case "SetApplicationCategory":
            guard let app = args[0].stringValue, let c = args[1].stringValue, let mode = args[2].stringValue,
                let opts = args[3].stringArray
            else { return }
            guard !app.isEmpty else { return fail(m, Self.invalidArgs("the application name must not be empty")) }
            if let e = nameTooLong(app, "the application name") ?? tooManyOptions(opts) { return fail(m, e) }
            if !host.engine.applicationRules.contains(where: { $0.application == app }),
                host.engine.applicationRules.count >= limits.rules
            {
                return fail(m, Self.limitExceeded(
                    "audiod holds \(limits.rules) application rules, its limit; remove one first (RemoveApplicationCategory)"))
            }
            request(m) { .setApplicationCategory($0, application: app, category: c, mode: mode, options: opts) }
        case "RemoveApplicationCategory":
            guard let app = args.first?.stringValue else { return }
            if let e = nameTooLong(app, "the application name") { return fail(m, e) }
            request(m) { .removeApplicationCategory($0, application: app) }
        case "Reload":
            // An audiod-wide write: the interface table lets only audiod's own uid this far.
            guard host.acceptsRequests else { return fail(m, Self.shuttingDown) }
            switch host.reloadConfig() {
            case .reloaded: reply(m, [])
            case .invalid(let why): fail(m, DBusError(name: ErrorName.invalidConfig.busName, message: why))
            }
        case "ListApplicationRules":
            reply(m, [.array(element: "a{sv}", host.engine.applicationRules.map { r in
                var entry: [(String, DBusValue)] = [
                    ("application", .string(r.application)), ("category", .string(r.configuration.category.rawValue)),
                    ("mode", .string(r.configuration.mode.rawValue)),
                    ("options", .strings(r.configuration.options.map(\.rawValue))), ("source", .string(r.source.rawValue)),
                ]
                if let file = r.file { entry.append(("file", .string(file))) }
                if let line = r.line { entry.append(("line", .uint32(UInt32(clamping: line)))) }
                return .properties(entry)
            })])
        case "ListPlatformSources":
            reply(m, [.array(element: "a{sv}", platformSources())])
        case "ListApplicationCategories":
            reply(m, [.array(element: "(sssas)", host.engine.applicationRules.map { r in
                .structure([
                    .string(r.application), .string(r.configuration.category.rawValue),
                    .string(r.configuration.mode.rawValue), .strings(r.configuration.options.map(\.rawValue)),
                ])
            })])
        default:
            fail(m, DBusError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "no method \(member)"))
        }
    }

    private func streamEntry(_ s: StreamView) -> DBusValue {
        .properties([
            ("index", .uint32(s.info.id.index)),
            ("kind", .string(s.info.id.kind.rawValue)),
            ("pid", .uint32(s.info.pid ?? 0)),
            ("application-name", .string(s.info.applicationName)),
            ("media-role", .string(s.info.role ?? "")),
            ("session", .objectPath(s.session.map(Self.sessionPath) ?? "/")),
            ("policy-muted", .bool(s.policyMuted)),
            ("duck-factor", .double(s.duckFactor)),
            ("corked", .bool(s.info.corked)),
            ("user-muted", .bool(s.userMuted)),
            ("device", .string(s.info.device)),
            ("audible", .bool(s.audible)),
            ("policy-reasons", .strings(s.reasons.map(\.text))),
        ])
    }

    private func createSession(_ m: DBusMessage, _ hints: [String: DBusValue]) {
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
                return fail(m, Self.invalidArgs("hint 'pid' must be an unsigned 32-bit integer (u), not \(v.signature)"))
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
            guard let self, let host = self.host else { return }
            // Checked again: calls queued behind the credentials look-up all passed the first check.
            if let e = self.sessionLimitReached(sender) { return self.fail(m, e) }
            // A caller in a sandbox names pids as its pid namespace numbers them; the bus gives its host pid.
            guard let pid = pidHint.map({ host.hostPid($0, seenBy: caller.pid) }) ?? caller.pid, pid > 0,
                let uid = host.processOwner(pid)
            else {
                return self.fail(m, DBusError(
                    name: ErrorName.noSuchProcess.busName, message: "no process has pid \(pidHint ?? caller.pid)"))
            }
            guard uid == caller.uid else {
                return self.fail(m, DBusError(
                    name: "org.freedesktop.DBus.Error.AccessDenied",
                    message: "pid \(pid) belongs to another user; a session may only hold your own processes"))
            }
            if pidHint != nil, let why = self.captureRefusal(pid, named: pidHint ?? pid) {
                return self.fail(m, Self.invalidArgs(why))
            }
            let owner = Owner(busName: sender, uid: caller.uid, lifetime: lifetime, pid: pid)
            let effects = self.request(m, encode: { reply in
                guard case .session(let id) = reply else { return [] }
                return [.objectPath(Self.sessionPath(id))]
            }) { .createSession($0, NewSession(pid: pid, applicationName: name, lifetime: lifetime)) }
            // Owned from the step that made it (its reply may be published later), so that the limit counts it.
            for case .reply(_, .session(let id)) in effects { self.adopt(id, owner: owner) }
        }
    }

    /// Why a pid hint names a process no app is (docs/API.md `CreateSession`): a session for it would hold every
    /// stream its descendants play — all of the user's, or the system's. Nil when the pid may be held.
    private func captureRefusal(_ pid: UInt32, named: UInt32) -> String? {
        let tail = "; a session holds an app's own process and its children (to set how an app is treated, use SetApplicationCategory)"
        if pid == 1 { return "pid \(named) is PID 1, the init system: a session for it would hold every stream on the system" + tail }
        if Self.isServiceManager(pid) {
            return "pid \(named) is your service manager (systemd --user): a session for it would hold every stream you play" + tail
        }
        if logind?.leaders.contains(pid) == true {
            return "pid \(named) is the leader of one of your login sessions: a session for it would hold every stream you play" + tail
        }
        let me = UInt32(getpid())
        if pid == me { return "pid \(named) is audiod itself" + tail }
        if host?.processChain(me).dropFirst().contains(pid) == true {
            return "pid \(named) is an ancestor of audiod: a session for it would hold every stream audiod's siblings play" + tail
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

    // MARK: Session methods

    private func sessionCall(_ m: DBusMessage, _ member: String, _ args: [DBusValue], _ id: SessionID) {
        switch member {
        case "SetCategory":
            guard let c = args[0].stringValue, let mode = args[1].stringValue, let o = args[2].stringArray else { return }
            if let e = tooManyOptions(o) { return fail(m, e) }
            request(m) { .setCategory($0, id, category: c, mode: mode, options: o) }
        case "SetActive":
            guard let active = args[0].boolValue, let o = args[1].stringArray else { return }
            if let e = tooManyOptions(o) { return fail(m, e) }
            request(m) { .setActive($0, id, active: active, options: o) }
        case "Release":
            request(m) { .release($0, id) }
        default:
            fail(m, DBusError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "no method \(member)"))
        }
    }

    // MARK: Access and bounds

    /// Runs `body` if the caller has `access` (the interface table says which each method and property needs);
    /// answers AccessDenied otherwise.
    private func authorize(_ m: DBusMessage, _ access: InterfaceDescription.Access, _ session: SessionID?,
                           _ body: @escaping () -> Void) {
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
                    return self.fail(m, DBusError(
                        name: "org.freedesktop.DBus.Error.AccessDenied",
                        message: "\(m.member ?? "this") changes audiod for its user (uid \(self.ownUID)); uid \(caller.uid) may not"))
                }
                body()
            }
        }
    }

    private static let shuttingDown = DBusError(
        name: ErrorName.shuttingDown.busName, message: "audiod is stopping and decides nothing new")

    private static func limitExceeded(_ message: String) -> DBusError {
        DBusError(name: ErrorName.limitExceeded.busName, message: message)
    }

    private func sessionLimitReached(_ sender: String) -> DBusError? {
        guard sessionsByBusName[sender, default: []].count >= limits.sessionsPerConnection else { return nil }
        return Self.limitExceeded(
            "this connection owns \(limits.sessionsPerConnection) sessions, the limit per connection; release one first")
    }

    private func nameTooLong(_ s: String, _ what: String) -> DBusError? {
        guard s.utf8.count > limits.nameBytes else { return nil }
        return Self.limitExceeded("\(what) has \(s.utf8.count) bytes; at most \(limits.nameBytes) are accepted")
    }

    private func tooManyOptions(_ o: [String]) -> DBusError? {
        guard o.count > limits.options else { return nil }
        return Self.limitExceeded("\(o.count) options given; at most \(limits.options) are accepted")
    }

    /// Runs `body` if the caller may change session `id` (docs/API.md: its owner connection; for a `process` session,
    /// any connection of the same user); answers AccessDenied otherwise.
    private func withOwner(_ m: DBusMessage, _ id: SessionID, _ body: @escaping () -> Void) {
        guard let owner = owners[id] else {
            return fail(m, DBusError(
                name: "org.freedesktop.DBus.Error.AccessDenied",
                message: "session \(id.rawValue) is an implicit session audiod made for an app; change it with SetApplicationCategory"))
        }
        guard let sender = m.sender else { return fail(m, .failed("a call without a sender")) }
        if sender == owner.busName { return body() }
        guard owner.lifetime == .process else {
            return fail(m, DBusError(
                name: "org.freedesktop.DBus.Error.AccessDenied",
                message: "session \(id.rawValue) belongs to another connection; only its owner may change it"))
        }
        withCaller(sender, m) { [weak self] caller in
            guard caller.uid == owner.uid else {
                self?.fail(m, DBusError(
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
        guard let q = DBusMessage.methodCall(
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
            self.credentials[sender] = c
            body(c)
        }
    }

    // MARK: Owners

    private func adopt(_ id: SessionID, owner: Owner) {
        owners[id] = owner
        sessionsByBusName[owner.busName, default: []].insert(id)
        // The caller may have gone between its call and now: ask, so that its session is not kept forever.
        if let q = DBusMessage.methodCall(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "NameHasOwner")
        {
            q.append([.string(owner.busName)])
            bus.call(q, timeoutMilliseconds: 5_000) { [weak self] r in
                if let r, r.kind == .methodReturn, r.arguments.first?.boolValue == false { self?.busNameGone(owner.busName) }
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
        if sessionsByBusName[owner.busName]?.isEmpty == true { sessionsByBusName[owner.busName] = nil }
        unwatchPid(owner.pid, id)
    }

    private func busNameGone(_ name: String) {
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
