// The settle pass: after an event changed sessions, decide every affected stream again, follow what that does to
// audibility (implicit activation, linger, primary audio, the secondary-audio hint), repeat until nothing moves,
// then turn the difference between what audiod wants and what it has applied into effects.

extension Engine {
    /// Whether policy silences this stream now (docs/POLICY.md §0 "Silenced": any reason holds).
    func policyMute(_ st: StreamState) -> Bool { silencing(st) != nil }

    /// How policy silences this stream now, if it does: `quiet` when only silent mode or the lock does — nothing
    /// races to be heard in its place, so it may fade out (§2 "Fades") — `racing` for every other reason.
    func silencing(_ st: StreamState) -> Silencing? {
        guard let owner = st.session, let s = sessions[owner], !isPlatformCall(owner) else { return nil }
        if st.kind == .record {
            // Privacy (§3): a silenced record stream stays muted until its owner's activation or the user.
            return st.recordHeld || (!s.isImplicit && s.heldSilent) ? .racing : nil
        }
        // An alarm sounds through everything: no interruption reaches it, nothing silences it but its device going
        // away (§6 lists no exemption: its sound does not jump to the speakers unasked either).
        if s.isAlert { return st.routeSilenced ? .racing : nil }
        // An explicit session the lock interrupted gives way to nothing either: it fades out like an implicit one.
        // Only while the lock holds and no call is on: a call or someone else's sound then races it.
        let lockInterrupted =
            s.interrupted && s.interruptionReason == .screenLocked && lockApplies && !callActive && primary == nil
        if (s.heldSilent && !lockInterrupted) || st.routeSilenced { return .racing }
        if primary != nil && primary != owner && s.configuration.category == .ambient
            && !s.handlesSecondaryAudio && !s.roleExempt
        {
            return .racing
        }
        if lockInterrupted || lockedOut(s) || (silentMode && s.configuration.category.obeysSilentMode) {
            return .quiet
        }
        return nil
    }

    /// Primary audio or a call beginning may turn a quiet silencing into a racing one (`silencing`): the streams
    /// fading out are decided again at once, not at the fade's next step.
    mutating func markFadingOutDirty() {
        for sid in fading where streams[sid]?.fade?.silences == true { markDirty(sid) }
    }

    /// A session's playback stream is ducked while another session ducks others (a ducker itself is not), and
    /// strongly when one of those is a voice prompt. An audible a11y stream ducks every session's playback stream
    /// strongly, duckers' too: a screen reader must be understood over anything. A call is ducked only by plain
    /// duckers; a voice prompt or an alarm plays ducked under an active call instead (SPEC §7 step 5).
    func duckDepth(_ st: StreamState) -> DuckDepth {
        guard st.kind == .playback, let owner = st.session else { return .none }
        if !audibleA11y.isEmpty { return .strong }
        guard let s = sessions[owner] else { return .none }
        if callAbove(s) != nil { return .normal }
        guard !activeDuckers.isEmpty, !activeDuckers.contains(owner) else { return .none }
        if s.isCall || isPlatformCall(owner) {
            return activeDuckers.contains { !sparesCalls($0) } ? .normal : .none
        }
        return strongDuckers.isEmpty ? .normal : .strong
    }

    /// A voice prompt or an alarm: heard under a call, never over it.
    func sparesCalls(_ id: SessionID) -> Bool { sessions[id].map(sparesCalls) ?? false }

    func sparesCalls(_ s: SessionState) -> Bool {
        s.isAlert || (s.configuration.mode == .voicePrompt && s.mixable)
    }

    /// The active call a voice prompt or an alarm plays ducked under, if any.
    func callAbove(_ s: SessionState) -> SessionID? {
        guard sparesCalls(s) else { return nil }
        return activeCall(excluding: s.id)
    }

    /// The duckers whose duck applies to a session's streams (a ducker is not ducked, a call only by plain ones).
    func duckers(of s: SessionState) -> [SessionID] {
        guard !activeDuckers.contains(s.id) else { return [] }
        let call = s.isCall || isPlatformCall(s.id)
        return activeDuckers.sorted().filter { !call || !sparesCalls($0) }
    }

    func duckLevel(of depth: DuckDepth) -> Double {
        switch depth {
        case .none: 1.0
        case .normal: settings.duckLevel
        case .strong: settings.strongDuckLevel
        }
    }

