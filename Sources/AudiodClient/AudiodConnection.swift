import AudioVocabulary
import DBusTransport
import Foundation
import LoopThread
import Synchronization

/// An error from audiod (or from the bus on its way there): the D-Bus error name and audiod's message, which says
/// what was wrong and what is accepted.
public struct AudiodError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The full D-Bus error name, e.g. `org.audiod.AudioSession1.Error.InvalidCategory`.
    public let name: String
    public let message: String

    public init(name: String, message: String) {
        self.name = name
        self.message = message
    }

    /// What kind of error: one of audiod's own (docs/API.md), or one of the bus's that clients meet.
    public enum Code: Hashable, Sendable {
        case audiod(ErrorName)
        case accessDenied, invalidArguments, notRunning, other

        public static let invalidCategory = Code.audiod(.invalidCategory)
        public static let noSuchSession = Code.audiod(.noSuchSession)
        public static let noSuchRule = Code.audiod(.noSuchRule)
        public static let serverUnavailable = Code.audiod(.serverUnavailable)
        public static let limitExceeded = Code.audiod(.limitExceeded)
        public static let shuttingDown = Code.audiod(.shuttingDown)
        public static let insufficientPriority = Code.audiod(.insufficientPriority)
    }

    public var code: Code {
        if name.hasPrefix(BusNames.errorPrefix),
            let e = ErrorName(rawValue: String(name.dropFirst(BusNames.errorPrefix.count)))
        {
            return .audiod(e)
        }
        switch name {
        case "org.freedesktop.DBus.Error.AccessDenied": return .accessDenied
        case "org.freedesktop.DBus.Error.InvalidArgs": return .invalidArguments
        case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner",
            "org.freedesktop.DBus.Error.NoServer", "org.freedesktop.DBus.Error.FileNotFound":
            return .notRunning
        default: return .other
        }
    }

    public var description: String { message.isEmpty ? name : message }
}

/// A signal from audiod.
public struct AudiodSignal: Sendable, Equatable {
    public let path: String
    public let interface: String
    public let member: String
    public let arguments: [DBusValue]
}

/// A connection to audiod over the session bus, with its own loop thread. Calls are async; signals from audiod
/// arrive on every stream made by `signals()`.
public final class AudiodConnection: @unchecked Sendable {
    // @unchecked: `connection` and `audiodOwner` are used only on `loop`'s thread (`connection` is set once, in
    // init); `closed`, `lost` and `subscribers` are Mutexes.
    public static let busName = BusNames.busName
    public static let managerPath = BusNames.managerPath
    public static let managerInterface = BusNames.managerInterface
    public static let sessionInterface = BusNames.sessionInterface
    static let propertiesInterface = "org.freedesktop.DBus.Properties"

    let loop: PollLoop
    private var connection: LoopBound<DBusConnection>?
    private let closed = Mutex(false)
    /// The unique name that owns `org.audiod.AudioSession1` now (loop thread only).
    private var audiodOwner: String?
    private let lost = Mutex(false)

    /// The bus connection is gone (the bus went away): every stream of `signals()` has finished.
    public var busLost: Bool { lost.withLock { $0 } }
    private let subscribers = Mutex<[UUID: AsyncStream<AudiodSignal>.Continuation]>([:])

    /// Connects to the session bus (or `address`).
    public init(address: String? = nil) throws(AudiodError) {
        do {
            loop = try PollLoop()
        } catch {
            throw AudiodError(name: error.name, message: error.message)
        }
        loop.start()
        let l = loop
        let made: Result<LoopBound<DBusConnection>, DBusError> = loop.sync { [self] in
            do {
                let c = try DBusConnection(address: address, loop: l)
                // audiod's signals are believed only from the connection that owns its name now: follow the owner
                // (subscribe first, then ask, so that no change falls between the two).
                c.addMatch(
                    "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='\(Self.busName)'"
                )
                c.addMatch("type='signal',sender='\(Self.busName)'")
                if let q = DBusMessage.methodCall(
                    destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                    interface: "org.freedesktop.DBus",
                    member: "GetNameOwner")
                {
                    q.append([.string(Self.busName)])
                    if let r = c.callBlocking(q), r.kind == .methodReturn {
                        audiodOwner = r.arguments.first?.stringValue
                    }
                }
                // Weak: the connection is the loop's, and a strong reference here would keep this object (and its
                // thread) alive after the app dropped it.
                c.onMessage = { [weak self] m in
                    guard let self else { return }
                    guard m.kind == .signal else { return }
                    if m.isFromBus {
                        if m.member == "NameOwnerChanged", m.signature == "sss", case let a = m.arguments,
                            a.first?.stringValue == Self.busName
                        {
                            audiodOwner = a[2].stringValue.flatMap { $0.isEmpty ? nil : $0 }
                            // Passed on as it is, so that a watcher can say audiod went away or came back.
                            let s = AudiodSignal(
                                path: m.path ?? "", interface: m.interface ?? "", member: "NameOwnerChanged",
                                arguments: a)
                            for c in subscribers.withLock({ Array($0.values) }) { c.yield(s) }
                        }
                        return
                    }
                    guard let sender = m.sender, sender == audiodOwner else { return }
                    let s = AudiodSignal(
                        path: m.path ?? "", interface: m.interface ?? "", member: m.member ?? "", arguments: m.arguments
                    )
                    for c in subscribers.withLock({ Array($0.values) }) { c.yield(s) }
                }
                c.onDisconnect = { [weak self] in
                    guard let self else { return }
                    lost.withLock { $0 = true }
                    for c in subscribers.withLock({ s in
                        defer { s.removeAll() }
                        return Array(s.values)
                    }) { c.finish() }
                }
                return .success(l.bind(c))
            } catch let e as DBusError {
                return .failure(e)
            } catch {
                return .failure(.failed("\(error)"))
            }
        }
        switch made {
        case .success(let c): connection = c
        case .failure(let e):
            loop.stop()
            throw AudiodError(name: e.name, message: "cannot connect to the session bus: \(e.message)")
        }
    }

