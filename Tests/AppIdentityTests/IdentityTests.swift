import AppIdentity
import AudioPolicy
import Foundation
import Testing

/// SPEC §7's identity sources, scripted: no /proc, no desktop.
struct LauncherIDTests {
    @Test(
        "launcher scopes and services name the desktop id; anything else names nothing",
        arguments: [
            (
                "0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-gnome-org.example.SpaceGame-4242.scope",
                "org.example.SpaceGame"
            ),
            ("0::/user.slice/user@1000.service/app.slice/app-org.kde.dolphin@0a1b.service", "org.kde.dolphin"),
            ("0::/app.slice/app-kde-org.kde.elisa@12.service", "org.kde.elisa"),
            ("0::/app.slice/app-flatpak-org.example.Music-77.scope", "org.example.Music"),
            ("0::/app.slice/app-gnome-my\\x2dgame-99.scope", "my-game"),
            ("0::/app.slice/dbus-:1.42-org.gnome.Calls@0.service", "org.gnome.Calls"),
            ("0::/app.slice/app-org.example.Player.service", "org.example.Player"),
        ])
    func scope(line: String, id: String) {
        #expect(LauncherIDs.desktopID(cgroup: "12:pids:/x\n" + line + "\n") == id)
    }

    @Test(
        "not a launcher's unit: no id",
        arguments: [
            "0::/user.slice/user-1000.slice/session-2.scope",
            "0::/user.slice/user@1000.service/app.slice/gnome-terminal-server.service",
            "0::/system.slice/pulseaudio.service",
            "0::/app.slice/app-gnome-bad\\xZZ-1.scope",
            "0::/app.slice/app--1.scope",
            "0::/app.slice/app-gnome-org.x-y-z-1.scope",
            "1:name=systemd:/app-gnome-org.example.Game-1.scope",
            "",
        ])
    func notAScope(line: String) {
        #expect(LauncherIDs.desktopID(cgroup: line) == nil)
    }

    @Test("GIO_LAUNCHED_DESKTOP_FILE counts only for its pid or a live ancestor")
    func launchedEnvironment() {
        let env = [
            "GIO_LAUNCHED_DESKTOP_FILE": "/usr/share/applications/org.example.Game.desktop",
            "GIO_LAUNCHED_DESKTOP_FILE_PID": "100",
        ]
        #expect(LauncherIDs.launchedDesktopID(environment: env, chain: [105, 100, 1])?.id == "org.example.Game")
        #expect(LauncherIDs.launchedDesktopID(environment: env, chain: [105, 99, 1]) == nil)
        #expect(
            LauncherIDs.launchedDesktopID(environment: ["GIO_LAUNCHED_DESKTOP_FILE": "/x/a.desktop"], chain: [1]) == nil
        )
        let bytes = Array("A=1\u{0}GIO_LAUNCHED_DESKTOP_FILE=/a/b.desktop\u{0}=bad\u{0}SteamAppId=620\u{0}".utf8)
        let parsed = LauncherIDs.environment(bytes)
        #expect(parsed["GIO_LAUNCHED_DESKTOP_FILE"] == "/a/b.desktop" && parsed["A"] == "1")
        #expect(LauncherIDs.steamGame(environment: parsed) == "620")
        #expect(LauncherIDs.steamGame(environment: ["SteamAppId": "0"]) == nil)
    }
}

struct DesktopEntryTests {
    func entry(_ text: String, id: String = "org.example.App") -> DesktopEntry? {
        DesktopEntry.parse(Array(text.utf8), id: id, path: "/apps/\(id).desktop")
    }

