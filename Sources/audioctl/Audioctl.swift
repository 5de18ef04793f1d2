import ArgumentParser
import AudioVocabulary
import AudiodClient
import Foundation

/// audioctl: drive audiod from a terminal or a script, through its public D-Bus API only.
struct Audioctl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audioctl",
        abstract: "Control audiod, the audio-session arbiter.",
        discussion: """
            Exit status: 0 success; 1 a value audiod refuses, or audiod refused the request (its message is \
            printed); 2 audiod is not running or the bus went away; 64 the shape of the command line: an unknown \
            verb or flag, a missing or extra argument. `audioctl run` exits with the command's own status.
            """,
        version: Release.version,
        subcommands: [
            Status.self, Sessions.self, Apps.self, Streams.self, SetCategory.self, Activate.self, Deactivate.self,
            ReleaseSession.self, OutputMuted.self, Silent.self, DuckLevel.self, Reload.self, Run.self, Monitor.self,
            Rules.self,
        ],
        defaultSubcommand: Status.self)
}

/// Options every verb shares.
struct BusOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp("D-Bus address of the bus audiod is on (default: the session bus).", valueName: "address"))
    var bus: String?

    func connect() throws -> AudiodConnection {
        do {
            return try AudiodConnection(address: bus)
        } catch {
            throw Failure.notRunning(error.message)
        }
    }
}

extension BusOptions {
    /// Runs a verb's body with a connection to audiod's bus, closed afterwards; a failure becomes its message and
    /// the documented exit status.
    func connected(_ body: (AudiodConnection) async throws -> Void) async throws {
        try await perform {
            let c = try connect()
            defer { c.close() }
            try await body(c)
        }
    }
}

/// How audioctl ends when something went wrong: a message a person can act on, and a documented status.
enum Failure: Error, CustomStringConvertible {
    case daemon(AudiodError)
    case notRunning(String)

    /// A value audiod would refuse, caught before anything is asked or made: audiod's own name and words.
    static func refused(_ r: Refusal) -> Failure { .daemon(AudiodError(name: r.busName, message: r.message)) }

    /// Something audioctl itself cannot do, said as audiod would say it (exit 1).
    static func cannot(_ name: ErrorName, _ message: String) -> Failure {
        .daemon(AudiodError(name: name.busName, message: message))
    }

    var description: String {
        switch self {
        case .daemon(let e): return e.message.isEmpty ? e.name : e.message
        case .notRunning(let why): return why
        }
    }

