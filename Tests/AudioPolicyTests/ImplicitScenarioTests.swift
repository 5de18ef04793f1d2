import Testing

@testable import AudioPolicy

/// docs/POLICY.md §7: apps that never talk to audiod.
@Suite struct ImplicitScenarioTests {
    static let mpv1 = PlayerID("org.mpris.MediaPlayer2.mpv")
    static let mpv2 = PlayerID("org.mpris.MediaPlayer2.mpv.instance200")

    /// The first of two players is paused through MPRIS when the second starts, stays paused when the second is
    /// paused (no surprise resume), and takes the audio back when the user presses Play.
    @Test func twoPlayers() {
        var h = Harness()
        _ = h.send(.playerAppeared(PlayerInfo(id: Self.mpv1, pid: 100, status: .playing)))
        _ = h.play(1, pid: 100, name: "mpv")
        let first = try! #require(h.engine.streamView(.playback(1))?.session)
        #expect(h.view(first)?.configuration == Configuration(category: .playback))
        #expect(h.view(first)?.active == true)

        _ = h.send(.playerAppeared(PlayerInfo(id: Self.mpv2, pid: 200, status: .playing)))
        let take = h.play(2, pid: 200, name: "mpv")
        let second = try! #require(h.engine.streamView(.playback(2))?.session)
        #expect(take.contains(.mprisPause(Self.mpv1)))
        #expect(streamOps(take) == [.setStreamMute(.playback(1), true)])
        #expect(signals(take) == [.signal(first, .interruptionBegan(.default, interrupter: second))])
        _ = h.echo(take)
        _ = h.send(.playerStatusChanged(Self.mpv1, .paused))
        _ = h.change(.playback(1)) { $0.corked = true }

        // The second is paused by the user: after the linger it deactivates without notify; the first stays paused.
        let pause = h.send(.playerStatusChanged(Self.mpv2, .paused))
        #expect(pause.contains(.scheduleTimer(.linger(second), afterNanoseconds: 2_000_000_000)))
        let linger = h.send(.timerFired(.linger(second)))
        #expect(signals(linger) == [.signal(first, .interruptionEnded(shouldResume: false))])
        #expect(!linger.contains(.mprisPlay(Self.mpv1)))
        #expect(streamOps(linger) == [])

        // The user presses Play in the first player: it takes the audio back.
        _ = h.change(.playback(1)) { $0.corked = false }
        let play = h.send(.playerStatusChanged(Self.mpv1, .playing))
        #expect(streamOps(play) == [.setStreamMute(.playback(1), false)])
        #expect(h.view(first)?.active == true)
    }

    @Test func aPlayerInterruptedByAnExplicitSessionResumesThroughMPRISOnNotify() {
        var h = Harness()
        _ = h.send(.playerAppeared(PlayerInfo(id: Self.mpv1, pid: 100, status: .playing)))
        _ = h.play(1, pid: 100)
        let alarm = h.session(pid: 20, "playback")
        let e = h.activate(alarm)
        #expect(e.contains(.mprisPause(Self.mpv1)))
        _ = h.echo(e)
        _ = h.send(.playerStatusChanged(Self.mpv1, .paused))
        let end = h.deactivate(alarm, notify: true)
        #expect(end.contains(.mprisPlay(Self.mpv1)))
        #expect(streamOps(end) == [.setStreamMute(.playback(1), false)])
    }

