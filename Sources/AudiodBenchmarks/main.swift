// The benchmark command (scripts/bench runs it in release mode): the built audiod on a private bus and sound
// server, measured from the outside next to the floor and the peers, on every installed server.
//
// Usage: AudiodBenchmarks [iterations] [pulseaudio|pipewire …] [--baseline FILE | --write-baseline FILE]
// (default: 200, every installed server; the baseline holds audiod's CPU per call and per identification as multiples
// of a calibration workload, and a figure past twice its baseline fails the run — the test command's guard)
// For digging into one figure: BENCH_STREAMS=1,10 (the activation rows), BENCH_EXTRA=98 (the idle ambient
// sessions beside the two that compete), BENCH_LOG=debug (audiod's log level; the log is kept in $TMPDIR, as it
// is after a failed run, and every stream write in it is checked against the decision before it; =trace also
// prints where an activation's and a phone stream's time goes), BENCH_DUMP=1 (every round of the activation rows,
// to see where a p99 comes from), BENCH_CHURN (streams per churn row), BENCH_CHURN_RATES (default 100,500,1000,5000),
// BENCH_CHURN_TOTAL (streams for the memory check), BENCH_CHURN_CONNECTIONS=1 (on PulseAudio too, a connection per
// churned stream), BENCH_ONLY=memory,activation,phone,ring,sleep,overlap,clicks,churn,calls,identity (only these parts;
// start-up always), BENCH_OVERLAP_DEBUG=1 (per overlap round: what the recording held), BENCH_OVERLAP_DUMP=PATH (and
// each round's samples, raw s16le mono, in PATH.1, PATH.2, …), BENCH_OVERLAP_TRACE=1 (per overlap round: the
// trigger, the new sound's first window and the old one's end, on the clock of audiod's trace; with BENCH_LOG the
// overlap part's audiod log is kept as $TMPDIR/audiod-bench-KIND-overlap.log to lay beside them), BENCH_NICE_LEVEL=0
// (audiod's `nice-level`: 0 runs it as started, for the figures before its loop asked for the sound server's -11),
// BENCH_OVERLAP_ROWS=activation,phone,pip,silent,ring (only these transitions of the overlap part),
// BENCH_OVERLAP_ROUNDS (rounds per overlap row; default 100), BENCH_CLICK_ROUNDS (rounds per transition of the clicks
// part; default a tenth of the iterations, 3 to 12), BENCH_CLICK_DUMP=1 (each click round's figures, or its dropout),
// BENCH_CLICK_SAVE=DIR (each click round's recording, raw s16le mono, in DIR), BENCH_DE_CLICK=S and BENCH_FADE_IN=S
// (audiod's `de-click` and `fade-in`, seconds; 0 for steps).

import AudioPolicy
import AudiodCore
import AudiodTestKit
import BenchGuard
import DBusService
import Foundation
import Logging
import PulseBackend
import PulseLoop
import Synchronization

// `--baseline FILE`: the CPU figures compared with a committed baseline (`--write-baseline FILE` records one).
let (baselinePath, afterBaseline) = BenchGuard.option("--baseline", in: Array(CommandLine.arguments.dropFirst()))
let (writeBaselinePath, args) = BenchGuard.option("--write-baseline", in: afterBaseline)
let journalOnDisk = ProcessInfo.processInfo.environment["BENCH_JOURNAL"] == "disk"
/// BENCH_ONLY=activation: start-up and the activation rows only (scripts/bench's run with the journal on disk).
/// Also a comma list of the parts to measure — memory (idle and loaded), activation, phone, ring, sleep, churn, calls, identity — for
/// working on one figure; start-up is always measured.
let only: Set<String>? = ProcessInfo.processInfo.environment["BENCH_ONLY"].map {
    Set($0.split(separator: ",").map(String.init))
}
let onlyActivation = only == ["activation"]
func wants(_ part: String) -> Bool { only?.contains(part) ?? true }
let iterations = args.first.flatMap { Int($0) } ?? 200
let kinds =
    args.compactMap(ServerKind.init(rawValue:)).isEmpty
    ? ServerKind.allCases.filter(\.isInstalled) : args.compactMap(ServerKind.init(rawValue:))
let logger: Logger = {
    var l = Logger(label: "bench")
    l.logLevel = .critical
    return l
}()

struct Latency {
    var audiod: [UInt64] = []
    var floor: [UInt64] = []
}
struct Results {
    var startMs: [Double] = []
    var idleWakeupsPerSecond = 0.0
    var idleRSS = 0, idlePSS = 0, loadedRSS = 0, loadedPSS = 0
    /// `sessions`: how many, and "fading in" for the row whose rounds land in a give-back's fade-in.
    var activation: [(sessions: String, streams: Int, Latency)] = []
    var roleCork = Latency()  // audiod vs module-role-cork (floor = the module)
    /// A platform call's first signal (GNOME Calls' InterfacesAdded, incoming) → the music stream muted.
    var ring: [UInt64] = []
    /// `PrepareForSleep(true)` → three players paused and the inhibitor released.
    var sleep: [SleepRound] = []
    /// Two sounds that must not mix, as the sink's monitor records them.
    var overlap: OverlapResults?
    /// What each kind of policy change sounds like (a click, or a fade).
    var clicks: ClickResults?
    var callsPerSecond = 0.0, pingsPerSecond = 0.0
    /// audiod's CPU time per call, in µs.
    var setActiveCPUus = 0.0, pingCPUus = 0.0
    var churn: [ChurnRow] = []
    /// BENCH_LOG=trace: where an activation's time went, phase by phase (µs per round).
    var breakdown: [(phase: String, us: [UInt64])] = []
    var phoneBreakdown: [(phase: String, us: [UInt64])] = []
    /// audiod's resident memory after the first 1,000 churned streams, and after all of them.
    var churnRSS: (streams: Int, after1000: Int, afterAll: Int) = (0, 0, 0)
}

/// Context switches of every thread of a process: each is a wake-up (or a preemption).
func contextSwitches(_ pid: pid_t) -> Int {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
    return tasks.reduce(0) { sum, t in
        let text = (try? String(contentsOfFile: "/proc/\(pid)/task/\(t)/status", encoding: .utf8)) ?? ""
        return sum
            + text.split(separator: "\n").filter { $0.contains("ctxt_switches") }
            .compactMap { Int($0.split(separator: "\t").last?.trimmingCharacters(in: .whitespaces) ?? "") }.reduce(0, +)
    }
}

