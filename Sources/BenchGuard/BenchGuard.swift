// What both benchmarks share to guard their figures: a calibration workload timed in the same run, and a committed
// baseline of each figure as a multiple of it. A slower or busier machine moves the calibration with the figures;
// code that got slower moves only the figures.
import Foundation

/// The median and p99 of `iterations` runs of `body`, in µs.
public func measure(_ iterations: Int, _ body: (Int) -> Void) -> (median: Double, p99: Double) {
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
    func at(_ p: Double) -> Double {
        samples.isEmpty ? 0 : samples[min(samples.count - 1, Int(Double(samples.count) * p))]
    }
    return (at(0.5), at(0.99))
}

nonisolated(unsafe) private var sink = 0

/// A fixed pure-Swift workload of the engine's kind (a dictionary filled, its values sorted and summed): its median
/// in µs. Time it before, between and after a run's parts and take the median, so that a machine whose speed changes
/// during the run moves it too.
public func calibration() -> Double {
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

/// The figures of one run, each as a multiple of the run's calibration, and what a baseline says of them.
public struct BenchGuard {
    /// Name (no spaces within its words' separator: "sessions event", "server figure") and value in µs.
    public var figures: [(key: String, value: Double)] = []
    /// The calibration's timings during the run.
    public var units: [Double] = []
    /// What the figures are, for the messages ("the engine", "audiod's CPU per call").
    public let subject: String

    public init(subject: String) { self.subject = subject }

    public var unit: Double { units.isEmpty ? 1 : units.sorted()[units.count / 2] }

    /// `name VALUE` out of the arguments: the value, and the arguments without both. A name without its value is an
    /// error that names what is missing.
    public static func option(_ name: String, in arguments: [String]) -> (String?, [String]) {
        guard let i = arguments.firstIndex(of: name) else { return (nil, arguments) }
        guard i + 1 < arguments.count else {
            print("error: \(name) needs a file")
            exit(64)
        }
        var rest = arguments
        rest.removeSubrange(i...(i + 1))
        return (arguments[i + 1], rest)
    }

    private var ratios: [(key: String, ratio: Double, value: Double)] {
        let u = unit
        return figures.map { ($0.key, $0.value / u, $0.value) }
    }

    private static func fmt(_ us: Double) -> String { String(format: us < 10 ? "%.2f" : "%.1f", us) }

    /// Writes the figures as multiples of the calibration (`key ratio` lines under a comment); exits 1 if it cannot.
    public func write(to path: String) {
        guard !figures.isEmpty else {
            print("error: this run measured no figure for \(path): nothing written (run the parts it guards)")
            exit(1)
        }
        let text =
            "# \(subject): each figure as a multiple of the calibration workload's median (key ratio).\n"
            + ratios.map { "\($0.key) \(String(format: "%.3f", $0.ratio))" }.joined(separator: "\n") + "\n"
        do {
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            print("baseline written to \(path)")
        } catch {
            print("error: cannot write \(path): \(error)")
            exit(1)
        }
    }

    /// Compares with the baseline at `path`: prints each figure beside its baseline, and returns false when one is
    /// more than twice its baseline's multiple (each named, with both figures) or the baseline cannot be used.
    /// `notRun`: a baseline's figure this run could not measure (a server not installed) is left out, and said so.
    public func check(against path: String, notRun: (String) -> Bool = { _ in false }) -> Bool {
        guard !figures.isEmpty else {
            print("error: this run measured no figure to compare with \(path) (run the parts it guards)")
            return false
        }
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            print("error: cannot read the baseline \(path)")
            return false
        }
        var baseline: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            let parts = line.split(separator: " ")
            guard parts.count >= 2, let r = Double(parts[parts.count - 1]), r > 0 else {
                print("error: \(path): a line is not 'key ratio' with a positive ratio: \(line)")
                return false
            }
            baseline[parts.dropLast().joined(separator: " ")] = r
        }
        let skipped = baseline.keys.filter { notRun($0) && !figures.map(\.key).contains($0) }.sorted()
        if !skipped.isEmpty {
            print("guard: not measured in this run, not compared: \(skipped.joined(separator: ", "))")
        }
        for k in skipped { baseline[k] = nil }
        // Every figure has a baseline and every baseline a figure: a guard that compared nothing would pass.
        let unmatched = Set(figures.map(\.key)).symmetricDifference(baseline.keys).sorted()
        if !unmatched.isEmpty {
            print(
                "error: \(path) and this run do not measure the same figures (\(unmatched.joined(separator: ", "))); "
                    + "run what it has, or record a new baseline with --write-baseline")
            return false
        }
        print(
            "calibration \(Self.fmt(unit)) µs (median of \(units.count): \(units.map(Self.fmt).joined(separator: ", ")))"
        )
        var slower: [String] = []
        for r in ratios {
            guard let b = baseline[r.key] else { continue }
            let line =
                "\(r.key): \(Self.fmt(r.value)) µs = \(String(format: "%.2f", r.ratio))× the calibration, baseline \(String(format: "%.2f", b))× (\(String(format: "%.2f", r.ratio / b))× the baseline)"
            print("guard: " + line)
            if r.ratio > 2 * b { slower.append(line) }
        }
        guard slower.isEmpty else {
            print("error: \(subject) is more than twice as slow as its baseline (\(path)):")
            for l in slower { print("  " + l) }
            return false
        }
        return true
    }
}
