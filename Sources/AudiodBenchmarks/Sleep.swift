import AudiodCore
import AudiodTestKit
import DBusTransport
import Foundation
import Glibc
import LoopThread
import PulseBackend
import PulseLoop
import Synchronization

/// logind, as far as sleep goes, on a private system bus: it owns `org.freedesktop.login1`, answers `Inhibit` with
/// the write end of a pipe (as logind does: the inhibitor lasts while the taker holds it) and notes the moment the
/// last copy closes, and sends `PrepareForSleep`. Everything else is answered with `UnknownMethod`, so audiod finds
/// no lock screen here. logind needs PID 1; this stand-in is the benchmark's, never audiod's.
final class SleepLogind: @unchecked Sendable {
    // @unchecked: the connection lives on `loop`'s thread; the rest is behind Mutexes.
    let loop: MainLoop
    private var connection: LoopBound<DBusConnection>?
    /// The read ends of the pipes handed out, and when each was seen closed by every writer.
    private let held = Mutex<[Int32]>([])
    private let released = Mutex<[UInt64]>([])
    private var watcher: Thread?
    private let stop = Atomic<Bool>(false)

    init(address: String) throws {
        let loop = try MainLoop()
        self.loop = loop
        loop.start()
        let made: Result<LoopBound<DBusConnection>, DBusError> = loop.sync {
            do {
                let c = try DBusConnection(address: address, loop: loop)
                c.onMessage = { [weak self] m in self?.handle(m, c) }
                try c.requestName("org.freedesktop.login1")
                return .success(loop.bind(c))
            } catch let e as DBusError {
                return .failure(e)
            } catch {
                return .failure(.failed("\(error)"))
            }
        }
        connection = try made.get()
        // One thread that polls the held read ends for the hang-up that says the inhibitor was let go.
        let t = Thread { [weak self] in
            while let self, !self.stop.load(ordering: .relaxed) {
                let fds = self.held.withLock { $0 }
                guard !fds.isEmpty else {
                    usleep(1000)
                    continue
                }
                var polls = fds.map { pollfd(fd: $0, events: 0, revents: 0) }
                guard poll(&polls, nfds_t(polls.count), 20) > 0 else { continue }
                let t = nowNs()
                for p in polls where p.revents & Int16(POLLHUP) != 0 {
                    Glibc.close(p.fd)
                    self.held.withLock { $0.removeAll { $0 == p.fd } }
                    self.released.withLock { $0.append(t) }
                }
            }
        }
        watcher = t
        t.start()
    }

    var inhibitorsHeld: Int { held.withLock { $0.count } }
    var releases: [UInt64] { released.withLock { $0 } }

    private func handle(_ m: DBusMessage, _ c: DBusConnection) {
        guard m.kind == .methodCall else { return }
        if m.interface == "org.freedesktop.login1.Manager", m.member == "Inhibit" {
            var fds: [Int32] = [0, 0]
            guard pipe(&fds) == 0, let r = m.makeReturn() else { return }
            r.append([.unixFD(fds[1])])
            _ = c.send(r)
            // libdbus duplicated the write end into the message: the taker holds the only copy once it is sent.
            c.flush(within: 1_000_000_000)
            Glibc.close(fds[1])
            held.withLock { $0.append(fds[0]) }
            return
        }
        if let e = m.makeError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "not part of this stand-in") {
            _ = c.send(e)
        }
    }

    func prepareForSleep(_ going: Bool) {
        let c = connection
        loop.sync {
            guard let c = c?.value,
                let s = DBusMessage.signal(
                    path: "/org/freedesktop/login1", interface: "org.freedesktop.login1.Manager",
                    member: "PrepareForSleep")
            else { return }
            s.append([.bool(going)])
            _ = c.send(s)
            c.flush(within: 1_000_000_000)
        }
    }

    func close() {
        stop.store(true, ordering: .relaxed)
        let c = connection
        connection = nil
        loop.sync { c?.value.close() }
        loop.stop()
        for fd in held.withLock({ $0 }) { Glibc.close(fd) }
    }
}

struct SleepRound {
    var paused: UInt64
    var released: UInt64
    var both: UInt64
}

