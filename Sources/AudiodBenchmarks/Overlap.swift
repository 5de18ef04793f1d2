import AudiodTestKit
import DBusService
import DBusTransport
import Foundation
import Glibc
import Synchronization

/// What a person would hear: `parecord` of the null sink's monitor (mono, 16 bit, the server's rate, a 5 ms
/// fragment) in a process of its own — a capture stream in this process would be one app with the benchmark's
/// streams, and arbitrated with them — read through a FIFO, each block stamped as it arrives.
final class MonitorRecorder: @unchecked Sendable {
    // @unchecked: the reader thread appends behind the Mutex; the rest is set once.
    let rate: UInt32
    private let child: Child
    private let fd: Int32
    private let recorded = Mutex<(samples: [Int16], blocks: [(at: UInt64, total: Int)])>(([], []))
    private let done = DispatchSemaphore(value: 0)

    init(_ server: TestServer, rate: UInt32, latencyMs: Int = 5) throws {
        self.rate = rate
        let fifo = "\(server.directory)/monitor-\(nowNs()).fifo"
        guard mkfifo(fifo, 0o600) == 0 else { throw BenchFailure("mkfifo \(fifo) failed") }
        // The read end first, without waiting for a writer: posix_spawn returns only once the child has exec'd,
        // and the child opens the FIFO for writing before that.
        fd = open(fifo, O_RDONLY | O_NONBLOCK)
        guard fd >= 0 else { throw BenchFailure("cannot read \(fifo)") }
        child = try server.spawn(
            [
                "parecord", "--device=null.monitor", "--raw", "--format=s16le", "--channels=1", "--rate=\(rate)",
                "--latency-msec=\(latencyMs)", "--client-name=audiod-bench-recorder",
            ], log: URL(fileURLWithPath: fifo).lastPathComponent)
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        let t = Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 65536)
            var odd: UInt8?
            while true {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                let at = nowNs()
                var bytes = Array(buffer[0..<n])
                if let o = odd {
                    bytes.insert(o, at: 0)
                    odd = nil
                }
                if bytes.count % 2 == 1 { odd = bytes.removeLast() }
                let samples = bytes.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
                recorded.withLock { r in
                    r.samples.append(contentsOf: samples)
                    r.blocks.append((at, r.samples.count))
                }
            }
            done.signal()
        }
        t.start()
        // parecord's first blocks arrive while the server sets up the capture.
        guard waitFor(10, { self.count > 0 }) else { throw BenchFailure("parecord recorded nothing") }
        usleep(200_000)
    }

    var count: Int { recorded.withLock { $0.samples.count } }

    func samples(_ range: Range<Int>) -> [Int16] {
        recorded.withLock { r in
            let lo = max(0, min(range.lowerBound, r.samples.count))
            let hi = max(lo, min(range.upperBound, r.samples.count))
            return Array(r.samples[lo..<hi])
        }
    }

    /// When sample `index` arrived here, back-dated by the samples after it in its block (the capture path's own
    /// delay, about one fragment, is not taken off).
    func time(ofSample index: Int) -> UInt64? {
        recorded.withLock { r in
            guard let b = r.blocks.first(where: { $0.total > index }) else { return nil }
            return b.at - UInt64(b.total - 1 - index) * 1_000_000_000 / UInt64(rate)
        }
    }

    /// The median block that arrived at once, in samples.
    var medianBlock: Int {
        recorded.withLock { r in
            var sizes: [Int] = []
            var last = 0
            for b in r.blocks {
                sizes.append(b.total - last)
                last = b.total
            }
            sizes.sort()
            return sizes.isEmpty ? 0 : sizes[sizes.count / 2]
        }
    }

    func stop() {
        child.kill()
        _ = done.wait(timeout: .now() + 5)
        close(fd)
    }
}

