import AppIdentity
import AudioPolicy
import Dispatch
import FoundationEssentials
import Glibc
import Logging
import LoopThread
import PulseLoop

/// What the backend tells its owner, on the loop thread.
public enum BackendEvent: Sendable, Equatable {
    /// Connected and the server's streams and devices have been read (and reported as `.policy` events).
    case connected(ServerInfo)
    /// The connection is gone; the backend reconnects by itself.
    case disconnected(reason: String)
    /// Something for the engine.
    case policy(Event)
}

/// The sound server as the engine sees it: turns the server's streams and devices into engine events, and the
/// engine's stream effects into server operations. One instance per server connection lifetime; it reconnects
/// by itself. Confined to the loop thread.
///
/// Two rules keep the engine's picture exact (docs/BACKEND.md):
/// - *Settled reads.* Every read carries a sequence number. A reply to a read issued before audiod's latest
///   operation on that stream is dropped (and the stream read again), so that the engine never mistakes its own
///   change for the user's, nor a stale value for a new one.
/// - *Nothing left behind.* What audiod applied is journaled before it is sent; restore databases are kept at the
///   user's values (module-stream-restore is rewritten; a stream that starts with a policy value audiod left in
///   any restore database is put back at once).
public final class PulseBackend {
    // Not Sendable: confined to `loop`'s thread; other threads hold it only as a `LoopBound` (`loop.bind`).
    public struct Options: Sendable {
        /// The server to connect to; nil for libpulse's default (`$PULSE_SERVER`, then the user's server).
        public var server: String?
        /// Where the journal lives; nil for none (tests of other parts).
        public var journalPath: String?
        /// The client name audiod shows on the server.
        public var clientName: String
        /// First reconnect delay, doubled up to `maximumBackoff`.
        public var initialBackoffNanoseconds: UInt64
        public var maximumBackoffNanoseconds: UInt64
        /// How long after a stream appears a leaked policy value on it is still put back.
        public var leakWindowNanoseconds: UInt64
        /// On a server that confirms changes late (pipewire-pulse): how long audiod's own value stands against
        /// reads that still show the old one.
        public var confirmationNanoseconds: UInt64
        /// A stream that ends this soon after audiod lifted a policy value from it may have left that value in
        /// the restore database (WirePlumber saves late).
        public var restoreSettleNanoseconds: UInt64
        /// Whether apps are identified through the desktop's entries. `audiod --restore` decides nothing and so
        /// reads none.
        public var readsDesktopEntries = true
        /// How long a silencing that races a new sound takes where the server ramps (PipeWire 0.3.68 and later):
        /// the factor ramps down over this long, then the mute is written. 0: a step, as on other servers.
        public var deClickMilliseconds: UInt32 = 8
        /// Whether a give-back is one ramp up inside the server where it can ramp, rather than volume steps. Off:
        /// on PipeWire 1.4.2 a mute or unmute written while the node's ramp runs can be lost, or go unreported,
        /// until the stream's next change (the activation benchmark, 100 streams silenced and given back every
        /// ~50 ms: one stream left in the wrong state in 16 of 27 runs; with `fade-in` 0, in none of 5 — see
        /// docs/FADES.md). A silencing during a fade-in cannot wait for the ramp to run out.
        public var rampsGiveBacks = false
        /// Whether a duck and its undoing are one ramp of the node's factor inside the server where it can ramp,
        /// the volume and the factor back at 1.0 set together at the ramp's end (docs/FADES.md), rather than the
        /// engine's volume steps.
        public var rampsDucks = true

        public init(
            server: String? = nil, journalPath: String? = nil, clientName: String = "audiod",
            initialBackoffNanoseconds: UInt64 = 50_000_000, maximumBackoffNanoseconds: UInt64 = 1_000_000_000,
            leakWindowNanoseconds: UInt64 = 2_000_000_000,
            confirmationNanoseconds: UInt64 = 1_000_000_000, restoreSettleNanoseconds: UInt64 = 2_000_000_000
        ) {
            self.server = server
            self.journalPath = journalPath
            self.clientName = clientName
            self.initialBackoffNanoseconds = initialBackoffNanoseconds
            self.maximumBackoffNanoseconds = maximumBackoffNanoseconds
            self.leakWindowNanoseconds = leakWindowNanoseconds
            self.confirmationNanoseconds = confirmationNanoseconds
            self.restoreSettleNanoseconds = restoreSettleNanoseconds
        }
    }

    let loop: MainLoop
    let options: Options
    var logger: Logger
    /// Receives everything the backend reports.
    public var onEvent: ((BackendEvent) -> Void)?

    private var context: PulseContext?
    public private(set) var server: ServerInfo?
    /// Re-reads of streams not yet linked (`ServerAction.readUnlinked`).
    private var unlinkedReadTimers: [StreamID: LoopTimer] = [:]
    public var isConnected: Bool { session.isReady && server != nil && context != nil }
    private var reconnectTimer: LoopTimer?

    /// The desktop's entries that identities are resolved against (`session.identifier`) are read off the loop, on
    /// `desktopQueue`, at start and as inotify says they change; decisions use the last snapshot meanwhile.
    private var desktopWatch: IOWatch?
    private var desktopIndex: IndexBox?
    private var desktopRescan: LoopTimer?
    /// At start, the first connection waits for the desktop entries this long at most (a hung mount holds nothing).
    private var desktopWait: LoopTimer?
    static let desktopWaitNanoseconds: UInt64 = 2_000_000_000
    private let desktopQueue = DispatchQueue(label: "audiod.desktop-entries", qos: .utility)
    /// A burst of changes (a package installing hundreds of entries) is read once, this long after its first event.
    static let desktopDebounceNanoseconds: UInt64 = 100_000_000
    /// Every fact about the server and its streams, and every decision on them: where the connection is, which
    /// server it is, which replies are the truth, what the engine hears of each stream, who plays it and where
    /// audiod's values may sit in the restore database — the pure part, scripted without a server
    /// (`ServerSession`, StreamReports.swift, `StreamTracker`, `RestoreLedger`, AppIdentity's `StreamIdentifier`).
    /// This class carries its answers out over libpulse.
    private var session: ServerSession<RawStream>
    private var expiryTimer: LoopTimer?
    private var confirmTimer: LoopTimer?
    /// The repair probes' connections (RepairProbe.swift): their streams are audiod's own, never reported.
    private var probes: [RepairProbe] = []
    private var probeTimers: [Int: LoopTimer] = [:]
    private var nextProbeTimer = 0

    /// The journal of a previous run (or connection), applied once the server's streams are known.
    private var recovery: Journal?
    /// What an earlier run's journal says the server may not have saved yet, for the first connection.
    private var earlierPendingSaves: [String: Journal.Unsaved] = [:]
    private var earlierCookie: UInt32?
    /// What the journal's `U` lines say now (`RestoreLedger.pendingSaves`), with when each was written.
    private var pendingSavesWritten: [String: Journal.Unsaved] = [:]
    /// An earlier run's pending save older than this (seconds) was saved since, when the server still runs: it
    /// saves a second after the last change, and nothing of audiod's changed meanwhile.
    static let pendingSaveLifetimeSeconds: UInt64 = 5
    /// …and when the server restarted meanwhile: its restart, the unit's `RestartSec=` and audiod's back-off come
    /// between the save it missed and this run's connection.
    static let pendingSaveLifetimeAcrossRestartSeconds: UInt64 = 60
    /// Fires when the server has saved what the journal's `U` lines say, to take them out.
    private var pendingSavesTimer: LoopTimer?
    private var journalLog: JournalLog?
    /// Set while a new connection's streams are first reported.
    private var holdingJournal = false
    private var pendingOperations = 0
    private var flushWaiters: [() -> Void] = []

    /// How far a volume the server shows may be from the one audiod set and still count as audiod's: the engine's
    /// `Settings.volumeTolerance` (`volume-tolerance` in the config file), which the arbiter hands on at start and
    /// at every reload, so that the backend and the engine never judge one reading two ways.
    /// The de-click ramp's length (`Options.deClickMilliseconds`), changed by a reload; 0 makes every silencing a
    /// step. A native connection is opened at the next connection to the server where none is open.
    public lazy var deClickMilliseconds: UInt32 = options.deClickMilliseconds

    public var volumeTolerance: UInt32 {
        get { session.volumeTolerance }
        set { session.volumeTolerance = newValue }
    }

    public init(loop: MainLoop, options: Options, volumeTolerance: UInt32 = Settings().volumeTolerance, logger: Logger)
    {
        self.loop = loop
        self.options = options
        self.logger = logger
        var loaded: Journal?
        var damaged: String?
        if let path = options.journalPath {
            do {
                loaded = try Journal.load(from: path)
            } catch {
                damaged = "\(error)"
            }
        }
        recovery = loaded
        earlierPendingSaves = loaded?.unsaved ?? [:]
        earlierCookie = loaded?.serverCookie
        var identifier = StreamIdentifier()
        identifier.keepsNotes = logger.logLevel <= .debug
        session = ServerSession(
            tracker: StreamTracker(
                volumeTolerance: volumeTolerance, confirmationNanoseconds: options.confirmationNanoseconds),
            ledger: RestoreLedger(
                leaks: loaded?.leaks ?? [:], serverCookie: loaded?.serverCookie, volumeTolerance: volumeTolerance,
                leakWindowNanoseconds: options.leakWindowNanoseconds,
                restoreSettleNanoseconds: options.restoreSettleNanoseconds),
            initialBackoffNanoseconds: options.initialBackoffNanoseconds,
            maximumBackoffNanoseconds: options.maximumBackoffNanoseconds, identifier: identifier)
        if let r = loaded, !r.isEmpty, let path = options.journalPath {
            logger.notice(
                "journal found: \(r.entries.count) stream change(s) of a previous run to undo",
                metadata: ["path": "\(path)"])
        }
        if let path = options.journalPath {
            let valuesPath = KeyUserValues.path(besideJournal: path)
            do {
                var values = try KeyUserValues.load(from: valuesPath)
                // Without the journal, a duck the killed run still holds would look like a change made while it was
                // down: the streams' records are only compared against a journal that was read.
                if damaged != nil { values.streams = [:] }
                session.ledger.userValues = values
            } catch {
                logger.warning(
                    "\(valuesPath) is damaged (\(error)); a policy value a stream starts with goes back to its sibling's volume, not the app's last one, until the user changes it again"
                )
            }
            userValuesWritten = session.ledger.userValuesRevision
        }
        if let damaged, let path = options.journalPath {
            // What a crashed run left muted may stay so: a person should hear of it, with where to look.
            logger.warning(
                "the journal \(path) is damaged (\(damaged)); what an earlier run left muted or ducked may stay so. The file is left for a person to look at and replaced by the next write."
            )
        }
    }

    // MARK: Connection

    /// Connects (and keeps reconnecting until `stop()`).
    public func start() {
        loop.assertOnLoop()
        session.restart()
        if options.readsDesktopEntries { loadDesktopEntries() }
        // The first connection waits for the first read of the desktop entries, 2 s at most: a game launched from its
        // menu entry and already playing beside a video would otherwise be judged an unknown app, mixing beside the
        // video until the entries arrived (random seed 2 on a loaded machine). Without a timer to bound it, no wait.
        desktopWait?.cancel()
        desktopWait = nil
        if loadingDesktopEntries && desktopIndex == nil {
            desktopWait = loop.timer(afterNanoseconds: Self.desktopWaitNanoseconds) { [weak self] in
                guard let self else { return }
                self.desktopWait = nil
                self.logger.warning(
                    "the desktop entries are still being read after \(Self.desktopWaitNanoseconds / 1_000_000_000) s; connecting to the sound server without them until they arrive"
                )
                self.connect()
            }
            if desktopWait != nil { return }
        }
        connect()
    }

    private func connect() {
        guard context == nil, session.connecting() else { return }
        do {
            let c = try PulseContext(loop: loop, name: options.clientName)
            c.delegate = self
            context = c
            try c.connect(server: options.server)
        } catch {
            logger.debug("cannot connect to the sound server", metadata: ["error": "\(error)"])
            // The state callback may already have dropped this attempt (and scheduled the next one).
            if context != nil { dropConnection(reason: "\(error)") }
        }
    }

    /// Disconnects for good (no reconnect). Operations not yet acknowledged are dropped.
    public func stop() {
        loop.assertOnLoop()
        saveUserValues()
        desktopWait?.cancel()
        desktopWait = nil
        // A rescan that has not begun waits for no one now; the watch is left as it was before it.
        if let r = desktopRescan {
            r.cancel()
            desktopRescan = nil
            desktopWatch?.update(.input)
        }
        session.stop()
        reconnectTimer?.cancel()
        reconnectTimer = nil
        if context != nil { dropConnection(reason: "stopped") }
    }

