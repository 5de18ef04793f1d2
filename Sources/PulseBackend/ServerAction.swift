import AudioPolicy

/// What the backend does after `ServerSession` decided on something the server said or answered: the session's one
/// output for streams, devices, clients and writes (the connection's own machine answers directly). The session decides, in order; `PulseBackend.execute` is the one
/// place that carries the actions out (the engine, the journal, the log, the server). Scripted in
/// `StreamReportTests` and `ServerSessionTests` as plain values.
public enum ServerAction: Equatable, Sendable {
    /// Tell the engine.
    case tell(Event)
    /// For the debug log: who plays a stream, what could not be read.
    case note(String)
    /// A restore-database key's journal line is to be written again.
    case journalLeak(String)
    /// These streams' journal lines are to be written now.
    case journalStreams([StreamID])
    /// The stream started with a policy value audiod left in the restore database under this key (taken as audiod's
    /// own, to keep or put back): for the log.
    case leakFound(StreamID, key: String)
    /// Write audiod's values to the stream again (nil fields: untouched): the server gave it its saved values over
    /// audiod's write, or dropped a write made before the stream was linked.
    case writeAgain(StreamID, mute: Bool?, volume: [UInt32]?)
    /// The stream is not linked yet: read it again after this many ns unless it was reported meanwhile.
    case readUnlinked(StreamID, afterNanoseconds: UInt64)
    /// Send this read of a stream (its sequence number orders the answer against audiod's writes): the server
    /// announced a change, a read must be made again, or a write was refused and only a read is the truth.
    case read(StreamRead)
    /// The server accepted a write to the stream: the restore database may now hold audiod's value.
    case repairRestoreEntry(StreamID)
    /// Report the stream again (its device, client or desktop entry changed).
    case report(StreamID)
    /// The stream is the sound server's own (a role loopback), not an app's: never arbitrated.
    case forget(StreamID)
}

extension [ServerAction] {
    /// The events for the engine, in order.
    public var events: [Event] { compactMap { if case .tell(let e) = $0 { e } else { nil } } }
}
