import AudioPolicy
import AudiodTestKit
import DBusService
import Foundation
import Testing

/// POLICY scenarios end to end: the built audiod on a private bus and server, a D-Bus client, real pacat streams,
/// and pactl as the observer.
@Suite(.serialized)
struct BusScenarioTests {
    static let servers = ServerKind.tested

    @Test("two apps: one interrupts the other, which resumes after notify-on-deactivation", arguments: servers)
    func interruptAndResume(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let music = try playback(server, name: "music-app")
        let video = try playback(server, name: "video-app")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        _ = try server.waitForPlaybackStream(pid: video.pid)
        let a = try d.client.makeSession(pid: music.pid, "playback", activate: true)
        let b = try d.client.makeSession(pid: video.pid, "playback", activate: true)

        let began = d.client.waitForSignal(a, "InterruptionBegan")
        #expect(began.first?.first == .string("default"))
        #expect(began.first?.last?.propertyMap?["interrupter"] == .objectPath(b))
        #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.muted == true }, "interrupted app still audible")
        #expect(d.client.property(a, API.session.name, "Interrupted") == .bool(true))

        #expect(throws: Never.self) {
            try d.client.session(b, "SetActive", [.bool(false), .strings(["notify-others-on-deactivation"])]).get()
        }
        let ended = d.client.waitForSignal(a, "InterruptionEnded")
        #expect(ended.first?.first == .bool(true), "InterruptionEnded(should_resume: true) expected: \(ended)")
        #expect(throws: Never.self) { try d.client.session(a, "SetActive", [.bool(true), .strings([])]).get() }
        #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.muted == false }, "resumed app still muted")
    }

    @Test(
        "pipelined calls are answered in the order they were sent, properties as the replies before them left them",
        arguments: servers)
    func pipelinedAnswersInOrder(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let music = try playback(server, name: "music-app")
        let video = try playback(server, name: "video-app")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        _ = try server.waitForPlaybackStream(pid: video.pid)
        let a = try d.client.makeSession(pid: music.pid, "playback", activate: true)
        let b = try d.client.makeSession(pid: video.pid, "playback")
        @Sendable func call(_ path: String, _ iface: String, _ member: String, _ args: [DBusValue]) -> DBusMessage? {
            guard let m = DBusMessage.methodCall(destination: API.busName, path: path, interface: iface, member: member)
            else { return nil }
            m.append(args)
            return m
        }
        @Sendable func get(_ path: String, _ name: String) -> DBusMessage? {
            call(path, API.properties.name, "Get", [.string(API.session.name), .string(name)])
        }
        // Each activation mutes the other app's stream: its reply leaves once the server has the mute, and the Gets
        // behind it must not overtake it.
        for round in 0..<10 {
            let answers = d.client.callPipelinedInArrivalOrder(6) { i in
                switch i {
                case 0: call(b, API.session.name, "SetActive", [.bool(true), .strings([])])
                case 1: get(b, "Active")
                case 2: get(a, "Interrupted")
                case 3:
                    call(b, API.session.name, "SetActive", [.bool(false), .strings(["notify-others-on-deactivation"])])
                case 4: get(b, "Active")
                default: call(a, API.session.name, "SetActive", [.bool(true), .strings([])])
                }
            }
            #expect(
                answers.map(\.index) == Array(0..<6),
                "round \(round): answers arrived in the order \(answers.map(\.index))")
            let byIndex = Dictionary(answers.map { ($0.index, $0.result) }, uniquingKeysWith: { a, _ in a })
            #expect((try? byIndex[1]?.get()) == [.variant(.bool(true))], "round \(round): Active after SetActive(true)")
            #expect(
                (try? byIndex[2]?.get()) == [.variant(.bool(true))], "round \(round): the other app not interrupted")
            #expect(
                (try? byIndex[4]?.get()) == [.variant(.bool(false))], "round \(round): Active after SetActive(false)")
            #expect((try? byIndex[5]?.get()) == [], "round \(round): \(String(describing: byIndex[5]))")
        }
    }

    @Test("a call refuses a music activation with InsufficientPriority", arguments: [ServerKind.pulseaudio])
    func callRefusesMusic(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let call = try playback(server, name: "softphone")
        let music = try playback(server, name: "music-app")
        _ = try d.client.makeSession(pid: call.pid, "play-and-record", mode: "voice-chat", activate: true)
        let m = try d.client.makeSession(pid: music.pid, "playback")
        let r = d.client.session(m, "SetActive", [.bool(true), .strings([])])
        guard case .failure(let e) = r else {
            Issue.record("music activated during a call")
            return
        }
        #expect(e.name == "org.audiod.AudioSession1.Error.InsufficientPriority")
        #expect(e.message.contains("call"), "\(e.message)")
    }

    @Test(
        "picture in picture: the video's unmute silences the game's ambient soundtrack, its mute brings it back",
        arguments: servers)
    func pictureInPicture(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let game = try playback(server, name: "game")
        let video = try playback(server, name: "browser-pip")
        _ = try server.waitForPlaybackStream(pid: game.pid)
        let v = try server.waitForPlaybackStream(pid: video.pid)
        _ = try server.pactl(["set-sink-input-mute", "\(v.index)", "1"])  // the viewer muted the PiP video
        let g = try d.client.makeSession(pid: game.pid, "ambient", activate: true)
        _ = try d.client.makeSession(pid: video.pid, "playback", activate: true)
        usleep(200_000)
        #expect(server.playbackStream(pid: game.pid)?.muted == false, "a muted video silenced the game")

        let unmuted = Date()
        _ = try server.pactl(["set-sink-input-mute", "\(v.index)", "0"])
        #expect(waitFor(5) { server.playbackStream(pid: game.pid)?.muted == true }, "game not silenced by the video")
        let took = Date().timeIntervalSince(unmuted)
        #expect(took < 0.5, "silenced after \(took) s (POLICY: 50 ms; pactl itself takes part of this)")
        #expect(d.client.waitForSignal(g, "SilenceSecondaryAudioHint").first == [.string("begin")])

        _ = try server.pactl(["set-sink-input-mute", "\(v.index)", "1"])
        #expect(
            waitFor(5) { server.playbackStream(pid: game.pid)?.muted == false }, "game not back after the video's mute")
        #expect(d.client.waitForSignal(g, "SilenceSecondaryAudioHint", count: 2).last == [.string("end")])
    }

    @Test("silent mode silences ambient sessions, not playback", arguments: [ServerKind.pulseaudio])
    func silentMode(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let game = try playback(server, name: "game")
        let podcast = try playback(server, name: "podcast")
        _ = try server.waitForPlaybackStream(pid: game.pid)
        _ = try server.waitForPlaybackStream(pid: podcast.pid)
        _ = try d.client.makeSession(pid: game.pid, "ambient", activate: true)
        _ = try d.client.makeSession(
            pid: podcast.pid, "playback", mode: "spoken-audio", options: ["mix-with-others"], activate: true)
        #expect(throws: Never.self) {
            try d.client.call(
                API.managerPath, API.properties.name, "Set",
                [.string(API.manager.name), .string("SilentMode"), .variant(.bool(true))]
            ).get()
        }
        #expect(waitFor(5) { server.playbackStream(pid: game.pid)?.muted == true }, "game not silenced")
        #expect(server.playbackStream(pid: podcast.pid)?.muted == false, "podcast silenced")
        #expect(d.client.property(API.managerPath, API.manager.name, "SilentMode") == .bool(true))
        #expect(
            d.client.waitForSignal(API.managerPath, "PropertiesChanged").contains {
                $0.dropFirst().first?.propertyMap?["SilentMode"] == .bool(true)
            })
    }

    @Test(
        "ducking: a duck-others session lowers the other app to DuckLevel and back", arguments: [ServerKind.pulseaudio])
    func ducking(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let (music, m, n, _) = try musicDuckedByNavigation(server, d)
        _ = d.client.session(n, "SetActive", [.bool(false), .strings([])])
        #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.volume == m.volume }, "not restored")
    }

    @Test("a client whose process is killed is released and the others resume", arguments: [ServerKind.pulseaudio])
    func killedClientReleased(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let music = try playback(server, name: "music")
        let holder = try server.spawn(["sleep", "60"])
        _ = try server.waitForPlaybackStream(pid: music.pid)
        let a = try d.client.makeSession(pid: music.pid, "playback", activate: true)
        // A process-lifetime session for a process that will be killed with SIGKILL.
        let b = try d.client.makeSession(
            pid: holder.pid, "play-and-record", mode: "voice-chat", lifetime: "process", activate: true)
        #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.muted == true })
        let killed = Date()
        holder.kill()
        #expect(d.client.waitForRemoval(b), "killed client's session not released")
        let took = Date().timeIntervalSince(killed)
        #expect(took < 0.5, "released after \(took) s (POLICY: 100 ms)")
        #expect(d.client.waitForSignal(a, "InterruptionEnded").first?.first == .bool(true))

        // A connection-lifetime session whose connection closes.
        let other = try BusClient(address: server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? "")
        let c = try other.makeSession(pid: music.pid, "playback", activate: true)
        other.close()
        #expect(d.client.waitForRemoval(c), "a closed connection's session not released")
    }

    @Test(
        "bad input gets the named error with a message, and the daemon keeps answering",
        arguments: [ServerKind.pulseaudio])
    func badInput(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let me = try d.client.makeSession(pid: try server.spawn(["sleep", "60"]).pid, "playback")
        func error(_ r: Result<[DBusValue], DBusError>) -> DBusError? {
            if case .failure(let e) = r { return e }
            return nil
        }
        let wrongType = error(d.client.manager("CreateSession", [.string("x")]))
        #expect(wrongType?.name == "org.freedesktop.DBus.Error.InvalidArgs")
        let hintType = error(d.client.manager("CreateSession", [.properties([("pid", .string("12"))])]))
        #expect(hintType?.name == "org.freedesktop.DBus.Error.InvalidArgs")
        #expect(hintType?.message.contains("pid") == true)
        let lifetime = error(d.client.manager("CreateSession", [.properties([("lifetime", .string("forever"))])]))
        #expect(lifetime?.message == "lifetime 'forever' is not one of connection, process")
        let noProcess = error(d.client.manager("CreateSession", [.properties([("pid", .uint32(4_000_000))])]))
        #expect(noProcess?.name == "org.audiod.AudioSession1.Error.NoSuchProcess")
        let loud = error(d.client.session(me, "SetCategory", [.string("loud"), .string("default"), .strings([])]))
        #expect(loud?.name == "org.audiod.AudioSession1.Error.InvalidCategory")
        #expect(
            loud?.message == "category 'loud' is not one of ambient, solo-ambient, playback, record, play-and-record")
        let incompatible = error(
            d.client.session(me, "SetActive", [.bool(true), .strings(["notify-others-on-deactivation"])]))
        #expect(incompatible?.name == "org.audiod.AudioSession1.Error.IncompatibleOption")
        let duck = error(
            d.client.call(
                API.managerPath, API.properties.name, "Set",
                [.string(API.manager.name), .string("DuckLevel"), .variant(.double(1.5))]))
        #expect(duck?.name == "org.freedesktop.DBus.Error.InvalidArgs")
        let noSuch = error(d.client.manager("FindSession", [.uint32(4_000_000)]))
        #expect(noSuch?.name == "org.audiod.AudioSession1.Error.NoSuchSession")
        let unknown = error(d.client.call(API.managerPath, API.manager.name, "Explode"))
        #expect(unknown?.name == "org.freedesktop.DBus.Error.UnknownMethod")

        // Someone else's session.
        let intruder = try BusClient(address: server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? "")
        defer { intruder.close() }
        let denied = error(intruder.session(me, "SetActive", [.bool(true), .strings([])]))
        #expect(denied?.name == "org.freedesktop.DBus.Error.AccessDenied")

        // Still answering, and the session is intact.
        #expect(d.client.property(me, API.session.name, "Category") == .string("playback"))
        guard case .success(let objects) = d.client.call(API.managerPath, API.objectManager.name, "GetManagedObjects"),
            case .dict(_, _, let pairs)? = objects.first
        else {
            Issue.record("GetManagedObjects failed")
            return
        }
        #expect(pairs.contains { $0.0 == .objectPath(me) })
    }

    @Test("busctl introspect shows the whole API", arguments: [ServerKind.pulseaudio])
    func introspection(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let out = try server.run([
            "busctl", "--user", "introspect", "org.audiod.AudioSession1", "/org/audiod/AudioSession1",
        ])
        for name in API.manager.methods.map(\.name) + API.manager.properties.map(\.name)
            + ["GetManagedObjects", "InterfacesAdded", "PropertiesChanged"]
        {
            #expect(out.contains(".\(name) "), "busctl does not show \(name)")
        }
        let s = try d.client.makeSession(pid: try server.spawn(["sleep", "60"]).pid, "ambient")
        let sessionOut = try server.run(["busctl", "--user", "introspect", "org.audiod.AudioSession1", s])
        for name in API.session.methods.map(\.name) + API.session.properties.map(\.name)
            + API.session.signals.map(\.name)
        {
            #expect(sessionOut.contains(".\(name) "), "busctl does not show \(name) on a session")
        }
    }
}

/// A music app (a mixable playback session) ducked by a navigation app's `duck-others` session, as a person would
/// set it up; returns the music's process and stream as first seen, the navigation's session path and the duck.
func musicDuckedByNavigation(_ server: TestServer, _ d: Daemon) throws
    -> (music: Child, stream: ObservedStream, navigation: String, ducked: [UInt32])
{
    let music = try playback(server, name: "music")
    let nav = try playback(server, name: "nav")
    let m = try server.waitForPlaybackStream(pid: music.pid)
    _ = try server.waitForPlaybackStream(pid: nav.pid)
    _ = try d.client.makeSession(pid: music.pid, "playback", options: ["mix-with-others"], activate: true)
    let n = try d.client.makeSession(pid: nav.pid, "playback", options: ["duck-others"], activate: true)
    let ducked = m.volume.map { Volume.multiply($0, Volume.fromLinear(0.2)) }
    #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.volume == ducked }, "not ducked")
    return (music, m, n, ducked)
}
