import AudiodTestKit
import DBusService
import Foundation
import Testing

/// audioctl as a person uses it from a shell: what fails changes nothing, `--pid` captures nothing, and every
/// "why" has an answer. Each command runs in a real bash, as it would be typed: audioctl's parent is that shell.
@Suite(.serialized)
struct AudioctlUsageTests {
    static let audioctl = TestServer.builtProduct("audioctl")

    /// Runs `script` in `bash -c`, with the built audioctl first on PATH; its status and what it printed.
    func shell(_ server: TestServer, _ script: String) throws -> (status: Int32, output: String) {
        let dir = String(Self.audioctl[..<(Self.audioctl.lastIndex(of: "/") ?? Self.audioctl.endIndex)])
        let path = dir + ":" + (server.environment["PATH"] ?? "/usr/bin:/bin")
        // The builtin after it keeps bash from exec'ing a lone command: audioctl's parent is the shell, as when typed.
        return try server.runStatus(["bash", "-c", script + "\nexit $?"], environment: ["PATH": path])
    }

    func sessions(_ server: TestServer) throws -> String { try shell(server, "audioctl sessions --json").output }

    @Test("a command that fails leaves every session as it was, and says how to go on")
    func failuresChangeNothing() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let music = try playback(server, name: "music")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        #expect(waitFor(5) { (try? sessions(server))?.contains("music") == true })
        let before = try sessions(server)