    /// docs/POLICY.md §0 "Audible": a playback stream that is uncorked, muted by nobody, above 0, and whose app's MPRIS
    /// player (if it has one) is `Playing`.
    func isAudible(_ st: StreamState, policyMuted: Bool) -> Bool {
        guard st.kind == .playback, !st.info.corked, !st.userMuted, !policyMuted, !st.userVolume.isSilent else {
            return false
        }
        for pid in st.info.processChain {
            if let ps = playersByPid[pid], !ps.isEmpty {
                return ps.contains { players[$0]?.info.status == .playing }
            }
        }
        return true
    }

    /// Whether a stream is making sound on its device for the purpose of route changes (§6): audible, or about
    /// to be — uncorked and unmuted, with a player that has not said it is paused. A player's `Playing` travels the
    /// bus while its stream starts on the server; an unplug between the two must still not move its sound to the
    /// speakers. (A `Paused` player's uncorked stream writes silence: Chromium does for ~10 s.)
    func soundsOnDevice(_ st: StreamState) -> Bool {
        if st.audible { return true }
        guard st.kind == .playback, !st.info.corked, !st.userMuted, !st.policyMute, !st.userVolume.isSilent else {
            return false
        }
        for pid in st.info.processChain {
            if let ps = playersByPid[pid], !ps.isEmpty {
                return !ps.contains { players[$0]?.info.status == .paused }
            }
        }
        return false
    }

    /// Audibility under the current policy, without committing anything.
    func wouldBeAudible(_ sid: StreamID) -> Bool {
        guard let st = streams[sid] else { return false }
        return isAudible(st, policyMuted: policyMute(st))
    }

    mutating func adjustAudible(_ owner: SessionID?, _ delta: Int) {
        totalAudible += delta
        guard let owner, var s = sessions[owner] else {
            sessionlessAudible += delta
            return
        }
        let before = s.audibleCount
        s.audibleCount += delta
        sessions[owner] = s
        if (before == 0) != (s.audibleCount == 0) {
            if s.audibleCount > 0 { sessionsWithAudio.insert(owner) } else { sessionsWithAudio.remove(owner) }
            crossings.insert(owner)
        }
    }

    /// A call starting or ending changes how voice prompts and alarms are ducked: under a call, or not at all.
    mutating func callsChanged() {
        let sessions = self.sessions
        let now = activeNonMixable.contains { sessions[$0]?.isCall == true }
        guard now != callActive else { return }
        callActive = now
        markFadingOutDirty()
        for (id, s) in sessions where sparesCalls(s) { markStreamsDirty(of: id, kind: .playback) }
    }

    /// A voice-input app starting or stopping to capture is judged as a player starting or stopping to be heard.
    /// `byApp`: the app started or stopped capturing (not its stream changing hands, which activates nothing).
    mutating func adjustCapturing(_ owner: SessionID?, _ delta: Int, byApp: Bool = false) {
        guard let owner, var s = sessions[owner] else { return }
        let before = s.holdsAudio
        let started = byApp && delta > 0 && s.capturingCount == 0
        s.capturingCount += delta
        if started && s.isVoiceInput { s.captureStarted = true }
        sessions[owner] = s
        if before != s.holdsAudio || s.captureStarted { crossings.insert(owner) }
    }

    mutating func decide(_ sid: StreamID) {
        guard var st = streams[sid] else { return }
        everDirty.insert(sid)
        let mute = policyMute(st)
        st.policyMute = mute
        st.duck = duckDepth(st)
        let audible = isAudible(st, policyMuted: mute)
        let changed = audible != st.audible
        st.audible = audible
        let capturing = st.kind == .record && !st.info.corked && !st.info.fromMonitor && !st.userMuted && !mute
        let captureChanged = capturing != st.capturing
        st.capturing = capturing
        streams[sid] = st
        if changed { adjustAudible(st.session, audible ? 1 : -1) }
        if captureChanged { adjustCapturing(st.session, capturing ? 1 : -1, byApp: true) }
        if st.isA11y || !audibleA11y.isEmpty { screenReader(sid, heard: audible && st.isA11y) }
    }

    /// A screen reader starting or stopping to be heard changes every session's duck.
    mutating func screenReader(_ sid: StreamID, heard: Bool) {
        let before = audibleA11y.isEmpty
        if heard { audibleA11y.insert(sid) } else { audibleA11y.remove(sid) }
        if before != audibleA11y.isEmpty { markAllPlaybackDirty() }
    }

