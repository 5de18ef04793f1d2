import AudiodTestKit
import DBusService
import Foundation
import Testing

/// SPEC §10 against the real daemon, mpv and a sound server: the platform's calls, from services that need a modem
/// or a display, served by python3-dbusmock speaking their D-Bus interfaces — ModemManager on a private system bus,
/// GNOME Calls on the session bus.
@Suite(.serialized)
struct PlatformCallTests {
    let players = MediaPlayerTests()
    static let number = "+15550100"

    /// A dbusmock service with its ObjectManager, and a connection to drive it.
    struct Mock {
        let child: Child
        let bus: BusClient
        let name: String

        func call(_ path: String, _ interface: String, _ member: String, _ args: [DBusValue]) {
            let r = bus.callAny(destination: name, path, interface, member, args)
            if case .failure(let e) = r { Issue.record("\(name) \(member): \(e)") }
        }

        func stop() {
            bus.close()
            child.kill()
        }
    }

    /// `flatpakApp`: the service runs in a bwrap sandbox that looks like Flatpak's (a root of its own, its own pid
    /// namespace, `.flatpak-info` naming the app; `""`: a sandbox without one).
    func mock(
        _ server: TestServer, name: String, path: String, address: String, system: Bool, flatpakApp: String? = nil
    ) throws -> Mock {
        // An empty app id: a sandbox without .flatpak-info.
        let wrap = try flatpakApp.map { try flatpakSandbox(server, flatpakApp: $0.isEmpty ? nil : $0) } ?? []
        let child = try server.spawn(
            wrap + ["/usr/bin/python3", "-m", "dbusmock", system ? "--system" : "--session", "-m", name, path, name],
            environment: system ? ["DBUS_SYSTEM_BUS_ADDRESS": address] : [:], log: "\(name).log")
        let bus = try BusClient(address: address)
        guard
            waitFor(
                10,
                {
                    // The name is asked of the bus first: a call to an activatable name nobody owns yet (GameMode's)
                    // would have the bus start the real service, which would then own it instead of the mock.
                    guard case .success(let owned) = bus.callBus("NameHasOwner", [.string(name)]),
                        owned.first == .bool(true)
                    else { return false }
                    if case .success = bus.callAny(destination: name, path, "org.freedesktop.DBus.Peer", "Ping", []) {
                        return true
                    }
                    return false
                })
        else {
            bus.close()
            child.kill()
            throw TestKitError("dbusmock did not serve \(name): \(server.file("\(name).log"))")
        }
        return Mock(child: child, bus: bus, name: name)
    }

    // MARK: ModemManager: a modem with Modem.Voice, calls with Call.State (i)

    static let modem = "/org/freedesktop/ModemManager1/Modem/0"
    static func callPath(_ n: Int) -> String { "/org/freedesktop/ModemManager1/Call/\(n)" }

    func modemManager(_ server: TestServer, _ system: TestBus) throws -> Mock {
        let mm = try mock(
            server, name: "org.freedesktop.ModemManager1", path: "/org/freedesktop/ModemManager1",
            address: system.address, system: true)
        mm.call(
            "/org/freedesktop/ModemManager1", "org.freedesktop.DBus.Mock", "AddObject",
            [
                .objectPath(Self.modem), .string("org.freedesktop.ModemManager1.Modem.Voice"),
                .properties([("Calls", .array(element: "o", []))]), .array(element: "(ssss)", []),
            ])
        return mm
    }

    /// A call appears as ModemManager announces one: the object, the modem's `Calls` (what a client that comes
    /// later reads), then `CallAdded` from the modem.
    func addModemCall(_ mm: Mock, _ n: Int, state: Int32) {
        mm.call(
            "/org/freedesktop/ModemManager1", "org.freedesktop.DBus.Mock", "AddObject",
            [
                .objectPath(Self.callPath(n)), .string("org.freedesktop.ModemManager1.Call"),
                .properties([("State", .int32(state)), ("Direction", .int32(1)), ("Number", .string(Self.number))]),
                .array(element: "(ssss)", []),
            ])
        var calls: [DBusValue] = []
        if case .success(let out) = mm.bus.callAny(
            destination: mm.name, Self.modem, "org.freedesktop.DBus.Properties", "Get",
            [
                .string("org.freedesktop.ModemManager1.Modem.Voice"), .string("Calls"),
            ]), case .variant(.array(_, let items))? = out.first
        {
            calls = items
        }
        calls.append(.objectPath(Self.callPath(n)))
        mm.call(
            Self.modem, "org.freedesktop.DBus.Mock", "UpdateProperties",
            [
                .string("org.freedesktop.ModemManager1.Modem.Voice"),
                .properties([("Calls", .array(element: "o", calls))]),
            ])
        mm.call(
            Self.modem, "org.freedesktop.DBus.Mock", "EmitSignal",
            [
                .string("org.freedesktop.ModemManager1.Modem.Voice"), .string("CallAdded"), .string("o"),
                .array(element: "v", [.variant(.objectPath(Self.callPath(n)))]),
            ])
    }

