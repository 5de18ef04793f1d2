// A TOML parser for audiod.toml: all of TOML 1.0 that a config file of keys, tables, strings, numbers, booleans,
// arrays and inline tables uses. Why not TOMLKit: it imports Foundation, which links libFoundation, its
// internationalization library and ICU into the daemon — ~6 MB of audiod's resident size, for a file read at
// start-up and on SIGHUP (docs/BENCHMARKS.md). What is left out (dates and times, multi-line strings, arrays of
// tables) audiod.toml never needs; such a file gets an error that says so, with its line.

/// A parse error: the 1-based line and what was wrong there.
struct TOMLError: Error, Equatable {
    var line: Int
    var message: String
}

/// A table: its keys in the order they were written.
final class TOMLTable {
    private(set) var keys: [String] = []
    private var values: [String: TOMLValue] = [:]
    /// Made by a `[header]` or by a key/value (not only as the parent of a dotted header or key): defining it
    /// again is an error.
    fileprivate var defined = false
    /// Inline tables and tables made by dotted keys are closed to later headers.
    fileprivate var sealed = false

    subscript(key: String) -> TOMLValue? { values[key] }

    fileprivate func set(_ key: String, _ value: TOMLValue) {
        if values[key] == nil { keys.append(key) }
        values[key] = value
    }
}

enum TOMLValue {
    case string(String)
    case integer(Int64)
    case float(Double)
    case bool(Bool)
    case array([TOMLValue])
    case table(TOMLTable)

    var string: String? { if case .string(let s) = self { s } else { nil } }
    var int: Int64? { if case .integer(let i) = self { i } else { nil } }
    var double: Double? { if case .float(let d) = self { d } else { nil } }
    var table: TOMLTable? { if case .table(let t) = self { t } else { nil } }
    var array: [TOMLValue]? { if case .array(let a) = self { a } else { nil } }
}

struct TOMLParser {
    private let bytes: [UInt8]
    private var i = 0
    private var line = 1

    /// Parses a whole document into its root table.
    static func parse(_ text: String) throws(TOMLError) -> TOMLTable {
        var p = TOMLParser(bytes: Array(text.utf8))
        return try p.document()
    }

    private init(bytes: [UInt8]) { self.bytes = bytes }

    private var atEnd: Bool { i >= bytes.count }
    private var peek: UInt8? { i < bytes.count ? bytes[i] : nil }

    private func fail(_ message: String) -> TOMLError { TOMLError(line: line, message: message) }

    private mutating func document() throws(TOMLError) -> TOMLTable {
        let root = TOMLTable()
        root.defined = true
        var current = root
        while true {
            skipBlankAndComments()
            guard let c = peek else { return root }
            if c == UInt8(ascii: "[") {
                current = try header(root)
            } else {
                try keyValue(into: current)
            }
            try endOfLine()
        }
    }

    /// Spaces, tabs, newlines and comments between statements.
    private mutating func skipBlankAndComments() {
        while let c = peek {
            if c == UInt8(ascii: " ") || c == UInt8(ascii: "\t") || c == UInt8(ascii: "\r") {
                i += 1
            } else if c == UInt8(ascii: "\n") {
                i += 1
                line += 1
            } else if c == UInt8(ascii: "#") {
                while let d = peek, d != UInt8(ascii: "\n") { i += 1 }
            } else {
                return
            }
        }
    }

    private mutating func skipSpaces() {
        while let c = peek, c == UInt8(ascii: " ") || c == UInt8(ascii: "\t") { i += 1 }
    }

    /// After a statement: spaces, an optional comment, then a newline or the end.
    private mutating func endOfLine() throws(TOMLError) {
        skipSpaces()
        if peek == UInt8(ascii: "#") { while let d = peek, d != UInt8(ascii: "\n") { i += 1 } }
        if peek == UInt8(ascii: "\r") { i += 1 }
        guard let c = peek else { return }
        guard c == UInt8(ascii: "\n") else { throw fail("expected the end of the line, found '\(Self.show(c))'") }
        i += 1
        line += 1
    }

    // MARK: Tables and keys

