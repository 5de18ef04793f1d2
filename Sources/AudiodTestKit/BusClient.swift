import AudiodCore
import DBusService
import Foundation
import PulseBackend
import Synchronization

/// A D-Bus client of audiod for tests: its own loop thread and bus connection, calls that wait for their reply,
/// and every signal audiod emits, recorded in order.
public final class BusClient: @unchecked Sendable {
    public let loop: MainLoop
    private var connection: DBusConnection?
    private let signals = Mutex<[(path: String, member: String, args: [DBusValue], at: Date)]>([])

    /// `recordSignals: false` for a client that only calls: dbus-daemon then routes audiod's signals elsewhere.
    public init(address: String, recordSignals: Bool = true) throws {
        loop = try MainLoop()
        loop.start()
        let l = loop
        let made: Result<DBusConnection, DBusError> = loop.sync { [self] in
            do {
                let c = try DBusConnection(address: address, loop: l)
                if recordSignals { c.addMatch("type='signal',sender='org.audiod.AudioSession1'") }
                c.onMessage = { [self] m in
                    guard m.kind == .signal else { return }
                    let entry = (path: m.path ?? "", member: m.member ?? "", args: m.arguments, at: Date())
                    signals.withLock { $0.append(entry) }
                }
                return .success(c)
            } catch let e as DBusError {
                return .failure(e)
            } catch {
                return .failure(.failed("\(error)"))
            }
        }
        connection = try made.get()
    }

    public var uniqueName: String { let c = connection; return loop.sync { c?.uniqueName ?? "" } }

    /// Calls a method of audiod; the reply's arguments or the error it answered.
    public func call(_ path: String, _ interface: String, _ member: String, _ args: [DBusValue] = []) -> Result<[DBusValue], DBusError> {
        let c = connection
        let done = DispatchSemaphore(value: 0)
        let box = Mutex<Result<[DBusValue], DBusError>?>(nil)
        loop.execute {
            guard let c, let m = DBusMessage.methodCall(
                destination: "org.audiod.AudioSession1", path: path, interface: interface, member: member)
            else {
                box.withLock { $0 = .failure(.failed("bad call")) }
                done.signal()
                return
            }
            m.append(args)
            c.call(m, timeoutMilliseconds: 10_000) { r in
                let result: Result<[DBusValue], DBusError>
                if let r, r.kind == .methodReturn {
                    result = .success(r.arguments)
                } else if let r, r.kind == .error {
                    result = .failure(DBusError(name: r.errorName ?? "", message: r.arguments.first?.stringValue ?? ""))
                } else {
                    result = .failure(.failed("no reply"))
                }
                box.withLock { $0 = result }
                done.signal()
            }
        }
        _ = done.wait(timeout: .now() + 15)
        return box.withLock { $0 } ?? .failure(.failed("timed out"))
    }

    public func manager(_ member: String, _ args: [DBusValue] = []) -> Result<[DBusValue], DBusError> {
        call(API.managerPath, API.manager.name, member, args)
    }

    public func session(_ path: String, _ member: String, _ args: [DBusValue] = []) -> Result<[DBusValue], DBusError> {
        call(path, API.session.name, member, args)
    }

    /// CreateSession for `pid` with a category, optionally active; returns the object path.
    public func makeSession(pid: pid_t, _ category: String, mode: String = "default", options: [String] = [],
                     lifetime: String? = nil, activate: Bool = false) throws -> String {
        var hints: [(String, DBusValue)] = [("pid", .uint32(UInt32(pid))), ("application-name", .string("test-\(pid)"))]
        if let lifetime { hints.append(("lifetime", .string(lifetime))) }
        guard case .success(let out) = manager("CreateSession", [.properties(hints)]),
            case .objectPath(let path)? = out.first
        else { throw TestKitError("CreateSession failed: \(manager("CreateSession", [.properties(hints)]))") }
        let set = session(path, "SetCategory", [.string(category), .string(mode), .strings(options)])
        guard case .success = set else { throw TestKitError("SetCategory failed: \(set)") }
        if activate {
            let a = session(path, "SetActive", [.bool(true), .strings([])])
            guard case .success = a else { throw TestKitError("SetActive failed: \(a)") }
        }
        return path
    }

    public func property(_ path: String, _ interface: String, _ name: String) -> DBusValue? {
        guard case .success(let out) = call(path, API.properties.name, "Get", [.string(interface), .string(name)]),
            case .variant(let v)? = out.first
        else { return nil }
        return v
    }

    /// Every signal received so far, in order.
    public func allSignals() -> [(path: String, member: String, args: [DBusValue])] {
        signals.withLock { $0.map { ($0.path, $0.member, $0.args) } }
    }

    /// Signals received so far from `path` named `member`.
    public func received(_ path: String, _ member: String) -> [[DBusValue]] {
        signals.withLock { $0.filter { $0.path == path && $0.member == member }.map(\.args) }
    }

    public func waitForSignal(_ path: String, _ member: String, count: Int = 1, timeout: Double = 5) -> [[DBusValue]] {
        _ = waitFor(timeout) { self.received(path, member).count >= count }
        return received(path, member)
    }

    /// Waits for InterfacesRemoved of this object path.
    public func waitForRemoval(_ path: String, timeout: Double = 5) -> Bool {
        waitFor(timeout) { self.received(API.managerPath, "InterfacesRemoved").contains { $0.first == .objectPath(path) } }
    }

    public func close() {
        let c = connection
        connection = nil
        loop.sync { c?.close() }
        loop.stop()
    }
}

/// A running audiod binary on a test run's bus and server.
public struct Daemon {
    public let child: Child
    public let client: BusClient

    /// Starts the built audiod (debug logging unless `arguments` say otherwise) and waits until it answers.
    public static func start(_ server: TestServer, arguments: [String] = ["--log-level", "debug"], log: String = "audiod.log") throws -> Daemon {
        let child = try server.spawn([TestServer.builtProduct("audiod")] + arguments, log: log)
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        let client = try BusClient(address: address)
        guard waitFor(10, { if case .success = client.call(API.managerPath, API.peer.name, "Ping") { return true }; return false }) else {
            client.close()
            throw TestKitError("audiod did not answer on the bus: \(server.file(log).suffix(2000))")
        }
        return Daemon(child: child, client: client)
    }

    public func stop() {
        client.close()
        child.signal(SIGTERM)
        _ = child.wait(timeout: 10)
    }
}
