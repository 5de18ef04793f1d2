/// A per-channel software volume in libpulse's unit (`pa_volume_t`: 0 is silence, `Volume.norm` is 100 %).
///
/// The engine computes ducked volumes itself so that it can tell its own change from the user's; the arithmetic
/// is libpulse's, written out here because the engine imports nothing (PulseBackend's tests check it against
/// libpulse itself).
public struct Volume: Hashable, Sendable, CustomStringConvertible {
    /// `PA_VOLUME_NORM`.
    public static let norm: UInt32 = 0x10000
    /// `PA_VOLUME_MAX`.
    public static let max: UInt32 = UInt32.max / 2

    public var channels: [UInt32]

    public init(channels: [UInt32]) { self.channels = channels }

    /// The same value on `count` channels.
    public init(uniform value: UInt32, count: Int = 2) { self.channels = Array(repeating: value, count: count) }

    /// 100 % on two channels, the usual stereo default.
    public static let normal = Volume(uniform: norm)

    /// Whether every channel is at 0 (the stream makes no sound whatever it plays).
    public var isSilent: Bool { channels.allSatisfy { $0 == 0 } }

    /// `pa_sw_cvolume_multiply_scalar(self, factor)`: each channel times `factor`, in libpulse's domain.
    public func multiplied(by factor: UInt32) -> Volume {
        Volume(channels: channels.map { Volume.multiply($0, factor) })
    }

    /// Whether `other` equals this volume within `tolerance` on every channel (servers may round a value they
    /// were given: PipeWire stores floats).
    public func isClose(to other: Volume, tolerance: UInt32) -> Bool {
        guard channels.count == other.channels.count else { return false }
        for (a, b) in zip(channels, other.channels) {
            let d = a > b ? a - b : b - a
            if d > tolerance { return false }
        }
        return true
    }

    /// The point `fraction` (0…1) of the way from this volume to `other`, linear in amplitude (a fade heard as
    /// even: Android's duck is a linear amplitude ramp). Channel counts that differ give `other`.
    public func faded(to other: Volume, fraction: Double) -> Volume {
        guard channels.count == other.channels.count, fraction < 1 else { return other }
        let p = Swift.max(0, fraction)
        return Volume(
            channels: zip(channels, other.channels).map { a, b in
                let la = Volume.linear(a)
                return Volume.fromLinear(la + (Volume.linear(b) - la) * p)
            })
    }

    /// `pa_sw_volume_to_linear`: the cube of the value over NORM.
    static func linear(_ v: UInt32) -> Double {
        let x = Double(v) / Double(norm)
        return x * x * x
    }

    public var description: String {
        channels.map { "\(Volume.roundHalfUp(Double($0) * 100 / Double(Volume.norm)))%" }.joined(separator: " ")
    }

    /// `pa_sw_volume_multiply`: `(a·b + NORM/2) / NORM`, clamped to `PA_VOLUME_MAX`.
    public static func multiply(_ a: UInt32, _ b: UInt32) -> UInt32 {
        let r = (UInt64(a) * UInt64(b) + UInt64(norm) / 2) / UInt64(norm)
        return UInt32(Swift.min(r, UInt64(max)))
    }

    /// `pa_sw_volume_from_linear`: the cubic mapping `lround(cbrt(v) · NORM)`; 0 or less is silence.
    public static func fromLinear(_ v: Double) -> UInt32 {
        guard v > 0, v.isFinite else { return 0 }
        let scaled = cubeRoot(v) * Double(norm)
        guard scaled < Double(max) else { return max }
        return UInt32(roundHalfUp(scaled))
    }

    /// `lround` for the non-negative values used here, by integer conversion: `rounded()` would pull in libm,
    /// and this target links nothing.
    static func roundHalfUp(_ x: Double) -> UInt64 {
        let t = UInt64(x)
        return x - Double(t) >= 0.5 ? t + 1 : t
    }

    /// Newton's method to full double precision; the standard library has no `cbrt`.
    static func cubeRoot(_ v: Double) -> Double {
        var x = v > 1 ? v / 3 + 1 : 1.0
        for _ in 0..<200 {
            let next = x - (x * x * x - v) / (3 * x * x)
            if next == x { break }
            // Newton on x³ converges from above; stop once it oscillates in the last bit.
            if abs(next - x) <= x.ulp {
                x = Swift.min(x, next)
                break
            }
            x = next
        }
        return x
    }
}
