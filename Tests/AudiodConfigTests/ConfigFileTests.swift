import AudioPolicy
import AudiodConfig
import Foundation
import Testing

@Suite struct ConfigFileTests {
    @Test("a full config becomes settings")
    func full() throws {
        let s = try ConfigFile.parse(
            """
            # audiod.toml
            duck-level = 0.3
            linger = 1.5
            duck-fade = 0.25
            unduck-fade = 0
            fade-in = 2
            fade-out = 0.32
            de-click = 0.005
            volume-tolerance = 200

            [default]
            category = "ambient"

            [roles.music]
            category = "playback"
            options = ["mix-with-others"]

            [apps.mpv]
            category = "playback"

            [apps."org.mozilla.firefox"]
            category = "playback"
            mode = "movie-playback"
            """, file: "t.toml")
        #expect(s.duckLevel == 0.3)
        #expect(s.lingerNanoseconds == 1_500_000_000)
        #expect(s.duckFadeNanoseconds == 250_000_000 && s.unduckFadeNanoseconds == 0)
        #expect(s.fadeInNanoseconds == 2_000_000_000)
        #expect(s.fadeOutNanoseconds == 320_000_000)
        #expect(s.deClickNanoseconds == 5_000_000)
        #expect(s.volumeTolerance == 200)
        #expect(s.defaultConfiguration == Configuration(category: .ambient))
        #expect(s.roleConfigurations["music"] == Configuration(category: .playback, options: [.mixWithOthers]))
        #expect(s.configRules.map(\.application) == ["mpv", "org.mozilla.firefox"])
        #expect(s.configRules.last?.configuration.mode == .moviePlayback)
        #expect(s.configRules.allSatisfy { $0.source == .configFile })
    }

    @Test("[platform] lock-screen turns the lock screen's silencing off (it is on by default)")
    func lockScreenSwitch() throws {
        #expect(Settings().followsLockScreen)
        #expect(try ConfigFile.parse("[platform]\nlock-screen = false", file: "t.toml").followsLockScreen == false)
        #expect(try ConfigFile.parse("[platform]\nlock-screen = true", file: "t.toml").followsLockScreen)
    }

    @Test("[platform] trusted-apps lists sandboxed apps trusted to own a platform name; none by default")
    func trustedApps() throws {
        #expect(Settings().trustedPlatformApps.isEmpty)
        let s = try ConfigFile.parse(
            "[platform]\ntrusted-apps = [\"org.example.Calls\", \"com.example.my-dialer_2\"]", file: "t.toml")
        #expect(s.trustedPlatformApps == ["org.example.Calls", "com.example.my-dialer_2"])
    }

    @Test("strong-duck-level sets the voice prompts' duck; -35 dB by default, at most duck-level")
    func strongDuckLevel() throws {
        #expect(try ConfigFile.parse("", file: "t.toml").strongDuckLevel == Settings.defaultStrongDuckLevel)
        #expect(try ConfigFile.parse("strong-duck-level = 0.05", file: "t.toml").strongDuckLevel == 0.05)
        let equal = try ConfigFile.parse("duck-level = 0.1\nstrong-duck-level = 0.1", file: "t.toml")
        #expect(equal.duckLevel == 0.1 && equal.strongDuckLevel == 0.1)
        // A deep duck-level from before there were two levels still reads: the strong one follows it down.
        let deep = try ConfigFile.parse("duck-level = 0.01", file: "t.toml")
        #expect(deep.duckLevel == 0.01 && deep.strongDuckLevel == 0.01)
    }

    @Test("nice-level sets the loop thread's nice level; -11 by default, 0 leaves it as started")
    func niceLevel() throws {
        #expect(Settings().niceLevel == -11)
        #expect(try ConfigFile.parse("nice-level = -4", file: "t.toml").niceLevel == -4)
        #expect(try ConfigFile.parse("nice-level = 0", file: "t.toml").niceLevel == 0)
        #expect(try ConfigFile.parse("nice-level = 19", file: "t.toml").niceLevel == 19)
        #expect(try ConfigFile.parse("nice-level = -20", file: "t.toml").niceLevel == -20)
    }

    @Test("an empty file is the built-in settings")
    func empty() throws {
        #expect(try ConfigFile.parse("", file: "t.toml") == Settings())
    }

