import AppIdentity
import AudioPolicy
import AudiodCore
import AudiodTestKit
import Foundation
import Logging
import PulseBackend
import Testing

/// POLICY §8: policy values do not outlive the policy — not in restore databases, not after a crash, not across a
/// server restart.
@Suite(.serialized)
struct NothingLeftBehindTests {
    static let servers = ServerKind.tested

    /// Silent mode on and an active ambient session for `pid`: its streams are muted by policy.
    func silence(_ live: LiveArbiter, pid: pid_t) -> SessionID {
        #expect(live.request { .setSilentMode($0, true) } == .ok)
        return live.session(pid: pid, "ambient", activate: true)
    }

    /// A music-role app silenced by policy ends while silenced: the music entry of the restore database now
    /// holds audiod's mute. With `sibling`, another music-role app started after it (so that its implicit
    /// session, not the game's, took the audio) plays on; it is returned.
    @discardableResult
    func leakMusicMute(_ server: TestServer, _ live: LiveArbiter, sibling: String? = nil) throws
        -> (Child, ObservedStream)?
    {
        let game = try playback(server, name: "game", role: "music")
        let g = try server.waitForPlaybackStream(pid: game.pid)
        #expect(waitFor(5) { live.streamView(g.index) != nil })
        let other = try sibling.map { name -> (Child, ObservedStream) in
            let c = try playback(server, name: name, role: "music")
            return (c, try server.waitForPlaybackStream(pid: c.pid))
        }
        if let (_, o) = other { #expect(waitFor(5) { live.streamView(o.index) != nil }) }
        _ = silence(live, pid: game.pid)
        #expect(waitFor(5) { server.playbackStream(pid: game.pid)?.muted == true }, "policy mute not applied")
        game.kill()
        #expect(waitFor(5) { live.streamView(g.index) == nil })
        return other
    }

    /// The method's check, with no audiod: every server here files a stream's mute under its role, so a mute set on
    /// one app's music stream is applied to another app's next music stream (WirePlumber 0.5.8 keys its
    /// `stream-properties` by role; module-stream-restore and WirePlumber 0.4 do too). That is what a policy mute
    /// leaking into a role's entry would do to every app of the role, and what the tests below guard against.
    @Test(
        "without audiod, a mute set on one music stream is applied to another app's next music stream",
        arguments: servers)
    func roleKeyedStateWithoutAudiod(kind: ServerKind) throws {
        let server = try TestServer(kind, streamRestore: true)
        defer { server.stop() }
        let first = try playback(server, name: "player-one", role: "music")
        let a = try server.waitForPlaybackStream(pid: first.pid)
        #expect(waitFor(5) { server.playbackStream(pid: first.pid)?.muted == false })
        _ = try server.pactl(["set-sink-input-mute", "\(a.index)", "1"])
        #expect(waitFor(5) { server.playbackStream(pid: first.pid)?.muted == true })
        // WirePlumber saves once the node reports the change.
        usleep(500_000)
        first.kill()
        let other = try playback(server, name: "player-two", role: "music")
        _ = try server.waitForPlaybackStream(pid: other.pid)
        #expect(
            waitFor(5) { server.playbackStream(pid: other.pid)?.muted == true },
            "on \(kind) the role's saved mute was not applied")
        // Another role's stream is not touched.
        let alarm = try playback(server, name: "player-two", role: "event")
        _ = try server.waitForPlaybackStream(pid: alarm.pid)
        usleep(500_000)
        #expect(server.playbackStream(pid: alarm.pid)?.muted == false)
    }

