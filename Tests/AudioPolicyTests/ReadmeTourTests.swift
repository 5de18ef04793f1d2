import AudioPolicy
import Testing

/// The README's tour, through the public API only: what it shows must be what the engine does.
@Suite struct ReadmeTourTests {
    @Test func theTourDoesWhatTheReadmeSays() {
        var engine = Engine()
        let t = Instant.zero
        var fx = engine.handle(.createSession(RequestID(1), NewSession(pid: 4242, applicationName: "podcasts")), at: t)
        // The new object is announced with its properties: a fresh session is solo ambient and inactive.
        guard case .sessionAdded(let view)? = fx.first else {
            Issue.record("no session announced: \(fx)")
            return
        }
        #expect(view.id == SessionID(1) && view.configuration.category == .soloAmbient && !view.active)
        #expect(fx == [.sessionAdded(view), .reply(RequestID(1), .session(SessionID(1)))])
        fx = engine.handle(
            .setCategory(RequestID(2), SessionID(1), category: "playback", mode: "spoken-audio", options: []), at: t)
        #expect(fx.last == .reply(RequestID(2), .ok))
        fx = engine.handle(.setActive(RequestID(3), SessionID(1), active: true, options: []), at: t)
        #expect(fx.last == .reply(RequestID(3), .ok))
        _ = engine.handle(
            .streamAppeared(StreamInfo(id: .playback(7), processChain: [4242, 1], applicationName: "podcasts")), at: t)

        fx = engine.handle(.createSession(RequestID(4), NewSession(pid: 5000, applicationName: "maps")), at: t)
        fx = engine.handle(
            .setCategory(
                RequestID(5), SessionID(2), category: "playback", mode: "voice-prompt",
                options: ["interrupt-spoken-audio-and-mix-with-others"]), at: t)
        fx = engine.handle(.setActive(RequestID(6), SessionID(2), active: true, options: []), at: t)
        #expect(fx.first == .setStreamMute(.playback(7), true))
        #expect(fx.contains(.signal(SessionID(1), .interruptionBegan(.default, interrupter: SessionID(2)))))
        fx = engine.handle(.setActive(RequestID(7), SessionID(2), active: false, options: []), at: t)
        #expect(fx.contains(.signal(SessionID(1), .interruptionEnded(shouldResume: true))))

        fx = engine.handle(
            .setCategory(RequestID(8), SessionID(1), category: "loud", mode: "default", options: []), at: t)
        guard case .reply(_, .error(let e))? = fx.last else {
            Issue.record("no error: \(fx)")
            return
        }
        #expect(
            e.description
                == "InvalidCategory: category 'loud' is not one of ambient, solo-ambient, playback, record, play-and-record"
        )
        #expect(engine.session(SessionID(1))?.configuration.mode == .spokenAudio)
    }
}
