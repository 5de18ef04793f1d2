// Streams: ownership (docs/API.md "Stream ownership"), what the user did versus what audiod did (§8), implicit
// sessions (§7), MPRIS players, route changes (§6), and the settle pass that turns decisions into effects.

extension Engine {
    // MARK: Ownership

    /// The explicit session that owns a stream with this chain and tag: the tag wins, then the nearest
    /// ancestor-or-self pid with a session (the newest on a tie).
    func explicitOwner(chain: [UInt32], tag: UInt64?) -> SessionID? {
        if let tag, let s = sessions[SessionID(tag)], !s.isImplicit { return s.id }
        for pid in chain {
            guard let candidates = explicitByPid[pid] else { continue }
            if let newest = candidates.filter({ sessions[$0]?.ownsStreamsByPid == true }).max() { return newest }
        }
        return nil
    }

    func implicitKey(chain: [UInt32], applicationName: String, identity: String? = nil) -> ImplicitKey? {
        for pid in chain where playersByPid[pid]?.isEmpty == false { return .process(pid) }
        if let pid = chain.first { return .process(pid) }
        if let identity { return .identity(identity) }
        return .application(applicationName)
    }

    /// The session a stream belongs to now, making its implicit session if needed. a11y streams and streams of
    /// a process that has exited belong to none.
    mutating func owner(of st: StreamState, processGone: Bool) -> SessionID? {
        if st.isA11y || settings.decidesNothing { return nil }
        if let call = platformCallOwner(st) { return call }
        if let s = explicitOwner(chain: st.info.processChain, tag: st.info.sessionTag) { return s }
        if processGone { return nil }
        guard
            let key = implicitKey(
                chain: st.info.processChain, applicationName: st.info.applicationName, identity: st.info.identity)
        else {
            return nil
        }
        if let existing = implicitByKey[key] { return existing }
        let id = allocateSessionID()
        let pid: UInt32
        if case .process(let p) = key { pid = p } else { pid = 0 }
        let s = SessionState(
            id: id, implicitKey: key, lifetime: .process, pid: pid, applicationName: st.info.applicationName,
            configuration: settings.defaultConfiguration)
        sessions[id] = s
        implicitByKey[key] = id
        reindexCategory(id)
        out.added.append(id)
        return id
    }

    /// Re-evaluates who owns these streams and moves the ones whose owner changed.
    mutating func reassignOwnership(of ids: Set<StreamID>) {
        var emptied: Set<SessionID> = []
        var changedImplicit: Set<SessionID> = []
        for sid in ids.sorted() {
            guard let st = streams[sid] else { continue }
            let new = owner(of: st, processGone: goneProcesses.contains(st.info.pid ?? 0))
            guard new != st.session else { continue }
            if let old = st.session {
                detach(sid, from: old)
                if let o = sessions[old] {
                    if o.isImplicit { changedImplicit.insert(old) }
                    if o.isImplicit && !o.hasStreams { emptied.insert(old) }
                }
            }
            // The silencing its old session caused is lifted — except a record stream's privacy hold (§3).
            streams[sid]?.routeSilenced = false
            if let new {
                attach(sid, to: new)
                if sessions[new]?.isImplicit == true { changedImplicit.insert(new) }
            }
            markDirty(sid)
        }
        // An implicit session whose last stream went to another session ends at once (§7).
        for id in emptied.sorted() {
            guard let s = sessions[id], !s.hasStreams else { continue }
            deactivate(id, notify: s.endsWithNotify, cause: .implicitEnded)
            if players(ofImplicit: s).isEmpty { removeSession(id) }
            changedImplicit.remove(id)
        }
        for id in changedImplicit.sorted() { recomputeImplicitCategory(id) }
    }

    mutating func attach(_ sid: StreamID, to id: SessionID) {
        guard var st = streams[sid], let s = sessions[id] else { return }
        st.session = id
        // In place: a copy of the session taken out and put back would copy its stream sets on every attach.
        if sid.kind == .playback {
            sessions[id]?.playbackStreams.insert(sid)
        } else {
            sessions[id]?.recordStreams.insert(sid)
        }
        if s.isImplicit && s.applicationName.isEmpty { sessions[id]?.applicationName = st.info.applicationName }
        if st.audible {
            adjustAudible(nil, -1)
            adjustAudible(id, +1)
        }
        streams[sid] = st
        if st.capturing { adjustCapturing(id, +1) }
        touch(id)
    }

    mutating func detach(_ sid: StreamID, from id: SessionID) {
        guard var st = streams[sid] else { return }
        sessions[id]?.playbackStreams.remove(sid)
        sessions[id]?.recordStreams.remove(sid)
        st.session = nil
        if st.audible {
            adjustAudible(id, -1)
            adjustAudible(nil, +1)
        }
        streams[sid] = st
        if st.capturing { adjustCapturing(id, -1) }
        touch(id)
        if let s = sessions[id], s.isImplicit, !s.hasStreams { scheduleLingerIfIdle(id) }
    }

