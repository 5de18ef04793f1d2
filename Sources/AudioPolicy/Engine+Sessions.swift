// Sessions: the requests of docs/API.md and docs/POLICY.md §1–§3 (who wins, who is interrupted, who may resume).

extension Engine {
    // MARK: Requests

    mutating func reply(_ r: RequestID, _ reply: Reply) {
        out.replies.append(.reply(r, reply))
    }

    mutating func createSession(_ r: RequestID, _ spec: NewSession) {
        let id = allocateSessionID()
        let s = SessionState(
            id: id, implicitKey: nil, lifetime: spec.lifetime, pid: spec.pid,
            applicationName: spec.applicationName, configuration: .initial)
        sessions[id] = s
        explicitByPid[spec.pid, default: []].insert(id)
        silentModeSessions.insert(id)
        out.added.append(id)
        // Streams of this process and its descendants may belong to the new session now; a stream already
        // audible when it changes hands activates nothing (§7).
        reassignOwnership(of: streamsByAncestor[spec.pid] ?? [])
        reply(r, .session(id))
    }

    mutating func allocateSessionID() -> SessionID {
        defer { nextSessionID += 1 }
        return SessionID(nextSessionID)
    }

    /// The explicit session for a request, or the error docs/API.md names.
    /// Why a client may not change session `id` (it does not exist, or audiod made it), or nil. Only the flag is
    /// read: every SetActive asks, and a copy of the session's state would retain all its sets.
    func explicitSessionRefusal(_ id: SessionID) -> PolicyError? {
        guard let implicit = sessions[id]?.isImplicit else {
            return .noSuchSession("there is no session \(id.rawValue)")
        }
        if implicit {
            return .accessDenied(
                "session \(id.rawValue) is an implicit session made by audiod; change it with SetApplicationCategory")
        }
        if isPlatformCall(id) {
            return .accessDenied(
                "session \(id.rawValue) is the platform's call: it follows the platform's call services")
        }
        return nil
    }

    mutating func setCategory(_ r: RequestID, _ id: SessionID, _ c: String, _ m: String, _ o: [String]) {
        if let e = explicitSessionRefusal(id) { return reply(r, .error(e)) }
        switch Configuration.parse(category: c, mode: m, options: o) {
        case .failure(let e): reply(r, .error(e))
        case .success(let config):
            if let refusal = changeConfiguration(of: id, to: config) {
                reply(r, .error(refusal))
            } else {
                reply(r, .ok)
            }
        }
    }

    /// Applies a new configuration. On an active session this is judged like a fresh activation (§1): refused
    /// → nothing changes and the refusal is returned.
    mutating func changeConfiguration(of id: SessionID, to config: Configuration) -> PolicyError? {
        guard var s = sessions[id] else { return nil }
        if s.configuration == config { return nil }
        // A feed that autoplays muted (SPEC §5): the mode mutes an explicit session's output as it is set. (An app
        // rule's mode does not: nothing could unmute an implicit app.)
        let mutesOutput = !s.isImplicit && config.mode == .shortFormVideo && s.configuration.mode != .shortFormVideo
        let outputMuted = s.outputMuted || mutesOutput
        if s.active,
            let call = refusingCall(for: config, excluding: id, mutedFeed: outputMuted && !config.category.captures)
        {
            return .insufficientPriority(call: call)
        }
        let wasMixable = s.mixable
        let spared = sparesCalls(s)
        s.outputMuted = outputMuted
        s.configuration = config
        sessions[id] = s
        defer { stopSparingCalls(id, spared: spared) }
        reindexCategory(id)
        touch(id)
        markStreamsDirty(of: id)
        guard s.active else { return nil }
        if s.mixable { activeNonMixable.remove(id) } else { activeNonMixable.insert(id) }
        setDucker(id, s.ducksOthers)
        interruptOthers(for: id)
        if s.mixable && !wasMixable { pendingHintBegin.insert(id) }
        if !s.mixable && wasMixable { hintNoLongerApplies(id) }
        emit(id, .routeChanged(.categoryChange, previousDevice: nil, currentDevice: nil))
        if let s = sessions[id], s.active, lockedOut(s) { interruptForPlatform(id, .screenLocked) }
        return nil
    }

