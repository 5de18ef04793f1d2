import Dispatch
import LoopThread
import Testing

/// A loop with nothing to watch: it drains what is handed in, woken by a semaphore.
func runningLoop() -> LoopThread {
    let wake = DispatchSemaphore(value: 0)
    let thread = LoopThread(name: "test") { wake.signal() }
    thread.start {
        while thread.isRunning {
            thread.drain()
            _ = wake.wait(timeout: .now() + 0.05)
        }
    }
    return thread
}

final class Counter {
    var count = 0
}

/// `LoopBound` is the only way a loop-confined object (the arbiter, the backend, a bus connection) crosses threads:
/// it must open on the loop thread and trap anywhere else, in release builds too.
struct LoopBoundTests {
    @Test func itOpensOnTheLoopThread() {
        let thread = runningLoop()
        defer { thread.stop() }
        let bound = thread.sync { LoopBound(Counter(), on: thread) }
        let count = thread.sync {
            bound.value.count += 2
            return bound.value.count
        }
        #expect(count == 2)
    }

    @Test func itMayBeMadeBeforeTheLoopRunsAndOpenedAfterItEnds() {
        let wake = DispatchSemaphore(value: 0)
        let thread = LoopThread(name: "test") { wake.signal() }
        let bound = LoopBound(Counter(), on: thread)
        bound.value.count = 1
        thread.start {
            while thread.isRunning {
                thread.drain()
                _ = wake.wait(timeout: .now() + 0.05)
            }
        }
        #expect(thread.sync { bound.value.count } == 1)
        thread.stop()
        #expect(bound.value.count == 1)
    }

    @Test func openingItOnAnotherThreadWhileTheLoopRunsTraps() async {
        await #expect(processExitsWith: .failure) {
            let thread = runningLoop()
            let bound = thread.sync { LoopBound(Counter(), on: thread) }
            bound.value.count += 1
        }
    }

    @Test func makingItOnAnotherThreadWhileTheLoopRunsTraps() async {
        await #expect(processExitsWith: .failure) {
            let thread = runningLoop()
            _ = LoopBound(Counter(), on: thread)
        }
    }
}
