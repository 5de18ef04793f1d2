import Testing

@testable import AudioPolicy

/// docs/POLICY.md §4–§6 and §8: what audiod does to streams, step by step.
@Suite struct EnforcementScenarioTests {
    /// POLICY §5's example: a muted PiP video, a game soundtrack; unmuting the video silences the game at once,
    /// muting it again brings the game back.
    @Test func pictureInPicture() {
        var h = Harness()
        let game = h.session(pid: 10, "ambient")
        _ = h.activate(game)
        _ = h.play(1, pid: 10, name: "game")
        let video = h.session(pid: 20, "playback", mode: "movie-playback")
        _ = h.activate(video)
        // The viewer has muted the video: no primary audio, the game plays.
        _ = h.play(2, pid: 20, name: "browser", muted: true)
        #expect(h.engine.primaryAudioSession == nil)
        #expect(h.engine.streamView(.playback(1))?.audible == true)

        let unmute = h.change(.playback(2)) { $0.muted = false }
        #expect(
            unmute == [
                .setStreamMute(.playback(1), true),
                .signal(game, .silenceSecondaryAudioHint(.begin)),
                .sessionPropertiesChanged(game, [.secondaryAudioShouldBeSilencedHint(true), .otherAudioPlaying(true)]),
                .sessionPropertiesChanged(video, [.otherAudioPlaying(false)]),
                .managerPropertiesChanged([.primaryAudioSession(video)]),
            ])
        #expect(h.engine.primaryAudioSession == video)
        #expect(h.view(game)?.secondaryAudioShouldBeSilencedHint == true)
        #expect(h.view(video)?.secondaryAudioShouldBeSilencedHint == false)
        _ = h.echo(unmute)

