import AudiodTestKit
import DBusService
import Foundation
import Testing

/// SPEC §10's lock screen, sleep and ring/silent profile against the real daemon, real players and both sound
/// servers. logind needs PID 1: it is python3-dbusmock's `logind` template from Debian on a private system bus,
/// driven as logind behaves (`LockedHint` with `PropertiesChanged`, `PrepareForSleep` around sleep). feedbackd is the
/// real one from Debian's package, on the test's own session bus.
@Suite(.serialized)
struct LockAndSleepTests {
    let players = MediaPlayerTests()
    static let login1 = "org.freedesktop.login1"
    static let managerPath = "/org/freedesktop/login1"
    static let mock = "org.freedesktop.DBus.Mock"

    /// A logind on a private system bus with one graphical session of this user.
    struct Logind {
        let system: TestBus
        let child: Child
        let bus: BusClient
        let session: String

        func call(_ path: String, _ interface: String, _ member: String, _ args: [DBusValue]) -> Result<
            [DBusValue], DBusError
        > {
            bus.callAny(destination: LockAndSleepTests.login1, path, interface, member, args)
        }

        /// As logind does when the screen locker says so: the property, and `PropertiesChanged`.
        func lock(_ on: Bool) {
            let r = call(session, "org.freedesktop.login1.Session", "SetLockedHint", [.bool(on)])
            if case .failure(let e) = r { Issue.record("SetLockedHint: \(e)") }
        }

        func prepareForSleep(_ going: Bool) {
            let r = call(
                LockAndSleepTests.managerPath, LockAndSleepTests.mock, "EmitSignal",
                [
                    .string("org.freedesktop.login1.Manager"), .string("PrepareForSleep"), .string("b"),
                    .array(element: "v", [.variant(.bool(going))]),
                ])
            if case .failure(let e) = r { Issue.record("PrepareForSleep: \(e)") }
        }

        /// Who holds an inhibitor now (`ListInhibitors`: the template drops one when its descriptor is closed).
        func inhibitors() -> [String] {
            guard
                case .success(let out) = call(
                    LockAndSleepTests.managerPath, "org.freedesktop.login1.Manager", "ListInhibitors", []),
                case .array(_, let items)? = out.first
            else { return [] }
            return items.compactMap {
                if case .structure(let f) = $0, f.count > 3 {
                    return "\(f[1].stringValue ?? "?"):\(f[0].stringValue ?? "?"):\(f[3].stringValue ?? "?")"
                } else {
                    return nil
                }
            }
        }

        func stop() {
            bus.close()
            child.kill()
            system.stop()
        }
    }

    /// logind with session `c1` of this user; `display`: its `User.Display` names the session (else it is empty).
    func logind(_ server: TestServer, display: Bool = true, on bus: TestBus? = nil) throws -> Logind {
        let system = try bus ?? TestBus()
        let child = try server.spawn(
            ["/usr/bin/python3", "-m", "dbusmock", "--system", "-t", "logind"],
            environment: ["DBUS_SYSTEM_BUS_ADDRESS": system.address], log: "logind.log")
        let bus = try BusClient(address: system.address)
        guard
            waitFor(
                10,
                {
                    if case .success = bus.callAny(
                        destination: Self.login1, Self.managerPath, "org.freedesktop.DBus.Peer", "Ping", [])
                    {
                        return true
                    }
                    return false
                })
        else {
            bus.close()
            child.kill()
            system.stop()
            throw TestKitError("dbusmock's logind did not start: \(server.file("logind.log"))")
        }
        guard
            case .success(let out) = bus.callAny(
                destination: Self.login1, Self.managerPath, Self.mock, "AddSession",
                [.string("c1"), .string("seat0"), .uint32(getuid()), .string("tester"), .bool(true)]),
            let session = out.first?.stringValue
        else { throw TestKitError("AddSession failed") }
        let l = Logind(system: system, child: child, bus: bus, session: session)
        // The template's GetUser adds a uint32 to a string and fails (python3-dbusmock 0.28.7); real logind answers the
        // user's path, as this does.
        _ = l.call(
            Self.managerPath, Self.mock, "AddMethod",
            [
                .string("org.freedesktop.login1.Manager"), .string("GetUser"), .string("u"), .string("o"),
                .string("ret = dbus.ObjectPath('/org/freedesktop/login1/user/%d' % args[0])"),
            ])
        if display {
            _ = l.call(
                "/org/freedesktop/login1/user/\(getuid())", "org.freedesktop.DBus.Properties", "Set",
                [
                    .string("org.freedesktop.login1.User"), .string("Display"),
                    .variant(.structure([.string("c1"), .objectPath(session)])),
                ])
        }
        return l
    }

