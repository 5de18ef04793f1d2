import AudiodTestKit
import DBusService
import Foundation
import Testing

/// Random calls at audiod's D-Bus API (the reliability suite, short version): every call gets a reply or a
/// named error, audiod keeps answering, and it does not grow.
@Suite(.serialized)
struct FuzzTests {
    struct Rng {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func int(_ n: Int) -> Int { Int(next() % UInt64(n)) }
        mutating func pick<T>(_ xs: [T]) -> T { xs[int(xs.count)] }
    }

    static let words = [
        "", "playback", "ambient", "solo-ambient", "record", "play-and-record", "loud", "default", "voice-chat",
        "spoken-audio", "mix-with-others", "duck-others", "notify-others-on-deactivation", "pid", "lifetime",
        "process", "connection", "application-name", "SilentMode", "DuckLevel", "HandlesSecondaryAudio", "Category",
        "org.audiod.AudioSession1.Manager", "org.audiod.AudioSession1.Session", "org.freedesktop.DBus.Properties",
        "mpv", "ünïcödé ✓", String(repeating: "x", count: 3000),
    ]

    func value(_ r: inout Rng, depth: Int = 0) -> DBusValue {
        switch r.int(depth > 2 ? 9 : 13) {
        case 0: return .bool(r.int(2) == 0)
        case 1: return .uint32(r.pick([0, 1, 2, 4_000_000, UInt32(getpid()), UInt32.max]))
        case 2: return .int32(Int32(truncatingIfNeeded: r.next()))
        case 3: return .double(r.pick([0, 0.2, 1, 1.5, -1, .nan, .infinity, 1e300]))
        case 4, 5: return .string(r.pick(Self.words))
        case 6:
            return .objectPath(r.pick(["/", "/org/audiod/AudioSession1", "/org/audiod/AudioSession1/session/1", "/x"]))
        case 7: return .uint64(r.next())
        case 8: return .byte(UInt8(truncatingIfNeeded: r.next()))
        case 9: return .strings((0..<r.int(4)).map { _ in r.pick(Self.words) })
        case 10: return .variant(value(&r, depth: depth + 1))
        case 11: return .properties((0..<r.int(4)).map { _ in (r.pick(Self.words), value(&r, depth: depth + 1)) })
        default: return .structure((0..<(1 + r.int(3))).map { _ in value(&r, depth: depth + 1) })
        }
    }

    /// A value of the given (API) type, with contents drawn from the interesting words and numbers.
    func value(_ r: inout Rng, type: String) -> DBusValue {
        switch type {
        case "s": return .string(r.pick(Self.words))
        case "u": return .uint32(r.pick([0, 1, 2, 4_000_000, UInt32(getpid()), UInt32.max]))
        case "b": return .bool(r.int(2) == 0)
        case "d": return .double(r.pick([0, 0.2, 0.5, 1, 1.5, -1, .nan, .infinity]))
        case "o": return .objectPath(r.pick(["/", "/org/audiod/AudioSession1/session/1"]))
        case "as": return .strings((0..<r.int(4)).map { _ in r.pick(Self.words) })
        case "v": return .variant(r.int(2) == 0 ? value(&r, type: r.pick(["b", "d", "s", "u"])) : value(&r))
        case "a{sv}":
            return .properties(
                (0..<r.int(4)).map { _ in
                    (
                        r.pick(["pid", "lifetime", "application-name", "x"] + Self.words),
                        .variant(value(&r, type: r.pick(["s", "u", "b", "d"]))).variantInner
                    )
                })
        default: return value(&r)
        }
    }

