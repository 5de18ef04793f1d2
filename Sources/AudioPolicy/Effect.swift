/// Everything audiod does, as data. The engine returns these from `Engine.handle(_:at:)`; the shell carries
/// them out in order. Stream operations come before the signals of the same step, so that a session told
/// `InterruptionBegan` has already been silenced (docs/API.md).
public enum Effect: Sendable, Equatable {
    /// Set a stream's mute (`pa_context_set_sink_input_mute` / `…source_output_mute`).
    case setStreamMute(StreamID, Bool)
    /// Set a stream's per-channel volume.
    case setStreamVolume(StreamID, Volume)
    /// MPRIS `Pause` (never `Stop` or `PlayPause`).
    case mprisPause(PlayerID)
    /// MPRIS `Play`, only for a player audiod itself paused.
    case mprisPlay(PlayerID)
    /// A session object appeared (ObjectManager `InterfacesAdded`).
    case sessionAdded(SessionID)
    /// A signal from a session's object path.
    case signal(SessionID, Signal)
    /// A session object went away (ObjectManager `InterfacesRemoved`).
    case sessionRemoved(SessionID)
    /// Session properties changed (`PropertiesChanged`); values are read from `Engine.session(_:)`.
    case sessionPropertiesChanged(SessionID, SessionProperties)
    /// Manager properties changed; values are read from the engine.
    case managerPropertiesChanged(ManagerProperties)
    /// Start (or restart) a timer; `.timerFired` comes back after the delay unless it is cancelled.
    case scheduleTimer(TimerID, afterNanoseconds: UInt64)
    case cancelTimer(TimerID)
    /// Silent mode or the D-Bus app rules changed: save `Engine.persistentState`.
    case persist
    /// The answer to a request.
    case reply(RequestID, Reply)
}

/// A session signal of docs/API.md.
public enum Signal: Sendable, Equatable {
    case interruptionBegan(InterruptionReason, interrupter: SessionID?)
    case interruptionEnded(shouldResume: Bool)
    case silenceSecondaryAudioHint(SecondaryAudioHintType)
    case routeChanged(RouteChangeReason, previousDevice: String?, currentDevice: String?)
}

/// The answer to a request.
public enum Reply: Sendable, Equatable {
    case ok
    case session(SessionID)
    case error(PolicyError)
}

/// The session properties that changed, as a set.
public struct SessionProperties: OptionSet, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let category = SessionProperties(rawValue: 1 << 0)
    public static let mode = SessionProperties(rawValue: 1 << 1)
    public static let options = SessionProperties(rawValue: 1 << 2)
    public static let active = SessionProperties(rawValue: 1 << 3)
    public static let interrupted = SessionProperties(rawValue: 1 << 4)
    public static let mixable = SessionProperties(rawValue: 1 << 5)
    public static let secondaryAudioShouldBeSilencedHint = SessionProperties(rawValue: 1 << 6)
    public static let otherAudioPlaying = SessionProperties(rawValue: 1 << 7)
    public static let handlesSecondaryAudio = SessionProperties(rawValue: 1 << 8)
    public static let streams = SessionProperties(rawValue: 1 << 9)
    public static let recordStreams = SessionProperties(rawValue: 1 << 10)
    public static let applicationName = SessionProperties(rawValue: 1 << 11)
    public static let processID = SessionProperties(rawValue: 1 << 12)

    /// The D-Bus property names, in docs/API.md order.
    public var names: [String] {
        let all: [(SessionProperties, String)] = [
            (.category, "Category"), (.mode, "Mode"), (.options, "Options"), (.active, "Active"),
            (.interrupted, "Interrupted"), (.mixable, "Mixable"),
            (.secondaryAudioShouldBeSilencedHint, "SecondaryAudioShouldBeSilencedHint"),
            (.otherAudioPlaying, "OtherAudioPlaying"), (.handlesSecondaryAudio, "HandlesSecondaryAudio"),
            (.applicationName, "ApplicationName"), (.processID, "ProcessID"), (.streams, "Streams"),
            (.recordStreams, "RecordStreams"),
        ]
        return all.filter { contains($0.0) }.map(\.1)
    }

    public var description: String { names.joined(separator: ",") }
}

/// The manager properties the engine decides.
public struct ManagerProperties: OptionSet, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let silentMode = ManagerProperties(rawValue: 1 << 0)
    public static let otherAudioPlaying = ManagerProperties(rawValue: 1 << 1)
    public static let primaryAudioSession = ManagerProperties(rawValue: 1 << 2)
    public static let duckLevel = ManagerProperties(rawValue: 1 << 3)

    public var names: [String] {
        let all: [(ManagerProperties, String)] = [
            (.silentMode, "SilentMode"), (.otherAudioPlaying, "OtherAudioPlaying"),
            (.primaryAudioSession, "PrimaryAudioSession"), (.duckLevel, "DuckLevel"),
        ]
        return all.filter { contains($0.0) }.map(\.1)
    }

    public var description: String { names.joined(separator: ",") }
}