        let mute = h.change(.playback(2)) { $0.muted = true }
        #expect(
            mute == [
                .setStreamMute(.playback(1), false),
                .signal(game, .silenceSecondaryAudioHint(.end)),
                .sessionPropertiesChanged(
                    game, [.secondaryAudioShouldBeSilencedHint(false), .otherAudioPlaying(false)]),
                .sessionPropertiesChanged(video, [.otherAudioPlaying(true)]),
                .managerPropertiesChanged([.primaryAudioSession(nil)]),
            ])
    }

    @Test func handlesSecondaryAudioAndSystemSoundsAreExempt() {
        var h = Harness()
        let game = h.session(pid: 10, "ambient")
        _ = h.send(.setHandlesSecondaryAudio(h.request(), game, true))
        _ = h.play(1, pid: 10)
        _ = h.play(2, pid: 30, role: "event")  // an implicit system sound
        _ = h.play(3, pid: 31, role: "game")  // an implicit game
        let music = h.session(pid: 20, "playback")
        _ = h.activate(music)
        let e = h.play(4, pid: 20)
        #expect(streamOps(e) == [.setStreamMute(.playback(3), true)])
    }

    @Test func silentModeSilencesAmbientAndSoloAmbientOnly() {
        var h = Harness()
        // Corked streams: nothing is audible, so nobody auto-activates and no hint is on.
        let game = h.session(pid: 10, "solo-ambient")
        _ = h.play(1, pid: 10, corked: true)
        let podcast = h.session(pid: 20, "playback", options: ["mix-with-others"])
        _ = h.play(2, pid: 20, corked: true)
        let chime = h.session(pid: 30, "ambient")
        _ = h.play(3, pid: 30, corked: true)
        _ = h.record(4, pid: 10)
        let on = h.silent(true)
        // Silenced whether active or not, playing or not; playback-category and record streams are untouched.
        #expect(streamOps(on) == [.setStreamMute(.playback(1), true), .setStreamMute(.playback(3), true)])
        #expect(on.contains(.managerPropertiesChanged([.silentMode(true)])))
        #expect(on.contains(.persist(PersistentState(silentMode: true, rules: []))))
        _ = h.echo(on)
        _ = h.echo(h.change(.playback(2)) { $0.corked = false })
        #expect(h.view(podcast)?.active == true)
        // A stream silenced for another reason too stays silenced when silent mode ends.
        _ = h.activate(game)
        let music = h.session(pid: 40, "playback")
        #expect(signals(h.activate(music)) == [.signal(game, .interruptionBegan(.default, interrupter: music))])
        let off = h.silent(false)
        #expect(streamOps(off) == [.setStreamMute(.playback(3), false)])
        #expect(h.view(podcast)?.active == true)
        _ = game
        _ = chime
    }

    @Test func headphonesUnpluggedPauseInsteadOfPlayingOnTheSpeakers() {
        var h = Harness()
        let music = h.session(pid: 10, "playback")
        _ = h.activate(music)
        _ = h.play(1, pid: 10, device: "headphones")
        let other = h.session(pid: 20, "playback", options: ["mix-with-others"])
        _ = h.activate(other)
        _ = h.play(2, pid: 20, device: "speakers")
        // The server moves the stream to the speakers before it announces the removal.
        _ = h.change(.playback(1)) { $0.device = "speakers" }
        let e = h.send(.deviceRemoved("headphones"))
        #expect(
            e == [
                .setStreamMute(.playback(1), true),
                .signal(
                    music, .routeChanged(.oldDeviceUnavailable, previousDevice: "headphones", currentDevice: "speakers")
                ),
                .signal(music, .interruptionBegan(.routeDisconnected, interrupter: nil)),
                // Primary audio stopped: the mixable session hears the end of the hint.
                .signal(other, .silenceSecondaryAudioHint(.end)),
                .sessionPropertiesChanged(music, [.active(false), .interrupted(true)]),
                .sessionPropertiesChanged(
                    other, [.secondaryAudioShouldBeSilencedHint(false), .otherAudioPlaying(false)]),
                .managerPropertiesChanged([.primaryAudioSession(nil)]),
            ])
        _ = h.echo(e)
        // No InterruptionEnded ever follows; the app's own SetActive(true) lifts the silencing.
        let again = h.activate(music)
        #expect(streamOps(again) == [.setStreamMute(.playback(1), false)])
        _ = h.echo(again)
        // A new device interrupts nobody and is announced only to the sessions moved onto it.
        _ = h.send(.deviceAppeared("usb"))
        let moved = h.change(.playback(1)) { $0.device = "usb" }
        #expect(
            signals(moved) == [
                .signal(music, .routeChanged(.newDeviceAvailable, previousDevice: "speakers", currentDevice: "usb"))
            ])
        #expect(streamOps(moved) == [])
    }

    /// A player whose status signal is still on its way (it says Stopped) while its stream already plays: an
    /// unplugged device must pause it all the same (seen with mpv: the bus and the sound server race).
    @Test func unpluggedPlayerIsPausedEvenBeforeItsPlayingStatusArrives() {
        var h = Harness()
        let mpv = PlayerID("org.mpris.MediaPlayer2.mpv")
        _ = h.send(.playerAppeared(PlayerInfo(id: mpv, pid: 100, status: .stopped)))
        _ = h.play(1, pid: 100, device: "headphones")
        _ = h.change(.playback(1)) { $0.device = "speakers" }
        let e = h.send(.deviceRemoved("headphones"))
        #expect(e.contains(.mprisPause(mpv)), "\(e)")
        #expect(streamOps(e) == [.setStreamMute(.playback(1), true)])
    }

    @Test func userChangesDuringADuckAreKept() {
        var h = Harness()
        _ = h.play(1, pid: 10, role: "music", volume: Volume(uniform: 50000))
        let nav = h.session(pid: 20, "playback", options: ["duck-others"])
        let duck = h.activate(nav)
        let f = Volume.fromLinear(0.2)
        #expect(streamOps(duck) == [.setStreamVolume(.playback(1), Volume(uniform: Volume.multiply(50000, f)))])
        _ = h.echo(duck)
        // The user turns the ducked stream down to 30000: that is their volume; audiod re-applies the duck to it.
        let user = h.change(.playback(1)) { $0.volume = Volume(uniform: 30000) }
        #expect(streamOps(user) == [.setStreamVolume(.playback(1), Volume(uniform: Volume.multiply(30000, f)))])
        _ = h.echo(user)
        // And when the duck ends, the stream is at exactly the user's latest value.
        #expect(streamOps(h.deactivate(nav)) == [.setStreamVolume(.playback(1), Volume(uniform: 30000))])
    }

    @Test func userMuteIsNeverLost() {
        var h = Harness()
        let a = h.session(pid: 10, "playback")
        _ = h.activate(a)
        _ = h.play(1, pid: 10)
        let b = h.session(pid: 20, "playback")
        let take = h.activate(b)
        _ = h.echo(take)
        // The user unmutes A's silenced stream: A is explicit, so audiod silences it again.
        #expect(streamOps(h.change(.playback(1)) { $0.muted = false }) == [.setStreamMute(.playback(1), true)])
        // A stream the user muted before the policy is left alone, and stays muted after it.
        _ = h.play(2, pid: 10, muted: true)
        #expect(h.engine.streamView(.playback(2))?.policyMuted == true)
        let back = h.activate(a)
        #expect(streamOps(back) == [.setStreamMute(.playback(1), false)])
    }

    @Test func recordStreamsAreUnmutedOnlyByTheirOwnerOrTheUser() {
        var h = Harness()
        let rec = h.session(pid: 10, "play-and-record", mode: "voice-chat")
        _ = h.activate(rec)
        _ = h.record(1, pid: 10)
        let call = h.session(pid: 20, "play-and-record", mode: "video-chat")
        let e = h.activate(call)
        #expect(streamOps(e) == [.setStreamMute(.record(1), true)])
        _ = h.echo(e)
        #expect(streamOps(h.deactivate(call, notify: true)) == [])
        #expect(streamOps(h.activate(rec)) == [.setStreamMute(.record(1), false)])
    }

    @Test func restoreEverythingUndoesOnlyWhatAudiodDid() {
        var h = Harness()
        _ = h.play(1, pid: 10, role: "game")
        _ = h.play(2, pid: 11, role: "music", muted: true)
        _ = h.play(3, pid: 12, role: "music", volume: Volume(uniform: 20000))
        let nav = h.session(pid: 20, "playback", options: ["duck-others"])
        _ = h.echo(h.activate(nav))
        _ = h.echo(h.silent(true))
        #expect(h.engine.appliedChanges.map(\.stream) == [.playback(1), .playback(2), .playback(3)])
        let restore = h.engine.restoreEverything()
        #expect(
            restore == [
                .setStreamMute(.playback(1), false),
                .setStreamVolume(.playback(1), .normal),
                .setStreamVolume(.playback(2), .normal),
                .setStreamVolume(.playback(3), Volume(uniform: 20000)),
            ])
        #expect(h.engine.appliedChanges.isEmpty)
    }
}
