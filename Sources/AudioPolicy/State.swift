/// Which process an implicit session stands for (docs/POLICY.md §7): the nearest ancestor-or-self of the stream's
/// process that owns an MPRIS player, else the stream's own process; a stream whose process cannot be vouched for
/// by its identity (a sandboxed app's); streams with neither are grouped by name.
enum ImplicitKey: Hashable, Sendable {
    case process(UInt32)
    case identity(String)
    case application(String)
}

/// Why an explicit session was deactivated, for docs/POLICY.md §7's rule on MPRIS `Play` after an owner vanished.
enum DeactivationCause: Sendable {
    case request
    case ownerVanished
    case implicitEnded
}

struct SessionState: Sendable {
    let id: SessionID
    let implicitKey: ImplicitKey?
    var lifetime: NewSession.Lifetime
    var pid: UInt32
    /// False once a `connection` session's pid exited: it lives on but owns no streams by pid.
    var ownsStreamsByPid = true
    var applicationName: String
    var configuration: Configuration
    /// An implicit session from the `event`, `animation` or `test` roles: follows only silent mode (§5).
    var roleExempt = false
    var handlesSecondaryAudio = false
    /// `PrefersNoInterruptionsFromSystemAlerts`: a platform call that only rings does not interrupt it.
    var prefersNoInterruptions = false

    var active = false
    var interrupted = false
    /// The session this one is tied to (§3); nil for an interruption nobody will end (route-disconnected).
    var interrupter: SessionID?
    /// Why it was last interrupted (its streams' `policy-reasons` say so).
    var interruptionReason: InterruptionReason?
    /// Interrupted only because it was in `spoken-audio` mode (§2.3): always told it may resume.
    var spokenOnly = false
    /// Silenced until its next activation: an explicit session's `SetActive(true)`, an implicit one's user
    /// action (Play, unmute).
    var awaitingActivation = false

    var playbackStreams: Set<StreamID> = []
    var recordStreams: Set<StreamID> = []
    var audibleCount = 0
    var lingerScheduled = false
    /// Heard `SilenceSecondaryAudioHint("begin")` and not yet the `end`.
    var toldHintBegin = false
    /// Devices whose appearance this session was already told about.
    var toldNewDevice: [String: Instant] = [:]
    /// An implicit session the voice-call rule made a call: it stays one until it has not both captured and played
    /// for the linger (`voiceCallEndScheduled` while that runs).
    var voiceCall = false
    var voiceCallEndScheduled = false
    /// Why an implicit session has its category (`Identity`'s `category-reason`, worded when a view is made).
    var categoryReason = CategoryReason.default

    var isImplicit: Bool { implicitKey != nil }
    var isCall: Bool { configuration.isCall }
    var mixable: Bool { configuration.isMixable }
    var allStreams: [StreamID] { playbackStreams.sorted() + recordStreams.sorted() }
    var hasStreams: Bool { !playbackStreams.isEmpty || !recordStreams.isEmpty }
    /// A session whose streams policy reasons tied to the session (not the stream) silence.
    var heldSilent: Bool { interrupted || awaitingActivation }
}

struct StreamState: Sendable {
    var info: StreamInfo
    var session: SessionID?
    /// The user's (or app's) own mute and volume, as last seen or set by them.
    var userMuted: Bool
    var userVolume: Volume
    /// audiod muted this stream (it was not muted by the user when audiod did).
    var appliedMute = false
    /// The volume audiod set, if it changed it.
    var appliedVolume: Volume?
    /// Silenced because its device went away while it was audible (§6).
    var routeSilenced = false
    /// A record stream audiod silenced: unmuted only by its owner's activation or the user (§3 Privacy).
    var recordHeld = false
    /// Cached decisions of the last settle.
    var policyMute = false
    var ducked = false
    var audible = false
    /// The device it left and when, for route changes announced after the server moved it.
    var previousDevice: String?
    var movedAt = Instant.zero

    var kind: StreamKind { info.id.kind }
    var isA11y: Bool { info.role == "a11y" }
}

struct PlayerState: Sendable {
    var info: PlayerInfo
    /// audiod sent `Pause` while it was `Playing`: the only players audiod will `Play`.
    var pausedByAudiod = false
    /// audiod's `Pause` is on its way: until the player reports `Paused`, a `Playing` it reports was sent before
    /// it heard the `Pause` (measured: mpv's own announcement arriving after audiod's decision), not a press of Play.
    var pauseInFlight = false
}

/// What decided an implicit session's category (SPEC §7), kept as data: a step compares it, and only a view of the
/// session words it.
public enum CategoryReason: Equatable, Sendable {
    public enum RuleSource: Equatable, Sendable { case bus, config }
    public enum GameEvidence: Equatable, Sendable {
        case role
        case entry(AppProfile.Entry)
        case gameMode(UInt32)
        case steam(String)
    }

    case rule(from: RuleSource, name: String)
    case game(GameEvidence)
    case gameChat(GameEvidence)
    case voiceCall
    case mpris
    case role(String, configured: Bool)
    case recordOnly
    case player(AppProfile.Entry)
    case `default`
    /// An explicit session: the app set its category.
    case explicit
    /// The platform call (SPEC §10).
    case platformCall

    /// The sentence a person reads (`audioctl apps`).
    public var text: String {
        switch self {
        case .rule(let from, let name): "Rule from \(from == .bus ? "audioctl" : "the config file") for \"\(name)\""
        case .game(let g): Self.words(g)
        case .gameChat(let g): Self.words(g) + ", capturing while playing: its voice chat mixes"
        case .voiceCall: "Call: captures from a microphone while it plays"
        case .mpris: "Media player: owns an MPRIS player"
        case .role(let r, let configured): "Role: a stream has media.role \(r)" + (configured ? " (config)" : "")
        case .recordOnly: "Records only"
        case .player(let e):
            "Media player: desktop entry \(e.id) (Categories=\(e.categories.joined(separator: ";"))) found through \(e.foundThrough.phrase)"
        case .default: "Default: nothing says what it is"
        case .platformCall: "Call: the platform reports a call (GNOME Calls, Plasma, ModemManager or callaudiod)"
        case .explicit: "Set by the app (SetCategory)"
        }
    }

    static func words(_ g: GameEvidence) -> String {
        switch g {
        case .role: "Game: a stream has media.role game"
        case .entry(let e):
            "Game: desktop entry \(e.id) (Categories=\(e.categories.joined(separator: ";"))) found through \(e.foundThrough.phrase)"
        case .gameMode(let pid): "Game: registered with GameMode (pid \(pid))"
        case .steam(let app): "Game: Steam's environment (app \(app))"
        }
    }
}