    static func from(_ e: AudiodError) -> Failure {
        e.code == .notRunning
            ? .notRunning(
                "audiod is not running on this bus. Start it with `systemctl --user start audiod` (or `scripts/run` from a checkout)."
            )
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

/// Every line audioctl prints for people comes through here: names, ids and reasons in it may come from apps, and
/// their control characters are shown escaped (`String.escapingControls`) so that no app can recolour the terminal
/// or fake a line. `--json` goes through `printJSON`, whose escapes are JSON's.
func print(_ line: String) { Swift.print(line.escapingControls) }

func fail(_ f: Failure) throws -> Never {
    FileHandle.standardError.write(Data("audioctl: \("\(f)".escapingControls)\n".utf8))
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

/// A D-Bus property name as a JSON key: `PrimaryAudioSession` → `primary-audio-session`, `ProcessID` →
/// `process-id` (every `--json` output uses the contract's kebab-case).
func kebab(_ name: String) -> String {
    var out = ""
    let chars = Array(name)
    for (i, ch) in chars.enumerated() {
        if ch.isUppercase, i > 0 {
            let previous = chars[i - 1]
            let nextIsLower = i + 1 < chars.count && chars[i + 1].isLowercase
            if previous.isLowercase || previous.isNumber || (previous.isUppercase && nextIsLower) { out.append("-") }
        }
        out.append(Character(ch.lowercased()))
    }
    return out
}

/// Properties as a JSON object with kebab-case keys.
func kebabObject(_ properties: [String: DBusValue]) -> [String: Any] {
    var o: [String: Any] = [:]
    for (k, v) in properties { o[kebab(k)] = plain(v) }
    return o
}

/// A session as `sessions --json` and `status --json` print it.
func sessionJSON(_ s: SessionInfo) -> [String: Any] {
    var d = kebabObject(s.properties)
    d["path"] = s.path
    d["id"] = UInt64(s.id) ?? 0
    return d
}

func printJSON(_ object: Any) {
    guard
        let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
    else {
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

/// ListPlatformSources: what audiod follows of the platform (empty from an audiod that predates it).
func platformSources(_ c: AudiodConnection) async -> [[String: DBusValue]] {
    guard
        let out = try? await c.call(
            AudiodConnection.managerPath, AudiodConnection.managerInterface, "ListPlatformSources"),
        case .array(_, let items)? = out.first
    else { return [] }
    return items.compactMap(\.propertyMap)
}

/// ListStreams; nil while audiod is not connected to the sound server.
func streams(_ c: AudiodConnection) async throws(AudiodError) -> [[String: DBusValue]]? {
    do {
        let out = try await c.call(AudiodConnection.managerPath, AudiodConnection.managerInterface, "ListStreams")
        guard case .array(_, let items)? = out.first else { return [] }
        return items.compactMap(\.propertyMap)
    } catch  where error.code == .serverUnavailable {
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
    let streamsList: [String] = {
        if case .array(_, let v)? = s["Streams"] { return v.map { "\(plain($0))" } } else { return [] }
    }()
    var line =
        "session \(s.id)  \(s["ApplicationName"]?.stringValue ?? "")  pid \(s["ProcessID"]?.uint32Value ?? 0)  \(category)"
    if mode != "default" { line += "/\(mode)" }
    if !opts.isEmpty { line += " [\(opts.joined(separator: ","))]" }
    if !flags.isEmpty { line += "  " + flags.joined(separator: " ") }
    if !streamsList.isEmpty { line += "  streams " + streamsList.joined(separator: ",") }
    return line
}

func describe(stream s: [String: DBusValue]) -> String {
    let index = s["index"]?.uint32Value ?? 0
    var line =
        "\(s["kind"]?.stringValue ?? "?") \(index)  \(s["application-name"]?.stringValue ?? "")  pid \(s["pid"]?.uint32Value ?? 0)"
    if let role = s["media-role"]?.stringValue, !role.isEmpty { line += "  role \(role)" }
    if let session = s["session"], case .objectPath(let p) = session, p != "/" {
        line += "  session \(p.split(separator: "/").last ?? "")"
    }
    var flags: [String] = []
    if s["policy-muted"]?.boolValue == true { flags.append("silenced") }
    if let d = s["duck-factor"]?.doubleValue, d < 1 { flags.append(String(format: "ducked×%.4g", d)) }
    if s["user-muted"]?.boolValue == true { flags.append("user-muted") }
    if s["corked"]?.boolValue == true { flags.append("paused") }
    if s["audible"]?.boolValue == true { flags.append("audible") }
    if !flags.isEmpty { line += "  " + flags.joined(separator: " ") }
    line += "  on \(s["device"]?.stringValue ?? "?")"
    // Why audiod silences or ducks it: the question a person asks when something went quiet.
    if let why = s["policy-reasons"]?.stringArray, !why.isEmpty { line += "  because: " + why.joined(separator: "; ") }
    return line
}

// MARK: - Verbs

extension Audioctl {
    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Server, silent mode, primary audio, sessions and streams.")
        @OptionGroup var options: BusOptions
        @Flag(help: "One JSON object instead of text.") var json = false

        func run() async throws {
            try await options.connected { c in
                let m = try await c.properties(AudiodConnection.managerPath, AudiodConnection.managerInterface)
                let list = try await sessions(c)
                let st = try await streams(c)
                let platform = await platformSources(c)
                if json {
                    var o = kebabObject(m)
                    o["platform"] = platform.map { $0.mapValues(plain) }
                    o["sessions"] = list.map(sessionJSON)
                    o["streams"] = st.map { $0.map { s in s.mapValues(plain) } } ?? NSNull()
                    printJSON(o)
                    return
                }
                let connected = m["ServerConnected"]?.boolValue == true
                print("server:   \(m["ServerName"]?.stringValue ?? "?")\(connected ? "" : " (not connected)")")
                print("silent:   \(m["SilentMode"]?.boolValue == true ? "on" : "off")")
                let primary: String = {
                    if case .objectPath(let p)? = m["PrimaryAudioSession"], p != "/" {
                        return "session " + (p.split(separator: "/").last.map(String.init) ?? p)
                    } else {
                        return "none"
                    }
                }()
                print("primary:  \(primary)")
                func level(_ name: String) -> String {
                    m[name]?.doubleValue.map { String(format: "%.4g (%.1f dB)", $0, 20 * log10($0)) } ?? "?"
                }
                print("duck:     \(level("DuckLevel")), strong \(level("StrongDuckLevel"))")
                print("call:     \(m["CallState"]?.stringValue ?? "?")")
                print("screen:   \(m["ScreenLocked"]?.boolValue == true ? "locked" : "unlocked")")
                // What audiod follows: "why did my game go quiet?" may be the lock screen or the phone's profile.
                let found = platform.filter { $0["found"]?.boolValue == true }
                print(
                    "follows:  \(found.isEmpty ? "nothing of the platform" : found.compactMap { $0["name"]?.stringValue }.joined(separator: ", "))"
                )
                for p in platform {
                    let name = p["name"]?.stringValue ?? "?"
                    var line = "  \(name) (\(p["bus"]?.stringValue ?? "?") bus): \(p["detail"]?.stringValue ?? "")"
                    if let why = p["refused"]?.stringValue, !why.isEmpty { line += " — refused: owned by \(why)" }
                    print(line)
                }
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
            try await options.connected { c in
                let list = try await sessions(c)
                if json {
                    printJSON(list.map(sessionJSON))
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
            try await options.connected { c in
                let list = try await sessions(c)
                if json {
                    printJSON(
                        list.map { s -> [String: Any] in
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
        static let configuration = CommandConfiguration(
            abstract: "Every playback and record stream, with what audiod does to it.")
        @OptionGroup var options: BusOptions
        @Flag(help: "JSON, one array.") var json = false

        func run() async throws {
            try await options.connected { c in
                guard let st = try await streams(c) else {
                    throw Failure.daemon(
                        AudiodError(
                            name: "org.audiod.AudioSession1.Error.ServerUnavailable",
                            message: "audiod is not connected to the sound server right now"))
                }
                if json {
                    printJSON(st.map { $0.mapValues(plain) })
                } else {
                    for s in st { print(describe(stream: s)) }
                }
            }
        }
    }
}

/// The values completions offer (and help lists).
enum Words {
    static let categories = Category.allCases.map(\.rawValue)
    static let modes = Mode.allCases.map(\.rawValue)
    static let options = CategoryOption.allCases.map(\.rawValue)
}

/// `--mode` and `--option`, as set-category and run take them.
struct ModeAndOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp("The mode: one of the category's modes.", valueName: "mode"), completion: .list(Words.modes))
    var mode = "default"
    @Option(
        name: .customLong("option"), help: ArgumentHelp("A category option; repeat for several.", valueName: "option"),
        completion: .list(Words.options))
    var options: [String] = []

    /// What audiod would refuse in this configuration, checked before anything is asked or made.
    func refusal(category: String) -> Refusal? { Refusal.check(category: category, mode: mode, options: options) }
}

/// Which session a verb acts on: the session audioctl made for `--pid` (found with `FindSession`), or for
/// audioctl's parent process, the calling shell.
struct TargetOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "Act on the session audioctl made for this process; without it, the calling shell's. It never makes one: to change how an app is treated, use set-category --app.",
            valueName: "pid"))
    var pid: Int32?

    func validate() throws {
        if let pid, pid <= 0 { throw ValidationError("--pid must be a positive process id, not \(pid)") }
    }

    var targetPID: Int32 { pid ?? getppid() }

    /// How messages name the target.
    var whose: String { pid == nil ? "your shell (pid \(targetPID))" : "pid \(targetPID)" }

    /// The session audioctl made for the target earlier, or nil.
    func existing(_ c: AudiodConnection) async throws(AudiodError) -> AudioSession? {
        do {
            let out = try await c.call(
                AudiodConnection.managerPath, AudiodConnection.managerInterface, "FindSession",
                [.uint32(UInt32(bitPattern: targetPID))])
            if case .objectPath(let p)? = out.first { return AudioSession(connection: c, path: p) }
            return nil
        } catch  where error.code == .noSuchSession {
            return nil
        }
    }

    /// The session audioctl made for the target; a failure that says how to go on when there is none.
    func required(_ c: AudiodConnection) async throws -> AudioSession {
        if let s = try await existing(c) { return s }
        throw noSession
    }

    var noSession: Failure {
        pid == nil
            ? .cannot(
                .noSuchSession,
                "\(whose) has no session made by audioctl; make one with `audioctl set-category CATEGORY`")
            : .cannot(
                .noSuchSession,
                "pid \(targetPID) has no session made by audioctl, and --pid acts only on those; to change how an app is treated, use `audioctl set-category CATEGORY --app NAME` (`audioctl apps` shows each app's name)"
            )
    }
}

extension Audioctl {
    struct SetCategory: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-category",
            abstract:
                "Set the category of an app (a rule), of the session audioctl made for a process, or of the calling shell.",
            discussion: """
                With --app, a rule for every stream of that app, kept across restarts (`audioctl rules` lists them). \
                With --pid, the session audioctl made earlier for that process. With neither, the calling shell's \
                session, made on first use: every program the shell starts plays in it. Nothing is made or changed \
                when a value is refused.
                """)
        @OptionGroup var options: BusOptions
        @Argument(
            help: ArgumentHelp("One of: \(Words.categories.joined(separator: ", ")).", valueName: "category"),
            completion: .list(Words.categories))
        var category: String
        @OptionGroup var modeAndOptions: ModeAndOptions
        @Option(
            help: ArgumentHelp(
                "A rule for this application: its app id, program or application.name, as `audioctl apps` shows it.",
                valueName: "name"))
        var app: String?
        @OptionGroup var target: TargetOptions

        func validate() throws {
            if app != nil, target.pid != nil { throw ValidationError("--app and --pid cannot be used together") }
            if let app, app.isEmpty { throw ValidationError("--app needs an application name") }
        }

        func run() async throws {
            // Checked before anything is asked or made: a refused value changes nothing.
            if let r = modeAndOptions.refusal(category: category) { try fail(.refused(r)) }
            try await options.connected { c in
                if let app {
                    _ = try await c.call(
                        AudiodConnection.managerPath, AudiodConnection.managerInterface, "SetApplicationCategory",
                        [
                            .string(app), .string(category), .string(modeAndOptions.mode),
                            .strings(modeAndOptions.options),
                        ])
                    print("rule: \(app) → \(category)")
                    return
                }
                if let s = try await target.existing(c) {
                    try await s.setCategory(category, mode: modeAndOptions.mode, options: modeAndOptions.options)
                    print("session \(s.id) (pid \(target.targetPID)) → \(category)")
                    return
                }
                guard target.pid == nil else { throw target.noSession }
                let s = try await AudioSession.make(pid: target.targetPID, lifetime: .process, connection: c)
                do {
                    try await s.setCategory(category, mode: modeAndOptions.mode, options: modeAndOptions.options)
                } catch {
                    // Whatever audiod refused, the session made for it goes too.
                    try? await s.release()
                    throw error
                }
                print(
                    "session \(s.id) made for \(target.whose): every program this shell starts plays in it, until the shell exits or `audioctl release`"
                )
                print("session \(s.id) (pid \(target.targetPID)) → \(category)")
            }
        }
    }

    struct Activate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Activate the session audioctl made for the calling shell (or --pid).",
            discussion: "Make the session first with `audioctl set-category CATEGORY`; activate never makes one.")
        @OptionGroup var options: BusOptions
        @OptionGroup var target: TargetOptions

        func run() async throws {
            try await options.connected { c in
                let s = try await target.required(c)
                try await s.setActive(true)
                print("session \(s.id) active")
            }
        }
    }

    struct Deactivate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Deactivate the session audioctl made for the calling shell (or --pid).",
            discussion: "Sessions this one interrupted stay paused unless --notify-others tells them they may resume.")
        @OptionGroup var options: BusOptions
        @OptionGroup var target: TargetOptions
        @Flag(help: "Tell the sessions this one interrupted that they may resume.") var notifyOthers = false

        func run() async throws {
            try await options.connected { c in
                let s = try await target.required(c)
                try await s.setActive(false, notifyOthersOnDeactivation: notifyOthers)
                print("session \(s.id) inactive")
            }
        }
    }

    struct ReleaseSession: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "release",
            abstract: "End the session audioctl made for the calling shell (or --pid).",
            discussion: """
                The session is deactivated with notify (what it interrupted may resume) and removed; the programs it \
                held are arbitrated as apps again.
                """)
        @OptionGroup var options: BusOptions
        @OptionGroup var target: TargetOptions

        func run() async throws {
            try await options.connected { c in
                let s = try await target.required(c)
                try await s.release()
                print("session \(s.id) released")
            }
        }
    }

