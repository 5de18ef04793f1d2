import AudiodTestKit
import DBusService
import Foundation
import Testing

/// SPEC §10: the system bus can drop (a restarted dbus-daemon) and come back. While it is gone nothing audiod learnt
/// there may keep anyone silent: the lock reads unlocked, a modem call ends without resuming anyone (it may still be
/// going on), and audiod follows logind and ModemManager again once the bus is back. The real daemon on both
/// servers; logind and ModemManager are python3-dbusmock on a private system bus that the test kills and restarts.
@Suite(.serialized)
struct SystemBusTests {
    let lock = LockAndSleepTests()
    let calls = PlatformCallTests()
    let players = MediaPlayerTests()

    @Test(
        "the system bus killed while locked and in a modem call: within a second nothing is locked or in a call, the game plays, mpv stays paused; back, both are followed again",
        arguments: ServerKind.tested)
    func systemBusLostAndBack(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let l = try lock.logind(server)
        defer { l.stop() }
        var mm = try calls.modemManager(server, l.system)
        defer { mm.stop() }
        let d = try lock.daemon(server, l)
        defer { d.stop() }
        #expect(
            waitFor(10) { lock.platform(d, "logind").contains("session c1, from User.Display") },
            "\(lock.platform(d, "logind"))")
        let g = try lock.game(server, d)
        defer { g.kill() }
        let (_, music) = try players.mpv(server, heardBy: d)

        l.lock(true)
        #expect(waitFor(10) { lock.screenLocked(d) == true })
        calls.addModemCall(mm, 1, state: 4)
        #expect(waitFor(10) { calls.callState(d) == "active" }, "\(server.file("audiod.log").suffix(1500))")
        #expect(waitFor(10) { players.status(server, music) == "Paused" })
        #expect(waitFor(10) { lock.muted(server, g) == true })

        let lostAt = DispatchTime.now().uptimeNanoseconds
        l.system.killDaemon()
        let clear = waitFor(5) {
            lock.screenLocked(d) == false && calls.callState(d) == "none" && lock.muted(server, g) == false
        }
        let ms = (DispatchTime.now().uptimeNanoseconds - lostAt) / 1_000_000
        print("system bus: \(kind): lost → unlocked, no call, the game audible after \(ms) ms")
        #expect(
            clear,
            "locked \(String(describing: lock.screenLocked(d))), call \(String(describing: calls.callState(d))), game muted \(String(describing: lock.muted(server, g))): \(server.file("audiod.log").suffix(2000))"
        )
        #expect(ms < 1_000, "it took \(ms) ms")
        #expect(lock.platform(d, "logind") == "system bus lost; reconnecting")
        #expect(lock.platform(d, "ModemManager") == "system bus lost; reconnecting")
        // The call may still be going on: nothing was told it may resume, and mpv was not played.
        usleep(300_000)
        #expect(players.status(server, music) == "Paused", "mpv was played when the calls' bus was lost")
        let resumed = d.client.allSignals().filter {
            $0.member == "InterruptionEnded" && $0.args.first?.boolValue == true
        }
        #expect(resumed.isEmpty, "\(resumed.count) session(s) were told they may resume")
        #expect(
            server.file("audiod.log").components(separatedBy: "system bus connection was lost").count == 2,
            "the loss is logged once")

        // The bus comes back with logind (still locked) and the modem's call: audiod follows both again.
        try l.system.start()
        let l2 = try lock.logind(server, on: l.system)
        defer { l2.stop() }
        l2.lock(true)
        mm.stop()
        mm = try calls.modemManager(server, l.system)
        calls.addModemCall(mm, 1, state: 4)
        #expect(
            waitFor(15) { lock.screenLocked(d) == true && calls.callState(d) == "active" },
            "locked \(String(describing: lock.screenLocked(d))), call \(String(describing: calls.callState(d))): \(server.file("audiod.log").suffix(2000))"
        )
        #expect(waitFor(10) { lock.muted(server, g) == true }, "the game plays behind the lock and the call")
        #expect(waitFor(5) { lock.platform(d, "logind").contains("session c1") }, "\(lock.platform(d, "logind"))")
    }

    /// Context switches of every thread of `pid` so far: how often it woke.
    static func wakeups(_ pid: pid_t) -> Int {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        var n = 0
        for t in tasks {
            let status = (try? String(contentsOfFile: "/proc/\(pid)/task/\(t)/status", encoding: .utf8)) ?? ""
            for line in status.split(separator: "\n") where line.contains("ctxt_switches:") {
                n += Int(line.split(separator: ":").last?.trimmingCharacters(in: .whitespaces) ?? "") ?? 0
            }
        }
        return n
    }

    @Test(
        "audiod follows names, never every client: no NameOwnerChanged match without arg0 or arg0namespace, and 500 unrelated clients coming and going do not wake it"
    )
    func matchRulesFollowNames() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let address = "unix:path=\(server.directory)/bus"
        guard
            case .success(let owner) = d.client.callAny(
                destination: "org.freedesktop.DBus", "/org/freedesktop/DBus",
                "org.freedesktop.DBus", "GetNameOwner", [.string(API.busName)]),
            let unique = owner.first?.stringValue
        else { throw TestKitError("audiod does not own its name") }
        guard
            case .success(let out) = d.client.callAny(
                destination: "org.freedesktop.DBus", "/org/freedesktop/DBus",
                "org.freedesktop.DBus.Debug.Stats", "GetAllMatchRules", []),
            case .dict(_, _, let entries)? = out.first
        else { throw TestKitError("the bus daemon has no Debug.Stats") }
        let rules = entries.first { $0.0.stringValue == unique }?.1.stringArray ?? []
        #expect(!rules.isEmpty, "no rules for \(unique) in \(entries.count) connections")
        let catchAll = rules.filter { $0.contains("NameOwnerChanged") && !$0.contains("arg0") }
        #expect(catchAll.isEmpty, "\(catchAll)")
        print(
            "match rules: audiod holds \(rules.count) on the session bus, \(rules.filter { $0.contains("NameOwnerChanged") }.count) of them on NameOwnerChanged, each for one name or namespace"
        )

        usleep(500_000)
        let before = Self.wakeups(d.child.pid)
        for _ in 0..<500 {
            let c = try BusClient(address: address, recordSignals: false)
            c.close()
        }
        usleep(500_000)
        let woke = Self.wakeups(d.child.pid) - before
        print("match rules: 500 unrelated clients came and went; audiod woke \(woke) times")
        // A catch-all match wakes audiod twice per client (1,000 here); timers and the sound server account for a few.
        #expect(woke < 100, "audiod woke \(woke) times for 500 clients that are none of its business")
    }
}
