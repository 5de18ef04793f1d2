@testable import AudioPolicy
import Testing

/// SPEC §10: the platform call — a ringing phase that spares sessions preferring no interruptions, an answer that
/// takes everything, a hold beside which a call may activate, and an end that lets everything resume.
@Suite struct PlatformScenarioTests {
    static let ringing = PlatformCall(state: .ringing, allRinging: true, appID: "org.gnome.Calls", applicationName: "Calls")
    static let active = PlatformCall(state: .active, allRinging: false, appID: "org.gnome.Calls", applicationName: "Calls")
    static let held = PlatformCall(state: .held, allRinging: false, appID: "org.gnome.Calls", applicationName: "Calls")

    func announces(_ effects: [Effect], _ state: CallState) -> Bool {
        effects.contains { if case .managerPropertiesChanged(let p) = $0 { p.contains(.callState(state)) } else { false } }
    }

    func callSession(_ effects: [Effect]) -> SessionID? {
        for case .sessionAdded(let v) in effects where v.identity.source == "platform" { return v.id }
        return nil
    }

    @Test func ringingInterruptsNonMixableSessionsOnlyAndAnswerTakesEverything() {
        var h = Harness()
        let music = h.session(pid: 10, "playback")
        _ = h.activate(music)
        _ = h.play(1, pid: 10)
        let chime = h.session(pid: 12, "playback", options: ["mix-with-others"])
        _ = h.activate(chime)
        let ring = h.send(.platformCall(Self.ringing))
        guard let call = callSession(ring) else {
            Issue.record("no platform call session: \(ring)")
            return
        }
        #expect(h.engine.callState == .ringing)
        #expect(announces(ring, .ringing))
        #expect(signals(ring).contains(.signal(music, .interruptionBegan(.call, interrupter: call))))
        #expect(!signals(ring).contains { if case .signal(chime, .interruptionBegan) = $0 { true } else { false } },
                "a mixable session was interrupted by a ring")
        // Answered: the mixable chime goes too.
        let answer = h.send(.platformCall(Self.active))
        #expect(signals(answer) == [.signal(chime, .interruptionBegan(.call, interrupter: call))])
        #expect(announces(answer, .active))
        // Ended: everything it interrupted may resume; the session object goes.
        let end = h.send(.platformCall(nil))
        #expect(signals(end).contains(.signal(music, .interruptionEnded(shouldResume: true))))
        #expect(signals(end).contains(.signal(chime, .interruptionEnded(shouldResume: true))))
        #expect(end.contains(.sessionRemoved(call)))
        #expect(h.engine.callState == .none)
    }

    @Test func aRecorderThatPrefersNoInterruptionsKeepsRecordingThroughTheRingUntilTheAnswer() {
        var h = Harness()
        let recorder = h.session(pid: 11, "record")
        _ = h.send(.setPrefersNoInterruptions(h.request(), recorder, true))
        #expect(h.view(recorder)?.prefersNoInterruptionsFromSystemAlerts == true)
        _ = h.activate(recorder)
        _ = h.record(1, pid: 11)
        let ring = h.send(.platformCall(Self.ringing))
        guard let call = callSession(ring) else {
            Issue.record("no platform call session")
            return
        }
        #expect(signals(ring).isEmpty, "the recorder was interrupted by a ring: \(ring)")
        #expect(h.engine.streamView(.record(1))?.policyMuted == false)
        let answer = h.send(.platformCall(Self.active))
        #expect(signals(answer) == [.signal(recorder, .interruptionBegan(.call, interrupter: call))])
        #expect(h.engine.streamView(.record(1))?.policyMuted == true)
        // Declined instead would have ended it; here it ends after the answer, and the recorder may resume.
        let end = h.send(.platformCall(nil))
        #expect(signals(end) == [.signal(recorder, .interruptionEnded(shouldResume: true))])
    }

    @Test func theCallAppsStreamsAreTheCallsAndNeverSilenced() {
        var h = Harness()
        _ = h.silent(true)
        let ring = h.send(.platformCall(Self.ringing))
        guard let call = callSession(ring) else {
            Issue.record("no platform call session")
            return
        }
        // GNOME Calls' own stream (its app id) belongs to the call, not to an implicit session of its own.
        let app = AppProfile(names: [.init("org.gnome.Calls", .launcherScope)])
        _ = h.send(.streamAppeared(StreamInfo(id: .playback(5), processChain: [50], applicationName: "Calls", app: app)))
        #expect(h.engine.streamView(.playback(5))?.session == call)
        #expect(h.engine.streamView(.playback(5))?.policyMuted == false)
        #expect(h.view(call)?.isImplicit == true)
        #expect(h.view(call)?.identity.source == "platform")
        // Nobody drives it over the bus: it follows the platform's call services alone.
        #expect(h.deactivate(call).last == .reply(h.lastRequest, .error(.accessDenied(
            "session \(call.rawValue) is the platform's call: it follows the platform's call services"))))
        #expect(h.view(call)?.active == true)
        // Nothing interrupts it: an explicit call is refused while it is not held, allowed beside it when it is.
        let softphone = h.session(pid: 20, "play-and-record", mode: "voice-chat")
        #expect(h.activate(softphone).last == .reply(h.lastRequest, .error(.insufficientPriority(call: call))))
        _ = h.send(.platformCall(Self.held))
        #expect(h.activate(softphone).last == h.ok)
        #expect(h.view(call)?.active == true && h.view(call)?.interrupted == false)
        // Taken off hold, it takes the audio from the softphone again.
        let resumed = h.send(.platformCall(Self.active))
        #expect(signals(resumed).contains(.signal(softphone, .interruptionBegan(.call, interrupter: call))))
    }

    @Test func aModemCallWithoutAnAppStillInterruptsAndResumes() {
        var h = Harness()
        let music = h.session(pid: 10, "playback")
        _ = h.activate(music)
        let ring = h.send(.platformCall(PlatformCall(state: .ringing, allRinging: true)))
        guard let call = callSession(ring) else {
            Issue.record("no platform call session")
            return
        }
        #expect(h.view(call)?.identity.appID == "platform-call")
        #expect(signals(ring) == [.signal(music, .interruptionBegan(.call, interrupter: call))])
        // A second call waits while the first is answered: not only ringing any more, still one platform call.
        let two = h.send(.platformCall(PlatformCall(state: .ringing, allRinging: false)))
        #expect(two.filter { if case .sessionAdded = $0 { true } else { false } }.isEmpty)
        #expect(h.engine.callState == .ringing)
        let end = h.send(.platformCall(nil))
        #expect(signals(end) == [.signal(music, .interruptionEnded(shouldResume: true))])
    }

    @Test func theMicrophoneSwitchInterruptsRecordersButNeverACallAndEndsWithoutResume() {
        var h = Harness()
        let recorder = h.session(pid: 11, "record")
        _ = h.activate(recorder)
        _ = h.record(1, pid: 11)
        let muted = h.send(.microphoneMuted(source: "mic", muted: true, isDefault: true))
        #expect(signals(muted) == [.signal(recorder, .interruptionBegan(.builtinMicMuted, interrupter: nil))])
        let unmuted = h.send(.microphoneMuted(source: "mic", muted: false, isDefault: true))
        #expect(signals(unmuted) == [.signal(recorder, .interruptionEnded(shouldResume: false))])
        // Still silenced: the app must activate again itself (no capture restarts behind the user's back).
        #expect(h.view(recorder)?.active == false)
        #expect(h.engine.streamView(.record(1))?.policyMuted == true)
        // Another source muted: not this recorder's. A call is never interrupted by it.
        _ = h.activate(recorder)
        #expect(signals(h.send(.microphoneMuted(source: "usb", muted: true, isDefault: false))).isEmpty)
        let call = h.session(pid: 20, "play-and-record", mode: "voice-chat")
        _ = h.activate(call)
        #expect(signals(h.send(.microphoneMuted(source: "mic", muted: true, isDefault: true))).isEmpty)
    }
}
