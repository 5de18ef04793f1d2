import AudiodTestKit
import DBusService
import Foundation
import Testing

/// Issue 45's two duck depths, heard: a tone plays as music, and its level is measured from the null sink's
/// monitor — what a listener gets — before and under each ducker. A navigation prompt ducks it to −35 dB
/// (`StrongDuckLevel`), an ordinary `duck-others` session to −14 dB (`DuckLevel`), a screen reader's stream
/// (`Accessibility`, PipeWire's native name) to −35 dB while nothing silences the screen reader itself; and a
/// `spoken-audio` session is interrupted by the prompt and told it may resume after.
@Suite(.serialized)
struct DuckDepthTests {
    static let rate = 48000
    static let frequency = 440.0

    /// Ten seconds of a 440 Hz sine at half scale, mono s16le, for `pacat --raw`.
    func writeTone(_ path: String) throws {
        var data = Data(capacity: Self.rate * 20)
        for i in 0..<(Self.rate * 10) {
            let x = 0.5 * sin(2 * Double.pi * Self.frequency * Double(i) / Double(Self.rate))
            withUnsafeBytes(of: Int16(x * 32767).littleEndian) { data.append(contentsOf: $0) }
        }
        try data.write(to: URL(fileURLWithPath: path))
    }

    /// The tone's level on the monitor, in dB re full scale: 0.7 s recorded, the first 0.2 s (the recorder's start)
    /// left out, the tone's own bin taken (Goertzel, Hann window), so that anything else on the sink does not count.
    func level(_ server: TestServer, _ name: String) throws -> Double {
        let file = "\(server.directory)/\(name).raw"
        let rec = try server.spawn([
            "parec", "--raw", "--format=s16le", "--rate=\(Self.rate)", "--channels=1", "--device=null.monitor",
            "--latency-msec=20", "--client-name=meter", file,
        ])
        // Until 0.7 s of sound has come, not for 0.7 s: PulseAudio's null sink hands its monitor's data over in
        // bursts (0.7 s took 1.3–2.7 s to arrive here with nine other test runs on the machine).
        let needed = (Self.rate * 7 / 10) * 2
        _ = waitFor(10) {
            ((try? FileManager.default.attributesOfItem(atPath: file))?[.size] as? Int ?? 0) >= needed
        }
        // SIGINT, not SIGKILL: parec writes what it holds before it exits.
        rec.signal(SIGINT)
        if rec.wait(timeout: 3) == nil { rec.kill() }
        let bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        let samples = bytes.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }.map {
            Double(Int16(littleEndian: $0)) / 32768
        }
        let skip = Self.rate / 5
        guard samples.count > skip + Self.rate / 4 else { throw TestKitError("\(name): only \(samples.count) samples") }
        let x = Array(samples[skip...])
        let n = Double(x.count)
        let w = 2 * Double.pi * Self.frequency / Double(Self.rate)
        var (re, im, gain) = (0.0, 0.0, 0.0)
        for (i, s) in x.enumerated() {
            let hann = 0.5 - 0.5 * cos(2 * Double.pi * Double(i) / (n - 1))
            re += s * hann * cos(w * Double(i))
            im -= s * hann * sin(w * Double(i))
            gain += hann
        }
        let amplitude = 2 * (re * re + im * im).squareRoot() / gain
        return 20 * log10(max(amplitude, 1e-9))
    }

    /// The music playing at the user's volume, and its level alone.
    func musicAlone(_ server: TestServer) throws -> (stream: ObservedStream, level: Double) {
        let tone = "\(server.directory)/tone.raw"
        try writeTone(tone)
        let child = try server.spawn([
            "pacat", "--raw", "--format=s16le", "--rate=\(Self.rate)", "--channels=1", "--client-name=music",
            "--property=media.role=music", tone,
        ])
        let music = try server.waitForPlaybackStream(pid: child.pid)
        #expect(waitFor(5) { volume(server, music.index) == 65536 })
        Thread.sleep(forTimeInterval: 0.5)
        let alone = try level(server, "alone")
        #expect(alone > -9 && alone < -3, "the tone alone is at \(alone) dB, not about −6 dB")
        return (music, alone)
    }

    func volume(_ server: TestServer, _ index: UInt32) -> UInt32? {
        (try? server.playbackStreams())?.first { $0.index == index }?.volume.first
    }

    /// The stream has reached a duck of `level` from full volume: a duck fades (POLICY §2 "Fades"), and a level
    /// measured on the way is not the duck's.
    func reached(_ server: TestServer, _ index: UInt32, level: Double) -> Bool {
        let target = pow(level, 1.0 / 3) * 65536
        return volume(server, index).map { abs(Double($0) - target) <= 64 } ?? false
    }

    func silent(_ server: TestServer, role: String, name: String) throws -> Child {
        try server.spawn([
            "pacat", "--playback", "/dev/zero", "--client-name=\(name)", "--property=media.role=\(role)",
        ])
    }

    @Test(
        "a navigation prompt ducks the music to −35 dB, an ordinary ducker to −14 dB, measured on the monitor",
        arguments: ServerKind.tested)
    func depths(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let (music, alone) = try musicAlone(server)

        // An ordinary ducker: an explicit session with duck-others.
        let ducker = try server.spawn(["sleep", "60"])
        let path = try d.client.makeSession(pid: ducker.pid, "playback", options: ["duck-others"], activate: true)
        #expect(waitFor(5) { reached(server, music.index, level: 0.2) }, "\(volume(server, music.index) ?? 0)")
        let ordinary = try level(server, "ordinary") - alone
        print("duck depths: \(kind): ordinary duck \(String(format: "%.2f", ordinary)) dB")
        #expect(abs(ordinary - -14) <= 0.5, "an ordinary duck left the music at \(ordinary) dB, not −14 ± 0.5 dB")

        // A navigation prompt on top: the deepest duck wins.
        let before = volume(server, music.index)
        let nav = try silent(server, role: "navigation", name: "navigation")
        #expect(waitFor(5) { volume(server, music.index) != before && reached(server, music.index, level: 0.0178) })
        let prompt = try level(server, "navigation") - alone
        print("duck depths: \(kind): under a navigation prompt \(String(format: "%.2f", prompt)) dB")
        #expect(abs(prompt - -35) <= 1, "a navigation prompt left the music at \(prompt) dB, not −35 ± 1 dB")
        nav.kill()
        _ = d.client.session(path, "SetActive", [.bool(false), .strings([])])
        // Both gone (the prompt after its linger): the music is back at the user's volume.
        #expect(waitFor(8) { volume(server, music.index) == 65536 }, "the music was not given back its volume")
    }

    @Test(
        "a screen reader (role Accessibility) is never silenced and ducks the music to −35 dB while it is heard",
        arguments: ServerKind.tested)
    func screenReader(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let (music, alone) = try musicAlone(server)
        _ = d.client.call(
            API.managerPath, API.properties.name, "Set",
            [.string(API.manager.name), .string("SilentMode"), .variant(.bool(true))])
        let reader = try silent(server, role: "Accessibility", name: "orca")
        let readerStream = try server.waitForPlaybackStream(pid: reader.pid)
        #expect(waitFor(5) { (volume(server, music.index) ?? 65536) < 65536 })
        let ducked = try level(server, "reader") - alone
        print("duck depths: \(kind): under a screen reader \(String(format: "%.2f", ducked)) dB")
        #expect(abs(ducked - -35) <= 1, "a screen reader left the music at \(ducked) dB, not −35 ± 1 dB")
        // A non-mixable video takes the audio: the music is interrupted, the screen reader untouched.
        let video = try silent(server, role: "video", name: "video")
        #expect(waitFor(5) { (try? server.playbackStreams())?.first { $0.index == music.index }?.muted == true })
        let r = try #require((try server.playbackStreams()).first { $0.index == readerStream.index })
        #expect(!r.muted && r.volume.first == 65536, "the screen reader was touched: \(r)")
        video.kill()
        reader.kill()
        #expect(waitFor(8) { volume(server, music.index) == 65536 }, "the music was not given back its volume")
    }

    @Test(
        "a navigation prompt interrupts spoken audio, which is told it may resume after",
        arguments: ServerKind.tested)
    func spokenAudio(kind: ServerKind) throws {
        let server = try TestServer(kind)
        defer { server.stop() }
        let d = try Daemon.start(server)
        defer { d.stop() }
        let podcast = try server.spawn(["pacat", "--playback", "/dev/zero", "--client-name=podcast"])
        let path = try d.client.makeSession(pid: podcast.pid, "playback", mode: "spoken-audio", activate: true)
        let stream = try server.waitForPlaybackStream(pid: podcast.pid)
        let nav = try silent(server, role: "Navigation", name: "navigation")
        let began = d.client.waitForSignal(path, "InterruptionBegan")
        #expect(began.count == 1, "the podcast was not interrupted by the prompt")
        #expect(waitFor(5) { (try? server.playbackStreams())?.first { $0.index == stream.index }?.muted == true })
        nav.kill()
        let ended = d.client.waitForSignal(path, "InterruptionEnded", timeout: 8)
        #expect(ended.first?.first == .bool(true), "the podcast was not told it may resume: \(ended)")
    }
}