    mutating func settle() {
        var rounds = 0
        // Once before the first round; each round's end then covers the next.
        callsChanged()
        while rounds < 16 {
            rounds += 1
            let batch = dirty.sorted()
            dirty.removeAll(keepingCapacity: true)
            for sid in batch { decide(sid) }
            let crossed = crossings.sorted()
            crossings.removeAll(keepingCapacity: true)
            for id in crossed { audibilityCrossed(id) }
            updatePrimary()
            callsChanged()
            if dirty.isEmpty && crossings.isEmpty { break }
        }
        if !dirty.isEmpty || !crossings.isEmpty {
            // Every round can only end sessions' audio or start it once per session; sixteen rounds that still
            // change something are a loop in the rules. Counted (and logged by the daemon, failed on by the tests),
            // and the work left is dropped rather than spun on.
            settleOverflows += 1
            dirty.removeAll(keepingCapacity: true)
            crossings.removeAll(keepingCapacity: true)
        }
        // A mixable session that became active while the hint is on is told at once — judged after the step, so
        // that a session whose activation itself ended primary audio gets no begin/end pair.
        for id in pendingHintBegin.sorted() {
            guard let s = sessions[id], s.active, s.mixable, primary != nil, primary != id, !s.toldHintBegin else {
                continue
            }
            sessions[id]?.toldHintBegin = true
            emit(id, .silenceSecondaryAudioHint(.begin))
        }
        pendingHintBegin.removeAll(keepingCapacity: true)
    }

    /// An implicit session activates when one of its streams becomes audible — a voice-input app when it starts
    /// to capture, even after an interruption — and starts its linger when nothing holds it.
    mutating func audibilityCrossed(_ id: SessionID) {
        guard let s = sessions[id] else { return }
        touch(id)
        guard s.isImplicit else { return }
        sessions[id]?.captureStarted = false
        if s.holdsAudio {
            cancelLinger(id)
            // A dictation started during a call or sleep would only be interrupted again: it waits for its next.
            let pushToTalk =
                s.captureStarted && s.isVoiceInput && !sleeping
                && refusingCall(for: s.configuration, excluding: id) == nil
            if !s.active && (!s.heldSilent || pushToTalk) {
                if let holder = heldBeforeFound(s) {
                    interrupt(id, reason: .default, by: holder)
                    heldAtConnection.insert(id)
                } else {
                    userActivate(id)
                }
            }
        } else if s.active {
            scheduleLingerIfIdle(id)
        }
    }

    /// A stream found when audiod connects was playing before audiod knew of it: it takes the audio from nobody.
    /// After a restart the apps make their sessions again, often before audiod has listed the streams; an
    /// interrupted radio, still playing into the mute the last run left, would otherwise take the audio from the
    /// podcast that held it. Its session begins interrupted by the holder instead, as it would have been had the
    /// listing come first — and resumes when the holder ends with notify. A call takes the audio as ever.
    /// Only an app's own session holds the audio this way: among apps found in the same listing the last found
    /// still takes it (a browser's call is a call only once its capture is listed, after its playback stream).
    /// A call that would refuse the activation, sleep and the lock are judged as for any activation.
    func heldBeforeFound(_ s: SessionState) -> SessionID? {
        guard foundThisStep.contains(s.id), !s.mixable, !s.isCall, s.roleClass != .emergency, !s.isAlert,
            refusingCall(for: s.configuration, excluding: s.id, mutedFeed: s.mutedFeed) == nil,
            heldOffReason(s) == nil, let holder = holder(excluding: s.id), sessions[holder]?.isImplicit == false
        else { return nil }
        return holder
    }

    /// Primary audio (§0) starts and stops at once; the hint and its enforcement follow in the same step (§5).
    /// During a handover the session taking over counts as primary until some session is audibly primary.
    mutating func updatePrimary() {
        let audible = activeNonMixable.filter { (sessions[$0]?.audibleCount ?? 0) > 0 }.max()
        if let h = handover, audible != nil || !mayTakeOver(h) { endHandover() }
        let new = audible ?? handover
        if let new { lastPrimary = new }
        guard new != primary else { return }
        let old = primary
        primary = new
        managerChanged.insert(.primaryAudioSession)
        markFadingOutDirty()
        if let old { touch(old) }
        if let new { touch(new) }
        guard (old == nil) != (new == nil) else {
            // From one session to another: only those two see `primary != owner` change for their own streams —
            // an old primary that has just become ambient (GameMode naming a call's app a game) is secondary now.
            for case let id? in [old, new] where sessions[id]?.configuration.category == .ambient {
                markStreamsDirty(of: id, kind: .playback)
            }
            return
        }
        for id in sessions.keys { touched.insert(id) }
        for id in ambientSessions { markStreamsDirty(of: id, kind: .playback) }
        let edge: SecondaryAudioHintType = new != nil ? .begin : .end
        // Every active mixable session hears this edge, so none still needs its own begin.
        pendingHintBegin.removeAll(keepingCapacity: true)
        for id in activeSessions.sorted() where sessions[id]?.mixable == true {
            // An `end` only for those that heard the `begin`.
            if edge == .end && sessions[id]?.toldHintBegin != true { continue }
            sessions[id]?.toldHintBegin = edge == .begin
            emit(id, .silenceSecondaryAudioHint(edge))
        }
    }

