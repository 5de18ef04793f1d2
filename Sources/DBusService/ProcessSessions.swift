import AudioPolicy
import Glibc
import Platform

/// A `lifetime=process` session as audiod keeps it across its own restart: the shell's session made by a
/// short-lived `audioctl` has no client left to make it again after a crash, so audiod does (docs/API.md,
/// "A restart loses no session"). The process is named by pid and start time, so a pid reused meanwhile is never
/// taken for it.
public struct KeptProcessSession: Codable, Equatable, Sendable {
    public var pid: UInt32
    /// The process's start time (`/proc/PID/stat` field 22, clock ticks since boot).
    public var start: UInt64
    public var uid: UInt32
    /// The connection that made it (gone by the next run): the session stays its owner's, as any process session
    /// of the same user may be changed by any of that user's connections.
    public var owner: String
    public var applicationName: String
    public var category: String
    public var mode: String
    public var options: [String]
    public var handlesSecondaryAudio: Bool
    public var prefersNoInterruptionsFromSystemAlerts: Bool
    /// `OutputMuted` (absent from files an older audiod wrote: false).
    public var outputMuted: Bool?
    /// Active when audiod stopped: it activates again (an interrupted session comes back inactive).
    public var active: Bool

    public init(
        pid: UInt32, start: UInt64, uid: UInt32, owner: String, applicationName: String, category: String,
        mode: String, options: [String], handlesSecondaryAudio: Bool, prefersNoInterruptionsFromSystemAlerts: Bool,
        active: Bool, outputMuted: Bool = false
    ) {
        self.pid = pid
        self.start = start
        self.uid = uid
        self.owner = owner
        self.applicationName = applicationName
        self.category = category
        self.mode = mode
        self.options = options
        self.handlesSecondaryAudio = handlesSecondaryAudio
        self.prefersNoInterruptionsFromSystemAlerts = prefersNoInterruptionsFromSystemAlerts
        self.active = active
        self.outputMuted = outputMuted
    }
}

extension AudioSessionService {
    /// The process sessions as they are now, oldest first.
    func keptProcessSessions() -> [KeptProcessSession] {
        guard let host else { return [] }
        return publishedSessions.keys.sorted().compactMap { id -> KeptProcessSession? in
            guard let v = publishedSessions[id], let o = owners.owner(of: id), o.lifetime == .process,
                let start = host.processStartTime(o.pid)
            else { return nil }
            return KeptProcessSession(
                pid: o.pid, start: start, uid: o.uid, owner: o.busName, applicationName: v.applicationName,
                category: v.configuration.category.rawValue, mode: v.configuration.mode.rawValue,
                options: v.configuration.options.map(\.rawValue), handlesSecondaryAudio: v.handlesSecondaryAudio,
                prefersNoInterruptionsFromSystemAlerts: v.prefersNoInterruptionsFromSystemAlerts, active: v.active,
                outputMuted: v.outputMuted)
        }
    }

    /// After a step that may have changed a process session: hands the new list to `onProcessSessions` when it
    /// differs from the last one. Not while stopping: the sessions end with audiod, and the next run makes them again.
    public func processSessionsMayHaveChanged(always: Bool = false) {
        guard let host, host.acceptsRequests, let keep = onProcessSessions else { return }
        let now = keptProcessSessions()
        guard always || now != lastKeptProcessSessions else { return }
        lastKeptProcessSessions = now
        keep(now)
    }

    /// Whether a step's effects touch a process session (or one that was kept).
    /// Only what `KeptProcessSession` holds counts: the frequent `OtherAudioPlaying` and `Streams` changes of a
    /// process session do not rebuild the list.
    func touchesProcessSession(_ effects: [Effect]) -> Bool {
        effects.contains { e in
            let id: SessionID
            switch e {
            case .sessionAdded(let v): id = v.id
            case .sessionRemoved(let s): id = s
            case .sessionPropertiesChanged(let s, let changed) where changed.contains(where: Self.isKept): id = s
            default: return false
            }
            return owners.owner(of: id)?.lifetime == .process || keptProcessSessionIDs.contains(id)
        }
    }

    private static func isKept(_ p: SessionProperty) -> Bool {
        switch p {
        case .category, .mode, .options, .active, .handlesSecondaryAudio, .prefersNoInterruptionsFromSystemAlerts,
            .outputMuted, .applicationName:
            true
        default: false
        }
    }

