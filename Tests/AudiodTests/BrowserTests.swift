import AppIdentity
import AudiodTestKit
import DBusService
import Foundation
import PulseBackend
import Testing

/// Real headless browsers (docs/TESTING.md): the app people watch picture-in-picture video in. Neither
/// talks to audiod nor honours request-cork; both own an MPRIS player.
@Suite(.serialized)
struct BrowserTests {
    let players = MediaPlayerTests()

    /// A page that autoplays the tone in a loop.
    func page(_ server: TestServer) throws -> String {
        let tone = try players.tone(server)
        let html = "\(server.directory)/page.html"
        try
            "<html><body><audio src=\"\(URL(fileURLWithPath: tone).lastPathComponent)\" autoplay loop></audio></body></html>"
            .write(toFile: html, atomically: true, encoding: .utf8)
        return "file://" + html
    }

    /// The MPRIS name owned by `pid` or by one of its ancestors, and that owner's pid.
    func mprisOwner(_ server: TestServer, of streamPID: UInt32) -> (String, UInt32)? {
        var pid = streamPID
        for _ in 0..<8 {
            if let n = mprisName(server, pid: pid_t(pid)) { return (n, pid) }
            guard let parent = ProcessTable.parent(of: pid), parent > 1 else { return nil }
            pid = parent
        }
        return nil
    }

    /// A browser's first stream. Generous: a cold Firefox under the test command's load once took over 30 s to
    /// open one (CI at c0d4120, PipeWire 1.4, one start of five); audiod plays no part in how soon it comes.
    /// Without one, the error says whether the browser still runs and what it printed.
    func browserStream(_ server: TestServer, name: String, process: Child, log: String) throws -> ObservedStream {
        var found: ObservedStream?
        _ = waitFor(90) {
            // Not audiod's own repair probe, which carries the browser's name when it repairs the browser's key.
            found = (try? server.playbackStreams())?.first {
                $0.applicationName.lowercased().contains(name)
                    && $0.properties["application.process.binary"] != "audiod"
            }
            return found != nil
        }
        guard let found else {
            let state = Glibc.kill(process.pid, 0) == 0 ? "still running" : "gone"
            let streams = ((try? server.playbackStreams()) ?? []).map { "#\($0.index) \($0.applicationName)" }
            throw TestKitError(
                "no \(name) stream within 90 s (pid \(process.pid) \(state); the server's streams: \(streams); \(log): \(server.file(log).suffix(1500)))"
            )
        }
        return found
    }

    func stopsSounding(_ server: TestServer, index: UInt32) -> Bool {
        waitFor(15) {
            guard let s = (try? server.playbackStreams())?.first(where: { $0.index == index }) else { return true }
            return s.muted || s.corked
        }
    }

