import AppIdentity
import AudiodTestKit
import DBusService
import Foundation
import Testing

/// The built audioctl against the built audiod on a private bus and server.
@Suite(.serialized)
struct AudioctlTests {
    let audioctl = TestServer.builtProduct("audioctl")

    func ctl(_ server: TestServer, _ args: String...) throws -> (status: Int32, output: String) {
        try server.runStatus([audioctl] + args)
    }

    func json(_ text: String) -> Any? {
        try? JSONSerialization.jsonObject(with: Data(text.utf8))
    }

    @Test("status, sessions and streams, as text and JSON")
    func status() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let music = try playback(server, name: "music-app", role: "music")
        let s = try server.waitForPlaybackStream(pid: music.pid)
        #expect(waitFor(5) { (try? ctl(server, "streams"))?.output.contains("music-app") == true })

        let text = try ctl(server, "status")
        #expect(text.status == 0)
        #expect(text.output.contains("server:   pulseaudio 16.1"), "\(text.output)")
        #expect(text.output.contains("silent:   off"))
        #expect(text.output.contains("playback \(s.index)  music-app  pid \(music.pid)  role music"), "\(text.output)")

        let j = try ctl(server, "status", "--json")
        let o = json(j.output) as? [String: Any]
        #expect(o?["server-connected"] as? Bool == true)
        #expect(o?["silent-mode"] as? Bool == false)
        #expect((o?["streams"] as? [[String: Any]])?.first?["application-name"] as? String == "music-app")
        let sessions = o?["sessions"] as? [[String: Any]]
        #expect(sessions?.first?["implicit"] as? Bool == true, "\(j.output)")

