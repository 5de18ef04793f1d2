import Foundation
import Testing

@testable import AudioPolicy

/// docs/POLICY.md §2 "Fades": a duck reaches its level over 500 ms and leaves it over 500 ms, one volume write per
/// step of the fade timer; a voice prompt's and a screen reader's duck (and any duck of spoken audio) within
/// 100 ms. A stream nobody hears, a new stream and a volume the user sets get theirs at once; the stop path's
/// engine fades nothing.
@Suite struct FadeScenarioTests {
    static let duck = Volume.fromLinear(0.2)

    func volumes(_ effects: [Effect], _ id: StreamID) -> [Volume] {
        effects.compactMap { if case .setStreamVolume(id, let v) = $0 { v } else { nil } }
    }

    /// Fires the fade timer until no fade runs (at most `limit` times), each 20 ms after the last; the volumes
    /// written to `id`, in order, and the times they were written at (ms after the first firing's start).
    func run(_ h: inout Harness, _ id: StreamID, limit: Int = 100) -> [(ms: UInt64, volume: Volume)] {
        runAll(&h, id, limit: limit).compactMap { w in
            if case .setStreamVolume(_, let v) = w.op { (w.ms, v) } else { nil }
        }
    }

    @Test func aDuckFadesDownOver500msAndBackOver500ms() {
        var h = Harness(fades: true)
        _ = h.echo(h.play(1, pid: 10, role: "music"))
        let ducker = h.session(pid: 20, "playback", options: ["duck-others"])
        let start = h.activate(ducker)
        // The fade starts at once: the first step is written with the activation, and the timer is armed.
        let first = volumes(start, .playback(1))
        #expect(first.count == 1 && first[0].channels[0] < Volume.norm && first[0].channels[0] > Self.duck)
        #expect(start.contains(.scheduleTimer(.fadeStep, afterNanoseconds: Settings.fadeStepNanoseconds)))
        #expect(h.engine.streamView(.playback(1))?.duckFactor == 0.2, "ListStreams reports the target")
        _ = h.echo(start)
        let down = run(&h, .playback(1))
        // 25 writes over 500 ms (the harness's echoes take a millisecond each, so a step or two fewer here).
        #expect((22...24).contains(down.count), "\(down.count) steps after the first")
        #expect(down.last?.volume == Volume.normal.multiplied(by: Self.duck))
        #expect((440...500).contains(down.last?.ms ?? 0), "the duck took \(down.last?.ms ?? 0) ms after its first step")
        // Each step lower than the last: no jump back, no overshoot.
        let levels = [first[0]] + down.map(\.volume)
        #expect(zip(levels, levels.dropFirst()).allSatisfy { $0.channels[0] > $1.channels[0] })
        #expect(h.engine.appliedChange(of: .playback(1))?.restoreVolume == .normal)

        let end = h.deactivate(ducker)
        #expect(volumes(end, .playback(1)).count == 1)
        _ = h.echo(end)
        let up = run(&h, .playback(1))
        #expect(up.last?.volume == .normal && (22...24).contains(up.count), "\(up.count)")
        #expect(h.engine.appliedChange(of: .playback(1)) == nil, "audiod still holds the volume it gave back")
        #expect(h.engine.fading.isEmpty)
    }

    @Test func aVoicePromptsDuckTakes100msAtMost() {
        var h = Harness(fades: true)
        _ = h.echo(h.play(1, pid: 10, role: "music"))
        let prompt = h.session(pid: 20, "playback", mode: "voice-prompt", options: ["duck-others"])
        _ = h.echo(h.activate(prompt))
        let steps = run(&h, .playback(1))
        #expect((60...100).contains(steps.last?.ms ?? 0), "\(steps.map(\.ms))")
        #expect(steps.last?.volume == Volume.normal.multiplied(by: Volume.fromLinear(Settings.defaultStrongDuckLevel)))
    }

    @Test func echoesOfAStepWriteNothing() {
        var h = Harness(fades: true)
        _ = h.echo(h.play(1, pid: 10, role: "music"))
        let ducker = h.session(pid: 20, "playback", options: ["duck-others"])
        let start = h.activate(ducker)
        // The server's report of the step, and anything else about the stream, wait for the timer.
        #expect(streamOps(h.echo(start)).isEmpty)
        #expect(streamOps(h.change(.playback(1)) { $0.applicationName = "renamed" }).isEmpty)
    }

    @Test func theUsersVolumeEndsTheFadeAndTheDuckGoesOnTopAtOnce() {
        var h = Harness(fades: true)
        _ = h.echo(h.play(1, pid: 10, role: "music"))
        let ducker = h.session(pid: 20, "playback", options: ["duck-others"])
        _ = h.echo(h.activate(ducker))
        h.advance(ms: 19)
        _ = h.echo(h.send(.timerFired(.fadeStep)))
        let mine = Volume(uniform: 40_000)
        let e = h.change(.playback(1)) { $0.volume = mine }
        #expect(volumes(e, .playback(1)) == [mine.multiplied(by: Self.duck)])
        #expect(h.engine.fading.isEmpty)
        _ = h.echo(e)
        #expect(run(&h, .playback(1)).isEmpty)
        #expect(h.engine.appliedChange(of: .playback(1))?.restoreVolume == mine)
    }

    /// The user's volume read before a step of the way back went over it (the backend reports it as the user's):
    /// the stream is not ducked any more, and the user's volume is written once, not left under the step.
    @Test func theUsersVolumeOnTheWayBackIsWrittenOnce() {
        var h = Harness(fades: true)
        _ = h.echo(h.play(1, pid: 10, role: "music"))
        let ducker = h.session(pid: 20, "playback", options: ["duck-others"])
        _ = h.echo(h.activate(ducker))
        _ = run(&h, .playback(1))
        _ = h.echo(h.deactivate(ducker))
        h.advance(ms: 19)
        _ = h.echo(h.send(.timerFired(.fadeStep)))
        let mine = Volume(uniform: 30_000)
        let e = h.change(.playback(1)) { $0.volume = mine }
        #expect(volumes(e, .playback(1)) == [mine], "\(e)")
        #expect(h.engine.fading.isEmpty)
        _ = h.echo(e)
        #expect(h.engine.appliedChange(of: .playback(1)) == nil)
    }

