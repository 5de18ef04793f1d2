import AppIdentity
import AudioPolicy

/// The sound-server connection as a state machine: where the connection is (connecting, reading the server's first
/// state, ready, backing off, stopped), which kind of server it is, and the two pure parts that decide on what the
/// server says — `StreamTracker` (which answers are the truth) and `RestoreLedger` (where audiod's values may sit in
/// the restore database). Inputs are the connection's events and the first reads' answers; the answers are what the
/// backend does next (read, report connected, reconnect after a delay). No libpulse, no clock: scripted in
/// `ServerSessionTests` (docs/BACKEND.md, "An exact model").
public struct ServerSession<Stream: ServerStreamValue> {
    /// What kind of server answers the pulse protocol. The differences that matter to audiod, each one measured
    /// (docs/BACKEND.md):
    public enum Flavor: Equatable, Sendable {
        /// PulseAudio itself: applies a change before acknowledging it, keeps module-stream-restore's entries
        /// (saved at once, listed and rewritten through the protocol).
        case pulseAudio
        /// pipewire-pulse: acknowledges a change before its node has it, lists a new stream before WirePlumber
        /// links it, and leaves the restore database to WirePlumber (which saves late and lists only what was
        /// written through the protocol).
        case pipeWire

        /// pipewire-pulse names itself `PulseAudio (on PipeWire 0.3.65)`.
        public init(serverName: String) { self = serverName.contains("PipeWire") ? .pipeWire : .pulseAudio }

        /// pipewire-pulse of PipeWire 1.x, which may come with WirePlumber 0.5: a restore-database write lands in
        /// pipewire-pulse's own list, and WirePlumber 0.5 takes none of it into its state (only the Notification
        /// key), so the list proves nothing. PipeWire 0.3 comes with WirePlumber 0.4, which merges the write and
        /// lists it once merged. (With 1.x and WirePlumber 0.4 the probes that replace the read-back work too.)
        public static func ignoresBlindWrites(serverName: String) -> Bool {
            let words = serverName.split(separator: " ")
            guard let at = words.firstIndex(of: "PipeWire"), at + 1 < words.count else { return false }
            return (Int(words[at + 1].prefix { $0.isNumber }) ?? 0) >= 1
        }

        /// A read after audiod's change can still show the old value.
        public var confirmsLate: Bool { self == .pipeWire }
        /// A new stream is listed before it can be heard (no device yet).
        public var listsUnlinkedStreams: Bool { self == .pipeWire }
        /// The restore database takes a stream's values a moment after they change, and gives a new stream its saved
        /// values a moment after it appears.
        public var savesLate: Bool { self == .pipeWire }
        /// The restore database's entries can be read and written back (module-stream-restore).
        public var listsRestoreEntries: Bool { self == .pulseAudio }
        /// How long a stop waits, after the server has acknowledged the restore, before it repairs the restore
        /// database: WirePlumber saves a stream's change only once the node reports it, and a save of audiod's own
        /// last value landing after the repair would undo it. module-stream-restore saves at once.
        public var settlesBeforeRepairNanoseconds: UInt64 { self == .pipeWire ? 300_000_000 : 0 }
        /// How long the server may keep a change before it saves it: WirePlumber writes its state file 1 s after
        /// the last change it saw (each change restarts that wait). A server killed within it comes back with the
        /// values saved before — audiod's policy mute among them, when audiod had just put the user's back.
        public var savesStateAfterNanoseconds: UInt64 { self == .pipeWire ? 1_000_000_000 : 0 }
    }

    /// The reads that make up the server's first state; reports wait until every one has answered.
    public enum FirstRead: CaseIterable, Hashable, Sendable {
        case subscription, serverInfo, restoreDatabase, sinks, sources, clients, streams
    }

    public enum Phase: Equatable, Sendable {
        /// Not started.
        case idle
        case connecting
        /// Connected; these first reads are still out.
        case enumerating(pending: Set<FirstRead>)
        /// `restoreDatabase`: the server keeps entries audiod can read and write back.
        case ready(Flavor, restoreDatabase: Bool)
        /// The connection went; the next attempt comes after `delay` ns.
        case backingOff(delay: UInt64)
        /// `stop()`: no more attempts.
        case stopped
    }

