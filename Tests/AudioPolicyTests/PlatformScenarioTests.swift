import Testing

@testable import AudioPolicy

/// SPEC §10: the platform call — a ringing phase that spares sessions preferring no interruptions, an answer that
/// takes everything, a hold beside which a call may activate, and an end that lets everything resume.
@Suite struct PlatformScenarioTests {
    static let ringing = PlatformCall(
        state: .ringing, allRinging: true, appID: "org.gnome.Calls", applicationName: "Calls")
    static let active = PlatformCall(
        state: .active, allRinging: false, appID: "org.gnome.Calls", applicationName: "Calls")
    static let held = PlatformCall(state: .held, allRinging: false, appID: "org.gnome.Calls", applicationName: "Calls")

    func announces(_ effects: [Effect], _ state: CallState) -> Bool {
        effects.contains {
            if case .managerPropertiesChanged(let p) = $0 { p.contains(.callState(state)) } else { false }
        }
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
        #expect(
            !signals(ring).contains { if case .signal(chime, .interruptionBegan) = $0 { true } else { false } },
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
        _ = h.send(
            .streamAppeared(StreamInfo(id: .playback(5), processChain: [50], applicationName: "Calls", app: app)))
        #expect(h.engine.streamView(.playback(5))?.session == call)
        #expect(h.engine.streamView(.playback(5))?.policyMuted == false)
        #expect(h.view(call)?.isImplicit == true)
        #expect(h.view(call)?.identity.source == "platform")
        // An app that only says it is GNOME Calls — its application.id, or the desktop file a launcher named in its
        // environment — is not the call's: it is an app of its own, silenced in silent mode like any ambient one.
        for (i, claimed) in [AppProfile.Source.applicationID, .launcherEnvironment].enumerated() {
            let liar = AppProfile(names: [.init("org.gnome.Calls", claimed)])
            let id = StreamID.playback(UInt32(6 + i))
            var info = StreamInfo(
                id: id, processChain: [UInt32(60 + i)], applicationName: "Calls", app: liar)
            info.role = "event"
            info.applicationID = "org.gnome.Calls"
            _ = h.send(.streamAppeared(info))
            #expect(h.engine.streamView(id)?.session != call, "\(claimed): joined the call")
            #expect(h.engine.streamView(id)?.policyMuted == true, "\(claimed): not silenced in silent mode")
        }
        // A Flatpak that ships a program named as the call app's: its program matches the entry, but a sandboxed
        // stream is known only by its Flatpak id.
        var evil = StreamInfo(
            id: .playback(8), processChain: [80], applicationName: "Calls",
            app: AppProfile(
                names: [.init("com.example.Evil", .flatpak), .init("org.gnome.Calls", .desktopEntryMatch)],
                programEntry: "org.gnome.Calls"))
        evil.role = "event"
        _ = h.send(.streamAppeared(evil))
        #expect(h.engine.streamView(.playback(8))?.session != call, "a sandboxed program named as Calls joined")
        // The host's GNOME Calls that also says org.gnome.Calls in its application.id (the resolver keeps the name
        // once, under that weaker source) and runs in another scope (its autostarted daemon): its program says it.
        let host = AppProfile(
            names: [.init("org.gnome.Calls-daemon", .launcherScope), .init("org.gnome.Calls", .applicationID)],
            programEntry: "org.gnome.Calls")
        _ = h.send(
            .streamAppeared(StreamInfo(id: .playback(9), processChain: [90], applicationName: "Calls", app: host)))
        #expect(h.engine.streamView(.playback(9))?.session == call, "the host's Calls is not the call's")
        // Nobody drives it over the bus: it follows the platform's call services alone.
        #expect(
            h.deactivate(call).last
                == .reply(
                    h.lastRequest,
                    .error(
                        .accessDenied(
                            "session \(call.rawValue) is the platform's call: it follows the platform's call services"))
                ))
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

/// SPEC §10: the lock screen and sleep, as events.
@Suite struct LockAndSleepScenarioTests {
    static let mpv = PlayerID("org.mpris.MediaPlayer2.mpv.instance100")

    func locked(_ effects: [Effect], _ on: Bool) -> Bool {
        effects.contains {
            if case .managerPropertiesChanged(let p) = $0 { p.contains(.screenLocked(on)) } else { false }
        }
    }