    func players(ofImplicit s: SessionState) -> Set<PlayerID> {
        guard case .process(let pid) = s.implicitKey else { return [] }
        return playersByPid[pid] ?? []
    }

    // MARK: Stream events

    mutating func streamAppeared(_ info: StreamInfo) {
        // PipeWire shows a linked stream corked until its node runs, a graph cycle or more after the link: what a
        // call's stream silenced ahead stays silenced until it runs (`streamChanged`), ends or is overdue, or the
        // music would be given back between the link and the call's first sample and heard over it.
        if !(info.corked && callsAboutToSound[info.id] != nil) { withdrawAnnouncement(info.id) }
        if streams[info.id] != nil { return streamChanged(info) }
        // A dead process makes no new streams: one that appears at a pid that exited is a new process the kernel
        // gave the pid again, and it is policed like any other.
        if let pid = info.pid { goneProcesses.remove(pid) }
        var st = StreamState(info: info, session: nil, userMuted: info.muted, userVolume: info.volume)
        st.volumeAtOnce = true
        adopt(&st, info)
        st.info.leftByPolicy = nil
        streams[info.id] = st
        index(info.id, chain: info.processChain)
        reassignOwnership(of: [info.id])
        markDirty(info.id)
        // A new uncorked stream is the app's own action: it may activate its explicit session (§7). One that was
        // already there when audiod connected is not new.
        guard let owner = streams[info.id]?.session else { return }
        if !info.foundAtConnection {
            if wouldBeAudible(info.id) { autoActivate(owner) }
        } else if sessions[owner]?.isImplicit == true {
            foundThisStep.insert(owner)
        }
    }

    /// docs/POLICY.md §7 "A call about to sound". PipeWire lists a new stream ~1.5 ms after the app asks for it, and
    /// mixes its first samples only once WirePlumber has linked it, ~5 ms later; deciding at the link leaves the
    /// call and the music heard together for a graph cycle whenever the link lands late in one. Until the link the
    /// stream shows corked, silent and on no device whatever the app asked, so nothing is decided on it: no session
    /// is made, activated or interrupted and nobody is told. Only the streams it would silence if it played are
    /// muted now — found by deciding on a copy of the engine as if it did — and only for a call's stream: a
    /// softphone creates its stream to play at once, while media libraries create theirs corked and start them
    /// later or never (cubeb does), which would silence the music for nothing. The link brings the real decision
    /// (`streamAppeared`, or the first report that it runs if it links corked), which keeps the mutes or lifts them;
    /// so do the stream's end and `callLinkOverdue`.
    mutating func streamAnnounced(_ info: StreamInfo) {
        guard streams[info.id] == nil, info.id.kind == .playback, callsAboutToSound[info.id] == nil else { return }
        var probe = self
        var playing = info
        playing.corked = false
        playing.muted = false
        playing.volume = .normal
        playing.leftByPolicy = nil
        _ = probe.handle(.streamAppeared(playing), at: now)
        guard let owner = probe.streams[info.id]?.session, probe.sessions[owner]?.isCall == true else { return }
        let ahead = Set(
            probe.streams.compactMap { sid, st -> StreamID? in
                // Sounds that must not mix: a capture the call would hold is decided at the link.
                // A stream fading out (silent mode, the lock) is still heard: the call's sound races the fade.
                guard sid != info.id, sid.kind == .playback, st.policyMute, let mine = streams[sid],
                    !mine.policyMute
                        || (mine.fade?.silences == true && !mine.appliedMute && probe.silencing(st) == .racing)
                else { return nil }
                return sid
            })
        guard !ahead.isEmpty else { return }
        callsAboutToSound[info.id] = ahead
        for sid in ahead { markDirty(sid) }
        out.timers.append(.scheduleTimer(.callLinkOverdue(info.id), afterNanoseconds: settings.callLinkWaitNanoseconds))
    }

    /// The announced call stream whose link the stream is muted ahead of, if any.
    /// Only while the stream belongs to a session that policy may silence: one that has since gone to the
    /// platform's call, or to no session, or that rings an alarm, is never silenced (`policyMute`), ahead of a call
    /// or otherwise.
    func silencedAhead(_ sid: StreamID) -> StreamID? {
        guard !callsAboutToSound.isEmpty, let owner = streams[sid]?.session, let s = sessions[owner],
            !isPlatformCall(owner), !s.isAlert
        else { return nil }
        return callsAboutToSound.first { $0.value.contains(sid) }?.key
    }

