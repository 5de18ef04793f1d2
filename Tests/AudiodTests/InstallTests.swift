import AudiodTestKit
import DBusService
import Foundation
import Testing

/// What the install step ships works: the interface XML is what audiod serves, and the D-Bus activation file
/// starts audiod on the first call.
@Suite(.serialized)
struct InstallTests {
    var repo: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
    }

    @Test("the interface XML written by --dump-interfaces is what the running daemon serves")
    func interfaceXML() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        let dir = "\(server.directory)/xml"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        _ = try server.run([TestServer.builtProduct("audiod"), "--dump-interfaces", dir])
        let d = try Daemon.start(server)
        defer { d.stop() }
        guard case .success(let out) = d.client.call(API.managerPath, API.introspectable.name, "Introspect"),
            let served = out.first?.stringValue
        else {
            Issue.record("Introspect failed")
            return
        }
        for name in ["org.audiod.AudioSession1.Manager", "org.audiod.AudioSession1.Session"] {
            let file = try String(contentsOfFile: "\(dir)/\(name).xml", encoding: .utf8)
            #expect(file.contains("<interface name=\"\(name)\">"))
            if name.hasSuffix("Manager") {
                let start = try #require(file.range(of: "  <interface"))
                let end = try #require(file.range(of: "  </interface>\n"))
                #expect(
                    served.contains(file[start.lowerBound..<end.upperBound]), "served XML differs from the shipped one")
            }
        }
    }

    @Test("a call to org.audiod.AudioSession1 activates audiod through the D-Bus service file")
    func activation() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        try server.makeAudiodActivatable(
            template: repo.appendingPathComponent("systemd/org.audiod.AudioSession1.service.in"))
        let client = try BusClient(address: server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? "")
        defer { client.close() }
        let version = client.property(API.managerPath, API.manager.name, "Version")
        #expect(
            version?.stringValue?.isEmpty == false, "activation did not start audiod: \(String(describing: version))")
        // The activated audiod is a child of the bus, which stop() kills; stop audiod first, the clean way.
        if let p = server.activatedAudiod() { kill(p, SIGTERM) }
    }
}
