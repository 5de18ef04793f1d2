import CPulse
import PulseLoop

/// A connection of its own holding one silent, corked playback stream that WirePlumber files under a given
/// restore-database key: how audiod repairs WirePlumber 0.5's stream state, which takes no write through the pulse
/// protocol (its `state-stream.lua` accepts only the Notification key from pipewire-pulse's route-settings) but
/// saves every Props change of a stream into the stream's key, and gives a new stream of the key what it saved.
///
/// WirePlumber's key is the first of `media.role`, `application.id`, `application.name` a stream has, and a stream
/// has its client's properties too: the probe's own connection carries the key's property and no other of those
/// above it (audiod's main connection says `media.role=production`, which would file the probe there).
final class RepairProbe {
    /// What WirePlumber files a stream of `key` under, as the client properties of a probe; nil for keys a probe
    /// cannot stand for (record streams, and keys by media name, which every client's `application.name` outranks).
    static func clientProperties(forKey key: String) -> [String: String]? {
        let prefix = "sink-input-by-"
        guard key.hasPrefix(prefix) else { return nil }
        let rest = key.dropFirst(prefix.count)
        guard let colon = rest.firstIndex(of: ":") else { return nil }
        let kind = rest[..<colon]
        let value = String(rest[rest.index(after: colon)...])
        guard !value.isEmpty else { return nil }
        switch kind {
        case "media-role": return ["media.role": value, "application.name": "audiod restore-database repair"]
        case "application-id": return ["application.id": value, "application.name": "audiod restore-database repair"]
        case "application-name": return ["application.name": value]
        default: return nil
        }
    }

    private var context: OpaquePointer?
    private var stream: OpaquePointer?
    private var ready: (UInt32?) -> Void
    private let connected: (UInt32) -> Void
    private var retained = false

    /// Connects to `server` and opens the stream. `connected` gets the probe's client index once its connection is
    /// up, before the stream exists (so that the stream is known as the probe's when the server lists it); `ready`
    /// gets the stream's sink-input index once the server has made it, or nil if it could not be made (then the
    /// probe has closed itself). Call `close()` once done.
    init(
        loop: MainLoop, server: String?, clientProperties: [String: String],
        connected: @escaping (UInt32) -> Void, ready: @escaping (UInt32?) -> Void
    ) {
        self.ready = ready
        self.connected = connected
        let props = pa_proplist_new()
        defer { pa_proplist_free(props) }
        for (k, v) in clientProperties { pa_proplist_sets(props, k, v) }
        guard let c = pa_context_new_with_proplist(loop.api, clientProperties["application.name"] ?? "audiod", props)
        else {
            fail()
            return
        }
        context = c
        _ = Unmanaged.passRetained(self)
        retained = true
        pa_context_set_state_callback(
            c,
            { ctx, userdata in
                guard let userdata, let ctx else { return }
                Unmanaged<RepairProbe>.fromOpaque(userdata).takeUnretainedValue().contextChanged(ctx)
            }, Unmanaged.passUnretained(self).toOpaque())
        if pa_context_connect(c, server, PA_CONTEXT_NOAUTOSPAWN, nil) < 0 { fail() }
    }

    private func contextChanged(_ c: OpaquePointer) {
        let s = pa_context_get_state(c)
        if s == PA_CONTEXT_FAILED || s == PA_CONTEXT_TERMINATED { return fail() }
        guard s == PA_CONTEXT_READY, stream == nil else { return }
        connected(pa_context_get_index(c))
        // Two channels at 48 kHz: the shape of the apps' streams whose entry it stands for.
        var spec = pa_sample_spec(format: PA_SAMPLE_S16LE, rate: 48000, channels: 2)
        guard let st = pa_stream_new(c, "audiod restore-database repair", &spec, nil) else { return fail() }
        stream = st
        pa_stream_set_state_callback(
            st,
            { st, userdata in
                guard let userdata, let st else { return }
                Unmanaged<RepairProbe>.fromOpaque(userdata).takeUnretainedValue().streamChanged(st)
            }, Unmanaged.passUnretained(self).toOpaque())
        // Corked, it never plays: nothing is heard, and the server asks it for no data.
        if pa_stream_connect_playback(st, nil, nil, PA_STREAM_START_CORKED, nil, nil) < 0 { fail() }
    }

    private func streamChanged(_ st: OpaquePointer) {
        let s = pa_stream_get_state(st)
        if s == PA_STREAM_FAILED || s == PA_STREAM_TERMINATED { return fail() }
        guard s == PA_STREAM_READY else { return }
        let answer = ready
        ready = { _ in }
        answer(pa_stream_get_index(st))
    }

    /// The connection or the stream failed: the probe answers nil and closes itself (also when it fails in `init`,
    /// before its owner holds it).
    private func fail() {
        let answer = ready
        ready = { _ in }
        answer(nil)
        close()
    }

    /// Still connected or connecting (not failed, not closed).
    var isOpen: Bool { context != nil }

    /// Ends the stream and the connection. Safe to call twice.
    func close() {
        ready = { _ in }
        if let st = stream {
            pa_stream_set_state_callback(st, nil, nil)
            pa_stream_disconnect(st)
            pa_stream_unref(st)
            stream = nil
        }
        if let c = context {
            pa_context_set_state_callback(c, nil, nil)
            pa_context_disconnect(c)
            pa_context_unref(c)
            context = nil
        }
        if retained {
            retained = false
            Unmanaged.passUnretained(self).release()
        }
    }
}
