import AudiodTestKit
import DBusService
import Foundation
import Testing

/// Soak (the reliability suite): many clients doing random operations while an observer checks POLICY §9's invariants on the
/// real streams. CI runs 64 clients for 10 s; `AUDIOD_SOAK_SECONDS=60` is the long version.
///
/// How the observer avoids blaming audiod for the speed of light: invariant 1 is read from one
/// GetManagedObjects reply (audiod answers it from one engine state), so it is checked exactly, 20 times a
/// second. Rules 2–4 are about the real streams, which follow a decision by a millisecond or so: they are judged
/// strictly in quiet moments (the clients hold still for a few hundred ms) against a session state that did not
/// change while the streams were read. Invariant 6 is read from the order of the signals. 5 is checked at the
/// end: clients gone, then audiod gone. (7 needs record streams; the backend tests cover it.)
@Suite(.serialized)
struct SoakTests {
    struct Session: Equatable {
        var category = "", options: [String] = [], active = false, interrupted = false, mixable = false
        var handlesSecondary = false, implicit = false, streams: [UInt32] = []
        var isDucker: Bool { active && !interrupted && options.contains("duck-others") }
    }

    struct Snapshot: Equatable {
        var sessions: [String: Session] = [:]
        var silent = false
        var primary = "/"

        func owner(of stream: UInt32) -> (String, Session)? {
            sessions.first { $0.value.streams.contains(stream) }.map { ($0.key, $0.value) }
        }
        var duckers: Set<String> { Set(sessions.filter { $0.value.isDucker }.map(\.key)) }
    }

    /// The playback streams, if no mute, volume or cork moved in 60 ms: no fade is running.
    static func steady(_ server: TestServer) -> [ObservedStream]? {
        guard let first = try? server.playbackStreams() else { return nil }
        usleep(60_000)
        guard let second = try? server.playbackStreams(),
            second.map({ [$0.muted, $0.corked] }) == first.map({ [$0.muted, $0.corked] }),
            second.map(\.volume) == first.map(\.volume)
        else { return nil }
        return second
    }

    static func snapshot(_ c: BusClient) -> Snapshot? {
        guard case .success(let out) = c.call(API.managerPath, API.objectManager.name, "GetManagedObjects"),
            case .dict(_, _, let objects)? = out.first,
            case .success(let m) = c.call(API.managerPath, API.properties.name, "GetAll", [.string(API.manager.name)]),
            case .dict(_, _, let manager)? = m.first
        else { return nil }
        var snap = Snapshot()
        func props(_ pairs: [(DBusValue, DBusValue)]) -> [String: DBusValue] {
            var d: [String: DBusValue] = [:]
            for (k, v) in pairs { if case .string(let name) = k, case .variant(let inner) = v { d[name] = inner } }
            return d
        }
        let mp = props(manager)
        snap.silent = mp["SilentMode"] == .bool(true)
        if case .objectPath(let p)? = mp["PrimaryAudioSession"] { snap.primary = p }
        for (path, ifaces) in objects {
            guard case .objectPath(let p) = path, case .dict(_, _, let list) = ifaces else { continue }
            for (iface, values) in list {
                guard iface == .string(API.session.name), case .dict(_, _, let pairs) = values else { continue }
                let d = props(pairs)
                var s = Session()
                if case .string(let x)? = d["Category"] { s.category = x }
                if case .array(_, let xs)? = d["Options"] {
                    s.options = xs.compactMap { if case .string(let o) = $0 { o } else { nil } }
                }
                s.active = d["Active"] == .bool(true)
                s.interrupted = d["Interrupted"] == .bool(true)
                s.mixable = d["Mixable"] == .bool(true)
                s.handlesSecondary = d["HandlesSecondaryAudio"] == .bool(true)
                s.implicit = d["Implicit"] == .bool(true)
                if case .array(_, let xs)? = d["Streams"] {
                    s.streams = xs.compactMap { if case .uint32(let i) = $0 { i } else { nil } }
                }
                snap.sessions[p] = s
            }
        }
        return snap
    }

    /// The rules of POLICY §9 (2, 3, 4) that a stream breaks under a snapshot, with what they depend on.
    static func broken(_ s: ObservedStream, _ snap: Snapshot) -> [String] {
        let owner = snap.owner(of: s.index)
        var out: [String] = []
        let volume = s.volume.max() ?? 0
        if let (path, session) = owner {
            if snap.silent, ["ambient", "solo-ambient"].contains(session.category), !s.muted, !s.corked {
                out.append("2: silent mode, \(session.category) stream \(s.index) of \(path) audible")
            }
            if snap.primary != "/", snap.primary != path, session.category == "ambient", !session.handlesSecondary,
                !s.muted, !s.corked
            {
                out.append("3: primary audio \(snap.primary), ambient stream \(s.index) of \(path) audible")
            }
        }
        let duckers = snap.duckers
        let ownDucker = owner.map { duckers.contains($0.0) } ?? false
        let expected: UInt32 = duckers.isEmpty || ownDucker ? 65536 : ReliabilityTests.duckedNorm
        if abs(Int(volume) - Int(expected)) > 2 {
            out.append(
                "4: stream \(s.index) of \(owner?.0 ?? "no session") at volume \(volume), expected \(expected) with duckers \(duckers.sorted())"
            )
        }
        return out
    }

