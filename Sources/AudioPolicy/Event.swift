/// Everything the world can tell the arbiter. The shell (D-Bus service, sound-server backend, MPRIS watcher,
/// timers, config loader) turns what it sees into these and feeds them to `Engine.handle(_:at:)`.
public enum Event: Sendable, Equatable {
    // MARK: Requests — each is answered with exactly one `.reply` effect.

    /// `CreateSession`: the shell has already checked the pid (exists, same user).
    case createSession(RequestID, NewSession)
    /// `SetCategory` with the caller's raw strings; the engine validates them.
    case setCategory(RequestID, SessionID, category: String, mode: String, options: [String])
    /// `SetActive` with the caller's raw option strings.
    case setActive(RequestID, SessionID, active: Bool, options: [String])
    /// `Release`: deactivate with notify, then remove.
    case release(RequestID, SessionID)
    /// A write of the session property `HandlesSecondaryAudio`.
    case setHandlesSecondaryAudio(RequestID, SessionID, Bool)
    /// A write of the session property `PrefersNoInterruptionsFromSystemAlerts`.
    case setPrefersNoInterruptions(RequestID, SessionID, Bool)
    /// A write of the session property `OutputMuted` by the session's owner.
    case setOutputMuted(RequestID, SessionID, Bool)
    /// A write of `SilentMode` (also used to restore the persisted value at start).
    case setSilentMode(RequestID, Bool)
    /// A write of `DuckLevel` (0 < x < 1).
    case setDuckLevel(RequestID, Double)
    /// `StrongDuckLevel`: the duck under a voice prompt or an audible a11y stream, 0 < x ≤ `DuckLevel`.
    case setStrongDuckLevel(RequestID, Double)
    /// `SetApplicationCategory`.
    case setApplicationCategory(RequestID, application: String, category: String, mode: String, options: [String])
    /// `RemoveApplicationCategory`.
    case removeApplicationCategory(RequestID, application: String)
    /// The config file was (re)read: replaces every setting that comes from it.
    case configure(RequestID, Settings)

    // MARK: The world

    /// An explicit session's owner went away: its bus connection closed, or (for `lifetime=process`) its process
    /// exited. Released as if it had called `Release()`.
    case ownerVanished(SessionID)
    /// A process exited. Explicit `connection` sessions with this pid stop owning streams by pid; an implicit
    /// session of this process ends at once.
    case processExited(pid: UInt32)
    /// A playback or record stream appeared on the server.
    case streamAppeared(StreamInfo)
    /// The server lists a playback stream it has not yet connected to a device — PipeWire, until WirePlumber links
    /// it — so nothing of it can be heard yet, and its cork state, mute and volume are not yet its own. If it is a
    /// call's, what it will silence is muted ahead of its first sample (docs/POLICY.md §7); nothing else is decided.
    /// `streamAppeared` follows at the link, `streamRemoved` if it ends first.
    case streamAnnounced(StreamInfo)
    /// Something about a stream changed; the info is the whole current state as the server reports it.
    case streamChanged(StreamInfo)
    /// A stream went away.
    case streamRemoved(StreamID)
    /// An MPRIS player appeared (the shell de-duplicates several names of one process and ignores proxies).
    case playerAppeared(PlayerInfo)
    /// A player's `PlaybackStatus` changed.
    case playerStatusChanged(PlayerID, PlaybackStatus)
    /// A player went away.
    case playerRemoved(PlayerID)
    /// An output device became available (a sink appeared, or its active port became available).
    case deviceAppeared(String)
    /// An output device went away (sink removed, or its active port became unavailable).
    case deviceRemoved(String)
    /// A timer the engine scheduled has fired.
    case timerFired(TimerID)
    /// The processes GameMode has registered as games now, by host pid (`com.feralinteractive.GameMode`; empty when
    /// it is gone): game evidence for the registered process and for what it starts that is the same app (SPEC §7).
    case gameModeGames([UInt32: GameRegistration])
    /// The platform's calls, merged over every source (SPEC §10); nil when there is none.
    case platformCall(PlatformCall?)
    /// The bus of a call source was lost (the system bus, for ModemManager; SPEC §10): its calls ended without
    /// notify — the call may still be going on — and `remaining` is the merge of the other sources.
    case platformCallSourceLost(remaining: PlatformCall?)
    /// The user muted or unmuted a source that is not a monitor (the microphone switch, SPEC §10). `isDefault`: it
    /// is the default source, which a session with no record stream yet counts as capturing from.
    case microphoneMuted(source: String, muted: Bool, isDefault: Bool)
    /// The `LockedHint` of the user's graphical session (SPEC §10): ambient sound does not play behind the lock.
    case screenLocked(Bool)
    /// logind's `PrepareForSleep`: true before the machine sleeps, false after it woke.
    case prepareForSleep(Bool)
    /// The platform's silent switch (feedbackd's profile) set silent mode: as a write of `SilentMode`, without a
    /// request to answer.
    case platformSilentMode(Bool)
}

