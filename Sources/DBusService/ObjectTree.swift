import AudioPolicy
import DBusTransport

// The objects audiod shows on the bus: the manager and a session object per published session, as introspection
// walks them from "/" and `GetManagedObjects` lists them.
extension AudioSessionService {
    func objectPaths() -> [String] {
        [API.managerPath] + publishedSessions.keys.map(Self.sessionPath)
    }

    func children(of path: String) -> [String] {
        let prefix = path == "/" ? "/" : path + "/"
        var names = Set<String>()
        for p in objectPaths() where p.hasPrefix(prefix) {
            if let first = p.dropFirst(prefix.count).split(separator: "/").first { names.insert(String(first)) }
        }
        return names.sorted { a, b in
            if let x = UInt64(a), let y = UInt64(b) { return x < y }
            return a < b
        }
    }

    /// A session object's interfaces and their properties (`InterfacesAdded`, `GetManagedObjects`).
    func sessionInterfaces(_ id: SessionID) -> DBusValue {
        .dict(
            key: "s", value: "a{sv}", Self.sessionTables.map { t in (.string(t.name), .properties(t.values(self, id))) }
        )
    }

    func managedObjects() -> DBusValue {
        .dict(
            key: "o", value: "a{sa{sv}}",
            publishedSessions.keys.sorted().map { id in
                (.objectPath(Self.sessionPath(id)), sessionInterfaces(id))
            })
    }
}