    private func dropConnection(reason: String) {
        let wasConnected = server != nil
        // The streams go with the connection; a running ramp ends at silence and the stream with it.
        for r in ramps.values { r.end?.cancel() }
        pipewireRetry?.cancel()
        pipewireRetry = nil
        forgetRamps()
        context?.close()
        context = nil
        // A repair in progress ends with the connection; a client index of this server run means nothing in the next.
        for t in probeTimers.values { t.cancel() }
        probeTimers.removeAll()
        for p in probes { p.close() }
        probes.removeAll()
        server = nil
        pendingOperations = 0
        // The streams went with the connection. What audiod applied stays in the journal (not rewritten while
        // disconnected), so the next connection can undo it if the streams are still there, and otherwise knows
        // which restore-database entries carry policy values.
        if recovery == nil, let j = journalLog?.written, !j.isEmpty { recovery = j }
        let gone = session.streamIDs
        unlinkedReadTimers.removeAll()
        let delay = session.dropped(now: monotonicNow())
        expiryTimer?.cancel()
        expiryTimer = nil
        confirmTimer?.cancel()
        confirmTimer = nil
        if wasConnected {
            onEvent?(.disconnected(reason: reason))
            for id in gone { onEvent?(.policy(.streamRemoved(id))) }
        }
        for w in flushWaiters { w() }
        flushWaiters.removeAll()
        guard let delay else { return }
        reconnectTimer?.cancel()
        reconnectTimer = loop.timer(afterNanoseconds: delay) { [weak self] in
            self?.reconnectTimer = nil
            self?.connect()
        }
    }

    private func ready() {
        guard let c = context else { return }
        // Subscribe first, then read everything: an event that arrives meanwhile triggers a read whose sequence
        // number orders it against the lists.
        let listSeq = session.connected()
        c.subscribe { [weak self] ok in
            if !ok { self?.logger.warning("subscription refused by the sound server") }
            self?.enumerated(.subscription)
        }
        c.serverInfo { [weak self] info in
            self?.server = info
            if let info { self?.session.serverDescribed(name: info.name) }
            self?.enumerated(.serverInfo)
        }
        c.restoreVersion { [weak self] version in
            self?.session.restoreDatabaseAnswered(present: version != nil)
            self?.enumerated(.restoreDatabase)
        }
        c.devices(source: false) { [weak self] list in
            self?.session.listed(sinks: list)
            self?.enumerated(.sinks)
        }
        c.devices(source: true) { [weak self] list in
            self?.session.listed(sources: list)
            self?.enumerated(.sources)
        }
        c.clients { [weak self] list in
            self?.session.listed(clients: list)
            self?.enumerated(.clients)
        }
        c.streams(record: false) { [weak self] list in
            guard let self else { return }
            for s in list { self.listed(s, seq: listSeq) }
            self.context?.streams(record: true) { [weak self] list in
                guard let self else { return }
                for s in list { self.listed(s, seq: listSeq) }
                self.session.listDone(listSeq)
                self.enumerated(.streams)
            }
        }
    }

    private func enumerated(_ read: ServerSession<RawStream>.FirstRead) {
        switch session.firstReadDone(read) {
        case .waiting: return
        case .drop(let reason): return dropConnection(reason: reason)
        case .ready: break
        }
        guard let server else { return dropConnection(reason: "the server did not describe itself") }
        logger.info(
            "connected to the sound server",
            metadata: [
                "server": "\(server.name)", "streams": "\(session.streamCount)",
                "restore-database": "\(session.hasRestoreDatabase)",
            ])
        // Devices first, so that streams are reported on known devices; gone devices are reported gone.
        execute(session.devicesSettled())
        recover(server)
        // The streams first: whoever hears `connected` finds the server's streams known.
        // The journal is written once the whole list is reported: until the engine has taken every recovered entry
        // as its own, the old journal is their only record. (The operations decided meanwhile leave the process only
        // when the loop next runs, after this write.)
        holdingJournal = true
        execute(session.roleLoopbackStreams())
        for id in session.streamIDs { report(id) }
        holdingJournal = false
        // The live streams that showed a leaked value are being put back, and the server saves that as the key's
        // value: the entry is the user's again.
        session.ledger.connectionListReported()
        writeJournal()
        openPipeWire()
        onEvent?(.connected(server))
    }

    /// Hands what the journal says a previous run (or connection) left on streams that still exist to the engine
    /// with their first report (it takes the values as its own and decides), and turns changes on streams that are
    /// gone into restore-database leaks.
    private func recover(_ server: ServerInfo) {
        session.ledger.connected(serverCookie: server.cookie)
        if !earlierPendingSaves.isEmpty {
            let wall = UInt64(max(0, time(nil)))
            let same = earlierCookie == server.cookie
            let lifetime = same ? Self.pendingSaveLifetimeSeconds : Self.pendingSaveLifetimeAcrossRestartSeconds
            let young = earlierPendingSaves.filter { wall &- $0.value.at <= lifetime }
            session.ledger.resumePendingSaves(young.mapValues(\.leak), sameServerRun: same, now: monotonicNow())
            // Still pending, they keep the second they were written: a run killed again and again within seconds
            // must not keep them young.
            if same { pendingSavesWritten = young }
            earlierPendingSaves.removeAll()
        }
        guard let journal = recovery else { return }
        recovery = nil
        let found = session.recover(journal, serverCookie: server.cookie)
        if found > 0 {
            logger.notice(
                "\(found) stream(s) still carry what a previous run set; taken as audiod's own, to keep (a running audiod deciding afresh) or put back"
            )
        }
    }

    // MARK: Reads

    private func read(_ id: StreamID) {
        guard context != nil else { return }
        execute(session.streamAnnounced(id))
    }

    private func send(_ r: StreamRead) {
        guard let c = context else { return }
        c.stream(record: r.stream.kind == .record, index: r.stream.index) { [weak self] raw in
            guard let self else { return }
            // What the server said, before audiod judges it: whose change a value was is decided from this.
            self.logger.trace(
                "stream read",
                metadata: [
                    "at": "\(DispatchTime.now().uptimeNanoseconds)", "stream": "\(r.stream)",
                    "muted": "\(raw.map { "\($0.muted)" } ?? "gone")",
                    "volume": "\(raw.map { "\($0.volume)" } ?? "gone")",
                    "device": "\(raw.map { "\($0.device)" } ?? "gone")",
                ])
            self.execute(self.session.streamRead(r, raw, now: self.monotonicNow()))
        }
    }

    private func listed(_ raw: RawStream, seq s: UInt64) {
        execute(session.streamListed(raw, seq: s, now: monotonicNow()))
    }

    /// Tells the engine what `session` decides it hears of a stream (StreamReports.swift), and carries out the rest:
    /// the journal lines, the log, the next read of a stream not yet linked.
    private func report(_ id: StreamID) {
        checkNewStreamFactor(id)
        watchPausedRamp(id)
        execute(session.report(id, now: monotonicNow()))
        journalPendingSaves()
        if session.streamRecord(id) != streamRecordsWritten[id] { streamRecordsChanged = true }
        if session.ledger.userValuesRevision != userValuesWritten || streamRecordsChanged, userValuesTimer == nil {
            // At most once a second: an app fading its own volume changes its key at a stream's pace.
            userValuesTimer = loop.timer(afterNanoseconds: 1_000_000_000) { [weak self] in
                self?.userValuesTimer = nil
                self?.writeUserValues()
            }
        }
    }

    /// What `KeyUserValues` keeps was last written at this ledger revision, with these streams' own values.
    private var userValuesWritten: UInt64 = 0
    private var streamRecordsWritten: [StreamID: KeyUserValues.StreamRecord] = [:]
    private var streamRecordsChanged = false
    private var userValuesTimer: LoopTimer?

    /// Writes the keys' user values now if they changed since the file was written (a stop's last chance).
    public func saveUserValues() {
        loop.assertOnLoop()
        userValuesTimer?.cancel()
        userValuesTimer = nil
        writeUserValues()
    }

    private func writeUserValues() {
        guard session.ledger.userValuesRevision != userValuesWritten || streamRecordsChanged else { return }
        userValuesWritten = session.ledger.userValuesRevision
        streamRecordsWritten = session.streamRecords()
        streamRecordsChanged = false
        guard let journal = options.journalPath else { return }
        let path = KeyUserValues.path(besideJournal: journal)
        var values = session.ledger.userValues
        values.serverCookie = session.ledger.currentServerCookie
        values.streams = streamRecordsWritten
        do {
            try values.write(to: path)
        } catch {
            logger.error("cannot write the keys' user values", metadata: ["path": "\(path)", "error": "\(error)"])
        }
    }

    /// A role loopback's stream is never an app: never reported, never written. One the engine heard of before its
    /// sink was known is reported gone.
    private func forgetInfrastructure(_ id: StreamID) {
        guard session.tracks(id) else { return }
        logger.debug("identity: \(id) is the sound server's own, not an app's: not arbitrated")
        // What audiod wrote to it before it was known for what it is is put back.
        if let before = session.valuesBeforeWrite(id), let c = context {
            if let m = before.muted { c.setMute(record: id.kind == .record, index: id.index, m) { _ in } }
            if let v = before.volume { c.setVolume(record: id.kind == .record, index: id.index, v) { _ in } }
        }
        execute(session.streamRemoved(id, now: monotonicNow()))
    }

    /// Carries out what the session decided (`ServerAction`), in order: the one place that does.
    private func execute(_ actions: [ServerAction]) {
        for a in actions {
            switch a {
            case .tell(let e): onEvent?(.policy(e))
            case .note(let n): logger.debug("\(n)")
            case .journalLeak(let key): journalLeak(key)
            case .journalStreams(let ids): journalStreams(ids)
            case .leakFound(let id, let key):
                logger.info(
                    "a stream started with a policy value left in the restore database; taken as audiod's own, to keep or put back",
                    metadata: ["stream": "\(id)", "key": "\(key)"])
            case .writeAgain(let id, let mute, let volume):
                if let mute { operate(id, .setStreamMute(id, mute), mute: mute) }
                if let volume { operate(id, .setStreamVolume(id, Volume(channels: volume)), volume: volume) }
            case .readUnlinked(let id, let after):
                guard unlinkedReadTimers[id] == nil else { continue }
                unlinkedReadTimers[id] = loop.timer(afterNanoseconds: after) { [weak self] in
                    self?.unlinkedReadTimers[id] = nil
                    if self?.session.unreported(id) == true { self?.read(id) }
                }
            case .read(let r): send(r)
            case .repairRestoreEntry(let id): repairRestoreDatabase(id)
            case .report(let id): report(id)
            case .forget(let id): forgetInfrastructure(id)
            }
        }
    }

    private var loadingDesktopEntries = false

    /// The desktop entries are read off the loop, at start: reading a desktop's few hundred entries takes ~10 ms,
    /// which no decision should wait for. Until they arrive, the names from /proc still count, and the running apps
    /// are judged again when they do.
    private func loadDesktopEntries() {
        guard session.identifier.entries == nil, !loadingDesktopEntries else { return }
        loadingDesktopEntries = true
        let env = ProcessInfo.processInfo.environment
        let dirs = DesktopEntryIndex.applicationDirectories(environment: env)
        // The tests' stand-in for a hung mount: every rescan waits this long (at most a minute).
        let delay = env["AUDIOD_TEST_DESKTOP_SCAN_DELAY_MS"].flatMap { UInt64($0) }.map { min($0, 60_000) } ?? 0
        // And for a first read slowed by a loaded machine (`AUDIOD_TEST_DESKTOP_FIRST_READ_DELAY_MS`).
        let firstDelay =
            env["AUDIOD_TEST_DESKTOP_FIRST_READ_DELAY_MS"].flatMap { UInt64($0) }.map { min($0, 60_000) } ?? 0
        let loop = self.loop
        let me = loop.bind(self)
        desktopQueue.async {
            if firstDelay > 0 { usleep(useconds_t(firstDelay * 1000)) }
            let box = IndexBox(DesktopEntryIndex(directories: dirs))
            box.index.rescanDelayNanoseconds = delay * 1_000_000
            let snapshot = box.index.snapshot
            let (fd, refused) = (box.index.fd, box.index.refused)
            loop.execute { me.value.desktopEntriesLoaded(box, snapshot, fd: fd, refused: refused) }
        }
    }

