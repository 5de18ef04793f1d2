// Test support, not a product: a private session bus and a headless sound server per test run, real client
// processes, and an observer that reads the server through `pactl` (a second, independent client).
// docs/TESTING.md has the recipes this follows.

import Foundation
import Synchronization

/// Which sound server a test runs against.
public enum ServerKind: String, CaseIterable, Sendable, CustomStringConvertible {
    case pulseaudio
    /// Debian 12's PipeWire 0.3.65 with WirePlumber 0.4.13 and pipewire-pulse.
    case pipewire
    /// PipeWire 1.4.2 with WirePlumber 0.5.8 from bookworm-backports, unpacked into a private prefix by
    /// `scripts/pipewire-1.4` (the stack of Debian 13, current Ubuntu and Fedora).
    case pipewire14 = "pipewire-1.4"

    public var description: String { rawValue }

    /// PipeWire of either generation, behind pipewire-pulse.
    public var isPipeWire: Bool { self != .pulseaudio }

    /// Whether this machine has the server's programs (CI installs all; a developer may have one).
    public var isInstalled: Bool {
        switch self {
        case .pulseaudio: return TestServer.which("pulseaudio") != nil
        case .pipewire: return ["pipewire", "wireplumber", "pipewire-pulse"].allSatisfy { TestServer.which($0) != nil }
        // scripts/pipewire-1.4 writes its stamp last, once the unpacked pipewire has said its version.
        case .pipewire14: return FileManager.default.fileExists(atPath: Self.pipewire14Prefix + "/.complete")
        }
    }

    /// The servers integration tests run on: all three, less PipeWire 1.4 when `AUDIOD_SKIP_PIPEWIRE_1_4=1` (a
    /// machine that cannot reach the Debian mirror). Without it, a missing PipeWire 1.4 is installed into its prefix
    /// on first use, and fails the tests that need it if that cannot be done.
    /// `AUDIOD_TEST_SERVERS=pipewire-1.4` (a comma-separated list of `pulseaudio`, `pipewire`, `pipewire-1.4`) runs
    /// the named servers alone.
    public static let tested: [ServerKind] = {
        var kinds = allCases
        if let only = ProcessInfo.processInfo.environment["AUDIOD_TEST_SERVERS"], !only.isEmpty {
            let names = only.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            let unknown = names.filter { ServerKind(rawValue: $0) == nil }
            kinds = allCases.filter { names.contains($0.rawValue) }
            // A typo would otherwise run every server test with no server, and pass.
            if !unknown.isEmpty || kinds.isEmpty {
                fatalError(
                    "AUDIOD_TEST_SERVERS=\(only): \(unknown.joined(separator: ", ")) is not a server; "
                        + "accepted: \(allCases.map(\.rawValue).joined(separator: ", ")), separated by commas")
            }
            print("servers: \(kinds.map(\.rawValue).joined(separator: ", ")) alone (AUDIOD_TEST_SERVERS=\(only))")
        }
        if let why = skipsPipeWire14, kinds.contains(.pipewire14) {
            print("PipeWire 1.4: skipped (\(why)); the tests run on PulseAudio and Debian 12's PipeWire only")
            kinds.removeAll { $0 == .pipewire14 }
        }
        return kinds
    }()

    /// The PipeWire servers of `tested`: for what only pipewire-pulse does.
    public static var testedPipeWires: [ServerKind] { tested.filter(\.isPipeWire) }

    /// Why PipeWire 1.4 is left out, or nil.
    public static var skipsPipeWire14: String? {
        let v = ProcessInfo.processInfo.environment["AUDIOD_SKIP_PIPEWIRE_1_4"] ?? ""
        return v.isEmpty || v == "0" ? nil : "AUDIOD_SKIP_PIPEWIRE_1_4=\(v)"
    }

    /// `AUDIOD_PIPEWIRE_1_4`, else `.build/pipewire-1.4` in this checkout.
    public static var pipewire14Prefix: String {
        if let p = ProcessInfo.processInfo.environment["AUDIOD_PIPEWIRE_1_4"], !p.isEmpty { return p }
        return TestServer.repositoryRoot + "/.build/pipewire-1.4"
    }

    /// The wrappers that run the prefix's programs.
    public static var pipewire14Bin: String { pipewire14Prefix + "/bin" }
}

public struct TestKitError: Error, CustomStringConvertible {
    public let description: String
    public init(_ d: String) { description = d }
}