    /// `State` changes as ModemManager changes it: the property, with `PropertiesChanged`.
    func setModemCall(_ mm: Mock, _ n: Int, state: Int32) {
        mm.call(
            Self.callPath(n), "org.freedesktop.DBus.Mock", "UpdateProperties",
            [
                .string("org.freedesktop.ModemManager1.Call"), .properties([("State", .int32(state))]),
            ])
    }

    /// A sound server, a private system bus with ModemManager (a modem, no calls) and audiod told of that bus.
    struct ModemRig {
        let server: TestServer
        let system: TestBus
        let mm: Mock
        let daemon: Daemon

        init(_ kind: ServerKind, _ t: PlatformCallTests) throws {
            let server = try TestServer(kind)
            var system: TestBus?
            var mm: Mock?
            do {
                system = try TestBus()
                mm = try t.modemManager(server, system!)
                daemon = try Daemon.start(server, environment: ["DBUS_SYSTEM_BUS_ADDRESS": system!.address])
            } catch {
                mm?.stop()
                system?.stop()
                server.stop()
                throw error
            }
            self.server = server
            self.system = system!
            self.mm = mm!
        }

        func stop() {
            daemon.stop()
            mm.stop()
            system.stop()
            server.stop()
        }
    }

    func callState(_ d: Daemon) -> String? {
        d.client.property(API.managerPath, API.manager.name, "CallState")?.stringValue
    }

