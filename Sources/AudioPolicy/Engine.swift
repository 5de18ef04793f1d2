/// The arbiter: docs/POLICY.md §1–§8 as a value-type state machine.
///
/// Events go in through `handle(_:at:)`; what audiod must do comes out as `[Effect]`. The engine does no I/O,
/// reads no clock and imports nothing: the shell owns time, IDs of the outside world, and every side effect.
/// Read-only views (`session(_:)`, `streams`, …) serve D-Bus property reads between events.
///
/// Cost: an event touches the sessions and streams it affects. Only events that change something for everyone
/// (the ducking set, the secondary-audio hint, silent mode, `OtherAudioPlaying` turning on or off) visit every
/// session or stream.
public struct Engine: Sendable {
    // MARK: State

    var settings: Settings
    var duckFactor: UInt32
    var strongDuckFactor: UInt32
    public internal(set) var silentMode = false

    var sessions: [SessionID: SessionState] = [:]
    var streams: [StreamID: StreamState] = [:]
    var players: [PlayerID: PlayerState] = [:]
    var busRules: [String: ApplicationRule] = [:]
    /// `settings.configRules` by application, first rule for a name winning.
    var configRules: [String: ApplicationRule] = [:]

    /// The id the next session gets. Ids are never reused within a login: the host numbers on past every id an
    /// earlier run gave out (`numberSessions(from:)`), so that a stale `audiod.session` tag or a client's old object
    /// path names no session of this run.
    public internal(set) var nextSessionID: UInt64 = 1

    /// Numbers the sessions of this run from `first` on (never back: an id given out stays given out).
    public mutating func numberSessions(from first: UInt64) { nextSessionID = max(nextSessionID, first) }

    // Indices that keep an event's cost proportional to what it affects.
    /// Every pid in any stream's process chain → those streams.
    var streamsByAncestor: [UInt32: Set<StreamID>] = [:]
    /// Explicit sessions by the pid they own streams for.
    var explicitByPid: [UInt32: Set<SessionID>] = [:]
    var implicitByKey: [ImplicitKey: SessionID] = [:]
    var playersByPid: [UInt32: Set<PlayerID>] = [:]
    var activeSessions: Set<SessionID> = []
    var activeNonMixable: Set<SessionID> = []
    var activeDuckers: Set<SessionID> = []
    /// The active duckers that are voice prompts (mode `voice-prompt`): they duck with `StrongDuckLevel`.
    var strongDuckers: Set<SessionID> = []
    /// Sessions tied to an interrupter, by interrupter.
    var tiedTo: [SessionID: Set<SessionID>] = [:]
    /// Sessions whose category obeys silent mode / is ambient.
    var silentModeSessions: Set<SessionID> = []
    var ambientSessions: Set<SessionID> = []
    /// Audible streams that belong to no session (a11y, and a gone process's until the server drops them).
    var sessionlessAudible = 0
    /// Audible a11y streams: while there is one, a screen reader is heard and every session's playback is ducked
    /// strongly. A set, not a count: a stream's role can change while it plays.
    var audibleA11y: Set<StreamID> = []
    /// Whether a call was active when the settle pass last looked: voice prompts and alarms duck under one.
    var callActive = false
    /// Audible streams in all.
    var totalAudible = 0
    var sessionsWithAudio: Set<SessionID> = []
    /// `PrimaryAudioSession` (§0): the active non-mixable session with an audible stream, or else the session
    /// taking over during a handover.
    var primary: SessionID?
    /// The session taking over the audio from primary audio (docs/POLICY.md §5 "Handovers"), until its first
    /// audible stream, its deactivation or interruption, or the linger.
    var handover: SessionID?
    /// The last session that was primary audio, while no other has been since: a player that exits loses its
    /// stream a moment before its session is released, and its release with notify still hands over (§5).
    var lastPrimary: SessionID?
    /// Processes that exited while the server still lists their streams.
    var goneProcesses: Set<UInt32> = []
    /// The processes GameMode has registered as games, by host pid.
    var gameRegistrations: [UInt32: GameRegistration] = [:]
    /// The platform's calls as one (SPEC §10), while there is any.
    var platformCall: PlatformCallState?
    /// Sessions interrupted by the microphone switch, by the source muted.
    var micInterrupted: [String: Set<SessionID>] = [:]
    /// `ScreenLocked`: the user's graphical session is locked (SPEC §10).
    public internal(set) var screenLocked = false
    /// Explicit sessions the lock screen interrupted; unlocking ends that with `should_resume = true`.
    var lockInterrupted: Set<SessionID> = []
    /// Between `PrepareForSleep(true)` and `(false)`.
    public internal(set) var sleeping = false
    /// Sessions interrupted for sleep; waking ends that with `should_resume = false`.
    var suspendInterrupted: Set<SessionID> = []
    /// Steps whose settle pass did not converge within its round limit: always 0 unless the rules loop.
    public internal(set) var settleOverflows = 0
    /// Call streams listed before they can be heard (`Event.streamAnnounced`), each with the streams it will silence
    /// once it plays, muted ahead of it.
    var callsAboutToSound: [StreamID: Set<StreamID>] = [:]
    /// Streams whose volume is fading (`StreamState.fade`), and whether the step timer is armed.
    var fading: Set<StreamID> = []
    var fadeTimerArmed = false
    /// This step is the fade timer's: fading streams write their next step.
    var fadeTick = false
    /// When each device last appeared, for `new-device-available`.
    var deviceAppearedAt: [String: Instant] = [:]

