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
        var withStreams = values
        withStreams.serverCookie = 4_000_000_000
        withStreams.streams = [
            .playback(12): .init(key: "sink-input-by-media-role:game", muted: false, volume: [32768, 32768]),
            .record(3): .init(key: "source-output-by-application-name:Rec order", muted: true, volume: [65536]),
        ]
        try withStreams.write(to: path)
        #expect(try KeyUserValues.load(from: path) == withStreams)
        try Data("audiod-user-values 1\na 1 -\n".utf8).write(to: URL(fileURLWithPath: path))
        #expect(try KeyUserValues.load(from: path) == KeyUserValues(muted: ["a": true]), "an older file is read")
    }

    /// Seed 776710 on PipeWire 1.4: the user set a game stream to 50 % while audiod was down. The server saved it
    /// into the role's entry; a duck leaked on the role's next stream goes back to 50 %, not to a sibling's 100 %.
    @Test func aChangeMadeWhileAudiodWasDownIsTheKeysLastUserValue() throws {
        let key = "sink-input-by-media-role:game"
        let (changed, same, ducked) = (StreamID.playback(12), StreamID.playback(13), StreamID.playback(14))
        let before = KeyUserValues(
            volume: [key: [65536, 65536]], serverCookie: 77,
            streams: [
                changed: .init(key: key, muted: false, volume: [65536, 65536]),
                same: .init(key: key, muted: false, volume: [65536, 65536]),
                ducked: .init(key: key, muted: false, volume: [65536, 65536]),
            ])
        let leak = Journal.Leak(unmute: false, appliedVolume: [38326, 38326], restoreVolume: [65536, 65536])
        func started(cookie: UInt32, changedShows volume: [UInt32], muted: Bool = false) -> (
            RestoreLedger, PolicyValues?
        ) {
            var l = RestoreLedger(
                volumeTolerance: 64, leakWindowNanoseconds: 2_000_000_000, restoreSettleNanoseconds: 2_000_000_000)
            l.savesLate = true
            l.userValues = before
            l.connected(serverCookie: cookie)
            // The journal says a duck leaked into the role's entry before audiod went down; it stays a leak.
            l.recorded(leak, for: key)
            for id in [changed, same, ducked] { l.keyed(id, key) }
            l.foundAtConnection(changed, muted: muted, volume: volume, left: nil)
            l.foundAtConnection(same, muted: false, volume: [65536, 65536], left: nil)
            // Still at the duck the journal says audiod left: audiod's, not a change.
            l.foundAtConnection(
                ducked, muted: false, volume: [38326, 38326],
                left: PolicyValues(mute: false, volume: Volume(channels: [38326, 38326])))
            let next = StreamID.playback(20)
            l.keyed(next, key)
            return (
                l, l.shown(next, first: true, preexisting: false, muted: false, volume: [38326, 38326], now: 0).values
            )
        }
        let (learned, put) = started(cookie: 77, changedShows: [32768, 32768])
        #expect(learned.userValues.volume[key] == [32768, 32768])
        #expect(put?.userVolume == Volume(channels: [32768, 32768]))
        let (unchanged, _) = started(cookie: 77, changedShows: [65536, 65536])
        #expect(unchanged.userValues.volume[key] == [65536, 65536], "nothing changed while audiod was down")
        let (otherRun, _) = started(cookie: 78, changedShows: [32768, 32768])
        #expect(otherRun.userValues.volume[key] == [65536, 65536], "another server run's stream 12 is another stream")
        let (muted, _) = started(cookie: 77, changedShows: [65536, 65536], muted: true)
        #expect(muted.userValues.muted[key] == true, "a mute set while audiod was down is the key's")

        // The user muted a stream audiod had ducked: the mute is the user's, the volume under the duck the key's.
        var l = RestoreLedger(
            volumeTolerance: 64, leakWindowNanoseconds: 2_000_000_000, restoreSettleNanoseconds: 2_000_000_000)
        l.savesLate = true
        l.userValues = before
        l.connected(serverCookie: 77)
        l.keyed(ducked, key)
        l.foundAtConnection(
            ducked, muted: true, volume: [38326, 38326],
            left: PolicyValues(
                mute: false, volume: Volume(channels: [38326, 38326]), userVolume: Volume(channels: [52429, 52429])))
        #expect(l.userValues.muted[key] == true)
        #expect(l.userValues.volume[key] == [52429, 52429])
    }

    @Test func aDamagedFileIsAnErrorThatNamesTheLine() throws {
        let path = KeyUserValues.path(besideJournal: Self.tempPath())
        try KeyUserValues(muted: ["a": true]).write(to: path)
        for bad in [
            "audiod-user-values 3\n", "audiod-user-values 1\na 2 -\n", "audiod-user-values 1\na - 1,x\n",
            "audiod-user-values 2\nstream 7 x 1 a 0 65536\n", "audiod-user-values 2\nstream 7 p 1 a 0 -\n",
            "audiod-user-values 2\nstream 7 p 1 a 0 1\nstream 8 p 2 a 0 1\n",
        ] {
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
