// How a loop-confined object crosses threads: the compiler lets a `LoopBound` go anywhere (it is Sendable), and the
// runtime lets only the loop thread open it — in every build, not just debug ones. The shape is swift-nio's
// `NIOLoopBound`: the classes themselves stay non-Sendable, so capturing one in a `@Sendable` closure without this
// box does not compile.

/// A value that belongs to one loop thread. Made and opened only there (or while the loop is not running: before
/// `start` and after its thread has ended nothing else touches the value).
public struct LoopBound<Value>: @unchecked Sendable {
    // @unchecked: `stored` is reached only through `value`, which traps off the loop thread.
    private let stored: Value
    private let thread: LoopThread

    public init(_ value: Value, on thread: LoopThread, file: StaticString = #fileID, line: UInt = #line) {
        thread.preconditionOnLoop(file: file, line: line)
        self.stored = value
        self.thread = thread
    }

    /// The value; traps when read on another thread while the loop runs.
    public var value: Value {
        thread.preconditionOnLoop(file: #fileID, line: #line)
        return stored
    }
}

extension LoopThread {
    /// Traps, in every build, when called off the loop thread while it runs.
    public func preconditionOnLoop(file: StaticString = #fileID, line: UInt = #line) {
        precondition(
            isOnLoop || !isRunning, "a value bound to the loop thread was touched from another thread", file: file,
            line: line)
    }
}