func sessionID(_ path: String) -> String { String(path.split(separator: "/").last ?? "") }

func expectSuccess(_ r: Result<[DBusValue], DBusError>, _ what: String) throws {
    if case .failure(let e) = r { throw BenchFailure("\(what): \(e)") }
}

/// Starts the built audiod and returns it with the time from spawning to its name answering on the bus.
/// How many streams audiod lists (`ListStreams`); 0 when it does not answer.
func listedStreams(_ bus: BusClient) -> Int {
    guard case .success(let out) = bus.manager("ListStreams"), case .array(_, let items)? = out.first else { return 0 }
    return items.count
}

/// `part`: a part that runs its own audiod beside the main one names its own journal.
func startAudiod(_ server: TestServer, config: String, client: BusClient, part: String = "") throws -> (Child, Double) {
    let t0 = nowNs()
    // The journal on tmpfs, where $XDG_RUNTIME_DIR is on a desktop; BENCH_JOURNAL=disk puts it in this run's
    // directory, on disk.
    let journal = journalOnDisk ? "\(server.directory)/journal" : "/dev/shm/audiod-bench-\(getpid())\(part)/journal"
    if let level = ProcessInfo.processInfo.environment["BENCH_NICE_LEVEL"],
        let text = try? String(contentsOfFile: config, encoding: .utf8), !text.contains("nice-level")
    {
        // Top-level keys go before the first table.
        try "nice-level = \(level)\n\(text)".write(toFile: config, atomically: true, encoding: .utf8)
    }
    // BENCH_DE_CLICK=S and BENCH_FADE_IN=S: audiod's `de-click` and `fade-in` (seconds; 0 for steps), to hear or
    // time the server's ramps against steps.
    for (variable, key) in [("BENCH_DE_CLICK", "de-click"), ("BENCH_FADE_IN", "fade-in")] {
        if let seconds = ProcessInfo.processInfo.environment[variable],
            let text = try? String(contentsOfFile: config, encoding: .utf8), !text.contains(key)
        {
            try "\(key) = \(seconds)\n\(text)".write(toFile: config, atomically: true, encoding: .utf8)
        }
    }
    let child = try server.spawn(
        [
            TestServer.builtProduct("audiod"), "--config", config, "--journal", journal, "--log-level",
            ProcessInfo.processInfo.environment["BENCH_LOG"] ?? "warning",
        ], log: "audiod.log")
    while nowNs() - t0 < 10_000_000_000 {
        if case .success = client.call(API.managerPath, API.peer.name, "Ping") {
            return (child, Double(nowNs() - t0) / 1e6)
        }
        usleep(200)
    }
    child.kill()
    throw BenchFailure("audiod did not own its name within 10 s: \(server.file("audiod.log").suffix(1000))")
}

func run(_ kind: ServerKind) throws -> Results {
    let server = try TestServer(kind)
    defer { server.stop() }
    // The run's directory goes with the server: audiod's log is kept when the run fails, or when BENCH_LOG asks
    // for a level (then it is what one wants to read).
    func keepLog(_ why: String) {
        let kept = "\(NSTemporaryDirectory())/audiod-bench-\(kind)\(why).log"
        var text = server.file("audiod.log")
        if !why.isEmpty {
            // What the server and its session manager hold, for a stream in a state nobody set.
            text += "\n--- pactl list sink-inputs\n" + ((try? server.pactl(["list", "sink-inputs"])) ?? "")
            text += "\n--- WirePlumber's restore-stream\n" + server.file("state/wireplumber/restore-stream")
            for log in ["pipewire-pulse.log", "pipewire.log", "pulse.log"] where !server.file(log).isEmpty {
                text += "\n--- \(log) (end)\n" + server.file(log).suffix(4000)
            }
        }
        if (try? text.write(toFile: kept, atomically: true, encoding: .utf8)) != nil {
            print("\(kind): audiod's log kept in \(kept)")
        }
    }
    do {
        let r = try measure(kind, server)
        if ProcessInfo.processInfo.environment["BENCH_LOG"] != nil { keepLog("") }
        if ["debug", "trace"].contains(ProcessInfo.processInfo.environment["BENCH_LOG"] ?? "") {
            let (writes, unexplained) = unexplainedWrites(server.file("audiod.log"))
            print(
                "\(kind): \(writes) stream writes in audiod's debug log, \(unexplained.count) not explained by the decision before them"
            )
            for u in unexplained.prefix(5) { print("  \(u)") }
        }
        return r
    } catch {
        keepLog("-failure")
        throw error
    }
}