        let failures: [(command: String, status: Int32, says: String)] = [
            ("audioctl set-category playback --mode spoken", 1, "mode 'spoken' is not one of default, voice-chat"),
            (
                "audioctl set-category loud", 1,
                "category 'loud' is not one of ambient, solo-ambient, playback, record, play-and-record"
            ),
            (
                "audioctl set-category ambient --mode voice-chat", 1,
                "mode 'voice-chat' is not accepted by category 'ambient'"
            ),
            (
                "audioctl set-category record --option duck-others", 1,
                "option 'duck-others' is not accepted by category 'record'"
            ),
            ("audioctl set-category playback --option loudly", 1, "'loudly' is not a category option"),
            ("audioctl activate", 1, "has no session made by audioctl; make one with `audioctl set-category CATEGORY`"),
            ("audioctl deactivate", 1, "has no session made by audioctl"),
            ("audioctl release", 1, "has no session made by audioctl"),
            ("audioctl duck-level 2", 1, "DuckLevel 2.0 is out of range: it must be greater than 0 and less than 1"),
            ("audioctl duck-level loud", 1, "duck level 'loud' is not a number"),
            ("audioctl run --category loud -- true", 1, "category 'loud' is not one of"),
            ("audioctl set-category playback --pid \(music.pid)", 1, "use `audioctl set-category CATEGORY --app NAME`"),
            ("audioctl activate --pid \(music.pid)", 1, "--pid acts only on those"),
            ("audioctl set-category", 64, "Missing expected argument"),
            ("audioctl activate extra", 64, "Unexpected argument"),
            ("audioctl status --loud", 64, "Unknown option"),
        ]
        for f in failures {
            let r = try shell(server, f.command)
            #expect(r.status == f.status, "\(f.command): exit \(r.status), expected \(f.status): \(r.output)")
            #expect(r.output.contains(f.says), "\(f.command) said: \(r.output)")
            #expect(try sessions(server) == before, "\(f.command) changed the sessions")
        }
        // The duck level was not changed by the refused ones.
        #expect(d.client.property(API.managerPath, API.manager.name, "DuckLevel") == .double(0.2))
        // And a shell whose command failed plays as an app still: its next sound interrupts nothing.
        let after = try shell(
            server, "audioctl set-category playback --mode spoken; pacat --playback /dev/zero & p=$!; sleep 1; kill $p")
        #expect(after.status == 0)
        #expect(
            server.playbackStream(pid: music.pid)?.muted == false,
            "a failed set-category left a session that interrupted the music")
    }

    @Test("a shell's session: made by set-category (which says what it holds), activated, released")
    func shellSession() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let music = try playback(server, name: "music")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        let a = try d.client.makeSession(pid: music.pid, "playback", activate: true)
        let r = try shell(
            server,
            """
            echo "shell $$"; audioctl set-category playback && audioctl activate && sleep 0.5 && \
            audioctl deactivate --notify-others && audioctl release && audioctl sessions
            """)
        #expect(r.status == 0, "\(r.output)")
        let shellPid =
            r.output.split(separator: "\n").first.map { $0.dropFirst("shell ".count) }.map(String.init) ?? "?"
        #expect(r.output.contains("every program this shell starts plays in it"), "\(r.output)")
        #expect(d.client.waitForSignal(a, "InterruptionBegan").count == 1, "the shell's activation interrupted nothing")
        #expect(d.client.waitForSignal(a, "InterruptionEnded").first?.first == .bool(true), "no should-resume")
        #expect(
            r.output.contains("session made for your shell (pid \(shellPid))")
                || r.output.contains("made for your shell (pid \(shellPid))"), "\(r.output)")
        #expect(
            r.output.split(separator: "\n").filter { $0.hasPrefix("session ") && $0.contains("  pid \(shellPid)  ") }
                .isEmpty,
            "released, yet listed: \(r.output)")
    }

    @Test("release frees an app a shell's session captured: its streams are arbitrated as an app again")
    func releaseFreesACapturedApp() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        // The shell makes its session, then becomes the player (exec keeps its pid): the player is captured.
        let player = try server.spawn([
            "bash", "-c", "\(Self.audioctl) set-category ambient && exec pacat --playback /dev/zero",
        ])
        let s = try server.waitForPlaybackStream(pid: player.pid)
        func owner() -> (path: String, implicit: Bool)? {
            guard case .success(let out) = d.client.manager("ListStreams"), case .array(_, let items)? = out.first
            else { return nil }
            for st in items.compactMap(\.propertyMap) where st["index"]?.uint32Value == s.index {
                guard case .objectPath(let p)? = st["session"], p != "/" else { return nil }
                return (p, d.client.property(p, API.session.name, "Implicit") == .bool(true))
            }
            return nil
        }
        #expect(
            waitFor(5) { owner()?.implicit == false },
            "the shell's session did not take the player: \(String(describing: owner()))")
        _ = try shell(server, "audioctl silent on")
        #expect(
            waitFor(5) { server.playbackStream(pid: player.pid)?.muted == true }, "ambient did not obey silent mode")
        let r = try shell(server, "audioctl release --pid \(player.pid)")
        #expect(r.status == 0, "\(r.output)")
        #expect(waitFor(5) { owner()?.implicit == true }, "the player is still held: \(String(describing: owner()))")
        // As an app, it is playback (mixable): silent mode no longer silences it.
        #expect(
            waitFor(5) { server.playbackStream(pid: player.pid)?.muted == false }, "the released player stayed silenced"
        )
        #expect(try shell(server, "audioctl release --pid \(player.pid)").status == 1)
    }

    @Test(
        "CreateSession refuses a pid hint naming PID 1, a user manager, or an ancestor of audiod; without a hint a shell's session works"
    )
    func noCaptureOfWhatNoAppIs() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        func refusal(_ pid: UInt32) -> DBusError? {
            if case .failure(let e) = d.client.manager("CreateSession", [.properties([("pid", .uint32(pid))])]) {
                return e
            }
            return nil
        }
        let initSystem = refusal(1)
        // PID 1 may belong to another user (root) where the tests run unprivileged: then AccessDenied comes first.
        if getuid() == 0 {
            #expect(initSystem?.name == "org.freedesktop.DBus.Error.InvalidArgs", "\(String(describing: initSystem))")
            #expect(initSystem?.message.contains("PID 1") == true, "\(String(describing: initSystem))")
        } else {
            #expect(initSystem != nil)
        }
        // The test process started audiod: it stands where systemd --user stands for an installed audiod.
        let ancestor = refusal(UInt32(getpid()))
        #expect(ancestor?.name == "org.freedesktop.DBus.Error.InvalidArgs", "\(String(describing: ancestor))")
        #expect(ancestor?.message.contains("ancestor of audiod") == true, "\(String(describing: ancestor))")
        // A process in a user manager's cgroup, as `systemd --user` runs: user@UID.service/init.scope.
        if let (scope, cleanup) = try cgroupScope("user@\(getuid()).service/init.scope", tag: "manager") {
            let manager = try server.spawn(["sleep", "60"])
            try "\(manager.pid)".write(toFile: scope + "/cgroup.procs", atomically: false, encoding: .utf8)
            let e = refusal(UInt32(manager.pid))
            #expect(e?.message.contains("your service manager (systemd --user)") == true, "\(String(describing: e))")
            manager.kill()
            cleanup()
        }
        guard
            case .success(let objects) = d.client.call(
                API.managerPath, "org.freedesktop.DBus.ObjectManager", "GetManagedObjects"),
            case .dict(_, _, let pairs)? = objects.first
        else {
            Issue.record("GetManagedObjects failed")
            return
        }
        #expect(pairs.isEmpty, "a refused CreateSession left a session")
        // A pid of the user's own app is still taken, and so is no hint at all.
        let app = try server.spawn(["sleep", "60"])
        #expect(refusal(UInt32(app.pid)) == nil)
        let own = try shell(server, "audioctl set-category playback")
        #expect(own.status == 0, "\(own.output)")
    }

    @Test(
        "CreateSession refuses the Leader of one of the user's logind sessions (logind from python3-dbusmock on a private system bus)"
    )
    func noCaptureOfASessionLeader() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let system = try TestBus()
        defer { system.stop() }
        let leader = try server.spawn(["sleep", "60"])
        let logind = try server.spawn(
            ["/usr/bin/python3", "-m", "dbusmock", "--system", "-t", "logind"],
            environment: ["DBUS_SYSTEM_BUS_ADDRESS": system.address], log: "logind.log")
        defer { logind.kill() }
        let bus = try BusClient(address: system.address)
        defer { bus.close() }
        #expect(
            waitFor(10) {
                if case .success = bus.callAny(
                    destination: "org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.DBus.Peer",
                    "Ping", [])
                {
                    return true
                }
                return false
            }, "dbusmock's logind did not start: \(server.file("logind.log"))")
        let made = bus.callAny(
            destination: "org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.DBus.Mock", "AddSession",
            [.string("c7"), .string("seat0"), .uint32(getuid()), .string("tester"), .bool(true)])
        guard case .success(let out) = made, let path = out.first?.stringValue else {
            Issue.record("AddSession: \(made)")
            return
        }
        _ = bus.callAny(
            destination: "org.freedesktop.login1", path, "org.freedesktop.DBus.Properties", "Set",
            [.string("org.freedesktop.login1.Session"), .string("Leader"), .variant(.uint32(UInt32(leader.pid)))])
        let d = try Daemon.start(server, environment: ["DBUS_SYSTEM_BUS_ADDRESS": system.address])
        defer { d.stop() }
        // audiod reads the leaders at start; logind announces later sessions, and audiod reads them again.
        _ = bus.callAny(
            destination: "org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.DBus.Mock", "EmitSignal",
            [
                .string("org.freedesktop.login1.Manager"), .string("SessionNew"), .string("so"),
                .array(element: "v", [.variant(.string("c7")), .variant(.objectPath(path))]),
            ])
        var answer: Result<[DBusValue], DBusError>?
        #expect(
            waitFor(10) {
                answer = d.client.manager("CreateSession", [.properties([("pid", .uint32(UInt32(leader.pid)))])])
                if case .failure(let e) = answer { return e.message.contains("leader of one of your login sessions") }
                if case .success(let o) = answer, case .objectPath(let p)? = o.first {
                    _ = d.client.session(p, "Release")
                }
                return false
            }, "the session leader was taken: \(String(describing: answer)) \(server.file("audiod.log").suffix(1500))")
        let other = try server.spawn(["sleep", "60"])
        guard case .success = d.client.manager("CreateSession", [.properties([("pid", .uint32(UInt32(other.pid)))])])
        else {
            Issue.record("a pid that leads nothing was refused")
            return
        }
    }

    @Test("streams says why each stream is quiet: silent mode, an interruption, secondary audio, a route change")
    func reasons() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let module = try server.pactl(["load-module", "module-null-sink", "sink_name=headphones"])
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let chime = try playback(server, name: "chime")
        let podcast = try playback(server, name: "podcast")
        let game = try playback(server, name: "game")
        let radio = try playback(server, name: "radio", extra: ["--device=headphones"])
        for p in [chime, podcast, game, radio] { _ = try server.waitForPlaybackStream(pid: p.pid) }
        _ = try d.client.makeSession(pid: chime.pid, "solo-ambient", activate: false)
        _ = try d.client.makeSession(pid: podcast.pid, "playback", activate: true)
        _ = try d.client.makeSession(pid: game.pid, "ambient", activate: true)
        // The radio plays on the headphones, then they go away.
        #expect(waitFor(5) { (try? shell(server, "audioctl streams").output)?.contains("radio") == true })
        _ = try server.pactl(["unload-module", module])
        _ = try shell(server, "audioctl silent on")
        // A second playback session interrupts the podcast; the podcast's activation had made the game secondary.
        let news = try playback(server, name: "news")
        _ = try server.waitForPlaybackStream(pid: news.pid)
        let n = try d.client.makeSession(pid: news.pid, "playback", activate: true)
        let newsID = String(n.split(separator: "/").last ?? "")
        var text = ""
        func line(_ name: String) -> String {
            text.split(separator: "\n").first { $0.contains("  \(name)  ") }.map(String.init) ?? ""
        }
        let ok = waitFor(10) {
            text = (try? shell(server, "audioctl streams").output) ?? ""
            return line("chime").contains("because: silent mode")
                && line("podcast").contains("because: interrupted by session \(newsID) (playback)")
                && line("game").contains("secondary audio while session \(newsID) plays")
                && line("radio").contains("route change")
        }
        #expect(ok, "streams:\n\(text)\n\(server.file("audiod.log").suffix(2000))")
        #expect(line("news").contains("because") == false, "the playing session has a reason: \(line("news"))")
        let j = try shell(server, "audioctl streams --json").output
        let list = (try? JSONSerialization.jsonObject(with: Data(j.utf8))) as? [[String: Any]] ?? []
        let chimeReasons = list.first { $0["application-name"] as? String == "chime" }?["policy-reasons"] as? [String]
        #expect(chimeReasons == ["silent mode"], "\(j)")
        // The debug log says the same in sentences, not as dumps of the values that carry them.
        let log = server.file("audiod.log")
        // (On a heard stream its first effect is the fade-out's first step; the mute comes at the fade's end.)
        #expect(
            log.contains("silent mode is switched on → set playback stream")
                || log.contains("silent mode is switched on → mute playback stream"), "\(log.suffix(3000))")
        #expect(log.contains("asks to activate → "), "\(log.suffix(3000))")
        for dump in ["SessionView(", "StreamInfo(", "AudioPolicy.", "Effect.", "RequestID("] {
            #expect(!log.contains(dump), "a value dump in the debug log: \(dump)")
        }
    }

    @Test("a call ducks: streams names the ducking session")
    func duckReason() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let music = try playback(server, name: "music")
        let nav = try playback(server, name: "nav")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        _ = try server.waitForPlaybackStream(pid: nav.pid)
        _ = try d.client.makeSession(pid: music.pid, "playback", options: ["mix-with-others"], activate: true)
        let n = try d.client.makeSession(pid: nav.pid, "playback", options: ["duck-others"], activate: true)
        let id = String(n.split(separator: "/").last ?? "")
        var text = ""
        #expect(
            waitFor(5) {
                text = (try? shell(server, "audioctl streams").output) ?? ""
                return text.split(separator: "\n").contains {
                    $0.contains("  music  ") && $0.contains("ducked×0.2")
                        && $0.contains("because: ducked by session \(id)")
                }
            }, "\(text)")
    }

    @Test("a typo'd verb gets the nearest verb, or the list of verbs; exit 64")
    func unknownVerbs() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let silence = try shell(server, "audioctl silence on")
        #expect(silence.status == 64)
        #expect(silence.output.contains("unknown command 'silence'; did you mean 'silent'?"), "\(silence.output)")
        let relase = try shell(server, "audioctl relase")
        #expect(relase.output.contains("did you mean 'release'?"), "\(relase.output)")
        let stop = try shell(server, "audioctl stop")
        #expect(stop.status == 64)
        #expect(stop.output.contains("unknown command 'stop'; the commands are: status, sessions"), "\(stop.output)")
        let busFirst = try shell(server, "audioctl --bus unix:path=/nonexistent statsu")
        #expect(busFirst.output.contains("did you mean 'status'?"), "\(busFirst.output)")
        // The default verb still takes its flags; help and known verbs pass.
        #expect(try shell(server, "audioctl --help").status == 0)
        #expect(try shell(server, "audioctl help silent").output.contains("on, off, toggle or status"))
    }

    @Test("monitor started before audiod waits for it, then prints its events with the time")
    func monitorWaits() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let text = try server.spawn([Self.audioctl, "monitor"], log: "monitor.txt")
        let json = try server.spawn([Self.audioctl, "monitor", "--json"], log: "monitor.json")
        #expect(waitFor(5) { server.file("monitor.txt").contains("audiod is not running; waiting for it to start") })
        usleep(500_000)
        #expect(text.wait(timeout: 0.1) == nil, "monitor exited before audiod started: \(server.file("monitor.txt"))")
        let d = try Daemon.start(server)
        defer { d.stop() }
        let music = try playback(server, name: "music")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        let s = try d.client.makeSession(pid: music.pid, "playback", activate: true)
        let id = String(s.split(separator: "/").last ?? "")
        #expect(
            waitFor(5) { server.file("monitor.txt").contains("session \(id) Active=true") },
            "\(server.file("monitor.txt"))")
        #expect(waitFor(5) { server.file("monitor.json").contains("session-added") })
        text.kill()
        json.kill()
        let lines = server.file("monitor.txt").split(separator: "\n")
        let stamped = lines.allSatisfy {
            $0.range(of: #"^\d\d:\d\d:\d\d\.\d\d\d "#, options: .regularExpression) != nil
        }
        #expect(stamped, "a line without its time: \(lines)")
        #expect(lines.contains { $0.hasSuffix("audiod is back") }, "\(lines)")
        let objects = server.file("monitor.json").split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
        #expect(objects.first?["event"] as? String == "audiod-not-running")
        #expect(objects.contains { $0["event"] as? String == "audiod-started" })
        let added = objects.first { $0["event"] as? String == "session-added" && $0["session"] as? Int == Int(id) }
        #expect((added?["properties"] as? [String: Any])?["application-name"] != nil, "\(String(describing: added))")
        #expect(objects.allSatisfy { ($0["time"] as? String)?.contains("T") == true })
        // One key style: every key of every object is kebab-case.
        func keys(_ o: Any) -> [String] {
            if let d = o as? [String: Any] { return d.keys + d.values.flatMap(keys) }
            if let a = o as? [Any] { return a.flatMap(keys) }
            return []
        }
        let camel = objects.flatMap(keys).filter { $0.contains { $0.isUppercase } }
        #expect(camel.isEmpty, "keys not in kebab-case: \(Set(camel))")
    }

    @Test(
        "reload re-reads the config (a broken file is refused with file and line); duck-level lasts until then; rules say where each comes from"
    )
    func reloadAndRules() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let dir = server.environment["XDG_CONFIG_HOME"]! + "/audiod"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let file = dir + "/audiod.toml"
        try "duck-level = 0.3\n\n[apps.mpv]\ncategory = \"playback\"\n".write(
            toFile: file, atomically: true, encoding: .utf8)
        let d = try Daemon.start(server)
        defer { d.stop() }
        #expect(try shell(server, "audioctl duck-level").output.hasPrefix("0.3 (-10.5 dB)"))
        let set = try shell(server, "audioctl duck-level 0.5")
        #expect(set.status == 0)
        #expect(set.output.contains("until audiod reloads its config"), "\(set.output)")
        #expect(d.client.property(API.managerPath, API.manager.name, "DuckLevel") == .double(0.5))
        // The strong level: audiod checks the pair and names both; status shows both with their dB.
        let above = try shell(server, "audioctl duck-level --strong 0.7")
        #expect(above.status != 0 && above.output.contains("StrongDuckLevel 0.7 would be above DuckLevel 0.5"))
        let range = try shell(server, "audioctl duck-level --strong 0")
        #expect(range.status != 0 && range.output.contains("StrongDuckLevel 0.0 is out of range"), "\(range.output)")
        #expect(try shell(server, "audioctl duck-level --strong 0.05").status == 0)
        #expect(try shell(server, "audioctl duck-level --strong").output.hasPrefix("0.05 (-26.0 dB)"))
        let below = try shell(server, "audioctl duck-level 0.01")
        #expect(below.status != 0 && below.output.contains("DuckLevel 0.01 would be below StrongDuckLevel 0.05"))
        let status = try shell(server, "audioctl status").output
        #expect(status.contains("duck:     0.5 (-6.0 dB), strong 0.05 (-26.0 dB)"), "\(status)")
        #expect(try shell(server, "audioctl set-category ambient --app some-game").status == 0)
        let rules = try shell(server, "audioctl rules").output
        #expect(rules.contains("mpv  playback  from \(file):3"), "\(rules)")
        #expect(rules.contains("some-game  ambient [mix-with-others]  set with audioctl"), "\(rules)")
        let rj =
            (try? JSONSerialization.jsonObject(with: Data(try shell(server, "audioctl rules --json").output.utf8)))
            as? [[String: Any]]
        #expect(rj?.first { $0["application"] as? String == "mpv" }?["line"] as? Int == 3)
        #expect(rj?.first { $0["application"] as? String == "mpv" }?["source"] as? String == "config")
        // The user's own rule for mpv overrides the file's: `rules` says so, and `rules remove` removes the user's.
        #expect(try shell(server, "audioctl set-category ambient --app mpv").status == 0)
        let both = try shell(server, "audioctl rules").output
        #expect(both.contains("mpv  playback  from \(file):3 (overridden by the rule set with audioctl)"), "\(both)")
        #expect(both.contains("mpv  ambient [mix-with-others]  set with audioctl"), "\(both)")
        let removeOwn = try shell(server, "audioctl rules remove mpv")
        #expect(removeOwn.status == 0, "\(removeOwn.output)")
        #expect(
            removeOwn.output.contains("removed: mpv; the rule from \(file):3 applies now"), "\(removeOwn.output)")
        #expect(!(try shell(server, "audioctl rules").output.contains("overridden")))
        // No rule at all: audiod's own answer.
        let none = try shell(server, "audioctl rules remove no-such-app")
        #expect(none.status == 1 && none.output.contains("no-such-app"), "\(none.output)")
        let removeConfig = try shell(server, "audioctl rules remove mpv")
        #expect(removeConfig.status == 1)
        #expect(
            removeConfig.output.contains("comes from \(file):3; change it there, then run `audioctl reload`"),
            "\(removeConfig.output)")

        try "duck-level = 0.3\n[apps.mpv]\ncategory = \"loud\"\n".write(toFile: file, atomically: true, encoding: .utf8)
        let broken = try shell(server, "audioctl reload")
        #expect(broken.status == 1)
        #expect(broken.output.contains("\(file):3: apps.mpv.category"), "\(broken.output)")
        // The refusal is in audiod's log too, as a SIGHUP's is.
        #expect(
            waitFor(5) {
                server.file("audiod.log").contains("Reload: config not reloaded, the settings in force stay")
            },
            "\(server.file("audiod.log").suffix(1000))")
        #expect(
            d.client.property(API.managerPath, API.manager.name, "DuckLevel") == .double(0.5),
            "a broken file changed the settings")
        try "duck-level = 0.25\n".write(toFile: file, atomically: true, encoding: .utf8)
        let good = try shell(server, "audioctl reload")
        #expect(good.status == 0, "\(good.output)")
        #expect(
            waitFor(5) { server.file("audiod.log").contains("Reload: config reloaded from \(file)") },
            "\(server.file("audiod.log").suffix(1000))")
        #expect(d.client.property(API.managerPath, API.manager.name, "DuckLevel") == .double(0.25))
        #expect(!(try shell(server, "audioctl rules").output.contains("mpv")))
    }

    @Test("completions offer the verbs, categories, modes, options and on/off (bash, run)")
    func completions() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let script = try shell(server, "audioctl --generate-completion-script bash")
        #expect(script.status == 0)
        let file = server.directory + "/audioctl.bash"
        try script.output.write(toFile: file, atomically: true, encoding: .utf8)
        func complete(_ words: String) throws -> [String] {
            let r = try shell(
                server,
                """
                source \(file)
                COMP_WORDS=(\(words)); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
                COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}
                # As bash calls it: the command, the word being completed, the word before it.
                _audioctl audioctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
                printf '%s\\n' "${COMPREPLY[@]}"
                """)
            return r.output.split(separator: "\n").map(String.init)
        }
        let verbs = try complete("audioctl ''")
        #expect(verbs.contains("set-category") && verbs.contains("duck-level") && verbs.contains("release"), "\(verbs)")
        #expect(try complete("audioctl set-category ''").contains("play-and-record"))
        #expect(try complete("audioctl set-category playback --mode ''").contains("spoken-audio"))
        #expect(try complete("audioctl set-category playback --option ''").contains("duck-others"))
        #expect(try complete("audioctl silent ''") == ["on", "off", "toggle", "status"])
        #expect(try complete("audioctl run --category ''").contains("ambient"))
    }
}

