import AudioPolicy
import Dispatch
import FoundationEssentials
import Glibc

/// A problem in a config file, with where it is.
public struct ConfigError: Error, Equatable, Sendable, CustomStringConvertible {
    public var file: String
    /// 1-based; nil when the problem is not tied to a line.
    public var line: Int?
    /// The dotted key, e.g. `apps.mpv.category`.
    public var key: String?
    public var message: String

    public var description: String {
        var s = file
        if let line { s += ":\(line)" }
        if let key { s += ": \(key)" }
        return s + ": " + message
    }
}

/// audiod's config file (`audiod.toml`): DuckLevel, the default category for unknown apps, the media-role map, app
/// rules and the linger. Every key is checked; a typo is an error that names the file, line and key (docs/CONFIG.md).
public enum ConfigFile {
    /// Where audiod looks, in order: `$XDG_CONFIG_HOME/audiod/audiod.toml` (default `~/.config`), then each
    /// `$XDG_CONFIG_DIRS` entry (default `/etc/xdg`) + `/audiod/audiod.toml`.
    public static func searchPath(environment env: [String: String] = ProcessInfo.processInfo.environment) -> [String] {
        var out: [String] = []
        if let x = env["XDG_CONFIG_HOME"], !x.isEmpty {
            out.append(x + "/audiod/audiod.toml")
        } else if let home = env["HOME"], !home.isEmpty {
            out.append(home + "/.config/audiod/audiod.toml")
        }
        let dirs = (env["XDG_CONFIG_DIRS"].flatMap { $0.isEmpty ? nil : $0 } ?? "/etc/xdg").split(separator: ":")
        out += dirs.map { String($0) + "/audiod/audiod.toml" }
        return out
    }

    /// The first config file that exists, or nil (then the built-in settings apply).
    public static func find(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        searchPath(environment: environment).first { FileManager.default.fileExists(atPath: $0) }
    }

    /// Reads and checks a config file.
    public static func load(path: String) throws(ConfigError) -> Settings {
        guard let data = FileManager.default.contents(atPath: path) else {
            let why = access(path, R_OK) == 0 ? "it could not be read" : String(cString: strerror(errno))
            throw ConfigError(file: path, line: nil, key: nil, message: "cannot read the file: \(why)")
        }
        guard let text = String(validating: data, as: UTF8.self) else {
            throw ConfigError(file: path, line: nil, key: nil, message: "cannot read the file: it is not UTF-8 text")
        }
        return try parse(text, file: path)
    }

    static let configurationKeys = ["category", "mode", "options"]
    static let topKeys = [
        "duck-level", "strong-duck-level", "duck-fade", "unduck-fade", "fade-in", "fade-out", "de-click", "linger",
        "volume-tolerance",
        "nice-level",
        "default", "roles", "apps",
        "platform",
    ]
    static let platformKeys = ["lock-screen", "trusted-apps"]

