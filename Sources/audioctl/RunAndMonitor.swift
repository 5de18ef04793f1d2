import ArgumentParser
import AudioVocabulary
import AudiodClient
import Foundation
import Synchronization

extension Audioctl {
    struct Run: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run a command in its own active session; release it (with notify) when the command exits.",
            discussion: """
                The command's streams are tagged with the session through PULSE_PROP (audiod.session=<id>). The \
                command starts as a shell would start it: nothing blocked or ignored and, in a terminal, in the \
                foreground. SIGINT, SIGTERM and SIGHUP sent to audioctl are passed on to it. When it ends, the \
                session is released with notify and audioctl exits with its status: 128 + the signal when it was \
                killed, 127 when it cannot be found, 126 when it cannot be executed. With --output-muted (or mode \
                short-form-video) the command plays muted and takes the audio from nobody until its stream is \
                unmuted in a mixer; audioctl says so when it is.
                """)
        @OptionGroup var options: BusOptions
        @Option(
            help: ArgumentHelp("One of: \(Words.categories.joined(separator: ", ")).", valueName: "category"),
            completion: .list(Words.categories))
        var category: String
        @OptionGroup var modeAndOptions: ModeAndOptions
        @Flag(help: "Start with the session's output muted (OutputMuted): it takes the audio from nobody.")
        var outputMuted = false
        @Argument(parsing: .captureForPassthrough, help: "-- COMMAND [ARGUMENT …]") var command: [String] = []

        func validate() throws {
            let cmd = command.first == "--" ? Array(command.dropFirst()) : command
            if cmd.isEmpty { throw ValidationError("run needs a command after --") }
        }

        func run() async throws {
            let cmd = command.first == "--" ? Array(command.dropFirst()) : command
            if let r = modeAndOptions.refusal(category: category) { try fail(.refused(r)) }
            // A command that cannot be started is reported as a shell would, before any session exists.
            let path: String
            switch CommandLookup.resolve(cmd[0]) {
            case .found(let p): path = p
            case .notFound:
                FileHandle.standardError.write(Data("audioctl: \(cmd[0]): command not found\n".utf8))
                throw ExitCode(127)
            case .notExecutable(let p):
                FileHandle.standardError.write(Data("audioctl: \(p): Permission denied\n".utf8))
                throw ExitCode(126)
            }
            var status: Int32 = 0
            try await options.connected { c in
                // A connection-lifetime session: if audioctl dies, audiod releases it.
                let s = try await AudioSession.make(applicationName: cmd[0], connection: c)
                try await s.setCategory(category, mode: modeAndOptions.mode, options: modeAndOptions.options)
                if outputMuted { try await s.setOutputMuted(true) }
                try await s.setActive(true)
                var env = ProcessInfo.processInfo.environment
                let tag = "audiod.session=\(s.id)"
                env["PULSE_PROP"] = env["PULSE_PROP"].map { $0.isEmpty ? tag : $0 + " " + tag } ?? tag
                let child = try ForegroundChild(path: path, argv: cmd, environment: env)
                // The library makes the session again when audiod restarts; the person running the command is told.
                // The child's tag then names no session (ids are not reused), and its streams go by its ancestry.
                let name = cmd[0]
                let follow = Task {
                    for await e in s.mediaServices {
                        let line: String
                        switch e {
                        case .wereLost: line = "audiod went away; \(name) plays on without it"
                        case .wereReset(let again):
                            line = "audiod restarted: session made again \(s.path) (\(again ? "active" : "inactive"))"
                        case .resetFailed(let error):
                            line = "audiod restarted, but the session could not be made again: \(error)"
                        }
                        FileHandle.standardError.write(Data("audioctl: \(line)\n".utf8))
                    }
                }
                let unmuted = Task {
                    for await _ in s.userIntentsToUnmuteOutput {
                        FileHandle.standardError.write(
                            Data("audioctl: \(name)'s output was unmuted in a mixer; it has the audio\n".utf8))
                    }
                }
                status = await Task.detached { child.wait() }.value
                follow.cancel()
                unmuted.cancel()
                try? await s.release()
            }
            throw ExitCode(status)
        }
    }

    struct Monitor: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Print audiod's events as they happen: interruptions, hints, route changes, sessions, properties.",
            discussion: """
                Each line starts with the time. When audiod is not running yet, or goes away, monitor says so and \
                waits for it; when the session bus itself goes away, it exits with status 2. With --json, one object \
                per line, as docs/API.md describes.
                """)
        @OptionGroup var options: BusOptions
        @Flag(help: "One JSON object per line.") var json = false

        func run() async throws {
            try await options.connected { c in
                let events = c.signals()
                do {
                    _ = try await c.property(AudiodConnection.managerPath, AudiodConnection.managerInterface, "Version")
                } catch let e as AudiodError where e.code == .notRunning {
                    // Subscribed already: its start is the next event.
                    emit(["event": "audiod-not-running"], "audiod is not running; waiting for it to start")
                }
                for await e in events {
                    if e.member == "NameOwnerChanged" {
                        let back = e.arguments.last?.stringValue?.isEmpty == false
                        emit(
                            ["event": back ? "audiod-started" : "audiod-stopped"],
                            back ? "audiod is back" : "audiod went away; waiting for it to come back")
                        continue
                    }
                    emit(Self.object(e), Self.line(e))
                }
                // The stream ends only when the bus connection is gone.
                if c.busLost { throw Failure.notRunning("the session bus went away") }
            }
        }

        /// One line, unbuffered, so that a pipe sees each event at once.
        func emit(_ object: [String: Any], _ text: String) {
            let now = Date()
            if json {
                var o = object
                o["time"] = Self.iso.string(from: now)
                printJSON(o)
            } else {
                FileHandle.standardOutput.write(Data((Self.clock(now) + " " + text.escapingControls + "\n").utf8))
            }
        }

        nonisolated(unsafe) static let iso: ISO8601DateFormatter = {
            let f = ISO8601DateFormatter()
            f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            return f
        }()

        /// Local wall-clock time with milliseconds.
        static func clock(_ d: Date) -> String {
            var t = time_t(d.timeIntervalSince1970)
            var parts = tm()
            localtime_r(&t, &parts)
            let ms = Int((d.timeIntervalSince1970 - Double(t)) * 1000)
            return String(format: "%02d:%02d:%02d.%03d", parts.tm_hour, parts.tm_min, parts.tm_sec, ms)
        }

        static func sessionID(_ path: String) -> Any {
            path.hasPrefix(AudiodConnection.managerPath + "/session/")
                ? (UInt64(path.split(separator: "/").last ?? "") ?? 0) as Any : NSNull()
        }

        /// An event as `monitor --json` prints it: its name in kebab-case, the session it concerns, its values.
        static func object(_ e: AudiodSignal) -> [String: Any] {
            let a = e.arguments
            var o: [String: Any] = ["event": kebab(e.member), "path": e.path, "session": sessionID(e.path)]
            switch e.member {
            case "InterfacesAdded":
                let path: String = { if case .objectPath(let p)? = a.first { return p } else { return "" } }()
                let props: [String: DBusValue] = {
                    guard case .dict(_, _, let ifaces)? = a.last else { return [:] }
                    return ifaces.first { $0.0 == .string(AudiodConnection.sessionInterface) }?.1.propertyMap ?? [:]
                }()
                o["event"] = "session-added"
                o["path"] = path
                o["session"] = sessionID(path)
                o["properties"] = kebabObject(props)
            case "InterfacesRemoved":
                let path: String = { if case .objectPath(let p)? = a.first { return p } else { return "" } }()
                o["event"] = "session-removed"
                o["path"] = path
                o["session"] = sessionID(path)
            case "PropertiesChanged":
                o["properties"] = kebabObject(a.dropFirst().first?.propertyMap ?? [:])
            case "InterruptionBegan":
                o["reason"] = a.first?.stringValue ?? ""
                if case .objectPath(let i)? = a.last?.propertyMap?["interrupter"] {
                    o["interrupter"] = sessionID(i)
                } else {
                    o["interrupter"] = NSNull()
                }
            case "InterruptionEnded":
                o["should-resume"] = a.first?.boolValue ?? false
            case "SilenceSecondaryAudioHint":
                o["type"] = a.first?.stringValue ?? ""
            case "RouteChanged":
                let d = a.last?.propertyMap ?? [:]
                o["reason"] = a.first?.stringValue ?? ""
                o["previous-device"] = d["previous-device"]?.stringValue ?? NSNull()
                o["current-device"] = d["current-device"]?.stringValue ?? NSNull()
            default:
                o["arguments"] = a.map(plain)
            }
            return o
        }

        static func who(_ path: String) -> String {
            path == AudiodConnection.managerPath
                ? "audiod" : "session " + (path.split(separator: "/").last.map(String.init) ?? path)
        }

        static func line(_ e: AudiodSignal) -> String {
            let a = e.arguments
            switch e.member {
            case "InterfacesAdded":
                let path: String = { if case .objectPath(let p)? = a.first { return p } else { return "?" } }()
                let props: [String: DBusValue] = {
                    guard case .dict(_, _, let ifaces)? = a.last else { return [:] }
                    return ifaces.first { $0.0 == .string(AudiodConnection.sessionInterface) }?.1.propertyMap ?? [:]
                }()
                return
                    "\(who(path)) added: \(props["ApplicationName"]?.stringValue ?? "") pid \(props["ProcessID"]?.uint32Value ?? 0) \(props["Category"]?.stringValue ?? "")\(props["Implicit"]?.boolValue == true ? " implicit" : "")"
            case "InterfacesRemoved":
                let path: String = { if case .objectPath(let p)? = a.first { return p } else { return "?" } }()
                return "\(who(path)) removed"
            case "PropertiesChanged":
                let changed = (a.dropFirst().first?.propertyMap ?? [:]).sorted { $0.key < $1.key }
                    .map { "\($0.key)=\(describeValue($0.value))" }.joined(separator: " ")
                return "\(who(e.path)) \(changed)"
            case "InterruptionBegan":
                var s = "\(who(e.path)) interruption began: \(a.first?.stringValue ?? "")"
                if case .objectPath(let i)? = a.last?.propertyMap?["interrupter"] { s += " by \(who(i))" }
                return s
            case "InterruptionEnded":
                return
                    "\(who(e.path)) interruption ended: \(a.first?.boolValue == true ? "should resume" : "should not resume")"
            case "SilenceSecondaryAudioHint":
                return "\(who(e.path)) secondary audio hint: \(a.first?.stringValue ?? "")"
            case "RouteChanged":
                let d = a.last?.propertyMap ?? [:]
                return
                    "\(who(e.path)) route changed: \(a.first?.stringValue ?? "") \(d["previous-device"]?.stringValue ?? "-") → \(d["current-device"]?.stringValue ?? "-")"
            default:
                return "\(who(e.path)) \(e.member) \(a.map(describeValue).joined(separator: " "))"
            }
        }

        static func describeValue(_ v: DBusValue) -> String {
            switch v {
            case .string(let s): return s
            case .objectPath(let p): return p == "/" ? "none" : who(p)
            case .array(_, let items): return "[" + items.map(describeValue).joined(separator: ",") + "]"
            case .variant(let inner): return describeValue(inner)
            case .double(let d): return String(format: "%.2f", d)
            default: return "\(plain(v))"
            }
        }
    }
}