    deinit { close() }

    /// Closes the connection: sessions made with the default lifetime end now, calls still waiting for audiod are
    /// answered with an error, and the signal streams finish. Also when the app just drops this object.
    public func close() {
        guard
            closed.withLock({ c in
                defer { c = true }
                return !c
            })
        else { return }
        let c = connection
        if loop.isOnLoop {
            c?.value.close()
        } else {
            loop.sync { c?.value.close() }
        }
        loop.stop()
        for c in subscribers.withLock({ s in
            defer { s.removeAll() }
            return Array(s.values)
        }) { c.finish() }
    }

    /// This connection's unique bus name.
    public var uniqueName: String {
        guard !closed.withLock({ $0 }) else { return "" }
        let c = connection
        return loop.sync { c?.value.uniqueName ?? "" }
    }

    /// Every signal audiod emits from now on, and `org.freedesktop.DBus.NameOwnerChanged` for audiod's name (its
    /// arguments: name, old owner, new owner; an empty new owner means audiod went away). The stream finishes when
    /// the bus connection is lost.
    public func signals() -> AsyncStream<AudiodSignal> {
        let (stream, continuation) = AsyncStream<AudiodSignal>.makeStream()
        let id = UUID()
        subscribers.withLock { $0[id] = continuation }
        continuation.onTermination = { [weak self] _ in _ = self?.subscribers.withLock { $0.removeValue(forKey: id) } }
        return stream
    }

    /// Calls a method of audiod and returns the reply's arguments.
    public func call(_ path: String, _ interface: String, _ member: String, _ args: [DBusValue] = [])
        async throws(AudiodError)
        -> [DBusValue]
    {
        try await call(to: Self.busName, path, interface, member, args)
    }

    /// The same, to one connection: a session made again after a restart is made on the audiod that just appeared
    /// (its unique name), not on whichever holds the name when the call arrives.
    func call(to destination: String, _ path: String, _ interface: String, _ member: String, _ args: [DBusValue])
        async throws(AudiodError)
        -> [DBusValue]
    {
        try await callWithSender(to: destination, path, interface, member, args).arguments
    }

    /// The unique name that owns audiod's name now, as this connection last heard (nil: nobody).
    func ownerNow() async -> String? {
        await withCheckedContinuation { cont in
            loop.execute { [self] in cont.resume(returning: audiodOwner) }
        }
    }

    /// A call and the unique name of the connection that answered it: the audiod a session was made on.
    func callWithSender(
        to destination: String, _ path: String, _ interface: String, _ member: String, _ args: [DBusValue]
    ) async throws(AudiodError) -> (arguments: [DBusValue], sender: String?) {
        guard !closed.withLock({ $0 }) else {
            throw AudiodError(
                name: "org.freedesktop.DBus.Error.Disconnected", message: "the connection to audiod is closed")
        }
        let c = connection
        let result: Result<([DBusValue], String?), AudiodError> = await withCheckedContinuation { cont in
            loop.execute {
                guard let c = c?.value,
                    let m = DBusMessage.methodCall(
                        destination: destination, path: path, interface: interface, member: member)
                else {
                    return cont.resume(
                        returning: .failure(
                            AudiodError(name: "org.freedesktop.DBus.Error.Failed", message: "not connected")))
                }
                guard m.append(args) else {
                    return cont.resume(
                        returning: .failure(
                            AudiodError(
                                name: "org.freedesktop.DBus.Error.InvalidArgs", message: "arguments cannot be encoded"))
                    )
                }
                c.call(m) { r in
                    guard let r else {
                        return cont.resume(
                            returning: .failure(
                                AudiodError(name: "org.freedesktop.DBus.Error.NoReply", message: "no reply from audiod")
                            ))
                    }
                    if r.kind == .error {
                        cont.resume(
                            returning: .failure(
                                AudiodError(name: r.errorName ?? "", message: r.arguments.first?.stringValue ?? "")))
                    } else {
                        cont.resume(returning: .success((r.arguments, r.sender)))
                    }
                }
            }
        }
        return try result.get()
    }

    /// `org.freedesktop.DBus.Properties.Get`.
    public func property(_ path: String, _ interface: String, _ name: String) async throws(AudiodError) -> DBusValue {
        let out = try await call(path, Self.propertiesInterface, "Get", [.string(interface), .string(name)])
        guard case .variant(let v)? = out.first else {
            throw AudiodError(
                name: "org.freedesktop.DBus.Error.InvalidSignature", message: "audiod answered Get with \(out)")
        }
        return v
    }

    /// `org.freedesktop.DBus.Properties.GetAll`.
    public func properties(_ path: String, _ interface: String) async throws(AudiodError) -> [String: DBusValue] {
        let out = try await call(path, Self.propertiesInterface, "GetAll", [.string(interface)])
        return out.first?.propertyMap ?? [:]
    }

    /// `org.freedesktop.DBus.Properties.Set`.
    public func setProperty(_ path: String, _ interface: String, _ name: String, _ value: DBusValue)
        async throws(AudiodError)
    {
        _ = try await call(path, Self.propertiesInterface, "Set", [.string(interface), .string(name), .variant(value)])
    }
}
