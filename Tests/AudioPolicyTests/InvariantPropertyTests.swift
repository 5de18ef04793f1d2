import PropertyBased
import Testing

@testable import AudioPolicy

/// docs/POLICY.md §9 over random event sequences. Each sequence is a list of integers that decode into operations
/// (so a failing case shrinks to a short list of small numbers, printed as readable operations). A simulated
/// server applies audiod's effects and echoes them back as the real one does; the test keeps its own record of
/// what the user did and checks every invariant after every step against the simulated server's real state.
@Suite struct InvariantPropertyTests {
    @Test func invariantsHoldOverRandomSequences() async {
        await propertyCheck(count: 10_000, input: Gen.int(in: 0...100_000).array(of: 1...40)) { codes in
            var sim = Simulation()
            for (step, code) in codes.enumerated() {
                let op = Simulation.Op(code: code)
                sim.run(op)
                let violations = sim.violations()
                if !violations.isEmpty {
                    let script = codes.prefix(step + 1).map { "  \(Simulation.Op(code: $0))" }.joined(separator: "\n")
                    Issue.record(
                        "after step \(step + 1):\n\(script)\nviolated:\n  \(violations.joined(separator: "\n  "))")
                    return
                }
            }
        }
    }

    /// Found by the property above in a clean-clone run (input shrunk to these eight codes): silent mode on, a stream
    /// the server ramps is faded out from its duck; the engine mutes it 60 ms after the ramp's length, once the ramp
    /// has surely run, and the property judged it at the length. The property was wrong; the fade-out still ends.
    @Test func aServerRampedFadeOutEndsOnceTheRampHasSurelyRun() {
        var sim = Simulation()
        for code in [86327, 11257, 77051, 77351, 82683, 3586, 83585, 58207] {
            sim.run(Simulation.Op(code: code))
            #expect(sim.violations().isEmpty, "after \(Simulation.Op(code: code)): \(sim.violations())")
        }
        let ramped = sim.engine.streams.values.filter { $0.fade?.serverRamped == true }
        #expect(!ramped.isEmpty, "no fade-out the server ramps after the eight codes")
        // More timers fire: every ramped fade-out ends, in its mute.
        for k in 0..<8 { sim.run(.fireTimer(k)) }
        #expect(sim.violations().isEmpty, "\(sim.violations())")
        for st in ramped { #expect(sim.engine.streams[st.info.id]?.fade == nil, "\(st.info.id) still fades") }
    }

    /// Found by the property above in a clean-clone run (input shrunk to these ten codes): a game strongly ducked
    /// under a screen reader and silenced by silent mode; the user unmutes it, and audiod fades it out from its duck
    /// (its first step 30008); the user then sets 30000, and silent mode goes off. 30000 is within
    /// `volume-tolerance` (64) of audiod's 30008, so it counts as audiod's own (docs/CONFIG.md) and the user's volume
    /// stays 100 %; the model took it for the user's. The model was wrong: it now follows the documented rule.
    @Test func aUserVolumeWithinTheToleranceOfAudiodsOwnIsAudiods() {
        var sim = Simulation()
        for code in [7245, 7407, 3716, 74653, 673, 73627, 80871, 44274, 60181, 36623] {
            sim.run(Simulation.Op(code: code))
            #expect(sim.violations().isEmpty, "after \(Simulation.Op(code: code)): \(sim.violations())")
        }
        let game = sim.server.keys.sorted().first { sim.server[$0]?.role == nil && $0.kind == .playback }
        #expect(game != nil)
        #expect(game.flatMap { sim.engine.streams[$0]?.userVolume } == Volume(uniform: 65536))
    }

    /// Found by the property above once it also followed the published properties: a game's stream plays in an
    /// explicit session, which is released — its stream goes to a new implicit session — and another game starts.
    /// The release left the audible count of sessionless streams at −1, so no session counted as the only audible
    /// one again and the first game's `OtherAudioPlaying` turned true without a `PropertiesChanged`.
    @Test func aReleasedSessionsAudibleStreamStillCountsForOtherAudioPlaying() {
        var sim = Simulation()
        for code in [87655, 0, 85480, 2271, 99615] { sim.run(Simulation.Op(code: code)) }
        #expect(sim.violations().isEmpty, "\(sim.violations())")
        #expect(sim.engine.sessionlessAudible == 0)
    }

    /// Found by the property above: a call's app becomes a game (GameMode) while a video app stops being one. The
    /// call turns ambient as the video takes primary audio from it — primary moves from one session to another,
    /// and the old primary, now ambient, must be silenced as secondary audio.
    @Test func aPrimaryThatTurnsAmbientIsSilencedWhenAnotherTakesOver() {
        var sim = Simulation()
        for code in [79493, 80598, 11394, 15099, 47166] {
            sim.run(Simulation.Op(code: code))
            #expect(sim.violations().isEmpty, "after \(Simulation.Op(code: code)): \(sim.violations())")
        }
    }

    /// Found by the property above once it drove output-muted sessions: a stream links into a muted feed's session
    /// and the session is released in the same operation; the stream keeps the app's mute as its own.
    @Test func aStreamMutedForAFeedReleasedAtOnceKeepsTheMute() {
        var sim = Simulation()
        for code in [20460, 56319, 80835, 1, 1, 51507] {
            sim.run(Simulation.Op(code: code))
            #expect(sim.violations().isEmpty, "after \(Simulation.Op(code: code)): \(sim.violations())")
        }
    }

    /// Found by the reasons' check below: a primary session released while an ambient app played. Its end cleared
    /// primary audio on the spot, so the settle pass saw no change and the ambient stream stayed muted.
    @Test func anAmbientAppSilencedByAPrimaryThatIsReleasedPlaysAgain() {
        var sim = Simulation()
        for code in [29964, 53481, 17556, 50211, 10983] {
            sim.run(Simulation.Op(code: code))
            #expect(sim.violations().isEmpty, "after \(Simulation.Op(code: code)): \(sim.violations())")
        }
    }

    /// Found by the property above: music muted ahead of an unlinked call is taken by the platform's ringing call,
    /// whose streams are never silenced — it must not stay muted ahead either.
    @Test func aStreamMutedAheadThatJoinsThePlatformCallPlays() {
        var sim = Simulation()
        for code in [50291, 44183, 41863] {
            sim.run(Simulation.Op(code: code))
            #expect(sim.violations().isEmpty, "after \(Simulation.Op(code: code)): \(sim.violations())")
        }
    }

    /// Found by the property above (seen once in a full engine run, then with this input): audiod resumed a player
    /// whose uncorked stream it paused again at once, and the simulation answered that Pause before the player's
    /// own Playing — so the engine ended up holding Playing for a paused player and ducked every stream under the
    /// player's silent a11y stream. A real player answers in order; so does the simulation now.
    @Test func aPlayerPausedAgainWhileItsPlayIsHandledEndsPaused() {
        var sim = Simulation()
        for code in [96895, 19411, 92409, 7237, 3241, 64430, 62492, 98484, 80527, 82033] {
            sim.run(Simulation.Op(code: code))
            #expect(sim.violations().isEmpty, "after \(Simulation.Op(code: code)): \(sim.violations())")
        }
        #expect(sim.players[100] == .paused)
        #expect(sim.engine.players[PlayerID("org.mpris.MediaPlayer2.p100")]?.info.status == .paused)
    }

    /// The checker itself must be able to fail: a deliberately broken world (a mute lost on the server) is caught.
    @Test func theCheckerCatchesALostMute() {
        var sim = Simulation()
        sim.run(.create(pid: 10, lifetime: .connection))
        sim.run(.setCategory(session: 0, config: 1))  // playback
        sim.run(.activate(session: 0))
        sim.run(.newStream(pid: 10, role: nil, corked: false, muted: false))
        sim.run(.create(pid: 11, lifetime: .connection))
        sim.run(.setCategory(session: 1, config: 1))
        sim.run(.activate(session: 1))
        #expect(sim.violations().isEmpty)
        // Behind audiod's back, the server forgets the mute it applied (and tells nobody).
        if let id = sim.server.keys.sorted().first { sim.server[id]?.muted = false }
        #expect(!sim.violations().isEmpty)
    }
}

/// A world for the engine: sessions created by clients, streams on a server, players on the bus, a user.
struct Simulation {
    enum Op: CustomStringConvertible {
        case create(pid: UInt32, lifetime: NewSession.Lifetime)
        case setCategory(session: Int, config: Int)
        case activate(session: Int)
        case deactivate(session: Int, notify: Bool)
        case release(session: Int)
        case ownerVanished(session: Int)
        /// `unlinked`: listed before it can be heard (PipeWire, until WirePlumber links it); it links, as `corked`
        /// says, `linkAfter` operations later, or ends before (`vanish`).
        case newStream(
            pid: UInt32, role: String?, corked: Bool, muted: Bool, unlinked: Bool = false, linkAfter: Int = 0,
            vanish: Bool = false)
        case newRecord(pid: UInt32)
        case userToggleMute(stream: Int)
        case userVolume(stream: Int, volume: UInt32)
        case toggleCork(stream: Int)
        case removeStream(stream: Int)
        case player(pid: UInt32, action: Int)
        case silent(Bool)
        case duckLevel(Double)
        case strongDuckLevel(Double)
        case device(Int)
        case fireTimer(Int)
        case rule(app: String, config: Int)
        case exit(pid: UInt32)
        case reuse(which: Int, parent: Int)
        case handlesSecondary(session: Int)
        /// SPEC §7's identity inputs: a capture of a monitor (never a call), GameMode's registrations, and an app
        /// whose desktop entry says it is a game or a media player.
        case newMonitorRecord(pid: UInt32)
        case gameMode(pids: Set<UInt32>)
        case newAppStream(pid: UInt32, entry: Int)
        /// SPEC §10: the platform's calls as one (an index into `platformCalls`), and a session's wish not to be
        /// interrupted by a call that only rings.
        case platformCall(Int)
        /// The system bus lost, with ModemManager's calls: what the other sources still say (an index into
        /// `platformCalls`).
        case platformCallLost(Int)
        case prefersNoInterruptions(session: Int)
        /// SPEC §5: the app mutes or unmutes its session's output.
        case outputMuted(session: Int)
        /// The microphone switch on the default source or another one.
        case microphone(source: String, muted: Bool)
        case lock(Bool)
        case sleep(Bool)
        case platformSilent(Bool)

