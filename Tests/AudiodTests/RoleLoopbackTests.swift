import AudiodTestKit
import DBusService
import Foundation
import Testing

/// WirePlumber 0.5's role-based policy, as phones and cars run it (its example `media-role-nodes.conf`, a copy in
/// Tests/Fixtures): a loopback sink per role, to which apps' streams are linked by role, and the loopbacks' own
/// passive streams, hosted in WirePlumber's process, on to the real sink. Those streams are the session manager's
/// infrastructure — never an app, never silenced — while the apps routed to a role sink are arbitrated as apps.
@Suite(.serialized)
struct RoleLoopbackTests {
    static var servers: [ServerKind] { ServerKind.tested.filter { $0 == .pipewire14 } }
    let audioctl = TestServer.builtProduct("audioctl")

    /// The loopbacks' own streams as `pactl` lists them.
    func loopbackStreams(_ server: TestServer) -> [String] {
        TestServer.sinkInputBlocks((try? server.pactl(["list", "sink-inputs"])) ?? "")
            .filter { $0.contains("media.role = \"Loopback\"") && $0.contains("node.passive = \"true\"") }
    }

    @Test(
        "with WirePlumber's role loopbacks a call pauses mpv and gives it back, no WirePlumber app is listed, and a stream that only claims to be a loopback is an app",
        arguments: servers)
    func roleLoopbacks(kind: ServerKind) throws {
        let server = try TestServer(kind, roleLoopbacks: true)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let players = MediaPlayerTests()
        let (_, player) = try players.mpv(server, heardBy: d)
        #expect(waitFor(10) { !loopbackStreams(server).isEmpty }, "no loopback stream plays on to the null sink")

        // The apps audiod sees: mpv, and nothing of WirePlumber's (a loopback stream has no client and no pid).
        let apps = try server.run([audioctl, "apps"])
        #expect(apps.contains("mpv"), "\(apps)")
        #expect(!apps.contains("pid 0 "), "a loopback stream became an app: \(apps)")

        // A stream that says what a loopback's says (the role, passive, a loopback's link group) is an app.
        let group = try #require(
            loopbackStreams(server).first.flatMap { block in
                block.split(separator: "\n").first { $0.contains("node.link-group = ") }?.split(separator: "\"")
                    .dropFirst().first
            }.map(String.init))
        let liar = try server.spawn([
            "pacat", "--playback", "/dev/zero", "--client-name=liar", "--property=media.role=Loopback",
            "--property=node.passive=true", "--property=node.link-group=\(group)",
        ])
        _ = try server.waitForPlaybackStream(pid: liar.pid)
        #expect(
            waitFor(10) { ((try? server.run([audioctl, "apps"])) ?? "").contains("liar") },
            "a stream claiming to be a loopback escaped arbitration")
        liar.kill()

        // A call on the communication role sink pauses the music and gives it back, as without loopbacks.
        let call = try playback(server, name: "softphone", role: "phone")
        _ = try server.waitForPlaybackStream(pid: call.pid)
        #expect(waitFor(10) { players.status(server, player) == "Paused" }, "the call did not pause mpv")
        // audiod never writes a loopback's stream.
        for block in loopbackStreams(server) {
            #expect(block.contains("Mute: no"), "a loopback stream was muted: \(block)")
        }
        call.kill()
        #expect(waitFor(10) { players.status(server, player) == "Playing" }, "mpv did not resume after the call")
        let after = try server.run([audioctl, "apps"])
        #expect(!after.contains("pid 0 "), "a loopback stream became an app: \(after)")
    }
}