    // Per-event scratch state.
    var now = Instant.zero
    var dirty: Set<StreamID> = []
    var everDirty: Set<StreamID> = []
    var touched: Set<SessionID> = []
    var managerChanged: ManagerProperties = []
    var out = EffectBuffer()
    /// The streams whose held values (`appliedChange(of:)`) the last step changed without writing them: the
    /// journal's lines for them must change as for a write.
    public internal(set) var heldChangedUnwritten: [StreamID] = []
    var published: [SessionID: SessionView] = [:]
    var crossings: Set<SessionID> = []
    var pendingHintBegin: Set<SessionID> = []
    /// Implicit sessions a stream found at connection belongs to, this step (`audibilityCrossed`).
    var foundThisStep: Set<SessionID> = []
    /// Implicit sessions found at connection and held by an app's session (`heldBeforeFound`): one that turns out
    /// to be a call (a browser's, once its capture is listed) takes the audio as a call found at connection does.
    var heldAtConnection: Set<SessionID> = []
    var totalBefore = 0
    var soleBefore: SessionID?

    public init(settings: Settings = Settings()) {
        self.settings = settings
        self.duckFactor = Volume.fromLinear(settings.duckLevel)
        self.strongDuckFactor = Volume.fromLinear(settings.strongDuckLevel)
        self.configRules = Engine.index(settings.configRules)
    }

    static func index(_ rules: [ApplicationRule]) -> [String: ApplicationRule] {
        Dictionary(rules.map { ($0.application, $0) }, uniquingKeysWith: { first, _ in first })
    }

    // MARK: Read model

    /// The DuckLevel in force.
    public var duckLevel: Double { settings.duckLevel }

    /// The StrongDuckLevel in force.
    public var strongDuckLevel: Double { settings.strongDuckLevel }

    /// How far a reported volume may be from audiod's and still count as audiod's, in force.
    public var volumeTolerance: UInt32 { settings.volumeTolerance }

    /// `PrimaryAudioSession`: the active, non-mixable session that is audible now, or the one taking over during a
    /// handover (§5).
    public var primaryAudioSession: SessionID? { primary }

    /// The session taking over primary audio in a handover now, if any (§5).
    public var handoverSession: SessionID? { handover }

    /// `OtherAudioPlaying` (manager): some stream is audible now.
    public var otherAudioPlaying: Bool { totalAudible > 0 }

    /// Every session, explicit and implicit, in id order.
    public var sessionIDs: [SessionID] { sessions.keys.sorted() }

    /// A session's public state, as its D-Bus properties show it.
    public func session(_ id: SessionID) -> SessionView? {
        sessions[id].map(view)
    }

    /// Every stream, in (kind, index) order.
    public var streamViews: [StreamView] {
        streams.keys.sorted().compactMap { streamView($0) }
    }

    public func streamView(_ id: StreamID) -> StreamView? {
        guard let s = streams[id] else { return nil }
        return StreamView(
            info: s.info, session: s.session, policyMuted: s.policyMute || silencedAhead(id) != nil,
            duckFactor: duckLevel(of: s.duck), userMuted: s.userMuted,
            userVolume: s.userVolume, audible: s.audible, reasons: policyReasons(s))
    }