    @Test func theLockSilencesImplicitAmbientSoundButNotPlaybackEventsOrA11y() throws {
        var h = Harness()
        _ = h.play(1, pid: 10, role: "game")
        _ = h.play(2, pid: 11)
        _ = h.play(3, pid: 12, role: "event")
        _ = h.play(4, pid: 13, role: "a11y")
        let game = try #require(h.engine.streamView(.playback(1))?.session)
        #expect(h.view(game)?.configuration.category == .ambient)
        let lock = h.send(.screenLocked(true))
        #expect(locked(lock, true))
        #expect(streamOps(lock) == [.setStreamMute(.playback(1), true)])
        // (Ducked too: the screen reader is heard. Neither hides the other.)
        #expect(h.engine.streamView(.playback(1))?.reasons == [.screenLocked, .duckedUnderScreenReader])
        // An implicit session is silenced, not interrupted: it hears nothing, and nothing it holds ends.
        #expect(signals(lock).isEmpty)
        _ = h.echo(lock)
        let unlock = h.send(.screenLocked(false))
        #expect(locked(unlock, false))
        #expect(streamOps(unlock) == [.setStreamMute(.playback(1), false)])
    }

    @Test func anExplicitAmbientSessionIsInterruptedAndMayResumeAtUnlockUnlessSomeoneHoldsTheAudio() {
        var h = Harness()
        let ambient = h.session(pid: 10, "ambient")
        _ = h.activate(ambient)
        let solo = h.session(pid: 11, "solo-ambient")
        _ = h.activate(solo)
        let lock = h.send(.screenLocked(true))
        #expect(signals(lock).contains(.signal(ambient, .interruptionBegan(.screenLocked, interrupter: nil))))
        #expect(signals(lock).contains(.signal(solo, .interruptionBegan(.screenLocked, interrupter: nil))))
        // Behind the lock an activation is granted and interrupted at once, taking the audio from nobody.
        let music = h.session(pid: 12, "playback")
        _ = h.activate(music)
        let again = h.activate(solo)
        #expect(again.contains(h.ok))
        #expect(signals(again) == [.signal(solo, .interruptionBegan(.screenLocked, interrupter: nil))])
        #expect(h.view(music)?.active == true)
        // Unlock: the mixable ambient session may resume; the solo-ambient one waits for the music (§3).
        let unlock = h.send(.screenLocked(false))
        #expect(signals(unlock) == [.signal(ambient, .interruptionEnded(shouldResume: true))])
        let end = h.deactivate(music, notify: true)
        #expect(signals(end) == [.signal(solo, .interruptionEnded(shouldResume: true))])
    }

    @Test func theConfigSwitchTurnsTheLockOff() throws {
        var h = Harness(settings: Settings(followsLockScreen: false))
        _ = h.play(1, pid: 10, role: "game")
        let lock = h.send(.screenLocked(true))
        #expect(locked(lock, true), "ScreenLocked still says what logind says")
        #expect(streamOps(lock).isEmpty)
        // Turned on by a reload while locked: it applies at once, and off again lifts it.
        let on = h.send(.configure(h.request(), Harness.stepped(Settings())))
        #expect(streamOps(on) == [.setStreamMute(.playback(1), true)])
        _ = h.echo(on)
        let off = h.send(.configure(h.request(), Harness.stepped(Settings(followsLockScreen: false))))
        #expect(streamOps(off) == [.setStreamMute(.playback(1), false)])
    }

