import AppIdentity
import AudioPolicy

/// A stream as the server shows it, as far as the session reads it (`RawStream` from libpulse; plain values in tests).
public protocol ServerStreamValue: TrackedStreamValue {
    var id: StreamID { get }
    /// Its client connection, if the server says.
    var client: UInt32? { get }
    /// Its sink (playback) or source (record) index; `UInt32.max` for none (pipewire-pulse, before the link).
    var device: UInt32 { get }
    var properties: [String: String] { get }
    var corked: Bool { get }
}

/// One stream between the server's reads and the engine's reports.
struct TrackedStream<Stream: ServerStreamValue> {
    var raw: Stream
    /// What the engine was last told; nil until the stream has been reported.
    var fed: StreamInfo?
    var chain: [UInt32] = []
    var identity: StreamIdentity?
    /// Who the app is, as the desktop knows it (settled with `identity`).
    var app: AppProfile?
    /// What the identity was settled from (its client's properties may arrive after the stream).
    var identitySource: [String?] = []
    /// What an earlier run's journal says audiod left on this stream, for its first report.
    var recovered: PolicyValues?
    /// What audiod last wrote to the stream, to tell its own changes from the user's.
    var lastWritten = WrittenValues()
    /// Found by the connection's first read of every stream: it existed before anything this connection did, so a
    /// value on it cannot have come from a sibling's policy value of this run.
    var preexisting = false
    /// Reads made while it was not yet linked (PipeWire), to find its link when no event announces it.
    var unlinkedReads = 0
    /// The engine was told of it before its link (`Event.streamAnnounced`).
    var announced = false
    /// When it was first reported linked to a device (monotonic ns).
    var linkedAt: UInt64?
    /// audiod's values written again over the server's late restore of saved ones.
    var restoresOverwritten = 0
    /// What the stream showed before audiod first wrote to it: a late restore puts it back.
    var beforeWrite: WrittenValues?
}

/// The mute and volume audiod last wrote to a stream (nil: never).
struct WrittenValues {
    var muted: Bool?
    var volume: [UInt32]?
    /// audiod wrote a mute the stream does not show, or a volume below the one it shows: what it shows is louder
    /// than what audiod wrote. (A lift that did not stick is no danger: the ledger's leak watch and the user decide.)
    func silences(comparedTo m: Bool, volume v: [UInt32], tolerance: UInt32) -> Bool {
        if muted == true && !m { return true }
        if let volume, volume.count == v.count, zip(volume, v).contains(where: { $0.0 + tolerance < $0.1 }) {
            return true
        }
        return false
    }

    /// The values shown are (as far as audiod wrote them) audiod's own.
    func matches(muted m: Bool, volume v: [UInt32], tolerance: UInt32) -> Bool {
        guard muted != nil || volume != nil else { return false }
        if let muted, muted != m { return false }
        if let volume,
            volume.count != v.count || !Volume(channels: v).isClose(to: Volume(channels: volume), tolerance: tolerance)
        {
            return false
        }
        return true
    }
}

/// A stream's report as it is decided, before it becomes the session's actions (`ServerAction`), in the order the
/// backend carries them out: the log's notes, the journal, the engine, the server.
struct StreamReport {
    /// For the engine, in order.
    var events: [Event] = []
    /// Restore-database keys whose journal line must be written again.
    var leaks: [String] = []
    /// Not yet linked: read it again after this many ns.
    var readAgainAfter: UInt64?
    /// It started with a policy value audiod left in the restore database under this key.
    var leakFoundUnder: String?
    /// The server gave the stream its saved values over audiod's write: write these again (nil fields: untouched).
    var writeMuteAgain: Bool?
    var writeVolumeAgain: [UInt32]?
    /// For the debug log: who plays it, and what could not be read.
    var notes: [String] = []

    func actions(_ id: StreamID) -> [ServerAction] {
        var out = notes.map { ServerAction.note("identity: \($0)") } + leaks.map(ServerAction.journalLeak)
        if let key = leakFoundUnder { out.append(.leakFound(id, key: key)) }
        out += events.map(ServerAction.tell)
        if writeMuteAgain != nil || writeVolumeAgain != nil {
            out.append(.writeAgain(id, mute: writeMuteAgain, volume: writeVolumeAgain))
        }
        if let after = readAgainAfter { out.append(.readUnlinked(id, afterNanoseconds: after)) }
        return out
    }
}

