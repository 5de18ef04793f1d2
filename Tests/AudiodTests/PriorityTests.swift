import AudiodTestKit
import DBusService
import Foundation
import Testing

/// audiod's loop thread — where every decision is made and every mute written — runs at the sound server's own
/// priority (nice −11) so that a decision is not queued behind the work that links a new stream
/// (docs/BENCHMARKS.md, "What is heard"). The real daemon, read from /proc. Without the privilege to set it,
/// audiod asks RealtimeKit, which needs the system's polkit and its own system user: here python3-dbusmock speaks
/// RealtimeKit1's interface on a private system bus and renices as the real one does.
@Suite(.serialized)
struct PriorityTests {
    static let rtkit = "org.freedesktop.RealtimeKit1"
    static let rtkitPath = "/org/freedesktop/RealtimeKit1"
    static let mock = "org.freedesktop.DBus.Mock"
    /// audiod without CAP_SYS_NICE: the kernel refuses it a negative nice level (RLIMIT_NICE is 0 here).
    static let unprivileged = ["/usr/bin/setpriv", "--bounding-set=-sys_nice", "--inh-caps=-sys_nice"]

    /// Whether this test process may lower a nice level itself (root, or an RLIMIT_NICE that allows it): what the
    /// direct path needs, and what the mock needs to renice as RealtimeKit would.
    /// Tried on this thread, and put back (raising a nice level again is always allowed).
    static var mayRenice: Bool {
        let which = __priority_which_t(PRIO_PROCESS.rawValue)
        errno = 0
        let now = getpriority(which, 0)
        guard errno == 0, setpriority(which, 0, -11) == 0 else { return false }
        _ = setpriority(which, 0, now)
        return true
    }

