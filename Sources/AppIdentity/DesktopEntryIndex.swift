import Glibc

/// Every desktop entry of the XDG data dirs (Flatpak's exports among them), by id and by program, kept current with
/// inotify as the desktop changes under a running audiod: an entry that changes is read again, and only it; a data
/// directory that does not exist yet (a fresh account has no `~/.local/share/applications` until its first app, no
/// Flatpak exports until its first Flatpak) is followed from its nearest existing parent down as it is made; a
/// directory deleted and made again is followed again; a full inotify queue means a full rescan. Below a data
/// directory it never descends through a directory symlink (no walk out of the tree, no loops); entry files may be
/// symlinks (Flatpak exports its entries so) and are read through them; a data directory that is itself a symlink
/// (NixOS profiles) is resolved when it is read (a link pointed elsewhere later is seen at the next rescan).
///
/// Confined to one thread — not the loop's: reading a desktop's entries takes ~10 ms, and a slow or hung mount under
/// a data directory would hold whoever reads. The owner watches `fd` on its loop, has `refresh()` run on the index's
/// thread, and hands decisions the `snapshot` it makes.
public final class DesktopEntryIndex: DesktopEntries {
    /// The `applications` directories, most important first (an id found in an earlier one wins).
    public let directories: [String]
    private var byID: [String: DesktopEntry] = [:]
    private var byProgram: [String: [String]] = [:]
    /// What each file was when read (size, mtime): a rescan reads only what changed.
    private var stamps: [String: (size: Int, mtime: Int)] = [:]
    /// Per data directory, the entries found there (by path).
    private var found: [String: [String: DesktopEntry]] = [:]
    /// The inotify descriptor (-1 when inotify is not available: the index then stays as first read).
    public private(set) var fd: Int32 = -1
    /// Each watch: the directory, and the data directory it is part of (nil: a parent watched until the data
    /// directory below it is made).
    private var watched: [Int32: (path: String, root: String?)] = [:]
    /// Entries read and refused (binary, too large, not an entry), for the debug log.
    public private(set) var refused: [String] = []
    /// How many full rescans an overflowing inotify queue caused (for the debug log and the tests).
    public private(set) var overflows = 0
    /// How many times a data directory was read (a burst of changes to one costs one).
    public private(set) var scans = 0
    /// A pause before each rescan: the tests' stand-in for a slow or hung mount (`AUDIOD_TEST_DESKTOP_SCAN_DELAY_MS`).
    public var rescanDelayNanoseconds: UInt64 = 0
    /// Files whose stamp is kept: bounded by the entries that exist.
    var stampCount: Int { stamps.count }
    /// At most this many entries in all: a directory flooded with files must not grow audiod without bound.
    public static let maximumEntries = 20_000
    /// At most this many directories watched: subdirectories are followed three levels deep.
    public static let maximumWatches = 1_024

    public init(directories: [String]) {
        self.directories = directories
        fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        for d in directories { scan(d) }
        followMissing()
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

    /// What the index holds now, for the thread that decides.
    public var snapshot: DesktopEntrySnapshot { DesktopEntrySnapshot(byID: byID, byProgram: byProgram) }

    /// Reads inotify's events and rescans the data directories they concern, each once however many events it had
    /// (only the files that changed are read). Returns whether anything changed.
    @discardableResult
    public func refresh() -> Bool {
        guard fd >= 0 else { return false }
        var events: [(wd: Int32, mask: UInt32)] = []
        var buffer = [UInt8](repeating: 0, count: 8192)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { break }
            var off = 0
            while off + MemoryLayout<inotify_event>.size <= n {
                let (wd, mask, len) = buffer.withUnsafeBytes { raw -> (Int32, UInt32, Int) in
                    let e = raw.loadUnaligned(fromByteOffset: off, as: inotify_event.self)
                    return (e.wd, e.mask, Int(e.len))
                }
                events.append((wd, mask))
                off += MemoryLayout<inotify_event>.size + len
            }
        }
        return handle(events)
    }

    /// What a batch of inotify events means (`refresh`; the tests inject some, an overflow among them).
    @discardableResult
    func handle(_ events: [(wd: Int32, mask: UInt32)]) -> Bool {
        guard !events.isEmpty else { return false }
        var dirty: Set<String> = []
        var structure = false
        if events.contains(where: { $0.mask & UInt32(IN_Q_OVERFLOW) != 0 }) {
            // Events were lost — an IN_IGNORED among them, maybe, so a watch kept here may be gone: every watch is
            // dropped and every data directory read and watched afresh.
            overflows += 1
            for wd in watched.keys { inotify_rm_watch(fd, wd) }
            watched.removeAll()
            for d in directories { scan(d) }
            followMissing()
            rebuild()
            return true
        }
        for e in events {
            guard let w = watched[e.wd] else { continue }
            if e.mask & UInt32(IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF) != 0 {
                // Deleted, or moved away (a moved directory's watches would follow it elsewhere): its watch and those
                // below it go, and the path is followed afresh.
                forget(below: w.path)
                structure = true
            }
            if let root = w.root {
                dirty.insert(root)
            } else {
                structure = true
            }
        }
        for d in dirty { scan(d) }
        if structure { followMissing() }
        guard !dirty.isEmpty || structure else { return false }
        rebuild()
        return true
    }