    /// Whether a player still plays after audiod paused it: it has not said Paused, and a playback stream of its
    /// process is still running on the server. Either ends it — the server's cork is what a person hears, and
    /// comes first (mpv-mpris announces Paused ~100 ms after its stream corks, measured).
    public func playerStillPlays(_ id: PlayerID) -> Bool {
        guard let p = players[id], p.info.status == .playing else { return false }
        return (streamsByAncestor[p.info.pid] ?? []).contains {
            streams[$0].map { $0.kind == .playback && !$0.info.corked } ?? false
        }
    }

    /// Every app rule: config-file rules first, then D-Bus rules, each in application order.
    public var applicationRules: [ApplicationRule] {
        settings.configRules.sorted { $0.application < $1.application }
            + busRules.values.sorted { $0.application < $1.application }
    }

    /// What must survive a restart: silent mode and the rules set over D-Bus.
    public var persistentState: PersistentState {
        PersistentState(silentMode: silentMode, rules: busRules.values.sorted { $0.application < $1.application })
    }

    /// `FindSession`: the newest explicit session created with exactly this pid.
    public func findSession(pid: UInt32) -> SessionID? {
        sessions.values.filter { !$0.isImplicit && $0.pid == pid }.map(\.id).max()
    }

    /// `GetSessionForProcess`: the session that owns streams of a process with this chain (self first).
    public func sessionForProcess(chain: [UInt32]) -> SessionID? {
        if let s = explicitOwner(chain: chain, tag: nil) { return s }
        guard let key = implicitKey(chain: chain, applicationName: "") else { return nil }
        return implicitByKey[key]
    }

    /// Every stream audiod has changed, with the value to put back: what a journal must hold so that the next
    /// start can undo a crashed run.
    public var appliedChanges: [AppliedChange] { streams.keys.sorted().compactMap(appliedChange(of:)) }

    /// What audiod holds on one stream: nil when nothing (or no such stream).
    public func appliedChange(of id: StreamID) -> AppliedChange? {
        guard let s = streams[id], s.appliedMute || s.appliedVolume != nil else { return nil }
        return AppliedChange(
            stream: id, applicationName: s.info.applicationName, unmute: s.appliedMute,
            appliedVolume: s.appliedVolume, restoreVolume: s.appliedVolume == nil ? nil : s.userVolume)
    }

    // MARK: Events

    /// Feeds one event to the arbiter and returns what audiod must do, in order.
    public mutating func handle(_ event: Event, at now: Instant) -> [Effect] {
        self.now = now
        switch event {
        case .createSession(let r, let spec): createSession(r, spec)
        case .setCategory(let r, let id, let c, let m, let o): setCategory(r, id, c, m, o)
        case .setActive(let r, let id, let active, let options): setActive(r, id, active, options)
        case .release(let r, let id): release(r, id)
        case .setHandlesSecondaryAudio(let r, let id, let v): setHandlesSecondaryAudio(r, id, v)
        case .setPrefersNoInterruptions(let r, let id, let v): setPrefersNoInterruptions(r, id, v)
        case .setOutputMuted(let r, let id, let v): setOutputMuted(r, id, v)
        case .setSilentMode(let r, let on): setSilentMode(r, on)
        case .setDuckLevel(let r, let level): setDuckLevel(r, level)
        case .setStrongDuckLevel(let r, let level): setStrongDuckLevel(r, level)
        case .setApplicationCategory(let r, let app, let c, let m, let o): setApplicationCategory(r, app, c, m, o)
        case .removeApplicationCategory(let r, let app): removeApplicationCategory(r, app)
        case .configure(let r, let s): configure(r, s)
        case .ownerVanished(let id): ownerVanished(id)
        case .processExited(let pid): processExited(pid)
        case .streamAppeared(let info): streamAppeared(info)
        case .streamAnnounced(let info): streamAnnounced(info)
        case .streamChanged(let info): streamChanged(info)
        case .streamRemoved(let id): streamRemoved(id)
        case .playerAppeared(let p): playerAppeared(p)
        case .playerStatusChanged(let id, let status): playerStatusChanged(id, status)
        case .playerRemoved(let id): playerRemoved(id)
        case .deviceAppeared(let d): deviceAppearedAt[d] = now
        case .deviceRemoved(let d): deviceRemoved(d)
        case .timerFired(let t): timerFired(t)
        case .gameModeGames(let games): gameModeGames(games)
        case .platformCall(let call): platformCallChanged(call)
        case .platformCallSourceLost(let remaining): platformCallChanged(remaining, notify: false)
        case .microphoneMuted(let source, let muted, let isDefault):
            microphoneMuted(source, muted, isDefault: isDefault)
        case .screenLocked(let locked): screenLockChanged(locked)
        case .prepareForSleep(let sleeping): prepareForSleep(sleeping)
        case .platformSilentMode(let on): applySilentMode(on)
        }
        settle()
        return finish()
    }