    private mutating func header(_ root: TOMLTable) throws(TOMLError) -> TOMLTable {
        i += 1
        if peek == UInt8(ascii: "[") { throw fail("arrays of tables ([[…]]) are not used in audiod.toml") }
        skipSpaces()
        let path = try key()
        skipSpaces()
        guard peek == UInt8(ascii: "]") else { throw fail("expected ']' to close the table header") }
        i += 1
        var t = root
        for (n, part) in path.enumerated() {
            let last = n == path.count - 1
            switch t[part] {
            case nil:
                let sub = TOMLTable()
                t.set(part, .table(sub))
                t = sub
            case .table(let sub)?:
                if sub.sealed {
                    throw fail("table '\(path.prefix(n + 1).joined(separator: "."))' cannot be extended here")
                }
                if last && sub.defined { throw fail("table '\(path.joined(separator: "."))' is defined twice") }
                t = sub
            case _?:
                throw fail("'\(path.prefix(n + 1).joined(separator: "."))' is already a value, not a table")
            }
        }
        t.defined = true
        return t
    }

    private mutating func keyValue(into table: TOMLTable) throws(TOMLError) {
        let path = try key()
        skipSpaces()
        guard peek == UInt8(ascii: "=") else {
            throw fail("expected '=' after the key '\(path.joined(separator: "."))'")
        }
        i += 1
        skipSpaces()
        let v = try value()
        var t = table
        for (n, part) in path.dropLast().enumerated() {
            switch t[part] {
            case nil:
                let sub = TOMLTable()
                sub.sealed = true
                t.set(part, .table(sub))
                t = sub
            case .table(let sub)? where sub.sealed && !sub.defined:
                t = sub
            default:
                throw fail("'\(path.prefix(n + 1).joined(separator: "."))' is already defined")
            }
        }
        guard let last = path.last else { throw fail("a key is missing") }
        if t[last] != nil { throw fail("'\(path.joined(separator: "."))' is defined twice") }
        if case .table(let sub) = v { sub.defined = true }
        t.set(last, v)
    }

    /// A dotted key: bare, "basic" or 'literal' parts.
    private mutating func key() throws(TOMLError) -> [String] {
        var parts: [String] = []
        while true {
            skipSpaces()
            guard let c = peek else { throw fail("a key is missing") }
            if c == UInt8(ascii: "\"") {
                parts.append(try basicString())
            } else if c == UInt8(ascii: "'") {
                parts.append(try literalString())
            } else {
                let start = i
                while let d = peek, Self.isBare(d) { i += 1 }
                guard i > start else { throw fail("expected a key, found '\(Self.show(c))'") }
                parts.append(String(decoding: bytes[start..<i], as: UTF8.self))
            }
            skipSpaces()
            guard peek == UInt8(ascii: ".") else { return parts }
            i += 1
        }
    }

