import Testing

@testable import AudioPolicy

/// docs/POLICY.md §5 "Handovers": between the moment primary audio is taken over and the first sound of the session
/// taking over, nothing is primary by sound alone — and the game beside the video played (issue 40: 200–240 ms
/// alone, then with the new player, on every `audioctl run`). The session taking over counts as primary audio.
@Suite struct HandoverScenarioTests {
    static let game = StreamID.playback(50)

    /// A game (role `game`, ambient) and a video in an explicit playback session that plays: the game is silenced.
    func gameBesideVideo() -> (Harness, video: SessionID) {
        var h = Harness()
        _ = h.play(50, pid: 500, role: "game", name: "game")
        let video = h.session(pid: 10, "playback")
        _ = h.activate(video)
        _ = h.play(1, pid: 10, name: "video")
        #expect(h.engine.primaryAudioSession == video)
        #expect(h.engine.streamView(Self.game)?.policyMuted == true)
        return (h, video)
    }

    func gameOps(_ effects: [Effect]) -> [Effect] {
        streamOps(effects).filter {
            switch $0 {
            case .setStreamMute(let id, _), .setStreamVolume(let id, _): return id == Self.game
            default: return false
            }
        }
    }

    func hintEdges(_ effects: [Effect]) -> [Effect] {
        effects.filter { if case .signal(_, .silenceSecondaryAudioHint) = $0 { return true } else { return false } }
    }

    @Test func anActivationThatTakesOverKeepsTheGameSilencedUntilItsFirstSoundAndAfter() {
        var (h, video) = gameBesideVideo()
        let player = h.session(pid: 20, "playback")
        var all = h.activate(player)
        #expect(h.view(video)?.interrupted == true)
        #expect(h.engine.primaryAudioSession == player, "nothing names the session taking over")
        #expect(h.engine.handoverSession == player)
        #expect(h.engine.streamView(Self.game)?.policyMuted == true, "the game plays between the two players")
        #expect(h.view(player)?.secondaryAudioShouldBeSilencedHint == false)
        h.advance(ms: 300)
        all += h.play(2, pid: 20, name: "player")
        #expect(h.engine.primaryAudioSession == player)
        #expect(h.engine.handoverSession == nil, "the first sound ends the handover")
        #expect(gameOps(all).isEmpty, "the game was touched during the handover: \(gameOps(all))")
        #expect(hintEdges(all).isEmpty, "an end/begin pair during the handover: \(hintEdges(all))")
        #expect(!all.contains(.managerPropertiesChanged([.primaryAudioSession(nil)])))
    }

    @Test func primaryAudioThatResumesAfterNotifyHandsOverToTheSessionItInterrupted() {
        var (h, video) = gameBesideVideo()
        let player = h.session(pid: 20, "playback")
        _ = h.activate(player)
        _ = h.play(2, pid: 20, name: "player")
        // The player ends with notify: the video is told it may resume, and takes over until it plays.
        var all = h.deactivate(player, notify: true)
        #expect(all.contains(.signal(video, .interruptionEnded(shouldResume: true))))
        #expect(h.engine.primaryAudioSession == video)
        #expect(h.engine.streamView(Self.game)?.policyMuted == true, "the game plays while the video resumes")
        all += h.activate(video)
        #expect(h.engine.primaryAudioSession == video)
        #expect(h.engine.handoverSession == nil)
        #expect(gameOps(all).isEmpty, "the game was touched during the handover: \(gameOps(all))")
        #expect(hintEdges(all).isEmpty)
    }

    @Test func withoutNotifyNothingHandsOver() {
        var (h, _) = gameBesideVideo()
        let player = h.session(pid: 20, "playback")
        _ = h.activate(player)
        _ = h.play(2, pid: 20, name: "player")
        let all = h.deactivate(player)
        #expect(h.engine.primaryAudioSession == nil)
        #expect(gameOps(all) == [.setStreamMute(Self.game, false)])
    }

