import AudioPolicy

/// Where audiod's policy values may have gone in the server's restore database, and what to write to take them out:
/// the pure part of the backend's restore-database handling. The server saves every mute and volume a client sets
/// into the entry of the stream's app or role (module-stream-restore at once, WirePlumber a moment later), audiod's
/// too, and gives them to that app's next stream. The ledger is told what audiod holds, what streams show and when
/// they end (time is an input); it answers with the values a new stream shows that are audiod's, the entries to
/// write back with the reason for each, and the journal lines to rewrite. No libpulse, no clock, no I/O: the rules
/// are scripted in its tests (docs/BACKEND.md, "Restore databases").
///
/// The rules:
/// - *Leaks.* A stream that ends while audiod holds a value on it leaves that value in its entry; so may one that
///   ends within `restoreSettleNanoseconds` of audiod lifting it (WirePlumber saves only after reading the node back).
/// - *Siblings.* The entry keeps whichever of its streams the server saved last: a new stream of the key may start
///   with any policy value audiod holds on a sibling, or set or lifted on one lately.
/// - *The leak window.* Where the server applies saved values after the stream appears (`savesLate`), a new stream is
///   watched for a leaked value for `leakWindowNanoseconds`, until a value is handed over or audiod writes to it
///   once the server has given it its saved values (on PipeWire a stream shows volume 0 until then).
/// - *Streams found at connection* that show a leaked value are all put back; the leak is cleared once the whole list
///   is reported (`connectionListReported`).
/// - *The user's change* saved in the entry makes it the user's again: its leak is gone, and so are the recent policy
///   values audiod set on the key before it.
public struct RestoreLedger {
    /// One restore-database entry to write with the user's values, and why.
    public struct Repair: Equatable, Sendable {
        public var key: String
        public var muted: Bool
        /// Empty: not known (a blind write on PipeWire leaves WirePlumber's volume alone).
        public var volume: [UInt32]
        /// The decision that makes this write: logged beside it.
        public var because: String
    }

    /// An entry as the server lists it.
    public struct Entry: Equatable, Sendable {
        public var key: String
        public var muted: Bool
        public var volume: [UInt32]
        public init(key: String, muted: Bool, volume: [UInt32]) {
            self.key = key
            self.muted = muted
            self.volume = volume
        }
    }

    public var volumeTolerance: UInt32
    public var leakWindowNanoseconds: UInt64
    public var restoreSettleNanoseconds: UInt64
    /// The server applies a new stream's saved values a moment after the stream appears (WirePlumber).
    public var savesLate = false

    /// What audiod applied, as the engine last said.
    public private(set) var applied: [StreamID: AppliedChange] = [:]
    /// Entries that may hold a policy value, by entry name. An entry is clean again only when one of its streams
    /// changes (or starts) with non-policy values: a sibling ending unsilenced writes nothing.
    public private(set) var leaks: [String: Journal.Leak]
    /// Each stream's entry name, once it has been reported.
    private var keys: [StreamID: String] = [:]
    private var lifted: [StreamID: (leak: Journal.Leak, at: UInt64)] = [:]
    /// The policy values audiod set on streams of each key lately (at most `recentPerKey` different ones, none older
    /// than `restoreSettleNanoseconds`): the server saves each of them, in an order audiod cannot see. A value set
    /// again counts once, at its last time: a busy WirePlumber may give the key's next stream any of them (SIGTERM
    /// under load on PipeWire 1.4: a fade-in's first step came back on the key's next stream after the same call's
    /// duck had been set and lifted eight times on two streams, which had pushed the step out of a list of eight;
    /// taken for the user's volume, it was kept at the stop and saved). 128: a stepped fade writes a value every
    /// 20 ms, 100 in the 2 s, and a duck and a fade-in on one key may both fall in them.
    private var recentByKey: [String: [(leak: Journal.Leak, at: UInt64)]] = [:]
    static let recentPerKey = 128
    /// Of those, the newest that go into the journal's pending saves and what a connection's drop holds: the journal
    /// keeps a key's sixteen volumes (`Journal.Leak.otherVolumesLimit`), and these lists are merged on every step.
    static let journaledPerKey = 8
    /// Leaked keys that streams found at connection showed.
    private var matchedAtConnect: Set<String> = []
    /// Values to undo if a new stream shows one, until a deadline (monotonic ns).
    private var corrections: [StreamID: (leaks: [Journal.Leak], until: UInt64)] = [:]
    /// The server run (`pa_server_info.cookie`) the leaks' `existedBefore` indices refer to; nil: none known.
    private var serverCookie: UInt32?
    /// The highest index of each kind of stream reported on this connection: the streams a leak recorded now
    /// cannot be in.
    private var highestSeen: [StreamKind: UInt32] = [:]
    /// The order of audiod's writes and the user's saved changes: the entry holds what was saved last, so a value
    /// audiod holds on a sibling since before the user's last change of the key is not in it.
    private var order: UInt64 = 0
    private var appliedOrder: [StreamID: UInt64] = [:]
    private var userChangeOrder: [String: UInt64] = [:]
    /// The mute of each key's last change that was not audiod's (what the server saved into the entry then): a
    /// stream that starts muted when the user last muted its key is the user's, whatever audiod muted since.
    private var userMuteByKey: [String: Bool] = [:]
    /// The volume of each key's last change that was not audiod's: what a leaked duck is put back to (not the volume
    /// the ducked sibling had, which the user may have changed on another stream of the key since — seed 636101).
    private var userVolumeByKey: [String: [UInt32]] = [:]
    /// Counts the changes of the keys' user values: the backend keeps them in a file when it moves.
    public private(set) var userValuesRevision: UInt64 = 0

