import AudioVocabulary
import Testing

@testable import AudioPolicy

@Suite struct VocabularyTests {
    @Test func textFromAppsIsShownWithItsControlCharactersEscaped() {
        #expect("mpv".escapingControls == "mpv")
        #expect("Café — ünïcödé \\ ok".escapingControls == "Café — ünïcödé \\ ok", "only controls change")
        #expect("\u{1b}[31mred\u{1b}[0m".escapingControls == "\\x1b[31mred\\x1b[0m")
        #expect("game\nsession 9 begins: fake".escapingControls == "game\\nsession 9 begins: fake")
        #expect("a\tb\rc\u{0}d\u{7f}".escapingControls == "a\\tb\\rc\\x00d\\x7f")
        #expect("csi\u{9b}31m".escapingControls == "csi\\u{9b}31m", "a C1 control some terminals obey")
        #expect("abc\u{202e}fed".escapingControls == "abc\\u{202e}fed", "a bidi override reorders what a line shows")
        #expect("a\u{2028}b\u{2066}c".escapingControls == "a\\u{2028}b\\u{2066}c")
        #expect(
            !"\u{1b}\n\u{9b}x".escapingControls.unicodeScalars.contains {
                $0.value < 0x20 || (0x7f...0x9f).contains($0.value)
            })
    }

    @Test func validationOrderIsCategoryModeOptions() {
        #expect(
            Configuration.parse(category: "loud", mode: "nope", options: ["x"]) == .failure(.invalidCategory("loud")))
        #expect(
            Configuration.parse(category: "loud", mode: "default", options: []).failureMessage
                == "category 'loud' is not one of ambient, solo-ambient, playback, record, play-and-record")
        #expect(Configuration.parse(category: "ambient", mode: "nope", options: ["x"]).failureName == "InvalidMode")
        #expect(
            Configuration.parse(category: "ambient", mode: "voice-chat", options: ["x"]).failureName
                == "IncompatibleMode")
        #expect(
            Configuration.parse(
                category: "playback", mode: "default", options: ["mix-with-others", "x", "duck-others"]
            )
            .failureName == "InvalidOption")
        #expect(
            Configuration.parse(category: "solo-ambient", mode: "default", options: ["duck-others"]).failureMessage
                == "option 'duck-others' is not accepted by category 'solo-ambient', which accepts no options")
        // An activation option given to SetCategory counts as unknown.
        #expect(
            Configuration.parse(category: "playback", mode: "default", options: ["notify-others-on-deactivation"])
                .failureName == "InvalidOption")
    }

    @Test func everyModeAndOptionMatchesTheTable() {
        let accepted: [Category: Set<String>] = [
            .ambient: ["default"], .soloAmbient: ["default"],
            .playback: [
                "default", "movie-playback", "spoken-audio", "voice-prompt", "measurement", "short-form-video",
            ],
            .record: ["default", "video-recording", "measurement"],
            .playAndRecord: [
                "default", "voice-chat", "video-chat", "game-chat", "video-recording", "measurement", "voice-prompt",
            ],
        ]
        for c in Category.allCases {
            for m in Mode.allCases {
                let r = Configuration.parse(category: c.rawValue, mode: m.rawValue, options: [])
                let ok = accepted[c]?.contains(m.rawValue) == true
                #expect((r.failureName == nil) == ok, "\(c) \(m)")
            }
        }
        #expect(
            Configuration.parse(
                category: "ambient", mode: "default", options: ["interrupt-spoken-audio-and-mix-with-others"]
            ).failureName == "IncompatibleOption")
        #expect(
            Configuration.parse(category: "record", mode: "default", options: ["mix-with-others"]).failureName
                == "IncompatibleOption")
        #expect(
            Configuration.parse(category: "play-and-record", mode: "voice-chat", options: ["duck-others"]).failureName
                == nil)
    }

    @Test func impliedOptionsAreListedAndAcceptedBack() throws {
        let ducking = try Configuration.parse(category: "playback", mode: "default", options: ["duck-others"]).get()
        #expect(ducking.options == [.mixWithOthers, .duckOthers])
        #expect(ducking.isMixable)
        let back = try Configuration.parse(
            category: "playback", mode: "default", options: ducking.options.map(\.rawValue)
        ).get()
        #expect(back == ducking)
        let ambient = try Configuration.parse(category: "ambient", mode: "default", options: []).get()
        #expect(ambient.options == [.mixWithOthers] && ambient.isMixable)
        #expect(!Configuration(category: .playAndRecord, mode: .voiceChat, options: [.mixWithOthers]).isCall)
        #expect(Configuration(category: .playAndRecord, mode: .videoChat).isCall)
    }

    @Test func activationOptions() {
        #expect(
            parseActivationOptions(["notify-others-on-deactivation"], active: false)
                == .success([.notifyOthersOnDeactivation]))
        #expect(
            parseActivationOptions(["notify-others-on-deactivation"], active: true).failureName == "IncompatibleOption")
        #expect(parseActivationOptions(["duck-others"], active: false).failureName == "InvalidOption")
    }

    @Test func volumeArithmeticIsLibpulses() {
        // pa_sw_volume_from_linear(0.2) = lround(cbrt(0.2) * 65536) = 38326.
        #expect(Volume.fromLinear(0.2) == 38326)
        #expect(Volume.fromLinear(1.0) == Volume.norm)
        #expect(Volume.fromLinear(0.125) == 32768)
        #expect(Volume.fromLinear(0) == 0)
        #expect(Volume.multiply(Volume.norm, 38326) == 38326)
        #expect(Volume.multiply(32768, 32768) == 16384)
        #expect(Volume.multiply(3, 32768) == 2)  // (3·32768 + 32768) / 65536 = 2: libpulse rounds half up
    }
}

extension Result where Failure == PolicyError {
    var failureName: String? { if case .failure(let e) = self { return e.name } else { return nil } }
    var failureMessage: String? { if case .failure(let e) = self { return e.message } else { return nil } }
}
