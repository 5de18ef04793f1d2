import AudiodTestKit
import DBusService
import Foundation
import Testing

/// Issue 44's ducks, on the real servers: a duck fades down to `DuckLevel` over 500 ms and back over 500 ms, in
/// steps the server reports (a libpulse subscription records each with its time); a volume the user sets
/// mid-fade ends the fade and gets the duck at once; a stop or a crash mid-fade leaves the user's volume.
@Suite(.serialized)
struct FadeTests {
    /// Linear amplitude of a libpulse volume (cubic mapping).
    static func amplitude(_ v: UInt32) -> Double { pow(Double(v) / 65536, 3) }

    struct Ramp {
        /// Distinct volumes the server showed on the way, the last one included.
        var steps: Int
        /// From the first report off the start value to the first report at the end value, ms.
        var lengthMs: Double
        /// From 10 % to 90 % of the way, in amplitude, ms.
        var tenToNinetyMs: Double
        var end: UInt32
    }

    /// The ramp stream `index` made from `from` to `to` since `t0`, once it has reached `to` (±64), or nil.
    static func ramp(_ watcher: StreamWatcher, _ index: UInt32, since t0: UInt64, from: UInt32, to: UInt32) -> Ramp? {
        let reports = watcher.timedReports(of: index, since: t0)
        guard let endAt = reports.first(where: { abs(Int($0.stream.volume) - Int(to)) <= 64 })?.at,
            let startAt = reports.first(where: { abs(Int($0.stream.volume) - Int(from)) > 64 })?.at
        else { return nil }
        let (a, b) = (amplitude(from), amplitude(to))
        func crossed(_ fraction: Double) -> UInt64? {
            let mark = a + (b - a) * fraction
            return reports.first { b < a ? amplitude($0.stream.volume) <= mark : amplitude($0.stream.volume) >= mark }?
                .at
        }
        let way = reports.filter { $0.at <= endAt }.map(\.stream.volume)
        let distinct = zip(way, [from] + way).filter { $0 != $1 }.count
        let ten = crossed(0.1) ?? startAt
        let ninety = crossed(0.9) ?? endAt
        return Ramp(
            steps: distinct, lengthMs: Double(endAt - startAt) / 1e6, tenToNinetyMs: Double(ninety - ten) / 1e6,
            end: to)
    }

    /// A fade-in seen in `reports` from `start` (its first step heard) to the first report at full volume,
    /// unmuted: about a second, in 30 steps or more (the distinct volumes heard on the way).
    static func expectFadeIn(
        _ reports: [(at: UInt64, stream: WatchedStream)], from start: UInt64?, _ what: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        guard let start, let end = reports.first(where: { $0.stream.volume == 65536 && !$0.stream.muted })?.at else {
            Issue.record(
                "\(what): no fade-in seen: \(reports.map { ($0.stream.muted, $0.stream.volume) })",
                sourceLocation: sourceLocation)
            return
        }
        let ms = Double(end - start) / 1e6
        let steps = Set(reports.filter { !$0.stream.muted && $0.stream.volume > 0 }.map(\.stream.volume)).count
        print("fades: \(what): \(steps) steps, \(String(format: "%.0f", ms)) ms")
        #expect(ms >= 850 && ms <= 1_150 && steps >= 30, "\(steps) steps over \(ms) ms", sourceLocation: sourceLocation)
    }

    static func describe(_ r: Ramp) -> String {
        String(format: "%d steps, %.0f ms (10–90 %%: %.0f ms)", r.steps, r.lengthMs, r.tenToNinetyMs)
    }

    /// A private server and audiod, music playing as an implicit app (watched by a libpulse subscription), and a
    /// process to hang an explicit session on.
    struct Scene {
        let server: TestServer
        let d: Daemon
        let watcher: StreamWatcher
        let stream: ObservedStream
        let app: Child
    }

