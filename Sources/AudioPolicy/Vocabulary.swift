// The words themselves (Category, Mode, the options and reasons) live in AudioVocabulary, which the client
// library shares; here is what the engine adds: configurations, and parsing into the `PolicyError` the API names.
@_exported import AudioVocabulary

/// A session's full configuration: what `SetCategory` sets and the `Category`/`Mode`/`Options` properties show.
public struct Configuration: Sendable, Hashable {
    public var category: Category
    public var mode: Mode
    /// The options in force, implied ones included, in docs/API.md order.
    public private(set) var options: [CategoryOption]

    /// A configuration whose options are normalised: implied `mix-with-others` added, duplicates removed.
    public init(category: Category, mode: Mode = .default, options: some Sequence<CategoryOption> = []) {
        self.category = category
        self.mode = mode
        var set = Set(options)
        // Ambient mixes by definition and the two other options imply mixing; `Options` lists the implied option
        // so that writing the list back is accepted (docs/POLICY.md §1).
        if category == .ambient || set.contains(.duckOthers) || set.contains(.interruptSpokenAudioAndMixWithOthers) {
            set.insert(.mixWithOthers)
        }
        self.options = set.sorted()
    }

    /// The default of a new session: `solo-ambient`, `default`, no options.
    public static let initial = Configuration(category: .soloAmbient)

    public func has(_ option: CategoryOption) -> Bool { options.contains(option) }

    /// docs/POLICY.md §0: `ambient`, or any session with `mix-with-others` (set or implied).
    public var isMixable: Bool { category == .ambient || has(.mixWithOthers) }

    /// docs/POLICY.md §0: a non-mixable `play-and-record` session in mode `voice-chat` or `video-chat`.
    public var isCall: Bool {
        category == .playAndRecord && !isMixable && (mode == .voiceChat || mode == .videoChat)
    }

    public var ducksOthers: Bool { has(.duckOthers) }

    /// Validates caller strings in docs/POLICY.md §1's order — category, mode, then options in list order — and
    /// reports the first failure.
    public static func parse(category: String, mode: String, options: [String]) -> Result<Configuration, PolicyError> {
        if let refusal = Refusal.check(category: category, mode: mode, options: options) {
            return .failure(PolicyError(refusal))
        }
        guard let c = Category(rawValue: category), let m = Mode(rawValue: mode) else {
            return .failure(.invalidCategory(category))
        }
        return .success(
            Configuration(category: c, mode: m, options: options.compactMap(CategoryOption.init(rawValue:))))
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