extension ServerSession {
    /// Re-reads of a stream not yet linked: every 50 ms, 40 times (2 s); then it is reported as it is.
    static var unlinkedReadLimit: Int { 40 }
    static var unlinkedReadNanoseconds: UInt64 { 50_000_000 }
    /// How long after a new stream's first report WirePlumber may still give it its saved values (0.5 does so after
    /// the link, over what audiod wrote at once), counted from the link, and how many times audiod's values go out
    /// again over them. The tracker believes a value audiod's write never showed after 1 s. A user who puts back
    /// the very values a stream had before audiod's write, within 1.5 s of its link, does it three times.
    static var lateRestoreNanoseconds: UInt64 { 1_500_000_000 }
    static var lateRestoreRewrites: Int { 2 }

    /// Every stream known, in index order.
    public var streamIDs: [StreamID] { streams.keys.sorted() }
    public var streamCount: Int { streams.count }
    /// The stream's last read mute, as far as audiod knows (its own writes count until a read says otherwise).
    public func shownMute(_ id: StreamID) -> Bool? { streams[id]?.raw.muted }
    /// The server has the stream, as far as audiod knows.
    public func tracks(_ id: StreamID) -> Bool { streams[id] != nil }

    /// What a stream showed before audiod first wrote to it (nil: audiod never wrote to it).
    func valuesBeforeWrite(_ id: StreamID) -> WrittenValues? { streams[id]?.beforeWrite }

    /// The streams held of one client connection.
    func streams(ofClient index: UInt32) -> [StreamID] {
        streams.filter { $0.value.raw.client == index }.keys.sorted()
    }
    /// Not yet reported to the engine (on PipeWire: not yet linked).
    public func unreported(_ id: StreamID) -> Bool { streams[id].map { $0.fed == nil } ?? false }

    /// A reported stream's own mute and volume — what it shows, with the mute and duck audiod holds on it taken off —
    /// for `KeyUserValues`, so that the next run can tell what changed while audiod was down.
    public func streamRecord(_ id: StreamID) -> KeyUserValues.StreamRecord? {
        guard let t = streams[id], t.fed != nil, let key = ledger.key(of: id) else { return nil }
        let held = ledger.applied[id]
        let muted = held?.unmute == true ? false : t.raw.muted
        let volume = held?.appliedVolume != nil ? held?.restoreVolume?.channels ?? t.raw.volume : t.raw.volume
        return KeyUserValues.StreamRecord(key: key, muted: muted, volume: volume)
    }

    /// `streamRecord` of every reported stream.
    public func streamRecords() -> [StreamID: KeyUserValues.StreamRecord] {
        var all: [StreamID: KeyUserValues.StreamRecord] = [:]
        for id in streams.keys { all[id] = streamRecord(id) }
        return all
    }

    // MARK: Reads

    /// The server announced a new or changed stream: read it.
    public mutating func streamAnnounced(_ id: StreamID) -> [ServerAction] {
        tracker.noticed(id).map { [.read($0)] } ?? []
    }

    /// A stream read answered (nil: the stream is gone).
    public mutating func streamRead(_ read: StreamRead, _ raw: Stream?, now: UInt64) -> [ServerAction] {
        let (believe, next) = tracker.replied(read, raw, now: now)
        var out = believe.map { believed($0) } ?? []
        if let next { out.append(.read(next)) }
        return out
    }

    /// A stream in a listing issued as `seq` (`listIssued`).
    public mutating func streamListed(_ raw: Stream, seq: UInt64, now: UInt64) -> [ServerAction] {
        let (believe, next) = tracker.listed(raw, raw.id, seq: seq, now: now)
        var out = believe.map { believed($0) } ?? []
        if let next { out.append(.read(next)) }
        return out
    }

    /// A listing of every stream goes out: its answers are ordered against the reads around it.
    public mutating func listIssued() -> UInt64 { tracker.listIssued() }
    public mutating func listDone(_ seq: UInt64) { tracker.listDone(seq) }

