import AppIdentity
import Dispatch
import Foundation

/// Identifying a new app's stream: reading /proc for the process that plays and resolving it against
/// the desktop entries. Cold: the first stream, which reads every entry of the data dirs (here the machine's own,
/// plus 500 made for the run, one of them this program's); warm: every later app, against the index in memory.
/// The table, and the warm p50 in µs.
func identityRows(iterations: Int) -> (String, Double) {
    let dir = NSTemporaryDirectory() + "audiod-bench-identity-\(getpid())"
    let apps = dir + "/applications"
    try? FileManager.default.createDirectory(atPath: apps, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let me = ProcessInfo.processInfo.processName
    for i in 0..<500 {
        let text =
            "[Desktop Entry]\nType=Application\nName=App \(i)\nExec=/usr/bin/app\(i) %U\nCategories=AudioVideo;Player;\n"
        try? text.write(toFile: "\(apps)/org.example.App\(i).desktop", atomically: false, encoding: .utf8)
    }
    try? "[Desktop Entry]\nType=Application\nName=Bench\nExec=\(me)\nCategories=Game;\n"
        .write(toFile: "\(apps)/org.example.Bench.desktop", atomically: false, encoding: .utf8)
    var env = ProcessInfo.processInfo.environment
    env["XDG_DATA_HOME"] = dir
    let dirs = DesktopEntryIndex.applicationDirectories(environment: env)
    let pid = UInt32(getpid())
    let chain = [pid, UInt32(getppid())]
    func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    let t0 = now()
    let index = DesktopEntryIndex(directories: dirs)
    let t1 = now()
    let first = IdentityResolver.resolve(
        ProcessReader.facts(pid: pid, chain: chain, applicationID: nil, flatpakID: nil).facts, index)
    let t2 = now()
    var warm: [UInt64] = []
    for _ in 0..<max(iterations, 50) {
        let a = now()
        _ = IdentityResolver.resolve(
            ProcessReader.facts(pid: pid, chain: chain, applicationID: nil, flatpakID: nil).facts, index)
        warm.append(now() - a)
    }
    warm.sort()
    func ms(_ ns: UInt64) -> String { String(format: "%.3f ms", Double(ns) / 1e6) }
    let found = first.entry.map { "\($0.id) (\($0.foundThrough.rawValue))" } ?? "none"
    let table = """
        | entries read | cold: index + first app | of which the index | warm p50 | warm p99 | the app found |
        |---:|---:|---:|---:|---:|---|
        | \(index.count) | \(ms(t2 - t0)) | \(ms(t1 - t0)) | \(ms(warm[warm.count / 2])) | \(ms(warm[warm.count * 99 / 100])) | \(found) |
        """
    return (table, Double(warm[warm.count / 2]) / 1_000)
}