        static let explicitPids: [UInt32] = [10, 11, 12, 13]
        static let implicitPids: [UInt32] = [100, 101, 102, 103]
        /// Ancestors the players' processes descend from (chains of depth 1–6), which exit and come back too.
        static let ancestorPids: [UInt32] = [200, 201, 202, 203, 204]
        /// Where a process that takes a freed pid hangs: under init, or under one of the ancestors.
        static let parentChoices: [UInt32] = [1, 200, 201, 202, 203, 204]
        static let roles: [String?] = [
            nil, "music", "game", "phone", "event", "video", "a11y", "Accessibility", "production", "navigation",
            "Assistant",
        ]
        static let configs: [(String, String, [String])] = [
            ("ambient", "default", []), ("playback", "default", []), ("solo-ambient", "default", []),
            ("playback", "spoken-audio", []), ("playback", "voice-prompt", ["duck-others"]),
            ("playback", "default", ["mix-with-others"]),
            ("playback", "voice-prompt", ["interrupt-spoken-audio-and-mix-with-others"]),
            ("play-and-record", "voice-chat", []), ("record", "default", []), ("ambient", "default", ["duck-others"]),
            ("play-and-record", "video-chat", ["mix-with-others"]), ("loud", "default", []),
            ("playback", "voice-chat", []),
        ]

