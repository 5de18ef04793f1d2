import AudioPolicy
import AudiodCore
import AudiodTestKit
import DBusService
import Foundation
import Logging
import LoopThread
import PulseBackend
import PulseLoop
import Synchronization
import Testing

/// A bus daemon that reads nothing (overloaded by another program, or stopped) must not stop
/// enforcement. audiod keeps what it has to say queued, without waiting for the bus, and goes on muting streams;
/// once the bus reads again, everything arrives whole and in order. Past its bound it restores and exits.
@Suite(.serialized)
struct BusStallTests {
    /// Every stream event the sound server reports, with when it arrived: a passive client of the server (a backend
    /// that never writes), to time audiod's mutes from outside audiod.
    final class StreamWatch: @unchecked Sendable {
        let loop: MainLoop
        private var backend: LoopBound<PulseBackend>?
        final class Recorder: Sendable {
            let list = Mutex<[(event: Event, at: UInt64)]>([])
        }
        let recorder = Recorder()

        init(_ server: TestServer) throws {
            loop = try MainLoop()
            loop.start()
            let options = {
                var o = PulseBackend.Options(server: server.pulseServer, clientName: "stall-observer")
                o.readsDesktopEntries = false
                return o
            }()
            let recorder = self.recorder
            let loop = self.loop
            backend = loop.sync {
                var logger = Logger(label: "observer")
                logger.logLevel = .critical
                let b = PulseBackend(loop: loop, options: options, logger: logger)
                b.onEvent = { e in
                    if case .policy(let ev) = e {
                        recorder.list.withLock { $0.append((ev, DispatchTime.now().uptimeNanoseconds)) }
                    }
                }
                b.start()
                return loop.bind(b)
            }
        }

        /// When the stream of `app` first appeared.
        func appeared(_ app: String) -> UInt64? {
            recorder.list.withLock { list in
                list.first {
                    if case .streamAppeared(let i) = $0.event { return i.applicationName == app }
                    return false
                }?.at
            }
        }

        /// When the stream of `app` was first seen muted after `after`.
        func muted(_ app: String, after: UInt64) -> UInt64? { seen(app, muted: true, after: after) }

        /// When the stream of `app` was first seen unmuted after `after`.
        func unmuted(_ app: String, after: UInt64) -> UInt64? { seen(app, muted: false, after: after) }

        func seen(_ app: String, muted: Bool, after: UInt64) -> UInt64? {
            recorder.list.withLock { list in
                list.first { e in
                    guard e.at >= after else { return false }
                    switch e.event {
                    case .streamAppeared(let i), .streamChanged(let i):
                        return i.applicationName == app && i.muted == muted
                    default: return false
                    }
                }?.at
            }
        }

        func stop() {
            let b = backend
            loop.sync { b?.value.stop() }
            backend = nil
            loop.stop()
        }
    }

    /// 4 clients × 64 active ambient sessions: each time the music becomes audible or silent, every one of them hears
    /// `SilenceSecondaryAudioHint` and a `PropertiesChanged` — about 90 kB of signals a transition.
    func sessions(_ server: TestServer, holder: Child) throws -> ([BusClient], [String]) {
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        let clients = try (0..<4).map { _ in try BusClient(address: address, recordSignals: false) }
        var paths: [String] = []
        for c in clients {
            for _ in 0..<64 { paths.append(try c.makeSession(pid: holder.pid, "ambient", activate: true)) }
        }
        return (clients, paths)
    }

    /// Mutes and unmutes the music as its user would, in a mixer: the hint goes to every session each time.
    func toggle(_ server: TestServer, _ index: UInt32, times: Int) throws {
        for i in 0..<(2 * times) {
            _ = try server.pactl(["set-sink-input-mute", "\(index)", i % 2 == 0 ? "1" : "0"])
            usleep(30_000)
        }
    }