    struct OutputMuted: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "output-muted",
            abstract: "Mute or unmute the output of the session audioctl made for the calling shell (or --pid).",
            discussion: """
                on: audiod mutes the session's streams as the app's own mute, and the session takes the audio from \
                nobody (a feed that autoplays muted). off: they are unmuted and the session is activated, taking the \
                audio as any activation does. status prints on or off. Unmuting one of its streams in a mixer does \
                what off does.
                """)
        @OptionGroup var options: BusOptions
        @Argument(
            help: ArgumentHelp("on, off or status.", valueName: "action"), completion: .list(["on", "off", "status"]))
        var action = "status"
        @OptionGroup var target: TargetOptions

        func validate() throws {
            guard ["on", "off", "status"].contains(action) else {
                throw ValidationError("'\(action)' is not one of on, off, status")
            }
        }

        func run() async throws {
            try await options.connected { c in
                let s = try await target.required(c)
                switch action {
                case "on": try await s.setOutputMuted(true)
                case "off": try await s.setOutputMuted(false)
                default:
                    print(try await s.state().outputMuted ? "on" : "off")
                    return
                }
                print("session \(s.id) output \(action == "on" ? "muted" : "unmuted")")
            }
        }
    }

    struct Silent: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The silent switch: on, off, toggle or status.")
        @OptionGroup var options: BusOptions
        @Argument(
            help: ArgumentHelp("on, off, toggle or status.", valueName: "action"),
            completion: .list(["on", "off", "toggle", "status"]))
        var action = "status"

        func validate() throws {
            guard ["on", "off", "toggle", "status"].contains(action) else {
                throw ValidationError("'\(action)' is not one of on, off, toggle, status")
            }
        }

        func run() async throws {
            try await options.connected { c in
                let current =
                    try await c.property(AudiodConnection.managerPath, AudiodConnection.managerInterface, "SilentMode")
                    .boolValue ?? false
                let wanted: Bool
                switch action {
                case "on": wanted = true
                case "off": wanted = false
                case "toggle": wanted = !current
                default:
                    print(current ? "on" : "off")
                    return
                }
                try await c.setProperty(
                    AudiodConnection.managerPath, AudiodConnection.managerInterface, "SilentMode", .bool(wanted))
                print(wanted ? "on" : "off")
            }
        }
    }

    struct DuckLevel: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "duck-level",
            abstract: "Show the duck level, or set it until audiod reloads its config.",
            discussion: """
                The level is the linear factor a ducked stream's volume is multiplied by: greater than 0, less than 1 \
                (0.2 ≈ -14 dB). With --strong, the deeper level a voice prompt (navigation, an assistant) or a \
                screen reader ducks with (0.0178 ≈ -35 dB); it may not be above the ordinary one. A level set here \
                lasts until `audioctl reload`, SIGHUP or a restart; to keep one, write duck-level or \
                strong-duck-level in audiod.toml.
                """)
        @OptionGroup var options: BusOptions
        @Flag(help: "The strong duck level (voice prompts, screen readers) instead of the ordinary one.")
        var strong = false
        @Argument(help: ArgumentHelp("The new level, e.g. 0.3.", valueName: "level")) var level: String?

        func run() async throws {
            let (property, key, example) =
                strong ? ("StrongDuckLevel", "strong-duck-level", "0.0178") : ("DuckLevel", "duck-level", "0.2")
            var wanted: Double?
            if let level {
                guard let x = Double(level) else {
                    try fail(
                        .cannot(
                            .invalidOption,
                            "\(strong ? "strong " : "")duck level '\(level)' is not a number; it must be greater than 0 "
                                + "and less than 1 (e.g. \(example))"
                        ))
                }
                // The range alone here; audiod checks the pair (the strong level may not be above the ordinary one).
                let refusal = strong ? Refusal.check(strongDuckLevel: x) : Refusal.check(duckLevel: x)
                if let refusal { try fail(.refused(refusal)) }
                wanted = x
            }
            try await options.connected { c in
                if let wanted {
                    try await c.setProperty(
                        AudiodConnection.managerPath, AudiodConnection.managerInterface, property, .double(wanted))
                    print(
                        String(
                            format:
                                "\(strong ? "strong " : "")duck level %.4g (%.1f dB) until audiod reloads its config; "
                                + "to keep it, set \(key) in audiod.toml",
                            wanted, 20 * log10(wanted)))
                } else {
                    let x =
                        try await c.property(
                            AudiodConnection.managerPath, AudiodConnection.managerInterface, property
                        ).doubleValue ?? 0
                    print(String(format: "%.4g (%.1f dB)", x, 20 * log10(x)))
                }
            }
        }
    }

    struct Reload: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make audiod re-read its config file (as SIGHUP does).",
            discussion: "A broken file is refused with its file, line and key; the settings in force stay.")
        @OptionGroup var options: BusOptions

        func run() async throws {
            try await options.connected { c in
                _ = try await c.call(AudiodConnection.managerPath, AudiodConnection.managerInterface, "Reload")
                print("audiod re-read its config")
            }
        }
    }

    struct Rules: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "List app rules with where each comes from, or remove one set with audioctl: rules [list] | rules remove APP."
        )
        @OptionGroup var options: BusOptions
        @Argument(help: ArgumentHelp("list or remove.", valueName: "action"), completion: .list(["list", "remove"]))
        var action = "list"
        @Argument(help: ArgumentHelp("The application, for remove.", valueName: "app")) var application: String?
        @Flag(help: "JSON, one array.") var json = false

        func validate() throws {
            switch action {
            case "list": if application != nil { throw ValidationError("list takes no application") }
            case "remove": if application == nil { throw ValidationError("remove needs the application name") }
            default: throw ValidationError("'\(action)' is not one of list, remove")
            }
        }

        func run() async throws {
            try await options.connected { c in
                let out = try await c.call(
                    AudiodConnection.managerPath, AudiodConnection.managerInterface, "ListApplicationRules")
                let rules: [[String: DBusValue]] = {
                    if case .array(_, let items)? = out.first {
                        return items.compactMap(\.propertyMap)
                    } else {
                        return []
                    }
                }()
                let configRule = { (app: String) in
                    rules.first { $0["application"]?.stringValue == app && $0["source"]?.stringValue == "config" }
                }
                let setWithAudioctl = { (app: String) in
                    rules.contains { $0["application"]?.stringValue == app && $0["source"]?.stringValue != "config" }
                }
                if action == "remove", let application {
                    // A config rule lives in its file: say which, rather than audiod's bare "no rule". The user's own
                    // rule, which overrides it, is theirs to remove.
                    if let r = configRule(application), !setWithAudioctl(application) {
                        throw Failure.cannot(
                            .noSuchRule,
                            "the rule for '\(application)' comes from \(location(r)); change it there, then run `audioctl reload`"
                        )
                    }
                    _ = try await c.call(
                        AudiodConnection.managerPath, AudiodConnection.managerInterface, "RemoveApplicationCategory",
                        [.string(application)])
                    print(
                        "removed: \(application)"
                            + (configRule(application).map { "; the rule from \(location($0)) applies now" } ?? ""))
                    return
                }
                if json {
                    printJSON(rules.map { $0.mapValues(plain) })
                    return
                }
                for r in rules {
                    var line = "\(r["application"]?.stringValue ?? "")  \(r["category"]?.stringValue ?? "")"
                    if let m = r["mode"]?.stringValue, m != "default" { line += "/\(m)" }
                    if let o = r["options"]?.stringArray, !o.isEmpty { line += " [\(o.joined(separator: ","))]" }
                    if r["source"]?.stringValue == "config" {
                        line += "  from \(location(r))"
                        // A rule set with audioctl for the same app is the one in force (docs/POLICY.md §7).
                        if setWithAudioctl(r["application"]?.stringValue ?? "") {
                            line += " (overridden by the rule set with audioctl)"
                        }
                    } else {
                        line += "  set with audioctl"
                    }
                    print(line)
                }
            }
        }

        func location(_ r: [String: DBusValue]) -> String {
            "\(r["file"]?.stringValue ?? "the config file")\(r["line"]?.uint32Value.map { ":\($0)" } ?? "")"
        }
    }
}