    @Test func aStreamNobodyHearsOrANewOneIsDuckedAtOnce() {
        var h = Harness(fades: true)
        _ = h.echo(h.play(1, pid: 10, role: "music", corked: true))
        let ducker = h.session(pid: 20, "playback", options: ["duck-others"])
        let e = h.activate(ducker)
        #expect(volumes(e, .playback(1)) == [Volume.normal.multiplied(by: Self.duck)])
        // A new stream of another app starts ducked: a fade would start it loud.
        let fresh = h.play(2, pid: 11, role: "music")
        #expect(volumes(fresh, .playback(2)) == [Volume.normal.multiplied(by: Self.duck)])
        #expect(h.engine.fading.isEmpty)
    }

    @Test func aDuckUndoneMidwayTurnsBackFromWhereItIs() {
        var h = Harness(fades: true)
        _ = h.echo(h.play(1, pid: 10, role: "music"))
        let ducker = h.session(pid: 20, "playback", options: ["duck-others"])
        _ = h.echo(h.activate(ducker))
        for _ in 0..<5 {
            h.advance(ms: 19)
            _ = h.echo(h.send(.timerFired(.fadeStep)))
        }
        let midway = h.engine.streams[.playback(1)]?.appliedVolume
        let back = h.deactivate(ducker)
        let first = volumes(back, .playback(1))
        // Up from where the duck had got to: no jump down to the level, none up to the user's volume.
        #expect(first.count == 1)
        if let m = midway, let f = first.first { #expect(f.channels[0] > m.channels[0] && f.channels[0] < Volume.norm) }
        _ = h.echo(back)
        #expect(run(&h, .playback(1)).last?.volume == .normal)
    }

    /// 100 streams ducked at once step every 100 ms: 1,000 writes a second, not 5,000.
    @Test func manyStreamsFadeInFewerSteps() {
        var h = Harness(fades: true)
        // Mixable players (role `production`): none interrupts another, all are heard.
        for i in 0..<100 { _ = h.echo(h.play(UInt32(i + 1), pid: UInt32(1000 + i), role: "production")) }
        let ducker = h.session(pid: 20, "playback", options: ["duck-others"])
        let start = h.activate(ducker)
        _ = h.echo(start)
        #expect(h.engine.fading.count == 100)
        #expect(h.engine.fadeStep == 100_000_000)
        // The first step's timer too counts all of them.
        #expect(start.contains(.scheduleTimer(.fadeStep, afterNanoseconds: 100_000_000)))
        var writes = streamOps(start).count
        var fired = 0
        while !h.engine.fading.isEmpty && fired < 50 {
            h.advance(ms: 99)
            let e = h.send(.timerFired(.fadeStep))
            writes += streamOps(e).count
            _ = h.echo(e)
            fired += 1
        }
        #expect(fired <= 6, "\(fired) firings for a 500 ms duck")
        #expect(writes <= 600, "\(writes) writes")
        #expect(h.engine.streamView(.playback(50))?.info.volume == Volume.normal.multiplied(by: Self.duck))
    }

    /// Given back after an interruption, the music fades in over a second: its volume goes to the first step
    /// before the unmute, then up to the user's volume; audiod holds nothing once it is there.
    @Test func aStreamGivenBackFadesInFromSilence() {
        var h = Harness(fades: true)
        _ = h.echo(h.play(1, pid: 10, role: "music"))
        let mine = Volume(uniform: 50_000)
        _ = h.change(.playback(1)) { $0.volume = mine }
        let video = h.session(pid: 20, "playback")
        _ = h.echo(h.activate(video))
        #expect(h.engine.streamView(.playback(1))?.policyMuted == true)
        let back = h.deactivate(video, notify: true)
        let ops = streamOps(back)
        // The first step is written before the unmute: nothing is heard at the user's volume first.
        guard ops.count == 2, case .setStreamVolume(.playback(1), let first) = ops[0] else {
            Issue.record("\(ops)")
            return
        }
        #expect(ops[1] == .setStreamMute(.playback(1), false))
        #expect(first.channels[0] > 0 && first.channels[0] < 20_000, "\(first)")
        _ = h.echo(back)
        let up = run(&h, .playback(1))
        #expect((45...50).contains(up.count), "\(up.count) steps over a second")
        #expect(up.last?.volume == mine)
        #expect((900...1_000).contains(up.last?.ms ?? 0), "\(up.last?.ms ?? 0) ms")
        #expect(h.engine.appliedChange(of: .playback(1)) == nil)
    }

    /// Muted again mid-fade (the video comes back), the stream needs no more steps: nobody hears them.
    @Test func aFadeNobodyHearsAnyMoreEndsAtOnce() {
        var h = Harness(fades: true)
        _ = h.echo(h.play(1, pid: 10, role: "music"))
        let video = h.session(pid: 20, "playback")
        _ = h.echo(h.activate(video))
        _ = h.echo(h.deactivate(video, notify: true))
        h.advance(ms: 19)
        _ = h.echo(h.send(.timerFired(.fadeStep)))
        let again = h.activate(video)
        #expect(streamOps(again).contains(.setStreamMute(.playback(1), true)))
        #expect(streamOps(again).contains(.setStreamVolume(.playback(1), .normal)), "\(streamOps(again))")
        #expect(h.engine.fading.isEmpty)
        _ = h.echo(again)
        #expect(h.engine.appliedChange(of: .playback(1))?.appliedVolume == nil)
    }

    /// A stream whose process exited belongs to no session and goes soon: given back at once, not faded (a step
    /// written to a dying stream may never land, and the server would save the value before it).
    @Test func aStreamOfAnExitedProcessIsGivenBackAtOnce() {
        var h = Harness(fades: true)
        _ = h.echo(h.play(1, pid: 10, role: "music"))
        let ducker = h.session(pid: 30, "playback", options: ["duck-others"])
        _ = h.echo(h.activate(ducker))
        _ = run(&h, .playback(1))
        let video = h.session(pid: 20, "playback")
        _ = h.echo(h.activate(video))
        #expect(h.engine.streamView(.playback(1))?.policyMuted == true)
        // The server's next report of the stream, as it comes while it is still listed.
        let e = h.send(.processExited(pid: 10)) + h.change(.playback(1)) { $0.applicationName = "app" }
        #expect(streamOps(e) == [.setStreamMute(.playback(1), false), .setStreamVolume(.playback(1), .normal)], "\(e)")
        #expect(h.engine.fading.isEmpty)
    }

    /// Its app gone mid-fade (here a fade-in, whose goal stays the user's volume), the stream takes the rest of
    /// the way at once.
    @Test func aFadeWhoseAppExitsEndsAtOnce() {
        var h = Harness(fades: true)
        _ = h.echo(h.play(1, pid: 10, role: "music"))
        let video = h.session(pid: 20, "playback")
        _ = h.echo(h.activate(video))
        _ = h.echo(h.deactivate(video, notify: true))
        #expect(h.engine.fading.contains(.playback(1)))
        let e = h.send(.processExited(pid: 10)) + h.change(.playback(1)) { $0.applicationName = "app" }
        #expect(volumes(e, .playback(1)) == [.normal], "\(e)")
        #expect(h.engine.fading.isEmpty)
    }

    /// The user's own unmute gives the stream back at once: the user asked for it.
    @Test func theUsersUnmuteIsNotFaded() {
        var h = Harness(fades: true)
        _ = h.echo(h.play(1, pid: 10, role: "music"))
        let video = h.session(pid: 20, "playback")
        _ = h.echo(h.activate(video))
        let e = h.change(.playback(1)) { $0.muted = false }
        #expect(!streamOps(e).contains { if case .setStreamVolume = $0 { true } else { false } }, "\(e)")
        #expect(h.engine.fading.isEmpty)
    }

    @Test func theStopPathsEngineFadesNothing() {
        #expect(Settings.restoreOnly.duckFadeNanoseconds == 0 && Settings.restoreOnly.unduckFadeNanoseconds == 0)
        #expect(Settings.restoreOnly.fadeInNanoseconds == 0)
        var h = Harness(fades: true)
        var s = Settings()
        s.duckFadeNanoseconds = 0
        h = Harness(settings: s, fades: true)
        _ = h.echo(h.play(1, pid: 10, role: "music"))
        let ducker = h.session(pid: 20, "playback", options: ["duck-others"])
        #expect(volumes(h.activate(ducker), .playback(1)) == [Volume.normal.multiplied(by: Self.duck)])
    }

    // MARK: Players audiod resumes through MPRIS

    static let mpv = PlayerID("org.mpris.MediaPlayer2.mpv")

    /// mpv interrupted by a video: paused through MPRIS, its stream muted, then corked by the player.
    func pausedPlayer(_ h: inout Harness, volume: Volume = .normal, saysPaused: Bool = true) -> SessionID {
        _ = h.send(.playerAppeared(PlayerInfo(id: Self.mpv, pid: 100, status: .playing)))
        _ = h.echo(h.play(1, pid: 100, name: "mpv", volume: volume))
        let video = h.session(pid: 20, "playback")
        let e = h.activate(video)
        #expect(e.contains(.mprisPause(Self.mpv)))
        _ = h.echo(e)
        if saysPaused { _ = h.send(.playerStatusChanged(Self.mpv, .paused)) }
        _ = h.echo(h.change(.playback(1)) { $0.corked = true })
        return video
    }

    /// The video ends with notify: mpv is resumed, its volume to silence under the mute, then its unmute.
    func resume(_ h: inout Harness, _ video: SessionID) -> [Effect] {
        let back = h.deactivate(video, notify: true)
        #expect(back.contains(.mprisPlay(Self.mpv)))
        #expect(
            streamOps(back) == [
                .setStreamVolume(.playback(1), Volume(uniform: 0)), .setStreamMute(.playback(1), false),
            ], "\(back)")
        return back
    }