/// scripts/run on a desktop: the lines it prints for another terminal, pasted into a fresh shell, work.
@Suite(.serialized)
struct RunScriptTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test(
        "scripts/run against a desktop's own sound server: its lines, pasted into another shell, take the README's first steps"
    )
    func pastedLinesWork() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        // A desktop's server is found where libpulse looks by default ($XDG_RUNTIME_DIR/pulse/native), without
        // PULSE_SERVER: the case whose line used to read `PULSE_SERVER=<your default>`.
        // `swift test` holds SwiftPM's lock on .build for the whole run: the run command's `swift build` (a no-op
        // after the test command's release build, same flags) is let past it, as a second terminal's would not be.
        let path = try Self.swiftShim(server)
        let run = try server.spawn(
            ["env", "-u", "PULSE_SERVER", "PATH=\(path)", "bash", Self.repository.path + "/scripts/run"], log: "run.log"
        )
        defer {
            run.signal(SIGTERM)
            _ = run.wait(timeout: 15)
        }
        // The release build is normally there already (the test command builds it with the same flags).
        let ready = waitFor(900) {
            server.file("run.log").contains("In another terminal, paste:")
                && (try? server.runStatus([TestServer.builtProduct("audioctl"), "status"]).status) == 0
        }
        #expect(ready, "scripts/run did not start audiod: \(server.file("run.log").suffix(3000))")
        guard ready else { return }
        let log = server.file("run.log")
        #expect(log.contains("using your sound server"), "\(log)")
        #expect(!log.contains("<"), "a placeholder in the printed lines: \(log)")
        let block = log.components(separatedBy: "In another terminal, paste:\n").last ?? ""
        let lines = block.split(separator: "\n", omittingEmptySubsequences: false).prefix { $0.hasPrefix("  ") }.joined(
            separator: "\n")
        #expect(lines.contains("export DBUS_SESSION_BUS_ADDRESS="), "\(lines)")
        // A fresh terminal: no bus address, no server address, no audioctl on PATH.
        let pasted = try server.runStatus([
            "env", "-u", "DBUS_SESSION_BUS_ADDRESS", "-u", "PULSE_SERVER", "bash", "-c", lines + "\nwait",
        ])
        #expect(pasted.status == 0, "\(pasted.output)")
        #expect(pasted.output.contains("server:   pulseaudio"), "\(pasted.output)")
        #expect(
            pasted.output.contains("because: interrupted by session"),
            "the call did not silence the music: \(pasted.output)")
        #expect(
            !pasted.output.contains("command not found") && !pasted.output.contains("No such file"), "\(pasted.output)")
    }
}

