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
/// bus-activatable: its `NameWatch` calls only the owner, with NO_AUTO_START, so audiod never starts it. Believed
/// only from the name's owner. Confined to the loop thread.
final class Feedbackd {
    static let name = "org.sigxcpu.Feedback"
    static let path = "/org/sigxcpu/Feedback"
    static let interface = "org.sigxcpu.Feedback"
    static let properties = "org.freedesktop.DBus.Properties"

    private let watch: NameWatch
    private weak var host: PlatformHost?
    private var logger: Logger
    var owner: String? { watch.owner }
    /// Why the name's owner is not believed; empty when it is (or there is none).
    var refused: String { watch.refused }
    /// The profile as feedbackd last said it, or as audiod last wrote it; nil while unknown (or not one of the
    /// three).
    private(set) var profile: String?
    /// A value feedbackd gave that is not a profile, said once.
    private var lastOdd: String?
    private var echoes = EchoFilter()

    init(link: BusLink, host: PlatformHost, logger: Logger) {
        self.host = host
        self.logger = logger
        watch = link.follow(
            Self.name,
            signals: [
                "type='signal',sender='\(Self.name)',interface='\(Self.properties)',member='PropertiesChanged',path='\(Self.path)'"
            ], speakers: [])
        watch.onAppeared = { [weak self] _ in self?.appeared() }
        watch.onVanished = { [weak self] _ in
            guard let self else { return }
            self.profile = nil
            self.logger.info("feedbackd went away: SilentMode stays as it is")
        }
        link.onSignal { [weak self] m in
            guard let self, self.watch.isOwner(m.sender), m.interface == Self.properties,
                m.member == "PropertiesChanged",
                m.path == Self.path, m.signature == "sa{sv}as"
            else { return }
            self.propertiesChanged(m.arguments)
        }
    }

    /// SilentMode as a profile means it: nil for anything that is not a profile.
    static func silent(_ profile: String) -> Bool? {
        switch profile {
        case "full": false
        case "quiet", "silent": true
        default: nil
        }
    }

    func start() { watch.start() }

    var status: (found: Bool, detail: String) {
        guard owner != nil else { return (false, "not running") }
        return (true, profile.map { "profile \($0)" } ?? "profile unknown")
    }

    /// feedbackd's `PropertiesChanged` (the sender was checked).
    func propertiesChanged(_ a: [DBusValue]) {
        guard a.count == 3, a[0].stringValue == Self.interface else { return }
        if let v = a[1].propertyMap?["Profile"] {
            let heard: String? = if case .variant(.string(let p)) = v { p } else { nil }
            guard echoes.take(heard, at: Self.monotonic()) else { return }
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
        echoes.wrote(new, at: Self.monotonic())
        watch.call(
            Self.path, Self.properties, "Set", [.string(Self.interface), .string("Profile"), .variant(.string(new))]
        ) {
            [weak self] r in
            guard let self, r?.kind != .methodReturn else { return }
            self.logger.info("feedbackd did not take profile \(new) (\(r?.errorName ?? "no answer"))")
            self.read(atDiscovery: false)
        }
    }

    static func monotonic() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    private func appeared() {
        profile = nil
        echoes = EchoFilter()
        read(atDiscovery: true)
    }

    private func read(atDiscovery: Bool) {
        watch.call(Self.path, Self.properties, "Get", [.string(Self.interface), .string("Profile")]) { [weak self] r in
            guard let self else { return }
            guard r?.kind == .methodReturn, let v = r?.arguments.first else {
                self.logger.info(
                    "feedbackd did not say its profile (\(r?.errorName ?? "no answer")): SilentMode stays as it is")
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

/// feedbackd's echoes of audiod's own writes, told apart from the user's changes: the rule of "each change is mirrored
/// exactly once". Profiles audiod wrote whose `PropertiesChanged` has not come back yet wait here with when they were
/// written. An echo of an older write that arrives after a newer one was made is not the user's change (SilentMode
/// switched on and off quickly must not flip back on); a write whose echo never came (feedbackd announces only a
/// change) is forgotten after a second.
struct EchoFilter {
    private var pending: [(profile: String, at: UInt64)] = []
    static let windowNanoseconds: UInt64 = 1_000_000_000
    /// Writes waiting for their echo at once: a user flipping silent mode as fast as a keyboard repeats writes
    /// ~30 a second; the oldest goes first.
    static let maximumPending = 16
    var pendingCount: Int { pending.count }

    mutating func wrote(_ profile: String, at now: UInt64) {
        pending.removeAll { now &- $0.at > Self.windowNanoseconds }
        if pending.count >= Self.maximumPending { pending.removeFirst() }
        pending.append((profile, now))
    }

    /// Whether a profile feedbackd announced (nil: not a string) is to be taken: false for the echo of a write while a
    /// later write is still on its way.
    mutating func take(_ heard: String?, at now: UInt64) -> Bool {
        pending.removeAll { now &- $0.at > Self.windowNanoseconds }
        guard let heard, let i = pending.firstIndex(where: { $0.profile == heard }) else {
            pending.removeAll()
            return true
        }
        pending.removeFirst(i + 1)
        return pending.isEmpty
    }
}
