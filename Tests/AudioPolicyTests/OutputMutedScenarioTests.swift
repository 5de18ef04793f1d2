import Testing

@testable import AudioPolicy

/// SPEC §5 "Output-muted sessions": a feed that autoplays muted takes the audio from nobody until the user unmutes
/// it in a mixer, or the app unmutes it.
@Suite struct OutputMutedScenarioTests {
    func setOutputMuted(_ h: inout Harness, _ id: SessionID, _ on: Bool) -> [Effect] {
        let r = h.request()
        let e = h.send(.setOutputMuted(r, id, on))
        #expect(e.last == .reply(r, .ok), "OutputMuted \(on): \(e)")
        return e
    }

    /// An explicit video player (pid 100, stream 1) plays; a feed (pid 200, `short-form-video`) activates and plays
    /// stream 2. Returns (player, feed) and the effects of the feed's stream appearing.
    func videoThenMutedFeed(_ h: inout Harness) throws -> (SessionID, SessionID, [Effect]) {
        let player = h.session(pid: 100, "playback")
        #expect(h.activate(player).last == h.ok)
        _ = h.echo(h.play(1, pid: 100, name: "player"))
        let feed = h.session(pid: 200, "playback", mode: "short-form-video")
        #expect(h.view(feed)?.outputMuted == true, "the mode mutes the output as it is set")
        #expect(h.view(feed)?.mixable == true, "an output-muted session counts as mixable")
        let activation = h.activate(feed)
        #expect(activation.last == h.ok)
        #expect(signals(activation).allSatisfy { if case .signal(player, _) = $0 { false } else { true } })
        let appeared = h.play(2, pid: 200, name: "feed")
        _ = h.echo(appeared)
        return (player, feed, appeared)
    }

    @Test func aMutedFeedTakesTheAudioFromNobodyAndItsMuteIsTheAppsOwn() throws {
        var h = Harness()
        let (player, feed, appeared) = try videoThenMutedFeed(&h)
        #expect(streamOps(appeared) == [.setStreamMute(.playback(2), true)])
        #expect(h.view(player)?.active == true && h.view(player)?.interrupted == false)
        #expect(h.engine.streamView(.playback(1))?.policyMuted == false)
        #expect(h.engine.primaryAudioSession == player, "an output-muted session is never primary audio")
        let stream = try #require(h.engine.streamView(.playback(2)))
        #expect(stream.userMuted && !stream.policyMuted, "the mute is the app's, not a policy one")
        #expect(stream.reasons.isEmpty)
        #expect(h.engine.appliedChange(of: .playback(2)) == nil, "an app's mute is not journaled nor undone at exit")

        // Another non-mixable activation does not interrupt it.
        let other = h.session(pid: 300, "playback")
        let e = h.activate(other)
        #expect(e.contains(.signal(player, .interruptionBegan(.default, interrupter: other))))
        #expect(h.view(feed)?.active == true && h.view(feed)?.interrupted == false)
    }

    @Test func theUsersUnmuteInAMixerGivesTheFeedTheAudio() throws {
        var h = Harness()
        let (player, feed, _) = try videoThenMutedFeed(&h)
        let unmute = h.change(.playback(2)) { $0.muted = false }
        #expect(unmute.contains(.signal(feed, .userIntentToUnmuteOutput)))
        #expect(unmute.contains(.signal(player, .interruptionBegan(.default, interrupter: feed))))
        #expect(streamOps(unmute) == [.setStreamMute(.playback(1), true)], "only the player is muted: \(unmute)")
        #expect(h.view(feed)?.outputMuted == false && h.view(feed)?.active == true)
        #expect(h.view(feed)?.mixable == false)
        _ = h.echo(unmute)
        #expect(h.engine.primaryAudioSession == feed)
    }

    @Test func theAppUnmutingItsOutputActivatesItWithoutTheSignal() throws {
        var h = Harness()
        let (player, feed, _) = try videoThenMutedFeed(&h)
        _ = h.deactivate(feed)
        let unmute = setOutputMuted(&h, feed, false)
        #expect(!unmute.contains(.signal(feed, .userIntentToUnmuteOutput)))
        #expect(h.view(feed)?.active == true, "clearing OutputMuted activates the session")
        #expect(unmute.contains(.signal(player, .interruptionBegan(.default, interrupter: feed))))
        let ops = streamOps(unmute)
        #expect(ops.count == 2 && ops.contains(.setStreamMute(.playback(2), false)), "\(ops)")
        #expect(ops.contains(.setStreamMute(.playback(1), true)), "\(ops)")
        _ = h.echo(unmute)
        // Muted again: the player stays interrupted (it may activate again), the feed keeps the audio it asked for
        // and its stream is muted for it, still not journaled.
        let again = setOutputMuted(&h, feed, true)
        #expect(streamOps(again) == [.setStreamMute(.playback(2), true)])
        #expect(h.view(feed)?.mixable == true)
        #expect(h.engine.appliedChange(of: .playback(2)) == nil)
    }

