import Testing

@testable import AudioPolicy

/// Drives an engine with a fake clock and request ids, the way the daemon's shell would.
struct Harness {
    var engine: Engine
    var clock: UInt64 = 0
    var nextRequest: UInt64 = 100

    /// `fades`: ducks fade as in the daemon. The policy's scripts leave them out (a duck is then one write, its
    /// level checked at once); FadeScenarioTests and the property test script the fades themselves.
    init(settings: Settings = Settings(), fades: Bool = false) {
        engine = Engine(settings: fades ? settings : Self.stepped(settings))
    }

    /// `settings` with every fade a step: what the policy's scripts configure, a reload's settings too.
    static func stepped(_ settings: Settings) -> Settings {
        var s = settings
        s.duckFadeNanoseconds = 0
        s.unduckFadeNanoseconds = 0
        s.fadeInNanoseconds = 0
        s.fadeOutNanoseconds = 0
        return s
    }

    mutating func send(_ event: Event) -> [Effect] {
        clock += 1_000_000
        let effects = engine.handle(event, at: Instant(nanoseconds: clock))
        #expect(engine.settleOverflows == 0, "the settle pass did not converge on \(event)")
        return effects
    }

    mutating func advance(ms: UInt64) { clock += ms * 1_000_000 }

    mutating func request() -> RequestID {
        nextRequest += 1
        return RequestID(nextRequest)
    }

    /// Creates an explicit session and checks the reply.
    mutating func create(pid: UInt32, name: String = "", lifetime: NewSession.Lifetime = .connection) -> SessionID {
        let r = request()
        let effects = send(.createSession(r, NewSession(pid: pid, applicationName: name, lifetime: lifetime)))
        guard case .reply(r, .session(let id))? = effects.last else {
            Issue.record("CreateSession did not answer with a session: \(effects)")
            return SessionID(0)
        }
        return id
    }

    /// Creates a session and sets its category, checking both replies.
    mutating func session(pid: UInt32, _ category: String, mode: String = "default", options: [String] = [])
        -> SessionID
    {
        let id = create(pid: pid)
        let effects = setCategory(id, category, mode: mode, options: options)
        #expect(effects.last == .reply(RequestID(nextRequest), .ok), "SetCategory failed: \(effects)")
        return id
    }

    mutating func setCategory(_ id: SessionID, _ c: String, mode: String = "default", options: [String] = [])
        -> [Effect]
    {
        let r = request()
        return send(.setCategory(r, id, category: c, mode: mode, options: options))
    }

    mutating func activate(_ id: SessionID) -> [Effect] {
        let r = request()
        return send(.setActive(r, id, active: true, options: []))
    }

    mutating func deactivate(_ id: SessionID, notify: Bool = false) -> [Effect] {
        let r = request()
        return send(.setActive(r, id, active: false, options: notify ? ["notify-others-on-deactivation"] : []))
    }

    mutating func release(_ id: SessionID) -> [Effect] {
        let r = request()
        return send(.release(r, id))
    }

    mutating func silent(_ on: Bool) -> [Effect] {
        let r = request()
        return send(.setSilentMode(r, on))
    }

    var lastRequest: RequestID { RequestID(nextRequest) }
    var ok: Effect { .reply(lastRequest, .ok) }

    mutating func play(
        _ index: UInt32, pid: UInt32, chain: [UInt32] = [], role: String? = nil, name: String = "app",
        corked: Bool = false, muted: Bool = false, volume: Volume = .normal, device: String = "speakers",
        tag: UInt64? = nil
    ) -> [Effect] {
        send(
            .streamAppeared(
                StreamInfo(
                    id: .playback(index), processChain: [pid] + chain, applicationName: name, role: role,
                    sessionTag: tag, corked: corked, muted: muted, volume: volume, device: device)))
    }

    mutating func record(_ index: UInt32, pid: UInt32, name: String = "recorder") -> [Effect] {
        send(
            .streamAppeared(
                StreamInfo(id: .record(index), processChain: [pid], applicationName: name, device: "mic")))
    }

    /// The server's report after a change: the stream's current info with some fields changed.
    mutating func change(_ id: StreamID, _ edit: (inout StreamInfo) -> Void) -> [Effect] {
        guard var info = engine.streamView(id)?.info else {
            Issue.record("no stream \(id)")
            return []
        }
        edit(&info)
        return send(.streamChanged(info))
    }

    /// Plays back the server's echo of audiod's own stream operations (as a real server would report them): one
    /// report per stream, with all of the step's operations on it applied — the backend believes no read sent
    /// before audiod's last write to a stream, and a step's writes are sent together.
    mutating func echo(_ effects: [Effect]) -> [Effect] {
        var order: [StreamID] = []
        var edits: [StreamID: [(inout StreamInfo) -> Void]] = [:]
        for e in effects {
            let id: StreamID
            let edit: (inout StreamInfo) -> Void
            switch e {
            case .setStreamMute(let s, let m): (id, edit) = (s, { $0.muted = m })
            case .rampStreamUnmute(let s, _): (id, edit) = (s, { $0.muted = false })
            case .setStreamVolume(let s, let v), .rampStreamVolume(let s, let v, _): (id, edit) = (s, { $0.volume = v })
            default: continue
            }
            if edits[id] == nil { order.append(id) }
            edits[id, default: []].append(edit)
        }
        var all: [Effect] = []
        for id in order {
            all += change(id) { info in for edit in edits[id] ?? [] { edit(&info) } }
        }
        return all
    }

    func view(_ id: SessionID) -> SessionView? { engine.session(id) }
}

func signals(_ effects: [Effect]) -> [Effect] {
    effects.filter { if case .signal = $0 { return true } else { return false } }
}

func streamOps(_ effects: [Effect]) -> [Effect] {
    effects.filter {
        switch $0 {
        case .setStreamMute, .setStreamVolume, .rampStreamUnmute, .rampStreamVolume: return true
        default: return false
        }
    }
}
