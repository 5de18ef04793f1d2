import AudioPolicy
import AudiodClient
import AudiodTestKit
import DBusService
import Foundation
import PulseBackend
import Synchronization
import Testing

/// The bus boundary, spoken to by a second connection that lies (docs/API.md, "Trust"): forged bus-driver signals,
/// unicast signals, descriptors, floods and another uid. Each against the built audiod on its own private bus and
/// server.
@Suite(.serialized)
struct TrustTests {
    static let servers = ServerKind.tested

    /// audiod's unique name on the bus.
    func uniqueName(of client: BusClient) -> String? {
        guard case .success(let out) = client.callBus("GetNameOwner", [.string(API.busName)]) else { return nil }
        return out.first?.stringValue
    }

    func nameOwnerChanged(_ name: String, old: String, new: String, to destination: String?) -> DBusMessage? {
        guard
            let m = DBusMessage.signal(
                path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged")
        else { return nil }
        m.append([.string(name), .string(old), .string(new)])
        if let destination { m.setDestination(destination) }
        return m
    }

    @Test(
        "a forged NameOwnerChanged (unicast or broadcast) releases nobody's session and resumes nobody",
        arguments: servers)
    func forgedNameOwnerChanged(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        let musicApp = try BusClient(address: address)
        defer { musicApp.close() }
        let videoApp = try BusClient(address: address)
        defer { videoApp.close() }
        let liar = try BusClient(address: address, recordSignals: false)
        defer { liar.close() }

        let music = try playback(server, name: "music")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        let video = try playback(server, name: "video")
        _ = try server.waitForPlaybackStream(pid: video.pid)
        let m = try musicApp.makeSession(pid: music.pid, "playback", activate: true)
        let v = try videoApp.makeSession(pid: video.pid, "playback", activate: true)
        #expect(musicApp.waitForSignal(m, "InterruptionBegan").count == 1)
        #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.muted == true })

        let audiod = try #require(uniqueName(of: liar))
        // "The video app's connection is gone": to audiod alone, then to everyone.
        for destination in [audiod, nil] {
            let forged = try #require(
                nameOwnerChanged(videoApp.uniqueName, old: videoApp.uniqueName, new: "", to: destination))
            liar.send(forged)
        }
        // A later, real call from the liar is answered after audiod read the forgeries (one connection, in order).
        _ = liar.call(API.managerPath, API.peer.name, "Ping")
        usleep(200_000)
        #expect(
            videoApp.property(v, API.session.name, "Active") == .bool(true),
            "the forged signal released the video session")
        #expect(
            musicApp.received(m, "InterruptionEnded").isEmpty, "the interrupted app was told to resume by a forgery")
        #expect(server.playbackStream(pid: music.pid)?.muted == true, "the music was unmuted by a forgery")

        // The real thing still works: the video app leaves, the music app is told it may resume.
        videoApp.close()
        let ended = musicApp.waitForSignal(m, "InterruptionEnded")
        #expect(ended.first?.first == .bool(true), "no InterruptionEnded(true) after the owner really left: \(ended)")
    }

    @Test("2,000 messages carrying file descriptors leave audiod's descriptor count flat", arguments: servers)
    func descriptorFlood(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server, arguments: ["--log-level", "info"])
        defer { d.stop() }
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        let liar = try BusClient(address: address, recordSignals: false)
        defer { liar.close() }
        // The liar also owns an MPRIS name, so that its signals reach the part of audiod that decodes players'.
        let player = try ScriptedPlayer(address: address, name: "liar")
        defer { player.close() }
        let audiod = try #require(uniqueName(of: liar))
        let fd = open("/dev/null", O_RDONLY)
        defer { close(fd) }
        for _ in 0..<100 { _ = liar.call(API.managerPath, API.peer.name, "Ping") }
        usleep(300_000)
        let before = openDescriptors(d.child.pid)

        func propertiesChanged(unicast: Bool) -> DBusMessage? {
            guard
                let s = DBusMessage.signal(
                    path: "/org/mpris/MediaPlayer2", interface: "org.freedesktop.DBus.Properties",
                    member: "PropertiesChanged")
            else { return nil }
            s.append([
                .string("org.mpris.MediaPlayer2.Player"), .properties([("PlaybackStatus", .unixFD(fd))]), .strings([]),
            ])
            if unicast { s.setDestination(audiod) }
            return s
        }
        for i in 0..<1_500 {
            // Broadcast and unicast signals that look like a player's, and forged bus-driver signals with a
            // descriptor appended.
            switch i % 3 {
            case 0: if let s = propertiesChanged(unicast: false) { liar.send(s) }
            case 1: if let s = propertiesChanged(unicast: true) { liar.send(s) }
            default:
                if let s = nameOwnerChanged(":1.9999", old: ":1.9999", new: "", to: audiod) {
                    s.append([.unixFD(fd)])
                    liar.send(s)
                }
            }
        }
        // Method calls whose arguments hold descriptors: audiod decodes these to answer them.
        let answers = liar.callPipelined(500) { i in
            let m = DBusMessage.methodCall(
                destination: API.busName, path: API.managerPath, interface: API.manager.name, member: "CreateSession")
            m?.append([.properties([("pid", .unixFD(fd)), ("application-name", .string("liar-\(i)"))])])
            return m
        }
        let invalid = answers.filter { if case .failure(let e) = $0 { e.name.hasSuffix("InvalidArgs") } else { false } }
        #expect(invalid.count == 500, "calls with a descriptor for a pid: \(answers.prefix(3))")
        #expect(
            waitFor(5) { if case .success = liar.call(API.managerPath, API.peer.name, "Ping") { true } else { false } })
        let after = openDescriptors(d.child.pid)
        print("trust: 2,000 descriptor-bearing messages on \(kind): audiod's descriptors \(before) → \(after)")
        #expect(
            after - before <= 20, "audiod holds \(after - before) more descriptors after 2,000 messages carrying one")
    }

    @Test(
        "a 20,000-session flood is refused with LimitExceeded; other clients are not starved; memory comes back",
        arguments: servers)
    func sessionFlood(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server, arguments: ["--log-level", "info"])
        defer { d.stop() }
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        let other = try BusClient(address: address, recordSignals: false)
        defer { other.close() }
        let music = try playback(server, name: "music")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        let s = try other.makeSession(pid: music.pid, "playback")
        for _ in 0..<200 { _ = other.session(s, "SetActive", [.bool(true), .strings([])]) }
        usleep(300_000)
        let before = processMemory(d.child.pid).rss

        // Another app activates and deactivates its session every 5 ms throughout.
        let worst = Mutex<Double>(0)
        let stop = Atomic<Bool>(false)
        let failures = Atomic<Int>(0)
        let observer = Thread {
            var active = false
            while !stop.load(ordering: .relaxed) {
                active.toggle()
                let t0 = DispatchTime.now().uptimeNanoseconds
                if case .failure = other.session(s, "SetActive", [.bool(active), .strings([])]) {
                    failures.add(1, ordering: .relaxed)
                }
                let ms = Double(DispatchTime.now().uptimeNanoseconds - t0) / 1e6
                worst.withLock { $0 = max($0, ms) }
                usleep(5_000)
            }
        }
        observer.start()
        usleep(1_000_000)
        let quiet = worst.withLock { v in
            defer { v = 0 }
            return v
        }

        let flood = try BusClient(address: address, recordSignals: false)
        let floodStart = DispatchTime.now().uptimeNanoseconds
        var made = 0
        var refused = 0
        var otherErrors: [String] = []
        // 32 calls in flight at a time: as fast as one client can push (20,000 calls in about a second here). With
        // a hundred in flight the flooder, dbus-daemon and audiod saturate both cores and any client's worst call
        // is set by the scheduler (11–24 ms measured), not by audiod.
        for batch in 0..<625 {
            let answers = flood.callPipelined(32) { i in
                let m = DBusMessage.methodCall(
                    destination: API.busName, path: API.managerPath, interface: API.manager.name,
                    member: "CreateSession")
                m?.append([.properties([("application-name", .string("flood-\(batch)-\(i)"))])])
                return m
            }
            for a in answers {
                switch a {
                case .success: made += 1
                case .failure(let e) where e.name == API.errorPrefix + "LimitExceeded": refused += 1
                case .failure(let e): otherErrors.append("\(e)")
                }
            }
        }
        let floodSeconds = Double(DispatchTime.now().uptimeNanoseconds - floodStart) / 1e9
        let duringFlood = worst.withLock { $0 }
        worst.withLock { $0 = 0 }
        // The flood's sessions are released when its connection closes; the other app goes on meanwhile.
        flood.close()
        usleep(1_000_000)
        stop.store(true, ordering: .relaxed)
        while !observer.isFinished { usleep(10_000) }
        let duringRelease = worst.withLock { $0 }
        #expect(waitFor(5) { (try? self.sessionCount(other)) == 1 }, "the flood's sessions were not all released")
        usleep(500_000)
        let after = processMemory(d.child.pid).rss
        print(
            "trust: flood of 20,000 CreateSession on \(kind) in \(String(format: "%.1f", floodSeconds)) s: \(made) made, \(refused) refused; another client's SetActive worst "
                + String(
                    format: "%.1f ms alone, %.1f ms during the flood, %.1f ms during the release", quiet, duringFlood,
                    duringRelease)
                + "; RSS \(before) → \(after) kB")
        #expect(made == 64, "sessions one connection could make: \(made)")
        #expect(refused == 20_000 - 64)
        #expect(otherErrors.isEmpty, "\(otherErrors.prefix(3))")
        #expect(failures.load(ordering: .relaxed) == 0, "the other client's calls failed")
        // The flooder keeps 32 calls in flight, so another client's call waits behind at most 32 refusals: the
        // bound says a refusal stays cheap (about 0.2 ms here: 20,000 in 4 s), not how fast the machine is. On a quiet
        // machine the worst call is 11–26 ms; CI, with the test, dbus-daemon, the server and audiod on two busy
        // cores, measured 40.3 ms once, and 104 ms beside nine random-test processes. 150 ms fails when a refusal
        // costs four times what it does now.
        let fair = 150.0
        #expect(duringFlood < fair, "another client's SetActive took \(duringFlood) ms during the flood")
        #expect(
            duringRelease < fair,
            "another client's SetActive took \(duringRelease) ms while the flood's sessions were released")
        #expect(after - before < 2048, "audiod kept \(after - before) kB after the flood")
    }

    func sessionCount(_ c: BusClient) throws -> Int {
        guard case .success(let out) = c.call(API.managerPath, API.objectManager.name, "GetManagedObjects"),
            case .dict(_, _, let pairs)? = out.first
        else { throw TestKitError("GetManagedObjects failed") }
        return pairs.count
    }

    @Test("names and option lists beyond their bounds are refused with LimitExceeded, and nothing is kept")
    func boundedStrings() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server, arguments: ["--log-level", "info"])
        defer { d.stop() }
        // Over the name bound, under the bound of a call's size.
        let long = String(repeating: "x", count: 1_000)
        let rule = d.client.manager(
            "SetApplicationCategory", [.string(long), .string("ambient"), .string("default"), .strings([])])
        guard case .failure(let e) = rule else {
            Issue.record("a 1 KB rule name was accepted")
            return
        }
        #expect(e.name == API.errorPrefix + "LimitExceeded" && e.message.contains("255"), "\(e)")
        // Over the bound of a call's size: refused before anything is read.
        let huge = d.client.manager(
            "SetApplicationCategory",
            [.string(String(repeating: "x", count: 1_000_000)), .string("ambient"), .string("default"), .strings([])])
        guard case .failure(let hugeError) = huge else {
            Issue.record("a 1 MB rule name was accepted")
            return
        }
        #expect(
            hugeError.name == API.errorPrefix + "LimitExceeded" && hugeError.message.contains("65536"), "\(hugeError)")
        let hint = d.client.manager("CreateSession", [.properties([("application-name", .string(long))])])
        guard case .failure(let h) = hint else {
            Issue.record("a 1 KB application name was accepted")
            return
        }
        #expect(h.name == API.errorPrefix + "LimitExceeded", "\(h)")
        let s = try d.client.makeSession(pid: try server.spawn(["sleep", "60"]).pid, "playback")
        let many = d.client.session(
            s, "SetCategory",
            [.string("playback"), .string("default"), .strings(Array(repeating: "mix-with-others", count: 1_000))])
        guard case .failure(let o) = many else {
            Issue.record("1,000 options were accepted")
            return
        }
        #expect(o.name == API.errorPrefix + "LimitExceeded", "\(o)")
        guard case .success(let rules) = d.client.manager("ListApplicationCategories"),
            case .array(_, let items)? = rules.first
        else {
            Issue.record("ListApplicationCategories failed")
            return
        }
        #expect(items.isEmpty, "a refused rule was kept: \(items.count)")
        // Rules are bounded in all: the 257th new one is refused, a change to an existing one is not.
        let answers = d.client.callPipelined(257) { i in
            let m = DBusMessage.methodCall(
                destination: API.busName, path: API.managerPath, interface: API.manager.name,
                member: "SetApplicationCategory")
            m?.append([.string("app-\(i)"), .string("ambient"), .string("default"), .strings([])])
            return m
        }
        let refused = answers.filter {
            if case .failure(let e) = $0 { e.name.hasSuffix("LimitExceeded") } else { false }
        }
        #expect(refused.count == 1, "\(refused.count) of 257 rules refused")
        let change = d.client.manager(
            "SetApplicationCategory", [.string("app-3"), .string("playback"), .string("default"), .strings([])])
        #expect((try? change.get()) != nil, "changing an existing rule at the limit: \(change)")
    }

    @Test(
        "another uid on the bus may read, but gets AccessDenied for audiod-wide writes",
        .enabled(if: getuid() == 0, "needs root to run a client as another uid"))
    func otherUserIsDenied() throws {
        let server = try TestServer(.pulseaudio, admitOtherUsers: true)
        defer { server.stop() }
        let d = try Daemon.start(server, arguments: ["--log-level", "info"])
        defer { d.stop() }
        let bus = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        // dbus-send prints the error's name and audiod's message, so the refusal is seen to be audiod's.
        func asNobody(_ path: String, _ member: String, _ args: [String]) throws -> (status: Int32, output: String) {
            try server.runStatus(
                [
                    "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "dbus-send", "--bus=\(bus)",
                    "--print-reply", "--dest=\(API.busName)", path, member,
                ] + args)
        }
        let props = API.properties.name
        let read = try asNobody(API.managerPath, "\(props).Get", ["string:\(API.manager.name)", "string:SilentMode"])
        #expect(read.status == 0 && read.output.contains("boolean false"), "another uid could not read: \(read)")
        let writes: [(String, [String])] = [
            ("\(props).Set", ["string:\(API.manager.name)", "string:SilentMode", "variant:boolean:true"]),
            ("\(props).Set", ["string:\(API.manager.name)", "string:DuckLevel", "variant:double:0.5"]),
            ("\(props).Set", ["string:\(API.manager.name)", "string:StrongDuckLevel", "variant:double:0.01"]),
            (
                "\(API.manager.name).SetApplicationCategory",
                ["string:mpv", "string:ambient", "string:default", "array:string:mix-with-others"]
            ),
            ("\(API.manager.name).RemoveApplicationCategory", ["string:mpv"]),
        ]
        for (member, args) in writes {
            let r = try asNobody(API.managerPath, member, args)
            #expect(
                r.status != 0 && r.output.contains("org.freedesktop.DBus.Error.AccessDenied")
                    && r.output.contains("uid 65534 may not"), "\(member) \(args): \(r)")
        }
        #expect(d.client.property(API.managerPath, API.manager.name, "SilentMode") == .bool(false))
        #expect(d.client.property(API.managerPath, API.manager.name, "DuckLevel") == .double(0.2))
        #expect(d.client.property(API.managerPath, API.manager.name, "StrongDuckLevel") == .double(0.0178))
        // audiod's own user still may.
        #expect(
            (try? d.client.call(
                API.managerPath, API.properties.name, "Set",
                [.string(API.manager.name), .string("SilentMode"), .variant(.bool(true))]
            ).get()) != nil)
    }
}