    /// When the next confirmation of one of audiod's writes is due (monotonic ns), if any.
    public var nextDeadline: UInt64? { tracker.nextDeadline }
    /// The confirmations due by `now` that no read brought: read those streams again.
    public mutating func tick(now: UInt64) -> [ServerAction] { tracker.tick(now: now).map(ServerAction.read) }

    /// A connection of audiod's own (a repair probe) is client `index`: its streams are never an app's, and one heard
    /// of before is forgotten.
    public mutating func ownClientConnected(_ index: UInt32) -> [ServerAction] {
        ownClients.insert(index)
        return streams(ofClient: index).map(ServerAction.forget)
    }

    public mutating func ownClientClosed(_ index: UInt32) { ownClients.remove(index) }

    private mutating func believed(_ raw: Stream) -> [ServerAction] {
        if let c = raw.client, ownClients.contains(c) { return [] }
        if isRoleLoopback(raw) { return [.forget(raw.id)] }
        return accepted(raw) ? [.report(raw.id)] : []
    }

    /// A read the tracker believes. Returns true when the stream is to be reported now (after the first state is
    /// in; the connection's first listing is reported all at once).
    public mutating func accepted(_ raw: Stream) -> Bool {
        let id = raw.id
        var t = streams[id] ?? TrackedStream(raw: raw, preexisting: isEnumerating)
        t.raw = raw
        streams[id] = t
        return !isEnumerating
    }

    /// What a previous run (or connection) left on streams, by the journal: a stream that still exists — same
    /// server run, same app — carries its entry to the engine with its first report (the engine takes the values as
    /// its own and decides); a change on a stream that is gone becomes a restore-database leak. Returns how many
    /// streams still carry one.
    public mutating func recover(_ journal: Journal, serverCookie: UInt32) -> Int {
        var found = 0
        for e in journal.entries {
            let id = StreamID(e.record ? .record : .playback, e.index)
            if journal.serverCookie == serverCookie, let t = streams[id],
                t.raw.properties["application.name", default: ""] == e.applicationName
            {
                // A write of another volume may not have landed: the stream shows the earlier one.
                var applied = e.appliedVolume
                if let earlier = e.otherAppliedVolumes.first(where: {
                    $0.count == t.raw.volume.count
                        && Volume(channels: t.raw.volume).isClose(
                            to: Volume(channels: $0), tolerance: tracker.volumeTolerance)
                }) {
                    applied = earlier
                }
                streams[id]?.recovered = PolicyValues(
                    mute: e.unmute, volume: applied.map(Volume.init(channels:)),
                    userVolume: e.restoreVolume.map(Volume.init(channels:)))
                found += 1
            } else if let key = e.restoreKey {
                // Streams of the same run below its index existed before it, so before it ended.
                ledger.recorded(
                    Journal.Leak(
                        unmute: e.unmute, appliedVolume: e.appliedVolume, restoreVolume: e.restoreVolume,
                        existedBefore: journal.serverCookie == serverCookie ? e.index : nil,
                        // A duck at the previous level, whose replacement may not have landed, may be what was saved.
                        otherVolumes: e.otherAppliedVolumes.filter {
                            $0 != e.appliedVolume && $0.count == e.restoreVolume?.count
                        }),
                    for: key)
            }
        }
        return found
    }

    /// Decides what the engine hears of a stream now: nothing yet (pipewire-pulse lists it before it is linked),
    /// its announcement, its appearance (with any policy value audiod left on it) or its change.
    public mutating func report(_ id: StreamID, now: UInt64) -> [ServerAction] {
        decide(id, now: now).actions(id)
    }

