// The platform (SPEC §10): the calls the platform knows of, as one platform call.

/// The platform call while there is one: its session, what the sources last said, and whether a call has been
/// answered (or dialled) since it began — from then on it no longer *only rings*.
struct PlatformCallState: Sendable {
    var session: SessionID
    var info: PlatformCall
    var answered: Bool

    var onlyRings: Bool { info.allRinging && !answered }
}

extension Engine {
    /// `CallState`: what the platform's calls are now.
    public var callState: CallState { platformCall?.info.state ?? .none }

    /// Whether this session is the platform call: nothing interrupts it, and its streams are never silenced.
    func isPlatformCall(_ id: SessionID) -> Bool { platformCall?.session == id }

    /// `notify`: false when the calls ended because their source's bus was lost — the call may still be going on, so
    /// nothing it interrupted is told it may resume and no player is played.
    mutating func platformCallChanged(_ new: PlatformCall?, notify: Bool = true) {
        let before = callState
        defer { if callState != before { managerChanged.insert(.callState) } }
        guard let new, new.state != .none else { return endPlatformCall(notify: notify) }
        guard var pc = platformCall else { return beginPlatformCall(new) }
        let onlyRang = pc.onlyRings
        let wasHeld = pc.info.state == .held
        let appChanged = pc.info.appID != new.appID
        pc.info = new
        if !new.allRinging { pc.answered = true }
        platformCall = pc
        if sessions[pc.session]?.applicationName != new.applicationName {
            sessions[pc.session]?.applicationName = new.applicationName
            touch(pc.session)
        }
        if appChanged { reassignOwnership(of: Set(streams.keys)) }
        // Answered (or another call dialled), or taken off hold: from now on it interrupts every other active session,
        // as a call does (§2.2) — a call that activated beside the held one too.
        if (onlyRang && !pc.onlyRings) || (wasHeld && new.state != .held) { interruptOthers(for: pc.session) }
    }

    private mutating func beginPlatformCall(_ info: PlatformCall) {
        let id = allocateSessionID()
        sessions[id] = SessionState(
            id: id, implicitKey: nil, lifetime: .process, pid: 0, applicationName: info.applicationName,
            configuration: Configuration(category: .playAndRecord, mode: .voiceChat))
        reindexCategory(id)
        out.added.append(id)
        let pc = PlatformCallState(session: id, info: info, answered: !info.allRinging)
        platformCall = pc
        if info.appID != nil { reassignOwnership(of: Set(streams.keys)) }
        // Active from the first ring: it holds the audio as a call does, and what it interrupts is tied to it.
        guard var s = sessions[id] else { return }
        s.active = true
        sessions[id] = s
        activeSessions.insert(id)
        activeNonMixable.insert(id)
        touch(id)
        markStreamsDirty(of: id)
        if pc.onlyRings {
            // Ringing takes the audio from non-mixable sessions only, and not from those that asked to keep it
            // until the call is answered (PrefersNoInterruptionsFromSystemAlerts).
            for other in activeNonMixable.sorted() + resuming(excluding: id) where other != id {
                guard sessions[other]?.prefersNoInterruptions != true else { continue }
                interrupt(other, reason: .call, by: id)
            }
        } else {
            interruptOthers(for: id)
        }
    }

    /// The last call ended, was declined or missed: everything it interrupted may resume (`notify`).
    private mutating func endPlatformCall(notify: Bool) {
        guard let pc = platformCall else { return }
        platformCall = nil
        deactivate(pc.session, notify: notify, cause: .implicitEnded)
        removeSession(pc.session)
    }

    /// The platform call owns the call app's streams, before any tag or pid — known by what a sandboxed app cannot
    /// claim for itself: a sandboxed stream only by its Flatpak app id; a host stream by the launcher scope it runs
    /// in, or by its program (`/proc/PID/exe`) matched to the call app's desktop entry. `application.id`,
    /// `application.name` and `GIO_LAUNCHED_DESKTOP_FILE` are the app's own words: any app could say it is GNOME
    /// Calls, join the call and never be silenced. (A host program of the user can name itself anything; what
    /// this keeps is the sandbox boundary.)
    func platformCallOwner(_ st: StreamState) -> SessionID? {
        guard let pc = platformCall, let app = pc.info.appID, let profile = st.info.app else { return nil }
        let named: Bool
        if let flatpak = profile.names.first(where: { $0.source == .flatpak }) {
            named = flatpak.name == app
        } else {
            named =
                profile.names.contains { $0.source == .launcherScope && $0.name == app } || profile.programEntry == app
        }
        return named ? pc.session : nil
    }

    mutating func setPrefersNoInterruptions(_ r: RequestID, _ id: SessionID, _ value: Bool) {
        if let e = explicitSessionRefusal(id) { return reply(r, .error(e)) }
        sessions[id]?.prefersNoInterruptions = value
        touch(id)
        reply(r, .ok)
    }
}

extension Engine {
    /// The microphone switch (SPEC §10): muting a source interrupts the active `record` and `play-and-record`
    /// sessions that capture from it (`builtin-mic-muted`) — never a call; unmuting ends that with
    /// `should_resume = false`, so no app restarts capture behind the user's back. audiod never unmutes a source.
    mutating func microphoneMuted(_ source: String, _ muted: Bool, isDefault: Bool) {
        guard muted else {
            for id in (micInterrupted.removeValue(forKey: source) ?? []).sorted() {
                guard var s = sessions[id], s.interrupted, s.interrupter == nil else { continue }
                s.interrupted = false
                sessions[id] = s
                emit(id, .interruptionEnded(shouldResume: false))
                touch(id)
                markStreamsDirty(of: id)
            }
            return
        }
        for id in activeSessions.sorted() {
            guard let s = sessions[id], !s.isCall, !isPlatformCall(id),
                s.configuration.category == .record || s.configuration.category == .playAndRecord
            else { continue }
            let devices = s.recordStreams.compactMap { streams[$0]?.info.device }
            guard devices.contains(source) || (devices.isEmpty && isDefault) else { continue }
            interrupt(id, reason: .builtinMicMuted, by: nil)
            micInterrupted[source, default: []].insert(id)
        }
    }
}
