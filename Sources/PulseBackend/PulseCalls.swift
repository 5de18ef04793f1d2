// Every libpulse call of the sound-server connection lives in this file (STYLE.md §2; the loop's own pa_mainloop
// calls are PulseLoop's): the rest of the backend sees Swift values only.
//
// Threading: everything here is confined to the `MainLoop` thread (PulseLoop).
//
// Callbacks: libpulse's C callbacks cannot capture, so each takes an `Unmanaged` pointer to the Swift object that
// registered it. libpulse offers no destroy-notify, so the object is kept alive for as long as the C side may call
// back, and let go in one known place (`PulseContext.close()`).

import AudioPolicy
import CPulse
import Dispatch
import FoundationEssentials
import Glibc
import PulseLoop
import Synchronization

// MARK: - Values read from the server

/// A playback (sink-input) or record (source-output) stream as the server describes it.
struct RawStream: ServerStreamValue {
    var index: UInt32
    var isRecord: Bool
    var client: UInt32?
    /// Sink index (playback) or source index (record).
    var device: UInt32
    var properties: [String: String]
    var corked: Bool
    var muted: Bool
    var volume: [UInt32]
    var hasVolume: Bool
    var channelMap: pa_channel_map

    var id: StreamID { StreamID(isRecord ? .record : .playback, index) }

    static func == (a: RawStream, b: RawStream) -> Bool {
        a.index == b.index && a.isRecord == b.isRecord && a.client == b.client && a.device == b.device
            && a.properties == b.properties && a.corked == b.corked && a.muted == b.muted && a.volume == b.volume
            && a.hasVolume == b.hasVolume
    }
}

/// A sink or source: its name, and whether its active port says it is unplugged.
struct RawDevice: Equatable {
    var index: UInt32
    var name: String
    /// False when the active port reports `PA_PORT_AVAILABLE_NO` (headphones unplugged).
    var available: Bool
    /// A source that is a sink's monitor (what the sink plays): capturing it is no call (SPEC §7 step 3).
    var isMonitor = false
    /// The device's own mute (a source's: the microphone switch).
    var muted = false
    /// PipeWire's `node.link-group` and `client.id`: a loopback's sink and its stream share the group, and the
    /// client that made both.
    var linkGroup: String?
    var ownerClient: String?
}

struct RawClient: Equatable {
    var index: UInt32
    var properties: [String: String]
}

/// `pa_server_info`, the parts audiod uses.
public struct ServerInfo: Sendable, Equatable {
    /// `ServerName`: `pulseaudio 16.1`, or pipewire-pulse's own `PulseAudio (on PipeWire 0.3.65)`.
    public var name: String
    /// A random number that identifies this run of the server (`pa_server_info.cookie`): a journal written
    /// against another run of the server does not apply.
    public var cookie: UInt32
    public var defaultSink: String
    /// Where a record stream that names no device captures from; a session with no record stream yet counts as
    /// capturing from it (the microphone switch, SPEC §10).
    public var defaultSource: String = ""
}

/// What the server's subscription reports (`pa_subscription_event_type_t`).
enum Facility {
    case playback, record, sink, source, client, server
}

enum Change {
    case new, change, remove
}

/// The callbacks of one `PulseContext`, on the loop thread.
protocol PulseContextDelegate: AnyObject {
    func contextStateChanged(_ state: PulseContext.State)
    func subscriptionEvent(_ facility: Facility, _ change: Change, index: UInt32)
}

// MARK: - Context

/// One connection to the sound server (`pa_context`). Confined to the loop thread.
final class PulseContext {
    enum State: Equatable {
        case connecting
        case ready
        /// The connection failed or ended; `PulseError` says why.
        case failed(PulseError)
    }

    private let loop: MainLoop
    private var context: OpaquePointer?
    weak var delegate: PulseContextDelegate?
    /// Callbacks waiting for a reply, by request number. libpulse drops pending callbacks when a context dies
    /// without calling them; keeping them here (userdata carries only the number) means nothing leaks then.
    private var pending: [UInt: Pending] = [:]
    private var nextRequest: UInt = 1
    private var retained = false

