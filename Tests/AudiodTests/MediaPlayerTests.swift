import AudiodTestKit
import DBusService
import Foundation
import Testing

/// Apps that never talk to audiod (POLICY §7): real mpv players with mpv-mpris, pacat without MPRIS, a phone-role
/// stream, and devices that go away — against the built audiod on a private bus and PulseAudio.
@Suite(.serialized)
struct MediaPlayerTests {
    /// A looping tone (sox), made once per test run directory.
    func tone(_ server: TestServer) throws -> String {
        let path = "\(server.directory)/tone.ogg"
        if !FileManager.default.fileExists(atPath: path) {
            _ = try server.run([
                "sox", "-n", "-r", "22050", "-c", "2", path, "synth", "20", "sine", "440", "vol", "0.3",
            ]
            )
        }
        return path
    }

    /// Starts mpv (MPRIS through mpv-mpris) and waits for its stream and bus name.
    func mpv(_ server: TestServer, device: String? = nil) throws -> (Child, String) {
        try startMPV(server, device.map { ["--audio-device=pulse/\($0)"] } ?? [], file: try tone(server))
    }

    /// mpv, once audiod itself hears it playing: its Playing status travels the bus apart from its stream, and a
    /// test that acts before audiod has seen it tests a race rather than the policy.
    func mpv(_ server: TestServer, heardBy d: Daemon, device: String? = nil) throws -> (Child, String) {
        let (p, name) = try mpv(server, device: device)
        let heard = waitFor(10) {
            guard case .success(let out) = d.client.manager("ListStreams"), case .array(_, let items)? = out.first
            else { return false }
            return items.compactMap(\.propertyMap).contains {
                $0["pid"]?.uint32Value == UInt32(p.pid) && $0["audible"]?.boolValue == true
            }
        }
        guard heard else { throw TestKitError("audiod never heard mpv \(p.pid) play") }
        return (p, name)
    }

    func status(_ server: TestServer, _ name: String) -> String? { mprisStatus(server, name) }

    func press(_ server: TestServer, _ name: String, _ method: String) throws {
        _ = try server.run([
            "busctl", "--user", "call", name, "/org/mpris/MediaPlayer2", "org.mpris.MediaPlayer2.Player", method,
        ])
    }

