import DBusTransport
import Glibc
import Logging

/// Knows the `Leader` pids of the user's logind sessions (`org.freedesktop.login1` on the system bus), so that
/// `CreateSession` can refuse a pid hint naming one: a session leader (the login process, a display manager's
/// session helper) is the ancestor of everything the user runs, and a session for it would capture every stream.
///
/// Read when logind is found and again whenever it announces `SessionNew` or `SessionRemoved`; believed only from
/// the owner of `org.freedesktop.login1`. Where there is no system bus or no logind (or the bus was lost), the set
/// is empty and the check is skipped. Confined to the loop thread.
final class LogindWatcher {
    static let name = "org.freedesktop.login1"
    static let path = "/org/freedesktop/login1"
    static let managerInterface = "org.freedesktop.login1.Manager"
    /// More sessions than any machine has are not read (a misbehaving bus must not grow audiod).
    static let maximumSessions = 256

    private let watch: NameWatch
    private var logger: Logger
    private let uid = getuid()
    private(set) var leaders: Set<UInt32> = []
    /// Bumped by every refresh, so that answers to an older one are dropped.
    private var refreshes = 0

    init(link: BusLink, logger: Logger) {
        self.logger = logger
        watch = link.follow(
            Self.name,
            signals: [
                "type='signal',sender='\(Self.name)',interface='\(Self.managerInterface)',path='\(Self.path)'"
            ])
        watch.onAppeared = { [weak self] _ in self?.refresh() }
        watch.onVanished = { [weak self] _ in
            self?.leaders = []
            self?.refreshes += 1
        }
        link.onSignal { [weak self] m in
            guard let self, self.watch.isOwner(m.sender), m.interface == Self.managerInterface, m.path == Self.path,
                m.member == "SessionNew" || m.member == "SessionRemoved"
            else { return }
            self.refresh()
        }
    }

    func start() { watch.start() }

    /// `ListSessions`, then the `Leader` of each of this user's sessions.
    private func refresh() {
        refreshes += 1
        let mine = refreshes
        watch.call(Self.path, Self.managerInterface, "ListSessions") { [weak self] r in
            guard let self, self.refreshes == mine else { return }
            guard r?.kind == .methodReturn, case .array(_, let items)? = r?.arguments.first else {
                self.logger.debug("logind: ListSessions did not answer with a(susso)")
                return
            }
            var paths: [String] = []
            for case .structure(let f) in items.prefix(Self.maximumSessions) {
                guard f.count == 5, f[1].uint32Value == self.uid, case .objectPath(let p) = f[4] else { continue }
                paths.append(p)
            }
            var found: Set<UInt32> = []
            var left = paths.count
            if left == 0 { self.leaders = [] }
            for p in paths {
                self.watch.call(
                    p, "org.freedesktop.DBus.Properties", "Get",
                    [.string("org.freedesktop.login1.Session"), .string("Leader")]
                ) {
                    [weak self] r in
                    guard let self, self.refreshes == mine else { return }
                    if case .variant(.uint32(let pid))? = r?.arguments.first, pid > 0 { found.insert(pid) }
                    left -= 1
                    if left == 0 {
                        self.leaders = found
                        self.logger.debug("logind: the leaders of your sessions are \(found.sorted())")
                    }
                }
            }
        }
    }
}