    @Test(
        "errors name the file, the line and the key, and say what is accepted",
        arguments: [
            ("duck-level = 2", "t.toml:1: duck-level: must be a number between 0 and 1, exclusive (e.g. 0.2 ≈ -14 dB)"),
            (
                "strong-duck-level = 0",
                "t.toml:1: strong-duck-level: must be a number between 0 and 1, exclusive (e.g. 0.0178 ≈ -35 dB)"
            ),
            (
                "duck-level = 0.1\nstrong-duck-level = 0.3",
                "t.toml:2: strong-duck-level: strong-duck-level (0.3) must be at most duck-level (0.1): a voice prompt ducks at least as deep as anything else"
            ),
            (
                "\nduck_level = 0.2",
                "t.toml:2: duck_level: unknown key; accepted: duck-level, strong-duck-level, duck-fade, unduck-fade, fade-in, fade-out, de-click, linger, volume-tolerance, nice-level, default, roles, apps, platform"
            ),
            (
                "nice-level = -21",
                "t.toml:1: nice-level: must be a whole number from -20 to 19 (the scheduler's nice levels; the default -11 is the sound server's own, 0 leaves audiod as it was started)"
            ),
            (
                "\nnice-level = \"high\"",
                "t.toml:2: nice-level: must be a whole number from -20 to 19 (the scheduler's nice levels; the default -11 is the sound server's own, 0 leaves audiod as it was started)"
            ),
            (
                "nice-level = -5.5",
                "t.toml:1: nice-level: must be a whole number from -20 to 19 (the scheduler's nice levels; the default -11 is the sound server's own, 0 leaves audiod as it was started)"
            ),
            (
                "[platform]\nlock-screen = \"no\"",
                "t.toml:2: platform.lock-screen: must be true (ambient sound stops while the screen is locked) or false"
            ),
            ("[platform]\nsleep = true", "t.toml:2: platform.sleep: unknown key; accepted: lock-screen, trusted-apps"),
            (
                "[platform]\ntrusted-apps = \"org.example.Calls\"",
                "t.toml:2: platform.trusted-apps: must be an array of Flatpak app ids (e.g. [\"org.example.Calls\"]: two or more dot-separated parts of letters, digits, _ and -)"
            ),
            (
                "[platform]\ntrusted-apps = [\"org.example.Calls\", \"calls\"]",
                "t.toml:2: platform.trusted-apps: must be an array of Flatpak app ids (e.g. [\"org.example.Calls\"]: two or more dot-separated parts of letters, digits, _ and -); 'calls' is not one"
            ),
            (
                "[platform]\ntrusted-apps = [\"org..x\"]",
                "t.toml:2: platform.trusted-apps: must be an array of Flatpak app ids (e.g. [\"org.example.Calls\"]: two or more dot-separated parts of letters, digits, _ and -); 'org..x' is not one"
            ),
            (
                "[platform]\ntrusted-apps = [3]",
                "t.toml:2: platform.trusted-apps: must be an array of Flatpak app ids (e.g. [\"org.example.Calls\"]: two or more dot-separated parts of letters, digits, _ and -); a non-string is not one"
            ),
            (
                "[apps.mpv]\ncategory = \"loud\"",
                "t.toml:2: apps.mpv.category: category 'loud' is not one of ambient, solo-ambient, playback, record, play-and-record"
            ),
            (
                "[roles.game]\ncategory = \"ambient\"\nvolume = 3",
                "t.toml:3: roles.game.volume: unknown key; accepted: category, mode, options"
            ),
            (
                "[default]\nmode = \"default\"",
                "t.toml:1: default.category: is required and must be a string: one of ambient, solo-ambient, playback, record, play-and-record"
            ),
            ("linger = \"long\"", "t.toml:1: linger: must be a number of seconds from 0 to 3600 (e.g. 2)"),
            ("duck-fade = 6", "t.toml:1: duck-fade: must be a number of seconds from 0 to 5, 0 for a step (e.g. 0.5)"),
            // A de-click of a tenth of a second would be heard beside the new sound: not a de-click.
            (
                "de-click = 0.1",
                "t.toml:1: de-click: must be a number of seconds from 0 to 0.05, 0 for a step (e.g. 0.008)"
            ),
            (
                "de-click = -1",
                "t.toml:1: de-click: must be a number of seconds from 0 to 0.05, 0 for a step (e.g. 0.008)"
            ),
            (
                "unduck-fade = -1",
                "t.toml:1: unduck-fade: must be a number of seconds from 0 to 5, 0 for a step (e.g. 0.5)"
            ),
            (
                "volume-tolerance = 0.5",
                "t.toml:1: volume-tolerance: must be a whole number of volume steps from 0 to 6553 (65536 is 100 %; the default 64 is about 0.1 %)"
            ),
            (
                "\nvolume-tolerance = 10000",
                "t.toml:2: volume-tolerance: must be a whole number of volume steps from 0 to 6553 (65536 is 100 %; the default 64 is about 0.1 %)"
            ),
        ])
    func errors(text: String, expected: String) {
        #expect(throws: (any Error).self) { try ConfigFile.parse(text, file: "t.toml") }
        do {
            _ = try ConfigFile.parse(text, file: "t.toml")
        } catch {
            #expect(error.description == expected)
        }
    }

    @Test("a TOML syntax error says where")
    func syntax() {
        do {
            _ = try ConfigFile.parse("duck-level = 0.2\n[apps\n", file: "bad.toml")
            Issue.record("accepted broken TOML")
        } catch {
            #expect(error.line == 2, "\(error)")
            #expect(error.description.hasPrefix("bad.toml:2: not valid TOML"))
        }
    }

    @Test("the search path follows XDG")
    func searchPath() {
        #expect(
            ConfigFile.searchPath(environment: ["XDG_CONFIG_HOME": "/c", "XDG_CONFIG_DIRS": "/a:/b"])
                == ["/c/audiod/audiod.toml", "/a/audiod/audiod.toml", "/b/audiod/audiod.toml"])
        #expect(
            ConfigFile.searchPath(environment: ["HOME": "/h"]) == [
                "/h/.config/audiod/audiod.toml", "/etc/xdg/audiod/audiod.toml",
            ])
    }
}

@Suite struct ExampleConfigTests {
    @Test("the example config the install step ships parses")
    func example() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let s = try ConfigFile.load(path: root.appendingPathComponent("examples/audiod.toml").path)
        #expect(s.duckLevel == 0.2)
        #expect(s.configRules.map(\.application) == ["mpv", "org.example.SoundBoard"])
        #expect(s.roleConfigurations["game"]?.category == .ambient)
    }
}