    private enum Pending {
        /// An info request: items, then the end (the shape of every libpulse info callback).
        case items(ItemReplies)
        case server((ServerInfo?) -> Void)
        case success((Bool) -> Void)
        case restoreEntries(([RestoreEntry]?) -> Void, [RestoreEntry])
        case restoreVersion((UInt32?) -> Void)
    }

    init(loop: MainLoop, name: String) throws(PulseError) {
        self.loop = loop
        let props = pa_proplist_new()
        defer { pa_proplist_free(props) }
        pa_proplist_sets(props, "application.name", name)
        pa_proplist_sets(props, "application.id", "org.audiod.AudioSession1")
        // audiod's own connection makes no sound; keep it out of role-based policies of the server.
        pa_proplist_sets(props, "media.role", "production")
        guard let c = pa_context_new_with_proplist(loop.api, name, props) else {
            throw PulseError(code: .outOfMemory, context: "pa_context_new_with_proplist")
        }
        context = c
    }

    deinit {
        if let c = context { pa_context_unref(c) }
    }

    private var me: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

    private static func owner(_ userdata: UnsafeMutableRawPointer?) -> PulseContext? {
        guard let userdata else { return nil }
        return Unmanaged<PulseContext>.fromOpaque(userdata).takeUnretainedValue()
    }

    /// `pa_context_connect` to `server` (nil: the default, i.e. `$PULSE_SERVER` or the user's server), never
    /// autospawning one: audiod arbitrates the user's server, it does not start its own.
    func connect(server: String?) throws(PulseError) {
        guard let c = context else { throw PulseError(code: .badState, context: "connect after close") }
        if !retained {
            _ = Unmanaged.passRetained(self)
            retained = true
        }
        pa_context_set_state_callback(
            c,
            { ctx, userdata in
                guard let me = PulseContext.owner(userdata), let ctx else { return }
                me.stateChanged(ctx)
            }, me)
        pa_context_set_subscribe_callback(
            c,
            { _, type, index, userdata in
                guard let me = PulseContext.owner(userdata) else { return }
                me.subscriptionEvent(type, index)
            }, me)
        registerForReplies()
        // A refused connect reports FAILED through the state callback before it returns, and the owner may close
        // (and so release) the context right there: hold a reference of our own until the error has been read.
        pa_context_ref(c)
        defer { pa_context_unref(c) }
        if pa_context_connect(c, server, PA_CONTEXT_NOAUTOSPAWN, nil) < 0 {
            throw PulseError.last(c, "pa_context_connect")
        }
    }

    private func stateChanged(_ c: OpaquePointer) {
        let s = pa_context_get_state(c)
        let state: State
        if s == PA_CONTEXT_READY {
            state = .ready
        } else if s == PA_CONTEXT_FAILED || s == PA_CONTEXT_TERMINATED {
            state = .failed(PulseError.last(c, s == PA_CONTEXT_FAILED ? "connection failed" : "connection ended"))
            pending.removeAll()
        } else {
            state = .connecting
        }
        delegate?.contextStateChanged(state)
    }

    private func subscriptionEvent(_ type: pa_subscription_event_type_t, _ index: UInt32) {
        let facilityBits = type.rawValue & PA_SUBSCRIPTION_EVENT_FACILITY_MASK.rawValue
        let typeBits = type.rawValue & PA_SUBSCRIPTION_EVENT_TYPE_MASK.rawValue
        let facility: Facility
        switch facilityBits {
        case PA_SUBSCRIPTION_EVENT_SINK_INPUT.rawValue: facility = .playback
        case PA_SUBSCRIPTION_EVENT_SOURCE_OUTPUT.rawValue: facility = .record
        case PA_SUBSCRIPTION_EVENT_SINK.rawValue: facility = .sink
        case PA_SUBSCRIPTION_EVENT_SOURCE.rawValue: facility = .source
        case PA_SUBSCRIPTION_EVENT_CLIENT.rawValue: facility = .client
        case PA_SUBSCRIPTION_EVENT_SERVER.rawValue: facility = .server
        default: return
        }
        let change: Change
        switch typeBits {
        case PA_SUBSCRIPTION_EVENT_NEW.rawValue: change = .new
        case PA_SUBSCRIPTION_EVENT_REMOVE.rawValue: change = .remove
        default: change = .change
        }
        delegate?.subscriptionEvent(facility, change, index: index)
    }

