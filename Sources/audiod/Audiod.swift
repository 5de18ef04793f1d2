import ArgumentParser
import AudioPolicy
import AudiodConfig
import AudiodCore
import DBusService
import Dispatch
import FoundationEssentials
import Glibc
import Logging
import PulseBackend

/// audiod: audio-session arbitration for Linux. This file only reads the command line and the config, sets up
/// logging and hands over to `Lifecycle`; everything else lives in the libraries.
@main
struct Audiod: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audiod",
        abstract:
            "Audio-session arbitration daemon: categories, interruptions and ducking for PulseAudio and PipeWire.",
        discussion: """
            audiod connects to the user's sound server (libpulse's default, or --server) and enforces the audio \
            session policy on its streams. SIGTERM or SIGINT restore every stream it changed; after a crash, \
            `audiod --restore` (the user unit's ExecStopPost=) or the next start does so from the journal in \
            $XDG_RUNTIME_DIR/audiod.
            """,
        version: Release.version)

    @Option(
        help: ArgumentHelp(
            "Sound server address (as PULSE_SERVER), e.g. unix:/run/user/1000/pulse/native.", valueName: "address"))
    var server: String?

    @Option(
        help: ArgumentHelp(
            "D-Bus address of the bus to serve on (default: the session bus, $DBUS_SESSION_BUS_ADDRESS).",
            valueName: "address"))
    var bus: String?

    @Option(
        help: ArgumentHelp(
            "Config file (default: the first of $XDG_CONFIG_HOME/audiod/audiod.toml, /etc/xdg/audiod/audiod.toml; none: built-in settings). SIGHUP re-reads it.",
            valueName: "path"))
    var config: String?

    @Option(
        help: ArgumentHelp(
            "Saved state: silent mode and D-Bus app rules (default: $XDG_STATE_HOME/audiod/state.json).",
            valueName: "path"))
    var state: String?

    @Option(help: ArgumentHelp("Journal file (default: $XDG_RUNTIME_DIR/audiod/journal).", valueName: "path"))
    var journal: String?

    @Option(
        help: ArgumentHelp(
            "Write the interface XML (org.audiod.AudioSession1.Manager.xml, …Session.xml) into this directory and exit.",
            valueName: "dir", visibility: .hidden))
    var dumpInterfaces: String?

    @Option(
        help: ArgumentHelp(
            "How long the session bus may read nothing of what audiod sends before audiod restores every stream and exits (default: 60).",
            valueName: "seconds", visibility: .hidden))
    var busStallSeconds: Double = 60

    @Option(
        help: ArgumentHelp("Log level: trace, debug, info, notice, warning, error or critical.", valueName: "level"))
    var logLevel: String = "info"

    @Flag(
        help: ArgumentHelp(
            "Undo what the journal records (mutes, volumes, restore-database entries) and exit, without serving on the bus. The user unit runs it after audiod stops, so that a crash leaves nothing muted."
        ))
    var restore = false

    func validate() throws {
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ValidationError(
                "log level '\(logLevel)' is not one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", "))"
            )
        }
        if let server, server.isEmpty { throw ValidationError("--server must not be empty") }
        if let bus, bus.isEmpty { throw ValidationError("--bus must not be empty") }
        guard busStallSeconds.isFinite, busStallSeconds > 0, busStallSeconds <= 3600 else {
            throw ValidationError(
                "--bus-stall-seconds must be a number of seconds from 0 to 3600, not \(busStallSeconds)")
        }
    }

    func run() throws {
        if let dir = dumpInterfaces {
            for i in [API.manager, API.session] {
                let xml = API.introspection(interfaces: [i], children: [])
                try xml.write(toFile: "\(dir)/\(i.name).xml", atomically: true, encoding: .utf8)
            }
            return
        }
        let level = Logger.Level(rawValue: logLevel) ?? .info
        LoggingSystem.bootstrap { label in
            var h = EscapingLogHandler(inner: StreamLogHandler.standardError(label: label))
            h.logLevel = level
            return h
        }
        let logger = Logger(label: "audiod")
        let journalPath = journal ?? Journal.defaultPath()
        if journalPath == nil {
            logger.warning("XDG_RUNTIME_DIR is not set: no crash journal; a crash would leave its mutes behind")
        }
        if restore {
            let options = PulseBackend.Options(server: server, journalPath: journalPath, clientName: "audiod --restore")
            if let journalPath, Lifecycle.lock(Lifecycle.lockPath(journal: journalPath)) == nil {
                logger.notice("audiod is running: it restores by itself when it stops; nothing done")
                return
            }
            // The config's volume tolerance, so that a volume is judged audiod's as the daemon judged it. A broken
            // file does not stop the restore: it runs on the built-in tolerance and says so.
            var tolerance = Settings().volumeTolerance
            if let path = config ?? ConfigFile.find() {
                do {
                    tolerance = try ConfigFile.load(path: path).volumeTolerance
                } catch {
                    logger.warning("config error (\(error)); restoring with the built-in volume tolerance")
                }
            }
            do {
                let outcome = try JournalRestore.run(options: options, volumeTolerance: tolerance, logger: logger)
                logger.info("\(outcome)")
            } catch {
                logger.error("cannot restore: \(error)")
                throw ExitCode.failure
            }
            return
        }
        let configPath = config ?? ConfigFile.find()
        var settings = Settings()
        if let configPath {
            do {
                settings = try ConfigFile.load(path: configPath)
                logger.info("config read", metadata: ["path": "\(configPath)"])
            } catch {
                // A broken config at start is an error a person must see: refuse to run on guesses.
                let text = Array("audiod: config error: \(error)\n".utf8)
                _ = write(2, text, text.count)
                throw ExitCode(78)  // EX_CONFIG
            }
        }
        var life = Lifecycle(
            settings: settings,
            configPath: configPath,
            statePath: state ?? StateFile.defaultPath(),
            options: {
                var o = PulseBackend.Options(server: server, journalPath: journalPath)
                o.deClickMilliseconds = UInt32(settings.deClickNanoseconds / 1_000_000)
                return o
            }(),
            busAddress: bus,
            logger: logger)
        life.busBounds.withoutProgressNanoseconds = UInt64(busStallSeconds * 1_000_000_000)
        do {
            try life.run()
        } catch {
            logger.critical("\(error)")
            throw ExitCode.failure
        }
    }
}