/// Stopping and crashing leave nothing behind; implicit owners are followed to their exit; players are believed
/// with their latest status.
@Suite(.serialized)
struct StopAndRecoveryTests {
    static let servers = ServerKind.tested
    let audiod = TestServer.builtProduct("audiod")

    /// The user unit's `ExecStopPost=` command, with the built audiod in place of `@bindir@/audiod`.
    func unitStopPost() throws -> [String] {
        let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let unit = try String(contentsOf: repo.appendingPathComponent("systemd/audiod.service.in"), encoding: .utf8)
        guard let line = unit.split(separator: "\n").first(where: { $0.hasPrefix("ExecStopPost=") }) else {
            throw TestKitError("the user unit has no ExecStopPost=")
        }
        let argv = line.dropFirst("ExecStopPost=".count).split(separator: " ").map(String.init)
        #expect(argv.first == "@bindir@/audiod", "\(line)")
        return [audiod] + argv.dropFirst()
    }

    @Test(
        "SIGTERM in the middle of a burst of activations and new streams leaves every stream at the user's values",
        arguments: servers)
    func sigtermDuringBurst(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        // Four players; the user muted one and turned another down to half (before audiod runs: a mute of a stream
        // audiod has already muted changes nothing the server can report, POLICY §8).
        var players = try (0..<4).map { try playback(server, name: "player-\($0)", role: "music") }
        var streams = try players.map { try server.waitForPlaybackStream(pid: $0.pid) }
        _ = try server.pactl(["set-sink-input-mute", "\(streams[1].index)", "1"])
        _ = try server.pactl(["set-sink-input-volume", "\(streams[2].index)", "32768"])
        #expect(waitFor(5) { server.playbackStream(pid: players[2].pid)?.volume.allSatisfy { $0 == 32768 } == true })
        #expect(
            waitFor(5) { server.playbackStream(pid: players[1].pid)?.muted == true }, "the user's mute did not take")
        let d = try Daemon.start(server, arguments: ["--log-level", "debug"])