    @Test(
        "Chromium: its stream (from a child process) joins its player's session; a second player pauses it through MPRIS"
    )
    func chromium() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let url = try page(server)
        let chromium = try server.spawn(
            [
                "chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--autoplay-policy=no-user-gesture-required", "--user-data-dir=\(server.directory)/chromium", url,
            ], log: "chromium.log")
        let s = try browserStream(server, name: "chromium", process: chromium, log: "chromium.log")
        let streamPID = try #require(s.pid)
        var owner: (String, UInt32)?
        #expect(
            waitFor(30) {
                owner = mprisOwner(server, of: streamPID)
                return owner != nil
            }, "no MPRIS player for Chromium")
        let (name, ownerPID) = try #require(owner)
        #expect(ownerPID != streamPID, "Chromium's stream was expected from a child of the MPRIS owner")
        // The stream belongs to the session of the process that owns the player.
        guard case .success(let out) = d.client.manager("GetSessionForProcess", [.uint32(ownerPID)]),
            case .objectPath(let session)? = out.first
        else {
            Issue.record("no session for Chromium's player")
            return
        }
        #expect(
            waitFor(10) {
                d.client.property(session, API.session.name, "Streams") == .array(element: "u", [.uint32(s.index)])
            },
            "Chromium's stream not in its player's session")

        let (_, mpv) = try players.mpv(server)
        #expect(waitFor(15) { players.status(server, name) == "Paused" }, "Chromium not paused through MPRIS")
        #expect(stopsSounding(server, index: s.index), "Chromium's stream still sounds")
        #expect(players.status(server, mpv) == "Playing")
    }

    @Test("Firefox: a second player pauses it through MPRIS and its stream corks")
    func firefox() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let url = try page(server)
        let firefox = try server.spawn(
            ["firefox-esr", "--headless", "--no-remote", "--profile", try firefoxProfile(server, 0), url],
            log: "firefox.log")
        let s: ObservedStream
        do {
            s = try browserStream(server, name: "firefox", process: firefox, log: "firefox.log")
        } catch {
            // The first Firefox of a fresh machine's run once opened no stream in 90 s (CI at b4c7ab4, a run 1.4
            // times slower than usual); the starts after it in the same run all played. What this test checks
            // begins once a stream plays, so a browser that never got that far is started once more, and says so.
            print("firefox: \(error); starting it once more")
            firefox.kill()
            let again = try server.spawn(
                ["firefox-esr", "--headless", "--no-remote", "--profile", try firefoxProfile(server, 1), url],
                log: "firefox-1.log")
            s = try browserStream(server, name: "firefox", process: again, log: "firefox-1.log")
        }
        let streamPID = try #require(s.pid)
        var owner: (String, UInt32)?
        #expect(
            waitFor(30) {
                owner = mprisOwner(server, of: streamPID)
                return owner != nil
            }, "no MPRIS player for Firefox")
        let (name, _) = try #require(owner)
        let (_, mpv) = try players.mpv(server)
        #expect(waitFor(15) { players.status(server, name) == "Paused" }, "Firefox not paused through MPRIS")
        #expect(
            waitFor(15) {
                (try? server.playbackStreams())?.first(where: { $0.index == s.index }).map { $0.corked } ?? true
            }, "Firefox's stream did not cork")
        #expect(players.status(server, mpv) == "Playing")
    }

    /// A fresh Firefox profile that autoplays.
    func firefoxProfile(_ server: TestServer, _ n: Int) throws -> String {
        let profile = "\(server.directory)/firefox-\(n)"
        try FileManager.default.createDirectory(atPath: profile, withIntermediateDirectories: true)
        try """
        user_pref("media.autoplay.default", 0);
        user_pref("media.autoplay.blocking_policy", 0);
        user_pref("browser.shell.checkDefaultBrowser", false);
        """.write(toFile: profile + "/user.js", atomically: true, encoding: .utf8)
        return profile
    }

    /// Firefox once registered its player as `Stopped`, then played, and a playback activation 2.5 s later
    /// neither paused it nor muted its streams (3 of 13 starts on PipeWire). `AUDIOD_FIREFOX_STARTS` sets the
    /// starts per server (scripts/reliability: 30).
    @Test(
        "Firefox started again and again: each time, an activation 2.5 s after it plays silences it",
        arguments: ServerKind.tested)
    func firefoxEveryStart(kind: ServerKind) throws {
        let starts = ReliabilityTests.setting("AUDIOD_FIREFOX_STARTS", 5)
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server, arguments: ["--log-level", "info"])
        defer { d.stop() }
        let holder = try server.spawn(["sleep", "3600"])
        let url = try page(server)
        var silenced = 0
        var slowest = 0.0
        for n in 0..<starts {
            let firefox = try server.spawn(
                ["firefox-esr", "--headless", "--no-remote", "--profile", try firefoxProfile(server, n), url],
                log: "firefox-\(n).log")
            defer {
                firefox.kill()
                _ = waitFor(10) {
                    ((try? server.playbackStreams()) ?? []).allSatisfy {
                        !$0.applicationName.lowercased().contains("firefox")
                    }
                }
            }
            let s = try browserStream(server, name: "firefox", process: firefox, log: "firefox-\(n).log")
            let streamPID = try #require(s.pid)
            #expect(waitFor(60) { mprisOwner(server, of: streamPID) != nil }, "start \(n): no MPRIS player for Firefox")
            usleep(2_500_000)
            let session = try d.client.makeSession(pid: holder.pid, "playback", activate: true)
            let t0 = Date()
            // Every stream Firefox plays on (the browser's and its content process's) stops sounding.
            let quiet = waitFor(15) {
                let mine = ((try? server.playbackStreams()) ?? []).filter {
                    $0.applicationName.lowercased().contains("firefox")
                }
                return mine.allSatisfy { $0.muted || $0.corked }
            }
            if quiet { silenced += 1 }
            slowest = max(slowest, Date().timeIntervalSince(t0))
            let left = ((try? server.playbackStreams()) ?? []).filter {
                $0.applicationName.lowercased().contains("firefox")
            }
            #expect(
                quiet,
                "start \(n): Firefox still sounds after the activation: \(left.map { "#\($0.index) muted=\($0.muted) corked=\($0.corked)" }); audiod: \(server.file("audiod.log").suffix(1500))"
            )
            if !quiet {
                try? server.file("audiod.log").write(
                    toFile: "/tmp/audiod-firefox-\(kind)-\(n)-\(getpid()).log", atomically: true, encoding: .utf8)
            }
            _ = d.client.session(session, "SetActive", [.bool(false), .strings([])])
            _ = d.client.session(session, "Release")
        }
        print(
            "reliability: \(kind): Firefox started \(starts)×: silenced by an activation \(silenced) of \(starts) times; slowest \(String(format: "%.0f", slowest * 1000)) ms"
        )
    }
}