    private static func isBare(_ c: UInt8) -> Bool {
        (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z"))
            || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9")) || c == UInt8(ascii: "_") || c == UInt8(ascii: "-")
    }

    private static func show(_ c: UInt8) -> String {
        c == UInt8(ascii: "\n") ? "end of line" : c < 0x80 ? String(UnicodeScalar(c)) : "non-ASCII"
    }

    // MARK: Values

    private mutating func value() throws(TOMLError) -> TOMLValue {
        guard let c = peek else { throw fail("a value is missing") }
        switch c {
        case UInt8(ascii: "\""):
            if starts(with: "\"\"\"") { throw fail("multi-line strings are not used in audiod.toml") }
            return .string(try basicString())
        case UInt8(ascii: "'"):
            if starts(with: "'''") { throw fail("multi-line strings are not used in audiod.toml") }
            return .string(try literalString())
        case UInt8(ascii: "["): return try array()
        case UInt8(ascii: "{"): return try inlineTable()
        case UInt8(ascii: "\n"), UInt8(ascii: "#"): throw fail("a value is missing")
        default: return try scalar()
        }
    }

    private func starts(with s: String) -> Bool {
        let u = Array(s.utf8)
        return i + u.count <= bytes.count && Array(bytes[i..<i + u.count]) == u
    }

    private mutating func basicString() throws(TOMLError) -> String {
        i += 1
        var out: [UInt8] = []
        while true {
            guard let c = peek, c != UInt8(ascii: "\n") else { throw fail("a string is not closed on its line") }
            i += 1
            if c == UInt8(ascii: "\"") { break }
            guard c == UInt8(ascii: "\\") else {
                out.append(c)
                continue
            }
            guard let e = peek else { throw fail("a string is not closed on its line") }
            i += 1
            switch e {
            case UInt8(ascii: "\""): out.append(e)
            case UInt8(ascii: "\\"): out.append(e)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "u"), UInt8(ascii: "U"):
                let n = e == UInt8(ascii: "u") ? 4 : 8
                guard i + n <= bytes.count,
                    let code = UInt32(String(decoding: bytes[i..<i + n], as: UTF8.self), radix: 16),
                    let scalar = Unicode.Scalar(code)
                else { throw fail("'\\\(Self.show(e))' must be followed by \(n) hex digits of a Unicode scalar") }
                i += n
                out += Array(String(Character(scalar)).utf8)
            default:
                throw fail(
                    "unknown escape '\\\(Self.show(e))' in a string (accepted: \\\" \\\\ \\n \\t \\r \\b \\f \\uXXXX)")
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private mutating func literalString() throws(TOMLError) -> String {
        i += 1
        let start = i
        while true {
            guard let c = peek, c != UInt8(ascii: "\n") else { throw fail("a string is not closed on its line") }
            if c == UInt8(ascii: "'") { break }
            i += 1
        }
        defer { i += 1 }
        return String(decoding: bytes[start..<i], as: UTF8.self)
    }

    private mutating func array() throws(TOMLError) -> TOMLValue {
        i += 1
        var items: [TOMLValue] = []
        while true {
            skipBlankAndComments()
            guard let c = peek else { throw fail("an array is not closed") }
            if c == UInt8(ascii: "]") {
                i += 1
                return .array(items)
            }
            items.append(try value())
            skipBlankAndComments()
            if atEnd { throw fail("an array is not closed") }
            if peek == UInt8(ascii: ",") {
                i += 1
            } else if peek != UInt8(ascii: "]") {
                throw fail("expected ',' or ']' in an array")
            }
        }
    }

    private mutating func inlineTable() throws(TOMLError) -> TOMLValue {
        i += 1
        let t = TOMLTable()
        skipSpaces()
        if peek == UInt8(ascii: "}") {
            i += 1
        } else {
            while true {
                try keyValue(into: t)
                skipSpaces()
                guard let c = peek else { throw fail("an inline table is not closed") }
                i += 1
                if c == UInt8(ascii: "}") { break }
                guard c == UInt8(ascii: ",") else { throw fail("expected ',' or '}' in an inline table") }
                skipSpaces()
            }
        }
        t.sealed = true
        return .table(t)
    }

    /// true/false, integers (decimal, 0x, 0o, 0b, with _), floats (with fraction and/or exponent, inf, nan).
    private mutating func scalar() throws(TOMLError) -> TOMLValue {
        let start = i
        while let c = peek, c != UInt8(ascii: ","), c != UInt8(ascii: "]"), c != UInt8(ascii: "}"),
            c != UInt8(ascii: "#"),
            c != UInt8(ascii: "\n"), c != UInt8(ascii: " "), c != UInt8(ascii: "\t"), c != UInt8(ascii: "\r")
        { i += 1 }
        let word = String(decoding: bytes[start..<i], as: UTF8.self)
        if word == "true" { return .bool(true) }
        if word == "false" { return .bool(false) }
        if let v = Self.number(word) { return v }
        if word.contains(":") || (word.count >= 10 && word.dropFirst(4).first == "-") {
            throw fail("dates and times are not used in audiod.toml")
        }
        throw fail(word.isEmpty ? "a value is missing" : "'\(word)' is not a value: strings are quoted (\"…\")")
    }

    private static func number(_ word: String) -> TOMLValue? {
        switch word {
        case "inf", "+inf": return .float(.infinity)
        case "-inf": return .float(-.infinity)
        case "nan", "+nan", "-nan": return .float(.nan)
        default: break
        }
        // Underscores only between digits.
        let chars = Array(word)
        for (n, c) in chars.enumerated() where c == "_" {
            guard n > 0, n < chars.count - 1, chars[n - 1].isHexDigit, chars[n + 1].isHexDigit else { return nil }
        }
        let w = word.filter { $0 != "_" }
        for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] where w.hasPrefix(prefix) {
            return Int64(w.dropFirst(2), radix: radix).map(TOMLValue.integer)
        }
        let digits = w.hasPrefix("+") || w.hasPrefix("-") ? w.dropFirst() : Substring(w)
        guard let first = digits.first, first.isASCII, first.isNumber else { return nil }
        // No leading zeros in integers or before a float's point.
        if digits.count > 1, first == "0", let second = digits.dropFirst().first, second.isNumber { return nil }
        if !w.contains(where: { $0 == "." || $0 == "e" || $0 == "E" }) {
            return Int64(w).map(TOMLValue.integer)
        }
        // A point needs digits on both sides.
        if let dot = w.firstIndex(of: ".") {
            let before = w[..<dot].last
            let after = w[w.index(after: dot)...].first
            guard before?.isNumber == true, after?.isNumber == true else { return nil }
        }
        return Double(w).map(TOMLValue.float)
    }
}