    /// Disconnects (`pa_context_disconnect`) and drops every pending callback. Safe to call twice.
    func close() {
        guard let c = context else { return }
        pa_context_set_state_callback(c, nil, nil)
        pa_context_set_subscribe_callback(c, nil, nil)
        unregisterForReplies()
        pa_context_disconnect(c)
        pa_context_unref(c)
        context = nil
        pending.removeAll()
        if retained {
            retained = false
            Unmanaged.passUnretained(self).release()
        }
    }

    // MARK: Requests

    private func register(_ p: Pending) -> UnsafeMutableRawPointer? {
        let n = nextRequest
        nextRequest &+= 1
        if nextRequest == 0 { nextRequest = 1 }
        pending[n] = p
        return UnsafeMutableRawPointer(bitPattern: n)
    }

    /// `pa_context*` → its `PulseContext`, for reply callbacks, whose userdata is only the request number.
    private static let contexts = Mutex<[UInt: UInt]>([:])

    /// Unrefs the operation at once (its callback still runs); a request libpulse refused to send is answered
    /// at once with nothing.
    private func track(_ op: OpaquePointer?, request: UnsafeMutableRawPointer?, _ what: String) {
        if let op {
            pa_operation_unref(op)
        } else if let request {
            let n = UInt(bitPattern: request)
            if let p = pending.removeValue(forKey: n) { fail(p) }
        }
    }

    private func fail(_ p: Pending) {
        switch p {
        case .items(let r): r.end(ok: false)
        case .server(let cb): cb(nil)
        case .success(let cb): cb(false)
        case .restoreEntries(let cb, _): cb(nil)
        case .restoreVersion(let cb): cb(nil)
        }
    }