func measure(_ kind: ServerKind, _ server: TestServer) throws -> Results {
    var r = Results()
    let busAddress = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
    // Sessions are made for this placeholder process, so that no session claims the benchmark's own streams by pid.
    let holder = try server.spawn(["sleep", "86400"])
    let config = "\(server.directory)/audiod.toml"
    // No linger: a call's implicit session ends with its stream, so that iterations do not wait 2 s each.
    try "linger = 0\n".write(toFile: config, atomically: true, encoding: .utf8)
    let bus = try BusClient(address: busAddress, recordSignals: false)
    defer { bus.close() }

    // Start-up: five starts, the last one stays.
    var daemon: Child?
    for i in 0..<5 {
        let (child, t) = try startAudiod(server, config: config, client: bus)
        r.startMs.append(t)
        if i < 4 {
            child.signal(SIGTERM)
            _ = child.wait(timeout: 10)
        } else {
            daemon = child
        }
    }
    guard let audiod = daemon else { throw BenchFailure("no daemon") }
    defer {
        audiod.signal(SIGTERM)
        _ = audiod.wait(timeout: 10)
    }

    // Idle: nothing but one idle bus client; 3 s first, for a server that has just started to settle (WirePlumber
    // is still at work for a second or two after pactl answers).
    sleep(3)
    if wants("memory") {
        (r.idleRSS, r.idlePSS) = processMemory(audiod.pid)
        let before = contextSwitches(audiod.pid)
        sleep(10)
        r.idleWakeupsPerSecond = Double(contextSwitches(audiod.pid) - before) / 10
    }

    // Loaded: 1,000 sessions and 200 streams belonging to them.
    if wants("memory") {
        // audiod bounds the sessions one connection owns (64): a thousand sessions come from 16 connections, as
        // they would from many apps.
        let owners = try (0..<16).map { _ in try BusClient(address: busAddress, recordSignals: false) }
        var paths: [String] = []
        for i in 0..<1000 {
            paths.append(
                try owners[i / 63].makeSession(
                    pid: holder.pid, i % 2 == 0 ? "ambient" : "playback",
                    options: i % 2 == 0 ? [] : ["mix-with-others"], activate: true))
        }
        // Four apps of 50 streams each, on two sinks: PipeWire mixes at most 128 streams into one sink (the
        // 129th times out).
        let secondSink = try server.pactl(["load-module", "module-null-sink", "sink_name=second"])
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let tones = try (0..<4).map { try ToneClient(server: server.pulseServer, name: "loaded-\($0)") }
        for i in 0..<200 {
            try tones[i % 4].open(
                ["audiod.session": sessionID(paths[i]), "media.role": "music"], device: i < 100 ? nil : "second")
        }
        guard waitFor(30, { listedStreams(bus) >= 200 }) else {
            throw BenchFailure("audiod did not list the 200 streams")
        }
        sleep(1)
        (r.loadedRSS, r.loadedPSS) = processMemory(audiod.pid)
        for t in tones { t.closeAll() }
        for o in owners { o.close() }
        // The second sink goes with the streams it was for: its thread would run on beside what is measured next.
        _ = try server.pactl(["unload-module", secondSink])
    }

    let observer = try Observer(server: server.pulseServer, logger: logger)
    defer { observer.stop() }
    let floorLoop = try MainLoop()
    floorLoop.start()
    let directOptions = {
        var o = PulseBackend.Options(server: server.pulseServer, clientName: "direct")
        o.readsDesktopEntries = false
        // The floor: a plain mute, as a client without audiod would write it.
        o.deClickMilliseconds = 0
        return o
    }()
    let direct = floorLoop.sync {
        floorLoop.bind(PulseBackend(loop: floorLoop, options: directOptions, logger: logger))
    }
    // The direct client only touches streams it has read: the floor waits until it knows them all.
    let known = Mutex<Set<UInt32>>([])
    floorLoop.sync {
        direct.value.onEvent = { e in
            switch e {
            case .policy(.streamAppeared(let i)), .policy(.streamChanged(let i)):
                _ = known.withLock { $0.insert(i.id.index) }
            case .policy(.streamRemoved(let id)): _ = known.withLock { $0.remove(id.index) }
            default: break
            }
        }
        direct.value.start()
    }
    defer {
        floorLoop.sync { direct.value.stop() }
        floorLoop.stop()
    }
    guard waitFor(10, { floorLoop.sync { direct.value.isConnected } }) else {
        throw BenchFailure("direct client did not connect")
    }

    /// A wait that ran out: which streams did not show `muted`, as the observer last saw them and as the server
    /// shows them now (a stream the server holds right that the observer never heard of is a lost report). Bounded:
    /// a few streams looked at, every tool under `timeout` (a wedged server must not hang the test command).
    func stuck(_ what: String, _ indexes: [UInt32], muted: Bool) -> BenchFailure {
        let listed = (try? server.playbackStreams()) ?? []
        let late = indexes.filter { observer.state($0)?.muted != muted }
        func shown(_ s: ObservedStream?) -> String {
            s.map { "\($0.muted ? "muted" : "unmuted") \($0.volume.max() ?? 0)" } ?? "no such stream"
        }
        let described = late.prefix(8).map { i in
            let seen = observer.state(i).map { "\($0.muted ? "muted" : "unmuted") \($0.volume)" } ?? "never seen"
            let now = listed.first { $0.index == i }
            let node = now?.properties["object.id"].map { ", node \(nodeProps(server, $0))" } ?? ""
            return "\(i): observer \(seen), server \(shown(now))\(node)"
        }
        // The mute the server shows, written once more, then the node read again: a node whose Props only went
        // unreported then shows its real values (on PipeWire 1.4.2 a give-back's ramp once left a mid-ramp factor
        // reported long after the ramp had run; docs/FADES.md).
        let rewritten = late.prefix(2).compactMap { i -> String? in
            guard let now = listed.first(where: { $0.index == i }), let node = now.properties["object.id"] else {
                return nil
            }
            _ = try? server.run(["timeout", "5", "pactl", "set-sink-input-mute", "\(i)", now.muted ? "1" : "0"])
            Thread.sleep(forTimeInterval: 0.3)
            let again = ((try? server.playbackStreams()) ?? []).first { $0.index == i }
            return "\(i) with its mute written again: server \(shown(again)), node \(nodeProps(server, node))"
        }
        return BenchFailure(
            "\(what): \(late.count) of \(indexes.count) late — \(described.joined(separator: "; "))"
                + (rewritten.isEmpty ? "" : " | " + rewritten.joined(separator: "; ")))
    }
    // Activation → competing streams muted, with 2 sessions (one stream), then 100 (1, 10 and 100 streams).
    // The rows time an activation that silences a stream playing steadily, as a user's does. Back to back, each
    // round would land about a millisecond after the last give-back, inside its fade-in (1 s: one more write before
    // the unmute, one more change event, and a write every 20 ms), which cost audiod 0.16 ms at p50 on average with
    // 100 sessions on PipeWire 0.3.65 (four interleaved pairs of runs, 0.03-0.27 ms each). So these rows run with `fade-in = 0` (written to the config, then
    // Reload), and two more rows (2 and 100 sessions, one stream) keep the fade-in: an activation within a second
    // of a give-back. BENCH_FADE_IN set: every row at that value, and no extra row.
    // Not on PipeWire 1.4: there a steady stream's activation is a server ramp (`de-click`), whose start a pulse
    // client cannot see and whose mute is written ~58 ms later; in a fade-in the stream is still quiet and its
    // silencing is a step, as before. Its rows keep the fade-in, and say so.
    let userFadeIn = ProcessInfo.processInfo.environment["BENCH_FADE_IN"] != nil
    let ramps = kind == .pipewire14 && !userFadeIn
    let fadeInFixed = userFadeIn || ramps
    let streams = ProcessInfo.processInfo.environment["BENCH_STREAMS"] ?? "1,10,100"
    let plans: [(extra: Int, streams: String, fading: Bool)] =
        ProcessInfo.processInfo.environment["BENCH_EXTRA"].flatMap(Int.init).map { [($0, streams, ramps)] }
        ?? [(0, "1", ramps), (98, streams, ramps)] + (fadeInFixed ? [] : [(0, "1", true), (98, "1", true)])
    // Reloaded only when the value changes (the steady rows come first), and given a second to settle: a run of 20
    // rounds right after two Reloads once measured 2.6 ms at p50 with 100 sessions on PipeWire.
    var fadeInOn = true
    func fadeIn(_ on: Bool) throws {
        guard !fadeInFixed, on != fadeInOn else { return }
        let text = try String(contentsOfFile: config, encoding: .utf8)
        let kept = text.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("fade-in =") }
        try ((on ? [] : ["fade-in = 0"]) + kept).joined(separator: "\n").appending("\n")
            .write(toFile: config, atomically: true, encoding: .utf8)
        try expectSuccess(bus.manager("Reload"), "Reload")
        fadeInOn = on
        sleep(1)
    }
    for (extra, streamCounts, fading) in plans where wants("activation") {
        try fadeIn(fading)
        let owner = try BusClient(address: busAddress, recordSignals: false)
        defer { owner.close() }
        let others = try (0..<(extra + 62) / 63).map { _ in try BusClient(address: busAddress, recordSignals: false) }
        defer { for o in others { o.close() } }
        for i in 0..<extra { _ = try others[i / 63].makeSession(pid: holder.pid, "ambient", activate: true) }
        let a = try owner.makeSession(pid: holder.pid, "playback")
        let b = try owner.makeSession(pid: holder.pid, "playback", activate: true)
        for n in streamCounts.split(separator: ",").compactMap({ Int($0) }) {
            // No role and an app name of their own: the floor client below mutes and unmutes these streams as a
            // mixer would, and WirePlumber, which saves a mute per role (else per app), can miss the last unmute
            // of a stream that ends at once — its race, not audiod's. Kept off the music app's entry so, and off
            // the next row's.
            // A name for each row: the rows with a fade-in repeat the others' sizes.
            let tones = try ToneClient(
                server: server.pulseServer, name: "competing-\(extra + 2)-\(n)\(fading ? "-fading" : "")")
            var indexes: [UInt32] = []
            for _ in 0..<n { indexes.append(try tones.open(["audiod.session": sessionID(b)]).index) }
            try expectSuccess(owner.session(b, "SetActive", [.bool(true), .strings([])]), "SetActive b")
            guard observer.wait(indexes, muted: false) != nil else {
                throw stuck("\(n) streams not unmuted", indexes, muted: false)
            }
            var lat = Latency()
            // A hundred streams take the server ~0.25 s to mute whoever asks: fewer rounds keep the run short.
            let rounds = n >= 100 ? max(10, iterations / 4) : iterations
            var sent: [UInt64] = []
            var seen: [UInt64] = []
            // audiod's rounds first, then the floor's: the two cannot take turns, as audiod answers each of the
            // floor's mutes (a user's change) with signals of its own that would still be on the bus.
            for _ in 0..<rounds {
                let t0 = nowNs()
                try expectSuccess(owner.session(a, "SetActive", [.bool(true), .strings([])]), "SetActive a")
                guard let t1 = observer.wait(indexes, muted: true) else {
                    throw stuck("\(n) streams not muted", indexes, muted: true)
                }
                lat.audiod.append(t1 - t0)
                sent.append(t0)
                seen.append(t1)
                try expectSuccess(owner.session(b, "SetActive", [.bool(true), .strings([])]), "SetActive b")
                guard observer.wait(indexes, muted: false) != nil else {
                    throw stuck("\(n) streams not unmuted", indexes, muted: false)
                }
            }
            let ids = indexes.map { StreamID.playback($0) }
            guard waitFor(10, { known.withLock { $0.isSuperset(of: indexes) } }) else {
                throw BenchFailure("the direct client did not see the \(n) streams")
            }
            for _ in 0..<rounds {
                let t0 = nowNs()
                floorLoop.sync { direct.value.apply(ids.map { .setStreamMute($0, true) }) }
                guard let t1 = observer.wait(indexes, muted: true) else {
                    throw stuck("floor: not muted", indexes, muted: true)
                }
                lat.floor.append(t1 - t0)
                floorLoop.sync { direct.value.apply(ids.map { .setStreamMute($0, false) }) }
                guard observer.wait(indexes, muted: false) != nil else {
                    throw stuck("floor: not unmuted", indexes, muted: false)
                }
            }
            if n == 1, extra > 0, !fading || ramps, ProcessInfo.processInfo.environment["BENCH_LOG"] == "trace" {
                r.breakdown = breakdown(
                    server.file("audiod.log"), event: "setActive", sent: sent, seen: seen,
                    first: "bus: call → audiod")
            }
            if ProcessInfo.processInfo.environment["BENCH_DUMP"] != nil {
                print(
                    "audiod \(n): " + lat.audiod.map { String(format: "%.2f", Double($0) / 1e6) }.joined(separator: " ")
                )
            }
            r.activation.append((fading ? "\(extra + 2), fading in" : "\(extra + 2)", n, lat))
            tones.closeAll()
        }
    }
    // The parts below hear audiod's own fade-in.
    try fadeIn(true)

    if onlyActivation { return r }

    // An app that never talks to audiod starts a phone-role stream; another app's music stream goes quiet.
    var m: UInt32 = 0
    var phoneStarts: [UInt64] = []
    var phoneSeen: [UInt64] = []
    // On PulseAudio the rounds alternate with module-role-cork's in blocks (see the peer below): the machine's
    // state drifts between runs by more than the difference measured.
    let phoneBlocks = kind == .pulseaudio ? 4 : 1
    let phoneBlock = max(1, iterations / phoneBlocks)
    func phoneCalls(_ rounds: Int) throws -> [UInt64] {
        guard observer.wait([m], muted: false) != nil else {
            throw BenchFailure(
                "music muted before the call (the observer sees \(observer.state(m).map { "\($0)" } ?? "no such stream"))"
            )
        }
        var times: [UInt64] = []
        let phone = try ToneClient(server: server.pulseServer, name: "phone-app")
        for _ in 0..<rounds {
            let started = try phone.open(["media.role": "phone"]).startedAt
            guard let t1 = observer.wait([m], muted: true) else { throw BenchFailure("music not muted by the call") }
            times.append(t1 - started)
            phoneStarts.append(started)
            phoneSeen.append(t1)
            phone.closeAll()
            guard observer.wait([m], muted: false) != nil else {
                throw BenchFailure("music not unmuted after the call")
            }
        }
        return times
    }
    if wants("phone") {
        let music = try server.spawn([
            "pacat", "--playback", "/dev/zero", "--client-name=music-app", "--property=media.role=music",
        ])
        m = try server.waitForPlaybackStream(pid: music.pid).index
        r.roleCork.audiod = try phoneCalls(phoneBlock)
        if ProcessInfo.processInfo.environment["BENCH_LOG"] == "trace" {
            r.phoneBreakdown = breakdown(
                server.file("audiod.log"), event: "streamAppeared", sent: phoneStarts, seen: phoneSeen,
                first: "audiod has read it (one round trip)", told: "server: stream asked for → made, audiod told")
        }
        music.kill()
    }

    // The platform rings: this process owns org.gnome.Calls and announces an incoming call as GNOME Calls does
    // (InterfacesAdded with State 5, then State 7 to end it); an app's music stream goes quiet.
    if wants("ring") {
        let music = try server.spawn([
            "pacat", "--playback", "/dev/zero", "--client-name=music-app", "--property=media.role=music",
        ])
        let index = try server.waitForPlaybackStream(pid: music.pid).index
        r.ring = try rings(server, bus: busAddress, observer: observer, music: index, rounds: iterations)
        music.kill()
    }

    // Sleep: logind's PrepareForSleep → three mpv players paused and audiod's inhibitor let go (its own audiod, with
    // a system bus).
    if wants("sleep") {
        r.sleep = try sleeps(kind, players: 3, rounds: max(10, iterations / 4))
    }

    // What a person hears: how long two sounds that must not mix sound together (its own server and audiod).
    if wants("overlap") {
        // At most 100 rounds per row, ~0.5 s each: a full run (200 iterations) gives 100, the test command's brief
        // run 20; BENCH_OVERLAP_ROUNDS sets it.
        let rounds =
            ProcessInfo.processInfo.environment["BENCH_OVERLAP_ROUNDS"].flatMap { Int($0) } ?? min(iterations, 100)
        r.overlap = try overlaps(kind, rounds: rounds)
    }

    // What a policy change sounds like (its own server and audiod).
    if wants("clicks") {
        let rounds =
            ProcessInfo.processInfo.environment["BENCH_CLICK_ROUNDS"].flatMap { Int($0) }
            ?? max(3, min(iterations / 10, 12))
        r.clicks = try clicks(kind, rounds: rounds)
    }

    // Churn: game-role streams come and go with silent mode on, so each new one is a decision (a mute).
    if wants("churn") {
        try expectSuccess(
            bus.call(
                API.managerPath, API.properties.name, "Set",
                [.string(API.manager.name), .string("SilentMode"), .variant(.bool(true))]), "SilentMode on")
        let env = ProcessInfo.processInfo.environment
        let perRate = Int(env["BENCH_CHURN"] ?? "") ?? max(200, iterations * 10)
        // Streams at the device's rate (no resampler to set up). Playing: the server mixes every live one, which
        // bounds the rate it can make them at. Paused (corked): the cheapest stream for the server, to reach the
        // rates themselves. PulseAudio: 4 threads of 8 apps each; PipeWire: a connection per stream (see `churn`).
        let native: UInt32 = kind.isPipeWire ? 48000 : 44100
        let pooled = kind == .pulseaudio && env["BENCH_CHURN_CONNECTIONS"] == nil
        for corked in [false, true] {
            for rate in (env["BENCH_CHURN_RATES"] ?? "100,500,1000,5000").split(separator: ",").compactMap({ Int($0) })
            {
                var row = try churn(
                    rate: rate, total: min(perRate, rate * 10), server: server, observer: observer, audiod: audiod.pid,
                    threads: pooled ? 4 : 2, clientsPerThread: pooled ? 8 : 0, corked: corked, sampleRate: native)
                row.corked = corked
                r.churn.append(row)
            }
        }
        // Memory: what audiod holds once streams are gone must not grow with how many there ever were.
        // PipeWire makes streams about ten times slower than PulseAudio here: 20,000 there keeps the run short.
        let long =
            Int(env["BENCH_CHURN_TOTAL"] ?? "")
            ?? (iterations >= 100 ? (kind == .pulseaudio ? 100_000 : 20_000) : 3_000)
        // Corked, at the sink's own rate: the cheapest streams for the server to make, so the run is short.
        _ = try churn(
            rate: 5000, total: 1000, server: server, observer: observer, audiod: audiod.pid, corked: true,
            sampleRate: native)
        sleep(1)
        let after1000 = processMemory(audiod.pid).rss
        let rest = try churn(
            rate: 5000, total: long - 1000, server: server, observer: observer, audiod: audiod.pid, corked: true,
            sampleRate: native)
        r.churnRSS = (long, after1000, processMemory(audiod.pid).rss)
        print(
            "\(kind): \(long) streams came and went at \(Int(rest.achieved))/s; audiod's RSS \(after1000) kB after 1,000, \(r.churnRSS.afterAll) kB after all"
        )
        sleep(1)
        r.churnRSS = (long, after1000, processMemory(audiod.pid).rss)
        try expectSuccess(
            bus.call(
                API.managerPath, API.properties.name, "Set",
                [.string(API.manager.name), .string("SilentMode"), .variant(.bool(false))]), "SilentMode off")
    }

    // Calls per second: SetActive round trips from 8 clients at once, and Peer.Ping on the same daemon, in blocks that
    // take turns (SetActive, Ping, SetActive, …) so that both see the machine in the same states.
    if wants("calls") {
        let clients = try (0..<8).map { _ in try BusClient(address: busAddress, recordSignals: false) }
        defer { for c in clients { c.close() } }
        let sessions = try clients.map { try $0.makeSession(pid: holder.pid, "ambient") }
        /// Calls made and seconds taken in one block, and audiod's own CPU time over it (every thread's run time,
        /// in ns, from schedstat).
        func block(_ seconds: Double, _ call: @escaping @Sendable (Int, Int) -> Void) -> (
            calls: Double, seconds: Double, cpuNs: Double
        ) {
            let cpu0 = cpuNs(audiod.pid)
            let count = Atomic<Int>(0)
            let stop = Atomic<Bool>(false)
            let done = DispatchGroup()
            for c in 0..<clients.count {
                done.enter()
                Thread {
                    var i = 0
                    while !stop.load(ordering: .relaxed) {
                        call(c, i)
                        i += 1
                        count.add(1, ordering: .relaxed)
                    }
                    done.leave()
                }.start()
            }
            let t0 = nowNs()
            usleep(UInt32(seconds * 1_000_000))
            stop.store(true, ordering: .relaxed)
            done.wait()
            return (
                Double(count.load(ordering: .relaxed)), Double(nowNs() - t0) / 1e9, Double(cpuNs(audiod.pid) - cpu0)
            )
        }
        let cs = clients
        var setActive = (calls: 0.0, seconds: 0.0, cpuNs: 0.0)
        var ping = setActive
        for _ in 0..<6 {
            let a = block(0.5) { c, i in _ = cs[c].session(sessions[c], "SetActive", [.bool(i % 2 == 0), .strings([])])
            }
            let p = block(0.5) { c, _ in _ = cs[c].call(API.managerPath, API.peer.name, "Ping") }
            setActive = (setActive.calls + a.calls, setActive.seconds + a.seconds, setActive.cpuNs + a.cpuNs)
            ping = (ping.calls + p.calls, ping.seconds + p.seconds, ping.cpuNs + p.cpuNs)
        }
        (r.callsPerSecond, r.setActiveCPUus) = (
            setActive.calls / setActive.seconds, setActive.cpuNs / 1000 / setActive.calls
        )
        (r.pingsPerSecond, r.pingCPUus) = (ping.calls / ping.seconds, ping.cpuNs / 1000 / ping.calls)
    }

    // The peer: PulseAudio's module-role-cork instead of audiod, in blocks that alternate with audiod's (the first
    // of audiod's ran above): module, audiod, module, audiod, … — each side sees the machine in the same states.
    if kind == .pulseaudio, wants("phone") {
        audiod.signal(SIGTERM)
        _ = audiod.wait(timeout: 10)
        // A music stream of its own for each block: module-role-cork leaves the one it corked behind corked.
        func withMusic(_ body: () throws -> Void) throws {
            let music = try server.spawn([
                "pacat", "--playback", "/dev/zero", "--client-name=music-app", "--property=media.role=music",
            ])
            defer { music.kill() }
            m = try server.waitForPlaybackStream(pid: music.pid).index
            try body()
        }
        for block in 0..<phoneBlocks {
            let module = try server.pactl([
                "load-module", "module-role-cork", "trigger_roles=phone", "cork_roles=music",
            ]
            )
            .trimmingCharacters(in: .whitespacesAndNewlines)
            try withMusic { r.roleCork.floor += try phoneCalls(phoneBlock) }
            _ = try server.pactl(["unload-module", module])
            guard block < phoneBlocks - 1 else { break }
            let (again, _) = try startAudiod(server, config: config, client: bus)
            defer {
                again.signal(SIGTERM)
                _ = again.wait(timeout: 10)
            }
            try withMusic {
                // The music is known to this audiod before the first call.
                guard waitFor(10, { listedStreams(bus) > 0 }) else {
                    throw BenchFailure("the restarted audiod did not list the music stream")
                }
                r.roleCork.audiod += try phoneCalls(phoneBlock)
            }
        }
    }
    try? FileManager.default.removeItem(atPath: "/dev/shm/audiod-bench-\(getpid())")
    try? FileManager.default.removeItem(atPath: "/dev/shm/audiod-bench-\(getpid())-overlap")
    return r
}

