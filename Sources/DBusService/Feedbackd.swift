import AudioPolicy
import DBusTransport
import Glibc
import Logging

/// The ring/silent profile of Linux phones (SPEC §10): feedbackd's `org.sigxcpu.Feedback` `Profile` on the session
/// bus is the silent switch. `quiet` and `silent` are SilentMode on, `full` is off; SilentMode on writes `quiet`,
/// off writes `full`.
///
/// When feedbackd is found (at start, or when it appears) its profile wins. After that each change is mirrored
/// exactly once: a change of SilentMode is written only when the profile says otherwise, so the profile's own
/// `PropertiesChanged` that follows finds SilentMode already agreeing and nothing goes back. feedbackd is
/// bus-activatable: every call is NO_AUTO_START, so audiod never starts it. Believed only from the name's owner.
/// Confined to the loop thread.
final class Feedbackd {
    static let name = "org.sigxcpu.Feedback"
    static let path = "/org/sigxcpu/Feedback"
    static let interface = "org.sigxcpu.Feedback"
    static let properties = "org.freedesktop.DBus.Properties"

    private let bus: DBusConnection
    private weak var host: PolicyHost?
    private var logger: Logger
    private(set) var owner: String?
    private var generation = 0
    /// The profile as feedbackd last said it, or as audiod last wrote it; nil while unknown (or not one of the
    /// three).
    private(set) var profile: String?
    /// A value feedbackd gave that is not a profile, said once.
    private var lastOdd: String?
    /// Profiles audiod wrote whose `PropertiesChanged` has not come back yet, with when they were written. An echo of
    /// an older write that arrives after a newer one was made is not the user's change (SilentMode switched on and
    /// off quickly must not flip back on); a second on, an echo that never came (feedbackd announces only a change)
    /// is forgotten.
    private var echoes: [(profile: String, at: UInt64)] = []
    static let echoWindowNanoseconds: UInt64 = 1_000_000_000

    init(bus: DBusConnection, host: PolicyHost, logger: Logger) {
        self.bus = bus
        self.host = host
        self.logger = logger
    }

    /// SilentMode as a profile means it: nil for anything that is not a profile.
    static func silent(_ profile: String) -> Bool? {
        switch profile {
        case "full": false
        case "quiet", "silent": true
        default: nil
        }
    }

    func start() {
        bus.addMatch("type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='\(Self.name)'")
        bus.addMatch("type='signal',sender='\(Self.name)',interface='\(Self.properties)',member='PropertiesChanged',path='\(Self.path)'")
        bus.nameOwner(of: Self.name) { [weak self] unique in
            guard let self, let unique, self.owner == nil else { return }
            self.appeared(unique)
        }
    }

    var status: (found: Bool, detail: String) {
        guard owner != nil else { return (false, "not running") }
        return (true, profile.map { "profile \($0)" } ?? "profile unknown")
    }

    func follows(_ sender: String) -> Bool { sender == owner }

    func nameOwnerChanged(name: String, new: String) {
        guard name == Self.name else { return }
        if owner != nil {
            owner = nil
            profile = nil
            generation += 1
            logger.info("feedbackd went away: SilentMode stays as it is")
        }
        if !new.isEmpty { appeared(new) }
    }

    /// feedbackd's `PropertiesChanged` (the sender was checked).
    func propertiesChanged(_ a: [DBusValue]) {
        guard a.count == 3, a[0].stringValue == Self.interface else { return }
        if let v = a[1].propertyMap?["Profile"] {
            let now = Self.monotonic()
            echoes.removeAll { now - $0.at > Self.echoWindowNanoseconds }
            if case .variant(.string(let p)) = v, let i = echoes.firstIndex(where: { $0.profile == p }) {
                echoes.removeFirst(i + 1)
                // A later write is still on its way: this value is already out of date.
                if !echoes.isEmpty { return }
            } else {
                echoes.removeAll()
            }
            took(v, atDiscovery: false)
        } else if a[2].stringArray?.contains("Profile") == true {
            read(atDiscovery: false)
        }
    }

    /// SilentMode changed (whoever changed it): written to feedbackd unless its profile already says so.
    func silentModeChanged(_ on: Bool) {
        guard owner != nil else { return }
        if let p = profile, Self.silent(p) == on { return }
        let new = on ? "quiet" : "full"
        profile = new
        echoes.append((new, Self.monotonic()))
        guard let owner, let m = DBusMessage.methodCall(destination: owner, path: Self.path, interface: Self.properties, member: "Set")
        else { return }
        m.setNoAutoStart()
        m.append([.string(Self.interface), .string("Profile"), .variant(.string(new))])
        let mine = generation
        bus.call(m, timeoutMilliseconds: 5_000) { [weak self] r in
            guard let self, self.generation == mine, r?.kind != .methodReturn else { return }
            self.logger.info("feedbackd did not take profile \(new) (\(r?.errorName ?? "no answer"))")
            self.read(atDiscovery: false)
        }
    }

    static func monotonic() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    private func appeared(_ unique: String) {
        owner = unique
        generation += 1
        profile = nil
        echoes.removeAll()
        read(atDiscovery: true)
    }

    private func read(atDiscovery: Bool) {
        guard let owner, let m = DBusMessage.methodCall(destination: owner, path: Self.path, interface: Self.properties, member: "Get")
        else { return }
        m.setNoAutoStart()
        m.append([.string(Self.interface), .string("Profile")])
        let mine = generation
        bus.call(m, timeoutMilliseconds: 5_000) { [weak self] r in
            guard let self, self.generation == mine else { return }
            guard r?.kind == .methodReturn, let v = r?.arguments.first else {
                self.logger.info("feedbackd did not say its profile (\(r?.errorName ?? "no answer")): SilentMode stays as it is")
                return
            }
            self.took(v, atDiscovery: atDiscovery)
        }
    }

    private func took(_ v: DBusValue, atDiscovery: Bool) {
        let inner: DBusValue = { if case .variant(let x) = v { return x } else { return v } }()
        guard case .string(let p) = inner, let on = Self.silent(p) else {
            let odd = inner.stringValue.map { "profile '\($0.prefix(64))'" } ?? "a Profile of type \(inner.signature)"
            if odd != lastOdd {
                logger.info("feedbackd has \(odd), not full, quiet or silent: SilentMode stays as it is")
                lastOdd = odd
            }
            profile = nil
            return
        }
        lastOdd = nil
        profile = p
        if atDiscovery { logger.info("feedbackd found: its profile \(p) is the silent switch") }
        guard host?.engine.silentMode != on else { return }
        host?.handle(.platformSilentMode(on))
    }
}