    /// Replies come back with the request number as userdata and the context pointer; this finds the Swift
    /// context and the pending callback.
    fileprivate static func take(_ c: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?) -> (PulseContext, UInt)? {
        guard let c, let userdata else { return nil }
        let key = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(c)))
        guard let owner = contexts.withLock({ $0[key] }) else { return nil }
        guard let raw = UnsafeRawPointer(bitPattern: owner) else { return nil }
        return (Unmanaged<PulseContext>.fromOpaque(raw).takeUnretainedValue(), UInt(bitPattern: userdata))
    }

    /// Makes this context findable from its `pa_context*` in reply callbacks.
    func registerForReplies() {
        guard let c = context else { return }
        let key = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(c)))
        let value = UInt(bitPattern: me)
        Self.contexts.withLock { $0[key] = value }
    }

    func unregisterForReplies() {
        guard let c = context else { return }
        let key = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(c)))
        _ = Self.contexts.withLock { $0.removeValue(forKey: key) }
    }

    /// `pa_context_subscribe` to streams, devices, clients and the server.
    func subscribe(_ done: @escaping (Bool) -> Void) {
        guard let c = context else { return done(false) }
        let mask = pa_subscription_mask_t(
            rawValue: PA_SUBSCRIPTION_MASK_SINK_INPUT.rawValue | PA_SUBSCRIPTION_MASK_SOURCE_OUTPUT.rawValue
                | PA_SUBSCRIPTION_MASK_SINK.rawValue | PA_SUBSCRIPTION_MASK_SOURCE.rawValue
                | PA_SUBSCRIPTION_MASK_CLIENT.rawValue | PA_SUBSCRIPTION_MASK_SERVER.rawValue)
        let r = register(.success(done))
        track(pa_context_subscribe(c, mask, successCallback, r), request: r, "subscribe")
    }

    /// `pa_context_get_server_info`.
    func serverInfo(_ done: @escaping (ServerInfo?) -> Void) {
        guard let c = context else { return done(nil) }
        let r = register(.server(done))
        track(
            pa_context_get_server_info(
                c,
                { c, info, userdata in
                    guard let (me, n) = PulseContext.take(c, userdata), let p = me.pending.removeValue(forKey: n),
                        case .server(let cb) = p
                    else { return }
                    guard let i = info?.pointee else { return cb(nil) }
                    let name = string(i.server_name)
                    let version = string(i.server_version)
                    // pipewire-pulse names itself in full ("PulseAudio (on PipeWire 0.3.65)"); PulseAudio says "pulseaudio".
                    let display = name.lowercased() == "pulseaudio" ? "\(name) \(version)" : name
                    cb(
                        ServerInfo(
                            name: display, cookie: i.cookie, defaultSink: string(i.default_sink_name),
                            defaultSource: string(i.default_source_name)))
                }, r), request: r, "get_server_info")
    }

    /// `pa_context_get_sink_input_info` / `pa_context_get_source_output_info`; nil when the stream is gone.
    func stream(record: Bool, index: UInt32, _ done: @escaping (RawStream?) -> Void) {
        guard let c = context else { return done(nil) }
        let r = register(.items(ItemReplies(one: done)))
        if record {
            track(pa_context_get_source_output_info(c, index, sourceOutputCallback, r), request: r, "source_output")
        } else {
            track(pa_context_get_sink_input_info(c, index, sinkInputCallback, r), request: r, "sink_input")
        }
    }

    /// `pa_context_get_sink_input_info_list` / `pa_context_get_source_output_info_list`.
    func streams(record: Bool, _ done: @escaping ([RawStream]) -> Void) {
        guard let c = context else { return done([]) }
        let r = register(.items(ItemReplies(all: done)))
        if record {
            track(pa_context_get_source_output_info_list(c, sourceOutputCallback, r), request: r, "source_outputs")
        } else {
            track(pa_context_get_sink_input_info_list(c, sinkInputCallback, r), request: r, "sink_inputs")
        }
    }

    /// `pa_context_get_sink_info_by_index` / `pa_context_get_source_info_by_index`.
    func device(source: Bool, index: UInt32, _ done: @escaping (RawDevice?) -> Void) {
        guard let c = context else { return done(nil) }
        let r = register(.items(ItemReplies(one: done)))
        if source {
            track(pa_context_get_source_info_by_index(c, index, sourceCallback, r), request: r, "source")
        } else {
            track(pa_context_get_sink_info_by_index(c, index, sinkCallback, r), request: r, "sink")
        }
    }

    /// `pa_context_get_sink_info_list` / `pa_context_get_source_info_list`.
    func devices(source: Bool, _ done: @escaping ([RawDevice]) -> Void) {
        guard let c = context else { return done([]) }
        let r = register(.items(ItemReplies(all: done)))
        if source {
            track(pa_context_get_source_info_list(c, sourceCallback, r), request: r, "sources")
        } else {
            track(pa_context_get_sink_info_list(c, sinkCallback, r), request: r, "sinks")
        }
    }

    /// `pa_context_get_client_info` / `pa_context_get_client_info_list`.
    func client(index: UInt32, _ done: @escaping (RawClient?) -> Void) {
        guard let c = context else { return done(nil) }
        let r = register(.items(ItemReplies(one: done)))
        track(pa_context_get_client_info(c, index, clientCallback, r), request: r, "client")
    }

    func clients(_ done: @escaping ([RawClient]) -> Void) {
        guard let c = context else { return done([]) }
        let r = register(.items(ItemReplies(all: done)))
        track(pa_context_get_client_info_list(c, clientCallback, r), request: r, "clients")
    }

    /// An item of an info reply (`eol == 0`), or its end (`eol > 0`: done, `eol < 0`: failed or not found).
    fileprivate func deliver(item: Any?, eol: Int32, request n: UInt) {
        guard case .items(let r)? = pending[n] else { return }
        if eol == 0, let item {
            r.add(item)
            return
        }
        pending[n] = nil
        r.end(ok: eol > 0)
    }

    fileprivate func deliver(success: Bool, request n: UInt) {
        guard let p = pending.removeValue(forKey: n), case .success(let cb) = p else { return }
        cb(success)
    }

    // MARK: Operations on streams

    /// `pa_context_set_sink_input_mute` / `pa_context_set_source_output_mute`.
    func setMute(record: Bool, index: UInt32, _ mute: Bool, _ done: @escaping (Bool) -> Void) {
        guard let c = context else { return done(false) }
        let r = register(.success(done))
        let op =
            record
            ? pa_context_set_source_output_mute(c, index, mute ? 1 : 0, successCallback, r)
            : pa_context_set_sink_input_mute(c, index, mute ? 1 : 0, successCallback, r)
        track(op, request: r, "set_mute")
    }

    /// `pa_context_set_sink_input_volume` / `pa_context_set_source_output_volume`.
    func setVolume(record: Bool, index: UInt32, _ channels: [UInt32], _ done: @escaping (Bool) -> Void) {
        guard let c = context, var cv = cvolume(channels) else { return done(false) }
        let r = register(.success(done))
        let op =
            record
            ? pa_context_set_source_output_volume(c, index, &cv, successCallback, r)
            : pa_context_set_sink_input_volume(c, index, &cv, successCallback, r)
        track(op, request: r, "set_volume")
    }

    // MARK: module-stream-restore (ext-stream-restore)

    /// An entry of module-stream-restore's database.
    struct RestoreEntry {
        var name: String
        var channelMap: pa_channel_map
        var volume: [UInt32]
        var device: String?
        var muted: Bool
    }

    /// `pa_ext_stream_restore_test`: the extension's version, nil when the server has no module-stream-restore.
    func restoreVersion(_ done: @escaping (UInt32?) -> Void) {
        guard let c = context else { return done(nil) }
        let r = register(.restoreVersion(done))
        track(
            pa_ext_stream_restore_test(
                c,
                { c, version, userdata in
                    guard let (me, n) = PulseContext.take(c, userdata), let p = me.pending.removeValue(forKey: n),
                        case .restoreVersion(let cb) = p
                    else { return }
                    cb(version == UInt32.max ? nil : version)
                }, r), request: r, "ext_stream_restore_test")
    }

    /// `pa_ext_stream_restore_read`: every entry, or nil when the extension failed.
    func restoreEntries(_ done: @escaping ([RestoreEntry]?) -> Void) {
        guard let c = context else { return done(nil) }
        let r = register(.restoreEntries(done, []))
        track(
            pa_ext_stream_restore_read(
                c,
                { c, info, eol, userdata in
                    guard let (me, n) = PulseContext.take(c, userdata), let p = me.pending[n],
                        case .restoreEntries(let cb, var acc) = p
                    else { return }
                    if let i = info?.pointee, eol == 0 {
                        acc.append(
                            RestoreEntry(
                                name: string(i.name), channelMap: i.channel_map, volume: channels(i.volume),
                                device: i.device.map { String(cString: $0) }, muted: i.mute != 0))
                        me.pending[n] = .restoreEntries(cb, acc)
                    } else {
                        me.pending[n] = nil
                        cb(eol < 0 ? nil : acc)
                    }
                }, r), request: r, "ext_stream_restore_read")
    }

    /// An entry written without reading it first (pipewire-pulse lists none: WirePlumber keeps the state). It turns
    /// into route-settings metadata that WirePlumber merges key by key into its saved state, so only the mute and
    /// (when given) the volume, with the default channel map of its channel count, are written.
    static func blindEntry(name: String, volume: [UInt32], muted: Bool) -> RestoreEntry {
        var map = pa_channel_map()
        if !volume.isEmpty, volume.count <= Int(PA_CHANNELS_MAX) {
            pa_channel_map_init_auto(&map, UInt32(volume.count), PA_CHANNEL_MAP_DEFAULT)
        }
        return RestoreEntry(name: name, channelMap: map, volume: volume, device: nil, muted: muted)
    }

    /// `pa_ext_stream_restore_write` in `PA_UPDATE_REPLACE` mode, without applying it to running streams.
    func writeRestoreEntry(_ e: RestoreEntry, _ done: @escaping (Bool) -> Void) {
        guard let c = context else { return done(false) }
        var info = pa_ext_stream_restore_info()
        info.channel_map = e.channelMap
        info.volume = cvolume(e.volume) ?? pa_cvolume()
        info.mute = e.muted ? 1 : 0
        let r = register(.success(done))
        e.name.withCString { name in
            info.name = name
            let write = { (device: UnsafePointer<CChar>?) in
                info.device = device
                self.track(
                    pa_ext_stream_restore_write(c, PA_UPDATE_REPLACE, &info, 1, 0, successCallback, r),
                    request: r, "ext_stream_restore_write")
            }
            if let d = e.device { d.withCString { write($0) } } else { write(nil) }
        }
    }
}