    mutating func setActive(_ r: RequestID, _ id: SessionID, _ active: Bool, _ options: [String]) {
        if let e = explicitSessionRefusal(id) { return reply(r, .error(e)) }
        let parsed: Set<ActivationOption>
        switch parseActivationOptions(options, active: active) {
        case .failure(let e): return reply(r, .error(e))
        case .success(let o): parsed = o
        }
        if active {
            if let refusal = activate(id, byOwner: true) {
                reply(r, .error(refusal))
            } else {
                reply(r, .ok)
            }
        } else {
            deactivate(id, notify: parsed.contains(.notifyOthersOnDeactivation), cause: .request)
            reply(r, .ok)
        }
    }

    mutating func release(_ r: RequestID, _ id: SessionID) {
        if let e = explicitSessionRefusal(id) { return reply(r, .error(e)) }
        deactivate(id, notify: true, cause: .request)
        removeSession(id)
        reply(r, .ok)
    }

    mutating func ownerVanished(_ id: SessionID) {
        guard let s = sessions[id], !s.isImplicit else { return }
        deactivate(id, notify: true, cause: .ownerVanished)
        removeSession(id)
    }

    /// A write of `OutputMuted` by the session's owner (SPEC §5). Clearing it activates the session, as the app
    /// unmuting its feed means to be heard.
    mutating func setOutputMuted(_ r: RequestID, _ id: SessionID, _ value: Bool) {
        if let e = explicitSessionRefusal(id) { return reply(r, .error(e)) }
        changeOutputMuted(id, to: value)
        reply(r, .ok)
    }

    /// Mutes or unmutes an explicit session's output on its app's behalf. Muted, it counts as mixable, ducks
    /// nobody and is interrupted by no one's activation; unmuted, it activates (or, already active, takes the audio
    /// as a fresh activation would). Refused during a call, it is interrupted by the call and tied to it.
    mutating func changeOutputMuted(_ id: SessionID, to muted: Bool) {
        guard var s = sessions[id], !s.isImplicit, s.outputMuted != muted else { return }
        let wasMixable = s.mixable
        let spared = sparesCalls(s)
        s.outputMuted = muted
        sessions[id] = s
        defer { stopSparingCalls(id, spared: spared) }
        touch(id)
        markStreamsDirty(of: id)
        if s.active {
            if s.mixable { activeNonMixable.remove(id) } else { activeNonMixable.insert(id) }
            setDucker(id, s.ducksOthers)
            if s.mixable && !wasMixable { pendingHintBegin.insert(id) }
            // Taking the audio as a fresh activation would — only when unmuting made it non-mixable (a session
            // that may capture was never counted mixable).
            if !s.mixable && wasMixable {
                hintNoLongerApplies(id)
                if let call = refusingCall(for: s.configuration, excluding: id) {
                    interrupt(id, reason: .call, by: call)
                } else {
                    interruptOthers(for: id)
                }
            }
        } else if !muted {
            userActivate(id)
        }
    }

    /// A session told to silence its secondary audio that is no longer mixable: the hint is about others' audio
    /// beside its own, and it now takes the audio itself — told `end`, so that a later `begin` reaches it.
    mutating func hintNoLongerApplies(_ id: SessionID) {
        guard sessions[id]?.toldHintBegin == true else { return }
        sessions[id]?.toldHintBegin = false
        emit(id, .silenceSecondaryAudioHint(.end))
    }

    /// The user unmuted a stream of an output-muted session in a mixer: the session is told, its output is unmuted
    /// and it takes the audio (SPEC §5).
    mutating func userUnmutedOutput(_ id: SessionID) {
        guard let s = sessions[id], s.outputMuted else { return }
        emit(id, .userIntentToUnmuteOutput)
        changeOutputMuted(id, to: false)
    }

    mutating func setHandlesSecondaryAudio(_ r: RequestID, _ id: SessionID, _ value: Bool) {
        if let e = explicitSessionRefusal(id) { return reply(r, .error(e)) }
        sessions[id]?.handlesSecondaryAudio = value
        touch(id)
        markStreamsDirty(of: id)
        reply(r, .ok)
    }

    mutating func setSilentMode(_ r: RequestID, _ on: Bool) {
        applySilentMode(on)
        reply(r, .ok)
    }

    mutating func applySilentMode(_ on: Bool) {
        guard silentMode != on else { return }
        silentMode = on
        managerChanged.insert(.silentMode)
        out.persist = true
        for id in silentModeSessions.sorted() { markStreamsDirty(of: id, kind: .playback) }
    }

