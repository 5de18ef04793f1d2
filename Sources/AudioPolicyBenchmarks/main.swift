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
import BenchGuard
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

    /// Two non-mixable playback sessions (pids 900 and 901) that take the audio from each other.
    mutating func playbackRivals() -> [SessionID] {
        var rivals: [SessionID] = []
        for pid: UInt32 in [900, 901] {
            if case .reply(_, .session(let id))? = send(.createSession(req(), NewSession(pid: pid))).last {
                _ = send(.setCategory(req(), id, category: "playback", mode: "default", options: []))
                rivals.append(id)
            }
        }
        return rivals
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

func fmt(_ us: Double) -> String {
    let s = us < 10 ? String(Int(us * 100)) : String(Int(us * 10))
    let digits = us < 10 ? 2 : 1
    var t = s
    while t.count <= digits { t = "0" + t }
    t.insert(".", at: t.index(t.endIndex, offsetBy: -digits))
    return t
}

// Arguments: session counts, and `--baseline FILE` to compare with (or `--write-baseline FILE` to record one).
let (baselinePath, afterBaseline) = BenchGuard.option("--baseline", in: Array(CommandLine.arguments.dropFirst()))
let (writePath, arguments) = BenchGuard.option("--write-baseline", in: afterBaseline)
let sizes = arguments.compactMap { Int($0) }
let counts = sizes.isEmpty ? [10, 100, 1_000, 10_000] : sizes
// The calibration is timed before every row and once more at the end.
var benchGuard = BenchGuard(subject: "the engine")
benchGuard.units.append(calibration())
print("engine cost per event, µs (median / p99), release build")
print("| sessions | volume | activate | stream appears+goes |")
print("|---:|---:|---:|---:|")
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

    let rivals = b.playbackRivals()
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
        benchGuard.figures.append(("\(n) \(event)", m))
    }
    benchGuard.units.append(calibration())
}

// The one everyday event that touches every session: a handover between two playback apps while 98 ambient sessions
// hold the audio with no stream of their own. The only audible stream goes quiet and comes back, so every session's
// `OtherAudioPlaying` flips — AudiodBenchmarks' 100-session activation row in the engine alone.
do {
    var b = Bench(sessions: 0)
    for i in 0..<98 {
        guard
            case .reply(_, .session(let id))? = b.send(.createSession(b.req(), NewSession(pid: UInt32(20_000 + i))))
                .last
        else { continue }
        _ = b.send(.setCategory(b.req(), id, category: "ambient", mode: "default", options: []))
        _ = b.send(.setActive(b.req(), id, active: true, options: []))
    }
    let rivals = b.playbackRivals()
    guard rivals.count == 2 else {
        print("the handover's two sessions were not made")
        exit(1)
    }
    _ = b.send(.setActive(b.req(), rivals[1], active: true, options: []))
    _ = b.send(.streamAppeared(StreamInfo(id: .playback(1), processChain: [901, 1], applicationName: "b")))
    // Counted on one handover before the timing, so the timed events do only the engine's work.
    let changed = b.send(.setActive(b.req(), rivals[0], active: true, options: [])).filter {
        if case .sessionPropertiesChanged = $0 { true } else { false }
    }.count
    let handover = measure(2_000) { i in
        _ = b.send(.setActive(b.req(), rivals[(i + 1) % 2], active: true, options: []))
    }
    print(
        "handover with 100 sessions, every one's OtherAudioPlaying flipping (\(changed) sessions changed): \(fmt(handover.median)) / \(fmt(handover.p99)) µs"
    )
}
if let writePath { benchGuard.write(to: writePath) }
// The guard: a figure more than twice its baseline's multiple of the calibration fails the run.
if let baselinePath, !benchGuard.check(against: baselinePath) { exit(1) }
if baselinePath == nil {
    print("calibration \(fmt(benchGuard.unit)) µs (median of \(benchGuard.units.count))")
}