    /// The keys' last user values: from the file an earlier run kept (`KeyUserValues`), and for it. The file's
    /// stream lines are the session's to write (`ServerSession.streamRecords`); read, they are what the earlier run
    /// last knew of the streams it left.
    public var userValues: KeyUserValues {
        get { KeyUserValues(muted: userMuteByKey, volume: userVolumeByKey) }
        set {
            userMuteByKey = newValue.muted
            userVolumeByKey = newValue.volume
            leftStreams = newValue.streams
            leftStreamsCookie = newValue.serverCookie
        }
    }

    /// The streams an earlier run left, with their own user values then, in the server run `leftStreamsCookie`: a
    /// stream of the same run that shows other values was changed while audiod was down. Only the first
    /// connection's listing looks at them.
    private var leftStreams: [StreamID: KeyUserValues.StreamRecord] = [:]
    private var leftStreamsCookie: UInt32?
    private var connections = 0

    /// Policy values audiod held on (or had just lifted from) each key's streams when the connection dropped: a
    /// server that comes back may give them to the key's next stream — module-stream-restore saved them at once,
    /// and WirePlumber saves a second after the last change, which a busy server keeps postponing (the random test:
    /// a video stream started ducked twice after a restart, seed 942961). The key's first new stream takes them.
    private var heldAtDrop: [String: [Journal.Leak]] = [:]
    /// Where the server saves late: the policy values written to each key since the server last had a quiet second
    /// (WirePlumber writes its state a second after the last change it saw, so under steady activity it may still
    /// hold an older policy value — a duck at an earlier level — than the one audiod holds now).
    private var unsavedByKey: [String: [Journal.Leak]] = [:]
    /// The policy values audiod held on each key's streams at the server's last quiet second: what it saved then.
    private var savedPolicyByKey: [String: [Journal.Leak]] = [:]
    private var lastActivity: UInt64 = 0
    /// The server saved everything up to this moment: the activity before its last quiet second.
    private var savedUpTo: UInt64 = 0
    static let savesAfterQuietNanoseconds: UInt64 = 1_000_000_000
    static let dropMarginNanoseconds: UInt64 = 500_000_000

    /// A stream change at `now`: a quiet second before it means the server has saved everything until then.
    private mutating func activity(_ now: UInt64, quiet: UInt64 = RestoreLedger.savesAfterQuietNanoseconds) {
        if savesLate, now &- lastActivity >= quiet {
            savedUpTo = lastActivity
            unsavedByKey.removeAll()
            savedPolicyByKey.removeAll()
            // The entry holds what changed last: a value audiod set before the user's last change of the key is not
            // what was saved (seed 380805: the user muted a music stream after audiod had muted its sibling; after a
            // sound-server restart the key's next stream, started with the user's mute, was unmuted as a leak).
            for (id, change) in applied {
                guard let key = keys[id], appliedOrder[id] ?? 0 > userChangeOrder[key] ?? 0 else { continue }
                savedPolicyByKey[key, default: []].append(Journal.Leak(change))
            }
        }
        lastActivity = max(lastActivity, now)
    }

    public init(
        leaks: [String: Journal.Leak] = [:], serverCookie: UInt32? = nil, volumeTolerance: UInt32,
        leakWindowNanoseconds: UInt64, restoreSettleNanoseconds: UInt64
    ) {
        self.leaks = leaks
        self.serverCookie = serverCookie
        self.volumeTolerance = volumeTolerance
        self.leakWindowNanoseconds = leakWindowNanoseconds
        self.restoreSettleNanoseconds = restoreSettleNanoseconds
    }