    /// The announced call stream linked, ended or overdue: its own decision, if any, takes over from the mutes ahead.
    mutating func withdrawAnnouncement(_ call: StreamID) {
        guard let ahead = callsAboutToSound.removeValue(forKey: call) else { return }
        for sid in ahead { markDirty(sid) }
        out.timers.append(.cancelTimer(.callLinkOverdue(call)))
    }

    mutating func streamChanged(_ info: StreamInfo) {
        guard var st = streams[info.id] else { return streamAppeared(info) }
        if !info.corked { withdrawAnnouncement(info.id) }
        // Values audiod left are its own before anything is taken for the user's.
        adopt(&st, info)
        var info = info
        info.leftByPolicy = nil
        let old = st.info
        let wasAudible = wouldBeAudible(info.id)
        let tolerance = settings.volumeTolerance

        // Tell the user's change from audiod's own (§8): audiod's mute shows as muted, its volume as the one it
        // set; anything else the server reports is the user's (or the app's) and becomes their value.
        var userUnmuted = false
        if st.appliedMute {
            if !info.muted {
                st.appliedMute = false
                st.userMuted = false
                userUnmuted = true
            }
        } else if st.userMuted != info.muted {
            st.userMuted = info.muted
            userUnmuted = !info.muted
        }
        if let applied = st.appliedVolume {
            if !info.volume.isClose(to: applied, tolerance: tolerance) {
                st.userVolume = info.volume
                st.appliedVolume = nil
                // The user's volume ends a fade; a duck still due goes on top of it at once.
                if st.fade != nil { st.writeUserVolume = true }
                st.fade = nil
                st.volumeAtOnce = true
            }
        } else {
            st.userVolume = info.volume
        }
        if info.device != old.device {
            st.previousDevice = old.device
            st.movedAt = now
        }
        // The user unmuting a stream muted for its output-muted session (SPEC §5): the session takes the audio.
        let unmutedForApp = userUnmuted && st.mutedForApp != nil
        if unmutedForApp { st.mutedForApp = nil }
        if userUnmuted && st.kind == .record {
            // The user's unmute lifts the privacy hold, unless an explicit session's interruption silences it
            // again at once: then audiod's mute stands and only the owner's activation may lift it.
            let reapplied = st.session.flatMap { sessions[$0] }.map { !$0.isImplicit && $0.heldSilent } ?? false
            if !reapplied { st.recordHeld = false }
        }
        st.info = info
        streams[info.id] = st
        markDirty(info.id)

        if info.processChain != old.processChain {
            unindex(info.id, chain: old.processChain)
            index(info.id, chain: info.processChain)
        }
        let ownershipInputsChanged =
            info.processChain != old.processChain || info.sessionTag != old.sessionTag || info.role != old.role
            || info.applicationName != old.applicationName || info.applicationID != old.applicationID
            || info.binary != old.binary
        // What the voice-call rule looks at (SPEC §7 step 3): whether the app plays and whether it captures.
        let callInputsChanged =
            info.corked != old.corked || info.muted != old.muted || info.volume.isSilent != old.volume.isSilent
            || info.fromMonitor != old.fromMonitor || info.app != old.app
        if ownershipInputsChanged {
            reassignOwnership(of: [info.id])
        }
        if ownershipInputsChanged || callInputsChanged,
            let s = streams[info.id]?.session, sessions[s]?.isImplicit == true
        {
            recomputeImplicitCategory(s)
        }
        guard let owner = streams[info.id]?.session, let s = sessions[owner] else { return }

        if info.device != old.device { announceNewDevice(info.device, previous: old.device, to: owner) }

        if unmutedForApp && s.outputMuted {
            userUnmutedOutput(owner)
        } else if s.isImplicit {
            // The user takes precedence over interruptions and route changes of apps that never talk to us (§7).
            if userUnmuted && (s.heldSilent || st.routeSilenced) {
                userActivate(owner)
                // Unmuted, but not heard or capturing (corked, a monitor): the linger ends it as it ends any.
                if sessions[owner]?.active == true { scheduleLingerIfIdle(owner) }
            }
        } else if !ownershipInputsChanged && !wasAudible && wouldBeAudible(info.id) {
            autoActivate(owner)
        }
    }

    /// Takes what audiod left on a stream (`StreamInfo.leftByPolicy`) as applied by itself, where the stream still
    /// shows it and audiod holds nothing of its own there: the settle pass then keeps it or puts the user's back.
    func adopt(_ st: inout StreamState, _ info: StreamInfo) {
        guard let left = info.leftByPolicy else { return }
        if left.mute, info.muted, !st.appliedMute {
            st.appliedMute = true
            st.userMuted = false
        }
        if let v = left.volume, let user = left.userVolume, st.appliedVolume == nil,
            user.channels.count == info.volume.channels.count,
            info.volume.isClose(to: v, tolerance: settings.volumeTolerance)
        {
            st.appliedVolume = info.volume
            st.userVolume = user
        }
    }

