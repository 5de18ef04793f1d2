import Testing

@testable import AudioPolicy

/// SPEC §7: voice input (an app a rule makes `record` activates when it captures from a microphone), and alarms and
/// emergencies (never silenced; they duck the rest but never a call; an emergency interrupts every non-call session).
@Suite struct VoiceInputScenarioTests {
    static let mpv = PlayerID("org.mpris.MediaPlayer2.mpv")

    /// mpv plays. Returns the music's session.
    func music(_ h: inout Harness) throws -> SessionID {
        _ = h.send(.playerAppeared(PlayerInfo(id: Self.mpv, pid: 100, status: .playing)))
        _ = h.play(1, pid: 100, name: "mpv")
        return try #require(h.engine.streamView(.playback(1))?.session)
    }

    func rule(_ h: inout Harness, _ app: String, _ category: String) {
        let r = h.request()
        let e = h.send(.setApplicationCategory(r, application: app, category: category, mode: "default", options: []))
        #expect(e.last == .reply(r, .ok))
    }

    func capture(_ h: inout Harness, _ index: UInt32, pid: UInt32, name: String, monitor: Bool = false) -> [Effect] {
        h.send(
            .streamAppeared(
                StreamInfo(
                    id: .record(index), processChain: [pid], applicationName: name,
                    device: monitor ? "speakers.monitor" : "mic", fromMonitor: monitor)))
    }

    /// mpv playing, then paused by a dictation app (a `record` rule) that captures: the dictation's session.
    func dictating(_ h: inout Harness) throws -> SessionID {
        _ = try music(&h)
        rule(&h, "dictate", "record")
        let start = capture(&h, 1, pid: 50, name: "dictate")
        let dictation = try #require(h.engine.streamView(.record(1))?.session)
        _ = h.echo(start)
        _ = h.send(.playerStatusChanged(Self.mpv, .paused))
        return dictation
    }

    @Test func aDictationAppWithARecordRulePausesTheMusicAndOnlyWhatItPausedPlaysAfter() throws {
        var h = Harness()
        let mpv = try music(&h)
        rule(&h, "dictate", "record")
        let start = capture(&h, 1, pid: 50, name: "dictate")
        let dictation = try #require(h.engine.streamView(.record(1))?.session)
        #expect(h.view(dictation)?.active == true)
        #expect(start.contains(.mprisPause(Self.mpv)))
        #expect(start.contains(.signal(mpv, .interruptionBegan(.default, interrupter: dictation))))
        // A record session never plays: it takes over no primary audio.
        #expect(h.engine.handoverSession == nil)
        _ = h.echo(start)
        _ = h.send(.playerStatusChanged(Self.mpv, .paused))

        // The capture stops: after the linger the music comes back, and only the player audiod paused.
        let stop = h.change(.record(1)) { $0.corked = true }
        #expect(stop.contains(.scheduleTimer(.linger(dictation), afterNanoseconds: 2_000_000_000)))
        let end = h.send(.timerFired(.linger(dictation)))
        #expect(end.contains(.mprisPlay(Self.mpv)))
        #expect(end.contains(.signal(mpv, .interruptionEnded(shouldResume: true))))
        #expect(h.view(dictation)?.active == false)
    }

    /// A dictation app that beeps while it captures is a call by the voice-call rule's terms; its rule decides, and
    /// the beep ending ends nothing (found in review: the call's end resumed the music mid-dictation).
    @Test func aBeepDuringTheDictationEndsNothing() throws {
        var h = Harness()
        let dictation = try dictating(&h)
        _ = h.play(3, pid: 50, name: "dictate")
        let corked = h.change(.playback(3)) { $0.corked = true }
        let end = corked + h.send(.timerFired(.voiceCallEnd(dictation)))
        #expect(!end.contains(.mprisPlay(Self.mpv)))
        #expect(h.view(dictation)?.active == true)
    }