    /// Each thread of a process: its name (/proc/PID/task/TID/comm) and nice level (field 19 of its stat).
    static func threads(_ pid: pid_t) -> [(tid: pid_t, name: String, nice: Int32)] {
        let dir = "/proc/\(pid)/task"
        return ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).compactMap { t in
            guard let tid = pid_t(t),
                let stat = try? String(contentsOfFile: "\(dir)/\(t)/stat", encoding: .utf8),
                let name = try? String(contentsOfFile: "\(dir)/\(t)/comm", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return nil }
            // After the name's ")": field 3 (state) onward; nice is field 19.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 16, let nice = Int32(fields[16]) else { return nil }
            return (tid, name.trimmingCharacters(in: .whitespacesAndNewlines), nice)
        }
    }

    static func loopThread(_ pid: pid_t) -> (tid: pid_t, name: String, nice: Int32)? {
        threads(pid).first { $0.name == "MainLoop" }
    }

    static func row(_ d: Daemon) -> [String: DBusValue]? {
        guard case .success(let out) = d.client.manager("ListPlatformSources"), case .array(_, let items)? = out.first
        else { return nil }
        return items.compactMap(\.propertyMap).first { $0["name"]?.stringValue == "RealtimeKit" }
    }

    func writeConfig(_ server: TestServer, _ text: String) throws {
        let dir = "\(server.directory)/home/.config/audiod"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try text.write(toFile: dir + "/audiod.toml", atomically: true, encoding: .utf8)
    }

    @Test(
        "the loop thread runs at nice -11 by default, at the config's nice-level, and again after a reload; the main thread as started",
        .enabled(if: PriorityTests.mayRenice, "needs CAP_SYS_NICE or an RLIMIT_NICE that allows -11"))
    func direct() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        // Set before the name is claimed: by the time audiod answers, it is done.
        let loop = try #require(
            Self.loopThread(d.child.pid), "no MainLoop thread among \(Self.threads(d.child.pid).map(\.name))")
        #expect(loop.nice == -11)
        // Only the loop: the main thread, which waits for signals, stays as started.
        #expect(Self.threads(d.child.pid).first { $0.tid == d.child.pid }?.nice == 0, "\(Self.threads(d.child.pid))")
        #expect(Self.row(d)?["found"]?.boolValue == true)
        #expect(Self.row(d)?["detail"]?.stringValue == "audiod decides at nice -11, set by itself")

        try writeConfig(server, "nice-level = -4\n")
        d.child.signal(SIGHUP)
        #expect(waitFor(5) { Self.loopThread(d.child.pid)?.nice == -4 }, "\(Self.threads(d.child.pid))")
        try writeConfig(server, "nice-level = 0\n")
        d.child.signal(SIGHUP)
        #expect(waitFor(5) { Self.row(d)?["detail"]?.stringValue?.hasPrefix("nice-level = 0") == true })
        // 0 leaves it alone: it stays where the last level put it until audiod starts again.
        #expect(Self.loopThread(d.child.pid)?.nice == -4)
    }

    @Test("nice-level = 0 leaves audiod at the level it was started with")
    func leftAlone() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        try writeConfig(server, "nice-level = 0\n")
        let d = try Daemon.start(server, wrapper: ["/usr/bin/nice", "-n", "3"])
        defer { d.stop() }
        let loop = try #require(Self.loopThread(d.child.pid))
        #expect(loop.nice == 3)
        #expect(Self.row(d)?["detail"]?.stringValue == "nice-level = 0: audiod runs at nice 3, as it was started")
    }

    /// RealtimeKit1 from dbusmock: its `MinNiceLevel`, and the methods that renice a thread as the real one does.
    func realtimeKit(_ server: TestServer, minNice: Int32, withPID: Bool) throws -> (TestBus, Child, BusClient) {
        let system = try TestBus()
        let started: PlatformCallTests.Mock
        do {
            started = try PlatformCallTests().mock(
                server, name: Self.rtkit, path: Self.rtkitPath, address: system.address, system: true)
        } catch {
            system.stop()
            throw error
        }
        let (child, bus) = (started.child, started.bus)
        func call(_ member: String, _ args: [DBusValue]) throws {
            if case .failure(let e) = bus.callAny(destination: Self.rtkit, Self.rtkitPath, Self.mock, member, args) {
                throw TestKitError("\(member): \(e)")
            }
        }
        try call("AddProperty", [.string(Self.rtkit), .string("MinNiceLevel"), .variant(.int32(minNice))])
        // As RealtimeKit refuses a level below its floor.
        let renice = { (thread: String, level: String) in
            "if \(level) < \(minNice): raise dbus.exceptions.DBusException('below MinNiceLevel', name='org.freedesktop.DBus.Error.AccessDenied')\n"
                + "os.setpriority(os.PRIO_PROCESS, \(thread), \(level))"
        }
        if withPID {
            try call(
                "AddMethod",
                [
                    .string(Self.rtkit), .string("MakeThreadHighPriorityWithPID"), .string("tti"), .string(""),
                    .string(renice("args[1]", "args[2]")),
                ])
        }
        try call(
            "AddMethod",
            [
                .string(Self.rtkit), .string("MakeThreadHighPriority"), .string("ti"), .string(""),
                .string(renice("args[0]", "args[1]")),
            ])
        return (system, child, bus)
    }

    /// The arguments of each call of `member` the mock received.
    func calls(_ bus: BusClient, _ member: String) -> [[DBusValue]] {
        guard
            case .success(let out) = bus.callAny(
                destination: Self.rtkit, Self.rtkitPath, Self.mock, "GetMethodCalls", [.string(member)]),
            case .array(_, let items)? = out.first
        else { return [] }
        return items.compactMap { item in
            guard case .structure(let f) = item, f.count == 2, case .array(_, let args) = f[1] else { return nil }
            return args.map { if case .variant(let v) = $0 { v } else { $0 } }
        }
    }

    @Test(
        "without the privilege, RealtimeKit is asked for the loop thread, at no lower than its MinNiceLevel (MakeThreadHighPriorityWithPID, or the older call)",
        .enabled(if: PriorityTests.mayRenice, "the mock renices as RealtimeKit does: needs CAP_SYS_NICE"),
        arguments: [true, false])
    func realtimeKitGrants(withPID: Bool) throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let (system, rtkit, bus) = try realtimeKit(server, minNice: -9, withPID: withPID)
        defer {
            bus.close()
            rtkit.kill()
            system.stop()
        }
        let d = try Daemon.start(
            server, environment: ["DBUS_SYSTEM_BUS_ADDRESS": system.address], wrapper: Self.unprivileged)
        defer { d.stop() }
        #expect(
            waitFor(10) { Self.loopThread(d.child.pid)?.nice == -9 },
            "\(Self.threads(d.child.pid)); \(server.file("rtkit.log"))")
        let tid = try #require(Self.loopThread(d.child.pid)?.tid)
        if withPID {
            #expect(
                calls(bus, "MakeThreadHighPriorityWithPID").map { $0.map(\.description) }
                    == [[DBusValue.uint64(UInt64(d.child.pid)), .uint64(UInt64(tid)), .int32(-9)].map(\.description)])
            #expect(calls(bus, "MakeThreadHighPriority").isEmpty)
        } else {
            #expect(
                calls(bus, "MakeThreadHighPriority").map { $0.map(\.description) }
                    == [[DBusValue.uint64(UInt64(tid)), .int32(-9)].map(\.description)])
        }
        #expect(
            waitFor(5) { Self.row(d)?["detail"]?.stringValue == "audiod decides at nice -9, granted by RealtimeKit" },
            "\(String(describing: Self.row(d)))")
        #expect(Self.row(d)?["found"]?.boolValue == true)
        #expect(server.file("audiod.log").contains("audiod decides at nice -9, granted by RealtimeKit"))
    }

    @Test(
        "refused by the kernel and with no RealtimeKit, audiod serves on at the level it was started with and says why")
    func refusedEverywhere() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let system = try TestBus()
        defer { system.stop() }
        let d = try Daemon.start(
            server, environment: ["DBUS_SYSTEM_BUS_ADDRESS": system.address], wrapper: Self.unprivileged)
        defer { d.stop() }
        #expect(
            waitFor(10) {
                Self.row(d)?["found"]?.boolValue == false
                    && Self.row(d)?["detail"]?.stringValue?.contains("RealtimeKit said") == true
            },
            "\(String(describing: Self.row(d)))")
        let detail = Self.row(d)?["detail"]?.stringValue ?? ""
        #expect(
            detail.hasPrefix(
                "audiod decides at nice 0, not -11: Permission denied, and RealtimeKit said: org.freedesktop.DBus.Error.ServiceUnknown"
            ), "\(detail)")
        #expect(Self.loopThread(d.child.pid)?.nice == 0)
        #expect(server.file("audiod.log").contains("a new call's first period may sound over the music it interrupts"))
        // It still enforces: silent mode silences an ambient app.
        guard
            case .success = d.client.manager(
                "SetApplicationCategory", [.string("noisy-game"), .string("ambient"), .string("default"), .strings([])])
        else {
            Issue.record("the rule was refused")
            return
        }
        let game = try playback(server, name: "noisy-game")
        _ = try server.waitForPlaybackStream(pid: game.pid)
        _ = d.client.call(
            API.managerPath, API.properties.name, "Set",
            [.string(API.manager.name), .string("SilentMode"), .variant(.bool(true))])
        #expect(waitFor(5) { server.playbackStream(pid: game.pid)?.muted == true })
    }
}