/// Collects the items of one info request and hands them over at its end: the first (or nil) for a single
/// object, all of them for a list.
final class ItemReplies {
    private var items: [Any] = []
    private let finish: ([Any], Bool) -> Void

    init<T>(one done: @escaping (T?) -> Void) {
        finish = { items, ok in done(ok ? items.first as? T : nil) }
    }

    init<T>(all done: @escaping ([T]) -> Void) {
        finish = { items, _ in done(items.compactMap { $0 as? T }) }
    }

    func add(_ item: Any) { items.append(item) }

    func end(ok: Bool) { finish(items, ok) }
}

// MARK: - C callbacks (non-isolated, capture nothing)

private let successCallback: pa_context_success_cb_t = { c, success, userdata in
    guard let (me, n) = PulseContext.take(c, userdata) else { return }
    me.deliver(success: success != 0, request: n)
}

private let sinkInputCallback: pa_sink_input_info_cb_t = { c, info, eol, userdata in
    guard let (me, n) = PulseContext.take(c, userdata) else { return }
    let s = info.map { p -> RawStream in
        let i = p.pointee
        return RawStream(
            index: i.index, isRecord: false, client: i.client == UInt32.max ? nil : i.client, device: i.sink,
            properties: properties(i.proplist), corked: i.corked != 0, muted: i.mute != 0, volume: channels(i.volume),
            hasVolume: i.has_volume != 0, channelMap: i.channel_map)
    }
    me.deliver(item: s, eol: eol, request: n)
}

