import AudiodTestKit
import DBusService
import Foundation
import Testing

/// Sandboxed apps (Flatpak, Snap, bubblewrap) report pids of their own pid namespace — `2` for most Flatpak apps,
/// which on the host is kthreadd. audiod believes a pid only where the kernel or the host vouches for it
/// (docs/IDENTITY.md); these tests build sandboxes with `bwrap --unshare-pid`, with and without a `.flatpak-info`.
@Suite(.serialized)
struct SandboxTests {
    static let servers = ServerKind.tested

    /// `argv` in a sandbox with a pid namespace of its own (the whole host file system otherwise), optionally with
    /// a `.flatpak-info` naming `flatpakApp` bound at its root, as Flatpak does.
    func sandboxed(_ server: TestServer, _ argv: [String], flatpakApp: String? = nil, instance: String = "1") throws
        -> Child
    {
        let wrap = try flatpakSandbox(server, flatpakApp: flatpakApp, instance: instance)
        return try server.spawn(wrap + argv)
    }

    func pacat(_ name: String, role: String) -> [String] {
        ["pacat", "--playback", "/dev/zero", "--client-name=\(name)", "--property=media.role=\(role)"]
    }

    /// The stream of the sandboxed client named `name` (its pid is the sandbox's, so it is found by name).
    func stream(_ server: TestServer, named name: String) -> ObservedStream? {
        (try? server.playbackStreams())?.first { $0.applicationName == name }
    }

    func sessionOf(_ d: Daemon, index: UInt32) -> String? {
        guard case .success(let out) = d.client.manager("ListStreams"), case .array(_, let items)? = out.first else {
            return nil
        }
        for case let s? in items.map(\.propertyMap) where s["index"]?.uint32Value == index {
            if case .objectPath(let p)? = s["session"], p != "/" { return p }
        }
        return nil
    }

