import ArgumentParser
import AudiodClient
import Foundation

/// audioctl: drive audiod from a terminal or a script, through its public D-Bus API only.
@main
struct Audioctl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audioctl",
        abstract: "Control audiod, the audio-session arbiter.",
        discussion: """
            Exit status: 0 success; 1 audiod refused the request (its message is printed); 2 audiod is not \
            running or the bus went away; 64 bad command line. `audioctl run` exits with the command's own status.
            """,
        version: Release.version,
        subcommands: [
            Status.self, Sessions.self, Apps.self, Streams.self, SetCategory.self, Activate.self, Deactivate.self,
            Silent.self, Run.self, Monitor.self, Rules.self,
        ],
        defaultSubcommand: Status.self)
}

/// Options every verb shares.
struct BusOptions: ParsableArguments {
    @Option(help: ArgumentHelp("D-Bus address of the bus audiod is on (default: the session bus).", valueName: "address"))
    var bus: String?

    func connect() throws -> AudiodConnection {
        do {
            return try AudiodConnection(address: bus)
        } catch {
            throw Failure.notRunning(error.message)
        }
    }
}

/// How audioctl ends when something went wrong: a message a person can act on, and a documented status.
enum Failure: Error, CustomStringConvertible {
    case daemon(AudiodError)
    case notRunning(String)

    var description: String {
        switch self {
        case .daemon(let e): return e.message.isEmpty ? e.name : e.message
        case .notRunning(let why): return why
        }
    }

    static func from(_ e: AudiodError) -> Failure {
        e.code == .notRunning
            ? .notRunning("audiod is not running on this bus. Start it with `systemctl --user start audiod` (or `scripts/run` from a checkout).")
            : .daemon(e)
    }
}

/// Runs a verb's body, turning failures into a printed message and the documented exit status.
func perform(_ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let e as AudiodError {
        try fail(Failure.from(e))
    } catch let f as Failure {
        try fail(f)
    }
}

func fail(_ f: Failure) throws -> Never {
    FileHandle.standardError.write(Data("audioctl: \(f)\n".utf8))
    switch f {
    case .daemon: throw ExitCode(1)
    case .notRunning: throw ExitCode(2)
    }
}

// MARK: - JSON

/// A DBusValue as plain JSON-able values (variants unwrapped, dictionaries as objects).
func plain(_ v: DBusValue) -> Any {
    switch v {
    case .byte(let x): return Int(x)
    case .bool(let x): return x
    case .int16(let x): return Int(x)
    case .uint16(let x): return Int(x)
    case .int32(let x): return Int(x)
    case .uint32(let x): return Int(x)
    case .int64(let x): return x
    case .uint64(let x): return x
    case .double(let x): return x
    case .string(let s), .objectPath(let s), .signature(let s): return s
    case .array(_, let items): return items.map(plain)
    case .dict(_, _, let pairs):
        var o: [String: Any] = [:]
        for (k, val) in pairs { o[plainKey(k)] = plain(val) }
        return o
    case .structure(let f): return f.map(plain)
    case .variant(let inner): return plain(inner)
    case .unixFD(let x): return Int(x)
    }
}

private func plainKey(_ k: DBusValue) -> String {
    switch k {
    case .string(let s), .objectPath(let s): return s
    default: return "\(plain(k))"
    }
}

func printJSON(_ object: Any) {
    guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else {
        return
    }
    FileHandle.standardOutput.write(data + Data("\n".utf8))
}

// MARK: - Reading audiod

struct SessionInfo {
    var path: String
    var properties: [String: DBusValue]
    var id: String { String(path.split(separator: "/").last ?? "") }
    subscript(_ key: String) -> DBusValue? { properties[key] }
}

func sessions(_ c: AudiodConnection) async throws(AudiodError) -> [SessionInfo] {
    let out = try await c.call(AudiodConnection.managerPath, "org.freedesktop.DBus.ObjectManager", "GetManagedObjects")
    guard case .dict(_, _, let pairs)? = out.first else { return [] }
    return pairs.compactMap { pair -> SessionInfo? in
        guard case .objectPath(let p) = pair.0, case .dict(_, _, let ifaces) = pair.1 else { return nil }
        let props = ifaces.first { $0.0 == .string(AudiodConnection.sessionInterface) }?.1.propertyMap ?? [:]
        return SessionInfo(path: p, properties: props)
    }.sorted { (UInt64($0.id) ?? 0) < (UInt64($1.id) ?? 0) }
}

/// ListStreams; nil while audiod is not connected to the sound server.
func streams(_ c: AudiodConnection) async throws(AudiodError) -> [[String: DBusValue]]? {
    do {
        let out = try await c.call(AudiodConnection.managerPath, AudiodConnection.managerInterface, "ListStreams")
        guard case .array(_, let items)? = out.first else { return [] }
        return items.compactMap(\.propertyMap)
    } catch where error.code == .serverUnavailable {
        return nil
    }
}

