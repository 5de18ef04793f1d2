import AudioPolicy
import Foundation
import Testing

@testable import PulseBackend

/// The restore database's rules, scripted: no server, no clock. Each test is one thing a real server does to an
/// entry (module-stream-restore saving at once, WirePlumber saving late) and what audiod must answer.
struct RestoreLedgerTests {
    static let ms: UInt64 = 1_000_000
    static let key = "sink-input-by-application-name:Music"
    static let other = "sink-input-by-application-name:Game"
    static let full: [UInt32] = [65536, 65536]
    static let ducked: [UInt32] = [16384, 16384]

    static func ledger(savesLate: Bool = false) -> RestoreLedger {
        var l = RestoreLedger(
            volumeTolerance: 64, leakWindowNanoseconds: 2_000 * ms, restoreSettleNanoseconds: 2_000 * ms)
        l.savesLate = savesLate
        return l
    }

    static func muted(_ id: StreamID) -> AppliedChange {
        AppliedChange(stream: id, applicationName: "Music", unmute: true, appliedVolume: nil, restoreVolume: nil)
    }

    static func duck(_ id: StreamID) -> AppliedChange {
        AppliedChange(
            stream: id, applicationName: "Music", unmute: false, appliedVolume: Volume(channels: ducked),
            restoreVolume: Volume(channels: full))
    }

    /// `id` is reported with `key` and shows these values at `now`; returns what the ledger hands the engine.
    static func appear(
        _ l: inout RestoreLedger, _ id: StreamID, key: String = key, muted: Bool = false, volume: [UInt32] = full,
        preexisting: Bool = false, now: UInt64 = 0
    ) -> PolicyValues? {
        l.keyed(id, key)
        return l.shown(id, first: true, preexisting: preexisting, muted: muted, volume: volume, now: now).values
    }

    @Test func aStreamThatEndsMutedLeavesTheMuteForTheAppsNextStream() {
        var l = Self.ledger()
        let a = StreamID.playback(1)
        let b = StreamID.playback(2)
        #expect(Self.appear(&l, a) == nil)
        #expect(l.update([(a, Self.muted(a))], muted: { _ in true }, now: 0) == [a])
        // The server saved audiod's mute into the entry; the stream ends with it.
        #expect(l.removed(a, muted: true, now: 10 * Self.ms) == [Self.key])
        #expect(l.leaks[Self.key]?.unmute == true)
        // The app's next stream starts muted: that mute is audiod's, and the leak is handed over once.
        let (values, journal) = Self.withKey(&l, b, muted: true, now: 20 * Self.ms)
        #expect(values?.mute == true)
        #expect(journal == [Self.key])
        #expect(l.leaks[Self.key] == nil)
        // Another app's new stream that starts muted is the user's doing.
        #expect(Self.appear(&l, StreamID.playback(3), key: Self.other, muted: true, now: 30 * Self.ms) == nil)
    }

    static func withKey(
        _ l: inout RestoreLedger, _ id: StreamID, muted: Bool = false, volume: [UInt32] = full, now: UInt64
    )
        -> (values: PolicyValues?, journal: [String])
    {
        l.keyed(id, key)
        return l.shown(id, first: true, preexisting: false, muted: muted, volume: volume, now: now)
    }

    @Test func aDuckLeftBehindIsHandedOverWithTheUsersVolume() {
        var l = Self.ledger()
        let a = StreamID.playback(1)
        let b = StreamID.playback(2)
        _ = Self.appear(&l, a)
        _ = l.update([(a, Self.duck(a))], muted: { _ in false }, now: 0)
        _ = l.removed(a, muted: false, now: Self.ms)
        #expect(l.leaks[Self.key]?.userMuted == false, "a duck records the user's own mute for a blind repair")
        let v = Self.appear(&l, b, volume: [16400, 16380], now: 2 * Self.ms)
        #expect(v?.volume == Volume(channels: Self.ducked))
        #expect(v?.userVolume == Volume(channels: Self.full))
        #expect(v?.mute == false)
        // A stream of the app at a volume of the user's own (far from the duck) keeps it.
        var m = Self.ledger()
        _ = Self.appear(&m, a)
        _ = m.update([(a, Self.duck(a))], muted: { _ in false }, now: 0)
        _ = m.removed(a, muted: false, now: Self.ms)
        #expect(Self.appear(&m, b, volume: [40000, 40000], now: 2 * Self.ms) == nil)
    }

    @Test func aSiblingsMuteMayBeInTheEntryANewStreamReads() {
        var l = Self.ledger()
        let a = StreamID.playback(1)
        let b = StreamID.playback(2)
        _ = Self.appear(&l, a)
        _ = l.update([(a, Self.muted(a))], muted: { _ in true }, now: 0)
        // `a` still plays, muted by audiod; the server saved that into the entry `b` starts from.
        #expect(Self.appear(&l, b, muted: true, now: Self.ms)?.mute == true)
        // What audiod holds on a stream itself is not a leak on it.
        var m = Self.ledger()
        _ = Self.appear(&m, a)
        _ = m.update([(a, Self.muted(a))], muted: { _ in true }, now: 0)
        m.keyed(b, Self.key)
        _ = m.update([(b, Self.muted(b))], muted: { _ in true }, now: 0)
        #expect(m.shown(b, first: true, preexisting: false, muted: true, volume: Self.full, now: Self.ms).values == nil)
    }

    @Test func aValueLiftedLatelyCanStillBeSavedByAServerThatSavesLate() {
        let a = StreamID.playback(1)
        let b = StreamID.playback(2)
        // Lifted 1 s before the stream ends (within the settle time): the server may save it after the lift.
        var l = Self.ledger()
        _ = Self.appear(&l, a)
        _ = l.update([(a, Self.muted(a))], muted: { _ in true }, now: 0)
        _ = l.update([(a, nil)], muted: { _ in true }, now: 1_000 * Self.ms)
        #expect(l.removed(a, muted: false, now: 2_000 * Self.ms) == [Self.key])
        #expect(Self.appear(&l, b, muted: true, now: 2_100 * Self.ms)?.mute == true)
        // Lifted 3 s before: the server has long saved the unmute.
        var m = Self.ledger()
        _ = Self.appear(&m, a)
        _ = m.update([(a, Self.muted(a))], muted: { _ in true }, now: 0)
        _ = m.update([(a, nil)], muted: { _ in true }, now: 1_000 * Self.ms)
        #expect(m.removed(a, muted: false, now: 4_000 * Self.ms) == [])
        #expect(m.leaks.isEmpty)
        #expect(Self.appear(&m, b, muted: true, now: 4_100 * Self.ms) == nil)
    }

