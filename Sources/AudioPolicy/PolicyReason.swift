/// Why audiod silences, ducks or holds a stream right now (`ListStreams`' `policy-reasons`, `audioctl streams`).
///
/// Data, worded only when a person reads it: the engine decides with `policyMute`/`duckDepth`, and these are the
/// same conditions named one by one, so that "why is this quiet?" has the answer the decision had.
public enum PolicyReason: Sendable, Hashable {
    /// Its session was interrupted by another (nil: by an event nobody will end, e.g. its device went away).
    case interrupted(
        by: SessionID?, interrupterIsCall: Bool, interrupterCategory: Category?, reason: InterruptionReason?)
    /// Its session was interrupted and stays silent until it is activated again.
    case awaitingActivation
    /// A record stream stays muted after an interruption until its session is activated again (privacy).
    case recordHeld
    case silentMode
    /// An ambient or solo-ambient session's stream while the screen is locked.
    case screenLocked
    /// An ambient session's stream while another session holds primary audio.
    case secondaryAudio(primary: SessionID)
    /// Its device went away while it played; it stays silent until its session is activated again.
    case routeChange
    case duckedBy(SessionID)
    /// Ducked to `StrongDuckLevel` by a voice prompt (mode `voice-prompt`: navigation, an assistant).
    case duckedByVoicePrompt(SessionID)
    /// An a11y stream (a screen reader) is audible: every session's playback is ducked to `StrongDuckLevel`.
    case duckedUnderScreenReader
    /// A voice prompt's or an alarm's stream during a call: heard under it, at `DuckLevel`.
    case duckedUnderCall(SessionID)
    /// A call's stream is listed but not yet linked (PipeWire): what it will silence is muted before it sounds.
    case callAboutToSound(StreamID)
    /// Given back while paused to a player audiod resumes through MPRIS: its volume held at audiod's 0 until it
    /// plays (2 s at most), then faded in (§2 "Fades"). The one reason that comes with `policyMuted` false: the
    /// stream is not silenced by policy, only held while it is nobody's to hear.
    case awaitingResumedSound

    public var text: String {
        switch self {
        case .interrupted(let by?, let isCall, let category, _):
            "interrupted by session \(by.rawValue) (\(isCall ? "call" : category?.rawValue ?? "?"))"
        case .interrupted(nil, _, _, let reason?): "interrupted (\(reason.rawValue))"
        case .interrupted(nil, _, _, nil): "interrupted"
        case .screenLocked: "the screen is locked"
        case .awaitingActivation: "interrupted earlier; silent until its session is activated again"
        case .recordHeld: "capture held after an interruption until its session is activated again"
        case .silentMode: "silent mode"
        case .secondaryAudio(let p): "secondary audio while session \(p.rawValue) plays"
        case .routeChange: "route change"
        case .duckedBy(let d): "ducked by session \(d.rawValue)"
        case .duckedByVoicePrompt(let d): "ducked deeper by session \(d.rawValue), a voice prompt"
        case .duckedUnderScreenReader: "ducked under a screen reader (an a11y stream is audible)"
        case .duckedUnderCall(let c): "ducked under the call of session \(c.rawValue)"
        case .callAboutToSound(let call): "a call is about to sound (stream \(call.index), not yet linked)"
        case .awaitingResumedSound:
            "resumed through MPRIS: held silent until its player plays (2 s at most), then given back"
        }
    }
}

extension Engine {
    /// The reasons `policyMute` and `duckDepth` hold for this stream, in the order they are checked.
    func policyReasons(_ st: StreamState) -> [PolicyReason] {
        guard let owner = st.session, let s = sessions[owner] else { return [] }
        // Its volume is audiod's 0 for now: a mixer showing it silent deserves the reason too.
        let held: [PolicyReason] = st.fade?.waitsUntil != nil && !st.appliedMute ? [.awaitingResumedSound] : []
        var ducked: [PolicyReason] = []
        if duckDepth(st) != .none {
            if let call = callAbove(s) {
                ducked = [.duckedUnderCall(call)]
            } else {
                ducked = duckers(of: s).map {
                    strongDuckers.contains($0) ? PolicyReason.duckedByVoicePrompt($0) : .duckedBy($0)
                }
            }
            if !audibleA11y.isEmpty { ducked.append(.duckedUnderScreenReader) }
        }
        // The platform call's streams are never silenced; a ducker still ducks them, as `duckDepth` decides.
        if isPlatformCall(owner) { return ducked + held }
        var reasons: [PolicyReason] = []
        if s.interrupted {
            let by = s.interrupter.flatMap { sessions[$0] }
            reasons.append(
                .interrupted(
                    by: s.interrupter, interrupterIsCall: by?.isCall ?? false,
                    interrupterCategory: by?.configuration.category, reason: s.interruptionReason))
        } else if s.awaitingActivation {
            reasons.append(.awaitingActivation)
        }
        if st.kind == .record {
            guard st.recordHeld || (!s.isImplicit && s.heldSilent) else { return [] }
            return reasons.isEmpty ? [.recordHeld] : reasons
        }
        // An alarm is silenced by nothing but its device going away (`policyMute`); ducked as `duckDepth` says.
        if s.isAlert { return (st.routeSilenced ? [.routeChange] : []) + ducked + held }
        if st.routeSilenced { reasons.append(.routeChange) }
        if silentMode && s.configuration.category.obeysSilentMode { reasons.append(.silentMode) }
        if lockedOut(s) { reasons.append(.screenLocked) }
        if let primary, primary != owner, s.configuration.category == .ambient, !s.handlesSecondaryAudio, !s.roleExempt
        {
            reasons.append(.secondaryAudio(primary: primary))
        }
        if let call = silencedAhead(st.info.id) { reasons.append(.callAboutToSound(call)) }
        return reasons + ducked + held
    }
}