    /// Undoes every mute and volume audiod applied (clean exit). Never MPRIS `Play` (docs/POLICY.md §8).
    public mutating func restoreEverything() -> [Effect] {
        var effects: [Effect] = []
        for id in streams.keys.sorted() {
            guard var s = streams[id] else { continue }
            if s.appliedMute {
                effects.append(.setStreamMute(id, false))
                s.appliedMute = false
            }
            if s.appliedVolume != nil {
                effects.append(.setStreamVolume(id, s.userVolume))
                s.appliedVolume = nil
            }
            streams[id] = s
        }
        return effects
    }
}

/// What the shell persists across restarts.
public struct PersistentState: Sendable, Equatable {
    public var silentMode: Bool
    public var rules: [ApplicationRule]
    public init(silentMode: Bool, rules: [ApplicationRule]) {
        self.silentMode = silentMode
        self.rules = rules
    }
}

/// One change audiod made to a stream, and how to undo it.
public struct AppliedChange: Sendable, Equatable {
    public var stream: StreamID
    public var applicationName: String
    /// audiod muted the stream; undo by unmuting.
    public var unmute: Bool
    /// The volume audiod set, if it changed the volume: undo only while the stream still has it.
    public var appliedVolume: Volume?
    /// audiod changed the volume; undo by setting this one.
    public var restoreVolume: Volume?

    public init(stream: StreamID, applicationName: String, unmute: Bool, appliedVolume: Volume?, restoreVolume: Volume?)
    {
        self.stream = stream
        self.applicationName = applicationName
        self.unmute = unmute
        self.appliedVolume = appliedVolume
        self.restoreVolume = restoreVolume
    }
}

/// A session as D-Bus shows it.
public struct SessionView: Sendable, Equatable {
    public var id: SessionID
    public var isImplicit: Bool
    public var applicationName: String
    public var processID: UInt32
    public var configuration: Configuration
    public var active: Bool
    public var interrupted: Bool
    public var secondaryAudioShouldBeSilencedHint: Bool
    public var otherAudioPlaying: Bool
    public var handlesSecondaryAudio: Bool
    public var prefersNoInterruptionsFromSystemAlerts: Bool
    /// Indices of its playback streams, ascending.
    public var streams: [UInt32]
    /// Indices of its record streams, ascending.
    public var recordStreams: [UInt32]
    public var identity: SessionIdentity
    /// `OutputMuted` (SPEC §5).
    public var outputMuted = false

    /// An output-muted session counts as mixable, unless it may capture.
    public var mixable: Bool { configuration.isMixable || (outputMuted && !configuration.category.captures) }

    /// Every property the engine decides, with its value, in docs/API.md order.
    public var properties: [SessionProperty] { (0..<Self.propertyCount).map(property(at:)) }

    public static let propertyCount = 16

    /// The property at `i` in docs/API.md order (the one list of them).
    public func property(at i: Int) -> SessionProperty {
        switch i {
        case 0: .category(configuration.category)
        case 1: .mode(configuration.mode)
        case 2: .options(configuration.options)
        case 3: .active(active)
        case 4: .interrupted(interrupted)
        case 5: .mixable(mixable)
        case 6: .secondaryAudioShouldBeSilencedHint(secondaryAudioShouldBeSilencedHint)
        case 7: .otherAudioPlaying(otherAudioPlaying)
        case 8: .handlesSecondaryAudio(handlesSecondaryAudio)
        case 9: .applicationName(applicationName)
        case 10: .processID(processID)
        case 11: .streams(streams)
        case 12: .recordStreams(recordStreams)
        case 13: .outputMuted(outputMuted)
        case 14: .prefersNoInterruptionsFromSystemAlerts(prefersNoInterruptionsFromSystemAlerts)
        default: .identity(identity)
        }
    }

