import AudioPolicy
import DBusTransport
import FoundationEssentials

/// The interfaces of docs/API.md as tables (`VTable`): every member, who may use it, and what serves it.
/// Names and types are the API's and fixed; the order of the properties is the order `GetAll` and `InterfacesAdded`
/// list them in.
extension AudioSessionService {
    /// A property shown as audiod last published it: `Get` never answers a value before the `PropertiesChanged` that
    /// announces it has gone out (the engine may be a step ahead while that step's stream operations travel).
    private static func published(_ name: String) -> VTable.Getter {
        { service, session in
            guard let session else { return service.publishedManager[name] }
            guard let view = service.publishedSessions[session] else { return nil }
            if name == "Implicit" { return .bool(view.isImplicit) }
            return service.sessionPropertySlots[name].map { AudioSessionService.value(view.property(at: $0)).1 }
        }
    }

    static let managerTable: VTable = VTable(
        BusNames.managerInterface, decides: true,
        [
            .method("CreateSession", in: [arg("hints", "a{sv}")], out: [arg("session", "o")]) { s, c in
                s.createSession(c.message, c.args.first?.propertyMap ?? [:])
            },
            .method("FindSession", in: [arg("pid", "u")], out: [arg("session", "o")]) { s, c in
                guard let host = s.host, let pid = c.args.first?.uint32Value else {
                    return s.fail(c.message, AudioSessionService.shuttingDown)
                }
                if let id = host.engine.findSession(pid: pid) {
                    s.reply(c.message, [.objectPath(AudioSessionService.sessionPath(id))])
                } else {
                    s.fail(
                        c.message,
                        DBusError(
                            name: ErrorName.noSuchSession.busName, message: "no session was created with pid \(pid)"))
                }
            },
            .method("GetSessionForProcess", in: [arg("pid", "u")], out: [arg("session", "o")]) { s, c in
                guard let host = s.host, let pid = c.args.first?.uint32Value else {
                    return s.fail(c.message, AudioSessionService.shuttingDown)
                }
                let chain = host.processChain(pid)
                if let id = host.engine.sessionForProcess(chain: chain.isEmpty ? [pid] : chain) {
                    s.reply(c.message, [.objectPath(AudioSessionService.sessionPath(id))])
                } else {
                    s.fail(
                        c.message,
                        DBusError(
                            name: ErrorName.noSuchSession.busName, message: "no session owns the streams of pid \(pid)")
                    )
                }
            },
            .method("ListStreams", out: [arg("streams", "aa{sv}")]) { s, c in
                guard let host = s.host else { return s.fail(c.message, AudioSessionService.shuttingDown) }
                guard host.connectedServerName != nil else {
                    return s.fail(
                        c.message,
                        DBusError(
                            name: ErrorName.serverUnavailable.busName,
                            message: "audiod is not connected to the sound server right now; it reconnects by itself"))
                }
                s.reply(
                    c.message, [.array(element: "a{sv}", host.engine.streamViews.map(AudioSessionService.streamEntry))])
            },
            .method(
                "SetApplicationCategory",
                in: [arg("application", "s"), arg("category", "s"), arg("mode", "s"), arg("options", "as")],
                access: .user
            ) { s, c in
                s.setApplicationCategory(c)
            },
            .method("RemoveApplicationCategory", in: [arg("application", "s")], access: .user) { s, c in
                guard let app = c.args.first?.stringValue else { return s.unreadable(c) }
                if let e = s.nameTooLong(app, "the application name") { return s.fail(c.message, e) }
                s.request(c.message) { .removeApplicationCategory($0, application: app) }
            },
            .method("ListApplicationCategories", out: [arg("rules", "a(sssas)")]) { s, c in
                guard let host = s.host else { return s.fail(c.message, AudioSessionService.shuttingDown) }
                s.reply(
                    c.message,
                    [
                        .array(
                            element: "(sssas)",
                            host.engine.applicationRules.map { r in
                                .structure([
                                    .string(r.application), .string(r.configuration.category.rawValue),
                                    .string(r.configuration.mode.rawValue),
                                    .strings(r.configuration.options.map(\.rawValue)),
                                ])
                            })
                    ])
            },
            .method("ListApplicationRules", out: [arg("rules", "aa{sv}")]) { s, c in
                guard let host = s.host else { return s.fail(c.message, AudioSessionService.shuttingDown) }
                s.reply(
                    c.message,
                    [.array(element: "a{sv}", host.engine.applicationRules.map(AudioSessionService.ruleEntry))])
            },
            .method("Reload", access: .user) { s, c in
                // An audiod-wide write: the table lets only audiod's own uid this far.
                guard let host = s.host, host.acceptsRequests else {
                    return s.fail(c.message, AudioSessionService.shuttingDown)
                }
                // Logged as SIGHUP's reload is (docs/CONFIG.md): whoever asked sees the answer, the log keeps it.
                switch host.reloadConfig() {
                case .reloaded(let file):
                    s.logger.info(
                        "Reload: \(file.map { "config reloaded from \($0)" } ?? "no config file; the built-in settings are in force")"
                    )
                    s.reply(c.message, [])
                case .invalid(let why):
                    s.logger.error("Reload: config not reloaded, the settings in force stay: \(why)")
                    s.fail(c.message, DBusError(name: ErrorName.invalidConfig.busName, message: why))
                }
            },
            .method("ListPlatformSources", out: [arg("sources", "aa{sv}")]) { s, c in
                s.reply(c.message, [.array(element: "a{sv}", s.platformSources())])
            },
            .property(
                "SilentMode", "b", get: published("SilentMode"),
                set: (
                    .user,
                    { s, c, v in
                        guard case .bool(let on) = v else { return s.unreadable(c) }
                        s.request(c.message) { .setSilentMode($0, on) }
                    }
                )),
            .property("OtherAudioPlaying", "b", get: published("OtherAudioPlaying")),
            .property("PrimaryAudioSession", "o", get: published("PrimaryAudioSession")),
            .property("ServerName", "s", get: published("ServerName")),
            .property("ServerConnected", "b", get: published("ServerConnected")),
            .property(
                "DuckLevel", "d", get: published("DuckLevel"),
                set: (
                    .user,
                    { s, c, v in
                        guard case .double(let level) = v else { return s.unreadable(c) }
                        s.request(c.message) { .setDuckLevel($0, level) }
                    }
                )),
            .property(
                "StrongDuckLevel", "d", get: published("StrongDuckLevel"),
                set: (
                    .user,
                    { s, c, v in
                        guard case .double(let level) = v else { return s.unreadable(c) }
                        s.request(c.message) { .setStrongDuckLevel($0, level) }
                    }
                )),
            .property("Version", "s", change: .const, get: { _, _ in .string(AudioSessionService.version) }),
            .property("CallState", "s", get: published("CallState")),
            .property("ScreenLocked", "b", get: published("ScreenLocked")),
        ])