    /// A player audiod resumes is given back while paused: its volume goes to silence under the mute, the unmute
    /// and the `Play` follow, and once it sounds it fades in over the second — not at full volume from its first
    /// sample, which a fade started after the player's answer could only cut into (docs/POLICY.md §2 "Fades").
    @Test func aPlayerAudiodResumesFadesInOnceItPlays() {
        var h = Harness(fades: true)
        let mine = Volume(uniform: 50_000)
        let video = pausedPlayer(&h, volume: mine)
        _ = h.echo(resume(&h, video))
        // The player takes a while to answer: nothing is written meanwhile.
        for _ in 0..<5 {
            h.advance(ms: 19)
            #expect(streamOps(h.echo(h.send(.timerFired(.fadeStep)))).isEmpty)
        }
        #expect(h.engine.streamView(.playback(1))?.info.volume == Volume(uniform: 0))
        // ListStreams says why it is silent.
        #expect(h.engine.streamView(.playback(1))?.reasons == [.awaitingResumedSound])
        // The silence is audiod's: a stop now puts the user's volume back.
        var stopping = h.engine
        #expect(stopping.restoreEverything() == [.setStreamVolume(.playback(1), mine)])
        _ = h.send(.playerStatusChanged(Self.mpv, .playing))
        let plays = h.change(.playback(1)) { $0.corked = false }
        // The first step at once, from silence.
        let first = volumes(plays, .playback(1))
        #expect(first.count == 1 && first[0].channels[0] > 0 && first[0].channels[0] < 20_000, "\(plays)")
        _ = h.echo(plays)
        #expect(h.engine.streamView(.playback(1))?.reasons == [], "heard, it has no reason left")
        let up = run(&h, .playback(1))
        #expect((45...50).contains(up.count), "\(up.count) steps over a second")
        #expect(up.last?.volume == mine)
        #expect((900...1_000).contains(up.last?.ms ?? 0), "\(up.last?.ms ?? 0) ms")
        #expect(h.engine.appliedChange(of: .playback(1)) == nil)
    }