    @Test("a second player takes the audio; the first is paused through MPRIS and stays paused; Play takes it back")
    func twoPlayers() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let (first, a) = try mpv(server, heardBy: d)
        #expect(status(server, a) == "Playing")
        let (second, b) = try mpv(server)
        #expect(
            waitFor(10) { status(server, a) == "Paused" },
            "first player not paused: \(String(describing: status(server, a)))")
        #expect(
            waitFor(5) { server.playbackStream(pid: first.pid)?.corked == true }, "first player's stream not corked")
        #expect(status(server, b) == "Playing")
        #expect(server.playbackStream(pid: second.pid)?.muted == false)

        // The user pauses the second: no surprise resume of the first.
        try press(server, b, "Pause")
        usleep(500_000)
        #expect(status(server, a) == "Paused", "audiod resumed a player nobody asked to play")

        // The user presses Play in the first: it takes the audio back, the second stays paused.
        try press(server, b, "Play")
        // Let audiod see the second playing again before the user presses Play in the first (two presses within
        // a few milliseconds would race on the bus, as they would for a person).
        #expect(
            waitFor(10) {
                guard case .success(let out) = d.client.manager("GetSessionForProcess", [.uint32(UInt32(second.pid))]),
                    case .objectPath(let p)? = out.first
                else { return false }
                return d.client.property(p, API.session.name, "Active") == .bool(true)
                    && server.playbackStream(pid: second.pid)?.corked == false
            }, "the second player's Play was not seen")
        // Its PlaybackStatus signal reaches audiod on the bus independently of the stream's uncork on the server;
        // audiod has no way to order two presses that arrive crossed, and the API shows no player status to wait
        // for, so give the bus a moment, as a person's second press would.
        usleep(500_000)
        #expect(status(server, a) == "Paused")
        try press(server, a, "Play")
        #expect(
            waitFor(10) { status(server, b) == "Paused" },
            "Play in the first did not take the audio back: \(server.file("audiod.log").components(separatedBy: "\n").filter { $0.contains("MPRIS") }.suffix(12).joined(separator: "\n"))"
        )
        #expect(waitFor(5) { status(server, a) == "Playing" })
        #expect(server.playbackStream(pid: first.pid)?.muted == false)
    }

    @Test("a player interrupted by an explicit session resumes through MPRIS Play on notify-on-deactivation")
    func resumesAfterNotify() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let (_, a) = try mpv(server, heardBy: d)
        let video = try playback(server, name: "video")
        _ = try server.waitForPlaybackStream(pid: video.pid)
        let v = try d.client.makeSession(pid: video.pid, "playback", activate: true)
        #expect(waitFor(10) { status(server, a) == "Paused" }, "the player kept playing")
        _ = d.client.session(v, "SetActive", [.bool(false), .strings(["notify-others-on-deactivation"])])
        #expect(
            waitFor(10) { status(server, a) == "Playing" },
            "not resumed through MPRIS Play: \(server.file("audiod.log").components(separatedBy: "\n").filter { $0.contains("MPRIS") || $0.contains("session") }.suffix(14).joined(separator: "\n"))"
        )
    }

    @Test("an app without MPRIS is muted instead of paused")
    func withoutMPRIS() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let plain = try playback(server, name: "plain-player", role: "music")
        _ = try server.waitForPlaybackStream(pid: plain.pid)
        let (_, b) = try mpv(server)
        #expect(status(server, b) == "Playing")
        #expect(
            waitFor(10) { server.playbackStream(pid: plain.pid)?.muted == true }, "the app without MPRIS kept playing")
    }

    @Test("a phone-role stream interrupts a player and lets it resume when the call ends")
    func phoneCall() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let (_, a) = try mpv(server, heardBy: d)
        let call = try playback(server, name: "softphone", role: "phone")
        _ = try server.waitForPlaybackStream(pid: call.pid)
        #expect(waitFor(10) { status(server, a) == "Paused" }, "the call did not pause the player")
        call.kill()
        // The call's implicit session ends after its linger (2 s) and tells the player it may resume.
        #expect(waitFor(10) { status(server, a) == "Playing" }, "the player did not resume after the call")
    }

    @Test(
        "1,000 MPRIS names from one connection take no room from real players: mpv started afterwards is paused by a call"
    )
    func mprisNameFlood() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let squatter = try BusClient(
            address: server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? "", recordSignals: false)
        defer { squatter.close() }
        // As a sandboxed app may: any number of org.mpris.MediaPlayer2.<appid>.N, none of them a player — half on
        // the bus before audiod starts (its first listing), half after.
        let squat = { (range: Range<Int>) in
            for i in range {
                let r = squatter.callBus(
                    "RequestName", [.string("org.mpris.MediaPlayer2.org.example.Squat.instance\(i)"), .uint32(4)])
                if case .failure(let e) = r { Issue.record("RequestName \(i): \(e)") }
            }
        }
        squat(0..<500)
        // A player already running when audiod starts, listed among the flood's names.
        let (_, a) = try mpv(server)
        let d = try Daemon.start(server)
        defer { d.stop() }
        squat(500..<1_000)
        #expect(
            waitFor(10) { server.file("audiod.log").contains("owns more than 4 player names") },
            "no line about the flood: \(server.file("audiod.log").suffix(1000))")
        let (_, b) = try mpv(server, heardBy: d)
        #expect(
            waitFor(10) { server.file("audiod.log").contains("MPRIS player") && server.file("audiod.log").contains(a) },
            "the player running at start was not followed: \(server.file("audiod.log").suffix(1000))")
        let call = try playback(server, name: "softphone", role: "phone")
        defer { call.kill() }
        _ = try server.waitForPlaybackStream(pid: call.pid)
        #expect(waitFor(10) { status(server, a) == "Paused" }, "the call did not pause the mpv running at start")
        #expect(waitFor(10) { status(server, b) == "Paused" }, "the call did not pause mpv started after the flood")
    }

    @Test("one sandboxed app's player names on many connections: at most 4 of its players are followed")
    func mprisNamesOfOneAppOnManyConnections() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        let bus = try BusClient(address: address, recordSignals: false)
        defer { bus.close() }
        // Eight connections, one name each (under the bound per connection), all from one Flatpak-looking app.
        var squatters: [Child] = []
        defer { for c in squatters { c.kill() } }
        for i in 0..<8 {
            let name = "org.mpris.MediaPlayer2.org.example.Squat.instance\(i)"
            let wrap = try flatpakSandbox(server, flatpakApp: "org.example.Squat", instance: "\(i + 1)")
            squatters.append(
                try server.spawn(
                    wrap + [
                        "/usr/bin/python3", "-m", "dbusmock", "--session", "-m", name, "/org/mpris/MediaPlayer2", name,
                    ],
                    log: "squat\(i).log"))
        }
        let owned = {
            (0..<8).filter { i in
                if case .success(let r) = bus.callBus(
                    "NameHasOwner", [.string("org.mpris.MediaPlayer2.org.example.Squat.instance\(i)")]),
                    r.first == .bool(true)
                {
                    return true
                }
                return false
            }.count
        }
        #expect(waitFor(20) { owned() == 8 }, "the sandboxed names were not all owned: \(owned())")
        let log = { server.file("audiod.log") }
        #expect(
            waitFor(15) { log().contains("the sandboxed app org.example.Squat has 4 players followed") },
            "no line about the app's players: \(log().suffix(1500))")
        // Every look-up has ended (each player's Get fails five times, 200 ms apart).
        usleep(3_000_000)
        let followed = log().split(separator: "\n").filter {
            $0.contains("MPRIS player") && $0.contains("org.example.Squat") && !$0.contains("not followed")
                && !$0.contains("dropped")
        }
        #expect(followed.count == 4, "\(followed.count) of the app's 8 players followed: \(followed)")
    }

    @Test("headphones unplugged: the player is paused, not moved to the speakers")
    func headphonesUnplugged() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let module = try server.pactl(["load-module", "module-null-sink", "sink_name=headphones"])
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let (p, a) = try mpv(server, heardBy: d, device: "headphones")
        #expect(status(server, a) == "Playing")
        _ = try server.pactl(["unload-module", module])
        #expect(
            waitFor(10) { status(server, a) == "Paused" },
            "the player plays on after its device went away: \(server.file("audiod.log").suffix(3000))")
        let s = server.playbackStream(pid: p.pid)
        #expect(
            s == nil || s?.muted == true || s?.corked == true, "sound moved to the speakers: \(String(describing: s))")
    }

    @Test(
        "route changes for explicit sessions: the lost device interrupts with route-disconnected; a new one interrupts nobody"
    )
    func explicitRouteChanges() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let module = try server.pactl(["load-module", "module-null-sink", "sink_name=headphones"])
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(waitFor(10) { ((try? server.pactl(["list", "short", "sinks"])) ?? "").contains("headphones") })
        let music = try server.spawn(["pacat", "--playback", "--device=headphones", "/dev/zero"])
        let other = try server.spawn(["pacat", "--playback", "/dev/zero"])
        let m = try server.waitForPlaybackStream(pid: music.pid)
        _ = try server.waitForPlaybackStream(pid: other.pid)
        let s = try d.client.makeSession(pid: music.pid, "playback", activate: true)
        let o = try d.client.makeSession(pid: other.pid, "ambient", activate: true)

        // A new device: the session whose stream the user moves onto it hears new-device-available; nobody is
        // interrupted.
        let spk = try server.pactl(["load-module", "module-null-sink", "sink_name=speakers2"]).trimmingCharacters(
            in: .whitespacesAndNewlines)
        #expect(waitFor(10) { ((try? server.pactl(["list", "short", "sinks"])) ?? "").contains("speakers2") })
        _ = try server.pactl(["move-sink-input", "\(m.index)", "speakers2"])
        let routed = d.client.waitForSignal(s, "RouteChanged")
        #expect(routed.first?.first == .string("new-device-available"), "\(routed)")
        #expect(routed.first?.last?.propertyMap?["current-device"] == .string("speakers2"))
        #expect(d.client.received(o, "RouteChanged").isEmpty, "a session not on the new device was told")
        #expect(d.client.received(s, "InterruptionBegan").isEmpty && d.client.received(o, "InterruptionBegan").isEmpty)
        #expect(server.playbackStream(pid: music.pid)?.muted == false)

        // That device goes away: the server moves the stream; audiod silences it and interrupts the session.
        _ = try server.pactl(["unload-module", spk])
        let began = d.client.waitForSignal(s, "InterruptionBegan")
        #expect(began.first?.first == .string("route-disconnected"), "\(began)")
        #expect(
            waitFor(5) {
                d.client.received(s, "RouteChanged").contains {
                    $0.first == .string("old-device-unavailable")
                        && $0.last?.propertyMap?["previous-device"] == .string("speakers2")
                }
            }, "no old-device-unavailable: \(d.client.received(s, "RouteChanged"))")
        #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.muted == true }, "sound moved on to another device")
        #expect(
            d.client.received(s, "InterruptionEnded").isEmpty,
            "route-disconnected must not be followed by InterruptionEnded")
        // Its next SetActive(true) lifts that silencing.
        _ = d.client.session(s, "SetActive", [.bool(true), .strings([])])
        #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.muted == false })
        _ = module
    }
}
