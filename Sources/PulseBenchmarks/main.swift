// Enforcement latency on a real server: how long from audiod deciding to the stream being muted as another
// client sees it, next to the floor — a client that mutes the stream directly — measured in the same run.
//
// Usage: PulseBenchmarks [iterations] [pulseaudio|pipewire …]   (default: 200, both servers that are installed)

import AudioPolicy
import AudiodCore
import AudiodTestKit
import Foundation
import Logging
import PulseBackend
import Synchronization

let args = Array(CommandLine.arguments.dropFirst())
let iterations = args.first.flatMap { Int($0) } ?? 200
let kinds = args.compactMap(ServerKind.init(rawValue:)).isEmpty
    ? ServerKind.allCases.filter(\.isInstalled) : args.compactMap(ServerKind.init(rawValue:))

func nowNs() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

/// An independent client that reports when a stream's mute changes, with the time it learnt it.
final class Observer: @unchecked Sendable {
    let loop: MainLoop
    let backend: PulseBackend
    private let seen = Mutex<[UInt32: (muted: Bool, at: UInt64)]>([:])
    private let signal = DispatchSemaphore(value: 0)

    init(server: String, logger: Logger) throws {
        loop = try MainLoop()
        backend = PulseBackend(loop: loop, options: .init(server: server, clientName: "observer"), logger: logger)
        loop.start()
        let b = backend
        loop.sync { [self] in
            b.onEvent = { [self] e in
                guard case .policy(let ev) = e else { return }
                switch ev {
                case .streamAppeared(let i), .streamChanged(let i):
                    let t = nowNs()
                    seen.withLock { $0[i.id.index] = (i.muted, t) }
                    signal.signal()
                default: break
                }
            }
            b.start()
        }
    }

    /// Waits until stream `index` shows `muted`; returns when it was seen.
    func wait(index: UInt32, muted: Bool, timeout: Double = 5) -> UInt64? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let s = seen.withLock({ $0[index] }), s.muted == muted { return s.at }
            _ = signal.wait(timeout: .now() + 0.05)
        }
        return nil
    }

    func stop() {
        let b = backend
        loop.sync { b.stop() }
        loop.stop()
    }
}

func percentile(_ xs: [UInt64], _ p: Double) -> Double {
    guard !xs.isEmpty else { return .nan }
    let s = xs.sorted()
    let i = min(s.count - 1, Int((Double(s.count - 1) * p).rounded()))
    return Double(s[i]) / 1_000_000
}

func fmt(_ ms: Double) -> String { String(format: "%.3f ms", ms) }

var logger = Logger(label: "bench")
logger.logLevel = .critical

print("Enforcement latency: decision → stream muted as an observer client sees it (\(iterations) iterations)")
print("machine: \(ProcessInfo.processInfo.processorCount) cores, \(ProcessInfo.processInfo.operatingSystemVersionString)")
print("")
print("| server | audiod p50 | audiod p99 | floor p50 | floor p99 | ratio p50 | ratio p99 |")
print("|---|---|---|---|---|---|---|")