    mutating func streamRemoved(_ id: StreamID) {
        withdrawAnnouncement(id)
        for (call, ahead) in callsAboutToSound where ahead.contains(id) { callsAboutToSound[call]?.remove(id) }
        guard let st = streams[id] else { return }
        fading.remove(id)
        if let owner = st.session { detach(id, from: owner) }
        if st.audible { adjustAudible(nil, -1) }
        screenReader(id, heard: false)
        unindex(id, chain: st.info.processChain)
        // An exited pid is remembered only while a listed stream has it in its chain: an ancestor that exited
        // before its children's streams ended would otherwise stay forever.
        for pid in st.info.processChain where streamsByAncestor[pid] == nil { goneProcesses.remove(pid) }
        streams[id] = nil
        dirty.remove(id)
        everDirty.remove(id)
        if let owner = st.session, sessions[owner]?.isImplicit == true { recomputeImplicitCategory(owner) }
    }

    mutating func processExited(_ pid: UInt32) {
        for id in (explicitByPid[pid] ?? []).sorted() {
            guard let s = sessions[id] else { continue }
            if s.lifetime == .process {
                ownerVanished(id)
            } else {
                sessions[id]?.ownsStreamsByPid = false
            }
        }
        // Streams of the dead process that are still listed belong to nobody until the server drops them, so that
        // they cannot start a new implicit session.
        goneProcesses.insert(pid)
        if let id = implicitByKey[.process(pid)], let s = sessions[id] {
            deactivate(id, notify: s.endsWithNotify, cause: .implicitEnded)
            removeSession(id)
        }
        reassignOwnership(of: streamsByAncestor[pid] ?? [])
        if streamsByAncestor[pid] == nil { goneProcesses.remove(pid) }
    }

    // MARK: Activation from the world

    /// An explicit session that is inactive and not waiting after an interruption activates when one of its
    /// streams turns audible by the app's or the user's own action (§7).
    mutating func autoActivate(_ id: SessionID) {
        guard let s = sessions[id], !s.isImplicit, !s.active, !s.interrupted, !s.awaitingActivation else { return }
        if activate(id, byOwner: false) != nil, let call = activeCall(excluding: id) {
            interrupt(id, reason: .call, by: call)
        }
    }

    /// The user pressed Play or unmuted a silenced stream of an implicit app: that is an activation like any
    /// other; refused during a call, it is silenced again and tied to the call.
    mutating func userActivate(_ id: SessionID) {
        if activate(id, byOwner: false) != nil, let call = activeCall(excluding: id) {
            interrupt(id, reason: .call, by: call)
        }
    }

    // MARK: Implicit sessions (§7)

    mutating func recomputeImplicitCategories() {
        for id in implicitByKey.values.sorted() { recomputeImplicitCategory(id) }
    }

    mutating func recomputeImplicitCategory(_ id: SessionID) {
        // A session whose streams are all gone keeps what it was: a call that hangs up still ends as a call.
        guard let s = sessions[id], s.isImplicit, s.hasStreams else { return }
        updateVoiceCall(id)
        guard let s = sessions[id] else { return }
        let (config, roleClass, reason) = implicitConfiguration(s)
        if s.categoryReason != reason {
            sessions[id]?.categoryReason = reason
            touch(id)
        }
        if s.roleClass != roleClass {
            sessions[id]?.roleClass = roleClass
            markStreamsDirty(of: id, kind: .playback)
            // An alarm is a ducker that spares calls: the ducks it causes are judged again.
            if s.active && s.configuration.ducksOthers { markAllPlaybackDirty() }
            // A ringing alarm that turns into an emergency takes the audio from everyone now, as if it began so.
            if roleClass == .emergency && s.active { interruptOthers(for: id) }
            // An app interrupted before it rang an alarm is not interrupted any more: nothing holds an alarm back.
            // (It is told without `should_resume`: the alarm rings by itself, the app need not do anything.)
            if roleClass == .alarm || roleClass == .emergency, s.interrupted {
                untie(id)
                endInterruption(id, shouldResume: false, playPlayers: false)
                sessions[id]?.awaitingActivation = false
                crossings.insert(id)
            }
        }
        defer {
            // Voice input began or ended with the rule: whether the session holds the audio is judged again.
            if let now = sessions[id], now.holdsAudio != s.holdsAudio { crossings.insert(id) }
            if let now = sessions[id], now.active {
                // It became a call, an emergency or voice input while active: it ends as one.
                if now.endsWithNotify { sessions[id]?.notifiesAtEnd = true }
                // An alarm rang through sleep and an emergency; an app that is no alarm any more sleeps, and gives
                // way to the emergency, like the rest.
                if s.isAlert, !now.isAlert {
                    if sleeping {
                        interruptForPlatform(id, .suspend)
                    } else if !now.isCall,
                        let e = activeSessions.sorted().first(where: {
                            $0 != id && sessions[$0]?.roleClass == .emergency
                        })
                    {
                        interrupt(id, reason: .default, by: e)
                    }
                }
            }
            stopSparingCalls(id, spared: sparesCalls(s))
        }
        guard config != s.configuration else { return }
        if s.active, let call = refusingCall(for: config, excluding: id) {
            sessions[id]?.configuration = config
            reindexCategory(id)
            interrupt(id, reason: .call, by: call)
        } else {
            _ = changeConfiguration(of: id, to: config)
        }
        // Held at connection, it turns out to be a call: it takes the audio, as a call found then does.
        if heldAtConnection.remove(id) != nil, let now = sessions[id], now.isCall, now.interrupted,
            now.hasStreams
        {
            userActivate(id)
        }
    }