/// A private bus and sound server in a fresh directory. Everything it starts it stops by pid.
public final class TestServer: @unchecked Sendable {
    public let kind: ServerKind
    public let directory: String
    /// `stop()` leaves the directory, for a person to read its logs.
    public var keepDirectory = false
    /// The environment for every process of this test run (bus, runtime and state directories, server address).
    public let environment: [String: String]
    /// `unix:<dir>/pulse/native`.
    public let pulseServer: String
    /// The stream reads' one connection (ServerQuery.swift); AUDIOD_TEST_PACTL=1 reads with `pactl` instead.
    private let query: ServerQuery?
    private let lock = NSLock()
    private var children: [pid_t] = []
    private var serverPIDs: [pid_t] = []
    private var busPID: pid_t = 0
    private let streamRestore: Bool
    private let admitOtherUsers: Bool
    private let roleLoopbacks: Bool

    /// Starts a private dbus-daemon and the server. `streamRestore` loads module-stream-restore on PulseAudio
    /// (the desktop default; PipeWire always runs WirePlumber, which has its own restore-stream).
    /// `admitOtherUsers`: the private bus lets any uid connect (tests of audiod's access rules).
    /// `roleLoopbacks` (PipeWire 1.4 only): WirePlumber runs the role-based policy of its example configuration
    /// (`Tests/Fixtures/media-role-nodes.conf`): a loopback sink per role, `loopback.sink.role.*`, to which apps'
    /// streams are linked by role, and the loopbacks' own streams on to the null sink.
    public init(
        _ kind: ServerKind, streamRestore: Bool = false, admitOtherUsers: Bool = false, roleLoopbacks: Bool = false
    ) throws {
        self.kind = kind
        self.streamRestore = streamRestore
        self.admitOtherUsers = admitOtherUsers
        self.roleLoopbacks = roleLoopbacks
        if roleLoopbacks && kind != .pipewire14 {
            throw TestKitError("role loopbacks need WirePlumber 0.5 (pipewire-1.4)")
        }
        var template = Array("/tmp/audiod-test-XXXXXX".utf8CString)
        guard
            let dir = template.withUnsafeMutableBufferPointer({ buf in
                buf.baseAddress.flatMap { mkdtemp($0) }.map { String(cString: $0) }
            })
        else { throw TestKitError("mkdtemp failed") }
        directory = dir
        pulseServer = "unix:\(dir)/pulse/native"
        query = ProcessInfo.processInfo.environment["AUDIOD_TEST_PACTL"] == "1" ? nil : ServerQuery(server: pulseServer)
        var env = ProcessInfo.processInfo.environment
        env["XDG_RUNTIME_DIR"] = dir
        env["HOME"] = "\(dir)/home"
        env["XDG_CONFIG_HOME"] = "\(dir)/home/.config"
        env["XDG_STATE_HOME"] = "\(dir)/state"
        env["XDG_DATA_HOME"] = "\(dir)/home/.local/share"
        env["DBUS_SESSION_BUS_ADDRESS"] = "unix:path=\(dir)/bus"
        env["PULSE_SERVER"] = pulseServer
        env["PULSE_RUNTIME_PATH"] = "\(dir)/pulse"
        if kind == .pulseaudio {
            env["PULSE_STATE_PATH"] = "\(dir)/pulse-state"
            env["PULSE_COOKIE"] = "\(dir)/cookie"
        }
        env["PIPEWIRE_RUNTIME_DIR"] = dir
        if kind == .pipewire14 {
            // The prefix's wrappers come first: pipewire, wireplumber, pipewire-pulse, pw-cli, pw-link, wpctl.
            try Self.installPipeWire14()
            env["PATH"] = ServerKind.pipewire14Bin + ":" + (env["PATH"] ?? "/usr/bin:/bin")
        }
        // No test reaches the machine's system bus (logind): a test that wants one starts its own.
        env["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=\(dir)/no-system-bus"
        env.removeValue(forKey: "DISPLAY")
        environment = env
        for sub in ["home", "home/.config", "state"] {
            try FileManager.default.createDirectory(atPath: "\(dir)/\(sub)", withIntermediateDirectories: true)
        }
        if roleLoopbacks {
            let conf = "\(dir)/home/.config/wireplumber/wireplumber.conf.d"
            try FileManager.default.createDirectory(atPath: conf, withIntermediateDirectories: true)
            try FileManager.default.copyItem(
                atPath: Self.repositoryRoot + "/Tests/Fixtures/media-role-nodes.conf",
                toPath: conf + "/media-role-nodes.conf")
        }
        do {
            try startBus()
            try startServer()
        } catch {
            stop()
            throw error
        }
    }

    deinit { stop() }

    private func startBus() throws {
        var argv = ["dbus-daemon", "--session", "--nofork", "--nopidfile", "--address=unix:path=\(directory)/bus"]
        if admitOtherUsers {
            // A bus that admits every uid (as a shared or misconfigured bus may): what audiod-wide writes are
            // guarded against. The run's directory must be reachable for them too.
            let config = """
                <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
                 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
                <busconfig>
                  <type>session</type>
                  <listen>unix:path=\(directory)/bus</listen>
                  <auth>EXTERNAL</auth>
                  <policy context="default">
                    <allow user="*"/>
                    <allow send_destination="*" eavesdrop="true"/>
                    <allow eavesdrop="true"/>
                    <allow own="*"/>
                  </policy>
                </busconfig>
                """
            try config.write(toFile: "\(directory)/bus.conf", atomically: true, encoding: .utf8)
            chmod(directory, 0o755)
            argv = ["dbus-daemon", "--config-file=\(directory)/bus.conf", "--nofork", "--nopidfile"]
        }
        let pid = try spawnRaw(argv, log: "bus.log")
        busPID = pid
        guard waitFor(10, { TestBus.accepts("\(directory)/bus") }) else {
            throw TestKitError("the private dbus-daemon did not start (see \(directory)/bus.log)")
        }
    }

    /// Starts (or restarts) the sound server and waits until `pactl info` answers.
    public func startServer() throws {
        switch kind {
        case .pulseaudio:
            var argv = [
                "pulseaudio", "-n", "--daemonize=no", "--exit-idle-time=-1", "--use-pid-file=no", "--realtime=no",
                "--high-priority=no", "--log-target=file:\(directory)/pulse.log", "-L",
                "module-native-protocol-unix auth-anonymous=1", "-L", "module-null-sink sink_name=null",
            ]
            if streamRestore { argv += ["-L", "module-stream-restore"] }
            serverPIDs = [try spawnRaw(argv, log: "pulse-stdout.log")]
        case .pipewire, .pipewire14:
            serverPIDs = [try spawnRaw(["pipewire"], log: "pipewire.log")]
            guard waitFor(10, { FileManager.default.fileExists(atPath: "\(directory)/pipewire-0") }) else {
                throw TestKitError("pipewire did not start (see \(directory)/pipewire.log)")
            }
            // The role loopbacks link on to a sink only if it is there when WirePlumber starts: the null sink first.
            if !roleLoopbacks { serverPIDs.append(try spawnRaw(["wireplumber"], log: "wireplumber.log")) }
            serverPIDs.append(try spawnRaw(["pipewire-pulse"], log: "pipewire-pulse.log"))
        }
        guard waitFor(15, { (try? self.pactl(["info"])) != nil }) else {
            throw TestKitError("\(kind) did not answer pactl info (logs in \(directory))")
        }
        announceVersions()
        if kind.isPipeWire {
            // PipeWire has no sink in a headless run until one is made.
            _ = try pactl(["load-module", "module-null-sink", "sink_name=null"])
            guard waitFor(10, { ((try? self.pactl(["list", "short", "sinks"])) ?? "").contains("null") }) else {
                throw TestKitError("pipewire-pulse did not create the null sink")
            }
            if roleLoopbacks {
                serverPIDs.insert(try spawnRaw(["wireplumber"], log: "wireplumber.log"), at: 1)
                guard
                    waitFor(
                        10,
                        { ((try? self.pactl(["list", "short", "sinks"])) ?? "").contains("loopback.sink.role.alert") })
                else {
                    throw TestKitError("WirePlumber made no role loopbacks (see \(directory)/wireplumber.log)")
                }
            }
            // pactl answering does not mean WirePlumber links new streams yet: a stream started too early can sit
            // unlisted (seen here about once in eight starts). Play a probe until the server lists it.
            // A probe that sits unlisted for 3 s is replaced: a new one is usually taken at once.
            var linked = false
            for _ in 0..<4 where !linked {
                // WirePlumber 0.5 started a moment too early says "Failed to connect to PipeWire" and exits (seen
                // once in five server restarts): nothing would link a stream. Started again, it connects.
                if let wp = serverPIDs.dropFirst().first, waitpid(wp, nil, WNOHANG) == wp {
                    serverPIDs[1] = try spawnRaw(["wireplumber"], log: "wireplumber.log")
                }
                let probe = try spawnRaw(
                    ["pacat", "--playback", "/dev/zero", "--client-name=audiod-test-probe"], log: nil)
                linked = waitFor(3) { Self.probeLinked((try? self.pactl(["list", "sink-inputs"])) ?? "") }
                _ = Self.killAndReap(probe)
                lock.withLock { children.removeAll { $0 == probe } }
            }
            guard linked else { throw TestKitError("PipeWire did not take a playback stream in 4 tries of 3 s") }
            // Gone again before any test looks at the streams.
            _ = waitFor(5) { !((try? self.pactl(["list", "sink-inputs"])) ?? "").contains("audiod-test-probe") }
        }
    }

    private static let announced = Mutex<Set<ServerKind>>([])

    /// Prints, once per server kind and test process, what the tests run on: the server's name and version as
    /// `pactl info` gives them, and WirePlumber's.
    private func announceVersions() {
        guard Self.announced.withLock({ $0.insert(kind).inserted }) else { return }
        let info = (try? pactl(["info"])) ?? ""
        func field(_ name: String) -> String {
            info.split(separator: "\n").first { $0.hasPrefix(name + ": ") }.map { String($0.dropFirst(name.count + 2)) }
                ?? "?"
        }
        var line = "server \(kind): \(field("Server Name")) \(field("Server Version"))"
        if kind.isPipeWire {
            let wp = (try? run(["wireplumber", "--version"])) ?? ""
            let version = wp.split(separator: "\n").first { $0.hasPrefix("Linked with") }?.split(separator: " ").last
            line += ", WirePlumber \(version.map(String.init) ?? "?")"
        }
        print(line)
    }

    /// `pactl list sink-inputs` cut into one block per stream.
    public static func sinkInputBlocks(_ list: String) -> [String] {
        Array(list.components(separatedBy: "Sink Input #").dropFirst())
    }

    /// The probe stream is listed on a sink: WirePlumber linked it (an unlinked stream's sink is unknown).
    static func probeLinked(_ list: String) -> Bool {
        for block in sinkInputBlocks(list) where block.contains("audiod-test-probe") {
            guard let sink = block.split(separator: "\n").first(where: { $0.contains("Sink: ") }) else { return false }
            return Int(sink.split(separator: " ").last ?? "").map { $0 >= 0 && $0 < Int(UInt32.max) } ?? false
        }
        return false
    }

    /// The sound server's processes (PulseAudio; or PipeWire, WirePlumber and pipewire-pulse).
    public var soundServerPIDs: [pid_t] { lock.withLock { serverPIDs } }

    /// Sends `signal` to the private dbus-daemon (SIGSTOP/SIGCONT: a bus that reads nothing for a while).
    public func signalBus(_ signal: Int32) {
        let pid = lock.withLock { busPID }
        if pid > 0 { kill(pid, signal) }
    }

    /// Kills the sound server (SIGKILL), as a crash would.
    public func killServer() {
        let pids = lock.withLock { () -> [pid_t] in
            defer { serverPIDs = [] }
            return serverPIDs
        }
        for p in pids.reversed() {
            kill(p, SIGKILL)
            var status: Int32 = 0
            waitpid(p, &status, 0)
        }
    }

    /// Kills the private dbus-daemon (SIGKILL), as if the session bus went away.
    public func killBus() {
        if busPID > 0 {
            _ = Self.killAndReap(busPID)
            busPID = 0
        }
    }

    /// Stops every process this run started, by pid, and removes the directory (unless `keepDirectory` or
    /// `AUDIOD_TEST_KEEP` keeps it).
    public func stop() {
        let kids = lock.withLock { () -> [pid_t] in
            defer { children = [] }
            return children
        }
        for p in kids { _ = Self.killAndReap(p) }
        killServer()
        if busPID > 0 {
            _ = Self.killAndReap(busPID)
            busPID = 0
        }
        // `AUDIOD_TEST_KEEP=1` keeps the run's directory (its logs) to look into a failure; `keepDirectory` keeps
        // this one (a long random run keeps only its failing sequences').
        if ProcessInfo.processInfo.environment["AUDIOD_TEST_KEEP"] == nil && !keepDirectory {
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    // MARK: Processes

    /// Starts a client process (paplay, pacat, parec, a shell…) in this run's environment; `stop()` kills it if
    /// the test did not.
    /// `log` names a file in the run's directory for its output (default: discarded).
    @discardableResult
    public func spawn(_ argv: [String], environment extra: [String: String] = [:], log: String? = nil) throws -> Child {
        let pid = try spawnRaw(argv, log: log, extra: extra)
        return Child(pid: pid)
    }

    private func spawnRaw(_ argv: [String], log: String?, extra: [String: String] = [:]) throws -> pid_t {
        let env = environment.merging(extra) { _, new in new }
        let pid = try Self.posixSpawn(argv, environment: env, stdout: log.map { "\(directory)/\($0)" } ?? "/dev/null")
        lock.withLock { children.append(pid) }
        return pid
    }

    /// Runs a command to completion and returns its standard output; throws on a non-zero exit.
    /// A file of the run's directory, e.g. a log written by `spawn(_:log:)`.
    public func file(_ name: String) -> String {
        (try? String(contentsOfFile: "\(directory)/\(name)", encoding: .utf8)) ?? ""
    }

    /// This checkout (the directory with Package.swift).
    public static let repositoryRoot: String = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    private static let pipewire14Install = Mutex<Result<Void, TestKitError>?>(nil)

    /// Unpacks PipeWire 1.4 into its prefix once per test process (`scripts/pipewire-1.4`, a few seconds), or
    /// says why it cannot.
    static func installPipeWire14() throws {
        let result = pipewire14Install.withLock { done -> Result<Void, TestKitError> in
            if let done { return done }
            let r: Result<Void, TestKitError>
            if ServerKind.pipewire14.isInstalled {
                r = .success(())
            } else {
                do {
                    _ = try runCapturing(
                        ["/bin/bash", repositoryRoot + "/scripts/pipewire-1.4", ServerKind.pipewire14Prefix],
                        environment: ProcessInfo.processInfo.environment)
                    r =
                        ServerKind.pipewire14.isInstalled
                        ? .success(())
                        : .failure(TestKitError("scripts/pipewire-1.4 left no wireplumber in its prefix"))
                } catch {
                    r = .failure(
                        TestKitError(
                            "PipeWire 1.4 is not in \(ServerKind.pipewire14Prefix) and scripts/pipewire-1.4 could not put it "
                                + "there (\(error)); set AUDIOD_SKIP_PIPEWIRE_1_4=1 to test on the other two servers only"
                        ))
                }
            }
            done = r
            return r
        }
        try result.get()
    }

    /// A program built by this package (next to the test bundle in `.build/<config>/`).
    public static func builtProduct(_ name: String) -> String {
        let exe =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var dir = URL(fileURLWithPath: exe).deletingLastPathComponent()
        // The test binary may sit inside a bundle directory (`….xctest/…`).
        while dir.path.contains(".xctest") { dir = dir.deletingLastPathComponent() }
        return dir.appendingPathComponent(name).path
    }

    public func run(_ argv: [String], environment extra: [String: String] = [:]) throws -> String {
        let env = environment.merging(extra) { _, new in new }
        return try Self.runCapturing(argv, environment: env)
    }

    /// `pactl ARGS` against this run's server.
    public func pactl(_ args: [String]) throws -> String {
        try run(["pactl"] + args)
    }

    // MARK: Observing

    /// A PipeWire node's own `Props` objects (its mute, its factor `volume`, its channel volumes), as `pw-dump` shows
    /// them: what the node holds, beside what pipewire-pulse reports. Empty where none are shown; under `timeout`, so
    /// that a wedged server cannot hang the caller.
    public func nodeProps(_ node: String) -> [[String: Any]] {
        guard let out = try? run(["timeout", "5", "pw-dump", node]),
            let list = try? JSONSerialization.jsonObject(with: Data(out.utf8)) as? [[String: Any]]
        else { return [] }
        let object = list.first { "\($0["id"] ?? "")" == node }
        let params = (object?["info"] as? [String: Any])?["params"] as? [String: Any]
        return params?["Props"] as? [[String: Any]] ?? []
    }

    /// Every playback stream, as `pactl -f json list sink-inputs` shows it.
    public func playbackStreams() throws -> [ObservedStream] {
        if let query { return try query.streams(record: false) }
        return try ObservedStream.parse(pactl(["-f", "json", "list", "sink-inputs"]), record: false)
    }

    /// Every record stream, as `pactl -f json list source-outputs` shows it.
    public func recordStreams() throws -> [ObservedStream] {
        if let query { return try query.streams(record: true) }
        return try ObservedStream.parse(pactl(["-f", "json", "list", "source-outputs"]), record: true)
    }

    /// The playback stream of a process (or of its child), when the server lists it.
    public func playbackStream(pid: pid_t) -> ObservedStream? {
        (try? playbackStreams())?.first { $0.pid == UInt32(pid) }
    }

    /// Waits for a process's playback stream to appear (players take 0.1–0.3 s) with its volume set:
    /// pipewire-pulse may list a new stream at volume 0 for a moment before the node is configured.
    public func waitForPlaybackStream(pid: pid_t, timeout: Double = 10) throws -> ObservedStream {
        var found: ObservedStream?
        // What the last look saw, for the message: a stream that never came and a server that did not answer
        // are different failures.
        var listed: [UInt32] = []
        var lastError: String?
        _ = waitFor(timeout) {
            do {
                let streams = try self.playbackStreams()
                listed = streams.compactMap(\.pid)
                lastError = nil
                found = streams.first { $0.pid == UInt32(pid) }
            } catch {
                lastError = "\(error)"
                found = nil
            }
            return found.map { !$0.volume.isEmpty && !$0.volume.contains(0) } ?? false
        }
        guard let found, !found.volume.isEmpty, !found.volume.contains(0) else {
            let alive = kill(pid, 0) == 0
            let seen =
                lastError.map { "the last list failed: \($0)" }
                ?? "the server lists \(listed.count) playback streams, of pids \(listed.sorted())"
            let said = file("clients.log").split(separator: "\n").suffix(3).joined(separator: " / ")
            throw TestKitError(
                "no settled playback stream of pid \(pid) within \(timeout) s\(said.isEmpty ? "" : " (clients said: \(said))") (process \(alive ? "alive" : "gone"); server shows \(found.map { "volume \($0.volume), muted \($0.muted)" } ?? "no stream"); \(seen))"
            )
        }
        return found
    }

    // MARK: Helpers

    public static func which(_ name: String, path: String? = nil) -> String? {
        for dir in (path ?? ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            let p = "\(dir)/\(name)"
            if FileManager.default.isExecutableFile(atPath: p) { return p }
        }
        return nil
    }

    static func posixSpawn(_ argv: [String], environment: [String: String], stdout: String) throws -> pid_t {
        guard let exe = argv.first.flatMap({ $0.hasPrefix("/") ? $0 : which($0, path: environment["PATH"]) }) else {
            throw TestKitError("\(argv.first ?? "?") is not installed")
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        // The test runner may block signals; children start with none blocked and default handlers.
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attr, &none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigdefault(&attr, &all)
        posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let cArgs = argv.map { strdup($0) } + [nil]
        let cEnv = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for p in cArgs { free(p) }
            for p in cEnv { free(p) }
        }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, exe, &actions, &attr, cArgs, cEnv)
        guard rc == 0 else { throw TestKitError("cannot start \(exe): \(String(cString: strerror(rc)))") }
        return pid
    }

    /// Runs a command to completion; its exit status and its output (stdout and stderr together), whatever the
    /// status.
    public func runStatus(_ argv: [String], environment extra: [String: String] = [:]) throws -> (
        status: Int32, output: String
    ) {
        var template = Array("/tmp/audiod-out-XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { buf in buf.baseAddress.map { mkstemp($0) } ?? -1 }
        guard fd >= 0 else { throw TestKitError("mkstemp failed") }
        close(fd)
        let path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        defer { unlink(path) }
        let pid = try Self.posixSpawn(argv, environment: environment.merging(extra) { _, new in new }, stdout: path)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        return (code, (try? String(contentsOfFile: path, encoding: .utf8)) ?? "")
    }

    public static func runCapturing(_ argv: [String], environment: [String: String]) throws -> String {
        var template = Array("/tmp/audiod-out-XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { buf in buf.baseAddress.map { mkstemp($0) } ?? -1 }
        guard fd >= 0 else { throw TestKitError("mkstemp failed") }
        close(fd)
        let path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        defer { unlink(path) }
        let pid = try posixSpawn(argv, environment: environment, stdout: path)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let out = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        guard status == 0 else {
            throw TestKitError("\(argv.joined(separator: " ")) failed (status \(status)): \(out)")
        }
        return out
    }

    /// SIGKILL and reap; returns the wait status.
    static func killAndReap(_ pid: pid_t) -> Int32 {
        kill(pid, SIGKILL)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return status
    }
}

extension TestServer {
    /// Installs audiod's D-Bus service file (`template`: systemd/org.audiod.AudioSession1.service.in) for this
    /// run's bus, pointing at the built audiod: a call to its name nobody owns starts it, as on a user's machine.
    /// The activated audiod is a child of the bus; stop it (SIGTERM) before `stop()`, the clean way.
    public func makeAudiodActivatable(template: URL) throws {
        let services = "\(directory)/home/.local/share/dbus-1/services"
        try FileManager.default.createDirectory(atPath: services, withIntermediateDirectories: true)
        let text = try String(contentsOf: template, encoding: .utf8)
        let bindir = URL(fileURLWithPath: TestServer.builtProduct("audiod")).deletingLastPathComponent().path
        try text.replacingOccurrences(of: "@bindir@", with: bindir)
            .write(toFile: "\(services)/org.audiod.AudioSession1.service", atomically: true, encoding: .utf8)
        // dbus-daemon notices the new file (inotify) or on ReloadConfig.
        _ = try? run([
            "dbus-send", "--session", "--dest=org.freedesktop.DBus", "--type=method_call",
            "/org/freedesktop/DBus", "org.freedesktop.DBus.ReloadConfig",
        ])
    }

    /// The newest running audiod of this machine's build, by pid (one started by D-Bus activation).
    public func activatedAudiod() -> pid_t? {
        (try? run(["pgrep", "-f", "-n", TestServer.builtProduct("audiod")])).flatMap {
            pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines))
        }
    }
}

/// A process a test started.
public struct Child: Sendable {
    public let pid: pid_t

    /// Sends a signal.
    public func signal(_ sig: Int32) { Glibc.kill(pid, sig) }

    /// SIGKILL and reap.
    public func kill() { _ = TestServer.killAndReap(pid) }

    /// Waits for the process to exit (up to `timeout` seconds); its exit status, or nil if it is still running.
    public func wait(timeout: Double) -> Int32? {
        var status: Int32 = 0
        var result: Int32?
        _ = waitFor(timeout) {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid { result = status }
            return r == pid || r < 0
        }
        return result
    }
}

/// The MPRIS name a player process took on the test's session bus (mpv-mpris adds `.instancePID` after the first).
public func mprisName(_ server: TestServer, pid: pid_t) -> String? {
    let out = (try? server.run(["busctl", "--user", "list", "--no-legend"])) ?? ""
    for line in out.split(separator: "\n") {
        let f = line.split(separator: " ", omittingEmptySubsequences: true)
        if f.count > 1, f[0].hasPrefix("org.mpris.MediaPlayer2."), f[1] == "\(pid)" { return String(f[0]) }
    }
    return nil
}

/// Starts mpv (MPRIS through mpv-mpris) with `arguments` before the file, and waits for its stream and bus name.
/// HOME is the run's directory, so no user config applies; /etc/mpv/scripts/mpris.so loads.
public func startMPV(_ server: TestServer, _ arguments: [String], file: String) throws -> (Child, String) {
    let p = try server.spawn(
        ["mpv", "--no-video", "--no-terminal", "--ao=pulse", "--loop-file=inf"] + arguments + [file])
    _ = try server.waitForPlaybackStream(pid: p.pid)
    var name: String?
    _ = waitFor(10) {
        name = mprisName(server, pid: p.pid)
        return name != nil
    }
    guard let name else {
        p.kill()
        throw TestKitError("mpv \(p.pid) has no MPRIS name")
    }
    return (p, name)
}

/// An MPRIS player's `PlaybackStatus` (`Playing`, `Paused`, `Stopped`), read on the bus as a panel would.
public func mprisStatus(_ server: TestServer, _ name: String) -> String? {
    let out = try? server.run([
        "busctl", "--user", "get-property", name, "/org/mpris/MediaPlayer2", "org.mpris.MediaPlayer2.Player",
        "PlaybackStatus",
    ])
    return out?.split(separator: "\"").dropFirst().first.map(String.init)
}

/// A playback stream that plays silence for as long as it runs (`pacat /dev/zero`), with an optional client name
/// (`application.name`), media role and further pacat arguments.
@discardableResult
public func playback(_ server: TestServer, name: String? = nil, role: String? = nil, extra: [String] = []) throws
    -> Child
{
    var argv = ["pacat", "--playback", "/dev/zero"]
    if let name { argv.append("--client-name=\(name)") }
    if let role { argv.append("--property=media.role=\(role)") }
    // pacat prints only its errors: kept, for a wait that finds no stream to quote.
    return try server.spawn(argv + extra, log: "clients.log")
}

/// The command line that runs a program in a bwrap sandbox looking like Flatpak's (ENVIRONMENT: a root of its own
/// — bwrap's tmpfs — with the host's programs read-only, a pid namespace of its own, /tmp for the run's sockets) and,
/// with `flatpakApp`, `.flatpak-info` naming that app. Binding the host's / writable would let bwrap make the
/// /.flatpak-info mount point on the host, and then every host process looks like a broken Flatpak to PipeWire.
public func flatpakSandbox(_ server: TestServer, flatpakApp: String? = nil, instance: String = "1") throws -> [String] {
    var wrap = [
        "bwrap", "--unshare-pid", "--die-with-parent", "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc",
        "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
        "--symlink", "usr/sbin", "/sbin", "--proc", "/proc", "--dev", "/dev", "--bind", "/tmp", "/tmp",
    ]
    if let flatpakApp {
        let info = "\(server.directory)/flatpak-info-\(flatpakApp)-\(instance)"
        try
            "[Application]\nname=\(flatpakApp)\nruntime=runtime/org.freedesktop.Platform/x86_64/23.08\n\n[Instance]\ninstance-id=\(instance)\n"
            .write(toFile: info, atomically: true, encoding: .utf8)
        wrap += ["--ro-bind", info, "/.flatpak-info"]
    }
    return wrap
}

/// A cgroup named `name` (it may have several parts: `user@0.service/init.scope`) in a cgroup2 subtree of the test's
/// own — an app scope as GNOME names them, a user manager's scope; nil (with a line saying why) where the machine has
/// no writable cgroup2 hierarchy. `cleanup` removes it once its processes are gone.
public func cgroupScope(_ name: String, tag: String) throws -> (scope: String, cleanup: () -> Void)? {
    guard
        let root = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"].first(where: {
            FileManager.default.fileExists(atPath: $0 + "/cgroup.procs") && access($0, W_OK) == 0
        })
    else {
        print("skipped: no writable cgroup2 hierarchy here (making a scope needs one, as root)")
        return nil
    }
    let subtree = "\(root)/audiod-test-\(getpid())-\(tag)"
    let scope = "\(subtree)/\(name)"
    try FileManager.default.createDirectory(atPath: scope, withIntermediateDirectories: true)
    return (
        scope,
        {
            _ = waitFor(5) { ((try? String(contentsOfFile: scope + "/cgroup.procs", encoding: .utf8)) ?? "").isEmpty }
            var dir = scope
            while dir.count >= subtree.count {
                rmdir(dir)
                dir = String(dir[..<(dir.lastIndex(of: "/") ?? dir.startIndex)])
            }
        }
    )
}