    @Test(
        "two sandboxed apps, music and a call, are two sessions: the call silences the music and gives it back",
        arguments: servers)
    func twoSandboxes(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        _ = try sandboxed(server, pacat("sandboxed-music", role: "music"))
        #expect(waitFor(10) { stream(server, named: "sandboxed-music") != nil })
        let music = try #require(stream(server, named: "sandboxed-music"))
        print(
            "sandbox: \(kind) reports pid \(music.properties["application.process.id"] ?? "-"), sec.pid \(music.properties["pipewire.sec.pid"] ?? "-")"
        )
        let phone = try sandboxed(server, pacat("sandboxed-phone", role: "phone"))
        #expect(waitFor(10) { stream(server, named: "sandboxed-phone") != nil })
        let call = try #require(stream(server, named: "sandboxed-phone"))
        #expect(waitFor(5) { sessionOf(d, index: music.index) != nil && sessionOf(d, index: call.index) != nil })
        let (m, c) = (sessionOf(d, index: music.index), sessionOf(d, index: call.index))
        #expect(m != c, "both sandboxed apps landed in one session \(String(describing: m))")
        #expect(
            waitFor(10) { stream(server, named: "sandboxed-music")?.muted == true },
            "the sandboxed call did not silence the sandboxed music: \(server.file("audiod.log").suffix(1500))")
        #expect(stream(server, named: "sandboxed-phone")?.muted == false)
        phone.kill()
        #expect(
            waitFor(10) { stream(server, named: "sandboxed-music")?.muted == false },
            "the music did not come back after the call")
    }

    @Test(
        "a Flatpak game installed after audiod started (exports made then, its entry a symlink into the app) is a game, silenced by a video",
        arguments: servers)
    func flatpakInstalledAfterStart(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let home = try #require(server.environment["HOME"])
        let share = home + "/.local/share/flatpak"
        // A fresh account: no Flatpak has ever been installed.
        try? FileManager.default.removeItem(atPath: share)
        let d = try Daemon.start(server)
        defer { d.stop() }
        #expect(waitFor(10) { server.file("audiod.log").contains("desktop entries read") })
        // As `flatpak install --user` does: the app's files, then the exports, whose entry is a symlink into them.
        let id = "org.example.FlatGame"
        let exported = "\(share)/app/\(id)/current/active/export/share/applications"
        try FileManager.default.createDirectory(atPath: exported, withIntermediateDirectories: true)
        try "[Desktop Entry]\nType=Application\nName=Flat Game\nExec=flat-game\nCategories=Game;ActionGame;\n"
            .write(toFile: "\(exported)/\(id).desktop", atomically: true, encoding: .utf8)
        let exports = "\(share)/exports/share/applications"
        try FileManager.default.createDirectory(atPath: exports, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(
            atPath: "\(exports)/\(id).desktop", withDestinationPath: "\(exported)/\(id).desktop")
        usleep(1_000_000)
        // Its sound has no role: only the entry says it is a game.
        _ = try sandboxed(
            server, ["pacat", "--playback", "/dev/zero", "--client-name=flat-game"], flatpakApp: id)
        #expect(waitFor(10) { stream(server, named: "flat-game") != nil })
        let game = try #require(stream(server, named: "flat-game"))
        var category: String?
        #expect(
            waitFor(10) {
                category = sessionOf(d, index: game.index).flatMap {
                    d.client.property($0, API.session.name, "Category")?.stringValue
                }
                return category == "ambient"
            },
            "the Flatpak game installed after start is \(category ?? "no session"): \(server.file("audiod.log").suffix(1500))"
        )
        _ = try playback(server, name: "video", role: "video")
        #expect(
            waitFor(10) { stream(server, named: "flat-game")?.muted == true },
            "the late Flatpak game plays over the video")
    }

    @Test(
        "a Flatpak-looking sandboxed app is known by its app id: a rule for that id applies to its streams",
        arguments: servers)
    func flatpakAppRule(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        _ = d.client.manager(
            "SetApplicationCategory",
            [.string("org.example.Game"), .string("ambient"), .string("default"), .strings([])])
        _ = d.client.call(
            API.managerPath, API.properties.name, "Set",
            [.string(API.manager.name), .string("SilentMode"), .variant(.bool(true))])
        _ = try sandboxed(server, pacat("game", role: "music"), flatpakApp: "org.example.Game")
        #expect(waitFor(10) { stream(server, named: "game") != nil })
        #expect(!FileManager.default.fileExists(atPath: "/.flatpak-info"), "the sandbox wrote to the host's root")
        #expect(
            waitFor(10) { stream(server, named: "game")?.muted == true },
            "the app-id rule (ambient, silent mode on) did not apply: \(server.file("audiod.log").suffix(1500))")
    }

    @Test(
        "a sandboxed app that makes its own session over the bus owns its own streams and no one else's",
        arguments: servers)
    func explicitSessionFromSandbox(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let bus = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        // Inside its sandbox the app is pid 2: it asks for a session for "pid 2" (its own number for itself), then
        // becomes the player.
        _ = try sandboxed(
            server,
            [
                "sh", "-c",
                "busctl --address=\(bus) call \(API.busName) \(API.managerPath) \(API.manager.name) CreateSession a{sv} 3 "
                    + "pid u 2 lifetime s process application-name s sandboxed-app > /dev/null "
                    + "&& exec pacat --playback /dev/zero --client-name=sandboxed-app",
            ])
        #expect(waitFor(10) { stream(server, named: "sandboxed-app") != nil })
        let own = try #require(stream(server, named: "sandboxed-app"))
        guard case .success(let out) = d.client.call(API.managerPath, API.objectManager.name, "GetManagedObjects"),
            case .dict(_, _, let objects)? = out.first
        else { throw TestKitError("GetManagedObjects failed") }
        let made = objects.compactMap { pair -> String? in
            guard case .objectPath(let p) = pair.0, case .dict(_, _, let ifaces) = pair.1,
                let props = ifaces.first(where: { $0.0 == .string(API.session.name) })?.1.propertyMap,
                props["ApplicationName"] == .string("sandboxed-app"), props["Implicit"] == .bool(false)
            else { return nil }
            return p
        }.first
        let session = try #require(made, "no explicit session named sandboxed-app: \(objects.map(\.0))")
        #expect(
            waitFor(5) { sessionOf(d, index: own.index) == session },
            "the app's stream is not its session's: \(String(describing: sessionOf(d, index: own.index)))")
        // Another sandboxed app's stream (pid 2 in its own sandbox too) is not that session's.
        _ = try sandboxed(server, pacat("other-app", role: "music"))
        #expect(waitFor(10) { stream(server, named: "other-app") != nil })
        let other = try #require(stream(server, named: "other-app"))
        #expect(waitFor(5) { sessionOf(d, index: other.index) != nil })
        #expect(sessionOf(d, index: other.index) != session, "another app's stream went to the sandboxed app's session")
        #expect(sessionOf(d, index: own.index) == session)
    }

    @Test(
        "a Flatpak-looking sandboxed mpv is paused over MPRIS by an activation and played again on notify",
        arguments: ServerKind.testedPipeWires)
    func sandboxedPlayer(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let tone = "\(server.directory)/tone.ogg"
        _ = try server.run(["sox", "-n", "-r", "22050", "-c", "2", tone, "synth", "20", "sine", "440", "vol", "0.3"])
        _ = try sandboxed(
            server,
            [
                "mpv", "--no-video", "--no-terminal", "--ao=pulse", "--loop-file=inf",
                "--audio-client-name=sandboxed-mpv", tone,
            ], flatpakApp: "io.mpv.Mpv")
        #expect(waitFor(10) { stream(server, named: "sandboxed-mpv") != nil }, "the sandboxed mpv did not play")
        var player: String?
        #expect(
            waitFor(10) {
                let out = (try? server.run(["busctl", "--user", "list", "--no-legend"])) ?? ""
                player =
                    out.split(separator: "\n").compactMap { line in
                        line.split(separator: " ").first.map(String.init).flatMap {
                            $0.hasPrefix("org.mpris.MediaPlayer2.mpv") ? $0 : nil
                        }
                    }.first
                return player != nil
            }, "the sandboxed mpv has no MPRIS name")
        let name = try #require(player)
        func status() -> String? {
            let out = try? server.run([
                "busctl", "--user", "get-property", name, "/org/mpris/MediaPlayer2",
                "org.mpris.MediaPlayer2.Player", "PlaybackStatus",
            ])
            return out?.split(separator: "\"").dropFirst().first.map(String.init)
        }
        #expect(waitFor(10) { status() == "Playing" })
        usleep(500_000)
        let other = try playback(server, name: "video")
        _ = try server.waitForPlaybackStream(pid: other.pid)
        let s = try d.client.makeSession(pid: other.pid, "playback", activate: true)
        #expect(
            waitFor(10) { status() == "Paused" },
            "the sandboxed player was not paused: \(status() ?? "?"); \(server.file("audiod.log").suffix(1500))")
        _ = d.client.session(s, "SetActive", [.bool(false), .strings(["notify-others-on-deactivation"])])
        #expect(waitFor(10) { status() == "Playing" }, "the sandboxed player was not played again: \(status() ?? "?")")
    }
}