    private mutating func decide(_ id: StreamID, now: UInt64) -> StreamReport {
        guard var t = streams[id] else { return StreamReport() }
        var out = StreamReport()
        // pipewire-pulse lists a new stream before its node is linked, with no device and a volume of 0 that is
        // nobody's: WirePlumber gives it its saved values around the link. Unlinked, it cannot be heard, so it is
        // first reported once linked — or the engine would take the placeholder, then the saved value, for the
        // user's (and a leaked duck for the user's volume).
        if t.fed == nil, onPipeWire, t.raw.device == UInt32.max, t.unlinkedReads < Self.unlinkedReadLimit {
            // A change event normally announces the link. One that raced the connection's first listing is not
            // announced again (measured: 2 in 10 server restarts left a player's stream unreported for good), so the
            // stream is read again until it is linked; then it is reported as it is.
            t.unlinkedReads += 1
            // Its first sample is mixed a graph cycle after the link, ~5 ms from now: a call's stream silences what
            // it will interrupt before then (the engine decides whether it is a call's).
            if !t.announced, id.kind == .playback {
                t.announced = true
                out.events.append(.streamAnnounced(info(id, &t, mergedProperties(t.raw), now: now, notes: &out.notes)))
            }
            streams[id] = t
            out.readAgainAfter = Self.unlinkedReadNanoseconds
            return out
        }
        let props = mergedProperties(t.raw)
        if t.fed == nil {
            ledger.keyed(id, RestoreKey.of(props, record: id.kind == .record))
            if t.preexisting {
                ledger.foundAtConnection(id, muted: t.raw.muted, volume: t.raw.volume, left: t.recovered)
            }
        }
        // What audiod left on the stream goes to the engine with the report: it decides what to put back.
        var left = t.recovered
        if let r = left, t.fed == nil {
            // What an earlier run held here is audiod's as much as what this run sets: the server may have saved it
            // into the key, and putting it back is saved late like any lift (random test, seed 495342 on PipeWire
            // 0.3.65: mpv's recovered mute was put back a second before the server was killed; the server came back
            // with the mute, and mpv's next stream, started with it, was taken for the user's).
            // Only what the stream still shows (the user may have changed it while audiod was down), and not as a
            // value audiod holds now: the engine adopts it, and its journal line is the engine's.
            let showsVolume =
                r.volume.map {
                    $0.channels.count == t.raw.volume.count
                        && Volume(channels: t.raw.volume).isClose(to: $0, tolerance: tracker.volumeTolerance)
                } ?? false
            let shown = Journal.Leak(
                unmute: r.mute && t.raw.muted, appliedVolume: showsVolume ? r.volume?.channels : nil,
                restoreVolume: showsVolume ? r.userVolume?.channels : nil)
            if shown.unmute || shown.appliedVolume != nil { ledger.recovered(id, shown, now: now) }
        }
        if left == nil {
            let (values, journal) = ledger.shown(
                id, first: t.fed == nil, preexisting: t.preexisting, muted: t.raw.muted, volume: t.raw.volume, now: now)
            out.leaks += journal
            left = values
            if values != nil { out.leakFoundUnder = ledger.key(of: id) ?? "" }
            // What a new stream started with, beside how many policy volumes of its key audiod knows lately: a leak
            // not recognized shows here.
            if t.fed == nil, !t.preexisting, values == nil, let key = ledger.key(of: id) {
                let known = Set(ledger.policySources(key: key, excluding: id, now: now).flatMap(\.policyVolumes)).count
                out.notes.append(
                    "\(id) starts muted=\(t.raw.muted) volume=\(t.raw.volume), none of the \(known) policy volumes of \(key) known lately"
                )
            }
        }
        t.recovered = nil
        let wrote = t.lastWritten.muted != nil || t.lastWritten.volume != nil
        if t.linkedAt == nil, t.raw.device != UInt32.max {
            t.linkedAt = now
            // pipewire-pulse drops a write to a stream WirePlumber has not linked yet (1.4, seen after a server
            // restart, where a stream stayed unlinked for over 2 s): audiod's values go out again at the link.
            if onPipeWire, t.fed != nil, wrote {
                out.writeMuteAgain = t.lastWritten.muted
                out.writeVolumeAgain = t.lastWritten.volume
                out.notes.append("\(id): linked after audiod wrote to it; written again")
            }
        }
        if left == nil, t.fed != nil, onPipeWire, wrote, let at = t.linkedAt, now &- at <= Self.lateRestoreNanoseconds,
            t.restoresOverwritten < Self.lateRestoreRewrites,
            t.lastWritten.silences(comparedTo: t.raw.muted, volume: t.raw.volume, tolerance: tracker.volumeTolerance),
            t.beforeWrite?.matches(muted: t.raw.muted, volume: t.raw.volume, tolerance: tracker.volumeTolerance) == true
        {
            // The stream shows again what it showed before audiod's write: WirePlumber restored the key's saved
            // values over it (0.5 does so around the link), or pipewire-pulse never applied it. That is the
            // server's doing, not the user's change, and audiod's values go out again. (Taken for the user's, a
            // game muted beside a video at its first sample played on.) A user's change to other values is the
            // user's at once.
            t.restoresOverwritten += 1
            out.writeMuteAgain = t.lastWritten.muted
            out.writeVolumeAgain = t.lastWritten.volume
            out.notes.append("\(id): the server gave it its saved values over audiod's write; written again")
            streams[id] = t
            return out
        }
        var info = info(id, &t, props, now: now, notes: &out.notes)
        let first = t.fed == nil
        let changed = t.fed != info || left != nil
        if left == nil, let fed = t.fed, fed.muted != info.muted || fed.volume != info.volume {
            // The server saved this change in the stream's entry: it holds non-policy values again.
            // Field by field: a mute or volume that changed, and not to what audiod last wrote, is the user's.
            let userMuted = fed.muted != info.muted && t.lastWritten.muted != info.muted ? info.muted : nil
            let wroteVolume =
                t.lastWritten.volume.map {
                    $0.count == t.raw.volume.count
                        && Volume(channels: t.raw.volume).isClose(
                            to: Volume(channels: $0), tolerance: tracker.volumeTolerance)
                } ?? false
            let userVolume = fed.volume != info.volume && !wroteVolume ? t.raw.volume : nil
            // audiod's only when no part of it is the user's: a field audiod never wrote (or whose write the user
            // has since overridden) that changed makes the change the user's.
            let byAudiod = userMuted == nil && userVolume == nil
            out.leaks += ledger.changed(
                id, byAudiod: byAudiod, userMuted: userMuted, userVolume: userVolume, shownMuted: info.muted,
                shownVolume: t.raw.volume)
            // What the user set is no longer audiod's: a later change back to what audiod once wrote is the user's
            // too (seed 723824: a mute the user set again after unmuting audiod's was taken for audiod's, and the
            // key's next stream lost it).
            if userMuted != nil { t.lastWritten.muted = nil }
            if userVolume != nil { t.lastWritten.volume = nil }
        }
        t.fed = info
        streams[id] = t
        info.leftByPolicy = left
        if first {
            out.events.append(.streamAppeared(info))
        } else if changed {
            out.events.append(.streamChanged(info))
        }
        return out
    }