    mutating func setDuckLevel(_ r: RequestID, _ level: Double) {
        if let refusal = Refusal.check(duckLevel: level, strongDuckLevel: settings.strongDuckLevel) {
            return reply(r, .error(PolicyError(refusal)))
        }
        applyDuckLevels(level, settings.strongDuckLevel)
        reply(r, .ok)
    }

    mutating func setStrongDuckLevel(_ r: RequestID, _ level: Double) {
        if let refusal = Refusal.check(strongDuckLevel: level, duckLevel: settings.duckLevel) {
            return reply(r, .error(PolicyError(refusal)))
        }
        applyDuckLevels(settings.duckLevel, level)
        reply(r, .ok)
    }

    mutating func applyDuckLevels(_ level: Double, _ strong: Double) {
        let ducking = !activeDuckers.isEmpty || !audibleA11y.isEmpty || callActive
        if level != settings.duckLevel {
            settings.duckLevel = level
            duckFactor = Volume.fromLinear(level)
            managerChanged.insert(.duckLevel)
            if ducking { markAllPlaybackDirty() }
        }
        if strong != settings.strongDuckLevel {
            settings.strongDuckLevel = strong
            strongDuckFactor = Volume.fromLinear(strong)
            managerChanged.insert(.strongDuckLevel)
            if ducking { markAllPlaybackDirty() }
        }
    }

    mutating func configure(_ r: RequestID, _ new: Settings) {
        guard new.duckLevel > 0, new.duckLevel < 1, new.duckLevel.isFinite else {
            return reply(
                r,
                .error(
                    .invalidArgs(
                        "duck-level \(new.duckLevel) is out of range: it must be greater than 0 and less than 1")))
        }
        guard new.strongDuckLevel > 0, new.strongDuckLevel <= new.duckLevel, new.strongDuckLevel.isFinite else {
            return reply(
                r,
                .error(
                    .invalidArgs(
                        "strong-duck-level \(new.strongDuckLevel) is out of range: it must be greater than 0 and at "
                            + "most duck-level (\(new.duckLevel))")))
        }
        let lockBefore = lockApplies
        var kept = new
        kept.duckLevel = settings.duckLevel
        kept.strongDuckLevel = settings.strongDuckLevel
        settings = kept
        configRules = Engine.index(new.configRules)
        applyDuckLevels(new.duckLevel, new.strongDuckLevel)
        recomputeImplicitCategories()
        lockRulesChanged(from: lockBefore)
        reply(r, .ok)
    }

    mutating func setApplicationCategory(_ r: RequestID, _ app: String, _ c: String, _ m: String, _ o: [String]) {
        guard !app.isEmpty else {
            return reply(
                r,
                .error(
                    .invalidArgs("the application name is empty; give an application.id, binary or application.name")))
        }
        switch Configuration.parse(category: c, mode: m, options: o) {
        case .failure(let e): reply(r, .error(e))
        case .success(let config):
            busRules[app] = ApplicationRule(application: app, configuration: config, source: .bus)
            out.persist = true
            recomputeImplicitCategories()
            reply(r, .ok)
        }
    }

    mutating func removeApplicationCategory(_ r: RequestID, _ app: String) {
        guard busRules.removeValue(forKey: app) != nil else {
            return reply(r, .error(.noSuchRule(app)))
        }
        out.persist = true
        recomputeImplicitCategories()
        reply(r, .ok)
    }

    // MARK: Activation (§2)

    /// The active call that would refuse an activation with `config` (§2.1), if any.
    /// `mutedFeed`: the session is output-muted (SPEC §5), so it counts as mixable.
    func refusingCall(for config: Configuration, excluding id: SessionID, mutedFeed: Bool = false) -> SessionID? {
        guard let call = activeCall(excluding: id) else { return nil }
        // Nothing interrupts the platform call: another call may activate beside it only while it is held.
        if config.isCall, let pc = platformCall, pc.session != id, pc.info.state != .held { return pc.session }
        if config.isCall { return nil }
        if config.category == .record || config.category == .playAndRecord { return call }
        if !config.isMixable && !mutedFeed { return call }
        return nil
    }

    func activeCall(excluding id: SessionID) -> SessionID? {
        // Asked on every activation: a pass, not a filtered copy of the set — and the closure captures the sessions,
        // not `self` (that would copy the whole engine value into it).
        let sessions = self.sessions
        return activeNonMixable.lazy.filter { $0 != id && sessions[$0]?.isCall == true }.max()
    }

