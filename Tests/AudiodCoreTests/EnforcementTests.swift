import AppIdentity
import AudioPolicy
import AudiodTestKit
import Foundation
import PulseBackend
import Testing

/// The engine's effects carried out on real streams of a real server, checked by another client (`pactl`).
/// Every test runs on PulseAudio and on PipeWire (pipewire-pulse + WirePlumber), each on its own private bus and
/// server.
@Suite(.serialized)
struct EnforcementTests {
    static let servers = ServerKind.tested

    @Test("an interruption mutes the stream and re-activation unmutes it", arguments: servers)
    func muteAndUnmute(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let live = try LiveArbiter(server)
        defer { live.shutdown() }
        let music = try playback(server, name: "music-app")
        let video = try playback(server, name: "video-app")
        let a = try server.waitForPlaybackStream(pid: music.pid)
        _ = try server.waitForPlaybackStream(pid: video.pid)

        let first = live.session(pid: music.pid, "playback", activate: true)
        #expect(server.playbackStream(pid: music.pid)?.muted == false)
        let second = live.session(pid: video.pid, "playback", activate: true)
        #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.muted == true }, "interrupted stream not muted")
        #expect(server.playbackStream(pid: video.pid)?.muted == false)
        #expect(live.streamView(a.index)?.userMuted == false, "the engine took its own mute for the user's")

        live.deactivate(second)
        live.activate(first)
        #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.muted == false }, "stream not unmuted")
    }

    @Test("a duck is DuckLevel × the user's volume and is restored exactly", arguments: servers)
    func duckAndRestore(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let live = try LiveArbiter(server)
        defer { live.shutdown() }
        let music = try playback(server, name: "music-app")
        let nav = try playback(server, name: "nav-app")
        let s = try server.waitForPlaybackStream(pid: music.pid)
        _ = try server.waitForPlaybackStream(pid: nav.pid)
        _ = try server.pactl(["set-sink-input-volume", "\(s.index)", "80%"])
        var user: [UInt32] = []
        #expect(
            waitFor(5) {
                user = server.playbackStream(pid: music.pid)?.volume ?? []
                return (user.first ?? 0) < Volume.norm && live.streamView(s.index)?.userVolume.channels == user
            }, "the user's 80 % did not reach the engine")

        _ = live.session(pid: music.pid, "playback", options: ["mix-with-others"], activate: true)
        let prompt = live.session(pid: nav.pid, "playback", options: ["duck-others"], activate: true)
        let expected = ducked(user)
        var seen: [UInt32] = []
        let duckedOK = waitFor(5) {
            seen = server.playbackStream(pid: music.pid)?.volume ?? []
            return Volume(channels: seen).isClose(to: Volume(channels: expected), tolerance: 64)
        }
        #expect(duckedOK, "ducked volume \(seen), expected \(expected)")
        #expect(server.playbackStream(pid: nav.pid)?.volume.first == Volume.norm, "the ducking app was ducked")

