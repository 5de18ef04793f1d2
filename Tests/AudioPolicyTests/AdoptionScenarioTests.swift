import Testing

@testable import AudioPolicy

/// What audiod left on a stream (an earlier run's journal, a policy value the restore database gave a new stream)
/// comes in with the stream's report; the engine takes it as its own and decides, so that every write to a stream
/// is one of its effects.
@Suite struct AdoptionScenarioTests {
    static let leftMute = PolicyValues(mute: true)

    @Test func aLeftMuteIsPutBackWhenNothingSilencesTheStream() {
        var h = Harness()
        let e = h.send(
            .streamAppeared(
                StreamInfo(
                    id: .playback(1), processChain: [100], applicationName: "player", role: "music", muted: true,
                    leftByPolicy: Self.leftMute)))
        #expect(streamOps(e) == [.setStreamMute(.playback(1), false)])
        _ = h.echo(e)
        let view = h.engine.streamView(.playback(1))
        #expect(view?.info.muted == false && view?.policyMuted == false)
        // The stream is the user's again: their own mute later is theirs, and stays.
        let userMute = h.change(.playback(1)) { $0.muted = true }
        #expect(streamOps(userMute).isEmpty)
    }

    @Test func aLeftMuteStaysWhileThePolicyStillWantsIt() {
        var h = Harness()
        // Music plays; a call interrupts it. The music app's new stream carries the mute its last one ended with.
        let music = h.session(pid: 10, "playback")
        _ = h.activate(music)
        _ = h.echo(h.play(1, pid: 10, name: "music"))
        let call = h.session(pid: 30, "play-and-record", mode: "voice-chat")
        _ = h.echo(h.activate(call))
        let e = h.send(
            .streamAppeared(
                StreamInfo(
                    id: .playback(2), processChain: [10], applicationName: "music", muted: true,
                    leftByPolicy: Self.leftMute)))
        #expect(streamOps(e).isEmpty, "a mute the policy wants was put back and taken again: \(e)")
        #expect(h.engine.streamView(.playback(2))?.policyMuted == true)
        // It is audiod's own now: lifted with the other stream's when the app comes back after the call.
        _ = h.deactivate(call, notify: true)
        #expect(
            streamOps(h.activate(music)) == [.setStreamMute(.playback(1), false), .setStreamMute(.playback(2), false)])
    }

    @Test func aLeftDuckIsPutBackToTheUsersVolume() {
        var h = Harness()
        let ducked = Volume(uniform: 13_107)
        let user = Volume(uniform: 50_000)
        let e = h.send(
            .streamAppeared(
                StreamInfo(
                    id: .playback(1), processChain: [100], applicationName: "player", volume: ducked,
                    leftByPolicy: PolicyValues(mute: false, volume: ducked, userVolume: user))))
        #expect(streamOps(e) == [.setStreamVolume(.playback(1), user)])
    }

    /// After a restart the apps make their sessions again, often before audiod has listed the server's streams. A
    /// stream that was already playing then is not the app's action: it activated the interrupted radio's new
    /// session, which took the audio from the podcast that held it.
    @Test func aStreamFoundAtConnectionActivatesNothingAndANewOneDoes() {
        var h = Harness()
        let podcast = h.session(pid: 10, "playback")
        _ = h.echo(h.activate(podcast))
        let radio = h.session(pid: 20, "playback")
        var found = StreamInfo(id: .playback(2), processChain: [20], applicationName: "radio")
        found.foundAtConnection = true
        _ = h.echo(h.send(.streamAppeared(found)))
        #expect(h.view(radio)?.active == false, "a stream found at connection activated its session")
        #expect(h.view(podcast)?.active == true && h.view(podcast)?.interrupted == false)
        // The radio's app starts a new stream: its own action, which activates the session (§7).
        _ = h.echo(h.play(3, pid: 20, name: "radio"))
        #expect(h.view(radio)?.active == true)
        #expect(h.view(podcast)?.interrupted == true)
    }

    /// The same for an app audiod arbitrates by its streams: the interrupted radio's implicit session, found
    /// playing into the mute the last run left after the podcast's app made its session again, begins interrupted
    /// by the podcast (as if the listing had come first), and resumes when the podcast ends with notify. Found
    /// when nothing holds the audio, it holds it; a call found at connection takes the audio as ever.
    @Test func anImplicitStreamFoundAtConnectionTakesTheAudioFromNobody() {
        var h = Harness()
        let podcast = h.session(pid: 10, "playback")
        _ = h.echo(h.activate(podcast))
        var found = StreamInfo(
            id: .playback(2), processChain: [20], applicationName: "radio", role: "music", muted: true,
            leftByPolicy: Self.leftMute)
        found.foundAtConnection = true
        let e = h.send(.streamAppeared(found))
        #expect(streamOps(e).isEmpty, "the mute the last run left was lifted: \(e)")
        #expect(h.view(podcast)?.active == true && h.view(podcast)?.interrupted == false, "\(e)")
        let radio = h.engine.streamView(.playback(2))?.session
        #expect(radio.flatMap { h.view($0) }.map { !$0.active && $0.interrupted } == true)
        #expect(h.engine.streamView(.playback(2))?.policyMuted == true)
        #expect(streamOps(h.deactivate(podcast, notify: true)) == [.setStreamMute(.playback(2), false)])

        // Nothing holds the audio: the found radio holds it.
        var alone = Harness()
        var first = found
        first.id = .playback(3)
        first.muted = false
        first.leftByPolicy = nil
        _ = alone.send(.streamAppeared(first))
        let held = alone.engine.streamView(.playback(3))?.session
        #expect(held.flatMap { alone.view($0) }?.active == true)

        // A call found at connection takes the audio from the podcast.
        var call = StreamInfo(id: .playback(4), processChain: [30], applicationName: "softphone", role: "phone")
        call.foundAtConnection = true
        _ = h.echo(h.activate(podcast))
        _ = h.send(.streamAppeared(call))
        #expect(h.view(podcast)?.interrupted == true, "a call found at connection took no audio")

        // Among apps found in the same listing, the last found takes the audio as before: a browser's call is a
        // call only once its capture is listed, after its playback stream.
        var listing = Harness()
        var music = StreamInfo(id: .playback(5), processChain: [40], applicationName: "music", role: "music")
        music.foundAtConnection = true
        var browser = StreamInfo(id: .playback(6), processChain: [50], applicationName: "browser", role: "video")
        browser.foundAtConnection = true
        _ = listing.echo(listing.send(.streamAppeared(music)))
        _ = listing.echo(listing.send(.streamAppeared(browser)))
        let earlier = listing.engine.streamView(.playback(5))?.session
        let later = listing.engine.streamView(.playback(6))?.session
        #expect(later.flatMap { listing.view($0) }?.active == true)
        #expect(earlier.flatMap { listing.view($0) }?.interrupted == true)
    }

    /// A browser's call found at connection while an app's session holds the audio: its playback stream is found
    /// first and held, then its capture makes it a call (the voice-call rule), which takes the audio.
    @Test func aFoundAppHeldAtConnectionThatTurnsOutACallTakesTheAudio() {
        var h = Harness()
        let video = h.session(pid: 10, "playback")
        _ = h.echo(h.activate(video))
        var playback = StreamInfo(id: .playback(2), processChain: [50], applicationName: "browser", role: "video")
        playback.foundAtConnection = true
        _ = h.echo(h.send(.streamAppeared(playback)))
        let browser = h.engine.streamView(.playback(2))?.session
        #expect(browser.flatMap { h.view($0) }?.interrupted == true)
        var capture = StreamInfo(id: .record(3), processChain: [50], applicationName: "browser", device: "mic")
        capture.foundAtConnection = true
        _ = h.echo(h.send(.streamAppeared(capture)))
        #expect(browser.flatMap { h.view($0) }.map { $0.active && $0.configuration.isCall } == true)
        #expect(h.view(video)?.interrupted == true, "the call found at connection took no audio")
        #expect(h.engine.streamView(.playback(2))?.policyMuted == false)
    }

    /// Found under an active call, the app's session is refused as any activation is: interrupted by the call,
    /// with reason `call`.
    @Test func anImplicitStreamFoundDuringACallIsInterruptedByTheCall() {
        var h = Harness()
        let call = h.session(pid: 30, "play-and-record", mode: "voice-chat")
        _ = h.echo(h.activate(call))
        var found = StreamInfo(id: .playback(2), processChain: [20], applicationName: "radio", role: "music")
        found.foundAtConnection = true
        let e = h.send(.streamAppeared(found))
        let radio = h.engine.streamView(.playback(2))?.session
        #expect(radio.map { e.contains(.signal($0, .interruptionBegan(.call, interrupter: call))) } == true, "\(e)")
    }

    @Test func valuesTheStreamNoLongerShowsAreNotTaken() {
        var h = Harness()
        // The journal said audiod muted it, but the user has unmuted it since, and set a volume of their own.
        let e = h.send(
            .streamAppeared(
                StreamInfo(
                    id: .playback(1), processChain: [100], applicationName: "player", muted: false,
                    volume: Volume(uniform: 40_000),
                    leftByPolicy: PolicyValues(mute: true, volume: Volume(uniform: 13_107), userVolume: .normal))))
        #expect(streamOps(e).isEmpty)
        #expect(h.engine.appliedChanges.isEmpty)
    }

    /// WirePlumber applies a saved mute a moment after the stream appears: the change that shows it is reported
    /// as left by audiod, not as the user's mute (which would keep it, and never activate the app).
    @Test func aLeakThatShowsInALaterChangeIsPutBack() {
        var h = Harness()
        _ = h.play(1, pid: 100, role: "music", name: "player")
        let e = h.change(.playback(1)) {
            $0.muted = true
            $0.leftByPolicy = Self.leftMute
        }
        #expect(streamOps(e) == [.setStreamMute(.playback(1), false)])
        #expect(h.engine.streamView(.playback(1))?.info.leftByPolicy == nil, "the engine kept a one-time hint")
    }

    /// `audiod --restore` runs the engine with settings under which nothing is silenced: its only stream effects
    /// put back what was left.
    @Test func restoreOnlySettingsSilenceNothing() {
        var h = Harness(settings: .restoreOnly)
        var all: [Effect] = []
        all += h.play(1, pid: 100, role: "music", name: "a")
        all += h.play(2, pid: 101, role: "music", name: "b")
        all += h.play(3, pid: 102, role: "phone", name: "call")
        all += h.play(4, pid: 103, role: "game", name: "game")
        all += h.send(
            .streamAppeared(
                StreamInfo(
                    id: .playback(5), processChain: [104], applicationName: "left", role: "video", muted: true,
                    leftByPolicy: Self.leftMute)))
        #expect(streamOps(all) == [.setStreamMute(.playback(5), false)])
    }

    /// Issue 40: the restore derived categories again — a game from its desktop entry beside a player's entry was
    /// secondary audio once more, and kept the mute it was left with. Under `restoreOnly` no evidence makes a
    /// category: not a desktop entry, GameMode, MPRIS, a role or a rule; every value left is put back.
    @Test func restoreOnlyDerivesNoCategoryFromAnyEvidence() {
        var settings = Settings.restoreOnly
        settings.configRules = [
            ApplicationRule(
                application: "ruled", configuration: Configuration(category: .ambient), source: .configFile)
        ]
        var h = Harness(settings: settings)
        func app(_ id: String, _ categories: [String]) -> AppProfile {
            AppProfile(
                names: [.init(id, .launcherEnvironment)],
                entry: .init(
                    id: id, path: "/apps/\(id).desktop", categories: categories, foundThrough: .launcherEnvironment))
        }
        var all: [Effect] = []
        all += h.send(.gameModeGames([300: GameRegistration(pid: 300)]))
        all += h.send(
            .playerAppeared(PlayerInfo(id: PlayerID("org.mpris.MediaPlayer2.mpv"), pid: 200, status: .playing)))
        // The player, from its desktop entry (Player) and with MPRIS: primary audio, if anything decided.
        all += h.send(
            .streamAppeared(
                StreamInfo(
                    id: .playback(1), processChain: [200], applicationName: "mpv", role: "video", volume: .normal,
                    app: app("mpv", ["AudioVideo", "Player"]))))
        // The game from its desktop entry, left silenced as secondary audio and ducked.
        let user = Volume(uniform: 40_000)
        let ducked = user.multiplied(by: Volume.fromLinear(0.2))
        all += h.send(
            .streamAppeared(
                StreamInfo(
                    id: .playback(2), processChain: [100], applicationName: "game", muted: true, volume: ducked,
                    leftByPolicy: PolicyValues(mute: true, volume: ducked, userVolume: user),
                    app: app("org.example.Game", ["Game", "ArcadeGame"]))))
        // A GameMode game, a ruled app and a call-role stream, never silenced either.
        all += h.play(3, pid: 300, name: "gamemode-game")
        all += h.play(4, pid: 301, name: "ruled")
        all += h.play(5, pid: 302, role: "phone", name: "call")
        #expect(streamOps(all) == [.setStreamMute(.playback(2), false), .setStreamVolume(.playback(2), user)])
        #expect(h.engine.sessionIDs.isEmpty, "the restore made sessions: \(h.engine.sessionIDs)")
        #expect(h.engine.primaryAudioSession == nil)
    }
}