    /// The player's own `Playing`, sent before it heard audiod's `Pause`, arrives after audiod decided: it is no press
    /// of Play, and the player is still audiod's to resume (measured with real mpv: the notify came before the
    /// player's `Paused`, and no `Play` was sent).
    @Test func aPlayingThatCrossedThePauseStillResumesOnNotify() {
        var h = Harness()
        _ = h.send(.playerAppeared(PlayerInfo(id: Self.mpv1, pid: 100, status: .playing)))
        _ = h.play(1, pid: 100)
        let video = h.session(pid: 20, "playback")
        let e = h.activate(video)
        #expect(e.contains(.mprisPause(Self.mpv1)))
        _ = h.send(.playerStatusChanged(Self.mpv1, .playing))
        let end = h.deactivate(video, notify: true)
        #expect(end.contains(.mprisPlay(Self.mpv1)), "\(end)")
        // Once it has said Paused, its Playing is the user's own press: nothing is left for audiod to resume.
        let again = h.activate(video)
        _ = h.send(.playerStatusChanged(Self.mpv1, .paused))
        _ = h.send(.playerStatusChanged(Self.mpv1, .playing))
        #expect(again.contains(.mprisPause(Self.mpv1)), "\(again)")
        #expect(!h.deactivate(video, notify: true).contains(.mprisPlay(Self.mpv1)))
    }

    @Test func anOwnerVanishingResumesPlayersOnlyAfterACall() {
        var h = Harness()
        _ = h.send(.playerAppeared(PlayerInfo(id: Self.mpv1, pid: 100, status: .playing)))
        _ = h.play(1, pid: 100)
        let music = h.session(pid: 20, "playback")
        _ = h.echo(h.activate(music))
        let gone = h.send(.ownerVanished(music))
        #expect(!gone.contains(.mprisPlay(Self.mpv1)))
        #expect(streamOps(gone) == [.setStreamMute(.playback(1), false)])

        var c = Harness()
        _ = c.send(.playerAppeared(PlayerInfo(id: Self.mpv1, pid: 100, status: .playing)))
        _ = c.play(1, pid: 100)
        let call = c.session(pid: 20, "play-and-record", mode: "voice-chat")
        _ = c.echo(c.activate(call))
        #expect(c.send(.ownerVanished(call)).contains(.mprisPlay(Self.mpv1)))
    }

    @Test func anAppWithoutMPRISIsMutedAndUnmutedEvenWithoutResume() {
        var h = Harness()
        _ = h.play(1, pid: 100, role: "music")
        let app = try! #require(h.engine.streamView(.playback(1))?.session)
        let music = h.session(pid: 20, "playback")
        let e = h.activate(music)
        #expect(streamOps(e) == [.setStreamMute(.playback(1), true)])
        #expect(signals(e) == [.signal(app, .interruptionBegan(.default, interrupter: music))])
        _ = h.echo(e)
        let end = h.deactivate(music)
        #expect(signals(end) == [.signal(app, .interruptionEnded(shouldResume: false))])
        #expect(streamOps(end) == [.setStreamMute(.playback(1), false)])
    }

    @Test func aPhoneRoleStreamIsACallThatLetsThePlayerResume() {
        var h = Harness()
        _ = h.send(.playerAppeared(PlayerInfo(id: Self.mpv1, pid: 100, status: .playing)))
        _ = h.play(1, pid: 100)
        let call = h.play(2, pid: 300, role: "phone")
        let phone = try! #require(h.engine.streamView(.playback(2))?.session)
        #expect(h.view(phone)?.configuration.isCall == true)
        #expect(call.contains(.mprisPause(Self.mpv1)))
        _ = h.echo(call)
        _ = h.send(.playerStatusChanged(Self.mpv1, .paused))
        let hangup = h.send(.streamRemoved(.playback(2)))
        #expect(hangup.contains(.scheduleTimer(.linger(phone), afterNanoseconds: 2_000_000_000)))
        let end = h.send(.timerFired(.linger(phone)))
        #expect(end.contains(.mprisPlay(Self.mpv1)))
        #expect(end.contains(.sessionRemoved(phone)))
        #expect(streamOps(end) == [.setStreamMute(.playback(1), false)])
    }