    /// The reported streams on a device whose name may have changed, or of a client whose properties did.
    public func reportedStreams(onDevice index: UInt32, source: Bool) -> [StreamID] {
        streams.filter {
            $0.value.raw.device == index && $0.key.kind == (source ? .record : .playback) && $0.value.fed != nil
        }
        .keys.sorted()
    }

    public func reportedStreams(ofClient index: UInt32) -> [StreamID] {
        streams.filter { $0.value.raw.client == index && $0.value.fed != nil }.keys.sorted()
    }

    /// The desktop entries changed (or arrived): every stream's app is identified again at its next report — a
    /// PipeWire stream announced before its link too, or it would appear with the app named before the entries came
    /// (a game installed a moment before it started, taken for a plain process). Reports the reported ones now
    /// (none while the first state is read: its listing reports them all); an unlinked one is read again anyway.
    public mutating func desktopEntriesChanged(_ index: DesktopEntrySnapshot) -> [ServerAction] {
        identifier.entriesChanged(index)
        guard !isEnumerating else { return [] }
        for id in streams.keys { streams[id]?.identitySource = [] }
        return streams.filter { $0.value.fed != nil }.keys.sorted().map(ServerAction.report)
    }

    /// The server removed a stream.
    public mutating func streamRemoved(_ id: StreamID, now: UInt64) -> [ServerAction] {
        tracker.removed(id)
        guard let t = streams.removeValue(forKey: id) else { return [] }
        var out = StreamReport()
        out.leaks = ledger.removed(id, muted: t.raw.muted, now: now)
        if t.fed != nil || t.announced { out.events.append(.streamRemoved(id)) }
        return out.actions(id)
    }

    // MARK: Writes

    /// A write counted by `writing` that will not be sent after all (a ramp's mute lifted before it, a held volume
    /// another replaced): only the count of unanswered writes goes down; what the tracker expects stays until the
    /// next write or read.
    public mutating func writeWithdrawn(_ id: StreamID) {
        guard let n = writesUnanswered[id] else { return }
        writesUnanswered[id] = n > 1 ? n - 1 : nil
    }