        let stop = Atomic<Bool>(false)
        let pids = players.map(\.pid)
        let burst = Thread {
            guard let c = try? BusClient(address: address, recordSignals: false) else { return }
            var i = 0
            while !stop.load(ordering: .relaxed) {
                let pid = pids[i % pids.count]
                if let s = try? c.makeSession(pid: pid, i % 2 == 0 ? "playback" : "ambient") {
                    _ = c.session(s, "SetActive", [.bool(true), .strings([])])
                    if i % 3 == 0 { _ = c.session(s, "Release") }
                }
                i += 1
            }
            c.close()
        }
        burst.start()
        usleep(400_000)
        // New streams keep coming, a call among them, right through the stop.
        let call = try playback(server, name: "softphone", role: "phone")
        usleep(50_000)
        d.client.close()
        d.child.signal(SIGTERM)
        let late = try playback(server, name: "late-call", role: "phone")
        players.append(late)
        let status = d.child.wait(timeout: 15)
        stop.store(true, ordering: .relaxed)
        while !burst.isFinished { usleep(10_000) }
        #expect(
            status == 0, "audiod exit status \(String(describing: status)): \(server.file("audiod.log").suffix(1500))")
        usleep(300_000)

        streams = try players.map { try server.waitForPlaybackStream(pid: $0.pid) }
        func log(_ index: UInt32) -> String {
            return server.file("audiod.log").split(separator: "\n").filter { $0.contains("\(index)") }.suffix(12)
                .joined(separator: "\n")
        }
        for (i, s) in streams.enumerated() {
            let wantMuted = i == 1
            let wantVolume: UInt32 = i == 2 ? 32768 : 65536
            #expect(
                s.muted == wantMuted,
                "stream \(i) (\(s.applicationName)) muted \(s.muted) after the stop: \(log(s.index))")
            #expect(s.volume.allSatisfy { $0 == wantVolume }, "stream \(i) (\(s.applicationName)) volume \(s.volume)")
        }
        #expect(server.playbackStream(pid: call.pid)?.muted == false)
    }

    @Test(
        "a lifted duck stays in the journal until the server has acknowledged the write that lifts it",
        arguments: servers)
    func liftJournaledAfterItsWrite(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let (music, m, n, _) = try musicDuckedByNavigation(server, d)
        let path = "\(server.directory)/audiod/journal"
        func journaled() -> Bool { ((try? Journal.load(from: path))??.entries ?? []).contains { $0.index == m.index } }
        #expect(waitFor(5) { journaled() }, "the duck is not in the journal")
        // The server reads nothing: the lift's write is sent but not acknowledged. Killed now, audiod must leave a
        // journal that still names the duck, or nothing would undo it if the write never arrived.
        let pids = server.soundServerPIDs
        for p in pids { kill(p, SIGSTOP) }
        _ = d.client.session(n, "SetActive", [.bool(false), .strings([])])
        usleep(300_000)
        let whileStopped = journaled()
        for p in pids { kill(p, SIGCONT) }
        #expect(whileStopped, "the lift was journaled before the server had its write")
        #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.volume == m.volume }, "not restored")
        #expect(waitFor(5) { !journaled() }, "the lift was not journaled once acknowledged")
    }

    @Test(
        "`audiod --restore` judges a stream's volume with the config file's volume-tolerance, as the daemon did",
        arguments: [true, false])
    func restoreUsesConfiguredTolerance(configured: Bool) throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        if configured {
            let dir = "\(server.directory)/home/.config/audiod"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            try "volume-tolerance = 2000\n".write(toFile: "\(dir)/audiod.toml", atomically: true, encoding: .utf8)
        }
        let d = try Daemon.start(server)
        let (music, m, _, ducked) = try musicDuckedByNavigation(server, d)
        // Killed while its client is still connected: closing the client first would end its sessions and lift the
        // duck (and its journal entry) before the kill.
        d.child.kill()
        d.client.close()
        // The server shows the duck 1,000 steps off (as a server that rounds might): audiod's own within 2,000, the
        // user's within the built-in 64.
        let shown = ducked.map { $0 + 1000 }
        _ = try server.pactl(["set-sink-input-volume", "\(m.index)"] + shown.map { "\($0)" })
        #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.volume == shown })
        let r = try server.runStatus(try unitStopPost())
        #expect(r.status == 0, "audiod --restore: \(r)")
        let after = server.playbackStream(pid: music.pid)?.volume
        if configured {
            #expect(
                after == m.volume,
                "the duck was not undone with the configured tolerance: \(String(describing: after)); \(r.output)")
        } else {
            #expect(
                after == shown,
                "a volume 1,000 steps from the duck was taken for audiod's: \(String(describing: after))")
        }
    }

    @Test(
        "SIGKILL, then `audiod --restore` (the unit's ExecStopPost=) leaves nothing muted, without starting audiod",
        arguments: servers)
    func restoreAfterKill(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        let music = try playback(server, name: "music-player", role: "music")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        let phone = try playback(server, name: "softphone", role: "phone")
        _ = try server.waitForPlaybackStream(pid: phone.pid)
        #expect(waitFor(10) { server.playbackStream(pid: music.pid)?.muted == true })
        d.client.close()
        d.child.kill()
        #expect(server.playbackStream(pid: music.pid)?.muted == true)

        // Exactly what the user unit runs after audiod ends.
        let r = try server.runStatus(try unitStopPost())
        #expect(r.status == 0, "audiod --restore: \(r)")
        #expect(server.playbackStream(pid: music.pid)?.muted == false, "still muted after --restore: \(r.output)")
        #expect(!FileManager.default.fileExists(atPath: "\(server.directory)/audiod/journal"), "the journal stayed")
        // It served nothing: the name has no owner.
        let probe = try BusClient(address: server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? "", recordSignals: false)
        defer { probe.close() }
        guard case .success(let owned) = probe.callBus("NameHasOwner", [.string(API.busName)]) else {
            Issue.record("NameHasOwner failed")
            return
        }
        #expect(owned.first == .bool(false), "something owns \(API.busName) after --restore")
        // With nothing recorded it is quick and quiet.
        let again = try server.runStatus([audiod, "--restore"])
        #expect(again.status == 0 && again.output.contains("nothing to restore"), "\(again)")
    }

    /// A music player quits while a call silences it: the server saves the mute for the music role. Returns audiod
    /// (its client closed) and the call, still running.
    func musicQuitsDuringCall(_ server: TestServer) throws -> (Daemon, Child) {
        let d = try Daemon.start(server)
        let music = try playback(server, name: "music-player", role: "music")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        let phone = try playback(server, name: "softphone", role: "phone")
        _ = try server.waitForPlaybackStream(pid: phone.pid)
        #expect(waitFor(10) { server.playbackStream(pid: music.pid)?.muted == true })
        usleep(1_500_000)
        music.kill()
        usleep(2_500_000)
        d.client.close()
        return (d, phone)
    }

    @Test(
        "a policy mute left in the restore database is repaired when audiod stops, and by `audiod --restore` after a kill",
        arguments: servers, ["SIGTERM", "SIGKILL + --restore"])
    func restoreRepairsDatabase(kind: ServerKind, stop: String) throws {
        let server = try TestServer(kind, streamRestore: true)
        defer { server.stop() }
        let (d, phone) = try musicQuitsDuringCall(server)
        var output = ""
        if stop == "SIGTERM" {
            d.child.signal(SIGTERM)
            #expect(d.child.wait(timeout: 10) == 0)
            output = server.file("audiod.log")
            if kind.isPipeWire, output.contains("did not confirm the restore in time") {
                // As below: WirePlumber did not show the write back within the read-back window (seen once in a
                // clean-clone run, six cases of this test side by side); the next start repairs what is unconfirmed.
                let kept = try? Journal.load(from: "\(server.directory)/audiod/journal")
                #expect(kept?.leaks["sink-input-by-media-role:music"] != nil, "an unconfirmed repair left the journal")
            } else {
                #expect(output.contains("1 entry repaired"), "\(output.suffix(1500))")
            }
        } else {
            d.child.kill()
            let r = try server.runStatus(try unitStopPost())
            output = r.output
            #expect(r.status == 0, "audiod --restore: \(r)")
            if kind.isPipeWire, r.output.contains("not confirmed") {
                // WirePlumber did not show the write back within the 3 s read-back (seen twice in full test runs on
                // a loaded machine, never in a run of this test alone): the leak must stay in the journal for the
                // next start to repair.
                let kept = try? Journal.load(from: "\(server.directory)/audiod/journal")
                #expect(
                    kept?.leaks["sink-input-by-media-role:music"] != nil, "an unconfirmed repair left the journal: \(r)"
                )
            } else {
                #expect(r.output.contains("1 restore-database entry repaired"), "audiod --restore: \(r)")
            }
        }
        phone.kill()
        usleep(1_500_000)
        let next = try playback(server, name: "music-player", role: "music")
        let stream = try server.waitForPlaybackStream(pid: next.pid)
        usleep(500_000)
        #expect(
            stream.muted == false && server.playbackStream(pid: next.pid)?.muted == false,
            "the next music stream started with audiod's mute, though no audiod runs: \(output.suffix(1500))")
    }

    @Test(
        "a stream that started with a leaked mute while no audiod ran is put back by `audiod --restore`",
        arguments: servers)
    func restoreCorrectsLiveLeakedStream(kind: ServerKind) throws {
        let server = try TestServer(kind, streamRestore: true)
        defer { server.stop() }
        let (d, phone) = try musicQuitsDuringCall(server)
        d.child.kill()
        phone.kill()
        // No audiod: the next music stream takes what the database holds. On PipeWire (whose entries audiod can only
        // overwrite, at a stop) the killed audiod left the mute there. On PulseAudio audiod rewrote the entry after
        // its mute, as it goes, so usually nothing leaked — but any later change event of the muted stream makes
        // module-stream-restore save its mute again (seen once in a clean-clone run), and a SIGKILL leaves that:
        // `--restore` must then repair it like PipeWire's.
        // Two of them: every live stream of the leaked key is put back, not only the first one listed.
        let leaked = try playback(server, name: "music-player", role: "music")
        let second = try playback(server, name: "radio", role: "music")
        _ = try server.waitForPlaybackStream(pid: leaked.pid)
        _ = try server.waitForPlaybackStream(pid: second.pid)
        let shows = waitFor(3) {
            server.playbackStream(pid: leaked.pid)?.muted == true
                && server.playbackStream(pid: second.pid)?.muted == true
        }
        if kind.isPipeWire {
            #expect(shows, "on \(kind) the leaked mute did not show: the test's premise is gone")
        } else if shows {
            print("trust: on \(kind) the leaked mute showed after the kill; --restore must repair the live streams")
        }
        let r = try server.runStatus(try unitStopPost())
        #expect(r.status == 0, "audiod --restore: \(r)")
        #expect(
            waitFor(5) {
                server.playbackStream(pid: leaked.pid)?.muted == false
                    && server.playbackStream(pid: second.pid)?.muted == false
            }, "--restore left a live stream with the leaked mute: \(r.output.suffix(1500))")
        // And the database holds the user's values again: a stream started now plays.
        leaked.kill()
        second.kill()
        usleep(1_500_000)
        let next = try playback(server, name: "music-player", role: "music")
        _ = try server.waitForPlaybackStream(pid: next.pid)
        usleep(500_000)
        #expect(
            server.playbackStream(pid: next.pid)?.muted == false,
            "the next music stream started muted: \(r.output.suffix(1500))")
    }

    @Test("a call app that exits gives the music back within 200 ms", arguments: servers)
    func implicitOwnerExit(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server, arguments: ["--log-level", "info"])
        defer { d.stop() }
        let music = try playback(server, name: "music-player", role: "music")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        // Its stream goes with it; without following the process, the call would end only after the linger (2 s).
        let phone = try playback(server, name: "softphone", role: "phone")
        #expect(
            waitFor(10) { server.playbackStream(pid: music.pid)?.muted == true }, "the call did not silence the music")
        let started = Date()
        phone.kill()
        let back = waitFor(5) { server.playbackStream(pid: music.pid)?.muted == false }
        let took = Date().timeIntervalSince(started)
        print("trust: call app exited on \(kind): music back after \(String(format: "%.0f", took * 1000)) ms")
        #expect(back && took < 0.2, "music back after \(took) s")
    }

    @Test(
        "a player that changes its status while audiod looks it up is seen with its latest status", arguments: servers)
    func playerStatusDuringLookup(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        // The player's stream plays from this process, which owns the player's name too.
        let tone = try ToneClient(server: server.pulseServer, name: "held-player")
        defer { tone.closeAll() }
        _ = try tone.open(["media.role": "music"])
        usleep(300_000)
        // Asked for its status, it first announces Playing, then answers with the Stopped it had when the question
        // left (its answer lags its own signal).
        let player = try ScriptedPlayer(address: address, name: "held")
        defer { player.close() }
        player.scriptGet(announce: "Playing", answer: "Stopped")
        player.setStatus("Playing", announce: false)
        usleep(500_000)
        // A playback session activates: a player audiod believes Playing is paused over MPRIS.
        let music = try playback(server, name: "other")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        _ = try d.client.makeSession(pid: music.pid, "playback", activate: true)
        #expect(
            waitFor(5) { player.receivedCalls.contains("Pause") },
            "audiod did not pause a player it should believe Playing: \(player.receivedCalls); \(server.file("audiod.log").suffix(1500))"
        )
    }
}