    /// Turns the step's decisions into effects, in docs/API.md's order.
    mutating func finish() -> [Effect] {
        // Every value an effect carries is taken here, at the end of the step: publication never reads the engine.
        // A session made and ended within the step was never announced, so its end is not either.
        // Most steps add and remove nothing: no set is built for them.
        let transient = out.added.isEmpty || out.removed.isEmpty ? [] : Set(out.added).intersection(out.removed)
        var effects: [Effect] = []
        var added: Set<SessionID> = []
        for id in out.added where !transient.contains(id) {
            guard let s = sessions[id] else { continue }
            let v = view(s)
            published[id] = v
            added.insert(id)
            effects.append(.sessionAdded(v))
        }
        heldChangedUnwritten.removeAll(keepingCapacity: true)
        for sid in everDirty.sorted() { streamOperations(sid, into: &effects) }
        // Armed once every stream has taken its step: its interval counts every stream fading now.
        if !fading.isEmpty && !fadeTimerArmed {
            fadeTimerArmed = true
            out.timers.append(.scheduleTimer(.fadeStep, afterNanoseconds: fadeStep))
        }
        effects += out.mpris
        effects += out.signals.filter { e in
            if case .signal(let id, _) = e { return !transient.contains(id) } else { return true }
        }
        effects += out.removed.filter { !transient.contains($0) }.map(Effect.sessionRemoved)

        // OtherAudioPlaying of a session changes when audio starts or stops everywhere, or when one session
        // holds all audible streams before or after the step.
        let nowTotal = totalAudible
        if (totalBefore == 0) != (nowTotal == 0) {
            managerChanged.insert(.otherAudioPlaying)
            for id in sessions.keys { touched.insert(id) }
        } else {
            if let s = soleBefore { touched.insert(s) }
            if let s = soleAudibleSession { touched.insert(s) }
        }
        for id in touched.sorted() {
            guard let s = sessions[id] else { continue }
            let v = view(s)
            if added.contains(id) { continue }
            if let old = published[id] {
                let changes = v.changes(from: old)
                if !changes.isEmpty { effects.append(.sessionPropertiesChanged(id, changes)) }
            }
            published[id] = v
        }
        if !managerChanged.isEmpty { effects.append(.managerPropertiesChanged(managerValues(managerChanged))) }
        effects += netTimerOperations(out.timers)
        if out.persist { effects.append(.persist(persistentState)) }
        effects += out.replies

        out.reset()
        everDirty.removeAll(keepingCapacity: true)
        touched.removeAll(keepingCapacity: true)
        foundThisStep.removeAll(keepingCapacity: true)
        fadeTick = false
        managerChanged = []
        totalBefore = totalAudible
        soleBefore = soleAudibleSession
        return effects
    }

    /// Every manager property the engine decides, with its value now, in docs/API.md order.
    public var managerProperties: [ManagerProperty] { managerValues(ManagerProperties(rawValue: .max)) }

    /// The values of the manager properties in `changed`, in docs/API.md order.
    func managerValues(_ changed: ManagerProperties) -> [ManagerProperty] {
        var values: [ManagerProperty] = []
        if changed.contains(.silentMode) { values.append(.silentMode(silentMode)) }
        if changed.contains(.otherAudioPlaying) { values.append(.otherAudioPlaying(otherAudioPlaying)) }
        if changed.contains(.primaryAudioSession) { values.append(.primaryAudioSession(primaryAudioSession)) }
        if changed.contains(.duckLevel) { values.append(.duckLevel(duckLevel)) }
        if changed.contains(.strongDuckLevel) { values.append(.strongDuckLevel(strongDuckLevel)) }
        if changed.contains(.callState) { values.append(.callState(callState)) }
        if changed.contains(.screenLocked) { values.append(.screenLocked(screenLocked)) }
        return values
    }