    public func key(of id: StreamID) -> String? { keys[id] }

    /// The server run this connection talks to (`pa_server_info.cookie`).
    public var currentServerCookie: UInt32? { serverCookie }

    /// A stream's first report names its entry.
    public mutating func keyed(_ id: StreamID, _ key: String?) {
        keys[id] = key
        highestSeen[id.kind] = max(highestSeen[id.kind] ?? 0, id.index)
    }

    /// A connection to the server run `cookie` is up. Leaks recorded in another run keep their values, but not which
    /// streams existed before them: stream indices start again with each run.
    public mutating func connected(serverCookie cookie: UInt32) {
        connections += 1
        if connections > 1 || leftStreamsCookie != cookie { leftStreams.removeAll() }
        if serverCookie != cookie {
            for key in Array(leaks.keys) { leaks[key]?.existedBefore = nil }
            // The server came back with what it saved before it went: what audiod held on a key then may be in the
            // entry. Recorded as the key's leak it is in the journal, so that an audiod started again later still
            // knows it (seed 115991: a video stream started after the restart at the duck of the run before, and
            // was left there at the next stop), and a stop or `--restore` writes the user's values over it (seed
            // 678146: a music stream started while audiod was down at a duck saved before two server restarts).
            if serverCookie != nil {
                for (key, held) in heldAtDrop where !held.isEmpty { recordHeld(held, for: key) }
            }
        } else {
            // Only audiod's connection dropped: the server kept running, and what it gives new streams is what it
            // holds now, which the rules above already judge.
            heldAtDrop.removeAll()
        }
        serverCookie = cookie
    }

    /// `held` as the key's leak, with the key's last user values as what a repair writes. Every policy volume in it
    /// is kept (`Journal.Leak.otherVolumes`), so that an audiod killed later still knows each of them.
    private mutating func recordHeld(_ held: [Journal.Leak], for key: String) {
        let leak = held.reversed().reduce(Journal.Leak?.none) { $1.merged(with: $0) }
        guard var leak else { return }
        leak.existedBefore = nil
        if !leak.unmute, let m = userMuteByKey[key] { leak.userMuted = m }
        if let v = userVolumeByKey[key], let a = leak.appliedVolume, v.count == a.count { leak.restoreVolume = v }
        leaks[key] = leak.merged(with: leaks[key])
    }

    /// The values a stream shows that audiod left in its entry (nil: none), to report as audiod's so that the
    /// engine does not take them for the user's. `first`: its first report; `preexisting`: found by the
    /// connection's first listing. Also returns the leak keys whose journal line changed.
    public mutating func shown(
        _ id: StreamID, first: Bool, preexisting: Bool, muted: Bool, volume: [UInt32], now: UInt64
    ) -> (values: PolicyValues?, journal: [String]) {
        activity(now)
        var journal: [String] = []
        if first, let key = keys[id] {
            var sources: [Journal.Leak] = []
            if preexisting, let leak = leaks[key] {
                // A stream that existed before the entry held audiod's value was not given it: its mute is the
                // user's, or what audiod's journal says (a user who muted it is not unmuted at a restart).
                if !leak.olderThanLeak(id.index) {
                    sources.append(leak)
                    matchedAtConnect.insert(key)
                }
            } else if let leak = leaks.removeValue(forKey: key) {
                sources.append(leak)
                journal.append(key)
            }
            if !preexisting {
                // A stream found at connection existed before anything this connection did.
                sources += policySources(key: key, excluding: id, now: now)
            } else if let held = heldAtDrop[key] {
                // ...unless the server came back since the drop: its streams are new and got the saved values.
                sources += held
            }
            heldAtDrop[key] = nil
            if !sources.isEmpty { corrections[id] = (sources, now + (savesLate ? leakWindowNanoseconds : 0)) }
        }
        guard let (sources, until) = corrections[id] else { return (nil, journal) }
        guard first || now <= until else {
            corrections[id] = nil
            return (nil, journal)
        }
        // Only what audiod does not hold on this stream itself: its own mute or duck is not a leak.
        let mine = applied[id]
        var values = PolicyValues(mute: false)
        // A key whose last change of the user's was a mute gives new streams that mute: the user's, not a leak, even
        // when audiod muted a sibling since (seeds 107032 and 668651 of the random test).
        let userMuted = keys[id].flatMap { userMuteByKey[$0] } == true
        if muted, !userMuted, !(mine?.unmute ?? false), sources.contains(where: \.unmute) { values.mute = true }
        if mine?.appliedVolume == nil, let (a, r) = policyVolume(sources, shown: volume) {
            values.volume = Volume(channels: a)
            let last = keys[id].flatMap { userVolumeByKey[$0] }
            values.userVolume = Volume(channels: last.flatMap { $0.count == r.count ? $0 : nil } ?? r)
        }
        guard values.mute || values.volume != nil else { return (nil, journal) }
        corrections[id] = nil
        // Putting them back is saved as late as audiod's own writes: a server that dies before that gives the key's
        // next stream the leaked values again (seed 281815 on WirePlumber 0.5: a music stream started with a mute
        // audiod had put back on its sibling two seconds before the server was killed).
        if let key = keys[id] {
            unsaved(
                Journal.Leak(
                    unmute: values.mute, appliedVolume: values.volume?.channels,
                    restoreVolume: values.userVolume?.channels),
                for: key)
        }
        return (values, journal)
    }