    @Test(
        "the bus daemon stopped with over 1 MB queued for it: a call still silences the music at once, and the queue arrives whole and in order"
    )
    func stalledBusKeepsEnforcing() throws {
        let stall = Double(ProcessInfo.processInfo.environment["AUDIOD_BUS_STALL_SECONDS"] ?? "") ?? 20
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server, arguments: ["--log-level", "info"])
        defer { d.stop() }
        let holder = try server.spawn(["sleep", "3600"])
        let (clients, paths) = try sessions(server, holder: holder)
        defer { for c in clients { c.close() } }
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        let listener = try BusClient(address: address)
        defer { listener.close() }
        let music = try playback(server, name: "stall-music", role: "music")
        let m = try server.waitForPlaybackStream(pid: music.pid)
        let watch = try StreamWatch(server)
        defer { watch.stop() }
        #expect(waitFor(10) { watch.appeared("stall-music") != nil })
        let probe = try #require(paths.last)
        #expect(
            waitFor(10) { listener.received(probe, "SilenceSecondaryAudioHint").count >= 1 },
            "the music did not silence secondary audio")
        let hintsBefore = listener.received(probe, "SilenceSecondaryAudioHint").count

        server.signalBus(SIGSTOP)
        let stopped = Date()
        var resumed = false
        defer { if !resumed { server.signalBus(SIGCONT) } }
        let toggles = 20
        try toggle(server, m.index, times: toggles)
        // The music plays (unmuted by its user); then a call starts, during the stall.
        #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.muted == false })
        let start = DispatchTime.now().uptimeNanoseconds
        let call = try playback(server, name: "stall-call", role: "phone")
        defer { call.kill() }
        #expect(
            waitFor(10) { watch.appeared("stall-call") != nil && watch.muted("stall-music", after: start) != nil },
            "the music was not silenced while the bus was stopped")
        let appeared = watch.appeared("stall-call") ?? 0
        let mutedAt = watch.muted("stall-music", after: start) ?? UInt64.max
        let lag = mutedAt > appeared ? Double(mutedAt - appeared) / 1e6 : 0
        #expect(lag <= 50, "the music was silenced \(lag) ms after the call's stream appeared (target 50 ms)")
        let log = server.file("audiod.log")
        let queued =
            log.split(separator: "\n").compactMap { line -> Int? in
                guard let r = line.range(of: "the session bus is slow to read: ") else { return nil }
                return Int(line[r.upperBound...].prefix { $0.isNumber })
            }.first ?? 0
        #expect(
            queued > 1 << 20, "audiod did not report more than 1 MB queued for the stopped bus: \(log.suffix(1500))")
        // Hold the stall for its whole length, then let the bus read again.
        let rest = stall - Date().timeIntervalSince(stopped)
        if rest > 0 { usleep(UInt32(rest * 1_000_000)) }
        server.signalBus(SIGCONT)
        resumed = true
        // Every queued message arrives, in order: on every session, the hint's begin/end alternate through all the
        // toggles, and then the call's.
        let expected = hintsBefore + 2 * toggles
        #expect(
            waitFor(60) { paths.allSatisfy { listener.received($0, "SilenceSecondaryAudioHint").count >= expected } },
            "not every queued signal arrived: \(listener.received(probe, "SilenceSecondaryAudioHint").count) of \(expected) on \(probe)"
        )
        var disordered: [String] = []
        for p in paths {
            let kinds = listener.received(p, "SilenceSecondaryAudioHint").compactMap { $0.first?.stringValue }
            for (i, k) in kinds.enumerated() where k != (i % 2 == 0 ? "begin" : "end") {
                disordered.append("\(p) #\(i): \(k)")
                break
            }
        }
        #expect(disordered.isEmpty, "hints out of order: \(disordered.prefix(3))")
        // audiod still answers, and is still there.
        #expect(
            waitFor(10) {
                if case .success = d.client.call(API.managerPath, API.peer.name, "Ping") { return true }
                return false
            })
        #expect(kill(d.child.pid, 0) == 0, "audiod exited: \(server.file("audiod.log").suffix(1500))")
        print(
            "reliability: bus stopped \(Int(stall)) s with \(queued) bytes queued for it: the music silenced \(String(format: "%.1f", lag)) ms after the call's stream appeared (target 50 ms); \(paths.count) sessions × \(2 * toggles) hints arrived in order"
        )
    }

    @Test(
        "a bus daemon that reads nothing past the bound: audiod restores every stream and exits 1 without waiting on the bus"
    )
    func stallPastTheBound() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server, arguments: ["--log-level", "info", "--bus-stall-seconds", "2"])
        let holder = try server.spawn(["sleep", "3600"])
        let (clients, _) = try sessions(server, holder: holder)
        defer { for c in clients { c.close() } }
        // A music app interrupted by an explicit session: muted by audiod.
        let music = try playback(server, name: "stall-music", role: "music")
        let m = try server.waitForPlaybackStream(pid: music.pid)
        _ = try d.client.makeSession(pid: holder.pid, "playback", activate: true)
        #expect(
            waitFor(10) { server.playbackStream(pid: music.pid)?.muted == true }, "audiod did not interrupt the music")
        d.client.close()

        server.signalBus(SIGSTOP)
        defer { server.signalBus(SIGCONT) }
        let stopped = Date()
        // Enough for the queue to outgrow the socket: the music's user unmutes and mutes it.
        try toggle(server, m.index, times: 8)
        let status = d.child.wait(timeout: 20)
        let took = Date().timeIntervalSince(stopped)
        let code = status.map { ($0 & 0x7f) == 0 ? ($0 >> 8) & 0xff : -1 }
        #expect(
            code == 1,
            "audiod ended with status \(String(describing: status)) after \(took) s: \(server.file("audiod.log").suffix(1500))"
        )
        #expect(took < 10, "audiod took \(took) s to give up on a bus bounded at 2 s")
        // What audiod held is undone; the user's last word (unmuted, after 8 toggles) stands.
        #expect(
            server.playbackStream(pid: music.pid)?.muted == false,
            "a stream stayed muted after audiod gave up on the bus")
        let log = server.file("audiod.log")
        #expect(log.contains("the session bus takes nothing more"), "\(log.suffix(1500))")
        print(
            "reliability: bus stopped past a 2 s bound: audiod restored and exited \(code.map(String.init) ?? "?") after \(String(format: "%.1f", took)) s"
        )
    }
}
