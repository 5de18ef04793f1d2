/// Why audiod silences or ducks a stream right now (`ListStreams`' `policy-reasons`, `audioctl streams`).
///
/// Data, worded only when a person reads it: the engine decides with `policyMute`/`shouldDuck`, and these are the
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
    /// A call's stream is listed but not yet linked (PipeWire): what it will silence is muted before it sounds.
    case callAboutToSound(StreamID)

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
        case .callAboutToSound(let call): "a call is about to sound (stream \(call.index), not yet linked)"
        }
    }
}

extension Engine {
    /// The reasons `policyMute` and `shouldDuck` hold for this stream, in the order they are checked.
    func policyReasons(_ st: StreamState) -> [PolicyReason] {
        guard let owner = st.session, let s = sessions[owner] else { return [] }
        let ducked = shouldDuck(st) ? activeDuckers.sorted().filter { $0 != owner }.map(PolicyReason.duckedBy) : []
        // The platform call's streams are never silenced; a ducker still ducks them, as `shouldDuck` decides.
        if isPlatformCall(owner) { return ducked }
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
        if st.routeSilenced { reasons.append(.routeChange) }
        if silentMode && s.configuration.category.obeysSilentMode { reasons.append(.silentMode) }
        if lockedOut(s) { reasons.append(.screenLocked) }
        if let primary, primary != owner, s.configuration.category == .ambient, !s.handlesSecondaryAudio, !s.roleExempt
        {
            reasons.append(.secondaryAudio(primary: primary))
        }
        if let call = silencedAhead(st.info.id) { reasons.append(.callAboutToSound(call)) }
        return reasons + ducked
    }
}
