extension String {
    /// The text with every control character shown as an escape, for a terminal or a log line: names, ids and
    /// reasons that came from apps (a desktop entry's file name, `application.id`, the environment) may carry
    /// terminal escapes that would recolour or rewrite the screen, or a newline that would fake a line of output or
    /// of the log. A newline shows as `\n`, a tab as `\t`, a carriage return as `\r`, any other C0 control and DEL as
    /// `\x1b`-style hex, a C1 control (U+0080–U+009F, which some terminals obey as well) as `\u{9b}`, and so are the
    /// line and paragraph separators (U+2028, U+2029) and the bidirectional overrides and isolates (U+202A–U+202E,
    /// U+2066–U+2069), which can reorder what a line shows. Everything else, backslashes included, is left as it is.
    /// The bus and `--json` carry the raw value (JSON has escapes of its own).
    public var escapingControls: String {
        guard unicodeScalars.contains(where: Self.isControl) else { return self }
        var out = ""
        out.reserveCapacity(utf8.count + 8)
        for u in unicodeScalars {
            switch u {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where u.value < 0x20 || u.value == 0x7f: out += "\\x" + Self.hex(u.value)
            case _ where Self.isControl(u): out += "\\u{" + Self.hex(u.value) + "}"
            default: out.unicodeScalars.append(u)
            }
        }
        return out
    }

    private static func isControl(_ u: Unicode.Scalar) -> Bool {
        u.value < 0x20 || (0x7f...0x9f).contains(u.value) || (0x2028...0x202e).contains(u.value)
            || (0x2066...0x2069).contains(u.value)
    }

    private static func hex(_ v: UInt32) -> String {
        let digits = String(v, radix: 16)
        return digits.count < 2 ? "0" + digits : digits
    }
}