    /// The active non-mixable session other than `id` ("holds the audio"), if any.
    func holder(excluding id: SessionID) -> SessionID? {
        activeNonMixable.lazy.filter { $0 != id }.max()
    }

    /// Activates a session (§2). `byOwner` is an explicit `SetActive(true)`: it also lifts the route-change
    /// silencing of an already active session and the privacy hold of its record streams. Returns the refusal.
    @discardableResult
    mutating func activate(_ id: SessionID, byOwner: Bool) -> PolicyError? {
        guard let current = sessions[id] else { return nil }
        if let call = refusingCall(for: current.configuration, excluding: id, mutedFeed: current.mutedFeed) {
            return .insufficientPriority(call: call)
        }
        // Asleep, or an explicit ambient session behind the lock (SPEC §10): granted, and interrupted at once —
        // before it takes the audio from anyone.
        if let reason = heldOffReason(current) {
            if !current.active { interruptForPlatform(id, reason) }
            return nil
        }
        liftActivationHolds(id, byOwner: byOwner)
        if current.active { return nil }
        // Activating an interrupted session unties it from its interrupter (§2.5).
        untie(id)
        guard var s = sessions[id] else { return nil }
        s.interrupted = false
        s.spokenOnly = false
        s.awaitingActivation = false
        s.active = true
        s.notifiesAtEnd = s.isImplicit && (s.isCall || s.roleClass == .emergency || s.isVoiceInput)
        sessions[id] = s
        activeSessions.insert(id)
        if !s.mixable {
            activeNonMixable.insert(id)
            // Told `begin` while it was mixable (a muted feed, another category), and now it takes the audio.
            hintNoLongerApplies(id)
        }
        touch(id)
        markStreamsDirty(of: id)
        cancelLinger(id)
        interruptOthers(for: id)
        setDucker(id, s.ducksOthers)
        if s.mixable { pendingHintBegin.insert(id) }
        return nil
    }

    /// A voice prompt or an alarm that a call spared and that is neither any more is interrupted by the call, as it
    /// would have been when the call began.
    mutating func stopSparingCalls(_ id: SessionID, spared: Bool) {
        guard spared, let s = sessions[id], s.active, !sparesCalls(s), let call = activeCall(excluding: id) else {
            return
        }
        interrupt(id, reason: .call, by: call)
    }

    /// What every activation lifts: the session's wait for activation, and its streams' route silencing; an
    /// owner's `SetActive(true)` also releases the privacy hold on its record streams (§3).
    mutating func liftActivationHolds(_ id: SessionID, byOwner: Bool) {
        guard var s = sessions[id] else { return }
        if s.awaitingActivation && !s.interrupted {
            s.awaitingActivation = false
            sessions[id] = s
        }
        for sid in s.playbackStreams where streams[sid]?.routeSilenced == true {
            streams[sid]?.routeSilenced = false
            markDirty(sid)
        }
        if byOwner {
            for sid in s.recordStreams where streams[sid]?.recordHeld == true {
                streams[sid]?.recordHeld = false
                markDirty(sid)
            }
        }
        markStreamsDirty(of: id)
    }

    /// Implicit players audiod has just told to resume (`Play` sent, `Playing` not yet heard): inactive, but they
    /// take the audio back the moment they play. An activation that would interrupt them if they were active
    /// interrupts them now (measured: a dictation starting 20 ms after audiod resumed the music it had paused).
    /// `mixable`: a mixable one too (an emergency takes the audio from those as well).
    func resuming(excluding id: SessionID?, mixable: Bool = false) -> [SessionID] {
        var found: Set<SessionID> = []
        for p in players.values where p.playInFlight && awaitsAnswer(p) {
            guard let sid = implicitByKey[.process(p.info.pid)], sid != id, let s = sessions[sid], !s.active,
                !s.interrupted, mixable || !s.mixable
            else { continue }
            found.insert(sid)
        }
        return found.sorted()
    }

