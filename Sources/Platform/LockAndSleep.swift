import AudioPolicy
import DBusTransport
import Glibc
import Logging

/// The lock screen and sleep, as logind knows them (SPEC §10), on the system bus.
///
/// The lock screen is the `LockedHint` of the user's graphical session: `GetUser(uid)` → `User.Display`. A systemd
/// user service belongs to no login session and desktops withhold `XDG_SESSION_ID` from it, so that variable and
/// then `GetSessionByPID(audiod)` are only fallbacks. The display is followed as it changes (`PropertiesChanged` on
/// the user, sessions coming and going), and so is its `LockedHint`.
///
/// Sleep: audiod holds a `delay` inhibitor while awake — the one descriptor from the bus it keeps — so that on
/// `PrepareForSleep(true)` it interrupts, pauses the players and only then lets the machine sleep (within 200 ms).
///
/// Believed only from the current owner of `org.freedesktop.login1`, called only through its `NameWatch`
/// (NO_AUTO_START, answers from an earlier owner dropped). When logind goes away or the system bus is lost, the
/// screen reads unlocked, a sleep in progress ends and the inhibitor is closed. Confined to the loop thread.
final class LockAndSleep {
    static let name = LogindWatcher.name
    static let managerPath = LogindWatcher.path
    static let manager = LogindWatcher.managerInterface
    static let sessionInterface = "org.freedesktop.login1.Session"
    static let userInterface = "org.freedesktop.login1.User"
    static let properties = "org.freedesktop.DBus.Properties"
    /// How long the inhibitor is held after `PrepareForSleep(true)` at most, waiting for the players' answers to
    /// `Pause` (SPEC §10 allows 200 ms; the rest is the margin for the bus).
    static let releaseWithinNanoseconds: UInt64 = 150_000_000

    private let watch: NameWatch
    private weak var host: PlatformHost?
    private var logger: Logger
    private let uid = getuid()
    /// Runs its last argument once the `Pause` calls audiod sent have been answered and the players paused say so,
    /// or after the time given at most.
    private let afterPauses: ([PlayerID], UInt64, @escaping () -> Void) -> Void
    var owner: String? { watch.owner }
    /// Bumped when the lock is looked up again: older answers are dropped. (Answers from an earlier owner never
    /// arrive: the watch drops them.)
    private var generation = 0
    private var userPath: String?
    /// The session whose `LockedHint` is the lock screen, and how it was found.
    private(set) var lockSession: (path: String, how: String)?
    private(set) var locked = false
    private var lastLockLine = ""
    /// The delay inhibitor while held.
    private(set) var inhibitor: Int32 = -1
    private var inhibitRequested = false
    private var inhibitRefused: String?
    /// Counts sleeps, so that a release meant for one sleep never closes the next one's inhibitor.
    private var sleepCycle = 0
    private(set) var preparingForSleep = false

    init(
        link: BusLink, host: PlatformHost, logger: Logger,
        afterPauses: @escaping ([PlayerID], UInt64, @escaping () -> Void) -> Void
    ) {
        self.host = host
        self.logger = logger
        self.afterPauses = afterPauses
        watch = link.follow(
            Self.name,
            signals: [
                "type='signal',sender='\(Self.name)',interface='\(Self.manager)',path='\(Self.managerPath)'",
                "type='signal',sender='\(Self.name)',interface='\(Self.properties)',member='PropertiesChanged'",
            ])
        watch.onAppeared = { [weak self] _ in self?.appeared() }
        watch.onVanished = { [weak self] loss in self?.vanished(loss) }
        link.onSignal { [weak self] m in self?.received(m) }
    }

    deinit { releaseInhibitor() }

    func start() { watch.start() }

    /// What `ListPlatformSources` says of it.
    var status: (found: Bool, detail: String) {
        guard owner != nil else { return (false, "not on the system bus") }
        var parts: [String] = []
        if let s = lockSession {
            parts.append(
                "screen \(locked ? "locked" : "unlocked") (session \(Self.lastComponent(s.path)), from \(s.how))")
        } else {
            parts.append("no graphical session found: the screen counts as unlocked")
        }
        if inhibitor >= 0 {
            parts.append("sleep inhibitor held")
        } else if let why = inhibitRefused {
            parts.append("no sleep inhibitor (\(why))")
        } else {
            parts.append(preparingForSleep ? "going to sleep" : "no sleep inhibitor yet")
        }
        return (true, parts.joined(separator: "; "))
    }

