import FoundationEssentials
import Glibc

/// audiod's executable is ~10 MB of code (the Swift runtime and standard library are linked in), of which a daemon
/// that mostly sleeps runs little. Two things made most of it resident anyway: the kernel maps 16 pages around
/// every page fault in a file mapping ("fault-around"), and start-up (argument parsing, config, connecting) runs
/// code that is never needed again. Measured idle: 7 MB of the 15 MB resident size was the code mapping; after
/// dropping start-up's pages, 2 MB.
enum ResidentCode {
    /// Lets go of the code pages start-up touched; what runs afterwards comes back from the page cache (with its
    /// fault-around). Only the executable mapping: it is never written, so dropping its pages loses nothing (the
    /// read-only data after it was written by the dynamic linker's relocations and must stay).
    static func dropStartupPages() { forEachCodeMapping { _ = madvise($0, $1, MADV_DONTNEED) } }

    private static func forEachCodeMapping(_ body: (UnsafeMutableRawPointer, Int) -> Void) {
        var exe = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &exe, exe.count - 1)
        guard n > 0, let maps = try? String(contentsOfFile: "/proc/self/maps", encoding: .utf8) else { return }
        let path = String(decoding: exe.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        for line in maps.split(separator: "\n") {
            // "start-end perms offset dev inode path"
            let f = line.split(separator: " ", omittingEmptySubsequences: true)
            guard f.count >= 6, f[1] == "r-xp", f[5...].joined(separator: " ") == path else { continue }
            let range = f[0].split(separator: "-")
            guard range.count == 2, let start = UInt(range[0], radix: 16), let end = UInt(range[1], radix: 16),
                end > start,
                let address = UnsafeMutableRawPointer(bitPattern: start)
            else { continue }
            body(address, Int(end - start))
        }
    }
}