    /// A policy mute the stream held when its app muted its output becomes the app's (nothing is written); cleared
    /// while the policy still holds, the mute is the policy's again, journaled.
    @Test func aPolicyMuteIsHandedToTheAppAndBack() throws {
        var h = Harness()
        let game = h.session(pid: 100, "ambient")
        #expect(h.activate(game).last == h.ok)
        _ = h.echo(h.silent(true))
        _ = h.echo(h.play(1, pid: 100, name: "game"))
        #expect(h.engine.appliedChange(of: .playback(1))?.unmute == true)
        let muted = setOutputMuted(&h, game, true)
        #expect(streamOps(muted).isEmpty, "already muted: \(muted)")
        #expect(h.engine.appliedChange(of: .playback(1)) == nil, "the mute is the app's now")
        // Nothing is written, so the step says so: the journal drops its line, or a restart would unmute the app's
        // mute as a policy value left behind (seed 151206 of the random promise test).
        #expect(h.engine.heldChangedUnwritten == [.playback(1)])
        let unmuted = setOutputMuted(&h, game, false)
        #expect(h.engine.streamView(.playback(1))?.policyMuted == true)
        #expect(h.engine.appliedChange(of: .playback(1))?.unmute == true, "silent mode holds it again: \(unmuted)")
        // Handed back, the mute is written again, so the journal hears of it with the write.
        #expect(streamOps(unmuted) == [.setStreamMute(.playback(1), true)])
        #expect(h.engine.heldChangedUnwritten.isEmpty)
        _ = h.echo(unmuted)
        let off = h.silent(false)
        #expect(streamOps(off) == [.setStreamMute(.playback(1), false)])
    }

    /// The sound server may restore a mute it saved from an earlier output-muted stream of the app: cleared, the
    /// output is heard.
    @Test func aStreamThatAppearsMutedIsUnmutedWhenTheOutputIs() throws {
        var h = Harness()
        let feed = h.session(pid: 200, "playback", mode: "short-form-video")
        #expect(h.activate(feed).last == h.ok)
        let appeared = h.play(2, pid: 200, name: "feed", muted: true)
        #expect(streamOps(appeared).isEmpty)
        let unmute = setOutputMuted(&h, feed, false)
        #expect(streamOps(unmute) == [.setStreamMute(.playback(2), false)])
    }

    /// During a call the user's unmute is refused like any activation: the feed is interrupted by the call and
    /// told it may resume after.
    @Test func unmutedDuringACallTheFeedWaitsForTheCall() throws {
        var h = Harness()
        let (_, feed, _) = try videoThenMutedFeed(&h)
        _ = h.echo(h.play(3, pid: 300, role: "phone", name: "softphone"))
        let call = try #require(h.engine.streamView(.playback(3))?.session)
        #expect(h.view(feed)?.interrupted == false, "a call interrupts no output-muted session")
        let unmute = h.change(.playback(2)) { $0.muted = false }
        #expect(unmute.contains(.signal(feed, .userIntentToUnmuteOutput)))
        #expect(unmute.contains(.signal(feed, .interruptionBegan(.call, interrupter: call))))
        #expect(h.engine.streamView(.playback(2))?.policyMuted == true)
    }

    /// A stream that leaves the session keeps the app's mute as its own: nobody unmuted that output (found with the
    /// stop path, whose streams belong to no session: audiod's SIGTERM unmuted the feed).
    @Test func aStreamThatLeavesTheSessionKeepsTheMute() throws {
        var h = Harness()
        let (_, feed, _) = try videoThenMutedFeed(&h)
        let released = h.release(feed)
        #expect(!streamOps(released).contains(.setStreamMute(.playback(2), false)), "\(released)")
        let stream = try #require(h.engine.streamView(.playback(2)))
        #expect(stream.session != feed && stream.userMuted, "the mute is the stream's own now")
    }

    /// Review: an app rule's mode mutes nothing — nothing could unmute an implicit app, and audiod muted it again on
    /// every unmute in the mixer.
    @Test func aRulesModeMutesNoImplicitApp() throws {
        var h = Harness()
        let r = h.request()
        let rule = h.send(
            .setApplicationCategory(r, application: "mpv", category: "playback", mode: "short-form-video", options: []))
        #expect(rule.last == .reply(r, .ok))
        let e = h.play(1, pid: 100, name: "mpv")
        let app = try #require(h.engine.streamView(.playback(1))?.session)
        #expect(h.view(app)?.outputMuted == false)
        #expect(streamOps(e).isEmpty, "\(e)")
    }