        let sessionsText = try ctl(server, "sessions").output
        #expect(
            sessionsText.contains("music-app  pid \(music.pid)  playback  active implicit  streams \(s.index)"),
            "\(sessionsText)")
        let streamsText = try ctl(server, "streams").output
        #expect(
            streamsText.hasPrefix("playback \(s.index)  music-app  pid \(music.pid)  role music  session "),
            "\(streamsText)")
        #expect(streamsText.contains("audible  on null"), "\(streamsText)")
        let sj = json(try ctl(server, "sessions", "--json").output) as? [[String: Any]]
        #expect(sj?.first?["category"] as? String == "playback")
        #expect(sj?.first?["process-id"] as? Int == Int(music.pid))
        let st = json(try ctl(server, "streams", "--json").output) as? [[String: Any]]
        #expect(st?.first?["index"] as? Int == Int(s.index))
    }

    @Test("an app named with terminal escapes and a newline is printed escaped by audioctl and the log, raw in JSON")
    func escapedAppText() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let raw = "evil\u{1b}[31mred\u{1b}[0m\nsession 99 begins: forged"
        let shown = "evil\\x1b[31mred\\x1b[0m\\nsession 99 begins: forged"
        let app = try playback(server, name: raw)
        _ = try server.waitForPlaybackStream(pid: app.pid)
        #expect(waitFor(5) { (try? ctl(server, "streams"))?.output.contains(shown) == true })
        for verb in ["status", "sessions", "streams", "apps"] {
            let out = try ctl(server, verb).output
            #expect(out.contains(shown), "\(verb): \(out)")
            #expect(!out.contains("\u{1b}"), "\(verb) printed a raw escape: \(out)")
            #expect(!out.contains("\nsession 99"), "\(verb) printed the app's newline: \(out)")
        }
        let st = json(try ctl(server, "streams", "--json").output) as? [[String: Any]]
        #expect(st?.first?["application-name"] as? String == raw, "JSON carries the raw value, in JSON's escapes")
        let log = server.file("audiod.log")
        #expect(log.contains(shown), "the debug log names the app escaped")
        #expect(!log.contains("\u{1b}"), "the log carries a raw escape")
        #expect(!log.contains("\nsession 99 begins"), "the app's newline forged a log line")
    }

    @Test("silent on, status, toggle, off")
    func silent() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        #expect(try ctl(server, "silent").output == "off\n")
        #expect(try ctl(server, "silent", "on").output == "on\n")
        #expect(d.client.property(API.managerPath, API.manager.name, "SilentMode") == .bool(true))
        #expect(try ctl(server, "silent", "status").output == "on\n")
        #expect(try ctl(server, "silent", "toggle").output == "off\n")
        let bad = try ctl(server, "silent", "loud")
        #expect(bad.status == 64)
        #expect(bad.output.contains("'loud' is not one of on, off, toggle, status"))
    }

    @Test("set-category --app makes an app that never talks to audiod obey silent mode; rules lists and removes it")
    func appRule() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let game = try playback(server, name: "some-game")
        _ = try server.waitForPlaybackStream(pid: game.pid)
        let set = try ctl(server, "set-category", "ambient", "--app", "some-game")
        #expect(set.status == 0, "\(set.output)")
        let listed = try ctl(server, "rules").output
        // ambient is mixable: the implied option is listed (docs/API.md: options in force, implied ones included).
        #expect(listed == "some-game  ambient [mix-with-others]  set with audioctl\n", "\(listed)")
        _ = try ctl(server, "silent", "on")
        #expect(waitFor(5) { server.playbackStream(pid: game.pid)?.muted == true }, "the ruled app was not silenced")
        let rj = json(try ctl(server, "rules", "--json").output) as? [[String: Any]]
        #expect(rj?.first?["category"] as? String == "ambient")
        #expect(try ctl(server, "rules", "remove", "some-game").status == 0)
        let again = try ctl(server, "rules", "remove", "some-game")
        #expect(again.status == 1)
        #expect(again.output.contains("no rule"), "\(again.output)")
    }

    @Test("--pid acts on the session audioctl made for that shell: activate, then deactivate with notify")
    func pidSession() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let other = try playback(server, name: "other")
        _ = try server.waitForPlaybackStream(pid: other.pid)
        let a = try d.client.makeSession(pid: other.pid, "playback", activate: true)
        // A shell makes its session, then plays (exec keeps its pid); another terminal drives it with --pid.
        let music = try server.spawn([
            "bash", "-c", "\(audioctl) set-category playback && exec pacat --playback /dev/zero",
        ])
        _ = try server.waitForPlaybackStream(pid: music.pid)
        #expect(try ctl(server, "activate", "--pid", "\(music.pid)").status == 0)
        #expect(waitFor(5) { server.playbackStream(pid: other.pid)?.muted == true }, "activation did not interrupt")
        #expect(try ctl(server, "deactivate", "--pid", "\(music.pid)", "--notify-others").status == 0)
        #expect(d.client.waitForSignal(a, "InterruptionEnded").first?.first == .bool(true))
        let app = try playback(server, name: "app")
        _ = try server.waitForPlaybackStream(pid: app.pid)
        let none = try ctl(server, "deactivate", "--pid", "\(app.pid)")
        #expect(none.status == 1)
        #expect(none.output.contains("--pid acts only on those"), "\(none.output)")
    }

    @Test(
        "output-muted on/off/status on the shell's session, and run --output-muted: the muted command takes the audio from nobody until its stream is unmuted in a mixer"
    )
    func outputMuted() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let music = try playback(server, name: "music", role: "music")
        _ = try server.waitForPlaybackStream(pid: music.pid)

        // The command plays muted: the music plays on.
        let run = try server.spawn(
            [audioctl, "run", "--category", "playback", "--output-muted", "--", "pacat", "--playback", "/dev/zero"],
            log: "run.log")
        defer { run.kill() }
        var feed: ObservedStream?
        #expect(
            waitFor(5) {
                feed = (try? server.playbackStreams())?.first { $0.pid != UInt32(music.pid) }
                return feed?.muted == true
            }, "the command's stream was not muted for it")
        usleep(2_000_000)
        #expect(server.playbackStream(pid: music.pid)?.muted == false, "a muted command silenced the music")
        // Unmuted in a mixer: it takes the audio, and audioctl says so.
        let f = try #require(feed)
        _ = try server.pactl(["set-sink-input-mute", "\(f.index)", "0"])
        #expect(
            waitFor(5) { server.playbackStream(pid: music.pid)?.muted == true }, "the unmuted command took no audio")
        #expect(
            waitFor(5) { server.file("run.log").contains("output was unmuted in a mixer") }, "\(server.file("run.log"))"
        )
        run.signal(SIGTERM)
        _ = run.wait(timeout: 10)

        // The shell's session: muted, it lets the music play; unmuted, it takes the audio.
        let shell = try server.spawn([
            "bash", "-c",
            "\(audioctl) set-category playback && \(audioctl) output-muted on && exec pacat --playback /dev/zero",
        ])
        defer { shell.kill() }
        #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.muted == false }, "the music did not come back")
        #expect(waitFor(5) { server.playbackStream(pid: shell.pid)?.muted == true })
        let status = try ctl(server, "output-muted", "--pid", "\(shell.pid)")
        #expect(
            status.status == 0 && status.output.trimmingCharacters(in: .whitespacesAndNewlines) == "on", "\(status)")
        #expect(try ctl(server, "output-muted", "off", "--pid", "\(shell.pid)").status == 0)
        #expect(waitFor(5) { server.playbackStream(pid: shell.pid)?.muted == false })
        #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.muted == true }, "the unmuted shell took no audio")
        let bad = try ctl(server, "output-muted", "maybe", "--pid", "\(shell.pid)")
        #expect(bad.status == 64 && bad.output.contains("is not one of on, off, status"), "\(bad)")
    }

    @Test("run interrupts another playback app, releases with notify, and exits with the command's status")
    func runCommand() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let music = try playback(server, name: "music")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        let a = try d.client.makeSession(pid: music.pid, "playback", activate: true)
        let started = Date()
        let run = try server.spawn([
            audioctl, "run", "--category", "playback", "--",
            "sh", "-c", "pacat --playback /dev/zero & p=$!; sleep 1.5; kill $p; exit 7",
        ])
        // While it runs, the command's stream (a grandchild of audioctl, tagged through PULSE_PROP) belongs to the
        // session audioctl made for it, named after the command.
        var owner: String?
        #expect(
            waitFor(5) {
                guard case .success(let out) = d.client.manager("ListStreams"), case .array(_, let items)? = out.first
                else { return false }
                for case let s? in items.map(\.propertyMap) where s["pid"]?.uint32Value != UInt32(music.pid) {
                    if case .objectPath(let p)? = s["session"], p != "/" { owner = p }
                }
                return owner != nil
            }, "the command's stream has no session")
        if let owner { #expect(d.client.property(owner, API.session.name, "ApplicationName") == .string("sh")) }
        #expect(
            waitFor(5) { server.playbackStream(pid: music.pid)?.muted == true }, "the playing app was not interrupted")
        let status = run.wait(timeout: 10)
        #expect(
            status.map { ($0 >> 8) & 0xff } == 7,
            "audioctl run did not exit with the command's status: \(String(describing: status))")
        #expect(Date().timeIntervalSince(started) >= 1.5)
        #expect(d.client.waitForSignal(a, "InterruptionBegan").count == 1)
        #expect(
            d.client.waitForSignal(a, "InterruptionEnded").first?.first == .bool(true), "no should-resume after run")
    }

    @Test(
        "run follows a restart: the session is made again, active, the command's stream is the new session's, and it says so once"
    )
    func runFollowsARestart() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        var d = try Daemon.start(server)
        let game = try playback(server, name: "game", role: "game")
        _ = try server.waitForPlaybackStream(pid: game.pid)
        let run = try server.spawn(
            [audioctl, "run", "--category", "playback", "--", "pacat", "--playback", "/dev/zero"], log: "run.log")
        defer { run.kill() }
        func sessionOfCommand(_ d: Daemon) -> String? {
            guard case .success(let out) = d.client.manager("ListStreams"), case .array(_, let items)? = out.first
            else { return nil }
            for case let s? in items.map(\.propertyMap) where s["pid"]?.uint32Value != UInt32(game.pid) {
                if case .objectPath(let p)? = s["session"], p != "/" { return p }
            }
            return nil
        }
        var before: String?
        #expect(
            waitFor(5) {
                before = sessionOfCommand(d)
                return before != nil
            }, "the command's stream has no session")
        #expect(waitFor(5) { server.playbackStream(pid: game.pid)?.muted == true }, "the game plays beside the run")

        d.kill()
        d = try Daemon.start(server, log: "audiod-2.log")
        defer { d.stop() }
        #expect(
            waitFor(10) { server.file("run.log").contains("audiod restarted: session made again") },
            "\(server.file("run.log"))")
        var after: String?
        #expect(
            waitFor(5) {
                after = sessionOfCommand(d)
                return after != nil && after != before
            },
            "the command's stream belongs to \(String(describing: after)), not to a new session (before: \(String(describing: before)))"
        )
        if let after {
            #expect(d.client.property(after, API.session.name, "Active") == .bool(true))
            #expect(d.client.property(after, API.session.name, "ApplicationName") == .string("pacat"))
            #expect(
                server.file("run.log").contains("session made again \(after) (active)"), "\(server.file("run.log"))")
        }
        #expect(waitFor(5) { server.playbackStream(pid: game.pid)?.muted == true }, "the game plays beside the run")
        usleep(500_000)
        #expect(
            server.file("run.log").components(separatedBy: "audiod restarted").count == 2, "\(server.file("run.log"))")
    }

    /// Nothing is left to make the shell's session again after a crash (its `audioctl` exited long ago): audiod
    /// keeps `lifetime=process` sessions beside its journal and makes them again at the next start.
    @Test(
        "a shell's session outlives a restart: made again with its category and mode, active, found by --pid; not once its shell has gone"
    )
    func shellSessionFollowsARestart() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        var d = try Daemon.start(server)
        let game = try playback(server, name: "game", role: "game")
        _ = try server.waitForPlaybackStream(pid: game.pid)
        // The README's way: the shell makes its session, activates it, and plays (exec keeps its pid).
        let shell = try server.spawn([
            "bash", "-c",
            "\(audioctl) set-category playback --mode spoken-audio && \(audioctl) activate && exec pacat --playback /dev/zero",
        ])
        defer { shell.kill() }
        _ = try server.waitForPlaybackStream(pid: shell.pid)
        func find(_ d: Daemon) -> String? {
            guard case .success(let out) = d.client.manager("FindSession", [.uint32(UInt32(shell.pid))]),
                case .objectPath(let p)? = out.first
            else { return nil }
            return p
        }
        let before = try #require(find(d), "the shell has no session")
        #expect(waitFor(5) { d.client.property(before, API.session.name, "Active") == .bool(true) })
        #expect(waitFor(5) { server.playbackStream(pid: game.pid)?.muted == true }, "the game plays beside the shell")

        d.kill()
        let restarted = Date()
        d = try Daemon.start(server, log: "audiod-2.log")
        var after: String?
        #expect(
            waitFor(5) {
                after = find(d)
                return after != nil
            }, "the shell's session was not made again: \(server.file("audiod-2.log"))")
        let took = Date().timeIntervalSince(restarted)
        print("audioctl: the shell's session back \(String(format: "%.0f", took * 1000)) ms after the restart began")
        if let after {
            #expect(after != before, "the new run gave out the dead run's id")
            #expect(d.client.property(after, API.session.name, "Category") == .string("playback"))
            #expect(d.client.property(after, API.session.name, "Mode") == .string("spoken-audio"))
            #expect(
                waitFor(5) { d.client.property(after, API.session.name, "Active") == .bool(true) },
                "made again inactive")
            #expect(
                d.client.property(after, API.session.name, "ProcessID") == .uint32(UInt32(shell.pid)),
                "it holds another process")
        }
        #expect(waitFor(5) { server.playbackStream(pid: game.pid)?.muted == true }, "the game plays beside the shell")
        // Another terminal drives it as before: it is the user's, not the dead connection's.
        #expect(try ctl(server, "deactivate", "--pid", "\(shell.pid)").status == 0)
        if let after {
            #expect(waitFor(5) { d.client.property(after, API.session.name, "Active") == .bool(false) })
        }

        // Its shell gone while audiod was down, the next start makes nothing for it (nor for whatever reuses its pid).
        d.kill()
        shell.kill()
        d = try Daemon.start(server, log: "audiod-3.log")
        defer { d.stop() }
        usleep(300_000)
        #expect(find(d) == nil, "a session was made for a shell that has gone")
        #expect(
            server.file("audiod-3.log").contains("made 0 of 1 process session(s)"), "\(server.file("audiod-3.log"))")
    }

    /// Any program of the user may write the kept-session file: it gets no more than a `CreateSession` would.
    @Test("kept process sessions are believed only for a live process with the same start time, never for pid 1")
    func keptProcessSessionsAreChecked() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let sleeper = try server.spawn(["sleep", "600"])
        defer { sleeper.kill() }
        let start = try #require(ProcessTable.stat(UInt32(sleeper.pid))?.start)
        func kept(_ pid: UInt32, _ start: UInt64, owner: String = ":1.9") -> KeptProcessSession {
            KeptProcessSession(
                pid: pid, start: start, uid: getuid(), owner: owner, applicationName: "sh", category: "playback",
                mode: "default", options: [], handlesSecondaryAudio: false,
                prefersNoInterruptionsFromSystemAlerts: false, active: false)
        }
        let other = try server.spawn(["sleep", "601"])
        defer { other.kill() }
        let otherStart = try #require(ProcessTable.stat(UInt32(other.pid))?.start)
        var loud = kept(UInt32(other.pid), otherStart)
        loud.category = "loud"
        var foreign = kept(UInt32(other.pid), otherStart)
        foreign.uid = getuid() + 1
        let list = [
            kept(1, ProcessTable.stat(1)?.start ?? 0), kept(UInt32(sleeper.pid), start + 1),
            kept(UInt32(sleeper.pid), start, owner: "org.audiod.AudioSession1"), loud, foreign,
            kept(UInt32(sleeper.pid), start),
        ]
        let path = "\(server.directory)/audiod/process-sessions"
        try FileManager.default.createDirectory(
            atPath: "\(server.directory)/audiod", withIntermediateDirectories: true)
        try JSONEncoder().encode(list).write(to: URL(fileURLWithPath: path))
        let d = try Daemon.start(server)
        defer { d.stop() }
        #expect(server.file("audiod.log").contains("made 1 of 6 process session(s)"), "\(server.file("audiod.log"))")
        #expect(server.file("audiod.log").contains("pid 1 is"), "\(server.file("audiod.log"))")
        guard case .success(let found) = d.client.manager("FindSession", [.uint32(UInt32(sleeper.pid))]),
            case .objectPath(let p)? = found.first
        else {
            Issue.record("the one true kept session was not made")
            return
        }
        #expect(d.client.property(p, API.session.name, "Category") == .string("playback"))
        #expect(d.client.property(p, API.session.name, "Active") == .bool(false))
        if case .success = d.client.manager("FindSession", [.uint32(1)]) { Issue.record("a session holds pid 1") }
        if case .success = d.client.manager("FindSession", [.uint32(UInt32(other.pid))]) {
            Issue.record("a session with a refused category, or of another user, was kept")
        }
        // The file now keeps what was made again, and nothing else.
        func pids() -> [UInt32]? {
            FileManager.default.contents(atPath: path).flatMap {
                try? JSONDecoder().decode([KeptProcessSession].self, from: $0).map(\.pid)
            }
        }
        #expect(waitFor(5) { pids() == [UInt32(sleeper.pid)] }, "the file keeps \(String(describing: pids()))")
    }

    @Test("monitor --json prints a scripted scenario's events in order")
    func monitor() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let mon = try server.spawn([audioctl, "monitor", "--json"], log: "monitor.log")
        let text = try server.spawn([audioctl, "monitor"], log: "monitor.txt")
        usleep(300_000)
        let music = try playback(server, name: "music")
        let video = try playback(server, name: "video")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        _ = try server.waitForPlaybackStream(pid: video.pid)
        let a = try d.client.makeSession(pid: music.pid, "playback", activate: true)
        let b = try d.client.makeSession(pid: video.pid, "playback", activate: true)
        _ = d.client.session(b, "SetActive", [.bool(false), .strings(["notify-others-on-deactivation"])])
        _ = d.client.waitForSignal(a, "InterruptionEnded")
        usleep(300_000)
        mon.kill()
        text.kill()
        let lines = server.file("monitor.log").split(separator: "\n").compactMap { json(String($0)) as? [String: Any] }
        let events = lines.map { "\($0["event"] ?? "")@\($0["session"] as? Int ?? 0)" }
        let aid = String(a.split(separator: "/").last ?? "")
        let bid = String(b.split(separator: "/").last ?? "")
        func at(_ e: String) -> Int? { events.firstIndex(of: e) }
        let addedA = lines.firstIndex { $0["event"] as? String == "session-added" && $0["path"] as? String == a }
        let began = at("interruption-began@\(aid)")
        let ended = at("interruption-ended@\(aid)")
        #expect(addedA != nil && began != nil && ended != nil, "events: \(events)")
        if let addedA, let began, let ended { #expect(addedA < began && began < ended, "order: \(events)") }
        #expect(events.contains("properties-changed@\(bid)"))
        #expect(
            lines.first { $0["event"] as? String == "interruption-began" && $0["session"] as? Int == Int(aid) }?[
                "interrupter"] as? Int == Int(bid))
        let human = server.file("monitor.txt")
        #expect(human.contains("session \(aid) interruption began: default by session \(bid)"), "\(human)")
        #expect(human.contains("session \(aid) interruption ended: should resume"))
    }

    @Test("one version: audiod --version, audioctl --version and Version on the bus say the same")
    func oneVersion() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let daemon = try server.runStatus([TestServer.builtProduct("audiod"), "--version"])
        let ctl = try ctl(server, "--version")
        let bus = d.client.property(API.managerPath, API.manager.name, "Version")?.stringValue
        #expect(daemon.status == 0 && ctl.status == 0)
        #expect(
            !daemon.output.isEmpty && daemon.output == ctl.output && daemon.output == (bus ?? "") + "\n",
            "audiod \(daemon.output), audioctl \(ctl.output), bus \(bus ?? "none")")
    }

    @Test("bad input and a missing audiod give the documented message and exit status")
    func errors() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        // A value audiod refuses exits 1 with audiod's words, before audiod is even asked (it is not running).
        let bad = try ctl(server, "set-category", "loud")
        #expect(bad.status == 1)
        #expect(
            bad.output.contains(
                "category 'loud' is not one of ambient, solo-ambient, playback, record, play-and-record"))
        let notRunning = try ctl(server, "status")
        #expect(notRunning.status == 2)
        #expect(notRunning.output.contains("audiod is not running"), "\(notRunning.output)")
        #expect(notRunning.output.contains("systemctl --user start audiod"))
        let d = try Daemon.start(server)
        defer { d.stop() }
        let mode = try ctl(server, "set-category", "playback", "--mode", "karaoke", "--pid", "\(getpid())")
        #expect(mode.status == 1)
        #expect(mode.output.contains("mode 'karaoke' is not one of default, voice-chat"), "\(mode.output)")
        let both = try ctl(server, "set-category", "playback", "--app", "x", "--pid", "1")
        #expect(both.status == 64)
    }
}

