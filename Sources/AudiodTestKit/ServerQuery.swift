// The tests' reads of the sound server's streams, on one libpulse connection per test server. Their waits check a
// condition every 5 ms; a `pactl` per check was a new process and a new client of the server each time, which
// audiod then read as a new app (its /proc reads, its identity look-up) — load the tests made themselves, on the
// two cores they share with the servers. One connection, asked again at each check, reads the same lists `pactl list`
// printed, with nothing new for audiod to look at.

import CPulse
import Foundation

/// One libpulse connection on its own threaded mainloop, made on first use and again after the server restarted.
final class ServerQuery: @unchecked Sendable {
    // @unchecked: `mainloop` and `context` change only under `lock`; libpulse calls on them are made with the
    // threaded mainloop's lock held, as libpulse asks.
    private let server: String
    private let lock = NSLock()
    private var mainloop: OpaquePointer?
    private var context: OpaquePointer?

    init(server: String) { self.server = server }

    deinit { disconnect() }

    /// What one list request gathered; filled on the mainloop's thread, read after `done`.
    private final class Gathered: @unchecked Sendable {
        let record: Bool
        var streams: [ObservedStream] = []
        var done = false
        /// The server answered the request with an error (libpulse's `eol < 0`).
        var failed = false
        init(record: Bool) { self.record = record }
    }

    /// Every playback (or record) stream, as `pactl list sink-inputs` (`source-outputs`) shows it now.
    func streams(record: Bool, timeout: Double = 10) throws -> [ObservedStream] {
        try lock.withLock {
            do {
                return try list(record: record, timeout: timeout)
            } catch let error as ConnectionLost {
                // Dropped only now, after `list` let go of its request: the next one connects again.
                disconnect()
                throw TestKitError(error.message)
            }
        }
    }

    private struct ConnectionLost: Error { var message: String }

    /// One list request on the connection. Called with `lock` held.
    private func list(record: Bool, timeout: Double) throws -> [ObservedStream] {
        let deadline = Date().addingTimeInterval(timeout)
        let (m, c) = try connected(until: deadline)
        let box = Gathered(record: record)
        let ud = Unmanaged.passRetained(box)
        pa_threaded_mainloop_lock(m)
        let op: OpaquePointer? =
            record
            ? pa_context_get_source_output_info_list(c, Self.recordCallback, ud.toOpaque())
            : pa_context_get_sink_input_info_list(c, Self.playbackCallback, ud.toOpaque())
        pa_threaded_mainloop_unlock(m)
        guard let op else {
            ud.release()
            throw ConnectionLost(message: "the list request could not be sent to \(server)")
        }
        defer {
            pa_threaded_mainloop_lock(m)
            // A request cut short (the server went, or the deadline passed) never calls back again.
            if pa_operation_get_state(op) == PA_OPERATION_RUNNING { pa_operation_cancel(op) }
            pa_operation_unref(op)
            pa_threaded_mainloop_unlock(m)
            ud.release()
        }
        while true {
            pa_threaded_mainloop_lock(m)
            let finished = box.done
            let failed = box.failed
            let state = pa_operation_get_state(op)
            let alive = pa_context_get_state(c) == PA_CONTEXT_READY
            let streams = box.streams
            pa_threaded_mainloop_unlock(m)
            if finished {
                guard !failed else { throw TestKitError("\(server) answered the list request with an error") }
                return streams
            }
            if !alive || state == PA_OPERATION_CANCELLED {
                throw ConnectionLost(message: "the connection to \(server) was lost")
            }
            if Date() > deadline {
                throw TestKitError("\(server) did not answer a list request within \(timeout) s")
            }
            usleep(200)
        }
    }

    /// The connection, made now if there is none or the last one failed. Called with `lock` held.
    private func connected(until deadline: Date) throws -> (OpaquePointer, OpaquePointer) {
        if let m = mainloop, let c = context {
            pa_threaded_mainloop_lock(m)
            let ready = pa_context_get_state(c) == PA_CONTEXT_READY
            pa_threaded_mainloop_unlock(m)
            if ready { return (m, c) }
            disconnect()
        }
        guard let m = pa_threaded_mainloop_new() else { throw TestKitError("pa_threaded_mainloop_new failed") }
        guard let c = pa_context_new(pa_threaded_mainloop_get_api(m), "audiod-test-query") else {
            pa_threaded_mainloop_free(m)
            throw TestKitError("pa_context_new failed")
        }
        mainloop = m
        context = c
        pa_threaded_mainloop_lock(m)
        let started =
            pa_context_connect(c, server, PA_CONTEXT_NOAUTOSPAWN, nil) >= 0 && pa_threaded_mainloop_start(m) >= 0
        pa_threaded_mainloop_unlock(m)
        guard started else {
            disconnect()
            throw TestKitError("cannot connect to \(server)")
        }
        while true {
            pa_threaded_mainloop_lock(m)
            let s = pa_context_get_state(c)
            pa_threaded_mainloop_unlock(m)
            if s == PA_CONTEXT_READY { return (m, c) }
            if s == PA_CONTEXT_FAILED || s == PA_CONTEXT_TERMINATED || Date() > deadline {
                disconnect()
                throw TestKitError("cannot connect to \(server)")
            }
            usleep(200)
        }
    }

    /// Drops the connection (the next request makes a new one).
    private func disconnect() {
        guard let m = mainloop else { return }
        if let c = context {
            pa_threaded_mainloop_lock(m)
            pa_context_disconnect(c)
            pa_context_unref(c)
            pa_threaded_mainloop_unlock(m)
        }
        pa_threaded_mainloop_stop(m)
        pa_threaded_mainloop_free(m)
        mainloop = nil
        context = nil
    }

    private static func properties(_ list: OpaquePointer?) -> [String: String] {
        var out: [String: String] = [:]
        var state: UnsafeMutableRawPointer?
        while let key = pa_proplist_iterate(list, &state) {
            if let value = pa_proplist_gets(list, key) { out[String(cString: key)] = String(cString: value) }
        }
        return out
    }

    private static func channels(_ v: pa_cvolume) -> [UInt32] {
        var v = v
        let n = Int(min(v.channels, UInt8(PA_CHANNELS_MAX)))
        return withUnsafeBytes(of: &v.values) { Array($0.bindMemory(to: pa_volume_t.self).prefix(n)) }
    }

    private static func add(_ ud: UnsafeMutableRawPointer?, _ eol: Int32, _ stream: () -> ObservedStream?) {
        guard let ud else { return }
        let box = Unmanaged<Gathered>.fromOpaque(ud).takeUnretainedValue()
        if eol != 0 {
            box.failed = eol < 0
            box.done = true
        } else if let s = stream() {
            box.streams.append(s)
        }
    }

    private static let playbackCallback: pa_sink_input_info_cb_t = { _, info, eol, ud in
        add(ud, eol) {
            info.map { i in
                ObservedStream(
                    index: i.pointee.index, record: false, muted: i.pointee.mute != 0, corked: i.pointee.corked != 0,
                    volume: channels(i.pointee.volume), properties: properties(i.pointee.proplist))
            }
        }
    }

    private static let recordCallback: pa_source_output_info_cb_t = { _, info, eol, ud in
        add(ud, eol) {
            info.map { i in
                ObservedStream(
                    index: i.pointee.index, record: true, muted: i.pointee.mute != 0, corked: i.pointee.corked != 0,
                    volume: channels(i.pointee.volume), properties: properties(i.pointee.proplist))
            }
        }
    }
}
