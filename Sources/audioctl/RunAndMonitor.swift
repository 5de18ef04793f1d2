import ArgumentParser
import AudiodClient
import DBusService
import Foundation

extension Audioctl {
    struct Run: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run a command in its own active session; release it (with notify) when the command exits.",
            discussion: """
                The command's streams are tagged with the session through PULSE_PROP (audiod.session=<id>). \
                audioctl exits with the command's status.
                """)
        @OptionGroup var options: BusOptions
        @Option(help: "ambient, solo-ambient, playback, record or play-and-record.") var category: String
        @Option(help: "The mode (default: default).") var mode = "default"
        @Option(name: .customLong("option"), help: "A category option; repeat for several.") var categoryOptions: [String] = []
        @Argument(parsing: .captureForPassthrough, help: "-- COMMAND [ARGUMENT …]") var command: [String] = []

        func validate() throws {
            guard SetCategory.categories.contains(category) else {
                throw ValidationError("category '\(category)' is not one of \(SetCategory.categories.joined(separator: ", "))")
            }
            let cmd = command.first == "--" ? Array(command.dropFirst()) : command
            if cmd.isEmpty { throw ValidationError("run needs a command after --") }
        }

        func run() async throws {
            let cmd = command.first == "--" ? Array(command.dropFirst()) : command
            var status: Int32 = 0
            try await perform {
                let c = try options.connect()
                defer { c.close() }
                // A connection-lifetime session: if audioctl dies, audiod releases it.
                let s = try await AudioSession.make(applicationName: cmd[0], connection: c)
                try await s.setCategory(category, mode: mode, options: categoryOptions)
                try await s.setActive(true)
                var env = ProcessInfo.processInfo.environment
                let tag = "audiod.session=\(s.id)"
                env["PULSE_PROP"] = env["PULSE_PROP"].map { $0.isEmpty ? tag : $0 + " " + tag } ?? tag
                let pid = try spawn(cmd, environment: env)
                status = await Task.detached { waitExit(pid) }.value
                try? await s.release()
            }
            throw ExitCode(status)
        }
    }

    struct Monitor: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print audiod's events as they happen: interruptions, hints, route changes, sessions, properties.")
        @OptionGroup var options: BusOptions
        @Flag(help: "One JSON object per line.") var json = false

        func run() async throws {
            try await perform {
                let c = try options.connect()
                defer { c.close() }
                let events = c.signals()
                // Ask once so that "not running" is reported rather than a silent wait.
                _ = try await c.property(AudiodConnection.managerPath, AudiodConnection.managerInterface, "Version")
                for await e in events {
                    if json {
                        printJSON([
                            "time": ISO8601DateFormatter().string(from: Date()), "path": e.path, "interface": e.interface,
                            "event": e.member, "arguments": e.arguments.map(plain),
                        ])
                    } else {
                        // Unbuffered, one line per event, so that a pipe sees each event at once.
                        FileHandle.standardOutput.write(Data((Self.line(e) + "\n").utf8))
                    }
                }
            }
        }

        static func who(_ path: String) -> String {
            path == AudiodConnection.managerPath ? "audiod" : "session " + (path.split(separator: "/").last.map(String.init) ?? path)
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
                return "\(who(path)) added: \(props["ApplicationName"]?.stringValue ?? "") pid \(props["ProcessID"]?.uint32Value ?? 0) \(props["Category"]?.stringValue ?? "")\(props["Implicit"]?.boolValue == true ? " implicit" : "")"
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
                return "\(who(e.path)) interruption ended: \(a.first?.boolValue == true ? "should resume" : "should not resume")"
            case "SilenceSecondaryAudioHint":
                return "\(who(e.path)) secondary audio hint: \(a.first?.stringValue ?? "")"
            case "RouteChanged":
                let d = a.last?.propertyMap ?? [:]
                return "\(who(e.path)) route changed: \(a.first?.stringValue ?? "") \(d["previous-device"]?.stringValue ?? "-") → \(d["current-device"]?.stringValue ?? "-")"
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

/// posix_spawnp the command with the environment; the child keeps audioctl's terminal and signals.
func spawn(_ argv: [String], environment: [String: String]) throws -> pid_t {
    let cArgs = argv.map { strdup($0) } + [nil]
    let cEnv = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer {
        for p in cArgs { free(p) }
        for p in cEnv { free(p) }
    }
    var pid: pid_t = 0
    let rc = posix_spawnp(&pid, argv[0], nil, nil, cArgs, cEnv)
    guard rc == 0 else {
        throw Failure.daemon(AudiodError(name: "org.freedesktop.DBus.Error.Failed",
                                         message: "cannot run \(argv[0]): \(String(cString: strerror(rc)))"))
    }
    return pid
}

/// Waits for the child; its exit status, or 128 + signal as a shell reports it.
func waitExit(_ pid: pid_t) -> Int32 {
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 {
        if errno != EINTR { return 127 }
    }
    let termsig = status & 0x7f
    return termsig == 0 ? (status >> 8) & 0xff : 128 + termsig
}
