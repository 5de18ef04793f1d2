import AudiodTestKit
import DBusService
import Foundation
import Testing

/// Issue 40: the README's two promises where features meet — nothing stays muted after a stop or a crash, and a
/// game never mixes with a video, through a handover too — with real mpv, a game started from its desktop entry
/// and the built audiod, on both servers.
@Suite(.serialized)
struct PromiseTests {
    let players = MediaPlayerTests()
    let identity = DesktopIdentityTests()

    /// The game's desktop entry, written before audiod starts (a directory made later is issue 43's).
    func gameEntry(_ server: TestServer) throws -> String {
        try identity.desktopEntry(
            server, id: "org.example.SpaceGame", categories: "Game;ArcadeGame;",
            exec: "pacat --playback /dev/zero --client-name=spacegame")
    }

    /// The game started from its desktop entry (`Categories=Game`, through GLib's launcher), silenced as secondary
    /// audio beside mpv. Returns the game's pid (detached from the test: end it by pid) and mpv's bus name.
    func gameBesideMPV(_ server: TestServer, _ d: Daemon, entry: String) throws -> (
        game: pid_t, mpv: Child, mpvName: String
    ) {
        _ = try server.spawn(["gio", "launch", entry], log: "gio.log")
        var game: ObservedStream?
        #expect(
            waitFor(20) {
                game = (try? server.playbackStreams())?.first { $0.properties["application.name"] == "spacegame" }
                return game != nil
            }, "no game stream: \(server.file("gio.log"))")
        let pid = pid_t(try #require(game?.pid))
        let (found, ok) = identity.waitForApp(
            d, pid: UInt32(pid), until: { identity.category(d, $0.session) == "ambient" })
        #expect(ok, "the game from its entry is not ambient: \(String(describing: found?.identity))")
        let (mpv, name) = try players.mpv(server, heardBy: d)
        #expect(waitFor(10) { server.playbackStream(pid: pid)?.muted == true }, "the game is not silenced beside mpv")
        return (pid, mpv, name)
    }

    /// A run's server and audiod with the game silenced beside mpv; the game is ended after `body`.
    func withGameBesideMPV(
        _ kind: ServerKind, streamRestore: Bool = true,
        _ body: (TestServer, Daemon, _ game: pid_t, _ mpv: Child, _ mpvName: String) throws -> Void
    ) throws {
        let server = try TestServer(kind, streamRestore: streamRestore)
        defer { server.stop() }
        let entry = try gameEntry(server)
        let d = try Daemon.start(server)
        let (game, mpv, name) = try gameBesideMPV(server, d, entry: entry)
        defer { _ = kill(game, SIGKILL) }
        try body(server, d, game, mpv, name)
    }

    @Test(
        "SIGKILL with a game silenced as secondary audio, then audiod --restore: nothing stays muted",
        arguments: ServerKind.tested)
    func restoreDecidesNothing(kind: ServerKind) throws {
        try withGameBesideMPV(kind) { server, d, game, mpv, _ in
            d.child.signal(SIGKILL)
            _ = d.child.wait(timeout: 10)
            d.client.close()
            let out = try server.runStatus([Daemon.executable, "--restore", "--log-level", "info"])
            #expect(out.status == 0, "\(out.output)")
            #expect(
                waitFor(5) { server.playbackStream(pid: game)?.muted == false },
                "the game stays muted after --restore: \(out.output)")
            #expect(server.playbackStream(pid: mpv.pid)?.muted == false)
            // Nothing is left for a later start: the journal says so.
            let again = try server.runStatus([Daemon.executable, "--restore"])
            #expect(
                again.output.contains("no journal") || again.output.contains("restored from the journal; 0"),
                "\(again.output)")
        }
    }

    @Test(
        "SIGTERM with a game silenced as secondary audio and ducked: its mute and volume come back",
        arguments: ServerKind.tested)
    func stopUndoesEveryReason(kind: ServerKind) throws {
        try withGameBesideMPV(kind) { server, d, game, mpv, _ in
            let holder = try server.spawn(["sleep", "3600"])
            _ = try d.client.makeSession(pid: holder.pid, "playback", options: ["duck-others"], activate: true)
            #expect(
                waitFor(10) {
                    guard let g = server.playbackStream(pid: game) else { return false }
                    return g.muted && (g.volume.max() ?? 65536) < 65536
                }, "the game is not silenced and ducked: \(String(describing: server.playbackStream(pid: game)))")
            d.client.close()
            d.child.signal(SIGTERM)
            #expect(d.child.wait(timeout: 10) == 0)
            let g = server.playbackStream(pid: game)
            #expect(g?.muted == false && g?.volume.max() == 65536, "the game after the stop: \(String(describing: g))")
            let m = server.playbackStream(pid: mpv.pid)
            #expect(m?.muted == false && m?.volume.max() == 65536, "mpv after the stop: \(String(describing: m))")
        }
    }

    @Test(
        "a handover (a session that activates 300 ms before its first stream) never lets the game be heard",
        arguments: ServerKind.tested)
    func handoverKeepsTheGameSilent(kind: ServerKind) throws {
        try withGameBesideMPV(kind, streamRestore: false) { server, d, game, _, mpvName in
            defer { d.stop() }
            // The new player: its session is made and activated, and its stream starts 300 ms later.
            let player = try server.spawn([
                "sh", "-c", "sleep 1.3; exec pacat --playback /dev/zero --client-name=newplayer",
            ])
            let path = try d.client.makeSession(pid: player.pid, "playback")
            usleep(1_000_000)
            let activated = d.client.session(path, "SetActive", [.bool(true), .strings([])])
            #expect((try? activated.get()) != nil, "\(activated)")
            var heard: [String] = []
            let started = Date()
            var sawPlayer = false
            while Date().timeIntervalSince(started) < 2.5 {
                let all = (try? server.playbackStreams()) ?? []
                if let g = all.first(where: { $0.pid == UInt32(game) }), !g.muted {
                    heard.append(String(format: "%.0f ms", Date().timeIntervalSince(started) * 1000))
                }
                if all.contains(where: { $0.properties["application.name"] == "newplayer" }) { sawPlayer = true }
            }
            #expect(sawPlayer, "the new player never played")
            #expect(
                heard.isEmpty,
                "the game was heard during the handover in \(heard.count) reads, from \(heard.first ?? "") to \(heard.last ?? "")"
            )
            #expect(players.status(server, mpvName) == "Paused", "mpv was not paused by the new player")
            // The new player ends with notify: mpv is played again, and the game is not heard in between.
            // As `audioctl run` ends: the player exits, then its session ends with notify.
            player.kill()
            _ = d.client.session(path, "SetActive", [.bool(false), .strings(["notify-others-on-deactivation"])])
            heard = []
            let ended = Date()
            while Date().timeIntervalSince(ended) < 1.5 {
                if let g = server.playbackStream(pid: game), !g.muted {
                    heard.append(String(format: "%.0f ms", Date().timeIntervalSince(ended) * 1000))
                }
            }
            #expect(waitFor(10) { players.status(server, mpvName) == "Playing" }, "mpv was not played again")
            #expect(
                heard.isEmpty,
                "the game was heard while mpv resumed in \(heard.count) reads, from \(heard.first ?? "") to \(heard.last ?? "")"
            )
        }
    }
}
