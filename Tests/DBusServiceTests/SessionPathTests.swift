import AudioPolicy
import Testing

@testable import DBusService

/// Every call to a session starts by reading the session's number from the object path: only the form audiod
/// itself writes names a session.
@Suite struct SessionPathTests {
    static let prefix = "/org/audiod/AudioSession1/session/"

    @Test("a path audiod wrote names its session", arguments: [0, 1, 12, 4242, UInt64.max])
    func canonical(_ n: UInt64) {
        let path = AudioSessionService.sessionPath(SessionID(n))
        #expect(path == Self.prefix + "\(n)")
        #expect(AudioSessionService.sessionID(path: path) == SessionID(n))
    }

    @Test(
        "any other spelling names no session",
        arguments: [
            "", "/", prefix, prefix + "007", prefix + "00", prefix + "+1", prefix + "-1", prefix + "1x", prefix + "x1",
            prefix + "1 ", prefix + "12/extra", prefix + "18446744073709551616", prefix + "99999999999999999999",
            "/org/audiod/AudioSession1/sessions/1", "/org/audiod/AudioSession1/session1", prefix + "١٢",
        ])
    func other(_ path: String) {
        #expect(AudioSessionService.sessionID(path: path) == nil)
    }
}