    /// A video the dictation interrupted is not told to resume by a later dictation, after sleep took the audio.
    @Test func whatADictationPausedIsNotResumedByALaterOne() throws {
        var h = Harness()
        let video = h.session(pid: 10, "playback")
        _ = h.activate(video)
        _ = h.play(1, pid: 10)
        rule(&h, "dictate", "record")
        let start = capture(&h, 1, pid: 50, name: "dictate")
        #expect(start.contains(where: { if case .signal(video, .interruptionBegan) = $0 { true } else { false } }))
        let sleep = h.send(.prepareForSleep(true))
        #expect(sleep.contains(.signal(video, .interruptionEnded(shouldResume: false))))
        _ = h.send(.prepareForSleep(false))
        let again = h.change(.record(1)) { $0.corked = true } + h.change(.record(1)) { $0.corked = false }
        let dictation = try #require(h.engine.streamView(.record(1))?.session)
        #expect(h.view(dictation)?.active == true)
        let stop = h.change(.record(1)) { $0.corked = true } + h.send(.timerFired(.linger(dictation)))
        #expect(!(again + stop).contains(.signal(video, .interruptionEnded(shouldResume: true))))
    }

    /// Measured with mpv: a second dictation began in the 20 ms between audiod's `Play` (the first one's end) and
    /// mpv's `Playing`. The music, inactive but about to play, is paused again; its `Playing` takes nothing back.
    @Test func aDictationStartingAsTheMusicResumesPausesItAgain() throws {
        var h = Harness()
        let mpv = try music(&h)
        rule(&h, "dictate", "record")
        let first = capture(&h, 1, pid: 50, name: "dictate")
        let dictation = try #require(h.engine.streamView(.record(1))?.session)
        _ = h.echo(first)
        _ = h.send(.playerStatusChanged(Self.mpv, .paused))
        _ = h.change(.playback(1)) { $0.corked = true }
        _ = h.send(.streamRemoved(.record(1)))
        let end = h.send(.timerFired(.linger(dictation)))
        #expect(end.contains(.mprisPlay(Self.mpv)))
        _ = h.echo(end)

        let second = capture(&h, 2, pid: 51, name: "dictate")
        let again = try #require(h.engine.streamView(.record(2))?.session)
        #expect(second.contains(.mprisPause(Self.mpv)))
        #expect(second.contains(.signal(mpv, .interruptionBegan(.default, interrupter: again))))
        _ = h.echo(second)
        // mpv's answers to the Play, then to the Pause: the dictation keeps the audio.
        _ = h.change(.playback(1)) { $0.corked = false }
        let playing = h.send(.playerStatusChanged(Self.mpv, .playing))
        #expect(!signals(playing).contains(.signal(again, .interruptionBegan(.default, interrupter: mpv))))
        _ = h.send(.playerStatusChanged(Self.mpv, .paused))
        #expect(h.view(again)?.active == true && h.view(mpv)?.active == false)
        // The second dictation ends: the music it paused plays again (found in review: the Playing that answered
        // the first Play had made mpv the user's, and nothing resumed it).
        _ = h.change(.record(2)) { $0.corked = true }
        #expect(h.send(.timerFired(.linger(again))).contains(.mprisPlay(Self.mpv)))
    }

    /// An emergency takes the audio from the dictation: the music the dictation paused comes back when the
    /// emergency ends, not when the dictation does (found in review: it was told it may not resume).
    @Test func whoeverTakesTheAudioFromADictationTakesOverWhatItPaused() throws {
        var h = Harness()
        let dictation = try dictating(&h)
        let mpv = try #require(h.engine.streamView(.playback(1))?.session)
        let siren = h.play(3, pid: 60, role: "emergency")
        let emergency = try #require(h.engine.streamView(.playback(3))?.session)
        #expect(siren.contains(.signal(dictation, .interruptionBegan(.default, interrupter: emergency))))
        #expect(!siren.contains(.signal(mpv, .interruptionEnded(shouldResume: false))))
        _ = h.send(.streamRemoved(.playback(3)))
        let end = h.send(.timerFired(.linger(emergency)))
        #expect(end.contains(.signal(mpv, .interruptionEnded(shouldResume: true))))
        #expect(end.contains(.mprisPlay(Self.mpv)))
    }

    /// A player that stopped while it was paused (its tab closed) answers audiod's Play with nothing: it is not
    /// about to play, and a later activation leaves it alone (found in review: it was interrupted for nothing).
    @Test func aStoppedPlayerIsNotAboutToPlay() throws {
        var h = Harness()
        let dictation = try dictating(&h)
        let music = try #require(h.engine.streamView(.playback(1))?.session)
        _ = h.send(.playerStatusChanged(Self.mpv, .stopped))
        _ = h.change(.record(1)) { $0.corked = true }
        let end = h.send(.timerFired(.linger(dictation)))
        #expect(end.contains(.mprisPlay(Self.mpv)))
        let video = h.session(pid: 70, "playback")
        let taken = h.activate(video)
        #expect(!taken.contains(where: { if case .signal(music, _) = $0 { true } else { false } }))
        #expect(!taken.contains(.mprisPause(Self.mpv)))
    }