/// A followed MPRIS player that sends a `PropertiesChanged` far larger than any player does is dropped at the first
/// one, with one line, and costs audiod no decoding: it goes on arbitrating meanwhile (issue 43).
@Suite(.serialized)
struct OversizedPlayerTests {
    @Test(
        "a followed player's 32 MB PropertiesChanged drops it with one line, and a game is still silenced by a video meanwhile",
        arguments: ServerKind.tested)
    func oversizedChange(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        let log = { server.file("audiod.log") }
        let player = try ScriptedPlayer(address: address, name: "big")
        defer { player.close() }
        player.setStatus("Playing")
        #expect(
            waitFor(10) { log().contains("name=org.mpris.MediaPlayer2.big") && log().contains("MPRIS player") },
            "the player was never followed: \(log().suffix(1500))")

        player.emitOversizedChange(bytes: 32 << 20)
        #expect(
            waitFor(20) { log().contains("MPRIS player dropped") },
            "a 32 MB PropertiesChanged did not drop the player: \(log().suffix(1500))")
        // Its next one costs a look at its sender only, and says nothing more.
        player.emitOversizedChange(bytes: 32 << 20)
        usleep(500_000)
        let lines = log().split(separator: "\n").filter { $0.contains("MPRIS player dropped") }
        #expect(lines.count == 1, "\(lines)")
        #expect(lines.first?.contains("org.mpris.MediaPlayer2.big") == true, "\(lines)")

        // No longer followed: a playback session that takes the audio does not pause it over MPRIS.
        let other = try playback(server, name: "other")
        _ = try server.waitForPlaybackStream(pid: other.pid)
        _ = try d.client.makeSession(pid: other.pid, "playback", activate: true)
        usleep(1_000_000)
        #expect(!player.receivedCalls.contains("Pause"), "a dropped player was still paused: \(player.receivedCalls)")

        // Arbitration goes on while another 32 MB message is on its way: a video silences a game.
        other.kill()
        let game = try playback(server, name: "game", role: "game")
        _ = try server.waitForPlaybackStream(pid: game.pid)
        #expect(
            waitFor(10) { server.playbackStream(pid: game.pid)?.muted == false },
            "the game was silenced before any video: \(log().suffix(1500))")
        player.emitOversizedChange(bytes: 32 << 20)
        let started = Date()
        let video = try playback(server, name: "video", role: "video")
        #expect(
            waitFor(10) { server.playbackStream(pid: game.pid)?.muted == true },
            "the game was not silenced by the video: \(log().suffix(1500))")
        let took = Date().timeIntervalSince(started)
        _ = video
        print(
            "trust: \(kind): a game silenced \(Int(took * 1000)) ms after a video started behind a 32 MB PropertiesChanged (the video's process start and pactl polling included)"
        )
    }
}

