import AudiodCore
import DBusService
import Foundation
import LoopThread
import PulseBackend
import PulseLoop
import Synchronization

/// A D-Bus client of audiod for tests: its own loop thread and bus connection, calls that wait for their reply,
/// and every signal audiod emits, recorded in order.
public final class BusClient: @unchecked Sendable {
    public let loop: MainLoop
    private var connection: LoopBound<DBusConnection>?
    private let signals = Mutex<[(path: String, member: String, args: [DBusValue], at: Date)]>([])

    /// `recordSignals: false` for a client that only calls: dbus-daemon then routes audiod's signals elsewhere.
    public init(address: String, recordSignals: Bool = true) throws {
        loop = try MainLoop()
        loop.start()
        connection = try connect(address, on: loop) { [self] c in
            if recordSignals { c.addMatch("type='signal',sender='org.audiod.AudioSession1'") }
            c.onMessage = { [self] m in
                guard m.kind == .signal else { return }
                let entry = (path: m.path ?? "", member: m.member ?? "", args: m.arguments, at: Date())
                signals.withLock { $0.append(entry) }
            }
        }
    }

    public var uniqueName: String {
        let c = connection
        return loop.sync { c?.value.uniqueName ?? "" }
    }

    /// Calls a method of audiod; the reply's arguments or the error it answered.
    public func call(_ path: String, _ interface: String, _ member: String, _ args: [DBusValue] = []) -> Result<
        [DBusValue], DBusError
    > {
        callAny(destination: "org.audiod.AudioSession1", path, interface, member, args)
    }

    /// Sends a message as it is (no reply awaited): how a test speaks as a peer that lies — unicast signals,
    /// forged bus-driver signals, descriptors.
    public func send(_ m: DBusMessage) {
        let c = connection
        let handed = Handover(m)
        loop.sync { _ = c?.value.send(handed.message) }
    }

    /// A method call to the bus driver (`org.freedesktop.DBus`).
    public func callBus(_ member: String, _ args: [DBusValue]) -> Result<[DBusValue], DBusError> {
        callAny(destination: "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", member, args)
    }

    /// Sends `count` calls made by `make` without waiting between them (they queue in audiod's socket, as a
    /// flooding client's would) and returns every answer in order.
    public func callPipelined(_ count: Int, _ make: @escaping @Sendable (Int) -> DBusMessage?) -> [Result<
        [DBusValue], DBusError
    >] {
        callPipelinedInArrivalOrder(count, make).sorted { $0.index < $1.index }.map(\.result)
    }

    /// As `callPipelined`, with the answers in the order they arrived (each with the index of its call).
    public func callPipelinedInArrivalOrder(_ count: Int, _ make: @escaping @Sendable (Int) -> DBusMessage?)
        -> [(index: Int, result: Result<[DBusValue], DBusError>)]
    {
        let c = connection
        let results = Mutex<[Int: Result<[DBusValue], DBusError>]>([:])
        let arrived = Mutex<[Int]>([])
        let done = DispatchSemaphore(value: 0)
        loop.execute {
            for i in 0..<count {
                guard let c = c?.value, let m = make(i) else {
                    results.withLock { $0[i] = .failure(.failed("bad call")) }
                    if results.withLock({ $0.count }) == count { done.signal() }
                    continue
                }
                c.call(m, timeoutMilliseconds: 60_000) { r in
                    let result = Self.result(r)
                    arrived.withLock { $0.append(i) }
                    let n = results.withLock { d -> Int in
                        d[i] = result
                        return d.count
                    }
                    if n == count { done.signal() }
                }
            }
        }
        _ = done.wait(timeout: .now() + 120)
        let order = arrived.withLock { $0 }
        let missing = Set(0..<count).subtracting(order).sorted()
        return results.withLock { d in (order + missing).map { ($0, d[$0] ?? .failure(.failed("timed out"))) } }
    }

    private static func result(_ r: DBusMessage?) -> Result<[DBusValue], DBusError> {
        if let r, r.kind == .methodReturn { return .success(r.arguments) }
        if let r, r.kind == .error {
            return .failure(DBusError(name: r.errorName ?? "", message: r.arguments.first?.stringValue ?? ""))
        }
        return .failure(.failed("no reply"))
    }

