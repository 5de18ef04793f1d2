import Testing

@testable import AudiodConfig

/// audiod's own TOML parser: the TOML people write in config files parses to what TOML 1.0 says, and what it
/// does not accept is an error with the line.
struct TOMLParserTests {
    func parse(_ text: String) throws(TOMLError) -> TOMLTable { try TOMLParser.parse(text) }

    @Test("keys, tables, strings, numbers, booleans, arrays and inline tables")
    func valid() throws {
        let t = try parse(
            """
            # a comment
            duck-level = 0.25   # trailing comment
            linger = 1_000
            hex = 0xff
            neg = -3
            exp = 1e-3
            yes = true
            "quoted key" = 'C:\\literal'
            esc = "tab\\tquote\\"uni\\u00e9"
            list = [ "a", 'b',
                     "c", ]  # over lines, trailing comma
            empty = []
            inline = { category = "ambient", options = ["x"] }
            dotted.inner = 1
            dotted.other = 2

            [apps."org.example.App"]
            category = "playback"

            [roles.game]
            category = "ambient"
            """)
        #expect(t["duck-level"]?.double == 0.25)
        #expect(t["linger"]?.int == 1000)
        #expect(t["hex"]?.int == 255)
        #expect(t["neg"]?.int == -3)
        #expect(t["exp"]?.double == 0.001)
        #expect(t["yes"].map { if case .bool(true) = $0 { true } else { false } } == true)
        #expect(t["quoted key"]?.string == "C:\\literal")
        #expect(t["esc"]?.string == "tab\tquote\"unié")
        #expect(t["list"]?.array?.compactMap(\.string) == ["a", "b", "c"])
        #expect(t["empty"]?.array?.isEmpty == true)
        #expect(t["inline"]?.table?["category"]?.string == "ambient")
        #expect(t["dotted"]?.table?.keys == ["inner", "other"])
        #expect(t["apps"]?.table?["org.example.App"]?.table?["category"]?.string == "playback")
        #expect(t["roles"]?.table?["game"]?.table?["category"]?.string == "ambient")
        #expect(t.keys.first == "duck-level")
    }

    @Test(
        "what TOML forbids, and what audiod.toml leaves out, is an error on its line",
        arguments: [
            ("a = 1\na = 2", 2, "defined twice"),
            ("[x]\n[x]", 2, "defined twice"),
            ("a = 1\n[a]", 2, "already a value"),
            ("a = \"open", 1, "not closed"),
            ("a = loud", 1, "strings are quoted"),
            ("a = 01", 1, "not a value"),
            ("a = 1 2", 1, "end of the line"),
            ("a =", 1, "value is missing"),
            ("= 1", 1, "expected a key"),
            ("x = 1\nb = [1, 2", 2, "not closed"),
            ("a = \"\\q\"", 1, "unknown escape"),
            ("t = { a = 1 }\n[t]", 2, "cannot be extended"),
            ("[[apps]]", 1, "arrays of tables"),
            ("when = 1979-05-27", 1, "dates"),
            ("s = \"\"\"x\"\"\"", 1, "multi-line"),
            ("a = 1_", 1, "not a value"),
            ("a = .5", 1, "not a value"),
        ])
    func invalid(text: String, line: Int, says: String) {
        do {
            _ = try parse(text)
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.line == line, "\(text): \(error)")
            #expect(error.message.contains(says), "\(text): \(error.message)")
        }
    }
}