    static let categories: [(String, [[String]])] = [
        ("ambient", [[]]),
        ("solo-ambient", [[]]),
        ("playback", [[], ["mix-with-others"], ["duck-others"]]),
        ("play-and-record", [[], ["mix-with-others"]]),
    ]

    @Test("64 clients doing random operations: no POLICY §9 invariant broken on the real streams")
    func soak() throws {
        let seconds = Double(ReliabilityTests.setting("AUDIOD_SOAK_SECONDS", 10))
        let clientCount = ReliabilityTests.setting("AUDIOD_SOAK_CLIENTS", 64)
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        // `AUDIOD_SOAK_FADE_IN=N` sets the give-backs' fade-in to N seconds (0 turns it off); unset, audiod's 1 s.
        let fadeInSetting = ProcessInfo.processInfo.environment["AUDIOD_SOAK_FADE_IN"].flatMap { Int($0) }
        let fadeIn = fadeInSetting ?? 1
        if let fadeIn = fadeInSetting {
            let dir = "\(server.directory)/home/.config/audiod"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            try "fade-in = \(fadeIn)\n".write(toFile: "\(dir)/audiod.toml", atomically: true, encoding: .utf8)
        }
        let d = try Daemon.start(server, arguments: ["--log-level", "info"])
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        // Sixteen apps with a stream each; the first sixteen clients make their sessions for them (so the stream
        // moves between the app's explicit session and an implicit one as sessions come and go).
        // One at a time, and a second try: with 16 pacats started at once, PulseAudio 16.1 sometimes never shows
        // one of their streams (seen here without audiod running too).
        let apps = try (0..<16).map { i in
            let first = try playback(server, name: "app-\(i)")
            if (try? server.waitForPlaybackStream(pid: first.pid, timeout: 5)) != nil { return first }
            first.kill()
            let second = try playback(server, name: "app-\(i)")
            _ = try server.waitForPlaybackStream(pid: second.pid)
            return second
        }
        let holder = try server.spawn(["sleep", "3600"])

        let observerBus = d.client  // records every signal audiod sends
        let stop = Switch()
        let paused = Switch()
        let ops = Counter()
        let errors = Counter()
        var threads: [Thread] = []
        let clients = try (0..<clientCount).map { _ in try BusClient(address: address, recordSignals: false) }
        for (i, c) in clients.enumerated() {
            let pid = i < apps.count ? apps[i].pid : holder.pid
            let t = Thread {
                var r = FuzzTests.Rng(state: UInt64(i + 1) * 7919)
                var session: String?
                while !stop.isOn {
                    usleep(UInt32(20_000 + r.int(180_000)))
                    if paused.isOn { continue }
                    var result: Result<[DBusValue], DBusError>?
                    if let s = session {
                        switch r.int(10) {
                        case 0...2:
                            let (cat, opts) = r.pick(Self.categories)
                            result = c.session(
                                s, "SetCategory", [.string(cat), .string("default"), .strings(r.pick(opts))])
                        case 3...5: result = c.session(s, "SetActive", [.bool(true), .strings([])])
                        case 6...7:
                            result = c.session(
                                s, "SetActive",
                                [.bool(false), .strings(r.int(2) == 0 ? ["notify-others-on-deactivation"] : [])])
                        case 8:
                            result = c.session(s, "Release")
                            session = nil
                        default:
                            if i == 0 {
                                result = c.call(
                                    API.managerPath, API.properties.name, "Set",
                                    [.string(API.manager.name), .string("SilentMode"), .variant(.bool(r.int(2) == 0))])
                            } else {
                                result = c.call(
                                    s, API.properties.name, "Set",
                                    [
                                        .string(API.session.name), .string("HandlesSecondaryAudio"),
                                        .variant(.bool(r.int(2) == 0)),
                                    ])
                            }
                        }
                    } else if case .success(let out) = c.manager(
                        "CreateSession", [.properties([("pid", .uint32(UInt32(pid)))])]),
                        case .objectPath(let p)? = out.first
                    {
                        session = p
                        let (cat, opts) = r.pick(Self.categories)
                        result = c.session(
                            p, "SetCategory", [.string(cat), .string("default"), .strings(r.pick(opts))])
                    }
                    ops.add()
                    if case .failure(let e)? = result, !e.name.hasPrefix("org.audiod.AudioSession1.Error.") {
                        errors.add()
                    }
                }
            }
            t.start()
            threads.append(t)
        }

        // The observer. Invariant 1 on every snapshot; rules 2–4 in quiet moments: every so often the clients hold
        // still (an operation in flight finishes), audiod gets 200 ms, and every stream is judged strictly against
        // a session state that did not change while the streams were read.
        var checks = 0
        var inv1 = 0
        var quiet = 0
        // Quiet moments judged again after the longest fade, and how many of those the second look cleared.
        var rejudged = 0
        var cleared = 0
        var streamChecks = 0
        var violations: [String] = []
        var r = FuzzTests.Rng(state: 4242)
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let churn = Date().addingTimeInterval(0.3 + Double(r.int(700)) / 1000)
            while Date() < churn {
                usleep(50_000)
                guard let snap = Self.snapshot(observerBus) else {
                    violations.append("audiod did not answer GetManagedObjects")
                    break
                }
                checks += 1
                let exclusive = snap.sessions.filter { $0.value.active && !$0.value.interrupted && !$0.value.mixable }
                if exclusive.count > 1 {
                    inv1 += 1
                    violations.append(
                        "1: \(exclusive.count) non-mixable sessions active and uninterrupted: \(exclusive.keys.sorted())"
                    )
                }
            }
            paused.set(true)
            usleep(200_000)
            // Quiet means the fades have ended too (a duck takes 500 ms, a give-back 1 s, a step every 20 ms): the
            // streams read twice 60 ms apart are the same.
            var unconfirmed: [String] = []
            for _ in 0..<15 {
                guard let before = Self.snapshot(observerBus), let streams = Self.steady(server),
                    let after = Self.snapshot(observerBus), before == after
                else {
                    usleep(100_000)
                    continue
                }
                var found = streams.flatMap { Self.broken($0, before) }
                // Judged again: a volume (4), and silent mode's mute (2), which comes at the end of a 500 ms fade-out.
                func fading(_ v: String) -> Bool { v.hasPrefix("4:") || v.hasPrefix("2:") }
                if found.contains(where: fading) {
                    // Two equal reads 60 ms apart can still fall inside a fade when audiod or the server stalls on
                    // two busy cores: judge what the streams show once the longest fade is surely over, with no
                    // session changed meanwhile. What stays wrong stays a violation; every other mute is a step and
                    // is judged as first read.
                    usleep(UInt32(max(1_100_000, fadeIn * 1_000_000 + 100_000)))
                    guard let later = Self.steady(server), Self.snapshot(observerBus) == before else {
                        violations += found.filter { !fading($0) }
                        unconfirmed = found.filter(fading)
                        continue
                    }
                    let again = later.flatMap { Self.broken($0, before) }.filter(fading)
                    rejudged += 1
                    if again.isEmpty { cleared += 1 }
                    found = found.filter { !fading($0) } + again
                }
                quiet += 1
                streamChecks += streams.count
                violations += found
                unconfirmed = []
                break
            }
            // A wrong volume that no later quiet moment could confirm or clear is still a violation.
            violations += unconfirmed.map { "\($0) (not judged again: the sessions kept changing)" }
            paused.set(false)
        }
        stop.set(true)
        for _ in 0..<100 where threads.contains(where: { $0.isExecuting }) { usleep(20_000) }

