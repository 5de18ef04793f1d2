/// What the desktop's launchers leave on a process that names the app (SPEC §7): the unit of its cgroup, and a
/// GLib launcher's environment. Pure functions over text a reader collected.
public enum LauncherIDs {
    /// The desktop id in the last component of a `0::` line of `/proc/PID/cgroup`, in the systemd
    /// desktop-environment convention: `app[-<launcher>]-<id>-<random>.scope`,
    /// `app[-<launcher>]-<id>[@<random>].service`, or `dbus-<unique>-<id>@<n>.service` for bus-activated apps.
    /// A launcher is one alphanumeric word; a `-` inside `<id>` is written `\x2d`. Nil for anything else (a
    /// terminal's shell, a session scope, a system service).
    public static func desktopID(cgroup text: String) -> String? {
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("0::") }) else { return nil }
        guard let unit = line.dropFirst(3).split(separator: "/").last else { return nil }
        return desktopID(unit: String(unit))
    }

    public static func desktopID(unit: String) -> String? {
        guard unit.utf8.count <= 512 else { return nil }
        var words: [Substring]
        if unit.hasSuffix(".scope") {
            words = unit.dropLast(".scope".count).split(separator: "-", omittingEmptySubsequences: false)
            // The random part last.
            guard words.count >= 3, words.first == "app", !(words.last ?? "").isEmpty else { return nil }
            words.removeLast()
        } else if unit.hasSuffix(".service") {
            var base = unit.dropLast(".service".count)
            if let at = base.firstIndex(of: "@") { base = base[..<at] }
            words = base.split(separator: "-", omittingEmptySubsequences: false)
            if words.first == "dbus" {
                // dbus-<unique>-<id>: the unique name (":1.42") has no dash.
                guard words.count == 3, !words[1].isEmpty else { return nil }
                return unescape(words[2])
            }
            guard words.first == "app" else { return nil }
        } else {
            return nil
        }
        // app-<id> or app-<launcher>-<id>.
        switch words.count {
        case 2: return unescape(words[1])
        case 3:
            guard !words[1].isEmpty, words[1].allSatisfy({ $0.isLetter || $0.isNumber }) else { return nil }
            return unescape(words[2])
        default: return nil
        }
    }

    /// systemd's unit-name escaping undone (`\x2d` → `-`); nil for a malformed escape or an empty id.
    static func unescape(_ s: Substring) -> String? {
        guard !s.isEmpty else { return nil }
        var out: [UInt8] = []
        var bytes = Array(s.utf8)[...]
        while let b = bytes.popFirst() {
            if b == UInt8(ascii: "\\") {
                guard bytes.count >= 3, bytes.first == UInt8(ascii: "x"),
                    let v = UInt8(String(decoding: bytes.dropFirst().prefix(2), as: UTF8.self), radix: 16), v != 0
                else { return nil }
                out.append(v)
                bytes = bytes.dropFirst(3)
            } else {
                out.append(b)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// `GIO_LAUNCHED_DESKTOP_FILE` from a process's environment (`/proc/PID/environ`: NUL-separated), valid when
    /// `GIO_LAUNCHED_DESKTOP_FILE_PID` is the process itself or one of its live ancestors (`chain`); the desktop
    /// id is the file's name without `.desktop`.
    public static func launchedDesktopID(environment: [String: String], chain: [UInt32]) -> (id: String, path: String)?
    {
        guard let path = environment["GIO_LAUNCHED_DESKTOP_FILE"], path.hasSuffix(".desktop"),
            let pidText = environment["GIO_LAUNCHED_DESKTOP_FILE_PID"], let pid = UInt32(pidText), chain.contains(pid),
            let name = path.split(separator: "/").last
        else { return nil }
        let id = String(name.dropLast(".desktop".count))
        return id.isEmpty ? nil : (id, path)
    }

    /// Steam's game id from the environment (`SteamGameId`, else `SteamAppId`; "0" is none).
    public static func steamGame(environment: [String: String]) -> String? {
        for key in ["SteamGameId", "SteamAppId"] {
            if let v = environment[key], !v.isEmpty, v != "0", v.utf8.count <= 64 { return v }
        }
        return nil
    }

    /// A `/proc/PID/environ` as a dictionary: `KEY=value` entries separated by NUL; others are skipped.
    public static func environment(_ bytes: [UInt8]) -> [String: String] {
        var env: [String: String] = [:]
        for entry in bytes.split(separator: 0) {
            guard let eq = entry.firstIndex(of: UInt8(ascii: "=")), eq > entry.startIndex else { continue }
            let key = String(decoding: entry[..<eq], as: UTF8.self)
            env[key] = String(decoding: entry[(eq + 1)...], as: UTF8.self)
        }
        return env
    }
}
