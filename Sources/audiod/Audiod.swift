import AudioPolicy
import ArgumentParser
import Foundation
import Logging
import PulseBackend
import ServiceLifecycle

/// audiod: audio-session arbitration for Linux. This file only reads the command line, sets up logging and runs
/// the services; everything else lives in the libraries.
@main
struct Audiod: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audiod",
        abstract: "Audio-session arbitration daemon: categories, interruptions and ducking for PulseAudio and PipeWire.",
        discussion: """
            audiod connects to the user's sound server (libpulse's default, or --server) and enforces the audio \
            session policy on its streams. SIGTERM or SIGINT restore every stream it changed; after a crash, the \
            next start does so from the journal in $XDG_RUNTIME_DIR/audiod.
            """)

    @Option(help: ArgumentHelp("Sound server address (as PULSE_SERVER), e.g. unix:/run/user/1000/pulse/native.", valueName: "address"))
    var server: String?

    @Option(help: ArgumentHelp("D-Bus address of the bus to serve on (default: the session bus, $DBUS_SESSION_BUS_ADDRESS).", valueName: "address"))
    var bus: String?

    @Option(help: ArgumentHelp("Journal file (default: $XDG_RUNTIME_DIR/audiod/journal.json).", valueName: "path"))
    var journal: String?

    @Option(help: ArgumentHelp("Log level: trace, debug, info, notice, warning, error or critical.", valueName: "level"))
    var logLevel: String = "info"

    func validate() throws {
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ValidationError(
                "log level '\(logLevel)' is not one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        if let server, server.isEmpty { throw ValidationError("--server must not be empty") }
        if let bus, bus.isEmpty { throw ValidationError("--bus must not be empty") }
    }

    func run() async throws {
        let level = Logger.Level(rawValue: logLevel) ?? .info
        LoggingSystem.bootstrap { label in
            var h = StreamLogHandler.standardError(label: label)
            h.logLevel = level
            return h
        }
        let logger = Logger(label: "audiod")
        let journalPath = journal ?? Journal.defaultPath()
        if journalPath == nil {
            logger.warning("XDG_RUNTIME_DIR is not set: no crash journal; a crash would leave its mutes behind")
        }
        let service = ArbiterService(
            settings: Settings(),
            options: PulseBackend.Options(server: server, journalPath: journalPath),
            busAddress: bus,
            logger: logger)
        let group = ServiceGroup(configuration: .init(
            services: [.init(service: service)],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger))
        try await group.run()
    }
}

