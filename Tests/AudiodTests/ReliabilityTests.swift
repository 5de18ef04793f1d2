import AudiodTestKit
import DBusService
import Foundation
import Testing

/// Issue 7's reliability suite, short version (CI). `scripts/reliability` runs the long version through the
/// environment variables each test names. Every test prints what it tried and what it found.
@Suite(.serialized)
struct ReliabilityTests {
    static func setting(_ name: String, _ short: Int) -> Int {
        Int(ProcessInfo.processInfo.environment[name] ?? "") ?? short
    }

    /// pa_sw_volume_multiply(norm, pa_sw_volume_from_linear(0.2)): a ducked stream at the user's 100 %.
    static let duckedNorm: UInt32 = {
        let v = (cbrt(0.2) * 65536).rounded()
        return UInt32(v)
    }()

    /// A music app in an explicit session that another session interrupted (muted), a second app ducked by a
    /// duck-others session (its user volume at 50 %), and a third the user muted. Returns them once audiod
    /// has applied it all.
    struct Held {
        let interrupted: Child, ducked: Child, userMuted: Child
    }

    func hold(_ server: TestServer, _ d: Daemon, holder: Child) throws -> Held {
        let interrupted = try playback(server, name: "music")
        let ducked = try playback(server, name: "podcast")
        let userMuted = try playback(server, name: "game")
        let s = try server.waitForPlaybackStream(pid: ducked.pid)
        let g = try server.waitForPlaybackStream(pid: userMuted.pid)
        _ = try server.waitForPlaybackStream(pid: interrupted.pid)
        _ = try server.pactl(["set-sink-input-volume", "\(s.index)", "50%"])
        _ = try server.pactl(["set-sink-input-mute", "\(g.index)", "1"])
        _ = try d.client.makeSession(pid: interrupted.pid, "playback", activate: true)
        _ = try d.client.makeSession(pid: holder.pid, "playback", activate: true)
        _ = try d.client.makeSession(pid: holder.pid, "playback", options: ["duck-others"], activate: true)
        let half: UInt32 = 32768
        let duckedHalf = UInt32((Double(half) * Double(Self.duckedNorm) / 65536).rounded())
        #expect(
            waitFor(10) {
                server.playbackStream(pid: interrupted.pid)?.muted == true
                    && server.playbackStream(pid: ducked.pid).map {
                        abs(Int($0.volume.max() ?? 0) - Int(duckedHalf)) <= 2
                    } == true
            }, "audiod did not mute and duck: \(String(describing: try? server.playbackStreams()))")
        return Held(interrupted: interrupted, ducked: ducked, userMuted: userMuted)
    }

    /// Everything audiod held is back to the user's values: unmuted, 50 % and the user's own mute.
    func restored(_ server: TestServer, _ h: Held) -> Bool {
        guard let a = server.playbackStream(pid: h.interrupted.pid), let b = server.playbackStream(pid: h.ducked.pid),
            let c = server.playbackStream(pid: h.userMuted.pid)
        else { return false }
        return !a.muted && (a.volume.max() ?? 0) == 65536 && abs(Int(b.volume.max() ?? 0) - 32768) <= 1 && !b.muted
            && c.muted && (c.volume.max() ?? 0) == 65536
    }

    @Test(
        "audiod SIGKILLed while it holds mutes and ducks: the next start restores every stream within 1 s",
        arguments: ServerKind.tested)
    func killAudiodHoldingPolicy(kind: ServerKind) throws {
        let rounds = Self.setting("AUDIOD_RESTART_ROUNDS", 3)
        let server = try TestServer(kind)
        defer { server.stop() }
        let holder = try server.spawn(["sleep", "3600"])
        var d = try Daemon.start(server)
        var worst = 0.0
        for round in 0..<rounds {
            let h = try hold(server, d, holder: holder)
            d.child.kill()
            d.client.close()
            let started = Date()
            d = try Daemon.start(server, log: "audiod-\(round + 2).log")
            let ok = waitFor(5) { restored(server, h) }
            let took = Date().timeIntervalSince(started)
            worst = max(worst, took)
            #expect(ok, "round \(round): not restored: \(String(describing: try? server.playbackStreams()))")
            #expect(took < 1.0, "round \(round): restored after \(took) s; the target is 1 s")
            for c in [h.interrupted, h.ducked, h.userMuted] { c.kill() }
        }
        d.stop()
        print(
            "reliability: \(kind): SIGKILLed audiod \(rounds)× holding a mute and a duck (user volume 50 %, a user mute); "
                + "worst restore after restart \(String(format: "%.0f", worst * 1000)) ms (target 1,000 ms)")
    }

    @Test(
        "session ids are not reused within a login: after a SIGKILL and a restart new sessions number on, and a stream tagged with the dead run's id joins none of them"
    )
    func sessionIDsNotReused() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        func number(_ path: String) -> UInt64 { path.split(separator: "/").last.flatMap { UInt64($0) } ?? 0 }
        let holder = try server.spawn(["sleep", "3600"])
        var d = try Daemon.start(server)
        let old = try d.client.makeSession(pid: holder.pid, "playback", activate: true)
        d.child.kill()
        d.client.close()
        d = try Daemon.start(server, log: "audiod-2.log")
        defer { d.stop() }
        let owner = try server.spawn(["sleep", "3600"])
        let fresh = try d.client.makeSession(pid: owner.pid, "playback", activate: true)
        #expect(number(fresh) > number(old), "the restart gave out \(fresh) again (the dead run's was \(old))")
        // An app of the dead run still tags its stream with its old id: the tag names no session now, and the
        // stream is judged by its process, as any app's.
        let stale = try playback(server, name: "stale-tagged", extra: ["--property=audiod.session=\(number(old))"])
        var session: String?
        #expect(
            waitFor(10) {
                guard case .success(let out) = d.client.manager("ListStreams"), case .array(_, let items)? = out.first
                else { return false }
                for s in items.compactMap(\.propertyMap) where s["pid"]?.uint32Value == UInt32(stale.pid) {
                    if case .objectPath(let p)? = s["session"] { session = p }
                }
                return session != nil
            }, "the tagged stream was not listed")
        #expect(session != fresh, "a stream tagged with the dead run's id joined the new run's session \(fresh)")
        #expect(session != old)
        let reserved = try String(contentsOfFile: server.directory + "/audiod/session-ids", encoding: .utf8)
        #expect(UInt64(reserved.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0 > number(fresh))
    }

    @Test(
        "the sound server restarted under load: audiod reconnects and re-applies the policy",
        arguments: ServerKind.tested)
    func serverRestartsUnderLoad(kind: ServerKind) throws {
        let rounds = Self.setting("AUDIOD_SERVER_RESTARTS", kind == .pulseaudio ? 10 : 3)
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server, arguments: ["--log-level", "info"])
        defer { d.stop() }
        let holder = try server.spawn(["sleep", "3600"])
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""

        // Load: four clients toggling their sessions as fast as audiod answers, all through the restarts.
        let stop = Switch()
        let calls = Counter()
        let loaders = try (0..<4).map { _ in try BusClient(address: address, recordSignals: false) }
        let paths = try loaders.enumerated().map { i, c in
            try c.makeSession(
                pid: holder.pid, i % 2 == 0 ? "ambient" : "playback", options: i % 2 == 0 ? [] : ["mix-with-others"])
        }
        toggleSessions(Array(zip(loaders, paths)), until: stop, counting: calls)
        defer {
            stop.set(true)
            usleep(200_000)
            for l in loaders { l.close() }
        }

        // The policy to re-apply: a session interrupted by another; its app's stream carries the session's tag.
        let victim = try d.client.makeSession(pid: holder.pid, "playback", activate: true)
        _ = try d.client.makeSession(pid: holder.pid, "playback", activate: true)
        let tag = "--property=audiod.session=\(victim.split(separator: "/").last ?? "")"
        var reconnects: [Double] = []
        var reapplied: [Double] = []
        for round in 0..<rounds {
            let app = try playback(server, name: "music", extra: [tag])
            #expect(
                waitFor(10) { server.playbackStream(pid: app.pid)?.muted == true },
                "round \(round): not muted before the restart")
            server.killServer()
            app.kill()
            #expect(
                waitFor(5) { d.client.property(API.managerPath, API.manager.name, "ServerConnected") == .bool(false) })
            let start = Date()
            try server.startServer()
            let connected = waitFor(10) {
                d.client.property(API.managerPath, API.manager.name, "ServerConnected") == .bool(true)
            }
            let took = Date().timeIntervalSince(start)
            reconnects.append(took)
            // The behaviour, with a generous timeout; how soon is the figure printed below, not a pass/fail line
            // (a loaded CI machine once took 3.1 s).
            #expect(connected, "round \(round): not reconnected within 10 s of the server's start")
            let next = try playback(server, name: "music", extra: [tag])
            let s0 = Date()
            #expect(
                waitFor(10) { server.playbackStream(pid: next.pid)?.muted == true },
                "round \(round): the policy was not re-applied: \(server.file("audiod.log").suffix(1500))")
            reapplied.append(Date().timeIntervalSince(s0))
            next.kill()
        }
        #expect(calls.value > 0, "the load clients made no calls")
        let fmt = { (xs: [Double]) in String(format: "%.0f ms", (xs.max() ?? 0) * 1000) }
        print(
            "reliability: \(kind): \(rounds) server restarts under load (\(calls.value) SetActive calls from 4 clients meanwhile); "
                + "worst reconnect \(fmt(reconnects)) after the server answered (target 2 s); "
                + "worst new stream → policy re-applied \(fmt(reapplied))")
    }
}

/// One thread per (client, session) that toggles the session's `SetActive` as fast as audiod answers, until `stop`.
func toggleSessions(_ sessions: [(BusClient, String)], until stop: Switch, counting calls: Counter) {
    for (c, path) in sessions {
        Thread {
            var on = true
            while !stop.isOn {
                _ = c.session(path, "SetActive", [.bool(on), .strings([])])
                on.toggle()
                calls.add()
            }
        }.start()
    }
}

/// A switch and a counter shared with worker threads.
final class Switch: @unchecked Sendable {
    private let lock = NSLock()
    private var on = false
    var isOn: Bool { lock.withLock { on } }
    func set(_ v: Bool) { lock.withLock { on = v } }
}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    var value: Int { lock.withLock { n } }
    func add(_ k: Int = 1) { lock.withLock { n += k } }
}