    /// A stream is still watched for a leaked value.
    public func watching(_ id: StreamID, now: UInt64) -> Bool { corrections[id].map { now <= $0.until } ?? false }

    /// audiod wrote to the stream: what it shows from now on is audiod's or the user's.
    public mutating func wrote(_ id: StreamID) { corrections[id] = nil }

    /// A stream audiod holds nothing on changed, and the server saved that into its entry. `byAudiod`: the values
    /// are the ones audiod last wrote. Returns the leak keys whose journal line changed.
    /// `userMuted`, `userVolume`: the parts of the change that were the user's (the mute or volume changed, and not
    /// to what audiod last wrote) — the key's last user values, also from a stream audiod holds something on (a game
    /// muted by policy whose volume the user turns down; seed 636101).
    /// `shownMuted`, `shownVolume`: what the stream shows after the change. The server saves the whole stream into
    /// its key at a user's change, so the field the user did not touch becomes the key's too (seed 61976: the user
    /// unmuted a music stream at 100 % after turning another down to 30 %, and a leaked duck on the key's next
    /// stream was put back to 30 %).
    public mutating func changed(
        _ id: StreamID, byAudiod: Bool, userMuted: Bool? = nil, userVolume: [UInt32]? = nil,
        shownMuted: Bool? = nil, shownVolume: [UInt32]? = nil
    ) -> [String] {
        guard let key = keys[id] else { return [] }
        let held = applied[id]
        // A volume the user sets over audiod's duck is the one the engine ducks from next, and what the server saved
        // (seed 870890 on WirePlumber 0.5: the user turned a ducked phone stream down to 30 %; the role's next
        // stream started with the re-duck and went back to a duck of 100 %).
        var keyVolume = userVolume
        var keyMute = held?.unmute != true ? userMuted : nil
        if userMuted != nil || userVolume != nil {
            // Under audiod's duck the user's volume is the one the duck will go back to.
            if userVolume == nil {
                keyVolume = held?.appliedVolume == nil ? shownVolume : held?.restoreVolume?.channels
            }
            if userMuted == nil, held?.unmute != true { keyMute = shownMuted }
        }
        setUserValues(of: key, muted: keyMute, volume: keyVolume)
        guard held == nil else { return [] }
        // The user's change is saved after every policy value audiod set on the key before it. (What the server
        // saved before stays known: on PipeWire the user's change is saved a second later, and a server that dies
        // within that second comes back with the earlier save.)
        if !byAudiod { heldAtDrop[key] = nil }
        var journal: [String] = []
        if leaks.removeValue(forKey: key) != nil { journal.append(key) }
        // The user's change was saved after every policy value audiod set before it.
        if !byAudiod {
            recentByKey[key] = nil
            for (other, k) in keys where k == key { lifted[other] = nil }
            order += 1
            userChangeOrder[key] = order
        }
        return journal
    }

