import AudioPolicy
@testable import PulseBackend
import Testing

/// The connection's life, scripted: no server, no clock.
struct ServerSessionTests {
    struct Value: TrackedStreamValue {
        var muted = false
        var volume: [UInt32] = [65536]
    }

    typealias Session = ServerSession<Value>
    static let ms: UInt64 = 1_000_000

    static func session() -> Session {
        Session(
            tracker: StreamTracker(volumeTolerance: 64),
            ledger: RestoreLedger(volumeTolerance: 64, leakWindowNanoseconds: 2_000 * ms, restoreSettleNanoseconds: 2_000 * ms),
            initialBackoffNanoseconds: 50 * ms, maximumBackoffNanoseconds: 1_000 * ms)
    }

    /// Connects and answers every first read but `except`, in the order given.
    static func enumerate(
        _ s: inout Session, name: String?, restoreDatabase: Bool, order: [Session.FirstRead] = Session.FirstRead.allCases
    ) -> Session.Enumerated {
        let connecting = s.connecting()
        #expect(connecting)
        _ = s.connected()
        if let name { s.serverDescribed(name: name) }
        s.restoreDatabaseAnswered(present: restoreDatabase)
        var last = Session.Enumerated.waiting
        for (n, read) in order.enumerated() {
            last = s.firstReadDone(read)
            if n < order.count - 1 { #expect(last == .waiting, "ready before every first read answered (\(read))") }
        }
        return last
    }

    @Test func reportsWaitForEveryFirstReadInWhateverOrderTheyAnswer() {
        var s = Self.session()
        let reversed = Array(Session.FirstRead.allCases.reversed())
        #expect(Self.enumerate(&s, name: "pulseaudio 16.1", restoreDatabase: true, order: reversed) == .ready(.pulseAudio))
        #expect(s.isReady && s.hasRestoreDatabase && !s.onPipeWire)
        #expect(!s.tracker.holdsUnconfirmed)
        #expect(!s.ledger.savesLate)
        // A late duplicate answer changes nothing.
        let late = s.firstReadDone(.sinks)
        #expect(late == .waiting)
        #expect(s.isReady)
    }

    @Test func pipewirePulseIsLateAndKeepsNoRestoreEntriesToRewrite() {
        var s = Self.session()
        // pipewire-pulse answers the restore-database test, but lists nothing.
        #expect(Self.enumerate(&s, name: "PulseAudio (on PipeWire 0.3.65)", restoreDatabase: true) == .ready(.pipeWire))
        #expect(s.onPipeWire)
        #expect(!s.hasRestoreDatabase)
        #expect(s.tracker.holdsUnconfirmed, "pipewire-pulse acknowledges before applying")
        #expect(s.ledger.savesLate, "WirePlumber saves and restores a moment late")
        let f = Session.Flavor.pipeWire
        #expect(f.listsUnlinkedStreams && f.confirmsLate && f.savesLate && !f.listsRestoreEntries)
        let p = Session.Flavor(serverName: "pulseaudio 16.1")
        #expect(p == .pulseAudio && !p.listsUnlinkedStreams && p.listsRestoreEntries)
    }

    @Test func aServerThatNeverDescribesItselfIsDropped() {
        var s = Self.session()
        #expect(Self.enumerate(&s, name: nil, restoreDatabase: false) == .drop(reason: "the server did not describe itself"))
        #expect(!s.isReady)
        let delay = s.dropped()
        #expect(delay == 50 * Self.ms)
    }

    @Test func reconnectingBacksOffDoublingUpToTheBoundAndStartsOverOnceConnected() {
        var s = Self.session()
        var delays: [UInt64] = []
        let first = s.connecting()
        #expect(first)
        for _ in 0..<7 {
            guard let d = s.dropped() else {
                Issue.record("no reconnect")
                return
            }
            delays.append(d / Self.ms)
            #expect(s.phase == .backingOff(delay: d))
            let again = s.connecting()
            #expect(again, "the backoff's end connects again")
        }
        #expect(delays == [50, 100, 200, 400, 800, 1_000, 1_000])
        _ = s.connected()
        let afterUp = s.dropped()
        #expect(afterUp == 50 * Self.ms, "a connection that came up starts the backoff over")
    }

    @Test func stoppingEndsEveryAttemptUntilStartedAgain() {
        var s = Self.session()
        let first = s.connecting(), second = s.connecting()
        #expect(first)
        #expect(!second, "a second attempt while one is under way")
        _ = s.dropped()
        s.stop()
        let afterStop = s.connecting()
        #expect(!afterStop, "the backoff's timer fired after stop")
        let delay = s.dropped()
        #expect(delay == nil, "a stopped session schedules nothing")
        #expect(s.isStopped)
        s.restart()
        let restarted = s.connecting()
        #expect(restarted)
    }

    @Test func aDroppedConnectionsAnswersAreNotBelievedAndItsStreamsAreForgotten() {
        var s = Self.session()
        _ = Self.enumerate(&s, name: "pulseaudio 16.1", restoreDatabase: true)
        let id = StreamID.playback(4)
        s.ledger.keyed(id, "sink-input-by-application-name:Music")
        guard let read = s.tracker.noticed(id) else {
            Issue.record("no read")
            return
        }
        _ = s.dropped()
        let answer = s.tracker.replied(read, Value(muted: true), now: 0)
        #expect(answer.believe == nil, "an answer from the old connection")
        #expect(s.ledger.key(of: id) == nil)
        #expect(!s.isReady && !s.hasRestoreDatabase)
    }
}