        live.deactivate(prompt)
        #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.volume == user }, "volume not restored to \(user)")
    }

    @Test("the user's own change to a ducked or muted stream survives the policy lifting", arguments: servers)
    func userChangeKept(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let live = try LiveArbiter(server)
        defer { live.shutdown() }
        let music = try playback(server, name: "music-app")
        let nav = try playback(server, name: "nav-app")
        let game = try playback(server, name: "game-app")
        let call = try playback(server, name: "call-app")
        let m = try server.waitForPlaybackStream(pid: music.pid)
        let g = try server.waitForPlaybackStream(pid: game.pid)
        _ = try server.waitForPlaybackStream(pid: nav.pid)
        _ = try server.waitForPlaybackStream(pid: call.pid)

        // Ducked, then the user sets 50 % and mutes: after the duck ends the stream is muted at 50 %. The user acts
        // once the duck's fade is over: a volume that lands in the same few milliseconds as a fade step is
        // overwritten by it before audiod can read it (docs/FADES.md), which FadeTests covers apart.
        _ = live.session(pid: music.pid, "playback", options: ["mix-with-others"], activate: true)
        let prompt = live.session(pid: nav.pid, "playback", options: ["duck-others"], activate: true)
        let full = ducked([Volume.norm, Volume.norm])
        #expect(
            waitFor(5) {
                Volume(channels: server.playbackStream(pid: music.pid)?.volume ?? [])
                    .isClose(to: Volume(channels: full), tolerance: 64)
            }, "the duck did not reach its level")
        _ = try server.pactl(["set-sink-input-volume", "\(m.index)", "50%"])
        _ = try server.pactl(["set-sink-input-mute", "\(m.index)", "1"])
        let half = Volume.norm / 2
        #expect(
            waitFor(5) {
                live.streamView(m.index)?.userVolume.channels == [half, half]
                    && live.streamView(m.index)?.userMuted == true
            }, "the user's 50 % and mute were not seen")
        // Still ducked: the user's new volume, re-ducked.
        #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.volume == ducked([half, half]) })
        live.deactivate(prompt)
        #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.volume == [half, half] }, "user's 50 % lost")
        #expect(server.playbackStream(pid: music.pid)?.muted == true, "user's mute lost")

        // Muted by the user before a call interrupts it: when the call ends, it is still muted.
        _ = try server.pactl(["set-sink-input-mute", "\(g.index)", "1"])
        #expect(waitFor(5) { live.streamView(g.index)?.userMuted == true }, "user's mute not seen")
        let gameSession = live.session(pid: game.pid, "solo-ambient", activate: true)
        let callSession = live.session(pid: call.pid, "play-and-record", mode: "voice-chat", activate: true)
        #expect(waitFor(5) { live.streamView(g.index)?.policyMuted == true }, "game not silenced by the call")
        live.deactivate(callSession)
        live.activate(gameSession)
        #expect(waitFor(5) { live.streamView(g.index)?.policyMuted == false })
        usleep(200_000)
        #expect(server.playbackStream(pid: game.pid)?.muted == true, "audiod unmuted a stream the user muted")
    }

    @Test("streams of a child process belong to the parent's session", arguments: servers)
    func childProcessAttribution(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let live = try LiveArbiter(server)
        defer { live.shutdown() }
        // `; true` keeps the shell alive as the parent instead of exec'ing pacat.
        let shell = try server.spawn(["sh", "-c", "pacat --playback /dev/zero; true"])
        var stream: ObservedStream?
        #expect(
            waitFor(10) {
                stream = (try? server.playbackStreams())?.first { s in
                    s.pid.map { ProcessTable.parent(of: $0) == UInt32(shell.pid) } ?? false
                }
                return stream != nil
            }, "no stream from the shell's child")
        let session = live.session(pid: shell.pid, "playback", activate: true)
        let index = try #require(stream).index
        #expect(waitFor(5) { live.streamView(index)?.session == session }, "child's stream not in the parent's session")
        #expect(stream?.pid != UInt32(shell.pid))
    }

    @Test("a record stream is silenced while its session is interrupted by a call", arguments: servers)
    func recordStreamMuted(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let live = try LiveArbiter(server)
        defer { live.shutdown() }
        let recorder = try server.spawn(["parec", "-d", "null.monitor", "/dev/null"])
        let call = try playback(server, name: "call-app")
        _ = try server.waitForPlaybackStream(pid: call.pid)
        var rec: ObservedStream?
        #expect(
            waitFor(10) {
                rec = (try? server.recordStreams())?.first { $0.pid == UInt32(recorder.pid) }
                return rec != nil
            }, "no record stream")
        let memo = live.session(pid: recorder.pid, "record", activate: true)
        let callSession = live.session(pid: call.pid, "play-and-record", mode: "voice-chat", activate: true)
        #expect(
            waitFor(5) {
                (try? server.recordStreams())?.first { $0.pid == UInt32(recorder.pid) }?.muted == true
            }, "the recorder kept recording during a call")
        live.deactivate(callSession)
        live.activate(memo)
        #expect(
            waitFor(5) {
                (try? server.recordStreams())?.first { $0.pid == UInt32(recorder.pid) }?.muted == false
            }, "the recorder stayed muted after its own re-activation")
    }
}