private let sourceOutputCallback: pa_source_output_info_cb_t = { c, info, eol, userdata in
    guard let (me, n) = PulseContext.take(c, userdata) else { return }
    let s = info.map { p -> RawStream in
        let i = p.pointee
        return RawStream(
            index: i.index, isRecord: true, client: i.client == UInt32.max ? nil : i.client, device: i.source,
            properties: properties(i.proplist), corked: i.corked != 0, muted: i.mute != 0, volume: channels(i.volume),
            hasVolume: i.has_volume != 0, channelMap: i.channel_map)
    }
    me.deliver(item: s, eol: eol, request: n)
}

private let sinkCallback: pa_sink_info_cb_t = { c, info, eol, userdata in
    guard let (me, n) = PulseContext.take(c, userdata) else { return }
    let d = info.map { p -> RawDevice in
        let i = p.pointee
        let available = i.active_port.map { Int($0.pointee.available) != Int(PA_PORT_AVAILABLE_NO.rawValue) } ?? true
        let props = properties(i.proplist)
        return RawDevice(
            index: i.index, name: string(i.name), available: available, linkGroup: props["node.link-group"],
            ownerClient: props["client.id"])
    }
    me.deliver(item: d, eol: eol, request: n)
}

private let sourceCallback: pa_source_info_cb_t = { c, info, eol, userdata in
    guard let (me, n) = PulseContext.take(c, userdata) else { return }
    let d = info.map { p -> RawDevice in
        let i = p.pointee
        let available = i.active_port.map { Int($0.pointee.available) != Int(PA_PORT_AVAILABLE_NO.rawValue) } ?? true
        return RawDevice(
            index: i.index, name: string(i.name), available: available, isMonitor: i.monitor_of_sink != UInt32.max,
            muted: i.mute != 0)
    }
    me.deliver(item: d, eol: eol, request: n)
}