/// A call to audiod larger than any of its calls is refused before anything in it is decoded.
@Suite(.serialized)
struct OversizedCallTests {
    @Test(
        "a CreateSession of a million hints is refused unread with LimitExceeded; another client is answered meanwhile")
    func oversizedCall() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server, arguments: ["--log-level", "info"])
        defer { d.stop() }
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        let liar = try BusClient(address: address, recordSignals: false)
        defer { liar.close() }
        let hints: DBusValue = .properties((0..<1_000_000).map { ("hint-\($0)", .int32(Int32($0))) })
        let started = Date()
        let answer = liar.call(API.managerPath, API.manager.name, "CreateSession", [hints])
        let took = Date().timeIntervalSince(started)
        guard case .failure(let e) = answer else {
            Issue.record("a million hints were taken: \(answer)")
            return
        }
        #expect(e.name == API.errorPrefix + "LimitExceeded", "\(e)")
        #expect(e.message.contains("nothing of them was read"), "\(e)")
        // audiod still answers, and holds nothing of the call.
        #expect(
            waitFor(5) {
                if case .success = d.client.call(API.managerPath, API.peer.name, "Ping") { true } else { false }
            })
        print(
            "trust: a 1,000,000-hint CreateSession refused \(Int(took * 1000)) ms after the call began (the test's own marshaling in a debug build, the bus's transfer and libdbus's validation included)"
        )
    }
}

