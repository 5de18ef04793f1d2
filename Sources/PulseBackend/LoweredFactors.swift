import FoundationEssentials
import Glibc

/// The PipeWire nodes whose volume factor audiod may have left below 1.0 — a ramp sent and its reset not yet
/// answered — with the restore key each stream is filed under, and the keys such a node left behind when it went,
/// kept in `factors` beside the journal. The factor is invisible to pulse clients, and WirePlumber 0.5 saves it into
/// the stream's key (its media role, else its app) and gives it to every next stream of that key: an audiod killed
/// mid-ramp would leave a stream, or every next one of its role, silent with no mixer showing why. The next run (or
/// `--restore`) sets the nodes and the keys back to 1.0.
///
/// Lines: `audiod-factors 2`, then `<node> <restore key, percent-encoded, or ->` for a node, `- <key>` for a key
/// left without one. Version 1 named the app instead of the key: its lines are read as the app's key
/// (`sink-input-by-application-name:`).
public struct LoweredFactors: Equatable, Sendable {
    public var nodes: [UInt32: String?] = [:]
    /// Keys whose stream went while its factor may have been low: WirePlumber may hold that factor for the key.
    public var leftKeys: Set<String> = []
    /// Beyond this many lines the file is refused as damaged (audiod holds at most one per ramping stream, and one
    /// per key).
    public static let limit = 4096

    public init(nodes: [UInt32: String?] = [:], leftKeys: Set<String> = []) {
        self.nodes = nodes
        self.leftKeys = leftKeys
    }

    public static func path(besideJournal journal: String) -> String { Journal.sibling("factors", of: journal) }

    public var isEmpty: Bool { nodes.isEmpty && leftKeys.isEmpty }

    /// Every key that may hold a low factor now: the lowered nodes' and those left behind.
    public var lowKeys: Set<String> { leftKeys.union(nodes.values.compactMap { $0 }) }

    public static func load(from path: String) throws(JournalError) -> LoweredFactors {
        guard let lines = try JournalLog.readLines(path) else { return LoweredFactors() }
        var v = LoweredFactors()
        var version = 0
        for (n, line) in lines.enumerated() {
            let f = line.split(separator: " ", omittingEmptySubsequences: false)
            func fail() -> JournalError { JournalError("line \(n + 1) is not a factors line", line: n + 1) }
            if n == 0 {
                guard f.count == 2, f[0] == "audiod-factors", f[1] == "1" || f[1] == "2" else { throw fail() }
                version = f[1] == "1" ? 1 : 2
                continue
            }
            guard f.count == 2, n <= limit else { throw fail() }
            var key: String?
            if f[1] != "-" {
                do {
                    let text = try JournalLog.decode(f[1])
                    key = version == 1 ? "sink-input-by-application-name:" + text : text
                } catch { throw fail() }
            }
            if f[0] == "-", version == 2 {
                guard let key else { throw fail() }
                v.leftKeys.insert(key)
            } else {
                guard let node = UInt32(f[0]) else { throw fail() }
                v.nodes[node] = .some(key)
            }
        }
        return v
    }

    /// Replaces the file (removes it when nothing is left).
    public func write(to path: String) throws(JournalError) {
        if isEmpty {
            guard unlink(path) == 0 || errno == ENOENT else {
                throw JournalError("cannot remove \(path): \(String(cString: strerror(errno)))")
            }
            return
        }
        var text = "audiod-factors 2\n"
        for (node, key) in nodes.sorted(by: { $0.key < $1.key }) {
            text += "\(node) \(key.map { JournalLog.encode($0) } ?? "-")\n"
        }
        for key in leftKeys.sorted() { text += "- \(JournalLog.encode(key))\n" }
        try JournalLog.replaceFile(path, with: text)
    }
}