    private func desktopEntriesLoaded(_ box: IndexBox, _ snapshot: DesktopEntrySnapshot, fd: Int32, refused: [String]) {
        logger.debug("identity: \(snapshot.count) desktop entries read", metadata: ["refused": "\(refused.count)"])
        for path in refused.prefix(8) { logger.debug("identity: not a desktop entry, skipped: \(path)") }
        desktopIndex = box
        if fd >= 0 {
            desktopWatch = loop.watch(fd: fd, events: .input) { [weak self] _ in self?.desktopChanged() }
        }
        rejudgeApps(snapshot)
        if let w = desktopWait {
            w.cancel()
            desktopWait = nil
            connect()
        }
    }

    /// inotify has events: the watch rests (the descriptor stays readable until the index reads it) and, a moment
    /// later, the index reads them and what they concern on its own thread; the loop gets the new snapshot.
    private func desktopChanged() {
        desktopWatch?.update([])
        guard desktopRescan == nil, let box = desktopIndex else { return }
        let loop = self.loop
        let me = loop.bind(self)
        let queue = desktopQueue
        let rescan = loop.timer(afterNanoseconds: Self.desktopDebounceNanoseconds) {
            queue.async {
                let changed = box.index.refresh()
                let snapshot = changed ? box.index.snapshot : nil
                loop.execute {
                    let backend = me.value
                    backend.desktopRescan = nil
                    backend.desktopWatch?.update(.input)
                    if let snapshot { backend.rejudgeApps(snapshot) }
                }
            }
        }
        // Without a timer (no descriptor left for one), the watch is not left resting: events read later still count.
        guard let rescan else { return desktopWatch?.update(.input) ?? () }
        desktopRescan = rescan
    }

    /// The desktop entries changed (or arrived): every running app is identified again.
    private func rejudgeApps(_ index: DesktopEntrySnapshot) {
        logger.debug("identity: desktop entries now \(index.count); judging the running apps again")
        execute(session.desktopEntriesChanged(index))
    }

    private func monotonicNow() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    // MARK: Server events

    private func removed(_ id: StreamID) {
        rampStreamRemoved(id)
        // PipeWire gives a gone node's id to the next one: a proxy bound to it would address nothing.
        if let node = session.streamNode(id) {
            pipewire?.release(node: node)
            nodeRampEnds[node] = nil
        }
        execute(session.streamRemoved(id, now: monotonicNow()))
    }

    private func deviceChanged(source: Bool, index: UInt32, _ change: Change) {
        if change == .remove { return execute(session.deviceRemoved(index: index, source: source)) }
        context?.device(source: source, index: index) { [weak self] d in
            guard let self, let d else { return }
            self.execute(self.session.deviceRead(d, source: source, defaultSource: self.server?.defaultSource))
        }
    }

    private func clientChanged(index: UInt32, _ change: Change) {
        if change == .remove {
            session.clientRemoved(index: index)
            return
        }
        context?.client(index: index) { [weak self] cl in
            guard let self, let cl else { return }
            self.execute(self.session.clientRead(cl))
        }
    }

    // MARK: Effects

    /// Carries out the engine's stream effects (others are ignored). Unknown streams are skipped: the engine may
    /// act on a stream the server removed a moment ago.
    public func apply(_ effects: [Effect]) {
        loop.assertOnLoop()
        for e in effects {
            switch e {
            case .setStreamMute(let id, let mute):
                applyMute(id, mute)
            case .rampStreamUnmute(let id, let ns):
                if beginRampUp(id, milliseconds: UInt32(clamping: ns / 1_000_000)) { continue }
                // Not ramped here after all: the unmute at once.
                applyMute(id, false)
            case .rampStreamVolume(let id, let v, let ns):
                if volumeRamps[id] != nil {
                    holdDuringVolumeRamp(id, v.channels, rampNanoseconds: ns)
                    continue
                }
                if ramps[id] == nil, beginVolumeRamp(id, v.channels, nanoseconds: ns) { continue }
                // Not ramped here: the volume at once (or held for a silencing's ramp).
                applyVolume(id, v)
            case .setStreamVolume(let id, let v):
                if volumeRamps[id] != nil {
                    holdDuringVolumeRamp(id, v.channels, rampNanoseconds: nil)
                    continue
                }
                applyVolume(id, v)
            default: continue
            }
        }
        execute(session.writesSent())
    }

    private func applyVolume(_ id: StreamID, _ v: Volume) {
        if var r = ramps[id], !r.lifted {
            // Written after the mute: a volume raised under a ramp not yet muted would be heard. It counts as
            // written now, as the mute does: a read meanwhile showing the last volume sent is not the user's change.
            guard session.writing(id, volume: v.channels, now: monotonicNow()) else { return }
            r.heldVolume = v.channels
            r.heldWrites += 1
            ramps[id] = r
            return
        }
        operate(id, .setStreamVolume(id, v), volume: v.channels)
    }

    private func applyMute(_ id: StreamID, _ mute: Bool) {
        if mute, volumeRamps[id]?.awaitingMute == true { return muteAfterVolumeRamp(id) }
        if rampUps[id] != nil {
            // Unmuted under a ramp up: already on its way. Silenced again: a step (PipeWire refuses a ramp while
            // one runs).
            if mute { cutRampUp(id) }
            return
        }
        if var r = ramps[id] {
            // Decided again before the ramp's mute was written: the ramp's end mutes, or turns back up.
            if mute && r.lifted {
                _ = session.writing(id, mute: true, now: monotonicNow())
            } else if !mute && !r.lifted {
                // The mute counted as written at the ramp's start is answered as refused (never sent), and
                // the unmute is sent for what it is: the server still shows the stream unmuted. A volume
                // held for after the mute goes first, as the engine ordered it (a fade-in's first step).
                session.writeWithdrawn(id)
                sendHeldVolume(id, &r)
                operate(id, .setStreamMute(id, false), mute: false)
            }
            r.lifted = !mute
            ramps[id] = r
            return
        }
        if mute, beginRamp(id) { return }
        if !mute, let node = rampedNodes.removeValue(forKey: id) {
            // Its factor went back to 1.0 at the mute; set again in case the ramp had not run out by then.
            pipewire?.set(node: node, factor: 1)
            recheckFactor(node)
        }
        operate(id, .setStreamMute(id, mute), mute: mute)
    }

    // MARK: Server ramps (PipeWire 0.3.68 and later)

    /// A silencing the server is ramping: the mute is written once the ramp has run.
    private struct Ramp {
        var node: UInt32
        /// The restore key WirePlumber files the stream under (and saves the ramp's factor into).
        var key: String?
        var end: LoopTimer?
        /// Lifted again before the mute was written: at the ramp's end the factor turns back up instead.
        var lifted = false
        /// A volume decided meanwhile, written after the mute.
        var heldVolume: [UInt32]?
        /// How many volumes were held (each counted as written; only the last is sent).
        var heldWrites = 0
    }

    private var ramps: [StreamID: Ramp] = [:]

    /// A give-back the server is ramping up: the factor to 0 (confirmed by the node itself), then the unmute, then
    /// the ramp up from 0.
    private struct RampUp {
        var node: UInt32
        /// Which give-back this is: a callback of an earlier one on the same stream acts on nothing.
        var serial: UInt64
        /// The unmute has been sent.
        var unmuted = false
        /// When the ramp up has run out (monotonic), once it is sent.
        var runsOutAt: UInt64?
        var end: LoopTimer?
    }

    private var rampUps: [StreamID: RampUp] = [:]
    private var nextRampUpSerial: UInt64 = 0
    /// When the last ramp sent to each node runs out (monotonic): PipeWire refuses another before then, and a plain
    /// value set meanwhile is overwritten by the running one.
    private var nodeRampEnds: [UInt32: UInt64] = [:]

    private func rampRuns(on node: UInt32) -> Bool {
        guard let end = nodeRampEnds[node] else { return false }
        if monotonicNow() < end { return true }
        nodeRampEnds[node] = nil
        return false
    }
    /// How long a give-back waits for the node to report its factor at 0 before it unmutes anyway.
    static let factorReportNanoseconds: UInt64 = 300_000_000
    /// Streams muted after a ramp, by node: an un-silencing sets their factor to 1.0 once more.
    private var rampedNodes: [StreamID: UInt32] = [:]
    private var pipewire: PipeWireRamps?
    private var pipewireRetry: LoopTimer?
    static let pipewireRetryNanoseconds: UInt64 = 2_000_000_000
    // WirePlumber 0.5 saves a stream's factor into its restore key (the media role, else the app) and starts every
    // new stream of the key with it. A key whose stream went mid-ramp (`loweredFactors.leftKeys`, an earlier run's
    // too) is repaired through a probe of the key (`repairFactorKey`); meanwhile, and while a stream of the key is
    // ramping, every new stream of it has its factor set to 1.0 (`checkNewStreamFactor`).
    /// Keys a probe is repairing now.
    private var factorRepairs: Set<String> = []
    /// How often each key was lowered (a ramp of one of its streams, or one of its streams gone low): a 1.0 saved
    /// into a key repairs it only if nothing lowered it again since that 1.0 was sent.
    private var keyLowerings: [String: Int] = [:]

    private func lowerKey(_ key: String) { keyLowerings[key, default: 0] += 1 }
    /// Playback streams already looked at by `checkNewStreamFactor`.
    private var factorSeen: Set<StreamID> = []
    /// A ramp moves only while its node processes: at most two graph cycles after it is sent. The mute follows
    /// after this much more than the ramp's own length (two cycles of 1,024 samples at 48 kHz, and some).
    static let rampSettleNanoseconds: UInt64 = 50_000_000
    /// A stream linked this recently may not be processing yet: its silencing is a step.
    static let rampPlayingNanoseconds: UInt64 = 300_000_000
    /// A factor set back to 1.0 is set once more this much later, in case a ramp was still running (PipeWire then
    /// refuses a new ramp, and the running one overwrites a plain value).
    static let factorRecheckNanoseconds: UInt64 = 250_000_000

    private var rampSamples: Int32 { Int32(clamping: 48 * Int(deClickMilliseconds)) }
    private var loweredFactors = LoweredFactors()
    private var factorRechecks: [UInt32: LoopTimer] = [:]
    /// Streams seen paused while their ramp or its check ran: the ramp waits while its node does not process and
    /// then overwrites the factor set since, so the factor is set again once they play.
    private var pausedInRamp: [StreamID: (node: UInt32, rampNanoseconds: UInt64)] = [:]
    /// Nodes whose paused ramp runs out now and whose factor is then ramped back up (`rampFactorBackUp`), with what
    /// was to run once their factor is checked at 1.0: a plain check asked meanwhile waits for the ramp back up, or
    /// its plain 1.0 would come as a step under a fade-in.
    private var backUps: [UInt32: [() -> Void]] = [:]

    private func watchPausedRamp(_ id: StreamID) {
        // Every report comes here: nothing to look at unless a ramp or a factor check is under way.
        guard !ramps.isEmpty || !volumeRamps.isEmpty || !factorRechecks.isEmpty || !pausedInRamp.isEmpty,
            let node = session.streamNode(id), let corked = session.streamCorked(id)
        else { return }
        if corked {
            if let v = volumeRamps[id], pausedInRamp[id] == nil {
                // A duck's ramp: the rest of it may be as long as the whole.
                pausedInRamp[id] = (node, v.nanoseconds)
                logger.debug("stream \(id.index) paused inside its volume ramp")
            } else if ramps[id] != nil || factorRechecks[node] != nil, pausedInRamp[id] == nil {
                // The ramp it may still have to run is the de-click in force now (a reload while paused would
                // change the setting, not the ramp).
                pausedInRamp[id] = (node, UInt64(deClickMilliseconds) * 1_000_000)
                logger.debug("stream \(id.index) paused inside its ramp or its factor's check")
            }
        } else if let paused = pausedInRamp.removeValue(forKey: id) {
            // Playing again: the rest of its ramp (down, or back up) runs now and overwrites whatever factor was set
            // since, so the factor goes back to 1.0 after it.
            rampFactorBackUp(paused.node, rampNanoseconds: paused.rampNanoseconds)
        }
    }

