import AudiodTestKit
import DBusService
import Foundation
import Testing

/// Issue 45's voice input, with real mpv and real captures (`parec`): an app a `record` rule makes voice input pauses
/// the music while it captures from a microphone and gives it back after the linger; a level meter on a monitor with
/// the same rule pauses nothing; pressing Play during the dictation takes the audio and leaves the capture alone.
extension MediaPlayerTests {
    /// A microphone that is not a monitor, as the default source (pipewire-pulse has no module-null-source: a null
    /// sink made a source by its media.class is one).
    func microphone(_ server: TestServer, _ kind: ServerKind) throws {
        _ = try server.pactl(
            kind == .pulseaudio
                ? ["load-module", "module-null-source", "source_name=mic"]
                : ["load-module", "module-null-sink", "sink_name=mic", "media.class=Audio/Source/Virtual"])
        _ = try server.pactl(["set-default-source", "mic"])
    }

    /// A capture by app `name` from `device`, and the time its stream is first listed.
    func capture(_ server: TestServer, name: String, device: String) throws -> (Child, Date) {
        let p = try server.spawn(["parec", "--client-name=\(name)", "--device=\(device)", "/dev/null"])
        var listed: Date?
        _ = waitFor(10) {
            guard (try? server.recordStreams())?.contains(where: { $0.pid == UInt32(p.pid) }) == true else {
                return false
            }
            listed = Date()
            return true
        }
        guard let listed else { throw TestKitError("the capture of \(name) was never listed") }
        return (p, listed)
    }

    @Test(
        "voice input: a dictation app with a record rule pauses mpv while it captures and plays it again after; a meter on a monitor pauses nothing; Play during dictation leaves the capture alone",
        arguments: ServerKind.tested)
    func voiceInput(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        try microphone(server, kind)
        let d = try Daemon.start(server)
        defer { d.stop() }
        // Two voice-input apps: the mute that stops the first one's capture is saved by the server's stream-restore
        // for its name, and would start the next capture of that name muted.
        for app in ["dictate", "push-to-talk"] {
            guard
                case .success = d.client.manager(
                    "SetApplicationCategory", [.string(app), .string("record"), .string("default"), .strings([])])
            else { throw TestKitError("the record rule for \(app) was refused") }
        }
        let (_, player) = try mpv(server, heardBy: d)

        // A level meter with the same rule, on the sink's monitor: no microphone, nothing paused.
        let (meter, _) = try capture(server, name: "dictate", device: "null.monitor")
        usleep(800_000)
        #expect(status(server, player) == "Playing", "a capture of a monitor paused the music")
        meter.kill()

        // Dictation: paused at once, played again after the capture stops and the linger passes. The capture stops
        // while the app lives (muted in a mixer: it captures nothing); an app that exits ends its session at once.
        let (dictation, listed) = try capture(server, name: "dictate", device: "mic")
        #expect(waitFor(5) { status(server, player) == "Paused" }, "the dictation did not pause mpv")
        let paused = Date().timeIntervalSince(listed) * 1000
        print("voice input: \(kind): mpv paused \(String(format: "%.0f", paused)) ms after the capture was listed")
        let rec = try #require((try server.recordStreams()).first { $0.pid == UInt32(dictation.pid) })
        let stopped = Date()
        _ = try server.pactl(["set-source-output-mute", "\(rec.index)", "1"])
        #expect(waitFor(10) { status(server, player) == "Playing" }, "mpv was not played again after the dictation")
        let back = Date().timeIntervalSince(stopped)
        print("voice input: \(kind): mpv playing again \(String(format: "%.2f", back)) s after the capture stopped")
        #expect(back > 1, "mpv played again before the linger passed (\(back) s)")
        dictation.kill()

        // Push-to-talk; the user presses Play during it.
        let (again, _) = try capture(server, name: "push-to-talk", device: "mic")
        #expect(
            waitFor(5) { status(server, player) == "Paused" },
            "the second dictation did not pause mpv: \(server.file("audiod.log").suffix(3000))")
        try press(server, player, "Play")
        #expect(waitFor(5) { status(server, player) == "Playing" })
        // The capture is left alone, however long it goes on; the music keeps the audio.
        usleep(1_000_000)
        let held = try #require((try server.recordStreams()).first { $0.pid == UInt32(again.pid) })
        #expect(!held.muted, "audiod muted the dictation's capture")
        #expect(status(server, player) == "Playing")
        again.kill()
        // Its end after the linger resumes nothing and pauses nothing: the music plays on.
        usleep(3_000_000)
        #expect(status(server, player) == "Playing")
        #expect(server.playbackStream(pid: try #require(mprisPid(server, player)))?.muted == false)
    }

    /// The pid that owns an MPRIS name on the test's bus.
    func mprisPid(_ server: TestServer, _ name: String) -> pid_t? {
        let out = try? server.run(["busctl", "--user", "status", name])
        for line in (out ?? "").split(separator: "\n") where line.hasPrefix("PID=") {
            return pid_t(line.dropFirst(4))
        }
        return nil
    }
}