    /// A method call to any destination.
    public func callAny(destination: String, _ path: String, _ interface: String, _ member: String, _ args: [DBusValue])
        -> Result<[DBusValue], DBusError>
    {
        let c = connection
        let done = DispatchSemaphore(value: 0)
        let box = Mutex<Result<[DBusValue], DBusError>?>(nil)
        loop.execute {
            guard let c = c?.value,
                let m = DBusMessage.methodCall(
                    destination: destination, path: path, interface: interface, member: member)
            else {
                box.withLock { $0 = .failure(.failed("bad call")) }
                done.signal()
                return
            }
            m.append(args)
            c.call(m, timeoutMilliseconds: 10_000) { r in
                box.withLock { $0 = Self.result(r) }
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
    public func makeSession(
        pid: pid_t, _ category: String, mode: String = "default", options: [String] = [],
        lifetime: String? = nil, activate: Bool = false
    ) throws -> String {
        var hints: [(String, DBusValue)] = [
            ("pid", .uint32(UInt32(pid))), ("application-name", .string("test-\(pid)")),
        ]
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

    /// Every signal received so far, in order, with when the test's connection received it.
    public func allTimedSignals() -> [(path: String, member: String, args: [DBusValue], at: Date)] {
        signals.withLock { $0 }
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
        waitFor(timeout) {
            self.received(API.managerPath, "InterfacesRemoved").contains { $0.first == .objectPath(path) }
        }
    }

    /// Closes the connection and stops the loop; a second call does nothing.
    public func close() {
        guard let c = connection else { return }
        connection = nil
        loop.sync { c.value.close() }
        loop.stop()
    }
}

/// An MPRIS player on the bus, scripted by the test: it owns `org.mpris.MediaPlayer2.<name>` on a connection of the
/// test process (so a stream the test process plays is its stream), answers `Get PlaybackStatus` as told, and
/// records the `Pause`/`Play` calls it gets.
public final class ScriptedPlayer: @unchecked Sendable {
    // @unchecked: `connection` and the script live on `loop`'s thread; `calls` is a Mutex.
    public let loop: MainLoop
    public let busName: String
    private var connection: LoopBound<DBusConnection>?
    private let calls = Mutex<[String]>([])
    private let state = Mutex<(status: String, getAnswer: String?, announceOnGet: String?)>(("Stopped", nil, nil))

    public init(address: String, name: String) throws {
        loop = try MainLoop()
        loop.start()
        busName = "org.mpris.MediaPlayer2." + name
        connection = try connect(address, on: loop) { [self] c in
            c.onMessage = { [self] m in handle(m, c) }
            try c.requestName(busName)
        }
    }

    /// The status it reports (in `PropertiesChanged`, and to `Get` unless `answerGet` says otherwise).
    public func setStatus(_ status: String, announce: Bool = true) {
        state.withLock { $0.status = status }
        if announce { emitStatus(status) }
    }

    /// Scripts the next `Get PlaybackStatus`: first announce `announce` with `PropertiesChanged`, then answer with
    /// `answer` — a player whose answer lags its own signal (seen with Firefox).
    public func scriptGet(announce: String?, answer: String) {
        state.withLock {
            $0.announceOnGet = announce
            $0.getAnswer = answer
        }
    }

    public var receivedCalls: [String] { calls.withLock { $0 } }

    /// A `PropertiesChanged` whose metadata holds `bytes` of text, beside its status: a player (or a liar holding a
    /// player's name) that sends far more than any player does.
    public func emitOversizedChange(bytes: Int) {
        let status = state.withLock { $0.status }
        emitChange([
            ("Metadata", .properties([("xesam:comment", .strings([String(repeating: "x", count: bytes)]))])),
            ("PlaybackStatus", .string(status)),
        ])
    }

    private func emitStatus(_ status: String) { emitChange([("PlaybackStatus", .string(status))]) }

    /// `PropertiesChanged` of the player interface with these properties.
    private func emitChange(_ properties: [(String, DBusValue)]) {
        let c = connection
        loop.sync { c.map { Self.send(properties, on: $0.value) } }
    }

    private static func send(_ properties: [(String, DBusValue)], on c: DBusConnection) {
        guard
            let s = DBusMessage.signal(
                path: "/org/mpris/MediaPlayer2", interface: "org.freedesktop.DBus.Properties",
                member: "PropertiesChanged")
        else { return }
        s.append([.string("org.mpris.MediaPlayer2.Player"), .properties(properties), .strings([])])
        _ = c.send(s)
    }

    private func handle(_ m: DBusMessage, _ c: DBusConnection) {
        guard m.kind == .methodCall, let member = m.member else { return }
        switch (m.interface, member) {
        case ("org.freedesktop.DBus.Properties", "Get"):
            let (status, answer, announce) = state.withLock { s in
                defer {
                    s.getAnswer = nil
                    s.announceOnGet = nil
                }
                return (s.status, s.getAnswer, s.announceOnGet)
            }
            if let announce { Self.send([("PlaybackStatus", .string(announce))], on: c) }
            guard let r = m.makeReturn() else { return }
            r.append([.variant(.string(answer ?? status))])
            _ = c.send(r)
        case ("org.mpris.MediaPlayer2.Player", "Pause"), ("org.mpris.MediaPlayer2.Player", "Play"):
            calls.withLock { $0.append(member) }
            if let r = m.makeReturn() { _ = c.send(r) }
        default:
            if let r = m.makeError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "not scripted") {
                _ = c.send(r)
            }
        }
    }

    public func close() {
        let c = connection
        connection = nil
        loop.sync { c?.value.close() }
        loop.stop()
    }
}

/// Connects on `loop`'s thread and sets the connection up there (the connection is confined to that thread).
private func connect(_ address: String, on loop: MainLoop, _ setUp: @escaping @Sendable (DBusConnection) throws -> Void)
    throws -> LoopBound<DBusConnection>
{
    let made: Result<LoopBound<DBusConnection>, DBusError> = loop.sync {
        do {
            let c = try DBusConnection(address: address, loop: loop)
            try setUp(c)
            return .success(loop.bind(c))
        } catch let e as DBusError {
            return .failure(e)
        } catch {
            return .failure(.failed("\(error)"))
        }
    }
    return try made.get()
}

/// The number of open file descriptors of a process (entries of /proc/PID/fd); 0 when it is gone.
public func openDescriptors(_ pid: pid_t) -> Int {
    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd"))?.count ?? 0
}

/// A running audiod binary on a test run's bus and server.
public struct Daemon {
    public let child: Child
    public let client: BusClient

    /// The audiod the tests run: `$AUDIOD_EXECUTABLE` (a release or sanitizer build, for scripts/reliability), or
    /// the one built beside the tests.
    public static var executable: String {
        ProcessInfo.processInfo.environment["AUDIOD_EXECUTABLE"].flatMap { $0.isEmpty ? nil : $0 }
            ?? TestServer.builtProduct("audiod")
    }

    /// Starts the built audiod (debug logging unless `arguments` say otherwise) and waits until it answers.
    /// `wrapper` runs it (`setpriv …`: the same process, with less privilege).
    public static func start(
        _ server: TestServer, arguments: [String] = ["--log-level", "debug"], log: String = "audiod.log",
        environment: [String: String] = [:], wrapper: [String] = [], executable: String = Daemon.executable
    ) throws -> Daemon {
        let child = try server.spawn(wrapper + [executable] + arguments, environment: environment, log: log)
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        let client = try BusClient(address: address)
        // The name is asked of the bus driver first: a call to a name nobody owns yet would have the bus start a
        // second audiod by D-Bus activation — without `wrapper` — and one of the two would lose the journal's lock.
        guard
            waitFor(
                10,
                {
                    guard
                        case .success(let owned) = client.callBus("NameHasOwner", [.string("org.audiod.AudioSession1")]),
                        owned.first == .bool(true)
                    else { return false }
                    if case .success = client.call(API.managerPath, API.peer.name, "Ping") { return true }
                    return false
                })
        else {
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

    /// The sessions whose `ApplicationName` is `name`, with their `Active`.
    public func sessions(named name: String) -> [(path: String, active: Bool)] {
        guard case .success(let out) = client.call(API.managerPath, API.objectManager.name, "GetManagedObjects"),
            case .dict(_, _, let pairs)? = out.first
        else { return [] }
        return pairs.compactMap { pair in
            guard case .objectPath(let path) = pair.0,
                client.property(path, API.session.name, "ApplicationName") == .string(name)
            else { return nil }
            return (path, client.property(path, API.session.name, "Active") == .bool(true))
        }
    }

    /// SIGKILL, as a crash would, and reaped: the journal and whatever audiod applied stay behind.
    public func kill() {
        client.close()
        child.signal(SIGKILL)
        _ = child.wait(timeout: 10)
    }
}

/// A message built on the test's thread and handed whole to the loop thread: messages are not Sendable (libdbus
/// messages change as they are read and sent), and nothing touches this one on the test's thread afterwards.
private final class Handover: @unchecked Sendable {
    let message: DBusMessage
    init(_ m: DBusMessage) { message = m }
}