/// GameMode's registrations (SPEC §7, issue 43): a registration counts for the registered process, and for what it
/// starts only when that is the same app.
@Suite struct GameModeRegistrationScenarioTests {
    func category(_ h: Harness, _ stream: UInt32) -> Category? {
        h.engine.streamView(.playback(stream))?.session.flatMap { h.view($0)?.configuration.category }
    }

    @Test func aRegisteredShellMakesNothingItStartsAGameButIsOneItself() {
        var h = Harness()
        _ = h.send(.gameModeGames([300: GameRegistration(pid: 300, isLauncher: true)]))
        _ = h.play(1, pid: 301, chain: [300], role: "music", name: "player")
        #expect(category(h, 1) == .playback, "a program run from a registered shell became a game")
        _ = h.play(2, pid: 300, role: "music", name: "bash")
        #expect(category(h, 2) == .ambient, "the registered process itself is a game")
    }

    @Test func aChildRunningAnotherProgramWithADesktopEntryOfItsOwnIsNotTheRegisteredGame() {
        var h = Harness()
        _ = h.send(.gameModeGames([500: GameRegistration(pid: 500, program: "game.x86_64")]))
        func child(_ index: UInt32, pid: UInt32, program: String, entry: String?) {
            var names = [AppProfile.Name(program, .process)]
            if let entry { names.insert(.init(entry, .desktopEntryMatch), at: 0) }
            var info = StreamInfo(
                id: .playback(index), processChain: [pid, 500], applicationName: program,
                app: AppProfile(names: names, programEntry: entry, program: program))
            info.role = "music"
            _ = h.send(.streamAppeared(info))
        }
        // The game forked (same program), or ran a helper no entry names: the game's.
        child(1, pid: 501, program: "game.x86_64", entry: nil)
        #expect(category(h, 1) == .ambient)
        child(2, pid: 502, program: "crash-reporter", entry: nil)
        #expect(category(h, 2) == .ambient)
        // It opened a browser, whose program has its entry: the browser's, not the game.
        child(3, pid: 503, program: "firefox", entry: "firefox")
        #expect(category(h, 3) == .playback, "a browser the game opened became the game")
    }

