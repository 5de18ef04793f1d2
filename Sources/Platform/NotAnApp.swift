import AppIdentity
import Foundation

/// A process that is no app's own: everything the user (or the system) runs descends from it. `CreateSession`
/// refuses a pid hint naming one, and a GameMode registration of one is not game evidence — the same list for both
/// (docs/API.md `CreateSession`, docs/IDENTITY.md "GameMode"): a session, or a game, by such a pid would take in
/// every stream its descendants play.
public enum NotAnApp: Equatable, Sendable {
    /// PID 1.
    case initSystem
    /// The user's `systemd --user` (its cgroup is `…/user@UID.service/init.scope`).
    case serviceManager
    /// The leader of one of the user's login sessions (logind).
    case sessionLeader
    case audiod
    /// A process audiod descends from.
    case audiodAncestor

    /// What the process is, for a sentence: "pid 1 is \(what)".
    public var what: String {
        switch self {
        case .initSystem: "PID 1, the init system"
        case .serviceManager: "your service manager (systemd --user)"
        case .sessionLeader: "the leader of one of your login sessions"
        case .audiod: "audiod itself"
        case .audiodAncestor: "an ancestor of audiod"
        }
    }

    /// Why taking it for an app would be wrong: what everything below it is.
    public var holds: String {
        switch self {
        case .initSystem: "every stream on the system"
        case .serviceManager, .sessionLeader: "every stream you play"
        case .audiod: "audiod's own"
        case .audiodAncestor: "every stream audiod's siblings play"
        }
    }

    /// Which of these `pid` is, if any (`sessionLeader`: logind's answer, where logind is followed).
    public static func of(_ pid: UInt32, sessionLeader: (UInt32) -> Bool) -> NotAnApp? {
        if pid == 1 { return .initSystem }
        if isServiceManager(pid) { return .serviceManager }
        if sessionLeader(pid) { return .sessionLeader }
        let me = UInt32(getpid())
        if pid == me { return .audiod }
        if ProcessTable.chain(me).dropFirst().contains(pid) { return .audiodAncestor }
        return nil
    }

    /// A user's `systemd --user`: its cgroup is `…/user@UID.service/init.scope`.
    static func isServiceManager(_ pid: UInt32) -> Bool {
        guard let fd = fopen("/proc/\(pid)/cgroup", "r") else { return false }
        defer { fclose(fd) }
        var line = [CChar](repeating: 0, count: 4096)
        while fgets(&line, Int32(line.count), fd) != nil {
            let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let parts = text.split(separator: "\n").first?.split(separator: "/") ?? []
            if parts.count >= 2, parts[parts.count - 1] == "init.scope", parts[parts.count - 2].hasPrefix("user@"),
                parts[parts.count - 2].hasSuffix(".service")
            {
                return true
            }
        }
        return false
    }
}
