import AudioPolicy
import AudiodCore
import AudiodTestKit
import Foundation
import Logging
import LoopThread
import PulseBackend
import PulseLoop
import Synchronization
import Testing

/// An in-process arbiter (engine + real PulseBackend on its own loop thread) against a test run's server.
final class LiveArbiter: @unchecked Sendable {
    let loop: MainLoop
    /// Made before the loop runs, used only on it.
    let arbiter: LoopBound<Arbiter>
    let server: TestServer
    private let statusLog = Mutex<[Bool]>([])

    init(_ server: TestServer, settings: Settings = Settings(), journal: String? = nil) throws {
        self.server = server
        loop = try MainLoop()
        var logger = Logger(label: "audiod.test")
        logger.logLevel = ProcessInfo.processInfo.environment["AUDIOD_TEST_LOG"] != nil ? .debug : .critical
        let a = loop.bind(
            Arbiter(
                loop: loop, settings: settings,
                backend: PulseBackend.Options(
                    server: server.pulseServer, journalPath: journal ?? "\(server.directory)/audiod/journal"),
                logger: logger))
        arbiter = a
        loop.start()
        loop.sync { [self] in
            a.value.onServerStatus = { [self] info in statusLog.withLock { $0.append(info != nil) } }
            a.value.start()
        }
        guard waitFor(15, { self.connected }) else {
            throw TestKitError("the arbiter did not connect to \(server.kind)")
        }
    }

    var connected: Bool {
        let a = arbiter
        return loop.sync { a.value.serverInfo != nil }
    }
    /// Every ServerConnected change, in order.
    var statusChanges: [Bool] { statusLog.withLock { $0 } }

    /// Stops the arbiter the clean way (restoring everything) and waits.
    func shutdown() {
        let a = arbiter
        let done = DispatchSemaphore(value: 0)
        loop.execute { a.value.shutdown { done.signal() } }
        _ = done.wait(timeout: .now() + 10)
        loop.stop()
    }

    /// Stops without restoring anything, as a crash would (the journal stays).
    func crash() {
        let a = arbiter
        loop.sync { a.value.backend.stop() }
        loop.stop()
    }

    /// Sends a request to the engine and returns its reply.
    @discardableResult
    func request(_ make: @escaping @Sendable (RequestID) -> Event) -> Reply? {
        let a = arbiter
        return loop.sync { () -> Reply? in
            let r = a.value.makeRequestID()
            for case .reply(r, let reply) in a.value.handle(make(r)) { return reply }
            return nil
        }
    }

    /// A session for `pid` with a category, optionally activated; fails the test on an error reply.
    func session(
        pid: pid_t, _ category: String, options: [String] = [], mode: String = "default", activate: Bool = false
    )
        -> SessionID
    {
        guard case .session(let id)? = request({ .createSession($0, NewSession(pid: UInt32(pid))) }) else {
            Issue.record("CreateSession failed")
            return SessionID(0)
        }
        let set = request { .setCategory($0, id, category: category, mode: mode, options: options) }
        #expect(set == .ok, "SetCategory \(category) \(options): \(String(describing: set))")
        if activate { self.activate(id) }
        return id
    }

    func activate(_ id: SessionID) {
        let r = request { .setActive($0, id, active: true, options: []) }
        #expect(r == .ok, "SetActive(true): \(String(describing: r))")
    }

    func deactivate(_ id: SessionID, notify: Bool = true) {
        let r = request { .setActive($0, id, active: false, options: notify ? ["notify-others-on-deactivation"] : []) }
        #expect(r == .ok, "SetActive(false): \(String(describing: r))")
    }

    /// The engine's view of a process's first playback stream.
    func playbackView(pid: pid_t) -> StreamView? {
        let a = arbiter
        return loop.sync {
            a.value.engine.streamViews.first { $0.info.id.kind == .playback && $0.info.pid == UInt32(pid) }
        }
    }

    /// The engine's view of a stream.
    func streamView(_ index: UInt32, record: Bool = false) -> StreamView? {
        let a = arbiter
        return loop.sync { a.value.engine.streamView(StreamID(record ? .record : .playback, index)) }
    }
}

/// Expected ducked volume: `pa_sw_volume_multiply(user, pa_sw_volume_from_linear(level))` per channel.
func ducked(_ user: [UInt32], level: Double = 0.2) -> [UInt32] {
    user.map { Volume.multiply($0, Volume.fromLinear(level)) }
}
