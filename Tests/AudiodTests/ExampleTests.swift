import AudiodTestKit
import DBusService
import Foundation
import Testing

/// The media-player examples in examples/ (C with GDBus, Python with Gio), run against the built audiod with a
/// real stream: they pause when interrupted, resume when told they may, and release their session when they quit.
@Suite(.serialized)
struct ExampleTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    @Test("a player example is interrupted, resumes on notify and releases its session", arguments: ["C", "Python"])
    func playerExample(language: String) throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let name: String
        let argv: [String]
        if language == "C" {
            let binary = "\(server.directory)/player"
            let built = try server.runStatus([
                "sh", "-c",
                "cc -Wall -Werror -o \(binary) \(Self.repository)/examples/player.c $(pkg-config --cflags --libs gio-2.0 gio-unix-2.0)",
            ])
            #expect(built.status == 0, "the C example does not build: \(built.output)")
            (name, argv) = ("example-player", [binary])
        } else {
            // Debian's python3-gi is for the system interpreter.
            (name, argv) = ("example-player-py", ["/usr/bin/python3", "\(Self.repository)/examples/player.py"])
        }
        let player = try server.spawn(argv, log: "player.log")
        func log() -> String { server.file("player.log") }
        func stream() -> ObservedStream? { (try? server.playbackStreams())?.first { $0.applicationName == name } }
        #expect(waitFor(10) { log().contains("playing in") && stream() != nil }, "the example did not start: \(log())")

        let other = try playback(server, name: "other-player")
        _ = try server.waitForPlaybackStream(pid: other.pid)
        let s = try d.client.makeSession(pid: other.pid, "playback", activate: true)
        #expect(waitFor(5) { log().contains("interrupted (default): pausing") }, "\(log())")
        #expect(
            waitFor(5) { stream()?.muted == true },
            "the example's stream was not silenced: \(String(describing: d.client.manager("ListStreams"))) \(server.file("audiod.log").suffix(2500))"
        )

        _ = d.client.session(s, "SetActive", [.bool(false), .strings(["notify-others-on-deactivation"])])
        #expect(waitFor(5) { log().contains("interruption ended: resuming") }, "\(log())")
        #expect(waitFor(5) { stream()?.muted == false }, "the example's stream stayed silenced after it resumed")

        let sessionsBefore = d.client.received(API.managerPath, "InterfacesRemoved").count
        player.signal(SIGTERM)
        let status = player.wait(timeout: 10)
        #expect(status == 0, "the example exited with \(String(describing: status)): \(log())")
        #expect(log().contains("released"))
        #expect(
            waitFor(5) { d.client.received(API.managerPath, "InterfacesRemoved").count > sessionsBefore },
            "the example's session was not released")
    }
}