    /// The factor of a node whose paused ramp runs out now, back up to 1.0 by a ramp of `de-click` once the rest
    /// has surely run, then checked at 1.0 (a linear ramp's last value is a step short). It is not a plain 1.0
    /// 250 ms later: by then a player audiod resumed is being faded in, and mpv's first sound on PipeWire 1.4 came
    /// at a fifth of the fade-in's way up, a click (docs/FADES.md, "Players resumed through MPRIS").
    private func rampFactorBackUp(_ node: UInt32, rampNanoseconds: UInt64) {
        guard rampSamples > 0, backUps[node] == nil else { return recheckFactor(node) }
        let rest = rampNanoseconds + Self.rampSettleNanoseconds
        // No other ramp may be sent to the node while the rest of the paused one runs (one that comes once this has
        // run out cancels the back-up with the check, `cancelFactorCheck`).
        nodeRampEnds[node] = max(nodeRampEnds[node] ?? 0, monotonicNow() + rest)
        let timer = loop.timer(afterNanoseconds: rest) { [weak self] in
            guard let self else { return }
            self.factorRechecks[node] = nil
            let waiting = self.backUps.removeValue(forKey: node) ?? []
            guard let pw = self.pipewire else { return self.rampsSettled() }
            let up = UInt64(self.deClickMilliseconds) * 1_000_000 + Self.rampSettleNanoseconds
            // A give-back's own ramp up on the node sets and checks 1.0 at its end (`beginRampUp`).
            if !self.rampUps.values.contains(where: { $0.node == node }), !self.rampRuns(on: node),
                pw.set(node: node, factor: 1, rampSamples: self.rampSamples)
            {
                self.nodeRampEnds[node] = self.monotonicNow() + up
                self.logger.debug("write: the factor of node \(node) back up over \(self.deClickMilliseconds) ms")
            }
            self.recheckFactor(node, after: up, then: waiting.isEmpty ? nil : { for w in waiting { w() } })
        }
        // No timer to be had: no back-up either, which would hold every later check of the node.
        guard let timer else { return recheckFactor(node) }
        factorRechecks[node]?.cancel()
        backUps[node] = []
        factorRechecks[node] = timer
    }

    /// Cancels the factor check due on the node, and a ramp back up waiting with it: true if a check was due.
    @discardableResult
    private func cancelFactorCheck(_ node: UInt32) -> Bool {
        backUps[node] = nil
        guard let check = factorRechecks.removeValue(forKey: node) else { return false }
        check.cancel()
        return true
    }

    /// Records (before the ramp is sent) or forgets a node whose factor may be below 1.0.
    private func lowered(_ node: UInt32, key: String?, _ down: Bool) {
        if down, let key { lowerKey(key) }
        if down { loweredFactors.nodes[node] = .some(key) } else { loweredFactors.nodes[node] = nil }
        writeLoweredFactors()
    }

    private func writeLoweredFactors() {
        guard let path = options.journalPath.map(LoweredFactors.path(besideJournal:)) else { return }
        do { try loweredFactors.write(to: path) } catch {
            logger.warning("cannot keep the lowered PipeWire factors", metadata: ["error": "\(error)"])
        }
    }

    /// What an earlier run left lowered: set back to 1.0 once the native connection is up.
    private func resetEarlierFactors() {
        guard let path = options.journalPath.map(LoweredFactors.path(besideJournal:)) else { return }
        let earlier: LoweredFactors
        do { earlier = try LoweredFactors.load(from: path) } catch {
            logger.warning("the lowered PipeWire factors file is damaged; ignored", metadata: ["error": "\(error)"])
            return
        }
        guard !earlier.isEmpty, let pw = pipewire else { return }
        logger.info(
            "setting the PipeWire volume factors an earlier run left mid-ramp back to 1.0: \(earlier.nodes.count) node(s), \(earlier.lowKeys.count) restore key(s)"
        )
        for node in earlier.nodes.keys {
            // The node may be gone, or its id another's by now (a new node's factor is 1.0 anyway): the set is all
            // there is to do for it; its key is repaired below.
            pendingOperations += 1
            let sent = pw.set(node: node, factor: 1) { [weak self, weak pw] in
                pw?.release(node: node)
                self?.finishOperation()
            }
            if !sent { finishOperation() }
        }
        // Their keys are kept instead (below); the ids are the server's to reuse.
        for node in earlier.nodes.keys { loweredFactors.nodes[node] = nil }
        for key in earlier.lowKeys { lowerKey(key) }
        loweredFactors.leftKeys.formUnion(earlier.lowKeys)
        writeLoweredFactors()
        for key in earlier.lowKeys { repairFactorKey(key) }
        // Streams of those keys started while audiod was away started with the factor left there.
        for id in session.streamIDs { checkNewStreamFactor(id) }
    }

    /// Opens the native connection once the pulse server turned out to be PipeWire (no ramps elsewhere).
    private func openPipeWire() {
        guard pipewire == nil, deClickMilliseconds > 0, session.onPipeWire else { return }
        // A pulse server named by something else than a local socket (tcp, another path) may not be the PipeWire
        // libpipewire would find: its node ids would be another server's.
        let remote = PipeWireRamps.remote(besidePulseServer: options.server)
        guard options.server == nil || remote != nil else {
            logger.info(
                "no native PipeWire connection for a pulse server elsewhere than a local socket; silencings are steps")
            return
        }
        do {
            let pw = try PipeWireRamps(remote: remote, loop: loop)
            pw.onIdle = { [weak self] in self?.rampsSettled() }
            pw.onReady = { [weak self, weak pw] in
                guard let self, let pw else { return }
                defer { self.rampsSettled() }
                self.session.serverRamps = pw.ramps && self.options.rampsGiveBacks
                self.session.serverRampsVolume = pw.ramps && self.options.rampsDucks
                self.logger.info(
                    "native PipeWire connection: server \(pw.serverVersion), silencings that race a new sound \(pw.ramps ? "ramp over \(self.deClickMilliseconds) ms" : "are steps (no ramps before 0.3.68)")"
                )
                self.resetEarlierFactors()
            }
            pw.onLost = { [weak self] why in
                guard let self else { return }
                self.logger.info(
                    "the native PipeWire connection was lost; silencings are steps until it is back",
                    metadata: ["error": "\(why)"])
                self.closePipeWire()
                // Factors it may have left low (a give-back's 0, a ramp's) are set back by the next connection
                // (`resetEarlierFactors`): it is tried again while the pulse connection stands.
                self.pipewireRetry = self.loop.timer(afterNanoseconds: Self.pipewireRetryNanoseconds) { [weak self] in
                    self?.pipewireRetry = nil
                    if self?.context != nil { self?.openPipeWire() }
                }
            }
            pipewire = pw
        } catch {
            logger.info(
                "no native PipeWire connection; silencings are steps", metadata: ["error": "\(error.message)"])
        }
    }

    private func closePipeWire() {
        for (id, var r) in ramps {
            r.end?.cancel()
            // What was held is written now, as a step.
            if !r.lifted { sendRampMute(id) {} }
            sendHeldVolume(id, &r)
        }
        for (id, r) in volumeRamps.sorted(by: { $0.key < $1.key }) {
            r.end?.cancel()
            // Its end written now as a step; a factor left low is set back by the next native connection.
            for _ in 0..<r.unanswered { session.writeWithdrawn(id) }
            operate(id, .setStreamVolume(id, Volume(channels: r.final)), volume: r.final)
        }
        volumeRamps.removeAll()
        forgetRamps()
    }

    /// Lets go of the native connection and every ramp's state. What may be left low stays in the factors file, for
    /// the next native connection (or the next start).
    private func forgetRamps() {
        ramps.removeAll()
        for r in rampUps.values { r.end?.cancel() }
        rampUps.removeAll()
        for r in volumeRamps.values { r.end?.cancel() }
        volumeRamps.removeAll()
        session.serverRampsVolume = false
        nodeRampEnds.removeAll()
        rampedNodes.removeAll()
        pausedInRamp.removeAll()
        backUps.removeAll()
        for t in factorRechecks.values { t.cancel() }
        factorRechecks.removeAll()
        // A probe's repair ends with the connections; the keys stay in the factors file for the next one.
        factorRepairs.removeAll()
        factorSeen.removeAll()
        session.serverRamps = false
        pipewire = nil
        rampsSettled()
    }

    /// Starts a server ramp of the stream down to silence over `de-click`, and its mute at the end; false when the
    /// server cannot ramp this stream now.
    private func beginRamp(_ id: StreamID) -> Bool {
        guard let pw = pipewire, pw.ramps, rampSamples > 0, rampUps[id] == nil,
            let node = session.rampableNode(id, now: monotonicNow(), playingFor: Self.rampPlayingNanoseconds),
            !rampRuns(on: node)
        else { return false }
        let key = session.streamKey(id)
        // A check of the factor still due would set it to 1.0 inside this ramp.
        cancelFactorCheck(node)
        lowered(node, key: key, true)
        pendingOperations += 1
        // A reply waits for the ramp's start, as it would for the mute.
        let sent = pw.set(node: node, factor: 0, rampSamples: rampSamples) { [weak self] in self?.finishOperation() }
        nodeRampEnds[node] = monotonicNow() + UInt64(deClickMilliseconds) * 1_000_000 + Self.rampSettleNanoseconds
        guard sent else {
            pendingOperations -= 1
            lowered(node, key: key, false)
            return false
        }
        logger.debug("write: ramp stream \(id.index) down over \(deClickMilliseconds) ms, then mute it")
        // The mute counts as written from now: a read before it lands (pipewire-pulse confirms late anyway) must
        // not be taken for the user unmuting the stream. It is sent at the ramp's end (`sendRampMute`).
        _ = session.writing(id, mute: true, now: monotonicNow())
        var r = Ramp(node: node, key: key)
        r.end = loop.timer(
            afterNanoseconds: UInt64(deClickMilliseconds) * 1_000_000 + Self.rampSettleNanoseconds
        ) { [weak self] in self?.rampEnded(id) }
        ramps[id] = r
        return true
    }

    private func rampEnded(_ id: StreamID) {
        guard var r = ramps.removeValue(forKey: id), let pw = pipewire else { return }
        if r.lifted {
            pw.set(node: r.node, factor: 1, rampSamples: rampSamples)
            recheckFactor(r.node)
        } else {
            rampedNodes[id] = r.node
            // The factor goes back to 1.0 only under the mute, once the server has it.
            sendRampMute(id) { [weak self] in
                guard let self, self.rampedNodes[id] == r.node else { return }
                self.pipewire?.set(node: r.node, factor: 1)
                self.recheckFactor(r.node)
            }
        }
        sendHeldVolume(id, &r)
        execute(session.writesSent())
        rampsSettled()
    }

    /// Sends the volume held during a ramp. Each held volume was counted as written when it was decided; the ones
    /// the last replaced are answered now, the last by the server.
    private func sendHeldVolume(_ id: StreamID, _ r: inout Ramp) {
        guard let v = r.heldVolume else { return }
        for _ in 0..<max(0, r.heldWrites - 1) { session.writeWithdrawn(id) }
        r.heldVolume = nil
        r.heldWrites = 0
        guard let c = context else { return }
        logger.debug("write: \(Effect.setStreamVolume(id, Volume(channels: v)).sentence) (held for the ramp)")
        armExpiry()
        pendingOperations += 1
        c.setVolume(record: false, index: id.index, v) { [weak self] ok in self?.operationDone(id, ok, "volume") }
    }

    /// Sends the mute a ramp's start counted as written (`session.writing` was called then).
    private func sendRampMute(_ id: StreamID, _ answered: @escaping () -> Void) {
        guard let c = context else { return }
        logger.debug("write: mute playback stream \(id.index) (the ramp has run)")
        armExpiry()
        pendingOperations += 1
        c.setMute(record: false, index: id.index, true) { [weak self] ok in
            // The factor goes back up whether or not the mute took: refused, the stream is gone or the user's
            // again, and a factor of 0 would keep it silent. First, so that a stop's flush waits for it.
            answered()
            self?.operationDone(id, ok, "mute")
        }
    }