    /// A settle round may schedule a linger that a later round cancels: only the net operation per timer leaves
    /// the step (a timer first scheduled and then cancelled in the same step was never running).
    func netTimerOperations(_ ops: [Effect]) -> [Effect] {
        var first: [TimerID: Effect] = [:]
        var last: [TimerID: Effect] = [:]
        var order: [TimerID] = []
        for op in ops {
            let id: TimerID
            switch op {
            case .scheduleTimer(let t, _), .cancelTimer(let t): id = t
            default: continue
            }
            if first[id] == nil {
                first[id] = op
                order.append(id)
            }
            last[id] = op
        }
        return order.compactMap { id in
            guard let op = last[id] else { return nil }
            if case .cancelTimer = op, case .scheduleTimer? = first[id] { return nil }
            return op
        }
    }

    /// The one session that holds every audible stream, if there is exactly one and no a11y stream is audible.
    var soleAudibleSession: SessionID? {
        guard sessionlessAudible == 0, sessionsWithAudio.count == 1 else { return nil }
        return sessionsWithAudio.first
    }

    /// What audiod must change on the server for this stream: mute what policy silences (unless the user already
    /// did), unmute what it muted once no reason holds, duck and unduck from the user's own volume.
    mutating func streamOperations(_ sid: StreamID, into effects: inout [Effect]) {
        guard var st = streams[sid] else { return }
        let heldBefore = (st.appliedMute, st.appliedVolume)
        let effectsBefore = effects.count
        // An output-muted session's playback streams are muted on the app's behalf (SPEC §5): the stream's own mute
        // from then on, as if the app had muted it — audiod holds nothing (no journal line, nothing undone at exit),
        // and a policy mute it held is handed over. Cleared, the stream is unmuted (`StreamState.mutedForApp`).
        var unmuteForApp = false
        let forApp = sid.kind == .playback && st.session.flatMap { sessions[$0]?.outputMuted } == true
        if forApp && st.mutedForApp != st.session {
            st.mutedForApp = st.session
            if !st.userMuted && !st.appliedMute { effects.append(.setStreamMute(sid, true)) }
            st.userMuted = true
            st.appliedMute = false
        } else if !forApp, let muter = st.mutedForApp {
            st.mutedForApp = nil
            if muter == st.session {
                st.userMuted = false
                unmuteForApp = true
            }
        }
        let wantMute = (st.policyMute || silencedAhead(sid) != nil) && !st.userMuted
        // Silenced by silent mode or the lock while someone hears it, a stream fades out first and is muted at the
        // fade's end; it counts as silenced from the fade's start (§2 "Fades").
        // A stream the server still shows muted for its app is heard by nobody: audiod takes the mute over at once.
        let fadeOut = wantMute && !st.appliedMute && !unmuteForApp ? fadeOutLength(sid, st) : 0
        var fadingOut = fadeOut > 0
        if fadingOut, let f = st.fade, f.silences,
            f.done(at: now, step: fadeStep) || (!f.serverRamped && st.appliedVolume?.isSilent == true)
        {
            // The fade's end: the mute below, from its last step (a twenty-fifth of the way from silence), then the
            // volume back under it. No write of silence first: a crash between it and the volume would leave 0,
            // which the journal knows as neither audiod's value nor the one before.
            fadingOut = false
        }
        // Given back to someone who hears it, a stream fades in from silence: its volume goes to the fade's first
        // step before the unmute, so nothing is heard at full volume first.
        var fadeIn: UInt64 = 0
        var serverFadeIn: UInt64 = 0
        var resumeFadeIn: UInt64 = 0
        if unmuteForApp && !wantMute {
            effects.append(.setStreamMute(sid, false))
        } else if fadingOut {
            // The mute waits for the fade's end.
        } else if wantMute && !st.appliedMute {
            effects.append(.setStreamMute(sid, true))
            st.appliedMute = true
            // Whatever silenced it, a record stream audiod muted stays muted until its owner's activation or the
            // user (§3 Privacy), even if it changes hands.
            if sid.kind == .record { st.recordHeld = true }
        } else if !wantMute && st.appliedMute {
            st.appliedMute = false
            fadeIn = fadeInLength(st)
            if fadeIn > 0 && st.info.serverRamps {
                // The server ramps the give-back: the volume goes to its end under the mute, at once.
                serverFadeIn = fadeIn
                fadeIn = 0
                st.volumeAtOnce = true
            }
            // Paused, and about to be played again by audiod: it starts at silence, and fades in once it sounds.
            if fadeIn == 0 && serverFadeIn == 0 { resumeFadeIn = resumeFadeInLength(st) }
            if fadeIn == 0 && serverFadeIn == 0 && resumeFadeIn == 0 { effects.append(.setStreamMute(sid, false)) }
        }
        volumeOperations(
            &st, into: &effects, fadeIn: fadeIn, fadeOut: fadingOut ? fadeOut : 0, resumeFadeIn: resumeFadeIn)
        if fadeIn > 0 || resumeFadeIn > 0 { effects.append(.setStreamMute(sid, false)) }
        if serverFadeIn > 0 { effects.append(.rampStreamUnmute(sid, nanoseconds: serverFadeIn)) }
        st.volumeAtOnce = false
        st.writeUserVolume = false
        // What audiod holds changed with nothing written (a policy mute handed to an output-muted app): the journal
        // must hear it too, or a restart would undo the app's mute as a policy value left behind.
        if effects.count == effectsBefore && (heldBefore.0 != st.appliedMute || heldBefore.1 != st.appliedVolume) {
            heldChangedUnwritten.append(sid)
        }
        streams[sid] = st
    }

