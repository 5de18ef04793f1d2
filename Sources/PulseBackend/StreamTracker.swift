import AudioPolicy

/// What the tracker needs of a stream as the server reports it: the two values audiod writes.
public protocol TrackedStreamValue: Equatable {
    var muted: Bool { get set }
    var volume: [UInt32] { get set }
}

/// A read of one stream to send to the server, numbered so that its reply can be ordered against audiod's own
/// operations.
public struct StreamRead: Sendable, Hashable {
    public var stream: StreamID
    public var seq: UInt64
}

/// Which of the server's answers about a stream are the truth, given what audiod itself has sent: the pure core of
/// the backend's stream tracking. Server notices, replies, audiod's operations and timer ticks go in (time is an
/// input); reads to send and values to believe come out. No libpulse, no clock, no I/O — every race it handles is
/// scripted in its tests (docs/BACKEND.md "Stream tracking").
///
/// The rules:
/// - *Settled reads.* Every read carries a sequence number. A reply to a read issued at or before audiod's latest
///   operation on the stream (or its removal) is stale: dropped, and the stream read again while it exists. A reply
///   older than one already believed is dropped.
/// - *One read in flight per stream.* A stream that changes while its read is out is read once more after it (reading
///   on every notice let stale replies re-issue themselves one for one under load).
/// - *Late confirmation* (`holdsUnconfirmed`, pipewire-pulse): a server that acknowledges before applying may answer a
///   later read with the old value. audiod's value then stands until a reply shows it, or until
///   `confirmationNanoseconds` have passed without one (then the stream is read and the reply believed).
/// - *Overwritten changes.* A stale reply whose volume is neither the one last believed nor one audiod wrote lately
///   shows someone else's change that audiod's later write went over (a fade writes every 20 ms, and a user's
///   slider lands between two steps): it is believed, so that the engine learns the user's volume, and the stream
///   is read again. Not when the write it may show is forgotten (the memory full, its oldest write made after the
///   read): then it is stale, as any other.
/// - *Bounded.* Entries for a stream that is gone last only while a read that could carry it is in flight.
public struct StreamTracker<Value: TrackedStreamValue> {
    /// How far a volume may be from audiod's and still show audiod's.
    public var volumeTolerance: UInt32
    public var confirmationNanoseconds: UInt64
    /// The server acknowledges changes before applying them (pipewire-pulse).
    public var holdsUnconfirmed = false

    private var seq: UInt64 = 0
    /// Replies to reads issued at or before this number are from an earlier connection.
    private var floor: UInt64 = 0
    /// Per stream: replies to reads issued at or before this are stale (audiod changed the stream, or it went).
    private var barrier: [StreamID: UInt64] = [:]
    /// Per live stream: the newest read whose reply was believed. Its key set is the streams the tracker knows.
    private var accepted: [StreamID: UInt64] = [:]
    private var reading: Set<StreamID> = []
    private var readAgain: Set<StreamID> = []
    /// Whole-list reads in flight (the connection's first read of every stream), by sequence number.
    private var lists: Set<UInt64> = []
    private struct Expected: Equatable {
        var mute: Bool?
        var volume: [UInt32]?
        /// What the server shows meanwhile as audiod's (a server ramp's start: the volume before it, until the ramp
        /// has run): any other volume is someone else's, believed at once.
        var shown: [UInt32]?
        var until: UInt64
    }
    private var expected: [StreamID: Expected] = [:]
    /// Per live stream: the volume of the reply last believed, and the volumes audiod wrote lately, each with the
    /// number of its write (newest last).
    private var believedVolume: [StreamID: [UInt32]] = [:]
    private var recentWrites: [StreamID: [(seq: UInt64, volume: [UInt32])]] = [:]
    /// The mute as audiod knows it: the reply last believed, or audiod's own write since.
    private var knownMute: [StreamID: Bool] = [:]
    /// More than a 1 s fade's 50 steps: a reply that waited behind fewer writes is judged against them; behind as
    /// many or more, it is stale (`overwritten`).
    static var recentWritesKept: Int { 64 }

    public init(volumeTolerance: UInt32, confirmationNanoseconds: UInt64 = 1_000_000_000) {
        self.volumeTolerance = volumeTolerance
        self.confirmationNanoseconds = confirmationNanoseconds
    }

    private mutating func next() -> UInt64 {
        seq &+= 1
        return seq
    }

    // MARK: Inputs

    /// The server says the stream is new or changed: the read to send, or nil while one is out (it is sent after).
    public mutating func noticed(_ id: StreamID) -> StreamRead? {
        guard reading.insert(id).inserted else {
            readAgain.insert(id)
            return nil
        }
        return StreamRead(stream: id, seq: next())
    }

