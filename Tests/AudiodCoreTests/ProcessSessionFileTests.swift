import AudiodCore
import DBusService
import Foundation
import Testing

/// The file that keeps the shells' sessions for the next run: read, written, and damaged.
struct ProcessSessionFileTests {
    func scratch() -> (path: String, folder: String) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("process-sessions-\(UUID().uuidString)")
        return (dir.appendingPathComponent("audiod/process-sessions").path, dir.path)
    }

    let shell = KeptProcessSession(
        pid: 4242, start: 987_654, uid: 1000, owner: ":1.17", applicationName: "bash \"quoted\"\n",
        category: "playback", mode: "spoken-audio", options: ["duck-others"], handlesSecondaryAudio: true,
        prefersNoInterruptionsFromSystemAlerts: false, active: true)

    @Test func itLivesBesideTheJournal() {
        #expect(
            ProcessSessionFile.path(besideJournal: "/run/user/1000/audiod/journal")
                == "/run/user/1000/audiod/process-sessions")
    }

    @Test func noFileKeepsNothingAndAWrittenListIsReadBack() throws {
        let (path, folder) = scratch()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        #expect(ProcessSessionFile.read(path) == .success([]))
        var other = shell
        other.pid = 4343
        other.active = false
        try ProcessSessionFile.write([shell, other], to: path)
        #expect(ProcessSessionFile.read(path) == .success([shell, other]))
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o600, "readable by others: \(String(describing: mode))")
        try ProcessSessionFile.write([], to: path)
        #expect(ProcessSessionFile.read(path) == .success([]))
    }

    @Test(arguments: [
        ("", ProcessSessionFile.Problem.notAList), ("{}", .notAList), ("[{\"pid\": 1}]", .notAList),
        ("[1, 2]", .notAList), (String(repeating: " ", count: ProcessSessionFile.largestBytes + 1), .tooLarge),
    ])
    func aDamagedFileIsAProblemNotACrash(_ content: String, _ expected: ProcessSessionFile.Problem) throws {
        let (path, folder) = scratch()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try ProcessSessionFile.write([], to: path)
        try Data(content.utf8).write(to: URL(fileURLWithPath: path))
        #expect(ProcessSessionFile.read(path) == .failure(expected))
    }

    @Test func aFIFOOrADeviceAtThePathIsAProblemNotAHang() throws {
        let (path, folder) = scratch()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try ProcessSessionFile.write([], to: path)
        try FileManager.default.removeItem(atPath: path)
        #expect(mkfifo(path, 0o600) == 0)
        #expect(ProcessSessionFile.read(path) == .failure(.notARegularFile))
        try FileManager.default.removeItem(atPath: path)
        try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: "/dev/zero")
        #expect(ProcessSessionFile.read(path) == .failure(.unreadable))
    }
}