    /// What the backend does once the first state is in.
    public enum Enumerated: Equatable, Sendable {
        /// Report the devices and streams, then that the server is connected.
        case ready(Flavor)
        /// The server never said who it is: drop the connection (and try again).
        case drop(reason: String)
        /// Still waiting for other reads.
        case waiting
    }

    public private(set) var phase: Phase = .idle
    public var tracker: StreamTracker<Stream>
    public var ledger: RestoreLedger
    public let initialBackoffNanoseconds: UInt64
    public let maximumBackoffNanoseconds: UInt64
    private var nextBackoff: UInt64
    /// What the first reads said: the server's name (for its flavor) and whether it has a restore database.
    private var serverName: String?
    private var restoreDatabaseAnswered = false

    /// The server's sinks and sources by index, as last read.
    private(set) var sinks: [UInt32: RawDevice] = [:]
    private(set) var sources: [UInt32: RawDevice] = [:]
    /// The server's clients by index: their properties count for their streams.
    private(set) var clients: [UInt32: RawClient] = [:]
    /// Sinks the engine has been told are available, by name (kept across connections, so that the next one says
    /// what came and went).
    private(set) var availableDevices: Set<String> = []
    /// Every stream of the connection, between the server's reads and the engine's reports (StreamReports.swift).
    var streams: [StreamID: TrackedStream<Stream>] = [:]
    /// Each stream's writes not yet answered, every write counted: a line in flight (`inFlight`) drops only when none
    /// is left, so an earlier write's answer never stands for the one that carries a later lift.
    var writesUnanswered: [StreamID: Int] = [:]
    /// While the writes that lift or change a stream's values are in flight, its journal line names both what the
    /// stream showed and what audiod holds now (`StreamReports.appliedChanged`).
    var inFlight: [StreamID: Journal.Entry] = [:]
    /// Who plays each stream.
    public var identifier: StreamIdentifier
    /// Client indices of audiod's own connections (repair probes) on this connection.
    var ownClients: Set<UInt32> = []

    public init(
        tracker: StreamTracker<Stream>, ledger: RestoreLedger, initialBackoffNanoseconds: UInt64,
        maximumBackoffNanoseconds: UInt64, identifier: StreamIdentifier = StreamIdentifier()
    ) {
        self.identifier = identifier
        self.tracker = tracker
        self.ledger = ledger
        self.initialBackoffNanoseconds = initialBackoffNanoseconds
        self.maximumBackoffNanoseconds = maximumBackoffNanoseconds
        self.nextBackoff = initialBackoffNanoseconds
    }

    /// How far a volume the server shows may be from the one audiod set and still count as audiod's: one figure for
    /// the tracker and the ledger, so that they never judge one reading two ways.
    public var volumeTolerance: UInt32 {
        get { tracker.volumeTolerance }
        set {
            tracker.volumeTolerance = newValue
            ledger.volumeTolerance = newValue
        }
    }

    public var isEnumerating: Bool { if case .enumerating = phase { return true } else { return false } }
    public var isReady: Bool { if case .ready = phase { return true } else { return false } }
    public var isStopped: Bool { phase == .stopped }
    /// The server's kind, once the first state is in.
    public var flavor: Flavor? { if case .ready(let f, _) = phase { return f } else { return nil } }
    public var onPipeWire: Bool { flavor == .pipeWire }
    /// The backend's native PipeWire connection ramps streams' factors, and give-backs are to be ramped there
    /// (`PulseBackend.Options.rampsGiveBacks`): a stream reported from now on says so (`StreamInfo.serverRamps`).
    public var serverRamps = false
    /// The native PipeWire connection ramps ducks (0.3.68 and later): a stream reported from now on says so
    /// (`StreamInfo.serverRampsVolume`).
    public var serverRampsVolume = false
    public var hasRestoreDatabase: Bool { if case .ready(_, true) = phase { return true } else { return false } }

