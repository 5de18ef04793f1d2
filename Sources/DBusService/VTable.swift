import AudioPolicy
import DBusTransport

/// One D-Bus interface as sd-bus's `SD_BUS_VTABLE` declares one: each method with its argument types, who may call
/// it and its handler; each property with its type, its getter, who may set it and its setter, and how its changes
/// are announced; each signal. Introspection, argument checking, access, `Get`/`GetAll`/`Set` and the dispatch of a
/// call all read this one table, so that a member cannot be described in one place and served differently in
/// another.
struct VTable: Sendable {
    typealias Argument = InterfaceDescription.Argument
    typealias Access = InterfaceDescription.Access

    /// A call as a handler receives it: its arguments already match the method's signature.
    struct Call {
        let message: DBusMessage
        let args: [DBusValue]
        /// The session whose object was called; nil for the manager.
        let session: SessionID?
    }

    typealias MethodHandler = @Sendable (AudioSessionService, Call) -> Void
    /// The property's value on the object: nil when the object has none to show (a session not yet published).
    typealias Getter = @Sendable (AudioSessionService, SessionID?) -> DBusValue?
    /// Called with a value of the property's type, once the caller's access is checked.
    typealias Setter = @Sendable (AudioSessionService, Call, DBusValue) -> Void

    struct Method: Sendable {
        let name: String
        let inputs: [Argument]
        let outputs: [Argument]
        let access: Access
        /// It asks the engine to decide something: once audiod begins to stop it is answered `ShuttingDown`.
        let decides: Bool
        let handler: MethodHandler
        /// Kept, not computed: every call is checked against it.
        let inputSignature: String

        init(
            name: String, inputs: [Argument], outputs: [Argument], access: Access, decides: Bool,
            handler: @escaping MethodHandler
        ) {
            self.name = name
            self.inputs = inputs
            self.outputs = outputs
            self.access = access
            self.decides = decides
            self.handler = handler
            inputSignature = inputs.map(\.type).joined()
        }
    }

    struct Property: Sendable {
        let name: String
        let type: String
        let change: InterfaceDescription.ChangeSignal
        let get: Getter
        /// Who may set it and how; nil for a read-only property.
        let set: (access: Access, handler: Setter)?
    }

    enum Entry: Sendable {
        case method(Method)
        case property(Property)
        case signal(InterfaceDescription.SignalDescription)

        static func method(
            _ name: String, in inputs: [Argument] = [], out outputs: [Argument] = [], access: Access = .anyone,
            decides: Bool = false, _ handler: @escaping MethodHandler
        ) -> Entry {
            .method(
                Method(name: name, inputs: inputs, outputs: outputs, access: access, decides: decides, handler: handler)
            )
        }

        static func property(
            _ name: String, _ type: String, change: InterfaceDescription.ChangeSignal = .emits,
            get: @escaping Getter, set: (access: Access, handler: Setter)? = nil
        ) -> Entry {
            .property(Property(name: name, type: type, change: change, get: get, set: set))
        }

        static func signal(_ name: String, _ arguments: [Argument]) -> Entry {
            .signal(.init(name: name, arguments: arguments))
        }
    }

    let name: String
    let methods: [Method]
    let properties: [Property]
    /// What introspection shows and calls are checked against, derived from the entries.
    let description: InterfaceDescription
    private let methodIndex: [String: Int]
    private let propertyIndex: [String: Int]

    /// `decides`: every method of the interface asks the engine to decide (the audiod interfaces).
    init(_ name: String, decides: Bool = false, _ entries: [Entry]) {
        self.name = name
        var methods: [Method] = []
        var properties: [Property] = []
        var signals: [InterfaceDescription.SignalDescription] = []
        for e in entries {
            switch e {
            case .method(let m):
                methods.append(
                    decides && !m.decides
                        ? Method(
                            name: m.name, inputs: m.inputs, outputs: m.outputs, access: m.access, decides: true,
                            handler: m.handler)
                        : m)
            case .property(let p): properties.append(p)
            case .signal(let s): signals.append(s)
            }
        }
        self.methods = methods
        self.properties = properties
        description = InterfaceDescription(
            name: name,
            methods: methods.map { .init(name: $0.name, inputs: $0.inputs, outputs: $0.outputs, access: $0.access) },
            properties: properties.map {
                .init(name: $0.name, type: $0.type, writable: $0.set?.access, change: $0.change)
            },
            signals: signals)
        methodIndex = Dictionary(methods.enumerated().map { ($1.name, $0) }, uniquingKeysWith: { first, _ in first })
        propertyIndex = Dictionary(
            properties.enumerated().map { ($1.name, $0) }, uniquingKeysWith: { first, _ in first })
    }

    func method(_ name: String) -> Method? { methodIndex[name].map { methods[$0] } }
    func property(_ name: String) -> Property? { propertyIndex[name].map { properties[$0] } }

    /// Every property's value on the object, in the table's order (`GetAll`, `InterfacesAdded`).
    func values(_ service: AudioSessionService, _ session: SessionID?) -> [(String, DBusValue)] {
        properties.compactMap { p in p.get(service, session).map { (p.name, $0) } }
    }
}

func arg(_ name: String, _ type: String) -> InterfaceDescription.Argument { .init(name: name, type: type) }
