/// The D-Bus API as data (STYLE.md §8): one description per interface, from which introspection XML, argument
/// checking and property access are all derived. Names are API.md's and fixed.
public struct InterfaceDescription: Sendable {
    public struct Argument: Sendable {
        public let name: String
        public let type: String
    }

    public struct Method: Sendable {
        public let name: String
        public let inputs: [Argument]
        public let outputs: [Argument]
        public var inputSignature: String { inputs.map(\.type).joined() }
    }

    public struct Property: Sendable {
        public let name: String
        public let type: String
        public let writable: Bool
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

/// The names of API.md.
public enum API {
    public static let busName = "org.audiod.AudioSession1"
    public static let managerPath = "/org/audiod/AudioSession1"
    public static let sessionPathPrefix = "/org/audiod/AudioSession1/session/"
    public static let errorPrefix = "org.audiod.AudioSession1.Error."

    public static let manager = InterfaceDescription(
        name: "org.audiod.AudioSession1.Manager",
        methods: [
            .init(name: "CreateSession", inputs: [arg("hints", "a{sv}")], outputs: [arg("session", "o")]),
            .init(name: "FindSession", inputs: [arg("pid", "u")], outputs: [arg("session", "o")]),
            .init(name: "GetSessionForProcess", inputs: [arg("pid", "u")], outputs: [arg("session", "o")]),
            .init(name: "ListStreams", inputs: [], outputs: [arg("streams", "aa{sv}")]),
            .init(
                name: "SetApplicationCategory",
                inputs: [arg("application", "s"), arg("category", "s"), arg("mode", "s"), arg("options", "as")],
                outputs: []),
            .init(name: "RemoveApplicationCategory", inputs: [arg("application", "s")], outputs: []),
            .init(name: "ListApplicationCategories", inputs: [], outputs: [arg("rules", "a(sssas)")]),
        ],
        properties: [
            .init(name: "SilentMode", type: "b", writable: true),
            .init(name: "OtherAudioPlaying", type: "b", writable: false),
            .init(name: "PrimaryAudioSession", type: "o", writable: false),
            .init(name: "ServerName", type: "s", writable: false),
            .init(name: "ServerConnected", type: "b", writable: false),
            .init(name: "DuckLevel", type: "d", writable: true),
            .init(name: "Version", type: "s", writable: false),
        ],
        signals: [])

    public static let session = InterfaceDescription(
        name: "org.audiod.AudioSession1.Session",
        methods: [
            .init(name: "SetCategory", inputs: [arg("category", "s"), arg("mode", "s"), arg("options", "as")], outputs: []),
            .init(name: "SetActive", inputs: [arg("active", "b"), arg("options", "as")], outputs: []),
            .init(name: "Release", inputs: [], outputs: []),
        ],
        properties: [
            .init(name: "Category", type: "s", writable: false),
            .init(name: "Mode", type: "s", writable: false),
            .init(name: "Options", type: "as", writable: false),
            .init(name: "Active", type: "b", writable: false),
            .init(name: "Interrupted", type: "b", writable: false),
            .init(name: "Mixable", type: "b", writable: false),
            .init(name: "SecondaryAudioShouldBeSilencedHint", type: "b", writable: false),
            .init(name: "OtherAudioPlaying", type: "b", writable: false),
            .init(name: "HandlesSecondaryAudio", type: "b", writable: true),
            .init(name: "ApplicationName", type: "s", writable: false),
            .init(name: "ProcessID", type: "u", writable: false),
            .init(name: "Implicit", type: "b", writable: false),
            .init(name: "Streams", type: "au", writable: false),
            .init(name: "RecordStreams", type: "au", writable: false),
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