    /// How `--restore` and a stop repair the restore-database entries the journal says hold policy values: the one
    /// place that chooses by the server's kind (docs/BACKEND.md).
    public enum RepairMethod: Equatable, Sendable {
        /// Not connected, or a server with neither kind of database: nothing can be repaired now.
        case none
        /// module-stream-restore: read the entries and write each back with the user's values.
        case readAndWriteBack
        /// pipewire-pulse with WirePlumber 0.4: write each entry blind, then read the list until it shows the writes.
        case writeBlindConfirmByList
        /// pipewire-pulse of PipeWire 1.x: write each entry blind, then confirm through probes of each key (the list
        /// proves nothing there: `Flavor.ignoresBlindWrites`).
        case writeBlindConfirmByProbe
    }

    public var repairMethod: RepairMethod {
        guard case .ready(let flavor, let restoreDatabase) = phase else { return .none }
        if restoreDatabase { return .readAndWriteBack }
        guard flavor == .pipeWire else { return .none }
        guard let serverName, Flavor.ignoresBlindWrites(serverName: serverName) else { return .writeBlindConfirmByList }
        return .writeBlindConfirmByProbe
    }

    /// `start()`, or a backoff's delay has passed: connect unless stopped or already connected.
    public mutating func connecting() -> Bool {
        switch phase {
        case .idle, .backingOff: phase = .connecting
        case .stopped, .connecting, .enumerating, .ready: return false
        }
        return true
    }

    /// Starts again after `stop()`.
    public mutating func restart() {
        if phase == .stopped { phase = .idle }
    }

    /// The connection is up: the first reads go out (the subscription first, so that an event meanwhile is ordered
    /// against the lists). Returns the list reads' sequence number.
    public mutating func connected() -> UInt64 {
        phase = .enumerating(pending: Set(FirstRead.allCases))
        // The first reads list them all again.
        sinks.removeAll()
        sources.removeAll()
        clients.removeAll()
        serverName = nil
        restoreDatabaseAnswered = false
        nextBackoff = initialBackoffNanoseconds
        return tracker.listIssued()
    }

    /// The server described itself.
    public mutating func serverDescribed(name: String) { serverName = name }

    /// The restore-database test answered (`present`: the server has module-stream-restore's extension).
    public mutating func restoreDatabaseAnswered(present: Bool) { restoreDatabaseAnswered = present }

    /// One of the first reads answered.
    public mutating func firstReadDone(_ read: FirstRead) -> Enumerated {
        guard case .enumerating(var pending) = phase else { return .waiting }
        pending.remove(read)
        guard pending.isEmpty else {
            phase = .enumerating(pending: pending)
            return .waiting
        }
        guard let serverName else { return .drop(reason: "the server did not describe itself") }
        let flavor = Flavor(serverName: serverName)
        // pipewire-pulse answers the restore-database test, but its list stays empty (WirePlumber keeps the real
        // state): reading it after every operation would only load the server.
        phase = .ready(flavor, restoreDatabase: restoreDatabaseAnswered && flavor.listsRestoreEntries)
        tracker.holdsUnconfirmed = flavor.confirmsLate
        ledger.savesLate = flavor.savesLate
        return .ready(flavor)
    }

    /// The connection is gone (or could not be made). Returns the delay before the next attempt; nil when stopped.
    public mutating func dropped(now: UInt64? = nil) -> UInt64? {
        // The streams went with the connection (the engine hears of it from `streamIDs`, read before).
        let shown = streams.mapValues(\.raw.muted)
        streams.removeAll()
        writesUnanswered.removeAll()
        inFlight.removeAll()
        ownClients.removeAll()
        tracker.reset()
        ledger.connectionDropped(now: now, muted: { shown[$0] })
        clients.removeAll()
        serverName = nil
        guard phase != .stopped else { return nil }
        let delay = nextBackoff
        nextBackoff = min(nextBackoff * 2, maximumBackoffNanoseconds)
        phase = .backingOff(delay: delay)
        return delay
    }

    /// No more attempts.
    public mutating func stop() { phase = .stopped }

    // MARK: Devices and clients

    /// The first listing's devices and clients.
    mutating func listed(sinks list: [RawDevice]) { for d in list { sinks[d.index] = d } }

