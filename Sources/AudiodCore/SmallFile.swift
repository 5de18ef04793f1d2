import Glibc

/// Reads the small state files audiod keeps beside its journal: a regular file only, never through a symlink, never
/// blocking on what is at the path (a FIFO, a device), and at most `limit` bytes.
enum SmallFile {
    enum Problem: Error, Equatable {
        case unreadable, notARegularFile, tooLarge
    }

    /// The file's bytes; nil when there is no file.
    static func read(_ path: String, limit: Int) -> Result<[UInt8]?, Problem> {
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return errno == ENOENT ? .success(nil) : .failure(.unreadable) }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return .failure(.unreadable) }
        guard (st.st_mode & S_IFMT) == S_IFREG else { return .failure(.notARegularFile) }
        guard st.st_size <= limit else { return .failure(.tooLarge) }
        // One byte more than the limit: a file that grew since fstat is still caught.
        var bytes = [UInt8](repeating: 0, count: limit + 1)
        var count = 0
        while count <= limit {
            let n = bytes.withUnsafeMutableBytes { buffer in
                buffer.baseAddress.map { Glibc.read(fd, $0 + count, limit + 1 - count) } ?? -1
            }
            if n < 0, errno == EINTR { continue }
            guard n >= 0 else { return .failure(.unreadable) }
            if n == 0 { break }
            count += n
        }
        guard count <= limit else { return .failure(.tooLarge) }
        return .success(Array(bytes[..<count]))
    }
}