extension RunScriptTests {
    /// A shim `swift` that lets the run command's build past the lock `swift test` holds (see `pastedLinesWork`).
    static func swiftShim(_ server: TestServer) throws -> String {
        let shim = server.directory + "/shim"
        try FileManager.default.createDirectory(atPath: shim, withIntermediateDirectories: true)
        let swift = try TestServer.runCapturing(
            ["sh", "-c", "command -v swift"], environment: ProcessInfo.processInfo.environment
        )
        .trimmingCharacters(in: .whitespacesAndNewlines)
        try "#!/bin/sh\nexec \(swift) \"$@\" --ignore-lock\n".write(
            toFile: shim + "/swift", atomically: true, encoding: .utf8)
        chmod(shim + "/swift", 0o755)
        return shim + ":" + (server.environment["PATH"] ?? "/usr/bin:/bin")
    }

    @Test(
        "scripts/run with no sound server: its private PulseAudio; Ctrl-C restores the streams, prints them, then stops the server"
    )
    func privateServerCtrlC() throws {
        // Nothing where scripts/run looks: a runtime directory of its own, no bus address (it starts a bus of its own
        // there; PulseAudio will not start on a bus where another already owns org.PulseAudio1), no PULSE_SERVER.
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let runtime = server.directory + "/run-runtime"
        try FileManager.default.createDirectory(atPath: runtime, withIntermediateDirectories: true)
        chmod(runtime, 0o700)
        let path = try Self.swiftShim(server)
        let run = try server.spawn(
            [
                "env", "-u", "PULSE_SERVER", "-u", "PULSE_RUNTIME_PATH", "-u", "DBUS_SESSION_BUS_ADDRESS",
                "XDG_RUNTIME_DIR=\(runtime)", "PATH=\(path)", "bash", Self.repository.path + "/scripts/run",
            ], log: "run.log")
        defer {
            // Its EXIT trap stops the private server and bus: a SIGKILL first would leave them running.
            run.signal(SIGTERM)
            if run.wait(timeout: 20) == nil {
                run.signal(SIGKILL)
                _ = run.wait(timeout: 5)
            }
        }
        _ = waitFor(900) {
            server.file("run.log").contains("In another terminal, paste:") || run.wait(timeout: 0) != nil
        }
        let ready = server.file("run.log").contains("In another terminal, paste:")
        #expect(ready, "scripts/run did not start: \(server.file("run.log").suffix(3000))")
        guard ready else { return }
        #expect(server.file("run.log").contains("starting a private headless PulseAudio"))
        #expect(server.file("run.log").contains("no session bus; starting a private one"))
        let privateServer = "unix:\(runtime)/audiod-private-server/native"
        // Music, then a call that silences it.
        let music = try server.spawn([
            "env", "PULSE_SERVER=\(privateServer)", "pacat", "--playback", "/dev/zero", "--client-name=run-music",
            "--property=media.role=music",
        ])
        let query = { (args: [String]) -> String in
            (try? TestServer.runCapturing(
                ["env", "PULSE_SERVER=\(privateServer)", "pactl"] + args, environment: server.environment)) ?? ""
        }
        #expect(waitFor(10) { query(["list", "sink-inputs"]).contains("run-music") })
        let call = try server.spawn([
            "env", "PULSE_SERVER=\(privateServer)", "pacat", "--playback", "/dev/zero", "--client-name=run-call",
            "--property=media.role=phone",
        ])
        #expect(
            waitFor(10) { query(["list", "sink-inputs"]).contains("Mute: yes") }, "the call did not silence the music")
        _ = call
        // Ctrl-C: the music is put back, the streams are printed, then the server goes.
        run.signal(SIGINT)
        #expect(run.wait(timeout: 20) != nil, "scripts/run did not end: \(server.file("run.log").suffix(2000))")
        let log = server.file("run.log")
        #expect(log.contains("The private server's streams as audiod left them:"), "\(log.suffix(2000))")
        #expect(log.contains("run-music: muted no, volume 100%"), "the music was not put back: \(log.suffix(2000))")
        #expect(log.contains("stopping the private sound server and bus"), "\(log.suffix(1000))")
        #expect(waitFor(10) { query(["info"]).isEmpty }, "the private server still answers")
        let bus = "unix:path=\(runtime)/audiod-private-bus"
        #expect(
            waitFor(10) {
                (try? server.runStatus([
                    "dbus-send", "--bus=\(bus)", "--print-reply", "--dest=org.freedesktop.DBus",
                    "/org/freedesktop/DBus",
                    "org.freedesktop.DBus.GetId",
                ]).status) != 0
            }, "the private bus still answers")
        #expect(waitFor(10) { music.wait(timeout: 0) != nil }, "the music's player outlived the private server")
    }
}