    /// A stream found at connection, which an earlier run of audiod left with its own mute and volume recorded: a
    /// field it shows that is neither that nor what the journal says audiod left there (`left`) was changed while
    /// audiod was down — by the user, or the app — and the server saved it into the key, as it saves a change seen
    /// live. The key's last user values take it (seed 776710 on PipeWire 1.4: the user set a game stream to 50 %
    /// while audiod was down; a leaked duck on the role's next game stream went back to a sibling's 100 %). Of two
    /// streams of a key changed while audiod was down, which was changed last cannot be known: the one reported last wins.
    public mutating func foundAtConnection(_ id: StreamID, muted: Bool, volume: [UInt32], left: PolicyValues?) {
        guard let record = leftStreams.removeValue(forKey: id), let key = keys[id], record.key == key else { return }
        func close(_ a: [UInt32], _ b: [UInt32]) -> Bool {
            a.count == b.count && Volume(channels: a).isClose(to: Volume(channels: b), tolerance: volumeTolerance)
        }
        let mutedByAudiod = left?.mute == true && muted
        let userMuted = muted != record.muted && !mutedByAudiod ? muted : nil
        let volumeByAudiod = left?.volume.map { close($0.channels, volume) } ?? false
        let userVolume = !close(volume, record.volume) && !volumeByAudiod ? volume : nil
        guard userMuted != nil || userVolume != nil else { return }
        // The server saved the whole stream: the field audiod holds goes in as the user's value under it. The key's
        // leak stays: when the change was saved against a leak recorded later (the record is up to a second old) is
        // not known, and a stream found later in this listing may carry the leak still — put back, it now goes to
        // the user's new value.
        setUserValues(
            of: key, muted: userMuted ?? (mutedByAudiod ? nil : muted),
            volume: userVolume ?? (volumeByAudiod ? left?.userVolume?.channels : volume))
    }

    private mutating func setUserValues(of key: String, muted: Bool?, volume: [UInt32]?) {
        if let volume, userVolumeByKey[key] != volume {
            userVolumeByKey[key] = volume
            if userVolumeByKey.count > KeyUserValues.limit { userVolumeByKey = [key: volume] }
            userValuesRevision &+= 1
        }
        if let muted, userMuteByKey[key] != muted {
            userMuteByKey[key] = muted
            if userMuteByKey.count > KeyUserValues.limit { userMuteByKey = [key: muted] }
            userValuesRevision &+= 1
        }
    }

    /// A stream ended, showing `muted`. Returns the leak keys whose journal line changed.
    public mutating func removed(_ id: StreamID, muted: Bool, now: UInt64) -> [String] {
        defer {
            lifted[id] = nil
            keys[id] = nil
            corrections[id] = nil
        }
        guard let key = keys[id] else { return [] }
        let before = leaks[key]
        var leak: Journal.Leak?
        if let change = applied[id] {
            // It ended while silenced by audiod: the entry holds the policy value — unless the user changed a stream of
            // the key since audiod's write, which the server saved after it.
            if appliedOrder[id] ?? 0 > userChangeOrder[key] ?? 0 {
                leak = Journal.Leak(change)
                if !change.unmute { leak?.userMuted = muted }
            }
        } else if let l = lifted[id], now - l.at < restoreSettleNanoseconds {
            leak = l.leak
        }
        if var leak {
            leak.existedBefore = max(highestSeen[id.kind] ?? 0, id.index)
            leaks[key] = leak.merged(with: leaks[key])
        }
        return leaks[key] != before ? [key] : []
    }

    /// What the engine holds on these streams now (nil: nothing). `muted` says what a stream shows (nil: gone).
    /// Returns the streams whose journal entries changed.
    public mutating func update(
        _ changes: [(StreamID, AppliedChange?)], muted: (StreamID) -> Bool?, now: UInt64
    ) -> [StreamID] {
        var dirty: [StreamID] = []
        if !changes.isEmpty { activity(now) }
        for (id, c) in changes where applied[id] != c {
            // A value lifted from a stream that still exists may yet be saved by the server; a stream that is gone
            // was dealt with when it went.
            if let old = applied[id], c == nil, let shown = muted(id) {
                var leak = Journal.Leak(old)
                if !old.unmute { leak.userMuted = shown }
                lifted[id] = (leak, now)
            }
            if let c {
                lifted[id] = nil
                if let key = keys[id] {
                    remember(Journal.Leak(c), for: key, at: now)
                    unsaved(Journal.Leak(c), for: key)
                }
                order += 1
                appliedOrder[id] = order
            } else {
                appliedOrder[id] = nil
            }
            applied[id] = c
            dirty.append(id)
        }
        return dirty
    }

    /// A stream found showing what an earlier run of audiod set on it (the journal's): the server may have saved it
    /// into the key lately, and what is put back on it is saved late too.
    public mutating func recovered(_ id: StreamID, _ leak: Journal.Leak, now: UInt64) {
        guard let key = keys[id] else { return }
        activity(now)
        remember(leak, for: key, at: now)
        unsaved(leak, for: key)
    }

    /// Where the server saves late, a policy value written to the key since its last quiet second.
    private mutating func unsaved(_ leak: Journal.Leak, for key: String) {
        guard savesLate else { return }
        // Different values, the newest few (as `recentByKey`).
        var list = unsavedByKey[key, default: []].filter { $0 != leak }
        if list.count >= Self.journaledPerKey { list.removeFirst(list.count - Self.journaledPerKey + 1) }
        list.append(leak)
        unsavedByKey[key] = list
    }

