import AudiodTestKit
import DBusService
import Foundation
import Testing

/// SIGTERM in the middle of a burst of activity. Four clients toggle their sessions as fast as audiod
/// answers while new streams of four kinds start every 40 ms; SIGTERM lands after 0.6 s and the streams keep
/// starting for 0.3 s more. audiod must exit 0, and every stream — those that ran, and new ones of every kind
/// started afterwards — must be at the user's values: nothing audiod did outlives it, in the streams or in the
/// server's restore database. `AUDIOD_SIGTERM_ROUNDS` sets the rounds per server (scripts/reliability: 20).
@Suite(.serialized)
struct ShutdownUnderLoadTests {
    static let roles: [String?] = ["music", "phone", "game", nil]

    /// One stream of a role (nil: none), named so that its restore-database key is its own.
    func loaderStream(_ server: TestServer, _ role: String?) throws -> Child {
        try playback(server, name: "loader-\(role ?? "none")", role: role)
    }

    /// A stream at the user's values: the user changed nothing, so unmuted at 100 %.
    static func atUserValues(_ s: ObservedStream) -> Bool {
        !s.muted && !s.volume.isEmpty && s.volume.allSatisfy { $0 == 65536 }
    }

    static func describe(_ streams: [ObservedStream]) -> String {
        streams.map { "#\($0.index) \($0.applicationName) muted=\($0.muted) volume=\($0.volume)" }.joined(
            separator: "; ")
    }

    @Test(
        "SIGTERM under load: audiod exits 0 and leaves every stream, later streams and the restore database at the user's values",
        arguments: ServerKind.tested)
    func sigtermUnderLoad(kind: ServerKind) throws {
        let rounds = ReliabilityTests.setting("AUDIOD_SIGTERM_ROUNDS", 3)
        let server = try TestServer(kind, streamRestore: true)
        defer { server.stop() }
        let holder = try server.spawn(["sleep", "3600"])
        let address = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        var leftovers = 0
        var crashes = 0
        var streamsSeen = 0
        var stopTimes: [Double] = []
        for round in 0..<rounds {
            let log = "audiod-sigterm-\(round).log"
            let d = try Daemon.start(
                server,
                arguments: ["--log-level", ProcessInfo.processInfo.environment["AUDIOD_SIGTERM_LOG"] ?? "info"],
                log: log)
            // The four clients of the issue, each with its own connection and session.
            let shapes: [(String, String, [String])] = [
                ("playback", "default", []),
                ("playback", "voice-prompt", ["duck-others"]),
                ("play-and-record", "voice-chat", []),
                ("ambient", "default", []),
            ]
            let clients = try shapes.map { _ in try BusClient(address: address, recordSignals: false) }
            let paths = try zip(clients, shapes).map { c, s in
                try c.makeSession(pid: holder.pid, s.0, mode: s.1, options: s.2)
            }
            let stop = Switch()
            let calls = Counter()
            toggleSessions(Array(zip(clients, paths)), until: stop, counting: calls)
            var streams: [Child] = []
            let started = Date()
            var terminated: Date?
            var k = 0
            while Date().timeIntervalSince(started) < 0.9 {
                streams.append(try loaderStream(server, Self.roles[k % Self.roles.count]))
                k += 1
                if terminated == nil, Date().timeIntervalSince(started) >= 0.6 {
                    d.child.signal(SIGTERM)
                    terminated = Date()
                }
                usleep(40_000)
            }
            let status = d.child.wait(timeout: 15)
            stopTimes.append(terminated.map { Date().timeIntervalSince($0) } ?? 0)
            stop.set(true)
            for c in clients { c.close() }
            d.client.close()
            let exitedCleanly = status.map { ($0 & 0x7f) == 0 && ($0 >> 8) & 0xff == 0 } ?? false
            if !exitedCleanly { crashes += 1 }
            #expect(
                exitedCleanly,
                "round \(round): audiod ended with status \(String(describing: status)): \(server.file(log).suffix(2000))"
            )
            // Streams that started during or after the stop, and one more of every kind now that audiod is gone.
            for role in Self.roles { streams.append(try loaderStream(server, role)) }
            let all = streams.count
            streamsSeen += all
            // Every stream listed (PipeWire takes a moment to link each), then WirePlumber's restore applied (it
            // sets a new stream's saved values a moment after the stream appears).
            _ = waitFor(10) {
                ((try? server.playbackStreams()) ?? []).filter { $0.applicationName.hasPrefix("loader-") }.count >= all
            }
            usleep(kind.isPipeWire ? 500_000 : 100_000)
            let seen = ((try? server.playbackStreams()) ?? []).filter { $0.applicationName.hasPrefix("loader-") }
            let wrong = seen.filter { !Self.atUserValues($0) }
            leftovers += wrong.count
            var kept = ""
            if !wrong.isEmpty {
                // The whole log, for a person to read: a failure here is a race, and its story is long.
                kept = "/tmp/audiod-sigterm-\(kind)-\(round)-\(getpid()).log"
                try? server.file(log).write(toFile: kept, atomically: true, encoding: .utf8)
            }
            #expect(
                wrong.count == 0,
                "round \(round): \(wrong.count) of \(seen.count) streams not at the user's values: \(Self.describe(wrong)); audiod's log: \(kept)"
            )
            #expect(calls.value > 0, "round \(round): the clients made no calls")
            for s in streams { s.kill() }
            _ = waitFor(5) {
                ((try? server.playbackStreams()) ?? []).allSatisfy { !$0.applicationName.hasPrefix("loader-") }
            }
        }
        if kind.isPipeWire {
            // WirePlumber writes its state a second after the last change: none of it may hold a policy value.
            usleep(1_500_000)
            let state = server.file("state/wireplumber/restore-stream")
            let bad = state.split(separator: "\n").filter { line in
                guard line.contains("loader-") || line.contains("media.role:") else { return false }
                if line.hasSuffix(":mute=true") { return true }
                guard let eq = line.firstIndex(of: "="), line[..<eq].hasSuffix(":channelVolumes") else { return false }
                // "1.0;1.0;": a channel below 1 is a duck.
                return line[line.index(after: eq)...].split(separator: ";").contains { (Double($0) ?? 1) < 0.999 }
            }
            #expect(bad.isEmpty, "WirePlumber's restore database holds policy values: \(bad)")
        }
        print(
            "reliability: \(kind): SIGTERM under load \(rounds)×: \(streamsSeen) streams checked, \(leftovers) left changed, "
                + "\(crashes) unclean exits; slowest stop \(String(format: "%.0f", (stopTimes.max() ?? 0) * 1000)) ms")
    }
}
