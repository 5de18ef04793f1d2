import AudioPolicy
import Testing

@testable import Platform

/// An MPRIS player's look-up, scripted without a bus: which answers still count when the name changes owner
/// meanwhile, and which status wins.
@Suite struct PlayerLookupTests {
    static let name = "org.mpris.MediaPlayer2.mpv"

    @Test("an answer asked of the old owner does not count for the new owner's look-up")
    func anOldOwnersAnswerIsDropped() {
        var l = PlayerLookups()
        l.begin(Self.name, owner: ":1.10")
        // The name changes owner while the pid question to :1.10 is out.
        l.vanished(Self.name)
        l.begin(Self.name, owner: ":1.20")
        #expect(!l.isCurrent(Self.name, ":1.10"), "the dead owner's pid would be taken for the newcomer's")
        // The old owner's failure does not end the newcomer's look-up…
        l.failed(Self.name, ":1.10")
        #expect(l.isLookingUp(Self.name))
        // …nor does its Get answer complete it.
        let r1 = l.finish(Self.name, ":1.10", read: .playing)
        #expect(r1 == nil)
        let r2 = l.finish(Self.name, ":1.20", read: .paused)
        #expect(r2 == .paused)
        #expect(!l.isLookingUp(Self.name), "a finished look-up is gone")
    }

    @Test("GetNameOwner's answer counts only for a look-up still waiting for it")
    func aLateOwnerAnswerIsDropped() {
        var l = PlayerLookups()
        l.begin(Self.name, owner: nil)
        // NameOwnerChanged named a new owner before GetNameOwner answered.
        l.vanished(Self.name)
        l.begin(Self.name, owner: ":1.30")
        let r3 = l.ownerAnswered(Self.name, ":1.29")
        #expect(!r3)
        #expect(l.isCurrent(Self.name, ":1.30"))
        // A look-up that waits for it takes it; no owner ends the look-up.
        var m = PlayerLookups()
        m.begin(Self.name, owner: nil)
        let r4 = m.ownerAnswered(Self.name, ":1.40")
        #expect(r4)
        #expect(m.follows(":1.40"), "the owner's signals are followed from the moment it is known")
        var n = PlayerLookups()
        n.begin(Self.name, owner: nil)
        let r5 = n.ownerAnswered(Self.name, nil)
        #expect(!r5)
        #expect(!n.isLookingUp(Self.name))
    }

    @Test("a status the owner signals during the look-up wins over the Get's answer; without either, Stopped")
    func aSignalledStatusWins() {
        var l = PlayerLookups()
        l.begin(Self.name, owner: ":1.50")
        let r6 = l.signalled(":1.50", .playing)
        #expect(r6 == [Self.name])
        let r7 = l.signalled(":1.51", .paused)
        #expect(r7.isEmpty, "another connection's signal is not the player's")
        let r8 = l.finish(Self.name, ":1.50", read: .stopped)
        #expect(r8 == .playing)
        var m = PlayerLookups()
        m.begin(Self.name, owner: ":1.60")
        let r9 = m.finish(Self.name, ":1.60", read: nil)
        #expect(r9 == .stopped)
    }
}