    func daemon(_ server: TestServer, _ l: Logind, environment: [String: String] = [:]) throws -> Daemon {
        try Daemon.start(server, environment: ["DBUS_SYSTEM_BUS_ADDRESS": l.system.address].merging(environment) { $1 })
    }

    func screenLocked(_ d: Daemon) -> Bool? {
        d.client.property(API.managerPath, API.manager.name, "ScreenLocked")?.boolValue
    }

    func platform(_ d: Daemon, _ name: String) -> String {
        guard case .success(let out) = d.client.manager("ListPlatformSources"), case .array(_, let items)? = out.first
        else { return "" }
        let row = items.compactMap(\.propertyMap).first { $0["name"]?.stringValue == name }
        return row?["detail"]?.stringValue ?? ""
    }

    /// An SDL game (ffplay) made a game by a rule: ambient.
    func game(_ server: TestServer, _ d: Daemon) throws -> Child {
        guard
            case .success = d.client.manager(
                "SetApplicationCategory", [.string("ffplay"), .string("ambient"), .string("default"), .strings([])])
        else { throw TestKitError("the game rule was refused") }
        let g = try server.spawn(
            ["ffplay", "-nodisp", "-loglevel", "quiet", "-loop", "0", try players.tone(server)],
            environment: ["SDL_AUDIODRIVER": "pulse"], log: "ffplay.log")
        _ = try server.waitForPlaybackStream(pid: g.pid, timeout: 20)
        return g
    }

    func muted(_ server: TestServer, _ p: Child) -> Bool? { server.playbackStream(pid: p.pid)?.muted }

    @Test(
        "lock: the game goes silent while mixable playback plays on and a ringtone rings; unlock: the game is back",
        arguments: ServerKind.tested)
    func lockScreen(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let l = try logind(server)
        defer { l.stop() }
        let d = try daemon(server, l)
        defer { d.stop() }
        #expect(
            waitFor(10) { platform(d, "logind").contains("session c1, from User.Display") }, "\(platform(d, "logind"))")
        let g = try game(server, d)
        defer { g.kill() }
        // An app with no role and no rule: playback that mixes, so the game is not already secondary audio.
        let radio = try playback(server, name: "radio")
        _ = try server.waitForPlaybackStream(pid: radio.pid)
        #expect(waitFor(5) { muted(server, g) == false })