        init(code: Int) {
            let kind = code % 22
            let p = code / 22
            let anyPid = (Op.explicitPids + Op.implicitPids)[p % 8]
            switch kind {
            case 0: self = .create(pid: Op.explicitPids[p % 4], lifetime: (p / 4) % 3 == 0 ? .process : .connection)
            case 1: self = .setCategory(session: p % 6, config: (p / 6) % Op.configs.count)
            case 2, 3: self = .activate(session: p % 6)
            case 4: self = .deactivate(session: p % 6, notify: (p / 6) % 2 == 0)
            case 5: self = .release(session: p % 6)
            case 6: self = .ownerVanished(session: p % 6)
            case 7, 8:
                // Now and then the stream is an ancestor's own (a pid that may have exited and been taken again).
                self = .newStream(
                    pid: (p / 512) % 3 == 0 ? Op.ancestorPids[p % Op.ancestorPids.count] : anyPid,
                    role: Op.roles[(p / 8) % Op.roles.count], corked: (p / 64) % 4 == 0,
                    muted: (p / 256) % 5 == 0, unlinked: (p / 24) % 7 == 6, linkAfter: 1 + p % 3,
                    vanish: (p / 2) % 5 == 0)
            case 9: self = .newRecord(pid: anyPid)
            case 10: self = .userToggleMute(stream: p % 8)
            case 11: self = .userVolume(stream: p % 8, volume: [0, 30000, 65536, 50000][(p / 8) % 4])
            case 12: self = .toggleCork(stream: p % 8)
            case 13: self = .removeStream(stream: p % 8)
            case 14: self = .player(pid: Op.implicitPids[p % 3], action: (p / 3) % 4)
            case 15:
                // Levels that keep the pair valid and ones audiod must refuse (a strong level above the ordinary).
                let level = (p / 3) % 6
                self =
                    p % 3 != 0
                    ? .silent(p % 3 == 1)
                    : level < 3
                        ? .duckLevel([0.2, 0.5, 0.05][level]) : .strongDuckLevel([0.0178, 0.1, 0.3][level - 3])
            case 16: self = .device(p % 4)
            case 17: self = .fireTimer(p % 4)
            case 18:
                switch p % 4 {
                case 0: self = .rule(app: ["app100", "app101"][(p / 4) % 2], config: (p / 8) % Op.configs.count)
                case 1: self = .exit(pid: anyPid)
                case 2: self = .exit(pid: Op.ancestorPids[(p / 4) % Op.ancestorPids.count])
                default: self = .reuse(which: (p / 4) % 16, parent: (p / 64) % Op.parentChoices.count)
                }
            case 19:
                switch p % 5 {
                case 0, 1: self = .handlesSecondary(session: (p / 5) % 6)
                case 2:
                    let k = (p / 5) % (Op.platformCalls.count * 2)
                    self = k < Op.platformCalls.count ? .platformCall(k) : .platformCallLost(k - Op.platformCalls.count)
                case 3: self = .prefersNoInterruptions(session: (p / 5) % 6)
                default: self = .microphone(source: ["default", "usb-mic"][(p / 5) % 2], muted: (p / 10) % 2 == 0)
                }
            case 20:
                switch p % 3 {
                case 0 where (p / 3) % 2 == 1:
                    // The lock screen, sleep and feedbackd's profile (SPEC §10).
                    let on = (p / 6) % 2 == 0
                    self = [Op.lock(on), .sleep(on), .platformSilent(on)][(p / 12) % 3]
                case 0: self = .newMonitorRecord(pid: anyPid)
                default:
                    // Which of the implicit apps' pids are registered: the bits of the code, so a case replays.
                    let bits = (p / 3) % 16
                    self = .gameMode(
                        pids: Set(Op.implicitPids.enumerated().filter { bits & (1 << $0.offset) != 0 }.map(\.element)))
                }
            default:
                // Now and then an alarm or an emergency (decoded apart from `roles`, so that the regression cases
                // above replay as they were).
                if (p / 3) % 4 == 3 {
                    self = .newStream(
                        pid: anyPid, role: Op.alertRoles[(p / 12) % Op.alertRoles.count], corked: false, muted: false)
                } else if (p / 48) % 8 == 5 {
                    // Output-muted sessions (decoded apart, so that the regression cases replay as they were).
                    self = .outputMuted(session: p % 6)
                } else {
                    self = .newAppStream(pid: anyPid, entry: p % 3)
                }
            }
        }

        static let alertRoles = ["alarm", "Alarm", "emergency", "Emergency"]
        static let entries: [[String]] = [["Game", "ArcadeGame"], ["AudioVideo", "Player"], ["AudioVideo"]]
        /// No call; one that only rings; one ringing beside an answered one; dialled; active; held. The call app is
        /// pid 101's app (its streams from `newAppStream` are the call's) or none, as for a modem call.
        static let platformCalls: [PlatformCall?] = [
            nil, PlatformCall(state: .ringing, allRinging: true, appID: "org.example.App101", applicationName: "Calls"),
            PlatformCall(state: .ringing, allRinging: false, appID: "org.example.App101", applicationName: "Calls"),
            PlatformCall(state: .dialing, allRinging: false), PlatformCall(state: .active, allRinging: false),
            PlatformCall(state: .held, allRinging: false, appID: "org.example.App101", applicationName: "Calls"),
        ]

        var description: String {
            switch self {
            case .create(let pid, let l): return "CreateSession(pid \(pid), \(l.rawValue))"
            case .setCategory(let s, let c):
                let (cat, mode, opts) = Op.configs[c]
                return "session#\(s).SetCategory(\(cat), \(mode), \(opts))"
            case .activate(let s): return "session#\(s).SetActive(true)"
            case .deactivate(let s, let n): return "session#\(s).SetActive(false\(n ? ", notify" : ""))"
            case .release(let s): return "session#\(s).Release()"
            case .ownerVanished(let s): return "session#\(s) owner vanished"
            case .newStream(let pid, let role, let corked, let muted, let unlinked, let after, let vanish):
                return
                    "new playback stream pid \(pid) role \(role ?? "-")\(corked ? " corked" : "")\(muted ? " muted" : "")"
                    + (unlinked ? ", listed unlinked, \(vanish ? "ends" : "links") after \(after) operations" : "")
            case .newRecord(let pid): return "new record stream pid \(pid)"
            case .userToggleMute(let s): return "user toggles mute of stream#\(s)"
            case .userVolume(let s, let v): return "user sets volume of stream#\(s) to \(v)"
            case .toggleCork(let s): return "app toggles cork of stream#\(s)"
            case .removeStream(let s): return "stream#\(s) removed"
            case .player(let pid, let a):
                return "player of pid \(pid): \(["appears playing", "Play", "Pause", "goes away"][a])"
            case .silent(let on): return "silent mode \(on)"
            case .duckLevel(let d): return "DuckLevel \(d)"
            case .strongDuckLevel(let d): return "StrongDuckLevel \(d)"
            case .device(let d):
                return ["headphones removed", "headphones appear", "streams move to headphones", "speakers removed"][d]
            case .fireTimer(let t): return "timer#\(t) fires"
            case .rule(let app, let c): return "rule \(app) → \(Op.configs[c])"
            case .exit(let pid): return "process \(pid) exits"
            case .reuse(let k, let parent):
                return "a new process takes exited pid#\(k) under \(Op.parentChoices[parent])"
            case .handlesSecondary(let s): return "session#\(s) toggles HandlesSecondaryAudio"
            case .platformCall(let k):
                return Op.platformCalls[k].map {
                    "platform call \($0.state.rawValue)\($0.allRinging ? " (only rings)" : "") app \($0.appID ?? "-")"
                }
                    ?? "platform call ends"
            case .platformCallLost(let k):
                return "the system bus is lost; "
                    + (Op.platformCalls[k].map { "the other sources say \($0.state.rawValue)" } ?? "no call is left")
            case .prefersNoInterruptions(let s): return "session#\(s) toggles PrefersNoInterruptionsFromSystemAlerts"
            case .outputMuted(let s): return "session#\(s) toggles OutputMuted"
            case .microphone(let source, let muted): return "the user \(muted ? "mutes" : "unmutes") source \(source)"
            case .lock(let on): return on ? "the screen locks" : "the screen unlocks"
            case .sleep(let on): return on ? "PrepareForSleep(true)" : "PrepareForSleep(false)"
            case .platformSilent(let on): return "feedbackd's profile \(on ? "quiet" : "full")"
            case .newMonitorRecord(let pid): return "new monitor capture pid \(pid)"
            case .gameMode(let pids): return "GameMode games \(pids.sorted())"
            case .newAppStream(let pid, let e):
                return "new stream pid \(pid) of an app whose entry says \(Op.entries[e])"
            }
        }
    }