    /// How long a playback stream audiod gives back fades in (§2 "Fades"): `fade-in` for a stream someone will
    /// hear, at most 100 ms for spoken audio, 0 (at once) where `fadeLength` says so.
    func fadeInLength(_ st: StreamState) -> UInt64 {
        guard st.kind == .playback, mayFade(st) else { return 0 }
        return fadeInSetting(st)
    }

    /// `fade-in`, at most 100 ms for spoken audio.
    func fadeInSetting(_ st: StreamState) -> UInt64 {
        isSpoken(st) ? min(settings.fadeInNanoseconds, Settings.quickFadeLimitNanoseconds) : settings.fadeInNanoseconds
    }

    /// How long a paused playback stream audiod gives back fades in once it sounds (§2 "Fades"): a stream of a
    /// player audiod is resuming (its `Play` on the way) would otherwise start at full volume the moment the player
    /// plays, after the give-back — too late for a fade to start from silence. 0 for any other stream nobody hears.
    func resumeFadeInLength(_ st: StreamState) -> UInt64 {
        guard st.kind == .playback, !settings.decidesNothing, !st.volumeAtOnce, st.session != nil, !st.audible,
            !st.userMuted, !st.userVolume.isSilent, resumedByAudiod(st)
        else { return 0 }
        return fadeInSetting(st)
    }

    /// audiod's `Play` goes out in this step to the player `isAudible` looks at for the stream — whatever the
    /// player last said (its `Paused` may still be on the bus while its stream has already corked), unless it said
    /// `Stopped`: a stopped player (its tab closed) has nothing to play and answers no `Play`, and a stream of its
    /// app may be sounding on its own, which a wait at silence would cut for 2 s.
    func resumedByAudiod(_ st: StreamState) -> Bool {
        guard !out.mpris.isEmpty else { return false }
        for pid in st.info.processChain {
            if let ps = playersByPid[pid], !ps.isEmpty {
                return ps.contains { p in
                    out.mpris.contains(.mprisPlay(p)) && players[p]?.info.status != .stopped
                }
            }
        }
        return false
    }

    /// How long a stream policy silences now fades out before its mute (§2 "Fades"): `fade-out` for a playback
    /// stream someone hears but for policy, silenced only by silent mode or the lock (nothing races to take its
    /// place: an interruption, secondary audio, a call or a route change mutes at once); 0 where the mute must be
    /// at once (`fadeLength`'s cases: a new stream, the user's volume just set, no session, nothing decided). Spoken
    /// audio is of the playback category, which neither silent mode nor the lock silences.
    func fadeOutLength(_ sid: StreamID, _ st: StreamState) -> UInt64 {
        guard st.kind == .playback, !settings.decidesNothing, !st.volumeAtOnce, st.session != nil,
            silencing(st) == .quiet, silencedAhead(sid) == nil, isAudible(st, policyMuted: false)
        else { return 0 }
        return settings.fadeOutNanoseconds
    }