    @Test func aBrowsersHelperStreamBelongsToThePlayerOwner() {
        var h = Harness()
        let chromium = PlayerID("org.mpris.MediaPlayer2.chromium.instance300")
        _ = h.play(1, pid: 301, chain: [300, 1], name: "Chromium")
        let helper = try! #require(h.engine.streamView(.playback(1))?.session)
        #expect(h.view(helper)?.processID == 301)
        let e = h.send(.playerAppeared(PlayerInfo(id: chromium, pid: 300, status: .playing)))
        let owner = try! #require(h.engine.streamView(.playback(1))?.session)
        #expect(owner != helper)
        #expect(h.view(owner)?.processID == 300)
        #expect(h.view(owner)?.configuration.category == .playback)
        #expect(e.contains(.sessionRemoved(helper)))
        #expect(h.engine.sessionForProcess(chain: [301, 300, 1]) == owner)
    }

    /// A shell (pid 300) starts a player (301) and exits; the player plays on. The kernel later gives 300 to a new
    /// game: its sound is the game's, policed like any app's — not a dead process's stream that belongs to nobody.
    @Test func aProcessThatTakesAnExitedAncestorsPidIsPoliced() {
        var h = Harness()
        _ = h.play(1, pid: 301, chain: [300, 1], name: "player")
        _ = h.send(.processExited(pid: 300))
        #expect(h.engine.goneProcesses == [300], "the shell's exit is remembered while its child's stream names it")
        _ = h.play(2, pid: 300, chain: [1], role: "game", name: "game")
        let game = h.engine.streamView(.playback(2))?.session
        #expect(game != nil, "the new process's stream belongs to no session")
        #expect(game.flatMap { h.view($0) }?.processID == 300)
        // Once no stream names a pid, its exit is forgotten.
        _ = h.send(.streamRemoved(.playback(1)))
        _ = h.send(.streamRemoved(.playback(2)))
        #expect(h.engine.goneProcesses.isEmpty)
    }

    /// The player's parent exits and the player's stream ends: nothing names the parent any more, and its exit is
    /// not kept for ever.
    @Test func anExitedAncestorIsForgottenWithTheLastStreamThatNamesIt() {
        var h = Harness()
        _ = h.play(1, pid: 301, chain: [300, 299, 1], name: "player")
        _ = h.send(.processExited(pid: 299))
        _ = h.send(.processExited(pid: 300))
        #expect(h.engine.goneProcesses == [299, 300])
        _ = h.send(.streamRemoved(.playback(1)))
        #expect(h.engine.goneProcesses.isEmpty)
    }

