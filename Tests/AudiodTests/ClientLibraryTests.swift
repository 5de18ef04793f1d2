import AudiodClient
import AudiodTestKit
import DBusService
import Foundation
import Testing

/// The Swift client library against the built audiod: an app's few lines, typed errors, interruptions as an
/// AsyncSequence.
@Suite(.serialized)
struct ClientLibraryTests {
    @Test("an app interrupted by another hears began, then ended with should-resume, and plays again")
    func interruptions() async throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"]
        let music = try playback(server, name: "music")
        let video = try playback(server, name: "video")
        _ = try server.waitForPlaybackStream(pid: music.pid)
        _ = try server.waitForPlaybackStream(pid: video.pid)

        let podcast = try await AudioSession.make(
            applicationName: "Podcasts", pid: music.pid, connection: AudiodConnection(address: address))
        try await podcast.setCategory(.playback, mode: .default)
        try await podcast.setActive(true)
        var events = podcast.interruptions.makeAsyncIterator()

        let movie = try await AudioSession.make(pid: video.pid, connection: AudiodConnection(address: address))
        try await movie.setCategory(.playback)
        try await movie.setActive(true)
        let began = await events.next()
        #expect(began == .began(reason: "default", interrupter: movie.path))
        #expect(try await podcast.state().interrupted)

        try await movie.setActive(false, notifyOthersOnDeactivation: true)
        #expect(await events.next() == .ended(shouldResume: true))
        try await podcast.setActive(true)
        #expect(try await podcast.state().active)
        #expect(waitFor(5) { server.playbackStream(pid: music.pid)?.muted == false })
        podcast.connection.close()
        movie.connection.close()
    }

    @Test("a daemon error arrives typed, with audiod's message")
    func typedErrors() async throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let c = try AudiodConnection(address: server.environment["DBUS_SESSION_BUS_ADDRESS"])
        defer { c.close() }
        let s = try await AudioSession.make(connection: c)
        do {
            try await s.setCategory("loud")
            Issue.record("accepted 'loud'")
        } catch {
            #expect(error.code == .invalidCategory)
            #expect(
                error.message
                    == "category 'loud' is not one of ambient, solo-ambient, playback, record, play-and-record")
        }
        do {
            try await s.setCategory(.playback, options: [.duckOthers])
            let st = try await s.state()
            #expect(st.options.contains("mix-with-others"), "duck-others implies mix-with-others: \(st.options)")
        }
    }

    @Test("no audiod on the bus is an error that says so")
    func notRunning() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let c = try AudiodConnection(address: bus.address)
        defer { c.close() }
        do {
            _ = try await AudioSession.make(connection: c)
            Issue.record("a session without audiod")
        } catch {
            #expect(error.code == .notRunning, "\(error.name)")
        }
    }

    @Test("1,000 sessions made and dropped without closing anything: the process's threads and descriptors come back")
    func droppedSessionsCleanUp() async throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let d = try Daemon.start(server, arguments: ["--log-level", "info"])
        defer { d.stop() }
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"]
        func counts() -> (threads: Int, descriptors: Int) {
            (
                (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task"))?.count ?? 0,
                openDescriptors(getpid())
            )
        }
        func sessions() -> Int {
            guard case .success(let out) = d.client.call(API.managerPath, API.objectManager.name, "GetManagedObjects"),
                case .dict(_, _, let pairs)? = out.first
            else { return -1 }
            return pairs.count
        }
        // Once, so that what the first use sets up for good (the runtime's own threads) is not counted.
        do {
            let s = try await AudioSession.make(
                applicationName: "warm-up", connection: AudiodConnection(address: address))
            try await s.setCategory(.ambient)
        }
        #expect(waitFor(5) { sessions() == 0 })
        let before = counts()
        for i in 0..<1_000 {
            // Each session on a connection of its own, dropped with it; some listen to their interruptions.
            let s = try await AudioSession.make(
                applicationName: "dropped-\(i)", connection: AudiodConnection(address: address))
            try await s.setCategory(.ambient)
            if i % 2 == 0 { _ = s.interruptions }
        }
        var after = counts()
        _ = waitFor(5) {
            after = counts()
            return after.threads <= before.threads && after.descriptors <= before.descriptors
        }
        print(
            "client: 1,000 sessions dropped: threads \(before.threads) → \(after.threads), descriptors \(before.descriptors) → \(after.descriptors)"
        )
        #expect(after.threads <= before.threads, "threads \(before.threads) → \(after.threads)")
        #expect(after.descriptors <= before.descriptors, "descriptors \(before.descriptors) → \(after.descriptors)")
        #expect(waitFor(10) { sessions() == 0 }, "audiod still holds \(sessions()) sessions of dropped connections")
    }

    @Test("a call waiting for audiod when its connection closes is answered with an error")
    func pendingCallOnClose() async throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        // A stand-in for audiod that never answers: it owns the name and ignores every call.
        let silent = try BusClient(address: address, recordSignals: false)
        defer { silent.close() }
        guard case .success = silent.callBus("RequestName", [.string("org.audiod.AudioSession1"), .uint32(4)]) else {
            Issue.record("could not take the name")
            return
        }
        let c = try AudiodConnection(address: address)
        let call = Task { () -> AudiodError? in
            do throws(AudiodError) {
                _ = try await c.call(AudiodConnection.managerPath, AudiodConnection.managerInterface, "ListStreams")
                return nil
            } catch {
                return error
            }
        }
        usleep(300_000)
        let started = Date()
        c.close()
        let error = await call.value
        #expect(error != nil && Date().timeIntervalSince(started) < 2, "the pending call: \(String(describing: error))")
    }
}