    /// Review: an output-muted session counts as mixable during a call too: it may activate (and set its category)
    /// beside it, as mixable playback may; a call stays a call with its output muted.
    @Test func duringACallAMutedFeedMayActivateAndACallStaysACall() throws {
        var h = Harness()
        _ = h.echo(h.play(3, pid: 300, role: "phone", name: "softphone"))
        let feed = h.session(pid: 200, "playback", mode: "short-form-video")
        #expect(h.activate(feed).last == h.ok, "a muted feed was refused during a call")
        #expect(h.setCategory(feed, "playback", mode: "default").last == h.ok)
        #expect(h.view(feed)?.outputMuted == true && h.view(feed)?.active == true)

        var h2 = Harness()
        let call = h2.session(pid: 100, "play-and-record", mode: "voice-chat")
        #expect(h2.activate(call).last == h2.ok)
        _ = setOutputMuted(&h2, call, true)
        #expect(h2.view(call)?.mixable == false, "a call with its output muted is still a call")
        let other = h2.session(pid: 300, "playback")
        #expect(h2.activate(other).last?.isError == true, "a non-mixable activation beside the call")
    }

    /// Review: a muted feed interrupts nobody, spoken audio neither.
    @Test func aMutedFeedInterruptsNoSpokenAudio() throws {
        var h = Harness()
        let podcast = h.session(pid: 100, "playback", mode: "spoken-audio")
        #expect(h.activate(podcast).last == h.ok)
        let feed = h.session(
            pid: 200, "playback", mode: "short-form-video", options: ["interrupt-spoken-audio-and-mix-with-others"])
        let e = h.activate(feed)
        #expect(signals(e).isEmpty, "\(e)")
        #expect(h.view(podcast)?.active == true)
    }

    /// Review: a muted feed told to silence its secondary audio, then unmuted by the user, takes the audio itself:
    /// it is told `end`, so that a later `begin` reaches it.
    @Test func anUnmutedFeedIsToldTheHintEnds() throws {
        var h = Harness()
        let (_, feed, _) = try videoThenMutedFeed(&h)
        #expect(h.engine.sessions[feed]?.toldHintBegin == true, "the muted feed heard begin beside the player")
        let unmute = h.change(.playback(2)) { $0.muted = false }
        #expect(unmute.contains(.signal(feed, .silenceSecondaryAudioHint(.end))), "\(signals(unmute))")
        #expect(h.engine.sessions[feed]?.toldHintBegin == false)
    }

    /// Re-review: a session that may capture never counts as mixable for its muted output — a game's voice chat that
    /// deafens itself still gives the microphone up to a call — and unmuting a call that stayed one interrupts no
    /// one beside it.
    @Test func aSessionThatMayCaptureStaysNonMixable() throws {
        var h = Harness()
        let chat = h.session(pid: 100, "play-and-record", mode: "game-chat")
        #expect(h.activate(chat).last == h.ok)
        _ = setOutputMuted(&h, chat, true)
        #expect(h.view(chat)?.mixable == false)
        _ = h.echo(h.record(1, pid: 100, name: "chat"))
        _ = h.echo(h.play(3, pid: 300, role: "phone", name: "softphone"))
        #expect(h.view(chat)?.interrupted == true, "the call did not take the microphone from the muted chat")
        #expect(h.engine.streamView(.record(1))?.policyMuted == true)

        var h2 = Harness()
        let call = h2.session(pid: 100, "play-and-record", mode: "voice-chat")
        #expect(h2.activate(call).last == h2.ok)
        let game = h2.session(pid: 200, "ambient")
        #expect(h2.activate(game).last == h2.ok)
        _ = setOutputMuted(&h2, call, true)
        let unmute = setOutputMuted(&h2, call, false)
        #expect(signals(unmute).isEmpty, "\(unmute)")
        #expect(h2.view(game)?.active == true)
    }

    /// Re-review: a feed told `begin`, deactivated, then unmuted by the user takes the audio as it activates: told
    /// `end` then.
    @Test func anInactiveFeedUnmutedIsToldTheHintEnds() throws {
        var h = Harness()
        let (_, feed, _) = try videoThenMutedFeed(&h)
        _ = h.deactivate(feed)
        let unmute = h.change(.playback(2)) { $0.muted = false }
        #expect(h.view(feed)?.active == true)
        #expect(unmute.contains(.signal(feed, .silenceSecondaryAudioHint(.end))), "\(signals(unmute))")
    }

    @Test func theModeAcceptsNoOtherCategory() {
        var h = Harness()
        let id = h.create(pid: 100)
        for c in ["ambient", "solo-ambient", "record", "play-and-record"] {
            #expect(h.setCategory(id, c, mode: "short-form-video").last?.isError == true, "\(c)")
        }
        #expect(h.view(id)?.outputMuted == false)
    }
}