    /// Unmutes a stream audiod muted under a ramp up from silence over `milliseconds` inside the server; false when
    /// the server cannot ramp it (then the caller unmutes it at once). Its factor goes to 0 first, and the unmute
    /// waits until the node itself reports that — a change through the server reaches pipewire-pulse's stream by
    /// another way than the pulse unmute, and an unmute landing first would be heard at full volume.
    private func beginRampUp(_ id: StreamID, milliseconds ms: UInt32) -> Bool {
        guard let pw = pipewire, pw.ramps, ms > 0, id.kind == .playback, ramps[id] == nil, rampUps[id] == nil,
            volumeRamps[id] == nil,
            session.streamMuted(id) == true, let node = session.streamNode(id), !rampRuns(on: node),
            pw.watchFactor(node: node)
        else { return false }
        guard session.writing(id, mute: false, now: monotonicNow()) else { return true }
        cancelFactorCheck(node)
        rampedNodes[id] = nil
        lowered(node, key: session.streamKey(id), true)
        logger.debug("write: factor of stream \(id.index) to 0, then unmute it under a ramp up over \(ms) ms")
        nextRampUpSerial &+= 1
        let serial = nextRampUpSerial
        rampUps[id] = RampUp(node: node, serial: serial)
        pendingOperations += 1
        pw.set(node: node, factor: 0)
        pw.whenFactor(node: node, atMost: 0.001, timeout: Self.factorReportNanoseconds) {
            [weak self, weak pw] reported in
            guard let self else { return }
            defer { self.finishOperation() }
            guard self.rampUps[id]?.serial == serial, let c = self.context else { return }
            // The native connection lost: the factor may be 0, and nothing can ramp it up. The unmute waits for the
            // next native connection, which sets every lowered factor back to 1.0 (`openPipeWire`'s retry); the
            // engine's unmute is sent now all the same, or the stream would stay muted.
            if pw?.isLost ?? true {
                self.logger.notice("stream \(id.index) given back while the native PipeWire connection was lost")
            }
            if !reported {
                self.logger.notice(
                    "stream \(id.index)'s node did not report its factor at 0 in time; unmuting it anyway")
            }
            self.rampUps[id]?.unmuted = true
            self.armExpiry()
            self.pendingOperations += 1
            c.setMute(record: false, index: id.index, false) { [weak self] ok in
                guard let self else { return }
                self.operationDone(id, ok, "mute")
                // Up from 0 whether or not the unmute took: a factor left at 0 would keep the stream silent.
                guard self.rampUps[id]?.serial == serial, let pw = self.pipewire else { return }
                let samples = Int32(clamping: 48 * Int(ms))
                pw.set(node: node, factor: 1, rampSamples: samples, stepSamples: max(1, (samples + 2047) / 2048))
                let length = UInt64(ms) * 1_000_000
                self.nodeRampEnds[node] = self.monotonicNow() + length + Self.rampSettleNanoseconds
                self.rampUps[id]?.runsOutAt = self.monotonicNow() + length
                self.rampUps[id]?.end = self.loop.timer(afterNanoseconds: length + Self.rampSettleNanoseconds) {
                    [weak self] in
                    guard let self, self.rampUps[id]?.serial == serial else { return }
                    self.rampUps[id] = nil
                    // The ramp's last value is a step short of 1.0: set 1.0 itself, and check it.
                    self.recheckFactor(node, after: 0)
                    self.rampsSettled()
                }
            }
        }
        return true
    }

    /// Silenced again during a ramp up: muted at once, a step. The factor goes back to 1.0 now if the ramp up was
    /// not sent yet, else once it has run out under the mute.
    private func cutRampUp(_ id: StreamID) {
        guard let r = rampUps.removeValue(forKey: id) else { return }
        r.end?.cancel()
        defer { rampsSettled() }
        if !r.unmuted {
            // The unmute was never sent: the stream is still muted, as the engine now wants.
            session.writeWithdrawn(id)
            _ = session.writing(id, mute: true, now: monotonicNow())
            execute(session.writeAnswered(id, ok: true))
            pipewire?.set(node: r.node, factor: 1)
            recheckFactor(r.node)
            return
        }
        logger.debug("write: the ramp up of stream \(id.index) cut short by a mute")
        operate(id, .setStreamMute(id, true), mute: true)
        // The factor goes back to 1.0 only under the mute: after the ramp up has run out if it was sent, else once
        // the mute has surely landed (a 1.0 over the native connection could overtake the mute).
        let now = monotonicNow()
        let wait = r.runsOutAt.map { ($0 > now ? $0 - now : 0) + Self.rampSettleNanoseconds } ?? 0
        rampedNodes[id] = r.node
        recheckFactor(r.node, after: max(wait, Self.factorRecheckNanoseconds))
    }

    // MARK: Ducks ramped inside the server

    /// A duck, or its undoing, the server is ramping. Down: the factor ramps from 1.0 to the share of the volume
    /// before that the target is, and at the end the target volume and the factor back at 1.0 are set in one
    /// `Props` (nothing heard changes then). Up: the target volume and the factor at the share the old volume was
    /// of it are set in one `Props` (nothing heard changes), then the factor ramps up to 1.0. Either way the
    /// factor is only the way there: what a mixer shows, and what stays, is the volume. Nothing else is sent to the
    /// node while it runs (PipeWire refuses a second ramp, and a plain factor would be overwritten by the running
    /// one); a mute is written at once, through the pulse protocol.
    private struct VolumeRamp {
        var node: UInt32
        var target: [UInt32]
        var down: Bool
        var nanoseconds: UInt64
        var end: LoopTimer?
        /// Writes counted by `session.writing` and not answered yet: the ramp's own (down: answered at the end)
        /// and each held one.
        var unanswered: Int
        /// A volume decided meanwhile: set with the factor at 1.0 at the end, instead of the target.
        var held: [UInt32]?
        /// A ramp decided meanwhile (the duck lifted, or deepened): started from the end once this one has run.
        var next: (volume: [UInt32], nanoseconds: UInt64)?
        /// The volume the server showed at the start (what stays under a ramp to silence).
        var before: [UInt32]
        /// A ramp to silence (a fade-out): no volume of 0 is ever written.
        var silences: Bool { target.allSatisfy { $0 == 0 } }
        /// A ramp to silence has run, and waits for the engine's mute.
        var awaitingMute = false

        /// The volume the ramp ends on, what was decided meanwhile included (a ramp to silence: the volume under
        /// its mute).
        var final: [UInt32] { next?.volume ?? held ?? (silences ? before : target) }
    }

    private var volumeRamps: [StreamID: VolumeRamp] = [:]

    /// A pulse volume as PipeWire's channel volumes hold it (pulse volumes are cubic).
    private static func linear(_ v: UInt32) -> Float {
        let x = Float(v) / 65536
        return x * x * x
    }

    /// Starts a server ramp of the stream's volume to `target` over `nanoseconds`; false when the server cannot
    /// ramp this stream now (then the caller sets the volume at once).
    /// `from`: where the server's volume is (a ramp's end just committed), if not as last read.
    /// `shown`: what the server shows meanwhile, if not `from` (a ramp turned back: the volume under its factor).
    private func beginVolumeRamp(
        _ id: StreamID, _ target: [UInt32], nanoseconds ns: UInt64, from: [UInt32]? = nil, shown: [UInt32]? = nil
    ) -> Bool {
        let now = monotonicNow()
        guard options.rampsDucks, let pw = pipewire, pw.ramps, ns >= 1_000_000, rampUps[id] == nil,
            pausedInRamp[id] == nil, let before = from ?? session.streamVolume(id), before.count == target.count,
            !before.isEmpty, let node = session.heardNode(id, now: now, playingFor: Self.rampPlayingNanoseconds),
            !rampRuns(on: node), backUps[node] == nil
        else { return false }
        // One factor for every channel: a duck scales them all alike. Down: the share of the volume before that the
        // target is (0 for a fade-out); up: the share of the target that the volume before is (0 from silence).
        let sumBefore = before.map(Self.linear).reduce(0, +)
        let sumTarget = target.map(Self.linear).reduce(0, +)
        guard sumBefore != sumTarget else { return false }
        let down = sumTarget < sumBefore
        let share = down ? sumTarget / sumBefore : sumBefore / sumTarget
        guard share.isFinite, share >= 0, share < 0.9999 else { return false }
        let samples = Int32(clamping: 48 * Int(ns / 1_000_000))
        let steps = max(1, (samples + 2047) / 2048)
        let runs = ns + Self.rampSettleNanoseconds
        // The timer first: none to be had, no ramp, which would otherwise never end.
        guard let end = loop.timer(afterNanoseconds: runs, { [weak self] in self?.volumeRampEnded(id) }) else {
            return false
        }
        // The target counts as written from now; until the server has it, it shows the volume before (down: until
        // the ramp's end), which is audiod's meanwhile — any other volume is the user's.
        guard session.writing(id, volume: target, now: now, shown: shown ?? before, holding: runs) else {
            end.cancel()
            return true
        }
        let key = session.streamKey(id)
        cancelFactorCheck(node)
        lowered(node, key: key, true)
        pendingOperations += 1
        let sent: Bool
        if down {
            // A reply waits for the ramp's start, as it would for the volume.
            sent = pw.set(node: node, factor: share, rampSamples: samples, stepSamples: steps) { [weak self] in
                self?.finishOperation()
            }
        } else {
            sent = pw.set(node: node, factor: share, channelVolumes: target.map(Self.linear)) { [weak self] in
                // The volume is the server's now: the write is answered.
                self?.operationDone(id, true, "volume")
            }
            if sent, !pw.set(node: node, factor: 1, rampSamples: samples, stepSamples: steps) {
                // The volume went, its ramp did not: the factor to 1.0 plainly, and checked.
                end.cancel()
                recheckFactor(node, after: 0)
                return true
            }
        }
        guard sent else {
            // The native connection failed under it (its loss closes every ramp): the volume through pulse.
            end.cancel()
            pendingOperations -= 1
            session.writeWithdrawn(id)
            lowered(node, key: key, false)
            operate(id, .setStreamVolume(id, Volume(channels: target)), volume: target)
            return true
        }
        nodeRampEnds[node] = now + runs
        logger.debug(
            "write: ramp stream \(id.index)'s volume \(down ? "down" : "up") to \(Volume(channels: target)) over \(ns / 1_000_000) ms (factor \(down ? "1.0 → \(share)" : "\(share) → 1.0"))"
        )
        var r = VolumeRamp(
            node: node, target: target, down: down, nanoseconds: ns, unanswered: down ? 1 : 0,
            before: shown ?? before)
        r.end = end
        volumeRamps[id] = r
        return true
    }

    /// A volume (or another ramp) decided while the stream's ramp runs: counted as written now, carried out at the
    /// ramp's end.
    private func holdDuringVolumeRamp(_ id: StreamID, _ v: [UInt32], rampNanoseconds: UInt64?) {
        guard var r = volumeRamps[id], session.writing(id, volume: v, now: monotonicNow()) else { return }
        r.unanswered += 1
        if let ns = rampNanoseconds {
            r.next = (v, ns)
            r.held = nil
        } else {
            r.held = v
            r.next = nil
        }
        volumeRamps[id] = r
        if r.awaitingMute {
            // The ramp to silence has run and no mute came: what was decided instead is carried out now.
            r.end?.cancel()
            r.end = nil
            volumeRamps[id] = r
            volumeRampEnded(id)
            return
        }
        logger.debug("write: volume \(Volume(channels: v)) of stream \(id.index) held for its ramp's end")
    }

    /// The ramp has run: the volume (the target, or what was decided meanwhile) and the factor back at 1.0 in one
    /// `Props`, then the ramp decided meanwhile, if any. A ramp to silence (a fade-out) writes no volume of 0: it
    /// waits for the engine's mute, and the volume it puts back under the mute goes with the factor at 1.0.
    private func volumeRampEnded(_ id: StreamID) {
        guard var r = volumeRamps[id] else { return }
        // A paused ramp's back-up may have put the node's end later.
        if let e = nodeRampEnds[r.node], e <= monotonicNow() { nodeRampEnds[r.node] = nil }
        r.end = nil
        if let next = r.next, r.silences, next.volume.allSatisfy({ $0 == 0 }) {
            // Silenced again: still the ramp to silence.
            r.next = nil
        }
        if r.silences, r.held == nil {
            if let next = r.next {
                // Turned back before the mute: up from the silence the factor reached, under the volume before.
                volumeRamps[id] = nil
                for _ in 0..<r.unanswered { session.writeWithdrawn(id) }
                let zeros = [UInt32](repeating: 0, count: next.volume.count)
                if !beginVolumeRamp(id, next.volume, nanoseconds: next.nanoseconds, from: zeros, shown: r.before) {
                    commitVolume(id, r.node, next.volume, answers: false, countNow: true)
                    recheckFactor(r.node)
                }
                execute(session.writesSent())
                return rampsSettled()
            }
            r.awaitingMute = true
            let wait = loop.timer(afterNanoseconds: Self.fadeOutMuteWaitNanoseconds) { [weak self] in
                // No mute came (the engine let go of the stream some other way): the factor back at 1.0 under
                // what was decided, or the volume before, as a commit would.
                guard let self, let r = self.volumeRamps.removeValue(forKey: id) else { return }
                self.logger.debug("stream \(id.index)'s ramp to silence: no mute followed")
                self.finishVolumeRamp(id, r, commit: r.held ?? r.before)
            }
            guard let wait else {
                volumeRamps[id] = nil
                return finishVolumeRamp(id, r, commit: r.before)
            }
            r.end = wait
            volumeRamps[id] = r
            return
        }
        volumeRamps[id] = nil
        let commit = r.next.map { _ in r.held ?? r.target } ?? r.held ?? (r.down ? r.target : nil)
        finishVolumeRamp(id, r, commit: commit)
    }