    @Test func aServerThatAppliesSavedValuesLateIsWatchedForTheLeakWindow() {
        let a = StreamID.playback(1)
        let b = StreamID.playback(2)
        for savesLate in [false, true] {
            var l = Self.ledger(savesLate: savesLate)
            _ = Self.appear(&l, a)
            _ = l.update([(a, Self.muted(a))], muted: { _ in true }, now: 0)
            _ = l.removed(a, muted: true, now: Self.ms)
            // WirePlumber gives the stream its saved mute only after it appeared unmuted.
            #expect(Self.appear(&l, b, muted: false, now: 10 * Self.ms) == nil)
            #expect(l.watching(b, now: 500 * Self.ms) == savesLate)
            let later = l.shown(b, first: false, preexisting: false, muted: true, volume: Self.full, now: 500 * Self.ms)
            #expect((later.values?.mute == true) == savesLate, "savesLate \(savesLate)")
            #expect(!l.watching(b, now: 600 * Self.ms), "the watch ends once the value is handed over")
        }
        // After the window, a mute is the user's.
        var l = Self.ledger(savesLate: true)
        _ = Self.appear(&l, a)
        _ = l.update([(a, Self.muted(a))], muted: { _ in true }, now: 0)
        _ = l.removed(a, muted: true, now: Self.ms)
        _ = Self.appear(&l, b, now: 10 * Self.ms)
        #expect(
            l.shown(b, first: false, preexisting: false, muted: true, volume: Self.full, now: 2_100 * Self.ms).values
                == nil)
        #expect(!l.watching(b, now: 2_100 * Self.ms))
    }

    @Test func audiodsOwnWriteEndsTheWatch() {
        let a = StreamID.playback(1)
        let b = StreamID.playback(2)
        var l = Self.ledger(savesLate: true)
        _ = Self.appear(&l, a)
        _ = l.update([(a, Self.muted(a))], muted: { _ in true }, now: 0)
        _ = l.removed(a, muted: true, now: Self.ms)
        _ = Self.appear(&l, b, now: 10 * Self.ms)
        l.wrote(b)
        #expect(
            l.shown(b, first: false, preexisting: false, muted: true, volume: Self.full, now: 20 * Self.ms).values
                == nil)
    }

    @Test func theUsersChangeMakesTheEntryTheUsersAgain() {
        let a = StreamID.playback(1)
        let b = StreamID.playback(2)
        let c = StreamID.playback(3)
        var l = Self.ledger()
        _ = Self.appear(&l, a)
        _ = Self.appear(&l, b)
        _ = l.update([(a, Self.muted(a))], muted: { _ in true }, now: 0)
        _ = l.update([(a, nil)], muted: { _ in false }, now: Self.ms)
        _ = l.removed(a, muted: false, now: 2 * Self.ms)
        #expect(l.leaks[Self.key] != nil)
        // audiod's own write shown on `b` is no news to the entry's recent values, but it is saved: the leak goes.
        #expect(l.changed(b, byAudiod: true) == [Self.key])
        #expect(l.policySources(key: Self.key, now: 3 * Self.ms).count == 1, "audiod's recent mute of `a` stays")
        // The user turns `b` in a mixer: saved after everything audiod set on the key.
        #expect(l.changed(b, byAudiod: false) == [])
        #expect(l.policySources(key: Self.key, now: 4 * Self.ms).isEmpty)
        #expect(Self.appear(&l, c, muted: true, now: 5 * Self.ms) == nil)
    }

    @Test func aStreamAudiodHoldsSomethingOnChangesNothingInTheLedger() {
        let a = StreamID.playback(1)
        var l = Self.ledger()
        _ = Self.appear(&l, a)
        l.recorded(Journal.Leak(unmute: true, appliedVolume: nil, restoreVolume: nil), for: Self.key)
        _ = l.update([(a, Self.muted(a))], muted: { _ in true }, now: 0)
        #expect(l.changed(a, byAudiod: false) == [])
        #expect(l.leaks[Self.key] != nil)
    }

    @Test func streamsFoundAtConnectionAllShowTheLeakUntilTheListIsReported() {
        let a = StreamID.playback(1)
        let b = StreamID.playback(2)
        // A crashed run left a mute in the entry; two of the app's streams still play, both showing it.
        var l = RestoreLedger(
            leaks: [Self.key: Journal.Leak(unmute: true, appliedVolume: nil, restoreVolume: nil)], volumeTolerance: 64,
            leakWindowNanoseconds: 2_000 * Self.ms, restoreSettleNanoseconds: 2_000 * Self.ms)
        #expect(Self.appear(&l, a, muted: true, preexisting: true)?.mute == true)
        #expect(Self.appear(&l, b, muted: true, preexisting: true)?.mute == true)
        #expect(l.leaks[Self.key] != nil)
        l.connectionListReported()
        #expect(l.leaks.isEmpty)
        // A new stream after that starts from the user's entry.
        #expect(Self.appear(&l, StreamID.playback(3), muted: true, now: Self.ms) == nil)
    }

    @Test func aUsersChangeSavedAfterAudiodsMuteOfALiveSiblingIsWhatTheNextStreamStartsWith() {
        // audiod mutes stream 1 of the role (a call interrupts it); then the user mutes stream 2 of the same role:
        // the entry holds the user's mute, saved last. The role's next stream starts muted: the user's doing.
        var l = Self.ledger()
        let held = StreamID.playback(1)
        let user = StreamID.playback(2)
        let next = StreamID.playback(3)
        _ = Self.appear(&l, held)
        _ = Self.appear(&l, user)
        _ = l.update([(held, Self.muted(held))], muted: { _ in true }, now: 0)
        #expect(l.changed(user, byAudiod: false) == [])
        #expect(
            Self.appear(&l, next, muted: true, now: 10 * Self.ms) == nil, "the user's saved mute was taken for audiod's"
        )
        // Nor does the sibling leave audiod's mute in the entry when it ends: the user's change was saved after it.
        var ended = l
        #expect(ended.removed(held, muted: true, now: 15 * Self.ms) == [])
        #expect(ended.leaks[Self.key] == nil)
        // audiod writes the sibling again after that: the entry may hold audiod's mute once more.
        _ = l.update([(held, nil)], muted: { _ in true }, now: 20 * Self.ms)
        _ = l.update([(held, Self.muted(held))], muted: { _ in true }, now: 30 * Self.ms)
        #expect(Self.appear(&l, StreamID.playback(4), muted: true, now: 40 * Self.ms)?.mute == true)
    }

    @Test func aKeyTheUserLastMutedGivesNewStreamsTheUsersMuteWhateverAudiodMutedSince() {
        // The user mutes stream 1 of the role; a call then makes audiod mute stream 2 of it (its own value was
        // unmuted). The role's next stream starts muted: the user's last value of the key, not a leak to undo
        // (random test, seeds 107032 and 668651: it was unmuted, and the user's mute was lost).
        var l = Self.ledger(savesLate: true)
        let user = StreamID.playback(1)
        let held = StreamID.playback(2)
        let next = StreamID.playback(3)
        _ = Self.appear(&l, user)
        _ = Self.appear(&l, held)
        #expect(l.changed(user, byAudiod: false, userMuted: true) == [])
        _ = l.update([(held, Self.muted(held))], muted: { _ in true }, now: 10 * Self.ms)
        #expect(Self.appear(&l, next, muted: true, now: 20 * Self.ms) == nil, "the user's mute was taken for audiod's")
        // Once the user unmutes a stream of the key, a muted start after audiod's mute is audiod's again.
        #expect(l.changed(user, byAudiod: false, userMuted: false) == [])
        _ = l.update([(held, nil)], muted: { _ in true }, now: 30 * Self.ms)
        _ = l.update([(held, Self.muted(held))], muted: { _ in true }, now: 40 * Self.ms)
        #expect(Self.appear(&l, StreamID.playback(4), muted: true, now: 50 * Self.ms)?.mute == true)
    }

    @Test func policyValuesHeldWhenTheServerWentAwayAreLeaksForTheKeysNextStreamOnTheServerThatComesBack() {
        // audiod ducks stream 1 of the key; the server dies (WirePlumber had saved the duck, not yet anything after).
        // The key's first stream on the new server shows the duck: audiod's, with the user's volume to put back.
        var l = Self.ledger(savesLate: true)
        let a = StreamID.playback(1)
        _ = Self.appear(&l, a)
        _ = l.update([(a, Self.duck(a))], muted: { _ in false }, now: 0)
        l.connectionDropped()
        let b = StreamID.playback(2)
        let values = Self.appear(&l, b, volume: Self.ducked, now: 10 * Self.ms)
        #expect(values?.volume == Volume(channels: Self.ducked))
        #expect(values?.userVolume == Volume(channels: Self.full))
        // Taken once: the next stream of the key starts from what the correction saved.
        #expect(Self.appear(&l, StreamID.playback(3), volume: Self.ducked, now: 20 * Self.ms) == nil)
        // A stream found in the first listing after the server came back is as new as any.
        var m = Self.ledger(savesLate: true)
        _ = Self.appear(&m, a)
        _ = m.update([(a, Self.muted(a))], muted: { _ in true }, now: 0)
        m.connectionDropped()
        #expect(Self.appear(&m, b, muted: true, preexisting: true, now: 10 * Self.ms)?.mute == true)
        // The user's change of the key after the drop makes its values the user's again.
        var u = Self.ledger(savesLate: true)
        _ = Self.appear(&u, a)
        _ = u.update([(a, Self.muted(a))], muted: { _ in true }, now: 0)
        u.connectionDropped()
        _ = Self.appear(&u, b, preexisting: true)
        #expect(u.changed(b, byAudiod: false, userMuted: true) == [])
        #expect(Self.appear(&u, StreamID.playback(3), muted: true, now: 20 * Self.ms) == nil)
    }

    @Test func aDuckTheServerHadNotYetSavedOverIsALeakWhenTheServerComesBack() {
        // WirePlumber saved the duck at 0.2 (16384); the duck level changed (to 0.5: 52016) amid steady activity, so
        // nothing was saved since. The server dies: the key's next stream shows the older duck, audiod's too.
        var l = Self.ledger(savesLate: true)
        let a = StreamID.playback(1)
        _ = Self.appear(&l, a)
        _ = l.update([(a, Self.duck(a))], muted: { _ in false }, now: 0)
        let later = AppliedChange(
            stream: a, applicationName: "Music", unmute: false, appliedVolume: Volume(channels: [52016, 52016]),
            restoreVolume: Volume(channels: Self.full))
        _ = l.update([(a, later)], muted: { _ in false }, now: 500 * Self.ms)
        _ = l.shown(a, first: false, preexisting: false, muted: false, volume: [52016, 52016], now: 900 * Self.ms)
        _ = l.shown(a, first: false, preexisting: false, muted: false, volume: [52016, 52016], now: 1_700 * Self.ms)
        _ = l.shown(a, first: false, preexisting: false, muted: false, volume: [52016, 52016], now: 2_500 * Self.ms)
        l.connectionDropped()
        let values = Self.appear(&l, StreamID.playback(2), volume: Self.ducked, now: 10_000 * Self.ms)
        #expect(values?.volume == Volume(channels: Self.ducked))
        // The older duck was saved at a quiet second, then the newer one written amid steady activity (seed 942961):
        // the server comes back with the older one.
        var saved = Self.ledger(savesLate: true)
        _ = Self.appear(&saved, a)
        _ = saved.update([(a, Self.duck(a))], muted: { _ in false }, now: 0)
        _ = saved.shown(a, first: false, preexisting: false, muted: false, volume: Self.ducked, now: 1_500 * Self.ms)
        _ = saved.update([(a, later)], muted: { _ in false }, now: 3_000 * Self.ms)
        _ = saved.shown(
            a, first: false, preexisting: false, muted: false, volume: [52016, 52016], now: 3_500 * Self.ms)
        saved.connectionDropped()
        #expect(
            Self.appear(&saved, StreamID.playback(2), volume: Self.ducked, now: 10_000 * Self.ms)?.volume
                == Volume(channels: Self.ducked))
        // After a quiet second the server had saved the newer duck, and nothing of audiod's was held after it: the
        // older one is no longer suspect.
        var q = Self.ledger(savesLate: true)
        _ = Self.appear(&q, a)
        _ = q.update([(a, Self.duck(a))], muted: { _ in false }, now: 0)
        _ = q.update([(a, later)], muted: { _ in false }, now: 3_000 * Self.ms)
        _ = q.update([(a, nil)], muted: { _ in false }, now: 5_000 * Self.ms)
        q.connectionDropped()
        #expect(Self.appear(&q, StreamID.playback(2), volume: Self.ducked, now: 10_000 * Self.ms) == nil)
    }

    /// Seed 287041 on PipeWire 0.3.65: audiod lifted a duck from mpv, was killed within the second and started
    /// again; the server, killed a moment later, came back with the duck saved and gave it to mpv's next stream.
    @Test func aLiftTheServerHadNotSavedWhenAudiodWasKilledIsKnownToTheNextRun() {
        let a = StreamID.playback(1)
        var killed = Self.ledger(savesLate: true)
        _ = Self.appear(&killed, a)
        _ = killed.update([(a, Self.duck(a))], muted: { _ in false }, now: 0)
        #expect(killed.pendingSaves(now: 100 * Self.ms).isEmpty, "a duck audiod holds is the journal's entry")
        _ = killed.update([(a, nil)], muted: { _ in false }, now: 3_000 * Self.ms)
        let pending = killed.pendingSaves(now: 3_200 * Self.ms)
        #expect(pending[Self.key]?.appliedVolume == Self.ducked, "the lifted duck may still be in the saved state")
        #expect(killed.pendingSaves(now: 5_000 * Self.ms).isEmpty, "saved after a quiet second")

        // The next run, on the same server run: the server dies before its next quiet second.
        var next = Self.ledger(savesLate: true)
        next.connected(serverCookie: 7)
        next.resumePendingSaves(pending, sameServerRun: true, now: 10_000 * Self.ms)
        _ = Self.appear(&next, a, preexisting: true, now: 10_100 * Self.ms)
        next.connectionDropped(now: 10_600 * Self.ms)
        next.connected(serverCookie: 8)
        let values = Self.appear(&next, StreamID.playback(2), volume: Self.ducked, now: 12_000 * Self.ms)
        #expect(values?.volume == Volume(channels: Self.ducked))
        #expect(values?.userVolume == Volume(channels: Self.full))
        // The server saved before it died: nothing to put back.
        var saved = Self.ledger(savesLate: true)
        saved.connected(serverCookie: 7)
        saved.resumePendingSaves(pending, sameServerRun: true, now: 10_000 * Self.ms)
        _ = Self.appear(&saved, a, preexisting: true, now: 10_100 * Self.ms)
        saved.connectionDropped(now: 14_000 * Self.ms)
        saved.connected(serverCookie: 8)
        #expect(Self.appear(&saved, StreamID.playback(2), volume: Self.ducked, now: 15_000 * Self.ms) == nil)
        // The server restarted while audiod was down: the key's leak.
        var restarted = Self.ledger(savesLate: true)
        restarted.connected(serverCookie: 8)
        restarted.resumePendingSaves(pending, sameServerRun: false, now: 10_000 * Self.ms)
        #expect(restarted.leaks[Self.key]?.appliedVolume == Self.ducked)
    }

    /// The leaks of `journal` as the next audiod reads them: written with the log, loaded from the file.
    static func throughTheFile(_ journal: Journal) throws -> [String: Journal.Leak] {
        try throughTheFile(whole: journal).leaks
    }

    static func throughTheFile(whole journal: Journal) throws -> Journal {
        let p = NSTemporaryDirectory() + "ledger-test-\(getpid())-\(UInt64.random(in: 0...UInt64.max))/journal"
        defer { try? FileManager.default.removeItem(atPath: (p as NSString).deletingLastPathComponent) }
        try JournalLog(path: p).write(journal)
        return try #require(try Journal.load(from: p))
    }

    /// A ledger of the next audiod, started from these leaks on server run `cookie`.
    static func next(leaks: [String: Journal.Leak], cookie: UInt32) -> RestoreLedger {
        var l = RestoreLedger(
            leaks: leaks, serverCookie: cookie, volumeTolerance: 64, leakWindowNanoseconds: 2_000 * ms,
            restoreSettleNanoseconds: 2_000 * ms)
        l.savesLate = true
        l.connected(serverCookie: cookie)
        return l
    }

    static let deeper: [UInt32] = [30_419, 30_419]

    static func deeperDuck(_ id: StreamID) -> AppliedChange {
        AppliedChange(
            stream: id, applicationName: "Music", unmute: false, appliedVolume: Volume(channels: deeper),
            restoreVolume: Volume(channels: full))
    }

    /// Seed 868802 on PipeWire 0.3.65: mpv was ducked, and WirePlumber saved the duck; the duck level changed, and the
    /// sound server died within the second. Either duck may be in the entry: the journal must name both, or the next
    /// audiod (this one was killed later) takes a stream at the other for the user's, and even a clean stop leaves it.
    @Test func aKeyDuckedAtTwoLevelsWhenTheServerDiedKeepsBothInTheJournal() throws {
        let a = StreamID.playback(1)
        var l = Self.ledger(savesLate: true)
        l.connected(serverCookie: 1)
        _ = Self.appear(&l, a)
        _ = l.update([(a, Self.duck(a))], muted: { _ in false }, now: 0)
        // A quiet second: the server saved the first duck.
        _ = l.shown(a, first: false, preexisting: false, muted: false, volume: Self.ducked, now: 1_500 * Self.ms)
        _ = l.update([(a, Self.deeperDuck(a))], muted: { _ in false }, now: 1_600 * Self.ms)
        l.connectionDropped(now: 1_900 * Self.ms, muted: { _ in false })
        l.connected(serverCookie: 2)
        let leak = try #require(l.journal(cookie: 2).leaks[Self.key])
        #expect(Set(leak.policyVolumes) == [Self.ducked, Self.deeper])
        // audiod is killed; the next one reads the journal, and the key's next stream starts at either duck.
        let leaks = try Self.throughTheFile(l.journal(cookie: 2))
        for shown in [Self.ducked, Self.deeper] {
            var next = Self.next(leaks: leaks, cookie: 2)
            let values = Self.appear(&next, StreamID.playback(9), volume: shown, now: 20_000 * Self.ms)
            #expect(values?.volume == Volume(channels: shown), "a stream at \(shown) taken for the user's")
            #expect(values?.userVolume == Volume(channels: Self.full))
            // A stop on a server that lists its entries writes the user's volume over either.
            var stopping = Self.next(leaks: leaks, cookie: 2)
            let repairs = stopping.repairRecorded(
                [RestoreLedger.Entry(key: Self.key, muted: false, volume: shown)], now: 20_000 * Self.ms)
            #expect(repairs.map(\.volume) == [Self.full], "the entry left at \(shown)")
        }
    }

    /// Seed 930699 on PipeWire 0.3.65: a leaked duck at one level was put back on the key's new stream, which audiod
    /// then ducked at another; audiod was killed, and the sound server, before WirePlumber saved either. The next run
    /// finds both in its journal (the put-back one as not yet saved, the other as the stream's entry): both are the
    /// key's leak, through any number of further kills.
    @Test func aLeakPutBackAndADuckAtAnotherLevelBothOutliveTwoKills() throws {
        let b = StreamID.playback(2)
        let earlier = Journal.Leak(unmute: false, appliedVolume: Self.deeper, restoreVolume: Self.full)
        var l = Self.next(leaks: [Self.key: earlier], cookie: 1)
        #expect(Self.appear(&l, b, volume: Self.deeper, now: 0)?.volume == Volume(channels: Self.deeper))
        _ = l.update([(b, Self.duck(b))], muted: { _ in false }, now: 100 * Self.ms)
        let pending = l.pendingSaves(now: 300 * Self.ms)
        let entries = l.journal(cookie: 1).entries
        #expect(pending[Self.key]?.policyVolumes == [Self.deeper], "the correction is not saved yet")
        #expect(entries.map(\.appliedVolume) == [Self.ducked])

        // Killed; the server too. The next audiod finds the stream gone (another server run).
        var second = Self.next(leaks: [:], cookie: 2)
        for e in entries {
            second.recorded(
                Journal.Leak(unmute: e.unmute, appliedVolume: e.appliedVolume, restoreVolume: e.restoreVolume),
                for: try #require(e.restoreKey))
        }
        second.resumePendingSaves(pending, sameServerRun: false, now: 10_000 * Self.ms)
        let leaks = try Self.throughTheFile(second.journal(cookie: 2))
        #expect(Set(leaks[Self.key]?.policyVolumes ?? []) == [Self.ducked, Self.deeper])
        // Killed again before anything of the key started: the third run still corrects either duck.
        for shown in [Self.ducked, Self.deeper] {
            var third = Self.next(leaks: leaks, cookie: 2)
            #expect(
                Self.appear(&third, StreamID.playback(5), volume: shown, now: 20_000 * Self.ms)?.volume
                    == Volume(channels: shown), "a stream at \(shown) taken for the user's")
        }
    }

    /// Seed 673601 on PipeWire 1.4: a video stream was ducked at 0.2 and WirePlumber saved it; the level went to 0.1,
    /// then the stream was muted and the duck lifted, all within WirePlumber's second. audiod was killed (its journal's
    /// `U` line is all that knows the ducks), the next run started on the same server, and the server was killed a
    /// moment later. Its key's next stream came back at the 0.2 duck, which the `U` line had dropped for the 0.1 one.
    @Test func twoDucksNotYetSavedWhenAudiodWasKilledOutliveTheServersDeathInTheNextRun() throws {
        let a = StreamID.playback(81)
        var killed = Self.ledger(savesLate: true)
        killed.connected(serverCookie: 1)
        _ = Self.appear(&killed, a)
        _ = killed.update([(a, Self.duck(a))], muted: { _ in false }, now: 0)
        _ = killed.shown(a, first: false, preexisting: false, muted: false, volume: Self.ducked, now: 1_500 * Self.ms)
        _ = killed.update([(a, Self.deeperDuck(a))], muted: { _ in false }, now: 3_000 * Self.ms)
        let mutedOnly = AppliedChange(
            stream: a, applicationName: "Music", unmute: true, appliedVolume: nil, restoreVolume: nil)
        _ = killed.update([(a, mutedOnly)], muted: { _ in true }, now: 3_500 * Self.ms)
        var journal = killed.journal(cookie: 1)
        let wall: UInt64 = 1_800_000_000
        journal.unsaved = killed.pendingSaves(now: 3_700 * Self.ms).mapValues { Journal.Unsaved(leak: $0, at: wall) }
        let read = try Self.throughTheFile(whole: journal)
        #expect(Set(read.unsaved[Self.key]?.leak.policyVolumes ?? []) == [Self.ducked, Self.deeper])

        // The next run, on the same server: the stream is found carrying the mute; the server dies within the second.
        var next = Self.next(leaks: read.leaks, cookie: 1)
        next.resumePendingSaves(read.unsaved.mapValues(\.leak), sameServerRun: true, now: 6_000 * Self.ms)
        _ = Self.appear(&next, a, muted: true, volume: Self.full, preexisting: true, now: 6_100 * Self.ms)
        next.connectionDropped(now: 6_600 * Self.ms, muted: { _ in false })
        next.connected(serverCookie: 2)
        for shown in [Self.ducked, Self.deeper] {
            var copy = next
            let values = Self.appear(&copy, StreamID.playback(71), volume: shown, now: 8_000 * Self.ms)
            #expect(values?.volume == Volume(channels: shown), "a stream at \(shown) taken for the user's")
            #expect(values?.userVolume == Volume(channels: Self.full))
        }
    }

    @Test func mergingLeaksKeepsEveryVolumeOfTheKeysWidthBounded() {
        var leak = Journal.Leak(unmute: true, appliedVolume: nil, restoreVolume: nil)
        for level in 1...20 {
            let v = UInt32(level * 1_000)
            leak = Journal.Leak(unmute: false, appliedVolume: [v, v], restoreVolume: Self.full).merged(with: leak)
        }
        #expect(leak.unmute, "a mute in the entry stays")
        #expect(leak.appliedVolume == [20_000, 20_000], "the newest is the first")
        #expect(leak.otherVolumes.count == Journal.Leak.otherVolumesLimit)
        #expect(leak.otherVolumes.first == [19_000, 19_000], "the newer kept, the oldest dropped")
        #expect(!leak.otherVolumes.contains([1_000, 1_000]))
        // A volume of another channel count cannot be put back to the user's volume: it is not kept.
        let mono = Journal.Leak(unmute: false, appliedVolume: [5], restoreVolume: [65_536])
        #expect(leak.merged(with: mono).otherVolumes == leak.otherVolumes)
    }

    @Test func aLeakedDuckIsPutBackToTheKeysLastUserVolumeNotTheDuckedSiblings() {
        // The user turns stream 1 of the key down to 30 %; audiod ducks stream 2 of it (at 100 %). The key's next
        // stream starts ducked: audiod's, and what goes back is the key's last volume of the user's, 30 %.
        var l = Self.ledger(savesLate: true)
        let user = StreamID.playback(1)
        let held = StreamID.playback(2)
        _ = Self.appear(&l, user)
        _ = Self.appear(&l, held)
        #expect(l.changed(user, byAudiod: false, userMuted: false, userVolume: [19661, 19661]) == [])
        _ = l.update([(held, Self.duck(held))], muted: { _ in false }, now: 10 * Self.ms)
        let values = Self.appear(&l, StreamID.playback(3), volume: Self.ducked, now: 20 * Self.ms)
        #expect(values?.volume == Volume(channels: Self.ducked))
        #expect(values?.userVolume == Volume(channels: [19661, 19661]))
        // The same when the user turned down a stream audiod holds a mute on: its volume is still the user's.
        var m = Self.ledger(savesLate: true)
        _ = Self.appear(&m, user)
        _ = Self.appear(&m, held)
        _ = m.update([(user, Self.muted(user))], muted: { _ in true }, now: 0)
        #expect(m.changed(user, byAudiod: false, userVolume: [19661, 19661]) == [])
        _ = m.update([(held, Self.duck(held))], muted: { _ in false }, now: 10 * Self.ms)
        #expect(
            Self.appear(&m, StreamID.playback(3), volume: Self.ducked, now: 20 * Self.ms)?.userVolume
                == Volume(channels: [19661, 19661]))
    }

    @Test func aPolicyMuteOlderThanTheUsersSavedChangeIsNoLeakAfterAServerRestart() {
        // Seed 380805: audiod mutes stream 1 of the key, the user then mutes stream 2; a quiet second later the server
        // has saved the user's mute (the entry holds the last change). The server restarts: the key's next stream
        // starts with that mute, which is the user's.
        let a = StreamID.playback(1)
        let b = StreamID.playback(2)
        func run(userMutes: Bool) -> PolicyValues? {
            var l = Self.ledger(savesLate: true)
            _ = Self.appear(&l, a)
            _ = Self.appear(&l, b)
            _ = l.update([(a, Self.muted(a))], muted: { _ in true }, now: 0)
            if userMutes {
                _ = l.changed(b, byAudiod: false, userMuted: true, shownMuted: true, shownVolume: Self.full)
            }
            l.connectionDropped(now: 3_000 * Self.ms)
            return Self.appear(&l, StreamID.playback(3), muted: true, now: 10_000 * Self.ms)
        }
        #expect(run(userMutes: true) == nil, "the user's saved mute taken for audiod's")
        // Without the user's change the entry holds audiod's mute: the next stream's mute is a leak.
        #expect(run(userMutes: false)?.mute == true)
    }

    @Test func theKeysUserMuteOutlivesAServerRestart() {
        // Seed 380805, later: on the new server audiod mutes the key's stream that started with the user's mute; the
        // key's next stream starts muted too. The server's database kept the user's mute across its restart.
        var l = Self.ledger(savesLate: true)
        let a = StreamID.playback(1)
        _ = Self.appear(&l, a)
        _ = l.changed(a, byAudiod: false, userMuted: true, shownMuted: true, shownVolume: Self.full)
        l.connectionDropped(now: 3_000 * Self.ms)
        let b = StreamID.playback(5)
        _ = Self.appear(&l, b, muted: true, now: 10_000 * Self.ms)
        _ = l.update([(b, Self.muted(b))], muted: { _ in true }, now: 11_000 * Self.ms)
        #expect(Self.appear(&l, StreamID.playback(6), muted: true, now: 11_500 * Self.ms) == nil)
    }

    @Test func whatAudiodHeldWhenTheServerWentAwayIsInTheJournalOnceItComesBack() {
        // Seeds 115991 and 678146: the user muted the key's stream, audiod ducked it, the server restarted. Nothing of
        // the key started on the new server before audiod was stopped (or killed) and started again: that audiod must
        // still know the entry may hold the duck, and a stop must write the user's values over it.
        let a = StreamID.playback(1)
        func dropped(newServer: Bool) -> RestoreLedger {
            var l = Self.ledger(savesLate: true)
            l.connected(serverCookie: 1)
            _ = Self.appear(&l, a)
            _ = l.changed(a, byAudiod: false, userMuted: true, shownMuted: true, shownVolume: Self.full)
            _ = l.update([(a, Self.duck(a))], muted: { _ in true }, now: 0)
            l.connectionDropped(now: 3_000 * Self.ms, muted: { _ in true })
            l.connected(serverCookie: newServer ? 2 : 1)
            return l
        }
        let l = dropped(newServer: true)
        let leak = l.journal(cookie: 2).leaks[Self.key]
        #expect(leak?.appliedVolume == Self.ducked)
        #expect(leak?.restoreVolume == Self.full)
        #expect(leak?.userMute == true, "a repair would unmute what the user muted")
        #expect(l.blindRepairs.map { [$0.muted ? 1 : 0] + $0.volume } == [[1] + Self.full])
        // The next audiod, from that journal: the key's first stream shows the duck, and the user's own mute.
        var next = RestoreLedger(
            leaks: l.journal(cookie: 2).leaks, serverCookie: 2, volumeTolerance: 64,
            leakWindowNanoseconds: 2_000 * Self.ms, restoreSettleNanoseconds: 2_000 * Self.ms)
        next.savesLate = true
        next.connected(serverCookie: 2)
        let values = Self.appear(&next, StreamID.playback(7), muted: true, volume: Self.ducked)
        #expect(values?.volume == Volume(channels: Self.ducked))
        #expect(values?.userVolume == Volume(channels: Self.full))
        #expect(values?.mute == false)
        // Only audiod's connection dropped: the server kept the streams and saved nothing new.
        #expect(dropped(newServer: false).leaks.isEmpty)
    }

    @Test func aLeakPutBackIsNotSavedUntilTheServersNextQuietSecond() {
        // Seed 281815 on WirePlumber 0.5: the key's first stream after a server restart showed audiod's mute, which
        // audiod put back; the server was killed again within the second. The key's next stream on the third server
        // starts with the mute again: still audiod's.
        let a = StreamID.playback(1)
        let b = StreamID.playback(2)
        func next(killedAfter ms: UInt64) -> PolicyValues? {
            var l = Self.ledger(savesLate: true)
            l.connected(serverCookie: 1)
            _ = Self.appear(&l, a)
            _ = l.update([(a, Self.muted(a))], muted: { _ in true }, now: 0)
            l.connectionDropped(now: 100 * Self.ms)
            l.connected(serverCookie: 2)
            #expect(Self.appear(&l, b, muted: true, now: 5_000 * Self.ms)?.mute == true)
            l.connectionDropped(now: (5_000 + ms) * Self.ms)
            l.connected(serverCookie: 3)
            return Self.appear(&l, StreamID.playback(3), muted: true, now: 9_000 * Self.ms)
        }
        #expect(next(killedAfter: 600)?.mute == true, "the unsaved correction's mute taken for the user's")
        // A drop heard just after a quiet second: the server may have gone before its save.
        #expect(next(killedAfter: 1_200)?.mute == true, "a drop heard 1.2 s after the last change taken as saved")
        // A clearly longer quiet after the correction: the server saved the user's values over the leak.
        #expect(next(killedAfter: 2_000) == nil)
    }

    @Test func aVolumeTheUserSetsOverADuckIsTheKeys() {
        // Seed 870890: audiod ducks stream 1 of the key; the user turns it down to 30 %, which the engine ducks again;
        // a sibling at 100 % is ducked too. The key's next stream starts with the sibling's duck: it goes back to the
        // key's 30 %, not the sibling's 100 %.
        var l = Self.ledger(savesLate: true)
        let a = StreamID.playback(1)
        let b = StreamID.playback(2)
        _ = Self.appear(&l, a)
        _ = Self.appear(&l, b)
        _ = l.update([(a, Self.duck(a))], muted: { _ in false }, now: 0)
        _ = l.changed(a, byAudiod: false, userVolume: [19661, 19661], shownMuted: false, shownVolume: [19661, 19661])
        let again = AppliedChange(
            stream: a, applicationName: "Music", unmute: false, appliedVolume: Volume(channels: [9126, 9126]),
            restoreVolume: Volume(channels: [19661, 19661]))
        _ = l.update([(a, again), (b, Self.duck(b))], muted: { _ in false }, now: 10 * Self.ms)
        let values = Self.appear(&l, StreamID.playback(3), volume: Self.ducked, now: 20 * Self.ms)
        #expect(values?.volume == Volume(channels: Self.ducked))
        #expect(values?.userVolume == Volume(channels: [19661, 19661]), "put back to the sibling's volume")
    }

    @Test func aUsersMuteChangeMakesTheStreamsVolumeTheKeys() {
        // Seed 61976: the user turns stream 1 down to 30 %, then unmutes stream 2 of the key, at 100 %: the server
        // saves stream 2 whole, and a leaked duck on the key's next stream goes back to 100 %, not 30 %.
        var l = Self.ledger(savesLate: true)
        let low = StreamID.playback(1)
        let other = StreamID.playback(2)
        let held = StreamID.playback(4)
        _ = Self.appear(&l, low)
        _ = Self.appear(&l, other)
        _ = Self.appear(&l, held)
        _ = l.changed(
            low, byAudiod: false, userVolume: [19661, 19661], shownMuted: false, shownVolume: [19661, 19661])
        _ = l.changed(other, byAudiod: false, userMuted: false, shownMuted: false, shownVolume: Self.full)
        _ = l.update([(held, Self.duck(held))], muted: { _ in false }, now: 10 * Self.ms)
        let values = Self.appear(&l, StreamID.playback(3), volume: Self.ducked, now: 20 * Self.ms)
        #expect(values?.volume == Volume(channels: Self.ducked))
        #expect(values?.userVolume == Volume(channels: Self.full))
    }

    @Test func aStreamOlderThanTheLeakKeepsTheUsersMuteAtARestart() {
        // One run: the user muted stream 1 of the app; stream 2 of it ended while audiod muted it, leaving the mute in
        // the entry. Stream 1 existed before and never got the entry's value: its mute is the user's.
        let user = StreamID.playback(1)
        let gone = StreamID.playback(2)
        let later = StreamID.playback(3)
        var run = Self.ledger()
        run.connected(serverCookie: 7)
        _ = Self.appear(&run, user, muted: true)
        _ = Self.appear(&run, gone)
        _ = run.update([(gone, Self.muted(gone))], muted: { _ in true }, now: 0)
        _ = run.removed(gone, muted: true, now: Self.ms)
        let journal = run.journal(cookie: 7)
        #expect(journal.leaks[Self.key]?.existedBefore == 2)

        // The next run finds stream 1 in the same server run: not the leak's; a stream made after the leak is.
        func restarted(cookie: UInt32) -> RestoreLedger {
            var l = RestoreLedger(
                leaks: journal.leaks, serverCookie: journal.serverCookie, volumeTolerance: 64,
                leakWindowNanoseconds: 2_000 * Self.ms, restoreSettleNanoseconds: 2_000 * Self.ms)
            l.connected(serverCookie: cookie)
            return l
        }
        var same = restarted(cookie: 7)
        #expect(Self.appear(&same, user, muted: true, preexisting: true) == nil, "the user's mute is kept")
        #expect(Self.appear(&same, later, muted: true, preexisting: true)?.mute == true)
        same.connectionListReported()
        #expect(same.leaks.isEmpty)

        // In another server run indices start again: stream 1 may be new, and may carry the leak.
        var other = restarted(cookie: 8)
        #expect(Self.appear(&other, user, muted: true, preexisting: true)?.mute == true)
    }

    @Test func aLeakOfTwoStreamsMayBeInAnyStreamNewerThanEither() {
        var l = Self.ledger()
        l.connected(serverCookie: 7)
        let b = StreamID.playback(9)
        _ = Self.appear(&l, b)
        _ = l.update([(b, Self.muted(b))], muted: { _ in true }, now: 0)
        _ = l.removed(b, muted: true, now: Self.ms)
        // A journal of the run says stream 4, now gone, also carried a mute.
        l.recorded(Journal.Leak(unmute: true, appliedVolume: nil, restoreVolume: nil, existedBefore: 4), for: Self.key)
        #expect(l.leaks[Self.key]?.existedBefore == 4)
        #expect(Self.appear(&l, StreamID.playback(5), muted: true, preexisting: true)?.mute == true)
        #expect(Self.appear(&l, StreamID.playback(3), muted: true, preexisting: true) == nil)
    }

    @Test func aDroppedConnectionForgetsItsStreamsButNotWhatAudiodAppliedOrLeft() {
        let a = StreamID.playback(1)
        let b = StreamID.playback(2)
        var l = Self.ledger()
        _ = Self.appear(&l, a)
        _ = Self.appear(&l, b)
        _ = l.update([(a, Self.muted(a)), (b, Self.duck(b))], muted: { _ in false }, now: 0)
        l.recorded(Journal.Leak(unmute: true, appliedVolume: nil, restoreVolume: nil), for: Self.other)
        let before = l.journal(cookie: 7)
        #expect(before.entries.count == 2)
        #expect(before.entries.allSatisfy { $0.restoreKey == Self.key })
        l.connectionDropped()
        #expect(l.key(of: a) == nil)
        let after = l.journal(cookie: 7)
        #expect(after.entries.count == 2, "the journal still names what audiod applied")
        #expect(after.leaks == before.leaks)
        // The old streams are nobody's siblings now, but what audiod held on them may come back with the server.
        #expect(Set(l.policySources(key: Self.key, now: Self.ms).map { "\($0)" }).count == 2)
    }

    /// Seed 855735 on PulseAudio: the user set one of two streams of a key to 80 %; audiod then ducked the other,
    /// at 50 %, and the server saved that duck. The entry held the user's 80 % before it: the repair writes that,
    /// not the volume under the sibling's duck.
    @Test func theRepairAfterASiblingsDuckWritesTheKeysLastUserVolume() {
        let (a, b) = (StreamID.playback(1), StreamID.playback(2))
        let (eighty, half, halfDucked): ([UInt32], [UInt32], [UInt32]) = (
            [52429, 52429], [32768, 32768], [26008, 26008]
        )
        var l = Self.ledger()
        _ = Self.appear(&l, a)
        _ = Self.appear(&l, b, volume: half)
        _ = l.update([(a, Self.muted(a))], muted: { _ in true }, now: 0)
        // The user turns the muted stream to 80 %: the server saves it, mute and all, as the key's.
        _ = l.changed(a, byAudiod: false, userVolume: eighty, shownMuted: true, shownVolume: eighty)
        let duckB = AppliedChange(
            stream: b, applicationName: "Music", unmute: false, appliedVolume: Volume(channels: halfDucked),
            restoreVolume: Volume(channels: half))
        _ = l.update([(b, duckB)], muted: { _ in false }, now: Self.ms)
        let saved = RestoreLedger.Entry(key: Self.key, muted: false, volume: halfDucked)
        #expect(l.repair(after: b, saved, now: 2 * Self.ms)?.volume == eighty)
        // A key with a user volume of another channel count is put back to the stream's own.
        var mono = Self.ledger()
        _ = Self.appear(&mono, a, volume: [52429])
        _ = Self.appear(&mono, b, volume: half)
        _ = mono.changed(a, byAudiod: false, userVolume: [52429], shownMuted: false, shownVolume: [52429])
        _ = mono.update([(b, duckB)], muted: { _ in false }, now: Self.ms)
        #expect(mono.repair(after: b, saved, now: 2 * Self.ms)?.volume == half)
    }

    @Test func theRepairAfterAWriteTakesOutOnlyAudiodsValues() {
        let a = StreamID.playback(1)
        var l = Self.ledger()
        _ = Self.appear(&l, a)
        #expect(l.entryToRepair(after: a) == nil, "nothing applied, nothing to repair")
        _ = l.update([(a, Self.duck(a))], muted: { _ in false }, now: 0)
        #expect(l.entryToRepair(after: a) == Self.key)
        // The server saved the duck; the user's mute of the app stays.
        let saved = RestoreLedger.Entry(key: Self.key, muted: true, volume: Self.ducked)
        let r = l.repair(after: a, saved, now: Self.ms)
        #expect(r?.volume == Self.full)
        #expect(r?.muted == true, "a duck does not unmute what the user muted")
        #expect(r?.because.contains("duck of sink-input 1 ") == true)
        // An entry at the user's own volume is written as it is.
        let own = RestoreLedger.Entry(key: Self.key, muted: false, volume: [30000, 30000])
        #expect(l.repair(after: a, own, now: Self.ms)?.volume == [30000, 30000])
        // audiod's mute is taken out.
        _ = l.update([(a, Self.muted(a))], muted: { _ in true }, now: 2 * Self.ms)
        #expect(
            l.repair(after: a, RestoreLedger.Entry(key: Self.key, muted: true, volume: Self.full), now: 3 * Self.ms)?
                .muted == false)
        // Another key's entry is not this stream's.
        #expect(
            l.repair(after: a, RestoreLedger.Entry(key: Self.other, muted: true, volume: Self.full), now: 3 * Self.ms)
                == nil)
        // Seed 281009: the user muted a sibling of the key before audiod muted this one — the entry's mute is the
        // user's, and stays.
        var u = Self.ledger()
        let (sibling, game) = (StreamID.playback(5), StreamID.playback(6))
        _ = Self.appear(&u, sibling)
        _ = Self.appear(&u, game)
        _ = u.changed(sibling, byAudiod: false, userMuted: true, shownMuted: true, shownVolume: Self.full)
        _ = u.update([(game, Self.muted(game))], muted: { _ in true }, now: 4 * Self.ms)
        let kept = u.repair(
            after: game, RestoreLedger.Entry(key: Self.key, muted: true, volume: Self.full), now: 5 * Self.ms)
        #expect(kept?.muted == true, "the repair of audiod's mute took out the user's own mute of the key")
    }

    @Test func repairingRecordedLeaksForgetsKeysTheServerHasNoEntryFor() {
        var l = RestoreLedger(
            leaks: [
                Self.key: Journal.Leak(unmute: true, appliedVolume: nil, restoreVolume: nil),
                Self.other: Journal.Leak(unmute: false, appliedVolume: Self.ducked, restoreVolume: Self.full),
            ], volumeTolerance: 64, leakWindowNanoseconds: 0, restoreSettleNanoseconds: 0)
        // A server that cannot list its entries: nothing is forgotten.
        let none = l.repairRecorded(nil, now: 0)
        #expect(none.isEmpty)
        #expect(l.leaks.count == 2)
        let repairs = l.repairRecorded(
            [RestoreLedger.Entry(key: Self.other, muted: false, volume: Self.ducked)], now: 0)
        #expect(
            repairs == [
                RestoreLedger.Repair(
                    key: Self.other, muted: false, volume: Self.full,
                    because: "the journal records a policy value audiod left in the entry")
            ])
        #expect(l.leaks.isEmpty, "the key written and the key the server has no entry for are both forgotten")
    }

    @Test func blindRepairsWriteTheUsersMuteAndStayUntilTheServerShowsThem() {
        var l = RestoreLedger(
            leaks: [
                Self.key: Journal.Leak(unmute: true, appliedVolume: nil, restoreVolume: nil),
                Self.other: Journal.Leak(
                    unmute: false, appliedVolume: Self.ducked, restoreVolume: Self.full, userMuted: true),
            ], volumeTolerance: 64, leakWindowNanoseconds: 0, restoreSettleNanoseconds: 0)
        let writes = l.blindRepairs
        #expect(writes.map(\.key) == [Self.other, Self.key])
        #expect(writes[0].muted == true && writes[0].volume == Self.full, "a duck's repair keeps the user's own mute")
        #expect(writes[1].muted == false && writes[1].volume.isEmpty, "a mute's repair leaves the volume alone")
        let listed = [
            RestoreLedger.Entry(key: Self.key, muted: false, volume: [1000]),
            RestoreLedger.Entry(key: Self.other, muted: true, volume: Self.ducked),
        ]
        #expect(l.shows(writes[1], in: listed))
        #expect(!l.shows(writes[0], in: listed), "WirePlumber has not taken the volume yet")
        l.confirmed([Self.key, "a key never recorded"])
        #expect(l.leaks.keys.sorted() == [Self.other])
    }

    @Test func blindWritesAreReadBackUntilShownWrittenAgainEveryFiftiethReadAndGivenUpAfterThreeSeconds() {
        let l = RestoreLedger(
            leaks: [
                Self.key: Journal.Leak(unmute: true, appliedVolume: nil, restoreVolume: nil),
                Self.other: Journal.Leak(unmute: true, appliedVolume: nil, restoreVolume: nil),
            ], volumeTolerance: 64, leakWindowNanoseconds: 0, restoreSettleNanoseconds: 0)
        let writes = l.blindRepairs
        let both = [
            RestoreLedger.Entry(key: Self.key, muted: false, volume: []),
            RestoreLedger.Entry(key: Self.other, muted: false, volume: []),
        ]
        let first = l.blindRound(writes, listed: both, attempt: 1)
        #expect(
            first.done && first.confirmed == [Self.key, Self.other] && first.rewrite.isEmpty,
            "both shown at the first read")
        let one = Array(both.prefix(1))
        var rewritten: [Int: [String]] = [:]
        var stoppedAt: Int?
        for attempt in 1...RestoreLedger.blindReadAttempts {
            let r = l.blindRound(writes, listed: one, attempt: attempt)
            #expect(r.confirmed == [Self.key])
            if !r.rewrite.isEmpty { rewritten[attempt] = r.rewrite.map(\.key) }
            if r.done {
                stoppedAt = attempt
                break
            }
        }
        #expect(rewritten == [50: [Self.other], 100: [Self.other]], "only the entry not shown, every 50th read")
        #expect(stoppedAt == 150, "given up after 150 reads, 3 s at one per 20 ms")
    }

    /// A change of `id` to `volume` under the user's full volume (a duck, or a fade's step).
    static func lowered(_ id: StreamID, _ volume: UInt32) -> AppliedChange {
        AppliedChange(
            stream: id, applicationName: "Music", unmute: false, appliedVolume: Volume(channels: [volume, volume]),
            restoreVolume: Volume(channels: full))
    }

    @Test func theRecentValuesOfAKeyAreBounded() {
        var l = Self.ledger()
        let count = RestoreLedger.recentPerKey + 20
        let ids = (1...count).map { StreamID.playback(UInt32($0)) }
        for id in ids { l.keyed(id, Self.key) }
        for (n, id) in ids.enumerated() {
            // Each a different value: gone streams, so only the recent list holds them.
            _ = l.update(
                [(id, Self.lowered(id, UInt32(1000 + 100 * n)))], muted: { _ in false }, now: UInt64(n) * Self.ms)
            _ = l.update([(id, nil)], muted: { _ in nil }, now: UInt64(n) * Self.ms)
        }
        let sources = l.policySources(key: Self.key, now: UInt64(count) * Self.ms)
        #expect(sources.count == RestoreLedger.recentPerKey)
        #expect(
            sources.last?.appliedVolume == [UInt32(1000 + 100 * (count - 1))].flatMap { [$0, $0] }, "the newest kept")
        #expect(l.policySources(key: Self.key, now: 3_000 * Self.ms).isEmpty, "none older than the settle time")
    }

    /// SIGTERM under load on PipeWire 1.4: one stream of a key got a fade-in's first step, then a call's duck was set
    /// and lifted on it and a sibling again and again; WirePlumber, behind, gave the key's next stream the step. A
    /// value set again counts once, so the step is still known.
    @Test func aFadeStepIsStillKnownAfterManyRepeatsOfADuck() {
        var l = Self.ledger(savesLate: true)
        let a = StreamID.playback(1)
        let b = StreamID.playback(2)
        let next = StreamID.playback(3)
        _ = Self.appear(&l, a)
        _ = Self.appear(&l, b)
        _ = l.update([(a, Self.lowered(a, 4684))], muted: { _ in false }, now: 0)
        for n in 1...20 {
            let at = UInt64(n) * 20 * Self.ms
            _ = l.update([(a, Self.lowered(a, 17111)), (b, Self.lowered(b, 17111))], muted: { _ in false }, now: at)
            _ = l.update([(a, nil), (b, nil)], muted: { _ in false }, now: at + 10 * Self.ms)
        }
        let v = Self.appear(&l, next, volume: [4684, 4684], now: 500 * Self.ms)
        #expect(v?.volume == Volume(channels: [4684, 4684]), "the fade's step on a new stream is audiod's")
        #expect(v?.userVolume == Volume(channels: Self.full))
        // The step and the duck once each, and the duck lifted lately from both streams.
        #expect(l.policySources(key: Self.key, excluding: next, now: 500 * Self.ms).count == 4, "repeats count once")
    }
}
