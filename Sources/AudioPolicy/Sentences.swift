// The debug log's words: each event and each effect as a sentence a person can read ("why did this go quiet?"),
// rather than a dump of the values that carry them.

extension Event {
    public var sentence: String {
        switch self {
        case .createSession(_, let n):
            "a session is asked for pid \(n.pid)\(n.applicationName.isEmpty ? "" : " (\(n.applicationName))"), ending with its \(n.lifetime.rawValue)"
        case .setCategory(_, let id, let c, let m, let o):
            "\(id) asks for category \(c)\(m == "default" ? "" : ", mode \(m)")\(o.isEmpty ? "" : ", options \(o.joined(separator: ", "))")"
        case .setActive(_, let id, let active, let o):
            "\(id) asks to \(active ? "activate" : "deactivate")\(o.isEmpty ? "" : " with \(o.joined(separator: ", "))")"
        case .release(_, let id): "\(id) is released by its owner"
        case .setHandlesSecondaryAudio(_, let id, let on):
            "\(id) says it \(on ? "handles" : "no longer handles") secondary audio itself"
        case .setPrefersNoInterruptions(_, let id, let on):
            "\(id) \(on ? "asks not to be" : "may again be") interrupted by a call that only rings"
        case .setOutputMuted(_, let id, let on): "\(id) \(on ? "mutes" : "unmutes") its output"
        case .setSilentMode(_, let on): "silent mode is switched \(on ? "on" : "off")"
        case .setDuckLevel(_, let level): "the duck level is set to \(level)"
        case .setStrongDuckLevel(_, let level): "the strong duck level is set to \(level)"
        case .setApplicationCategory(_, let app, let c, let m, _):
            "a rule is set: \(app) is \(c)\(m == "default" ? "" : "/\(m)")"
        case .removeApplicationCategory(_, let app): "the rule for \(app) is removed"
        case .configure: "the settings are (re)loaded"
        case .ownerVanished(let id): "the bus connection that owned \(id) is gone"
        case .processExited(let pid): "pid \(pid) exited"
        case .streamAppeared(let i): "\(Self.words(i)) appeared"
        case .streamAnnounced(let i): "\(Self.words(i)) is listed, not yet linked"
        case .streamChanged(let i):
            "\(Self.words(i)) changed: \(i.corked ? "paused" : "running"), \(i.muted ? "muted" : "unmuted"), volume \(i.volume)"
        case .streamRemoved(let id): "\(Self.words(id)) went away"
        case .playerAppeared(let p): "media player \(p.id) of pid \(p.pid) appeared, \(p.status.rawValue)"
        case .playerStatusChanged(let p, let status): "media player \(p) is now \(status.rawValue)"
        case .playerRemoved(let p): "media player \(p) went away"
        case .deviceAppeared(let d): "device \(d) appeared"
        case .deviceRemoved(let d): "device \(d) went away"
        case .timerFired(.linger(let id)): "\(id) has had no audible stream for the linger"
        case .timerFired(.voiceCallEnd(let id)): "\(id) has not both captured and played for the linger"
        case .timerFired(.callLinkOverdue(let id)): "\(Self.words(id)) was announced but did not link and play in time"
        case .timerFired(.handover(let id)): "\(id) took over the audio but has made no sound for the linger"
        case .timerFired(.fadeStep): "a fade's next step is due"
        case .gameModeGames(let games): "GameMode lists \(games.count) game\(games.count == 1 ? "" : "s")"
        case .platformCall(let call?):
            "the platform's call is \(call.state.rawValue)\(call.allRinging ? "" : ", answered")"
        case .platformCall(nil): "the platform's last call ended"
        case .platformCallSourceLost(let call?):
            "a call source's bus was lost; the platform's call is \(call.state.rawValue)"
        case .platformCallSourceLost(nil): "a call source's bus was lost: its calls end without resuming anyone"
        case .microphoneMuted(let source, let muted, _):
            "the user \(muted ? "muted" : "unmuted") the microphone \(source)"
        case .screenLocked(let locked): "the screen is \(locked ? "locked" : "unlocked")"
        case .prepareForSleep(let sleeping): sleeping ? "the machine is going to sleep" : "the machine woke up"
        case .platformSilentMode(let on): "the phone's ring/silent profile switches silent mode \(on ? "on" : "off")"
        }
    }

    static func words(_ id: StreamID) -> String { "\(id.kind.rawValue) stream \(id.index)" }

    static func words(_ i: StreamInfo) -> String {
        var s = words(i.id)
        let who = [i.applicationName.isEmpty ? nil : i.applicationName, i.processChain.first.map { "pid \($0)" }]
            .compactMap { $0 }.joined(separator: ", ")
        if !who.isEmpty { s += " (\(who))" }
        return s
    }
}

extension Effect {
    public var sentence: String {
        switch self {
        case .setStreamMute(let id, let on): "\(on ? "mute" : "unmute") \(Event.words(id))"
        case .rampStreamUnmute(let id, let ns): "unmute \(Event.words(id)) under a server ramp of \(ns / 1_000_000) ms"
        case .setStreamVolume(let id, let v): "set \(Event.words(id)) to volume \(v)"
        case .rampStreamVolume(let id, let v, let ns):
            "take \(Event.words(id)) to volume \(v) under a server ramp of \(ns / 1_000_000) ms"
        case .mprisPause(let p): "pause media player \(p)"
        case .mprisPlay(let p): "resume media player \(p)"
        case .sessionAdded(let v):
            "\(v.id) begins: \(v.applicationName.isEmpty ? "pid \(v.processID)" : "\(v.applicationName), pid \(v.processID)"), "
                + "\(v.configuration.category.rawValue)\(v.isImplicit ? ", implicit" : "") (\(v.identity.categoryReason.text))"
        case .sessionRemoved(let id): "\(id) ends"
        case .signal(let id, let signal): "tell \(id): \(Self.words(signal))"
        case .sessionPropertiesChanged(let id, let props): "\(id)'s properties change (\(props.count))"
        case .managerPropertiesChanged(let props): "audiod's properties change (\(props.count))"
        case .scheduleTimer(let t, let ns): "start \(Self.words(t)) (\(ns / 1_000_000) ms)"
        case .cancelTimer(let t): "stop \(Self.words(t))"
        case .persist: "save silent mode and the rules"
        case .reply(_, .error(let e)): "refuse the request: \(e.message)"
        case .reply: "answer the request"
        }
    }

    static func words(_ s: Signal) -> String {
        switch s {
        case .interruptionBegan(let reason, let by?): "interruption began (\(reason.rawValue)) by \(by)"
        case .interruptionBegan(let reason, nil): "interruption began (\(reason.rawValue))"
        case .interruptionEnded(let resume): "interruption ended, \(resume ? "should resume" : "should not resume")"
        case .silenceSecondaryAudioHint(let t): "secondary-audio hint \(t.rawValue)"
        case .routeChanged(let reason, let previous, let current):
            "route changed (\(reason.rawValue)) from \(previous ?? "nothing") to \(current ?? "nothing")"
        case .userIntentToUnmuteOutput: "the user unmuted its output"
        }
    }

    static func words(_ t: TimerID) -> String {
        switch t {
        case .linger(let id): "\(id)'s linger"
        case .voiceCallEnd(let id): "\(id)'s end-of-call wait"
        case .callLinkOverdue(let id): "the wait for \(Event.words(id))'s link"
        case .handover(let id): "\(id)'s handover"
        case .fadeStep: "the fades' next step"
        }
    }
}
