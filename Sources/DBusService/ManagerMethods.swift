import AudioPolicy
import DBusTransport
import Glibc
import Platform

// The two manager methods that check more than their arguments' types before the engine decides: what a caller may
// make a session for (its own processes, never PID 1, the service manager, a login session's leader or an ancestor
// of audiod) and how many rules and sessions one caller may make audiod hold.
extension AudioSessionService {
    func setApplicationCategory(_ c: VTable.Call) {
        guard let host else { return fail(c.message, Self.shuttingDown) }
        guard let app = c.args[0].stringValue, let category = c.args[1].stringValue,
            let mode = c.args[2].stringValue, let opts = c.args[3].stringArray
        else { return unreadable(c) }
        guard !app.isEmpty else { return fail(c.message, Self.invalidArgs("the application name must not be empty")) }
        if let e = nameTooLong(app, "the application name") ?? tooManyOptions(opts) { return fail(c.message, e) }
        if !host.engine.applicationRules.contains(where: { $0.application == app }),
            host.engine.applicationRules.count >= limits.rules
        {
            return fail(
                c.message,
                Self.limitExceeded(
                    "audiod holds \(limits.rules) application rules, its limit; remove one first (RemoveApplicationCategory)"
                ))
        }
        request(c.message) {
            .setApplicationCategory($0, application: app, category: category, mode: mode, options: opts)
        }
    }

    func createSession(_ m: DBusMessage, _ hints: [String: DBusValue]) {
        // Types first: a hint of the wrong type is InvalidArgs, whatever else is wrong.
        var name = ""
        if let v = hints["application-name"] {
            guard let s = v.stringValue else {
                return fail(m, Self.invalidArgs("hint 'application-name' must be a string (s), not \(v.signature)"))
            }
            if let e = nameTooLong(s, "hint 'application-name'") { return fail(m, e) }
            name = s
        }
        var pidHint: UInt32?
        if let v = hints["pid"] {
            guard let p = v.uint32Value else {
                return fail(
                    m, Self.invalidArgs("hint 'pid' must be an unsigned 32-bit integer (u), not \(v.signature)"))
            }
            pidHint = p
        }
        var lifetime = NewSession.Lifetime.connection
        if let v = hints["lifetime"] {
            guard let s = v.stringValue else {
                return fail(m, Self.invalidArgs("hint 'lifetime' must be a string (s), not \(v.signature)"))
            }
            guard let l = NewSession.Lifetime(rawValue: s) else {
                return fail(m, Self.invalidArgs("lifetime '\(s)' is not one of connection, process"))
            }
            lifetime = l
        }
        guard let sender = m.sender else { return fail(m, .failed("a call without a sender")) }
        if let e = sessionLimitReached(sender) { return fail(m, e) }
        withCaller(sender, m) { [weak self] caller in
            guard let self else { return }
            guard let host = self.host else { return self.fail(m, Self.shuttingDown) }
            // Checked again: calls queued behind the credentials look-up all passed the first check.
            if let e = self.sessionLimitReached(sender) { return self.fail(m, e) }
            // A caller in a sandbox names pids as its pid namespace numbers them; the bus gives its host pid.
            guard let pid = pidHint.map({ host.hostPid($0, seenBy: caller.pid) }) ?? caller.pid, pid > 0,
                let uid = host.processOwner(pid)
            else {
                return self.fail(
                    m,
                    DBusError(
                        name: ErrorName.noSuchProcess.busName, message: "no process has pid \(pidHint ?? caller.pid)"))
            }
            guard uid == caller.uid else {
                return self.fail(
                    m,
                    DBusError(
                        name: "org.freedesktop.DBus.Error.AccessDenied",
                        message: "pid \(pid) belongs to another user; a session may only hold your own processes"))
            }
            if pidHint != nil, let why = self.captureRefusal(pid, named: pidHint ?? pid) {
                return self.fail(m, Self.invalidArgs(why))
            }
            let owner = SessionOwners.Owner(busName: sender, uid: caller.uid, lifetime: lifetime, pid: pid)
            let effects = self.request(
                m,
                encode: { reply in
                    guard case .session(let id) = reply else { return [] }
                    return [.objectPath(Self.sessionPath(id))]
                }
            ) { .createSession($0, NewSession(pid: pid, applicationName: name, lifetime: lifetime)) }
            // Owned from the step that made it (its reply may be published later), so that the limit counts it.
            for case .reply(_, .session(let id)) in effects { self.owners.adopt(id, owner: owner) }
            // Its reply may have been published before its owner was known.
            if lifetime == .process { self.processSessionsMayHaveChanged() }
        }
    }

    /// Why a pid hint names a process no app is (docs/API.md `CreateSession`; the list is the platform's, shared with
    /// GameMode's evidence): a session for it would hold every stream its descendants play. Nil when the pid may be
    /// held.
    private func captureRefusal(_ pid: UInt32, named: UInt32) -> String? {
        guard let not = platform.notAnApp(pid) else { return nil }
        let tail =
            "; a session holds an app's own process and its children (to set how an app is treated, use SetApplicationCategory)"
        if not == .audiod { return "pid \(named) is audiod itself" + tail }
        return "pid \(named) is \(not.what): a session for it would hold \(not.holds)" + tail
    }

    // Bounds: what one caller may make audiod hold (docs/API.md, LimitExceeded).

    static func limitExceeded(_ message: String) -> DBusError {
        DBusError(name: ErrorName.limitExceeded.busName, message: message)
    }

    func sessionLimitReached(_ sender: String) -> DBusError? {
        guard owners.sessionCount(of: sender) >= limits.sessionsPerConnection else { return nil }
        return Self.limitExceeded(
            "this connection owns \(limits.sessionsPerConnection) sessions, the limit per connection; release one first"
        )
    }

    func nameTooLong(_ s: String, _ what: String) -> DBusError? {
        guard s.utf8.count > limits.nameBytes else { return nil }
        return Self.limitExceeded("\(what) has \(s.utf8.count) bytes; at most \(limits.nameBytes) are accepted")
    }

    func tooManyOptions(_ o: [String]) -> DBusError? {
        guard o.count > limits.options else { return nil }
        return Self.limitExceeded("\(o.count) options given; at most \(limits.options) are accepted")
    }
}
