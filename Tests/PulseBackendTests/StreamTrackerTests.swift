import AudioPolicy
import Testing

@testable import PulseBackend

/// The tracker's races, scripted: no server, no clock, every interleaving written down.
struct StreamTrackerTests {
    struct Value: TrackedStreamValue {
        var muted = false
        var volume: [UInt32] = [65536, 65536]
    }

    static let a = StreamID.playback(7)
    static let ms: UInt64 = 1_000_000

    /// A new stream read once and believed.
    static func known(_ t: inout StreamTracker<Value>, _ id: StreamID = a, _ v: Value = Value()) {
        guard let r = t.noticed(id) else {
            Issue.record("no read for a new stream")
            return
        }
        #expect(t.replied(r, v, now: 0).believe == v)
    }

    @Test func aReplyIssuedBeforeOurOperationArrivingAfterItIsStale() {
        var t = StreamTracker<Value>(volumeTolerance: 64)
        Self.known(&t)
        // The user touches the stream: a read goes out. Then audiod mutes it; then the read's answer comes.
        let before = t.noticed(Self.a)
        #expect(before != nil)
        t.sent(Self.a, mute: true, now: 0)
        let (believe, again) = t.replied(before!, Value(muted: false), now: 1)
        #expect(believe == nil, "a value read before audiod's mute was believed")
        // It is read again, and that answer (after the mute) is believed.
        guard let again else {
            Issue.record("the stream was not read again")
            return
        }
        #expect(t.replied(again, Value(muted: true), now: 2).believe?.muted == true)
    }

    @Test func anOlderReplyAfterANewerOneIsDropped() {
        var t = StreamTracker<Value>(volumeTolerance: 64)
        Self.known(&t)
        let first = t.noticed(Self.a)!
        // A list read issued after the first read answers before it.
        let list = t.listIssued()
        #expect(t.listed(Value(muted: true), Self.a, seq: list, now: 0).believe?.muted == true)
        t.listDone(list)
        #expect(t.replied(first, Value(muted: false), now: 1).believe == nil)
    }

    @Test func oneReadInFlightPerStreamAndOneMoreAfterIt() {
        var t = StreamTracker<Value>(volumeTolerance: 64)
        Self.known(&t)
        let r = t.noticed(Self.a)
        #expect(r != nil)
        // Ten more notices while it is out: no new read now, exactly one after.
        for _ in 0..<10 { #expect(t.noticed(Self.a) == nil) }
        let (_, next) = t.replied(r!, Value(), now: 0)
        #expect(next != nil)
        #expect(t.replied(next!, Value(), now: 0).next == nil)
    }

    @Test func pipeWireAcknowledgesBeforeApplying() {
        var t = StreamTracker<Value>(volumeTolerance: 64, confirmationNanoseconds: 1_000 * Self.ms)
        t.holdsUnconfirmed = true
        Self.known(&t)
        t.sent(Self.a, mute: true, now: 0)
        // A read sent after the acknowledgement still shows the old value: audiod's stands.
        let r1 = t.noticed(Self.a)!
        #expect(t.replied(r1, Value(muted: false), now: 10 * Self.ms).believe?.muted == true)
        // The server shows it: confirmed. A later unmute is someone else's and believed.
        let r2 = t.noticed(Self.a)!
        #expect(t.replied(r2, Value(muted: true), now: 20 * Self.ms).believe?.muted == true)
        let r3 = t.noticed(Self.a)!
        #expect(t.replied(r3, Value(muted: false), now: 30 * Self.ms).believe?.muted == false)
        #expect(t.nextDeadline == nil)
    }

    @Test func anUnconfirmedValueGivesWayAfterTheWindow() {
        var t = StreamTracker<Value>(volumeTolerance: 64, confirmationNanoseconds: 1_000 * Self.ms)
        t.holdsUnconfirmed = true
        Self.known(&t)
        t.sent(Self.a, volume: [20000, 20000], now: 0)
        #expect(t.nextDeadline == 1_000 * Self.ms)
        #expect(t.tick(now: 500 * Self.ms).isEmpty)
        // Nothing confirmed it: at the deadline the stream is read, and the reply is the truth.
        let reads = t.tick(now: 1_000 * Self.ms)
        #expect(reads.map(\.stream) == [Self.a])
        #expect(
            t.replied(reads[0], Value(volume: [65536, 65536]), now: 1_001 * Self.ms).believe?.volume == [65536, 65536])
    }