    /// A signal on the system bus, if it is logind's.
    func received(_ m: DBusMessage) {
        guard watch.isOwner(m.sender), let member = m.member else { return }
        switch (m.interface ?? "", member) {
        case (Self.manager, "PrepareForSleep"):
            guard m.path == Self.managerPath, m.signature == "b", case .bool(let going)? = m.arguments.first else {
                return logger.debug("logind: PrepareForSleep of type \(m.signature) ignored")
            }
            prepareForSleep(going)
        case (Self.manager, "SessionNew"), (Self.manager, "SessionRemoved"):
            // The graphical session may be another one now (or ours may be gone).
            findLockSession()
        case (Self.properties, "PropertiesChanged"):
            guard m.signature == "sa{sv}as", let path = m.path else { return }
            let a = m.arguments
            let changed = a[1].propertyMap ?? [:]
            let invalidated = a[2].stringArray ?? []
            if path == userPath, a[0].stringValue == Self.userInterface,
                changed["Display"] != nil || invalidated.contains("Display")
            {
                findLockSession()
            } else if path == lockSession?.path, a[0].stringValue == Self.sessionInterface {
                if let v = changed["LockedHint"] {
                    lockedHint(v)
                } else if invalidated.contains("LockedHint") {
                    readLockedHint()
                }
            }
        default: break
        }
    }

    private func appeared() {
        generation += 1
        inhibitRefused = nil
        findLockSession()
        takeInhibitor()
    }

    private func vanished(_ loss: NameWatch.Loss) {
        generation += 1
        userPath = nil
        lockSession = nil
        lastLockLine = ""
        releaseInhibitor()
        inhibitRequested = false
        if loss == .released {
            logger.info("logind went away: the screen counts as unlocked, and sleep is not followed")
        }
        setLocked(false)
        // A sleep logind will never end must not hold everyone's audio.
        if preparingForSleep { prepareForSleep(false) }
    }

    // MARK: The lock screen

    private func findLockSession() {
        generation += 1
        let mine = generation
        call(Self.managerPath, Self.manager, "GetUser", [.uint32(uid)]) { [weak self] r in
            guard let self, self.generation == mine else { return }
            guard case .objectPath(let user)? = r?.arguments.first, r?.kind == .methodReturn else {
                return self.fallback(mine, why: "logind knows no user \(self.uid)")
            }
            self.userPath = user
            self.call(user, Self.properties, "Get", [.string(Self.userInterface), .string("Display")]) {
                [weak self] r in
                guard let self, self.generation == mine else { return }
                guard r?.kind == .methodReturn, case .variant(.structure(let f))? = r?.arguments.first, f.count == 2,
                    case .objectPath(let session) = f[1]
                else {
                    return self.fallback(mine, why: "logind's user has no Display")
                }
                guard session != "/" else { return self.fallback(mine, why: "you have no graphical session") }
                self.follow(session, how: "User.Display", mine)
            }
        }
    }

    /// `User.Display` named nothing: `$XDG_SESSION_ID`, then the session audiod runs in, if any.
    private func fallback(_ mine: Int, why: String) {
        let env = getenv("XDG_SESSION_ID").map { String(cString: $0) } ?? ""
        if !env.isEmpty {
            call(Self.managerPath, Self.manager, "GetSession", [.string(env)]) { [weak self] r in
                guard let self, self.generation == mine else { return }
                if r?.kind == .methodReturn, case .objectPath(let p)? = r?.arguments.first {
                    self.follow(p, how: "XDG_SESSION_ID", mine)
                } else {
                    self.byPID(mine, why: "\(why), and XDG_SESSION_ID=\(env) is not a session")
                }
            }
        } else {
            byPID(mine, why: why)
        }
    }

    private func byPID(_ mine: Int, why: String) {
        call(Self.managerPath, Self.manager, "GetSessionByPID", [.uint32(UInt32(getpid()))]) { [weak self] r in
            guard let self, self.generation == mine else { return }
            if r?.kind == .methodReturn, case .objectPath(let p)? = r?.arguments.first {
                self.follow(p, how: "audiod's own session", mine)
            } else {
                self.lockSession = nil
                self.setLocked(false)
                self.lockLine(
                    "no graphical session to follow (\(why), and audiod runs in none): the screen counts as unlocked")
            }
        }
    }