/// Which of two tones sound in each window: the Goertzel power at each frequency against that of a tone of
/// `amplitude` (of full scale) filling the window (`threshold` 0.01 is −20 dB). A tone cut or started in the middle
/// of a window splashes a little power into every frequency: a tone counts only where its power is also at least a
/// quarter of the other's, as it is wherever both really sound (at the same amplitude).
func tonePresence(
    _ samples: [Int16], rate: Double, window: Int, frequencies: [Double], amplitude: Double = 0.3,
    threshold: Double = 0.01
) -> [[Bool]] {
    let reference = pow(amplitude * 32767 * Double(window) / 2, 2)
    let coefficients = frequencies.map { 2 * cos(2 * Double.pi * $0 / rate) }
    var out: [[Bool]] = []
    var start = 0
    while start + window <= samples.count {
        let powers = coefficients.map { c in
            var s1 = 0.0
            var s2 = 0.0
            for i in start..<(start + window) {
                let s0 = Double(samples[i]) + c * s1 - s2
                s2 = s1
                s1 = s0
            }
            return s1 * s1 + s2 * s2 - c * s1 * s2
        }
        let loudest = powers.max() ?? 0
        out.append(powers.map { $0 >= threshold * reference && $0 >= loudest / 4 })
        start += window
    }
    return out
}

/// How long two sounds that must not mix are heard together: the null sink's monitor recorded as a person would
/// hear it (a capture stream at the server's rate with a 5 ms fragment), each source playing its own tone (the old
/// sound 1 kHz, the new 3 kHz), the Goertzel power of both in 2 ms windows. Per round: the windows in which both
/// sound (the overlap), and from the new sound's first window to the old one's last (negative: a gap). Silent mode
/// and a ring bring no new sound: for them, from the trigger to the old sound's last window.
struct OverlapRow {
    var transition: String
    var by: String
    var overlapMs: [Double] = []
    var spanMs: [Double] = []
    /// The new sound's first sample to the old one's last at 0.25 ms (negative: a gap); `max(0, edge)` is how long
    /// both are heard, the figure the goal is held to.
    var edgeMs: [Double] = []
    var triggerMs: [Double] = []
    /// Rounds in which the old sound never went quiet, and rounds measured.
    var unarbitrated = 0, rounds = 0
}

struct OverlapResults {
    var rows: [OverlapRow] = []
    /// The server's block at this setting (PipeWire's driver quantum, the null sink's latency on PulseAudio), and
    /// the capture's median block, both in ms.
    var periodMs = 0.0, captureBlockMs = 0.0
    var rate: UInt32 = 0
    /// The method on known cases: two tones started together (overlap ≈ their length), one muted before the other
    /// starts (none).
    var together: [Double] = [], mutedFirst: [Double] = []
    /// The same, at the edges: started together ≈ the burst's length; muted first, negative (a gap).
    var togetherEdge: [Double] = [], mutedFirstEdge: [Double] = []
}

private let oldTone = 1000.0
private let newTone = 3000.0
private let burst: useconds_t = 250_000
private let windowMs = 2.0
nonisolated(unsafe) private var dumps = 0

/// What one round's recording says, from the sample at `start` on.
private struct Heard {
    var overlapMs: Double
    var spanMs: Double?
    /// From the new sound's first sample to the old one's last, found at 0.25 ms steps (see `edges`).
    var edgeMs: Double?
    var oldLastEnd: Int?
    var newFirst: Int?
    var quieted: Bool
}

/// The Goertzel magnitude of `frequency` over `samples[from..<from + n]`.
private func magnitude(_ samples: [Int16], from: Int, n: Int, coefficient c: Double) -> Double {
    var s1 = 0.0
    var s2 = 0.0
    for i in from..<(from + n) {
        let s0 = Double(samples[i]) + c * s1 - s2
        s2 = s1
        s1 = s0
    }
    return (s1 * s1 + s2 * s2 - c * s1 * s2).squareRoot()
}

/// Where the new sound starts and the old one ends, to a quarter of a millisecond rather than a whole window: a
/// 2 ms window slid in 0.25 ms steps, and an edge where a tone's magnitude crosses half of its level alone (a
/// tone's magnitude grows with the part of the window it fills, so half is where the window's middle is). Both
/// servers switch a stream's mute between two samples, without a ramp.
private func edges(_ samples: [Int16], rate: Double, window: Int, rows: [[Bool]], firstNew: Int, quietAt: Int)
    -> (newStart: Int, oldEnd: Int)?
{
    let step = max(1, Int(rate) / 4000)
    let cOld = 2 * cos(2 * Double.pi * oldTone / rate)
    let cNew = 2 * cos(2 * Double.pi * newTone / rate)
    func median(_ xs: [Double]) -> Double? { xs.isEmpty ? nil : xs.sorted()[xs.count / 2] }
    // Each tone's level in the windows it sounds in (Goertzel hears one frequency: the other tone barely counts).
    guard
        let oldLevel = median(
            (0..<quietAt).filter { rows[$0][0] }.map {
                magnitude(samples, from: $0 * window, n: window, coefficient: cOld)
            }),
        let newLevel = median(
            (firstNew..<rows.count).filter { rows[$0][1] }.map {
                magnitude(samples, from: $0 * window, n: window, coefficient: cNew)
            })
    else { return nil }
    var newStart: Int?
    var pos = max(0, (firstNew - 2) * window)
    while pos + window <= samples.count {
        if magnitude(samples, from: pos, n: window, coefficient: cNew) >= newLevel / 2 {
            newStart = pos + window / 2
            break
        }
        pos += step
    }
    var oldEnd: Int?
    pos = min(samples.count - window, quietAt * window)
    while pos >= 0 {
        if magnitude(samples, from: pos, n: window, coefficient: cOld) >= oldLevel / 2 {
            oldEnd = pos + window / 2
            break
        }
        pos -= step
    }
    guard let newStart, let oldEnd else { return nil }
    return (newStart, oldEnd)
}

