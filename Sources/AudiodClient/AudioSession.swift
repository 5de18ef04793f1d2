import AudioVocabulary
import DBusTransport
import Foundation
import Synchronization

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
///
/// A session made with `make` follows audiod: when audiod leaves the bus (a crash, a stop) and comes back, the
/// session is made again with what the app last set — its hints, category, mode and options,
/// `HandlesSecondaryAudio` and `OutputMuted` (as audiod last published it: the user may have unmuted it) — and
/// activated again if it held the audio; one that was interrupted comes back inactive.
/// `mediaServices` says so, once per restart. An activation audiod now refuses is an interruption too
/// (`.began(reason: "call", interrupter: nil)`): activate again when the app wants to play.
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
        /// `OutputMuted`: audiod mutes the session's streams on the app's behalf (a feed that autoplays muted).
        public var outputMuted = false
    }

    /// audiod leaving and coming back, as iOS's media-services notifications say it.
    public enum MediaServicesEvent: Sendable, Equatable {
        /// audiod left the bus: the session is gone with it, and the app's audio plays on without arbitration.
        case wereLost
        /// audiod is back and the session was made again (`path` is its new object path); `reactivated` when it held
        /// the audio before and holds it again.
        case wereReset(reactivated: Bool)
        /// audiod is back, but making the session again failed with audiod's error; the next restart tries again.
        case resetFailed(AudiodError)
    }

    public let connection: AudiodConnection
    /// What the app set, to make the session again after a restart; the current path.
    private let box: Box

    /// The session's object path: a new one after audiod restarted.
    public var path: String { box.state.withLock { $0.path } }

    /// Wraps an existing session object (e.g. found with `FindSession`). Such a session is not made again after a
    /// restart: what it was made with is not known here.
    public init(connection: AudiodConnection, path: String) {
        self.connection = connection
        self.box = Box(Record(path: path, hints: nil))
    }

    /// What a restart needs to make the session again.
    struct Record: Sendable {
        var path: String
        /// The `CreateSession` hints; nil: not made here, so not made again.
        var hints: [(String, DBusValue)]?
        var category: (category: String, mode: String, options: [String])?
        var handlesSecondaryAudio: Bool?
        /// `OutputMuted` as audiod published it last (the user's unmute in a mixer clears it); nil: never set or
        /// published.
        var outputMuted: Bool?
        /// audiod's `Active` for it, as its signals said last (an automatic activation included).
        var active = false
        var released = false
        /// Counts the app's own `SetActive` and `Release` calls: making the session again yields to one made meanwhile.
        var appCalls: UInt64 = 0
        /// Whether it held the audio when audiod went away, until the session is made again: an audiod that goes
        /// away again while it is being made does not lose it.
        var activeBeforeLoss: Bool?
        /// The unique name of the audiod the session was made on: its own name appearing is no restart (audiod
        /// started by D-Bus activation for the first `CreateSession` announces itself before its answer).
        var madeOn: String?
    }

    /// The record and the app's event streams, shared with the tasks that follow audiod (which must not keep the
    /// session alive: an app that drops it drops everything).
    final class Box: Sendable {
        let state: Mutex<Record>
        let services = Mutex<[UUID: AsyncStream<MediaServicesEvent>.Continuation]>([:])
        /// Interruptions the library itself reports (a refused activation after a restart).
        let localInterruptions = Mutex<[UUID: AsyncStream<Interruption>.Continuation]>([:])
        init(_ r: Record) { state = Mutex(r) }

        func emit(_ e: MediaServicesEvent) { for c in services.withLock({ Array($0.values) }) { c.yield(e) } }
        func interrupt(_ i: Interruption) { for c in localInterruptions.withLock({ Array($0.values) }) { c.yield(i) } }
        /// The connection is gone: nothing more will be said.
        func finish() {
            for c in services.withLock({ s in
                defer { s.removeAll() }
                return Array(s.values)
            }) { c.finish() }
        }
    }

    private init(connection: AudiodConnection, path: String, hints: [(String, DBusValue)]) {
        self.connection = connection
        self.box = Box(Record(path: path, hints: hints))
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
        // Subscribed before the call, so that audiod going away meanwhile is not missed.
        let signals = c.signals()
        let (p, owner) = try await createSession(c, to: AudiodConnection.busName, hints)
        let session = AudioSession(connection: c, path: p, hints: hints)
        session.box.state.withLock { $0.madeOn = owner }
        session.followAudiod(signals)
        return session
    }

    /// `CreateSession` on `destination`: the new session's path, and the unique name of the audiod that made it.
    private static func createSession(_ c: AudiodConnection, to destination: String, _ hints: [(String, DBusValue)])
        async throws(AudiodError) -> (path: String, owner: String?)
    {
        let (out, owner) = try await c.callWithSender(
            to: destination, AudiodConnection.managerPath, AudiodConnection.managerInterface, "CreateSession",
            [.properties(hints)])
        guard case .objectPath(let p)? = out.first else {
            throw AudiodError(
                name: "org.freedesktop.DBus.Error.InvalidSignature", message: "CreateSession answered \(out)")
        }
        return (p, owner)
    }

    /// Follows audiod's name and this session's signals, in the order they arrive: audiod gone → `wereLost`; a new
    /// audiod → the session made again. Ends when the connection does, or at the first restart after the app
    /// dropped the session (nothing is made again for an app that let it go).
    private func followAudiod(_ all: AsyncStream<AudiodSignal>) {
        let box = self.box
        let connection = self.connection
        Task { [weak self, weak connection] in
            for await s in all {
                if s.member == "NameOwnerChanged", s.interface == "org.freedesktop.DBus" {
                    guard s.arguments.count == 3, let old = s.arguments[1].stringValue,
                        let new = s.arguments[2].stringValue
                    else { continue }
                    guard self != nil, let connection else { break }
                    if !old.isEmpty {
                        box.state.withLock { $0.activeBeforeLoss = $0.activeBeforeLoss ?? $0.active }
                        box.emit(.wereLost)
                    }
                    if !new.isEmpty, new != box.state.withLock({ $0.madeOn }) {
                        await Self.makeAgain(box, connection, on: new)
                    }
                    continue
                }
                guard s.path == box.state.withLock({ $0.path }) else { continue }
                if s.member == "InterruptionBegan" { box.state.withLock { $0.active = false } }
                // `Active` as audiod publishes it, after each reply and in order with its interruptions: an
                // activation by the app, by its stream (automatic), an interruption, a deactivation.
                if s.member == "PropertiesChanged", s.arguments.first?.stringValue == AudiodConnection.sessionInterface,
                    s.arguments.count > 1, let changed = s.arguments[1].propertyMap
                {
                    if let active = changed["Active"]?.boolValue { box.state.withLock { $0.active = active } }
                    if let muted = changed["OutputMuted"]?.boolValue { box.state.withLock { $0.outputMuted = muted } }
                }
            }
            box.finish()
        }
    }

    /// The session made again on the audiod that took the name (`owner`, its unique name: calls do not follow the
    /// name to a later one) with what the app last set. An error from an audiod that went away again is not
    /// reported: the next one makes the session again.
    private static func makeAgain(_ box: Box, _ c: AudiodConnection, on owner: String) async {
        let r = box.state.withLock { $0 }
        guard let hints = r.hints, !r.released else { return }
        do throws(AudiodError) {
            let (p, _) = try await createSession(c, to: owner, hints)
            let releasedMeanwhile = box.state.withLock { state -> Bool in
                state.path = p
                state.madeOn = owner
                state.active = false
                return state.released
            }
            if releasedMeanwhile {
                _ = try? await c.call(to: owner, p, AudiodConnection.sessionInterface, "Release", [])
                return
            }
            if let cat = r.category {
                _ = try await c.call(
                    to: owner, p, AudiodConnection.sessionInterface, "SetCategory",
                    [.string(cat.category), .string(cat.mode), .strings(cat.options)])
            }
            if let h = r.handlesSecondaryAudio {
                _ = try await c.call(
                    to: owner, p, AudiodConnection.propertiesInterface, "Set",
                    [.string(AudiodConnection.sessionInterface), .string("HandlesSecondaryAudio"), .variant(.bool(h))])
            }
            func setOutputMuted(_ muted: Bool) async throws(AudiodError) {
                _ = try await c.call(
                    to: owner, p, AudiodConnection.propertiesInterface, "Set",
                    [.string(AudiodConnection.sessionInterface), .string("OutputMuted"), .variant(.bool(muted))])
            }
            // Muted, before anything plays.
            if r.outputMuted == true { try await setOutputMuted(true) }
            var reactivated = false
            // Not when the app activated, deactivated or released it itself meanwhile: its call stands.
            if r.activeBeforeLoss ?? r.active, box.state.withLock({ $0.appCalls == r.appCalls && !$0.released }) {
                // Unmuted as it was (the mode `short-form-video` muted it again); clearing it activates it.
                if r.outputMuted == false { try await setOutputMuted(false) }
                do throws(AudiodError) {
                    _ = try await c.call(
                        to: owner, p, AudiodConnection.sessionInterface, "SetActive", [.bool(true), .strings([])])
                    reactivated = true
                } catch  where error.code == .insufficientPriority {
                    // A call holds the audio now: the app hears it as an interruption — once: audiod has said so
                    // itself if the cleared output already tried to activate it.
                    let said = try? await c.call(
                        to: owner, p, AudiodConnection.propertiesInterface, "Get",
                        [.string(AudiodConnection.sessionInterface), .string("Interrupted")])
                    let interrupted: Bool
                    if case .variant(.bool(let b))? = said?.first { interrupted = b } else { interrupted = false }
                    if !interrupted { box.interrupt(.began(reason: "call", interrupter: nil)) }
                }
            }
            box.state.withLock { $0.activeBeforeLoss = nil }
            box.emit(.wereReset(reactivated: reactivated))
        } catch {
            // Not when that audiod went away again (the next one makes the session again), nor when the app
            // released the session meanwhile.
            if await c.ownerNow() == owner, !box.state.withLock({ $0.released }) { box.emit(.resetFailed(error)) }
        }
    }

    /// audiod leaving and coming back (`wereLost`, then `wereReset` once the session is made again), from now on.
    public var mediaServices: AsyncStream<MediaServicesEvent> {
        let (stream, continuation) = AsyncStream<MediaServicesEvent>.makeStream()
        let id = UUID()
        box.services.withLock { $0[id] = continuation }
        let box = self.box
        continuation.onTermination = { _ in _ = box.services.withLock { $0.removeValue(forKey: id) } }
        return stream
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
        box.state.withLock { $0.category = (category, mode, options) }
    }

    public func setActive(_ active: Bool, notifyOthersOnDeactivation: Bool = false) async throws(AudiodError) {
        // Counted before it is sent: a remake in flight yields to it. `Active` itself comes from audiod's
        // PropertiesChanged, in order with its interruptions.
        box.state.withLock {
            $0.appCalls &+= 1
            $0.activeBeforeLoss = nil
        }
        _ = try await connection.call(
            path, AudiodConnection.sessionInterface, "SetActive",
            [.bool(active), .strings(notifyOthersOnDeactivation ? ["notify-others-on-deactivation"] : [])])
    }

    /// Deactivates with notify and removes the session.
    public func release() async throws(AudiodError) {
        box.state.withLock {
            $0.released = true
            $0.appCalls &+= 1
            $0.activeBeforeLoss = nil
        }
        _ = try await connection.call(path, AudiodConnection.sessionInterface, "Release")
    }

    public func setHandlesSecondaryAudio(_ on: Bool) async throws(AudiodError) {
        try await connection.setProperty(path, AudiodConnection.sessionInterface, "HandlesSecondaryAudio", .bool(on))
        box.state.withLock { $0.handlesSecondaryAudio = on }
    }

    /// `OutputMuted`: true mutes the session's playback streams on the app's behalf (the session then takes the
    /// audio from nobody); false unmutes them and activates the session.
    public func setOutputMuted(_ on: Bool) async throws(AudiodError) {
        // The app's own say over its output and (cleared) its activation: a remake in flight yields to it.
        box.state.withLock { $0.appCalls &+= 1 }
        try await connection.setProperty(path, AudiodConnection.sessionInterface, "OutputMuted", .bool(on))
        box.state.withLock { $0.outputMuted = on }
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
            }(), outputMuted: p["OutputMuted"]?.boolValue ?? false)
    }

    private func events<T: Sendable>(_ member: String, _ map: @escaping @Sendable ([DBusValue]) -> T?) -> AsyncStream<T>
    {
        let all = connection.signals()
        let box = self.box
        return AsyncStream { continuation in
            let task = Task {
                // The current path: a new one after a restart.
                for await s in all where s.member == member && s.path == box.state.withLock({ $0.path }) {
                    if let v = map(s.arguments) { continuation.yield(v) }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// `InterruptionBegan` / `InterruptionEnded`, from now on.
    /// Also an activation refused when the session was made again after a restart (`.began(reason: "call")`).
    public var interruptions: AsyncStream<Interruption> {
        let all = connection.signals()
        let box = self.box
        return AsyncStream { continuation in
            let id = UUID()
            box.localInterruptions.withLock { $0[id] = continuation }
            let task = Task {
                for await s in all where s.path == box.state.withLock({ $0.path }) {
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
            continuation.onTermination = { _ in
                task.cancel()
                _ = box.localInterruptions.withLock { $0.removeValue(forKey: id) }
            }
        }
    }

    /// `SilenceSecondaryAudioHint`: true for "begin", false for "end".
    public var secondaryAudioHints: AsyncStream<Bool> {
        events("SilenceSecondaryAudioHint") { args in args.first?.stringValue.map { $0 == "begin" } }
    }

    /// `UserIntentToUnmuteOutput`: the user unmuted the output-muted session's stream in a mixer, and audiod has
    /// given the session the audio — the app shows its sound as on.
    public var userIntentsToUnmuteOutput: AsyncStream<Void> {
        events("UserIntentToUnmuteOutput") { _ in () }
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