    /// A duck the server ramps commits its volume only at the ramp's end: until then the server shows the volume
    /// before, which is audiod's, and any third volume is the user's, believed at once (not held 1 s as audiod's).
    @Test func duringAServerRampTheOldVolumeIsAudiodsAndAThirdIsTheUsers() {
        var t = StreamTracker<Value>(volumeTolerance: 64, confirmationNanoseconds: 1_000 * Self.ms)
        t.holdsUnconfirmed = true
        Self.known(&t)
        t.sent(Self.a, volume: [38326, 38326], now: 0, shown: [65536, 65536], holding: 550 * Self.ms)
        #expect(t.nextDeadline == 1_550 * Self.ms, "held for the ramp and the usual window after it")
        let r1 = t.noticed(Self.a)!
        #expect(t.replied(r1, Value(volume: [65536, 65536]), now: 100 * Self.ms).believe?.volume == [38326, 38326])
        let r2 = t.noticed(Self.a)!
        #expect(t.replied(r2, Value(volume: [39322, 39322]), now: 200 * Self.ms).believe?.volume == [39322, 39322])
        #expect(t.nextDeadline == nil, "the user's volume ends what audiod expected")
        // Without `shown`, as before: any other volume is held as audiod's until the window runs out.
        t.sent(Self.a, volume: [20000, 20000], now: 300 * Self.ms)
        let r3 = t.noticed(Self.a)!
        #expect(t.replied(r3, Value(volume: [39322, 39322]), now: 310 * Self.ms).believe?.volume == [20000, 20000])
    }

    @Test func withoutLateConfirmationTheReplyIsTheTruth() {
        var t = StreamTracker<Value>(volumeTolerance: 64)
        Self.known(&t)
        t.sent(Self.a, mute: true, now: 0)
        let r = t.noticed(Self.a)!
        #expect(t.replied(r, Value(muted: false), now: 1).believe?.muted == false)
        #expect(t.nextDeadline == nil)
    }

    @Test func theServerRestartsMidRead() {
        var t = StreamTracker<Value>(volumeTolerance: 64)
        Self.known(&t)
        let r = t.noticed(Self.a)!
        let list = t.listIssued()
        t.reset()
        // The old connection's answers are void, whenever they come.
        #expect(t.replied(r, Value(muted: true), now: 0) == (nil, nil))
        #expect(t.listed(Value(muted: true), Self.a, seq: list, now: 0) == (nil, nil))
        #expect(t.entryCount == 0)
        // The new connection reads afresh.
        let fresh = t.listIssued()
        #expect(t.listed(Value(muted: true), Self.a, seq: fresh, now: 0).believe?.muted == true)
    }

    @Test func aStreamIndexReappears() {
        var t = StreamTracker<Value>(volumeTolerance: 64)
        Self.known(&t)
        let old = t.noticed(Self.a)!
        t.removed(Self.a)
        // The server gives the index to a new stream while the old stream's read is out.
        #expect(t.noticed(Self.a) == nil)
        let (believe, next) = t.replied(old, Value(muted: true), now: 0)
        #expect(believe == nil, "the old stream's answer was taken for the new one")
        #expect(next != nil, "the new stream was never read")
        #expect(t.replied(next!, Value(muted: false), now: 1).believe?.muted == false)
    }

    @Test func aReadOfAStreamThatWentIsNotRepeated() {
        var t = StreamTracker<Value>(volumeTolerance: 64)
        Self.known(&t)
        let r = t.noticed(Self.a)!
        #expect(t.noticed(Self.a) == nil)
        t.removed(Self.a)
        #expect(t.replied(r, nil, now: 0) == (nil, nil))
        #expect(t.entryCount == 0)
    }

    @Test func aRefusedChangeIsReadAgain() {
        var t = StreamTracker<Value>(volumeTolerance: 64)
        t.holdsUnconfirmed = true
        Self.known(&t)
        t.sent(Self.a, mute: true, now: 0)
        let r = t.refused(Self.a)
        #expect(r != nil)
        #expect(t.replied(r!, Value(muted: false), now: 1).believe?.muted == false)
    }

    /// A fade writes a step every 20 ms. The user's volume that lands between two steps is read by a read that
    /// the next step makes stale; dropped, the user's change would be lost under the step. Its volume is neither
    /// the one believed last nor one audiod wrote: believed, and the stream read again.
    @Test func aChangeAFadeStepWentOverIsBelieved() {
        var t = StreamTracker<Value>(volumeTolerance: 64)
        Self.known(&t)
        let step1: [UInt32] = [60000, 60000]
        t.sent(Self.a, volume: step1, now: 0)
        let echo = t.noticed(Self.a)!
        #expect(t.replied(echo, Value(volume: step1), now: 1).believe?.volume == step1)
        // The user sets 30000; before the read's answer, the next step goes out.
        let user = t.noticed(Self.a)!
        t.sent(Self.a, volume: [55000, 55000], now: 2)
        let (believe, again) = t.replied(user, Value(volume: [30000, 30000]), now: 3)
        #expect(believe?.volume == [30000, 30000], "the user's volume under the step was dropped")
        guard let again else {
            Issue.record("not read again after an overwritten change")
            return
        }
        #expect(t.replied(again, Value(volume: [55000, 55000]), now: 4).believe?.volume == [55000, 55000])
    }