func describe(_ s: SessionInfo) -> String {
    let category = s["Category"]?.stringValue ?? "?"
    let mode = s["Mode"]?.stringValue ?? "default"
    var flags: [String] = []
    if s["Active"]?.boolValue == true { flags.append("active") }
    if s["Interrupted"]?.boolValue == true { flags.append("interrupted") }
    if s["Implicit"]?.boolValue == true { flags.append("implicit") }
    let opts = s["Options"]?.stringArray ?? []
    let streamsList: [String] = { if case .array(_, let v)? = s["Streams"] { return v.map { "\(plain($0))" } } else { return [] } }()
    var line = "session \(s.id)  \(s["ApplicationName"]?.stringValue ?? "")  pid \(s["ProcessID"]?.uint32Value ?? 0)  \(category)"
    if mode != "default" { line += "/\(mode)" }
    if !opts.isEmpty { line += " [\(opts.joined(separator: ","))]" }
    if !flags.isEmpty { line += "  " + flags.joined(separator: " ") }
    if !streamsList.isEmpty { line += "  streams " + streamsList.joined(separator: ",") }
    return line
}

func describe(stream s: [String: DBusValue]) -> String {
    let index = s["index"]?.uint32Value ?? 0
    var line = "\(s["kind"]?.stringValue ?? "?") \(index)  \(s["application-name"]?.stringValue ?? "")  pid \(s["pid"]?.uint32Value ?? 0)"
    if let role = s["media-role"]?.stringValue, !role.isEmpty { line += "  role \(role)" }
    if let session = s["session"], case .objectPath(let p) = session, p != "/" { line += "  session \(p.split(separator: "/").last ?? "")" }
    var flags: [String] = []
    if s["policy-muted"]?.boolValue == true { flags.append("silenced") }
    if let d = s["duck-factor"]?.doubleValue, d < 1 { flags.append(String(format: "ducked×%.2f", d)) }
    if s["user-muted"]?.boolValue == true { flags.append("user-muted") }
    if s["corked"]?.boolValue == true { flags.append("paused") }
    if s["audible"]?.boolValue == true { flags.append("audible") }
    if !flags.isEmpty { line += "  " + flags.joined(separator: " ") }
    return line + "  on \(s["device"]?.stringValue ?? "?")"
}

// MARK: - Verbs

extension Audioctl {
    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Server, silent mode, primary audio, sessions and streams.")
        @OptionGroup var options: BusOptions
        @Flag(help: "One JSON object instead of text.") var json = false