    static let sessionTable: VTable = VTable(
        BusNames.sessionInterface, decides: true,
        [
            .method("SetCategory", in: [arg("category", "s"), arg("mode", "s"), arg("options", "as")], access: .owner) {
                s, c in
                guard let id = c.session, let category = c.args[0].stringValue, let mode = c.args[1].stringValue,
                    let o = c.args[2].stringArray
                else { return s.unreadable(c) }
                if let e = s.tooManyOptions(o) { return s.fail(c.message, e) }
                s.request(c.message) { .setCategory($0, id, category: category, mode: mode, options: o) }
            },
            .method("SetActive", in: [arg("active", "b"), arg("options", "as")], access: .owner) { s, c in
                guard let id = c.session, let active = c.args[0].boolValue, let o = c.args[1].stringArray else {
                    return s.unreadable(c)
                }
                if let e = s.tooManyOptions(o) { return s.fail(c.message, e) }
                s.request(c.message) { .setActive($0, id, active: active, options: o) }
            },
            .method("Release", access: .owner) { s, c in
                guard let id = c.session else { return s.unreadable(c) }
                s.request(c.message) { .release($0, id) }
            },
            .property("Category", "s", get: published("Category")),
            .property("Mode", "s", get: published("Mode")),
            .property("Options", "as", get: published("Options")),
            .property("Active", "b", get: published("Active")),
            .property("Interrupted", "b", get: published("Interrupted")),
            .property("Mixable", "b", get: published("Mixable")),
            .property("SecondaryAudioShouldBeSilencedHint", "b", get: published("SecondaryAudioShouldBeSilencedHint")),
            .property("OtherAudioPlaying", "b", get: published("OtherAudioPlaying")),
            .property(
                "HandlesSecondaryAudio", "b", get: published("HandlesSecondaryAudio"),
                set: (
                    .owner,
                    { s, c, v in
                        guard let id = c.session, case .bool(let on) = v else { return s.unreadable(c) }
                        s.request(c.message) { .setHandlesSecondaryAudio($0, id, on) }
                    }
                )),
            .property("ApplicationName", "s", get: published("ApplicationName")),
            .property("ProcessID", "u", get: published("ProcessID")),
            .property("Implicit", "b", change: .const, get: published("Implicit")),
            .property("Streams", "au", get: published("Streams")),
            .property("RecordStreams", "au", get: published("RecordStreams")),
            .property(
                "OutputMuted", "b", get: published("OutputMuted"),
                set: (
                    .owner,
                    { s, c, v in
                        guard let id = c.session, case .bool(let on) = v else { return s.unreadable(c) }
                        s.request(c.message) { .setOutputMuted($0, id, on) }
                    }
                )),
            .property(
                "PrefersNoInterruptionsFromSystemAlerts", "b", get: published("PrefersNoInterruptionsFromSystemAlerts"),
                set: (
                    .owner,
                    { s, c, v in
                        guard let id = c.session, case .bool(let on) = v else { return s.unreadable(c) }
                        s.request(c.message) { .setPrefersNoInterruptions($0, id, on) }
                    }
                )),
            .property("Identity", "a{sv}", get: published("Identity")),
            .signal("InterruptionBegan", [arg("reason", "s"), arg("details", "a{sv}")]),
            .signal("InterruptionEnded", [arg("should_resume", "b"), arg("details", "a{sv}")]),
            .signal("SilenceSecondaryAudioHint", [arg("type", "s")]),
            .signal("RouteChanged", [arg("reason", "s"), arg("details", "a{sv}")]),
            .signal("UserIntentToUnmuteOutput", []),
        ])

