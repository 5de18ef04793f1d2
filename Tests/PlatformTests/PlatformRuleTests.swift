import AudioPolicy
import DBusTransport
import Dispatch
import Glibc
import Testing

@testable import Platform

/// The platform's rules without a bus: what the watchers decide from what their services said, scripted.
final class RecordingHost: PlatformHost {
    var engine = Engine()
    var events: [Event] = []
    private var clock: UInt64 = 0

    @discardableResult func handle(_ event: Event) -> [Effect] {
        events.append(event)
        clock += 1_000_000
        return engine.handle(event, at: Instant(nanoseconds: clock))
    }
}

struct CallRuleTests {
    @Test("each source's states map to SPEC §10's phases, unknown and terminated ones to no call")
    func phases() {
        #expect(
            [1, 2, 3, 4, 5, 6, 7, 0, 99].map(CallPhase.modemManager)
                == [.dialing, .dialing, .ringing, .active, .held, .ringing, nil, nil, nil])
        #expect(
            [1, 2, 3, 4, 5, 6, 7, 0].map(CallPhase.gnomeCalls)
                == [.active, .held, .dialing, .dialing, .ringing, .ringing, nil, nil])
    }

    @Test("CallState is the first that applies: ringing, dialing, active, held — over every source")
    func precedence() {
        func state(_ calls: [String: [String: CallPhase]]) -> CallState? {
            PlatformCalls.merge(calls, apps: [:])?.state
        }
        #expect(state([:]) == nil)
        #expect(state(["mm": ["a": .held]]) == .held)
        #expect(state(["mm": ["a": .held, "b": .active]]) == .active)
        #expect(state(["mm": ["a": .active], "gnome": ["c": .dialing]]) == .dialing)
        #expect(state(["mm": ["a": .active, "b": .dialing], "gnome": ["c": .ringing]]) == .ringing)
    }

    @Test("the call only rings while every call rings in or waits")
    func onlyRings() {
        #expect(PlatformCalls.merge(["mm": ["a": .ringing, "b": .ringing]], apps: [:])?.allRinging == true)
        #expect(PlatformCalls.merge(["mm": ["a": .ringing], "gnome": ["b": .active]], apps: [:])?.allRinging == false)
    }

    @Test("the call app is a source's with calls, chosen in a fixed order so that two sources never flip it")
    func callApp() {
        let apps = [
            "GNOME Calls": (id: "org.gnome.Calls", name: "Calls"),
            "Plasma's dialer": (id: "org.kde.phone.dialer", name: "Phone"),
        ]
        let both = PlatformCalls.merge(["Plasma's dialer": ["x": .active], "GNOME Calls": ["y": .active]], apps: apps)
        #expect(both?.appID == "org.gnome.Calls")
        #expect(PlatformCalls.merge(["ModemManager": ["x": .active]], apps: apps)?.appID == nil)
    }

    @Test("the engine hears of the merge only when it changes; a source's bus lost ends its calls without notify")
    func publishing() {
        let host = RecordingHost()
        let calls = PlatformCalls(host: host, logger: .init(label: "test"))
        calls.set("ModemManager", call: "/c/1", .ringing)
        calls.set("ModemManager", call: "/c/1", .ringing)
        calls.set("ModemManager", call: "/c/2", .ringing)
        #expect(host.events.count == 1, "\(host.events)")
        calls.set("GNOME Calls", call: "/g/1", .held)
        #expect(host.events.count == 2, "\(host.events)")
        calls.clear("ModemManager", busLost: true)
        guard case .platformCallSourceLost(let remaining)? = host.events.last else {
            Issue.record("no platformCallSourceLost: \(host.events)")
            return
        }
        #expect(remaining?.state == .held)
        calls.clear("GNOME Calls")
        guard case .platformCall(nil)? = host.events.last else {
            Issue.record("the last call's end is not announced with notify: \(host.events)")
            return
        }
    }

    @Test("more calls than a phone has are not followed")
    func bounded() {
        let host = RecordingHost()
        let calls = PlatformCalls(host: host, logger: .init(label: "test"))
        for i in 0..<(PlatformCalls.maximumCallsPerSource + 10) { calls.set("ModemManager", call: "/c/\(i)", .held) }
        for i in 0..<PlatformCalls.maximumCallsPerSource { calls.set("ModemManager", call: "/c/\(i)", nil) }
        guard case .platformCall(nil)? = host.events.last else {
            Issue.record("calls past the bound were kept: \(host.events.last.map { "\($0)" } ?? "none")")
            return
        }
    }
}

struct FeedbackdRuleTests {
    @Test("audiod's own write comes back as an echo and is not taken for a new change")
    func echoOfOneWrite() {
        var f = EchoFilter()
        f.wrote("quiet", at: 0)
        let took1 = f.take("quiet", at: 10_000_000)
        #expect(took1)
        // The next announcement is the user's.
        let took2 = f.take("full", at: 20_000_000)
        #expect(took2)
    }