    @Test(
        "a modem call rings: the music pauses; answered, then hung up: the music plays again",
        arguments: ServerKind.tested)
    func modemCall(kind: ServerKind) throws {
        let rig = try ModemRig(kind, self)
        defer { rig.stop() }
        let (server, mm, d) = (rig.server, rig.mm, rig.daemon)
        let (_, music) = try players.mpv(server, heardBy: d)
        #expect(callState(d) == "none")
        addModemCall(mm, 1, state: 3)  // ringing-in
        #expect(
            waitFor(10) { players.status(server, music) == "Paused" },
            "the music plays on through the ring: \(server.file("audiod.log").suffix(2000))")
        #expect(callState(d) == "ringing")
        let status = try server.runStatus([TestServer.builtProduct("audioctl"), "status"])
        #expect(status.output.contains("call:     ringing"), "\(status.output)")
        setModemCall(mm, 1, state: 4)  // active
        #expect(waitFor(5) { callState(d) == "active" })
        #expect(players.status(server, music) == "Paused")
        setModemCall(mm, 1, state: 7)  // terminated; ModemManager keeps the object until a client deletes it
        #expect(
            waitFor(10) { players.status(server, music) == "Playing" }, "the music did not come back after the call")
        #expect(callState(d) == "none")
        #expect(!server.file("audiod.log").contains(Self.number), "a call's number reached the log")
    }

    @Test("two overlapping modem calls: one platform call, which lasts while either does")
    func overlappingCalls() throws {
        let rig = try ModemRig(.pulseaudio, self)
        defer { rig.stop() }
        let (server, mm, d) = (rig.server, rig.mm, rig.daemon)
        let (_, music) = try players.mpv(server, heardBy: d)
        addModemCall(mm, 1, state: 3)
        #expect(waitFor(10) { players.status(server, music) == "Paused" })
        setModemCall(mm, 1, state: 4)
        addModemCall(mm, 2, state: 6)  // a second call waits
        #expect(waitFor(5) { callState(d) == "ringing" })
        setModemCall(mm, 1, state: 7)  // the first hangs up while the second still waits
        #expect(waitFor(5) { callState(d) == "ringing" })
        usleep(500_000)
        #expect(players.status(server, music) == "Paused", "the music came back while a call was still waiting")
        // A call announced and gone before audiod reads it (its object vanishes mid-read): no call, no crash.
        mm.call(
            Self.modem, "org.freedesktop.DBus.Mock", "EmitSignal",
            [
                .string("org.freedesktop.ModemManager1.Modem.Voice"), .string("CallAdded"), .string("o"),
                .array(element: "v", [.variant(.objectPath(Self.callPath(99)))]),
            ])
        setModemCall(mm, 2, state: 4)
        #expect(waitFor(5) { callState(d) == "active" })
        setModemCall(mm, 2, state: 7)
        #expect(waitFor(10) { players.status(server, music) == "Playing" })
        // The platform call was one session all along.
        let added = d.client.allSignals().filter { $0.member == "InterfacesAdded" }
        #expect(added.count <= 2, "\(added.count) sessions were added")
    }

    @Test(
        "a recorder that prefers no interruptions from system alerts records through the ring; the answer interrupts it"
    )
    func recorderThroughTheRing() throws {
        let rig = try ModemRig(.pulseaudio, self)
        defer { rig.stop() }
        let (server, mm, d) = (rig.server, rig.mm, rig.daemon)
        let recorder = try server.spawn(["parec", "--client-name=recorder", "/dev/null"])
        let s = try d.client.makeSession(pid: recorder.pid, "record")
        let set = d.client.call(
            s, "org.freedesktop.DBus.Properties", "Set",
            [
                .string(API.session.name), .string("PrefersNoInterruptionsFromSystemAlerts"), .variant(.bool(true)),
            ])
        guard case .success = set else {
            Issue.record("Set: \(set)")
            return
        }
        guard case .success = d.client.session(s, "SetActive", [.bool(true), .strings([])]) else {
            Issue.record("SetActive failed")
            return
        }
        addModemCall(mm, 1, state: 3)
        #expect(waitFor(5) { callState(d) == "ringing" })
        usleep(500_000)
        #expect(d.client.received(s, "InterruptionBegan").isEmpty, "the recorder was interrupted by a ring")
        #expect(d.client.property(s, API.session.name, "Active") == .bool(true))
        setModemCall(mm, 1, state: 4)
        let began = d.client.waitForSignal(s, "InterruptionBegan")
        #expect(began.first?.first == .string("call"), "\(began)")
        setModemCall(mm, 1, state: 7)
        #expect(d.client.waitForSignal(s, "InterruptionEnded").first?.first == .bool(true))
    }

    // MARK: GNOME Calls: an ObjectManager at /org/gnome/Calls, calls with State (u)

    @Test(
        "a GNOME Calls incoming call, declined: the music pauses while it rings and plays again",
        arguments: ServerKind.tested)
    func gnomeCallsDeclined(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let calls = try mock(
            server, name: "org.gnome.Calls", path: "/org/gnome/Calls",
            address: server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? "", system: false)
        defer { calls.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let (_, music) = try players.mpv(server, heardBy: d)
        let call = "/org/gnome/Calls/Call/1"
        let props: [(String, DBusValue)] = [
            ("State", .uint32(5)), ("Inbound", .bool(true)), ("Id", .string(Self.number)),
            ("DisplayName", .string("Alice")),
        ]
        calls.call(
            "/org/gnome/Calls", "org.freedesktop.DBus.Mock", "AddObject",
            [
                .objectPath(call), .string("org.gnome.Calls.Call"), .properties(props), .array(element: "(ssss)", []),
            ])
        // As GNOME Calls announces a call (dbusmock leaves InterfacesAdded to its user).
        calls.call(
            "/org/gnome/Calls", "org.freedesktop.DBus.Mock", "EmitSignal",
            [
                .string("org.freedesktop.DBus.ObjectManager"), .string("InterfacesAdded"), .string("oa{sa{sv}}"),
                .array(
                    element: "v",
                    [
                        .variant(.objectPath(call)),
                        .variant(
                            .dict(key: "s", value: "a{sv}", [(.string("org.gnome.Calls.Call"), .properties(props))])),
                    ]),
            ])
        #expect(waitFor(10) { players.status(server, music) == "Paused" }, "the music plays on through the ring")
        #expect(callState(d) == "ringing")
        // The platform call is a session object: implicit, identity source platform, named after the call app.
        let sessions = try server.runStatus([TestServer.builtProduct("audioctl"), "apps"]).output
        #expect(sessions.contains("org.gnome.Calls (platform)"), "\(sessions)")
        calls.call(
            call, "org.freedesktop.DBus.Mock", "UpdateProperties",
            [
                .string("org.gnome.Calls.Call"), .properties([("State", .uint32(7))]),  // disconnected: declined
            ])
        #expect(
            waitFor(10) { players.status(server, music) == "Playing" },
            "the music did not come back after the declined call")
        #expect(callState(d) == "none")
        let log = server.file("audiod.log")
        #expect(!log.contains(Self.number) && !log.contains("Alice"), "a caller's number or name reached the log")
    }

    // MARK: Plasma's dialer: org.kde.telephony.CallUtils, calls in ModemManager's state order

    static let dialerPath = "/org/kde/telephony/CallUtils/tel/mm"
    static let dialerInterface = "org.kde.telephony.CallUtils"

    /// The dialer, whose `fetchCalls` answers with `fetchedCallsChanged` listing `calls` (call id, state).
    func plasmaDialer(_ server: TestServer, calls: [(String, Int32)]) throws -> Mock {
        let dialer = try mock(
            server, name: Self.dialerInterface, path: Self.dialerPath,
            address: server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? "", system: false)
        let list = calls.map { "('\($0.0)', 'tel', 'mm', 'acc', '\(Self.number)', (1,), (\($0.1),), (0,), 0, 0, 0)" }
            .joined(separator: ", ")
        dialer.call(
            Self.dialerPath, "org.freedesktop.DBus.Mock", "AddMethod",
            [
                .string(Self.dialerInterface), .string("fetchCalls"), .string(""), .string(""),
                .string(
                    "self.EmitSignal('\(Self.dialerInterface)', 'fetchedCallsChanged', 'a(sssss(i)(i)(i)ixi)', [[\(list)]])"
                ),
            ])
        return dialer
    }

    func emit(_ dialer: Mock, _ member: String, _ signature: String, _ args: [DBusValue]) {
        dialer.call(
            Self.dialerPath, "org.freedesktop.DBus.Mock", "EmitSignal",
            [
                .string(Self.dialerInterface), .string(member), .string(signature),
                .array(element: "v", args.map { .variant($0) }),
            ])
    }

    @Test(
        "Plasma's dialer: a call added rings and pauses the music; hung up, the music plays; a call deleted ends too",
        arguments: ServerKind.tested)
    func plasmaDialerCalls(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let dialer = try plasmaDialer(server, calls: [])
        defer { dialer.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let (_, music) = try players.mpv(server, heardBy: d)
        let call = "/org/freedesktop/ModemManager1/Call/1"
        func state(_ n: Int32) -> DBusValue { .structure([.int32(n)]) }
        emit(
            dialer, "callAdded", "ss(i)(i)(i)s",
            [.string("modem0"), .string(call), state(1), state(3), state(0), .string(Self.number)])
        #expect(
            waitFor(10) { players.status(server, music) == "Paused" }, "the music plays on through the dialer's ring")
        #expect(callState(d) == "ringing")
        emit(
            dialer, "callStateChanged", "ss(i)(i)(i)", [.string("modem0"), .string(call), state(1), state(4), state(0)])
        #expect(waitFor(5) { callState(d) == "active" })
        emit(
            dialer, "callStateChanged", "ss(i)(i)(i)", [.string("modem0"), .string(call), state(1), state(7), state(0)])
        #expect(
            waitFor(10) { players.status(server, music) == "Playing" }, "the music did not come back after the call")
        emit(
            dialer, "callAdded", "ss(i)(i)(i)s",
            [.string("modem0"), .string(call + "2"), state(1), state(3), state(0), .string(Self.number)])
        #expect(waitFor(5) { callState(d) == "ringing" })
        emit(dialer, "callDeleted", "ss", [.string("modem0"), .string(call + "2")])
        #expect(waitFor(5) { callState(d) == "none" })
        #expect(!server.file("audiod.log").contains(Self.number))
    }

    @Test("audiod started during a call reads the dialer's calls (fetchCalls, then fetchedCallsChanged)")
    func plasmaDialerAtStart() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let dialer = try plasmaDialer(server, calls: [("/org/freedesktop/ModemManager1/Call/1", 4)])
        defer { dialer.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        #expect(waitFor(5) { callState(d) == "active" }, "\(callState(d) ?? "?")")
        let apps = try server.runStatus([TestServer.builtProduct("audioctl"), "apps"]).output
        #expect(apps.contains("org.kde.phone.dialer (platform)"), "\(apps)")
    }

    // MARK: callaudiod: AudioMode 1 is a call, without a ringing phase

    @Test("callaudiod's AudioMode 1 is an active call: the music pauses, and plays again at 0")
    func callaudiod() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let path = "/org/mobian_project/CallAudio"
        let name = "org.mobian_project.CallAudio"
        let cad = try mock(
            server, name: name, path: path, address: server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? "", system: false
        )
        defer { cad.stop() }
        cad.call(
            path, "org.freedesktop.DBus.Mock", "AddProperty",
            [.string(name), .string("AudioMode"), .variant(.uint32(0))])
        let d = try Daemon.start(server)
        defer { d.stop() }
        let (_, music) = try players.mpv(server, heardBy: d)
        cad.call(
            path, "org.freedesktop.DBus.Mock", "UpdateProperties",
            [.string(name), .properties([("AudioMode", .uint32(1))])])
        #expect(waitFor(10) { players.status(server, music) == "Paused" }, "the music plays on through the call")
        #expect(callState(d) == "active")
        cad.call(
            path, "org.freedesktop.DBus.Mock", "UpdateProperties",
            [.string(name), .properties([("AudioMode", .uint32(0))])])
        #expect(waitFor(10) { players.status(server, music) == "Playing" })
        #expect(callState(d) == "none")
    }

    // MARK: Whose voice a platform name carries

    /// `ListPlatformSources`, by source name.
    func platformSources(_ d: Daemon) -> [String: [String: DBusValue]] {
        guard case .success(let out) = d.client.manager("ListPlatformSources"), case .array(_, let rows)? = out.first
        else { return [:] }
        var byName: [String: [String: DBusValue]] = [:]
        for r in rows.compactMap(\.propertyMap) { byName[r["name"]?.stringValue ?? ""] = r }
        return byName
    }

    @Test(
        "a sandboxed app that owns org.mobian_project.CallAudio first is not believed; GNOME Calls sandboxed as org.gnome.Calls is"
    )
    func squattedPlatformName() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        let path = "/org/mobian_project/CallAudio"
        let name = "org.mobian_project.CallAudio"
        // Flatpak lets an app whose id is org.mobian_project own org.mobian_project.*: it takes callaudiod's name
        // where callaudiod is not installed.
        let squatter = try mock(
            server, name: name, path: path, address: address, system: false, flatpakApp: "org.mobian_project")
        squatter.call(
            path, "org.freedesktop.DBus.Mock", "AddProperty",
            [.string(name), .string("AudioMode"), .variant(.uint32(1))])
        // GNOME Calls from its Flatpak: the app id is the service's own.
        let calls = try mock(
            server, name: "org.gnome.Calls", path: "/org/gnome/Calls", address: address, system: false,
            flatpakApp: "org.gnome.Calls")
        defer { calls.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let (_, music) = try players.mpv(server, heardBy: d)
        let sources = { platformSources(d) }
        #expect(
            waitFor(10) { sources()["callaudiod"]?["refused"]?.stringValue?.contains("org.mobian_project") == true },
            "\(sources()["callaudiod"] ?? [:]) \(server.file("audiod.log").suffix(1500))")
        let refused = sources()["callaudiod"]?["refused"]?.stringValue ?? ""
        #expect(refused.contains("a sandboxed app (org.mobian_project"), "\(refused)")
        #expect(sources()["callaudiod"]?["found"] == .bool(false))
        #expect(
            server.file("audiod.log").contains("org.mobian_project.CallAudio is owned by pid"), "no refusal line")
        // Its 'voice call' (AudioMode 1, there from the start and announced again) interrupts nobody.
        squatter.call(
            path, "org.freedesktop.DBus.Mock", "UpdateProperties",
            [.string(name), .properties([("AudioMode", .uint32(0))])])
        squatter.call(
            path, "org.freedesktop.DBus.Mock", "UpdateProperties",
            [.string(name), .properties([("AudioMode", .uint32(1))])])
        usleep(500_000)
        #expect(callState(d) == "none")
        #expect(players.status(server, music) == "Playing", "a squatter's call paused the music")
        let status = try server.runStatus([TestServer.builtProduct("audioctl"), "status"]).output
        #expect(status.contains("callaudiod (session bus): not believed — refused: owned by pid"), "\(status)")
        // A sandbox with no app id at all (no .flatpak-info) owning GameMode's name is refused too.
        let squatGame = try mock(
            server, name: "com.feralinteractive.GameMode", path: "/com/feralinteractive/GameMode", address: address,
            system: false, flatpakApp: "")
        defer { squatGame.stop() }
        #expect(
            waitFor(10) { sources()["GameMode"]?["refused"]?.stringValue?.contains("with no app id") == true },
            "\(sources()["GameMode"] ?? [:])")
        // GNOME Calls in its own sandbox is believed.
        #expect(waitFor(10) { sources()["GNOME Calls"]?["found"] == .bool(true) }, "\(sources()["GNOME Calls"] ?? [:])")
        #expect(sources()["GNOME Calls"]?["refused"] == .string(""))
        // The squatter goes; callaudiod itself, on the host, takes the name and is believed: its call pauses the music.
        squatter.stop()
        let cad = try mock(server, name: name, path: path, address: address, system: false)
        defer { cad.stop() }
        cad.call(
            path, "org.freedesktop.DBus.Mock", "AddProperty",
            [.string(name), .string("AudioMode"), .variant(.uint32(0))])
        #expect(waitFor(10) { sources()["callaudiod"]?["found"] == .bool(true) })
        #expect(sources()["callaudiod"]?["refused"] == .string(""))
        cad.call(
            path, "org.freedesktop.DBus.Mock", "UpdateProperties",
            [.string(name), .properties([("AudioMode", .uint32(1))])])
        #expect(waitFor(10) { players.status(server, music) == "Paused" }, "the host callaudiod's call did not count")
    }

    @Test("[platform] trusted-apps: a sandboxed app the user trusts may own a platform name")
    func trustedPlatformApp() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        let config = "\(server.directory)/audiod.toml"
        try "[platform]\ntrusted-apps = [\"org.mobian_project\"]\n".write(
            toFile: config, atomically: true, encoding: .utf8)
        let cad = try mock(
            server, name: "org.mobian_project.CallAudio", path: "/org/mobian_project/CallAudio", address: address,
            system: false, flatpakApp: "org.mobian_project")
        defer { cad.stop() }
        let d = try Daemon.start(server, arguments: ["--log-level", "debug", "--config", config])
        defer { d.stop() }
        let callaudiod = { platformSources(d)["callaudiod"] }
        #expect(waitFor(10) { callaudiod()?["found"] == .bool(true) }, "\(callaudiod() ?? [:])")
        #expect(callaudiod()?["refused"] == .string(""))
    }

    // MARK: Bad input and liars

    @Test(
        "a call forged by a connection that does not own org.gnome.Calls, a State of the wrong type, an unknown state and a flood: no call, no crash, no stall"
    )
    func liarsAndBadInput() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        let calls = try mock(server, name: "org.gnome.Calls", path: "/org/gnome/Calls", address: address, system: false)
        defer { calls.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let liar = try BusClient(address: address)
        defer { liar.close() }
        // 1. A liar announces a ringing call, as GNOME Calls would, broadcast and unicast to audiod.
        let audiod = try #require(d.client.callBus("GetNameOwner", [.string(API.busName)]).get().first?.stringValue)
        for destination in [nil, audiod] {
            let m = try #require(
                DBusMessage.signal(
                    path: "/org/gnome/Calls", interface: "org.freedesktop.DBus.ObjectManager", member: "InterfacesAdded"
                ))
            m.append([
                .objectPath("/org/gnome/Calls/Call/9"),
                .dict(
                    key: "s", value: "a{sv}", [(.string("org.gnome.Calls.Call"), .properties([("State", .uint32(5))]))]),
            ])
            if let destination { _ = m.setDestination(destination) }
            liar.send(m)
        }
        // 2. The real owner: a State of the wrong type, then an unknown state.
        let call = "/org/gnome/Calls/Call/1"
        func announce(_ state: DBusValue) {
            calls.call(
                "/org/gnome/Calls", "org.freedesktop.DBus.Mock", "EmitSignal",
                [
                    .string("org.freedesktop.DBus.ObjectManager"), .string("InterfacesAdded"), .string("oa{sa{sv}}"),
                    .array(
                        element: "v",
                        [
                            .variant(.objectPath(call)),
                            .variant(
                                .dict(
                                    key: "s", value: "a{sv}",
                                    [(.string("org.gnome.Calls.Call"), .properties([("State", state)]))])),
                        ]),
                ])
        }
        announce(.string("incoming"))
        announce(.uint32(42))
        usleep(500_000)
        #expect(callState(d) == "none", "a liar's, a mistyped or an unknown call counted")
        // 3. A flood from the owner: 2,000 state changes of one call, ending disconnected. audiod keeps answering and
        //    ends with no call.
        calls.call(
            "/org/gnome/Calls", "org.freedesktop.DBus.Mock", "AddObject",
            [
                .objectPath(call), .string("org.gnome.Calls.Call"), .properties([("State", .uint32(7))]),
                .array(element: "(ssss)", []),
            ])
        let started = Date()
        for i in 0...2_000 {
            let state: UInt32 = i == 2_000 ? 7 : (i % 2 == 0 ? 5 : 1)
            // Sent as the owner sends it: from the mock's own connection, with PropertiesChanged.
            calls.call(
                call, "org.freedesktop.DBus.Mock", "UpdateProperties",
                [
                    .string("org.gnome.Calls.Call"), .properties([("State", .uint32(state))]),
                ])
            if i % 100 == 0, case .failure = d.client.call(API.managerPath, API.peer.name, "Ping") {
                Issue.record("audiod stopped answering during the flood")
            }
            if Date().timeIntervalSince(started) > 120 { break }
        }
        #expect(waitFor(10) { callState(d) == "none" }, "the flood did not end with no call: \(callState(d) ?? "?")")
        #expect(d.child.wait(timeout: 0) == nil, "audiod exited")
    }

    // MARK: The microphone switch

    @Test(
        "the microphone muted and unmuted under a record session: interrupted, then ended without resume; a call is not interrupted",
        arguments: ServerKind.tested)
    func microphoneSwitch(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        // A microphone that is not a monitor, as the default source.
        // pipewire-pulse has no module-null-source: a null sink made a source (its media.class) is one.
        _ = try server.pactl(
            kind == .pulseaudio
                ? ["load-module", "module-null-source", "source_name=mic"]
                : ["load-module", "module-null-sink", "sink_name=mic", "media.class=Audio/Source/Virtual"])
        _ = try server.pactl(["set-default-source", "mic"])
        let d = try Daemon.start(server)
        defer { d.stop() }
        let recorder = try server.spawn(["parec", "--client-name=recorder", "--device=mic", "/dev/null"])
        let s = try d.client.makeSession(pid: recorder.pid, "record", activate: true)
        #expect(
            waitFor(5) {
                (d.client.property(s, API.session.name, "RecordStreams").map {
                    if case .array(_, let v) = $0 { !v.isEmpty } else { false }
                }) == true
            })
        _ = try server.pactl(["set-source-mute", "mic", "1"])
        let began = d.client.waitForSignal(s, "InterruptionBegan")
        #expect(began.first?.first == .string("builtin-mic-muted"), "\(began)")
        _ = try server.pactl(["set-source-mute", "mic", "0"])
        let ended = d.client.waitForSignal(s, "InterruptionEnded")
        #expect(ended.first?.first == .bool(false), "\(ended)")
        #expect(d.client.property(s, API.session.name, "Active") == .bool(false))
        // audiod never touches the source itself: muted again by the user, it stays muted.
        _ = try server.pactl(["set-source-mute", "mic", "1"])
        usleep(300_000)
        #expect(try server.pactl(["get-source-mute", "mic"]).contains("yes"))
        _ = try server.pactl(["set-source-mute", "mic", "0"])
        // An explicit call capturing from it is not interrupted: muting oneself is part of a call.
        let phone = try server.spawn(["parec", "--client-name=phone", "--device=mic", "/dev/null"])
        let call = try d.client.makeSession(pid: phone.pid, "play-and-record", mode: "voice-chat", activate: true)
        _ = try server.pactl(["set-source-mute", "mic", "1"])
        usleep(500_000)
        #expect(
            d.client.received(call, "InterruptionBegan").isEmpty, "the call was interrupted by the microphone switch")
        #expect(d.client.property(call, API.session.name, "Active") == .bool(true))
    }
}
