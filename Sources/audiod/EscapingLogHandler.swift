import AudioVocabulary
import Logging

/// The daemon's log lines, with every control character escaped (`String.escapingControls`): app names, desktop
/// entry file names, `application.id` and other text from apps reach the log, and a newline or a terminal escape in
/// one would fake a line of it or rewrite the screen of whoever reads it with `journalctl` or in a terminal.
struct EscapingLogHandler: LogHandler {
    var inner: StreamLogHandler

    var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue.mapValues(Self.escaped) }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue.map(Self.escaped) }
    }

    func log(event: LogEvent) {
        var e = event
        e.message = "\(event.message.description.escapingControls)"
        e.metadata = event.metadata?.mapValues(Self.escaped)
        inner.log(event: e)
    }

    static func escaped(_ v: Logger.Metadata.Value) -> Logger.Metadata.Value {
        switch v {
        case .string(let s): .string(s.escapingControls)
        case .stringConvertible(let c): .string(c.description.escapingControls)
        case .array(let a): .array(a.map(escaped))
        case .dictionary(let d): .dictionary(d.mapValues(escaped))
        }
    }
}