    /// Its stream corked, the player's `Paused` still on the bus: it is resumed all the same, and waits at silence.
    @Test func aPlayerWhosePausedIsStillOnTheBusWaitsAtSilenceToo() {
        var h = Harness(fades: true)
        _ = resume(&h, pausedPlayer(&h, saysPaused: false))
    }

    /// A player that said `Stopped` (its tab closed) answers no `Play`: its app's stream is given back at once, as
    /// any stream nobody hears, not held at silence.
    @Test func aStoppedPlayersStreamIsNotHeldAtSilence() {
        var h = Harness(fades: true)
        let video = pausedPlayer(&h)
        _ = h.send(.playerStatusChanged(Self.mpv, .stopped))
        let back = h.deactivate(video, notify: true)
        #expect(streamOps(back) == [.setStreamMute(.playback(1), false)], "\(back)")
        #expect(h.engine.fading.isEmpty)
    }

    /// A player that does not sound within two seconds of its `Play` (nothing to play, or it ignored it) has its
    /// volume back at once: audiod holds nothing for long without a reason.
    @Test func aResumedPlayerThatNeverSoundsHasItsVolumeBackAfterTwoSeconds() {
        var h = Harness(fades: true)
        let video = pausedPlayer(&h)
        _ = h.echo(h.deactivate(video, notify: true))
        let ops = runAll(&h, .playback(1), limit: 200)
        #expect(ops.map(\.op) == [.setStreamVolume(.playback(1), .normal)], "\(ops)")
        #expect((2_000...2_040).contains(ops.first?.ms ?? 0), "\(ops.first?.ms ?? 0) ms")
        #expect(h.engine.appliedChange(of: .playback(1)) == nil)
    }

    /// Interrupted again while it waits, the stream is muted and its volume put back under the mute; the user's
    /// volume set while it waits is the user's, and nothing more is written.
    @Test func aResumedPlayerSilencedAgainOrSetByTheUserStopsWaiting() {
        var h = Harness(fades: true)
        let video = pausedPlayer(&h)
        _ = h.echo(h.deactivate(video, notify: true))
        let again = h.activate(video)
        #expect(
            streamOps(again) == [.setStreamMute(.playback(1), true), .setStreamVolume(.playback(1), .normal)],
            "\(again)")
        #expect(h.engine.fading.isEmpty)
        _ = h.echo(again)