for kind in kinds {
    let server = try TestServer(kind)
    defer { server.stop() }
    let music = try server.spawn(["pacat", "--playback", "/dev/zero", "--client-name=music-app"])
    let video = try server.spawn(["pacat", "--playback", "/dev/zero", "--client-name=video-app"])
    let m = try server.waitForPlaybackStream(pid: music.pid)
    _ = try server.waitForPlaybackStream(pid: video.pid)
    let observer = try Observer(server: server.pulseServer, logger: logger)

    // The journal on tmpfs, as $XDG_RUNTIME_DIR is on a desktop (the test directory is on disk here).
    let journalDir = "/dev/shm/audiod-bench-\(getpid())"
    // audiod: an engine decision (video activates → music interrupted) carried out by the arbiter.
    let loop = try MainLoop()
    loop.start()
    let arbiter = Arbiter(
        loop: loop, settings: Settings(),
        backend: .init(server: server.pulseServer, journalPath: "\(journalDir)/journal.json"), logger: logger)
    loop.sync { arbiter.start() }
    guard waitFor(10, { loop.sync { arbiter.serverInfo != nil } }) else { throw BenchFailure("arbiter did not connect") }
    _ = waitFor(5) { loop.sync { arbiter.engine.streamViews.count >= 2 } }
    func request(_ make: @escaping @Sendable (RequestID) -> Event) -> Reply? {
        loop.sync {
            let r = arbiter.makeRequestID()
            for case .reply(r, let reply) in arbiter.handle(make(r)) { return reply }
            return nil
        }
    }
    func create(_ pid: pid_t) throws -> SessionID {
        guard case .session(let id)? = request({ .createSession($0, NewSession(pid: UInt32(pid))) }) else {
            throw BenchFailure("CreateSession failed")
        }
        _ = request { .setCategory($0, id, category: "playback", mode: "default", options: []) }
        return id
    }
    let a = try create(music.pid)
    let b = try create(video.pid)
    var audiodTimes: [UInt64] = []
    for _ in 0..<iterations {
        _ = request { .setActive($0, a, active: true, options: []) }
        guard observer.wait(index: m.index, muted: false) != nil else { throw BenchFailure("music not unmuted") }
        let t0 = Box()
        loop.sync {
            t0.value = nowNs()
            let r = arbiter.makeRequestID()
            _ = arbiter.handle(.setActive(r, b, active: true, options: []))
        }
        guard let t1 = observer.wait(index: m.index, muted: true) else { throw BenchFailure("music not muted") }
        audiodTimes.append(t1 - t0.value)
        _ = request { .setActive($0, b, active: false, options: []) }
    }
    _ = request { .setActive($0, a, active: true, options: []) }
    _ = observer.wait(index: m.index, muted: false)
    let done = DispatchSemaphore(value: 0)
    loop.execute { arbiter.shutdown { done.signal() } }
    done.wait()
    loop.stop()

    // The floor: a bare client (the same library, no engine, no journal) mutes the stream directly.
    let floorLoop = try MainLoop()
    floorLoop.start()
    let direct = PulseBackend(loop: floorLoop, options: .init(server: server.pulseServer, clientName: "direct"), logger: logger)
    floorLoop.sync { direct.start() }
    guard waitFor(10, { floorLoop.sync { direct.isConnected } }) else { throw BenchFailure("direct client did not connect") }
    let id = StreamID.playback(m.index)
    var floorTimes: [UInt64] = []
    for _ in 0..<iterations {
        let t0 = Box()
        floorLoop.sync {
            t0.value = nowNs()
            direct.apply([.setStreamMute(id, true)])
        }
        guard let t1 = observer.wait(index: m.index, muted: true) else { throw BenchFailure("floor: not muted") }
        floorTimes.append(t1 - t0.value)
        floorLoop.sync { direct.apply([.setStreamMute(id, false)]) }
        guard observer.wait(index: m.index, muted: false) != nil else { throw BenchFailure("floor: not unmuted") }
    }
    floorLoop.sync { direct.stop() }
    floorLoop.stop()
    observer.stop()
    try? FileManager.default.removeItem(atPath: journalDir)

    let ap50 = percentile(audiodTimes, 0.5), ap99 = percentile(audiodTimes, 0.99)
    let fp50 = percentile(floorTimes, 0.5), fp99 = percentile(floorTimes, 0.99)
    print("| \(kind) | \(fmt(ap50)) | \(fmt(ap99)) | \(fmt(fp50)) | \(fmt(fp99)) | \(String(format: "%.2f", ap50 / fp50)) | \(String(format: "%.2f", ap99 / fp99)) |")
}

final class Box: @unchecked Sendable { var value: UInt64 = 0 }

/// A run that cannot measure: thrown so that the servers the run started are stopped on the way out.
struct BenchFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}