    /// The view with `changes` (`changes(from:)`, a `PropertiesChanged`) applied: what a reader of the published
    /// properties holds. `Mixable` follows from the configuration.
    public mutating func apply(_ changes: [SessionProperty]) {
        var category = configuration.category
        var mode = configuration.mode
        var options = configuration.options
        var configured = false
        for p in changes {
            switch p {
            case .category(let c): (category, configured) = (c, true)
            case .mode(let m): (mode, configured) = (m, true)
            case .options(let o): (options, configured) = (o, true)
            case .mixable: break
            case .active(let b): active = b
            case .interrupted(let b): interrupted = b
            case .secondaryAudioShouldBeSilencedHint(let b): secondaryAudioShouldBeSilencedHint = b
            case .otherAudioPlaying(let b): otherAudioPlaying = b
            case .handlesSecondaryAudio(let b): handlesSecondaryAudio = b
            case .applicationName(let n): applicationName = n
            case .processID(let pid): processID = pid
            case .streams(let s): streams = s
            case .recordStreams(let s): recordStreams = s
            case .prefersNoInterruptionsFromSystemAlerts(let b): prefersNoInterruptionsFromSystemAlerts = b
            case .outputMuted(let b): outputMuted = b
            case .identity(let i): identity = i
            }
        }
        if configured { configuration = Configuration(category: category, mode: mode, options: options) }
    }

    /// The properties whose value differs from `old`'s, with the new values. Compared field by field, and a property
    /// made only when it changed: every step compares the views of the sessions it touched — all of them when audio
    /// starts or stops everywhere — and making every property of both views cost more than all the rest of such a
    /// step (docs/BENCHMARKS.md, the engine's handover row).
    func changes(from old: SessionView) -> [SessionProperty] {
        var changed: [SessionProperty] = []
        for i in 0..<Self.propertyCount where !sameProperty(at: i, as: old) { changed.append(property(at: i)) }
        return changed
    }

    /// Whether the property at `i` (`property(at:)`'s numbering) has the same value in `old`.
    private func sameProperty(at i: Int, as old: SessionView) -> Bool {
        switch i {
        case 0: configuration.category == old.configuration.category
        case 1: configuration.mode == old.configuration.mode
        case 2: configuration.options == old.configuration.options
        case 3: active == old.active
        case 4: interrupted == old.interrupted
        case 5: mixable == old.mixable
        case 6: secondaryAudioShouldBeSilencedHint == old.secondaryAudioShouldBeSilencedHint
        case 7: otherAudioPlaying == old.otherAudioPlaying
        case 8: handlesSecondaryAudio == old.handlesSecondaryAudio
        case 9: applicationName == old.applicationName
        case 10: processID == old.processID
        case 11: streams == old.streams
        case 12: recordStreams == old.recordStreams
        case 13: outputMuted == old.outputMuted
        case 14: prefersNoInterruptionsFromSystemAlerts == old.prefersNoInterruptionsFromSystemAlerts
        default: identity == old.identity
        }
    }
}

/// A stream as `ListStreams` shows it.
public struct StreamView: Sendable, Equatable {
    public var info: StreamInfo
    public var session: SessionID?
    /// Some policy reason silences this stream now (audiod muted it, or would have if the user had not already).
    public var policyMuted: Bool
    /// The linear factor applied (1.0 = not ducked).
    public var duckFactor: Double
    /// The user's own mute, as audiod remembers it.
    public var userMuted: Bool
    /// The user's own volume, as audiod remembers it.
    public var userVolume: Volume
    public var audible: Bool
    /// Why policy silences or ducks it now, or holds it at silence for its player's sound; empty when audiod leaves it
    /// alone.
    public var reasons: [PolicyReason] = []
}

/// Collects effects by kind so that each step comes out in the order docs/API.md promises: stream operations, MPRIS,
/// object appearance, signals, property changes, timers, persistence, the reply.
struct EffectBuffer: Sendable {
    /// Sessions made and ended in the step (their views are taken when it ends).
    var added: [SessionID] = []
    var mpris: [Effect] = []
    var signals: [Effect] = []
    var removed: [SessionID] = []
    var timers: [Effect] = []
    var persist = false
    var replies: [Effect] = []

    mutating func reset() { self = EffectBuffer() }
}