    /// Drops the watch of `path` and of every directory below it.
    private func forget(below path: String) {
        for (wd, w) in watched where w.path == path || w.path.hasPrefix(path + "/") {
            inotify_rm_watch(fd, wd)
            watched[wd] = nil
        }
    }

    /// Each data directory that does not exist (yet, or any more) is followed from its nearest existing parent: a
    /// directory made on the way down is followed in turn, and the data directory is read once it is there.
    /// Parent watches no longer needed are dropped. A directory made just before its parent's watch was added sends
    /// that watch nothing, so after adding one the paths are looked at again until nothing new is there.
    private func followMissing() {
        guard fd >= 0 else { return }
        var needed: Set<String> = []
        for _ in 0..<16 {
            needed = []
            for root in directories {
                if Self.isDirectory(root) {
                    // Made since it was last read (its entries are read now), or there all along.
                    let top = Self.resolved(root)
                    if !watched.values.contains(where: { $0.root == root && $0.path == top }) { scan(root) }
                    continue
                }
                found[root] = nil
                var parent = root
                while let slash = parent.lastIndex(of: "/") {
                    // Under a top-level directory that does not exist either (/nix), / itself is watched.
                    parent = slash == parent.startIndex ? "/" : String(parent[..<slash])
                    if parent == "/" || Self.isDirectory(parent) { break }
                }
                if !parent.isEmpty, parent != root, Self.isDirectory(parent) { needed.insert(parent) }
            }
            var added = false
            for parent in needed where !watched.values.contains(where: { $0.root == nil && $0.path == parent }) {
                guard watched.count < Self.maximumWatches else { break }
                let wd = inotify_add_watch(
                    fd, parent, UInt32(IN_CREATE | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR))
                if wd >= 0 {
                    watched[wd] = (parent, nil)
                    added = true
                }
            }
            if !added { break }
        }
        for (wd, w) in watched where w.root == nil && !needed.contains(w.path) {
            inotify_rm_watch(fd, wd)
            watched[wd] = nil
        }
    }

    private static func isDirectory(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    private func scan(_ root: String) {
        if rescanDelayNanoseconds > 0, scans >= directories.count {
            var left = timespec(
                tv_sec: Int(rescanDelayNanoseconds / 1_000_000_000),
                tv_nsec: Int(rescanDelayNanoseconds % 1_000_000_000))
            var rest = timespec()
            while nanosleep(&left, &rest) != 0, errno == EINTR { left = rest }
        }
        scans += 1
        var entries: [String: DesktopEntry] = [:]
        // A data directory that is itself a symlink (a NixOS profile) is read where it leads, once per scan.
        walk(Self.resolved(root), root: root, prefix: "", depth: 0, into: &entries)
        found[root] = entries
    }

    private static func resolved(_ path: String) -> String {
        guard let p = realpath(path, nil) else { return path }
        defer { free(p) }
        return String(cString: p)
    }

    private func walk(
        _ dir: String, root: String, prefix: String, depth: Int, into entries: inout [String: DesktopEntry]
    ) {
        guard depth <= 3, let d = opendir(dir) else { return }
        defer { closedir(d) }
        if fd >= 0, !watched.values.contains(where: { $0.path == dir && $0.root != nil }),
            watched.count < Self.maximumWatches
        {
            let wd = inotify_add_watch(
                fd, dir,
                UInt32(
                    IN_CREATE | IN_DELETE | IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_MODIFY | IN_DELETE_SELF
                        | IN_MOVE_SELF))
            if wd >= 0 { watched[wd] = (dir, root) }
        }
        while let e = readdir(d) {
            let name = withUnsafeBytes(of: e.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard !name.hasPrefix(".") else { continue }
            let path = dir + "/" + name
            var st = stat()
            guard lstat(path, &st) == 0 else { continue }
            let link = (st.st_mode & S_IFMT) == S_IFLNK
            if (st.st_mode & S_IFMT) == S_IFDIR {
                walk(path, root: root, prefix: prefix + name + "-", depth: depth + 1, into: &entries)
                continue
            }
            // A symlink is read through only as an entry file: a directory symlink is never walked (it may lead out
            // of the tree, or round in a loop).
            guard name.hasSuffix(".desktop"), entries.count < Self.maximumEntries else { continue }
            if link {
                guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { continue }
            }
            let id = prefix + String(name.dropLast(".desktop".count))
            let stamp = (
                size: Int(st.st_size), mtime: Int(st.st_mtim.tv_sec) &* 1_000_000_000 &+ Int(st.st_mtim.tv_nsec)
            )
            if let old = stamps[path], old == stamp, let known = found[root]?[path] {
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
            for e in found[dir]?.values ?? [:].values { byID[e.id] = e }
        }
        // Stamps of files no data directory holds any more are dropped, so that deletes give their room back.
        let live = Set(found.values.flatMap(\.keys))
        stamps = stamps.filter { live.contains($0.key) }
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

/// The desktop's entries as the index last read them: a value the deciding thread keeps while the index reads on.
public struct DesktopEntrySnapshot: DesktopEntries, Sendable, Equatable {
    private let byID: [String: DesktopEntry]
    private let byProgram: [String: [String]]

    init(byID: [String: DesktopEntry], byProgram: [String: [String]]) {
        self.byID = byID
        self.byProgram = byProgram
    }

    public func entry(id: String) -> DesktopEntry? { byID[id] }
    public func entries(program: String) -> [DesktopEntry] { (byProgram[program] ?? []).compactMap { byID[$0] } }
    public var count: Int { byID.count }
}
