import AppIdentity
import AudioPolicy
import Testing

/// The identity cache's rules, scripted: a made-up process table counts what would have been read from /proc.
@Suite struct StreamIdentifierTests {
    /// A process table where pid `n` started at `starts[n]`; every read is counted.
    final class Table {
        var starts: [UInt32: UInt64] = [:]
        var hostReads = 0
        var factReads = 0
        var startReads = 0
        /// The pid the host believes for a stream, by its reported pid (the sandbox scan of PulseAudio 16 may find
        /// another).
        var believed: [UInt32: UInt32] = [:]

        var processes: StreamIdentifier.Processes {
            StreamIdentifier.Processes(
                host: { props in
                    self.hostReads += 1
                    let reported = props["application.process.id"].flatMap { UInt32($0) }
                    return StreamIdentity.Host(pid: reported.map { self.believed[$0] ?? $0 })
                },
                chainAndStart: { pid in ([pid, 1], self.starts[pid]) },
                startTime: { pid in
                    self.startReads += 1
                    return self.starts[pid]
                },
                facts: { pid, chain, appID, flatpak in
                    self.factReads += 1
                    return (
                        ProcessFacts(
                            pid: pid, chain: chain, flatpakID: flatpak, applicationID: appID, program: "game-\(pid)"),
                        []
                    )
                })
        }
    }

    static func props(pid: UInt32) -> [String: String] {
        ["application.process.id": "\(pid)", "application.process.binary": "game"]
    }

    static let ms: UInt64 = 1_000_000

    /// A table where these pids run, started at these times, and an identifier reading it.
    static func identifier(starts: [UInt32: UInt64]) -> (Table, StreamIdentifier) {
        let t = Table()
        t.starts = starts
        return (t, StreamIdentifier(processes: t.processes))
    }

    @Test("a burst of streams from one process reads /proc once")
    func burstReadsOnce() {
        var (t, id) = Self.identifier(starts: [100: 5])
        for i in 0..<20 {
            let found = id.identify(
                Self.props(pid: 100), client: 7, clientVouches: false, now: UInt64(i) * 10 * Self.ms)
            #expect(found.host.pid == 100)
            #expect(found.chain == [100, 1])
        }
        #expect(t.hostReads == 1)
        #expect(t.factReads == 1)
        #expect(t.startReads == 19, "each later stream checks that the process is the same one")
    }

    @Test("a pid given to another process (a different start time) is read again")
    func reusedPidIsReadAgain() {
        var (t, id) = Self.identifier(starts: [100: 5])
        _ = id.identify(Self.props(pid: 100), client: 7, clientVouches: false, now: 0)
        t.starts[100] = 9
        let found = id.identify(Self.props(pid: 100), client: 7, clientVouches: false, now: 10 * Self.ms)
        #expect(t.hostReads == 2)
        #expect(t.factReads == 2)
        #expect(found.app?.names.first?.name == "game-100")
    }

    @Test("a client connection the server vouches for stands for its process without a read; another client does not")
    func vouchingClient() {
        var (t, id) = Self.identifier(starts: [100: 5])
        _ = id.identify(Self.props(pid: 100), client: 7, clientVouches: true, now: 0)
        _ = id.identify(Self.props(pid: 100), client: 7, clientVouches: true, now: Self.ms)
        #expect(t.startReads == 0)
        #expect(t.hostReads == 1)
        // Another connection naming the same pid: the start time decides.
        t.starts[100] = 6
        _ = id.identify(Self.props(pid: 100), client: 8, clientVouches: true, now: 2 * Self.ms)
        #expect(t.startReads == 1)
        #expect(t.hostReads == 2)
    }

    @Test("an answer is kept for a second at most")
    func keptForASecond() {
        var (t, id) = Self.identifier(starts: [100: 5])
        _ = id.identify(Self.props(pid: 100), client: 7, clientVouches: true, now: 0)
        _ = id.identify(Self.props(pid: 100), client: 7, clientVouches: true, now: StreamIdentifier.keepNanoseconds - 1)
        #expect(t.hostReads == 1)
        _ = id.identify(Self.props(pid: 100), client: 7, clientVouches: true, now: StreamIdentifier.keepNanoseconds)
        #expect(t.hostReads == 2)
    }

    @Test("a pid the stream does not name itself (found by scanning sandboxes) is never kept")
    func scannedPidNotKept() {
        let t = Table()
        t.believed[12] = 4000
        t.starts[4000] = 5
        var id = StreamIdentifier(processes: t.processes)
        let first = id.identify(Self.props(pid: 12), client: 7, clientVouches: true, now: 0)
        #expect(first.host.pid == 4000)
        _ = id.identify(Self.props(pid: 12), client: 7, clientVouches: true, now: Self.ms)
        #expect(t.hostReads == 2)
        #expect(id.keptCount == 0)
    }

    @Test("a process that exited is not kept, and its pid still names it")
    func exitedProcess() {
        let t = Table()
        var id = StreamIdentifier(processes: t.processes)
        let found = id.identify(Self.props(pid: 300), client: 7, clientVouches: false, now: 0)
        #expect(found.chain == [300, 1])
        #expect(id.keptCount == 0)
    }

    @Test("at most 64 answers are kept: the expired go first, and if none has expired, all")
    func bounded() {
        let t = Table()
        for pid in UInt32(1000)..<1200 { t.starts[pid] = 1 }
        var id = StreamIdentifier(processes: t.processes)
        for i in 0..<StreamIdentifier.keptAtMost {
            _ = id.identify(Self.props(pid: 1000 + UInt32(i)), client: nil, clientVouches: false, now: 0)
        }
        #expect(id.keptCount == StreamIdentifier.keptAtMost)
        _ = id.identify(Self.props(pid: 1100), client: nil, clientVouches: false, now: Self.ms)
        #expect(id.keptCount == 1, "none had expired: all went, the new one stays")
        for i in 1..<StreamIdentifier.keptAtMost {
            _ = id.identify(
                Self.props(pid: 1100 + UInt32(i)), client: nil, clientVouches: false,
                now: StreamIdentifier.keepNanoseconds / 2)
        }
        #expect(id.keptCount == StreamIdentifier.keptAtMost)
        _ = id.identify(
            Self.props(pid: 1199), client: nil, clientVouches: false,
            now: StreamIdentifier.keepNanoseconds + 2 * Self.ms)
        #expect(
            id.keptCount == StreamIdentifier.keptAtMost, "the first, expired, went; the 63 of half a second ago stay")
    }

    @Test("new desktop entries forget every kept answer")
    func entriesForget() throws {
        var (t, id) = Self.identifier(starts: [100: 5])
        _ = id.identify(Self.props(pid: 100), client: 7, clientVouches: true, now: 0)
        #expect(id.keptCount == 1)
        id.entriesChanged(DesktopEntryIndex(directories: []).snapshot)
        #expect(id.keptCount == 0)
        _ = id.identify(Self.props(pid: 100), client: 7, clientVouches: true, now: Self.ms)
        #expect(t.hostReads == 2)
    }
}
