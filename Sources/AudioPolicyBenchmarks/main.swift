// The cost of one engine event at 10, 100, 1,000 and 10,000 sessions, each with a playing stream.
//
// Run: swift run -c release AudioPolicyBenchmarks
//
// Three everyday events, each affecting one or two sessions whatever the total:
// - volume: the user changes one stream's volume (one session);
// - activate: two non-mixable apps take the audio from each other in turn (two sessions);
// - stream: an unknown app's stream appears and goes away (its implicit session made and ended).
// If cost grew with all sessions rather than the affected ones, the columns would grow 10× per row.
import AudioPolicy
import Foundation

struct Bench {
    var engine = Engine()
    var clock: UInt64 = 0
    var request: UInt64 = 0

    mutating func send(_ e: Event) -> [Effect] {
        clock += 1_000
        return engine.handle(e, at: Instant(nanoseconds: clock))
    }

    mutating func req() -> RequestID {
        request += 1
        return RequestID(request)
    }

    /// `n` explicit sessions: mixable playback apps, active, each with one audible stream; plus the two
    /// non-mixable rivals of the activate benchmark.
    init(sessions n: Int) {
        for i in 0..<n {
            let pid = UInt32(10_000 + i)
            guard case .reply(_, .session(let id))? = send(.createSession(req(), NewSession(pid: pid))).last else {
                continue
            }
            _ = send(.setCategory(req(), id, category: "playback", mode: "default", options: ["mix-with-others"]))
            _ = send(
                .streamAppeared(
                    StreamInfo(id: .playback(UInt32(i)), processChain: [pid, 1], applicationName: "app\(i)")))
        }
    }
}

func percentile(_ sorted: [Double], _ p: Double) -> Double {
    sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
}

func measure(_ iterations: Int, _ body: (Int) -> Void) -> (median: Double, p99: Double) {
    let clock = ContinuousClock()
    var samples: [Double] = []
    samples.reserveCapacity(iterations)
    for i in 0..<iterations {
        let start = clock.now
        body(i)
        let d = clock.now - start
        samples.append(Double(d.components.attoseconds) / 1e12 + Double(d.components.seconds) * 1e6)
    }
    samples.sort()
    return (percentile(samples, 0.5), percentile(samples, 0.99))
}

func fmt(_ us: Double) -> String {
    let s = us < 10 ? String(Int(us * 100)) : String(Int(us * 10))
    let digits = us < 10 ? 2 : 1
    var t = s
    while t.count <= digits { t = "0" + t }
    t.insert(".", at: t.index(t.endIndex, offsetBy: -digits))
    return t
}

/// A fixed pure-Swift workload of the engine's kind (a dictionary filled, its values sorted and summed), timed in the
/// same run: the figures are compared with a baseline as multiples of it, so a slower or busier machine does not
/// read as a slower engine.
nonisolated(unsafe) var sink = 0
func calibration() -> Double {
    measure(2_000) { _ in
        var d: [Int: Int] = [:]
        var x = 12_345
        for i in 0..<64 {
            x = x &* 1_103_515_245 &+ 12_345
            d[(x >> 8) & 0xffff, default: 0] += i
        }
        var values = Array(d.values)
        values.sort()
        sink &+= values.reduce(0, &+)
    }.median
}

