// Playback streams opened in this process: the benchmark knows the time a stream starts to the microsecond (a
// spawned pacat would add its own start-up, which dwarfs what is measured), and tests can open and close streams
// faster than processes start. Test and benchmark support only: the daemon's libpulse code stays in PulseBackend.

import CPulse
import Foundation

/// One libpulse connection on its own threaded mainloop, holding any number of silent playback streams.
public final class ToneClient: @unchecked Sendable {
    private let mainloop: OpaquePointer
    private let context: OpaquePointer
    private var streams: [OpaquePointer] = []

    public init(server: String, name: String) throws {
        guard let m = pa_threaded_mainloop_new() else { throw TestKitError("pa_threaded_mainloop_new failed") }
        guard let c = pa_context_new(pa_threaded_mainloop_get_api(m), name) else {
            pa_threaded_mainloop_free(m)
            throw TestKitError("pa_context_new failed")
        }
        mainloop = m
        context = c
        pa_context_set_state_callback(
            c,
            { _, ud in
                if let ud { pa_threaded_mainloop_signal(OpaquePointer(ud), 0) }
            }, UnsafeMutableRawPointer(m))
        pa_threaded_mainloop_lock(m)
        defer { pa_threaded_mainloop_unlock(m) }
        guard pa_context_connect(c, server, PA_CONTEXT_NOFLAGS, nil) >= 0, pa_threaded_mainloop_start(m) >= 0 else {
            throw TestKitError("tone client: cannot connect to \(server)")
        }
        while true {
            let s = pa_context_get_state(c)
            if s == PA_CONTEXT_READY { break }
            if s == PA_CONTEXT_FAILED || s == PA_CONTEXT_TERMINATED {
                throw TestKitError("tone client: connection failed")
            }
            pa_threaded_mainloop_wait(m)
        }
    }

    deinit {
        pa_threaded_mainloop_lock(mainloop)
        for s in streams {
            pa_stream_disconnect(s)
            pa_stream_unref(s)
        }
        pa_context_disconnect(context)
        pa_context_unref(context)
        pa_threaded_mainloop_unlock(mainloop)
        pa_threaded_mainloop_stop(mainloop)
        pa_threaded_mainloop_free(mainloop)
    }

    /// Opens a playback stream with these properties, writing silence; returns its sink-input index and the time
    /// just before it was asked for.
    @discardableResult
    /// `corked`: the stream starts paused, and `rate` is its sample rate — a corked stream at the sink's own rate
    /// costs the server least to make (no resampler, nothing to mix), for benchmarks that make thousands.
    public func open(_ properties: [String: String], device: String? = nil, corked: Bool = false, rate: UInt32 = 8000)
        throws -> (index: UInt32, startedAt: UInt64)
    {
        pa_threaded_mainloop_lock(mainloop)
        defer { pa_threaded_mainloop_unlock(mainloop) }
        let props = pa_proplist_new()
        defer { pa_proplist_free(props) }
        for (k, v) in properties { pa_proplist_sets(props, k, v) }
        // 8 kHz mono: 200 streams of it cost the server next to nothing.
        var spec = pa_sample_spec(format: PA_SAMPLE_S16LE, rate: rate, channels: 1)
        guard let s = pa_stream_new_with_proplist(context, "tone", &spec, nil, props) else {
            throw TestKitError("pa_stream_new failed")
        }
        pa_stream_set_state_callback(
            s,
            { _, ud in
                if let ud { pa_threaded_mainloop_signal(OpaquePointer(ud), 0) }
            }, UnsafeMutableRawPointer(mainloop))
        pa_stream_set_write_callback(
            s,
            { s, bytes, _ in
                guard let s else { return }
                var left = bytes
                while left > 0 {
                    let n = min(left, silence.count)
                    silence.withUnsafeBytes { _ = pa_stream_write(s, $0.baseAddress, n, nil, 0, PA_SEEK_RELATIVE) }
                    left -= n
                }
            }, nil)
        let started = DispatchTime.now().uptimeNanoseconds
        guard
            pa_stream_connect_playback(s, device, nil, corked ? PA_STREAM_START_CORKED : PA_STREAM_NOFLAGS, nil, nil)
                >= 0
        else {
            pa_stream_unref(s)
            throw TestKitError("pa_stream_connect_playback failed")
        }
        while true {
            let st = pa_stream_get_state(s)
            if st == PA_STREAM_READY { break }
            if st == PA_STREAM_FAILED || st == PA_STREAM_TERMINATED {
                pa_stream_unref(s)
                let why = String(cString: pa_strerror(pa_context_errno(context)))
                throw TestKitError("tone stream \(streams.count + 1) failed: \(why)")
            }
            pa_threaded_mainloop_wait(mainloop)
        }
        streams.append(s)
        return (pa_stream_get_index(s), started)
    }

    /// Closes the stream with this sink-input index, if this client opened it.
    public func close(_ index: UInt32) {
        pa_threaded_mainloop_lock(mainloop)
        defer { pa_threaded_mainloop_unlock(mainloop) }
        guard let i = streams.firstIndex(where: { pa_stream_get_index($0) == index }) else { return }
        pa_stream_disconnect(streams[i])
        pa_stream_unref(streams[i])
        streams.remove(at: i)
    }

    /// Closes every stream this client opened.
    public func closeAll() {
        pa_threaded_mainloop_lock(mainloop)
        for s in streams {
            pa_stream_disconnect(s)
            pa_stream_unref(s)
        }
        streams = []
        pa_threaded_mainloop_unlock(mainloop)
    }
}

private let silence = [UInt8](repeating: 0, count: 16_384)
