import AudioVocabulary
import DBusTransport
import Foundation

/// An audio session of this app with audiod, shaped like AVAudioSession:
///
/// ```swift
/// let session = try await AudioSession.make(applicationName: "Podcasts")
/// try await session.setCategory(.playback, mode: .spokenAudio)
/// try await session.setActive(true)
/// for await event in session.interruptions {
///     if case .ended(shouldResume: true) = event { try await session.setActive(true) }
/// }
/// ```
///
/// The session lives as long as this object's connection (or, with `lifetime: .process`, as long as the process).
public final class AudioSession: Sendable {
    // The daemon's own words (AudioVocabulary), not copies of them.
    public typealias Category = AudioVocabulary.Category
    public typealias Mode = AudioVocabulary.Mode
    public typealias CategoryOption = AudioVocabulary.CategoryOption

    public enum Lifetime: String, Sendable { case connection, process }

    public enum Interruption: Sendable, Equatable {
        /// The session lost the audio; its streams are already silenced.
        case began(reason: String, interrupter: String?)
        /// The interruption is over; activate again to play if `shouldResume`.
        case ended(shouldResume: Bool)
    }

    public struct RouteChange: Sendable, Equatable {
        public let reason: String
        public let previousDevice: String?
        public let currentDevice: String?
    }

    /// A snapshot of the session's properties.
    public struct State: Sendable, Equatable {
        public var category: String
        public var mode: String
        public var options: [String]
        public var active: Bool
        public var interrupted: Bool
        public var mixable: Bool
        public var secondaryAudioShouldBeSilencedHint: Bool
        public var otherAudioPlaying: Bool
        public var handlesSecondaryAudio: Bool
        public var streams: [UInt32]
    }

    public let connection: AudiodConnection
    /// The session's object path.
    public let path: String

    /// Wraps an existing session object (e.g. found with `FindSession`).
    public init(connection: AudiodConnection, path: String) {
        self.connection = connection
        self.path = path
    }

    /// Creates a session (`CreateSession`) on a new connection, or on `connection`.
    public static func make(
        applicationName: String? = nil, pid: Int32? = nil, lifetime: Lifetime = .connection,
        connection: AudiodConnection? = nil
    ) async throws(AudiodError) -> AudioSession {
        let c: AudiodConnection
        if let connection { c = connection } else { c = try AudiodConnection() }
        var hints: [(String, DBusValue)] = [("lifetime", .string(lifetime.rawValue))]
        if let applicationName { hints.append(("application-name", .string(applicationName))) }
        if let pid { hints.append(("pid", .uint32(UInt32(bitPattern: pid)))) }
        let out = try await c.call(
            AudiodConnection.managerPath, AudiodConnection.managerInterface, "CreateSession", [.properties(hints)])
        guard case .objectPath(let p)? = out.first else {
            throw AudiodError(
                name: "org.freedesktop.DBus.Error.InvalidSignature", message: "CreateSession answered \(out)")
        }
        return AudioSession(connection: c, path: p)
    }

    /// The session's number (the last path element).
    public var id: UInt64 { UInt64(path.split(separator: "/").last ?? "") ?? 0 }

    public func setCategory(_ category: Category, mode: Mode = .default, options: [CategoryOption] = [])
        async throws(AudiodError)
    {
        try await setCategory(category.rawValue, mode: mode.rawValue, options: options.map(\.rawValue))
    }

    /// The same with raw strings (what a command line passes through): audiod validates them.
    public func setCategory(_ category: String, mode: String = "default", options: [String] = [])
        async throws(AudiodError)
    {
        _ = try await connection.call(
            path, AudiodConnection.sessionInterface, "SetCategory",
            [.string(category), .string(mode), .strings(options)])
    }

    public func setActive(_ active: Bool, notifyOthersOnDeactivation: Bool = false) async throws(AudiodError) {
        _ = try await connection.call(
            path, AudiodConnection.sessionInterface, "SetActive",
            [.bool(active), .strings(notifyOthersOnDeactivation ? ["notify-others-on-deactivation"] : [])])
    }

    /// Deactivates with notify and removes the session.
    public func release() async throws(AudiodError) {
        _ = try await connection.call(path, AudiodConnection.sessionInterface, "Release")
    }

    public func setHandlesSecondaryAudio(_ on: Bool) async throws(AudiodError) {
        try await connection.setProperty(path, AudiodConnection.sessionInterface, "HandlesSecondaryAudio", .bool(on))
    }

    public func state() async throws(AudiodError) -> State {
        let p = try await connection.properties(path, AudiodConnection.sessionInterface)
        return State(
            category: p["Category"]?.stringValue ?? "", mode: p["Mode"]?.stringValue ?? "",
            options: p["Options"]?.stringArray ?? [], active: p["Active"]?.boolValue ?? false,
            interrupted: p["Interrupted"]?.boolValue ?? false, mixable: p["Mixable"]?.boolValue ?? false,
            secondaryAudioShouldBeSilencedHint: p["SecondaryAudioShouldBeSilencedHint"]?.boolValue ?? false,
            otherAudioPlaying: p["OtherAudioPlaying"]?.boolValue ?? false,
            handlesSecondaryAudio: p["HandlesSecondaryAudio"]?.boolValue ?? false,
            streams: {
                if case .array(_, let v)? = p["Streams"] { return v.compactMap(\.uint32Value) } else { return [] }
            }())
    }

    private func events<T: Sendable>(_ member: String, _ map: @escaping @Sendable ([DBusValue]) -> T?) -> AsyncStream<T>
    {
        let all = connection.signals()
        let path = self.path
        return AsyncStream { continuation in
            let task = Task {
                for await s in all where s.path == path && s.member == member {
                    if let v = map(s.arguments) { continuation.yield(v) }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// `InterruptionBegan` / `InterruptionEnded`, from now on.
    public var interruptions: AsyncStream<Interruption> {
        let all = connection.signals()
        let path = self.path
        return AsyncStream { continuation in
            let task = Task {
                for await s in all where s.path == path {
                    if s.member == "InterruptionBegan", let reason = s.arguments.first?.stringValue {
                        var interrupter: String?
                        if case .objectPath(let o)? = s.arguments.last?.propertyMap?["interrupter"] { interrupter = o }
                        continuation.yield(.began(reason: reason, interrupter: interrupter))
                    } else if s.member == "InterruptionEnded", let resume = s.arguments.first?.boolValue {
                        continuation.yield(.ended(shouldResume: resume))
                    }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// `SilenceSecondaryAudioHint`: true for "begin", false for "end".
    public var secondaryAudioHints: AsyncStream<Bool> {
        events("SilenceSecondaryAudioHint") { args in args.first?.stringValue.map { $0 == "begin" } }
    }

    /// `RouteChanged`.
    public var routeChanges: AsyncStream<RouteChange> {
        events("RouteChanged") { args in
            guard let reason = args.first?.stringValue else { return nil }
            let d = args.last?.propertyMap
            return RouteChange(
                reason: reason, previousDevice: d?["previous-device"]?.stringValue,
                currentDevice: d?["current-device"]?.stringValue)
        }
    }
}