    private mutating func remember(_ leak: Journal.Leak, for key: String, at now: UInt64) {
        var list = recentByKey[key, default: []].filter { now - $0.at < restoreSettleNanoseconds && $0.leak != leak }
        if list.count >= Self.recentPerKey { list.removeFirst(list.count - Self.recentPerKey + 1) }
        list.append((leak, now))
        recentByKey[key] = list
        // Keys of apps long gone are dropped now and then, so the table stays as small as the apps are few.
        if recentByKey.count > 256 {
            recentByKey = recentByKey.filter { $0.value.contains { now - $0.at < restoreSettleNanoseconds } }
        }
    }

    /// The entry to read after a write to `id` was acknowledged (module-stream-restore has saved audiod's value
    /// into it by then); nil when audiod holds nothing there.
    public func entryToRepair(after id: StreamID) -> String? {
        guard applied[id] != nil else { return nil }
        return keys[id]
    }

    /// The write that takes audiod's values out of `entry`, read after audiod's write to `id` was acknowledged.
    public func repair(after id: StreamID, _ entry: Entry, now: UInt64) -> Repair? {
        guard let change = applied[id], keys[id] == entry.key else { return nil }
        let siblings = policySources(key: entry.key, excluding: id, now: now)
        var because = "the server saved audiod's \(change.unmute ? "mute" : "duck") of \(id) in the entry"
        if !siblings.isEmpty { because += ", which may also hold what audiod set lately on the app's other streams" }
        return putBack([Journal.Leak(change)] + policySources(key: entry.key, now: now), into: entry, because: because)
    }

    /// `audiod --restore` and a stop, where the server lists its entries (module-stream-restore): the writes that
    /// take every recorded leak out. A key the list lacks holds nothing of audiod's and is forgotten; so is every
    /// key written. Returns the writes (the whole journal is written again afterwards).
    public mutating func repairRecorded(_ entries: [Entry]?, now: UInt64) -> [Repair] {
        var repairs: [Repair] = []
        for (key, leak) in leaks.sorted(by: { $0.key < $1.key }) {
            guard let entry = entries?.first(where: { $0.key == key }) else {
                if entries != nil { leaks[key] = nil }
                continue
            }
            repairs.append(
                putBack(
                    [leak] + policySources(key: key, now: now), into: entry,
                    because: "the journal records a policy value audiod left in the entry"))
            leaks[key] = nil
        }
        return repairs
    }

    /// Where the server lists nothing it did not get through the pulse protocol (pipewire-pulse): every recorded
    /// leak written over blind — the mute always (pipewire-pulse writes it with every entry), the volume where the
    /// journal has the user's. The keys stay recorded until `confirmed`.
    public var blindRepairs: [Repair] {
        leaks.sorted(by: { $0.key < $1.key }).map { key, leak in
            // The key's last user values where known: what the entry held before audiod's value came into it.
            Repair(
                key: key, muted: userMuteByKey[key] ?? leak.userMute,
                volume: userVolumeByKey[key] ?? leak.restoreVolume ?? [],
                because:
                    "the journal records a policy value audiod left in the entry (written blind: the server lists nothing)"
            )
        }
    }

    /// The server shows these blind writes: their leaks are gone (the whole journal is written again afterwards).
    public mutating func confirmed(_ keys: Set<String>) {
        for key in keys { leaks[key] = nil }
    }

    /// Reads of blind writes: every 20 ms, 150 times (3 s); an entry not shown yet is written again every 50th.
    public static let blindReadAttempts = 150
    public static let blindRewriteEvery = 50

    /// One read-back of blind writes (`attempt` counts from 1): the keys the server shows, the writes to make again
    /// now, and whether to stop reading (every write shown, or the last attempt). Seen once in a full test run: a
    /// write not shown after 1 s. Written again, it is not lost for good if WirePlumber dropped it or saved an older
    /// value over it.
    public func blindRound(_ writes: [Repair], listed: [Entry], attempt: Int) -> (
        confirmed: Set<String>, rewrite: [Repair], done: Bool
    ) {
        let confirmed = Set(writes.filter { shows($0, in: listed) }.map(\.key))
        guard confirmed.count < writes.count, attempt < Self.blindReadAttempts else { return (confirmed, [], true) }
        let rewrite = attempt % Self.blindRewriteEvery == 0 ? writes.filter { !confirmed.contains($0.key) } : []
        return (confirmed, rewrite, false)
    }