/// What `CreateSession` asks for, after the shell checked the hints.
public struct NewSession: Sendable, Equatable {
    public enum Lifetime: String, Sendable, Equatable {
        /// Ends when the caller's bus connection closes (the default).
        case connection
        /// Ends when `pid` exits.
        case process
    }

    public var pid: UInt32
    public var applicationName: String
    public var lifetime: Lifetime

    public init(pid: UInt32, applicationName: String = "", lifetime: Lifetime = .connection) {
        self.pid = pid
        self.applicationName = applicationName
        self.lifetime = lifetime
    }
}

/// A process GameMode registered as a game, with what says which app it is (read from /proc by the platform): its
/// registration counts for itself, and for a process it starts only when that one is the same app — not one with a
/// Flatpak app id or launcher scope of its own, and nothing a shell or launcher starts (a registered shell does not
/// make every program run from it a game).
public struct GameRegistration: Sendable, Equatable {
    public var pid: UInt32
    public var flatpakID: String?
    /// The desktop id of its launcher scope (`app-gnome-….scope`).
    public var scopeID: String?
    /// A shell, an interpreter or a launcher (`IdentityResolver.isLauncher`).
    public var isLauncher: Bool
    /// Its program (the name of `/proc/PID/exe`).
    public var program: String?

    public init(
        pid: UInt32, flatpakID: String? = nil, scopeID: String? = nil, isLauncher: Bool = false, program: String? = nil
    ) {
        self.pid = pid
        self.flatpakID = flatpakID
        self.scopeID = scopeID
        self.isLauncher = isLauncher
        self.program = program
    }

    /// Whether a process this one started, whose app is `profile`, is its game too.
    func covers(_ profile: AppProfile?) -> Bool {
        guard !isLauncher else { return false }
        // Another program with a desktop entry of its own (a browser the game opened) is that entry's app: one
        // entry runs one program, so it is not the registered process's entry.
        if let mine = program, let theirs = profile?.program, theirs != mine, profile?.programEntry != nil {
            return false
        }
        for n in profile?.names ?? [] {
            switch n.source {
            case .flatpak where n.name != flatpakID: return false
            case .launcherScope where n.name != scopeID: return false
            default: continue
            }
        }
        return true
    }
}

/// A stream as the sound server reports it right now.
public struct StreamInfo: Sendable, Equatable {
    public var id: StreamID
    /// The stream's `application.process.id` first, then its parent, grandparent, … (from /proc). Empty when
    /// the server does not say which process plays.
    public var processChain: [UInt32]
    public var applicationName: String
    /// `application.id`, if set.
    public var applicationID: String?
    /// `application.process.binary`, if set.
    public var binary: String?
    /// `media.role`, if set.
    public var role: String?
    /// The `audiod.session` property (of the stream or its client), if it holds a number.
    public var sessionTag: UInt64?
    public var corked: Bool
    /// The stream's mute as the server shows it, whoever set it.
    public var muted: Bool
    /// The stream's volume as the server shows it, whoever set it.
    public var volume: Volume
    /// The device (sink or source name) it plays on or records from.
    public var device: String
    /// Who plays, when no process can be vouched for (`processChain` is then empty): what the server or the kernel
    /// can tell apart — a Flatpak app id and instance, else the stream's client connection. Streams with the same
    /// identity form one implicit session; different ones never do.
    public var identity: String?
    /// Policy values audiod left on the stream that it shows now: an earlier run's (its journal), or this run's,
    /// handed to a new stream by the server's restore database. The engine takes them as its own, so its next
    /// decision puts the user's values back unless the policy still wants them: no stream is written behind its
    /// back.
    public var leftByPolicy: PolicyValues?
    /// A record stream from a monitor source (what a sink plays): a level meter or a screen recorder, never a call.
    public var fromMonitor: Bool
    /// Who the app is, as the desktop knows it (SPEC §7), when that could be read.
    public var app: AppProfile?
    /// Found by the connection's first listing: it was there before audiod saw it, so its appearing is not the app's
    /// action and activates nothing (after a restart, an app's re-made session was activated by its own stream, and
    /// took the audio from the session that held it).
    public var foundAtConnection = false
    /// The server can ramp this stream's own volume factor (a PipeWire node, 0.3.68 and later, that audiod's native
    /// connection reaches): a give-back is then one server ramp up instead of steps.
    public var serverRamps = false
    /// The server can ramp this stream's factor and set its volume with the factor in one change (as `serverRamps`,
    /// whatever the give-backs do): a duck and its undoing are then one server ramp instead of steps.
    public var serverRampsVolume = false

