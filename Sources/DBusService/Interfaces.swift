import AudioVocabulary

/// What introspection shows of an interface: names, types, access and change flags, derived from the table that
/// serves it (`VTable`, ServiceTables.swift). Names are docs/API.md's and fixed.
public struct InterfaceDescription: Sendable {
    /// Who may call a method or write a property (docs/API.md, "Trust"). Reading is open to everyone on the bus.
    public enum Access: String, Sendable {
        /// Any connection.
        case anyone
        /// The session's owner: the connection that created it; for a `process` session, any connection of the
        /// creator's uid.
        case owner
        /// A connection of the uid audiod runs as: audiod-wide settings (a bus may admit more than one uid).
        case user
    }

    public struct Argument: Sendable {
        public let name: String
        public let type: String
    }

    public struct Method: Sendable {
        public let name: String
        public let inputs: [Argument]
        public let outputs: [Argument]
        public let access: Access
        /// Kept, not computed: every call is checked against it.
        public let inputSignature: String
        init(name: String, inputs: [Argument], outputs: [Argument], access: Access = .anyone) {
            self.name = name
            self.inputs = inputs
            inputSignature = inputs.map(\.type).joined()
            self.outputs = outputs
            self.access = access
        }
    }

    /// How a property's changes reach the bus (the `EmitsChangedSignal` annotation).
    public enum ChangeSignal: String, Sendable {
        /// Every change is announced with `PropertiesChanged`, new value included.
        case emits = "true"
        /// It never changes while the object exists.
        case const
    }

    public struct Property: Sendable {
        public let name: String
        public let type: String
        /// Who may `Set` it; nil for read-only.
        public let writeAccess: Access?
        public let change: ChangeSignal
        public var writable: Bool { writeAccess != nil }
        init(name: String, type: String, writable: Access? = nil, change: ChangeSignal = .emits) {
            self.name = name
            self.type = type
            self.writeAccess = writable
            self.change = change
        }
    }

    public struct SignalDescription: Sendable {
        public let name: String
        public let arguments: [Argument]
    }

    public let name: String
    public let methods: [Method]
    public let properties: [Property]
    public let signals: [SignalDescription]

    public func method(_ name: String) -> Method? { methods.first { $0.name == name } }
    public func property(_ name: String) -> Property? { properties.first { $0.name == name } }

    /// The `<interface>` element of introspection XML.
    public var xml: String {
        var x = "  <interface name=\"\(name)\">\n"
        for m in methods {
            x += "    <method name=\"\(m.name)\">\n"
            for a in m.inputs { x += "      <arg name=\"\(a.name)\" type=\"\(a.type)\" direction=\"in\"/>\n" }
            for a in m.outputs { x += "      <arg name=\"\(a.name)\" type=\"\(a.type)\" direction=\"out\"/>\n" }
            x += "    </method>\n"
        }
        for s in signals {
            x += "    <signal name=\"\(s.name)\">\n"
            for a in s.arguments { x += "      <arg name=\"\(a.name)\" type=\"\(a.type)\"/>\n" }
            x += "    </signal>\n"
        }
        for p in properties {
            x +=
                "    <property name=\"\(p.name)\" type=\"\(p.type)\" access=\"\(p.writable ? "readwrite" : "read")\">\n"
            x +=
                "      <annotation name=\"org.freedesktop.DBus.Property.EmitsChangedSignal\" value=\"\(p.change.rawValue)\"/>\n"
            x += "    </property>\n"
        }
        return x + "  </interface>\n"
    }
}

/// What one client may make audiod hold (docs/API.md, `LimitExceeded`). Each bound is far above what a real app uses
/// and low enough that cleaning up after the worst client stays well under a frame of anyone else's latency.
public struct Limits: Sendable, Equatable {
    /// Explicit sessions one bus connection may own at once.
    public var sessionsPerConnection: Int
    /// Application rules set over D-Bus, in all (they are audiod-wide and saved).
    public var rules: Int
    /// UTF-8 bytes of a name a client gives audiod: `application-name`, a rule's application.
    public var nameBytes: Int
    /// Options in one `SetCategory`, `SetActive` or rule.
    public var options: Int
    /// MPRIS players followed at once.
    public var players: Int

    public init(
        sessionsPerConnection: Int = 64, rules: Int = 256, nameBytes: Int = 255, options: Int = 16, players: Int = 64
    ) {
        self.sessionsPerConnection = sessionsPerConnection
        self.rules = rules
        self.nameBytes = nameBytes
        self.options = options
        self.players = players
    }
}

/// The names of docs/API.md.
public enum API {
    public static let busName = BusNames.busName
    public static let managerPath = BusNames.managerPath
    public static let sessionPathPrefix = BusNames.sessionPathPrefix
    public static let errorPrefix = BusNames.errorPrefix

    /// The interfaces as introspection shows them: derived from the tables that serve them
    /// (`AudioSessionService`'s vtables).
    public static let manager = AudioSessionService.managerTable.description
    public static let session = AudioSessionService.sessionTable.description
    public static let objectManager = AudioSessionService.objectManagerTable.description
    public static let properties = AudioSessionService.propertiesTable.description
    public static let introspectable = AudioSessionService.introspectableTable.description
    public static let peer = AudioSessionService.peerTable.description

    /// Introspection XML for an object with these interfaces and child node names.
    public static func introspection(interfaces: [InterfaceDescription], children: [String]) -> String {
        var x = "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n"
        x += " \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n<node>\n"
        for i in interfaces { x += i.xml }
        for c in children { x += "  <node name=\"\(c)\"/>\n" }
        return x + "</node>\n"
    }
}