    var engine = Engine()
    var clock: UInt64 = 0
    var request: UInt64 = 0
    var sessions: [SessionID] = []
    /// The server's real state.
    var server: [StreamID: StreamInfo] = [:]
    var nextIndex: UInt32 = 1
    /// What the user (or app) last set, per stream.
    var userMuted: [StreamID: Bool] = [:]
    /// Playback streams of output-muted sessions after the last operation, with the session: their own mute is the
    /// app's. When that session's output is unmuted, the stream is unmuted (the app means to be heard); a stream
    /// that leaves the session keeps the mute as its own.
    var mutedForApp: [StreamID: SessionID] = [:]
    var userVolume: [StreamID: Volume] = [:]
    /// The last volume audiod wrote to each stream, until the user sets one: what `volume-tolerance` compares with.
    var audiodVolume: [StreamID: Volume] = [:]
    var players: [UInt32: PlaybackStatus] = [:]
    var timers: [TimerID] = []
    var devices: Set<String> = ["speakers", "headphones"]
    /// The process tree: 204 → 203 → 202 → 201 → 200 → init at first, the players' processes at depths 1–5
    /// below init (chains of 2–6 with the player itself), the clients directly under init.
    var parent: [UInt32: UInt32] = [
        200: 1, 201: 200, 202: 201, 203: 202, 204: 203,
        100: 1, 101: 201, 102: 203, 103: 204,
    ]
    /// Pids whose process exited and that no new process has taken yet.
    var exited: Set<UInt32> = []
    /// Streams listed before they are linked: the operation count at which each links (or ends), and what it shows
    /// then.
    var unlinked: [(id: StreamID, at: Int, info: StreamInfo, vanish: Bool)] = []
    var operations = 0
    /// Interruption bookkeeping for invariant 6.
    var openInterruptions: [SessionID: (spokenOnly: Bool, count: Int)] = [:]
    var problems: [String] = []

    mutating func nextRequest() -> RequestID {
        request += 1
        return RequestID(request)
    }

    func session(_ k: Int) -> SessionID? { sessions.isEmpty ? nil : sessions[k % sessions.count] }
    func stream(_ k: Int) -> StreamID? {
        let ids = server.keys.sorted()
        return ids.isEmpty ? nil : ids[k % ids.count]
    }

    /// What the backend reads from /proc: the pid and its ancestors, nearest first, up to init.
    func chain(of pid: UInt32) -> [UInt32] {
        var out = [pid]
        var p = parent[pid] ?? 1
        while p != 1, !out.contains(p), out.count < 8 {
            out.append(p)
            p = parent[p] ?? 1
        }
        return out + [1]
    }

    mutating func run(_ op: Op) { perform(op) }

    /// After every event: a stream may join an output-muted session and leave it within one operation (a call's
    /// stream linking into a muted feed's session just before its release).
    mutating func followOutputMutes() {
        var now: [StreamID: SessionID] = [:]
        for id in server.keys where id.kind == .playback {
            if let s = engine.streamView(id)?.session, engine.session(s)?.outputMuted == true { now[id] = s }
        }
        for (id, s) in mutedForApp where now[id] == nil && server[id] != nil {
            userMuted[id] = engine.streamView(id)?.session != s
        }
        mutedForApp = now
    }