    @Test func rulesApplyAtOnceAndMakeAnAppObeySilentMode() {
        var h = Harness()
        _ = h.silent(true)
        _ = h.play(1, pid: 100, name: "supertux")
        #expect(h.engine.streamView(.playback(1))?.policyMuted == false)
        let r = h.request()
        let rule = h.send(
            .setApplicationCategory(r, application: "supertux", category: "ambient", mode: "default", options: []))
        #expect(streamOps(rule) == [.setStreamMute(.playback(1), true)])
        #expect(
            rule.contains {
                if case .persist(let state) = $0 { state.rules.map(\.application) == ["supertux"] } else { false }
            })
        #expect(h.engine.applicationRules.map(\.application) == ["supertux"])
        let bad = h.send(
            .setApplicationCategory(h.request(), application: "x", category: "loud", mode: "default", options: []))
        #expect(bad.last?.isError == true)
        let rm = h.send(.removeApplicationCategory(h.request(), application: "supertux"))
        #expect(streamOps(rm) == [.setStreamMute(.playback(1), false)])
        #expect(
            h.send(.removeApplicationCategory(h.request(), application: "supertux")).last
                == .reply(h.lastRequest, .error(.noSuchRule("supertux"))))
    }

    @Test func aStreamTakenByAnExplicitSessionEndsItsImplicitSession() {
        var h = Harness()
        _ = h.play(1, pid: 100, chain: [50], role: "game")
        let implicit = try! #require(h.engine.streamView(.playback(1))?.session)
        _ = h.echo(h.silent(true))
        let explicit = h.create(pid: 50)
        #expect(h.engine.streamView(.playback(1))?.session == explicit)
        #expect(h.view(implicit) == nil)
        // solo-ambient obeys silent mode too, so the stream stays silenced under its new owner.
        #expect(h.engine.streamView(.playback(1))?.policyMuted == true)
        _ = h.setCategory(explicit, "playback")
        #expect(h.engine.streamView(.playback(1))?.policyMuted == false)
    }

    @Test func anImplicitCallDuringACallIsInterruptedAtOnce() {
        var h = Harness()
        let call = h.session(pid: 20, "play-and-record", mode: "voice-chat")
        _ = h.activate(call)
        let music = h.play(1, pid: 100, role: "music")
        let app = try! #require(h.engine.streamView(.playback(1))?.session)
        #expect(signals(music) == [.signal(app, .interruptionBegan(.call, interrupter: call))])
        #expect(streamOps(music) == [.setStreamMute(.playback(1), true)])
        // The default category (mixable) plays during a call.
        let other = h.play(2, pid: 101)
        #expect(streamOps(other) == [])
    }

    @Test func aRecordOnlyAppIsNeverActivatedOrInterrupted() {
        var h = Harness()
        _ = h.record(1, pid: 100)
        let app = try! #require(h.engine.streamView(.record(1))?.session)
        #expect(h.view(app)?.configuration.category == .record)
        let call = h.session(pid: 20, "play-and-record", mode: "voice-chat")
        #expect(signals(h.activate(call)) == [])
        #expect(h.view(app)?.active == false)
    }

    @Test func a11yStreamsBelongToNoSession() {
        var h = Harness()
        _ = h.play(1, pid: 100, role: "a11y")
        #expect(h.engine.streamView(.playback(1))?.session == nil)
        _ = h.silent(true)
        let nav = h.session(pid: 20, "playback", options: ["duck-others"])
        #expect(streamOps(h.activate(nav)) == [])
    }

    /// PipeWire's native name for the role: before, such a stream got a session of its own and could be silenced.
    @Test func accessibilityStreamsBelongToNoSessionEither() {
        var h = Harness()
        _ = h.play(1, pid: 100, role: "Accessibility")
        #expect(h.engine.streamView(.playback(1))?.session == nil)
        _ = h.silent(true)
        _ = h.send(.screenLocked(true))
        let video = h.session(pid: 20, "playback")
        #expect(streamOps(h.activate(video)) == [])
        #expect(h.engine.streamView(.playback(1))?.policyMuted == false)
    }
}

/// Settings from the config file: rules, the role map, the default, the DuckLevel.
@Suite struct ConfigureScenarioTests {
    @Test func configRulesApplyAndABusRuleOverridesThem() {
        var h = Harness()
        _ = h.play(1, pid: 100, name: "supertux")
        _ = h.play(2, pid: 101, role: "music", name: "player")
        var settings = Settings()
        settings.configRules = [
            ApplicationRule(
                application: "supertux", configuration: Configuration(category: .ambient), source: .configFile)
        ]
        settings.roleConfigurations = ["music": Configuration(category: .playback, options: [.mixWithOthers])]
        settings.duckLevel = 0.3
        let e = h.send(.configure(h.request(), settings))
        #expect(e.last == h.ok)
        #expect(
            e.contains { if case .managerPropertiesChanged(let p) = $0 { p.contains(.duckLevel(0.3)) } else { false } })
        // The game was silenced for a moment in one settle round and not in the next: no timer churn leaves the step.
        #expect(
            !e.contains { if case .scheduleTimer = $0 { true } else if case .cancelTimer = $0 { true } else { false } })
        #expect(h.engine.duckLevel == 0.3)
        let game = try! #require(h.engine.streamView(.playback(1))?.session)
        let player = try! #require(h.engine.streamView(.playback(2))?.session)
        #expect(h.view(game)?.configuration.category == .ambient)
        #expect(h.view(player)?.configuration.isMixable == true)
        // A D-Bus rule for the same app wins over the file's.
        _ = h.send(
            .setApplicationCategory(
                h.request(), application: "supertux", category: "playback", mode: "default", options: []))
        #expect(h.view(game)?.configuration.category == .playback)
        #expect(h.engine.applicationRules.map(\.source) == [.configFile, .bus])
        // A bad DuckLevel in the file is refused and nothing changes.
        settings.duckLevel = 0
        #expect(h.send(.configure(h.request(), settings)).last?.isError == true)
        #expect(h.engine.duckLevel == 0.3)
    }
}