        func run() async throws {
            try await perform {
                let c = try options.connect()
                defer { c.close() }
                let m = try await c.properties(AudiodConnection.managerPath, AudiodConnection.managerInterface)
                let list = try await sessions(c)
                let st = try await streams(c)
                if json {
                    var o: [String: Any] = [:]
                    for (k, v) in m { o[k] = plain(v) }
                    o["Sessions"] = list.map { s -> [String: Any] in
                        var d: [String: Any] = ["path": s.path]
                        for (k, v) in s.properties { d[k] = plain(v) }
                        return d
                    }
                    o["Streams"] = st.map { $0.map { s in s.mapValues(plain) } } ?? NSNull()
                    printJSON(o)
                    return
                }
                let connected = m["ServerConnected"]?.boolValue == true
                print("server:   \(m["ServerName"]?.stringValue ?? "?")\(connected ? "" : " (not connected)")")
                print("silent:   \(m["SilentMode"]?.boolValue == true ? "on" : "off")")
                let primary: String = { if case .objectPath(let p)? = m["PrimaryAudioSession"], p != "/" { return "session " + (p.split(separator: "/").last.map(String.init) ?? p) } else { return "none" } }()
                print("primary:  \(primary)")
                print("duck:     \(m["DuckLevel"]?.doubleValue.map { String(format: "%.2f", $0) } ?? "?")")
                print("sessions: \(list.count)")
                for s in list { print("  " + describe(s)) }
                if let st {
                    print("streams:  \(st.count)")
                    for s in st { print("  " + describe(stream: s)) }
                } else {
                    print("streams:  unknown (audiod is not connected to the sound server)")
                }
            }
        }
    }

    struct Sessions: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Every session, explicit and implicit.")
        @OptionGroup var options: BusOptions
        @Flag(help: "JSON, one array.") var json = false

        func run() async throws {
            try await perform {
                let c = try options.connect()
                defer { c.close() }
                let list = try await sessions(c)
                if json {
                    printJSON(list.map { s -> [String: Any] in
                        var d: [String: Any] = ["path": s.path]
                        for (k, v) in s.properties { d[k] = plain(v) }
                        return d
                    })
                } else {
                    for s in list { print(describe(s)) }
                }
            }
        }
    }

    struct Apps: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Every app audiod sees: who it is, its category, its streams and state, and why.",
            discussion: """
                An app that never talked to audiod is known the way the desktop knows it: its Flatpak id, its \
                launcher's app id (the app scope a desktop starts it in, or a GLib launcher's environment), its \
                application.id, or its program matched against the desktop entries. The reason says what decided \
                its category: a rule, game evidence, the voice-call rule, an MPRIS player, a media role, or the \
                default.
                """)
        @OptionGroup var options: BusOptions
        @Flag(help: "JSON, one array.") var json = false

        func run() async throws {
            try await perform {
                let c = try options.connect()
                defer { c.close() }
                let list = try await sessions(c)
                if json {
                    printJSON(list.map { s -> [String: Any] in
                        let id = s["Identity"]?.propertyMap ?? [:]
                        var state = s["Active"]?.boolValue == true ? "active" : "inactive"
                        if s["Interrupted"]?.boolValue == true { state = "interrupted" }
                        return [
                            "session": s.path, "app-id": id["app-id"]?.stringValue ?? "",
                            "source": id["source"]?.stringValue ?? "",
                            "desktop-entry": id["desktop-entry"]?.stringValue ?? "",
                            "category": s["Category"]?.stringValue ?? "", "mode": s["Mode"]?.stringValue ?? "",
                            "implicit": s["Implicit"]?.boolValue ?? false, "state": state,
                            "streams": plain(s["Streams"] ?? .array(element: "u", [])),
                            "category-reason": id["category-reason"]?.stringValue ?? "",
                        ]
                    })
                    return
                }
                for s in list {
                    let id = s["Identity"]?.propertyMap ?? [:]
                    print(describe(s))
                    var who = "    \(id["app-id"]?.stringValue ?? "?") (\(id["source"]?.stringValue ?? "?"))"
                    if let e = id["desktop-entry"]?.stringValue, !e.isEmpty { who += ", desktop entry \(e)" }
                    print(who)
                    print("    \(id["category-reason"]?.stringValue ?? "")")
                }
            }
        }
    }

    struct Streams: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Every playback and record stream, with what audiod does to it.")
        @OptionGroup var options: BusOptions
        @Flag(help: "JSON, one array.") var json = false

        func run() async throws {
            try await perform {
                let c = try options.connect()
                defer { c.close() }
                guard let st = try await streams(c) else {
                    throw Failure.daemon(AudiodError(name: "org.audiod.AudioSession1.Error.ServerUnavailable",
                                                     message: "audiod is not connected to the sound server right now"))
                }
                if json { printJSON(st.map { $0.mapValues(plain) }) } else { for s in st { print(describe(stream: s)) } }
            }
        }
    }
}

/// Which session a verb acts on: `--pid`, or audioctl's parent process (the calling shell).
struct TargetOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Act on this running process's session (default: the calling shell).", valueName: "pid"))
    var pid: Int32?

    func validate() throws {
        if let pid, pid <= 0 { throw ValidationError("--pid must be a positive process id, not \(pid)") }
    }

    var targetPID: Int32 { pid ?? getppid() }

    /// The session audioctl made for this pid earlier (FindSession), or a new `lifetime=process` one.
    func session(_ c: AudiodConnection, create: Bool) async throws(AudiodError) -> AudioSession? {
        do {
            let out = try await c.call(AudiodConnection.managerPath, AudiodConnection.managerInterface, "FindSession",
                                       [.uint32(UInt32(bitPattern: targetPID))])
            if case .objectPath(let p)? = out.first { return AudioSession(connection: c, path: p) }
        } catch where error.code == .noSuchSession {
            guard create else { return nil }
        }
        return try await AudioSession.make(pid: targetPID, lifetime: .process, connection: c)
    }
}

