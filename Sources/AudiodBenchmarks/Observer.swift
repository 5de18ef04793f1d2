import AudioPolicy
import Foundation
import Logging
import LoopThread
import PulseBackend
import PulseLoop
import Synchronization

func nowNs() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

/// An independent client of the sound server that records, for every playback stream, its mute and volume and
/// when it learnt them. It is how every latency here is read: "seen by another client", as a user would hear it.
final class Observer: @unchecked Sendable {
    struct Seen {
        var muted: Bool
        var volume: UInt32
        var role: String?
        var corked: Bool
        var at: UInt64
    }
    let loop: MainLoop
    /// Made before the loop runs, used only on it.
    private let backend: LoopBound<PulseBackend>
    private let seen = Mutex<[UInt32: Seen]>([:])
    /// When each stream was first seen muted (kept after it is gone), for the churn's decision lag.
    private let firstMuted = Mutex<[UInt32: UInt64]>([:])
    /// When each stream was first seen at all (kept after it is gone).
    private let firstSeen = Mutex<[UInt32: UInt64]>([:])
    private let signal = DispatchSemaphore(value: 0)

    init(server: String, logger: Logger) throws {
        loop = try MainLoop()
        // An observer identifies no app: it reads no desktop entries (and never waits for them).
        var options = PulseBackend.Options(server: server, clientName: "observer")
        options.readsDesktopEntries = false
        // It writes nothing: no native PipeWire connection for ramps.
        options.deClickMilliseconds = 0
        let b = loop.bind(PulseBackend(loop: loop, options: options, logger: logger))
        backend = b
        loop.start()
        loop.sync { [self] in
            b.value.onEvent = { [self] e in
                guard case .policy(let ev) = e else { return }
                let t = nowNs()
                switch ev {
                case .streamAppeared(let i), .streamChanged(let i):
                    guard i.id.kind == .playback else { return }
                    seen.withLock {
                        $0[i.id.index] = Seen(
                            muted: i.muted, volume: i.volume.channels.max() ?? 0, role: i.role, corked: i.corked, at: t)
                    }
                    if i.muted { firstMuted.withLock { if $0[i.id.index] == nil { $0[i.id.index] = t } } }
                    firstSeen.withLock { if $0[i.id.index] == nil { $0[i.id.index] = t } }
                    signal.signal()
                case .streamRemoved(let id):
                    guard id.kind == .playback else { return }
                    seen.withLock { $0[id.index] = nil }
                    signal.signal()
                default: break
                }
            }
            b.value.start()
        }
    }

    func state(_ index: UInt32) -> Seen? { seen.withLock { $0[index] } }
    func firstSeenMuted(_ index: UInt32) -> UInt64? { firstMuted.withLock { $0[index] } }
    func firstSeen(_ index: UInt32) -> UInt64? { firstSeen.withLock { $0[index] } }
    func forgetFirstMuted() {
        firstMuted.withLock { $0.removeAll() }
        firstSeen.withLock { $0.removeAll() }
    }
    var indexes: Set<UInt32> { seen.withLock { Set($0.keys) } }

    /// Waits until every stream in `indexes` shows `muted`; returns when the last of them was seen so.
    func wait(_ indexes: [UInt32], muted: Bool, timeout: Double = 10) -> UInt64? {
        wait(indexes, timeout: timeout) { $0.muted == muted }
    }

    func wait(_ indexes: [UInt32], timeout: Double = 10, _ holds: (Seen) -> Bool) -> UInt64? {
        let deadline = nowNs() + UInt64(timeout * 1e9)
        while nowNs() < deadline {
            let last: UInt64? = seen.withLock { s in
                var latest: UInt64 = 0
                for i in indexes {
                    guard let x = s[i], holds(x) else { return nil }
                    latest = max(latest, x.at)
                }
                return latest
            }
            if let last { return last }
            _ = signal.wait(timeout: .now() + 0.05)
        }
        return nil
    }

    func stop() {
        let b = backend
        loop.sync { b.value.stop() }
        loop.stop()
    }
}

/// A run that cannot measure: thrown so that the servers the run started are stopped on the way out.
struct BenchFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

func percentile(_ xs: [UInt64], _ p: Double) -> Double {
    guard !xs.isEmpty else { return .nan }
    let s = xs.sorted()
    let i = min(s.count - 1, Int((Double(s.count - 1) * p).rounded()))
    return Double(s[i]) / 1_000_000
}

func ms(_ x: Double) -> String { String(format: "%.3f ms", x) }
func ratio(_ a: Double, _ b: Double) -> String { String(format: "%.2f", a / b) }