    /// How long the end of a ramp to silence waits for the engine's mute: a safety net, not a deadline. The engine
    /// times its mute after every ramp it asked for, and the backend may have dropped one of them (a lift replaced
    /// by another fade-out, a second fade-out while the first ran): its mute can come up to two of the longest
    /// fades (5 s each) after this ramp's end. Meanwhile the stream is silent, as the engine holds it; anything else
    /// the engine decides (the stream given back, the stop's values) ends the wait at once.
    static let fadeOutMuteWaitNanoseconds: UInt64 = 11_000_000_000

    /// Sets the ramp's end state (`commit`; nil: nothing to set but the factor, an up ramp's), answers its writes,
    /// and starts the ramp decided meanwhile.
    private func finishVolumeRamp(_ id: StreamID, _ r: VolumeRamp, commit: [UInt32]?) {
        defer { rampsSettled() }
        guard pipewire != nil else {
            for _ in 0..<r.unanswered { session.writeWithdrawn(id) }
            return
        }
        if let commit {
            // One write answers the last counted; the others were replaced.
            for _ in 0..<max(0, r.unanswered - 1) { session.writeWithdrawn(id) }
            commitVolume(id, r.node, commit, answers: r.unanswered > 0, countNow: false)
        } else {
            for _ in 0..<r.unanswered { session.writeWithdrawn(id) }
        }
        if let next = r.next, beginVolumeRamp(id, next.volume, nanoseconds: next.nanoseconds, from: commit) {
            execute(session.writesSent())
            return
        } else if let next = r.next {
            // Not ramped after all: set by the same way as the commit, so that it lands after it.
            commitVolume(id, r.node, next.volume, answers: false, countNow: true)
        }
        // The factor once more at 1.0 (an up ramp's last value is a step short), and checked.
        recheckFactor(r.node, after: commit != nil ? Self.factorRecheckNanoseconds : 0)
        execute(session.writesSent())
    }

    /// The volume and the factor at 1.0 in one `Props`. `answers`: it answers a write counted earlier; `countNow`:
    /// it is counted now.
    private func commitVolume(_ id: StreamID, _ node: UInt32, _ volume: [UInt32], answers: Bool, countNow: Bool) {
        guard let pw = pipewire else { return }
        if countNow, !session.writing(id, volume: volume, now: monotonicNow()) { return }
        let answering = answers || countNow
        pendingOperations += 1
        let sent = pw.set(node: node, factor: 1, channelVolumes: volume.map(Self.linear)) { [weak self] in
            guard let self else { return }
            if answering { self.operationDone(id, true, "volume") } else { self.finishOperation() }
        }
        if !sent {
            pendingOperations -= 1
            if answering { session.writeWithdrawn(id) }
            operate(id, .setStreamVolume(id, Volume(channels: volume)), volume: volume)
        } else {
            logger.debug(
                "write: stream \(id.index)'s ramp has run: volume \(Volume(channels: volume)) with the factor at 1.0")
        }
    }

    /// The engine's mute at the end of a ramp to silence: sent through pulse, and once the server has it, the
    /// volume put back under it and the factor at 1.0, in one `Props`.
    private func muteAfterVolumeRamp(_ id: StreamID) {
        guard var r = volumeRamps[id] else { return }
        r.end?.cancel()
        r.end = nil
        r.awaitingMute = false
        volumeRamps[id] = r
        guard let c = context, session.writing(id, mute: true, now: monotonicNow()) else {
            if let r = volumeRamps.removeValue(forKey: id) { finishVolumeRamp(id, r, commit: nil) }
            return
        }
        logger.debug("write: mute playback stream \(id.index) (its ramp to silence has run)")
        armExpiry()
        pendingOperations += 1
        c.setMute(record: false, index: id.index, true) { [weak self] ok in
            guard let self else { return }
            // The factor goes back up whether or not the mute took (refused, the stream is gone or the user's), as
            // after a silencing's ramp. First, so that a stop's flush waits for it.
            if let r = self.volumeRamps.removeValue(forKey: id) {
                self.finishVolumeRamp(id, r, commit: r.held ?? r.before)
            }
            self.operationDone(id, ok, "mute")
        }
    }

    /// The factor once more at 1.0, a while after it was set so (or `after` a ramp still running); only then is the
    /// node no longer lowered. `then` runs once the server has that.
    private func recheckFactor(
        _ node: UInt32, after: UInt64 = PulseBackend.factorRecheckNanoseconds, then: (() -> Void)? = nil
    ) {
        if backUps[node] != nil {
            // The ramp back up checks the factor at its end; what was to follow this check follows that one.
            if let then { backUps[node]?.append(then) }
            return
        }
        factorRechecks[node] = loop.timer(afterNanoseconds: after) { [weak self] in
            guard let self else { return }
            self.factorRechecks[node] = nil
            guard let pw = self.pipewire else { return self.rampsSettled() }
            let key = self.loweredFactors.nodes[node] ?? nil
            let lowerings = key.map { self.keyLowerings[$0, default: 0] } ?? 0
            let sent = pw.set(node: node, factor: 1) { [weak self, weak pw] in
                // A connection lost meanwhile answers everything unsent: nothing is known to be back at 1.0.
                guard let self, let pw, !pw.isLost, !self.pausedInRamp.values.contains(where: { $0.node == node })
                else { return }
                self.lowered(node, key: nil, false)
                then?()
                // WirePlumber saved this 1.0 into the node's key too.
                if let key { self.keyRepaired(key, lowerings: lowerings) }
            }
            if !sent { self.logger.debug("the factor of node \(node) could not be set again") }
            self.rampsSettled()
        }
    }

    /// A stream gone during its ramp, or before its factor was surely back at 1.0: WirePlumber may keep the factor
    /// in the stream's key for every next stream of it. The key is repaired; its entry stays (the file too) until
    /// then.
    private func rampStreamRemoved(_ id: StreamID) {
        defer { rampsSettled() }
        factorSeen.remove(id)
        rampedNodes[id] = nil
        pausedInRamp[id] = nil
        if let r = ramps.removeValue(forKey: id) {
            r.end?.cancel()
            // Its mute and held volumes were counted as written and never sent.
            for _ in 0..<(r.lifted ? 0 : 1) + r.heldWrites { execute(session.writeAnswered(id, ok: false)) }
        }
        if let r = rampUps.removeValue(forKey: id) {
            r.end?.cancel()
            if !r.unmuted { execute(session.writeAnswered(id, ok: false)) }
        }
        if let r = volumeRamps.removeValue(forKey: id) {
            r.end?.cancel()
            for _ in 0..<r.unanswered { execute(session.writeAnswered(id, ok: false)) }
        }
        guard let node = session.streamNode(id) else { return }
        // Its id is the server's to give to the next node: a check due on it would set another's factor. A check
        // that was repairing the stream's key (a new stream of a low key) leaves the key to a probe instead.
        let checking = cancelFactorCheck(node)
        if let entry = loweredFactors.nodes.removeValue(forKey: node) {
            // Gone while its factor may have been low: its key may hold that factor.
            if let key = entry {
                lowerKey(key)
                loweredFactors.leftKeys.insert(key)
                repairFactorKey(key)
            }
            writeLoweredFactors()
        } else if checking, let key = session.streamKey(id), loweredFactors.lowKeys.contains(key) {
            repairFactorKey(key)
        }
    }

    /// A new playback stream of a key that may hold a ramp's factor (a ramp of another stream of the key under way,
    /// or a key left low) started with that factor — silent, with nothing in a mixer to show why: it gets 1.0, and
    /// once more a while later in case WirePlumber's own restore landed after audiod's. Measured on PipeWire 1.4.2:
    /// a ramp's 0 is saved into `media.role:Music` at once, and the next Music stream of any app started at 0.
    private func checkNewStreamFactor(_ id: StreamID) {
        guard id.kind == .playback, let pw = pipewire, pw.ramps, !factorSeen.contains(id),
            let node = session.streamNode(id)
        else { return }
        factorSeen.insert(id)
        guard !loweredFactors.isEmpty, let key = session.streamKey(id), loweredFactors.lowKeys.contains(key),
            ramps[id] == nil, rampedNodes[id] == nil, volumeRamps[id] == nil, pw.set(node: node, factor: 1)
        else { return }
        logger.debug("write: factor of stream \(id.index) to 1.0 (a new stream of \(key), which may hold a ramp's)")
        let lowerings = keyLowerings[key, default: 0]
        recheckFactor(node) { [weak self] in
            // WirePlumber saved the 1.0 into the key: it is repaired, unless a ramp of the key is still under way.
            self?.keyRepaired(key, lowerings: lowerings)
        }
    }

    /// Repairs a key left low through a probe of it (RepairProbe.swift): WirePlumber starts the probe with the
    /// key's saved factor, audiod sets the probe's factor to 1.0, and WirePlumber saves that into the key. A key no
    /// probe can stand for is repaired by the next stream of it (`checkNewStreamFactor`).
    private func repairFactorKey(_ key: String) {
        guard pipewire?.ramps == true, !factorRepairs.contains(key),
            let props = RepairProbe.clientProperties(forKey: key)
        else { return }
        factorRepairs.insert(key)
        let lowerings = keyLowerings[key, default: 0]
        openProbe(props) { [weak self] stream, close in
            guard let self else { return close() }
            let node = stream?.properties["object.id"].flatMap({ UInt32($0) })
            let finish = { [weak self] (ok: Bool) in
                // The probe's node id is the server's to reuse once it goes.
                if let node { self?.pipewire?.release(node: node) }
                close()
                guard let self else { return }
                self.factorRepairs.remove(key)
                if ok {
                    self.logger.debug("restore key \(key): its saved PipeWire factor set back to 1.0 through a probe")
                    self.keyRepaired(key, lowerings: lowerings)
                } else {
                    self.logger.notice("restore key \(key): no probe to set its saved PipeWire factor back through")
                }
                self.rampsSettled()
            }
            guard let node, let pw = self.pipewire else { return finish(false) }
            let sent = pw.set(node: node, factor: 1) { [weak self, weak pw] in
                guard let self, let pw, !pw.isLost else { return finish(false) }
                // WirePlumber saves the change once the node reports it: the probe stays a while for that.
                self.probeAfter(Self.probeSaveNanoseconds) { finish(true) }
            }
            if !sent { finish(false) }
        }
    }

    /// How long a probe stays once its factor is set, for WirePlumber to see and save the change.
    static let probeSaveNanoseconds: UInt64 = 200_000_000

    /// The key holds 1.0 again (WirePlumber saved a 1.0 of a stream of it, sent when the key had been lowered
    /// `lowerings` times): it is no longer left low — unless it was lowered again since, and then a probe repairs
    /// it once more. A stream of the key still ramping keeps it low through its own entry.
    private func keyRepaired(_ key: String, lowerings: Int) {
        guard loweredFactors.leftKeys.contains(key) else { return }
        guard keyLowerings[key, default: 0] == lowerings else { return repairFactorKey(key) }
        loweredFactors.leftKeys.remove(key)
        writeLoweredFactors()
    }

    private func operate(
        _ id: StreamID, _ effect: Effect, mute: Bool? = nil, volume: [UInt32]? = nil,
        answered: (() -> Void)? = nil
    ) {
        guard let c = context, session.writing(id, mute: mute, volume: volume, now: monotonicNow()) else {
            answered?()
            return
        }
        // Every write, at debug: each one must follow the arbiter's "decided" line that names it.
        logger.debug("write: \(effect.sentence)")
        armExpiry()
        pendingOperations += 1
        let record = id.kind == .record
        if let mute {
            c.setMute(record: record, index: id.index, mute) { [weak self] ok in
                self?.operationDone(id, ok, "mute")
                if ok { answered?() }
            }
        } else if let volume {
            c.setVolume(record: record, index: id.index, volume) { [weak self] ok in
                self?.operationDone(id, ok, "volume")
            }
        }
    }

    private func operationDone(_ id: StreamID, _ ok: Bool, _ what: String) {
        if !ok, session.tracks(id) {
            logger.warning("the sound server refused a \(what) change", metadata: ["stream": "\(id)"])
        }
        execute(session.writeAnswered(id, ok: ok))
        finishOperation()
    }

    private func finishOperation() {
        pendingOperations -= 1
        guard pendingOperations <= 0 else { return }
        pendingOperations = 0
        let waiters = flushWaiters
        flushWaiters.removeAll()
        for w in waiters { w() }
    }