    /// The voice-call rule's two conditions (SPEC §7 step 3) for an implicit session: *capturing* — an uncorked
    /// record stream from a source that is not a monitor — while *playing* — a playback stream the app plays
    /// (uncorked, not muted or silent by its user; MPRIS does not count here, so a browser's WebRTC call counts).
    func capturesWhilePlaying(_ s: SessionState) -> Bool {
        var capturing = false
        var playing = false
        for id in s.recordStreams where !capturing {
            if let st = streams[id], !st.info.corked, !st.info.fromMonitor { capturing = true }
        }
        guard capturing else { return false }
        for id in s.playbackStreams where !playing {
            if let st = streams[id], !st.info.corked, !st.userMuted, !st.userVolume.isSilent { playing = true }
        }
        return playing
    }

    /// A session becomes a call the moment it captures while playing, and stays one until it has done neither
    /// together for the linger (then `timerFired(.voiceCallEnd)` ends it).
    mutating func updateVoiceCall(_ id: SessionID) {
        guard let s = sessions[id], s.isImplicit else { return }
        if capturesWhilePlaying(s) {
            sessions[id]?.voiceCall = true
            sessions[id]?.voiceCallEndScheduled = false
            // The timer is cancelled too: one that fires anyway finds `voiceCallEndScheduled` false.
            out.timers.append(.cancelTimer(.voiceCallEnd(id)))
        } else if s.voiceCall, !s.voiceCallEndScheduled {
            sessions[id]?.voiceCallEndScheduled = true
            out.timers.append(.scheduleTimer(.voiceCallEnd(id), afterNanoseconds: settings.lingerNanoseconds))
        }
    }

    /// Game evidence for an implicit session (SPEC §7 step 2); nil when there is none.
    func gameEvidence(_ s: SessionState, roles: Set<String>, profile: AppProfile?) -> CategoryReason.GameEvidence? {
        if roles.contains("game") { return .role }
        if let e = profile?.entry, e.isGame { return .entry(e) }
        if !gameRegistrations.isEmpty {
            for id in s.allStreams {
                guard let info = streams[id]?.info else { continue }
                // The nearest registered process decides: itself, or what it started that is the same app.
                guard let at = info.processChain.firstIndex(where: { gameRegistrations[$0] != nil }),
                    let reg = gameRegistrations[info.processChain[at]]
                else { continue }
                if at == 0 || reg.covers(info.app) { return .gameMode(reg.pid) }
            }
        }
        if let steam = profile?.steamGame { return .steam(steam) }
        return nil
    }

    /// The app's profile, from the first of the session's streams that has one: an implicit session's streams come
    /// from one app, so they carry the same profile. Not sorted, not compared: this runs on every stream event of
    /// the session, which may hold a thousand streams.
    func profile(of s: SessionState) -> AppProfile? {
        for id in s.playbackStreams { if let p = streams[id]?.info.app { return p } }
        for id in s.recordStreams { if let p = streams[id]?.info.app { return p } }
        return nil
    }