    public init(
        id: StreamID, processChain: [UInt32], applicationName: String = "", applicationID: String? = nil,
        binary: String? = nil, role: String? = nil, sessionTag: UInt64? = nil, corked: Bool = false,
        muted: Bool = false, volume: Volume = .normal, device: String = "default", identity: String? = nil,
        leftByPolicy: PolicyValues? = nil, fromMonitor: Bool = false, app: AppProfile? = nil
    ) {
        self.fromMonitor = fromMonitor
        self.app = app
        self.identity = identity
        self.leftByPolicy = leftByPolicy
        self.id = id
        self.processChain = processChain
        self.applicationName = applicationName
        self.applicationID = applicationID
        self.binary = binary
        self.role = role
        self.sessionTag = sessionTag
        self.corked = corked
        self.muted = muted
        self.volume = volume
        self.device = device
    }

    /// The process that plays, if known.
    public var pid: UInt32? { processChain.first }
}

/// The platform's calls as one (SPEC §10): what the shell merges from GNOME Calls, Plasma, ModemManager and
/// callaudiod. There is one while any call rings, waits, is dialled, rings out, is active or held.
public struct PlatformCall: Sendable, Equatable {
    /// Never `.none`: no call is a nil `PlatformCall`.
    public var state: CallState
    /// Every call rings in or waits (the call *only rings* while this holds and none has been answered).
    public var allRinging: Bool
    /// The call app's identity: its streams belong to the call (nil: a modem call alone has none).
    public var appID: String?
    /// The call app's name, for the session's `ApplicationName`.
    public var applicationName: String

    public init(state: CallState, allRinging: Bool, appID: String? = nil, applicationName: String = "") {
        self.state = state
        self.allRinging = allRinging
        self.appID = appID
        self.applicationName = applicationName
    }
}

/// What audiod once set on a stream, and the user's values under it.
public struct PolicyValues: Sendable, Equatable {
    /// The stream's mute is audiod's (the user had it unmuted).
    public var mute: Bool
    /// The volume audiod set, if it set one…
    public var volume: Volume?
    /// …and the user's own under it.
    public var userVolume: Volume?

    public init(mute: Bool, volume: Volume? = nil, userVolume: Volume? = nil) {
        self.mute = mute
        self.volume = volume
        self.userVolume = userVolume
    }
}

/// MPRIS `PlaybackStatus`.
public enum PlaybackStatus: String, Sendable, Equatable {
    case playing = "Playing"
    case paused = "Paused"
    case stopped = "Stopped"
}

/// An MPRIS player as the shell found it on the bus.
public struct PlayerInfo: Sendable, Equatable {
    public var id: PlayerID
    /// The bus name owner's pid.
    public var pid: UInt32
    public var status: PlaybackStatus

    public init(id: PlayerID, pid: UInt32, status: PlaybackStatus) {
        self.id = id
        self.pid = pid
        self.status = status
    }
}

/// A persistent rule for an application that never talks to audiod (docs/POLICY.md §7).
public struct ApplicationRule: Sendable, Equatable {
    public enum Source: String, Sendable, Equatable {
        case configFile = "config"
        case bus
    }
    /// Matched against a stream's `application.id`, process binary or `application.name`.
    public var application: String
    public var configuration: Configuration
    public var source: Source
    /// Where a config rule is written: the file and its 1-based line (nil for rules set over D-Bus).
    public var file: String?
    public var line: Int?

