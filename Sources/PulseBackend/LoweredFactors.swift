import FoundationEssentials
import Glibc

/// The PipeWire nodes whose volume factor audiod may have left below 1.0 — a ramp sent and its reset not yet
/// answered — and their apps, kept in `factors` beside the journal. The factor is invisible to pulse clients and
/// WirePlumber gives an app's next stream the last one it saw: an audiod killed mid-ramp would leave a stream, or
/// the app's next one, silent with no mixer showing why. The next run (or `--restore`) sets them back to 1.0.
///
/// Lines: `audiod-factors 1`, then `<node> <app, percent-encoded, or ->`.
public struct LoweredFactors: Equatable, Sendable {
    public var nodes: [UInt32: String?] = [:]
    /// Beyond this many the file is refused as damaged (audiod holds at most one per ramping stream).
    public static let limit = 4096

    public init(nodes: [UInt32: String?] = [:]) { self.nodes = nodes }

    public static func path(besideJournal journal: String) -> String { Journal.sibling("factors", of: journal) }

    public static func load(from path: String) throws(JournalError) -> LoweredFactors {
        guard let lines = try JournalLog.readLines(path) else { return LoweredFactors() }
        var v = LoweredFactors()
        for (n, line) in lines.enumerated() {
            let f = line.split(separator: " ", omittingEmptySubsequences: false)
            func fail() -> JournalError { JournalError("line \(n + 1) is not a factors line", line: n + 1) }
            if n == 0 {
                guard f.count == 2, f[0] == "audiod-factors", f[1] == "1" else { throw fail() }
                continue
            }
            guard f.count == 2, let node = UInt32(f[0]), v.nodes.count < limit else { throw fail() }
            if f[1] == "-" {
                v.nodes[node] = .some(nil)
            } else {
                do { v.nodes[node] = try JournalLog.decode(f[1]) } catch { throw fail() }
            }
        }
        return v
    }

    /// Replaces the file (removes it when no node is left).
    public func write(to path: String) throws(JournalError) {
        if nodes.isEmpty {
            guard unlink(path) == 0 || errno == ENOENT else {
                throw JournalError("cannot remove \(path): \(String(cString: strerror(errno)))")
            }
            return
        }
        var text = "audiod-factors 1\n"
        for (node, app) in nodes.sorted(by: { $0.key < $1.key }) {
            text += "\(node) \(app.map { JournalLog.encode($0) } ?? "-")\n"
        }
        try JournalLog.replaceFile(path, with: text)
    }
}