        l.lock(true)
        #expect(
            waitFor(10) { screenLocked(d) == true },
            "ScreenLocked never turned true: \(server.file("audiod.log").suffix(1500))")
        #expect(waitFor(10) { muted(server, g) == true }, "the game plays behind the lock")
        #expect(muted(server, radio) == false, "the lock silenced mixable playback")
        let why = streamReasons(d, pid: g.pid)
        #expect(why.contains("the screen is locked"), "\(why)")
        let status = try server.runStatus([TestServer.builtProduct("audioctl"), "status"])
        #expect(status.output.contains("screen:   locked"), "\(status.output)")
        #expect(
            status.output.contains(
                "logind (system bus): screen locked (session c1, from User.Display); sleep inhibitor held"),
            "\(status.output)")
        // A ringtone (feedbackd plays it as an event stream) rings through the lock.
        let ring = try playback(server, name: "ringtone", role: "event")
        _ = try server.waitForPlaybackStream(pid: ring.pid)
        Thread.sleep(forTimeInterval: 1)
        #expect(muted(server, ring) == false, "the ringtone was silenced by the lock")
        #expect(muted(server, radio) == false)

        l.lock(false)
        #expect(waitFor(10) { screenLocked(d) == false })
        #expect(waitFor(10) { muted(server, g) == false }, "the game stays silent after unlock")
        for p in [radio, ring] { p.kill() }
    }

    func streamReasons(_ d: Daemon, pid: pid_t) -> [String] {
        guard case .success(let out) = d.client.manager("ListStreams"), case .array(_, let items)? = out.first else {
            return []
        }
        return items.compactMap(\.propertyMap).first { $0["pid"]?.uint32Value == UInt32(pid) }?["policy-reasons"]?
            .stringArray ?? []
    }

    @Test(
        "an explicit ambient session is interrupted by the lock (screen-locked) and told it may resume at unlock; one that activates while locked is interrupted at once"
    )
    func explicitAmbientBehindTheLock() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let l = try logind(server)
        defer { l.stop() }
        let d = try daemon(server, l)
        defer { d.stop() }
        let app = try playback(server, name: "ambient-app")
        _ = try server.waitForPlaybackStream(pid: app.pid)
        let s = try d.client.makeSession(pid: app.pid, "ambient", activate: true)
        let late = try server.spawn(["sleep", "60"])
        let s2 = try d.client.makeSession(pid: late.pid, "solo-ambient", activate: false)
        #expect(waitFor(10) { platform(d, "logind").contains("session c1") })

        l.lock(true)
        let began = d.client.waitForSignal(s, "InterruptionBegan", timeout: 10)
        #expect(began.first?.first?.stringValue == "screen-locked", "\(began)")
        #expect(waitFor(5) { muted(server, app) == true }, "the interrupted session still sounds")
        // Granted, and interrupted at once: it never takes the audio behind the lock.
        guard case .success = d.client.session(s2, "SetActive", [.bool(true), .strings([])]) else {
            Issue.record("activation behind the lock was refused")
            return
        }
        #expect(
            d.client.waitForSignal(s2, "InterruptionBegan", timeout: 10).first?.first?.stringValue == "screen-locked")
        #expect(d.client.property(s2, API.session.name, "Active")?.boolValue == false)

        l.lock(false)
        let ended = d.client.waitForSignal(s, "InterruptionEnded", timeout: 10)
        #expect(ended.first?.first?.boolValue == true, "unlock did not say it may resume: \(ended)")
        #expect(d.client.waitForSignal(s2, "InterruptionEnded", timeout: 10).first?.first?.boolValue == true)
        #expect(d.client.received(s, "InterruptionBegan").count == 1, "more than one begin")
        late.kill()
        app.kill()
    }

    @Test(
        "sleep: audiod holds a delay inhibitor, pauses mpv and interrupts sessions (suspend), releases it; wake: takes it again, mpv stays paused",
        arguments: ServerKind.tested)
    func sleepAndWake(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let l = try logind(server)
        defer { l.stop() }
        let d = try daemon(server, l)
        defer { d.stop() }
        #expect(waitFor(10) { l.inhibitors() == ["audiod:sleep:delay"] }, "no delay inhibitor: \(l.inhibitors())")
        let (_, mpv) = try players.mpv(server, heardBy: d)
        let app = try playback(server, name: "podcast")
        _ = try server.waitForPlaybackStream(pid: app.pid)
        let s = try d.client.makeSession(pid: app.pid, "playback", options: ["mix-with-others"], activate: true)

        l.prepareForSleep(true)
        #expect(waitFor(10) { players.status(server, mpv) == "Paused" }, "mpv plays into sleep")
        #expect(d.client.waitForSignal(s, "InterruptionBegan", timeout: 10).first?.first?.stringValue == "suspend")
        // Released once the players paused: the 200 ms SPEC §10 allows, with room for a loaded test machine.
        #expect(waitFor(2) { l.inhibitors().isEmpty }, "the inhibitor is still held: \(l.inhibitors())")

        l.prepareForSleep(false)
        #expect(waitFor(10) { l.inhibitors() == ["audiod:sleep:delay"] }, "no inhibitor after wake: \(l.inhibitors())")
        let ended = d.client.waitForSignal(s, "InterruptionEnded", timeout: 10)
        #expect(ended.first?.first?.boolValue == false, "wake said resume: \(ended)")
        Thread.sleep(forTimeInterval: 1.5)
        #expect(players.status(server, mpv) == "Paused", "mpv started again after wake")
        app.kill()
    }

    @Test(
        "signals believed only from logind: a peer's PrepareForSleep and a forged LockedHint change nothing, and audiod keeps one descriptor"
    )
    func liarsOnTheSystemBus() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let l = try logind(server)
        defer { l.stop() }
        let d = try daemon(server, l)
        defer { d.stop() }
        #expect(waitFor(10) { l.inhibitors().count == 1 })
        let (_, mpv) = try players.mpv(server, heardBy: d)
        let liar = try BusClient(address: l.system.address)
        defer { liar.close() }
        for (path, iface, member, args): (String, String, String, [DBusValue]) in [
            (Self.managerPath, "org.freedesktop.login1.Manager", "PrepareForSleep", [.bool(true)]),
            (
                l.session, "org.freedesktop.DBus.Properties", "PropertiesChanged",
                [
                    .string("org.freedesktop.login1.Session"), .properties([("LockedHint", .variant(.bool(true)))]),
                    .strings([]),
                ]
            ),
        ] {
            guard let m = DBusMessage.signal(path: path, interface: iface, member: member) else { continue }
            m.append(args)
            liar.send(m)
        }
        Thread.sleep(forTimeInterval: 1.5)
        #expect(players.status(server, mpv) == "Playing", "a peer's PrepareForSleep paused mpv")
        #expect(screenLocked(d) == false, "a peer's LockedHint locked the screen")
        #expect(l.inhibitors().count == 1, "the inhibitor was let go on a peer's word")
        // The one descriptor audiod keeps from the bus is logind's inhibitor: descriptors sent by peers are closed.
        let before = openDescriptors(d.child.pid)
        for _ in 0..<50 {
            guard
                let m = DBusMessage.signal(
                    path: Self.managerPath, interface: "org.freedesktop.login1.Manager", member: "PrepareForSleep")
            else { continue }
            m.append([.bool(true), .unixFD(0)])
            liar.send(m)
        }
        _ = d.client.callPipelined(50) { _ in
            let m = DBusMessage.methodCall(
                destination: API.busName, path: API.managerPath, interface: API.manager.name, member: "CreateSession")
            m?.append([.properties([("pid", .unixFD(0))])])
            return m
        }
        Thread.sleep(forTimeInterval: 0.5)
        #expect(
            openDescriptors(d.child.pid) <= before + 2,
            "descriptors from the bus were kept: \(before) → \(openDescriptors(d.child.pid))")
        #expect(players.status(server, mpv) == "Playing")
    }

    @Test(
        "a logind whose user has no Display: XDG_SESSION_ID names the session; a LockedHint of the wrong type and a vanished session leave the screen unlocked"
    )
    func fallbacksAndBadInput() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let l = try logind(server, display: false)
        defer { l.stop() }
        // logind knows the session but not the user (no User.Display to read).
        _ = l.call(
            Self.managerPath, Self.mock, "RemoveObject", [.objectPath("/org/freedesktop/login1/user/\(getuid())")])
        let d = try daemon(server, l, environment: ["XDG_SESSION_ID": "c1"])
        defer { d.stop() }
        #expect(
            waitFor(10) { platform(d, "logind").contains("session c1, from XDG_SESSION_ID") },
            "\(platform(d, "logind")) \(server.file("audiod.log").suffix(3000))")
        l.lock(true)
        #expect(waitFor(10) { screenLocked(d) == true })
        // The wrong type: one line, and unlocked.
        _ = l.call(
            l.session, Self.mock, "UpdateProperties",
            [.string("org.freedesktop.login1.Session"), .properties([("LockedHint", .variant(.string("yes")))])])
        #expect(waitFor(10) { screenLocked(d) == false }, "a LockedHint of type s kept the screen locked")
        #expect(server.file("audiod.log").contains("LockedHint is of type s"))
        l.lock(true)
        #expect(waitFor(10) { screenLocked(d) == true })
        // The session goes away as logind says it does.
        _ = l.call(Self.managerPath, Self.mock, "RemoveObject", [.objectPath(l.session)])
        _ = l.call(
            Self.managerPath, Self.mock, "EmitSignal",
            [
                .string("org.freedesktop.login1.Manager"), .string("SessionRemoved"), .string("so"),
                .array(element: "v", [.variant(.string("c1")), .variant(.objectPath(l.session))]),
            ])
        #expect(waitFor(10) { screenLocked(d) == false }, "a vanished session kept the screen locked")
        #expect(d.child.wait(timeout: 0) == nil, "audiod exited")
    }

    /// The pipes a process holds (`pipe:[inode]`): the two ends of one pipe name the same inode.
    func pipes(_ pid: pid_t) -> Set<String> {
        let dir = "/proc/\(pid)/fd"
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
        return Set(
            fds.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "\(dir)/\($0)") }.filter {
                $0.hasPrefix("pipe:")
            })
    }

    @Test(
        "logind goes away: its lock and its inhibitor go with it; a logind that refuses the inhibitor still has players paused before sleep"
    )
    func logindComesAndGoes() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        var l = try logind(server)
        let d = try daemon(server, l)
        defer { d.stop() }
        #expect(waitFor(10) { l.inhibitors().count == 1 })
        l.lock(true)
        #expect(waitFor(10) { screenLocked(d) == true })
        // The inhibitor: the pipe audiod shares with logind (the template keeps the read end).
        // (Minus any pipe both inherited from the test process.)
        let inhibitor = pipes(d.child.pid).intersection(pipes(l.child.pid)).subtracting(pipes(getpid()))
        #expect(inhibitor.count == 1, "audiod and logind share \(inhibitor.count) pipes")
        // logind stops (its name loses its owner): unlocked, and the inhibitor's descriptor is closed.
        l.child.kill()
        #expect(waitFor(10) { screenLocked(d) == false }, "a logind that went away left the screen locked")
        #expect(
            waitFor(10) { pipes(d.child.pid).isDisjoint(with: inhibitor) },
            "the inhibitor of a logind that went away was kept")
        #expect(waitFor(10) { platform(d, "logind") == "not on the system bus" }, "\(platform(d, "logind"))")
        l.bus.close()
        l.system.stop()
        // A logind on the same bus address again is not possible here; a new bus means a new audiod, so this one
        // refuses the inhibitor: sleep still pauses the player, and one line says so.
        d.stop()
        l = try logind(server)
        defer { l.stop() }
        _ = l.call(
            Self.managerPath, Self.mock, "AddMethod",
            [
                .string("org.freedesktop.login1.Manager"), .string("Inhibit"), .string("ssss"), .string("h"),
                .string(
                    "raise dbus.exceptions.DBusException('not for you', name='org.freedesktop.DBus.Error.AccessDenied')"
                ),
            ])
        let again = try daemon(server, l, environment: [:])
        defer { again.stop() }
        #expect(
            waitFor(10) {
                platform(again, "logind").contains("no sleep inhibitor (org.freedesktop.DBus.Error.AccessDenied)")
            },
            "\(platform(again, "logind"))")
        #expect(
            server.file("audiod.log").contains(
                "logind gave no sleep inhibitor (org.freedesktop.DBus.Error.AccessDenied)"))
        let (_, mpv) = try players.mpv(server, heardBy: again)
        l.prepareForSleep(true)
        #expect(
            waitFor(10) { players.status(server, mpv) == "Paused" }, "without an inhibitor, sleep did not pause mpv")
    }

    @Test(
        "a feedbackd whose Profile is of the wrong type (a stand-in: the real one always answers a string) leaves SilentMode alone"
    )
    func feedbackdOfTheWrongType() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let f = try server.spawn(
            [
                "/usr/bin/python3", "-m", "dbusmock", "--session", "org.sigxcpu.Feedback", "/org/sigxcpu/Feedback",
                "org.sigxcpu.Feedback",
            ],
            log: "feedback-mock.log")
        defer { f.kill() }
        let bus = try BusClient(address: server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? "")
        defer { bus.close() }
        // Called only once the stand-in owns the name: a call before would start the real feedbackd (bus activation).
        #expect(waitFor(10) { hasOwner(d, "org.sigxcpu.Feedback") })
        #expect(
            waitFor(10) {
                if case .success = bus.callAny(
                    destination: "org.sigxcpu.Feedback", "/org/sigxcpu/Feedback", Self.mock, "AddProperty",
                    [.string("org.sigxcpu.Feedback"), .string("Profile"), .variant(.int32(2))])
                {
                    return true
                }
                return false
            })
        // feedbackd announces its profile: here as an int.
        #expect(
            waitFor(10) {
                if case .success = bus.callAny(
                    destination: "org.sigxcpu.Feedback", "/org/sigxcpu/Feedback", Self.mock, "UpdateProperties",
                    [.string("org.sigxcpu.Feedback"), .properties([("Profile", .variant(.int32(3)))])])
                {
                    return true
                }
                return false
            })
        #expect(
            waitFor(10) {
                server.file("audiod.log").contains("feedbackd has a Profile of type i, not full, quiet or silent")
            })
        #expect(platform(d, "feedbackd") == "profile unknown")
        #expect(silentMode(d) == false)
        #expect(d.child.wait(timeout: 0) == nil)
    }

    // MARK: feedbackd

    func feedbackd(_ server: TestServer) throws -> Child {
        guard FileManager.default.isExecutableFile(atPath: "/usr/libexec/feedbackd") else {
            throw TestKitError("feedbackd is not installed (scripts/test installs Debian's feedbackd package)")
        }
        // GSETTINGS_BACKEND=memory: the profile is the test's own, never the machine user's dconf.
        let f = try server.spawn(
            ["/usr/libexec/feedbackd"], environment: ["GSETTINGS_BACKEND": "memory"], log: "feedbackd.log")
        guard waitFor(10, { profile(server) != nil }) else {
            throw TestKitError("feedbackd did not start: \(server.file("feedbackd.log"))")
        }
        return f
    }

    func profile(_ server: TestServer) -> String? {
        let out = try? server.run([
            "busctl", "--user", "get-property", "org.sigxcpu.Feedback", "/org/sigxcpu/Feedback",
            "org.sigxcpu.Feedback", "Profile",
        ])
        return out?.split(separator: "\"").dropFirst().first.map(String.init)
    }

    func setProfile(_ server: TestServer, _ p: String) throws {
        _ = try server.run([
            "busctl", "--user", "set-property", "org.sigxcpu.Feedback", "/org/sigxcpu/Feedback",
            "org.sigxcpu.Feedback", "Profile", "s", p,
        ])
    }

    func hasOwner(_ d: Daemon, _ name: String) -> Bool {
        if case .success(let out) = d.client.callBus("NameHasOwner", [.string(name)]), case .bool(true)? = out.first {
            return true
        }
        return false
    }

    func silentMode(_ d: Daemon) -> Bool? {
        d.client.property(API.managerPath, API.manager.name, "SilentMode")?.boolValue
    }

    @Test(
        "feedbackd's profile is the silent switch: quiet silences the game, audioctl silent off sets full, each change once",
        arguments: ServerKind.tested)
    func ringSilentProfile(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        // SilentMode on before feedbackd runs; feedbackd (at full) wins when it is found.
        guard
            case .success = d.client.call(
                API.managerPath, API.properties.name, "Set",
                [.string(API.manager.name), .string("SilentMode"), .variant(.bool(true))])
        else { throw TestKitError("SilentMode was refused") }
        // feedbackd is bus-activatable (its package installs a service file): audiod must not have started it.
        Thread.sleep(forTimeInterval: 1)
        #expect(!hasOwner(d, "org.sigxcpu.Feedback"), "audiod started feedbackd")
        let f = try feedbackd(server)
        defer { f.kill() }
        #expect(waitFor(10) { silentMode(d) == false }, "feedbackd's profile full did not win at discovery")
        #expect(platform(d, "feedbackd") == "profile full")
        let g = try game(server, d)
        defer { g.kill() }
        #expect(waitFor(5) { muted(server, g) == false })

        try setProfile(server, "quiet")
        #expect(waitFor(10) { silentMode(d) == true }, "profile quiet did not turn SilentMode on")
        #expect(waitFor(10) { muted(server, g) == true }, "the game plays with the phone set to quiet")
        // audiod does not rewrite quiet as quiet, nor silent as quiet.
        Thread.sleep(forTimeInterval: 0.5)
        #expect(profile(server) == "quiet")
        try setProfile(server, "silent")
        Thread.sleep(forTimeInterval: 0.5)
        #expect(profile(server) == "silent", "audiod rewrote the user's silent profile")
        #expect(silentMode(d) == true)

        let off = try server.runStatus([TestServer.builtProduct("audioctl"), "silent", "off"])
        #expect(off.status == 0, "\(off.output)")
        #expect(waitFor(10) { profile(server) == "full" }, "audioctl silent off did not set feedbackd to full")
        #expect(waitFor(10) { muted(server, g) == false })
        // No ping-pong: both stay where they are.
        Thread.sleep(forTimeInterval: 1)
        #expect(profile(server) == "full")
        #expect(silentMode(d) == false)
        let changes = d.client.received(API.managerPath, "PropertiesChanged").filter {
            ($0.dropFirst().first?.propertyMap?["SilentMode"]) != nil
        }
        #expect(
            changes.count == 4,
            "SilentMode changed \(changes.count) times for 4 changes (on, full at discovery, quiet, off)")

        // A peer that speaks as feedbackd is not feedbackd.
        let liar = try BusClient(address: server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? "")
        defer { liar.close() }
        if let m = DBusMessage.signal(
            path: "/org/sigxcpu/Feedback", interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged")
        {
            m.append([
                .string("org.sigxcpu.Feedback"), .properties([("Profile", .variant(.string("quiet")))]), .strings([]),
            ])
            liar.send(m)
        }
        Thread.sleep(forTimeInterval: 1)
        #expect(silentMode(d) == false, "a peer's Profile set SilentMode")
        // Not a profile: one line, SilentMode stays.
        try setProfile(server, "bogus")
        Thread.sleep(forTimeInterval: 1)
        #expect(silentMode(d) == false)
        #expect(server.file("audiod.log").contains("feedbackd has profile 'bogus'"))
        #expect(d.child.wait(timeout: 0) == nil, "audiod exited")
    }
}