    func withMusic(_ kind: ServerKind, config: String? = nil, _ body: (Scene) throws -> Void) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        if let config {
            let dir = "\(server.directory)/home/.config/audiod"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            try config.write(toFile: "\(dir)/audiod.toml", atomically: true, encoding: .utf8)
        }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let watcher = try StreamWatcher(server: server.pulseServer)
        let music = try playback(server, name: "music", role: "music")
        defer { music.kill() }
        let stream = try server.waitForPlaybackStream(pid: music.pid)
        let app = try server.spawn(["sleep", "60"])
        defer { app.kill() }
        #expect(watcher.settle())
        try body(Scene(server: server, d: d, watcher: watcher, stream: stream, app: app))
    }

    /// PulseAudio's duck of full volume to 0.2 (`pa_sw_volume_from_linear`).
    static let ducked = UInt32((pow(0.2, 1.0 / 3) * 65536).rounded())

    /// A duck or a fade-out of the stream has begun: on PipeWire 1.4 its server ramp is sent (no volume a pulse
    /// client sees moves until the ramp's end), elsewhere its first step is seen.
    static func fadeDownBegan(_ kind: ServerKind, _ server: TestServer, log: String = "audiod.log", stream: UInt32)
        -> Bool
    {
        waitFor(5) {
            kind == .pipewire14
                ? server.file(log).contains("write: ramp stream \(stream)'s volume down")
                : ((try? server.playbackStreams())?.first { $0.index == stream }?.volume.first ?? 65536) < 60000
        }
    }

    @Test(
        "a duck fades down to DuckLevel over 500 ms and back over 500 ms: in steps, or as one ramp of the node's factor inside the server where it can (PipeWire 1.4), the volume and the factor at 1.0 set together",
        arguments: ServerKind.tested)
    func duckFades(kind: ServerKind) throws {
        try withMusic(kind) { scene in
            let (server, d, watcher, stream, ducker) = (scene.server, scene.d, scene.watcher, scene.stream, scene.app)
            // A ramp needs a node that has been processing: the music plays a while first.
            Thread.sleep(forTimeInterval: 0.5)
            if kind == .pipewire14 { return try Self.duckRamps(scene) }
            var t0 = DispatchTime.now().uptimeNanoseconds
            let path = try d.client.makeSession(pid: ducker.pid, "playback", options: ["duck-others"], activate: true)
            _ = server
            var down: Ramp?
            #expect(
                waitFor(5) {
                    down = Self.ramp(watcher, stream.index, since: t0, from: 65536, to: Self.ducked)
                    return down != nil
                })
            if let r = down {
                print("fades: \(kind): duck \(Self.describe(r))")
                #expect(r.steps >= 10, "the duck came in \(r.steps) steps: a jump, not a fade")
                #expect(r.lengthMs >= 400 && r.lengthMs <= 600, "the duck took \(r.lengthMs) ms, not about 500")
            }
            #expect(watcher.settle())
            #expect(abs(Int(watcher.streams[stream.index]?.volume ?? 0) - Int(Self.ducked)) <= 64, "not at DuckLevel")

            t0 = DispatchTime.now().uptimeNanoseconds
            _ = d.client.session(path, "SetActive", [.bool(false), .strings([])])
            var up: Ramp?
            #expect(
                waitFor(5) {
                    up = Self.ramp(watcher, stream.index, since: t0, from: Self.ducked, to: 65536)
                    return up != nil
                })
            if let r = up {
                print("fades: \(kind): duck undone \(Self.describe(r))")
                #expect(r.steps >= 10 && r.lengthMs >= 400 && r.lengthMs <= 600, "\(Self.describe(r))")
            }
            #expect(watcher.settle())
            #expect(watcher.streams[stream.index]?.volume == 65536, "the user's volume did not come back exactly")
        }
    }

    /// PipeWire 1.4: the duck is one ramp of the node's factor; a pulse client sees the volume go to DuckLevel in one
    /// change once the ramp has run, and the factor is 1.0 after it. Its undoing sets the user's volume at once, with
    /// the factor at the duck's share, and ramps the factor up to 1.0.
    static func duckRamps(_ scene: Scene) throws {
        let (server, d, watcher, stream, ducker) = (scene.server, scene.d, scene.watcher, scene.stream, scene.app)
        let node = try #require(stream.properties["object.id"])
        let log = server.file("audiod.log")
        var t0 = DispatchTime.now().uptimeNanoseconds
        let path = try d.client.makeSession(pid: ducker.pid, "playback", options: ["duck-others"], activate: true)
        #expect(
            waitFor(5) { server.file("audiod.log").contains("write: ramp stream \(stream.index)'s volume down") },
            "no server ramp for the duck: \(log.suffix(1500))")
        #expect(
            waitFor(5) { abs(Int(watcher.streams[stream.index]?.volume ?? 0) - Int(Self.ducked)) <= 64 },
            "not at DuckLevel")
        let seen = watcher.timedReports(of: stream.index, since: t0).map { ($0.at, $0.stream.volume) }
        let moved = seen.filter { $0.1 != 65536 }
        let at = moved.first.map { Double($0.0 - t0) / 1e6 } ?? 0
        print("fades: pipewire-1.4: duck as a server ramp, the volume seen \(moved.map(\.1)) at \(Int(at)) ms")
        #expect(Set(moved.map(\.1)).count == 1, "steps a pulse client sees: \(moved.map(\.1))")
        #expect(at >= 450, "the volume changed \(at) ms after the duck began: before its ramp had run")
        #expect(waitFor(5) { Self.factor(server, node: node) == 1.0 }, "the factor is not 1.0 after the duck")
        #expect(watcher.settle())

        t0 = DispatchTime.now().uptimeNanoseconds
        _ = d.client.session(path, "SetActive", [.bool(false), .strings([])])
        #expect(
            waitFor(5) { server.file("audiod.log").contains("write: ramp stream \(stream.index)'s volume up") },
            "no server ramp for the duck's undoing")
        #expect(waitFor(5) { watcher.streams[stream.index]?.volume == 65536 }, "the user's volume did not come back")
        let back = watcher.timedReports(of: stream.index, since: t0).first(where: { $0.stream.volume == 65536 })
        let backMs = back.map { Double($0.at - t0) / 1e6 } ?? 0
        #expect(backMs < 400, "the user's volume came back after \(backMs) ms: not at the ramp's start")
        // What is heard is the benchmark's to measure (a node does not report its factor during a ramp).
        print("fades: pipewire-1.4: duck undone: the user's volume after \(Int(backMs)) ms")
        #expect(waitFor(5) { Self.factor(server, node: node) == 1.0 }, "the factor is not 1.0 after the ramp up")
        #expect(watcher.settle())
        #expect(watcher.streams[stream.index]?.volume == 65536)
    }

    /// The node's own volume factor (`Props` `volume`), as `pw-dump` shows it; nil where it shows none.
    static func factor(_ server: TestServer, node: String) -> Double? {
        server.nodeProps(node).lazy.compactMap { $0["volume"] as? Double }.first
    }

    @Test(
        "an interruption ramps a heard stream down inside the server where it can (PipeWire 1.4), then mutes it with its factor back at 1.0; elsewhere a step",
        arguments: ServerKind.tested)
    func interruptionRamp(kind: ServerKind) throws {
        try withMusic(kind) { scene in
            let (server, d, watcher, stream, videoApp) = (scene.server, scene.d, scene.watcher, scene.stream, scene.app)
            // A ramp needs a node that has been processing: the music plays a while first.
            Thread.sleep(forTimeInterval: 0.5)
            let t0 = DispatchTime.now().uptimeNanoseconds
            let path = try d.client.makeSession(pid: videoApp.pid, "playback", activate: true)
            #expect(waitFor(5) { watcher.streams[stream.index]?.muted == true }, "the video took no audio")
            let mutedAt = watcher.timedReports(of: stream.index, since: t0).first { $0.stream.muted }?.at ?? t0
            let ms = Double(mutedAt - t0) / 1e6
            let log = server.file("audiod.log")
            let ramped = log.contains("write: ramp stream \(stream.index) down over 8 ms")
            print(
                "fades: \(kind): interruption \(ramped ? "ramped by the server" : "a step"), muted after \(String(format: "%.1f", ms)) ms"
            )
            if kind == .pipewire14 {
                #expect(ramped, "no server ramp on PipeWire 1.4")
                // The mute waits for the ramp (8 ms) and two graph cycles' margin.
                #expect(ms >= 50, "muted \(ms) ms after the activation began: before the ramp had run")
                let node = try #require(stream.properties["object.id"])
                #expect(
                    waitFor(5) { Self.factor(server, node: node) == 1.0 },
                    "the factor stayed at \(Self.factor(server, node: node).map { "\($0)" } ?? "?") under the mute")
                #expect(watcher.streams[stream.index]?.volume == 65536, "the user's volume changed under the mute")
            } else {
                #expect(!ramped, "a ramp on a server without them")
            }
            // Given back: unmuted, at the user's volume, the factor at 1.0.
            _ = d.client.session(path, "SetActive", [.bool(false), .strings(["notify-others-on-deactivation"])])
            #expect(
                waitFor(5) {
                    watcher.streams[stream.index]?.muted == false && watcher.streams[stream.index]?.volume == 65536
                }, "the music did not come back to the user's volume")
            if kind == .pipewire14, let node = stream.properties["object.id"] {
                #expect(Self.factor(server, node: node) == 1.0, "the factor is not 1.0 after the give-back")
            }
        }
    }

    /// WirePlumber 0.5 saves a stream's PipeWire factor into its restore key (its media role, else its app) the
    /// moment a ramp is set, and starts every new stream of the key with it: measured before this test, a role's
    /// next stream started at 0, silent, with nothing in a mixer to show why. A stream that ends mid-ramp (round 0),
    /// or one that ends with an audiod killed mid-ramp and then `--restore` (round 1), must leave the key at 1.0.
    @Test(
        "a ramp's factor, which WirePlumber saves into the stream's role, never reaches the role's next stream: not after the app ends mid-ramp, nor after audiod is killed mid-ramp and --restore",
        arguments: ServerKind.tested.filter { $0 == .pipewire14 })
    func rampFactorLeavesNoRole(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        // The longest de-click: the app is killed well inside the ramp and the mute's wait after it.
        let dir = "\(server.directory)/home/.config/audiod"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try "de-click = 0.05\n".write(toFile: "\(dir)/audiod.toml", atomically: true, encoding: .utf8)
        // Round 0: the app ends inside the ramp, audiod running: only its probe can repair the key. Round 1: the app
        // and audiod end inside the ramp, then --restore. Round 2: the app plays on, and another app's stream of the
        // role starts inside the ramp.
        for round in 0..<3 {
            let killed = round == 1
            let during = round == 2
            let how =
                "round \(round) (\(killed ? "audiod killed, then --restore" : during ? "a stream started inside the ramp" : "audiod running"))"
            let log = "audiod-\(round).log"
            let d = try Daemon.start(server, log: log)
            let music = try playback(server, name: "music-\(round)", role: "music")
            defer { music.kill() }
            let stream = try server.waitForPlaybackStream(pid: music.pid)
            // A ramp needs a node that has been processing.
            Thread.sleep(forTimeInterval: 0.5)
            let video = try server.spawn(["sleep", "60"])
            defer { video.kill() }
            // The reply comes once the ramp has started; the app (and in round 1 audiod) ends at once after it.
            _ = try d.client.makeSession(pid: video.pid, "playback", activate: true)
            let inside = during ? try playback(server, name: "during", role: "music") : nil
            defer { inside?.kill() }
            if !during { music.kill() }
            if killed { d.kill() }
            let text = server.file(log)
            #expect(text.contains("write: ramp stream \(stream.index) down"), "\(how): no ramp")
            if !during {
                #expect(!text.contains("(the ramp has run)"), "\(how): the app ended after the ramp, not inside it")
            }
            if killed {
                let out = try server.runStatus([Daemon.executable, "--restore", "--log-level", "debug"])
                #expect(out.status == 0, "\(how): \(out.output)")
            } else if !during {
                #expect(
                    waitFor(5) { server.file(log).contains("its saved PipeWire factor set back to 1.0") },
                    "\(how): the role's key was not repaired: \(server.file(log).suffix(1500))")
            }
            if let inside {
                let s = try server.waitForPlaybackStream(pid: inside.pid)
                let node = try #require(s.properties["object.id"])
                let seen = server.file(log).contains("write: factor of stream \(s.index) to 1.0")
                print("fades: \(kind): a stream of the role started \(seen ? "inside" : "after") the ramp's window")
                #expect(
                    waitFor(5) { Self.factor(server, node: node) == 1.0 },
                    "\(how): the stream started inside the ramp stayed at factor \(Self.factor(server, node: node).map { "\($0)" } ?? "?")"
                )
            }
            // With no audiod to set anything on it: another app's next stream of the role.
            if !killed { d.stop() }
            let next = try playback(server, name: "other-\(round)", role: "music")
            defer { next.kill() }
            let fresh = try server.waitForPlaybackStream(pid: next.pid)
            let node = try #require(fresh.properties["object.id"])
            #expect(
                waitFor(5) { Self.factor(server, node: node) == 1.0 },
                "\(how): the role's next stream started at factor \(Self.factor(server, node: node).map { "\($0)" } ?? "?")"
            )
            #expect(
                !FileManager.default.fileExists(atPath: "\(server.directory)/audiod/factors"),
                "\(how): the factors file was left: \(server.file("audiod/factors"))")
        }
    }

    @Test(
        "music given back after an interruption fades in from silence over a second, its volume set before the unmute",
        arguments: ServerKind.tested)
    func fadeIn(kind: ServerKind) throws {
        try withMusic(kind) { scene in
            let (d, watcher, stream, videoApp) = (scene.d, scene.watcher, scene.stream, scene.app)
            let path = try d.client.makeSession(pid: videoApp.pid, "playback", activate: true)
            #expect(waitFor(5) { watcher.streams[stream.index]?.muted == true }, "the video took no audio")
            #expect(watcher.settle())
            let t0 = DispatchTime.now().uptimeNanoseconds
            _ = d.client.session(path, "SetActive", [.bool(false), .strings(["notify-others-on-deactivation"])])
            #expect(
                waitFor(5) {
                    watcher.streams[stream.index]?.muted == false && watcher.streams[stream.index]?.volume == 65536
                }, "the music did not come back to the user's volume")
            let reports = watcher.timedReports(of: stream.index, since: t0)
            // No report shows it unmuted at full volume before the fade: the volume went down first.
            let firstUnmuted = reports.first { !$0.stream.muted }
            // The fade's first step: 2 % of the way in amplitude (−34 dB), not the user's volume.
            let firstAmplitude = Self.amplitude(firstUnmuted?.stream.volume ?? 65536)
            #expect(firstAmplitude < 0.05, "unmuted at \(firstUnmuted?.stream.volume ?? 0) first")
            Self.expectFadeIn(reports, from: firstUnmuted?.at, "\(kind): music given back")
        }
    }

    @Test(
        "a player audiod resumes through MPRIS is unmuted at silence and fades in over a second once it plays",
        arguments: ServerKind.tested)
    func resumedPlayerFadesIn(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let watcher = try StreamWatcher(server: server.pulseServer)
        let players = MediaPlayerTests()
        let (mpv, name) = try players.mpv(server, heardBy: d)
        defer { mpv.kill() }
        let stream = try server.waitForPlaybackStream(pid: mpv.pid)
        let app = try server.spawn(["sleep", "60"])
        defer { app.kill() }
        // Heard a while first: on PipeWire 1.4 the interruption then ramps mpv down inside the server (a stream
        // younger than 300 ms is muted in a step), and mpv pauses inside that ramp.
        Thread.sleep(forTimeInterval: 0.5)
        let path = try d.client.makeSession(pid: app.pid, "playback", activate: true)
        #expect(waitFor(10) { players.status(server, name) == "Paused" }, "the video did not pause mpv")
        #expect(waitFor(5) { watcher.streams[stream.index]?.muted == true }, "mpv's stream was not muted")
        #expect(watcher.settle())
        let t0 = DispatchTime.now().uptimeNanoseconds
        _ = d.client.session(path, "SetActive", [.bool(false), .strings(["notify-others-on-deactivation"])])
        #expect(waitFor(10) { players.status(server, name) == "Playing" }, "mpv was not resumed")
        #expect(
            waitFor(5) {
                watcher.streams[stream.index].map { !$0.muted && !$0.corked && $0.volume == 65536 } == true
            }, "mpv did not come back to the user's volume: \(String(describing: watcher.streams[stream.index]))")
        let reports = watcher.timedReports(of: stream.index, since: t0)
        let seen = reports.map { ($0.stream.muted, $0.stream.corked, $0.stream.volume) }
        // Unmuted at silence: the volume went to 0 under the mute, before the Play.
        #expect(reports.first { !$0.stream.muted }?.stream.volume == 0, "\(seen)")
        // Heard first at the fade's first step, then the fade's steps up to the user's volume.
        let firstHeard = reports.first { !$0.stream.muted && $0.stream.volume > 0 }
        #expect(Self.amplitude(firstHeard?.stream.volume ?? 65536) < 0.05, "\(seen)")
        Self.expectFadeIn(reports, from: firstHeard?.at, "\(kind): mpv resumed through MPRIS")
        // On PipeWire 1.4 the interruption ramped mpv's factor down, and mpv paused inside the ramp or its check: the
        // rest of the ramp runs when it plays again, and the factor must come back up by a ramp then. A plain 1.0
        // set 250 ms later, as before, was heard as a click a quarter of the way into the fade-in (docs/FADES.md).
        let log = server.file("audiod.log")
        let pausedInRamp = log.contains("stream \(stream.index) paused inside its ramp or its factor's check")
        print("fades: \(kind): mpv paused inside its interruption's ramp or its check: \(pausedInRamp)")
        // mpv answers a Pause in tens of milliseconds, well inside the ramp's 58 ms and its check's 250 ms after.
        if kind == .pipewire14 { #expect(pausedInRamp, "mpv did not pause inside its ramp: \(log.suffix(3000))") }
        if kind == .pipewire14, pausedInRamp, let node = stream.properties["object.id"] {
            #expect(log.contains("write: the factor of node \(node) back up over 8 ms"), "\(log.suffix(3000))")
            #expect(waitFor(5) { Self.factor(server, node: node) == 1.0 }, "the factor was not back at 1.0")
        }
    }

    @Test(
        "a resumed player that does not play waits at silence 2 s at most, and a stop or a kill meanwhile leaves its volume",
        arguments: ServerKind.tested)
    func resumedPlayerThatDoesNotPlay(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let players = MediaPlayerTests()
        for end in ["the wait", "SIGTERM", "SIGKILL and --restore"] {
            let d = try Daemon.start(server, log: "audiod-\(end.prefix(7)).log")
            let (mpv, name) = try players.mpv(server, heardBy: d)
            defer {
                mpv.signal(SIGCONT)
                mpv.kill()
            }
            let app = try server.spawn(["sleep", "60"])
            defer { app.kill() }
            let path = try d.client.makeSession(pid: app.pid, "playback", activate: true)
            #expect(waitFor(10) { players.status(server, name) == "Paused" }, "\(end): the video did not pause mpv")
            // Stopped, mpv answers no Play: its stream stays paused, given back at silence.
            mpv.signal(SIGSTOP)
            let t0 = DispatchTime.now().uptimeNanoseconds
            _ = d.client.session(path, "SetActive", [.bool(false), .strings(["notify-others-on-deactivation"])])
            func now() -> ObservedStream? { server.playbackStream(pid: mpv.pid) }
            #expect(
                waitFor(5) { now().map { !$0.muted && $0.volume.first == 0 } == true },
                "\(end): not given back at silence: \(String(describing: now())); \(server.file("audiod-\(end.prefix(7)).log").suffix(3000))"
            )
            switch end {
            case "SIGTERM": d.stop()
            case "SIGKILL and --restore":
                d.kill()
                let out = try server.runStatus([Daemon.executable, "--restore", "--log-level", "info"])
                #expect(out.status == 0, "\(out.output)")
            default: break
            }
            #expect(
                waitFor(5) { now().map { !$0.muted && $0.volume.first == 65536 } == true },
                "\(end): the user's volume did not come back: \(String(describing: now()))")
            let waited = Double(DispatchTime.now().uptimeNanoseconds - t0) / 1e9
            if end == "the wait" {
                print("fades: \(kind): a resumed player that does not play has its volume back after \(waited) s")
                #expect(waited >= 1.9, "back after \(waited) s, before the wait ran out")
                d.stop()
            }
            usleep(300_000)
            #expect(now()?.volume.first == 65536, "\(end): a write came after")
        }
    }

    @Test(
        "a volume the user sets mid-fade ends the fade: the duck goes on top of it at once, and it comes back exactly",
        arguments: ServerKind.tested)
    func userVolumeMidFade(kind: ServerKind) throws {
        try withMusic(kind) { scene in
            let (server, d, watcher, stream, ducker) = (scene.server, scene.d, scene.watcher, scene.stream, scene.app)
            // A ramp needs a node that has been processing: the music plays a while first.
            Thread.sleep(forTimeInterval: 0.5)
            let path = try d.client.makeSession(pid: ducker.pid, "playback", options: ["duck-others"], activate: true)
            #expect(Self.fadeDownBegan(kind, server, stream: stream.index), "no fade began")
            // Mid-fade (on PipeWire 1.4 inside the server's ramp), the user sets 60 % (39322 is 0.6 of 65536).
            _ = try server.pactl(["set-sink-input-volume", "\(stream.index)", "39322"])
            let expected = UInt32((Double(39322) * pow(0.2, 1.0 / 3)).rounded())
            #expect(
                waitFor(5) { abs(Int(watcher.streams[stream.index]?.volume ?? 0) - Int(expected)) <= 64 },
                "the duck did not go on the user's volume: \(watcher.streams[stream.index]?.volume ?? 0)")
            #expect(watcher.settle())
            #expect(abs(Int(watcher.streams[stream.index]?.volume ?? 0) - Int(expected)) <= 64, "the fade went on")
            _ = d.client.session(path, "SetActive", [.bool(false), .strings([])])
            #expect(waitFor(5) { watcher.streams[stream.index]?.volume == 39322 }, "the user's volume was lost")
        }
    }

    @Test(
        "stopped or killed mid-fade, audiod leaves the user's volume: SIGTERM, and SIGKILL then --restore",
        arguments: ServerKind.tested)
    func stopMidFade(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        var restoreOutput = ""
        for kill in [false, true] {
            let d = try Daemon.start(server, log: kill ? "audiod-kill.log" : "audiod-term.log")
            let music = try playback(server, name: "music", role: "music")
            defer { music.kill() }
            let stream = try server.waitForPlaybackStream(pid: music.pid)
            let ducker = try server.spawn(["sleep", "60"])
            defer { ducker.kill() }
            // A ramp needs a node that has been processing.
            Thread.sleep(forTimeInterval: 0.5)
            _ = try d.client.makeSession(pid: ducker.pid, "playback", options: ["duck-others"], activate: true)
            #expect(
                Self.fadeDownBegan(
                    kind, server, log: kill ? "audiod-kill.log" : "audiod-term.log", stream: stream.index),
                "no fade began")
            if kill {
                d.kill()
                let out = try server.runStatus([Daemon.executable, "--restore", "--log-level", "info"])
                #expect(out.status == 0, "\(out.output)")
                restoreOutput = out.output
            } else {
                d.stop()
            }
            let how = kill ? "SIGKILL and --restore" : "SIGTERM"
            #expect(
                waitFor(5) { server.playbackStream(pid: music.pid)?.volume.first == 65536 },
                "\(how) mid-fade left \(server.playbackStream(pid: music.pid)?.volume ?? []): \(kill ? restoreOutput.suffix(1500) : server.file("audiod-term.log").suffix(1500))"
            )
            // On PipeWire 1.4 the duck was a ramp of the node's factor, which no pulse client shows: back at 1.0.
            if kind == .pipewire14, let node = stream.properties["object.id"] {
                #expect(
                    waitFor(5) { Self.factor(server, node: node) == 1.0 },
                    "\(how) mid-ramp left the factor at \(Self.factor(server, node: node).map { "\($0)" } ?? "?")")
            }
            // Nothing moves it afterwards: no step was left in flight.
            usleep(300_000)
            #expect(server.playbackStream(pid: music.pid)?.volume.first == 65536, "\(how): a step came after")
            _ = stream
        }
    }

    static func setSilentMode(_ d: Daemon, _ on: Bool) throws {
        guard
            case .success = d.client.call(
                API.managerPath, API.properties.name, "Set",
                [.string(API.manager.name), .string("SilentMode"), .variant(.bool(on))])
        else { throw TestKitError("SilentMode was refused") }
    }

    @Test(
        "silent mode fades a game out over 500 ms, then mutes it with the user's volume back under the mute",
        arguments: ServerKind.tested)
    func silentModeFadesOut(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let watcher = try StreamWatcher(server: server.pulseServer)
        let game = try playback(server, name: "game", role: "game")
        defer { game.kill() }
        let stream = try server.waitForPlaybackStream(pid: game.pid)
        #expect(watcher.settle())
        // A ramp needs a node that has been processing.
        Thread.sleep(forTimeInterval: 0.5)
        let t0 = DispatchTime.now().uptimeNanoseconds
        try Self.setSilentMode(d, true)
        #expect(
            waitFor(5) { watcher.streams[stream.index].map { $0.muted && $0.volume == 65536 } ?? false },
            "not muted with the user's volume back: \(String(describing: watcher.streams[stream.index]))")
        let reports = watcher.timedReports(of: stream.index, since: t0)
        if kind == .pipewire14 {
            // One ramp of the factor to 0 inside the server, no volume a pulse client sees on the way (none of 0
            // ever), then the mute once it has run, and the factor back at 1.0 under it.
            let log = server.file("audiod.log")
            #expect(
                log.contains("write: ramp stream \(stream.index)'s volume down to 0%"),
                "no server ramp: \(log.suffix(1500))")
            let mutedAt = reports.first(where: { $0.stream.muted })?.at ?? t0
            let ms = Double(mutedAt - t0) / 1e6
            let seen = reports.filter { !$0.stream.muted }.map(\.stream.volume)
            print(
                "fades: \(kind): silent mode's fade-out as a server ramp, muted after \(Int(ms)) ms, volumes seen \(seen)"
            )
            #expect(seen.allSatisfy { $0 == 65536 }, "volumes on the way: \(seen)")
            #expect(ms >= 500 && ms <= 1000, "muted \(ms) ms after silent mode: not once the ramp had run")
            let node = try #require(stream.properties["object.id"])
            #expect(waitFor(5) { Self.factor(server, node: node) == 1.0 }, "the factor is not 1.0 under the mute")
            try Self.setSilentMode(d, false)
            #expect(
                waitFor(5) { watcher.streams[stream.index].map { !$0.muted && $0.volume == 65536 } ?? false },
                "silent mode off did not give the game back at the user's volume")
            return
        }
        // The way down, as the server showed it: every report before the mute. The fade's last step (to silence)
        // is written with the mute and the volume put back under it, so the server reports the three as one.
        guard let mutedAt = reports.firstIndex(where: { $0.stream.muted }),
            let startAt = reports.first(where: { $0.stream.volume < 65536 - 64 })?.at
        else {
            Issue.record("no fade before the mute: \(reports.map { ($0.stream.muted, $0.stream.volume) })")
            return
        }
        let way = reports[..<mutedAt].map(\.stream.volume)
        let steps = zip(way, [65536] + way).filter { $0 != $1 }.count
        let ms = Double(reports[mutedAt].at - startAt) / 1e6
        print("fades: \(kind): silent mode's fade-out: \(steps) steps, \(String(format: "%.0f", ms)) ms to the mute")
        #expect(steps >= 20, "the fade-out came in \(steps) steps: \(way)")
        #expect(ms >= 400 && ms <= 650, "the fade-out took \(ms) ms, not about 500")
        // Each step lower than the last, and the mute only after the fade's last step but one (≤ 1/20 in amplitude,
        // −26 dB): nothing of the way is cut short.
        #expect(zip(way, way.dropFirst()).allSatisfy { $0 > $1 }, "\(way)")
        #expect(Self.amplitude(way.last ?? 65536) <= 0.05, "muted at \(way.last ?? 65536), before the fade's end")
        #expect(watcher.settle())
        try Self.setSilentMode(d, false)
        #expect(
            waitFor(5) { watcher.streams[stream.index].map { !$0.muted && $0.volume == 65536 } ?? false },
            "silent mode off did not give the game back at the user's volume")
    }

    /// One of the fades a stop or a crash may land in.
    enum FadeKind: CaseIterable, CustomStringConvertible {
        case duck, fadeOut, fadeIn, deClick
        var description: String {
            switch self {
            case .duck: "a duck"
            case .fadeOut: "silent mode's fade-out"
            case .fadeIn: "a fade-in after silent mode"
            case .deClick: "an interruption's ramp"
            }
        }
    }

    @Test(
        "stopped or killed mid-fade (a duck, a fade-out, a fade-in, an interruption's server ramp), audiod leaves the user's values, and the app's and the role's next streams start at them",
        arguments: ServerKind.tested)
    func killedMidFade(kind: ServerKind) throws {
        // `AUDIOD_FADE_KILLS=N`: N rounds (default 8: each fade, stopped by SIGTERM and by SIGKILL + --restore).
        let rounds = ReliabilityTests.setting("AUDIOD_FADE_KILLS", 8)
        let kinds = FadeKind.allCases.count
        // PulseAudio with its restore database, as on a desktop (PipeWire's WirePlumber always has one).
        let server = try TestServer(kind, streamRestore: true)
        defer { server.stop() }
        var results: [String: Int] = [:]
        for round in 0..<rounds {
            let fade = FadeKind.allCases[round % kinds]
            let kill = (round / kinds) % 2 == 1
            let how = "round \(round): \(fade), then \(kill ? "SIGKILL and --restore" : "SIGTERM")"
            let d = try Daemon.start(server, log: "audiod-\(round).log")
            try Self.setSilentMode(d, fade == .fadeIn)
            // The app's own values: the user set 80 % before anything (52429 is 0.8 of 65536). A game, which a
            // playback session does not interrupt (it mixes), except for the interruption's round: music.
            let (app, role) = fade == .deClick ? ("music", "music") : ("game", "game")
            let game = try playback(server, name: app, role: role)
            defer { game.kill() }
            let stream = try server.waitForPlaybackStream(pid: game.pid)
            _ = try server.pactl(["set-sink-input-volume", "\(stream.index)", "52429"])
            Thread.sleep(forTimeInterval: 0.5)
            let ducker = try server.spawn(["sleep", "60"])
            defer { ducker.kill() }
            func volume() -> UInt32 { server.playbackStream(pid: game.pid)?.volume.first ?? 0 }
            switch fade {
            case .duck:
                _ = try d.client.makeSession(pid: ducker.pid, "playback", options: ["duck-others"], activate: true)
                #expect(
                    Self.fadeDownBegan(kind, server, log: "audiod-\(round).log", stream: stream.index),
                    "\(how): no duck began")
            case .fadeOut:
                try Self.setSilentMode(d, true)
                #expect(
                    Self.fadeDownBegan(kind, server, log: "audiod-\(round).log", stream: stream.index),
                    "\(how): no fade-out began")
            case .fadeIn:
                #expect(waitFor(5) { server.playbackStream(pid: game.pid)?.muted == true }, "\(how): not silenced")
                try Self.setSilentMode(d, false)
                #expect(
                    waitFor(5) {
                        server.playbackStream(pid: game.pid).map { !$0.muted && $0.volume[0] < 40000 } ?? false
                    },
                    "\(how): no fade-in began")
            case .deClick:
                // The reply comes once the ramp has started; its mute follows some 60 ms later: the stop lands
                // inside the ramp (on servers without ramps, after the step).
                _ = try d.client.makeSession(pid: ducker.pid, "playback", activate: true)
                let log = "audiod-\(round).log"
                #expect(
                    waitFor(5) {
                        kind == .pipewire14
                            ? server.file(log).contains("write: ramp stream \(stream.index)")
                            : server.playbackStream(pid: game.pid)?.muted == true
                    }, "\(how): not silenced")
            }
            // Somewhere on the way: a few steps in, with the round's own offset (a ramp is stopped at once).
            if fade != .deClick { Thread.sleep(forTimeInterval: Double(round % 5) * 0.05) }
            if kill {
                d.kill()
                // Inside the ramp: its mute (some 60 ms after its start) had not been written.
                if fade == .deClick && kind == .pipewire14 {
                    let log = server.file("audiod-\(round).log")
                    #expect(!log.contains("(the ramp has run)"), "\(how): the ramp had ended before the kill")
                }
                let out = try server.runStatus([Daemon.executable, "--restore", "--log-level", "info"])
                #expect(out.status == 0, "\(how): \(out.output)")
            } else {
                d.stop()
            }
            // On PipeWire 1.4 also the node's own factor, which no pulse client shows: a ramp's 0 left there
            // would keep the stream silent at what looks like the user's values.
            func atUsers(_ s: ObservedStream?) -> Bool {
                guard let s, !s.muted, s.volume.allSatisfy({ $0 == 52429 }) else { return false }
                guard kind == .pipewire14 else { return true }
                return s.properties["object.id"].flatMap { Self.factor(server, node: $0) } == 1.0
            }
            #expect(
                waitFor(5) { atUsers(server.playbackStream(pid: game.pid)) },
                "\(how): \(String(describing: server.playbackStream(pid: game.pid)))")
            Thread.sleep(forTimeInterval: 0.3)
            let after = server.playbackStream(pid: game.pid)
            #expect(atUsers(after), "\(how): a step came after: \(String(describing: after))")
            // The server's restore database kept no step of the way: the app's next stream, and another app's of
            // the same role, start at the user's values (WirePlumber 0.5 saves per role where a role is set).
            game.kill()
            let next = try playback(server, name: app, role: role)
            defer { next.kill() }
            let fresh = try server.waitForPlaybackStream(pid: next.pid)
            #expect(atUsers(fresh), "\(how): the app's next stream started at \(fresh)")
            let other = try playback(server, name: "other-\(app)", role: role)
            defer { other.kill() }
            let sameRole = try server.waitForPlaybackStream(pid: other.pid)
            // On PipeWire 1.4 its factor too: WirePlumber 0.5 saves the factor per role as well.
            let sameRoleFactor =
                kind == .pipewire14 ? sameRole.properties["object.id"].flatMap { Self.factor(server, node: $0) } : 1.0
            #expect(
                !sameRole.muted && sameRole.volume.allSatisfy { $0 == 52429 || $0 == 65536 } && sameRoleFactor == 1.0,
                "\(how): the role's next stream started at \(sameRole), factor \(sameRoleFactor.map { "\($0)" } ?? "?")"
            )
            let ok = atUsers(after) && atUsers(fresh)
            results["\(fade), \(kill ? "SIGKILL" : "SIGTERM")", default: 0] += ok ? 1 : 0
        }
        print(
            "fades: \(kind): killed mid-fade, \(rounds) rounds, at the user's values after: \(results.sorted { $0.key < $1.key })"
        )
    }
}