    /// SPEC §7, first match wins: an app rule (D-Bus over config; on the strongest name), game evidence, the
    /// voice-call rule, an MPRIS player, the highest-priority media role, record-only, a media player's desktop
    /// entry, the default. With the sentence a person reads.
    func implicitConfiguration(_ s: SessionState) -> (Configuration, roleClass: RoleClass, reason: CategoryReason) {
        // Runs on every stream event of the session (a game may hold a hundred streams): one pass over them, and
        // none for rules when there are none.
        let profile = profile(of: s)
        for (rules, source) in [(busRules, CategoryReason.RuleSource.bus), (configRules, .config)] where !rules.isEmpty
        {
            // The rule on the strongest name wins: the profile's names in order, then what the streams say.
            var names: [String] = profile?.names.map(\.name) ?? []
            for id in s.allStreams {
                guard let info = streams[id]?.info else { continue }
                names += [info.applicationID, info.binary, info.applicationName].compactMap { $0 }
            }
            for name in names where !name.isEmpty {
                if let rule = rules[name] { return (rule.configuration, .none, .rule(from: source, name: name)) }
            }
        }
        var roles: Set<String> = []
        var owned = 0
        var recording = 0
        for set in [s.playbackStreams, s.recordStreams] {
            for id in set {
                guard let info = streams[id]?.info else { continue }
                owned += 1
                if info.id.kind == .record { recording += 1 }
                if let role = info.role { roles.insert(Self.pulseRole(role)) }
            }
        }
        let call = s.voiceCall || capturesWhilePlaying(s)
        if let game = gameEvidence(s, roles: roles, profile: profile) {
            if call {
                return (
                    Configuration(category: .playAndRecord, mode: .gameChat, options: [.mixWithOthers]), .none,
                    .gameChat(game)
                )
            }
            return (Configuration(category: .ambient), .none, .game(game))
        }
        if call {
            return (Configuration(category: .playAndRecord, mode: .voiceChat), .none, .voiceCall)
        }
        if !players(ofImplicit: s).isEmpty { return (Configuration(category: .playback), .none, .mpris) }
        for tier in Settings.builtInRoles {
            if let role = tier.roles.first(where: roles.contains) {
                // A config entry for `alarm` or `emergency` makes it an ordinary app of that configuration: an alarm
                // that might not mix could not be spared every interruption.
                let configured = settings.roleConfigurations[role]
                let roleClass = configured != nil && tier.roleClass != .systemSound ? .none : tier.roleClass
                return (configured ?? tier.configuration, roleClass, .role(role, configured: false))
            }
        }
        for role in roles.sorted() {
            if let config = settings.roleConfigurations[role] { return (config, .none, .role(role, configured: true)) }
        }
        if owned > 0 && recording == owned {
            return (Configuration(category: .record), .none, .recordOnly)
        }
        if let e = profile?.entry, e.isPlayer {
            return (Configuration(category: .playback), .none, .player(e))
        }
        return (settings.defaultConfiguration, .none, .default)
    }

    /// PipeWire's role names mean their PulseAudio equivalents (SPEC §7 step 5).
    static func pulseRole(_ role: String) -> String {
        switch role {
        case "Communication": "phone"
        case "Movie": "video"
        case "Music": "music"
        case "Game": "game"
        case "Notification": "event"
        case "Accessibility": "a11y"
        case "Navigation": "navigation"
        case "Assistant": "assistant"
        case "Alarm": "alarm"
        case "Emergency": "emergency"
        case "Production": "production"
        case "Test": "test"
        default: role
        }
    }

    mutating func scheduleLingerIfIdle(_ id: SessionID) {
        guard let s = sessions[id], s.isImplicit, !s.lingerScheduled, !s.holdsAudio else { return }
        sessions[id]?.lingerScheduled = true
        out.timers.append(.scheduleTimer(.linger(id), afterNanoseconds: settings.lingerNanoseconds))
    }

    mutating func cancelLinger(_ id: SessionID) {
        guard sessions[id]?.lingerScheduled == true else { return }
        sessions[id]?.lingerScheduled = false
        out.timers.append(.cancelTimer(.linger(id)))
    }

    mutating func gameModeGames(_ games: [UInt32: GameRegistration]) {
        guard games != gameRegistrations else { return }
        let changed = Set(games.keys).union(gameRegistrations.keys).filter { games[$0] != gameRegistrations[$0] }
        gameRegistrations = games
        var affected: Set<SessionID> = []
        for pid in changed {
            for sid in streamsByAncestor[pid] ?? [] {
                if let owner = streams[sid]?.session, sessions[owner]?.isImplicit == true { affected.insert(owner) }
            }
        }
        let emergenciesBefore = affected.filter { sessions[$0]?.roleClass == .emergency }
        for id in affected.sorted() { recomputeImplicitCategory(id) }
        // An emergency made in this change interrupted everyone but the calls; one of those that is no call any
        // more after the same change (an app named a game: its voice chat) gives way to it too. An emergency that
        // was one before interrupts nobody again: what activated beside it since may play.
        for id in affected.sorted()
        where !emergenciesBefore.contains(id) && sessions[id].map({ $0.roleClass == .emergency && $0.active }) == true {
            interruptOthers(for: id)
        }
    }