/// Devices and tags: what the backend reads besides mute and volume.
@Suite(.serialized)
struct DeviceAndTagTests {
    static let servers = ServerKind.tested

    @Test("a stream tagged audiod.session through PULSE_PROP belongs to that session", arguments: servers)
    func sessionTag(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let live = try LiveArbiter(server)
        defer { live.shutdown() }
        // A session for a process that is not the player's ancestor: only the tag can tie them.
        let holder = try server.spawn(["sleep", "60"])
        let session = live.session(pid: holder.pid, "playback")
        let tagged = try server.spawn(
            ["pacat", "--playback", "/dev/zero"],
            environment: ["PULSE_PROP": "audiod.session=\(session.rawValue)"])
        let s = try server.waitForPlaybackStream(pid: tagged.pid)
        #expect(waitFor(5) { live.streamView(s.index)?.session == session }, "tagged stream not in its session")
    }

    @Test("headphones unplugged: the stream the server moved to the speakers is silenced", arguments: servers)
    func deviceRemoved(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let live = try LiveArbiter(server)
        defer { live.shutdown() }
        let module = try server.pactl(["load-module", "module-null-sink", "sink_name=headphones"])
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(waitFor(10) { ((try? server.pactl(["list", "short", "sinks"])) ?? "").contains("headphones") })
        let music = try server.spawn(["pacat", "--playback", "--device=headphones", "/dev/zero"])
        let s = try server.waitForPlaybackStream(pid: music.pid)
        #expect(waitFor(5) { live.streamView(s.index)?.info.device == "headphones" }, "device name not read")
        _ = live.session(pid: music.pid, "playback", activate: true)

        _ = try server.pactl(["unload-module", module])
        // The server moves the stream to the remaining sink; audiod must not let it play there (POLICY §6).
        #expect(
            waitFor(10) {
                let now = server.playbackStream(pid: music.pid)
                return now?.muted == true
            }, "the unplugged stream plays on: \(String(describing: server.playbackStream(pid: music.pid)))")
        #expect(waitFor(5) { live.streamView(s.index)?.info.device == "null" || live.streamView(s.index) == nil })
    }
}

/// PipeWire lists a new stream ~5 ms before WirePlumber links it, and mixes nothing of it before the link. A call's
/// stream silences the music in that time, so that the two are never heard together; nothing else is decided before
/// the link. The streams here ask not to be linked (`node.autoconnect=false`, which WirePlumber honours) and are
/// linked by hand (`pw-link`) when the test is ready.
@Suite(.serialized)
struct AnnouncedCallTests {
    func unlinked(_ server: TestServer, _ role: String) throws -> Child {
        try server.spawn([
            "pacat", "--playback", "/dev/zero", "--property=media.role=\(role)", "--property=node.autoconnect=false",
            "--property=node.name=audiod-test-\(role)",
        ])
    }

    func link(_ server: TestServer, _ role: String) throws {
        for channel in ["FL", "FR"] {
            _ = try server.run(["pw-link", "audiod-test-\(role):output_\(channel)", "null:playback_\(channel)"])
        }
    }

    static func settings(callLinkWait ns: UInt64) -> Settings {
        var settings = Settings()
        settings.callLinkWaitNanoseconds = ns
        return settings
    }