    public init(
        application: String, configuration: Configuration, source: Source, file: String? = nil, line: Int? = nil
    ) {
        self.application = application
        self.configuration = configuration
        self.source = source
        self.file = file
        self.line = line
    }
}

/// Everything that comes from the config file (and defaults when there is none).
public struct Settings: Sendable, Equatable {
    /// Linear amplitude factor for ducked streams, 0 < x < 1.
    public var duckLevel: Double
    /// The deeper factor a voice prompt (mode `voice-prompt`) or an audible a11y stream ducks with, 0 < x ≤
    /// `duckLevel`: Android's −35 dB for navigation and assistants, against −14 dB for the rest.
    public var strongDuckLevel: Double = Settings.defaultStrongDuckLevel
    /// −35 dB, as docs/API.md gives it.
    public static let defaultStrongDuckLevel = 0.0178
    /// The category of an app that matches no rule, owns no player and has no known role.
    public var defaultConfiguration: Configuration
    /// `media.role` → configuration, overriding the built-in map of docs/POLICY.md §7 for the roles it names.
    public var roleConfigurations: [String: Configuration]
    /// Rules from the config file (source `.configFile`).
    public var configRules: [ApplicationRule]
    /// How long an implicit session stays active after its last audible stream.
    public var lingerNanoseconds: UInt64
    /// A stream moved off a device this long before the device went away counts as having been on it (servers
    /// move streams before they announce the removal).
    public var routeMoveWindowNanoseconds: UInt64
    /// How far a volume the server reports may be from the one audiod set and still count as audiod's (PipeWire
    /// stores volumes as floats and may hand back a neighbouring value).
    public var volumeTolerance: UInt32
    /// Whether the lock screen silences ambient sound (SPEC §10; `[platform] lock-screen` in the config file).
    public var followsLockScreen: Bool
    /// How long a call's stream listed before its link (`Event.streamAnnounced`) keeps what it silenced ahead of
    /// it muted if it does not link and run. Links take 2–15 ms (measured on PipeWire); one that never comes (no
    /// device, WirePlumber gone), or a call that links but stays corked, must not keep the music muted.
    public var callLinkWaitNanoseconds: UInt64 = 500_000_000
    /// The nice level audiod's loop thread asks for (`nice-level` in the config file; −20…19, 0 leaves it as
    /// started). Not a policy setting: the engine ignores it; the daemon applies it at start and at every reload.
    /// −11 is what PipeWire's and PulseAudio's own main threads run at, so that a decision is not queued behind the
    /// work that links a new stream (docs/CONFIG.md).
    public var niceLevel: Int32 = -11
    /// Flatpak app ids trusted to own a platform name (a call service, feedbackd, GameMode) from a sandbox, beside
    /// each service's own (`[platform] trusted-apps`). Not a policy setting: the platform reads it at start and at
    /// every reload.
    public var trustedPlatformApps: [String] = []
    /// How long a duck takes to reach its level (`duck-fade` in the config file; 0 is a step). Android's 500 ms: a
    /// volume jump is heard as a click or a lurch, a fade as the other app giving way.
    public var duckFadeNanoseconds: UInt64 = 500_000_000
    /// How long an undone duck takes to come back to the user's volume (`unduck-fade`; 0 is a step).
    public var unduckFadeNanoseconds: UInt64 = 500_000_000
    /// How long a stream audiod gives back (after an interruption, secondary audio, silent mode, the lock, a call)
    /// takes to fade in from silence to its volume (`fade-in`; 0 is a step; 1 s is Android's for media given back
    /// after a loss). It was off for a while after the soak test once found a stream left at a fade-in's step under
    /// 64 clients; two likely causes are fixed, and 25 soak runs since have been clean (docs/FADES.md).
    public var fadeInNanoseconds: UInt64 = 1_000_000_000
    /// How long a stream silent mode or the lock silences fades out before it is muted (`fade-out`; 0 is a step):
    /// 25 steps over 500 ms, fine enough not to click. Silencings that race a new sound (an interruption,
    /// secondary audio, a call) stay at once: the overlap goals come first.
    public var fadeOutNanoseconds: UInt64 = 500_000_000
    /// Where the server ramps (PipeWire 0.3.68 and later), how long a silencing that races a new sound takes: the
    /// backend ramps the stream down inside the server over this long, then mutes it. 0: a step. The engine
    /// decides as before; only the backend reads it.
    public var deClickNanoseconds: UInt64 = 8_000_000
    /// The longest a voice prompt's or a screen reader's duck (and any duck of spoken audio) may take: a prompt
    /// must be understood from its first word, and speech is never faded long (docs/POLICY.md §2).
    public static let quickFadeLimitNanoseconds: UInt64 = 100_000_000
    /// How long a paused stream given back to a player audiod resumes (MPRIS `Play`) waits at silence for its sound
    /// before it is given its volume at once: players answer in tens of milliseconds (mpv ~20 ms, measured); one
    /// that has not sounded by then may never (nothing to play), and its volume must not stay held.
    public static let resumeFadeWaitNanoseconds: UInt64 = 2_000_000_000
    /// How often a fade writes the next volume while few streams fade: 25 steps over a 500 ms duck.
    public static let fadeStepNanoseconds: UInt64 = 20_000_000
    /// At most this many fade writes per second over all streams (one write per step and stream): a duck over
    /// 100 streams steps every 100 ms instead of flooding the server.
    public static let fadeWritesPerSecond: UInt64 = 1_000
    /// The stop path's and `audiod --restore`'s engine (`restoreOnly`): no stream belongs to any session, so no
    /// category is derived (no role, rule, desktop entry, game evidence, voice-call rule or MPRIS) and no policy
    /// applies; the only effects put back what the journal or the restore database say an earlier run left.
    public var decidesNothing = false

