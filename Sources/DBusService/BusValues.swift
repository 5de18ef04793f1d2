import AudioPolicy
import DBusTransport

// How the engine's values look on the bus: properties, rules and streams as D-Bus carries them. The one mapping,
// shared by the signals, `Get`/`GetAll` and the list methods.
extension AudioSessionService {
    /// A session property as D-Bus carries it: the one mapping from the engine's values to the bus.
    static func value(_ p: SessionProperty) -> (String, DBusValue) {
        switch p {
        case .category(let c): (p.name, .string(c.rawValue))
        case .mode(let m): (p.name, .string(m.rawValue))
        case .options(let o): (p.name, .strings(o.map(\.rawValue)))
        case .active(let b), .interrupted(let b), .mixable(let b), .secondaryAudioShouldBeSilencedHint(let b),
            .otherAudioPlaying(let b), .handlesSecondaryAudio(let b), .prefersNoInterruptionsFromSystemAlerts(let b),
            .outputMuted(let b):
            (p.name, .bool(b))
        case .applicationName(let s): (p.name, .string(s))
        case .processID(let pid): (p.name, .uint32(pid))
        case .streams(let s), .recordStreams(let s): (p.name, .array(element: "u", s.map { .uint32($0) }))
        case .identity(let i):
            (
                p.name,
                .properties([
                    ("app-id", .string(i.appID)), ("source", .string(i.source)),
                    ("desktop-entry", .string(i.desktopEntry)), ("category-reason", .string(i.categoryReason.text)),
                ])
            )
        }
    }

    static func value(_ p: ManagerProperty) -> (String, DBusValue) {
        switch p {
        case .silentMode(let b), .otherAudioPlaying(let b): (p.name, .bool(b))
        case .primaryAudioSession(let s): (p.name, .objectPath(s.map(sessionPath) ?? "/"))
        case .duckLevel(let d), .strongDuckLevel(let d): (p.name, .double(d))
        case .callState(let c): (p.name, .string(c.rawValue))
        case .screenLocked(let b): (p.name, .bool(b))
        }
    }

    static func ruleEntry(_ r: ApplicationRule) -> DBusValue {
        var entry: [(String, DBusValue)] = [
            ("application", .string(r.application)), ("category", .string(r.configuration.category.rawValue)),
            ("mode", .string(r.configuration.mode.rawValue)),
            ("options", .strings(r.configuration.options.map(\.rawValue))), ("source", .string(r.source.rawValue)),
        ]
        if let file = r.file { entry.append(("file", .string(file))) }
        if let line = r.line { entry.append(("line", .uint32(UInt32(clamping: line)))) }
        return .properties(entry)
    }

    static func streamEntry(_ s: StreamView) -> DBusValue {
        .properties([
            ("index", .uint32(s.info.id.index)),
            ("kind", .string(s.info.id.kind.rawValue)),
            ("pid", .uint32(s.info.pid ?? 0)),
            ("application-name", .string(s.info.applicationName)),
            ("media-role", .string(s.info.role ?? "")),
            ("session", .objectPath(s.session.map(sessionPath) ?? "/")),
            ("policy-muted", .bool(s.policyMuted)),
            ("duck-factor", .double(s.duckFactor)),
            ("corked", .bool(s.info.corked)),
            ("user-muted", .bool(s.userMuted)),
            ("device", .string(s.info.device)),
            ("audible", .bool(s.audible)),
            ("policy-reasons", .strings(s.reasons.map(\.text))),
        ])
    }

    static func sessionPath(_ id: SessionID) -> String { API.sessionPathPrefix + "\(id.rawValue)" }

    /// The session a path names: the prefix and a number written as `sessionPath` writes it (no sign, no leading
    /// zero). Read byte by byte: every call to a session parses its path.
    static func sessionID(path: String) -> SessionID? {
        let prefix = API.sessionPathPrefix
        guard path.hasPrefix(prefix) else { return nil }
        let digits = path.utf8.dropFirst(prefix.utf8.count)
        guard !digits.isEmpty else { return nil }
        guard digits.first != UInt8(ascii: "0") || digits.count == 1 else { return nil }
        var n: UInt64 = 0
        for c in digits {
            guard c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") else { return nil }
            let (times10, o1) = n.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times10.addingReportingOverflow(UInt64(c - UInt8(ascii: "0")))
            guard !o1, !o2 else { return nil }
            n = sum
        }
        return SessionID(n)
    }

    /// A session signal's member and arguments.
    static func signalArguments(_ s: Signal) -> (String, [DBusValue]) {
        switch s {
        case .interruptionBegan(let reason, let interrupter):
            var details: [(String, DBusValue)] = []
            if let i = interrupter { details.append(("interrupter", .objectPath(sessionPath(i)))) }
            return ("InterruptionBegan", [.string(reason.rawValue), .properties(details)])
        case .interruptionEnded(let resume):
            return ("InterruptionEnded", [.bool(resume), .properties([])])
        case .silenceSecondaryAudioHint(let type):
            return ("SilenceSecondaryAudioHint", [.string(type.rawValue)])
        case .routeChanged(let reason, let previous, let current):
            var details: [(String, DBusValue)] = []
            if let p = previous { details.append(("previous-device", .string(p))) }
            if let c = current { details.append(("current-device", .string(c))) }
            return ("RouteChanged", [.string(reason.rawValue), .properties(details)])
        case .userIntentToUnmuteOutput:
            return ("UserIntentToUnmuteOutput", [])
        }
    }

    /// What audiod follows of the platform (`ListPlatformSources`, `audioctl status`).
    func platformSources() -> [DBusValue] {
        platform.sources().map { row in
            .properties([
                ("name", .string(row.name)), ("bus", .string(row.bus)), ("found", .bool(row.found)),
                ("detail", .string(row.detail)), ("refused", .string(row.refused)),
            ])
        }
    }
}
