/// The parts of a desktop entry (freedesktop Desktop Entry Specification) that say what an app is.
public struct DesktopEntry: Sendable, Equatable {
    /// The desktop id: the file's path below `applications/`, with `/` turned into `-`, without `.desktop`.
    public var id: String
    public var path: String
    public var categories: [String]
    /// The program of `TryExec`, else of `Exec` (after `env` and its `VAR=value` words): its file name.
    public var program: String?

    public init(id: String, path: String, categories: [String], program: String?) {
        self.id = id
        self.path = path
        self.categories = categories
        self.program = program
    }

    public var isTerminal: Bool { categories.contains("TerminalEmulator") }
    public var isGame: Bool { categories.contains("Game") }
    public var isPlayer: Bool { !isGame && (categories.contains("Player") || categories.contains("TV")) }
    /// What the entry decides for a category (SPEC §7): a game, a media player, or nothing.
    public var decision: Decision {
        if isTerminal { return .none }
        if isGame { return .game }
        if isPlayer { return .player }
        return .none
    }

    public enum Decision: Sendable, Equatable { case game, player, none }

    /// The largest entry read: real ones are a few kB (translations included).
    public static let maximumBytes = 256 * 1024

    /// Parses an entry's text; nil when it is not one (no `[Desktop Entry]` group, binary content, too large, not
    /// of `Type=Application`, or hidden).
    public static func parse(_ bytes: [UInt8], id: String, path: String) -> DesktopEntry? {
        guard bytes.count <= maximumBytes, !bytes.contains(0) else { return nil }
        let text = String(decoding: bytes, as: UTF8.self)
        var inMain = false
        var seenMain = false
        var values: [String: String] = [:]
        for raw in text.split(separator: "\n", omittingEmptySubsequences: true) {
            let line = raw.trimmingWhitespace()
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix("[") {
                inMain = line == "[Desktop Entry]"
                if inMain { seenMain = true }
                continue
            }
            guard inMain, let eq = line.firstIndex(of: "=") else { continue }
            let key = line[..<eq].trimmingWhitespace()
            // Localized keys (`Name[de]`) say nothing here.
            guard !key.contains("["), values[String(key)] == nil else { continue }
            values[String(key)] = String(line[line.index(after: eq)...].trimmingWhitespace())
        }
        guard seenMain, (values["Type"] ?? "Application") == "Application", values["Hidden"] != "true" else {
            return nil
        }
        let categories = (values["Categories"] ?? "").split(separator: ";").map { String($0) }.filter { !$0.isEmpty }
        let program = values["TryExec"].flatMap(Self.programName) ?? values["Exec"].flatMap(Self.programName)
        return DesktopEntry(id: id, path: path, categories: categories, program: program)
    }

    /// The file name of the program an `Exec` or `TryExec` value runs: the first word, after `env` and its
    /// `VAR=value` words and options; quotes removed.
    static func programName(_ exec: String) -> String? {
        var words = exec.split(separator: " ", omittingEmptySubsequences: true).map {
            String($0).trimmingCharacters(inSet: "\"'")
        }[...]
        guard var first = words.popFirst() else { return nil }
        if first == "env" || first.hasSuffix("/env") {
            while let w = words.first, w.contains("=") || w.hasPrefix("-") { words.removeFirst() }
            guard let next = words.popFirst() else { return nil }
            first = next
        }
        let name = first.split(separator: "/").last.map(String.init) ?? first
        return name.isEmpty || name.hasPrefix("%") ? nil : name
    }
}

extension Substring {
    func trimmingWhitespace() -> Substring {
        var s = self
        while let c = s.first, c == " " || c == "\t" || c == "\r" { s.removeFirst() }
        while let c = s.last, c == " " || c == "\t" || c == "\r" { s.removeLast() }
        return s
    }
}

extension String {
    func trimmingCharacters(inSet set: String) -> String {
        var s = Substring(self)
        while let c = s.first, set.contains(c) { s.removeFirst() }
        while let c = s.last, set.contains(c) { s.removeLast() }
        return String(s)
    }
}
