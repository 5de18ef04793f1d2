import AudioPolicy
import AudiodTestKit
import Foundation
import Logging
import PulseBackend
import Synchronization
import Testing

/// What the backend believes exists must be what the server has, however fast streams come and go.
@Suite(.serialized)
struct StreamTrackingTests {
    /// Reads are deduplicated (at most one in flight per stream) and stale replies dropped: neither may lose a
    /// stream that appears while others go, nor keep one that went.
    @Test("streams that come and go in a burst are all known, and only they",
          arguments: ServerKind.allCases)
    func churn(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let loop = try MainLoop()
        loop.start()
        var logger = Logger(label: "audiod.test")
        logger.logLevel = .critical
        let backend = PulseBackend(loop: loop, options: .init(server: server.pulseServer, clientName: "tracker"), logger: logger)
        let known = Mutex<Set<UInt32>>([])
        loop.sync {
            backend.onEvent = { e in
                switch e {
                case .policy(.streamAppeared(let i)) where i.id.kind == .playback:
                    _ = known.withLock { $0.insert(i.id.index) }
                case .policy(.streamRemoved(let id)) where id.kind == .playback:
                    _ = known.withLock { $0.remove(id.index) }
                default: break
                }
            }
            backend.start()
        }
        defer { loop.sync { backend.stop() }; loop.stop() }
        #expect(waitFor(10) { loop.sync { backend.isConnected } }, "the backend did not connect")

        // One connection per stream: pipewire-pulse 0.3.65 crashes when a client closes a stream and at once opens
        // another on the same connection (the new stream's first data arrives on the reused channel).
        var clients: [(ToneClient, UInt32)] = []
        for round in 0..<60 {
            // Close the oldest, then open one at once.
            if clients.count >= 4 { clients.removeFirst().0.closeAll() }
            let tone = try ToneClient(server: server.pulseServer, name: "churn-\(round)")
            clients.append((tone, try tone.open(["media.role": "music"]).index))
        }
        let expected = Set(clients.map(\.1))
        var last: Set<UInt32> = []
        let agreed = waitFor(10) {
            last = known.withLock { $0 }
            return last == expected
        }
        #expect(agreed, "the backend knows \(last.sorted()), the server has \(expected.sorted())")
        clients.forEach { $0.0.closeAll() }
        #expect(waitFor(10) { known.withLock { $0.isEmpty } }, "streams closed but still known: \(known.withLock { $0 })")
    }
}