    /// A blind write shows in the server's list: the mute written, and the volume if one was.
    public func shows(_ repair: Repair, in entries: [Entry]) -> Bool {
        guard let e = entries.first(where: { $0.key == repair.key }), e.muted == repair.muted else { return false }
        guard !repair.volume.isEmpty else { return true }
        return e.volume.count == repair.volume.count
            && Volume(channels: e.volume).isClose(to: Volume(channels: repair.volume), tolerance: volumeTolerance)
    }

    /// A journal of an earlier run names a change on a stream that is gone: its value is in the entry.
    public mutating func recorded(_ leak: Journal.Leak, for key: String) { leaks[key] = leak.merged(with: leaks[key]) }

    /// Every stream found at connection has been reported: the leaked keys they showed are being put back, and the
    /// server saves that as the key's value.
    public mutating func connectionListReported() {
        for key in matchedAtConnect { leaks[key] = nil }
        matchedAtConnect.removeAll()
    }

    /// The connection is gone, and its streams with it. What audiod applied stays (the journal's record).
    /// `now`: when the connection dropped; a quiet second since the last change means the server saved it all.
    /// `muted` says what a stream showed (nil: not known): a duck's repair writes the user's own mute.
    public mutating func connectionDropped(now: UInt64? = nil, muted: (StreamID) -> Bool? = { _ in nil }) {
        // The drop is heard a moment after the server went, and WirePlumber's save a moment after its second: only
        // a clearly longer quiet counts as saved.
        if let now { activity(now, quiet: Self.savesAfterQuietNanoseconds + Self.dropMarginNanoseconds) }
        for (id, change) in applied {
            guard let key = keys[id], appliedOrder[id] ?? 0 > userChangeOrder[key] ?? 0 else { continue }
            var leak = Journal.Leak(change)
            if !change.unmute { leak.userMuted = muted(id) }
            heldAtDrop[key, default: []].append(leak)
        }
        for (id, l) in lifted { if let key = keys[id] { heldAtDrop[key, default: []].append(l.leak) } }
        for (key, list) in recentByKey { heldAtDrop[key, default: []] += list.suffix(Self.journaledPerKey).map(\.leak) }
        for (key, list) in unsavedByKey { heldAtDrop[key, default: []] += list }
        for (key, list) in savedPolicyByKey { heldAtDrop[key, default: []] += list }
        unsavedByKey.removeAll()
        savedPolicyByKey.removeAll()
        if heldAtDrop.count > 256 { heldAtDrop.removeAll() }
        keys.removeAll()
        lifted.removeAll()
        recentByKey.removeAll()
        corrections.removeAll()
        matchedAtConnect.removeAll()
        highestSeen.removeAll()
        userChangeOrder.removeAll()
        // The keys' last user values stay: the server's database keeps them across its restart (seed 380805: after a
        // restart audiod muted a stream the user had muted, and the key's next stream, started with that mute, was
        // unmuted as a leak). Only a user's change within the second before a crash was not saved yet.
    }

    /// The policy values a server that saves late may hold in its saved state, by key, besides what audiod holds
    /// (the journal's entries say that): what a drop now would count as held (`connectionDropped`) — set on or lifted
    /// from the key's streams since the server's last quiet second, and what it saved then. Kept in the journal so
    /// that an audiod killed and started again still knows them if the server dies before its next save (random
    /// test, seed 287041 on PipeWire 0.3.65: audiod lifted a duck from mpv, was killed within the second and started
    /// again, and the server, killed a moment later, gave mpv's next stream the duck, which no audiod knew of).
    /// How long from `now` until the server has saved what `pendingSaves` holds (nil: nothing pending).
    public func pendingSavesSettle(now: UInt64) -> UInt64? {
        guard !pendingSaves(now: now).isEmpty else { return nil }
        let at = lastActivity &+ Self.savesAfterQuietNanoseconds &+ Self.dropMarginNanoseconds
        return at > now ? at - now : 0
    }

    public func pendingSaves(now: UInt64) -> [String: Journal.Leak] {
        guard savesLate, now &- lastActivity < Self.savesAfterQuietNanoseconds + Self.dropMarginNanoseconds else {
            return [:]
        }
        var lists: [String: [Journal.Leak]] = [:]
        for (id, l) in lifted where l.at > savedUpTo {
            if let key = keys[id] { lists[key, default: []].append(l.leak) }
        }
        for (key, list) in recentByKey {
            lists[key, default: []] += list.filter { $0.at > savedUpTo }.suffix(Self.journaledPerKey).map(\.leak)
        }
        for (key, list) in unsavedByKey { lists[key, default: []] += list }
        for (key, list) in savedPolicyByKey { lists[key, default: []] += list }
        var held: [String: [Journal.Leak]] = [:]
        for (id, change) in applied { if let key = keys[id] { held[key, default: []].append(Journal.Leak(change)) } }
        var out: [String: Journal.Leak] = [:]
        for (key, list) in lists {
            let mine = held[key] ?? []
            let rest = list.filter { !mine.contains($0) }
            if let merged = rest.reversed().reduce(Journal.Leak?.none, { $1.merged(with: $0) }) { out[key] = merged }
        }
        return out
    }