/// The man pages: every verb and option audioctl has is in audioctl(1), and each page renders without a warning and
/// has the sections a reader looks for.
struct ManualTests {
    static let man = RunScriptTests.repository.appendingPathComponent("man").path

    @Test(
        "each man page renders cleanly and has EXAMPLES, FILES, ENVIRONMENT, SEE ALSO (and EXIT STATUS for the commands)",
        arguments: ["audioctl.1", "audiod.1", "audiod.toml.5"])
    func sections(page: String) throws {
        let path = Self.man + "/" + page
        let text = try String(contentsOfFile: path, encoding: .utf8)
        var wanted = [
            ".SH NAME", ".SH SYNOPSIS", ".SH DESCRIPTION", ".SH EXAMPLES", ".SH FILES", ".SH ENVIRONMENT",
            ".SH SEE ALSO",
        ]
        if page.hasSuffix(".1") { wanted.append(".SH EXIT STATUS") }
        for section in wanted { #expect(text.contains(section + "\n"), "\(page) has no \(section)") }
        let rendered = try TestServer.runCapturing(
            ["sh", "-c", "MANWIDTH=100 man --warnings -E UTF-8 -l '\(path)' 2>&1 >/dev/null"],
            environment: ProcessInfo.processInfo.environment)
        #expect(rendered.isEmpty, "\(page): \(rendered)")
    }

    @Test("audioctl(1) documents every verb audioctl has")
    func everyVerb() throws {
        let text = try String(contentsOfFile: Self.man + "/audioctl.1", encoding: .utf8)
        let help = try TestServer.runCapturing(
            [AudioctlUsageTests.audioctl, "--help"], environment: ProcessInfo.processInfo.environment)
        let verbs =
            help.components(separatedBy: "SUBCOMMANDS:").last?.split(separator: "\n").compactMap { line -> String? in
                let t = line.drop { $0 == " " }
                guard line.hasPrefix("  "), !line.hasPrefix("   "), let w = t.split(separator: " ").first,
                    w.allSatisfy({ $0.isLowercase || $0 == "-" })
                else { return nil }
                return String(w)
            } ?? []
        #expect(verbs.count >= 14, "\(verbs)")
        for verb in verbs where verb != "help" {
            #expect(
                text.contains(".BR \(verb) ") || text.contains(".B \(verb)\n") || text.contains(".BI \"\(verb) ")
                    || text.contains(".TP\n\\fB\(verb)\\fR"),
                "audioctl.1 does not document \(verb)")
        }
        // Each verb's synopsis is one line of the rendered page (`.TP` takes a single line as the entry's tag: a
        // tag split over two macros rendered as a tag and a stray line).
        let rendered = try TestServer.runCapturing(
            ["sh", "-c", "MANWIDTH=120 man -E UTF-8 -l '\(Self.man)/audioctl.1' 2>/dev/null"],
            environment: ProcessInfo.processInfo.environment)
        for synopsis in ["activate [--pid PID]", "deactivate [--pid PID] [--notify-others]", "release [--pid PID]"] {
            #expect(
                rendered.split(separator: "\n").contains { $0.trimmingCharacters(in: .whitespaces) == synopsis },
                "audioctl(1) does not render \"\(synopsis)\" as one line")
        }
    }
}