    /// The duck's volume (§2 "Fades"): the target is the user's volume times the duck level, or the user's own when
    /// nothing ducks the stream; a stream someone hears gets there by a fade, one step per `fadeStep` timer.
    /// `fadeIn`: the stream is being given back; its volume fades up from silence over that long. `fadeOut`: the
    /// stream is being silenced; its volume fades down to silence over that long, and the mute then comes through
    /// `streamOperations`, which puts the volume back under it. `resumeFadeIn`: the stream is being given back
    /// while paused, to a player audiod resumes; its volume waits at silence and fades up over that long once the
    /// stream is heard (`VolumeFade.waitsUntil`).
    mutating func volumeOperations(
        _ st: inout StreamState, into effects: inout [Effect], fadeIn: UInt64 = 0, fadeOut: UInt64 = 0,
        resumeFadeIn: UInt64 = 0
    ) {
        let sid = st.info.id
        // nil: the user's own volume, audiod holding nothing.
        let goal: Volume? =
            st.ducked ? st.userVolume.multiplied(by: st.duck == .strong ? strongDuckFactor : duckFactor) : nil
        let needed =
            fadeIn > 0 || fadeOut > 0 || resumeFadeIn > 0
            || goal.map { st.appliedVolume != $0 && !(st.appliedVolume == nil && $0 == st.userVolume) }
                ?? (st.appliedVolume != nil)
        guard needed else {
            if st.writeUserVolume && goal == nil { effects.append(.setStreamVolume(sid, st.userVolume)) }
            st.fade = nil
            fading.remove(sid)
            return
        }
        let silence = Volume(uniform: 0, count: st.userVolume.channels.count)
        let end = fadeOut > 0 ? silence : goal ?? st.userVolume
        let current = st.appliedVolume ?? st.userVolume
        if resumeFadeIn > 0 {
            // Written under the mute (the unmute follows): the player's first sound is at silence, not at full
            // volume a moment before a fade could start.
            st.fade = VolumeFade(
                from: silence, to: end, lifts: goal == nil, start: now, length: resumeFadeIn,
                waitsUntil: Instant(nanoseconds: now.nanoseconds + Settings.resumeFadeWaitNanoseconds))
            if current != silence { effects.append(.setStreamVolume(sid, silence)) }
            st.appliedVolume = silence
            fading.insert(sid)
            return
        }
        var soundsNow = false
        if fadeIn == 0, fadeOut == 0, let f = st.fade, let until = f.waitsUntil {
            if st.appliedMute || !mayWaitForSound(st) || now >= until {
                // Silenced again, left, set or muted by the user, or not heard in time: the rest of the way at once
                // (below; no fade for a stream nobody hears — a paused player's uncorked stream plays silence).
                st.fade = nil
            } else if st.audible {
                // Heard from now: the fade runs from silence, its first step at once, over `fade-in` as it is now (a
                // reload while it waited counts; a fade of 0 is done at once, below, the volume back in one write).
                st.fade = VolumeFade(from: f.from, to: end, lifts: goal == nil, start: now, length: fadeInSetting(st))
                soundsNow = true
            } else {
                // Still waiting; a duck decided meanwhile is where it will end.
                st.fade?.to = end
                st.fade?.lifts = goal == nil
                fading.insert(sid)
                return
            }
        }
        if soundsNow {
            // Stepped below.
        } else if fadeIn > 0 {
            st.fade = VolumeFade(from: silence, to: end, lifts: goal == nil, start: now, length: fadeIn)
        } else if fadeOut > 0 {
            if st.fade == nil && st.info.serverRampsVolume {
                // The server ramps it down to silence; the mute comes once the ramp has run (`streamOperations`),
                // so a user's mute meanwhile is still the user's.
                st.fade = VolumeFade(
                    from: current, to: end, lifts: false, silences: true, start: serverRampBegins(&st, fadeOut),
                    length: fadeOut, serverRamped: true)
                effects.append(.rampStreamVolume(sid, end, nanoseconds: fadeOut))
                st.appliedVolume = end
                fading.insert(sid)
                return
            } else if st.fade?.silences != true {
                st.fade = VolumeFade(
                    from: current, to: end, lifts: false, silences: true, start: now, length: fadeOut)
            } else if !fadeTick {
                return
            }
        } else if st.fade != nil && !mayFade(st) {
            // Nobody hears it any more (muted, paused), or its app is gone: the rest of the way at once.
            st.fade = nil
        } else if st.fade.map({ $0.to != end || $0.lifts != (goal == nil) }) ?? true {
            let length = fadeLength(st, from: current, to: end)
            if length > 0 && st.info.serverRampsVolume && st.fade?.serverRamped ?? true {
                // The server ramps it (a duck, or its undoing, or a ramped fade-out turned back): one change, held
                // as done from now — a ramp under way runs out first. A fade of audiod's own steps under way goes
                // on in steps (a ramp would start from where the server is).
                st.fade = nil
                _ = serverRampBegins(&st, length)
                effects.append(.rampStreamVolume(sid, end, nanoseconds: length))
                st.appliedVolume = goal
                fading.remove(sid)
                return
            }
            st.fade =
                length == 0 ? nil : VolumeFade(from: current, to: end, lifts: goal == nil, start: now, length: length)
        } else if !fadeTick {
            // The fade goes on at the timer's pace: the server's echo of a step (or anything else that looks at the
            // stream meanwhile) writes nothing, or every echo would write the next step at once.
            return
        }
        let step = fadeStep
        if let fade = st.fade, fade.serverRamped, !fade.done(at: now, step: step) {
            // The server's ramp runs: nothing to write until it has.
            fading.insert(sid)
            return
        }
        guard let fade = st.fade, !fade.done(at: now, step: step) else {
            if fadeOut > 0 {
                // A fade-out no longer than a step (or whose steps grew with many streams fading): silence now, held
                // as audiod's value, and the mute at the next look (`streamOperations`).
                if current != end { effects.append(.setStreamVolume(sid, end)) }
                st.appliedVolume = end
                fading.insert(sid)
                return
            }
            effects.append(.setStreamVolume(sid, end))
            st.appliedVolume = goal
            st.fade = nil
            fading.remove(sid)
            return
        }
        let value = fade.value(at: now, step: step)
        if value != current {
            effects.append(.setStreamVolume(sid, value))
            st.appliedVolume = value
        }
        fading.insert(sid)
    }