/// docs/POLICY.md §7 "A call about to sound": PipeWire lists a stream before WirePlumber links it. A call's stream
/// silences what it will interrupt before its first sample is mixed, and decides nothing else until the link.
@Suite struct AnnouncedCallScenarioTests {
    static let unlinkedCall = StreamInfo(
        id: .playback(2), processChain: [300], applicationName: "softphone", role: "phone", corked: true,
        volume: Volume(uniform: 0), device: "")

    /// Music plays; a call's stream is announced; returns the harness and the announcement's effects.
    func musicThenAnnouncedCall(_ call: StreamInfo = unlinkedCall, userMutedMusic: Bool = false) -> (Harness, [Effect])
    {
        var h = Harness()
        _ = h.play(1, pid: 100, name: "music", muted: userMutedMusic)
        let e = h.send(.streamAnnounced(call))
        return (h, e)
    }

    @Test func theMusicIsMutedAheadAndNobodyIsToldAnything() {
        let (h, e) = musicThenAnnouncedCall()
        #expect(streamOps(e) == [.setStreamMute(.playback(1), true)])
        #expect(e.contains(.scheduleTimer(.callLinkOverdue(.playback(2)), afterNanoseconds: 500_000_000)))
        #expect(e.count == 2, "no session made, activated or interrupted, no signal, no MPRIS: \(e)")
        #expect(h.engine.streamView(.playback(2)) == nil, "the call's stream is not the engine's until it links")
        let music = h.engine.streamView(.playback(1))
        #expect(music?.policyMuted == true)
        #expect(music?.reasons == [.callAboutToSound(.playback(2))])
        #expect(music?.reasons.first?.text == "a call is about to sound (stream 2, not yet linked)")
        #expect(h.engine.sessionIDs.count == 1, "only the music's session")
    }

    @Test func theLinkBringsTheInterruptionAndKeepsTheMute() throws {
        var (h, e) = musicThenAnnouncedCall()
        _ = h.echo(e)
        var playing = Self.unlinkedCall
        playing.corked = false
        playing.volume = .normal
        playing.device = "speakers"
        let link = h.send(.streamAppeared(playing))
        #expect(streamOps(link).isEmpty, "the music was muted ahead: \(link)")
        #expect(link.contains(.cancelTimer(.callLinkOverdue(.playback(2)))))
        let music = try #require(h.engine.streamView(.playback(1)))
        let call = try #require(h.engine.streamView(.playback(2))?.session)
        #expect(h.view(call)?.configuration.isCall == true)
        #expect(h.view(try #require(music.session))?.interrupted == true)
        #expect(music.reasons.count == 1)
        if case .interrupted(by: call, interrupterIsCall: true, _, _)? = music.reasons.first {
        } else {
            Issue.record("the music's reason after the link: \(music.reasons)")
        }
    }

