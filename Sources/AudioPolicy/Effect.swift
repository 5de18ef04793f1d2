/// Everything audiod does, as data. The engine returns these from `Engine.handle(_:at:)`; the shell carries
/// them out in order. Stream operations come before the signals of the same step, so that a session told
/// `InterruptionBegan` has already been silenced (docs/API.md).
public enum Effect: Sendable, Equatable {
    /// Set a stream's mute (`pa_context_set_sink_input_mute` / `…source_output_mute`).
    case setStreamMute(StreamID, Bool)
    /// Unmute a playback stream audiod muted and ramp it up from silence over this long inside the server (a
    /// give-back on a stream `StreamInfo.serverRamps`); where the server cannot, the unmute at once. It counts as
    /// unmuted from now.
    case rampStreamUnmute(StreamID, nanoseconds: UInt64)
    /// Set a stream's per-channel volume.
    case setStreamVolume(StreamID, Volume)
    /// Take a playback stream someone hears to this volume over this long inside the server (a duck or its undoing,
    /// on a stream `StreamInfo.serverRampsVolume`); where the server cannot, the volume at once. It counts as set
    /// from now.
    case rampStreamVolume(StreamID, Volume, nanoseconds: UInt64)
    /// MPRIS `Pause` (never `Stop` or `PlayPause`).
    case mprisPause(PlayerID)
    /// MPRIS `Play`, only for a player audiod itself paused.
    case mprisPlay(PlayerID)
    /// A session object appeared (ObjectManager `InterfacesAdded`), with its properties as the step left them.
    case sessionAdded(SessionView)
    /// A signal from a session's object path.
    case signal(SessionID, Signal)
    /// A session object went away (ObjectManager `InterfacesRemoved`). Only for a session whose `sessionAdded` came
    /// in an earlier step: one that appears and goes within a step is never announced.
    case sessionRemoved(SessionID)
    /// Session properties changed (`PropertiesChanged`): the ones that differ from the last published, with their
    /// values at the end of the step.
    case sessionPropertiesChanged(SessionID, [SessionProperty])
    /// Manager properties changed, with their values at the end of the step.
    case managerPropertiesChanged([ManagerProperty])
    /// Start (or restart) a timer; `.timerFired` comes back after the delay unless it is cancelled.
    case scheduleTimer(TimerID, afterNanoseconds: UInt64)
    case cancelTimer(TimerID)
    /// Silent mode or the D-Bus app rules changed: save this state.
    case persist(PersistentState)
    /// The answer to a request.
    case reply(RequestID, Reply)
}

/// A session signal of docs/API.md.
public enum Signal: Sendable, Equatable {
    case interruptionBegan(InterruptionReason, interrupter: SessionID?)
    case interruptionEnded(shouldResume: Bool)
    case silenceSecondaryAudioHint(SecondaryAudioHintType)
    case routeChanged(RouteChangeReason, previousDevice: String?, currentDevice: String?)
    /// The user unmuted a stream of the output-muted session in a mixer; it has the audio now.
    case userIntentToUnmuteOutput
}

/// The answer to a request.
public enum Reply: Sendable, Equatable {
    case ok
    case session(SessionID)
    case error(PolicyError)
}

/// A session property of docs/API.md with its value.
public enum SessionProperty: Sendable, Equatable {
    case category(Category)
    case mode(Mode)
    case options([CategoryOption])
    case active(Bool)
    case interrupted(Bool)
    case mixable(Bool)
    case secondaryAudioShouldBeSilencedHint(Bool)
    case otherAudioPlaying(Bool)
    case handlesSecondaryAudio(Bool)
    case applicationName(String)
    case processID(UInt32)
    /// Indices of the session's playback streams, ascending.
    case streams([UInt32])
    /// Indices of its record streams, ascending.
    case recordStreams([UInt32])
    case prefersNoInterruptionsFromSystemAlerts(Bool)
    case outputMuted(Bool)
    /// Who audiod takes the app to be, and why it has its category.
    case identity(SessionIdentity)

    /// The D-Bus property name.
    public var name: String {
        switch self {
        case .category: "Category"
        case .identity: "Identity"
        case .mode: "Mode"
        case .options: "Options"
        case .active: "Active"
        case .interrupted: "Interrupted"
        case .mixable: "Mixable"
        case .secondaryAudioShouldBeSilencedHint: "SecondaryAudioShouldBeSilencedHint"
        case .otherAudioPlaying: "OtherAudioPlaying"
        case .handlesSecondaryAudio: "HandlesSecondaryAudio"
        case .applicationName: "ApplicationName"
        case .processID: "ProcessID"
        case .streams: "Streams"
        case .recordStreams: "RecordStreams"
        case .prefersNoInterruptionsFromSystemAlerts: "PrefersNoInterruptionsFromSystemAlerts"
        case .outputMuted: "OutputMuted"
        }
    }
}

/// A manager property the engine decides, with its value.
public enum ManagerProperty: Sendable, Equatable {
    case silentMode(Bool)
    case otherAudioPlaying(Bool)
    /// nil: no primary audio (published as the path `/`).
    case primaryAudioSession(SessionID?)
    case duckLevel(Double)
    case strongDuckLevel(Double)
    case callState(CallState)
    case screenLocked(Bool)

    public var name: String {
        switch self {
        case .screenLocked: "ScreenLocked"
        case .callState: "CallState"
        case .silentMode: "SilentMode"
        case .otherAudioPlaying: "OtherAudioPlaying"
        case .primaryAudioSession: "PrimaryAudioSession"
        case .duckLevel: "DuckLevel"
        case .strongDuckLevel: "StrongDuckLevel"
        }
    }
}

/// Which manager properties a step changed (their values are taken when the step ends).
struct ManagerProperties: OptionSet, Sendable, Hashable, CustomStringConvertible {
    let rawValue: UInt8

    static let silentMode = ManagerProperties(rawValue: 1 << 0)
    static let otherAudioPlaying = ManagerProperties(rawValue: 1 << 1)
    static let primaryAudioSession = ManagerProperties(rawValue: 1 << 2)
    static let duckLevel = ManagerProperties(rawValue: 1 << 3)
    static let callState = ManagerProperties(rawValue: 1 << 4)
    static let screenLocked = ManagerProperties(rawValue: 1 << 5)
    static let strongDuckLevel = ManagerProperties(rawValue: 1 << 6)

    var description: String {
        let all: [(ManagerProperties, String)] = [
            (.silentMode, "SilentMode"), (.otherAudioPlaying, "OtherAudioPlaying"),
            (.primaryAudioSession, "PrimaryAudioSession"), (.duckLevel, "DuckLevel"), (.callState, "CallState"),
            (.screenLocked, "ScreenLocked"), (.strongDuckLevel, "StrongDuckLevel"),
        ]
        return all.filter { contains($0.0) }.map(\.1).joined(separator: ",")
    }
}

/// A session's `Identity` property (API.md): who audiod takes the app to be and why it has its category.
public struct SessionIdentity: Sendable, Equatable {
    /// The strongest name.
    public var appID: String
    /// What vouches for it: `explicit`, `flatpak`, `launcher-scope`, `launcher-environment`, `application-id`,
    /// `desktop-entry-match` or `process`.
    public var source: String
    /// The desktop entry that decided something, or empty.
    public var desktopEntry: String
    /// What decided the category (`text` words it).
    public var categoryReason: CategoryReason

    public init(appID: String, source: String, desktopEntry: String, categoryReason: CategoryReason) {
        self.appID = appID
        self.source = source
        self.desktopEntry = desktopEntry
        self.categoryReason = categoryReason
    }
}