    private func follow(_ path: String, how: String, _ mine: Int) {
        lockSession = (path, how)
        lockLine("following the lock screen of session \(Self.lastComponent(path)) (found through \(how))")
        readLockedHint()
    }

    private func readLockedHint() {
        guard let path = lockSession?.path else { return }
        let mine = generation
        call(path, Self.properties, "Get", [.string(Self.sessionInterface), .string("LockedHint")]) { [weak self] r in
            guard let self, self.generation == mine else { return }
            guard r?.kind == .methodReturn, let v = r?.arguments.first else {
                // The session went away between the lookup and the read; logind announces that with SessionRemoved.
                self.lockLine("session \(Self.lastComponent(path)) has no LockedHint: the screen counts as unlocked")
                return self.setLocked(false)
            }
            self.lockedHint(v)
        }
    }

    private func lockedHint(_ v: DBusValue) {
        let inner: DBusValue = { if case .variant(let x) = v { return x } else { return v } }()
        guard case .bool(let b) = inner else {
            lockLine("logind's LockedHint is of type \(inner.signature), not b: the screen counts as unlocked")
            return setLocked(false)
        }
        setLocked(b)
    }

    private func setLocked(_ b: Bool) {
        guard b != locked else { return }
        locked = b
        logger.debug("the screen is \(b ? "locked" : "unlocked")")
        host?.handle(.screenLocked(b))
    }

    /// An info line, once per thing it says: logind re-announcing the same session says nothing new.
    private func lockLine(_ s: String) {
        guard s != lastLockLine else { return }
        lastLockLine = s
        logger.info("logind: \(s)")
    }

    // MARK: Sleep

    private func takeInhibitor() {
        guard owner != nil, inhibitor < 0, !inhibitRequested else { return }
        inhibitRequested = true
        let args: [DBusValue] = [
            .string("sleep"), .string("audiod"), .string("Pausing media players before sleep"), .string("delay"),
        ]
        // An answer from an earlier logind never comes here: the watch drops it, and the descriptor closes with it.
        call(Self.managerPath, Self.manager, "Inhibit", args) { [weak self] r in
            guard let self else { return }
            // The descriptor is taken before anything else: whatever happens next, it is closed or kept, never leaked.
            let fd = r?.kind == .methodReturn && r?.sender == self.owner ? r?.takeOnlyUnixFD() : nil
            self.inhibitRequested = false
            guard let fd else {
                let why = r?.errorName ?? (r == nil ? "no answer" : "an answer without a descriptor")
                if self.inhibitRefused != why {
                    self.logger.info(
                        "logind gave no sleep inhibitor (\(why)): players are paused on PrepareForSleep, but the machine may sleep first"
                    )
                }
                self.inhibitRefused = why
                return
            }
            self.inhibitRefused = nil
            if self.inhibitor >= 0 || self.preparingForSleep {
                close(fd)
                return
            }
            self.inhibitor = fd
            self.logger.debug("logind: holding a sleep delay inhibitor (fd \(fd))")
        }
    }

    private func releaseInhibitor() {
        guard inhibitor >= 0 else { return }
        close(inhibitor)
        inhibitor = -1
    }

    private func prepareForSleep(_ going: Bool) {
        guard going != preparingForSleep else { return }
        preparingForSleep = going
        sleepCycle += 1
        logger.info(going ? "the machine is going to sleep: interrupting and pausing" : "the machine woke up")
        let effects = host?.handle(.prepareForSleep(going)) ?? []
        if going {
            let cycle = sleepCycle
            let paused = effects.compactMap { if case .mprisPause(let p) = $0 { p } else { nil } }
            afterPauses(paused, Self.releaseWithinNanoseconds) { [weak self] in
                guard let self, self.sleepCycle == cycle else { return }
                self.releaseInhibitor()
                self.logger.debug("logind: sleep inhibitor released")
            }
        } else {
            // A sleep that was cancelled before the release: the old inhibitor is still held and serves on.
            takeInhibitor()
        }
    }

    // MARK: Calls

    private func call(
        _ path: String, _ iface: String, _ member: String, _ args: [DBusValue],
        _ reply: @escaping (DBusMessage?) -> Void
    ) {
        watch.call(path, iface, member, args, reply)
    }

    static func lastComponent(_ path: String) -> String {
        String(path.split(separator: "/").last ?? Substring(path))
    }
}