    @Test(
        "5,000 random calls amid a liar's random signals and descriptors: each call answered with a reply or a named error; audiod keeps answering, holds no descriptor and does not grow"
    )
    func randomCalls() throws {
        let calls = Int(ProcessInfo.processInfo.environment["AUDIOD_FUZZ_CALLS"] ?? "") ?? 5_000
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server, log: "fuzz.log")
        defer { d.stop() }
        let music = try playback(server, name: "music")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        var r = Rng(state: UInt64(ProcessInfo.processInfo.environment["AUDIOD_FUZZ_SEED"] ?? "") ?? 7)
        let methods: [(String, String)] =
            API.manager.methods.map { (API.manager.name, $0.name) }
            + API.session.methods.map { (API.session.name, $0.name) }
            + API.properties.methods.map { (API.properties.name, $0.name) } + [
                (API.objectManager.name, "GetManagedObjects"), (API.introspectable.name, "Introspect"),
                (API.peer.name, "Ping"), ("org.audiod.AudioSession1.Manager", "Explode"), ("org.example.Nope", "Ping"),
            ]
        var sessions = ["/org/audiod/AudioSession1/session/1"]
        var replies = 0
        var errors: [String: Int] = [:]
        var unnamed = 0
        // A second connection lies throughout: random signals — forged bus-driver ones, player-shaped ones, audiod's
        // own names — broadcast or addressed to audiod alone, some carrying a descriptor.
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        let liar = try BusClient(address: address, recordSignals: false)
        defer { liar.close() }
        guard case .success(let owner) = liar.callBus("GetNameOwner", [.string(API.busName)]),
            let audiod = owner.first?.stringValue
        else { throw TestKitError("audiod has no unique name") }
        let fd = open("/dev/null", O_RDONLY)
        defer { close(fd) }
        let signals: [(String, String, String)] = [
            ("/org/freedesktop/DBus", "org.freedesktop.DBus", "NameOwnerChanged"),
            ("/org/mpris/MediaPlayer2", "org.freedesktop.DBus.Properties", "PropertiesChanged"),
            (API.managerPath, API.properties.name, "PropertiesChanged"),
            ("/org/audiod/AudioSession1/session/1", API.session.name, "InterruptionEnded"),
        ]
        var lies = 0
        // Warm up, then measure growth from here.
        for _ in 0..<200 { _ = d.client.call(API.managerPath, API.peer.name, "Ping") }
        let before = processMemory(d.child.pid).rss
        let descriptorsBefore = openDescriptors(d.child.pid)
        for i in 0..<calls {
            let (iface, member) = r.pick(methods)
            let path = r.int(3) == 0 ? API.managerPath : r.pick(sessions + [API.managerPath, "/", "/org/audiod"])
            // Half the calls with the method's own signature, so that they reach the engine, not just the checks.
            let signature =
                ([API.manager, API.session, API.properties].first { $0.name == iface }?.method(member)?.inputs.map(
                    \.type))
            let args: [DBusValue]
            if let signature, r.int(2) == 0 {
                args = signature.map { value(&r, type: $0) }
            } else {
                args = (0..<r.int(4)).map { _ in value(&r) }
            }
            if i % 2 == 0 {
                let (p, si, sm) = r.pick(signals)
                if let s = DBusMessage.signal(path: p, interface: si, member: sm) {
                    var sargs = (0..<r.int(4)).map { _ in value(&r) }
                    if r.int(3) == 0 { sargs.append(.unixFD(fd)) }
                    s.append(sargs)
                    if r.int(2) == 0 { s.setDestination(audiod) }
                    liar.send(s)
                    lies += 1
                }
            }
            switch d.client.call(path, iface, member, args) {
            case .success(let out):
                replies += 1
                if case .objectPath(let p)? = out.first, p.hasPrefix(API.sessionPathPrefix) { sessions.append(p) }
            case .failure(let e):
                if e.name.hasPrefix("org.freedesktop.DBus.Error.") || e.name.hasPrefix(API.errorPrefix),
                    !e.message.isEmpty || e.name.hasSuffix("NoReply")
                {
                    errors[e.name, default: 0] += 1
                } else {
                    unnamed += 1
                    Issue.record("call \(i) \(iface).\(member)(\(args)) on \(path): unnamed error \(e)")
                }
            }
            if i % 500 == 499 {
                // Keep audiod's state bounded (sessions and rules the calls made are real state, not growth):
                // what remains of RSS growth is then audiod's own.
                for p in sessions { _ = d.client.call(p, API.session.name, "Release") }
                sessions = ["/org/audiod/AudioSession1/session/1"]
                for w in Self.words { _ = d.client.manager("RemoveApplicationCategory", [.string(w)]) }
            }
            if i % 500 == 0 {
                guard case .success = d.client.call(API.managerPath, API.peer.name, "Ping") else {
                    Issue.record("audiod stopped answering after \(i) calls: \(server.file("fuzz.log").suffix(2000))")
                    return
                }
            }
        }
        let after = processMemory(d.child.pid).rss
        let descriptorsAfter = openDescriptors(d.child.pid)
        #expect(
            descriptorsAfter - descriptorsBefore <= 20,
            "audiod holds \(descriptorsAfter - descriptorsBefore) more descriptors")
        print(
            "reliability: fuzz: \(lies) lying signals, descriptors \(descriptorsBefore) → \(descriptorsAfter); \(calls) calls, \(replies) replies, errors \(errors.sorted { $0.key < $1.key }.map { "\($0.key.split(separator: ".").last ?? ""): \($0.value)" }.joined(separator: ", ")); RSS \(before) → \(after) kB"
        )
        #expect(unnamed == 0)
        #expect(errors["org.freedesktop.DBus.Error.NoReply"] == nil, "some calls were never answered")
        #expect(after - before < 1024, "audiod grew by \(after - before) kB over \(calls) calls")
        guard case .success = d.client.call(API.managerPath, API.peer.name, "Ping") else {
            Issue.record("audiod does not answer after the fuzz")
            return
        }
        #expect(d.child.wait(timeout: 0) == nil, "audiod exited")
    }

    /// Values of a D-Bus type that a caller may send and audiod must answer: the first is ordinary, the rest hostile.
    static func values(of type: String) -> [DBusValue] {
        switch type {
        case "s": [.string("music"), .string(""), .string(String(repeating: "a", count: 5_000)), .string("é\u{0}x")]
        case "b": [.bool(true), .bool(false)]
        case "u": [.uint32(1), .uint32(0), .uint32(.max)]
        case "i": [.int32(1), .int32(-1), .int32(.min)]
        case "d": [.double(0.5), .double(-1), .double(.nan), .double(.infinity), .double(1e308)]
        case "o":
            [
                .objectPath("/org/audiod/AudioSession1/session/1"), .objectPath("/"),
                .objectPath("/org/audiod/AudioSession1/session/99999"),
            ]
        case "as":
            [.strings(["mix-with-others"]), .strings([]), .strings([""]), .strings(Array(repeating: "x", count: 200))]
        case "a{sv}":
            [
                .properties([("application-name", .string("x"))]), .properties([]),
                .properties([("pid", .string("x"))]), .properties([("pid", .uint32(1))]),
                .properties([("lifetime", .string("forever"))]),
                .properties([("nope", .variant(.strings(["a"])))]),
            ]
        case "v": [.variant(.string("playback")), .variant(.uint32(7)), .variant(.strings([]))]
        default: [.string("x")]
        }
    }

    /// A value of another type than `type`.
    static func wrong(_ type: String) -> DBusValue { type == "s" ? .uint32(7) : .string("seven") }

    @Test(
        "every method of every interface, with every argument missing, mistyped or hostile, gets an answer: a reply or a named error"
    )
    func everyMethodAnswered() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server, log: "every-method.log")
        defer { d.stop() }
        let app = try playback(server, name: "app")
        let session = try d.client.makeSession(pid: app.pid, "playback")
        let tables: [(path: String, table: InterfaceDescription)] = [
            (API.managerPath, API.manager), (session, API.session), (API.managerPath, API.properties),
            (session, API.properties),
            (API.managerPath, API.objectManager), (API.managerPath, API.introspectable), (session, API.introspectable),
            (API.managerPath, API.peer),
        ]
        var calls = 0
        var replies = 0
        var unanswered: [String] = []
        var unnamed: [String] = []
        /// A reply, a named error with a message, or neither (no answer, or an error without a name or message).
        func judge(_ what: String, _ r: Result<[DBusValue], DBusError>) {
            calls += 1
            switch r {
            case .success: replies += 1
            case .failure(let e):
                if e.name == "org.freedesktop.DBus.Error.NoReply" || e.name == "org.freedesktop.DBus.Error.Timeout" {
                    unanswered.append(what)
                } else if e.name.isEmpty || e.message.isEmpty {
                    unnamed.append("\(what): '\(e.name)' '\(e.message)'")
                }
            }
        }
        for (path, table) in tables {
            for method in table.methods {
                let types = method.inputs.map(\.type)
                var argLists: [[DBusValue]] = []
                if !types.isEmpty { argLists.append([]) }
                argLists.append(types.map { Self.values(of: $0)[0] } + [.string("extra")])
                for (i, t) in types.enumerated() {
                    var wrong = types.map { Self.values(of: $0)[0] }
                    wrong[i] = Self.wrong(t)
                    argLists.append(wrong)
                    for v in Self.values(of: t) {
                        var args = types.map { Self.values(of: $0)[0] }
                        args[i] = v
                        argLists.append(args)
                    }
                }
                if types.isEmpty { argLists.append([]) }
                for args in argLists {
                    let what =
                        "\(table.name).\(method.name)(\(args.map(\.signature).joined(separator: ","))) on \(path)"
                    judge(what, d.client.call(path, table.name, method.name, args))
                }
            }
        }
        // Every property of both objects: read, and written with its own type's values and with another type.
        for (path, table) in [(API.managerPath, API.manager), (session, API.session)] {
            for p in table.properties {
                var argLists: [[DBusValue]] = [[.string(table.name), .string(p.name)]]
                for v in Self.values(of: p.type) + [Self.wrong(p.type)] {
                    argLists.append([.string(table.name), .string(p.name), .variant(v)])
                }
                for args in argLists {
                    let member = args.count == 2 ? "Get" : "Set"
                    let what = "\(member) \(table.name).\(p.name)(\(args.last?.description ?? "")) on \(path)"
                    judge(what, d.client.call(path, API.properties.name, member, args))
                }
            }
        }
        print(
            "reliability: every method: \(calls) calls, \(replies) replies, \(calls - replies - unanswered.count) named errors, \(unanswered.count) unanswered"
        )
        #expect(unanswered.isEmpty, "\(unanswered)")
        #expect(unnamed.isEmpty, "\(unnamed)")
        guard case .success = d.client.call(API.managerPath, API.peer.name, "Ping") else {
            Issue.record("audiod does not answer after the calls")
            return
        }
        #expect(d.child.wait(timeout: 0) == nil, "audiod exited")
    }
}

