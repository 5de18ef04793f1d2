import AudioPolicy
import Testing

@testable import PulseBackend

/// The connection's life, scripted: no server, no clock.
struct ServerSessionTests {
    struct Value: ServerStreamValue {
        var muted = false
        var volume: [UInt32] = [65536]
        var id = StreamID(.playback, 1)
        var client: UInt32?
        var device: UInt32 = 0
        var properties: [String: String] = [:]
        var corked = false
    }

    typealias Session = ServerSession<Value>
    static let ms: UInt64 = 1_000_000

    static func session() -> Session {
        Session(
            tracker: StreamTracker(volumeTolerance: 64),
            ledger: RestoreLedger(
                volumeTolerance: 64, leakWindowNanoseconds: 2_000 * ms, restoreSettleNanoseconds: 2_000 * ms),
            initialBackoffNanoseconds: 50 * ms, maximumBackoffNanoseconds: 1_000 * ms)
    }

    /// Connects and answers every first read but `except`, in the order given.
    static func enumerate(
        _ s: inout Session, name: String?, restoreDatabase: Bool,
        order: [Session.FirstRead] = Session.FirstRead.allCases
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
        #expect(
            Self.enumerate(&s, name: "pulseaudio 16.1", restoreDatabase: true, order: reversed) == .ready(.pulseAudio))
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
        #expect(
            f.settlesBeforeRepairNanoseconds == 300 * Self.ms, "WirePlumber saves a change once the node reports it")
        #expect(p.settlesBeforeRepairNanoseconds == 0, "module-stream-restore saves at once")
    }

    @Test func theRestoreRepairMethodIsChosenByTheServersKindInOnePlace() {
        var s = Self.session()
        #expect(s.repairMethod == .none, "not connected")
        _ = Self.enumerate(&s, name: "pulseaudio 16.1", restoreDatabase: true)
        #expect(s.repairMethod == .readAndWriteBack)
        _ = s.dropped()
        _ = Self.enumerate(&s, name: "pulseaudio 16.1", restoreDatabase: false)
        #expect(s.repairMethod == .none, "a PulseAudio without module-stream-restore keeps nothing to repair")
        _ = s.dropped()
        _ = Self.enumerate(&s, name: "PulseAudio (on PipeWire 0.3.65)", restoreDatabase: true)
        #expect(s.repairMethod == .writeBlindConfirmByList, "WirePlumber 0.4 lists a write once it merged it")
        _ = s.dropped()
        #expect(s.repairMethod == .none, "dropped")
        _ = Self.enumerate(&s, name: "PulseAudio (on PipeWire 1.4.2)", restoreDatabase: true)
        #expect(s.repairMethod == .writeBlindConfirmByProbe, "on 1.x the list proves nothing")
    }

    @Test func aServerThatNeverDescribesItselfIsDropped() {
        var s = Self.session()
        #expect(
            Self.enumerate(&s, name: nil, restoreDatabase: false) == .drop(reason: "the server did not describe itself")
        )
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
        let first = s.connecting()
        let second = s.connecting()
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

    static func sink(_ index: UInt32, _ name: String, available: Bool = true) -> RawDevice {
        RawDevice(index: index, name: name, available: available)
    }

    @Test func devicesThatCameAndWentWhileDisconnectedAreReportedOnceTheFirstStateIsIn() {
        var s = Self.session()
        _ = s.connecting()
        _ = s.connected()
        s.listed(sinks: [Self.sink(1, "speakers"), Self.sink(2, "headphones")])
        let r1 = s.devicesSettled()
        #expect(r1.events == [.deviceAppeared("headphones"), .deviceAppeared("speakers")])
        // The server restarts without the headphones; the new server numbers its sinks anew.
        _ = s.dropped()
        _ = s.connecting()
        _ = s.connected()
        s.listed(sinks: [Self.sink(7, "speakers"), Self.sink(8, "hdmi", available: false)])
        let r2 = s.devicesSettled()
        #expect(r2.events == [.deviceRemoved("headphones")], "a sink of the old connection counted as available")
        let r3 = s.devicesSettled()
        #expect(r3.isEmpty)
    }

    @Test func aSinkUnpluggedAndPluggedInIsGoneAndBackForTheEngineOnceEach() {
        var s = Self.session()
        _ = Self.enumerate(&s, name: "pulseaudio 16.1", restoreDatabase: true)
        let r4 = s.deviceRead(Self.sink(3, "headphones"), source: false, defaultSource: nil)
        #expect(r4.events == [.deviceAppeared("headphones")])
        let r5 = s.deviceRead(Self.sink(3, "headphones"), source: false, defaultSource: nil)
        #expect(r5.isEmpty, "no news twice")
        let r6 = s.deviceRead(Self.sink(3, "headphones", available: false), source: false, defaultSource: nil)
        #expect(r6.events == [.deviceRemoved("headphones")])
        let r7 = s.deviceRead(Self.sink(3, "headphones"), source: false, defaultSource: nil)
        #expect(r7.events == [.deviceAppeared("headphones")])
        let r8 = s.deviceRemoved(index: 3, source: false)
        #expect(r8.events == [.deviceRemoved("headphones")])
        let r9 = s.deviceRemoved(index: 3, source: false)
        #expect(r9.events.isEmpty, "removed twice")
        // While the first state is read, only the table changes.
        _ = s.dropped()
        _ = s.connecting()
        _ = s.connected()
        let r10 = s.deviceRead(Self.sink(4, "usb"), source: false, defaultSource: nil)
        #expect(r10.isEmpty)
        #expect(s.sinks[4]?.name == "usb")
    }

    @Test func theMicrophoneSwitchIsASourceMuteThatChangedAndNotAMonitors() {
        var s = Self.session()
        _ = Self.enumerate(&s, name: "pulseaudio 16.1", restoreDatabase: true)
        let mic = RawDevice(index: 5, name: "mic", available: true)
        let r11 = s.deviceRead(mic, source: true, defaultSource: "mic")
        #expect(r11.events.isEmpty, "a source first seen changed nothing")
        var muted = mic
        muted.muted = true
        let r12 = s.deviceRead(muted, source: true, defaultSource: "mic")
        #expect(r12.events == [.microphoneMuted(source: "mic", muted: true, isDefault: true)])
        let r13 = s.deviceRead(muted, source: true, defaultSource: "mic")
        #expect(r13.events.isEmpty)
        let r14 = s.deviceRead(mic, source: true, defaultSource: "other")
        #expect(r14.events == [.microphoneMuted(source: "mic", muted: false, isDefault: false)])
        let monitor = RawDevice(index: 6, name: "speakers.monitor", available: true, isMonitor: true)
        _ = s.deviceRead(monitor, source: true, defaultSource: nil)
        var mutedMonitor = monitor
        mutedMonitor.muted = true
        let r15 = s.deviceRead(mutedMonitor, source: true, defaultSource: nil)
        #expect(r15.events.isEmpty)
        let r16 = s.deviceRemoved(index: 5, source: true)
        #expect(r16.isEmpty, "a source is no output device")
    }

    @Test func aClientsStreamsAreReportedAgainOnlyWhenAKnownClientChanged() {
        var s = Self.session()
        let r17 = s.connecting()
        #expect(r17)
        _ = s.connected()
        s.listed(clients: [RawClient(index: 1, properties: ["application.name": "mpv"])])
        let r18 = s.clientRead(RawClient(index: 1, properties: ["application.name": "mpv", "x": "1"]))
        #expect(r18.isEmpty, "while the first state is read")
        for r in Session.FirstRead.allCases { _ = s.firstReadDone(r) }
        s.serverDescribed(name: "pulseaudio 16.1")
        _ = s.dropped()
        _ = s.connecting()
        _ = s.connected()
        s.serverDescribed(name: "pulseaudio 16.1")
        for r in Session.FirstRead.allCases { _ = s.firstReadDone(r) }
        #expect(s.clients.isEmpty, "a dropped connection's clients")
        let r19 = s.clientRead(RawClient(index: 2, properties: [:]))
        #expect(r19.isEmpty, "a new client has no reported streams")
        let id = StreamID.playback(4)
        _ = s.accepted(Value(muted: false, id: id, client: 2))
        _ = s.report(id, now: 0)
        let r20 = s.clientRead(RawClient(index: 2, properties: [:]))
        #expect(r20.isEmpty, "unchanged")
        let r21 = s.clientRead(RawClient(index: 2, properties: ["PULSE_PROP": "audiod.session=3"]))
        #expect(r21 == [.report(id)], "its reported stream is reported again")
        s.clientRemoved(index: 2)
        #expect(s.clients[2] == nil)
    }
}