/// Where a command name leads, as a shell's `PATH` search finds it.
enum CommandLookup: Equatable {
    case found(String)
    case notFound
    case notExecutable(String)

    static func resolve(_ name: String, path: String? = ProcessInfo.processInfo.environment["PATH"]) -> CommandLookup {
        func check(_ p: String) -> CommandLookup? {
            var st = stat()
            guard stat(p, &st) == 0 else { return nil }
            let isFile = (st.st_mode & S_IFMT) == S_IFREG
            return isFile && access(p, X_OK) == 0 ? .found(p) : .notExecutable(p)
        }
        if name.contains("/") { return check(name) ?? .notFound }
        var firstUnusable: CommandLookup?
        for dir in (path ?? "/usr/local/bin:/usr/bin:/bin").split(separator: ":", omittingEmptySubsequences: false) {
            let p = (dir.isEmpty ? "." : String(dir)) + "/" + name
            switch check(p) {
            case .found(let f)?: return .found(f)
            case let other?: firstUnusable = firstUnusable ?? other
            case nil: continue
            }
        }
        return firstUnusable ?? .notFound
    }
}

/// The command of `audioctl run`, started as a shell starts a foreground job: the default signal mask and
/// dispositions (audioctl's own threads block most signals, and a child inherits the mask), and — when audioctl
/// runs in a terminal's foreground — a process group of its own that gets the terminal, so that Ctrl-C reaches the
/// command once. SIGINT, SIGTERM and SIGHUP sent to audioctl are passed on to the command; audioctl outlives it to
/// release the session.
final class ForegroundChild: @unchecked Sendable {
    // @unchecked: set up once in init; `wait` runs on one thread afterwards.
    let pid: pid_t
    private let terminal: Int32?
    static let forwarded: [Int32] = [SIGINT, SIGTERM, SIGHUP]

