/// A session's number: the `<id>` of `/org/audiod/AudioSession1/session/<id>`. Never reused while audiod runs.
public struct SessionID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public static func < (a: SessionID, b: SessionID) -> Bool { a.rawValue < b.rawValue }
    public var description: String { "session \(rawValue)" }
}

/// Playback streams are sink-inputs, record streams source-outputs: two index spaces on the sound server.
public enum StreamKind: String, Sendable, Hashable, Comparable {
    case playback
    case record
    public static func < (a: StreamKind, b: StreamKind) -> Bool { a == .playback && b == .record }
}

/// A stream of the sound server: its kind and its index in that kind's space.
public struct StreamID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let kind: StreamKind
    public let index: UInt32
    public init(_ kind: StreamKind, _ index: UInt32) {
        self.kind = kind
        self.index = index
    }
    public static func playback(_ index: UInt32) -> StreamID { StreamID(.playback, index) }
    public static func record(_ index: UInt32) -> StreamID { StreamID(.record, index) }
    public static func < (a: StreamID, b: StreamID) -> Bool { (a.kind, a.index) < (b.kind, b.index) }
    public var description: String { "\(kind == .playback ? "sink-input" : "source-output") \(index)" }
}

/// An MPRIS player: identified by its bus name (the shell de-duplicates several names of one process).
public struct PlayerID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let busName: String
    public init(_ busName: String) { self.busName = busName }
    public static func < (a: PlayerID, b: PlayerID) -> Bool { a.busName < b.busName }
    public var description: String { busName }
}

/// A request from a client; the engine answers it with exactly one `.reply` effect.
public struct RequestID: Hashable, Sendable {
    public let rawValue: UInt64
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
}

/// What a timer is for. The shell keeps at most one timer per value.
public enum TimerID: Hashable, Sendable {
    /// An implicit session's linger: it deactivates when none of its streams has been audible this long.
    case linger(SessionID)
    /// An implicit call found by the voice-call rule (SPEC §7 step 3): it stops being a call when it has not both
    /// captured and played for the linger.
    case voiceCallEnd(SessionID)
    /// A call's stream announced before its link (`Event.streamAnnounced`) that has not linked and played in time:
    /// what it silenced ahead of it comes back.
    case callLinkOverdue(StreamID)
    /// A handover (docs/POLICY.md §5) whose session has not made a sound within the linger: primary audio ends.
    case handover(SessionID)
    /// The next step of every running fade (`StreamState.fade`).
    case fadeStep
}

/// A point in time, in nanoseconds on a monotonic clock of the shell's choosing. The engine never reads a clock.
public struct Instant: Hashable, Comparable, Sendable {
    public let nanoseconds: UInt64
    public init(nanoseconds: UInt64) { self.nanoseconds = nanoseconds }
    public static func milliseconds(_ ms: UInt64) -> Instant { Instant(nanoseconds: ms * 1_000_000) }
    public static let zero = Instant(nanoseconds: 0)
    public static func < (a: Instant, b: Instant) -> Bool { a.nanoseconds < b.nanoseconds }
    /// Nanoseconds from `earlier` to `self`, 0 if `earlier` is later.
    public func since(_ earlier: Instant) -> UInt64 {
        nanoseconds >= earlier.nanoseconds ? nanoseconds - earlier.nanoseconds : 0
    }
}