    /// A role loopback's own stream (WirePlumber's role-based policy, `media-role-nodes.conf`): infrastructure, not
    /// an app. Known by what the session manager makes, not by what a stream says: a passive playback stream in the
    /// `node.link-group` of a `loopback.sink.role.*` sink that the same PipeWire client (`client.id`, which the server
    /// sets) made. A stream that only says `media.role=Loopback`, or names a group, is arbitrated like any other.
    func isRoleLoopback(_ raw: Stream) -> Bool {
        guard raw.id.kind == .playback, raw.properties["node.passive"] == "true",
            let group = raw.properties["node.link-group"], !group.isEmpty,
            let owner = raw.properties["client.id"], !owner.isEmpty
        else { return false }
        return sinks.values.contains { d in
            d.linkGroup == group && d.ownerClient == owner
                && (d.name.hasPrefix("loopback.sink.role.") || d.name.hasPrefix("input.loopback.sink.role."))
        }
    }

    /// The streams held that are role loopbacks after all (their sink was read after them): forgotten.
    func roleLoopbackStreams() -> [ServerAction] {
        streams.filter { isRoleLoopback($0.value.raw) }.keys.sorted().map(ServerAction.forget)
    }
    mutating func listed(sources list: [RawDevice]) { for d in list { sources[d.index] = d } }
    mutating func listed(clients list: [RawClient]) { for c in list { clients[c.index] = c } }

    /// The first state is in: the devices that came and went since the engine last heard (gone ones first, then
    /// new ones, each sorted), so that streams are reported on known devices.
    mutating func devicesSettled() -> [ServerAction] {
        let now = Set(sinks.values.filter(\.available).map(\.name))
        let events =
            availableDevices.subtracting(now).sorted().map { Event.deviceRemoved($0) }
            + now.subtracting(availableDevices).sorted().map { Event.deviceAppeared($0) }
        availableDevices = now
        return events.map(ServerAction.tell)
    }

    /// A sink or source read after the server announced it new or changed: the engine hears what came, went or was
    /// muted, and the streams reported on the device are reported again (they name it); a sink may show that streams
    /// held are a role loopback's. While the first state is read, only the table changes (`devicesSettled` speaks
    /// for it).
    mutating func deviceRead(_ d: RawDevice, source: Bool, defaultSource: String?) -> [ServerAction] {
        var out = deviceEvents(d, source: source, defaultSource: defaultSource).flatMap {
            [ServerAction.note("device event: \($0)"), .tell($0)]
        }
        guard !isEnumerating else { return out }
        if !source { out += roleLoopbackStreams() }
        out += reportedStreams(onDevice: d.index, source: source).map(ServerAction.report)
        return out
    }

    private mutating func deviceEvents(_ d: RawDevice, source: Bool, defaultSource: String?) -> [Event] {
        if source {
            let old = sources.updateValue(d, forKey: d.index)
            // The microphone switch: the user muted or unmuted a source that is not a monitor.
            guard !isEnumerating, !d.isMonitor, let old, old.muted != d.muted else { return [] }
            return [.microphoneMuted(source: d.name, muted: d.muted, isDefault: d.name == defaultSource)]
        }
        sinks[d.index] = d
        guard !isEnumerating else { return [] }
        if d.available, availableDevices.insert(d.name).inserted { return [.deviceAppeared(d.name)] }
        if !d.available, availableDevices.remove(d.name) != nil { return [.deviceRemoved(d.name)] }
        return []
    }

    /// The server removed a sink or source: an available sink is gone for the engine too.
    mutating func deviceRemoved(index: UInt32, source: Bool) -> [ServerAction] {
        let old = source ? sources.removeValue(forKey: index) : sinks.removeValue(forKey: index)
        guard !source else { return [] }
        guard let d = old, availableDevices.remove(d.name) != nil else {
            return [.note("sink \(index) removed that was not an available device")]
        }
        return [.note("device removed: sink \(index)"), .tell(.deviceRemoved(d.name))]
    }

    /// A client read after the server announced it new or changed: a known client whose properties changed has its
    /// reported streams reported again (once the first state is in).
    mutating func clientRead(_ c: RawClient) -> [ServerAction] {
        let old = clients.updateValue(c, forKey: c.index)
        guard old != nil, old != c, !isEnumerating else { return [] }
        return reportedStreams(ofClient: c.index).map(ServerAction.report)
    }

    mutating func clientRemoved(index: UInt32) { clients[index] = nil }
}