private func analyse(_ recorder: MonitorRecorder, from start: Int, to end: Int) -> Heard {
    let window = Int(recorder.rate) / 500
    let samples = recorder.samples(start..<end)
    let rows = tonePresence(samples, rate: Double(recorder.rate), window: window, frequencies: [oldTone, newTone])
    // The old sound has gone quiet at the first window, once it was heard, that starts five windows without it.
    var quietAt: Int?
    var i = rows.firstIndex { $0[0] } ?? rows.count
    while i + 5 <= rows.count {
        if (i..<(i + 5)).allSatisfy({ !rows[$0][0] }) {
            quietAt = i
            break
        }
        i += 1
    }
    if ProcessInfo.processInfo.environment["BENCH_OVERLAP_DEBUG"] != nil {
        let peak = samples.map { abs(Int($0)) }.max() ?? 0
        print(
            "overlap debug: \(samples.count) samples, peak \(peak), windows \(rows.count), old in \(rows.filter { $0[0] }.count), new in \(rows.filter { $0[1] }.count), quiet at \(quietAt.map(String.init) ?? "-")"
        )
        if let path = ProcessInfo.processInfo.environment["BENCH_OVERLAP_DUMP"] {
            let data = samples.withUnsafeBytes { Data($0) }
            dumps += 1
            try? data.write(to: URL(fileURLWithPath: "\(path).\(dumps)"))
        }
    }
    // The new sound starts around when the old one stops; a window far later is the old one's return splashing.
    let firstNew = rows.indices.first { rows[$0][1] && $0 < (quietAt ?? rows.count) + 50 }
    let upTo = quietAt ?? rows.count
    let both = rows[0..<upTo].filter { $0[0] && $0[1] }.count
    var span: Double?
    var edge: Double?
    if let firstNew, let quietAt {
        span = Double(quietAt - firstNew) * windowMs
        if let e = edges(
            samples, rate: Double(recorder.rate), window: window, rows: rows, firstNew: firstNew, quietAt: quietAt)
        {
            edge = Double(e.oldEnd - e.newStart) * 1000 / Double(recorder.rate)
        }
    }
    return Heard(
        overlapMs: Double(both) * windowMs, spanMs: span, edgeMs: edge, oldLastEnd: quietAt.map { start + $0 * window },
        newFirst: firstNew.map { start + $0 * window }, quieted: quietAt != nil)
}

/// audiod's config for the parts that listen: the game app ambient, the video app playback, no linger.
func listeningConfig(_ server: TestServer) throws -> String {
    let config = "\(server.directory)/audiod.toml"
    try """
    linger = 0
    [apps.game-app]
    category = "ambient"
    [apps.video-app]
    category = "playback"

    """.write(toFile: config, atomically: true, encoding: .utf8)
    return config
}

/// The null sink's rate, as `pactl list short sinks` gives it.
func nullSinkRate(_ server: TestServer) throws -> UInt32 {
    let sinks = try server.pactl(["list", "short", "sinks"])
    guard let line = sinks.split(separator: "\n").first(where: { $0.contains("null") }),
        let hz = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).first(where: { $0.hasSuffix("Hz") }),
        let rate = UInt32(hz.dropLast(2))
    else { throw BenchFailure("no rate for the null sink in: \(sinks)") }
    return rate
}

