import Testing

@testable import AudioPolicy

/// `SessionView.changes(from:)` compares field by field; what it reports must be exactly the properties whose value
/// differs, in docs/API.md order — the same as comparing the two views' property lists.
@Suite struct SessionViewChangesTests {
    static func view() -> SessionView? {
        var engine = Engine()
        let fx = engine.handle(
            .createSession(RequestID(1), NewSession(pid: 4242, applicationName: "podcasts")), at: .zero)
        guard case .sessionAdded(let v)? = fx.first else { return nil }
        return v
    }

    /// Each property's value changed alone (`Mixable` follows the configuration: it changes with the options, and an
    /// options change that leaves it alone is the last edit), then all at once.
    static let edits: [(String, @Sendable (inout SessionView) -> Void)] = [
        ("category", { $0.configuration = Configuration(category: .playback, mode: .default, options: []) }),
        (
            "mode",
            { $0.configuration = Configuration(category: $0.configuration.category, mode: .spokenAudio, options: []) }
        ),
        (
            "options",
            {
                $0.configuration = Configuration(
                    category: $0.configuration.category, mode: $0.configuration.mode, options: [.mixWithOthers])
            }
        ),
        ("active", { $0.active.toggle() }),
        ("interrupted", { $0.interrupted.toggle() }),
        ("hint", { $0.secondaryAudioShouldBeSilencedHint.toggle() }),
        ("other audio", { $0.otherAudioPlaying.toggle() }),
        ("handles secondary", { $0.handlesSecondaryAudio.toggle() }),
        ("name", { $0.applicationName += "-2" }),
        ("pid", { $0.processID += 1 }),
        ("streams", { $0.streams.append(7) }),
        ("record streams", { $0.recordStreams.append(8) }),
        ("no alerts", { $0.prefersNoInterruptionsFromSystemAlerts.toggle() }),
        ("identity", { $0.identity.appID += ".other" }),
        ("output muted", { $0.outputMuted.toggle() }),
    ]

    /// The options change, mixable before and after.
    static func mixableBoth(_ v: inout SessionView, _ options: [CategoryOption]) {
        v.configuration = Configuration(category: .playback, mode: .default, options: options)
    }

    @Test(arguments: 0..<edits.count + 2)
    func reportsExactlyWhatDiffers(_ i: Int) throws {
        var old = try #require(Self.view())
        var new = old
        let name: String
        if i < Self.edits.count {
            name = Self.edits[i].0
            Self.edits[i].1(&new)
        } else if i == Self.edits.count {
            name = "all at once"
            for (_, edit) in Self.edits { edit(&new) }
        } else {
            name = "options, mixable before and after"
            Self.mixableBoth(&old, [.mixWithOthers])
            Self.mixableBoth(&new, [.mixWithOthers, .duckOthers])
        }
        let expected = zip(new.properties, old.properties).filter { $0 != $1 }.map(\.0)
        #expect(!expected.isEmpty, "\(name): the edit changed no property")
        if name == "all at once" { #expect(expected.count == SessionView.propertyCount, "a property no edit changes") }
        if name.hasPrefix("options, mixable") { #expect(expected.count == 1, "\(expected)") }
        #expect(new.changes(from: old) == expected, "\(name)")
        #expect(old.changes(from: old).isEmpty)
        var applied = old
        applied.apply(new.changes(from: old))
        #expect(applied == new, "\(name): a reader applying the changes holds the new view")
    }
}