/// `PrepareForSleep(true)` → every player paused (its stream corked, as another client of the server sees it) and
/// audiod's inhibitor released; then wake, the inhibitor taken again and the players played again by the benchmark.
/// Its own server, system bus and audiod: the audiod of the other rows runs without a system bus.
func sleeps(_ kind: ServerKind, players count: Int, rounds: Int) throws -> [SleepRound] {
    let server = try TestServer(kind)
    defer { server.stop() }
    let system = try TestBus()
    defer { system.stop() }
    let logind = try SleepLogind(address: system.address)
    defer { logind.close() }
    let observer = try Observer(server: server.pulseServer, logger: logger)
    defer { observer.stop() }
    let audiod = try server.spawn(
        [
            TestServer.builtProduct("audiod"), "--log-level",
            ProcessInfo.processInfo.environment["BENCH_LOG"] ?? "warning",
        ],
        environment: ["DBUS_SYSTEM_BUS_ADDRESS": system.address], log: "audiod.log")
    defer {
        audiod.signal(SIGTERM)
        _ = audiod.wait(timeout: 10)
    }
    let bus = try BusClient(address: server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? "", recordSignals: false)
    defer { bus.close() }
    guard waitFor(10, { logind.inhibitorsHeld == 1 }) else {
        throw BenchFailure("audiod took no sleep inhibitor: \(server.file("audiod.log").suffix(2000))")
    }
    let tone = "\(server.directory)/tone.ogg"
    _ = try server.run(["sox", "-n", "-r", "22050", "-c", "2", tone, "synth", "20", "sine", "440", "vol", "0.3"])
    // Players that mix (a rule for mpv), so that all of them play at once and sleep is what pauses them.
    try expectSuccess(
        bus.manager(
            "SetApplicationCategory",
            [.string("mpv"), .string("playback"), .string("default"), .strings(["mix-with-others"])]), "rule")
    var mpvs: [(Child, UInt32, String)] = []
    for _ in 0..<count {
        let p = try server.spawn(["mpv", "--no-video", "--no-terminal", "--ao=pulse", "--loop-file=inf", tone])
        let index = try server.waitForPlaybackStream(pid: p.pid).index
        var name: String?
        _ = waitFor(10) {
            name = mprisName(server, pid: p.pid)
            return name != nil
        }
        guard let name else { throw BenchFailure("mpv \(p.pid) has no MPRIS name") }
        mpvs.append((p, index, name))
    }
    defer { for (p, _, _) in mpvs { p.kill() } }
    let indexes = mpvs.map(\.1)
    var out: [SleepRound] = []
    for _ in 0..<rounds {
        guard observer.wait(indexes, timeout: 10, { !$0.corked && !$0.muted }) != nil else {
            throw BenchFailure("the players are not all playing: \(server.file("audiod.log").suffix(2000))")
        }
        // audiod hears them play (their MPRIS status travels apart from the streams).
        usleep(200_000)
        let before = logind.releases.count
        let sent = nowNs()
        logind.prepareForSleep(true)
        guard let paused = observer.wait(indexes, timeout: 10, { $0.corked }) else {
            throw BenchFailure(
                "sleep did not pause every player: \(indexes.map { observer.state($0).map { "\($0.corked)" } ?? "gone" }) \(server.file("audiod.log").suffix(2000))"
            )
        }
        guard waitFor(5, { logind.releases.count > before }), let released = logind.releases.last else {
            throw BenchFailure("the inhibitor was not released")
        }
        out.append(SleepRound(paused: paused - sent, released: released - sent, both: max(paused, released) - sent))
        logind.prepareForSleep(false)
        guard waitFor(10, { logind.inhibitorsHeld == 1 }) else { throw BenchFailure("no inhibitor after wake") }
        // A person presses Play later than this loop could: mpv announces Paused first (it merges a pause and a play
        // that follow each other closely into one Playing, which audiod would take as still playing).
        usleep(300_000)
        for (_, _, name) in mpvs {
            _ = try server.run([
                "busctl", "--user", "call", name, "/org/mpris/MediaPlayer2", "org.mpris.MediaPlayer2.Player", "Play",
            ])
        }
    }
    return out
}
