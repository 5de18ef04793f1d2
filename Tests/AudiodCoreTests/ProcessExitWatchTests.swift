import Foundation
import Glibc
import PulseLoop
import Synchronization
import Testing

/// A process's exit as the loop sees it: through a pidfd, and — when none can be opened — by checking the process,
/// never by taking the failure for its exit (ending the sessions of an app that still plays).
struct ProcessExitWatchTests {
    func child() throws -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sleep")
        p.arguments = ["30"]
        try p.run()
        return p
    }

    /// Watches `pid` on a running loop with `open`; returns when the handler ran (monotonic ns), or nil.
    func watch(
        _ pid: Int32, open: @escaping ProcessExitWatch.Opener,
        timer: @escaping ProcessExitWatch.TimerMaker = ProcessExitWatch.loopTimer, killAfter: Double?,
        wait seconds: Double
    ) throws -> UInt64? {
        let loop = try MainLoop()
        loop.start()
        defer { loop.stop() }
        let fired = Mutex<UInt64?>(nil)
        let token = loop.sync {
            loop.bind(
                ProcessExitWatch(pid: UInt32(pid), loop: loop, open: open, timer: timer) {
                    fired.withLock { $0 = DispatchTime.now().uptimeNanoseconds }
                })
        }
        if let killAfter {
            usleep(UInt32(killAfter * 1_000_000))
            kill(pid, SIGKILL)
        }
        let end = Date().addingTimeInterval(seconds)
        while Date() < end, fired.withLock({ $0 }) == nil { usleep(10_000) }
        loop.sync { withExtendedLifetime(token.value) {} }
        return fired.withLock { $0 }
    }

    @Test(
        "a pidfd_open that fails (out of descriptors) is not the process's exit: the watch checks the process instead")
    func failedOpenIsNotAnExit() throws {
        let p = try child()
        defer { p.terminate() }
        let start = DispatchTime.now().uptimeNanoseconds
        let fired = try watch(p.processIdentifier, open: { _ in (-1, EMFILE) }, killAfter: 0.8, wait: 3)
        guard let fired else {
            Issue.record("the exit was never seen")
            return
        }
        let ms = (fired - start) / 1_000_000
        #expect(ms >= 750, "the failed open was taken for the exit after \(ms) ms")
        #expect(ms < 2_500, "the exit was seen after \(ms) ms")
    }

    @Test("with neither a pidfd nor a loop timer (no descriptors left), the process is still checked until it exits")
    func noTimerEither() throws {
        let p = try child()
        defer { p.terminate() }
        let start = DispatchTime.now().uptimeNanoseconds
        let fired = try watch(
            p.processIdentifier, open: { _ in (-1, EMFILE) }, timer: { _, _, _ in nil }, killAfter: 1.2, wait: 4)
        guard let fired else {
            Issue.record("the checks stopped: the exit was never seen")
            return
        }
        let ms = (fired - start) / 1_000_000
        #expect(ms >= 1_150, "taken for an exit after \(ms) ms")
        #expect(ms < 3_000, "the exit was seen after \(ms) ms")
    }

    @Test("no such process (ESRCH) is an exit at once; a real pidfd sees the exit when it happens")
    func realExits() throws {
        let gone = try watch(Int32.max - 7, open: ProcessExitWatch.pidfdOpener, killAfter: nil, wait: 1)
        #expect(gone != nil)
        let p = try child()
        let start = DispatchTime.now().uptimeNanoseconds
        let fired = try watch(p.processIdentifier, open: ProcessExitWatch.pidfdOpener, killAfter: 0.3, wait: 3)
        p.waitUntilExit()
        let ms = ((fired ?? 0) &- start) / 1_000_000
        #expect(fired != nil && ms >= 250, "seen after \(ms) ms")
    }
}