    @Test func aHandoverEndsAfterTheLingerWhenTheNewSessionNeverPlays() {
        var (h, _) = gameBesideVideo()
        let player = h.session(pid: 20, "playback")
        var all = h.activate(player)
        #expect(all.contains(.scheduleTimer(.handover(player), afterNanoseconds: 2_000_000_000)))
        h.advance(ms: 2000)
        all = h.send(.timerFired(.handover(player)))
        #expect(h.engine.primaryAudioSession == nil)
        #expect(gameOps(all) == [.setStreamMute(Self.game, false)], "the game stays silenced for nothing: \(all)")
        #expect(h.view(player)?.secondaryAudioShouldBeSilencedHint == false)
    }

    @Test func aHandoverEndsWhenTheSessionTakingOverDeactivatesOrIsInterrupted() {
        var (h, _) = gameBesideVideo()
        let player = h.session(pid: 20, "playback")
        _ = h.activate(player)
        var all = h.deactivate(player)
        #expect(h.engine.primaryAudioSession == nil)
        #expect(gameOps(all) == [.setStreamMute(Self.game, false)])
        #expect(all.contains(.cancelTimer(.handover(player))))

        // Interrupted by a record session (which never plays): no handover to it either.
        let other = h.session(pid: 30, "playback")
        _ = h.activate(other)
        _ = h.play(3, pid: 30, name: "other")
        #expect(h.engine.streamView(Self.game)?.policyMuted == true)
        let recorder = h.session(pid: 40, "record")
        all = h.activate(recorder)
        #expect(h.engine.primaryAudioSession == nil, "a record session took over primary audio")
        #expect(gameOps(all) == [.setStreamMute(Self.game, false)])
    }

    @Test func aHandoverPassesOnWhenAThirdSessionTakesOverFirst() {
        var (h, _) = gameBesideVideo()
        let second = h.session(pid: 20, "playback")
        var all = h.activate(second)
        let third = h.session(pid: 30, "playback")
        all += h.activate(third)
        #expect(h.engine.primaryAudioSession == third)
        #expect(h.engine.handoverSession == third)
        all += h.play(3, pid: 30, name: "third")
        #expect(gameOps(all).isEmpty)
        #expect(hintEdges(all).isEmpty)
    }

    @Test func aVideoMutedByTheUserEndsPrimaryAudioAtOnce() {
        var (h, _) = gameBesideVideo()
        let all = h.change(.playback(1)) { $0.muted = true }
        #expect(h.engine.primaryAudioSession == nil)
        #expect(gameOps(all) == [.setStreamMute(Self.game, false)])
    }

    /// An implicit player audiod paused is played again when the session that took the audio releases: it takes
    /// over until its stream runs again.
    @Test func aPausedPlayerPlayedAgainTakesOver() {
        var h = Harness()
        _ = h.play(50, pid: 500, role: "game", name: "game")
        let mpv = PlayerID("org.mpris.MediaPlayer2.mpv")
        _ = h.send(.playerAppeared(PlayerInfo(id: mpv, pid: 60, status: .playing)))
        _ = h.play(6, pid: 60, name: "mpv")
        let music = h.engine.streamView(.playback(6))?.session
        #expect(music != nil && h.engine.primaryAudioSession == music)
        let player = h.session(pid: 20, "playback")
        var all = h.activate(player)
        #expect(all.contains(.mprisPause(mpv)))
        all += h.send(.playerStatusChanged(mpv, .paused))
        all += h.play(2, pid: 20, name: "player")
        #expect(gameOps(all).isEmpty, "the game was heard between the players: \(gameOps(all))")
        // The player exits: its stream goes (primary audio ends at once), then its session is released, and the
        // music it paused takes over until it plays — the game is not heard with the music.
        _ = h.send(.streamRemoved(.playback(2)))
        all = h.release(player)
        #expect(all.contains(.mprisPlay(mpv)))
        #expect(h.engine.streamView(Self.game)?.policyMuted == true)
        #expect(h.engine.primaryAudioSession == music, "the player told to play does not take over")
        all += h.send(.playerStatusChanged(mpv, .playing))
        #expect(h.engine.primaryAudioSession == music)
        #expect(h.engine.handoverSession == nil)
        #expect(
            gameOps(all).allSatisfy { $0 == .setStreamMute(Self.game, true) },
            "the game was heard with the music: \(gameOps(all))")
    }
}
