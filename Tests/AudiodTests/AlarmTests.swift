import AudiodTestKit
import DBusService
import Foundation
import Testing

/// Issue 45's alarms and emergencies against the real daemon and each server, with logind's stand-in for the lock:
/// an alarm rings through silent mode and the lock and ducks the music while it rings; an emergency interrupts a
/// non-mixable playback session, which is told it may resume after it.
extension LockAndSleepTests {
    func volume(_ server: TestServer, _ p: Child) -> UInt32? { server.playbackStream(pid: p.pid)?.volume.first }

    @Test(
        "an alarm rings through silent mode and the lock and ducks the music; an emergency interrupts a video, which may resume after",
        arguments: ServerKind.tested)
    func alarmAndEmergency(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let l = try logind(server)
        defer { l.stop() }
        let d = try daemon(server, l)
        defer { d.stop() }
        // PipeWire's native clients name the roles `Alarm` and `Emergency`; through PulseAudio they are lower case.
        let (alarmRole, emergencyRole) = kind == .pulseaudio ? ("alarm", "emergency") : ("Alarm", "Emergency")
        let music = try playback(server, name: "music", role: "music")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        _ = d.client.call(
            API.managerPath, API.properties.name, "Set",
            [.string(API.manager.name), .string("SilentMode"), .variant(.bool(true))])
        l.lock(true)
        #expect(waitFor(10) { screenLocked(d) == true }, "ScreenLocked never turned true")

        let clock = try playback(server, name: "clocks", role: alarmRole)
        _ = try server.waitForPlaybackStream(pid: clock.pid)
        #expect(waitFor(5) { (volume(server, music) ?? 65536) < 65536 }, "the alarm did not duck the music")
        #expect(streamReasons(d, pid: music.pid).contains { $0.hasPrefix("ducked by session") })
        // Held a while: nothing silences the alarm, and it stays at the user's volume.
        usleep(500_000)
        let ring = try #require(server.playbackStream(pid: clock.pid))
        #expect(!ring.muted && ring.volume.first == 65536, "the alarm was touched: \(ring)")
        #expect(streamReasons(d, pid: clock.pid).isEmpty, "\(streamReasons(d, pid: clock.pid))")
        // Silent mode and the lock never touch `playback`; sleep interrupts every session — but the alarm.
        l.prepareForSleep(true)
        #expect(
            waitFor(5) { streamReasons(d, pid: music.pid).contains { $0.contains("suspend") } },
            "sleep did not interrupt the music: \(streamReasons(d, pid: music.pid))")
        let asleep = try #require(server.playbackStream(pid: clock.pid))
        #expect(!asleep.muted && streamReasons(d, pid: clock.pid).isEmpty, "sleep touched the alarm: \(asleep)")
        l.prepareForSleep(false)
        clock.kill()
        #expect(waitFor(8) { volume(server, music) == 65536 }, "the music was not given back its volume")

        // A video holds the audio; an emergency takes it, and gives it back when it ends.
        l.lock(false)
        let player = try playback(server, name: "video")
        _ = try server.waitForPlaybackStream(pid: player.pid)
        let video = try d.client.makeSession(pid: player.pid, "playback", activate: true)
        let siren = try playback(server, name: "cell-broadcast", role: emergencyRole)
        let began = d.client.waitForSignal(video, "InterruptionBegan")
        #expect(began.first?.first == .string("default"), "the video was not interrupted: \(began)")
        #expect(waitFor(5) { muted(server, player) == true }, "the video plays during the emergency")
        #expect(muted(server, siren) == false)
        siren.kill()
        let ended = d.client.waitForSignal(video, "InterruptionEnded", timeout: 8)
        #expect(ended.first?.first == .bool(true), "the video was not told it may resume: \(ended)")
    }
}