        var u = Harness(fades: true)
        let video2 = pausedPlayer(&u)
        _ = u.echo(u.deactivate(video2, notify: true))
        let users = Volume(uniform: 30_000)
        let set = u.change(.playback(1)) { $0.volume = users }
        #expect(volumes(set, .playback(1)).allSatisfy { $0 == users }, "\(set)")
        #expect(u.engine.fading.isEmpty)
        #expect(u.engine.appliedChange(of: .playback(1)) == nil)
    }

    /// `fade-in` reloaded while a resumed player waits: its fade, when it sounds, is the new length (0: its volume
    /// at once), not the one in force at the give-back.
    @Test func aResumedPlayerFadesInOverTheFadeInInForceWhenItSounds() {
        for (seconds, steps) in [(0.2, 8...10), (0.0, 0...0)] {
            var h = Harness(fades: true)
            let video = pausedPlayer(&h)
            _ = h.echo(resume(&h, video))
            var settings = h.engine.settings
            settings.fadeInNanoseconds = UInt64(seconds * 1e9)
            #expect(h.send(.configure(h.request(), settings)).last?.isError != true)
            _ = h.send(.playerStatusChanged(Self.mpv, .playing))
            let plays = h.change(.playback(1)) { $0.corked = false }
            let first = volumes(plays, .playback(1))
            if seconds == 0 {
                #expect(first == [.normal], "fade-in 0: \(plays)")
            } else {
                // A tenth of the way in amplitude: 0.1^(1/3) of the volume scale, ~30,400.
                #expect(first.count == 1 && (first.first?.channels[0] ?? 0) < 35_000, "\(plays)")
            }
            _ = h.echo(plays)
            let up = run(&h, .playback(1))
            #expect(steps.contains(up.count), "fade-in \(seconds) s: \(up.count) steps")
            #expect(h.engine.fading.isEmpty)
            #expect(h.engine.appliedChange(of: .playback(1)) == nil)
        }
    }

    /// A duck that begins while a resumed player waits at silence is where its fade-in ends; one that ends meanwhile
    /// leaves the user's volume as the end. Nothing is written while it waits either way.
    @Test func aDuckDecidedWhileAResumedPlayerWaitsIsWhereItsFadeInEnds() {
        for undone in [false, true] {
            var h = Harness(fades: true)
            let video = pausedPlayer(&h)
            _ = h.echo(resume(&h, video))
            let ducker = h.session(pid: 30, "playback", options: ["duck-others"])
            let duck = h.activate(ducker)
            #expect(volumes(duck, .playback(1)).isEmpty, "written while it waits: \(duck)")
            _ = h.echo(duck)
            if undone {
                let lifted = h.deactivate(ducker, notify: false)
                #expect(volumes(lifted, .playback(1)).isEmpty, "written while it waits: \(lifted)")
                _ = h.echo(lifted)
            }
            #expect(h.engine.streamView(.playback(1))?.info.volume == Volume(uniform: 0))
            _ = h.send(.playerStatusChanged(Self.mpv, .playing))
            _ = h.echo(h.change(.playback(1)) { $0.corked = false })
            let up = run(&h, .playback(1))
            let end = undone ? Volume.normal : Volume.normal.multiplied(by: Self.duck)
            #expect((45...50).contains(up.count), "\(up.count) steps")
            #expect(up.last?.volume == end, "undone \(undone): ended at \(String(describing: up.last?.volume))")
            #expect(h.engine.fading.isEmpty)
        }
        // Ducked while it waits and never heard: at the 2 s limit its volume goes to the duck level at once.
        var h = Harness(fades: true)
        _ = h.echo(resume(&h, pausedPlayer(&h)))
        _ = h.echo(h.activate(h.session(pid: 30, "playback", options: ["duck-others"])))
        let ops = runAll(&h, .playback(1), limit: 200)
        #expect(ops.map(\.op) == [.setStreamVolume(.playback(1), Volume.normal.multiplied(by: Self.duck))], "\(ops)")
        #expect((1_990...2_040).contains(ops.first?.ms ?? 0), "\(ops.first?.ms ?? 0) ms")
    }

    // MARK: Fade-outs (silent mode, the lock)

    /// Fires the fade timer until no fade runs; every stream operation on `id`, with the time it was written.
    func runAll(_ h: inout Harness, _ id: StreamID, limit: Int = 100) -> [(ms: UInt64, op: Effect)] {
        var written: [(UInt64, Effect)] = []
        var elapsed: UInt64 = 0
        for _ in 0..<limit where !h.engine.fading.isEmpty {
            // `send` adds its own millisecond: 19 + 1 is the 20 ms step.
            h.advance(ms: 19)
            elapsed += 20
            let e = h.send(.timerFired(.fadeStep))
            _ = h.echo(e)
            for op in streamOps(e) {
                switch op {
                case .setStreamMute(id, _), .setStreamVolume(id, _): written.append((elapsed, op))
                default: break
                }
            }
        }
        return written
    }

    /// A game someone hears, in a solo-ambient session that holds the audio.
    func heardGame(_ h: inout Harness) -> SessionID {
        let game = h.session(pid: 10, "solo-ambient")
        _ = h.echo(h.activate(game))
        _ = h.echo(h.play(1, pid: 10))
        return game
    }

    @Test func silentModeFadesAGameOutOver500msThenMutesItWithItsVolumeBack() {
        var h = Harness(fades: true)
        _ = heardGame(&h)
        let on = h.silent(true)
        // The fade starts at once, and the stream counts as silenced from its start; the mute waits for its end.
        let first = volumes(on, .playback(1))
        #expect(first.count == 1 && first[0].channels[0] < Volume.norm && first[0].channels[0] > 0, "\(on)")
        #expect(!streamOps(on).contains(.setStreamMute(.playback(1), true)))
        #expect(h.engine.streamView(.playback(1))?.policyMuted == true)
        #expect(h.engine.streamView(.playback(1))?.audible == false)
        // Mid-fade, what audiod holds is a volume to put back: a crash now leaves nothing behind.
        #expect(h.engine.appliedChange(of: .playback(1))?.restoreVolume == .normal)
        #expect(h.engine.appliedChange(of: .playback(1))?.unmute == false)
        _ = h.echo(on)
        let way = runAll(&h, .playback(1))
        let downs = way.compactMap { if case .setStreamVolume(_, let v) = $0.op, v != .normal { v } else { nil } }
        // 25 steps over 500 ms, each lower than the last, down to silence.
        #expect((22...25).contains(downs.count), "\(downs.count) steps after the first")
        let levels = first + downs
        #expect(zip(levels, levels.dropFirst()).allSatisfy { $0.channels[0] > $1.channels[0] }, "\(levels)")
        // The last step is a twenty-fifth of the way (or less) from silence; the mute comes from there.
        let amplitude = pow(Double(downs.last?.channels[0] ?? Volume.norm) / Double(Volume.norm), 3)
        #expect(amplitude <= 0.05, "the last step before the mute: \(String(describing: downs.last))")
        #expect(!way.contains { if case .setStreamVolume(_, let v) = $0.op { v.isSilent } else { false } })
        // Then the mute, and the user's volume under it, in that order: nothing is heard twice.
        let tail = way.suffix(2).map(\.op)
        #expect(tail == [.setStreamMute(.playback(1), true), .setStreamVolume(.playback(1), .normal)], "\(way)")
        #expect((440...520).contains(way.last?.ms ?? 0), "muted \(way.last?.ms ?? 0) ms after the first step")
        #expect(
            h.engine.appliedChange(of: .playback(1))
                == AppliedChange(
                    stream: .playback(1), applicationName: "app", unmute: true, appliedVolume: nil, restoreVolume: nil))
        #expect(h.engine.fading.isEmpty)
    }

    /// A game someone hears, on a server that ramps its factor (PipeWire 0.3.68 and later): its give-backs
    /// (`serverRamps`, off in audiod), or its ducks and fade-out (`volume`).
    func heardRampedGame(_ h: inout Harness, volume: Bool = false) -> SessionID {
        let game = h.session(pid: 10, "solo-ambient")
        _ = h.echo(h.activate(game))
        var info = StreamInfo(id: .playback(1), processChain: [10], applicationName: "app")
        if volume { info.serverRampsVolume = true } else { info.serverRamps = true }
        _ = h.echo(h.send(.streamAppeared(info)))
        return game
    }

    @Test func whereTheServerRampsAGiveBackIsOneServerRampUpNotSteps() {
        var h = Harness(fades: true)
        _ = heardRampedGame(&h)
        // Silent mode still fades out in steps (a server ramp down would hold audiod's mute unsent for its length,
        // and a user's mute meanwhile could not be told from it).
        let on = h.silent(true)
        #expect(volumes(on, .playback(1)).count == 1, "the fade-out's first step: \(on)")
        _ = h.echo(on)
        let way = runAll(&h, .playback(1))
        #expect(way.contains { $0.op == .setStreamMute(.playback(1), true) }, "\(way)")
        // Given back: the server ramps it up from silence over fade-in, with no step written.
        let off = h.silent(false)
        #expect(streamOps(off) == [.rampStreamUnmute(.playback(1), nanoseconds: 1_000_000_000)], "\(off)")
        #expect(h.engine.fading.isEmpty)
        #expect(h.engine.appliedChange(of: .playback(1)) == nil, "audiod still holds something: nothing to put back")
        _ = h.echo(off)
        #expect(h.engine.streamView(.playback(1))?.audible == true)
    }

    @Test func whereTheServerRampsADuckedStreamGivenBackGetsItsDuckUnderTheMuteThenTheRampUp() {
        var h = Harness(fades: true)
        _ = heardRampedGame(&h)
        let ducker = h.session(pid: 30, "playback", options: ["duck-others", "mix-with-others"])
        _ = h.echo(h.activate(ducker))
        _ = runAll(&h, .playback(1))
        _ = h.echo(h.silent(true))
        _ = runAll(&h, .playback(1))
        let off = h.silent(false)
        let ops = streamOps(off)
        #expect(ops.last == .rampStreamUnmute(.playback(1), nanoseconds: 1_000_000_000), "\(off)")
        #expect(!ops.contains(.setStreamMute(.playback(1), false)), "\(off)")
        // No volume step on the way up: at most the duck's own volume, written under the mute first.
        #expect(volumes(off, .playback(1)).count <= 1, "\(off)")
    }

    @Test func whereTheServerRampsADuckAndItsUndoingAreOneServerRampEach() {
        var h = Harness(fades: true)
        var info = StreamInfo(id: .playback(1), processChain: [10], applicationName: "app", role: "music")
        info.serverRampsVolume = true
        _ = h.echo(h.send(.streamAppeared(info)))
        let ducker = h.session(pid: 20, "playback", options: ["duck-others"])
        let start = h.activate(ducker)
        let ducked = Volume.normal.multiplied(by: Self.duck)
        #expect(streamOps(start) == [.rampStreamVolume(.playback(1), ducked, nanoseconds: 500_000_000)], "\(start)")
        #expect(!start.contains(.scheduleTimer(.fadeStep, afterNanoseconds: Settings.fadeStepNanoseconds)))
        #expect(h.engine.fading.isEmpty)
        // Held as done from now: journaled as audiod's, the user's volume to put back.
        #expect(h.engine.appliedChange(of: .playback(1))?.restoreVolume == .normal)
        #expect(h.engine.appliedChange(of: .playback(1))?.appliedVolume == ducked)
        _ = h.echo(start)
        #expect(runAll(&h, .playback(1)).isEmpty, "no steps after the ramp")

        // The user's volume meanwhile: the duck on top of it at once, as with steps.
        let mine = Volume(uniform: 40_000)
        let e = h.change(.playback(1)) { $0.volume = mine }
        #expect(streamOps(e) == [.setStreamVolume(.playback(1), mine.multiplied(by: Self.duck))], "\(e)")
        _ = h.echo(e)

        let end = h.deactivate(ducker)
        #expect(streamOps(end) == [.rampStreamVolume(.playback(1), mine, nanoseconds: 500_000_000)], "\(end)")
        #expect(h.engine.appliedChange(of: .playback(1)) == nil, "audiod still holds the volume it gave back")
        _ = h.echo(end)

        // A voice prompt's duck within 100 ms, as its steps.
        let prompt = h.session(pid: 30, "playback", mode: "voice-prompt", options: ["duck-others"])
        let p = h.activate(prompt)
        let strong = mine.multiplied(by: Volume.fromLinear(Settings.defaultStrongDuckLevel))
        #expect(streamOps(p) == [.rampStreamVolume(.playback(1), strong, nanoseconds: 100_000_000)], "\(p)")
    }

    @Test func whereTheServerRampsVolumesSilentModeFadesOutAsOneRampThenMutesOnceItHasRun() {
        var h = Harness(fades: true)
        _ = heardRampedGame(&h, volume: true)
        let silence = Volume(uniform: 0, count: Volume.normal.channels.count)
        let on = h.silent(true)
        #expect(streamOps(on) == [.rampStreamVolume(.playback(1), silence, nanoseconds: 500_000_000)], "\(on)")
        _ = h.echo(on)
        // No step while the ramp runs; the mute once it has surely run, with the user's volume back under it.
        let way = runAll(&h, .playback(1))
        #expect(
            way.map(\.op) == [.setStreamMute(.playback(1), true), .setStreamVolume(.playback(1), .normal)], "\(way)")
        #expect((540...600).contains(way.first?.ms ?? 0), "muted \(way.first?.ms ?? 0) ms after the ramp began")
        #expect(h.engine.fading.isEmpty)
    }

    /// Silent mode during a duck's server ramp: the server starts the fade-out's ramp only once the duck's has run
    /// (it refuses a second), so the mute waits for both (a mute at the fade-out's own length would cut it).
    @Test func aRampedFadeOutAfterAnotherRampMutesOnceBothHaveRun() {
        var h = Harness(fades: true)
        _ = heardRampedGame(&h, volume: true)
        let ducker = h.session(pid: 30, "playback", options: ["duck-others", "mix-with-others"])
        _ = h.echo(h.activate(ducker))
        h.advance(ms: 199)
        _ = h.echo(h.send(.timerFired(.fadeStep)))
        let on = h.silent(true)
        #expect(streamOps(on).count == 1, "\(on)")
        _ = h.echo(on)
        let way = runAll(&h, .playback(1))
        // The duck's ramp ends 560 ms after it began (some 360 ms from here), the fade-out's 560 ms after that.
        #expect(way.first?.op == .setStreamMute(.playback(1), true), "\(way)")
        #expect((900...960).contains(way.first?.ms ?? 0), "muted \(way.first?.ms ?? 0) ms after silent mode")
    }

    @Test func aUsersMuteDuringARampedFadeOutIsTheUsers() {
        var h = Harness(fades: true)
        _ = heardRampedGame(&h, volume: true)
        _ = h.echo(h.silent(true))
        h.advance(ms: 200)
        let e = h.change(.playback(1)) { $0.muted = true }
        // Its volume back (held by the backend for the ramp's end); no mute of audiod's to undo later.
        #expect(streamOps(e) == [.setStreamVolume(.playback(1), .normal)], "\(e)")
        _ = h.echo(e)
        _ = runAll(&h, .playback(1))
        let off = h.silent(false)
        #expect(!streamOps(off).contains(.setStreamMute(.playback(1), false)), "the user's mute undone: \(off)")
    }

    @Test func silentModeOffDuringARampedFadeOutRampsBackUp() {
        var h = Harness(fades: true)
        _ = heardRampedGame(&h, volume: true)
        _ = h.echo(h.silent(true))
        h.advance(ms: 200)
        _ = h.echo(h.send(.timerFired(.fadeStep)))
        let off = h.silent(false)
        #expect(streamOps(off) == [.rampStreamVolume(.playback(1), .normal, nanoseconds: 500_000_000)], "\(off)")
        _ = h.echo(off)
        #expect(runAll(&h, .playback(1)).isEmpty)
        #expect(h.engine.appliedChange(of: .playback(1)) == nil)
    }

    @Test func aStreamTheServerCannotRampIsGivenBackInSteps() {
        var h = Harness(fades: true)
        _ = heardGame(&h)
        _ = h.echo(h.silent(true))
        _ = runAll(&h, .playback(1))
        let off = h.silent(false)
        #expect(!off.contains { if case .rampStreamUnmute = $0 { true } else { false } }, "\(off)")
        #expect(streamOps(off).contains(.setStreamMute(.playback(1), false)), "\(off)")
    }

    @Test func silentModeOffMidFadeOutFadesBackUpWithoutAMute() {
        var h = Harness(fades: true)
        _ = heardGame(&h)
        _ = h.echo(h.silent(true))
        for _ in 0..<5 {
            h.advance(ms: 19)
            _ = h.echo(h.send(.timerFired(.fadeStep)))
        }
        let off = h.silent(false)
        #expect(!streamOps(off).contains { if case .setStreamMute = $0 { true } else { false } }, "\(off)")
        _ = h.echo(off)
        let way = runAll(&h, .playback(1))
        #expect(!way.contains { if case .setStreamMute = $0.op { true } else { false } }, "\(way)")
        #expect(way.last.map { $0.op == .setStreamVolume(.playback(1), .normal) } == true, "\(way)")
        #expect(h.engine.appliedChange(of: .playback(1)) == nil)
    }

    /// A sound racing in (here music interrupting the game) cannot wait for the fade: the mute comes at once, then
    /// the volume goes back under it.
    @Test func anInterruptionMidFadeOutMutesAtOnce() {
        var h = Harness(fades: true)
        _ = heardGame(&h)
        _ = h.echo(h.silent(true))
        h.advance(ms: 19)
        _ = h.echo(h.send(.timerFired(.fadeStep)))
        let music = h.session(pid: 20, "playback")
        let e = h.activate(music)
        let ops = streamOps(e).filter {
            switch $0 {
            case .setStreamMute(.playback(1), _), .setStreamVolume(.playback(1), _): true
            default: false
            }
        }
        #expect(ops == [.setStreamMute(.playback(1), true), .setStreamVolume(.playback(1), .normal)], "\(e)")
        #expect(h.engine.fading.isEmpty)
    }

    @Test func silencingsThatRaceANewSoundAreNotFaded() {
        var h = Harness(fades: true)
        _ = heardGame(&h)
        let music = h.session(pid: 20, "playback")
        let e = h.activate(music)
        #expect(streamOps(e).first == .setStreamMute(.playback(1), true), "\(e)")
        #expect(volumes(e, .playback(1)).isEmpty)
        #expect(h.engine.fading.isEmpty)
    }

    /// The user's volume ends the fade, and the silencing with it: muted at once, the user's volume kept.
    @Test func theUsersVolumeMidFadeOutMutesAtOnce() {
        var h = Harness(fades: true)
        _ = heardGame(&h)
        _ = h.echo(h.silent(true))
        h.advance(ms: 19)
        _ = h.echo(h.send(.timerFired(.fadeStep)))
        let mine = Volume(uniform: 40_000)
        let e = h.change(.playback(1)) { $0.volume = mine }
        #expect(streamOps(e) == [.setStreamMute(.playback(1), true), .setStreamVolume(.playback(1), mine)], "\(e)")
        #expect(h.engine.fading.isEmpty)
        _ = h.echo(e)
        #expect(h.engine.appliedChange(of: .playback(1))?.appliedVolume == nil)
        #expect(h.silent(false).contains(.setStreamMute(.playback(1), false)))
    }

    @Test func theLockFadesOutAndTheStopPathFadesOutNothing() {
        var h = Harness(settings: Settings(followsLockScreen: true), fades: true)
        // An implicit game: the lock silences its streams (an explicit session behind it is interrupted instead).
        _ = h.echo(h.play(1, pid: 10, role: "game"))
        #expect(h.engine.streamView(.playback(1))?.audible == true)
        let lock = h.send(.screenLocked(true))
        #expect(volumes(lock, .playback(1)).count == 1 && !streamOps(lock).contains(.setStreamMute(.playback(1), true)))
        #expect(h.engine.streamView(.playback(1))?.policyMuted == true)
        _ = h.echo(lock)
        let way = runAll(&h, .playback(1))
        #expect(
            way.suffix(2).map(\.op) == [.setStreamMute(.playback(1), true), .setStreamVolume(.playback(1), .normal)])
        #expect(Settings.restoreOnly.fadeOutNanoseconds == 0)
    }

    /// An explicit ambient session behind the lock is interrupted (it is told why) and its heard stream fades out.
    @Test func anExplicitSessionTheLockInterruptsFadesOut() {
        var h = Harness(settings: Settings(followsLockScreen: true), fades: true)
        let chime = h.session(pid: 10, "ambient")
        _ = h.echo(h.activate(chime))
        _ = h.echo(h.play(1, pid: 10))
        let lock = h.send(.screenLocked(true))
        #expect(signals(lock) == [.signal(chime, .interruptionBegan(.screenLocked, interrupter: nil))], "\(lock)")
        #expect(
            volumes(lock, .playback(1)).count == 1 && !streamOps(lock).contains(.setStreamMute(.playback(1), true)),
            "\(streamOps(lock)) \(String(describing: h.engine.sessions[chime]))")
        _ = h.echo(lock)
        let way = runAll(&h, .playback(1))
        #expect(
            way.suffix(2).map(\.op) == [.setStreamMute(.playback(1), true), .setStreamVolume(.playback(1), .normal)])
    }

    /// Found by review: a fade-out no longer than a step used to end with the volume at 0, unmuted, and audiod
    /// holding nothing — the 0 then taken for the user's. Silence is written and held, and the mute follows.
    @Test func aFadeOutNoLongerThanAStepEndsInSilenceThenTheMute() {
        var s = Settings()
        s.fadeOutNanoseconds = 10_000_000
        var h = Harness(settings: s, fades: true)
        _ = heardGame(&h)
        let on = h.silent(true)
        #expect(volumes(on, .playback(1)).map(\.isSilent) == [true], "\(on)")
        #expect(h.engine.appliedChange(of: .playback(1))?.restoreVolume == .normal)
        // The server's report of the silence (or the next step, whichever comes first) brings the mute.
        let after = h.echo(on)
        #expect(streamOps(after) == [.setStreamMute(.playback(1), true), .setStreamVolume(.playback(1), .normal)])
        _ = h.echo(after)
        #expect(runAll(&h, .playback(1)).isEmpty)
        #expect(h.engine.streamView(.playback(1)).map { $0.info.muted && $0.info.volume == .normal } == true)
        _ = h.echo(h.silent(false))
        _ = runAll(&h, .playback(1))
        #expect(h.engine.appliedChange(of: .playback(1)) == nil)
        #expect(h.engine.streamView(.playback(1)).map { !$0.info.muted && $0.info.volume == .normal } == true)
    }

    /// Found by review: an app unmuting its output while silent mode holds used to leave the server's mute (set
    /// for the app) unowned, and the next report made it the user's. audiod takes the mute over at once.
    @Test func anOutputUnmutedUnderSilentModeIsMutedByAudiodAndGivenBackAfter() {
        var h = Harness(fades: true)
        let chime = h.session(pid: 10, "ambient")
        _ = h.echo(h.activate(chime))
        _ = h.echo(h.play(1, pid: 10))
        let r = h.request()
        _ = h.echo(h.send(.setOutputMuted(r, chime, true)))
        _ = h.echo(h.silent(true))
        let r2 = h.request()
        let e = h.send(.setOutputMuted(r2, chime, false))
        #expect(!streamOps(e).contains(.setStreamMute(.playback(1), false)), "\(e)")
        #expect(volumes(e, .playback(1)).isEmpty, "\(e)")
        #expect(h.engine.appliedChange(of: .playback(1))?.unmute == true, "audiod holds the mute now")
        _ = h.echo(e)
        _ = runAll(&h, .playback(1))
        let off = h.silent(false)
        #expect(off.contains(.setStreamMute(.playback(1), false)), "\(off)")
    }

    /// Found by review: a call while the lock fades an interrupted session out races the fade: muted at once.
    @Test func aCallDuringTheLocksFadeOutMutesAtOnce() {
        var h = Harness(settings: Settings(followsLockScreen: true), fades: true)
        let chime = h.session(pid: 10, "ambient")
        _ = h.echo(h.activate(chime))
        _ = h.echo(h.play(1, pid: 10))
        _ = h.echo(h.send(.screenLocked(true)))
        h.advance(ms: 19)
        _ = h.echo(h.send(.timerFired(.fadeStep)))
        #expect(h.engine.fading.contains(.playback(1)))
        let call = h.session(pid: 20, "play-and-record", mode: "voice-chat")
        // An active call races the fade: the stream is decided again as the call begins, and muted at once.
        let e = h.activate(call)
        #expect(streamOps(e).first == .setStreamMute(.playback(1), true), "\(e)")
        #expect(h.engine.fading.isEmpty)
    }

    /// A call's stream announced (listed, not yet linked) mutes a stream silent mode is fading out, ahead.
    @Test func anAnnouncedCallMutesAFadeOutAhead() {
        var h = Harness(fades: true)
        _ = heardGame(&h)
        _ = h.echo(h.silent(true))
        let call = StreamInfo(
            id: .playback(2), processChain: [300], applicationName: "softphone", role: "phone", corked: true,
            volume: Volume(uniform: 0), device: "")
        let e = h.send(.streamAnnounced(call))
        #expect(streamOps(e).first == .setStreamMute(.playback(1), true), "\(e)")
    }

    /// A stop mid-fade-out puts back the user's volume and has no mute to undo.
    @Test func aStopMidFadeOutPutsTheUsersVolumeBack() {
        var h = Harness(fades: true)
        _ = heardGame(&h)
        _ = h.echo(h.silent(true))
        h.advance(ms: 19)
        _ = h.echo(h.send(.timerFired(.fadeStep)))
        #expect(h.engine.restoreEverything() == [.setStreamVolume(.playback(1), .normal)])
    }
}