    mutating func perform(_ op: Op) {
        operations += 1
        while let due = unlinked.firstIndex(where: { $0.at <= operations }) {
            let link = unlinked.remove(at: due)
            if link.vanish {
                step(.streamRemoved(link.id))
            } else {
                server[link.id] = link.info
                userMuted[link.id] = link.info.muted
                userVolume[link.id] = .normal
                step(.streamAppeared(link.info))
            }
        }
        switch op {
        case .create(let pid, let lifetime):
            guard !exited.contains(pid) else { return }
            let effects = step(.createSession(nextRequest(), NewSession(pid: pid, lifetime: lifetime)))
            for case .reply(_, .session(let id)) in effects { sessions.append(id) }
        case .setCategory(let k, let c):
            guard let id = session(k) else { return }
            let (cat, mode, opts) = Op.configs[c]
            step(.setCategory(nextRequest(), id, category: cat, mode: mode, options: opts))
        case .activate(let k):
            guard let id = session(k) else { return }
            step(.setActive(nextRequest(), id, active: true, options: []))
        case .deactivate(let k, let notify):
            guard let id = session(k) else { return }
            step(.setActive(nextRequest(), id, active: false, options: notify ? ["notify-others-on-deactivation"] : []))
        case .release(let k):
            guard let id = session(k) else { return }
            step(.release(nextRequest(), id))
        case .ownerVanished(let k):
            guard let id = session(k) else { return }
            step(.ownerVanished(id))
        case .newStream(let pid, let role, let corked, let muted, let isUnlinked, let after, let vanish):
            guard !exited.contains(pid) else { return }
            let id = StreamID.playback(nextIndex)
            nextIndex += 1
            var info = StreamInfo(
                id: id, processChain: chain(of: pid), applicationName: "app\(pid)", role: role, corked: corked,
                muted: muted,
                volume: .normal, device: devices.contains("headphones") ? "headphones" : "speakers")
            // Every other stream on a server that ramps its give-backs (PipeWire 0.3.68 and later).
            info.serverRamps = id.index % 2 == 0
            // Every third on one that ramps its ducks (PipeWire 0.3.68 and later, the native connection up).
            info.serverRampsVolume = id.index % 3 == 0
            if isUnlinked {
                // As pipewire-pulse shows it before the link: corked, silent, on no device.
                var shown = info
                shown.corked = true
                shown.muted = false
                shown.volume = Volume(uniform: 0)
                shown.device = ""
                unlinked.append((id, operations + after, info, vanish))
                step(.streamAnnounced(shown))
                return
            }
            server[id] = info
            userMuted[id] = muted
            userVolume[id] = .normal
            step(.streamAppeared(info))
        case .newMonitorRecord(let pid):
            guard !exited.contains(pid) else { return }
            let id = StreamID.record(nextIndex)
            nextIndex += 1
            let info = StreamInfo(
                id: id, processChain: chain(of: pid), applicationName: "app\(pid)", device: "speakers.monitor",
                fromMonitor: true)
            server[id] = info
            userMuted[id] = false
            userVolume[id] = .normal
            step(.streamAppeared(info))
        case .gameMode(let pids):
            step(.gameModeGames(Dictionary(uniqueKeysWithValues: pids.map { ($0, GameRegistration(pid: $0)) })))
        case .newAppStream(let pid, let e):
            guard !exited.contains(pid) else { return }
            let id = StreamID.playback(nextIndex)
            nextIndex += 1
            let profile = AppProfile(
                names: [.init("org.example.App\(pid)", .launcherScope)],
                entry: .init(
                    id: "org.example.App\(pid)", path: "/apps/\(pid).desktop", categories: Op.entries[e],
                    foundThrough: .launcherScope))
            let info = StreamInfo(
                id: id, processChain: chain(of: pid), applicationName: "app\(pid)", volume: .normal,
                device: devices.contains("headphones") ? "headphones" : "speakers", app: profile)
            server[id] = info
            userMuted[id] = false
            userVolume[id] = .normal
            step(.streamAppeared(info))
        case .newRecord(let pid):
            guard !exited.contains(pid) else { return }
            let id = StreamID.record(nextIndex)
            nextIndex += 1
            let info = StreamInfo(id: id, processChain: chain(of: pid), applicationName: "app\(pid)", device: "mic")
            server[id] = info
            userMuted[id] = false
            userVolume[id] = .normal
            step(.streamAppeared(info))
        case .userToggleMute(let k):
            guard let id = stream(k), let info = server[id] else { return }
            server[id]?.muted = !info.muted
            userMuted[id] = !info.muted
            step(.streamChanged(server[id]!))
        case .userVolume(let k, let v):
            guard let id = stream(k), id.kind == .playback, let info = server[id] else { return }
            let volume = Volume(uniform: v)
            guard info.volume != volume else { return }
            server[id]?.volume = volume
            // docs/CONFIG.md `volume-tolerance`: a volume within the tolerance of the one audiod set and holds (its
            // last write, when that is not the user's own volume) counts as audiod's own (a server hands back a
            // neighbouring value), so a user who sets one that close has changed nothing audiod can tell; the
            // user's volume stays what it was.
            let held = audiodVolume[id].flatMap { $0 == userVolume[id] ? nil : $0 }
            if held.map({ !volume.isClose(to: $0, tolerance: engine.volumeTolerance) }) ?? true {
                userVolume[id] = volume
                audiodVolume[id] = nil
            } else if let held, engine.streams[id]?.appliedVolume != held {
                problems.append(
                    "\(id): audiod last wrote \(held), but the engine holds \(String(describing: engine.streams[id]?.appliedVolume))"
                )
            }
            step(.streamChanged(server[id]!))
        case .toggleCork(let k):
            // A record stream too: a voice-input app (a `record` rule) starts and stops capturing.
            guard let id = stream(k) else { return }
            server[id]?.corked.toggle()
            step(.streamChanged(server[id]!))
        case .removeStream(let k):
            guard let id = stream(k) else { return }
            server[id] = nil
            step(.streamRemoved(id))
        case .player(let pid, let action):
            let pl = PlayerID("org.mpris.MediaPlayer2.p\(pid)")
            switch action {
            case 0 where players[pid] == nil:
                players[pid] = .playing
                step(.playerAppeared(PlayerInfo(id: pl, pid: pid, status: .playing)))
            case 1 where players[pid] != nil: setPlayer(pid, .playing)
            case 2 where players[pid] != nil: setPlayer(pid, .paused)
            case 3 where players[pid] != nil:
                players[pid] = nil
                step(.playerRemoved(pl))
            default: return
            }
        case .silent(let on): step(.setSilentMode(nextRequest(), on))
        case .duckLevel(let d): step(.setDuckLevel(nextRequest(), d))
        case .strongDuckLevel(let d): step(.setStrongDuckLevel(nextRequest(), d))
        case .device(let d):
            switch d {
            case 0 where devices.contains("headphones"):
                devices.remove("headphones")
                // The server moves the streams first, then announces the removal.
                for id in server.keys.sorted() where server[id]?.device == "headphones" {
                    server[id]?.device = "speakers"
                    step(.streamChanged(server[id]!))
                }
                step(.deviceRemoved("headphones"))
            case 1 where !devices.contains("headphones"):
                devices.insert("headphones")
                step(.deviceAppeared("headphones"))
            case 2 where devices.contains("headphones"):
                for id in server.keys.sorted() where id.kind == .playback && server[id]?.device == "speakers" {
                    server[id]?.device = "headphones"
                    step(.streamChanged(server[id]!))
                }
            case 3:
                step(.deviceRemoved("speakers"))
            default: return
            }
        case .fireTimer(let k):
            guard !timers.isEmpty else { return }
            let t = timers.remove(at: k % timers.count)
            // A fade's step comes a while later: enough of them end every fade (a duck takes 500 ms); one firing in
            // two is past a whole fade, so that fades are seen to end as often as they are seen running.
            if t == .fadeStep { clock += k % 2 == 0 ? 150_000_000 : 600_000_000 }
            // The time the engine handles the step at (`step` adds 5 ms; the echoes after it move the clock on).
            let tickAt = Instant(nanoseconds: clock + 5_000_000)
            step(.timerFired(t))
            // Every fade whose time is up ended at this step: a duck at its level, a fade-out in its mute. A fade-out
            // the server ramps is up only once the ramp has surely run: the engine mutes `serverRampSettleNanoseconds`
            // after its length (seed "2GQiSaLl…" in CI: muted at 560 ms, judged at 500).
            if t == .fadeStep {
                let now = Instant(nanoseconds: clock)
                for (id, st) in engine.streams.sorted(by: { $0.key < $1.key }) {
                    if let f = st.fade, f.waitsUntil == nil,
                        now.since(f.start) >= f.length + (f.serverRamped ? VolumeFade.serverRampSettleNanoseconds : 0)
                    {
                        problems.append(
                            "\(id)'s fade \(f) still runs \(now.since(f.start) / 1_000_000) ms after its start")
                    }
                    // A resumed player's stream waits at silence for its sound only so long.
                    if let until = engine.streams[id]?.fade?.waitsUntil, tickAt >= until {
                        problems.append(
                            "\(id) still waits for its player's sound \(tickAt.since(until) / 1_000_000) ms late")
                    }
                }
            }
        case .rule(let app, let c):
            let (cat, mode, opts) = Op.configs[c]
            step(.setApplicationCategory(nextRequest(), application: app, category: cat, mode: mode, options: opts))
        case .exit(let pid):
            guard !exited.contains(pid) else { return }
            exited.insert(pid)
            // Orphans are adopted by init; the chains of streams already listed keep the dead pid, as the server's
            // properties do.
            for (child, p) in parent where p == pid { parent[child] = 1 }
            for id in server.keys.sorted() where server[id]?.processChain.first == pid {
                server[id] = nil
            }
            players[pid] = nil
            step(.processExited(pid: pid))
            for id in engine.streams.keys.sorted() where server[id] == nil { step(.streamRemoved(id)) }
            step(.playerRemoved(PlayerID("org.mpris.MediaPlayer2.p\(pid)")))
        case .reuse(let k, let p):
            guard !exited.isEmpty else { return }
            let pid = exited.sorted()[k % exited.count]
            let newParent = Op.parentChoices[p]
            guard newParent == 1 || (!exited.contains(newParent) && !chain(of: newParent).contains(pid)) else { return }
            exited.remove(pid)
            parent[pid] = newParent
        case .handlesSecondary(let k):
            guard let id = session(k), let v = engine.session(id) else { return }
            step(.setHandlesSecondaryAudio(nextRequest(), id, !v.handlesSecondaryAudio))
        case .platformCall(let k):
            step(.platformCall(Op.platformCalls[k]))
        case .platformCallLost(let k):
            let effects = step(.platformCallSourceLost(remaining: Op.platformCalls[k]))
            // SPEC §10: the call may still be going on, so no player is played when it ends this way.
            if Op.platformCalls[k] == nil, effects.contains(where: { if case .mprisPlay = $0 { true } else { false } })
            {
                problems.append("a player was played when the calls' bus was lost")
            }
        case .prefersNoInterruptions(let k):
            guard let id = session(k), let v = engine.session(id) else { return }
            step(.setPrefersNoInterruptions(nextRequest(), id, !v.prefersNoInterruptionsFromSystemAlerts))
        case .outputMuted(let k):
            guard let id = session(k), let v = engine.session(id) else { return }
            step(.setOutputMuted(nextRequest(), id, !v.outputMuted))
        case .microphone(let source, let muted):
            step(.microphoneMuted(source: source, muted: muted, isDefault: source == "default"))
        case .lock(let on): step(.screenLocked(on))
        case .sleep(let on): step(.prepareForSleep(on))
        case .platformSilent(let on): step(.platformSilentMode(on))
        }
    }