    @Test func withoutARuleOrFromAMonitorACaptureActivatesNothing() throws {
        var h = Harness()
        _ = try music(&h)
        let plain = capture(&h, 1, pid: 50, name: "obs")
        #expect(!plain.contains(.mprisPause(Self.mpv)))
        let obs = try #require(h.engine.streamView(.record(1))?.session)
        #expect(h.view(obs)?.active == false)

        // A level meter on a monitor, with the same rule a dictation app has: it captures no microphone.
        rule(&h, "meter", "record")
        let meter = capture(&h, 2, pid: 51, name: "meter", monitor: true)
        #expect(!meter.contains(.mprisPause(Self.mpv)))
        let m = try #require(h.engine.streamView(.record(2))?.session)
        #expect(h.view(m)?.configuration.category == .record)
        #expect(h.view(m)?.active == false)
    }

    /// The user presses Play during the dictation: the music takes the audio, the capture is left alone, and the
    /// dictation's end resumes nothing. The next dictation pauses the music again.
    @Test func playDuringTheDictationTakesTheAudioAndLeavesTheCaptureAlone() throws {
        var h = Harness()
        let dictation = try dictating(&h)

        let play = h.send(.playerStatusChanged(Self.mpv, .playing))
        let music = try #require(h.engine.streamView(.playback(1))?.session)
        #expect(play.contains(.signal(dictation, .interruptionBegan(.default, interrupter: music))))
        #expect(!play.contains(.setStreamMute(.record(1), true)))
        #expect(h.engine.streamView(.record(1))?.policyMuted == false)
        #expect(h.engine.streamView(.record(1))?.reasons == [])
        _ = h.echo(play)

        // It lost the audio: its capture stopping starts no linger, and nothing is resumed or paused by it.
        let stop = h.change(.record(1)) { $0.corked = true }
        #expect(!stop.contains(.scheduleTimer(.linger(dictation), afterNanoseconds: 2_000_000_000)))
        #expect(!stop.contains(.mprisPlay(Self.mpv)) && !stop.contains(.mprisPause(Self.mpv)))
        #expect(h.view(dictation)?.active == false)

        // Push-to-talk again: a new capture is the user's action, as Play is a player's.
        let again = h.change(.record(1)) { $0.corked = false }
        #expect(again.contains(.mprisPause(Self.mpv)))
        #expect(h.view(dictation)?.active == true)
    }
}

@Suite struct AlarmScenarioTests {
    static let normal = Volume.fromLinear(0.2)

    func volume(_ effects: [Effect], _ id: StreamID) -> Volume? {
        effects.compactMap { if case .setStreamVolume(id, let v) = $0 { v } else { nil } }.last
    }

    func interrupts(_ effects: [Effect], _ id: SessionID) -> Bool {
        effects.contains { if case .signal(id, .interruptionBegan) = $0 { true } else { false } }
    }

    /// (Silent mode and the lock never touch `playback`, which an alarm is: they are here as the acceptance names them.)
    @Test func anAlarmSoundsThroughEverythingAndDucksTheMusic() throws {
        var h = Harness()
        _ = h.play(1, pid: 10, role: "music")
        _ = h.play(2, pid: 11, role: "game")
        _ = h.silent(true)
        _ = h.send(.screenLocked(true))
        let ring = h.play(3, pid: 30, role: "Alarm")
        let alarm = try #require(h.engine.streamView(.playback(3))?.session)
        #expect(h.view(alarm)?.configuration == Configuration(category: .playback, options: [.duckOthers]))
        #expect(h.view(alarm)?.active == true)
        #expect(h.engine.streamView(.playback(3))?.policyMuted == false)
        #expect(volume(ring, .playback(1)) == Volume.normal.multiplied(by: Self.normal))

        // A call, which interrupts every other session, and sleep take nothing from it.
        let call = h.session(pid: 40, "play-and-record", mode: "voice-chat")
        let taken = h.activate(call)
        #expect(!interrupts(taken, alarm))
        _ = h.deactivate(call)
        let sleep = h.send(.prepareForSleep(true))
        #expect(!interrupts(sleep, alarm))
        #expect(h.view(alarm)?.active == true && h.view(alarm)?.interrupted == false)
        #expect(h.engine.streamView(.playback(3))?.policyMuted == false)
        #expect(h.engine.streamView(.playback(3))?.audible == true)
    }