        // 6: InterruptionEnded only after InterruptionBegan, at most once per begin.
        var began = 0
        var ended = 0
        var open: [String: Bool] = [:]
        for (path, member, _) in observerBus.allSignals() {
            if member == "InterruptionBegan" {
                began += 1
                open[path] = true
            }
            if member == "InterruptionEnded" {
                ended += 1
                if open[path] != true { violations.append("6: InterruptionEnded on \(path) without a begin") }
                open[path] = false
            }
        }

        // 5: the clients go; every stream is back at the user's values (unmuted, 100 %), and after audiod exits too.
        for c in clients { c.close() }
        let released = waitFor(10) {
            (try? server.playbackStreams())?.allSatisfy { !$0.muted && ($0.volume.max() ?? 0) == 65536 } == true
        }
        if !released {
            violations.append(
                "5: streams not restored after every client left: \(String(describing: try? server.playbackStreams()))")
        }
        let alive = {
            if case .success = d.client.call(API.managerPath, API.peer.name, "Ping") {
                return true
            } else {
                return false
            }
        }()
        d.stop()
        let clean = (try? server.playbackStreams())?.allSatisfy { !$0.muted && ($0.volume.max() ?? 0) == 65536 } == true
        if !clean { violations.append("5: streams not restored after audiod exited") }

        print(
            "reliability: soak \(Int(seconds)) s, \(clientCount) clients, \(apps.count) app streams: \(ops.value) operations "
                + "(\(errors.value) unexpected errors), \(began) interruptions began / \(ended) ended; observer: \(checks) snapshots, "
                + "\(inv1) broke invariant 1; \(quiet) quiet moments, \(streamChecks) stream states judged against rules 2–4 "
                + "(\(rejudged) quiet moments judged again after the fades, \(cleared) cleared by it); "
                + "violations: \(violations.count)")
        #expect(alive, "audiod stopped answering")
        #expect(ops.value > Int(seconds) * clientCount, "the clients made only \(ops.value) operations")
        #expect(errors.value == 0, "calls answered with errors that are not audiod's: \(errors.value)")
        #expect(violations.isEmpty, "violations: \(violations.prefix(20))")
        #expect(streamChecks > 0, "the observer never found a quiet moment to judge the streams in")
        for a in apps { a.kill() }
    }
}