    /// A music-role stream that audiod hears playing.
    func playingMusic(_ server: TestServer, _ live: LiveArbiter) throws -> Child {
        let music = try server.spawn(["pacat", "--playback", "/dev/zero", "--property=media.role=music"])
        _ = try server.waitForPlaybackStream(pid: music.pid)
        #expect(
            waitFor(10) { live.playbackView(pid: music.pid)?.audible == true }, "the music is not audible to begin with"
        )
        return music
    }

    @Test(
        "PipeWire: a call's stream mutes the music before it is linked; the link brings the interruption",
        arguments: ServerKind.testedPipeWires)
    func mutedBeforeTheLink(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let live = try LiveArbiter(server, settings: Self.settings(callLinkWait: 60_000_000_000))
        defer { live.shutdown() }
        let music = try playingMusic(server, live)

        // A game's stream, unlinked, is not a call's: nothing is muted for it.
        let game = try unlinked(server, "game")
        #expect(waitFor(10) { server.playbackStream(pid: game.pid) != nil })
        usleep(300_000)
        #expect(server.playbackStream(pid: music.pid)?.muted == false, "the music was muted for an unlinked game")
        game.kill()

        let phone = try unlinked(server, "phone")
        #expect(
            waitFor(10) { server.playbackStream(pid: music.pid)?.muted == true },
            "the music was not muted before the call was linked")
        #expect(live.playbackView(pid: phone.pid) == nil, "the unlinked call was decided on before its link")
        #expect(
            live.playbackView(pid: music.pid)?.reasons.map(\.text).first?.hasPrefix("a call is about to sound") == true,
            "reasons: \(String(describing: live.playbackView(pid: music.pid)?.reasons))")
        #expect(live.playbackView(pid: music.pid)?.userMuted == false, "audiod took its own mute for the user's")

        try link(server, "phone")
        #expect(waitFor(10) { live.playbackView(pid: phone.pid)?.session != nil }, "the call's link was not seen")
        let call = live.playbackView(pid: phone.pid)?.session
        #expect(
            waitFor(5) {
                if case .interrupted(by: call, interrupterIsCall: true, _, _)? = live.playbackView(pid: music.pid)?
                    .reasons.first
                {
                    return true
                }
                return false
            },
            "the music is not interrupted by the call: \(String(describing: live.playbackView(pid: music.pid)?.reasons))"
        )
        #expect(server.playbackStream(pid: music.pid)?.muted == true, "the music sounds during the call")
        #expect(server.playbackStream(pid: phone.pid)?.muted == false, "the call was muted")

        phone.kill()
        #expect(
            waitFor(10) { server.playbackStream(pid: music.pid)?.muted == false },
            "the music did not come back after the call")
    }

    @Test(
        "PipeWire: a call's stream that ends before its link, or never links, gives the music back",
        arguments: ServerKind.testedPipeWires)
    func aCallThatNeverSoundsGivesTheMusicBack(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let live = try LiveArbiter(server, settings: Self.settings(callLinkWait: 1_000_000_000))
        defer { live.shutdown() }
        let music = try playingMusic(server, live)

        let ended = try unlinked(server, "phone")
        #expect(
            waitFor(10) { server.playbackStream(pid: music.pid)?.muted == true },
            "the music was not muted ahead of the call")
        ended.kill()
        #expect(
            waitFor(10) { server.playbackStream(pid: music.pid)?.muted == false },
            "the music stayed muted after the call ended unlinked")

        let never = try unlinked(server, "phone")
        #expect(
            waitFor(10) { server.playbackStream(pid: music.pid)?.muted == true },
            "the music was not muted ahead of the second call")
        // Muted ahead, then back once the link is a second overdue — while the call's stream is still listed.
        #expect(
            waitFor(10) {
                server.playbackStream(pid: music.pid)?.muted == false
                    && live.playbackView(pid: music.pid)?.reasons.isEmpty == true
            },
            "the music stayed muted for a call that never linked")
        #expect(server.playbackStream(pid: never.pid) != nil)
        #expect(live.playbackView(pid: music.pid)?.userMuted == false)
        never.kill()
    }
}
