import AudioPolicy

/// What a reader found about the process that plays a stream: the inputs of identity resolution.
public struct ProcessFacts: Sendable, Equatable {
    public var pid: UInt32
    /// The pid and its ancestors.
    public var chain: [UInt32]
    public var flatpakID: String?
    /// The desktop id of the process's launcher scope or service (`LauncherIDs.desktopID(cgroup:)`).
    public var scopeID: String?
    /// The desktop id a GLib launcher left in the environment, when valid for this process.
    public var launchedID: String?
    public var applicationID: String?
    /// The file name of the executable (else of `argv[0]`).
    public var program: String?
    public var steamGame: String?

    public init(
        pid: UInt32, chain: [UInt32] = [], flatpakID: String? = nil, scopeID: String? = nil, launchedID: String? = nil,
        applicationID: String? = nil, program: String? = nil, steamGame: String? = nil
    ) {
        self.pid = pid
        self.chain = chain
        self.flatpakID = flatpakID
        self.scopeID = scopeID
        self.launchedID = launchedID
        self.applicationID = applicationID
        self.program = program
        self.steamGame = steamGame
    }
}

/// Desktop entries by id and by program.
public protocol DesktopEntries {
    func entry(id: String) -> DesktopEntry?
    func entries(program: String) -> [DesktopEntry]
}

/// Identity resolution (SPEC §7): a pure function from what a reader found to the app's names, strongest first,
/// and the desktop entry that decides its category.
public enum IdentityResolver {
    /// Programs that run other programs: their name says nothing about the app.
    static let launchers: Set<String> = [
        "sh", "bash", "dash", "zsh", "fish", "env", "perl", "java", "mono", "node", "nodejs", "flatpak", "snap",
        "steam", "lutris", "ruby", "lua", "gjs", "qemu", "xdg-open", "gio",
    ]
    static let launcherPrefixes = ["python", "electron", "wine"]

    public static func isLauncher(_ program: String) -> Bool {
        launchers.contains(program) || launcherPrefixes.contains { program.hasPrefix($0) }
    }

    public static func resolve(_ f: ProcessFacts, _ entries: DesktopEntries) -> AppProfile {
        var names: [AppProfile.Name] = []
        var found: [(DesktopEntry, AppProfile.Source)] = []
        func add(_ name: String?, _ source: AppProfile.Source, lookUp: Bool = true) {
            guard let name, !name.isEmpty, name.utf8.count <= 255, !names.contains(where: { $0.name == name }) else {
                return
            }
            if lookUp, let e = entries.entry(id: name) {
                // A terminal's scope and environment are inherited by everything started in it: its entry, and the
                // name that found it, decide nothing for what runs inside.
                if e.isTerminal { return }
                found.append((e, source))
            }
            names.append(AppProfile.Name(name, source))
        }
        add(f.flatpakID, .flatpak)
        add(f.scopeID, .launcherScope)
        add(f.launchedID, .launcherEnvironment)
        add(f.applicationID, .applicationID)
        var programEntry: String?
        if let program = f.program, !isLauncher(program) {
            // Two entries that run this program and disagree on what it is are no match.
            let matches = entries.entries(program: program).filter { !$0.isTerminal }
            if !matches.isEmpty, Set(matches.map(\.decision)).count == 1, let e = matches.min(by: { $0.id < $1.id }) {
                programEntry = e.id
                if !names.contains(where: { $0.name == e.id }) {
                    names.append(AppProfile.Name(e.id, .desktopEntryMatch))
                    found.append((e, .desktopEntryMatch))
                }
            }
        }
        add(f.program, .process, lookUp: false)
        // The first entry, strongest first, that decides something; else the strongest one found.
        let deciding = found.first { $0.0.decision != .none } ?? found.first
        let entry = deciding.map { e, source in
            AppProfile.Entry(id: e.id, path: e.path, categories: e.categories, foundThrough: source)
        }
        return AppProfile(
            names: names, entry: entry, steamGame: f.steamGame, programEntry: programEntry, program: f.program)
    }
}