/// Polls `condition` every 5 ms until it holds or `timeout` seconds pass.
public func waitFor(_ timeout: Double, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while true {
        if try condition() { return true }
        if Date() > deadline { return false }
        usleep(5_000)
    }
}

/// A stream as another client (`pactl`) sees it.
public struct ObservedStream: Sendable, Equatable {
    public var index: UInt32
    public var record: Bool
    public var muted: Bool
    public var corked: Bool
    /// Per-channel `pa_volume_t` values.
    public var volume: [UInt32]
    public var properties: [String: String]

    public var pid: UInt32? { properties["application.process.id"].flatMap { UInt32($0) } }
    public var applicationName: String { properties["application.name"] ?? "" }

    static func parse(_ json: String, record: Bool) throws -> [ObservedStream] {
        guard let list = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]] else {
            throw TestKitError("pactl printed no JSON list: \(json.prefix(200))")
        }
        return list.compactMap { o in
            guard let index = (o["index"] as? NSNumber)?.uint32Value else { return nil }
            let volumes = (o["volume"] as? [String: Any]) ?? [:]
            // pactl prints channels in channel-map order; JSON objects are unordered, so sort by the map.
            let map = ((o["channel_map"] as? String) ?? "").split(separator: ",").map(String.init)
            let keys = map.isEmpty ? volumes.keys.sorted() : map
            let vol = keys.compactMap { k in ((volumes[k] as? [String: Any])?["value"] as? NSNumber)?.uint32Value }
            var props: [String: String] = [:]
            for (k, v) in (o["properties"] as? [String: Any]) ?? [:] { props[k] = "\(v)" }
            return ObservedStream(
                index: index, record: record, muted: (o["mute"] as? Bool) ?? false,
                corked: (o["corked"] as? Bool) ?? false, volume: vol, properties: props)
        }
    }
}