    /// When a server ramp of `length` asked now begins — once the one asked before has run — and notes when it will
    /// have run.
    func serverRampBegins(_ st: inout StreamState, _ length: UInt64) -> Instant {
        let begins = max(now, st.serverRampEnds ?? now)
        st.serverRampEnds = Instant(
            nanoseconds: begins.nanoseconds + length + VolumeFade.serverRampSettleNanoseconds)
        return begins
    }

    /// How long a stream's volume takes from `from` to `to`: 0 (at once) for a stream nobody hears or whose volume
    /// must be right now (`volumeAtOnce`), and where the engine decides nothing (a stop puts the user's values
    /// back at once).
    func fadeLength(_ st: StreamState, from: Volume, to: Volume) -> UInt64 {
        guard mayFade(st) else { return 0 }
        let down = zip(to.channels, from.channels).reduce(0) { $0 + Int64($1.0) - Int64($1.1) } < 0
        var length = down ? settings.duckFadeNanoseconds : settings.unduckFadeNanoseconds
        if st.duck == .strong || isSpoken(st) { length = min(length, Settings.quickFadeLimitNanoseconds) }
        return length
    }

    /// Speech is never faded long (§2 "Fades").
    func isSpoken(_ st: StreamState) -> Bool {
        st.session.flatMap { sessions[$0] }?.configuration.mode == .spokenAudio
    }

    /// A stream waiting at silence for its player's sound may go on waiting: as `mayFade`, but nobody hears it yet.
    func mayWaitForSound(_ st: StreamState) -> Bool {
        !settings.decidesNothing && !st.volumeAtOnce && st.session != nil && !st.userMuted
    }

    /// Someone hears the stream, and nothing asks for its volume at once. A stream of no session is left by a
    /// process that exited (or its session's end): it is given back at once, as it goes — a fade's step written to
    /// a dying stream may never land, and the server's saved state would keep the value before it, which the
    /// restore-database ledger no longer expects (random test, seeds 17 and 245173 on PipeWire).
    func mayFade(_ st: StreamState) -> Bool {
        !settings.decidesNothing && !st.volumeAtOnce && st.audible && st.session != nil
    }

    /// The time between two steps of the fades: 20 ms, longer when many streams fade at once.
    var fadeStep: UInt64 {
        max(Settings.fadeStepNanoseconds, UInt64(fading.count) * 1_000_000_000 / Settings.fadeWritesPerSecond)
    }

    /// The step timer: every fading stream takes its next step.
    mutating func fadeStepped() {
        fadeTimerArmed = false
        fadeTick = true
        for sid in fading { markDirty(sid) }
    }
}
