// A test's own view of the sound server's playback streams, kept by a libpulse subscription: every change the
// server reports updates it, so an oracle judges the server's state without a `pactl` run per check.

import CPulse
import Foundation

/// What the server says of one playback stream.
public struct WatchedStream: Sendable, Equatable {
    public var index: UInt32
    public var pid: UInt32?
    public var name: String
    public var role: String?
    public var muted: Bool
    /// The loudest channel's volume (PA_VOLUME_NORM is 65536).
    public var volume: UInt32
    public var corked: Bool
}

/// One libpulse connection on its own threaded mainloop, subscribed to sink-input events.
public final class StreamWatcher: @unchecked Sendable {
    private let mainloop: OpaquePointer
    private let context: OpaquePointer
    private let lock = NSLock()
    private var table: [UInt32: WatchedStream] = [:]
    private var changeCount = 0
    private var lost = false
    /// Every report, in order, with its time (monotonic nanoseconds): what the server said between two checks.
    private var reports: [(at: UInt64, stream: WatchedStream)] = []

    public init(server: String) throws {
        guard let m = pa_threaded_mainloop_new() else { throw TestKitError("pa_threaded_mainloop_new failed") }
        guard let c = pa_context_new(pa_threaded_mainloop_get_api(m), "audiod-test-watcher") else {
            pa_threaded_mainloop_free(m)
            throw TestKitError("pa_context_new failed")
        }
        mainloop = m
        context = c
        let me = Unmanaged.passUnretained(self).toOpaque()
        pa_context_set_state_callback(
            c,
            { c, ud in
                guard let ud else { return }
                let w = Unmanaged<StreamWatcher>.fromOpaque(ud).takeUnretainedValue()
                let s = pa_context_get_state(c)
                if s == PA_CONTEXT_FAILED || s == PA_CONTEXT_TERMINATED { w.lock.withLock { w.lost = true } }
                pa_threaded_mainloop_signal(w.mainloop, 0)
            }, me)
        pa_context_set_subscribe_callback(
            c,
            { c, type, index, ud in
                guard let c, let ud else { return }
                let w = Unmanaged<StreamWatcher>.fromOpaque(ud).takeUnretainedValue()
                let event = type.rawValue & PA_SUBSCRIPTION_EVENT_TYPE_MASK.rawValue
                w.lock.withLock { w.changeCount += 1 }
                if event == PA_SUBSCRIPTION_EVENT_REMOVE.rawValue {
                    w.lock.withLock { _ = w.table.removeValue(forKey: index) }
                } else {
                    pa_operation_unref(pa_context_get_sink_input_info(c, index, StreamWatcher.infoCallback, ud))
                }
            }, me)
        pa_threaded_mainloop_lock(m)
        defer { pa_threaded_mainloop_unlock(m) }
        guard pa_context_connect(c, server, PA_CONTEXT_NOFLAGS, nil) >= 0, pa_threaded_mainloop_start(m) >= 0 else {
            throw TestKitError("watcher: cannot connect to \(server)")
        }
        while true {
            let s = pa_context_get_state(c)
            if s == PA_CONTEXT_READY { break }
            if s == PA_CONTEXT_FAILED || s == PA_CONTEXT_TERMINATED { throw TestKitError("watcher: connection failed") }
            pa_threaded_mainloop_wait(m)
        }
        pa_operation_unref(pa_context_subscribe(c, PA_SUBSCRIPTION_MASK_SINK_INPUT, nil, nil))
        pa_operation_unref(pa_context_get_sink_input_info_list(c, StreamWatcher.infoCallback, me))
    }

    private static let infoCallback: pa_sink_input_info_cb_t = { _, info, eol, ud in
        guard let ud, eol == 0, let i = info?.pointee else { return }
        let w = Unmanaged<StreamWatcher>.fromOpaque(ud).takeUnretainedValue()
        func prop(_ key: String) -> String? { pa_proplist_gets(i.proplist, key).map { String(cString: $0) } }
        var volume = i.volume
        let s = WatchedStream(
            index: i.index, pid: prop("application.process.id").flatMap { UInt32($0) },
            name: prop("application.name") ?? "", role: prop("media.role"), muted: i.mute != 0,
            volume: pa_cvolume_max(&volume), corked: i.corked != 0)
        let at = DispatchTime.now().uptimeNanoseconds
        w.lock.withLock {
            w.table[i.index] = s
            w.changeCount += 1
            w.reports.append((at, s))
        }
    }

    deinit {
        pa_threaded_mainloop_lock(mainloop)
        pa_context_disconnect(context)
        pa_context_unref(context)
        pa_threaded_mainloop_unlock(mainloop)
        pa_threaded_mainloop_stop(mainloop)
        pa_threaded_mainloop_free(mainloop)
    }

    /// Every playback stream the server has reported and not removed.
    public var streams: [UInt32: WatchedStream] { lock.withLock { table } }
    /// The reports of stream `index` since `after` (monotonic nanoseconds), oldest first.
    public func reports(of index: UInt32, since after: UInt64) -> [WatchedStream] {
        lock.withLock { reports.filter { $0.at >= after && $0.stream.index == index }.map(\.stream) }
    }

    /// The reports of stream `index` since `after`, each with its time (monotonic nanoseconds), oldest first.
    public func timedReports(of index: UInt32, since after: UInt64) -> [(at: UInt64, stream: WatchedStream)] {
        lock.withLock { reports.filter { $0.at >= after && $0.stream.index == index } }
    }

    /// The reports of the stream of process `pid` still kept, oldest first: the first is how it started.
    public func reports(ofPid pid: UInt32) -> [WatchedStream] {
        lock.withLock { reports.filter { $0.stream.pid == pid }.map(\.stream) }
    }

    /// Forgets the reports before `before`: a long run keeps only what the next check reads.
    public func dropReports(before: UInt64) {
        lock.withLock { reports.removeAll { $0.at < before } }
    }

    /// How many reports have come: unchanged over a while means the server is quiet.
    public var changes: Int { lock.withLock { changeCount } }
    /// The server connection is gone (the server stopped).
    public var disconnected: Bool { lock.withLock { lost } }

    /// Waits until no report has come for `quiet` seconds (at most `timeout`).
    @discardableResult
    public func settle(quiet: Double = 0.3, timeout: Double = 4) -> Bool {
        let end = Date().addingTimeInterval(timeout)
        var last = changes
        var since = Date()
        while Date() < end {
            usleep(20_000)
            let now = changes
            if now != last {
                last = now
                since = Date()
            } else if Date().timeIntervalSince(since) >= quiet {
                return true
            }
        }
        return false
    }
}
