import Glibc

/// Every desktop entry of the XDG data dirs (Flatpak's exports among them), by id and by program, kept current with
/// inotify: an entry that changes is read again, and only it. Loop-confined; `fd` is watched by the owner's loop,
/// which calls `refresh()` when it is readable.
public final class DesktopEntryIndex: DesktopEntries {
    /// The `applications` directories, most important first (an id found in an earlier one wins).
    public let directories: [String]
    private var byID: [String: DesktopEntry] = [:]
    private var byProgram: [String: [String]] = [:]
    /// What each file was when read (size, mtime): a rescan reads only what changed.
    private var stamps: [String: (size: Int, mtime: Int)] = [:]
    /// Per directory, the entries found there (by path) and their ids.
    private var found: [String: [String: DesktopEntry]] = [:]
    /// The inotify descriptor (-1 when inotify is not available: the index then stays as first read).
    public private(set) var fd: Int32 = -1
    private var watched: [Int32: String] = [:]
    /// Entries read and refused (binary, too large, not an entry), for the debug log.
    public private(set) var refused: [String] = []
    /// At most this many entries in all: a directory flooded with files must not grow audiod without bound.
    public static let maximumEntries = 20_000

    public init(directories: [String]) {
        self.directories = directories
        fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        for d in directories { scan(d) }
        rebuild()
    }

    deinit { if fd >= 0 { close(fd) } }

    /// `$XDG_DATA_HOME/applications`, then each of `$XDG_DATA_DIRS` (default `/usr/local/share:/usr/share`), with
    /// Flatpak's exports added where the environment lacks them.
    public static func applicationDirectories(environment env: [String: String]) -> [String] {
        var data: [String] = []
        if let h = env["XDG_DATA_HOME"], !h.isEmpty {
            data.append(h)
        } else if let home = env["HOME"], !home.isEmpty {
            data.append(home + "/.local/share")
        }
        let dirs = (env["XDG_DATA_DIRS"].flatMap { $0.isEmpty ? nil : $0 } ?? "/usr/local/share:/usr/share")
            .split(separator: ":").map(String.init)
        data += dirs
        if let home = env["HOME"], !home.isEmpty { data.append(home + "/.local/share/flatpak/exports/share") }
        data.append("/var/lib/flatpak/exports/share")
        var seen: Set<String> = []
        return data.map { $0 + "/applications" }.filter { seen.insert($0).inserted }
    }

    public func entry(id: String) -> DesktopEntry? { byID[id] }

    public func entries(program: String) -> [DesktopEntry] { (byProgram[program] ?? []).compactMap { byID[$0] } }

    public var count: Int { byID.count }

    /// Reads inotify's events and rescans the directories they name (only the files that changed are read).
    /// Returns whether anything changed.
    @discardableResult
    public func refresh() -> Bool {
        guard fd >= 0 else { return false }
        var dirty: Set<String> = []
        var buffer = [UInt8](repeating: 0, count: 8192)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { break }
            var off = 0
            while off + MemoryLayout<inotify_event>.size <= n {
                let (wd, len) = buffer.withUnsafeBytes { raw -> (Int32, Int) in
                    let e = raw.loadUnaligned(fromByteOffset: off, as: inotify_event.self)
                    return (e.wd, Int(e.len))
                }
                if let dir = watched[wd] { dirty.insert(dir) }
                off += MemoryLayout<inotify_event>.size + len
            }
        }
        guard !dirty.isEmpty else { return false }
        for d in dirty { scan(d) }
        rebuild()
        return true
    }

    private func scan(_ root: String) {
        var entries: [String: DesktopEntry] = [:]
        walk(root, prefix: "", depth: 0, into: &entries)
        // Subdirectories are scanned under their root (their ids carry the path).
        for (dir, _) in found where dir.hasPrefix(root + "/") { found[dir] = nil }
        found[root] = entries
    }

    private func walk(_ dir: String, prefix: String, depth: Int, into entries: inout [String: DesktopEntry]) {
        guard depth <= 3, let d = opendir(dir) else { return }
        defer { closedir(d) }
        if fd >= 0, !watched.values.contains(dir) {
            let wd = inotify_add_watch(
                fd, dir, UInt32(IN_CREATE | IN_DELETE | IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_MODIFY))
            if wd >= 0 { watched[wd] = dir }
        }
        while let e = readdir(d) {
            let name = withUnsafeBytes(of: e.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard !name.hasPrefix(".") else { continue }
            let path = dir + "/" + name
            var st = stat()
            guard stat(path, &st) == 0 else { continue }
            if (st.st_mode & S_IFMT) == S_IFDIR {
                walk(path, prefix: prefix + name + "-", depth: depth + 1, into: &entries)
                continue
            }
            guard name.hasSuffix(".desktop"), entries.count < Self.maximumEntries else { continue }
            let id = prefix + String(name.dropLast(".desktop".count))
            let stamp = (
                size: Int(st.st_size), mtime: Int(st.st_mtim.tv_sec) &* 1_000_000_000 &+ Int(st.st_mtim.tv_nsec)
            )
            if let old = stamps[path], old == stamp, let known = found.values.lazy.compactMap({ $0[path] }).first {
                entries[path] = known
                continue
            }
            stamps[path] = stamp
            guard st.st_size <= DesktopEntry.maximumBytes, let bytes = Self.read(path),
                let entry = DesktopEntry.parse(bytes, id: id, path: path)
            else {
                if refused.count < 64 { refused.append(path) }
                continue
            }
            entries[path] = entry
        }
    }

    private func rebuild() {
        byID.removeAll(keepingCapacity: true)
        byProgram.removeAll(keepingCapacity: true)
        // Earlier directories win for an id.
        for dir in directories.reversed() {
            for (root, entries) in found where root == dir {
                for e in entries.values { byID[e.id] = e }
            }
        }
        for e in byID.values {
            if let p = e.program { byProgram[p, default: []].append(e.id) }
        }
    }

    static func read(_ path: String) -> [UInt8]? {
        let f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard f >= 0 else { return nil }
        defer { close(f) }
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16384)
        while out.count <= DesktopEntry.maximumBytes {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(f, $0.baseAddress, $0.count) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { break }
            out += buffer[..<n]
        }
        return out.count <= DesktopEntry.maximumBytes ? out : nil
    }
}
