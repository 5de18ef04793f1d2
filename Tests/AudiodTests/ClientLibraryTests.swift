import AudiodClient
import AudiodTestKit
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

        let podcast = try await AudioSession.make(applicationName: "Podcasts", pid: music.pid, connection: AudiodConnection(address: address))
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
            #expect(error.message == "category 'loud' is not one of ambient, solo-ambient, playback, record, play-and-record")
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
}