/// A sine of `frequency` at `volume` of full scale as a raw s16le mono file at `rate`, in the run's directory.
func rawTone(
    _ server: TestServer, _ name: String, _ frequency: Double, rate: UInt32, seconds: Double, volume: Double
) throws -> String {
    let path = "\(server.directory)/\(name).raw"
    _ = try server.run([
        "sox", "-q", "-n", "-r", "\(rate)", "-e", "signed", "-b", "16", "-c", "1", "-t", "raw", path, "synth",
        "\(seconds)", "sine", "\(Int(frequency))", "vol", "\(volume)",
    ])
    return path
}

/// Silent mode, set through the manager's property as a settings panel would.
func setSilentMode(_ bus: BusClient, _ on: Bool) throws {
    try expectSuccess(
        bus.call(
            API.managerPath, API.properties.name, "Set",
            [.string(API.manager.name), .string("SilentMode"), .variant(.bool(on))]), "SilentMode")
}

/// Waits `ms` for what the server rendered up to now to reach the recording (a capture block or two, and margin).
private func settle(ms: Double) {
    usleep(useconds_t(ms * 1000))
}

/// BENCH_OVERLAP_ROWS=activation,phone,pip,silent,ring: only these transitions (the method's checks always run).
private func wanted(_ row: String) -> Bool {
    guard let only = ProcessInfo.processInfo.environment["BENCH_OVERLAP_ROWS"] else { return true }
    return only.split(separator: ",").contains { $0 == row }
}

