import AudiodCore
import Foundation
import Testing

/// The file that keeps session ids from being given out twice within a login: read, written, and damaged.
struct SessionIDFileTests {
    /// A path inside a new folder, and the folder to remove afterwards.
    func scratch() -> (path: String, folder: String) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("session-ids-\(UUID().uuidString)")
        return (dir.appendingPathComponent("audiod/session-ids").path, dir.path)
    }

    @Test func aFIFOOrADeviceAtThePathIsAProblemNotAHang() throws {
        let (path, folder) = scratch()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try SessionIDFile.write(1, to: path)
        try FileManager.default.removeItem(atPath: path)
        #expect(mkfifo(path, 0o600) == 0)
        #expect(SessionIDFile.read(path) == .failure(.notARegularFile))
        try FileManager.default.removeItem(atPath: path)
        try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: "/dev/zero")
        #expect(SessionIDFile.read(path) == .failure(.unreadable))
    }

    @Test func itLivesBesideTheJournal() {
        #expect(
            SessionIDFile.path(besideJournal: "/run/user/1000/audiod/journal") == "/run/user/1000/audiod/session-ids")
    }

    @Test func noFileNumbersFromOneAndAWrittenNumberIsReadBack() throws {
        let (path, folder) = scratch()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        #expect(SessionIDFile.read(path) == .success(1))
        try SessionIDFile.write(2049, to: path)
        #expect(SessionIDFile.read(path) == .success(2049))
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "2049\n")
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o600, "readable by others: \(String(describing: mode))")
        // What a run writes, the next reads: a number past the largest is kept at the largest.
        try SessionIDFile.write(SessionIDFile.largest + 1024, to: path)
        #expect(SessionIDFile.read(path) == .success(SessionIDFile.largest))
    }

    @Test(arguments: [
        ("", SessionIDFile.Problem.notANumber), ("0", .notANumber), ("-3", .notANumber), ("12abc", .notANumber),
        ("4503599627370497", .notANumber), ("99999999999999999999999", .notANumber),
        (String(repeating: "1", count: 100), .notANumber),
    ])
    func aDamagedFileIsAProblemNotACrash(_ content: String, _ expected: SessionIDFile.Problem) throws {
        let (path, folder) = scratch()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try SessionIDFile.write(1, to: path)
        try Data(content.utf8).write(to: URL(fileURLWithPath: path))
        #expect(SessionIDFile.read(path) == .failure(expected))
        try Data("4503599627370496\n".utf8).write(to: URL(fileURLWithPath: path))
        #expect(SessionIDFile.read(path) == .success(SessionIDFile.largest))
    }
}