extension Audioctl {
    struct SetCategory: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-category",
            abstract: "Set the category of an app (persistent rule), a running process, or the calling shell.",
            discussion: "Categories: ambient, solo-ambient, playback, record, play-and-record.")
        @OptionGroup var options: BusOptions
        @Argument(help: "ambient, solo-ambient, playback, record or play-and-record.") var category: String
        @Option(help: "The mode (default: default).") var mode = "default"
        @Option(name: .customLong("option"), help: "A category option; repeat for several.") var categoryOptions: [String] = []
        @Option(help: ArgumentHelp("A persistent rule for this application (application.id, binary or name).", valueName: "name"))
        var app: String?
        @OptionGroup var target: TargetOptions

        static let categories = Category.allCases.map(\.rawValue)

        func validate() throws {
            guard Self.categories.contains(category) else {
                throw ValidationError("category '\(category)' is not one of \(Self.categories.joined(separator: ", "))")
            }
            if app != nil, target.pid != nil { throw ValidationError("--app and --pid cannot be used together") }
            if let app, app.isEmpty { throw ValidationError("--app needs an application name") }
        }

        func run() async throws {
            try await perform {
                let c = try options.connect()
                defer { c.close() }
                if let app {
                    _ = try await c.call(AudiodConnection.managerPath, AudiodConnection.managerInterface, "SetApplicationCategory",
                                         [.string(app), .string(category), .string(mode), .strings(categoryOptions)])
                    print("rule: \(app) → \(category)")
                    return
                }
                guard let s = try await target.session(c, create: true) else { return }
                try await s.setCategory(category, mode: mode, options: categoryOptions)
                print("session \(s.id) (pid \(target.targetPID)) → \(category)")
            }
        }
    }

    struct Activate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Activate the session of a process (default: the calling shell).")
        @OptionGroup var options: BusOptions
        @OptionGroup var target: TargetOptions

        func run() async throws {
            try await perform {
                let c = try options.connect()
                defer { c.close() }
                guard let s = try await target.session(c, create: true) else { return }
                try await s.setActive(true)
                print("session \(s.id) active")
            }
        }
    }

    struct Deactivate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Deactivate the session of a process (default: the calling shell).")
        @OptionGroup var options: BusOptions
        @OptionGroup var target: TargetOptions
        @Flag(help: "Tell the sessions this one interrupted that they may resume.") var notifyOthers = false

        func run() async throws {
            try await perform {
                let c = try options.connect()
                defer { c.close() }
                guard let s = try await target.session(c, create: false) else {
                    throw Failure.daemon(AudiodError(name: "org.audiod.AudioSession1.Error.NoSuchSession",
                                                     message: "pid \(target.targetPID) has no session made by audioctl"))
                }
                try await s.setActive(false, notifyOthersOnDeactivation: notifyOthers)
                print("session \(s.id) inactive")
            }
        }
    }

    struct Silent: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The silent switch: on, off, toggle or status.")
        @OptionGroup var options: BusOptions
        @Argument(help: "on, off, toggle or status (default).") var action = "status"

        func validate() throws {
            guard ["on", "off", "toggle", "status"].contains(action) else {
                throw ValidationError("'\(action)' is not one of on, off, toggle, status")
            }
        }

        func run() async throws {
            try await perform {
                let c = try options.connect()
                defer { c.close() }
                let current = try await c.property(AudiodConnection.managerPath, AudiodConnection.managerInterface, "SilentMode").boolValue ?? false
                let wanted: Bool
                switch action {
                case "on": wanted = true
                case "off": wanted = false
                case "toggle": wanted = !current
                default:
                    print(current ? "on" : "off")
                    return
                }
                try await c.setProperty(AudiodConnection.managerPath, AudiodConnection.managerInterface, "SilentMode", .bool(wanted))
                print(wanted ? "on" : "off")
            }
        }
    }

    struct Rules: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List app rules, or remove one set over D-Bus: rules [list] | rules remove APP.")
        @OptionGroup var options: BusOptions
        @Argument(help: "list (default) or remove.") var action = "list"
        @Argument(help: "The application, for remove.") var application: String?
        @Flag(help: "JSON, one array.") var json = false

        func validate() throws {
            switch action {
            case "list": if application != nil { throw ValidationError("list takes no application") }
            case "remove": if application == nil { throw ValidationError("remove needs the application name") }
            default: throw ValidationError("'\(action)' is not one of list, remove")
            }
        }

        func run() async throws {
            try await perform {
                let c = try options.connect()
                defer { c.close() }
                if action == "remove", let application {
                    _ = try await c.call(AudiodConnection.managerPath, AudiodConnection.managerInterface, "RemoveApplicationCategory", [.string(application)])
                    print("removed: \(application)")
                    return
                }
                let out = try await c.call(AudiodConnection.managerPath, AudiodConnection.managerInterface, "ListApplicationCategories")
                guard case .array(_, let items)? = out.first else { return }
                let rules: [[String: Any]] = items.compactMap { item in
                    guard case .structure(let f) = item, f.count == 4 else { return nil }
                    return ["application": plain(f[0]), "category": plain(f[1]), "mode": plain(f[2]), "options": plain(f[3])]
                }
                if json {
                    printJSON(rules)
                } else {
                    for r in rules {
                        var line = "\(r["application"] ?? "")  \(r["category"] ?? "")"
                        if let m = r["mode"] as? String, m != "default" { line += "/\(m)" }
                        if let o = r["options"] as? [String], !o.isEmpty { line += " [\(o.joined(separator: ","))]" }
                        print(line)
                    }
                }
            }
        }
    }
}
