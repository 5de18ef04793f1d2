import FoundationEssentials
import Glibc
import Testing

@testable import PulseBackend

/// The record of PipeWire volume factors audiod may have left below 1.0, and the helpers that decide where a native
/// connection goes and whether the server ramps.
struct LoweredFactorsTests {
    @Test func theFileGivesBackItsNodesAndKeysAndGoesWhenEmpty() throws {
        let journal = KeyUserValuesTests.tempPath()
        let path = LoweredFactors.path(besideJournal: journal)
        #expect(path.hasSuffix("/audiod/factors"))
        #expect(try LoweredFactors.load(from: path) == LoweredFactors(), "no file: nothing lowered")
        let nodes: [UInt32: String?] = [
            42: "sink-input-by-media-role:game", 7: nil, 99: "sink-input-by-application-name:a b%c",
        ]
        let factors = LoweredFactors(nodes: nodes, leftKeys: ["sink-input-by-media-role:music"])
        #expect(
            factors.lowKeys == [
                "sink-input-by-media-role:game", "sink-input-by-application-name:a b%c",
                "sink-input-by-media-role:music",
            ])
        try factors.write(to: path)
        #expect(try LoweredFactors.load(from: path) == factors)
        try LoweredFactors(leftKeys: ["sink-input-by-media-role:music"]).write(to: path)
        #expect(access(path, F_OK) == 0, "a key left without its node keeps the file")
        try LoweredFactors().write(to: path)
        #expect(access(path, F_OK) != 0, "an empty record leaves no file")
    }

    @Test func aVersion1FileNamedTheAppWhichIsReadAsTheAppsKey() throws {
        let journal = KeyUserValuesTests.tempPath()
        let path = LoweredFactors.path(besideJournal: journal)
        try FileManager.default.createDirectory(
            atPath: URL(fileURLWithPath: path).deletingLastPathComponent().path, withIntermediateDirectories: true)
        try "audiod-factors 1\n12 My%20Game\n13 -\n".write(toFile: path, atomically: true, encoding: .utf8)
        let read = try LoweredFactors.load(from: path)
        let none: String? = nil
        let expected: [UInt32: String?] = [12: "sink-input-by-application-name:My Game", 13: none]
        #expect(read.nodes == expected)
        #expect(read.leftKeys.isEmpty)
    }

    @Test func aDamagedFileIsAnErrorThatNamesItsLine() throws {
        let journal = KeyUserValuesTests.tempPath()
        let path = LoweredFactors.path(besideJournal: journal)
        for (text, line) in [
            ("audiod-factors 3\n", 1), ("audiod-factors 2\n12 game\nnode game\n", 3), ("audiod-factors 2\n- -\n", 2),
            ("audiod-factors 1\n- game\n", 2),
        ] {
            try FileManager.default.createDirectory(
                atPath: URL(fileURLWithPath: path).deletingLastPathComponent().path, withIntermediateDirectories: true)
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            do {
                _ = try LoweredFactors.load(from: path)
                Issue.record("\(text.debugDescription) was read")
            } catch {
                #expect(error.line == line, "\(error)")
            }
        }
    }

    @Test func theNativeSocketIsFoundBesidePipewirePulsesOwn() {
        #expect(
            PipeWireRamps.remote(besidePulseServer: "unix:/run/user/1000/pulse/native") == "/run/user/1000/pipewire-0")
        #expect(PipeWireRamps.remote(besidePulseServer: "/tmp/x/pulse/native") == "/tmp/x/pipewire-0")
        // Anything else leaves the choice to libpipewire (PIPEWIRE_REMOTE, then $XDG_RUNTIME_DIR).
        #expect(PipeWireRamps.remote(besidePulseServer: nil) == nil)
        #expect(PipeWireRamps.remote(besidePulseServer: "tcp:localhost:4713") == nil)
        #expect(PipeWireRamps.remote(besidePulseServer: "unix:/tmp/other-socket") == nil)
    }

    @Test func rampsFromPipeWire0_3_68() {
        for (version, ramps) in [
            ("0.3.65", false), ("0.3.67", false), ("0.3.68", true), ("1.0.0", true), ("1.4.2", true),
            ("1.5.0-rc1", true), ("", false), ("garbage", false), ("1.4", false),
        ] {
            #expect(PipeWireRamps.ramps(version: version) == ramps, "\(version)")
        }
    }
}