    @Test("an app's next stream starts at the user's values, not at a policy mute it ended with", arguments: servers)
    func restoreDatabaseLeak(kind: ServerKind) throws {
        // PulseAudio with module-stream-restore (as every desktop loads it); PipeWire with WirePlumber.
        let server = try TestServer(kind, streamRestore: true)
        defer { server.stop() }
        let live = try LiveArbiter(server)
        defer { live.shutdown() }

        let first = try playback(server, name: "leaky-game")
        let s1 = try server.waitForPlaybackStream(pid: first.pid)
        _ = silence(live, pid: first.pid)
        #expect(waitFor(5) { server.playbackStream(pid: first.pid)?.muted == true }, "policy mute not applied")
        #expect(live.streamView(s1.index)?.userMuted == false)
        first.kill()  // ends while muted by audiod: the restore database saw the mute
        #expect(waitFor(5) { live.streamView(s1.index) == nil })

        // The same app again, in a process with no session: nothing silences it.
        let second = try playback(server, name: "leaky-game")
        let s2 = try server.waitForPlaybackStream(pid: second.pid)
        #expect(waitFor(5) { server.playbackStream(pid: second.pid)?.muted == false }, "the next stream started muted")
        #expect(waitFor(5) { live.streamView(s2.index)?.userMuted == false }, "the engine took the leak for the user's")
        usleep(300_000)
        #expect(server.playbackStream(pid: second.pid)?.muted == false)

        // And a third, after audiod put the second back: the database holds the user's values again.
        second.kill()
        let third = try playback(server, name: "leaky-game")
        let s3 = try server.waitForPlaybackStream(pid: third.pid)
        #expect(waitFor(5) { server.playbackStream(pid: third.pid)?.muted == false })
        #expect(waitFor(5) { live.streamView(s3.index)?.userMuted == false })
    }

    /// Seed 733786 of the random test: a stop's lifts are acknowledged before the stop looks at everything the engine
    /// holds; journaled only when a write that never came would land, they kept the journal, and the next start
    /// unmuted a stream the user had muted while audiod was down.
    @Test(
        "a clean stop leaves no journal, and the next start keeps what the user changed meanwhile", arguments: servers)
    func cleanStopLeavesNoJournal(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let journal = "\(server.directory)/audiod/journal"
        let live = try LiveArbiter(server, journal: journal)
        let app = try playback(server, name: "quiet-game")
        let s = try server.waitForPlaybackStream(pid: app.pid)
        _ = silence(live, pid: app.pid)
        #expect(waitFor(5) { server.playbackStream(pid: app.pid)?.muted == true }, "policy mute not applied")
        live.shutdown()
        #expect(server.playbackStream(pid: app.pid)?.muted == false, "the stop left the mute")
        #expect(!FileManager.default.fileExists(atPath: journal), "a clean stop kept the journal")
        _ = try server.pactl(["set-sink-input-mute", "\(s.index)", "1"])
        #expect(waitFor(5) { server.playbackStream(pid: app.pid)?.muted == true })
        let next = try LiveArbiter(server, journal: journal)
        defer { next.shutdown() }
        #expect(waitFor(5) { next.streamView(s.index) != nil })
        usleep(300_000)
        #expect(server.playbackStream(pid: app.pid)?.muted == true, "the next start undid the user's mute")
    }