/// `audioctl run` starts its command as a shell would and stays for it: signal mask and dispositions, signals
/// passed on, the shell's exit statuses.
@Suite(.serialized)
struct AudioctlRunTests {
    let audioctl = TestServer.builtProduct("audioctl")

    /// A music app with an active playback session: what `audioctl run` interrupts and must give back.
    func musicSession(_ server: TestServer, _ d: Daemon) throws -> (Child, String) {
        let music = try playback(server, name: "music")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        return (music, try d.client.makeSession(pid: music.pid, "playback", activate: true))
    }

    @Test(
        "the command starts with nothing blocked or ignored, and a kill inside it ends the run with 143 and a release with notify"
    )
    func signalsOfTheCommand() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let (_, a) = try musicSession(server, d)
        let probe = ["grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"]
        let masks = try server.runStatus([audioctl, "run", "--category", "playback", "--"] + probe)
        // What a command started directly gets here (glibc's own signals 32 and 33 may be ignored by whoever started
        // the test runner; no program can reset those).
        let direct = try server.runStatus(probe)
        #expect(masks.status == 0, "\(masks)")
        #expect(
            masks.output.contains("SigBlk:\t0000000000000000") && masks.output == direct.output,
            "the command inherited blocked or ignored signals: \(masks.output), started directly: \(direct.output)")
        #expect(d.client.waitForSignal(a, "InterruptionEnded").count == 1)
        _ = d.client.session(a, "SetActive", [.bool(true), .strings([])])

        // A command that plays, kills its own player: a command that plays and kills its own player, then dies of SIGTERM.
        let r = try server.runStatus([
            audioctl, "run", "--category", "playback", "--", "sh", "-c",
            "pacat --playback /dev/zero & P=$!; sleep 1.5; kill $P; wait $P; kill -TERM $$",
        ])
        #expect(r.status == 143, "audioctl run exit status \(r.status): \(r.output)")
        #expect(
            d.client.waitForSignal(a, "InterruptionEnded", count: 2).count == 2, "no release with notify after the kill"
        )
        #expect(d.client.received(a, "InterruptionEnded").last?.first == .bool(true))
    }

    @Test("SIGINT to audioctl's process group leaves no process and no session behind, and the interrupted app resumes")
    func interruptedByCtrlC() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let (music, a) = try musicSession(server, d)
        // setsid: audioctl leads a process group of its own, as a shell's job would.
        let run = try server.spawn(["setsid", audioctl, "run", "--category", "playback", "--", "sleep", "30"])
        #expect(
            waitFor(10) { server.playbackStream(pid: music.pid)?.muted == true }, "the run did not interrupt the music")
        // The command is running once audioctl has a child.
        func hasChild() -> Bool {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(run.pid)/task")) ?? []
            return tasks.contains { t in
                !((try? String(contentsOfFile: "/proc/\(run.pid)/task/\(t)/children", encoding: .utf8)) ?? "").isEmpty
            }
        }
        #expect(waitFor(5) { hasChild() }, "audioctl did not start the command")
        kill(-run.pid, SIGINT)
        let status = run.wait(timeout: 10)
        #expect(status.map { ($0 >> 8) & 0xff } == 130, "audioctl exit status \(String(describing: status))")
        #expect(kill(-run.pid, 0) != 0, "a process of the run's group is still alive")
        #expect(
            d.client.waitForSignal(a, "InterruptionEnded").first?.first == .bool(true),
            "the music was not told to resume")
        guard case .success(let out) = d.client.call(API.managerPath, API.objectManager.name, "GetManagedObjects"),
            case .dict(_, _, let pairs)? = out.first
        else {
            Issue.record("GetManagedObjects failed")
            return
        }
        #expect(pairs.map(\.0) == [.objectPath(a)], "sessions left: \(pairs.map(\.0))")
    }

    @Test(
        "a command that cannot be found exits 127, one that cannot be executed 126, with a shell's message and no session"
    )
    func commandNotRunnable() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let missing = try server.runStatus([audioctl, "run", "--category", "playback", "--", "no-such-command-here"])
        #expect(
            missing.status == 127 && missing.output.contains("no-such-command-here: command not found"), "\(missing)")
        let file = "\(server.directory)/not-executable"
        try "echo hi\n".write(toFile: file, atomically: true, encoding: .utf8)
        let denied = try server.runStatus([audioctl, "run", "--category", "playback", "--", file])
        #expect(denied.status == 126 && denied.output.contains("Permission denied"), "\(denied)")
        #expect(!denied.output.contains("refused") && !missing.output.contains("refused"))
        #expect(
            d.client.received(API.managerPath, "InterfacesAdded").isEmpty,
            "a session was made for a command that never ran")
    }

    @Test("monitor says when audiod goes away and comes back, and exits non-zero when the bus dies")
    func monitorFollowsAudiod() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        let monitor = try server.spawn([audioctl, "monitor"], log: "monitor.log")
        // It is listening once it has seen something audiod said.
        _ = waitFor(5) {
            _ = d.client.call(
                API.managerPath, API.properties.name, "Set",
                [
                    .string(API.manager.name), .string("SilentMode"),
                    .variant(.bool(!server.file("monitor.log").isEmpty)),
                ]
            )
            return server.file("monitor.log").contains("SilentMode")
        }
        d.stop()
        #expect(
            waitFor(10) { server.file("monitor.log").contains("audiod went away") },
            "monitor: \(server.file("monitor.log"))")
        #expect(monitor.wait(timeout: 0.5) == nil, "monitor exited when audiod went away")
        let again = try Daemon.start(server, log: "audiod-2.log")
        #expect(
            waitFor(10) { server.file("monitor.log").contains("audiod is back") },
            "monitor: \(server.file("monitor.log"))")
        _ = again.client.call(
            API.managerPath, API.properties.name, "Set",
            [.string(API.manager.name), .string("SilentMode"), .variant(.bool(true))])
        #expect(
            waitFor(5) {
                server.file("monitor.log").components(separatedBy: "audiod is back").last?.contains("SilentMode")
                    == true
            },
            "monitor did not follow the new audiod: \(server.file("monitor.log"))")
        again.client.close()
        server.killBus()
        let status = monitor.wait(timeout: 10)
        #expect(status.map { ($0 >> 8) & 0xff } == 2, "monitor exit status \(String(describing: status))")
        #expect(server.file("monitor.log").contains("the session bus went away"), "\(server.file("monitor.log"))")
        again.child.kill()
    }
}