    /// audiod writes a mute or volume to a stream (the engine's effect). False for a stream the server removed a
    /// moment ago: nothing is sent. `shown`, `holding`: a volume the server commits only at the end of a ramp,
    /// `holding` nanoseconds from now, showing `shown` until then (`StreamTracker.sent`).
    public mutating func writing(
        _ id: StreamID, mute: Bool? = nil, volume: [UInt32]? = nil, now: UInt64, shown: [UInt32]? = nil,
        holding: UInt64 = 0
    ) -> Bool {
        guard let t = streams[id] else { return false }
        if t.beforeWrite == nil { streams[id]?.beforeWrite = WrittenValues(muted: t.raw.muted, volume: t.raw.volume) }
        writesUnanswered[id, default: 0] += 1
        if let mute { tracker.sent(id, mute: mute, now: now) }
        if let volume { tracker.sent(id, volume: volume, now: now, shown: shown, holding: holding) }
        // On PipeWire a new stream shows volume 0 until WirePlumber gives it its key's saved values, which may hold a
        // duck audiod left there: a write before that does not end the watch for it. (SIGTERM under load on
        // PipeWire 1.4: a game stream muted at its link was then given a leaked duck, which was taken for the
        // user's volume, kept at the stop and saved for every later game stream.)
        let savedValuesPending = onPipeWire && !t.raw.volume.isEmpty && t.raw.volume.allSatisfy { $0 == 0 }
        if !savedValuesPending { ledger.wrote(id) }
        // Until a read says otherwise the stream holds audiod's value: a report made meanwhile from what was read
        // before (its client's properties arriving, a device renamed) must not show the old one, which the engine
        // would take for the user's change.
        if let mute {
            streams[id]?.raw.muted = mute
            streams[id]?.lastWritten.muted = mute
        }
        if let volume {
            streams[id]?.raw.volume = volume
            streams[id]?.lastWritten.volume = volume
        }
        return true
    }

    /// A step's writes are sent: the lifts that no write carries (the user changed the stream, or the engine let
    /// go of it) are journaled now.
    public mutating func writesSent() -> [ServerAction] {
        let unwritten = inFlight.keys.filter { writesUnanswered[$0] == nil }.sorted()
        for id in unwritten { inFlight[id] = nil }
        return unwritten.isEmpty ? [] : [.journalStreams(unwritten)]
    }

    /// The journal's line for a stream: what audiod holds on it, and while a write that lifts or changes a value is
    /// in flight, also what it may still show.
    public func journalEntry(_ id: StreamID) -> Journal.Entry? { inFlight[id] ?? ledger.journalEntry(id) }

    /// The whole journal, lines in flight included.
    public func journal(cookie: UInt32) -> Journal {
        var j = ledger.journal(cookie: cookie)
        guard !inFlight.isEmpty else { return j }
        j.entries = Set(ledger.applied.keys).union(inFlight.keys).sorted().compactMap(journalEntry)
        return j
    }

    /// What the server's answer to a write means: refused, nothing will show audiod's value, and a read is the
    /// truth; accepted, the restore database may now hold audiod's value; and once the last write carrying a lift
    /// is acknowledged, the stream's journal line may drop it.
    public mutating func writeAnswered(_ id: StreamID, ok: Bool) -> [ServerAction] {
        var answer: [ServerAction] = []
        if !ok, streams[id] != nil, let r = tracker.refused(id) { answer.append(.read(r)) }
        if ok { answer.append(.repairRestoreEntry(id)) }
        if let n = writesUnanswered[id], n > 1 {
            writesUnanswered[id] = n - 1
        } else {
            writesUnanswered[id] = nil
            // Refused, the stream still shows audiod's value: its entry stays (a stale entry is harmless — the
            // engine undoes only what a stream still shows).
            if inFlight.removeValue(forKey: id) != nil, ok { answer.append(.journalStreams([id])) }
        }
        return answer
    }