    /// Parses config text; `file` names it in errors.
    public static func parse(_ text: String, file: String) throws(ConfigError) -> Settings {
        let table: TOMLTable
        do {
            table = try TOMLParser.parse(text)
        } catch {
            throw ConfigError(file: file, line: error.line, key: nil, message: "not valid TOML: \(error.message)")
        }
        let lines = LineIndex(text)
        func fail(_ key: String, _ message: String) -> ConfigError {
            ConfigError(file: file, line: lines.line(of: key), key: key, message: message)
        }

        var settings = Settings()
        for key in table.keys where !topKeys.contains(key) {
            throw fail(key, "unknown key; accepted: \(topKeys.joined(separator: ", "))")
        }
        if let v = table["duck-level"] {
            guard let d = v.double ?? v.int.map(Double.init), d > 0, d < 1 else {
                throw fail("duck-level", "must be a number between 0 and 1, exclusive (e.g. 0.2 ≈ -14 dB)")
            }
            settings.duckLevel = d
        }
        // Unset, the strong level follows a duck level set below its default: a file that set a deep duck-level
        // before there were two levels still reads.
        settings.strongDuckLevel = min(Settings.defaultStrongDuckLevel, settings.duckLevel)
        if let v = table["strong-duck-level"] {
            guard let d = v.double ?? v.int.map(Double.init), d > 0, d < 1 else {
                throw fail(
                    "strong-duck-level", "must be a number between 0 and 1, exclusive (e.g. 0.0178 ≈ -35 dB)")
            }
            settings.strongDuckLevel = d
        }
        if settings.strongDuckLevel > settings.duckLevel {
            throw fail(
                "strong-duck-level",
                "strong-duck-level (\(settings.strongDuckLevel)) must be at most duck-level (\(settings.duckLevel)): "
                    + "a voice prompt ducks at least as deep as anything else")
        }
        // A fade longer than a few seconds is no longer heard as the other app giving way but as a mistake.
        for (key, example) in [("duck-fade", "0.5"), ("unduck-fade", "0.5"), ("fade-in", "1"), ("fade-out", "0.5")] {
            guard let v = table[key] else { continue }
            guard let d = v.double ?? v.int.map(Double.init), d >= 0, d <= 5 else {
                throw fail(key, "must be a number of seconds from 0 to 5, 0 for a step (e.g. \(example))")
            }
            switch key {
            case "duck-fade": settings.duckFadeNanoseconds = UInt64(d * 1e9)
            case "unduck-fade": settings.unduckFadeNanoseconds = UInt64(d * 1e9)
            case "fade-in": settings.fadeInNanoseconds = UInt64(d * 1e9)
            default: settings.fadeOutNanoseconds = UInt64(d * 1e9)
            }
        }
        if let v = table["de-click"] {
            // Longer, and the old sound is still heard when the new one begins (docs/BENCHMARKS.md, "What is heard").
            guard let d = v.double ?? v.int.map(Double.init), d >= 0, d <= 0.05 else {
                throw fail("de-click", "must be a number of seconds from 0 to 0.05, 0 for a step (e.g. 0.008)")
            }
            settings.deClickNanoseconds = UInt64((d * 1e9).rounded())
        }
        if let v = table["linger"] {
            guard let d = v.double ?? v.int.map(Double.init), d >= 0, d <= 3600 else {
                throw fail("linger", "must be a number of seconds from 0 to 3600 (e.g. 2)")
            }
            settings.lingerNanoseconds = UInt64(d * 1e9)
        }
        if let v = table["volume-tolerance"] {
            // A tenth of full volume is far beyond any rounding a server does: past it, a user's change would be
            // taken for audiod's own.
            guard let n = v.int, n >= 0, n <= 6553 else {
                throw fail(
                    "volume-tolerance",
                    "must be a whole number of volume steps from 0 to 6553 (65536 is 100 %; the default 64 is about 0.1 %)"
                )
            }
            settings.volumeTolerance = UInt32(n)
        }
        if let v = table["nice-level"] {
            guard let n = v.int, n >= -20, n <= 19 else {
                throw fail(
                    "nice-level",
                    "must be a whole number from -20 to 19 (the scheduler's nice levels; the default -11 is the sound server's own, 0 leaves audiod as it was started)"
                )
            }
            settings.niceLevel = Int32(n)
        }
        if let v = table["default"] {
            guard let t = v.table else {
                throw fail("default", "must be a table: [default] with category, mode, options")
            }
            settings.defaultConfiguration = try configuration(t, key: "default", fail)
        }
        if let v = table["roles"] {
            guard let roles = v.table else { throw fail("roles", "must be a table of roles: [roles.music] …") }
            for role in roles.keys {
                guard let t = roles[role]?.table else {
                    throw fail("roles.\(role)", "must be a table with category, mode, options")
                }
                settings.roleConfigurations[role] = try configuration(t, key: "roles.\(role)", fail)
            }
        }
        if let v = table["apps"] {
            guard let apps = v.table else { throw fail("apps", "must be a table of applications: [apps.mpv] …") }
            for app in apps.keys.sorted() {
                guard !app.isEmpty else { throw fail("apps", "an application name must not be empty") }
                guard let t = apps[app]?.table else {
                    throw fail("apps.\(app)", "must be a table with category, mode, options")
                }
                let c = try configuration(t, key: "apps.\(app)", fail)
                settings.configRules.append(
                    ApplicationRule(
                        application: app, configuration: c, source: .configFile, file: file,
                        line: lines.line(of: "apps.\(app)")))
            }
        }
        if let v = table["platform"] {
            guard let t = v.table else { throw fail("platform", "must be a table: [platform] with lock-screen") }
            for k in t.keys where !platformKeys.contains(k) {
                throw fail("platform.\(k)", "unknown key; accepted: \(platformKeys.joined(separator: ", "))")
            }
            if let b = t["lock-screen"] {
                guard case .bool(let on) = b else {
                    throw fail(
                        "platform.lock-screen", "must be true (ambient sound stops while the screen is locked) or false"
                    )
                }
                settings.followsLockScreen = on
            }
            if let v = t["trusted-apps"] {
                let message =
                    "must be an array of Flatpak app ids (e.g. [\"org.example.Calls\"]: two or more dot-separated parts of letters, digits, _ and -)"
                guard let items = v.array else { throw fail("platform.trusted-apps", message) }
                for item in items {
                    guard let id = item.string, Self.isAppID(id) else {
                        throw fail(
                            "platform.trusted-apps",
                            message + "; \(item.string.map { "'\($0)'" } ?? "a non-string") is not one")
                    }
                    settings.trustedPlatformApps.append(id)
                }
            }
        }
        return settings
    }

