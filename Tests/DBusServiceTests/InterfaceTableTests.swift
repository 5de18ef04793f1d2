import AudioPolicy
import DBusTransport
import Testing

@testable import DBusService

/// The interface tables are the only list of the API's members: these hold them to the engine's own list of what a
/// session and the manager show, and to the types the values really have on the bus.
@Suite struct InterfaceTableTests {
    /// A session as the engine publishes it, and its values as the service stores them.
    static func publishedSession() throws -> SessionView {
        var engine = Engine()
        let effects = engine.handle(
            .createSession(RequestID(1), NewSession(pid: 4242, applicationName: "player")), at: .zero)
        let added = effects.compactMap { e -> SessionView? in if case .sessionAdded(let v) = e { v } else { nil } }
        return try #require(added.first, "no session was published: \(effects)")
    }

    @Test("the session table lists every property the engine publishes, in its order, and Implicit before Streams")
    func sessionPropertiesMatchTheEngine() throws {
        let view = try Self.publishedSession()
        var expected = view.properties.map { AudioSessionService.value($0).0 }
        let streams = try #require(expected.firstIndex(of: "Streams"))
        expected.insert("Implicit", at: streams)
        #expect(AudioSessionService.sessionTable.properties.map(\.name) == expected)
    }

    @Test("each session property is declared with the type of the value the bus carries")
    func sessionTypesMatchTheValues() throws {
        let view = try Self.publishedSession()
        let table = AudioSessionService.sessionTable
        for p in view.properties {
            let (name, value) = AudioSessionService.value(p)
            let declared = try #require(table.property(name), "\(name) is not in the table")
            #expect(
                declared.type == value.signature,
                "\(name) is declared \(declared.type) but carried as \(value.signature)")
        }
        #expect(table.property("Implicit")?.type == "b")
    }

    @Test("each manager property the engine decides is in the table with the type it is carried as")
    func managerTypesMatchTheValues() throws {
        let table = AudioSessionService.managerTable
        let values: [ManagerProperty] =
            Engine().managerProperties + [
                .silentMode(true), .otherAudioPlaying(false), .primaryAudioSession(SessionID(3)),
                .primaryAudioSession(nil),
                .duckLevel(0.3), .callState(.ringing), .screenLocked(true),
            ]
        // The engine's list, in its order, is the table's but for what the service itself knows.
        let decided = Engine().managerProperties.map { AudioSessionService.value($0).0 }
        let own: Set<String> = ["ServerName", "ServerConnected", "Version"]
        #expect(table.properties.map(\.name).filter { !own.contains($0) } == decided)
        for p in values {
            let (name, value) = AudioSessionService.value(p)
            let declared = try #require(table.property(name), "\(name) is not in the table")
            #expect(
                declared.type == value.signature,
                "\(name) is declared \(declared.type) but carried as \(value.signature)")
        }
    }

    @Test("writable properties are exactly the API's, each with who may write it")
    func writableProperties() {
        func writable(_ t: VTable) -> [String: InterfaceDescription.Access] {
            Dictionary(uniqueKeysWithValues: t.properties.compactMap { p in p.set.map { (p.name, $0.access) } })
        }
        #expect(
            writable(AudioSessionService.managerTable) == [
                "SilentMode": .user, "DuckLevel": .user, "StrongDuckLevel": .user,
            ])
        #expect(
            writable(AudioSessionService.sessionTable) == [
                "HandlesSecondaryAudio": .owner, "PrefersNoInterruptionsFromSystemAlerts": .owner,
                "OutputMuted": .owner,
            ])
    }

    @Test("introspection marks the properties that never change const and announces every other change")
    func changeFlags() {
        let xml = API.introspection(interfaces: [API.manager, API.session], children: [])
        for name in ["Version", "Implicit"] {
            #expect(
                xml.contains(
                    "<property name=\"\(name)\" type=\"\(name == "Version" ? "s" : "b")\" access=\"read\">\n      <annotation name=\"org.freedesktop.DBus.Property.EmitsChangedSignal\" value=\"const\"/>"
                ),
                "\(name) is not marked const")
        }
        let constCount = xml.components(separatedBy: "value=\"const\"").count - 1
        let trueCount = xml.components(separatedBy: "EmitsChangedSignal\" value=\"true\"").count - 1
        #expect(constCount == 2)
        #expect(trueCount == API.manager.properties.count + API.session.properties.count - 2)
    }

    @Test("every method of the audiod interfaces is refused once audiod stops deciding; of the standard ones only Set")
    func decidingMethods() {
        for t in [AudioSessionService.managerTable, AudioSessionService.sessionTable] {
            let refused = t.methods.allSatisfy { $0.decides }
            #expect(refused, "\(t.name)")
        }
        #expect(AudioSessionService.propertiesTable.methods.filter(\.decides).map(\.name) == ["Set"])
        for t in [
            AudioSessionService.objectManagerTable, AudioSessionService.introspectableTable,
            AudioSessionService.peerTable,
        ] {
            let refused = t.methods.contains { $0.decides }
            #expect(!refused, "\(t.name)")
        }
    }
}