func overlaps(_ kind: ServerKind, rounds: Int) throws -> OverlapResults {
    var out = OverlapResults()
    let server = try TestServer(kind)
    defer { server.stop() }
    // BENCH_LOG: audiod's log of this part is kept beside the others', to lay beside BENCH_OVERLAP_TRACE's rounds.
    defer {
        if ProcessInfo.processInfo.environment["BENCH_LOG"] != nil {
            try? server.file("audiod.log").write(
                toFile: "\(NSTemporaryDirectory())/audiod-bench-\(kind)-overlap.log", atomically: true, encoding: .utf8)
        }
    }
    let rate = try nullSinkRate(server)
    out.rate = rate
    let observer = try Observer(server: server.pulseServer, logger: logger)
    defer { observer.stop() }

    // The tones, as raw files at the sink's rate: every source is a pacat of its own, an app of its own to audiod.
    func toneFile(_ name: String, _ frequency: Double, seconds: Double) throws -> String {
        try rawTone(server, name, frequency, rate: rate, seconds: seconds, volume: 0.3)
    }
    let oldLong = try toneFile("old", oldTone, seconds: 600)
    let newLong = try toneFile("new", newTone, seconds: 600)
    let oldBurst = try toneFile("old-burst", oldTone, seconds: Double(burst) / 1e6)
    let newBurst = try toneFile("new-burst", newTone, seconds: Double(burst) / 1e6)
    /// A pacat of its own playing `file` (started, not waited for).
    func pacat(_ app: String, _ file: String, _ properties: [String] = []) throws -> Child {
        try server.spawn(
            ["pacat", "--playback", "--format=s16le", "--channels=1", "--rate=\(rate)", "--client-name=\(app)"]
                + properties.map { "--property=\($0)" } + [file])
    }
    func play(_ app: String, _ file: String, _ properties: [String] = []) throws -> (child: Child, index: UInt32) {
        let c = try pacat(app, file, properties)
        return (c, try server.waitForPlaybackStream(pid: c.pid).index)
    }
    /// A burst: played to its end (pacat drains what it was given, then exits).
    func burstOf(_ app: String, _ file: String, _ properties: [String] = []) throws {
        let c = try pacat(app, file, properties)
        guard c.wait(timeout: 10) != nil else { throw BenchFailure("a \(app) burst did not end") }
    }

    func record(_ body: (MonitorRecorder) throws -> Void) throws {
        let r = try MonitorRecorder(server, rate: rate)
        defer { r.stop() }
        try body(r)
        if out.captureBlockMs == 0 { out.captureBlockMs = Double(r.medianBlock) * 1000 / Double(rate) }
        // PipeWire hands the capture one block per graph cycle: its driver quantum (pw-top has no batch mode in
        // 0.3.65, and pw-dump does not show the quantum in force).
        if kind.isPipeWire { out.periodMs = out.captureBlockMs }
    }

    // The method on known cases, before anything arbitrates.
    let validation = max(5, rounds / 10)
    try record { r in
        for _ in 0..<validation {
            let start = r.count
            let a = try pacat("validation-a", oldBurst)
            try burstOf("validation-b", newBurst)
            _ = a.wait(timeout: 10)
            settle(ms: 100)
            let h = analyse(r, from: start, to: r.count)
            out.together.append(h.overlapMs)
            if let e = h.edgeMs { out.togetherEdge.append(e) }
        }
        for _ in 0..<validation {
            let start = r.count
            let a = try play("validation-a", oldLong)
            usleep(100_000)
            _ = try server.pactl(["set-sink-input-mute", "\(a.index)", "1"])
            guard observer.wait([a.index], muted: true) != nil else {
                throw BenchFailure("validation: the muted tone is not muted")
            }
            settle(ms: 30)
            try burstOf("validation-b", newBurst)
            a.child.kill()
            settle(ms: 100)
            let h = analyse(r, from: start, to: r.count)
            out.mutedFirst.append(h.overlapMs)
            if let e = h.edgeMs { out.mutedFirstEdge.append(e) }
        }
    }

    // Nothing arbitrating: a phone-role stream over music, the whole burst heard together.
    var nothing = OverlapRow(transition: "phone-role stream over music", by: "nothing")
    try record { r in
        let music = try play("music-app", oldLong, ["media.role=music"])
        defer { music.child.kill() }
        for _ in 0..<validation {
            usleep(100_000)
            let start = r.count
            try burstOf("phone-app", newBurst, ["media.role=phone"])
            settle(ms: 100)
            let h = analyse(r, from: start, to: r.count)
            // Nobody silences the music: the burst is heard over it from start to end.
            nothing.overlapMs.append(h.overlapMs)
            nothing.rounds += 1
        }
    }
    out.rows.append(nothing)

    // audiod, with rules for the game (ambient) and the video (playback), and no linger.
    let config = try listeningConfig(server)
    let busAddress = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
    let bus = try BusClient(address: busAddress, recordSignals: false)
    defer { bus.close() }
    var (audiod, _) = try startAudiod(server, config: config, client: bus, part: "-overlap")
    defer {
        audiod.signal(SIGTERM)
        _ = audiod.wait(timeout: 10)
    }
    let holder = try server.spawn(["sleep", "86400"])

    /// One round after another: `trigger` makes the new sound (or none) and returns when it was asked for;
    /// `restore` ends it; the old stream must go quiet in between (as the observer sees it) and come back after.
    func each(
        _ row: inout OverlapRow, old: UInt32, r: MonitorRecorder, newSound: Bool = true, trigger: () throws -> UInt64,
        restore: () throws -> Void
    ) throws {
        for _ in 0..<rounds {
            guard observer.wait([old], muted: false) != nil else {
                throw BenchFailure(
                    "\(row.transition): the old sound is muted before the round (the observer shows \(observer.state(old).map { "muted \($0.muted), corked \($0.corked)" } ?? "no stream \(old) of \(observer.indexes.sorted())"))"
                )
            }
            usleep(80_000)
            // From 30 ms of what was recorded before the trigger: what the server rendered just before it may
            // still be on its way to the recorder (PulseAudio's null sink renders ahead by up to a block).
            let start = max(0, r.count - Int(rate) * 30 / 1000)
            let t = try trigger()
            // The null sink renders in blocks of its latency, which follows the lowest any of its clients asks for:
            // read while the capture and the new stream run.
            if kind == .pulseaudio, out.periodMs == 0 { out.periodMs = try pulseSinkLatencyMs(server) }
            let quiet = observer.wait([old], timeout: 5) { $0.muted || $0.corked }
            try restore()
            settle(ms: 100)
            let h = analyse(r, from: start, to: r.count)
            guard quiet != nil, h.quieted else {
                row.unarbitrated += 1
                continue
            }
            // Without a new sound there is nothing to hear together (a window where the old tone stops may splash).
            if newSound { row.overlapMs.append(h.overlapMs) }
            if newSound, let s = h.spanMs { row.spanMs.append(s) }
            if newSound, let e = h.edgeMs { row.edgeMs.append(e) }
            row.rounds += 1
            if let end = h.oldLastEnd, let at = r.time(ofSample: end) {
                row.triggerMs.append((Double(at) - Double(t)) / 1e6)
            }
            // BENCH_OVERLAP_TRACE: each round's times (CLOCK_MONOTONIC ns, as audiod's trace log dates its events),
            // to lay the recording beside `--log-level trace`: the trigger, the new sound's first window, the old
            // one's end, the overlap.
            if ProcessInfo.processInfo.environment["BENCH_OVERLAP_TRACE"] != nil {
                let first = h.newFirst.flatMap { r.time(ofSample: $0) }
                let last = h.oldLastEnd.flatMap { r.time(ofSample: $0) }
                print(
                    "overlap-trace \(kind) \(row.by) \(row.transition.replacingOccurrences(of: " ", with: "_")) trigger=\(t) first=\(first.map(String.init) ?? "-") last=\(last.map(String.init) ?? "-") both=\(h.overlapMs)"
                )
            }
        }
    }

    // 1. An explicit non-mixable activation over music: the app activates, then starts its sound.
    if wanted("activation") {
        var activation = OverlapRow(transition: "explicit playback activation over music", by: "audiod")
        try record { r in
            let music = try play("music-app", oldLong, ["media.role=music"])
            defer { music.child.kill() }
            let session = try bus.makeSession(pid: holder.pid, "playback")
            var movie: Child?
            try each(
                &activation, old: music.index, r: r,
                trigger: {
                    let t = nowNs()
                    try expectSuccess(bus.session(session, "SetActive", [.bool(true), .strings([])]), "SetActive")
                    movie = try play("movie-app", newLong, ["audiod.session=\(sessionID(session))"]).child
                    return t
                },
                restore: {
                    usleep(burst)
                    movie?.kill()
                    try expectSuccess(
                        bus.session(session, "SetActive", [.bool(false), .strings(["notify-others-on-deactivation"])]),
                        "SetActive false")
                })
            _ = bus.session(session, "Release")
        }
        out.rows.append(activation)
    }

    // 2. An unmanaged phone-role stream over music (and on PulseAudio, module-role-cork doing the same job).
    func phoneOverMusic(by: String) throws -> OverlapRow {
        var row = OverlapRow(transition: "phone-role stream over music", by: by)
        try record { r in
            let music = try play("music-app", oldLong, ["media.role=music"])
            defer { music.child.kill() }
            var phone: Child?
            try each(
                &row, old: music.index, r: r,
                trigger: {
                    let t = nowNs()
                    phone = try pacat("phone-app", newBurst, ["media.role=phone"])
                    return t
                },
                restore: {
                    _ = phone?.wait(timeout: 10)
                    // module-role-cork leaves the music corked: a person would press play.
                    if by != "audiod" { _ = try? server.pactl(["suspend-sink", "null", "0"]) }
                })
        }
        return row
    }
    if wanted("phone") {
        out.rows.append(try phoneOverMusic(by: "audiod"))
        if kind == .pulseaudio {
            audiod.signal(SIGTERM)
            _ = audiod.wait(timeout: 10)
            let module = try server.pactl([
                "load-module", "module-role-cork", "trigger_roles=phone", "cork_roles=music",
            ]
            )
            .trimmingCharacters(in: .whitespacesAndNewlines)
            out.rows.append(try phoneOverMusic(by: "module-role-cork"))
            _ = try server.pactl(["unload-module", module])
            (audiod, _) = try startAudiod(server, config: config, client: bus, part: "-overlap")
        }
    }

    // 3. Picture-in-picture: the muted video is unmuted (by the user, as a player's mute button does) over a game.
    if wanted("pip") {
        var pip = OverlapRow(transition: "picture-in-picture unmuted over a game", by: "audiod")
        try record { r in
            let game = try play("game-app", oldLong)
            defer { game.child.kill() }
            let video = try play("video-app", newLong)
            defer { video.child.kill() }
            _ = try server.pactl(["set-sink-input-mute", "\(video.index)", "1"])
            guard observer.wait([video.index], muted: true) != nil else { throw BenchFailure("the video is not muted") }
            try each(
                &pip, old: game.index, r: r,
                trigger: {
                    let t = nowNs()
                    _ = try server.pactl(["set-sink-input-mute", "\(video.index)", "0"])
                    return t
                },
                restore: {
                    usleep(burst)
                    _ = try server.pactl(["set-sink-input-mute", "\(video.index)", "1"])
                })
        }
        out.rows.append(pip)
    }

    // 4. Silent mode switched on over a game: no new sound; from the property write to the game's last window.
    if wanted("silent") {
        var silent = OverlapRow(transition: "silent mode on over a game", by: "audiod")
        try record { r in
            let game = try play("game-app", oldLong)
            defer { game.child.kill() }
            try each(
                &silent, old: game.index, r: r, newSound: false,
                trigger: {
                    let t = nowNs()
                    try setSilentMode(bus, true)
                    return t
                },
                restore: {
                    usleep(burst)
                    try setSilentMode(bus, false)
                })
        }
        out.rows.append(silent)
    }

    // 5. The platform rings (GNOME Calls' InterfacesAdded for an incoming call) over music.
    if wanted("ring") {
        var ring = OverlapRow(transition: "a platform call rings over music", by: "audiod")
        try record { r in
            let calls = try BusClient(address: busAddress, recordSignals: false)
            defer { calls.close() }
            guard case .success(let got) = calls.callBus("RequestName", [.string("org.gnome.Calls"), .uint32(4)]),
                got.first == .uint32(1)
            else {
                throw BenchFailure("could not own org.gnome.Calls")
            }
            usleep(300_000)
            let music = try play("music-app", oldLong, ["media.role=music"])
            defer { music.child.kill() }
            var n = 0
            var current = ""
            try each(
                &ring, old: music.index, r: r, newSound: false,
                trigger: {
                    n += 1
                    current = "/org/gnome/Calls/Call/\(n)"
                    guard
                        let added = DBusMessage.signal(
                            path: "/org/gnome/Calls", interface: "org.freedesktop.DBus.ObjectManager",
                            member: "InterfacesAdded")
                    else { throw BenchFailure("cannot build InterfacesAdded") }
                    added.append([
                        .objectPath(current),
                        .dict(
                            key: "s", value: "a{sv}",
                            [
                                (
                                    .string("org.gnome.Calls.Call"),
                                    .properties([("State", .uint32(5)), ("Inbound", .bool(true))])
                                )
                            ]),
                    ])
                    let t = nowNs()
                    calls.send(added)
                    return t
                },
                restore: {
                    usleep(burst)
                    guard
                        let ended = DBusMessage.signal(
                            path: current, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged")
                    else { throw BenchFailure("cannot build PropertiesChanged") }
                    ended.append([.string("org.gnome.Calls.Call"), .properties([("State", .uint32(7))]), .strings([])])
                    calls.send(ended)
                })
        }
        out.rows.append(ring)
    }
    return out
}

/// The null sink's block as `pactl list sinks` reports it: its configured latency ("Latency: 1234 usec, configured
/// 4988 usec"), which the null sink renders in, and which follows the lowest any of its clients asks for. (The
/// first figure is how much is queued at the moment of asking, anywhere from 0 to a block: read once as the
/// period, it made one block's overlap look like 1.7–2 periods.)
private func pulseSinkLatencyMs(_ server: TestServer) throws -> Double {
    let text = try server.pactl(["list", "sinks"])
    for line in text.split(separator: "\n") where line.contains("Latency:") {
        let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "," })
        if let i = words.firstIndex(of: "configured"), i + 1 < words.count, let us = Double(words[i + 1]) {
            return us / 1000
        }
    }
    throw BenchFailure("no configured latency in pactl list sinks")
}

/// The goal a row is held to (docs/BENCHMARKS.md): none heard together where the new sound reaches the mix only
/// after audiod could act (an activation before the app plays; on PipeWire, a stream sounds once it is linked), at
/// most one period otherwise; silent mode and a ring bring no new sound.
func overlapGoal(_ kind: ServerKind, _ row: OverlapRow, periodMs: Double) -> (String, Double) {
    if row.by != "audiod" { return ("reference", .infinity) }
    switch row.transition {
    case "explicit playback activation over music": return ("0", 0)
    case "phone-role stream over music": return kind.isPipeWire ? ("0", 0) : ("≤ 1 period", periodMs)
    case "picture-in-picture unmuted over a game": return ("≤ 1 period", periodMs)
    default: return ("none (no new sound)", .infinity)
    }
}

func dpercentile(_ xs: [Double], _ p: Double) -> Double? {
    guard !xs.isEmpty else { return nil }
    let s = xs.sorted()
    return s[min(s.count - 1, Int((Double(s.count - 1) * p).rounded(.up)))]
}

func dms(_ x: Double?) -> String { x.map { String(format: "%.1f ms", $0) } ?? "—" }