    @Test func anAlarmNeverDucksACallAndPlaysDuckedUnderIt() throws {
        var h = Harness()
        let call = h.session(pid: 10, "play-and-record", mode: "voice-chat")
        _ = h.activate(call)
        _ = h.play(1, pid: 10)
        let ring = h.play(2, pid: 30, role: "alarm")
        let alarm = try #require(h.engine.streamView(.playback(2))?.session)
        #expect(volume(ring, .playback(1)) == nil)
        #expect(h.engine.streamView(.playback(1))?.duckFactor == 1)
        #expect(volume(ring, .playback(2)) == Volume.normal.multiplied(by: Self.normal))
        #expect(h.engine.streamView(.playback(2))?.reasons == [.duckedUnderCall(call)])
        #expect(h.view(alarm)?.interrupted == false)

        // A navigation prompt that was speaking when the call came is not interrupted by it either.
        _ = h.deactivate(call)
        _ = h.play(3, pid: 31, role: "navigation")
        let nav = try #require(h.engine.streamView(.playback(3))?.session)
        let again = h.activate(call)
        #expect(h.view(nav)?.interrupted == false)
        #expect(h.engine.streamView(.playback(3))?.reasons == [.duckedUnderCall(call)])
        #expect(h.engine.streamView(.playback(1))?.duckFactor == 1)
        #expect(!interrupts(again, nav))
        // A plain ducker still ducks the call, and the alarm is a ducker that does not.
        let plain = h.session(pid: 50, "playback", options: ["duck-others"])
        _ = h.activate(plain)
        #expect(h.engine.streamView(.playback(1))?.reasons == [.duckedBy(plain)])
    }

    @Test func anEmergencyInterruptsEveryNonCallSessionWhichMayResumeAfter() throws {
        var h = Harness()
        let video = h.session(pid: 10, "playback")
        _ = h.activate(video)
        _ = h.play(1, pid: 10)
        let chime = h.session(pid: 11, "playback", options: ["mix-with-others"])
        _ = h.activate(chime)
        _ = h.play(2, pid: 11)
        _ = h.play(3, pid: 30, role: "alarm")
        let alarm = try #require(h.engine.streamView(.playback(3))?.session)

        let siren = h.play(4, pid: 40, role: "Emergency")
        let emergency = try #require(h.engine.streamView(.playback(4))?.session)
        #expect(siren.contains(.signal(video, .interruptionBegan(.default, interrupter: emergency))))
        #expect(siren.contains(.signal(chime, .interruptionBegan(.default, interrupter: emergency))))
        #expect(h.view(alarm)?.interrupted == false)
        #expect(h.engine.streamView(.playback(1))?.policyMuted == true)
        #expect(h.engine.streamView(.playback(4))?.policyMuted == false)

        _ = h.send(.streamRemoved(.playback(4)))
        let end = h.send(.timerFired(.linger(emergency)))
        // (The alarm, never interrupted, is told nothing.)
        #expect(!signals(end).contains { if case .signal(alarm, _) = $0 { true } else { false } })
        #expect(end.contains(.signal(video, .interruptionEnded(shouldResume: true))))
        #expect(end.contains(.signal(chime, .interruptionEnded(shouldResume: true))))
    }

    @Test func anAlarmThatBecomesAnEmergencyTakesTheAudio() throws {
        var h = Harness()
        let video = h.session(pid: 10, "playback", options: ["mix-with-others"])
        _ = h.activate(video)
        _ = h.play(1, pid: 10)
        _ = h.play(2, pid: 30, role: "alarm")
        let clock = try #require(h.engine.streamView(.playback(2))?.session)
        #expect(h.view(video)?.active == true)
        let siren = h.play(3, pid: 30, role: "emergency")
        #expect(siren.contains(.signal(video, .interruptionBegan(.default, interrupter: clock))))
    }

    /// A `[roles.alarm]` entry in the config file makes it an ordinary app of that configuration.
    @Test func aConfiguredAlarmRoleIsAnOrdinaryApp() throws {
        var settings = Settings()
        settings.roleConfigurations["alarm"] = Configuration(category: .soloAmbient)
        var h = Harness(settings: settings)
        _ = h.play(1, pid: 30, role: "alarm")
        let clock = try #require(h.engine.streamView(.playback(1))?.session)
        let call = h.session(pid: 40, "play-and-record", mode: "voice-chat")
        #expect(interrupts(h.activate(call), clock))
    }
}