    /// Only the volume of such a reply is news: audiod's mute written after its read stands.
    @Test func anOverwrittenChangeKeepsAudiodsLaterMute() {
        var t = StreamTracker<Value>(volumeTolerance: 64)
        Self.known(&t)
        t.sent(Self.a, volume: [60000, 60000], now: 0)
        let echo = t.noticed(Self.a)!
        _ = t.replied(echo, Value(volume: [60000, 60000]), now: 1)
        let user = t.noticed(Self.a)!
        t.sent(Self.a, mute: true, now: 2)
        t.sent(Self.a, volume: [55000, 55000], now: 3)
        let believe = t.replied(user, Value(muted: false, volume: [30000, 30000]), now: 4).believe
        #expect(believe?.volume == [30000, 30000] && believe?.muted == true, "\(String(describing: believe))")
    }

    /// A reply that waited behind more writes than the tracker remembers shows audiod's own step, not the user's:
    /// taken for the user's, the step would stick as the user's volume under every duck after (the suspect for a soak
    /// that once left a stream at a fade's step). It stays stale; a user's change read after the oldest write
    /// remembered is still believed.
    @Test func anEchoOfAudiodsOwnWriteStaysStaleHoweverManyFollow() {
        var t = StreamTracker<Value>(volumeTolerance: 64)
        Self.known(&t)
        t.sent(Self.a, volume: [20_000, 20_000], now: 0)
        let r = t.noticed(Self.a)!
        for i in 1...70 { t.sent(Self.a, volume: [UInt32(20_000 + 200 * i), UInt32(20_000 + 200 * i)], now: 0) }
        let (believe, follow) = t.replied(r, Value(volume: [20_000, 20_000]), now: 1)
        #expect(believe == nil, "audiod's own write, forgotten, was taken for the user's")
        guard let user = follow else {
            Issue.record("a stale reply's stream was not read again")
            return
        }
        t.sent(Self.a, volume: [40_000, 40_000], now: 2)
        // Off the fade's grid (20,200 … 34,000): the user's, not one of audiod's remembered steps.
        #expect(t.replied(user, Value(volume: [50_000, 50_000]), now: 3).believe?.volume == [50_000, 50_000])
    }

    /// Stale replies that show audiod's own steps, or the value believed before, are still dropped.
    @Test func aStaleEchoOfAudiodsOwnStepIsDropped() {
        var t = StreamTracker<Value>(volumeTolerance: 64)
        Self.known(&t)
        t.sent(Self.a, volume: [60000, 60000], now: 0)
        let r = t.noticed(Self.a)!
        t.sent(Self.a, volume: [55000, 55000], now: 1)
        let (believe, follow) = t.replied(r, Value(volume: [60000, 60000]), now: 2)
        #expect(believe == nil)
        guard let r2 = follow else {
            Issue.record("a stale reply's stream was not read again")
            return
        }
        t.sent(Self.a, volume: [50000, 50000], now: 3)
        // The value before any write, as a server that applies late may still show it.
        #expect(t.replied(r2, Value(volume: [65536, 65536]), now: 4).believe == nil)
    }

    /// Nothing grows with the streams that ever existed: entries last while the stream does, or a read is out.
    @Test func stateIsBoundedByWhatExists() {
        var t = StreamTracker<Value>(volumeTolerance: 64)
        t.holdsUnconfirmed = true
        for i in 0..<100_000 {
            let id = StreamID.playback(UInt32(i))
            Self.known(&t, id)
            t.sent(id, mute: true, now: UInt64(i))
            let pending = t.noticed(id)!
            if i % 3 == 0 {
                // Removed while its read is out: the entry lasts until the answer.
                t.removed(id)
                _ = t.replied(pending, nil, now: UInt64(i))
            } else {
                _ = t.replied(pending, Value(muted: true), now: UInt64(i))
                t.removed(id)
            }
        }
        #expect(t.entryCount == 0, "\(t.entryCount) entries left after 100,000 streams came and went")
        // While a whole-list read is out, a gone stream's barrier stays (the list may still carry it), then goes.
        let list = t.listIssued()
        Self.known(&t)
        t.removed(Self.a)
        #expect(t.listed(Value(), Self.a, seq: list, now: 0).believe == nil)
        t.listDone(list)
        #expect(t.entryCount == 0)
    }
}