/// A private dbus-daemon alone (for tests of the bus layer that need no sound server).
public final class TestBus: @unchecked Sendable {
    public let directory: String
    public let address: String
    private var pid: pid_t = 0

    public init() throws {
        var template = Array("/tmp/audiod-bus-XXXXXX".utf8CString)
        guard
            let dir = template.withUnsafeMutableBufferPointer({ buf in
                buf.baseAddress.flatMap { mkdtemp($0) }.map { String(cString: $0) }
            })
        else { throw TestKitError("mkdtemp failed") }
        directory = dir
        address = "unix:path=\(dir)/bus"
        do {
            try start()
        } catch {
            stop()
            throw error
        }
    }

    deinit { stop() }

    /// Starts the dbus-daemon at `address` (again, after `kill`: a bus that comes back).
    public func start() throws {
        guard pid == 0 else { return }
        pid = try TestServer.posixSpawn(
            ["dbus-daemon", "--session", "--nofork", "--nopidfile", "--address=\(address)"],
            environment: ProcessInfo.processInfo.environment, stdout: "\(directory)/bus.log")
        // The socket exists from bind(); it accepts from listen() on. A client between the two is refused.
        guard waitFor(10, { Self.accepts("\(directory)/bus") }) else {
            throw TestKitError("the private dbus-daemon did not start")
        }
    }

