import AudiodCore
import Foundation
import Testing

/// The file that keeps session ids from being given out twice within a login: read, written, and damaged.
struct SessionIDFileTests {
    func scratch() throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("session-ids-\(UUID().uuidString)")
        return dir.appendingPathComponent("audiod/session-ids").path
    }

    @Test func itLivesBesideTheJournal() {
        #expect(
            SessionIDFile.path(besideJournal: "/run/user/1000/audiod/journal") == "/run/user/1000/audiod/session-ids")
    }

    @Test func noFileNumbersFromOneAndAWrittenNumberIsReadBack() throws {
        let path = try scratch()
        defer { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) }
        #expect(SessionIDFile.read(path) == .success(1))
        try SessionIDFile.write(2049, to: path)
        #expect(SessionIDFile.read(path) == .success(2049))
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "2049\n")
    }

    @Test(arguments: [
        ("", SessionIDFile.Problem.notANumber), ("0", .notANumber), ("-3", .notANumber), ("12abc", .notANumber),
        ("281474976710657", .notANumber), ("99999999999999999999999", .notANumber),
        (String(repeating: "1", count: 100), .unreadable),
    ])
    func aDamagedFileIsAProblemNotACrash(_ content: String, _ expected: SessionIDFile.Problem) throws {
        let path = try scratch()
        defer { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) }
        try SessionIDFile.write(1, to: path)
        try Data(content.utf8).write(to: URL(fileURLWithPath: path))
        #expect(SessionIDFile.read(path) == .failure(expected))
        // The largest number it takes still leaves room to number on.
        try Data("281474976710656\n".utf8).write(to: URL(fileURLWithPath: path))
        #expect(SessionIDFile.read(path) == .success(1 << 48))
    }
}