    /// §2.2 and §2.3: whom an active session interrupts.
    mutating func interruptOthers(for id: SessionID) {
        // An output-muted session interrupts nobody, spoken audio neither: nothing of it is heard (SPEC §5).
        guard let s = sessions[id], s.active, !s.mutedFeed else { return }
        if s.isCall || s.roleClass == .emergency || !s.mixable {
            for other in resuming(excluding: id, mixable: s.isCall || s.roleClass == .emergency) {
                interrupt(other, reason: s.isCall ? .call : .default, by: id)
            }
        }
        if s.isCall {
            // A voice prompt or an alarm plays on, ducked under the call (SPEC §7 step 5).
            for other in activeSessions.sorted() where other != id && !sparesCalls(other) {
                interrupt(other, reason: .call, by: id)
            }
        } else if s.roleClass == .emergency {
            // An emergency takes the audio from everyone but a call, mixable or not; they may resume after it.
            for other in activeSessions.sorted() where other != id {
                guard let o = sessions[other], !o.isCall, !isPlatformCall(other) else { continue }
                interrupt(other, reason: .default, by: id)
            }
        } else if !s.mixable {
            for other in activeNonMixable.sorted() where other != id {
                interrupt(other, reason: .default, by: id)
            }
        }
        if s.configuration.has(.interruptSpokenAudioAndMixWithOthers) {
            for other in activeSessions.sorted() where other != id {
                if sessions[other]?.configuration.mode == .spokenAudio {
                    interrupt(other, reason: .default, by: id, spokenOnly: true)
                }
            }
        }
    }

    /// Takes the audio from a session: it becomes inactive and interrupted at once, its streams are silenced,
    /// an implicit session's playing MPRIS players are paused.
    mutating func interrupt(
        _ id: SessionID, reason: InterruptionReason, by interrupter: SessionID?, spokenOnly: Bool = false
    ) {
        // Nothing interrupts the platform call, an alarm or an emergency; no other session's activation interrupts
        // an output-muted one (SPEC §5: it plays nothing anyone hears), though sleep, the lock or a route change do.
        guard var s = sessions[id], !isPlatformCall(id), !s.isAlert, !(s.mutedFeed && interrupter != nil) else {
            return
        }
        // The session taking over in a handover is interrupted: its handover ends. Whoever took primary audio
        // (or the session that counted as it) from it takes over in turn, until its own first sound (§5).
        if handover == id { endHandover() }
        if id == primary, let interrupter, interrupter != id { beginHandover(interrupter) }
        let wasActive = s.active
        if s.interrupter != nil { untie(id) }
        s = sessions[id] ?? s
        s.active = false
        s.interrupted = true
        s.interrupter = interrupter
        s.interruptionReason = reason
        s.spokenOnly = spokenOnly
        s.awaitingActivation = true
        sessions[id] = s
        if let interrupter { tiedTo[interrupter, default: []].insert(id) }
        if wasActive { dropFromActiveSets(id) }
        cancelLinger(id)
        // A capture is held (§3 Privacy) — but a voice-input app's: one that loses the audio stops holding it, and
        // its microphone is left alone (SPEC §7).
        if !s.isVoiceInput {
            for sid in s.recordStreams {
                streams[sid]?.recordHeld = true
                markDirty(sid)
            }
        }
        markStreamsDirty(of: id)
        touch(id)
        if s.isImplicit { pausePlayers(of: id, resumable: reason != .routeDisconnected) }
        emit(id, .interruptionBegan(reason, interrupter: interrupter))
        // A voice-input app that loses the audio resumes nothing it paused, then or later: whoever took the audio
        // from it takes them over (they resume when it ends with notify); after sleep or the microphone switch,
        // which nobody ends with notify, they are told they may not.
        if s.isVoiceInput {
            if let interrupter, sessions[interrupter] != nil {
                retie(from: id, to: interrupter)
            } else {
                resolveTies(of: id, notify: false, cause: .implicitEnded, interrupterWasCall: false)
            }
        }
    }

    mutating func dropFromActiveSets(_ id: SessionID) {
        activeSessions.remove(id)
        activeNonMixable.remove(id)
        setDucker(id, false)
    }

    mutating func setDucker(_ id: SessionID, _ ducks: Bool) {
        let strong = ducks && sessions[id]?.configuration.mode == .voicePrompt
        var changed = ducks ? activeDuckers.insert(id).inserted : activeDuckers.remove(id) != nil
        changed = (strong ? strongDuckers.insert(id).inserted : strongDuckers.remove(id) != nil) || changed
        if changed { markAllPlaybackDirty() }
    }

    /// The sessions tied to `id` are tied to `holder` instead.
    mutating func retie(from id: SessionID, to holder: SessionID) {
        guard let tied = tiedTo.removeValue(forKey: id) else { return }
        for other in tied.sorted() where other != holder && sessions[other]?.interrupter == id {
            sessions[other]?.interrupter = holder
            tiedTo[holder, default: []].insert(other)
        }
    }