    init(path: String, argv: [String], environment: [String: String]) throws {
        // Taken over before the child exists, so that none of these can kill audioctl between the two; one that
        // arrives meanwhile is passed on once the child exists. (A plain handler: libdispatch's signal sources on
        // Linux see a signal only on the thread that made them.)
        forwardTo.store(-1, ordering: .sequentiallyConsistent)
        for sig in Self.forwarded { installForwarding(sig) }
        let interactive = isatty(0) != 0 && tcgetpgrp(0) == getpgrp()
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attr, &none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigdefault(&attr, &all)
        var flags = Int32(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)
        if interactive {
            posix_spawnattr_setpgroup(&attr, 0)
            flags |= Int32(POSIX_SPAWN_SETPGROUP)
        }
        posix_spawnattr_setflags(&attr, Int16(flags))
        let cArgs = argv.map { strdup($0) } + [nil]
        let cEnv = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for p in cArgs { free(p) }
            for p in cEnv { free(p) }
        }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, path, nil, &attr, cArgs, cEnv)
        guard rc == 0 else {
            forwardTo.store(0, ordering: .sequentiallyConsistent)
            for sig in Self.forwarded { signal(sig, SIG_DFL) }
            throw Failure.daemon(
                AudiodError(
                    name: "org.freedesktop.DBus.Error.Failed",
                    message: "cannot run \(argv[0]): \(String(cString: strerror(rc)))"))
        }
        self.pid = pid
        if interactive {
            // The terminal's foreground goes to the command (SIGTTOU ignored: audioctl is not in the foreground
            // group once it has given it away).
            signal(SIGTTOU, SIG_IGN)
            tcsetpgrp(0, pid)
            terminal = 0
        } else {
            terminal = nil
        }
        forwardTo.store(pid, ordering: .sequentiallyConsistent)
        let pending = pendingSignal.load(ordering: .sequentiallyConsistent)
        if pending != 0 { kill(pid, pending) }
    }

    /// Waits for the command; its exit status, or 128 + signal as a shell reports it. Gives the terminal back.
    func wait() -> Int32 {
        var status: Int32 = 0
        var result: Int32 = 127
        while true {
            if waitpid(pid, &status, 0) >= 0 {
                let termsig = status & 0x7f
                result = termsig == 0 ? (status >> 8) & 0xff : 128 + termsig
                break
            }
            if errno != EINTR { break }
        }
        if let terminal { tcsetpgrp(terminal, getpgrp()) }
        return result
    }
}

// What the signal handler needs: two words, atomics so that the handler (on whichever thread the kernel picks)
// and the thread that starts the command see each other's stores. Lock-free, so async-signal-safe.
private let forwardTo = Atomic<pid_t>(0)
private let pendingSignal = Atomic<Int32>(0)

private func installForwarding(_ sig: Int32) {
    var action = sigaction()
    action.__sigaction_handler.sa_handler = { sig in
        // Async-signal-safe: a store and kill(2).
        let to = forwardTo.load(ordering: .sequentiallyConsistent)
        if to > 0 { kill(to, sig) } else if to < 0 { pendingSignal.store(sig, ordering: .sequentiallyConsistent) }
    }
    sigemptyset(&action.sa_mask)
    action.sa_flags = SA_RESTART
    sigaction(sig, &action, nil)
}