    @Test("SilentMode on then off quickly: the echo of on, arriving after off was written, is out of date")
    func staleEcho() {
        var f = EchoFilter()
        f.wrote("quiet", at: 0)
        f.wrote("full", at: 5_000_000)
        let took3 = f.take("quiet", at: 10_000_000)
        #expect(!took3, "the old echo flipped SilentMode back on")
        let took4 = f.take("full", at: 15_000_000)
        #expect(took4)
    }

    @Test("at most 16 writes wait for their echo: a flood of silent-mode flips keeps the newest")
    func boundedEchoes() {
        var f = EchoFilter()
        for i in 0..<1_000 { f.wrote(i % 2 == 0 ? "quiet" : "full", at: UInt64(i) * 100_000) }
        #expect(f.pendingCount == EchoFilter.maximumPending)
        // The echoes of the 16 kept come back in order: only the last is taken (each earlier one is out of date).
        var taken: [Bool] = []
        for i in 984..<1_000 { taken.append(f.take(i % 2 == 0 ? "quiet" : "full", at: 100_000_000)) }
        #expect(taken == Array(repeating: false, count: 15) + [true])
        #expect(f.pendingCount == 0)
    }

    @Test("a profile no write explains is the user's; an echo that never came is forgotten after a second")
    func userChange() {
        var f = EchoFilter()
        f.wrote("quiet", at: 0)
        let took5 = f.take("silent", at: 10_000_000)
        #expect(took5)
        f.wrote("quiet", at: 20_000_000)
        f.wrote("full", at: 30_000_000)
        // A second later the first write's echo is gone from the list: "quiet" is a change of the user's.
        let took6 = f.take("quiet", at: 1_100_000_000)
        #expect(took6)
    }
}

struct SleepGateTests {
    /// Runs `body` on a PollLoop's thread and waits `seconds` for `done`.
    func onLoop(_ seconds: Double, _ body: @escaping (PollLoop, @escaping () -> Void) -> Void) throws -> Bool {
        let loop = try PollLoop()
        // Bound before the loop runs; from then on opened only on it.
        let box = loop.bind(body)
        loop.start()
        defer { loop.stop() }
        let done = DispatchSemaphore(value: 0)
        loop.execute { box.value(loop) { done.signal() } }
        return done.wait(timeout: .now() + seconds) == .success
    }

    @Test("the inhibitor is released within 150 ms even if a player never answers Pause")
    func releaseWithoutAnswer() throws {
        final class Times: @unchecked Sendable {
            var start: UInt64 = 0
            var end: UInt64 = 0
        }
        let t = Times()
        let ran = try onLoop(2) { loop, done in
            let host = RecordingHost()
            host.handle(
                .playerAppeared(PlayerInfo(id: PlayerID("org.mpris.MediaPlayer2.x"), pid: 42, status: .playing)))
            let gate = SleepGate(loop: loop, host: host)
            gate.pauseSent()
            t.start = DispatchTime.now().uptimeNanoseconds
            gate.afterPauses(of: [PlayerID("org.mpris.MediaPlayer2.x")], within: LockAndSleep.releaseWithinNanoseconds)
            {
                t.end = DispatchTime.now().uptimeNanoseconds
                withExtendedLifetime((gate, host)) { done() }
            }
        }
        #expect(ran)
        let ms = (t.end &- t.start) / 1_000_000
        #expect(ms >= 140 && ms < 400, "released after \(ms) ms")
    }

    @Test(
        "the inhibitor is released as soon as the Pause is answered (the player, with no running stream, no longer plays)"
    )
    func releaseOnPause() throws {
        final class Times: @unchecked Sendable { var ms: UInt64 = .max }
        let t = Times()
        let ran = try onLoop(2) { loop, done in
            let host = RecordingHost()
            let player = PlayerID("org.mpris.MediaPlayer2.x")
            host.handle(.playerAppeared(PlayerInfo(id: player, pid: 42, status: .playing)))
            let gate = SleepGate(loop: loop, host: host)
            gate.pauseSent()
            let start = DispatchTime.now().uptimeNanoseconds
            gate.afterPauses(of: [player], within: 1_000_000_000) {
                t.ms = (DispatchTime.now().uptimeNanoseconds - start) / 1_000_000
                withExtendedLifetime((gate, host)) { done() }
            }
            gate.check()
            _ = loop.dbusTimer(afterNanoseconds: 20_000_000) { gate.pauseAnswered() }
        }
        #expect(ran)
        #expect(t.ms >= 15 && t.ms < 500, "released after \(t.ms) ms")
    }
}