    mutating func untie(_ id: SessionID) {
        guard let i = sessions[id]?.interrupter else { return }
        tiedTo[i]?.remove(id)
        if tiedTo[i]?.isEmpty == true { tiedTo[i] = nil }
        sessions[id]?.interrupter = nil
    }

    // MARK: Deactivation and resumption (§3)

    /// Deactivates a session (if active) and then resolves the sessions tied to it with its notify flag.
    mutating func deactivate(_ id: SessionID, notify: Bool, cause: DeactivationCause) {
        guard var s = sessions[id] else { return }
        // Primary audio now, or the last primary audio with none since (its stream ended just before).
        let wasPrimary = primary == id || (primary == nil && lastPrimary == id)
        if handover == id { endHandover() }
        if s.active {
            s.active = false
            s.notifiesAtEnd = false
            sessions[id] = s
            dropFromActiveSets(id)
            cancelLinger(id)
            markStreamsDirty(of: id)
            touch(id)
        }
        let resumed = resolveTies(of: id, notify: notify, cause: cause, interrupterWasCall: s.isCall)
        // Primary audio hands over to a session it interrupted that may resume now (§5): it counts as primary
        // until its first sound, so nothing secondary plays in between.
        if wasPrimary, let taker = resumed.filter(mayTakeOver).max() { beginHandover(taker) }
    }

    /// Ends the interruptions tied to `id`; returns the sessions told `InterruptionEnded(should_resume = true)`.
    @discardableResult
    mutating func resolveTies(of id: SessionID, notify: Bool, cause: DeactivationCause, interrupterWasCall: Bool)
        -> [SessionID]
    {
        guard let tied = tiedTo.removeValue(forKey: id) else { return [] }
        var resumed: [SessionID] = []
        for other in tied.sorted() {
            guard sessions[other]?.interrupter == id else { continue }
            if waitsForHolder(other, otherThan: id) { continue }
            guard let o = sessions[other] else { continue }
            let shouldResume = notify || o.spokenOnly
            let mayPlay = o.spokenOnly || (notify && (cause != .ownerVanished || interrupterWasCall))
            endInterruption(other, shouldResume: shouldResume, playPlayers: shouldResume && mayPlay)
            if shouldResume { resumed.append(other) }
        }
        return resumed
    }

    // MARK: Handovers (§5)

    /// Whether a session can hold primary audio through a handover: one that may become primary audio by
    /// playing — non-mixable, able to play (not `record`), not interrupted.
    func mayTakeOver(_ id: SessionID) -> Bool {
        guard let s = sessions[id] else { return false }
        return !s.mixable && s.configuration.category != .record && !s.interrupted
    }

    mutating func beginHandover(_ id: SessionID) {
        guard mayTakeOver(id) else { return }
        if let old = handover, old != id { out.timers.append(.cancelTimer(.handover(old))) }
        handover = id
        out.timers.append(.scheduleTimer(.handover(id), afterNanoseconds: settings.lingerNanoseconds))
    }

    mutating func endHandover() {
        guard let h = handover else { return }
        handover = nil
        out.timers.append(.cancelTimer(.handover(h)))
    }

    /// Ends an interruption. An explicit session stays silenced until its SetActive(true); an implicit one is
    /// heard again on `should_resume`, and one without MPRIS even without it: it cannot be paused, and keeping it
    /// muted would be silence the user cannot undo (§7). `playPlayers`: the players audiod paused are played again.
    mutating func endInterruption(_ id: SessionID, shouldResume: Bool, playPlayers: Bool) {
        guard var o = sessions[id], o.interrupted else { return }
        if o.isImplicit, shouldResume || players(ofImplicit: o).isEmpty { o.awaitingActivation = false }
        o.interrupted = false
        o.interrupter = nil
        o.spokenOnly = false
        sessions[id] = o
        if o.isImplicit {
            if playPlayers { resumePlayers(of: id) } else { forgetPausedPlayers(of: id) }
        }
        markStreamsDirty(of: id)
        touch(id)
        emit(id, .interruptionEnded(shouldResume: shouldResume))
    }

