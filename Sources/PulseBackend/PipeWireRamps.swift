// PipeWire (0.3.68 and later) can ramp a stream node's own volume factor inside the server, sample by sample; a
// pulse client cannot ask for that (pipewire-pulse offers no ramp), so audiod speaks PipeWire's native protocol
// for it, on the same loop as everything else. The factor only carries the transition: what a user can see and
// undo — the mute — is still written through the pulse protocol, after which the factor goes back to 1.0
// (docs/FADES.md, "The traps in PipeWire's ramp").

import CPipeWire
import PulseLoop

/// One native PipeWire connection, made when the pulse server turned out to be PipeWire. Loop thread only.
final class PipeWireRamps {
    private let handle: OpaquePointer
    private var watch: IOWatch?
    private var waiting: [(seq: Int32, done: () -> Void)] = []
    private let loop: MainLoop
    /// Nodes waited on until they report a factor at most this low.
    private var factorWaits: [UInt32: (atMost: Float, timer: LoopTimer?, done: (Bool) -> Void)] = [:]
    /// Called once when the connection fails; the owner closes it.
    var onLost: ((String) -> Void)?
    private var lost = false
    /// Called once when the server has described itself.
    var onReady: (() -> Void)?
    /// Called when the last change sent has been answered.
    var onIdle: (() -> Void)?
    /// Every change sent has been answered.
    var isIdle: Bool { waiting.isEmpty }
    /// The connection failed: what was waiting has been answered without the server.
    var isLost: Bool { lost }
    private var announced = false

    /// The native socket beside a pulse socket at `…/pulse/native` (pipewire-pulse's layout), or nil for
    /// libpipewire's default (`PIPEWIRE_REMOTE`, then `$XDG_RUNTIME_DIR/pipewire-0`).
    static func remote(besidePulseServer server: String?) -> String? {
        guard var path = server else { return nil }
        if path.hasPrefix("unix:") { path.removeFirst(5) }
        guard path.hasPrefix("/"), path.hasSuffix("/pulse/native") else { return nil }
        return String(path.dropLast("/pulse/native".count)) + "/pipewire-0"
    }

    init(remote: String?, loop: MainLoop) throws(RampError) {
        var error = [CChar](repeating: 0, count: 256)
        guard let h = audiod_pw_open(remote, &error, error.count) else {
            throw RampError(
                message: String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        handle = h
        self.loop = loop
        watch = loop.watch(fd: audiod_pw_fd(h), events: [.input]) { [weak self] _ in self?.dispatch() }
    }

    deinit {
        watch?.cancel()
        audiod_pw_close(handle)
    }

    struct RampError: Error { var message: String }

    /// The server has described itself.
    var isReady: Bool { audiod_pw_state(handle) == 1 }
    var serverVersion: String { String(cString: audiod_pw_server_version(handle)) }

    /// PipeWire ramps a node's factor since 0.3.68.
    var ramps: Bool { isReady && Self.ramps(version: serverVersion) }

    static func ramps(version: String) -> Bool {
        let parts = version.split(separator: ".").map { Int($0.prefix { $0.isNumber }) ?? 0 }
        guard parts.count >= 3 else { return false }
        return (parts[0], parts[1], parts[2]) >= (0, 3, 68)
    }

    /// Sets the node's factor, ramped over `rampSamples` (0: at once) in steps of `stepSamples`, its mute when
    /// `mute` is given, and its channel volumes (linear) when `channelVolumes` is given — all in one `Props`; `done`
    /// runs once the server has passed the change on. False when it could not be sent.
    @discardableResult
    func set(
        node: UInt32, factor: Float, rampSamples: Int32 = 0, stepSamples: Int32 = 1, mute: Bool? = nil,
        channelVolumes: [Float]? = nil, done: @escaping () -> Void = {}
    ) -> Bool {
        let volumes = channelVolumes ?? []
        let seq = volumes.withUnsafeBufferPointer { v in
            audiod_pw_set_volume(
                handle, node, factor, rampSamples, max(1, stepSamples), mute.map { $0 ? 1 : 0 } ?? -1,
                v.baseAddress, UInt32(v.count))
        }
        guard seq >= 0 else { return false }
        waiting.append((seq, done))
        return true
    }

    func release(node: UInt32) {
        if let w = factorWaits.removeValue(forKey: node) {
            w.timer?.cancel()
            w.done(false)
        }
        audiod_pw_release(handle, node)
    }

    /// Forgets what the node last reported of its factor and listens for its next reports: call before the change
    /// to wait for (`whenFactor`).
    func watchFactor(node: UInt32) -> Bool { audiod_pw_watch_factor(handle, node) >= 0 }

    /// Calls `done(true)` once the node (watched with `watchFactor`) has reported a factor of at most `atMost` —
    /// the node itself has it, in the process that mixes it, not only the server — or `done(false)` after
    /// `timeout` nanoseconds, or when the connection goes.
    func whenFactor(node: UInt32, atMost: Float, timeout: UInt64, _ done: @escaping (Bool) -> Void) {
        if let old = factorWaits.removeValue(forKey: node) {
            old.timer?.cancel()
            old.done(false)
        }
        let timer = loop.timer(afterNanoseconds: timeout) { [weak self] in
            guard let w = self?.factorWaits.removeValue(forKey: node) else { return }
            w.done(false)
        }
        // No timer to be had (no timerfd left): no wait that might never end.
        guard timer != nil else { return done(false) }
        factorWaits[node] = (atMost, timer, done)
        checkFactorWaits()
    }

    private func checkFactorWaits() {
        for (node, w) in factorWaits {
            var factor: Float = 1
            guard audiod_pw_factor(handle, node, &factor) == 1, factor <= w.atMost else { continue }
            factorWaits[node] = nil
            w.timer?.cancel()
            w.done(true)
        }
    }

    private func dispatch() {
        audiod_pw_dispatch(handle)
        if !announced, isReady {
            announced = true
            onReady?()
        }
        if !factorWaits.isEmpty { checkFactorWaits() }
        let reached = audiod_pw_done(handle)
        if !waiting.isEmpty, waiting.contains(where: { $0.seq <= reached }) {
            let ready = waiting.filter { $0.seq <= reached }
            waiting.removeAll { $0.seq <= reached }
            for w in ready { w.done() }
            if waiting.isEmpty { onIdle?() }
        }
        if audiod_pw_state(handle) < 0, !lost {
            lost = true
            watch?.cancel()
            watch = nil
            let why = String(cString: audiod_pw_last_error(handle))
            // What was waiting will not be answered; its callers go on as if it had been.
            let pending = waiting
            waiting.removeAll()
            for w in pending { w.done() }
            let factors = factorWaits.values
            factorWaits.removeAll()
            for w in factors {
                w.timer?.cancel()
                w.done(false)
            }
            onLost?(why)
        }
    }
}
