/// The words of the D-Bus contract (API.md, "Vocabulary"), as types.
///
/// Every kind has a `rawValue` that is the exact lower-case kebab-case string used on the bus, and a
/// `parse` that turns a caller's string into the value or into the `PolicyError` the API names.

/// How an app uses sound (SPEC.md §1).
public enum Category: String, CaseIterable, Sendable, Hashable, Comparable {
    case ambient
    case soloAmbient = "solo-ambient"
    case playback
    case record
    case playAndRecord = "play-and-record"

    /// The modes this category accepts, in API.md order.
    public var acceptedModes: [Mode] {
        switch self {
        case .ambient, .soloAmbient: return [.default]
        case .playback: return [.default, .moviePlayback, .spokenAudio, .voicePrompt, .measurement]
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

    /// Whether silent mode silences this category's playback streams (SPEC.md §4).
    public var obeysSilentMode: Bool { self == .ambient || self == .soloAmbient }

    public static func < (a: Category, b: Category) -> Bool { a.rawValue < b.rawValue }
}

/// A refinement of a category (API.md "mode").
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
}

/// Options given with `SetCategory`.
public enum CategoryOption: String, CaseIterable, Sendable, Hashable, Comparable {
    case mixWithOthers = "mix-with-others"
    case duckOthers = "duck-others"
    case interruptSpokenAudioAndMixWithOthers = "interrupt-spoken-audio-and-mix-with-others"

    public static func < (a: CategoryOption, b: CategoryOption) -> Bool {
        // API.md order, so `Options` always lists them the same way.
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

/// A session's full configuration: what `SetCategory` sets and the `Category`/`Mode`/`Options` properties show.
public struct Configuration: Sendable, Hashable {
    public var category: Category
    public var mode: Mode
    /// The options in force, implied ones included, in API.md order.
    public private(set) var options: [CategoryOption]

    /// A configuration whose options are normalised: implied `mix-with-others` added, duplicates removed.
    public init(category: Category, mode: Mode = .default, options: some Sequence<CategoryOption> = []) {
        self.category = category
        self.mode = mode
        var set = Set(options)
        // Ambient mixes by definition and the two other options imply mixing; `Options` lists the implied option
        // so that writing the list back is accepted (SPEC.md §1).
        if category == .ambient || set.contains(.duckOthers) || set.contains(.interruptSpokenAudioAndMixWithOthers) {
            set.insert(.mixWithOthers)
        }
        self.options = set.sorted()
    }

    /// The default of a new session: `solo-ambient`, `default`, no options.
    public static let initial = Configuration(category: .soloAmbient)

    public func has(_ option: CategoryOption) -> Bool { options.contains(option) }

    /// SPEC.md §0: `ambient`, or any session with `mix-with-others` (set or implied).
    public var isMixable: Bool { category == .ambient || has(.mixWithOthers) }

    /// SPEC.md §0: a non-mixable `play-and-record` session in mode `voice-chat` or `video-chat`.
    public var isCall: Bool {
        category == .playAndRecord && !isMixable && (mode == .voiceChat || mode == .videoChat)
    }

    public var ducksOthers: Bool { has(.duckOthers) }

    /// Validates caller strings in SPEC.md §1's order — category, mode, then options in list order — and
    /// reports the first failure.
    public static func parse(category: String, mode: String, options: [String]) -> Result<Configuration, PolicyError> {
        guard let c = Category(rawValue: category) else {
            return .failure(.invalidCategory(category))
        }
        guard let m = Mode(rawValue: mode) else {
            return .failure(.invalidMode(mode))
        }
        guard c.acceptedModes.contains(m) else {
            return .failure(.incompatibleMode(m, category: c))
        }
        var parsed: [CategoryOption] = []
        for raw in options {
            guard let o = CategoryOption(rawValue: raw) else {
                return .failure(.invalidOption(raw, kind: .category))
            }
            guard c.acceptedOptions.contains(o) else {
                return .failure(.incompatibleOption(raw, because: .notAcceptedBy(c)))
            }
            parsed.append(o)
        }
        return .success(Configuration(category: c, mode: m, options: parsed))
    }
}

/// Parses `SetActive`'s options against the requested direction.
public func parseActivationOptions(_ options: [String], active: Bool) -> Result<Set<ActivationOption>, PolicyError> {
    var set = Set<ActivationOption>()
    for raw in options {
        guard let o = ActivationOption(rawValue: raw) else {
            return .failure(.invalidOption(raw, kind: .activation))
        }
        if active && o == .notifyOthersOnDeactivation {
            return .failure(.incompatibleOption(raw, because: .onlyOnDeactivation))
        }
        set.insert(o)
    }
    return .success(set)
}

func joined<T: RawRepresentable>(_ values: [T]) -> String where T.RawValue == String {
    values.map(\.rawValue).joined(separator: ", ")
}