    /// §3: someone other than `gone` holds the audio now and would have interrupted this session too — it is tied
    /// to them and waits, instead of hearing that its interruption ended.
    mutating func waitsForHolder(_ id: SessionID, otherThan gone: SessionID? = nil) -> Bool {
        guard let o = sessions[id], let h = holder(excluding: id), h != gone, let hs = sessions[h],
            hs.isCall || !o.mixable
        else { return false }
        sessions[id]?.interrupter = h
        tiedTo[h, default: []].insert(id)
        return true
    }

    /// Removes a session: its streams go to whoever owns them now (and lose the silencing it caused).
    mutating func removeSession(_ id: SessionID) {
        // The caller has deactivated it, which resolved the sessions tied to it; it may itself be tied to someone.
        untie(id)
        heldAtConnection.remove(id)
        if handover == id { endHandover() }
        if lastPrimary == id { lastPrimary = nil }
        guard let s = sessions[id] else { return }
        cancelLinger(id)
        let owned = s.playbackStreams.union(s.recordStreams)
        sessions[id] = nil
        if let key = s.implicitKey {
            if implicitByKey[key] == id { implicitByKey[key] = nil }
        } else {
            explicitByPid[s.pid]?.remove(id)
            if explicitByPid[s.pid]?.isEmpty == true { explicitByPid[s.pid] = nil }
        }
        silentModeSessions.remove(id)
        ambientSessions.remove(id)
        sessionsWithAudio.remove(id)
        activeSessions.remove(id)
        activeNonMixable.remove(id)
        strongDuckers.remove(id)
        if activeDuckers.remove(id) != nil { markAllPlaybackDirty() }
        touched.remove(id)
        published[id] = nil
        out.removed.append(id)
        for sid in owned { streams[sid]?.session = nil }
        // Its audible streams are nobody's until `reassignOwnership` attaches them (which moves each one's count
        // from nobody to its new owner). Left on the removed session, the count went below zero for nobody, and no
        // session was ever the only audible one again: OtherAudioPlaying stopped being announced.
        sessionlessAudible += s.audibleCount
        // Primary audio is left to the settle pass (`updatePrimary`): it ends the hint and re-decides the ambient
        // streams the removed session's primary audio silenced. Cleared here, those stayed muted.
        reassignOwnership(of: owned)
    }

    // MARK: Helpers

    mutating func emit(_ id: SessionID, _ signal: Signal) {
        out.signals.append(.signal(id, signal))
    }

    mutating func touch(_ id: SessionID) { touched.insert(id) }

    mutating func reindexCategory(_ id: SessionID) {
        guard let s = sessions[id] else { return }
        if s.configuration.category.obeysSilentMode {
            silentModeSessions.insert(id)
        } else {
            silentModeSessions.remove(id)
        }
        if s.configuration.category == .ambient { ambientSessions.insert(id) } else { ambientSessions.remove(id) }
    }

    func view(_ s: SessionState) -> SessionView {
        SessionView(
            id: s.id, isImplicit: s.isImplicit || isPlatformCall(s.id), applicationName: s.applicationName,
            processID: s.pid,
            configuration: s.configuration, active: s.active, interrupted: s.interrupted,
            secondaryAudioShouldBeSilencedHint: primary != nil && primary != s.id,
            otherAudioPlaying: totalAudible - s.audibleCount > 0,
            handlesSecondaryAudio: s.handlesSecondaryAudio,
            prefersNoInterruptionsFromSystemAlerts: s.prefersNoInterruptions,
            streams: s.playbackStreams.map(\.index).sorted(),
            recordStreams: s.recordStreams.map(\.index).sorted(),
            identity: identity(s), outputMuted: s.outputMuted)
    }

    /// The `Identity` of a session: an explicit one names itself; an implicit one is who its streams' profile says.
    func identity(_ s: SessionState) -> SessionIdentity {
        if let pc = platformCall, pc.session == s.id {
            return SessionIdentity(
                appID: pc.info.appID ?? "platform-call", source: "platform", desktopEntry: "",
                categoryReason: .platformCall)
        }
        guard s.isImplicit else {
            return SessionIdentity(
                appID: s.applicationName, source: "explicit", desktopEntry: "", categoryReason: .explicit)
        }
        let p = profile(of: s)
        let name = p?.id
        return SessionIdentity(
            appID: name?.name ?? s.applicationName, source: name?.source.rawValue ?? "process",
            desktopEntry: p?.entry?.path ?? "", categoryReason: s.categoryReason)
    }
}