let cpu =
    ((try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? "").split(separator: "\n")
    .first { $0.hasPrefix("model name") }.map {
        String($0.split(separator: ":").last ?? "").trimmingCharacters(in: .whitespaces)
    } ?? "?"
print("audiod benchmarks — \(iterations) iterations per latency row (\(max(10, iterations / 4)) with 100 streams)")
print(
    "machine: \(cpu), \(ProcessInfo.processInfo.activeProcessorCount) cores, \(ProcessInfo.processInfo.physicalMemory / 1_048_576) MB, \(ProcessInfo.processInfo.operatingSystemVersionString)"
)
print("audiod: \(TestServer.builtProduct("audiod"))")
var all: [(ServerKind, Results)] = []
// The guard's figures are CPU times, not latencies: a latency over the floor is scheduling on a busy machine more than
// audiod's work (the 100-session activation's ratio to the floor moved between 1.2 and 4.7 in runs of one build).
var benchGuard = BenchGuard(subject: "audiod's CPU per call and identification")
benchGuard.units.append(calibration())
for kind in kinds {
    let program =
        switch kind {
        case .pulseaudio: "pulseaudio"
        case .pipewire: "pipewire"
        case .pipewire14: ServerKind.pipewire14Bin + "/pipewire"
        }
    let version =
        (try? TestServer.runCapturing([program, "--version"], environment: ProcessInfo.processInfo.environment)) ?? ""
    print("\(kind): \(version.split(separator: "\n").filter { !$0.isEmpty }.joined(separator: "; "))")
    do {
        print(
            "\(kind): measuring (start-up, 10 s idle, 1,000 sessions, activation with 2 and 100 sessions, a phone-role stream, what is heard together, calls, churn, memory, peer)…"
        )
        fflush(nil)  // progress shows as it happens when piped to a file
        let r = try run(kind)
        all.append((kind, r))
        if r.setActiveCPUus > 0 {
            benchGuard.figures += [("\(kind) setactive-cpu", r.setActiveCPUus), ("\(kind) ping-cpu", r.pingCPUus)]
        }
        benchGuard.units.append(calibration())
    } catch {
        print("\(kind): FAILED: \(error)")
        exit(1)
    }
}

/// Writes or checks the baseline as asked; false when the check fails.
@MainActor func guardFigures() -> Bool {
    if let writeBaselinePath { benchGuard.write(to: writeBaselinePath) }
    guard let baselinePath else { return true }
    print("\n### The guard: CPU figures as multiples of a calibration workload, against \(baselinePath)\n")
    // A server the run skipped (not installed, or AUDIOD_SKIP_PIPEWIRE_1_4) has no figures to compare.
    let ran = Set(kinds.map(\.rawValue))
    return benchGuard.check(against: baselinePath) { key in
        let server = String(key.prefix { $0 != " " })
        return ServerKind(rawValue: server) != nil && !ran.contains(server)
    }
}

if wants("identity"), !onlyActivation {
    print("\n### Identifying a new app's stream: /proc read and desktop entries (no server)\n")
    let (rows, warm) = identityRows(iterations: iterations)
    print(rows)
    benchGuard.figures.append(("identity warm", warm))
}
print(
    "\n### Activation → competing streams muted, as an observer client sees it (journal on \(journalOnDisk ? "disk (ext4)" : "tmpfs"))\n"
)
print(
    "| server | sessions | streams | audiod p50 | audiod p99 | floor p50 | floor p99 | ratio p50 | ratio p99 | audiod − floor p50 |"
)
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
/// audiod p50 | p99 | floor p50 | p99 | ratios; the floor's cells empty when it was not measured.
func cells(_ l: Latency) -> String {
    let a50 = percentile(l.audiod, 0.5)
    let a99 = percentile(l.audiod, 0.99)
    guard !l.floor.isEmpty else { return "\(ms(a50)) | \(ms(a99)) | n/a | n/a | | |" }
    let f50 = percentile(l.floor, 0.5)
    let f99 = percentile(l.floor, 0.99)
    return "\(ms(a50)) | \(ms(a99)) | \(ms(f50)) | \(ms(f99)) | \(ratio(a50, f50)) | \(ratio(a99, f99)) |"
}
for (kind, r) in all {
    for (sessions, n, l) in r.activation {
        print(
            "| \(kind) | \(sessions) | \(n) | \(cells(l)) \(ms(percentile(l.audiod, 0.5) - percentile(l.floor, 0.5))) |"
        )
    }
}
/// BENCH_LOG=trace: where the activation's (and a phone stream's) time went, phase by phase.
@MainActor func printBreakdowns() {
    for (kind, r) in all {
        for (title, rows) in [
            ("an activation's time goes (100 sessions, 1 stream; µs from the client's call)", r.breakdown),
            ("a phone-role stream's time goes (µs from asking for the stream)", r.phoneBreakdown),
        ] where !rows.isEmpty {
            print("\n### \(kind): where \(title), --log-level trace\n")
            print("| phase | p50 | p99 |")
            print("|---|---:|---:|")
            for (phase, us) in rows {
                let s = us.sorted()
                print("| \(phase) | \(s[s.count / 2]) | \(s[min(s.count - 1, Int(Double(s.count - 1) * 0.99))]) |")
            }
        }
    }
}

if onlyActivation {
    printBreakdowns()
    exit(guardFigures() ? 0 : 1)
}
print(
    "\n### An unmanaged phone-role stream starts → the music stream muted (PulseAudio: audiod and module-role-cork in four alternating blocks each)\n"
)
print("| server | audiod p50 | audiod p99 | module-role-cork p50 | module-role-cork p99 | ratio p50 | ratio p99 |")
print("|---|---:|---:|---:|---:|---:|---:|")
for (kind, r) in all { print("| \(kind) | \(cells(r.roleCork))") }
if all.contains(where: { !$0.1.ring.isEmpty }) {
    print("\n### The platform rings (GNOME Calls' InterfacesAdded, incoming) → the music stream muted\n")
    print("| server | rounds | p50 | p99 |")
    print("|---|---:|---:|---:|")
    for (kind, r) in all where !r.ring.isEmpty {
        print("| \(kind) | \(r.ring.count) | \(ms(percentile(r.ring, 0.5))) | \(ms(percentile(r.ring, 0.99))) |")
    }
}
if all.contains(where: { !$0.1.sleep.isEmpty }) {
    print("\n### PrepareForSleep → three mpv players paused (streams corked) and the sleep inhibitor released\n")
    print("| server | rounds | paused p50 | paused p99 | released p50 | released p99 | both p50 | both p99 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for (kind, r) in all where !r.sleep.isEmpty {
        let p = r.sleep.map(\.paused)
        let q = r.sleep.map(\.released)
        let b = r.sleep.map(\.both)
        print(
            "| \(kind) | \(r.sleep.count) | \(ms(percentile(p, 0.5))) | \(ms(percentile(p, 0.99))) | \(ms(percentile(q, 0.5))) | \(ms(percentile(q, 0.99))) | \(ms(percentile(b, 0.5))) | \(ms(percentile(b, 0.99))) |"
        )
    }
    for (kind, r) in all where !r.sleep.isEmpty {
        // audiod sees the cork through the server, the observer too: a release a little before the observer's
        // cork is the same moment seen by two clients, not a release before the pause.
        let early = r.sleep.filter { $0.released + 1_000_000 < $0.paused }.count
        print(
            "\(kind): released more than 1 ms before the observer saw every player's stream corked in \(early) of \(r.sleep.count) rounds"
        )
    }
}
if all.contains(where: { $0.1.overlap != nil }) {
    print(
        "\n### Two sounds that must not mix: how long both are heard (the null sink's monitor, 2 ms windows; old 1 kHz, new 3 kHz)\n"
    )
    print(
        "| server | transition | by | rounds | both heard (windows) p50 | p99 | new's first → old's last (edges) p50 | p99 | both heard (edges) p99 | in periods | rounds heard together | trigger → old's last p50 | p99 | goal (p99) | met |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for (kind, r) in all {
        guard let o = r.overlap else { continue }
        for row in o.rows {
            let (goal, limit) = overlapGoal(kind, row, periodMs: o.periodMs)
            // Held to the overlap found at the edges (0.25 ms); the windows' count reads up to a window long.
            let heard = row.edgeMs.map { max(0, $0) }
            let p99 = dpercentile(heard, 0.99) ?? .infinity
            let met =
                row.by != "audiod"
                ? "reference"
                : limit == .infinity
                    ? (row.unarbitrated == 0 ? "reported" : "not met")
                    // Within the edges' step (0.25 ms) the method cannot tell an overlap from none.
                    : (row.unarbitrated == 0 && p99 <= limit + 0.25 ? "met" : "not met")
            print(
                "| \(kind) | \(row.transition) | \(row.by) | \(row.rounds)\(row.unarbitrated > 0 ? " (+\(row.unarbitrated) never quiet)" : "") "
                    + "| \(dms(dpercentile(row.overlapMs, 0.5))) | \(dms(dpercentile(row.overlapMs, 0.99))) "
                    + "| \(dms(dpercentile(row.edgeMs, 0.5))) | \(dms(dpercentile(row.edgeMs, 0.99))) | \(dms(dpercentile(heard, 0.99))) "
                    + "| \(o.periodMs > 0 && !heard.isEmpty ? String(format: "%.2f", p99 / o.periodMs) : "—") "
                    // Beyond the edges' step (0.25 ms): what the method can tell from none.
                    + "| \(heard.isEmpty ? "—" : "\(heard.filter { $0 > 0.25 }.count)") "
                    + "| \(dms(dpercentile(row.triggerMs, 0.5))) | \(dms(dpercentile(row.triggerMs, 0.99))) | \(goal) | \(met) |"
            )
        }
    }
    for (kind, r) in all {
        guard let o = r.overlap else { continue }
        print(
            "\(kind): \(o.rate) Hz; period \(String(format: "%.2f", o.periodMs)) ms (\(kind.isPipeWire ? "the driver's quantum" : "the null sink's latency")), capture block \(String(format: "%.2f", o.captureBlockMs)) ms; "
                + "the method: two tones started together heard together \(dms(dpercentile(o.together, 0.5))) p50 (of a 250 ms burst), "
                + "a tone muted before the other starts \(dms(dpercentile(o.mutedFirst, 0.99))) p99; at the edges: together \(dms(dpercentile(o.togetherEdge, 0.5))) p50, "
                + "muted first \(dms(dpercentile(o.mutedFirstEdge, 0.99))) p99 (negative: a gap)")
    }
}
if all.contains(where: { $0.1.clicks != nil }) {
    printClicks(all.compactMap { k, r in r.clicks.map { (k, $0) } })
}
print("\n### Calls, memory, idle\n")
print(
    "| server | SetActive/s (8 clients) | Peer.Ping/s | ratio | RSS idle | PSS idle | RSS 1,000 sessions + 200 streams | PSS loaded | idle wake-ups/s (10 s) | start → name p50 (max of 5) |"
)
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for (kind, r) in all {
    let starts = r.startMs.sorted()
    print(
        "| \(kind) | \(Int(r.callsPerSecond)) | \(Int(r.pingsPerSecond)) | \(ratio(r.callsPerSecond, r.pingsPerSecond)) "
            + "| \(r.idleRSS / 1024).\(r.idleRSS % 1024 * 10 / 1024) MB | \(r.idlePSS / 1024).\(r.idlePSS % 1024 * 10 / 1024) MB "
            + "| \(r.loadedRSS / 1024).\(r.loadedRSS % 1024 * 10 / 1024) MB | \(r.loadedPSS / 1024).\(r.loadedPSS % 1024 * 10 / 1024) MB "
            + "| \(String(format: "%.1f", r.idleWakeupsPerSecond)) | \(String(format: "%.1f", starts[starts.count / 2])) ms (\(String(format: "%.1f", starts.last ?? 0)) ms) |"
    )
}

print(
    "\n### audiod's own CPU time per call (its threads' run time, SetActive and Ping in six alternating 0.5 s blocks each)\n"
)
print("| server | per SetActive | per Peer.Ping | ratio |")
print("|---|---:|---:|---:|")
for (kind, r) in all {
    print(
        "| \(kind) | \(String(format: "%.1f", r.setActiveCPUus)) µs | \(String(format: "%.1f", r.pingCPUus)) µs | \(ratio(r.setActiveCPUus, r.pingCPUus)) |"
    )
}

print("\n### Stream churn: game-role streams come and go with silent mode on (each one muted by audiod)\n")
print(
    "| server | streams | target/s | achieved/s | stream events/s | streams | audiod CPU | server CPU | audiod / server | asked → muted p50 | p99 | appeared → muted p50 | p99 | gone before seen muted |"
)
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for (kind, r) in all {
    for c in r.churn {
        print(
            "| \(kind) | \(c.corked ? "paused" : "playing") | \(c.target) | \(Int(c.achieved)) | \(Int(c.achieved * 2)) | \(c.streams) "
                + "| \(String(format: "%.1f", c.audiodCPUms / c.seconds / 10)) % | \(String(format: "%.1f", c.serverCPUms / c.seconds / 10)) % "
                + "| \(ratio(c.audiodCPUms, c.serverCPUms)) | \(ms(percentile(c.lag, 0.5))) | \(ms(percentile(c.lag, 0.99))) "
                + "| \(ms(percentile(c.lagSinceAppeared, 0.5))) | \(ms(percentile(c.lagSinceAppeared, 0.99))) | \(c.unseen) |"
        )
    }
}
print("\n### audiod's memory as streams come and go\n")
print("| server | RSS after 1,000 streams | RSS after | streams in all | difference |")
print("|---|---:|---:|---:|---:|")
for (kind, r) in all {
    let (n, a, b) = r.churnRSS
    print("| \(kind) | \(a) kB | \(b) kB | \(n) | \(b - a) kB |")
}

printBreakdowns()
exit(guardFigures() ? 0 : 1)

/// A PipeWire node's own mute, factor and channel volumes, for a failure's message.
func nodeProps(_ server: TestServer, _ node: String) -> String {
    guard let p = server.nodeProps(node).first(where: { $0["mute"] != nil }) else { return "no Props shown" }
    return "mute \(p["mute"] ?? "?") volume \(p["volume"] ?? "?") channelVolumes \(p["channelVolumes"] ?? "?")"
}
