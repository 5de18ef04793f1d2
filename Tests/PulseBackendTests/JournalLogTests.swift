import Foundation
import Testing

@testable import PulseBackend

/// The journal as an appended log: every state written must read back as itself, however it got there.
struct JournalLogTests {
    func path() -> String {
        let dir = NSTemporaryDirectory() + "journal-test-\(getpid())-\(UInt64.random(in: 0...UInt64.max))"
        return dir + "/audiod/journal"
    }

    func entry(
        _ i: UInt32, name: String = "player", key: String? = "sink-input-by-media-role:music", mute: Bool = true,
        volume: [UInt32]? = nil
    ) -> Journal.Entry {
        Journal.Entry(
            record: i % 5 == 0, index: i, applicationName: name, restoreKey: key, unmute: mute,
            appliedVolume: volume, restoreVolume: volume.map { $0.map { $0 * 2 } })
    }

    @Test func everyStateReadsBackAsItself() throws {
        let p = path()
        let log = JournalLog(path: p)
        var j = Journal(serverCookie: 42)
        var lines = 0
        for step in 0..<500 {
            // Streams come, change and go; leaks are set and cleared.
            let i = UInt32(step % 37)
            if let at = j.entries.firstIndex(where: { $0.index == i }) {
                if step % 3 == 0 {
                    j.entries.remove(at: at)
                } else {
                    j.entries[at].appliedVolume = [UInt32(step), 1]
                    // A write of another volume in flight: the line names the earlier one too.
                    j.entries[at].earlierAppliedVolume = step % 4 == 1 ? [UInt32(step + 7), 1] : nil
                    // Two in flight: the one before both too (also alone, the earlier field then empty).
                    j.entries[at].olderAppliedVolume = step % 8 == 1 || step % 8 == 3 ? [UInt32(step + 9), 1] : nil
                }
            } else {
                j.entries.append(entry(i, volume: step % 2 == 0 ? [13_107, 13_107] : nil))
            }
            if step % 7 == 0 {
                j.leaks["key \(step % 4)"] = Journal.Leak(
                    unmute: true, appliedVolume: nil, restoreVolume: nil,
                    existedBefore: step % 2 == 0 ? UInt32(step) : nil)
            }
            if step % 13 == 0 {
                // A key ducked at several levels names the others too, with or without the index field.
                j.leaks["duck \(step % 3)"] = Journal.Leak(
                    unmute: false, appliedVolume: [13_107, 13_107], restoreVolume: [65_536, 65_536],
                    userMuted: step % 2 == 0, existedBefore: step % 4 == 0 ? UInt32(step) : nil,
                    otherVolumes: step % 3 == 0 ? [] : [[30_419, 30_419], [38_326, 38_326]].suffix(step % 3))
            }
            if step % 11 == 0 { j.leaks["key \(step % 4)"] = nil }
            // What a server that saves late may not have saved yet comes and goes with the steps.
            if step % 5 == 0 {
                j.unsaved["late key \(step % 3)"] = Journal.Unsaved(
                    leak: Journal.Leak(
                        unmute: step % 2 == 0, appliedVolume: step % 3 == 0 ? [13_107] : nil,
                        restoreVolume: step % 3 == 0 ? [65_536] : nil, userMuted: step % 4 == 0 ? true : nil,
                        otherVolumes: step % 3 == 0 && step % 2 == 0 ? [[30_419]] : []),
                    at: 1_700_000_000 + UInt64(step))
            }
            if step % 9 == 0 { j.unsaved["late key \(step % 3)"] = nil }
            j.entries.sort { $0.index < $1.index }
            try log.write(j)
            let read = try #require(try Journal.load(from: p))
            #expect(Set(read.entries.map(\.index)) == Set(j.entries.map(\.index)), "step \(step)")
            #expect(read.entries.sorted { $0.index < $1.index } == j.entries, "step \(step)")
            #expect(read.leaks == j.leaks && read.serverCookie == 42, "step \(step)")
            #expect(read.unsaved == j.unsaved, "step \(step)")
            lines = (try String(contentsOfFile: p, encoding: .utf8)).split(separator: "\n").count
        }
        // Rewritten whenever the lines outnumber what they describe: the file never grows with the steps.
        #expect(
            lines <= 2 * (j.entries.count + j.leaks.count + j.unsaved.count) + 34,
            "\(lines) lines for \(j.entries.count) entries")
    }

    @Test func namesAndKeysOfAnyTextSurvive() throws {
        let p = path()
        let odd = ["two words", "100% sure", "line\nbreak", "-", "", "tab\there", "Ünïcødé ♪", "%41"]
        var j = Journal(serverCookie: 7)
        for (n, name) in odd.enumerated() {
            j.entries.append(entry(UInt32(n + 1), name: name, key: name.isEmpty ? nil : name))
            j.leaks[name] = Journal.Leak(unmute: false, appliedVolume: [1, 2], restoreVolume: [3, 4])
        }
        let log = JournalLog(path: p)
        try log.write(Journal(serverCookie: 7, entries: [entry(99)]))
        try log.write(j)  // appended after the first write, not rewritten
        let read = try #require(try Journal.load(from: p))
        #expect(read.entries.filter { $0.index != 99 }.map(\.applicationName) == odd)
        #expect(read.leaks == j.leaks)
    }

    @Test func anEmptyJournalRemovesTheFileAndANewCookieStartsAfresh() throws {
        let p = path()
        let log = JournalLog(path: p)
        try log.write(Journal(serverCookie: 1, entries: [entry(1)]))
        #expect(FileManager.default.fileExists(atPath: p))
        try log.write(Journal(serverCookie: 1))
        #expect(!FileManager.default.fileExists(atPath: p))
        try log.write(Journal(serverCookie: 1, entries: [entry(2)]))
        try log.write(Journal(serverCookie: 2, entries: [entry(3)]))
        let read = try #require(try Journal.load(from: p))
        #expect(read.serverCookie == 2 && read.entries.map(\.index) == [3])
    }

    /// A step that leaves audiod holding nothing keeps the file (no create, rename and unlink on the path of every
    /// call's mute and unmute); stopping, which writes the whole journal, removes it.
    @Test func aStepThatEmptiesTheJournalKeepsTheFileAndStoppingRemovesIt() throws {
        let p = path()
        let log = JournalLog(path: p)
        for round in 0..<40 {
            let i = UInt32(round + 1)
            let e = entry(i)
            try log.update(cookie: 9, streams: [(record: e.record, index: i, entry: e)])
            #expect(try Journal.load(from: p)?.entries == [e], "round \(round)")
            try log.update(cookie: 9, streams: [(record: e.record, index: i, entry: nil)])
            let read = try #require(try Journal.load(from: p), "the file went at round \(round)")
            #expect(read.entries.isEmpty && read.leaks.isEmpty && read.isEmpty)
        }
        // Compacted as any journal is: 40 rounds did not leave 80 lines.
        #expect((try String(contentsOfFile: p, encoding: .utf8)).split(separator: "\n").count <= 34)
        try log.update(
            cookie: 9, leak: "sink-input-by-media-role:game",
            Journal.Leak(unmute: true, appliedVolume: nil, restoreVolume: nil))
        #expect(try Journal.load(from: p)?.leaks.keys.sorted() == ["sink-input-by-media-role:game"])
        try log.update(cookie: 9, leak: "sink-input-by-media-role:game", nil)
        try log.write(Journal(serverCookie: 9))
        #expect(!FileManager.default.fileExists(atPath: p))
    }

    @Test func aJournalOfTheEarlierJSONFormatIsStillRead() throws {
        let p = path()
        try FileManager.default.createDirectory(
            atPath: (p as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        let old = Journal(
            serverCookie: 9, entries: [entry(4)],
            leaks: ["k": Journal.Leak(unmute: true, appliedVolume: nil, restoreVolume: nil)])
        try JSONEncoder().encode(old).write(to: URL(fileURLWithPath: p))
        #expect(try Journal.load(from: p) == old)
    }

    @Test func aDamagedLineIsAnErrorThatSaysWhere() throws {
        let p = path()
        try FileManager.default.createDirectory(
            atPath: (p as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try "audiod-journal 1 5\n+ p 3 1 - - - player\n? what\n".write(toFile: p, atomically: true, encoding: .utf8)
        #expect { try Journal.load(from: p) } throws: { "\($0)".contains("line 3") }
    }

    @Test("a damaged journal names its line and what is wrong, and never quotes the file's bytes")
    func damagedJournalIsDescribed() throws {
        let p = path()
        try FileManager.default.createDirectory(
            atPath: (p as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        var bytes = Array("audiod-journal 1 7\n+ p 3 1 - - sink-input-by-media-role:music mpv\n".utf8)
        bytes += [0x2B, 0x20, 0x70, 0x20, 0xFF, 0x00, 0x1B, 0x5B, 0x33, 0x31, 0x6D, 0x0A]  // "+ p \xff\0 ESC[31m"
        try Data(bytes).write(to: URL(fileURLWithPath: p))
        do {
            _ = try Journal.load(from: p)
            Issue.record("a damaged journal was read")
        } catch {
            #expect(error.line == 3)
            #expect(error.description == "line 3 is not a journal line")
            #expect(error.description.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F })
        }
        // A field that breaks inside (a broken escape) is described without its text.
        try Data(Array("audiod-journal 1 7\nL secret%Z 1 - -\n".utf8)).write(to: URL(fileURLWithPath: p))
        do {
            _ = try Journal.load(from: p)
            Issue.record("a broken escape was read")
        } catch {
            #expect(error.line == 2)
            #expect(!error.description.contains("secret"), "\(error)")
        }
        // Journals written before the user-mute field still read.
        try Data(Array("audiod-journal 1 7\nL sink-input-by-media-role:music 0 100,100 200,200\n".utf8)).write(
            to: URL(fileURLWithPath: p))
        let old = try #require(try Journal.load(from: p))
        #expect(
            old.leaks["sink-input-by-media-role:music"]
                == Journal.Leak(unmute: false, appliedVolume: [100, 100], restoreVolume: [200, 200]))
        // A seventh field, the highest index seen, needs the sixth: "-" when the user's mute is not known.
        try Data(Array("audiod-journal 1 7\nL k 1 - - - 41\nL d 0 1,1 2,2 1 9\n".utf8)).write(
            to: URL(fileURLWithPath: p))
        let newer = try #require(try Journal.load(from: p))
        #expect(
            newer.leaks["k"] == Journal.Leak(unmute: true, appliedVolume: nil, restoreVolume: nil, existedBefore: 41))
        #expect(
            newer.leaks["d"]
                == Journal.Leak(
                    unmute: false, appliedVolume: [1, 1], restoreVolume: [2, 2], userMuted: true, existedBefore: 9))
        // An eighth field, the other policy volumes of a key ducked at several levels, needs the seventh ("-" when
        // not known); a `U` line takes them as its eighth.
        try Data(Array("audiod-journal 1 7\nL d 0 1,1 2,2 - - 3,3;4,4\nU u 0 1 2 - 99 3\n".utf8)).write(
            to: URL(fileURLWithPath: p))
        let several = try #require(try Journal.load(from: p))
        #expect(
            several.leaks["d"]
                == Journal.Leak(
                    unmute: false, appliedVolume: [1, 1], restoreVolume: [2, 2], otherVolumes: [[3, 3], [4, 4]]))
        #expect(several.unsaved["u"]?.leak.otherVolumes == [[3]])
        for bad in [
            "L k 1 - - x", "L k 1 - - - -", "L k 1 - - 1 2 3", "L k 1 - - - -5", "L d 0 1,1 2,2 - - 3",
            "L d 0 1,1 2,2 - - 3,3;", "L d 0 1,1 2,2 - 4 3,3 5", "U u 0 1 2 - 99 3,3", "U u 0 1 - - 99 3",
        ] {
            try Data(Array("audiod-journal 1 7\n\(bad)\n".utf8)).write(to: URL(fileURLWithPath: p))
            #expect(throws: JournalError.self, "\(bad)") { try Journal.load(from: p) }
        }
    }
}