    static let objectManagerTable: VTable = VTable(
        "org.freedesktop.DBus.ObjectManager",
        [
            .method("GetManagedObjects", out: [arg("objects", "a{oa{sa{sv}}}")]) { s, c in
                s.reply(c.message, [s.managedObjects()])
            },
            .signal("InterfacesAdded", [arg("object", "o"), arg("interfaces", "a{sa{sv}}")]),
            .signal("InterfacesRemoved", [arg("object", "o"), arg("interfaces", "as")]),
        ])

    static let propertiesTable: VTable = VTable(
        "org.freedesktop.DBus.Properties",
        [
            .method("Get", in: [arg("interface", "s"), arg("property", "s")], out: [arg("value", "v")]) { s, c in
                // propertyTable answers when it finds no table.
                guard let table = s.propertyTable(c) else { return }
                guard let name = c.args[1].stringValue else { return s.unreadable(c) }
                guard let p = table.property(name), let now = p.get(s, c.session) else {
                    return s.fail(
                        c.message,
                        DBusError(
                            name: "org.freedesktop.DBus.Error.UnknownProperty",
                            message:
                                "\(table.name) has no property \(name); it has \(table.properties.map(\.name).joined(separator: ", "))"
                        ))
                }
                s.reply(c.message, [.variant(p.get(s, c.session) ?? now)])
            },
            .method("GetAll", in: [arg("interface", "s")], out: [arg("properties", "a{sv}")]) { s, c in
                guard let table = s.propertyTable(c) else { return }
                s.reply(c.message, [.properties(table.values(s, c.session))])
            },
            .method("Set", in: [arg("interface", "s"), arg("property", "s"), arg("value", "v")], decides: true) {
                s, c in
                guard let table = s.propertyTable(c) else { return }
                guard let name = c.args[1].stringValue, case .variant(let value) = c.args[2] else {
                    return s.unreadable(c)
                }
                guard let p = table.property(name) else {
                    return s.fail(
                        c.message,
                        DBusError(
                            name: "org.freedesktop.DBus.Error.UnknownProperty",
                            message: "\(table.name) has no property \(name)"))
                }
                guard let set = p.set else {
                    return s.fail(
                        c.message,
                        DBusError(
                            name: "org.freedesktop.DBus.Error.PropertyReadOnly", message: "\(name) is read-only"))
                }
                guard value.signature == p.type else {
                    return s.fail(
                        c.message,
                        AudioSessionService.invalidArgs("\(name) is of type \(p.type), not \(value.signature)"))
                }
                s.authorize(c.message, set.access, c.session) { [weak s] in
                    guard let s else { return }
                    set.handler(s, c, value)
                }
            },
            .signal("PropertiesChanged", [arg("interface", "s"), arg("changed", "a{sv}"), arg("invalidated", "as")]),
        ])

    static let introspectableTable: VTable = VTable(
        "org.freedesktop.DBus.Introspectable",
        [
            .method("Introspect", out: [arg("xml", "s")]) { s, c in
                let path = c.message.path ?? "/"
                let tables = c.session == nil ? AudioSessionService.managerTables : AudioSessionService.sessionTables
                s.reply(
                    c.message,
                    [.string(API.introspection(interfaces: tables.map(\.description), children: s.children(of: path)))])
            }
        ])

    static let peerTable: VTable = VTable(
        "org.freedesktop.DBus.Peer",
        [
            .method("Ping") { s, c in s.reply(c.message, []) },
            .method("GetMachineId", out: [arg("machine_uuid", "s")]) { s, c in
                let id = (try? String(contentsOfFile: "/etc/machine-id", encoding: .utf8))?.filter { !$0.isWhitespace }
                s.reply(c.message, [.string(id ?? "")])
            },
        ])

    /// The interfaces of the manager object and of a session object, in introspection order.
    static let managerTables: [VTable] = [
        managerTable, objectManagerTable, propertiesTable, introspectableTable, peerTable,
    ]
    static let sessionTables: [VTable] = [sessionTable, propertiesTable, introspectableTable, peerTable]

    /// The table a `Properties` call names, among the called object's; answers UnknownInterface when it has none.
    private func propertyTable(_ c: VTable.Call) -> VTable? {
        guard let name = c.args.first?.stringValue else {
            unreadable(c)
            return nil
        }
        let tables = c.session == nil ? AudioSessionService.managerTables : AudioSessionService.sessionTables
        guard let t = tables.first(where: { $0.name == name }) else {
            fail(
                c.message,
                DBusError(
                    name: "org.freedesktop.DBus.Error.UnknownInterface",
                    message: "\(c.message.path ?? "") has no interface \(name)"))
            return nil
        }
        return t
    }
}