    mutating func setPlayer(_ pid: UInt32, _ status: PlaybackStatus) {
        guard players[pid] != status else { return }
        playerDepth += 1
        defer {
            playerDepth -= 1
            drainPlayers()
        }
        players[pid] = status
        // Like mpv: pausing corks the stream, playing uncorks it.
        for id in server.keys.sorted() where id.kind == .playback && server[id]?.processChain.first == pid {
            server[id]?.corked = status != .playing
            step(.streamChanged(server[id]!))
        }
        step(.playerStatusChanged(PlayerID("org.mpris.MediaPlayer2.p\(pid)"), status))
    }

    /// One event, then the server's echo of every change audiod made, until the world is quiet.
    @discardableResult
    mutating func step(_ event: Event) -> [Effect] {
        stepDepth += 1
        clock += 5_000_000
        let recordMutedBefore = server.filter { $0.key.kind == .record && $0.value.muted }.map(\.key)
        let activeBefore = Set(engine.sessionIDs.filter { engine.session($0)?.active == true })
        let emergenciesBefore = Set(engine.sessionIDs.filter { engine.sessions[$0]?.roleClass == .emergency })
        let effects = engine.handle(event, at: Instant(nanoseconds: clock))
        followOutputMutes()
        if engine.settleOverflows > 0 { problems.append("the settle pass did not converge on \(event)") }
        // An emergency's activation interrupts every session but a call (and an alarm, which nothing interrupts) —
        // and so does an active alarm that turns into one.
        for id in engine.sessionIDs
        where engine.sessions[id]?.roleClass == .emergency && engine.session(id)?.active == true
            && (!activeBefore.contains(id) || !emergenciesBefore.contains(id))
        {
            for other in activeBefore.sorted() where other != id {
                // Nor an output-muted session, which no other session's activation interrupts (SPEC §5).
                guard let o = engine.session(other), o.active, !o.configuration.isCall, !o.outputMuted,
                    engine.platformCall?.session != other, engine.sessions[other]?.isAlert != true
                else { continue }
                problems.append("emergency \(id) activated on \(event) and \(other) stays active")
            }
        }
        check(effects, after: event)
        var echoes: [StreamInfo] = []
        for e in effects {
            switch e {
            case .setStreamMute(let id, let m):
                guard server[id] != nil else { continue }
                if id.kind == .record && !m && !recordUnmuteAllowed(event) {
                    problems.append("invariant 7: record \(id) unmuted by audiod on \(event)")
                }
                server[id]?.muted = m
                echoes.append(server[id]!)
            case .setStreamVolume(let id, let v), .rampStreamVolume(let id, let v, _):
                guard server[id] != nil else { continue }
                server[id]?.volume = v
                audiodVolume[id] = v
                echoes.append(server[id]!)
            case .rampStreamUnmute(let id, _):
                guard server[id] != nil else { continue }
                if id.kind == .record { problems.append("a server ramp up for record \(id) on \(event)") }
                server[id]?.muted = false
                echoes.append(server[id]!)
            case .mprisPause(let p):
                if let pid = pidOf(p), players[pid] != nil { pendingPlayer.append((pid, .paused)) }
            case .mprisPlay(let p):
                if let pid = pidOf(p), players[pid] != nil { pendingPlayer.append((pid, .playing)) }
            case .scheduleTimer(let t, _):
                if !timers.contains(t) { timers.append(t) }
            case .cancelTimer(let t):
                timers.removeAll { $0 == t }
            // What a bus client that follows the signals holds (and what the service answers Get from).
            case .sessionAdded(let view):
                published[view.id] = view
            case .sessionRemoved(let id):
                published[id] = nil
            case .sessionPropertiesChanged(let id, let changed):
                published[id]?.apply(changed)
            default: break
            }
        }
        _ = recordMutedBefore
        for info in echoes where server[info.id] != nil { step(.streamChanged(server[info.id]!)) }
        stepDepth -= 1
        drainPlayers()
        return effects
    }

    /// What audiod asked of the players (Pause, Play), answered once the change that asked it is over: a player
    /// answers in order, so a Pause asked while its own Playing is still being handled (the stream uncorked first,
    /// and audiod pausing it again) is answered after that Playing, never before.
    var pendingPlayer: [(UInt32, PlaybackStatus)] = []
    var stepDepth = 0
    var playerDepth = 0
    var drainingPlayers = false

    mutating func drainPlayers() {
        guard stepDepth == 0, playerDepth == 0, !drainingPlayers else { return }
        drainingPlayers = true
        defer { drainingPlayers = false }
        while !pendingPlayer.isEmpty {
            let (pid, status) = pendingPlayer.removeFirst()
            // A player gone meanwhile answers nothing.
            if players[pid] != nil { setPlayer(pid, status) }
        }
    }
    var published: [SessionID: SessionView] = [:]

    func pidOf(_ p: PlayerID) -> UInt32? {
        UInt32(p.busName.dropFirst("org.mpris.MediaPlayer2.p".count))
    }

    func recordUnmuteAllowed(_ event: Event) -> Bool {
        switch event {
        case .setActive(_, _, true, _): return true  // the owner's activation
        case .streamChanged(let info): return info.id.kind == .record && !info.muted  // the user unmuted it
        default: return false
        }
    }

    /// Invariant 6, from the signals as they are sent.
    mutating func check(_ effects: [Effect], after event: Event) {
        for case .signal(let id, let signal) in effects {
            switch signal {
            case .interruptionBegan(let reason, let by):
                let spokenOnly =
                    reason == .default
                    && by.flatMap { engine.session($0) }.map {
                        $0.configuration.has(.interruptSpokenAudioAndMixWithOthers) && $0.configuration.isMixable
                    } == true && engine.session(id)?.configuration.mode == .spokenAudio
                openInterruptions[id] = (spokenOnly, (openInterruptions[id]?.count ?? 0) + 1)
            case .interruptionEnded(let resume):
                guard let open = openInterruptions[id], open.count > 0 else {
                    problems.append("invariant 6: \(id) got InterruptionEnded without InterruptionBegan on \(event)")
                    continue
                }
                openInterruptions[id] = nil
                if resume && !open.spokenOnly && !allowsResume(event) {
                    problems.append("invariant 6: \(id) told should_resume=true on \(event)")
                }
            default: break
            }
        }
        // A new interruption replaces one that was never ended (e.g. re-interrupted after reactivation).
    }