    /// The restore database keeps one entry per role: the last stream of that role to change wrote it. A
    /// sibling that ended later, never silenced, did not write it — so it must not make audiod forget the leak.
    /// (Seen in the benchmark: a hundred music streams silenced as they closed left the next music player muted.)
    @Test(
        "a policy mute left in the database is put back even when a sibling of the same role ended after it",
        arguments: servers)
    func siblingEndsAfterLeak(kind: ServerKind) throws {
        let server = try TestServer(kind, streamRestore: true)
        defer { server.stop() }
        let live = try LiveArbiter(server)
        defer { live.shutdown() }

        // The game ends while muted by audiod: the database saw the mute last.
        guard let (sibling, p) = try leakMusicMute(server, live, sibling: "player") else { return }
        #expect(server.playbackStream(pid: sibling.pid)?.muted == false)
        sibling.kill()  // ends unmuted, but wrote nothing since the mute
        #expect(waitFor(5) { live.streamView(p.index) == nil })

        let next = try playback(server, name: "radio", role: "music")
        let n = try server.waitForPlaybackStream(pid: next.pid)
        #expect(
            waitFor(5) { server.playbackStream(pid: next.pid)?.muted == false }, "the next music stream started muted")
        #expect(waitFor(5) { live.streamView(n.index)?.userMuted == false }, "the engine took the leak for the user's")
    }

    @Test("a user's mute saved after a policy leak is the user's: the next stream keeps it", arguments: servers)
    func userMuteAfterLeak(kind: ServerKind) throws {
        let server = try TestServer(kind, streamRestore: true)
        defer { server.stop() }
        let live = try LiveArbiter(server)
        defer { live.shutdown() }

        guard let (player, p) = try leakMusicMute(server, live, sibling: "player") else { return }
        // The user mutes the music player in a mixer: the database now holds the user's mute.
        _ = try server.pactl(["set-sink-input-mute", "\(p.index)", "1"])
        #expect(waitFor(5) { live.streamView(p.index)?.userMuted == true }, "the user's mute did not reach the engine")
        player.kill()
        #expect(waitFor(5) { live.streamView(p.index) == nil })

        let next = try playback(server, name: "radio", role: "music")
        let n = try server.waitForPlaybackStream(pid: next.pid)
        #expect(
            waitFor(5) { server.playbackStream(pid: next.pid)?.muted == true }, "the user's saved mute was not restored"
        )
        usleep(500_000)
        #expect(server.playbackStream(pid: next.pid)?.muted == true, "audiod undid the user's own mute")
        #expect(live.streamView(n.index)?.userMuted == true)
    }

    /// The watch for a leaked value on a new stream must not take the user's own mute, made in a mixer right
    /// after the stream started, for a leak. (It did, on PulseAudio, for 2 s: the benchmark's floor client's
    /// mutes were undone.)
    @Test("a mixer's mute on a new stream right after a leak is the user's", arguments: servers)
    func mixerMuteAfterLeak(kind: ServerKind) throws {
        let server = try TestServer(kind, streamRestore: true)
        defer { server.stop() }
        let live = try LiveArbiter(server)
        defer { live.shutdown() }

        try leakMusicMute(server, live)

        let next = try playback(server, name: "radio", role: "music")
        let n = try server.waitForPlaybackStream(pid: next.pid)
        #expect(waitFor(5) { server.playbackStream(pid: next.pid)?.muted == false }, "the leak was not put back")
        _ = try server.pactl(["set-sink-input-mute", "\(n.index)", "1"])
        #expect(waitFor(5) { live.streamView(n.index)?.userMuted == true }, "the user's mute did not reach the engine")
        usleep(500_000)
        #expect(server.playbackStream(pid: next.pid)?.muted == true, "audiod undid the user's mute as a leak")
    }

    @Test("a ducked app's next stream starts at the user's volume", arguments: servers)
    func restoreDatabaseDuckLeak(kind: ServerKind) throws {
        let server = try TestServer(kind, streamRestore: true)
        defer { server.stop() }
        let live = try LiveArbiter(server)
        defer { live.shutdown() }
        let music = try playback(server, name: "leaky-music")
        let nav = try playback(server, name: "nav-app")
        let m = try server.waitForPlaybackStream(pid: music.pid)
        _ = try server.waitForPlaybackStream(pid: nav.pid)
        _ = live.session(pid: music.pid, "playback", options: ["mix-with-others"], activate: true)
        _ = live.session(pid: nav.pid, "playback", options: ["duck-others"], activate: true)
        // PipeWire keeps volumes as floats and may report a neighbour of the value set.
        func near(_ a: [UInt32]?, _ b: [UInt32]) -> Bool {
            a.map { Volume(channels: $0).isClose(to: Volume(channels: b), tolerance: 64) } ?? false
        }
        #expect(waitFor(5) { near(server.playbackStream(pid: music.pid)?.volume, ducked(m.volume)) }, "not ducked")
        music.kill()

        let again = try playback(server, name: "leaky-music")
        let a = try server.waitForPlaybackStream(pid: again.pid)
        // A process without a session is not ducked (implicit default: playback, mix-with-others; the duck
        // comes only from an explicit activation, which the nav session did before this stream existed — so the
        // engine ducks it too). What must not happen is a double duck or the user's volume lost: the engine's
        // idea of the user's volume is the full volume.
        #expect(
            waitFor(5) { near(live.streamView(a.index)?.userVolume.channels, m.volume) },
            "the engine took the leaked duck for the user's volume: \(String(describing: live.streamView(a.index)?.userVolume))"
        )
    }

    @Test("a crashed run's mutes and ducks are undone by the next start", arguments: servers)
    func journalAfterCrash(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let journal = "\(server.directory)/audiod/journal"
        let music = try playback(server, name: "music-app")
        let nav = try playback(server, name: "nav-app")
        let game = try playback(server, name: "game-app")
        let m = try server.waitForPlaybackStream(pid: music.pid)
        _ = try server.waitForPlaybackStream(pid: nav.pid)
        _ = try server.waitForPlaybackStream(pid: game.pid)

        let crashing = try LiveArbiter(server, journal: journal)
        _ = crashing.session(pid: music.pid, "playback", options: ["mix-with-others"], activate: true)
        _ = crashing.session(pid: nav.pid, "playback", options: ["duck-others"], activate: true)
        _ = silence(crashing, pid: game.pid)
        #expect(
            waitFor(5) {
                server.playbackStream(pid: music.pid)?.volume == ducked(m.volume)
                    && server.playbackStream(pid: game.pid)?.muted == true
            }, "policy not applied before the crash")
        crashing.crash()
        #expect(FileManager.default.fileExists(atPath: journal), "no journal after a crash")
        #expect(server.playbackStream(pid: game.pid)?.muted == true, "the crash undid something by itself")

        let started = Date()
        let next = try LiveArbiter(server, journal: journal)
        defer { next.shutdown() }
        #expect(
            waitFor(5) {
                server.playbackStream(pid: music.pid)?.volume == m.volume
                    && server.playbackStream(pid: game.pid)?.muted == false
            }, "the next start did not undo the crashed run")
        let took = Date().timeIntervalSince(started)
        #expect(took < 1.0, "restored after \(took) s; POLICY wants 1 s")
        #expect(next.streamView(m.index)?.userVolume.channels == m.volume)
    }

    /// A policy mute left in a role's entry is handed only to streams made after it: a stream of that role the user
    /// had muted before is the user's at the next start. (Found by the random test, seed 780796: the next start took
    /// the user's mute for the leak and undid it.)
    @Test("a crashed run's leak does not unmute an older stream the user muted", arguments: servers)
    func leakAfterCrashSparesOlderUserMute(kind: ServerKind) throws {
        let server = try TestServer(kind, streamRestore: true)
        defer { server.stop() }
        let journal = "\(server.directory)/audiod/journal"
        let crashing = try LiveArbiter(server, journal: journal)
        // The user mutes the role's older stream; the younger one starts with that saved mute, and the user unmutes it.
        let player = try playback(server, name: "player", role: "music")
        let p = try server.waitForPlaybackStream(pid: player.pid)
        _ = try server.pactl(["set-sink-input-mute", "\(p.index)", "1"])
        #expect(
            waitFor(5) { crashing.streamView(p.index)?.userMuted == true }, "the user's mute did not reach the engine")
        let game = try playback(server, name: "game", role: "music")
        let g = try server.waitForPlaybackStream(pid: game.pid)
        #expect(
            waitFor(5) { crashing.streamView(g.index)?.userMuted == true }, "the role's saved mute was not the game's")
        _ = try server.pactl(["set-sink-input-mute", "\(g.index)", "0"])
        #expect(waitFor(5) { crashing.streamView(g.index)?.userMuted == false })
        // Then audiod mutes the younger one, which ends so: the entry holds audiod's mute, saved last.
        _ = silence(crashing, pid: game.pid)
        #expect(waitFor(5) { server.playbackStream(pid: game.pid)?.muted == true }, "policy mute not applied")
        game.kill()
        #expect(waitFor(5) { crashing.streamView(g.index) == nil })
        crashing.crash()
        let written = (try? String(contentsOfFile: journal, encoding: .utf8)) ?? ""
        #expect(written.contains("L sink-input-by-media-role:music 1"), "the leak is not in the journal: \(written)")

        let next = try LiveArbiter(server, journal: journal)
        defer { next.shutdown() }
        #expect(waitFor(5) { next.streamView(p.index) != nil })
        usleep(500_000)
        #expect(server.playbackStream(pid: player.pid)?.muted == true, "the next start undid the user's mute as a leak")
        #expect(next.streamView(p.index)?.userMuted == true)
        // The leak is still put back on the role's next stream.
        let radio = try playback(server, name: "radio", role: "music")
        let r = try server.waitForPlaybackStream(pid: radio.pid)
        #expect(
            waitFor(5) { server.playbackStream(pid: radio.pid)?.muted == false }, "the next music stream started muted")
        #expect(waitFor(5) { next.streamView(r.index)?.userMuted == false })
    }

    /// After a sound-server restart every key audiod held a value on counts as a leak, and a stop must put them all
    /// back within its 3 s. On PipeWire 1.x only a probe stream of the key shows what the next stream gets (about a
    /// third of a second each): probed one after another, the last of a dozen keys were never checked, and a write
    /// WirePlumber had not taken stayed (the random test's seed 35292: a video stream started after the stop came up
    /// muted).
    @Test(
        "after a server restart, a stop puts back every key audiod held a mute on, fourteen of them",
        arguments: servers)
    func stopAfterServerRestartRepairsEveryKey(kind: ServerKind) throws {
        let server = try TestServer(kind, streamRestore: true)
        defer { server.stop() }
        let live = try LiveArbiter(server)
        let names = (1...14).map { "app-\($0)" }
        var apps: [Child] = []
        for name in names {
            let app = try playback(server, name: name)
            _ = try server.waitForPlaybackStream(pid: app.pid)
            apps.append(app)
        }
        #expect(live.request { .setSilentMode($0, true) } == .ok)
        for app in apps { _ = live.session(pid: app.pid, "ambient", activate: true) }
        #expect(
            waitFor(10) { apps.allSatisfy { server.playbackStream(pid: $0.pid)?.muted == true } },
            "policy mutes not applied")
        // WirePlumber saves a stream's change into its key after a quiet second.
        usleep(1_500_000)

        server.killServer()
        for app in apps { app.kill() }
        #expect(waitFor(5) { !live.connected }, "the loss of the server went unnoticed")
        try server.startServer()
        #expect(waitFor(10) { live.connected }, "no reconnect within 10 s of the server's start")
        let started = Date()
        live.shutdown()
        let took = Date().timeIntervalSince(started)

        // With audiod gone, each app's next stream starts with what its key holds.
        let next = try names.map { try playback(server, name: $0) }
        defer { for app in next { app.kill() } }
        for app in next { _ = try server.waitForPlaybackStream(pid: app.pid) }
        // WirePlumber gives a new stream its key's values around its link.
        usleep(1_000_000)
        let muted = zip(names, next).filter { server.playbackStream(pid: $0.1.pid)?.muted != false }.map(\.0)
        print(
            "nothing left behind: \(kind): stop after a server restart with \(names.count) keys: \(String(format: "%.2f", took)) s"
        )
        #expect(
            muted.isEmpty,
            "after the stop (\(String(format: "%.2f", took)) s), these apps' next streams did not start unmuted: \(muted)"
        )
    }

    @Test("the server killed and restarted: audiod reconnects and re-applies the policy", arguments: servers)
    func serverRestart(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let live = try LiveArbiter(server)
        defer { live.shutdown() }
        // A client that comes back after the server does, like a real player.
        let shell = try server.spawn(["sh", "-c", "while true; do pacat --playback /dev/zero; sleep 0.05; done"])
        var stream: ObservedStream?
        #expect(
            waitFor(10) {
                stream = (try? server.playbackStreams())?.first {
                    $0.pid.flatMap(ProcessTable.parent) == UInt32(shell.pid)
                }
                return stream != nil
            })
        _ = silence(live, pid: shell.pid)
        #expect(waitFor(5) { (try? server.playbackStreams())?.first?.muted == true }, "policy mute not applied")

        server.killServer()
        #expect(waitFor(5) { !live.connected }, "the loss of the server went unnoticed")
        // Down for a while: several reconnect attempts are refused (the path that once used a freed context).
        usleep(600_000)
        try server.startServer()
        // How soon is ReliabilityTests' figure (printed, scripts/reliability): a loaded machine may take seconds.
        #expect(waitFor(10) { live.connected }, "no reconnect within 10 s of the server's start")
        var again: ObservedStream?
        #expect(
            waitFor(10) {
                again = (try? server.playbackStreams())?.first {
                    $0.pid.flatMap(ProcessTable.parent) == UInt32(shell.pid)
                }
                return again?.muted == true
            }, "the policy was not re-applied to the client's new stream")
        let index = try #require(again).index
        #expect(
            waitFor(5) { live.streamView(index)?.policyMuted == true && live.streamView(index)?.userMuted == false })
        #expect(live.statusChanges.suffix(2) == [false, true], "ServerConnected changes: \(live.statusChanges)")

        // It is the policy's mute, not a leftover: silent mode off lifts it.
        #expect(live.request { .setSilentMode($0, false) } == .ok)
        #expect(waitFor(5) { server.playbackStream(pid: pid_t(again?.pid ?? 0))?.muted == false }, "not lifted")
    }
}