    /// What the engine holds on these streams now (nil: nothing). The streams whose journal line is to be written
    /// now are journaled; a lift from a live stream waits for the write that carries it (`writeAnswered`): killed
    /// between the two, the journal must still name what the stream shows.
    /// A lift of one value while another stays (a duck lifted from a stream still muted), or a duck moved to another
    /// level, is journaled at once with both — what the stream may still show and what audiod holds now — and
    /// again, with only the latter, once the write is acknowledged (random test, seed 936379 on PulseAudio: killed
    /// between the line and the write, the journal named only the mute, and `--restore` left the duck).
    public mutating func appliedChanged(_ changes: [(StreamID, AppliedChange?)], now: UInt64) -> [ServerAction] {
        var before: [StreamID: Journal.Entry] = [:]
        for (id, _) in changes { before[id] = journalEntry(id) }
        let dirty = ledger.update(changes, muted: { streams[$0]?.raw.muted }, now: now)
        var journalNow: [StreamID] = []
        for id in dirty {
            let new = ledger.journalEntry(id)
            // The line drops only when every write sent to the stream is answered, not at the answer of one sent before
            // the lift (random test, seed 423587 on PipeWire 0.3.65: a stream's unmute was in flight when its duck was
            // lifted; the unmute's answer dropped the line, audiod was killed before the volume write landed, and
            // `--restore` left the duck).
            if new == nil, streams[id] != nil {
                // The line the file has stays until the write lands (and in a whole rewrite meanwhile).
                inFlight[id] = before[id]
            } else if let new, streams[id] != nil, let old = before[id],
                let both = Self.both(old, new, keepingEarlier: writesUnanswered[id] != nil)
            {
                inFlight[id] = both
                journalNow.append(id)
            } else {
                inFlight[id] = nil
                journalNow.append(id)
            }
        }
        return journalNow.isEmpty ? [] : [.journalStreams(journalNow)]
    }

    /// `new` with what `old` holds that `new` lifts or changes; nil when `new` keeps all of `old`. `keepingEarlier`:
    /// writes are still unanswered, so the stream may still show `old`'s earlier volume too (nothing of the last
    /// writes landed; random test, seed 7796 on PipeWire 1.4: two ducks written within a millisecond, audiod killed
    /// before either landed, and `--restore` took the volume before them for the user's).
    static func both(_ old: Journal.Entry, _ new: Journal.Entry, keepingEarlier: Bool = false) -> Journal.Entry? {
        var both = new
        if old.unmute { both.unmute = true }
        let earlier = old.earlierAppliedVolume.map { [$0] } ?? []
        if let ov = old.appliedVolume, ov != new.appliedVolume {
            if new.appliedVolume == nil {
                both.appliedVolume = ov
                both.restoreVolume = old.restoreVolume
                both.earlierAppliedVolume = earlier.first
                both.olderAppliedVolume = old.olderAppliedVolume
            } else {
                both.earlierAppliedVolume = ov
                // Two writes unanswered: the stream may still show the value before both.
                if keepingEarlier, let e = earlier.first, e != new.appliedVolume, e != ov {
                    both.olderAppliedVolume = e
                }
            }
        } else if new.appliedVolume != nil, let e = earlier.first, e != new.appliedVolume {
            both.earlierAppliedVolume = e
            if let o = old.olderAppliedVolume, o != new.appliedVolume, o != e { both.olderAppliedVolume = o }
        }
        return both == new ? nil : both
    }

    /// Streams that appeared lately and are not yet linked to a device: on PipeWire, WirePlumber gives a new stream
    /// its saved values around the time it links, so a stop waits for these (bounded) to correct what they show.
    public func hasUnlinkedNewStreams(now: UInt64) -> Bool {
        onPipeWire
            && streams.values.contains { t in
                t.raw.device == UInt32.max && !t.preexisting && ledger.watching(t.raw.id, now: now)
            }
    }

    // MARK: What a stream is

