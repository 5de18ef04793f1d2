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
    /// What a built-in role makes an implicit session beyond its configuration (SPEC §7 step 5).
    var roleClass = RoleClass.none
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
    /// Record streams that capture from a microphone (not a monitor) now: what holds a voice-input app's audio.
    var capturingCount = 0
    /// A capture began since the last time audibility was judged: a voice-input app's new dictation is the
    /// user's action, as Play is a player's, and activates it even after an interruption.
    var captureStarted = false
    /// It was active as a call, an emergency or voice input: it ends with notify even if it is none of them any more.
    var notifiesAtEnd = false
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
    /// `OutputMuted`: the app's output is muted by its own choice, and audiod mutes its playback streams for it.
    var outputMuted = false

    var isImplicit: Bool { implicitKey != nil }
    /// An implicit session from the `event`, `animation` or `test` roles: follows only silent mode (§5).
    var roleExempt: Bool { roleClass == .systemSound }
    /// An alarm or an emergency: nothing silences it (SPEC §7 step 5).
    var isAlert: Bool { roleClass == .alarm || roleClass == .emergency }
    /// Voice input (SPEC §7): an implicit app a rule makes `record` or `play-and-record`. Its capture from a
    /// microphone activates it; a capture alone activates nothing without the rule (OBS must not pause the music).
    var isVoiceInput: Bool {
        guard isImplicit, case .rule = categoryReason else { return false }
        return configuration.category == .record || configuration.category == .playAndRecord
    }
    /// What keeps an implicit session active, and starts its linger when it ends: an audible stream, or a voice
    /// input's capture.
    var holdsAudio: Bool { audibleCount > 0 || (isVoiceInput && capturingCount > 0) }
    /// An implicit session that ends with notify: a call (the music comes back after it), an emergency (what it
    /// interrupted may resume), voice input (the music it paused plays again).
    /// Judged while it is active, and kept until it ends (`notifiesAtEnd`): a rule removed in the middle of a
    /// dictation still gives the music back.
    var endsWithNotify: Bool { notifiesAtEnd || isCall || roleClass == .emergency || isVoiceInput }
    var isCall: Bool { configuration.isCall }
    /// An output-muted session (SPEC §5) counts as mixable: a feed playing muted takes the audio from nobody. One that
    /// may capture does not (a call, a game's voice chat that deafens itself): it still holds the microphone, which a
    /// call must take from it.
    var mixable: Bool { configuration.isMixable || mutedFeed }
    var mutedFeed: Bool { outputMuted && !configuration.category.captures }
    /// It ducks others only while it can be heard.
    var ducksOthers: Bool { configuration.ducksOthers && !outputMuted }
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
    var duck = DuckDepth.none
    var audible = false
    /// A record stream capturing from a microphone: uncorked, not of a monitor, muted by nobody.
    var capturing = false
    /// The output-muted session audiod muted it for (`OutputMuted`): that mute is the stream's own value, not a policy
    /// one. When that session's output is unmuted, the stream is unmuted — whatever muted it before: the app means
    /// to be heard, and a mute the sound server restored from an earlier output-muted stream of the app must not
    /// outlive that. A stream that leaves the session (released, its owner gone, audiod stopping) keeps the mute as
    /// its own: nobody unmuted that output.
    var mutedForApp: SessionID?
    /// A duck on its way in or out (docs/POLICY.md §2 "Fades"): `appliedVolume` is the step last written.
    var fade: VolumeFade?
    /// When the server ramp audiod last asked of it has surely run: the server starts a ramp asked meanwhile only
    /// then (it refuses a second while one runs), so a ramped fade-out's mute waits for that too.
    var serverRampEnds: Instant?
    /// Its volume is set at once this step, not faded: the stream is new (a fade would start it loud), or the
    /// user has just set a volume (the duck goes on top of it at once, as SPEC §7 says).
    var volumeAtOnce = false
    /// The user set a volume while a fade ran: a step may have gone over it on the server (the backend then reports
    /// the user's value it read before the step), so it is written once even where nothing ducks the stream.
    var writeUserVolume = false
    /// The device it left and when, for route changes announced after the server moved it.
    var previousDevice: String?
    var movedAt = Instant.zero

    var kind: StreamKind { info.id.kind }
    var ducked: Bool { duck != .none }
    /// PipeWire's native clients name the role `Accessibility`; through pipewire-pulse and on PulseAudio it is
    /// `a11y`. Either way the stream is a screen reader's, which nothing may silence.
    var isA11y: Bool { info.role == "a11y" || info.role == "Accessibility" }
}

