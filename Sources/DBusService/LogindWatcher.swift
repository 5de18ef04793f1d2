import DBusTransport
import Glibc
import Logging

/// Knows the `Leader` pids of the user's logind sessions (`org.freedesktop.login1` on the system bus), so that
/// `CreateSession` can refuse a pid hint naming one: a session leader (the login process, a display manager's
/// session helper) is the ancestor of everything the user runs, and a session for it would capture every stream.
///
/// Read at start and again whenever logind announces `SessionNew` or `SessionRemoved`; believed only from the
/// owner of `org.freedesktop.login1`. Where there is no system bus or no logind, the set stays empty and the
/// check is skipped. Confined to the loop thread.
final class LogindWatcher {
    static let name = "org.freedesktop.login1"
    static let path = "/org/freedesktop/login1"
    static let managerInterface = "org.freedesktop.login1.Manager"
    /// More sessions than any machine has are not read (a misbehaving bus must not grow audiod).
    static let maximumSessions = 256

    private let bus: DBusConnection
    private var logger: Logger
    private let uid = getuid()
    private var owner: String?
    private(set) var leaders: Set<UInt32> = []
    /// Bumped by every refresh, so that answers to an older one are dropped.
    private var generation = 0

    init(bus: DBusConnection, logger: Logger) {
        self.bus = bus
        self.logger = logger
    }

    /// The system bus's address: `$DBUS_SYSTEM_BUS_ADDRESS`, or the well-known socket.
    static var systemBusAddress: String {
        let env = getenv("DBUS_SYSTEM_BUS_ADDRESS").map { String(cString: $0) } ?? ""
        return env.isEmpty ? "unix:path=/run/dbus/system_bus_socket" : env
    }

    func start() {
        bus.addMatch("type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='\(Self.name)'")
        bus.addMatch("type='signal',sender='\(Self.name)',interface='\(Self.managerInterface)',path='\(Self.path)'")
        bus.nameOwner(of: Self.name) { [weak self] unique in
            guard let self, let unique else {
                self?.logger.debug("logind is not on the system bus: session leaders are not checked")
                return
            }
            self.owner = unique
            self.refresh()
        }
    }

    /// A signal on the system bus, if it is logind's (or about its name).
    func received(_ m: DBusMessage) {
        guard m.kind == .signal else { return }
        if m.interface == "org.freedesktop.DBus", m.member == "NameOwnerChanged", m.isFromBus, m.signature == "sss" {
            let a = m.arguments
            guard a.count == 3, a[0].stringValue == Self.name, let new = a[2].stringValue else { return }
            owner = new.isEmpty ? nil : new
            leaders = []
            generation += 1
            if owner != nil { refresh() }
        } else if m.interface == Self.managerInterface, m.path == Self.path, let sender = m.sender, sender == owner,
            m.member == "SessionNew" || m.member == "SessionRemoved"
        {
            refresh()
        }
    }

    /// `ListSessions`, then the `Leader` of each of this user's sessions.
    private func refresh() {
        guard let owner, let m = DBusMessage.methodCall(
            destination: owner, path: Self.path, interface: Self.managerInterface, member: "ListSessions")
        else { return }
        generation += 1
        let mine = generation
        bus.call(m, timeoutMilliseconds: 5_000) { [weak self] r in
            guard let self, self.generation == mine else { return }
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
                guard let get = DBusMessage.methodCall(
                    destination: owner, path: p, interface: "org.freedesktop.DBus.Properties", member: "Get")
                else { continue }
                get.append([.string("org.freedesktop.login1.Session"), .string("Leader")])
                self.bus.call(get, timeoutMilliseconds: 5_000) { [weak self] r in
                    guard let self, self.generation == mine else { return }
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

extension DBusConnection {
    /// `GetNameOwner`: the unique name that owns `name` now, or nil (no owner, no answer).
    func nameOwner(of name: String, _ found: @escaping (String?) -> Void) {
        guard let m = DBusMessage.methodCall(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "GetNameOwner")
        else { return found(nil) }
        m.append([.string(name)])
        call(m, timeoutMilliseconds: 5_000) { r in
            guard r?.kind == .methodReturn, case .string(let unique)? = r?.arguments.first else { return found(nil) }
            found(unique)
        }
    }
}