    mutating func timerFired(_ timer: TimerID) {
        switch timer {
        case .voiceCallEnd(let id):
            guard let s = sessions[id], s.voiceCallEndScheduled else { return }
            sessions[id]?.voiceCallEndScheduled = false
            guard s.voiceCall, !capturesWhilePlaying(s) else { return }
            // A rule decides the category of this app, not the voice-call rule: its capture and its sound end it
            // as they end any session of its category (a dictation that beeped is still dictating).
            if case .rule = s.categoryReason {
                sessions[id]?.voiceCall = false
                return
            }
            // The call is over: the music comes back (deactivation with notify), and if the app still plays it
            // activates again with its new category, judged like any activation.
            sessions[id]?.voiceCall = false
            if s.active { deactivate(id, notify: true, cause: .implicitEnded) }
            recomputeImplicitCategory(id)
            if let now = sessions[id], !now.active, !now.heldSilent,
                now.playbackStreams.contains(where: { wouldBeAudible($0) })
            {
                userActivate(id)
            }
        case .callLinkOverdue(let call):
            withdrawAnnouncement(call)
        case .fadeStep:
            fadeStepped()
        case .handover(let id):
            if handover == id { handover = nil }
        case .linger(let id):
            guard let s = sessions[id], s.lingerScheduled else { return }
            sessions[id]?.lingerScheduled = false
            guard !s.holdsAudio else { return }
            // A call, an emergency or voice input ends with notify (the music comes back after it); any other
            // implicit app without: when someone pauses player B, player A that B took over stays paused.
            if s.active { deactivate(id, notify: s.endsWithNotify, cause: .implicitEnded) }
            if let now = sessions[id], !now.hasStreams, players(ofImplicit: now).isEmpty {
                // Inactive already, but sessions may still be tied to it: deactivation resolves them.
                deactivate(id, notify: now.endsWithNotify, cause: .implicitEnded)
                removeSession(id)
            }
        }
    }

    // MARK: MPRIS players

    mutating func playerAppeared(_ p: PlayerInfo) {
        if let old = players[p.id] {
            if old.info.pid == p.pid { return playerStatusChanged(p.id, p.status) }
            playerRemoved(p.id)
        }
        players[p.id] = PlayerState(info: p)
        playersByPid[p.pid, default: []].insert(p.id)
        playerMembershipChanged(pid: p.pid)
    }

    mutating func playerRemoved(_ id: PlayerID) {
        guard let p = players.removeValue(forKey: id) else { return }
        playersByPid[p.info.pid]?.remove(id)
        if playersByPid[p.info.pid]?.isEmpty == true { playersByPid[p.info.pid] = nil }
        playerMembershipChanged(pid: p.info.pid)
        if let sid = implicitByKey[.process(p.info.pid)], let s = sessions[sid], !s.hasStreams,
            players(ofImplicit: s).isEmpty
        {
            deactivate(sid, notify: s.endsWithNotify, cause: .implicitEnded)
            removeSession(sid)
        }
    }

    mutating func playerMembershipChanged(pid: UInt32) {
        let affected = streamsByAncestor[pid] ?? []
        reassignOwnership(of: affected)
        for sid in affected { markDirty(sid) }
        if let id = implicitByKey[.process(pid)] { recomputeImplicitCategory(id) }
    }

    mutating func playerStatusChanged(_ id: PlayerID, _ status: PlaybackStatus) {
        guard var p = players[id] else { return }
        let old = p.info.status
        p.info.status = status
        if status == .paused { p.pauseInFlight = false }
        // A Playing that answers audiod's own Play, or that crossed audiod's Pause on the bus, is not the user's
        // Play: the player stays audiod's to resume (paused again since, it is resumed when that ends).
        let answersPlay = status == .playing && p.playInFlight && awaitsAnswer(p)
        let crossedPause = p.pauseInFlight && awaitsAnswer(p)
        if status == .playing, !crossedPause, !answersPlay { p.pausedByAudiod = false }
        if status != .paused { p.playInFlight = false }
        players[id] = p
        for sid in streamsByAncestor[p.info.pid] ?? [] { markDirty(sid) }
        guard status == .playing, old != .playing, !answersPlay, !crossedPause,
            let sid = implicitByKey[.process(p.info.pid)], let s = sessions[sid]
        else { return }
        let routeHeld = s.playbackStreams.contains { streams[$0]?.routeSilenced == true }
        if s.heldSilent || routeHeld { userActivate(sid) }
    }

