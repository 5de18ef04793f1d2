import AudioPolicy
import DBusTransport
import Logging

/// Who owns which session, and when an owner is gone. An explicit session belongs to the bus connection that made
/// it (`connection` lifetime: it ends when that connection leaves the bus) or to the process it holds (`process`
/// lifetime: it ends when that process exits); an implicit session ends as soon as its app's process exits (a call
/// app that quits gives the music back at once, POLICY §7). This registry follows those connections (a `NameWatch`
/// per owner, matched on that name only) and processes (the host's exit watches: pidfds) while they own something,
/// and turns their going into the engine's `ownerVanished` and `processExited` events. It also keeps the callers'
/// credentials, which the API server's access checks ask for. Confined to the loop thread.
public final class SessionOwners {
    public struct Owner: Equatable, Sendable {
        public var busName: String
        public var uid: UInt32
        public var lifetime: NewSession.Lifetime
        public var pid: UInt32

        public init(busName: String, uid: UInt32, lifetime: NewSession.Lifetime, pid: UInt32) {
            self.busName = busName
            self.uid = uid
            self.lifetime = lifetime
            self.pid = pid
        }
    }

    /// What the bus says of a caller (`GetConnectionCredentials`).
    public struct Caller: Equatable, Sendable {
        public var pid: UInt32
        public var uid: UInt32
    }

    /// Callers' credentials kept at most, past which the oldest of a connection that owns no session is forgotten.
    public static let maximumCachedCallers = 512

    private let link: BusLink
    private weak var host: PlatformHost?
    private let watchExit: (UInt32, @escaping () -> Void) -> AnyObject?
    private let logger: Logger

    private var owners: [SessionID: Owner] = [:]
    private var sessionsByBusName: [String: Set<SessionID>] = [:]
    /// Each session owner's connection, followed while it owns a session.
    private var ownerWatches: [String: NameWatch] = [:]
    /// Callers' credentials by unique name (never reused while the bus runs), the oldest forgotten past the bound
    /// unless it owns a session.
    private var credentials: [String: Caller] = [:]
    private var credentialsOrder: [String] = []
    /// Exit watches by pid, and which sessions care.
    private var exitWatches: [UInt32: AnyObject] = [:]
    private var sessionsByPid: [UInt32: Set<SessionID>] = [:]
    /// Implicit sessions by the pid they were made for.
    private var implicitPids: [SessionID: UInt32] = [:]

    /// `watchExit` calls its handler once when the process exits; releasing the token it returns stops the watch.
    public init(
        link: BusLink, host: PlatformHost, logger: Logger,
        watchExit: @escaping (UInt32, @escaping () -> Void) -> AnyObject?
    ) {
        self.link = link
        self.host = host
        self.logger = logger
        self.watchExit = watchExit
    }

    /// The owner of an explicit session; nil for an implicit one (or none).
    public func owner(of id: SessionID) -> Owner? { owners[id] }

    /// How many sessions the connection `busName` owns.
    public func sessionCount(of busName: String) -> Int { sessionsByBusName[busName]?.count ?? 0 }

    /// The caller's pid and uid, cached per connection; nil when the bus did not say.
    public func caller(_ sender: String, _ body: @escaping (Caller?) -> Void) {
        if let c = credentials[sender] { return body(c) }
        link.busCall("GetConnectionCredentials", [.string(sender)]) { [weak self] r in
            guard let self else { return }
            guard let map = r?.arguments.first?.propertyMap, let pid = map["ProcessID"]?.uint32Value,
                let uid = map["UnixUserID"]?.uint32Value
            else { return body(nil) }
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

    /// audiod stops: nothing is followed any more.
    public func close() {
        ownerWatches.removeAll()
        exitWatches.removeAll()
    }

    /// An explicit session was made: its owner is followed from now on.
    public func adopt(_ id: SessionID, owner: Owner) {
        owners[id] = owner
        sessionsByBusName[owner.busName, default: []].insert(id)
        if ownerWatches[owner.busName] == nil {
            let name = owner.busName
            let w = link.follow(name)
            w.onVanished = { [weak self] _ in self?.busNameGone(name) }
            ownerWatches[name] = w
            w.start()
        }
        // The caller may have gone between its call and now: ask, so that its session is not kept forever.
        link.busCall("NameHasOwner", [.string(owner.busName)]) { [weak self] r in
            if r?.arguments.first?.boolValue == false { self?.busNameGone(owner.busName) }
        }
        watchPid(owner.pid, id)
    }

    /// An implicit session was made for the app of `pid`: it ends as soon as that process exits, not when its
    /// streams have gone and the linger has passed.
    public func watchImplicit(_ id: SessionID, pid: UInt32) {
        guard pid > 0 else { return }
        implicitPids[id] = pid
        watchPid(pid, id)
    }

    /// The session ended: nothing of it is followed any more.
    public func forget(_ id: SessionID) {
        if let pid = implicitPids.removeValue(forKey: id) { unwatchPid(pid, id) }
        guard let owner = owners.removeValue(forKey: id) else { return }
        sessionsByBusName[owner.busName]?.remove(id)
        if sessionsByBusName[owner.busName]?.isEmpty == true {
            sessionsByBusName[owner.busName] = nil
            ownerWatches[owner.busName] = nil
        }
        unwatchPid(owner.pid, id)
    }

    private func watchPid(_ pid: UInt32, _ id: SessionID) {
        sessionsByPid[pid, default: []].insert(id)
        if exitWatches[pid] == nil {
            exitWatches[pid] = watchExit(pid) { [weak self] in self?.processExited(pid) }
        }
    }

    private func unwatchPid(_ pid: UInt32, _ id: SessionID) {
        sessionsByPid[pid]?.remove(id)
        if sessionsByPid[pid]?.isEmpty == true {
            sessionsByPid[pid] = nil
            exitWatches[pid] = nil
        }
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