    /// PipeWire shows a linked stream corked until its node runs (found in CI: the music given back at the link and
    /// heard as the call began). The mutes ahead stay until the call plays, and its decision keeps them; a call
    /// that links and stays corked gives the music back when the wait is over.
    @Test func aCallThatLinksCorkedKeepsTheMusicMutedUntilItPlays() throws {
        var (h, e) = musicThenAnnouncedCall()
        _ = h.echo(e)
        var corked = Self.unlinkedCall
        corked.volume = .normal
        corked.device = "speakers"
        let link = h.send(.streamAppeared(corked))
        #expect(streamOps(link).isEmpty, "the music was given back at a corked link: \(link)")
        #expect(signals(link).isEmpty, "nobody is interrupted before the call plays: \(link)")
        #expect(h.engine.streamView(.playback(1))?.reasons == [.callAboutToSound(.playback(2))])
        let runs = h.change(.playback(2)) { $0.corked = false }
        #expect(streamOps(runs).isEmpty, "the music was muted ahead: \(runs)")
        #expect(runs.contains(.cancelTimer(.callLinkOverdue(.playback(2)))))
        let music = try #require(h.engine.streamView(.playback(1)))
        #expect(h.view(try #require(music.session))?.interrupted == true)
        #expect(music.policyMuted == true && music.reasons.count == 1)

        var (h2, e2) = musicThenAnnouncedCall()
        _ = h2.echo(e2)
        _ = h2.send(.streamAppeared(corked))
        let overdue = h2.send(.timerFired(.callLinkOverdue(.playback(2))))
        #expect(streamOps(overdue) == [.setStreamMute(.playback(1), false)])
        #expect(signals(overdue).isEmpty, "a call that never played interrupted nobody: \(overdue)")
        #expect(h2.engine.streamView(.playback(1))?.policyMuted == false)
    }

    @Test func aCallThatEndsUnlinkedOrNeverLinksGivesTheMusicBack() {
        var (h, e) = musicThenAnnouncedCall()
        _ = h.echo(e)
        let gone = h.send(.streamRemoved(.playback(2)))
        #expect(streamOps(gone) == [.setStreamMute(.playback(1), false)])
        #expect(gone.contains(.cancelTimer(.callLinkOverdue(.playback(2)))))

        var (h2, e2) = musicThenAnnouncedCall()
        _ = h2.echo(e2)
        let overdue = h2.send(.timerFired(.callLinkOverdue(.playback(2))))
        #expect(streamOps(overdue) == [.setStreamMute(.playback(1), false)])
        #expect(h2.engine.streamView(.playback(1))?.reasons == [])
    }

    /// cubeb and the like create their streams corked: a stream that is not a call's is decided at its link only.
    @Test func aStreamThatIsNotACallsMutesNothingAhead() {
        for role in [nil, "music", "video", "game", "event"] as [String?] {
            var other = Self.unlinkedCall
            other.role = role
            let (h, e) = musicThenAnnouncedCall(other)
            #expect(e.isEmpty, "role \(role ?? "-"): \(e)")
            #expect(h.engine.streamView(.playback(1))?.policyMuted == false)
        }
    }

    /// The user's own mute is theirs: nothing is written ahead of a call to a stream the user muted, and nothing is
    /// undone after.
    @Test func theUsersMuteIsLeftAlone() {
        var (h, e) = musicThenAnnouncedCall(userMutedMusic: true)
        #expect(streamOps(e).isEmpty)
        #expect(streamOps(h.send(.streamRemoved(.playback(2)))).isEmpty)
        #expect(h.engine.streamView(.playback(1))?.userMuted == true)
    }

    /// Music that ends while a call is announced leaves nothing behind in the announcement.
    @Test func aSilencedStreamThatEndsIsForgotten() {
        var (h, e) = musicThenAnnouncedCall()
        _ = h.echo(e)
        _ = h.send(.streamRemoved(.playback(1)))
        #expect(h.engine.callsAboutToSound[.playback(2)] == [])
        #expect(streamOps(h.send(.timerFired(.callLinkOverdue(.playback(2))))).isEmpty)
        #expect(h.engine.callsAboutToSound.isEmpty)
    }
}
