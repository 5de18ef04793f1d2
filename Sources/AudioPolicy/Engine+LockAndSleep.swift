// The lock screen and sleep (SPEC §10): what the platform knows about "the background".

extension Engine {
    /// Whether the lock screen takes this session's sound now: the screen is locked, the config follows it, and the
    /// session is ambient or solo-ambient — not an `event`/`animation`/`test` role (ringtones, alarms) and never
    /// the platform call. (a11y streams belong to no session.)
    func lockedOut(_ s: SessionState) -> Bool {
        lockApplies && s.configuration.category.obeysSilentMode && !s.roleExempt && !isPlatformCall(s.id)
    }

    /// The screen is locked and the config follows it.
    var lockApplies: Bool { screenLocked && settings.followsLockScreen }

    /// Why an activation is granted and interrupted at once, if it is: the machine is going to sleep, or an explicit
    /// ambient session activates behind the lock. (An implicit one's streams are silenced instead.)
    func heldOffReason(_ s: SessionState) -> InterruptionReason? {
        if isPlatformCall(s.id) || s.isAlert { return nil }
        if sleeping { return .suspend }
        if !s.isImplicit && lockedOut(s) { return .screenLocked }
        return nil
    }

    /// An interruption nobody will end but the platform: unlocking, or waking.
    mutating func interruptForPlatform(_ id: SessionID, _ reason: InterruptionReason) {
        interrupt(id, reason: reason, by: nil)
        guard sessions[id]?.interrupted == true else { return }
        if reason == .suspend { suspendInterrupted.insert(id) } else { lockInterrupted.insert(id) }
    }

    mutating func screenLockChanged(_ locked: Bool) {
        guard locked != screenLocked else { return }
        let before = lockApplies
        screenLocked = locked
        managerChanged.insert(.screenLocked)
        lockRulesChanged(from: before)
    }

    /// The lock's rules start or stop applying (the screen was locked or unlocked, or the config changed).
    mutating func lockRulesChanged(from before: Bool) {
        let now = lockApplies
        guard now != before else { return }
        // Ambient and solo-ambient sound is silenced while it holds, and heard again after it (an explicit session's
        // once it is activated again); an explicit session that holds the audio is interrupted.
        for id in silentModeSessions.sorted() {
            guard let s = sessions[id] else { continue }
            markStreamsDirty(of: id, kind: .playback)
            if now, !s.isImplicit, s.active, lockedOut(s) { interruptForPlatform(id, .screenLocked) }
        }
        guard !now else { return }
        for id in lockInterrupted.sorted() {
            guard let o = sessions[id], o.interrupted, o.interrupter == nil, o.interruptionReason == .screenLocked,
                !waitsForHolder(id)
            else { continue }
            endInterruption(id, shouldResume: true, playPlayers: true)
        }
        lockInterrupted = []
    }

    /// `PrepareForSleep`: before sleep every active session but the platform call is interrupted and the players
    /// that play are paused; after waking that ends without resuming — nobody's music starts by itself in a new
    /// place.
    mutating func prepareForSleep(_ going: Bool) {
        guard going != sleeping else { return }
        sleeping = going
        if going {
            // A player audiod has just told to resume too: it would start by itself on the way to sleep.
            for id in activeSessions.sorted() + resuming(excluding: platformCall?.session) where !isPlatformCall(id) {
                interruptForPlatform(id, .suspend)
            }
            // Players of explicit sessions, and players whose app has no active session: every one that plays (and
            // was not paused with its session just now).
            for pid in players.keys.sorted() {
                guard var p = players[pid], p.info.status == .playing, !out.mpris.contains(.mprisPause(pid)),
                    !playsForPlatformCall(p)
                else { continue }
                p.pauseInFlight = true
                p.sentAt = now
                players[pid] = p
                out.mpris.append(.mprisPause(pid))
            }
            return
        }
        for id in suspendInterrupted.sorted() {
            guard let o = sessions[id], o.interrupted, o.interrupter == nil, o.interruptionReason == .suspend
            else { continue }
            endInterruption(id, shouldResume: false, playPlayers: false)
        }
        suspendInterrupted = []
    }

    private func playsForPlatformCall(_ p: PlayerState) -> Bool {
        guard let pc = platformCall else { return false }
        return (streamsByAncestor[p.info.pid] ?? []).contains { streams[$0]?.session == pc.session }
    }
}
