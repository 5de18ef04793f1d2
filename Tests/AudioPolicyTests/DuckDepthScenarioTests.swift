import AudioVocabulary
import Testing

@testable import AudioPolicy

/// SPEC §7: two duck depths. `DuckLevel` (−14 dB) under an ordinary `duck-others` session, `StrongDuckLevel`
/// (−35 dB) under a voice prompt — mode `voice-prompt`, the `navigation` and `assistant` roles — or while a screen
/// reader (an a11y stream) is heard. The deepest duck wins, one factor per stream.
@Suite struct DuckDepthScenarioTests {
    static let strong = Volume.fromLinear(Settings.defaultStrongDuckLevel)
    static let normal = Volume.fromLinear(0.2)

    func volume(_ effects: [Effect], _ id: StreamID) -> Volume? {
        effects.compactMap { if case .setStreamVolume(id, let v) = $0 { v } else { nil } }.last
    }

    @Test func aNavigationPromptDucksTheMusicStronglyAndAnOrdinaryDuckerLessDeep() throws {
        var h = Harness()
        _ = h.play(1, pid: 10, role: "music")
        let duck = h.session(pid: 20, "playback", options: ["duck-others"])
        let ordinary = h.activate(duck)
        #expect(volume(ordinary, .playback(1)) == Volume.normal.multiplied(by: Self.normal))
        #expect(h.engine.streamView(.playback(1))?.duckFactor == 0.2)

        // PipeWire's native name: a voice prompt, implicit, playback + voice-prompt, ducking others.
        let prompt = h.play(2, pid: 30, role: "Navigation")
        let nav = try #require(h.engine.streamView(.playback(2))?.session)
        #expect(h.view(nav)?.configuration.mode == .voicePrompt)
        #expect(h.view(nav)?.configuration.ducksOthers == true)
        // The deepest wins: the music goes to −35 dB; the ordinary ducker's own stream is no ducker's.
        #expect(volume(prompt, .playback(1)) == Volume.normal.multiplied(by: Self.strong))
        #expect(h.engine.streamView(.playback(1))?.duckFactor == Settings.defaultStrongDuckLevel)
        #expect(h.engine.streamView(.playback(1))?.reasons.contains(.duckedByVoicePrompt(nav)) == true)

        // The prompt ends: back to the ordinary duck, not to the user's volume.
        _ = h.send(.streamRemoved(.playback(2)))
        let after = h.send(.timerFired(.linger(nav)))
        #expect(volume(after, .playback(1)) == Volume.normal.multiplied(by: Self.normal))
    }

    @Test func anExplicitVoicePromptDucksStrongly() {
        var h = Harness()
        _ = h.play(1, pid: 10, role: "music")
        let prompt = h.session(pid: 20, "playback", mode: "voice-prompt", options: ["duck-others"])
        #expect(volume(h.activate(prompt), .playback(1)) == Volume.normal.multiplied(by: Self.strong))
        // A voice prompt that only mixes ducks nobody.
        let quiet = h.session(pid: 21, "playback", mode: "voice-prompt", options: ["mix-with-others"])
        _ = h.deactivate(prompt)
        #expect(streamOps(h.activate(quiet)).isEmpty)
    }

    @Test func aNavigationPromptInterruptsSpokenAudioWhichMayResumeAfter() throws {
        var h = Harness()
        let podcast = h.session(pid: 10, "playback", mode: "spoken-audio")
        _ = h.activate(podcast)
        _ = h.play(1, pid: 10)
        let prompt = h.play(2, pid: 30, role: "navigation")
        let nav = try #require(h.engine.streamView(.playback(2))?.session)
        #expect(prompt.contains(.signal(podcast, .interruptionBegan(.default, interrupter: nav))))
        _ = h.send(.streamRemoved(.playback(2)))
        let end = h.send(.timerFired(.linger(nav)))
        #expect(end.contains(.signal(podcast, .interruptionEnded(shouldResume: true))))
    }