    /// A read of every stream is about to be sent; its replies come to `listed(_:_:seq:now:)`, then `listDone`.
    public mutating func listIssued() -> UInt64 {
        let s = next()
        lists.insert(s)
        return s
    }

    /// The answer to a read: `value` is nil when the server no longer has the stream. Returns the value to believe
    /// (audiod's own unconfirmed value held in it), if any, and the read to send next, if any.
    public mutating func replied(_ read: StreamRead, _ value: Value?, now: UInt64) -> (
        believe: Value?, next: StreamRead?
    ) {
        let id = read.stream
        // A reply of an earlier connection: its reads were forgotten with it.
        guard read.seq > floor, reading.remove(id) != nil else { return (nil, nil) }
        let again = readAgain.remove(id) != nil
        var believe: Value?
        var reread = again && (accepted[id] != nil || value != nil)
        if let value {
            switch judge(id, value, seq: read.seq, now: now) {
            case .believe(let v): believe = v
            case .stale: reread = reread || accepted[id] != nil
            case .overwritten(let v):
                believe = v
                reread = true
            case .older: break
            }
        }
        let follow = reread ? noticed(id) : nil
        forgetIfGone(id)
        return (believe, follow)
    }

    /// One stream of a whole-list read's answer. Returns the value to believe, and a read to send if the reply is
    /// stale for a stream that still exists.
    public mutating func listed(_ value: Value, _ id: StreamID, seq s: UInt64, now: UInt64) -> (
        believe: Value?, next: StreamRead?
    ) {
        guard lists.contains(s) else { return (nil, nil) }
        switch judge(id, value, seq: s, now: now) {
        case .believe(let v): return (v, nil)
        case .stale: return (nil, accepted[id] != nil ? noticed(id) : nil)
        case .overwritten(let v): return (v, noticed(id))
        case .older: return (nil, nil)
        }
    }

    /// The whole-list read numbered `seq` has been answered in full.
    public mutating func listDone(_ s: UInt64) {
        guard lists.remove(s) != nil, lists.isEmpty else { return }
        for id in Array(barrier.keys) { forgetIfGone(id) }
    }

    /// audiod sent a mute change: replies to reads sent before it are stale from now on.
    public mutating func sent(_ id: StreamID, mute: Bool, now: UInt64) {
        barrier[id] = next()
        if accepted[id] != nil { knownMute[id] = mute }
        expect(id, now: now) { $0.mute = mute }
        forgetIfGone(id)
    }

    /// audiod sent a volume change. `shown`: what the server goes on showing until it has the change (a server ramp
    /// commits its volume at its end, `holding` nanoseconds from now); a reply showing it holds audiod's value, and
    /// one showing any third volume is someone else's change, believed at once.
    public mutating func sent(
        _ id: StreamID, volume: [UInt32], now: UInt64, shown: [UInt32]? = nil, holding: UInt64 = 0
    ) {
        let s = next()
        barrier[id] = s
        if accepted[id] != nil {
            var recent = recentWrites[id] ?? []
            recent.append((s, volume))
            if recent.count > Self.recentWritesKept { recent.removeFirst() }
            recentWrites[id] = recent
        }
        expect(id, now: now, longer: holding) {
            $0.volume = volume
            $0.shown = shown
        }
        forgetIfGone(id)
    }

    /// The server refused audiod's change: nothing will show audiod's value, so the next reply is the truth.
    public mutating func refused(_ id: StreamID) -> StreamRead? {
        expected[id] = nil
        return accepted[id] != nil ? noticed(id) : nil
    }

    /// The server removed the stream. Replies to reads sent before now are stale.
    public mutating func removed(_ id: StreamID) {
        accepted[id] = nil
        expected[id] = nil
        believedVolume[id] = nil
        recentWrites[id] = nil
        knownMute[id] = nil
        barrier[id] = next()
        forgetIfGone(id)
    }

    /// Time passed: the reads that tell the truth about audiod's changes no reply confirmed in time.
    public mutating func tick(now: UInt64) -> [StreamRead] {
        var reads: [StreamRead] = []
        for id in expected.keys.sorted() where expected[id].map({ $0.until <= now }) == true {
            expected[id] = nil
            if accepted[id] != nil, let r = noticed(id) { reads.append(r) }
        }
        return reads
    }

    /// When `tick` has work next, if ever.
    public var nextDeadline: UInt64? { expected.values.map(\.until).min() }

