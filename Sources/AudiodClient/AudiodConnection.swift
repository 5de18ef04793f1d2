import DBusService
import Foundation
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

    /// The audiod error kinds of API.md (and the bus's own that clients meet).
    public enum Code: String, Sendable {
        case invalidCategory = "InvalidCategory", invalidMode = "InvalidMode", incompatibleMode = "IncompatibleMode"
        case invalidOption = "InvalidOption", incompatibleOption = "IncompatibleOption"
        case insufficientPriority = "InsufficientPriority", noSuchSession = "NoSuchSession"
        case noSuchProcess = "NoSuchProcess", noSuchRule = "NoSuchRule", serverUnavailable = "ServerUnavailable"
        case accessDenied, invalidArguments, notRunning, other
    }

    public var code: Code {
        let prefix = "org.audiod.AudioSession1.Error."
        if name.hasPrefix(prefix), let c = Code(rawValue: String(name.dropFirst(prefix.count))) { return c }
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
    // @unchecked: `connection` is used only on `loop`'s thread; `subscribers` is a Mutex.
    public static let busName = "org.audiod.AudioSession1"
    public static let managerPath = "/org/audiod/AudioSession1"
    public static let managerInterface = "org.audiod.AudioSession1.Manager"
    public static let sessionInterface = "org.audiod.AudioSession1.Session"
    static let propertiesInterface = "org.freedesktop.DBus.Properties"

    let loop: PollLoop
    private var connection: DBusConnection?
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
        let made: Result<DBusConnection, DBusError> = loop.sync { [self] in
            do {
                let c = try DBusConnection(address: address, loop: l)
                c.addMatch("type='signal',sender='\(Self.busName)'")
                c.onMessage = { [self] m in
                    guard m.kind == .signal else { return }
                    let s = AudiodSignal(path: m.path ?? "", interface: m.interface ?? "", member: m.member ?? "", arguments: m.arguments)
                    for c in subscribers.withLock({ Array($0.values) }) { c.yield(s) }
                }
                return .success(c)
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

    /// Closes the connection: sessions made with the default lifetime end now.
    public func close() {
        let c = connection
        connection = nil
        guard c != nil else { return }
        loop.sync { c?.close() }
        loop.stop()
        for c in subscribers.withLock({ s in defer { s.removeAll() }; return Array(s.values) }) { c.finish() }
    }

    /// This connection's unique bus name.
    public var uniqueName: String { let c = connection; return loop.sync { c?.uniqueName ?? "" } }

    /// Every signal audiod emits from now on.
    public func signals() -> AsyncStream<AudiodSignal> {
        let (stream, continuation) = AsyncStream<AudiodSignal>.makeStream()
        let id = UUID()
        subscribers.withLock { $0[id] = continuation }
        continuation.onTermination = { [weak self] _ in _ = self?.subscribers.withLock { $0.removeValue(forKey: id) } }
        return stream
    }

    /// Calls a method of audiod and returns the reply's arguments.
    public func call(_ path: String, _ interface: String, _ member: String, _ args: [DBusValue] = []) async throws(AudiodError)
        -> [DBusValue]
    {
        let c = connection
        let result: Result<[DBusValue], AudiodError> = await withCheckedContinuation { cont in
            loop.execute {
                guard let c, let m = DBusMessage.methodCall(destination: Self.busName, path: path, interface: interface, member: member)
                else {
                    return cont.resume(returning: .failure(AudiodError(name: "org.freedesktop.DBus.Error.Failed", message: "not connected")))
                }
                guard m.append(args) else {
                    return cont.resume(returning: .failure(AudiodError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "arguments cannot be encoded")))
                }
                c.call(m) { r in
                    guard let r else {
                        return cont.resume(returning: .failure(AudiodError(name: "org.freedesktop.DBus.Error.NoReply", message: "no reply from audiod")))
                    }
                    if r.kind == .error {
                        cont.resume(returning: .failure(AudiodError(name: r.errorName ?? "", message: r.arguments.first?.stringValue ?? "")))
                    } else {
                        cont.resume(returning: .success(r.arguments))
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
            throw AudiodError(name: "org.freedesktop.DBus.Error.InvalidSignature", message: "audiod answered Get with \(out)")
        }
        return v
    }

    /// `org.freedesktop.DBus.Properties.GetAll`.
    public func properties(_ path: String, _ interface: String) async throws(AudiodError) -> [String: DBusValue] {
        let out = try await call(path, Self.propertiesInterface, "GetAll", [.string(interface)])
        return out.first?.propertyMap ?? [:]
    }

    /// `org.freedesktop.DBus.Properties.Set`.
    public func setProperty(_ path: String, _ interface: String, _ name: String, _ value: DBusValue) async throws(AudiodError) {
        _ = try await call(path, Self.propertiesInterface, "Set", [.string(interface), .string(name), .variant(value)])
    }
}