    /// Whether a Unix socket at `path` accepts a connection now.
    static func accepts(_ path: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else { return false }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            for (i, b) in bytes.enumerated() { raw[i] = b }
        }
        return withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0
            }
        }
    }

    /// Kills the dbus-daemon (SIGKILL: every connection drops at once) and keeps the directory for `start`.
    public func killDaemon() {
        guard pid > 0 else { return }
        _ = TestServer.killAndReap(pid)
        pid = 0
        try? FileManager.default.removeItem(atPath: "\(directory)/bus")
    }

    /// Sends `signal` to the dbus-daemon (SIGSTOP/SIGCONT: a bus that reads nothing for a while).
    public func send(signal: Int32) {
        if pid > 0 { kill(pid, signal) }
    }

    public func stop() {
        if pid > 0 {
            _ = TestServer.killAndReap(pid)
            pid = 0
        }
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// Resident and proportional set size of a process, in kB (`VmRSS` of /proc/PID/status, `Pss` of smaps_rollup);
/// 0 when the process is gone.
public func processMemory(_ pid: pid_t) -> (rss: Int, pss: Int) {
    func field(_ file: String, _ name: String) -> Int {
        let text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
        let line = text.split(separator: "\n").first { $0.hasPrefix(name + ":") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }
    return (field("/proc/\(pid)/status", "VmRSS"), field("/proc/\(pid)/smaps_rollup", "Pss"))
}