// Arguments: session counts, and `--baseline FILE` to compare with (or `--write-baseline FILE` to record one).
/// `name VALUE` out of the arguments: the value, and the arguments without both.
func option(_ name: String, in arguments: [String]) -> (String?, [String]) {
    guard let i = arguments.firstIndex(of: name) else { return (nil, arguments) }
    guard i + 1 < arguments.count else {
        print("error: \(name) needs a file")
        exit(64)
    }
    var rest = arguments
    rest.removeSubrange(i...(i + 1))
    return (arguments[i + 1], rest)
}
let (baselinePath, afterBaseline) = option("--baseline", in: Array(CommandLine.arguments.dropFirst()))
let (writePath, arguments) = option("--write-baseline", in: afterBaseline)
let sizes = arguments.compactMap { Int($0) }
let counts = sizes.isEmpty ? [10, 100, 1_000, 10_000] : sizes
// Timed before every row and once more at the end; the median of those is the unit, so that a machine whose speed
// changes during the run moves it too.
var units = [calibration()]
print("engine cost per event, µs (median / p99), release build")
print("| sessions | volume | activate | stream appears+goes |")
print("|---:|---:|---:|---:|")
/// Each figure's median over the calibration, by "sessions event".
var ratios: [(key: String, ratio: Double, median: Double)] = []
for n in counts {
    var b = Bench(sessions: n)
    let iterations = 2_000

    let volume = measure(iterations) { i in
        let index = UInt32((i * 7919) % n)
        let v: UInt32 = i % 2 == 0 ? 40_000 : 50_000
        _ = b.send(
            .streamChanged(
                StreamInfo(
                    id: .playback(index), processChain: [UInt32(10_000 + Int(index)), 1],
                    applicationName: "app\(index)",
                    volume: Volume(uniform: v))))
    }

    var rivals: [SessionID] = []
    for pid: UInt32 in [900, 901] {
        if case .reply(_, .session(let id))? = b.send(.createSession(b.req(), NewSession(pid: pid))).last {
            _ = b.send(.setCategory(b.req(), id, category: "playback", mode: "default", options: []))
            rivals.append(id)
        }
    }
    let activate = measure(iterations) { i in
        _ = b.send(.setActive(b.req(), rivals[i % 2], active: true, options: []))
    }

    let stream = measure(iterations / 2) { i in
        let id = StreamID.playback(UInt32(1_000_000 + i))
        let appeared = b.send(
            .streamAppeared(StreamInfo(id: id, processChain: [UInt32(500_000 + i), 1], applicationName: "x")))
        _ = b.send(.streamRemoved(id))
        for case .sessionAdded(let implicit) in appeared { _ = b.send(.timerFired(.linger(implicit.id))) }
    }
    if b.engine.sessionIDs.count != n + 2 {
        print("warning: \(b.engine.sessionIDs.count - n - 2) implicit sessions were not removed")
    }
    print(
        "| \(n) | \(fmt(volume.median)) / \(fmt(volume.p99)) | \(fmt(activate.median)) / \(fmt(activate.p99)) | \(fmt(stream.median)) / \(fmt(stream.p99)) |"
    )
    for (event, m) in [("volume", volume.median), ("activate", activate.median), ("stream", stream.median)] {
        ratios.append(("\(n) \(event)", m, m))
    }
    units.append(calibration())
}
let unit = units.sorted()[units.count / 2]
ratios = ratios.map { ($0.key, $0.median / unit, $0.median) }
print("calibration \(fmt(unit)) µs (median of \(units.count): \(units.map(fmt).joined(separator: ", ")))")

if let writePath {
    let text =
        "# AudioPolicyBenchmarks: each event's median cost as a multiple of the calibration workload's (sessions event ratio).\n"
        + ratios.map { "\($0.key) \(String(format: "%.3f", $0.ratio))" }.joined(separator: "\n") + "\n"
    do {
        try text.write(toFile: writePath, atomically: true, encoding: .utf8)
        print("baseline written to \(writePath)")
    } catch {
        print("error: cannot write \(writePath): \(error)")
        exit(1)
    }
}

// The guard: a figure more than twice its baseline's multiple of the calibration fails the run.
if let baselinePath {
    guard let text = try? String(contentsOfFile: baselinePath, encoding: .utf8) else {
        print("error: cannot read the baseline \(baselinePath)")
        exit(1)
    }
    var baseline: [String: Double] = [:]
    for line in text.split(separator: "\n") where !line.hasPrefix("#") {
        let parts = line.split(separator: " ")
        guard parts.count == 3, let r = Double(parts[2]) else {
            print("error: \(baselinePath): a line is not 'sessions event ratio': \(line)")
            exit(1)
        }
        baseline["\(parts[0]) \(parts[1])"] = r
    }
    // Every figure has a baseline and every baseline a figure: a guard that compared nothing would pass.
    let measured = Set(ratios.map(\.key))
    let unmatched = measured.symmetricDifference(baseline.keys).sorted()
    if !unmatched.isEmpty {
        print(
            "error: \(baselinePath) and this run do not measure the same figures (\(unmatched.joined(separator: ", "))); "
                + "run the session counts it has, or record a new baseline with --write-baseline")
        exit(1)
    }
    var slower: [String] = []
    for r in ratios {
        guard let b = baseline[r.key] else { continue }
        let line =
            "\(r.key): \(fmt(r.median)) µs = \(String(format: "%.2f", r.ratio))× the calibration, baseline \(String(format: "%.2f", b))× (\(String(format: "%.2f", r.ratio / b))× the baseline)"
        print("guard: " + line)
        if r.ratio > 2 * b { slower.append(line) }
    }
    if !slower.isEmpty {
        print("error: the engine is more than twice as slow as its baseline (\(baselinePath)):")
        for l in slower { print("  " + l) }
        exit(1)
    }
}