    @Test("an entry's categories and program, after env and its assignments")
    func parses() throws {
        let e = try #require(
            entry(
                """
                [Desktop Entry]
                Type=Application
                Name=Space Game
                Name[de]=Weltraumspiel
                Exec=env SDL_AUDIODRIVER=pulse /usr/games/spacegame --fullscreen %U
                Categories=Game;ArcadeGame;
                [Desktop Action New]
                Exec=other
                """))
        #expect(e.categories == ["Game", "ArcadeGame"])
        #expect(e.program == "spacegame")
        #expect(e.decision == .game)
        #expect(
            entry("[Desktop Entry]\nExec=mpv %U\nTryExec=mpv\nCategories=AudioVideo;Player;Video;")?.decision == .player
        )
        #expect(entry("[Desktop Entry]\nExec=x\nCategories=Game;Player;")?.decision == .game)
        #expect(
            entry("[Desktop Entry]\nExec=obs\nCategories=AudioVideo;Recorder;")?.decision == DesktopEntry.Decision.none)
        #expect(entry("[Desktop Entry]\nExec=gnome-terminal\nCategories=System;TerminalEmulator;")?.isTerminal == true)
    }

    @Test("what is not an entry is refused, never a crash")
    func refused() {
        #expect(entry("no group\nExec=x") == nil)
        #expect(entry("[Desktop Entry]\nType=Link\nURL=x") == nil)
        #expect(entry("[Desktop Entry]\nHidden=true\nExec=x") == nil)
        #expect(DesktopEntry.parse([0x5B, 0x00, 0xFF, 0xFE], id: "bin", path: "/bin.desktop") == nil)
        let huge = [UInt8](repeating: 0x41, count: DesktopEntry.maximumBytes + 1)
        #expect(DesktopEntry.parse(huge, id: "huge", path: "/huge.desktop") == nil)
        // Malformed lines are skipped.
        #expect(entry("[Desktop Entry]\n=x\nCategories\nExec=\"/opt/My Game/run\"\nCategories=Game")?.isGame == true)
    }
}

struct ResolverTests {
    struct Entries: DesktopEntries {
        var list: [DesktopEntry]
        func entry(id: String) -> DesktopEntry? { list.first { $0.id == id } }
        func entries(program: String) -> [DesktopEntry] { list.filter { $0.program == program } }
    }

    static let gameEntry = DesktopEntry(
        id: "org.example.SpaceGame", path: "/a/org.example.SpaceGame.desktop", categories: ["Game"], program: "ffplay")
    static let playerEntry = DesktopEntry(
        id: "mpv", path: "/a/mpv.desktop", categories: ["AudioVideo", "Player"], program: "mpv")
    static let terminalEntry = DesktopEntry(
        id: "org.gnome.Terminal", path: "/a/t.desktop", categories: ["System", "TerminalEmulator"],
        program: "gnome-terminal")
    static let pythonEntry = DesktopEntry(
        id: "org.example.Tool", path: "/a/tool.desktop", categories: ["Game"], program: "python3")
    let entries = Entries(list: [Self.gameEntry, Self.playerEntry, Self.terminalEntry, Self.pythonEntry])

    @Test("strongest evidence first; the first entry that decides is the one")
    func order() {
        let p = IdentityResolver.resolve(
            ProcessFacts(
                pid: 5, flatpakID: "org.example.Flat", scopeID: "org.example.SpaceGame", launchedID: "mpv",
                applicationID: "app.id", program: "ffplay"), entries)
        #expect(
            p.names.map(\.source) == [
                AppProfile.Source.flatpak, .launcherScope, .launcherEnvironment, .applicationID, .process,
            ])
        #expect(p.id?.name == "org.example.Flat")
        #expect(p.entry?.id == "org.example.SpaceGame" && p.entry?.foundThrough == .launcherScope)
    }

    @Test("a terminal's scope or environment decides nothing for what runs in it")
    func terminal() {
        let p = IdentityResolver.resolve(ProcessFacts(pid: 5, scopeID: "org.gnome.Terminal", program: "pacat"), entries)
        #expect(p.names.map(\.name) == ["pacat"])
        #expect(p.entry == nil)
    }

    @Test("the program matches an entry, unless it is an interpreter or two entries disagree")
    func program() {
        let p = IdentityResolver.resolve(ProcessFacts(pid: 5, program: "ffplay"), entries)
        #expect(p.entry?.id == "org.example.SpaceGame" && p.entry?.foundThrough == .desktopEntryMatch)
        #expect(IdentityResolver.resolve(ProcessFacts(pid: 5, program: "python3"), entries).entry == nil)
        var two = entries
        two.list.append(
            DesktopEntry(id: "org.example.Viewer", path: "/a/v.desktop", categories: ["Player"], program: "ffplay"))
        #expect(IdentityResolver.resolve(ProcessFacts(pid: 5, program: "ffplay"), two).entry == nil)
        // The program's entry is kept even where application.id already gave the same name (the platform call
        // trusts the program, not application.id).
        let same = IdentityResolver.resolve(
            ProcessFacts(pid: 5, applicationID: "org.example.SpaceGame", program: "ffplay"), entries)
        #expect(same.names.map(\.source) == [.applicationID, .process])
        #expect(same.programEntry == "org.example.SpaceGame")
        #expect(IdentityResolver.resolve(ProcessFacts(pid: 5, program: "python3"), entries).programEntry == nil)
    }
}