    /// The stream as the engine sees it, from what the server shows now.
    private mutating func info(
        _ id: StreamID, _ t: inout TrackedStream<Stream>, _ props: [String: String], now: UInt64, notes: inout [String]
    ) -> StreamInfo {
        // Who plays is settled once per stream (and again if its pid or client changes): a pid is believed only
        // where the kernel or the host vouches for it. On PulseAudio a client connection still there vouches for
        // its process.
        let source = StreamIdentity.sourceKeys.map { props[$0] } + [t.raw.client.map { "\($0)" }]
        if t.identity == nil || source != t.identitySource {
            let vouches = !onPipeWire && t.raw.client.map { clients[$0] != nil } == true
            let found = identifier.identify(props, client: t.raw.client, clientVouches: vouches, now: now)
            notes += found.notes
            t.identity = StreamIdentity.of(found.host, client: t.raw.client)
            t.identitySource = source
            t.chain = found.chain
            t.app = found.app
        }
        let record = id.kind == .record
        var info = StreamInfo(
            id: id, processChain: t.chain, applicationName: props["application.name"] ?? "",
            applicationID: props["application.id"] ?? t.identity?.flatpakApp,
            binary: props["application.process.binary"],
            role: props["media.role"], sessionTag: props["audiod.session"].flatMap { UInt64($0) },
            corked: t.raw.corked, muted: t.raw.muted, volume: Volume(channels: t.raw.volume),
            device: deviceName(t.raw.device, source: record), identity: t.identity?.identity,
            fromMonitor: record && (sources[t.raw.device]?.isMonitor ?? false), app: t.app)
        info.foundAtConnection = t.preexisting
        info.serverRamps = serverRamps && id.kind == .playback && t.raw.properties["object.id"] != nil
        info.serverRampsVolume = serverRampsVolume && id.kind == .playback && t.raw.properties["object.id"] != nil
        return info
    }

    /// The server copies the client's properties into its streams; the client's own count where the stream lacks
    /// them (and for a PULSE_PROP set after the stream was made).
    func mergedProperties(_ raw: Stream) -> [String: String] {
        guard let c = raw.client, let client = clients[c] else { return raw.properties }
        return raw.properties.merging(client.properties) { stream, _ in stream }
    }

    func deviceName(_ index: UInt32, source: Bool) -> String {
        (source ? sources : sinks)[index]?.name ?? "#\(index)"
    }
}

extension ServerSession {
    /// A twentieth in amplitude (−26 dB; pulse volumes are cubic): a step from here is no louder than the last step
    /// of a fade.
    static var quietVolume: UInt32 { 24_144 }

    /// The PipeWire node of a playback stream a server ramp can take down: one heard now (uncorked, unmuted, louder
    /// than `quietVolume`) that has played for `playingFor` since its link, or was there before this connection. A
    /// ramp moves only while its node processes, so a stream just linked, or paused, is muted at once instead (a
    /// paused one makes no sound to click); so is one already quiet, such as a fade-out's last step.
    public func rampableNode(_ id: StreamID, now: UInt64, playingFor ns: UInt64) -> UInt32? {
        guard let t = streams[id], !t.raw.volume.allSatisfy({ $0 <= Self.quietVolume }) else { return nil }
        return heardNode(id, now: now, playingFor: ns)
    }

    /// As `rampableNode`, however quiet the stream is: a node whose volume a ramp can move (a duck's undoing from
    /// a strong duck starts below `quietVolume`).
    public func heardNode(_ id: StreamID, now: UInt64, playingFor ns: UInt64) -> UInt32? {
        guard id.kind == .playback, let t = streams[id], !t.raw.corked, !t.raw.muted, !t.raw.volume.isEmpty,
            t.preexisting || (t.linkedAt.map { now >= $0 &+ ns } ?? false),
            let s = t.raw.properties["object.id"], let node = UInt32(s)
        else { return nil }
        return node
    }
}

extension ServerSession {
    /// The restore key the server files the stream under (WirePlumber saves its PipeWire factor there too).
    public func streamKey(_ id: StreamID) -> String? {
        guard let raw = streams[id]?.raw else { return nil }
        return RestoreKey.wirePlumber(mergedProperties(raw), record: id.kind == .record)
    }

    /// Whether the stream is paused (corked), as last read.
    public func streamCorked(_ id: StreamID) -> Bool? { streams[id]?.raw.corked }

    /// Whether the server showed the stream muted, as last read.
    public func streamMuted(_ id: StreamID) -> Bool? { streams[id]?.raw.muted }

    /// The stream's volume as last read (or as audiod last wrote it).
    public func streamVolume(_ id: StreamID) -> [UInt32]? { streams[id]?.raw.volume }

    /// A stream's PipeWire node (`object.id`), where the server is PipeWire.
    public func streamNode(_ id: StreamID) -> UInt32? {
        streams[id]?.raw.properties["object.id"].flatMap { UInt32($0) }
    }
}