    @Test func aScreenReaderDucksEverySessionStronglyWhileItIsHeard() {
        var h = Harness()
        _ = h.play(1, pid: 10, role: "music")
        let duck = h.session(pid: 20, "playback", options: ["duck-others"])
        _ = h.activate(duck)
        _ = h.play(2, pid: 20)
        let reader = h.play(3, pid: 30, role: "Accessibility")
        #expect(volume(reader, .playback(1)) == Volume.normal.multiplied(by: Self.strong))
        // Duckers too: a screen reader must be understood over anything.
        #expect(volume(reader, .playback(2)) == Volume.normal.multiplied(by: Self.strong))
        #expect(h.engine.streamView(.playback(2))?.reasons == [.duckedUnderScreenReader])
        #expect(h.engine.streamView(.playback(3))?.duckFactor == 1)
        // It stops speaking (corks): the music is back under the ordinary duck, the ducker at its user volume.
        let quiet = h.change(.playback(3)) { $0.corked = true }
        #expect(volume(quiet, .playback(1)) == Volume.normal.multiplied(by: Self.normal))
        #expect(volume(quiet, .playback(2)) == Volume.normal)
    }

    /// A gone process's stream belongs to no session until the server drops it, like a screen reader's; it is no
    /// screen reader (found in review: every session went to −35 dB when a player exited while playing).
    @Test func aGoneProcessStillListedIsNoScreenReader() {
        var h = Harness()
        _ = h.play(1, pid: 10, role: "music")
        _ = h.play(2, pid: 20)
        let exited = h.send(.processExited(pid: 20))
        #expect(h.engine.streamView(.playback(2))?.session == nil)
        #expect(volume(exited, .playback(1)) == nil)
        #expect(h.engine.streamView(.playback(1))?.duckFactor == 1)
        #expect(h.engine.streamView(.playback(1))?.reasons == [])
    }

    @Test func theLevelsAreCheckedAsAPairAndAChangeReducks() {
        var h = Harness()
        _ = h.play(1, pid: 10, role: "music")
        _ = h.play(2, pid: 30, role: "assistant")
        let above = h.send(.setStrongDuckLevel(h.request(), 0.3))
        guard case .reply(_, .error(let e))? = above.last else {
            Issue.record("a strong level above DuckLevel was taken: \(above)")
            return
        }
        #expect("\(e)".contains("StrongDuckLevel 0.3") && "\(e)".contains("DuckLevel 0.2"))
        let below = h.send(.setDuckLevel(h.request(), 0.01))
        guard case .reply(_, .error(let e2))? = below.last else {
            Issue.record("a DuckLevel below StrongDuckLevel was taken: \(below)")
            return
        }
        #expect("\(e2)".contains("DuckLevel 0.01") && "\(e2)".contains("StrongDuckLevel 0.0178"))
        #expect(h.engine.duckLevel == 0.2 && h.engine.strongDuckLevel == Settings.defaultStrongDuckLevel)

        let relevel = h.send(.setStrongDuckLevel(h.request(), 0.1))
        #expect(relevel.contains(.managerPropertiesChanged([.strongDuckLevel(0.1)])))
        #expect(volume(relevel, .playback(1)) == Volume.normal.multiplied(by: Volume.fromLinear(0.1)))
        // Equal levels are allowed: one depth for everything.
        let same = h.send(.setDuckLevel(h.request(), 0.1))
        #expect(same.last == h.ok)

        var bad = Settings()
        bad.strongDuckLevel = 0.5
        let refused = h.send(.configure(h.request(), bad))
        guard case .reply(_, .error(let e3))? = refused.last else {
            Issue.record("a config with strong-duck-level above duck-level was taken: \(refused)")
            return
        }
        #expect("\(e3)".contains("strong-duck-level 0.5"))
        #expect(h.engine.strongDuckLevel == 0.1)
    }
}