    /// The connection is gone: every read in flight is void and every stream forgotten.
    public mutating func reset() {
        floor = seq
        barrier.removeAll()
        accepted.removeAll()
        reading.removeAll()
        readAgain.removeAll()
        lists.removeAll()
        expected.removeAll()
        believedVolume.removeAll()
        recentWrites.removeAll()
        knownMute.removeAll()
    }

    // MARK: State

    /// Entries held, over all tables: bounded by the streams that exist plus the reads in flight.
    public var entryCount: Int {
        barrier.count + accepted.count + reading.count + readAgain.count + lists.count + expected.count
            + believedVolume.count + recentWrites.count + knownMute.count
    }

    // MARK: Judging replies

    private enum Judgement {
        case believe(Value)
        /// Stale, but showing a change audiod's later write went over: believed, and the stream read again.
        case overwritten(Value)
        case stale, older
    }

    private mutating func judge(_ id: StreamID, _ value: Value, seq s: UInt64, now: UInt64) -> Judgement {
        if s <= barrier[id, default: 0] {
            guard s > accepted[id, default: 0], overwritten(id, value.volume, readAt: s) else { return .stale }
            accepted[id] = s
            believedVolume[id] = value.volume
            // Only its volume is news: its mute was read before audiod's latest writes, which may have changed it.
            var v = value
            if let m = knownMute[id] { v.muted = m }
            if let e = expected[id]?.mute { v.muted = e }
            return .overwritten(v)
        }
        guard s > accepted[id, default: 0] else { return .older }
        accepted[id] = s
        var v = value
        hold(id, &v, now: now)
        believedVolume[id] = v.volume
        knownMute[id] = v.muted
        return .believe(v)
    }

    /// A volume neither believed last nor written by audiod lately: someone else's. Unless the write the read
    /// could show has been forgotten: with the memory full and its oldest write made after the read, a reply that
    /// waited behind as many writes may show a step no longer remembered, and the user's volume it would be taken
    /// for would stick under every duck after (a fade's old step kept as the user's). Stale, then, as any reply read
    /// before a write.
    private func overwritten(_ id: StreamID, _ volume: [UInt32], readAt s: UInt64) -> Bool {
        guard let last = believedVolume[id], let recent = recentWrites[id], let oldest = recent.first else {
            return false
        }
        if recent.count >= Self.recentWritesKept, oldest.seq > s { return false }
        func near(_ other: [UInt32]) -> Bool {
            other.count == volume.count
                && Volume(channels: other).isClose(to: Volume(channels: volume), tolerance: volumeTolerance)
        }
        return last.count == volume.count && !near(last) && !recent.contains(where: { near($0.volume) })
    }

    /// Holds audiod's own value on a reply that still shows the old one; a reply showing audiod's value confirms it.
    private mutating func hold(_ id: StreamID, _ value: inout Value, now: UInt64) {
        guard var e = expected[id] else { return }
        if e.until <= now {
            // Unconfirmed for too long: someone else changed the stream meanwhile, or the server kept its value.
            expected[id] = nil
            return
        }
        if let m = e.mute {
            if value.muted == m { e.mute = nil } else { value.muted = m }
        }
        if let v = e.volume {
            func near(_ other: [UInt32]) -> Bool {
                Volume(channels: value.volume).isClose(to: Volume(channels: other), tolerance: volumeTolerance)
            }
            if v.count != value.volume.count || near(v) {
                e.volume = nil
                e.shown = nil
            } else if let shown = e.shown, shown.count != value.volume.count || !near(shown) {
                // Neither audiod's value nor what the server shows until it has it: the user's, during the ramp.
                e.volume = nil
                e.shown = nil
            } else {
                value.volume = v
            }
        }
        expected[id] = e.mute == nil && e.volume == nil ? nil : e
    }

    private mutating func expect(
        _ id: StreamID, now: UInt64, longer: UInt64 = 0, _ change: (inout Expected) -> Void
    ) {
        guard holdsUnconfirmed else { return }
        let until = now + confirmationNanoseconds + longer
        var e = expected[id] ?? Expected(until: until)
        e.until = max(e.until, until)
        change(&e)
        expected[id] = e
    }

    /// A gone stream's barrier matters only while a reply that could carry it may still come.
    private mutating func forgetIfGone(_ id: StreamID) {
        guard accepted[id] == nil, !reading.contains(id), lists.isEmpty else { return }
        barrier[id] = nil
        readAgain.remove(id)
        expected[id] = nil
        believedVolume[id] = nil
        recentWrites[id] = nil
        knownMute[id] = nil
    }
}