    @Test func sleepInterruptsEveryonePausesPlayersAndWakeResumesNobody() throws {
        var h = Harness()
        _ = h.send(.playerAppeared(PlayerInfo(id: Self.mpv, pid: 100, status: .playing)))
        _ = h.play(1, pid: 100)
        let player = try #require(h.engine.streamView(.playback(1))?.session)
        _ = h.play(2, pid: 200, role: "production")  // Mixes, and has no MPRIS: it cannot be paused.
        let mixer = try #require(h.engine.streamView(.playback(2))?.session)
        let podcast = h.session(pid: 300, "playback", options: ["mix-with-others"])
        _ = h.activate(podcast)
        let sleep = h.send(.prepareForSleep(true))
        for id in [player, mixer, podcast] {
            #expect(
                signals(sleep).contains(.signal(id, .interruptionBegan(.suspend, interrupter: nil))),
                "\(id): \(signals(sleep))")
        }
        #expect(sleep.filter { $0 == .mprisPause(Self.mpv) }.count == 1)
        #expect(
            streamOps(sleep).count == 2 && streamOps(sleep).contains(.setStreamMute(.playback(1), true))
                && streamOps(sleep).contains(.setStreamMute(.playback(2), true)))
        _ = h.echo(sleep)
        _ = h.send(.playerStatusChanged(Self.mpv, .paused))
        // While asleep nothing takes the audio: an activation is granted and interrupted at once.
        let late = h.session(pid: 400, "playback")
        let act = h.activate(late)
        #expect(act.contains(h.ok))
        #expect(signals(act) == [.signal(late, .interruptionBegan(.suspend, interrupter: nil))])
        let wake = h.send(.prepareForSleep(false))
        for id in [player, mixer, podcast, late] {
            #expect(
                signals(wake).contains(.signal(id, .interruptionEnded(shouldResume: false))), "\(id): \(signals(wake))")
        }
        #expect(!wake.contains(.mprisPlay(Self.mpv)), "a player started again after wake")
        // The app without MPRIS is heard again (it cannot be paused, §7); the paused player's stream waits for Play.
        #expect(streamOps(wake).contains(.setStreamMute(.playback(2), false)))
        #expect(!streamOps(wake).contains(.setStreamMute(.playback(1), false)))
    }

    @Test func sleepLeavesThePlatformCallAlone() {
        var h = Harness()
        let ring = h.send(.platformCall(PlatformScenarioTests.active))
        let sleep = h.send(.prepareForSleep(true))
        #expect(signals(sleep).isEmpty, "the platform call was interrupted for sleep: \(signals(sleep)) \(ring.count)")
        #expect(h.engine.callState == .active)
    }

    @Test func mpvPlayingIntoSleepIsPausedAndStaysPaused() throws {
        var h = Harness()
        _ = h.send(.playerAppeared(PlayerInfo(id: Self.mpv, pid: 100, status: .playing)))
        _ = h.play(1, pid: 100)
        let player = try #require(h.engine.streamView(.playback(1))?.session)
        #expect(h.view(player)?.active == true)
        let sleep = h.send(.prepareForSleep(true))
        #expect(sleep.filter { $0 == .mprisPause(Self.mpv) }.count == 1)
        #expect(signals(sleep) == [.signal(player, .interruptionBegan(.suspend, interrupter: nil))])
        _ = h.send(.playerStatusChanged(Self.mpv, .paused))
        let wake = h.send(.prepareForSleep(false))
        #expect(signals(wake) == [.signal(player, .interruptionEnded(shouldResume: false))])
        #expect(!wake.contains(.mprisPlay(Self.mpv)))
    }

    /// Sleep lets logind go once every player it paused has paused: the server corked its stream, or it said Paused.
    @Test func aPausedPlayerHasPausedWhenItsStreamCorksOrItSaysSo() {
        var h = Harness()
        _ = h.send(.playerAppeared(PlayerInfo(id: Self.mpv, pid: 100, status: .playing)))
        _ = h.play(1, pid: 100)
        _ = h.send(.prepareForSleep(true))
        #expect(h.engine.playerStillPlays(Self.mpv))
        _ = h.change(.playback(1)) { $0.corked = true }
        #expect(!h.engine.playerStillPlays(Self.mpv), "its stream corked")
        _ = h.change(.playback(1)) { $0.corked = false }
        #expect(h.engine.playerStillPlays(Self.mpv))
        _ = h.send(.playerStatusChanged(Self.mpv, .paused))
        #expect(!h.engine.playerStillPlays(Self.mpv), "it said Paused")
    }

    @Test func thePlatformsSilentSwitchIsSilentModeWithoutARequest() {
        var h = Harness()
        _ = h.play(1, pid: 10, role: "game")
        let on = h.send(.platformSilentMode(true))
        #expect(h.engine.silentMode)
        #expect(streamOps(on) == [.setStreamMute(.playback(1), true)])
        #expect(on.contains { if case .persist = $0 { true } else { false } })
        #expect(!on.contains { if case .reply = $0 { true } else { false } })
    }
}