    /// Keeps one timer for the tracker's next confirmation deadline.
    private func armExpiry() {
        guard expiryTimer == nil, let deadline = session.nextDeadline else { return }
        let now = monotonicNow()
        expiryTimer = loop.timer(afterNanoseconds: deadline > now ? deadline - now : 0) { [weak self] in
            guard let self else { return }
            self.expiryTimer = nil
            self.execute(self.session.tick(now: self.monotonicNow()))
            self.armExpiry()
        }
    }

    /// module-stream-restore saves whatever a client sets, audiod's policy values too, and hands them to the
    /// app's next stream. Writing the entry back with the user's values keeps the database the user's.
    private func repairRestoreDatabase(_ id: StreamID) {
        guard session.hasRestoreDatabase, let key = session.ledger.entryToRepair(after: id), let c = context else {
            return
        }
        pendingOperations += 1
        c.restoreEntries { [weak self] entries in
            guard let self else { return }
            // pipewire-pulse answers with an empty list: there the leak is undone on the app's next stream.
            if let entry = entries?.first(where: { $0.name == key }),
                let repair = self.session.ledger.repair(after: id, Self.ledgerEntry(entry), now: self.monotonicNow())
            {
                self.writeEntry(entry, repair)
            }
            self.finishOperation()
        }
    }

    private static func ledgerEntry(_ e: PulseContext.RestoreEntry) -> RestoreLedger.Entry {
        RestoreLedger.Entry(key: e.name, muted: e.muted, volume: e.volume)
    }

    /// `audiod --restore`: after the engine has put back the journal's stream entries on the streams that still
    /// exist (handed to it with their first report), writes the user's values into the restore-database entries that the journal
    /// says hold policy values, so that nothing audiod did outlives it. On PulseAudio the entry is read and written
    /// back; on PipeWire, whose read lists nothing, a mute leak is written blind (WirePlumber merges the mute —
    /// and the volume, when the journal has the user's — into its saved state). A leak that cannot be repaired
    /// (a duck on PipeWire: a blind write would also set a mute nobody knows) stays in the journal for the next
    /// start. Calls `done` with (repaired, left) once the server has answered.
    public func repairRecordedLeaks(_ done: @escaping (Int, Int) -> Void) {
        loop.assertOnLoop()
        guard let c = context, isConnected else { return done(0, session.ledger.leaks.count) }
        var repaired = 0
        // The stream operations sent so far, and the writes below, must reach the server before anyone stops.
        let finish = { [weak self] in
            guard let self else { return done(repaired, 0) }
            self.writeJournal()
            self.flush { done(repaired, self.session.ledger.leaks.count) }
        }
        let method = session.repairMethod
        if session.ledger.leaks.isEmpty || method == .none {
            finish()
        } else if method == .readAndWriteBack {
            pendingOperations += 1
            c.restoreEntries { [weak self] entries in
                guard let self else { return }
                // A key the list lacks: the server saved nothing for it, so nothing of audiod's is in it.
                let repairs = self.session.ledger.repairRecorded(
                    entries?.map(Self.ledgerEntry), now: self.monotonicNow())
                for r in repairs {
                    guard let entry = entries?.first(where: { $0.name == r.key }) else { continue }
                    self.writeEntry(entry, r)
                    repaired += 1
                }
                self.finishOperation()
                finish()
            }
        } else {
            // pipewire-pulse cannot delete an entry (its DELETE only acknowledges) and lists only what was written
            // through it: every leaked entry is overwritten with the user's values — the mute always (pipewire-pulse
            // writes it with every entry), the volume where the journal has the user's — then read back until
            // WirePlumber has taken them (the read lists an entry once WirePlumber has it).
            let writes = session.ledger.blindRepairs
            for w in writes { writeBlind(w) }
            let confirming: (@escaping (Set<String>) -> Void) -> Void
            if method == .writeBlindConfirmByProbe {
                // WirePlumber 0.5 takes the write into pipewire-pulse's list but not into its state: only a stream
                // of the key shows what the next one starts with.
                confirming = { [weak self] in self?.probeRepair(writes, $0) ?? $0([]) }
            } else {
                confirming = { [weak self] in self?.confirm(writes, attempt: 1, $0) ?? $0([]) }
            }
            confirming { [weak self] confirmed in
                guard let self else { return done(confirmed.count, 0) }
                self.session.ledger.confirmed(confirmed)
                repaired = confirmed.count
                if confirmed.count < writes.count {
                    self.logger.warning(
                        "\(writes.count - confirmed.count) restore-database entr\(writes.count - confirmed.count == 1 ? "y was" : "ies were") not confirmed; the journal keeps them for the next start"
                    )
                }
                finish()
            }
        }
    }

    /// Repairs each entry through probes of its key (RepairProbe.swift): a probe shows what a new stream of the key
    /// starts with; where that is audiod's value, the user's is written on the probe, and WirePlumber saves it into
    /// the key; then a second probe must start with the user's values. Up to three rounds per key. The keys are
    /// probed side by side, up to `probeWidth` at a time: a probe takes about a third of a second, and after a
    /// sound-server restart a dozen keys must fit in the stop's 3 s (one after another, the last ones were never
    /// checked). Keys are independent — each probe is its own client, filed under its own key. Calls `done` with the
    /// keys confirmed.
    private func probeRepair(_ writes: [RestoreLedger.Repair], _ done: @escaping (Set<String>) -> Void) {
        var queue = writes[...]
        var confirmed: Set<String> = []
        var running = 0
        var finished = false
        // A probe may fail at once (a refused connection) and answer within `probeKey`: `starting` keeps such an
        // answer's `startNext` from finishing the repair under the loop that is still starting keys.
        var starting = false
        func startNext() {
            guard !finished, !starting else { return }
            starting = true
            while running < Self.probeWidth, let w = queue.popFirst() {
                guard let props = RepairProbe.clientProperties(forKey: w.key) else {
                    // No probe can stand for this key: it stays in the journal.
                    continue
                }
                running += 1
                probeKey(w, props, round: 1) { ok in
                    running -= 1
                    if ok { confirmed.insert(w.key) }
                    startNext()
                }
            }
            starting = false
            if running == 0, queue.isEmpty {
                finished = true
                done(confirmed)
            }
        }
        guard context != nil else { return done([]) }
        startNext()
    }

    /// How many keys are probed at once: each probe is a connection of its own to the server, and WirePlumber links
    /// each stream it makes.
    static let probeWidth = 8

    /// One key's probe rounds (see `probeRepair`); `done` gets whether a probe finally started with the user's values.
    private func probeKey(
        _ w: RestoreLedger.Repair, _ props: [String: String], round: Int, _ done: @escaping (Bool) -> Void
    ) {
        guard context != nil else { return done(false) }
        let next = { [weak self] (ok: Bool) in
            guard let self else { return done(false) }
            if ok || round >= 3 {
                if !ok { self.logger.notice("restore-database entry \(w.key): probes still start with audiod's value") }
                done(ok)
            } else {
                self.probeKey(w, props, round: round + 1, done)
            }
        }
        openProbe(props) { [weak self] first, close in
            guard let self, let first, let c = self.context else {
                close()
                return next(false)
            }
            let volumeWrite =
                !w.volume.isEmpty
                && !self.session.ledger.shows(
                    w, in: [RestoreLedger.Entry(key: w.key, muted: w.muted, volume: first.volume)])
            // Both writes are counted before either is sent: one refused at once answers at once.
            let writes = (first.muted != w.muted ? 1 : 0) + (volumeWrite ? 1 : 0)
            var writing = writes
            let written = { [weak self] in
                guard let self else {
                    close()
                    return next(false)
                }
                // WirePlumber saves the probe's change when the node reports it, which a busy WirePlumber (a dozen
                // probes at once) does late: the first probe stays until the second has been read, for a node gone
                // before its change was seen saves nothing. Each round waits longer.
                self.probeAfter(UInt64(round) * 100_000_000) { [weak self] in
                    guard let self else {
                        close()
                        return next(false)
                    }
                    self.openProbe(props) { [weak self] second, closeSecond in
                        closeSecond()
                        close()
                        guard let self, let second else { return next(false) }
                        let shown = RestoreLedger.Entry(key: w.key, muted: second.muted, volume: second.volume)
                        let ok = self.session.ledger.shows(w, in: [shown])
                        self.logger.debug(
                            "restore-database entry \(w.key) probed: a new stream starts \(second.muted ? "muted" : "unmuted") at \(second.volume)\(ok ? "" : "; writing again")"
                        )
                        next(ok)
                    }
                }
            }
            let acknowledged = { (_: Bool) in
                writing -= 1
                if writing == 0 { written() }
            }
            self.logger.debug(
                "restore-database entry \(w.key) probed: a new stream starts \(first.muted ? "muted" : "unmuted") at \(first.volume); \(writes) write(s) — \(w.because)"
            )
            if first.muted != w.muted { c.setMute(record: false, index: first.index, w.muted, acknowledged) }
            if volumeWrite { c.setVolume(record: false, index: first.index, w.volume, acknowledged) }
            if writes == 0 { written() }
        }
    }

    /// Runs `handler` on the loop after `ns`, on a timer of its own (probes of several keys wait side by side); the
    /// timer ends with the connection (`dropConnection`), and then the handler never runs.
    private func probeAfter(_ ns: UInt64, _ handler: @escaping () -> Void) {
        let id = nextProbeTimer
        nextProbeTimer &+= 1
        let timer = loop.timer(afterNanoseconds: ns) { [weak self] in
            self?.probeTimers[id] = nil
            handler()
        }
        guard let timer else {
            // No timerfd left: go on at once rather than never.
            return handler()
        }
        probeTimers[id] = timer
    }

    /// Opens a repair probe with these client properties and reads its stream once WirePlumber has linked it (and
    /// given it the key's saved values): `read` gets the stream (nil: none within 2 s) and the probe's `close`.
    private func openProbe(
        _ props: [String: String], _ read: @escaping (RawStream?, _ close: @escaping () -> Void) -> Void
    ) {
        guard context != nil else { return read(nil, {}) }
        var probe: RepairProbe?
        var client: UInt32?
        let close = { [weak self] in
            if let c = client { self?.session.ownClientClosed(c) }
            guard let p = probe else { return }
            probe = nil
            p.close()
            self?.probes.removeAll { $0 === p }
        }
        let made = RepairProbe(
            loop: loop, server: options.server, clientProperties: props,
            connected: { [weak self] index in
                client = index
                // A stream of this client heard before (a client index of a connection that just ended) is dropped.
                guard let self else { return }
                self.execute(self.session.ownClientConnected(index))
            },
            ready: { [weak self] stream in
                guard let self, let stream else { return read(nil, close) }
                self.readLinked(stream, attempt: 1) { [weak self] raw in
                    // WirePlumber saves a probe's whole Props into its key, the factor it started with too: where a
                    // ramp may have left that low, every probe sets it to 1.0 (and lets go of the node as it closes).
                    guard let self, let pw = self.pipewire, pw.ramps,
                        let node = raw?.properties["object.id"].flatMap({ UInt32($0) }), pw.set(node: node, factor: 1)
                    else { return read(raw, close) }
                    read(raw) { [weak self] in
                        self?.pipewire?.release(node: node)
                        close()
                    }
                }
            })
        // One that failed at once has answered and closed itself already.
        guard made.isOpen else { return }
        probe = made
        probes.append(made)
    }

    /// Reads a playback stream every 20 ms until it is linked, then once more 50 ms later (WirePlumber restores a
    /// stream's values around its link); nil after 2 s.
    private func readLinked(_ index: UInt32, attempt: Int, _ done: @escaping (RawStream?) -> Void) {
        guard let c = context else { return done(nil) }
        c.stream(record: false, index: index) { [weak self] raw in
            guard let self else { return done(nil) }
            let linked = raw.map { $0.device != UInt32.max } ?? false
            guard linked || attempt < 100 else { return done(nil) }
            self.probeAfter(linked ? 50_000_000 : 20_000_000) { [weak self] in
                guard let self else { return done(nil) }
                if linked {
                    c.stream(record: false, index: index) { done($0) }
                } else {
                    self.readLinked(index, attempt: attempt + 1, done)
                }
            }
        }
    }

    /// Reads pipewire-pulse's entries until each written one shows the values written (`RestoreLedger.blindRound`
    /// says when to write again and when to stop); calls `done` with the names confirmed.
    private func confirm(_ writes: [RestoreLedger.Repair], attempt: Int, _ done: @escaping (Set<String>) -> Void) {
        guard !writes.isEmpty, let c = context else { return done([]) }
        c.restoreEntries { [weak self] entries in
            guard let self else { return done([]) }
            let round = self.session.ledger.blindRound(
                writes, listed: (entries ?? []).map(Self.ledgerEntry), attempt: attempt)
            if round.done { return done(round.confirmed) }
            for w in round.rewrite {
                self.writeBlind(w)
            }
            self.confirmTimer = self.loop.timer(afterNanoseconds: 20_000_000) { [weak self] in
                self?.confirmTimer = nil
                self?.confirm(writes, attempt: attempt + 1, done)
            }
        }
    }