    /// The most process sessions made again at a start: each shell has one, and a few hundred terminals is plenty.
    static var maximumKeptProcessSessions: Int { 256 }

    /// Makes the process sessions an earlier run kept, before audiod owns its name: each whose process still runs
    /// (same pid, same start time, same user) is made again with its category, mode, options and properties, and
    /// the ones that were active activate again. Returns how many were made; says why of each one that was not.
    @discardableResult
    public func remakeProcessSessions(_ kept: [KeptProcessSession]) -> Int {
        guard let host else { return 0 }
        var made: [(SessionID, KeptProcessSession)] = []
        // The file is the user's, and any of the user's programs may write it: it gets no more than a caller would.
        if kept.count > Self.maximumKeptProcessSessions {
            logger.warning(
                "the last run kept \(kept.count) process sessions; only the newest \(Self.maximumKeptProcessSessions) are made again"
            )
        }
        for k in kept.suffix(Self.maximumKeptProcessSessions) {
            guard k.applicationName.utf8.count <= limits.nameBytes, k.owner.utf8.count <= limits.nameBytes,
                k.options.count <= limits.options, k.owner.hasPrefix(":")
            else {
                logger.warning(
                    "a kept process session is not made again: its names or options exceed the limits, or its owner is not a connection"
                )
                continue
            }
            if let not = platform.notAnApp(k.pid) {
                logger.warning("a kept process session is not made again: pid \(k.pid) is \(not.what)")
                continue
            }
            // audiod's own user only: an entry naming another user's process (a root login process above the
            // user's apps) would hold streams the user could then neither change nor release.
            guard k.uid == getuid(), host.processStartTime(k.pid) == k.start, host.processOwner(k.pid) == k.uid else {
                logger.debug("a kept process session's process is gone", metadata: ["pid": "\(k.pid)"])
                continue
            }
            let r = host.makeRequestID()
            let created = host.handle(
                .createSession(r, NewSession(pid: k.pid, applicationName: k.applicationName, lifetime: .process)))
            guard
                let id = created.lazy.compactMap({ e -> SessionID? in
                    if case .reply(r, .session(let id)) = e { return id } else { return nil }
                }).first
            else { continue }
            owners.adopt(id, owner: SessionOwners.Owner(busName: k.owner, uid: k.uid, lifetime: .process, pid: k.pid))
            var refused: [String] = []
            func step(_ what: String, _ make: (RequestID) -> Event) {
                let r = host.makeRequestID()
                for case .reply(r, .error(let e)) in host.handle(make(r)) { refused.append("\(what): \(e.message)") }
            }
            step("category") { .setCategory($0, id, category: k.category, mode: k.mode, options: k.options) }
            if k.handlesSecondaryAudio { step("HandlesSecondaryAudio") { .setHandlesSecondaryAudio($0, id, true) } }
            if k.prefersNoInterruptionsFromSystemAlerts {
                step("PrefersNoInterruptionsFromSystemAlerts") { .setPrefersNoInterruptions($0, id, true) }
            }
            if k.outputMuted == true { step("OutputMuted") { .setOutputMuted($0, id, true) } }
            if !refused.isEmpty {
                logger.warning(
                    "a kept process session is not made again: \(refused.joined(separator: "; "))",
                    metadata: ["session": "\(id.rawValue)", "pid": "\(k.pid)"])
                // As `audioctl set-category` does with a session whose values audiod refused.
                let r = host.makeRequestID()
                host.handle(.release(r, id))
                continue
            }
            made.append((id, k))
        }
        for (id, k) in made where k.active {
            // Unmuted as it was (its mode `short-form-video` muted it again): clearing it activates it, so only
            // here, with the other activations.
            if k.outputMuted == false { _ = host.handle(.setOutputMuted(host.makeRequestID(), id, false)) }
            let r = host.makeRequestID()
            for case .reply(r, .error(let e)) in host.handle(.setActive(r, id, active: true, options: [])) {
                logger.info(
                    "a kept process session is back inactive: \(e.message)",
                    metadata: ["session": "\(id.rawValue)", "pid": "\(k.pid)"])
            }
        }
        if !kept.isEmpty {
            logger.info("made \(made.count) of \(kept.count) process session(s) the last run kept")
        }
        return made.count
    }
}
