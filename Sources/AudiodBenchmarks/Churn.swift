import AudiodTestKit
import Foundation
import Synchronization

/// Streams coming and going fast, each one a decision: with silent mode on, every new game-role stream is muted
/// by audiod. Measured per target rate: what rate the machine achieved, audiod's CPU next to the sound server's,
/// and the decision lag — from asking for the stream to another client seeing it muted.
struct ChurnRow {
    var target: Int
    /// Paused streams (the server mixes none of them) rather than playing ones.
    var corked = false
    var streams = 0
    var seconds = 0.0
    var audiodCPUms = 0.0
    var serverCPUms = 0.0
    var lag: [UInt64] = []
    /// From the observer first seeing the stream to seeing it muted (0 when it was muted by the time the observer
    /// read it): audiod's part of the lag, without the server's time to make the stream.
    var lagSinceAppeared: [UInt64] = []
    /// Streams that were gone before anyone saw them muted.
    var unseen = 0
    var achieved: Double { Double(streams) / seconds }
}

/// user + system CPU time of a process, in ms (`/proc/<pid>/stat` fields 14 and 15, in clock ticks).
func cpuMs(_ pid: pid_t) -> Double {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = text.lastIndex(of: ")")
    else { return 0 }
    let fields = text[text.index(after: close)...].split(separator: " ")
    // After the command: state is field 3, so utime (14) and stime (15) are at 11 and 12 here.
    guard fields.count > 12, let u = Double(fields[11]), let s = Double(fields[12]) else { return 0 }
    return (u + s) * 1000 / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// Run time on a CPU of every thread of `pid`, in ns (`/proc/PID/task/*/schedstat`, first field): exact where
/// `/proc/PID/stat` counts 10 ms ticks.
func cpuNs(_ pid: pid_t) -> UInt64 {
    guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task") else { return 0 }
    var total: UInt64 = 0
    for t in tasks {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/task/\(t)/schedstat", encoding: .utf8),
            let first = text.split(separator: " ").first, let ns = UInt64(first)
        else { continue }
        total += ns
    }
    return total
}

/// Opens `total` game-role streams at `rate` per second from `threads` threads, closed after a lifetime that keeps
/// at most ~100 alive (PipeWire mixes at most 128 into one sink). `clientsPerThread` > 0: each thread's streams
/// take turns among that many long-lived connections (many apps, each opening and closing sounds, as games do);
/// 0: each stream on a connection of its own, which goes with it — pipewire-pulse 0.3.65 drops a connection that
/// closes streams and opens more in quick succession ("Connection terminated"), and a connection costs the server
/// several times what a stream does.
func churn(
    rate: Int, total: Int, server: TestServer, observer: Observer, audiod: pid_t, threads: Int = 2,
    clientsPerThread: Int = 0, corked: Bool = false, sampleRate: UInt32 = 8000
) throws -> ChurnRow {
    var row = ChurnRow(target: rate)
    let lifetimeNs = UInt64(min(0.2, 100 / Double(rate)) * 1e9)
    observer.forgetFirstMuted()
    let next = Atomic<Int>(0)
    let opened = Mutex<[(index: UInt32, at: UInt64)]>([])
    let failure = Mutex<String?>(nil)
    let serverPids = server.soundServerPIDs
    let cpu0 = (cpuMs(audiod), serverPids.map(cpuMs).reduce(0, +))
    let t0 = nowNs()
    let group = DispatchGroup()
    for t in 0..<threads {
        group.enter()
        Thread {
            defer { group.leave() }
            var live: [(client: ToneClient, index: UInt32, at: UInt64)] = []
            var pool: [ToneClient] = []
            do {
                pool = try (0..<clientsPerThread).map {
                    try ToneClient(server: server.pulseServer, name: "churn-\(t)-\($0)")
                }
            } catch {
                failure.withLock { $0 = "\(error)" }
                return
            }
            var turn = 0
            while true {
                let i = next.add(1, ordering: .relaxed).oldValue
                if i >= total { break }
                let due = t0 + UInt64(i) * 1_000_000_000 / UInt64(rate)
                let now = nowNs()
                if due > now { usleep(UInt32((due - now) / 1000)) }
                while let first = live.first, nowNs() - first.at >= lifetimeNs {
                    if !pool.isEmpty { first.client.close(first.index) }
                    live.removeFirst()
                }
                do {
                    let client: ToneClient
                    if pool.isEmpty {
                        client = try ToneClient(server: server.pulseServer, name: "churn-\(t)")
                    } else {
                        client = pool[turn % pool.count]
                        turn += 1
                    }
                    let (index, at) = try client.open(
                        ["media.role": "game", "application.name": "churn"], corked: corked, rate: sampleRate)
                    live.append((client, index, at))
                    opened.withLock { $0.append((index, at)) }
                } catch {
                    failure.withLock { $0 = "\(error)" }
                    break
                }
            }
            for s in live where !pool.isEmpty { s.client.close(s.index) }
            live.removeAll()
        }.start()
    }
    group.wait()
    row.seconds = Double(nowNs() - t0) / 1e9
    if let f = failure.withLock({ $0 }) { throw BenchFailure("churn at \(rate)/s: \(f)") }
    // Late mutes still count: give the last streams' decisions a moment to show.
    usleep(300_000)
    row.audiodCPUms = cpuMs(audiod) - cpu0.0
    row.serverCPUms = serverPids.map(cpuMs).reduce(0, +) - cpu0.1
    for s in opened.withLock({ $0 }) {
        row.streams += 1
        if let m = observer.firstSeenMuted(s.index), m >= s.at {
            row.lag.append(m - s.at)
            if let seen = observer.firstSeen(s.index) { row.lagSinceAppeared.append(m >= seen ? m - seen : 0) }
        } else {
            row.unseen += 1
        }
    }
    return row
}