private let clientCallback: pa_client_info_cb_t = { c, info, eol, userdata in
    guard let (me, n) = PulseContext.take(c, userdata) else { return }
    let cl = info.map { RawClient(index: $0.pointee.index, properties: properties($0.pointee.proplist)) }
    me.deliver(item: cl, eol: eol, request: n)
}

// MARK: - Conversions

private func string(_ p: UnsafePointer<CChar>?) -> String {
    p.map { String(cString: $0) } ?? ""
}

/// The properties audiod reads, copied out of a `pa_proplist` (`pa_proplist_gets`).
private let wantedProperties = [
    "application.process.id", "application.name", "application.id", "application.process.binary", "media.role",
    "media.name", "audiod.session", "module-stream-restore.id",
    // What a role loopback of the session manager shows (ServerSession.isRoleLoopback).
    "node.passive", "node.link-group", "client.id",
    // A stream's PipeWire node, for the server's ramps (PulseBackend's `beginRamp`).
    "object.id",
]

private func properties(_ p: OpaquePointer?) -> [String: String] {
    guard let p else { return [:] }
    var out: [String: String] = [:]
    for key in wantedProperties {
        if let v = pa_proplist_gets(p, key) { out[key] = String(cString: v) }
    }
    return out
}

/// The `channels` first values of a `pa_cvolume`.
private func channels(_ v: pa_cvolume) -> [UInt32] {
    var v = v
    let n = min(Int(v.channels), Int(PA_CHANNELS_MAX))
    return withUnsafeBytes(of: &v.values) { Array($0.bindMemory(to: UInt32.self).prefix(n)) }
}

/// A `pa_cvolume` from channel values; nil when there are none or too many (`pa_cvolume_valid` would refuse it).
private func cvolume(_ values: [UInt32]) -> pa_cvolume? {
    guard !values.isEmpty, values.count <= Int(PA_CHANNELS_MAX) else { return nil }
    var cv = pa_cvolume()
    cv.channels = UInt8(values.count)
    withUnsafeMutableBytes(of: &cv.values) { raw in
        let dst = raw.bindMemory(to: UInt32.self)
        for (i, v) in values.enumerated() { dst[i] = min(v, PA_VOLUME_MAX) }
    }
    return cv
}

// MARK: - Errors

/// A libpulse error (`pa_context_errno`), with `pa_strerror`'s text.
public struct PulseError: Error, Equatable, Sendable, CustomStringConvertible {
    public struct Code: RawRepresentable, Equatable, Sendable {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }
        public static let badState = Code(rawValue: Int32(PA_ERR_BADSTATE.rawValue))
        public static let outOfMemory = Code(rawValue: Int32(PA_ERR_INTERNAL.rawValue))
    }

    public let code: Code
    /// What audiod was doing.
    public let context: String

    public init(code: Code, context: String) {
        self.code = code
        self.context = context
    }

    static func last(_ c: OpaquePointer, _ what: String) -> PulseError {
        PulseError(code: Code(rawValue: pa_context_errno(c)), context: what)
    }

    /// `pa_strerror`.
    public var message: String { pa_strerror(code.rawValue).map { String(cString: $0) } ?? "error \(code.rawValue)" }

    public var description: String { "\(context): \(message)" }
}