    @Test func aChildWithAnAppIdentityOfItsOwnIsNotTheRegisteredGame() {
        var h = Harness()
        _ = h.send(.gameModeGames([400: GameRegistration(pid: 400, scopeID: "org.example.Game")]))
        // The game's own helper: no identity of its own, or the game's scope — the game's.
        _ = h.play(1, pid: 401, chain: [400], role: "music", name: "game-audio")
        #expect(category(h, 1) == .ambient)
        let helper = AppProfile(names: [.init("org.example.Game", .launcherScope)])
        _ = h.send(
            .streamAppeared(
                StreamInfo(id: .playback(2), processChain: [402, 400], applicationName: "helper", app: helper)))
        #expect(category(h, 2) == .ambient)
        // A browser the game opened (a Flatpak of its own) and a player in a scope of its own are not the game.
        for (i, own) in [AppProfile.Name("org.mozilla.firefox", .flatpak), .init("org.example.Music", .launcherScope)]
            .enumerated()
        {
            let index = UInt32(3 + i)
            var info = StreamInfo(
                id: .playback(index), processChain: [410 + UInt32(i), 400], applicationName: "other",
                app: AppProfile(names: [own]))
            info.role = "music"
            _ = h.send(.streamAppeared(info))
            #expect(category(h, index) == .playback, "\(own.name) became the registered game")
        }
    }
}