/// Runs audioctl; a first word that names no verb is answered here, where the nearest verb can be suggested (the
/// parser would take it for an argument of the default verb, `status`).
@main
enum Main {
    static func main() async {
        let args = Array(CommandLine.arguments.dropFirst())
        if let word = unknownVerb(args) {
            let verbs = Audioctl.configuration.subcommands.map { $0._commandName }
            var message = "audioctl: unknown command '\(word)'"
            if let near = nearest(word, verbs) {
                message += "; did you mean '\(near)'?"
            } else {
                message += "; the commands are: \(verbs.joined(separator: ", "))"
            }
            FileHandle.standardError.write(Data((message + "\n").utf8))
            exit(64)
        }
        await Audioctl.main(args)
    }

    /// The first word, when it is not a verb, `help`, or a flag of the default verb.
    static func unknownVerb(_ args: [String]) -> String? {
        let verbs = Set(Audioctl.configuration.subcommands.map { $0._commandName } + ["help"])
        var i = 0
        while i < args.count {
            let a = args[i]
            if a == "--bus" {
                i += 2
                continue
            }
            if a.hasPrefix("-") { return nil }
            return verbs.contains(a) ? nil : a
        }
        return nil
    }

    /// The verb within edit distance 2 of `word`, the closest first; nil when none is.
    static func nearest(_ word: String, _ verbs: [String]) -> String? {
        let scored = verbs.map { ($0, distance(word, $0)) }.filter { $0.1 <= 2 }
        return scored.min { $0.1 < $1.1 }?.0
    }

    /// Levenshtein distance.
    static func distance(_ a: String, _ b: String) -> Int {
        let x = Array(a)
        let y = Array(b)
        var row = Array(0...y.count)
        for i in x.indices {
            var diagonal = row[0]
            row[0] = i + 1
            for j in y.indices {
                let above = row[j + 1]
                row[j + 1] = min(above + 1, row[j] + 1, diagonal + (x[i] == y[j] ? 0 : 1))
                diagonal = above
            }
        }
        return row[y.count]
    }
}
