/// The words of the D-Bus contract, as types: one vocabulary for the engine, the daemon and the client library.
///
/// Every kind has a `rawValue` that is the exact lower-case kebab-case string used on the bus. This module depends
/// on nothing, so that an app linking the client library links no part of the daemon.

/// How an app uses sound (docs/POLICY.md §1).
public enum Category: String, CaseIterable, Sendable, Hashable, Comparable {
    case ambient
    case soloAmbient = "solo-ambient"
    case playback
    case record
    case playAndRecord = "play-and-record"

    /// The modes this category accepts, in docs/API.md order.
    public var acceptedModes: [Mode] {
        switch self {
        case .ambient, .soloAmbient: return [.default]
        case .playback: return [.default, .moviePlayback, .spokenAudio, .voicePrompt, .measurement, .shortFormVideo]
        case .record: return [.default, .videoRecording, .measurement]
        case .playAndRecord:
            return [.default, .voiceChat, .videoChat, .gameChat, .videoRecording, .measurement, .voicePrompt]
        }
    }

    /// The category options this category accepts.
    public var acceptedOptions: [CategoryOption] {
        switch self {
        case .ambient: return [.mixWithOthers, .duckOthers]
        case .soloAmbient, .record: return []
        case .playback, .playAndRecord: return CategoryOption.allCases
        }
    }

    /// Whether its sessions may capture from a microphone.
    public var captures: Bool { self == .record || self == .playAndRecord }

    /// Whether silent mode silences this category's playback streams (docs/POLICY.md §4).
    public var obeysSilentMode: Bool { self == .ambient || self == .soloAmbient }

    public static func < (a: Category, b: Category) -> Bool { a.rawValue < b.rawValue }
}

/// A refinement of a category (docs/API.md "mode").
public enum Mode: String, CaseIterable, Sendable, Hashable {
    case `default`
    case voiceChat = "voice-chat"
    case videoChat = "video-chat"
    case gameChat = "game-chat"
    case videoRecording = "video-recording"
    case measurement
    case moviePlayback = "movie-playback"
    case spokenAudio = "spoken-audio"
    case voicePrompt = "voice-prompt"
    /// A feed of short videos that autoplays muted (iOS 26): `SetCategory` with it sets `OutputMuted`.
    case shortFormVideo = "short-form-video"
}

/// Options given with `SetCategory`.
public enum CategoryOption: String, CaseIterable, Sendable, Hashable, Comparable {
    case mixWithOthers = "mix-with-others"
    case duckOthers = "duck-others"
    case interruptSpokenAudioAndMixWithOthers = "interrupt-spoken-audio-and-mix-with-others"

    public static func < (a: CategoryOption, b: CategoryOption) -> Bool {
        // docs/API.md order, so `Options` always lists them the same way.
        guard let i = allCases.firstIndex(of: a), let j = allCases.firstIndex(of: b) else { return false }
        return i < j
    }
}

/// Options given with `SetActive`.
public enum ActivationOption: String, CaseIterable, Sendable, Hashable {
    case notifyOthersOnDeactivation = "notify-others-on-deactivation"
}

/// Why a session lost the audio (`InterruptionBegan`).
public enum InterruptionReason: String, CaseIterable, Sendable, Hashable {
    case `default`
    case routeDisconnected = "route-disconnected"
    case call
    /// The user muted the microphone the session captures from.
    case builtinMicMuted = "builtin-mic-muted"
    /// Ambient sound while the screen is locked.
    case screenLocked = "screen-locked"
    /// The machine is going to sleep.
    case suspend
}

/// The platform's calls (`CallState`), the first that applies: a call rings in or waits, one is dialled or rings
/// out, one is active, all are held, or there is none.
public enum CallState: String, CaseIterable, Sendable, Hashable {
    case none
    case ringing
    case dialing
    case active
    case held
}

/// Why a session's route changed (`RouteChanged`).
public enum RouteChangeReason: String, CaseIterable, Sendable, Hashable {
    case newDeviceAvailable = "new-device-available"
    case oldDeviceUnavailable = "old-device-unavailable"
    case categoryChange = "category-change"
    case override
    case unknown
}

/// The secondary-audio hint's two edges (`SilenceSecondaryAudioHint`).
public enum SecondaryAudioHintType: String, Sendable, Hashable {
    case begin
    case end
}

/// The names of audiod on the bus.
public enum BusNames {
    public static let busName = "org.audiod.AudioSession1"
    public static let managerPath = "/org/audiod/AudioSession1"
    public static let sessionPathPrefix = "/org/audiod/AudioSession1/session/"
    public static let managerInterface = "org.audiod.AudioSession1.Manager"
    public static let sessionInterface = "org.audiod.AudioSession1.Session"
    /// What audiod's own error names start with.
    public static let errorPrefix = "org.audiod.AudioSession1.Error."
}

/// audiod's own errors (the part after `org.audiod.AudioSession1.Error.`).
public enum ErrorName: String, CaseIterable, Sendable, Hashable {
    case invalidCategory = "InvalidCategory"
    case invalidMode = "InvalidMode"
    case incompatibleMode = "IncompatibleMode"
    case invalidOption = "InvalidOption"
    case incompatibleOption = "IncompatibleOption"
    case insufficientPriority = "InsufficientPriority"
    case noSuchSession = "NoSuchSession"
    case noSuchProcess = "NoSuchProcess"
    case noSuchRule = "NoSuchRule"
    case serverUnavailable = "ServerUnavailable"
    case limitExceeded = "LimitExceeded"
    case shuttingDown = "ShuttingDown"
    case invalidConfig = "InvalidConfig"

    /// The full D-Bus error name.
    public var busName: String { BusNames.errorPrefix + rawValue }
}