    /// Lists every stream again and reports those not yet known, then calls `done` (at once when not connected).
    /// The last step of a stop, after the restore database is repaired: a stream the server made before the repair
    /// reached it may carry a leaked value that audiod has not heard of yet, and would save it again on its next
    /// change. The list, answered after the repair, shows every such stream.
    public func sweep(_ done: @escaping () -> Void) {
        loop.assertOnLoop()
        guard let c = context, isConnected else { return done() }
        let seq = session.listIssued()
        c.streams(record: false) { [weak self] list in
            guard let self else { return done() }
            for s in list { self.listed(s, seq: seq) }
            guard let c = self.context else { return done() }
            c.streams(record: true) { [weak self] list in
                guard let self else { return done() }
                for s in list { self.listed(s, seq: seq) }
                self.session.listDone(seq)
                done()
            }
        }
    }

    /// Streams that appeared lately and are not yet linked to a device: on PipeWire, WirePlumber gives a new stream
    /// its saved values around the time it links, so a stop waits for these (bounded) to correct what they show.
    public var hasUnlinkedNewStreams: Bool { session.hasUnlinkedNewStreams(now: monotonicNow()) }

    /// How long a stop waits before it repairs the restore database (`Flavor.settlesBeforeRepairNanoseconds`).
    public var restoreSettleBeforeRepairNanoseconds: UInt64 { session.flavor?.settlesBeforeRepairNanoseconds ?? 0 }
    /// Runs `done` once the server has had time to save what audiod wrote: at once where it saves at once (or when
    /// nothing was written), else `Flavor.savesStateAfterNanoseconds` and a margin later. The end of a stop and of
    /// `--restore`: on PipeWire a server that dies before then comes back with audiod's policy values saved, and
    /// nobody would put the user's back (seed 6 of the random test).
    public func afterServerSaved(wrote: Bool, _ done: @escaping () -> Void) {
        var wait = wrote ? session.flavor?.savesStateAfterNanoseconds ?? 0 : 0
        // What the journal's `U` lines say the server has not saved yet (a lift just before the stop, or a killed
        // run's, taken up by `--restore`): the lines go only once it has, so wait for that too.
        if let settle = session.ledger.pendingSavesSettle(now: monotonicNow()) { wait = max(wait, settle) }
        let saved = { [weak self] in
            self?.forgetPendingSaves()
            done()
        }
        guard wait > 0, let t = loop.timer(afterNanoseconds: wait + 100_000_000, saved) else { return saved() }
        saveWait = t
    }

    /// The server has saved: the journal's `U` lines go, and a journal that describes nothing else goes with them
    /// (a clean stop leaves none behind, even when a `u` line was appended to it meanwhile).
    private func forgetPendingSaves() {
        pendingSavesWritten.removeAll()
        pendingSavesTimer?.cancel()
        pendingSavesTimer = nil
        journaling { log, cookie in
            var j = session.journal(cookie: cookie)
            j.unsaved = [:]
            try log.write(j)
        }
    }

    /// The wait of `afterServerSaved`.
    private var saveWait: LoopTimer?

    /// A blind write on pipewire-pulse, which turns it into a `route-settings` metadata value that WirePlumber takes
    /// only when it changes: the same values written again (an earlier repair of the key, a rewrite) would reach
    /// nobody while WirePlumber's state holds audiod's mute since (random test, seed 896100 on PipeWire 0.3.65: a
    /// repair confirmed by the list, and the key's next stream started muted). So an entry that differs comes first
    /// — the volume 1 % off, or where no volume is written the other mute — then the one meant, back to back.
    private func writeBlind(_ w: RestoreLedger.Repair) {
        var nudge = w
        if let first = nudge.volume.first {
            // pipewire-pulse prints the cubic volume with six decimals: a step of 1 % shows at any level.
            nudge.volume[0] = first > 655 ? first - 655 : first + 655
        } else {
            // For the moment between the two writes a stream of the key that starts would get the other mute; the
            // leak stays journaled until the second is confirmed.
            nudge.muted.toggle()
        }
        writeEntry(
            PulseContext.blindEntry(name: nudge.key, volume: nudge.volume, muted: nudge.muted), nudge, quiet: true)
        writeEntry(PulseContext.blindEntry(name: w.key, volume: w.volume, muted: w.muted), w)
    }

    /// Writes `entry` with the ledger's values in place of the server's.
    private func writeEntry(_ read: PulseContext.RestoreEntry, _ repair: RestoreLedger.Repair, quiet: Bool = false) {
        guard let c = context else { return }
        var entry = read
        entry.muted = repair.muted
        entry.volume = repair.volume
        // Every restore-database write, at debug, beside the stream writes, with the decision it carries out.
        if !quiet {
            logger.debug(
                "restore-database entry \(entry.name) written: mute \(entry.muted), volume \(entry.volume.isEmpty ? "unchanged" : "\(Volume(channels: entry.volume))") — \(repair.because)"
            )
        }
        pendingOperations += 1
        c.writeRestoreEntry(entry) { [weak self] ok in
            if !ok {
                self?.logger.warning("could not write a restore-database entry", metadata: ["key": "\(entry.name)"])
            }
            self?.finishOperation()
        }
    }

    /// Calls `done` once every operation sent so far has been answered (or the connection is gone). With
    /// `ramps`, also once every server ramp has ended and every factor is back at 1.0 (the stop path: the
    /// connection must not close on a factor still below 1.0).
    public func flush(ramps: Bool = false, _ done: @escaping () -> Void) {
        loop.assertOnLoop()
        if ramps, let pw = pipewire,
            !self.ramps.isEmpty || !rampUps.isEmpty || !volumeRamps.isEmpty || !factorRechecks.isEmpty
                || !factorRepairs.isEmpty || !pw.isIdle
                || !pw.isReady
        {
            rampWaiters.append { [weak self] in self?.flush(ramps: true, done) }
            return
        }
        guard context != nil, pendingOperations > 0 else { return done() }
        flushWaiters.append(done)
    }

    private var rampWaiters: [() -> Void] = []

    /// Runs the stop path's waiters once no ramp or factor check is left.
    private func rampsSettled() {
        guard ramps.isEmpty, rampUps.isEmpty, volumeRamps.isEmpty, factorRechecks.isEmpty, factorRepairs.isEmpty,
            pipewire.map({ $0.isIdle && $0.isReady }) ?? true,
            !rampWaiters.isEmpty
        else { return }
        let waiters = rampWaiters
        rampWaiters.removeAll()
        for w in waiters { w() }
    }

    /// What the engine holds on these streams now (nil: nothing) — only the streams a step may have changed, so
    /// that a step's journal costs what it changed. Journals it before the operations are sent.
    public func updateApplied(_ changes: [(StreamID, AppliedChange?)]) {
        loop.assertOnLoop()
        execute(session.appliedChanged(changes, now: monotonicNow()))
        journalPendingSaves()
    }

    /// The journal's `U` lines brought to what the server may not have saved yet (only where it saves late).
    private func journalPendingSaves() {
        guard isConnected, !holdingJournal else { return }
        let pending = session.ledger.pendingSaves(now: monotonicNow())
        if pending != pendingSavesWritten.mapValues(\.leak) {
            let wall = UInt64(max(0, time(nil)))
            var changes: [(String, Journal.Unsaved?)] = []
            for (key, leak) in pending where pendingSavesWritten[key]?.leak != leak {
                let u = Journal.Unsaved(leak: leak, at: wall)
                pendingSavesWritten[key] = u
                changes.append((key, u))
            }
            for key in pendingSavesWritten.keys where pending[key] == nil {
                pendingSavesWritten[key] = nil
                changes.append((key, nil))
            }
            journaling { log, cookie in try log.update(cookie: cookie, unsaved: changes) }
        }
        // Once the server has saved, the lines go, even if nothing else happens by then (one timer, armed while
        // lines are written; activity meanwhile only moves the moment).
        guard !pendingSavesWritten.isEmpty, pendingSavesTimer == nil else { return }
        let settle = session.ledger.pendingSavesSettle(now: monotonicNow()) ?? 0
        pendingSavesTimer = loop.timer(afterNanoseconds: settle + 10_000_000) { [weak self] in
            self?.pendingSavesTimer = nil
            self?.journalPendingSaves()
        }
    }

    private func journalStreams(_ ids: [StreamID]) {
        guard !ids.isEmpty, isConnected else { return }
        journaling { log, cookie in
            try log.update(
                cookie: cookie,
                streams: ids.map { id in
                    (id.kind == .record, id.index, self.session.journalEntry(id))
                })
        }
    }

    /// Everything the engine holds (`Engine.appliedChanges`): for stopping and `--restore`, which look at all.
    /// `written`: the writes that carry these changes were already acknowledged (a stop's, after its flush), so a
    /// lift is journaled at once instead of waiting for a write that will not come (which kept a clean stop's
    /// journal, and the next start unmuted a stream the user muted meanwhile: seed 733786).
    public func updateApplied(all changes: [AppliedChange], written: Bool = false) {
        var next: [StreamID: AppliedChange] = [:]
        for c in changes { next[c.stream] = c }
        var list: [(StreamID, AppliedChange?)] = next.map { ($0.key, $0.value) }
        for id in session.ledger.applied.keys where next[id] == nil { list.append((id, nil)) }
        updateApplied(list)
        if written { execute(session.writesSent()) }
    }

    private func journal() -> JournalLog? {
        guard let path = options.journalPath else { return nil }
        if journalLog == nil { journalLog = JournalLog(path: path) }
        return journalLog
    }

    /// Writes the journal (unless it is held while the streams are listed, or there is no server run to name),
    /// logging a failure: audiod goes on enforcing without it.
    private func journaling(_ write: (JournalLog, _ cookie: UInt32) throws -> Void) {
        guard !holdingJournal, let server, let log = journal() else { return }
        do {
            try write(log, server.cookie)
        } catch {
            logger.error("cannot write the journal", metadata: ["path": "\(log.path)", "error": "\(error)"])
        }
    }

    /// One restore-database entry's leak as it is now: a line appended, as a step's streams are.
    private func journalLeak(_ key: String) {
        journaling { log, cookie in try log.update(cookie: cookie, leak: key, session.ledger.leaks[key]) }
    }

    /// The whole journal, for connecting and for repairing the leaks.
    private func writeJournal() {
        let pending = session.ledger.pendingSaves(now: monotonicNow())
        pendingSavesWritten = pendingSavesWritten.filter { pending[$0.key] == $0.value.leak }
        let wall = UInt64(max(0, time(nil)))
        for (key, leak) in pending where pendingSavesWritten[key] == nil {
            pendingSavesWritten[key] = Journal.Unsaved(leak: leak, at: wall)
        }
        journaling { log, cookie in
            var j = session.journal(cookie: cookie)
            j.unsaved = pendingSavesWritten
            try log.write(j)
        }
    }
}

extension PulseBackend: PulseContextDelegate {
    func contextStateChanged(_ state: PulseContext.State) {
        switch state {
        case .connecting: break
        case .ready: ready()
        case .failed(let error):
            logger.warning("sound server connection lost", metadata: ["error": "\(error)"])
            dropConnection(reason: error.description)
        }
    }

    func subscriptionEvent(_ facility: Facility, _ change: Change, index: UInt32) {
        switch facility {
        case .playback, .record:
            let id = StreamID(facility == .record ? .record : .playback, index)
            // --log-level trace: when the server told audiod, to split a new stream's time into the server's and
            // the read's (CLOCK_MONOTONIC ns, as the arbiter's "step timing").
            logger.trace(
                "stream event",
                metadata: [
                    "at": "\(DispatchTime.now().uptimeNanoseconds)", "stream": "\(id)", "change": "\(change)",
                ])
            if change == .remove { removed(id) } else { read(id) }
        case .sink: deviceChanged(source: false, index: index, change)
        case .source: deviceChanged(source: true, index: index, change)
        case .client: clientChanged(index: index, change)
        case .server:
            context?.serverInfo { [weak self] info in
                if let info { self?.server = info }
            }
        }
    }
}

/// The index, which only `desktopQueue` touches; the loop holds the box to hand it back there.
private final class IndexBox: @unchecked Sendable {
    let index: DesktopEntryIndex
    init(_ i: DesktopEntryIndex) { index = i }
}