/// How policy silences a stream (`Engine.silencing`).
enum Silencing: Sendable, Equatable {
    /// Only silent mode or the lock: nothing new is to be heard in its place, so the stream fades out first.
    case quiet
    /// Another sound takes its place (an interruption, secondary audio, a call), its device went away, or it
    /// captures: muted at once.
    case racing
}

/// A volume moving from `from` to `to` over `length`, linear in amplitude, one write per step.
struct VolumeFade: Sendable, Equatable {
    var from: Volume
    var to: Volume
    /// The fade ends audiod's hold on the volume: `to` is the user's own, and nothing is applied once it is there.
    var lifts: Bool
    /// A fade-out (`to` is silence): the stream is muted at its end and its volume put back under the mute.
    var silences = false
    var start: Instant
    var length: UInt64
    /// A stream given back while paused, whose player audiod is resuming: it waits at `from` (silence, under the
    /// unmute) for its sound until then, and fades from the moment it is heard (`start` is that moment).
    var waitsUntil: Instant?
    /// The server ramps it (`Effect.rampStreamVolume`, a fade-out where `StreamInfo.serverRampsVolume`): no step is
    /// written, and it is done once the ramp has surely run (`serverRampSettleNanoseconds` after its length).
    var serverRamped = false

    /// A server ramp's length and this: the ramp has run (two graph cycles of 1,024 samples, with room to spare).
    static let serverRampSettleNanoseconds: UInt64 = 60_000_000

    /// The value to write at `now` for a step lasting `step`: each write is where the fade will be at the next
    /// step, so the first one moves at once and the last lands on `to`.
    func value(at now: Instant, step: UInt64) -> Volume {
        let elapsed = now.since(start) + step
        return elapsed >= length ? to : from.faded(to: to, fraction: Double(elapsed) / Double(length))
    }

    func done(at now: Instant, step: UInt64) -> Bool {
        serverRamped ? now.since(start) >= length + Self.serverRampSettleNanoseconds : now.since(start) + step >= length
    }
}

struct PlayerState: Sendable {
    var info: PlayerInfo
    /// audiod sent `Pause` while it was `Playing`: the only players audiod will `Play`.
    var pausedByAudiod = false
    /// audiod's `Pause` is on its way: until the player reports `Paused`, a `Playing` it reports was sent before
    /// it heard the `Pause` (measured: mpv's own announcement arriving after audiod's decision), not a press of Play.
    var pauseInFlight = false
    /// audiod's `Play` is on its way: the `Playing` that answers it is audiod's own doing, not a press of Play — and
    /// a session that lost the audio again meanwhile (measured: a dictation starting in the 20 ms between audiod's
    /// `Play` and mpv's `Playing`) must pause it again, though it still says `Paused`.
    var playInFlight = false
    /// When audiod last sent `Play` or `Pause`: an answer is awaited only for a while (`Engine.awaitsAnswer`).
    var sentAt: Instant?
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

/// What a built-in role makes an implicit session beyond its configuration (SPEC §7 step 5).
public enum RoleClass: Sendable, Equatable {
    case none
    /// `event`, `animation`, `test`: system sounds follow only silent mode (§5).
    case systemSound
    /// `alarm`/`Alarm`: never silenced (secondary audio, interruptions, sleep); ducks the rest but never a call.
    case alarm
    /// `emergency`/`Emergency`: an alarm whose activation also interrupts every session but a call.
    case emergency
}

/// How deep a stream is ducked. Where several ducks apply the deepest wins, one factor per stream.
enum DuckDepth: Sendable, Equatable {
    case none
    /// Under a `duck-others` session: `DuckLevel`.
    case normal
    /// Under a voice prompt (mode `voice-prompt`) or an audible a11y stream: `StrongDuckLevel`.
    case strong
}