    /// What an earlier run's journal says the server may not have saved yet (`pendingSaves`). Of the same server
    /// run, it stays unsaved until the server's next quiet second, as this run's own writes do; of another (the server
    /// restarted while audiod was down, maybe before it saved), it is the key's leak.
    public mutating func resumePendingSaves(_ pending: [String: Journal.Leak], sameServerRun: Bool, now: UInt64) {
        guard savesLate, !pending.isEmpty else { return }
        for (key, leak) in pending.sorted(by: { $0.key < $1.key }) {
            if sameServerRun { unsaved(leak, for: key) } else { recordHeld([leak], for: key) }
        }
        if sameServerRun { lastActivity = max(lastActivity, now) }
    }

    /// The journal's entry for a stream audiod holds something on.
    public func journalEntry(_ id: StreamID) -> Journal.Entry? {
        guard let c = applied[id] else { return nil }
        return Journal.Entry(
            record: id.kind == .record, index: id.index, applicationName: c.applicationName,
            restoreKey: keys[id], unmute: c.unmute, appliedVolume: c.appliedVolume?.channels,
            restoreVolume: c.restoreVolume?.channels)
    }

    /// The whole journal.
    public func journal(cookie: UInt32) -> Journal {
        Journal(serverCookie: cookie, entries: applied.keys.sorted().compactMap(journalEntry), leaks: leaks)
    }

    /// Every policy value the entry `key` may hold now: a leak recorded for it, what audiod holds on its streams,
    /// and what it set on them or lifted from them lately.
    func policySources(key: String, excluding id: StreamID? = nil, now: UInt64) -> [Journal.Leak] {
        var sources: [Journal.Leak] = (leaks[key].map { [$0] } ?? []) + (heldAtDrop[key] ?? [])
        let userChanged = userChangeOrder[key] ?? 0
        for (other, change) in applied where other != id && keys[other] == key && appliedOrder[other] ?? 0 > userChanged
        {
            sources.append(Journal.Leak(change))
        }
        for (other, l) in lifted where other != id && keys[other] == key && now - l.at < restoreSettleNanoseconds {
            sources.append(l.leak)
        }
        for r in recentByKey[key] ?? [] where now - r.at < restoreSettleNanoseconds { sources.append(r.leak) }
        return sources
    }

    /// The first policy volume of `sources` that `shown` still has (a leak's own or one of its others), with the user's
    /// volume to put back.
    private func policyVolume(_ sources: [Journal.Leak], shown: [UInt32]) -> (applied: [UInt32], user: [UInt32])? {
        let v = Volume(channels: shown)
        for leak in sources {
            guard let r = leak.restoreVolume, r.count == shown.count else { continue }
            for a in leak.policyVolumes
            where a.count == r.count && v.isClose(to: Volume(channels: a), tolerance: volumeTolerance) {
                return (a, r)
            }
        }
        return nil
    }

    /// The user's values in place of audiod's: unmuted if audiod muted, the user's volume if the entry still holds
    /// audiod's.
    private func putBack(_ sources: [Journal.Leak], into entry: Entry, because: String) -> Repair {
        var r = Repair(key: entry.key, muted: entry.muted, volume: entry.volume, because: because)
        // A key whose last change of the user's was a mute holds the user's mute, whatever audiod muted since (random
        // test, seed 281009 on PulseAudio: the user muted a game stream; audiod's later mute of a sibling was
        // repaired to unmuted, and the role's next game stream started without the user's mute).
        if entry.muted, userMuteByKey[entry.key] != true, sources.contains(where: \.unmute) { r.muted = false }
        if let (_, user) = policyVolume(sources, shown: entry.volume) {
            // The key's last user volume, as a leak on a new stream gets: the entry held it before audiod's value came
            // in, not the volume under a sibling's duck (random test, seed 855735 on PulseAudio: the user set one of
            // two event streams to 80 %; the repair after the other's duck wrote its 50 %, and the role's next stream
            // started there).
            r.volume = userVolumeByKey[entry.key].flatMap { $0.count == user.count ? $0 : nil } ?? user
        }
        return r
    }
}