    func allowsResume(_ event: Event) -> Bool {
        switch event {
        case .setActive(_, _, false, let options): return options.contains("notify-others-on-deactivation")
        case .release, .ownerVanished, .processExited: return true
        // The platform's last call ended: it deactivates with notify (SPEC §10); or the call app's streams went to
        // the platform call, ending the app's own implicit call with notify, as a stream taken by a session does.
        case .platformCall: return true
        // Calls lost with their bus end without notify; what remains may still move the call app's streams.
        case .platformCallSourceLost(let remaining): return remaining != nil
        // Unlocking lets the sessions the lock interrupted resume (SPEC §10).
        case .screenLocked(false): return true
        // An implicit call ends with notify when its linger runs out or its last stream is taken or gone.
        case .timerFired, .streamRemoved, .createSession, .playerRemoved, .streamChanged, .setApplicationCategory,
            .removeApplicationCategory:
            return true
        default: return false
        }
    }

    func audible(_ info: StreamInfo) -> Bool {
        guard info.id.kind == .playback, !info.corked, !info.muted, !info.volume.isSilent else { return false }
        for pid in info.processChain {
            if let status = players[pid] { return status == .playing }
        }
        return true
    }

    /// Every invariant of docs/POLICY.md §9, checked against the simulated server.
    func violations() -> [String] {
        var v = problems
        if engine.sessionlessAudible < 0 {
            v.append("the audible streams of no session count \(engine.sessionlessAudible)")
        }
        // The signals tell a follower everything: what it holds is the engine's view of every session.
        if Set(published.keys) != Set(engine.sessionIDs) {
            v.append("published sessions \(published.keys.sorted()) are not the engine's \(engine.sessionIDs)")
        }
        for id in engine.sessionIDs where published[id] != nil && published[id] != engine.session(id) {
            v.append(
                "\(id) as published differs from the engine's: \(String(describing: published[id])) vs \(String(describing: engine.session(id)))"
            )
        }
        // A stream not yet linked is nobody's: nothing is decided on it before the link.
        for link in unlinked
        where engine.streamView(link.id) != nil
            || engine.sessionIDs.contains(where: { engine.session($0)?.streams.contains(link.id.index) == true })
        {
            v.append("unlinked \(link.id) decided on before its link")
        }
        // Mutes ahead of a call are held only for a call that is still unlinked, or linked but not yet playing
        // (PipeWire shows it corked until its node runs), and are the call's own.
        for (call, ahead) in engine.callsAboutToSound {
            if !unlinked.contains(where: { $0.id == call }) && engine.streamView(call)?.info.corked != true {
                v.append("\(call) still mutes \(ahead.sorted()) ahead after its link or end")
            }
        }
        let views = engine.sessionIDs.compactMap { engine.session($0) }
        // 1. At most one non-mixable session active (and so uninterrupted) — besides the platform call while it is
        // held (a call may activate beside it) or only rings (a session that prefers no interruptions from system
        // alerts keeps the audio beside it), SPEC §10.
        let beside = engine.platformCall.flatMap { $0.info.state == .held || $0.onlyRings ? $0.session : nil }
        let activeNonMixable = views.filter { $0.active && !$0.mixable && $0.id != beside }
        if activeNonMixable.count > 1 { v.append("invariant 1: active non-mixable \(activeNonMixable.map(\.id))") }
        // Sleep (SPEC §10): nobody but the platform call is active between PrepareForSleep(true) and (false).
        if engine.sleeping {
            let awake = views.filter {
                $0.active && $0.id != engine.platformCall?.session && engine.sessions[$0.id]?.isAlert != true
            }
            if !awake.isEmpty { v.append("sleep: sessions \(awake.map(\.id)) active while the machine sleeps") }
        }
        let primary = engine.primaryAudioSession
        // §0/§5: primary audio is an active non-mixable session with an audible stream, or the session taking over
        // in a handover: non-mixable, able to play, not interrupted, and with its linger running (so it ends).
        if let primary, let p = engine.session(primary) {
            // The engine's own audibility: a stream muted ahead of a call still counts as its session's sound.
            let audibleHere = server.keys.contains {
                engine.streamView($0).map { $0.session == primary && $0.audible } ?? false
            }
            if !(p.active && !p.mixable && audibleHere) {
                if engine.handoverSession != primary || p.mixable || p.interrupted
                    || p.configuration.category == .record
                {
                    v.append("primary \(primary) is neither audible nor a session taking over: \(p)")
                } else if !timers.contains(.handover(primary)) {
                    v.append("handover to \(primary) with no linger running")
                }
            }
        } else if let primary {
            v.append("primary \(primary) is no session")
        }
        // An output-muted session ducks nobody: nothing of it is heard (SPEC §5).
        let duckers = views.filter { $0.active && $0.configuration.ducksOthers && !$0.outputMuted }
        // A voice prompt or an alarm plays ducked under an active call and never ducks one (SPEC §7 step 5).
        func sparesCalls(_ s: SessionView) -> Bool {
            engine.sessions[s.id]?.isAlert == true || (s.configuration.mode == .voicePrompt && s.mixable)
        }
        func isCall(_ s: SessionView) -> Bool { s.configuration.isCall || engine.platformCall?.session == s.id }
        let activeCalls = views.filter { $0.active && $0.configuration.isCall }
        let screenReader = server.values.contains { ($0.role == "a11y" || $0.role == "Accessibility") && audible($0) }
        if engine.strongDuckLevel > engine.duckLevel {
            v.append("StrongDuckLevel \(engine.strongDuckLevel) above DuckLevel \(engine.duckLevel)")
        }
        // Bounded: an exited pid is remembered only while a stream the engine tracks has it in its chain.
        let chained = Set(engine.streams.values.flatMap(\.info.processChain))
        for pid in engine.goneProcesses.sorted() where !chained.contains(pid) {
            v.append("exited pid \(pid) remembered with no stream that names it")
        }
        for (id, info) in server {
            guard let sv = engine.streamView(id) else {
                v.append("stream \(id) unknown to the engine")
                continue
            }
            // A live process's stream is policed: only a11y streams (and a dead process's) belong to nobody.
            if sv.session == nil, info.role != "a11y", info.role != "Accessibility", let pid = info.processChain.first,
                !exited.contains(pid)
            {
                v.append("stream \(id) of live process \(pid) (chain \(info.processChain)) belongs to no session")
            }
            // A screen reader's stream, by either name of the role, belongs to nobody and is never touched.
            if info.role == "a11y" || info.role == "Accessibility",
                sv.session != nil || sv.policyMuted || sv.duckFactor < 1
            {
                v.append("a11y stream \(id) (role \(info.role ?? "")) has a session or is silenced or ducked")
            }
            // The reasons a person reads (ListStreams' policy-reasons) name the conditions the decision checked
            // on its own: they must say "silenced" exactly when the stream is, and "ducked" exactly when it is.
            func isDuck(_ r: PolicyReason) -> Bool {
                switch r {
                case .duckedBy, .duckedByVoicePrompt, .duckedUnderScreenReader, .duckedUnderCall: true
                default: false
                }
            }
            // A resumed player's stream held at audiod's 0 says so, and is neither silenced nor ducked by it.
            func isHold(_ r: PolicyReason) -> Bool { r == .awaitingResumedSound }
            let silencing = sv.reasons.contains { !isDuck($0) && !isHold($0) }
            let ducking = sv.reasons.contains(where: isDuck)
            if silencing != sv.policyMuted || ducking != (sv.duckFactor < 1) {
                v.append(
                    "stream \(id): reasons \(sv.reasons.map(\.text)) but policy-muted \(sv.policyMuted), duck \(sv.duckFactor)"
                )
            }
            let holds = engine.streams[id].map { $0.fade?.waitsUntil != nil && !$0.appliedMute } ?? false
            if sv.reasons.contains(where: isHold) != holds {
                v.append("stream \(id): reasons \(sv.reasons.map(\.text)) but held at silence \(holds)")
            }
            let owner = sv.session.flatMap { engine.session($0) }
            let category = owner?.configuration.category
            // Alarms and emergencies: nothing silences their sound but a route change (§6), nothing interrupts them.
            // (A capture an explicit session's interruption held stays held in the alarm app's session: privacy, §3.)
            if let owner, engine.sessions[owner.id]?.isAlert == true,
                (id.kind == .playback && sv.policyMuted && sv.reasons.filter { !isDuck($0) } != [.routeChange])
                    || owner.interrupted
            {
                v.append("alarm \(id) of \(owner.id) silenced or interrupted: \(sv.reasons.map(\.text))")
            }
            // Silenced by silent mode or the lock while heard, a stream fades out first and is muted at the fade's
            // end (§2 "Fades"): policy-muted from the fade's start, the invariants hold at its end.
            let fadingOut =
                sv.policyMuted && engine.fading.contains(id) && engine.streams[id]?.fade?.silences == true
                && !info.muted
            if fadingOut, engine.streams[id].map({ engine.silencing($0) }) != .quiet {
                v.append("\(id) fades out, but silent mode or the lock is not all that silences it")
            }
            // 2. Silent mode.
            if engine.silentMode && audible(info) && category?.obeysSilentMode == true && !fadingOut {
                v.append("invariant 2: \(id) of a \(category!) session audible in silent mode")
            }
            // The lock screen (SPEC §10): no ambient or solo-ambient sound behind it, but events, a11y and the call.
            if engine.screenLocked, audible(info), !fadingOut, category?.obeysSilentMode == true, let owner,
                engine.sessions[owner.id]?.roleExempt != true, engine.platformCall?.session != owner.id
            {
                v.append("lock screen: \(id) of a \(category!) session audible behind the lock")
            }
            // 3. Secondary audio.
            if let primary, audible(info), category == .ambient, let owner, owner.id != primary,
                !owner.handlesSecondaryAudio, engine.sessions[owner.id]?.roleExempt != true
            {
                v.append("invariant 3: ambient \(id) audible during primary audio of \(primary)")
            }
            guard id.kind == .playback, let user = userVolume[id] else { continue }
            // 4. Ducking, from the user's own volume, by the deepest duck that applies: a voice prompt's or a
            // screen reader's is the strong one, and a screen reader ducks every session's stream, duckers' too. A
            // call is ducked only by plain duckers; a voice prompt or an alarm is ducked under an active call.
            let applying =
                owner.map { o in
                    duckers.contains { $0.id == o.id } ? [] : duckers.filter { !isCall(o) || !sparesCalls($0) }
                } ?? []
            let underCall = owner.map { o in sparesCalls(o) && activeCalls.contains { $0.id != o.id } } ?? false
            let normal = underCall || !applying.isEmpty
            let strong =
                owner != nil
                && (screenReader || (!underCall && applying.contains { $0.configuration.mode == .voicePrompt }))
            let ducked = normal || strong
            let level = strong ? engine.strongDuckLevel : engine.duckLevel
            let expected = ducked ? user.multiplied(by: Volume.fromLinear(level)) : user
            if sv.duckFactor != (ducked ? level : 1.0) {
                v.append("invariant 4: \(id) reports duck factor \(sv.duckFactor), expected \(ducked ? level : 1.0)")
            }
            if sv.reasons.contains(.duckedUnderScreenReader) != (owner != nil && screenReader) {
                v.append("invariant 4: \(id) reasons \(sv.reasons.map(\.text)), a screen reader heard: \(screenReader)")
            }
            // A duck fading in or out (§2 "Fades") is on its way to the expected volume, and the server shows a point
            // of that way: the invariant holds at the fade's end.
            if let fade = engine.streams[id]?.fade {
                let on =
                    fade.from.channels.count == info.volume.channels.count
                    && zip(info.volume.channels, zip(fade.from.channels, fade.to.channels)).allSatisfy { x, ends in
                        x >= min(ends.0, ends.1) && x <= max(ends.0, ends.1)
                    }
                if (fadingOut ? !fade.to.isSilent : fade.to != expected) || !on || !engine.fading.contains(id) {
                    v.append(
                        "invariant 4: \(id) at \(info.volume) fading \(fade.from) → \(fade.to), expected \(expected) (user \(user), ducked \(ducked), strong \(strong))"
                    )
                }
            } else if info.volume != expected {
                v.append(
                    "invariant 4: \(id) at \(info.volume), expected \(expected) (user \(user), ducked \(ducked), strong \(strong))"
                )
            }
            // 5. Restored when no reason holds; the user's mute is never lost. An output-muted session's playback
            // streams are muted for the app (SPEC §5).
            let shouldBeMuted = (userMuted[id] ?? false) || sv.policyMuted || mutedForApp[id] != nil
            if info.muted != shouldBeMuted && !fadingOut {
                v.append(
                    "invariant 5: \(id) muted=\(info.muted), user \(userMuted[id] ?? false), policy \(sv.policyMuted), for the app \(mutedForApp[id] != nil)"
                )
            }
        }
        return v
    }
}

/// Found by the property above with the fades on by default (pre-existing, fades or not): GameMode stops naming an
/// app whose stream has the Emergency role a game, and starts naming a voice-call app one in the same change. The
/// emergency interrupted everyone but the call first, and the call turned into a game's voice chat after: active
/// beside the emergency.
@Suite struct EmergencyOrderTests {
    @Test func anAppThatStopsBeingACallInTheSameGameModeChangeGivesWayToTheEmergency() {
        var sim = Simulation()
        for code in [56956, 26355, 21041, 22109, 35386, 80100] { sim.run(Simulation.Op(code: code)) }
        #expect(sim.violations().isEmpty, "\(sim.violations())")
    }
}
