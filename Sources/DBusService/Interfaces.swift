import AudioVocabulary

/// The D-Bus API as data (STYLE.md §8): one description per interface, from which introspection XML, argument
/// checking and property access are all derived. Names are docs/API.md's and fixed.
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

    public struct Property: Sendable {
        public let name: String
        public let type: String
        /// Who may `Set` it; nil for read-only.
        public let writeAccess: Access?
        public var writable: Bool { writeAccess != nil }
        init(name: String, type: String, writable: Access? = nil) {
            self.name = name
            self.type = type
            self.writeAccess = writable
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
            x += "    <property name=\"\(p.name)\" type=\"\(p.type)\" access=\"\(p.writable ? "readwrite" : "read")\">\n"
            x += "      <annotation name=\"org.freedesktop.DBus.Property.EmitsChangedSignal\" value=\"true\"/>\n"
            x += "    </property>\n"
        }
        return x + "  </interface>\n"
    }
}

private func arg(_ name: String, _ type: String) -> InterfaceDescription.Argument { .init(name: name, type: type) }

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

    public init(sessionsPerConnection: Int = 64, rules: Int = 256, nameBytes: Int = 255, options: Int = 16, players: Int = 64) {
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

    public static let manager = InterfaceDescription(
        name: BusNames.managerInterface,
        methods: [
            .init(name: "CreateSession", inputs: [arg("hints", "a{sv}")], outputs: [arg("session", "o")]),
            .init(name: "FindSession", inputs: [arg("pid", "u")], outputs: [arg("session", "o")]),
            .init(name: "GetSessionForProcess", inputs: [arg("pid", "u")], outputs: [arg("session", "o")]),
            .init(name: "ListStreams", inputs: [], outputs: [arg("streams", "aa{sv}")]),
            .init(
                name: "SetApplicationCategory",
                inputs: [arg("application", "s"), arg("category", "s"), arg("mode", "s"), arg("options", "as")],
                outputs: [], access: .user),
            .init(name: "RemoveApplicationCategory", inputs: [arg("application", "s")], outputs: [], access: .user),
            .init(name: "ListApplicationCategories", inputs: [], outputs: [arg("rules", "a(sssas)")]),
            .init(name: "ListApplicationRules", inputs: [], outputs: [arg("rules", "aa{sv}")]),
            .init(name: "Reload", inputs: [], outputs: [], access: .user),
            .init(name: "ListPlatformSources", inputs: [], outputs: [arg("sources", "aa{sv}")]),
        ],
        properties: [
            .init(name: "SilentMode", type: "b", writable: .user),
            .init(name: "OtherAudioPlaying", type: "b"),
            .init(name: "PrimaryAudioSession", type: "o"),
            .init(name: "ServerName", type: "s"),
            .init(name: "ServerConnected", type: "b"),
            .init(name: "DuckLevel", type: "d", writable: .user),
            .init(name: "Version", type: "s"),
            .init(name: "CallState", type: "s"),
            .init(name: "ScreenLocked", type: "b"),
        ],
        signals: [])

    public static let session = InterfaceDescription(
        name: BusNames.sessionInterface,
        methods: [
            .init(
                name: "SetCategory", inputs: [arg("category", "s"), arg("mode", "s"), arg("options", "as")], outputs: [],
                access: .owner),
            .init(name: "SetActive", inputs: [arg("active", "b"), arg("options", "as")], outputs: [], access: .owner),
            .init(name: "Release", inputs: [], outputs: [], access: .owner),
        ],
        properties: [
            .init(name: "Category", type: "s"),
            .init(name: "Mode", type: "s"),
            .init(name: "Options", type: "as"),
            .init(name: "Active", type: "b"),
            .init(name: "Interrupted", type: "b"),
            .init(name: "Mixable", type: "b"),
            .init(name: "SecondaryAudioShouldBeSilencedHint", type: "b"),
            .init(name: "OtherAudioPlaying", type: "b"),
            .init(name: "HandlesSecondaryAudio", type: "b", writable: .owner),
            .init(name: "ApplicationName", type: "s"),
            .init(name: "ProcessID", type: "u"),
            .init(name: "Implicit", type: "b"),
            .init(name: "Streams", type: "au"),
            .init(name: "RecordStreams", type: "au"),
            .init(name: "PrefersNoInterruptionsFromSystemAlerts", type: "b", writable: .owner),
            .init(name: "Identity", type: "a{sv}"),
        ],
        signals: [
            .init(name: "InterruptionBegan", arguments: [arg("reason", "s"), arg("details", "a{sv}")]),
            .init(name: "InterruptionEnded", arguments: [arg("should_resume", "b"), arg("details", "a{sv}")]),
            .init(name: "SilenceSecondaryAudioHint", arguments: [arg("type", "s")]),
            .init(name: "RouteChanged", arguments: [arg("reason", "s"), arg("details", "a{sv}")]),
        ])

    public static let objectManager = InterfaceDescription(
        name: "org.freedesktop.DBus.ObjectManager",
        methods: [.init(name: "GetManagedObjects", inputs: [], outputs: [arg("objects", "a{oa{sa{sv}}}")])],
        properties: [],
        signals: [
            .init(name: "InterfacesAdded", arguments: [arg("object", "o"), arg("interfaces", "a{sa{sv}}")]),
            .init(name: "InterfacesRemoved", arguments: [arg("object", "o"), arg("interfaces", "as")]),
        ])

    public static let properties = InterfaceDescription(
        name: "org.freedesktop.DBus.Properties",
        methods: [
            .init(name: "Get", inputs: [arg("interface", "s"), arg("property", "s")], outputs: [arg("value", "v")]),
            .init(name: "GetAll", inputs: [arg("interface", "s")], outputs: [arg("properties", "a{sv}")]),
            .init(name: "Set", inputs: [arg("interface", "s"), arg("property", "s"), arg("value", "v")], outputs: []),
        ],
        properties: [],
        signals: [
            .init(
                name: "PropertiesChanged",
                arguments: [arg("interface", "s"), arg("changed", "a{sv}"), arg("invalidated", "as")]),
        ])

    public static let introspectable = InterfaceDescription(
        name: "org.freedesktop.DBus.Introspectable",
        methods: [.init(name: "Introspect", inputs: [], outputs: [arg("xml", "s")])],
        properties: [], signals: [])

    public static let peer = InterfaceDescription(
        name: "org.freedesktop.DBus.Peer",
        methods: [
            .init(name: "Ping", inputs: [], outputs: []),
            .init(name: "GetMachineId", inputs: [], outputs: [arg("machine_uuid", "s")]),
        ],
        properties: [], signals: [])

    /// Interfaces of the manager object and of a session object, in introspection order.
    public static let managerInterfaces = [manager, objectManager, properties, introspectable, peer]
    public static let sessionInterfaces = [session, properties, introspectable, peer]

    /// Introspection XML for an object with these interfaces and child node names.
    public static func introspection(interfaces: [InterfaceDescription], children: [String]) -> String {
        var x = "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n"
        x += " \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n<node>\n"
        for i in interfaces { x += i.xml }
        for c in children { x += "  <node name=\"\(c)\"/>\n" }
        return x + "</node>\n"
    }
}
