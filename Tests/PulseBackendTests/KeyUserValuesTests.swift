import AudioPolicy
import FoundationEssentials
import Glibc
import Testing

@testable import PulseBackend

/// The keys' last user values outlive audiod: the file, and what a ledger started from it puts back.
struct KeyUserValuesTests {
    static func tempPath() -> String {
        var template = Array("/tmp/audiod-user-values-XXXXXX".utf8CString)
        let dir = template.withUnsafeMutableBufferPointer { buf in buf.baseAddress.flatMap { mkdtemp($0) } }
        let base = dir.map { String(cString: $0) } ?? "/tmp"
        return base + "/audiod/journal"
    }

    @Test func theFileGivesBackWhatWasWrittenAndSitsBesideTheJournal() throws {
        let journal = Self.tempPath()
        let path = KeyUserValues.path(besideJournal: journal)
        #expect(path.hasSuffix("/audiod/user-values"))
        #expect(try KeyUserValues.load(from: path) == KeyUserValues(), "no file: nothing known")
        let values = KeyUserValues(
            muted: ["sink-input-by-media-role:phone": true, "sink-input-by-application-name:My Game": false],
            volume: ["sink-input-by-media-role:phone": [52429, 52429], "-": [65536]])
        try values.write(to: path)
        #expect(try KeyUserValues.load(from: path) == values)
    }

    @Test func aDamagedFileIsAnErrorThatNamesTheLine() throws {
        let path = KeyUserValues.path(besideJournal: Self.tempPath())
        try KeyUserValues(muted: ["a": true]).write(to: path)
        for bad in ["audiod-user-values 2\n", "audiod-user-values 1\na 2 -\n", "audiod-user-values 1\na - 1,x\n"] {
            try Data(bad.utf8).write(to: URL(fileURLWithPath: path))
            #expect(throws: JournalError.self) { try KeyUserValues.load(from: path) }
        }
    }

    @Test func anAudiodStartedAgainPutsALeakedDuckBackToTheKeysLastUserVolume() {
        // Seed 139779: the user set a phone stream to 80 %; audiod ducked it and a sibling at 100 %, was killed and
        // started again. The key's next stream starts with the sibling's duck: it goes back to 80 %, the key's.
        let key = "sink-input-by-media-role:phone"
        func ledger() -> RestoreLedger {
            var l = RestoreLedger(
                volumeTolerance: 64, leakWindowNanoseconds: 2_000_000_000, restoreSettleNanoseconds: 2_000_000_000)
            l.savesLate = true
            return l
        }
        var first = ledger()
        let user = StreamID.playback(1)
        first.keyed(user, key)
        let before = first.userValuesRevision
        _ = first.changed(user, byAudiod: false, userVolume: [52429, 52429], shownMuted: false)
        #expect(first.userValuesRevision != before, "the file would not be written")
        #expect(first.userValues.volume[key] == [52429, 52429])
        let leak = Journal.Leak(unmute: false, appliedVolume: [38326, 38326], restoreVolume: [65536, 65536])
        func next(knowing values: KeyUserValues) -> PolicyValues? {
            var l = ledger()
            l.userValues = values
            l.recorded(leak, for: key)
            let id = StreamID.playback(9)
            l.keyed(id, key)
            return l.shown(id, first: true, preexisting: false, muted: false, volume: [38326, 38326], now: 0).values
        }
        #expect(next(knowing: first.userValues)?.userVolume == Volume(channels: [52429, 52429]))
        #expect(next(knowing: KeyUserValues())?.userVolume == Volume(channels: [65536, 65536]))
        // A stop's blind repair writes the key's values too.
        var stopping = ledger()
        stopping.userValues = first.userValues
        stopping.recorded(leak, for: key)
        #expect(stopping.blindRepairs.map(\.volume) == [[52429, 52429]])
    }
}