    /// A Flatpak app id: at least two dot-separated parts, each of ASCII letters, digits, `_` and `-`, 255 bytes at
    /// most (Flatpak's own rule, without its part-start details).
    static func isAppID(_ s: String) -> Bool {
        let parts = s.split(separator: ".", omittingEmptySubsequences: false)
        return s.utf8.count <= 255 && parts.count >= 2
            && parts.allSatisfy { p in
                !p.isEmpty
                    && p.unicodeScalars.allSatisfy {
                        $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "_" || $0 == "-")
                    }
            }
    }

    private static func configuration(
        _ t: TOMLTable, key: String, _ fail: (String, String) -> ConfigError
    ) throws(ConfigError) -> Configuration {
        for k in t.keys where !configurationKeys.contains(k) {
            throw fail("\(key).\(k)", "unknown key; accepted: \(configurationKeys.joined(separator: ", "))")
        }
        guard let category = t["category"]?.string else {
            throw fail(
                "\(key).category",
                "is required and must be a string: one of \(Category.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        var mode = "default"
        if let m = t["mode"] {
            guard let s = m.string else { throw fail("\(key).mode", "must be a string") }
            mode = s
        }
        var options: [String] = []
        if let o = t["options"] {
            guard let arr = o.array else { throw fail("\(key).options", "must be an array of strings") }
            for item in arr {
                guard let s = item.string else { throw fail("\(key).options", "must be an array of strings") }
                options.append(s)
            }
        }
        switch Configuration.parse(category: category, mode: mode, options: options) {
        case .success(let c): return c
        case .failure(let e):
            let field = e.name.contains("Mode") ? "mode" : e.name.contains("Category") ? "category" : "options"
            throw fail("\(key).\(field)", e.message)
        }
    }
}

/// Finds the line of a dotted key in TOML text: the `[table]` header for a table, the `key =` line for a value.
/// Good for the files people write (headers and plain keys); nil when it cannot tell.
struct LineIndex {
    private var entries: [(path: String, line: Int)] = []

    init(_ text: String) {
        var table = ""
        for (i, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = Substring(raw.drop { $0 == " " || $0 == "\t" })
            if line.hasPrefix("#") || line.isEmpty { continue }
            if line.hasPrefix("["), let close = line.firstIndex(of: "]") {
                table = Self.normalize(String(line[line.index(after: line.startIndex)..<close]))
                entries.append((table, i + 1))
            } else if let eq = line.firstIndex(of: "=") {
                let key = Self.normalize(String(line[..<eq]))
                entries.append((table.isEmpty ? key : table + "." + key, i + 1))
            }
        }
    }

    /// Dotted keys without quotes or spaces around the parts.
    static func normalize(_ s: String) -> String {
        s.split(separator: ".").map { part in
            part.drop { $0 == " " || $0 == "\t" || $0 == "\"" || $0 == "'" }
                .reversed().drop { $0 == " " || $0 == "\t" || $0 == "\"" || $0 == "'" }.reversed()
        }
        .map { String($0) }.joined(separator: ".")
    }

    func line(of key: String) -> Int? {
        if let e = entries.first(where: { $0.path == key }) { return e.line }
        // A key inside a table written as [a.b] with the value on its own line, or an inline table: the table.
        var parts = key.split(separator: ".").map(String.init)
        while !parts.isEmpty {
            parts.removeLast()
            if let e = entries.first(where: { $0.path == parts.joined(separator: ".") }) { return e.line }
        }
        return nil
    }
}