    public init(
        duckLevel: Double = 0.2,
        defaultConfiguration: Configuration = Configuration(category: .playback, options: [.mixWithOthers]),
        roleConfigurations: [String: Configuration] = [:],
        configRules: [ApplicationRule] = [],
        lingerNanoseconds: UInt64 = 2_000_000_000,
        routeMoveWindowNanoseconds: UInt64 = 1_000_000_000,
        volumeTolerance: UInt32 = 64,
        followsLockScreen: Bool = true
    ) {
        self.followsLockScreen = followsLockScreen
        self.duckLevel = duckLevel
        self.strongDuckLevel = min(Settings.defaultStrongDuckLevel, duckLevel)
        self.defaultConfiguration = defaultConfiguration
        self.roleConfigurations = roleConfigurations
        self.configRules = configRules
        self.lingerNanoseconds = lingerNanoseconds
        self.routeMoveWindowNanoseconds = routeMoveWindowNanoseconds
        self.volumeTolerance = volumeTolerance
    }

    /// Settings under which the engine decides nothing: every stream belongs to no session (as an a11y stream
    /// does), so nothing is silenced or ducked whatever the app is — and the only stream effects are the ones that
    /// put back what an earlier run left (`StreamInfo.leftByPolicy`): correcting a leak is not a decision (SPEC §8).
    /// `audiod --restore` runs the engine with these after audiod is gone, and a stopping audiod for the streams
    /// that change while it stops. If audiod starts again later, that run decides afresh.
    public static var restoreOnly: Settings {
        var s = Settings()
        s.decidesNothing = true
        s.duckFadeNanoseconds = 0
        s.unduckFadeNanoseconds = 0
        s.fadeInNanoseconds = 0
        s.fadeOutNanoseconds = 0
        return s
    }

    /// The built-in role map of docs/POLICY.md §7, in priority order (highest first).
    public static let builtInRoles: [(roles: [String], configuration: Configuration, roleClass: RoleClass)] = [
        (["phone"], Configuration(category: .playAndRecord, mode: .voiceChat), .none),
        // An alarm or an emergency outranks the app's media: while a clock app rings, nothing may silence it.
        (["emergency"], Configuration(category: .playback, options: [.duckOthers]), .emergency),
        (["alarm"], Configuration(category: .playback, options: [.duckOthers]), .alarm),
        (["music", "video"], Configuration(category: .playback), .none),
        (["game"], Configuration(category: .ambient), .none),
        (["production"], Configuration(category: .playback, options: [.mixWithOthers]), .none),
        // Voice prompts: heard over everything but spoken audio, which they interrupt (it may resume after).
        (
            ["navigation", "assistant"],
            Configuration(
                category: .playback, mode: .voicePrompt, options: [.duckOthers, .interruptSpokenAudioAndMixWithOthers]),
            .none
        ),
        (["event", "animation", "test"], Configuration(category: .ambient), .systemSound),
    ]
}
