import AudioPolicy
import AudiodTestKit
import Foundation
import Logging
import LoopThread
import PulseBackend
import PulseLoop
import Synchronization
import Testing

/// What the backend believes exists must be what the server has, however fast streams come and go.
@Suite(.serialized)
struct StreamTrackingTests {
    /// Reads are deduplicated (at most one in flight per stream) and stale replies dropped: neither may lose a
    /// stream that appears while others go, nor keep one that went.
    @Test(
        "streams that come and go in a burst are all known, and only they",
        arguments: ServerKind.tested)
    func churn(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let loop = try MainLoop()
        loop.start()
        var logger = Logger(label: "audiod.test")
        logger.logLevel = .critical
        let log = logger
        let backend = loop.sync {
            loop.bind(
                PulseBackend(loop: loop, options: .init(server: server.pulseServer, clientName: "tracker"), logger: log)
            )
        }
        let known = Mutex<Set<UInt32>>([])
        loop.sync {
            backend.value.onEvent = { e in
                switch e {
                case .policy(.streamAppeared(let i)) where i.id.kind == .playback:
                    _ = known.withLock { $0.insert(i.id.index) }
                case .policy(.streamRemoved(let id)) where id.kind == .playback:
                    _ = known.withLock { $0.remove(id.index) }
                default: break
                }
            }
            backend.value.start()
        }
        defer {
            loop.sync { backend.value.stop() }
            loop.stop()
        }
        #expect(waitFor(10) { loop.sync { backend.value.isConnected } }, "the backend did not connect")

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
        for c in clients { c.0.closeAll() }
        #expect(
            waitFor(10) { known.withLock { $0.isEmpty } }, "streams closed but still known: \(known.withLock { $0 })")
    }

    /// pipewire-pulse acknowledges a mute before its node has it: a read in that gap showed the old value, and the
    /// engine took it for the user's (measured: 4 of 200 rounds with another client changing the same stream).
    /// An unmute that was not the user's activates an interrupted app; a lifted mute kept as the user's stays.
    @Test(
        "audiod's own change is never reported undone by a read the server answered before applying it",
        arguments: ServerKind.tested)
    func ownChangeHolds(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let a = try Tracker(server, name: "audiod-like")
        defer { a.stop() }
        let other = try Tracker(server, name: "mixer")
        defer { other.stop() }
        let tone = try ToneClient(server: server.pulseServer, name: "tone")
        let index = try tone.open(["media.role": "music"]).index
        let id = StreamID.playback(index)
        #expect(waitFor(10) { a.latest(index) != nil && other.latest(index) != nil }, "the stream was not seen")

        var undone: [Int] = []
        var unanswered = 0
        for round in 0..<400 {
            let want = round % 2 == 0
            // Cleared in the loop turn that sends the mute: a report of an earlier change (the new stream settling,
            // the previous round's volume) delivered between clearing and sending is not about this mute.
            a.apply([.setStreamMute(id, want)], clearingReportsOf: index)
            // Another client changing the same stream makes the server announce it, and audiod read it, at once.
            let v = UInt32(30_000 + round * 50)
            other.apply([.setStreamVolume(id, Volume(channels: [v, v]))])
            // A server that stops answering fails the test at once, with its log, instead of 400 waits of 5 s (one CI
            // run on PipeWire 1.4 sat here for over ten minutes: pipewire-pulse's log ended with refused ramps).
            unanswered = waitFor(5) { a.latest(index)?.muted == want } ? 0 : unanswered + 1
            if unanswered >= 3 {
                let logs = ["pipewire-pulse.log", "pulse.log"].map { server.file($0).suffix(1200) }.joined(
                    separator: " / ")
                Issue.record("round \(round): three mutes in a row never reported; the server's log: \(logs)")
                break
            }
            usleep(5_000)
            if a.reports(index).contains(where: { $0.muted != want }) { undone.append(round) }
        }
        #expect(undone.isEmpty, "rounds where audiod's own mute was reported undone: \(undone)")

        // Someone else's change right after audiod's is still learnt (once the wait for confirmation is over).
        // (Two connections: the other's unmute is sent once the server has audiod's mute, or the server may take
        // them in the other order and rightly end muted.)
        a.apply([.setStreamMute(id, true)])
        _ = waitFor(5) { (try? server.playbackStreams())?.first { $0.index == index }?.muted == true }
        other.apply([.setStreamMute(id, false)])
        #expect(
            waitFor(5) {
                a.latest(index)?.muted == false
                    && (try? server.playbackStreams())?.first { $0.index == index }?.muted == false
            },
            "another client's unmute after audiod's mute was not learnt")
    }
}

/// A PulseBackend on its own loop, recording what it reports per stream. No native PipeWire connection: what is
/// tested here is the pulse side's tracking; the ramps have their own tests (FadeTests).
final class Tracker: @unchecked Sendable {
    let loop: MainLoop
    let backend: LoopBound<PulseBackend>
    private let seen = Mutex<[UInt32: [StreamInfo]]>([:])

    init(_ server: TestServer, name: String) throws {
        loop = try MainLoop()
        loop.start()
        var logger = Logger(label: "audiod.test")
        logger.logLevel = .critical
        let (l, log) = (loop, logger)
        let b = l.sync {
            var options = PulseBackend.Options(server: server.pulseServer, clientName: name)
            options.deClickMilliseconds = 0
            return l.bind(PulseBackend(loop: l, options: options, logger: log))
        }
        backend = b
        loop.sync { [weak self] in
            b.value.onEvent = { [weak self] e in
                switch e {
                case .policy(.streamAppeared(let i)), .policy(.streamChanged(let i)):
                    self?.seen.withLock { $0[i.id.index, default: []].append(i) }
                default: break
                }
            }
            b.value.start()
        }
        guard waitFor(10, { self.loop.sync { b.value.isConnected } }) else {
            stop()
            throw TestKitError("\(name) did not connect")
        }
    }

    func latest(_ index: UInt32) -> StreamInfo? { seen.withLock { $0[index]?.last } }
    func reports(_ index: UInt32) -> [StreamInfo] { seen.withLock { $0[index] ?? [] } }
    func apply(_ effects: [Effect]) {
        let b = backend
        loop.sync { b.value.apply(effects) }
    }
    func apply(_ effects: [Effect], clearingReportsOf index: UInt32) {
        let b = backend
        loop.sync {
            self.seen.withLock { $0[index] = [] }
            b.value.apply(effects)
        }
    }
    func stop() {
        let b = backend
        loop.sync { b.value.stop() }
        loop.stop()
    }
}