    mutating func pausePlayers(of id: SessionID, resumable: Bool) {
        guard let s = sessions[id] else { return }
        for pid in players(ofImplicit: s).sorted() {
            // A player whose stream sounds is playing, whatever its last PlaybackStatus said: the status travels
            // the bus and the stream the sound server, and either may arrive first.
            guard var p = players[pid],
                p.info.status == .playing || (p.playInFlight && awaitsAnswer(p))
                    || (streamsByAncestor[p.info.pid] ?? []).contains(where: { streams[$0].map(soundsOnDevice) == true }
                    )
            else { continue }
            p.pausedByAudiod = resumable
            // A player that still says Paused (its Play in flight) may answer nothing at all — or the Play first:
            // that Playing is still audiod's own (`playInFlight` stays).
            p.pauseInFlight = p.info.status != .paused
            p.sentAt = now
            players[pid] = p
            out.mpris.append(.mprisPause(pid))
        }
    }

    mutating func resumePlayers(of id: SessionID) {
        guard let s = sessions[id] else { return }
        for pid in players(ofImplicit: s).sorted() where players[pid]?.pausedByAudiod == true {
            players[pid]?.pausedByAudiod = false
            players[pid]?.pauseInFlight = false
            // Only a paused player answers Play with Playing (one that stopped, its tab closed, has nothing to play).
            let paused = players[pid]?.info.status == .paused
            players[pid]?.playInFlight = paused
            players[pid]?.sentAt = now
            out.mpris.append(.mprisPlay(pid))
        }
    }

    /// Whether audiod still waits for a player's answer to its last `Play` or `Pause`. Not for ever: a player that
    /// never answers (nothing to play, a Pause it coalesced with the Play before it) must not have the user's next
    /// press of Play taken for an answer.
    func awaitsAnswer(_ p: PlayerState) -> Bool {
        guard let sent = p.sentAt else { return false }
        return now.since(sent) <= settings.lingerNanoseconds
    }

    mutating func forgetPausedPlayers(of id: SessionID) {
        guard let s = sessions[id] else { return }
        for pid in players(ofImplicit: s) {
            players[pid]?.pausedByAudiod = false
            players[pid]?.pauseInFlight = false
        }
    }

    // MARK: Route changes (§6)

    mutating func deviceRemoved(_ device: String) {
        deviceAppearedAt[device] = nil
        let window = settings.routeMoveWindowNanoseconds
        var bySession: [SessionID: (current: String?, audible: Bool)] = [:]
        for (sid, st) in streams {
            let wasOn =
                st.info.device == device
                || (st.previousDevice == device && now.since(st.movedAt) <= window)
            guard wasOn else { continue }
            let sounding = soundsOnDevice(st)
            if sounding {
                streams[sid]?.routeSilenced = true
                markDirty(sid)
            }
            guard let owner = st.session else { continue }
            var entry = bySession[owner] ?? (nil, false)
            if st.info.device != device { entry.current = st.info.device }
            entry.audible = entry.audible || sounding
            bySession[owner] = entry
        }
        for (id, entry) in bySession.sorted(by: { $0.key < $1.key }) {
            guard let s = sessions[id] else { continue }
            emit(id, .routeChanged(.oldDeviceUnavailable, previousDevice: device, currentDevice: entry.current))
            if s.isImplicit {
                pausePlayers(of: id, resumable: false)
            } else if s.configuration.category == .playback && (s.active || entry.audible) {
                interrupt(id, reason: .routeDisconnected, by: nil)
            }
        }
    }

    mutating func announceNewDevice(_ device: String, previous: String, to id: SessionID) {
        guard let appeared = deviceAppearedAt[device], now.since(appeared) <= settings.routeMoveWindowNanoseconds,
            sessions[id]?.toldNewDevice[device] != appeared
        else { return }
        sessions[id]?.toldNewDevice[device] = appeared
        emit(id, .routeChanged(.newDeviceAvailable, previousDevice: previous, currentDevice: device))
    }

    // MARK: Indices

    mutating func index(_ sid: StreamID, chain: [UInt32]) {
        for pid in chain { streamsByAncestor[pid, default: []].insert(sid) }
    }

    mutating func unindex(_ sid: StreamID, chain: [UInt32]) {
        for pid in chain {
            streamsByAncestor[pid]?.remove(sid)
            if streamsByAncestor[pid]?.isEmpty == true { streamsByAncestor[pid] = nil }
        }
    }

    mutating func markDirty(_ sid: StreamID) {
        dirty.insert(sid)
    }

    mutating func markStreamsDirty(of id: SessionID, kind: StreamKind? = nil) {
        guard let s = sessions[id] else { return }
        if kind != .record { for sid in s.playbackStreams { dirty.insert(sid) } }
        if kind != .playback { for sid in s.recordStreams { dirty.insert(sid) } }
    }

    mutating func markAllPlaybackDirty() {
        for sid in streams.keys where sid.kind == .playback { dirty.insert(sid) }
    }
}
