/// Who an implicit app is, as the desktop knows it (SPEC §7), with the evidence: resolved outside the engine (the
/// `AppIdentity` target reads /proc, cgroups, environments and desktop entries) and handed in with each stream.
public struct AppProfile: Sendable, Equatable {
    /// What vouches for a name, strongest first (API.md `Identity` `source`).
    public enum Source: String, Sendable, Comparable {
        case flatpak
        case launcherScope = "launcher-scope"
        case launcherEnvironment = "launcher-environment"
        case applicationID = "application-id"
        case desktopEntryMatch = "desktop-entry-match"
        case process

        var strength: Int {
            switch self {
            case .flatpak: 0
            case .launcherScope: 1
            case .launcherEnvironment: 2
            case .applicationID: 3
            case .desktopEntryMatch: 4
            case .process: 5
            }
        }

        public static func < (a: Source, b: Source) -> Bool { a.strength < b.strength }
    }

    /// One name of the app, and what vouches for it.
    public struct Name: Sendable, Equatable {
        public var name: String
        public var source: Source
        public init(_ name: String, _ source: Source) {
            self.name = name
            self.source = source
        }
    }

    /// The desktop entry that decides something for the app's category (the strongest name's that does).
    public struct Entry: Sendable, Equatable {
        /// Its desktop id (`org.example.Game`) and file.
        public var id: String
        public var path: String
        /// Its `Categories`.
        public var categories: [String]
        /// Which name found it, and how (for the reason a person reads).
        public var foundThrough: Source

        public init(id: String, path: String, categories: [String], foundThrough: Source) {
            self.id = id
            self.path = path
            self.categories = categories
            self.foundThrough = foundThrough
        }

        /// `Game` among its categories: game evidence (an entry with `Game` and `Player` is a game).
        public var isGame: Bool { categories.contains("Game") }
        /// `Player` or `TV`, and not a game: a media player.
        public var isPlayer: Bool { !isGame && (categories.contains("Player") || categories.contains("TV")) }
    }

    /// Strongest first; the first is the app's id.
    public var names: [Name]
    public var entry: Entry?
    /// Steam's environment (`SteamAppId`/`SteamGameId`) on the process or an ancestor: game evidence.
    public var steamGame: String?
    /// The desktop id the process's program (`/proc/PID/exe`) matched, when one entry (or several that agree) runs
    /// it — kept even where a stronger source gave the same name, so that a rule that trusts only the program knows
    /// it was the program that said it.
    public var programEntry: String?
    /// The process's program (the name of `/proc/PID/exe`), when read.
    public var program: String?

    public init(
        names: [Name], entry: Entry? = nil, steamGame: String? = nil, programEntry: String? = nil,
        program: String? = nil
    ) {
        self.names = names
        self.entry = entry
        self.steamGame = steamGame
        self.programEntry = programEntry
        self.program = program
    }

    /// The strongest name.
    public var id: Name? { names.first }
}

extension AppProfile.Source {
    /// How a person is told where a name came from.
    public var phrase: String {
        switch self {
        case .flatpak: "its Flatpak app id"
        case .launcherScope: "its app scope"
        case .launcherEnvironment: "its launcher's environment"
        case .applicationID: "its application.id"
        case .desktopEntryMatch: "its program"
        case .process: "its process"
        }
    }
}
