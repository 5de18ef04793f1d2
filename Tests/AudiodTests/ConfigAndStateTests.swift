import AudiodTestKit
import DBusService
import Foundation
import Testing

/// The config file, SIGHUP and saved state, with the built audiod.
@Suite(.serialized)
struct ConfigAndStateTests {
    func writeConfig(_ server: TestServer, _ text: String) throws {
        let dir = "\(server.directory)/home/.config/audiod"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try text.write(toFile: dir + "/audiod.toml", atomically: true, encoding: .utf8)
    }

    func rules(_ d: Daemon) -> [String] {
        guard case .success(let out) = d.client.manager("ListApplicationCategories"),
            case .array(_, let items)? = out.first
        else { return [] }
        return items.compactMap { item in
            guard case .structure(let f) = item, let app = f.first?.stringValue,
                let c = f.dropFirst().first?.stringValue
            else { return nil }
            return "\(app)=\(c)"
        }
    }

    @Test("an app rule from the config file makes that app obey silent mode")
    func configRule() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        try writeConfig(server, "[apps.noisy-game]\ncategory = \"ambient\"\n")
        let d = try Daemon.start(server)
        defer { d.stop() }
        #expect(rules(d) == ["noisy-game=ambient"])
        let game = try playback(server, name: "noisy-game")
        let other = try playback(server, name: "podcast")
        _ = try server.waitForPlaybackStream(pid: game.pid)
        _ = try server.waitForPlaybackStream(pid: other.pid)
        _ = d.client.call(
            API.managerPath, API.properties.name, "Set",
            [.string(API.manager.name), .string("SilentMode"), .variant(.bool(true))])
        #expect(waitFor(5) { server.playbackStream(pid: game.pid)?.muted == true }, "the ambient app was not silenced")
        #expect(server.playbackStream(pid: other.pid)?.muted == false)
    }

    @Test("a broken config stops audiod at start with file, line and key")
    func brokenConfig() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        try writeConfig(server, "duck-level = 0.2\n[apps.mpv]\ncategory = \"loud\"\n")
        let child = try server.spawn([TestServer.builtProduct("audiod")], log: "broken.log")
        let status = child.wait(timeout: 10)
        #expect(status != nil && status != 0, "audiod ran on a broken config")
        let log = server.file("broken.log")
        #expect(log.contains("audiod.toml:3: apps.mpv.category: category 'loud' is not one of"), "\(log)")
    }

    @Test("SIGHUP re-reads the config; a broken edit keeps the settings in force")
    func reload() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        try writeConfig(server, "[apps.a]\ncategory = \"ambient\"\n")
        let d = try Daemon.start(server)
        defer { d.stop() }
        #expect(rules(d) == ["a=ambient"])
        try writeConfig(server, "[apps.b]\ncategory = \"playback\"\n")
        d.child.signal(SIGHUP)
        #expect(waitFor(5) { rules(d) == ["b=playback"] }, "not reloaded: \(rules(d))")
        try writeConfig(server, "[apps.c]\ncategory = \"nope\"\n")
        d.child.signal(SIGHUP)
        usleep(300_000)
        #expect(rules(d) == ["b=playback"], "a broken reload changed the settings")
        #expect(server.file("audiod.log").contains("config not reloaded"))
    }

    @Test("silent mode and D-Bus app rules survive a restart")
    func persisted() throws {
        let server = try TestServer(.pulseaudio)
        defer { server.stop() }
        var d = try Daemon.start(server)
        _ = d.client.call(
            API.managerPath, API.properties.name, "Set",
            [.string(API.manager.name), .string("SilentMode"), .variant(.bool(true))])
        let set = d.client.manager(
            "SetApplicationCategory", [.string("mpv"), .string("playback"), .string("default"), .strings([])])
        #expect((try? set.get()) != nil, "\(set)")
        d.stop()
        d = try Daemon.start(server, log: "audiod-2.log")
        defer { d.stop() }
        #expect(d.client.property(API.managerPath, API.manager.name, "SilentMode") == .bool(true))
        #expect(rules(d) == ["mpv=playback"])
        #expect(throws: Never.self) { try d.client.manager("RemoveApplicationCategory", [.string("mpv")]).get() }
        let again = d.client.manager("RemoveApplicationCategory", [.string("mpv")])
        guard case .failure(let e) = again else {
            Issue.record("removed twice")
            return
        }
        #expect(e.name == "org.audiod.AudioSession1.Error.NoSuchRule")
    }
}