extension DBusValue {
    /// The value inside a variant (for `.properties`, which wraps each value itself).
    var variantInner: DBusValue {
        if case .variant(let v) = self { return v }
        return self
    }
}

/// Clients killed with SIGKILL in the middle of activation (the reliability suite, short version): every session is released and
/// nothing is left muted.
@Suite(.serialized)
struct KilledClientTests {
    @Test("audioctl run killed at random moments: sessions released, the interrupted app unmuted")
    func killDuringActivation() throws {
        let rounds = Int(ProcessInfo.processInfo.environment["AUDIOD_KILL_ROUNDS"] ?? "") ?? 40
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let music = try playback(server, name: "music")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        let a = try d.client.makeSession(pid: music.pid, "playback", activate: true)
        var r = FuzzTests.Rng(state: 11)
        for _ in 0..<rounds {
            let c = try server.spawn([
                TestServer.builtProduct("audioctl"), "run", "--category", "playback", "--", "sleep", "5",
            ])
            usleep(UInt32(r.int(60_000)))
            c.kill()
            // The music was interrupted (or not yet): re-activating it after each round is what its app would do.
            _ = d.client.session(a, "SetActive", [.bool(true), .strings([])])
        }
        // Every session audioctl made is gone: only the music's remains.
        var left: [String] = []
        #expect(
            waitFor(5) {
                guard
                    case .success(let out) = d.client.call(API.managerPath, API.objectManager.name, "GetManagedObjects"),
                    case .dict(_, _, let pairs)? = out.first
                else { return false }
                left = pairs.compactMap { if case .objectPath(let p) = $0.0, p != a { return p } else { return nil } }
                return left.isEmpty
            }, "sessions of killed clients left behind: \(left)")
        _ = d.client.session(a, "SetActive", [.bool(true), .strings([])])
        let unmuted = waitFor(5) { server.playbackStream(pid: music.pid)?.muted == false }
        #expect(unmuted, "the music was left muted")
        print(
            "reliability: \(rounds) `audioctl run` clients SIGKILLed 0–60 ms into activation: \(left.count) sessions left behind, "
                + "interrupted app \(unmuted ? "unmuted" : "LEFT MUTED")")
        // The killed commands' sleep processes are orphans now; they hold no session and no stream.
    }
}