/// The client library believes audiod's signals only from the connection that owns audiod's name.
@Suite(.serialized)
struct ClientTrustTests {
    @Test("a signal forged by another connection never reaches the client library's subscribers")
    func forgedSignalIgnored() async throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server, arguments: ["--log-level", "info"])
        defer { d.stop() }
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        let client = try AudiodConnection(address: address)
        defer { client.close() }
        let liar = try BusClient(address: address, recordSignals: false)
        defer { liar.close() }
        let signals = client.signals()
        for unicast in [true, false] {
            let s = try #require(
                DBusMessage.signal(
                    path: "/org/audiod/AudioSession1/session/1", interface: API.session.name,
                    member: "InterruptionEnded"))
            s.append([.bool(true), .properties([])])
            if unicast { s.setDestination(client.uniqueName) }
            liar.send(s)
        }
        // Then audiod itself says something: the first signal the client sees must be that one.
        _ = d.client.call(
            API.managerPath, API.properties.name, "Set",
            [.string(API.manager.name), .string("SilentMode"), .variant(.bool(true))])
        var first: AudiodSignal?
        for await s in signals {
            first = s
            break
        }
        #expect(
            first?.member == "PropertiesChanged" && first?.path == API.managerPath,
            "first signal seen: \(String(describing: first))")
    }
}
