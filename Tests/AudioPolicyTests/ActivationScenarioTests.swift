import Testing

@testable import AudioPolicy

/// docs/POLICY.md §1–§3 as scripts: each step asserts the exact effects.
@Suite struct ActivationScenarioTests {
    let s1 = SessionID(1), s2 = SessionID(2), s3 = SessionID(3)

    @Test func aNewMusicAppTakesTheAudioForGood() {
        var h = Harness()
        let a = h.session(pid: 10, "playback")
        #expect(h.activate(a) == [.sessionPropertiesChanged(a, [.active(true)]), h.ok])
        #expect(
            h.play(1, pid: 10) == [
                .sessionPropertiesChanged(a, [.streams([1])]),
                .managerPropertiesChanged([.otherAudioPlaying(true), .primaryAudioSession(a)]),
            ])
        let b = h.session(pid: 20, "playback")
        #expect(
            h.activate(b) == [
                .setStreamMute(.playback(1), true),
                .signal(a, .interruptionBegan(.default, interrupter: b)),
                .sessionPropertiesChanged(
                    a, [.active(false), .interrupted(true), .secondaryAudioShouldBeSilencedHint(true)]),
                // B was made while A played; nothing plays now, but B takes over primary audio until its first sound
                // (§5 "Handovers"): A gets the hint, B loses it.
                .sessionPropertiesChanged(
                    b,
                    [
                        .active(true), .secondaryAudioShouldBeSilencedHint(false), .otherAudioPlaying(false),
                    ]),
                .managerPropertiesChanged([.otherAudioPlaying(false), .primaryAudioSession(b)]),
                .scheduleTimer(.handover(b), afterNanoseconds: 2_000_000_000),
                h.ok,
            ])
        _ = h.echo([.setStreamMute(.playback(1), true)])
        _ = h.play(2, pid: 20)
        // Without notify: A is told it may not resume and stays silenced.
        #expect(
            h.deactivate(b) == [
                .signal(a, .interruptionEnded(shouldResume: false)),
                .sessionPropertiesChanged(a, [.interrupted(false), .secondaryAudioShouldBeSilencedHint(false)]),
                .sessionPropertiesChanged(b, [.active(false)]),
                .managerPropertiesChanged([.primaryAudioSession(nil)]),
                h.ok,
            ])
        #expect(h.engine.streamView(.playback(1))?.policyMuted == true)
        // Its own SetActive(true) brings it back (and interrupts nobody: B is inactive).
        #expect(streamOps(h.activate(a)) == [.setStreamMute(.playback(1), false)])
    }

    @Test func aCallInterruptsMusicAndLetsItResume() {
        var h = Harness()
        let music = h.session(pid: 10, "playback")
        _ = h.activate(music)
        _ = h.play(1, pid: 10)
        let ambient = h.session(pid: 11, "ambient")
        _ = h.activate(ambient)
        _ = h.play(2, pid: 11)
        let call = h.session(pid: 20, "play-and-record", mode: "voice-chat")
        let effects = h.activate(call)
        // A call interrupts every active session, mixable or not, with reason call.
        #expect(
            signals(effects) == [
                .signal(music, .interruptionBegan(.call, interrupter: call)),
                .signal(ambient, .interruptionBegan(.call, interrupter: call)),
            ])
        // The ambient stream was already silenced as secondary audio while the music played (§5).
        #expect(streamOps(effects) == [.setStreamMute(.playback(1), true)])
        #expect(h.engine.streamView(.playback(2))?.policyMuted == true)
        // During the call, music may not activate.
        let refused = h.activate(music)
        #expect(refused == [.reply(h.lastRequest, .error(.insufficientPriority(call: call)))])
        // A record session that is not a call is refused too; mixable playback is allowed.
        let rec = h.session(pid: 30, "record")
        #expect(h.activate(rec).last == .reply(h.lastRequest, .error(.insufficientPriority(call: call))))
        let chime = h.session(pid: 31, "playback", options: ["mix-with-others"])
        #expect(h.activate(chime).last == h.ok)
        // Hanging up with notify: both get InterruptionEnded(true) and stay silenced until they reactivate.
        let end = h.deactivate(call, notify: true)
        #expect(
            signals(end) == [
                .signal(music, .interruptionEnded(shouldResume: true)),
                .signal(ambient, .interruptionEnded(shouldResume: true)),
            ])
        #expect(streamOps(end) == [])
        #expect(streamOps(h.activate(music)) == [.setStreamMute(.playback(1), false)])
    }

    @Test func aSecondCallInterruptsTheFirst() {
        var h = Harness()
        let c1 = h.session(pid: 10, "play-and-record", mode: "voice-chat")
        let c2 = h.session(pid: 20, "play-and-record", mode: "video-chat")
        _ = h.activate(c1)
        #expect(signals(h.activate(c2)) == [.signal(c1, .interruptionBegan(.call, interrupter: c2))])
    }

    @Test func spokenAudioIsInterruptedByANavigationPromptAndAlwaysResumes() {
        var h = Harness()
        let podcast = h.session(pid: 10, "playback", mode: "spoken-audio")
        _ = h.activate(podcast)
        _ = h.play(1, pid: 10)
        let nav = h.session(
            pid: 20, "playback", mode: "voice-prompt", options: ["interrupt-spoken-audio-and-mix-with-others"])
        let begin = h.activate(nav)
        #expect(signals(begin) == [.signal(podcast, .interruptionBegan(.default, interrupter: nav))])
        #expect(streamOps(begin) == [.setStreamMute(.playback(1), true)])
        // Even without notify, a spoken-audio interruption ends with should_resume = true.
        #expect(signals(h.deactivate(nav)) == [.signal(podcast, .interruptionEnded(shouldResume: true))])
    }

    @Test func duckingFollowsTheDuckerBeingActiveAndTheDuckLevel() {
        var h = Harness()
        let music = h.session(pid: 10, "playback")
        _ = h.activate(music)
        _ = h.play(1, pid: 10, volume: Volume(uniform: 40000))
        _ = h.record(5, pid: 12)
        // An ordinary ducker: a voice prompt ducks deeper (DuckDepthScenarioTests).
        let nav = h.session(pid: 20, "playback", options: ["duck-others"])
        let ducked = Volume(uniform: Volume.multiply(40000, Volume.fromLinear(0.2)))
        // Ducking starts on activation, not on sound; the ducker and record streams are never ducked.
        let on = h.activate(nav)
        #expect(streamOps(on) == [.setStreamVolume(.playback(1), ducked)])
        #expect(signals(on) == [.signal(nav, .silenceSecondaryAudioHint(.begin))])
        _ = h.echo(on)
        _ = h.play(2, pid: 20)
        #expect(h.engine.streamView(.playback(1))?.duckFactor == 0.2)
        #expect(h.engine.streamView(.playback(2))?.duckFactor == 1.0)
        // A new DuckLevel applies at once, from the user's volume.
        let r = h.request()
        let relevel = h.send(.setDuckLevel(r, 0.5))
        #expect(
            streamOps(relevel) == [
                .setStreamVolume(.playback(1), Volume(uniform: Volume.multiply(40000, Volume.fromLinear(0.5))))
            ])
        #expect(relevel.contains(.managerPropertiesChanged([.duckLevel(0.5)])))
        _ = h.echo(relevel)
        // Out of range is refused with a message.
        let bad = h.send(.setDuckLevel(h.request(), 1.5))
        #expect(
            bad.count == 1
                && bad[0]
                    == .reply(
                        h.lastRequest,
                        .error(.invalidArgs("DuckLevel 1.5 is out of range: it must be greater than 0 and less than 1"))
                    )
        )
        // Deactivating the ducker restores exactly the user's volume.
        #expect(streamOps(h.deactivate(nav)) == [.setStreamVolume(.playback(1), Volume(uniform: 40000))])
    }

    @Test func setCategoryOnAnActiveSessionIsJudgedLikeAnActivation() {
        var h = Harness()
        let game = h.session(pid: 10, "ambient")
        let music = h.session(pid: 20, "playback")
        _ = h.activate(music)
        _ = h.activate(game)
        // Ambient → solo-ambient while active: now non-mixable, it interrupts the music.
        let e = h.setCategory(game, "solo-ambient")
        #expect(
            signals(e) == [
                .signal(music, .interruptionBegan(.default, interrupter: game)),
                .signal(game, .routeChanged(.categoryChange, previousDevice: nil, currentDevice: nil)),
            ])
        #expect(e.contains(.sessionPropertiesChanged(game, [.category(.soloAmbient), .options([]), .mixable(false)])))
        // During a call, becoming non-mixable is refused and nothing changes.
        let call = h.session(pid: 30, "play-and-record", mode: "voice-chat")
        _ = h.activate(call)
        let chime = h.session(pid: 40, "ambient")
        _ = h.activate(chime)
        let refused = h.setCategory(chime, "playback")
        #expect(refused == [.reply(h.lastRequest, .error(.insufficientPriority(call: call)))])
        #expect(h.view(chime)?.configuration.category == .ambient)
        // Errors keep the old configuration.
        #expect(h.setCategory(game, "playback", options: ["nope"]).last?.isError == true)
        #expect(h.view(game)?.configuration.category == .soloAmbient)
    }

    @Test func deactivationOfAnInterruptedInterrupterReTiesToTheHolder() {
        var h = Harness()
        let a = h.session(pid: 10, "playback")
        let b = h.session(pid: 20, "playback")
        let call = h.session(pid: 30, "play-and-record", mode: "voice-chat")
        _ = h.activate(a)
        _ = h.activate(b)  // interrupts A; A tied to B
        _ = h.activate(call)  // interrupts B; B tied to the call, A stays tied to B
        // B gives up with notify while the call holds the audio: A would be interrupted by the call too, so it
        // waits for the call instead of being told to resume now.
        #expect(signals(h.deactivate(b, notify: true)) == [])
        let end = h.deactivate(call, notify: true)
        #expect(
            signals(end) == [
                .signal(a, .interruptionEnded(shouldResume: true)),
                .signal(b, .interruptionEnded(shouldResume: true)),
            ])
        // At most once per begin.
        #expect(signals(h.deactivate(call, notify: true)) == [])
    }

    @Test func activatingAnInterruptedSessionUntiesIt() {
        var h = Harness()
        let a = h.session(pid: 10, "playback")
        let b = h.session(pid: 20, "playback")
        _ = h.activate(a)
        _ = h.activate(b)
        #expect(signals(h.activate(a)) == [.signal(b, .interruptionBegan(.default, interrupter: a))])
        // A is no longer tied to B: B's deactivation ends nothing for A.
        #expect(signals(h.deactivate(b, notify: true)) == [])
        #expect(signals(h.deactivate(a, notify: true)) == [.signal(b, .interruptionEnded(shouldResume: true))])
    }

    @Test func releaseAndOwnerVanishingDeactivateWithNotify() {
        var h = Harness()
        let a = h.session(pid: 10, "playback")
        let b = h.session(pid: 20, "playback")
        _ = h.activate(a)
        _ = h.activate(b)
        let gone = h.send(.ownerVanished(b))
        #expect(signals(gone) == [.signal(a, .interruptionEnded(shouldResume: true))])
        #expect(gone.contains(.sessionRemoved(b)))
        #expect(h.view(b) == nil)
        let c = h.session(pid: 30, "playback")
        _ = h.activate(a)
        _ = h.activate(c)
        let rel = h.release(c)
        #expect(signals(rel) == [.signal(a, .interruptionEnded(shouldResume: true))])
        #expect(rel.last == h.ok)
        #expect(h.release(c) == [.reply(h.lastRequest, .error(.noSuchSession("there is no session \(c.rawValue)")))])
    }

    @Test func aProcessLifetimeSessionEndsWithItsProcess() {
        var h = Harness()
        let a = h.session(pid: 10, "playback")
        let shell = h.create(pid: 20, lifetime: .process)
        _ = h.setCategory(shell, "playback")
        _ = h.activate(a)
        _ = h.activate(shell)
        let e = h.send(.processExited(pid: 20))
        #expect(signals(e) == [.signal(a, .interruptionEnded(shouldResume: true))])
        #expect(e.contains(.sessionRemoved(shell)))
    }

    @Test func implicitSessionsCannotBeDrivenOverTheBus() {
        var h = Harness()
        _ = h.play(1, pid: 50, role: "music")
        let implicit = try! #require(h.engine.streamView(.playback(1))?.session)
        let e = h.activate(implicit)
        #expect(e.last?.isError == true)
        if case .reply(_, .error(let err))? = e.last { #expect(err.name == "org.freedesktop.DBus.Error.AccessDenied") }
    }

    @Test func recordInterruptsPlaybackButNotMixableOutput() {
        var h = Harness()
        let music = h.session(pid: 10, "playback")
        let notify = h.session(pid: 11, "ambient")
        _ = h.activate(music)
        _ = h.activate(notify)
        let rec = h.session(pid: 20, "record")
        #expect(signals(h.activate(rec)) == [.signal(music, .interruptionBegan(.default, interrupter: rec))])
        #expect(h.view(notify)?.active == true)
    }
}

extension Effect {
    var isError: Bool { if case .reply(_, .error) = self { return true } else { return false } }
}
