import AudioPolicy
import CPulse
import Testing

/// AudioPolicy computes ducked volumes without libpulse (it imports nothing); the server applies them with
/// libpulse's rules. If the two disagreed by even one step, audiod would take its own duck for a user's change.
@Suite struct VolumeParityTests {
    @Test func fromLinearMatchesLibpulse() {
        var mismatches: [String] = []
        for i in 1...100_000 {
            let v = Double(i) / 100_000
            let ours = Volume.fromLinear(v)
            let theirs = pa_sw_volume_from_linear(v)
            if ours != theirs { mismatches.append("\(v): \(ours) vs \(theirs)") }
        }
        for v in [0.0, -1.0, 1.5, 2.0, 10.0] where Volume.fromLinear(v) != pa_sw_volume_from_linear(v) {
            mismatches.append("\(v): \(Volume.fromLinear(v)) vs \(pa_sw_volume_from_linear(v))")
        }
        #expect(mismatches.isEmpty, "\(mismatches.count) mismatches, first: \(mismatches.prefix(5))")
    }

    @Test func multiplyMatchesLibpulse() {
        var mismatches = 0
        var first: String?
        let samples: [UInt32] = Array(stride(from: 0, through: 0x20000, by: 257)) + [1, 2, 3, 0xFFFF, 0x10000, 0x10001]
        for a in samples {
            for b in samples where Volume.multiply(a, b) != pa_sw_volume_multiply(a, b) {
                mismatches += 1
                if first == nil { first = "\(a)×\(b): \(Volume.multiply(a, b)) vs \(pa_sw_volume_multiply(a, b))" }
            }
        }
        #expect(mismatches == 0, "\(mismatches) mismatches, first: \(first ?? "-")")
    }

    @Test func theDuckFactorsWeUseMatch() {
        for level in [0.2, 0.5, 0.05, 0.3, 0.999, 0.001] {
            #expect(Volume.fromLinear(level) == pa_sw_volume_from_linear(level), "DuckLevel \(level)")
        }
    }
}
