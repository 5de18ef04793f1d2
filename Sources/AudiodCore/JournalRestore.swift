import AudioPolicy
import Dispatch
import FoundationEssentials
import Glibc
import Logging
import LoopThread
import PulseBackend
import PulseLoop

/// `audiod --restore`: undoes what a previous run's journal records — mutes and volumes on streams that still
/// exist, policy values left in the restore database — without serving on the bus, and exits. The user unit runs
/// it as `ExecStopPost=`, so a crash (or a stop of a failed unit, or an uninstall) is undone even when audiod is
/// not started again.
public enum JournalRestore {
    public struct Outcome: Sendable, Equatable, CustomStringConvertible {
        /// There was a journal to act on.
        public var hadJournal: Bool
        /// The sound server answered in time.
        public var connected: Bool
        public var leaksRepaired: Int
        /// What stays in the journal for the next start (the server was unreachable, or a leak cannot be written).
        public var journalKept: Bool

        public var description: String {
            guard hadJournal else { return "no journal: nothing to restore" }
            guard connected else { return "the sound server did not answer; the journal stays for the next start" }
            return
                "restored from the journal; \(leaksRepaired) restore-database entr\(leaksRepaired == 1 ? "y" : "ies") repaired"
                + (journalKept ? "; what could not be repaired stays in the journal for the next start" : "")
        }
    }

    /// Runs on a loop of its own and returns when done (or after `timeoutNanoseconds` without a server).
    /// `volumeTolerance`: the config file's `volume-tolerance`, so that a volume is judged audiod's as the running
    /// daemon judged it.
    public static func run(
        options: PulseBackend.Options, volumeTolerance: UInt32 = Settings().volumeTolerance,
        timeoutNanoseconds: UInt64 = 5_000_000_000, logger: Logger
    ) throws -> Outcome {
        // A journal, or PipeWire factors a ramp may have left low (a clean stop removes the journal, not them).
        guard let path = options.journalPath,
            FileManager.default.fileExists(atPath: path)
                || FileManager.default.fileExists(atPath: LoweredFactors.path(besideJournal: path))
        else {
            return Outcome(hadJournal: false, connected: false, leaksRepaired: 0, journalKept: false)
        }
        // It decides nothing, so it reads no desktop entries (and does not wait on a slow mount for them).
        var undecided = options
        undecided.readsDesktopEntries = false
        let options = undecided
        let loop = try MainLoop()
        // Made before the loop runs; from then on opened only on it.
        let result = loop.bind(ResultBox(volumeTolerance: volumeTolerance))
        loop.start()
        defer { loop.stop() }
        let done = DispatchSemaphore(value: 0)
        loop.execute {
            let backend = PulseBackend(loop: loop, options: options, volumeTolerance: volumeTolerance, logger: logger)
            result.value.backend = backend
            backend.onEvent = { event in
                switch event {
                case .policy(let e):
                    // The engine puts back what the journal says an earlier run left, by the same effects as in a
                    // running audiod (journaled first); under `restoreOnly` no stream belongs to a session, so it
                    // derives no category and silences nothing itself.
                    let effects = result.value.engine.handle(e, at: Instant(nanoseconds: result.value.clock.next()))
                    backend.updateApplied(all: result.value.engine.appliedChanges)
                    if !effects.isEmpty { result.value.wrote = true }
                    backend.apply(effects)
                case .connected:
                    guard !result.value.finished else { return }
                    // Every stream has been reported by now and its operations sent; the leaks follow, then the
                    // acknowledgements.
                    backend.repairRecordedLeaks { repaired, left in
                        guard !result.value.finished else { return }
                        result.value.outcome = Outcome(
                            hadJournal: true, connected: true, leaksRepaired: repaired, journalKept: left > 0)
                        let end = {
                            guard !result.value.finished else { return }
                            result.value.finished = true
                            backend.stop()
                            done.signal()
                        }
                        // Then the server has time to save what was put back, as at the end of a stop. The server
                        // has everything by then: only the save is waited for, not the overall timeout.
                        backend.flush(ramps: true) {
                            result.value.timer?.cancel()
                            backend.afterServerSaved(wrote: result.value.wrote || repaired > 0, end)
                        }
                    }
                case .disconnected:
                    break
                }
            }
            backend.start()
            result.value.timer = loop.timer(afterNanoseconds: timeoutNanoseconds) {
                guard !result.value.finished else { return }
                result.value.finished = true
                backend.stop()
                done.signal()
            }
        }
        done.wait()
        return loop.sync {
            result.value.timer?.cancel()
            result.value.backend = nil
            return result.value.outcome
        }
    }
}

/// The restore's state, touched only on its loop thread.
private final class ResultBox {
    var backend: PulseBackend?
    var engine: Engine
    var clock = StepClock()
    var timer: LoopTimer?
    var finished = false
    /// Anything was put back on a stream.
    var wrote = false
    var outcome = JournalRestore.Outcome(hadJournal: true, connected: false, leaksRepaired: 0, journalKept: true)

    init(volumeTolerance: UInt32) {
        var settings = Settings.restoreOnly
        settings.volumeTolerance = volumeTolerance
        engine = Engine(settings: settings)
    }
}

/// The engine's time in `--restore`: it only has to move forward (no timer is ever run).
private struct StepClock {
    private var ns: UInt64 = 0
    mutating func next() -> UInt64 {
        ns += 1_000_000
        return ns
    }
}
