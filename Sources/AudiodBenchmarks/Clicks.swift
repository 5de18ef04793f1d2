import AudiodTestKit
import DBusService
import DBusTransport
import Foundation
import Glibc

/// What one change of a stream's level sounds like, read from a recording of a low tone (a game's hum) that the
/// change silences, ducks or gives back. A hard step splashes energy over the whole spectrum — a click; a fade long
/// and smooth enough keeps it near the tone.
struct ClickMeasure {
    /// The most energy above 1 kHz in any 40 ms (Hann) window centred within the change, re the tone's energy in the
    /// same window of steady play, in dB.
    var splatterDb: Double
    /// The peak of the second difference within the change, re its peak over steady play, in dB.
    var secondDifferenceDb: Double
    /// From 10 % to 90 % of the way from the level before to the level after, in ms.
    var lengthMs: Double
    /// The level after re the level before, in dB (a duck to 0.2: −14 dB).
    var stepDb: Double
}

struct ClickRow {
    var transition: String
    var by: String
    var measures: [ClickMeasure] = []
    /// Rounds the method could not read: the level did not change by 6 dB, or no change was found in the recording.
    var missed = 0
    /// Rounds whose recording has a dropout (`firstDropout`): not counted, since the gap clicks whatever audiod did.
    var dropouts = 0
}

/// Where (in milliseconds) the recording first drops out inside the tone: a run of 64 to 256 samples of exact
/// silence with the tone above 1 % of full scale within 10 ms on both sides. No fade makes that (a 100 Hz tone at 1 %
/// is zero for less than a sample at its crossings), and audiod never silences a stream and gives it back within a few
/// milliseconds; a longer silence is left to the measure, where a mute audiod should not have made would show.
/// PipeWire 1.4 on our 2-core VM drops 128 samples at a time (2.7 ms) about once a second, during steady play too
/// (`pactl` rows included), and each such gap reads as a click of −19 to −35 dB.
func firstDropout(_ x: [Int16], rate: Double) -> Double? {
    let side = Int(rate * 0.01)
    var i = side
    while i < x.count - side {
        guard x[i] == 0 else {
            i += 1
            continue
        }
        var j = i
        while j < x.count && x[j] == 0 { j += 1 }
        if j - i >= 64, j - i <= 256, j + side <= x.count, x[(i - side)..<i].contains(where: { abs(Int($0)) > 327 }),
            x[j..<(j + side)].contains(where: { abs(Int($0)) > 327 })
        {
            return Double(i) / rate * 1000
        }
        i = j
    }
    return nil
}

struct ClickResults {
    var rows: [ClickRow] = []
    var rate: UInt32 = 0
}

let clickTone = 100.0
let clickAmplitude = 0.5

/// One change in `x`, a recording with at least 250 ms of steady play at each end. Nil when the level does not
/// change by 6 dB.
func measureChange(_ x: [Int16], rate: Double) -> ClickMeasure? {
    let period = Int(rate / clickTone)
    let steady = Int(rate * 0.25)
    guard x.count >= 2 * steady + 4 * period else { return nil }
    // The amplitude over one period of the tone, around each sample (from the running sum of squares).
    var sums = [Double](repeating: 0, count: x.count + 1)
    for i in 0..<x.count { sums[i + 1] = sums[i] + Double(x[i]) * Double(x[i]) }
    func envelope(_ i: Int) -> Double {
        let lo = max(0, i - period / 2)
        let hi = min(x.count, lo + period)
        return ((sums[hi] - sums[lo]) / Double(hi - lo) * 2).squareRoot()
    }
    func median(_ xs: [Double]) -> Double { dpercentile(xs, 0.5) ?? 0 }
    let hop = max(1, period / 20)
    let before = median(stride(from: period, to: steady, by: hop).map(envelope))
    let after = median(stride(from: x.count - steady, to: x.count - period, by: hop).map(envelope))
    let louder = max(before, after)
    guard louder > 0, abs(20 * log10(max(before, 1) / max(after, 1))) >= 6 else { return nil }
    // Where the envelope is half way: the change, coarsely.
    let half = (before + after) / 2
    guard
        let coarse = stride(from: steady, to: x.count - steady, by: hop).first(where: {
            (envelope($0) - half) * (before - after) <= 0
        })
    else { return nil }
    // The tone itself, fitted over the steady play at the louder end (the same stretch the level was read from, so
    // a long fade does not leak into it): the gain at each sample is the recording over it, wherever the tone is far
    // enough from zero to divide by.
    let w = 2 * Double.pi * clickTone / rate
    let fit = before >= after ? period..<steady : (x.count - steady)..<(x.count - period)
    let whole = fit.lowerBound..<(fit.lowerBound + (fit.count / period) * period)
    guard whole.count >= 4 * period else { return nil }
    var a = 0.0
    var b = 0.0
    for n in whole {
        a += Double(x[n]) * sin(w * Double(n))
        b += Double(x[n]) * cos(w * Double(n))
    }
    a *= 2 / Double(whole.count)
    b *= 2 / Double(whole.count)
    let amplitude = (a * a + b * b).squareRoot()
    guard amplitude > 0 else { return nil }
    // The gain in bins of a quarter of a millisecond, from the samples where the tone is above half its amplitude.
    let bin = max(1, Int(rate / 4000))
    var gains: [(at: Int, gain: Double)] = []
    var start = 0
    while start + bin <= x.count {
        var sum = 0.0
        var count = 0
        for n in start..<(start + bin) {
            let ref = a * sin(w * Double(n)) + b * cos(w * Double(n))
            if abs(ref) >= amplitude / 2 {
                sum += Double(x[n]) / ref
                count += 1
            }
        }
        if count > 0 { gains.append((start + bin / 2, sum / Double(count))) }
        start += bin
    }
    let g0 = before / louder
    let g1 = after / louder
    func level(_ f: Double) -> Double { g0 + f * (g1 - g0) }
    func past(_ g: Double, _ f: Double) -> Bool { (g - level(f)) * (g1 - g0) >= 0 }
    guard let mid = gains.firstIndex(where: { $0.at >= coarse - 2 * period && past($0.gain, 0.5) }) else {
        return nil
    }
    // 10 %: the last bin before the middle still short of it; 90 %: the first after the middle past it.
    let t10 = gains[..<mid].lastIndex(where: { !past($0.gain, 0.1) }).map { gains[$0].at } ?? gains[mid].at
    let t90 = gains[mid...].first(where: { past($0.gain, 0.9) })?.at ?? gains[mid].at
    let lengthMs = Double(max(0, t90 - t10)) * 1000 / rate

    // Energy above 1 kHz in 40 ms Hann windows centred from 10 % to 90 %, in 5 ms hops; the reference is the same
    // window over steady play on the louder side.
    let n = Int(rate * 0.04)
    let hann = (0..<n).map { 0.5 - 0.5 * cos(2 * Double.pi * Double($0) / Double(n - 1)) }
    let firstHigh = Int((1000 * Double(n) / rate).rounded(.up))
    let cosines = (0..<n).map { cos(2 * Double.pi * Double($0) / Double(n)) }
    let sines = (0..<n).map { sin(2 * Double.pi * Double($0) / Double(n)) }
    func spectrum(from lo: Int) -> (high: Double, all: Double)? {
        guard lo >= 0, lo + n <= x.count else { return nil }
        var high = 0.0
        var all = 0.0
        let v = (0..<n).map { Double(x[lo + $0]) * hann[$0] }
        for k in 0...(n / 2) {
            var re = 0.0
            var im = 0.0
            var j = 0
            for i in 0..<n {
                re += v[i] * cosines[j]
                im -= v[i] * sines[j]
                j += k
                if j >= n { j -= n }
            }
            let p = re * re + im * im
            all += p
            if k >= firstHigh { high += p }
        }
        return (high, all)
    }
    guard let reference = spectrum(from: before >= after ? fit.lowerBound : fit.upperBound - n), reference.all > 0
    else { return nil }
    var worst: Double?
    for c in stride(from: t10, through: max(t10, t90), by: max(1, Int(rate * 0.005))) {
        if let s = spectrum(from: c - n / 2) { worst = max(worst ?? 0, s.high) }
    }
    // No window fits around the change: nothing measured, rather than a clean figure.
    guard let worst else { return nil }
    let splatterDb = 10 * log10(max(worst, 1e-3) / reference.all)

    // The second difference: its peak within the change (20 ms either side) over its peak in steady play.
    func secondDifference(_ r: Range<Int>) -> Double {
        var peak = 0.0
        for i in max(1, r.lowerBound)..<min(x.count - 1, r.upperBound) {
            peak = max(peak, abs(Double(x[i + 1]) - 2 * Double(x[i]) + Double(x[i - 1])))
        }
        return peak
    }
    let margin = Int(rate * 0.02)
    let steadyPeak = secondDifference(fit)
    let changePeak = secondDifference((t10 - margin)..<(t90 + margin))
    let secondDifferenceDb = 20 * log10(max(changePeak, 1) / max(steadyPeak, 1))
    return ClickMeasure(
        splatterDb: splatterDb, secondDifferenceDb: secondDifferenceDb, lengthMs: lengthMs,
        stepDb: 20 * log10(max(after, 1) / max(before, 1)))
}

/// A tone computed here, the level going from `from` to `to` at `at` seconds over `fade` seconds (a raised cosine;
/// 0: a step), quantised to 16 bits as the server's would be: the method's known cases.
func computedChange(rate: Double, seconds: Double = 1, at: Double = 0.5, fade: Double, from: Double = 1, to: Double = 0)
    -> [Int16]
{
    let w = 2 * Double.pi * clickTone / rate
    return (0..<Int(rate * seconds)).map { i in
        let t = Double(i) / rate
        let f = fade <= 0 ? (t < at ? 0 : 1) : min(1, max(0, (t - at) / fade))
        let g = from + (to - from) * (fade <= 0 ? f : (1 - cos(Double.pi * f)) / 2)
        return Int16((clickAmplitude * 32767 * g * sin(w * Double(i) + 0.3)).rounded())
    }
}

/// BENCH_CLICK_ROUNDS: rounds per transition (each ~1.2 s).
func clicks(_ kind: ServerKind, rounds: Int) throws -> ClickResults {
    var out = ClickResults()
    let server = try TestServer(kind)
    defer { server.stop() }
    let rate = try nullSinkRate(server)
    out.rate = rate
    let r = Double(rate)

    // The method on computed cases: a hard step, and raised-cosine fades of 5 and 50 ms.
    for (name, fade) in [
        ("a hard step, computed", 0.0), ("a 5 ms raised cosine, computed", 0.005),
        ("a 50 ms raised cosine, computed", 0.05),
    ] {
        var row = ClickRow(transition: name, by: "the method's check")
        let computed = computedChange(rate: r, fade: fade)
        // The dropout check on known cases: none of the computed changes is a dropout, and a gap of 128 samples in
        // steady play is.
        var gapped = computedChange(rate: r, at: 2, fade: 0)
        gapped.replaceSubrange(Int(r * 0.4)..<(Int(r * 0.4) + 128), with: repeatElement(0, count: 128))
        guard firstDropout(computed, rate: r) == nil, firstDropout(gapped, rate: r) != nil else {
            throw BenchFailure("the dropout check is wrong on a computed case (\(name))")
        }
        if let m = measureChange(computed, rate: r) {
            row.measures.append(m)
        } else {
            row.missed += 1
        }
        out.rows.append(row)
    }

    let tone = try rawTone(server, "hum", clickTone, rate: rate, seconds: 600, volume: clickAmplitude)
    func play(_ app: String, _ file: String, _ properties: [String] = []) throws -> (child: Child, index: UInt32) {
        let c = try server.spawn(
            ["pacat", "--playback", "--format=s16le", "--channels=1", "--rate=\(rate)", "--client-name=\(app)"]
                + properties.map { "--property=\($0)" } + [file])
        return (c, try server.waitForPlaybackStream(pid: c.pid).index)
    }
    let pre = 0.3
    let post = 0.9
    // Before a part's first round its streams play this long: audiod ramps only a stream that has played 300 ms
    // (`rampPlayingNanoseconds`; a younger one's silencing is a step by design), and a first round at `pre` came
    // within that under load (CI's brief run: one interruption round of three a −21 dB step). And longer than a
    // fade-in: the secondary-audio part's video, muted to begin with, gives the game back first, and a round that
    // began inside that fade-in would measure the fade's step, not the transition.
    let settle = 1.5
    /// One round: the recording from `pre` before the trigger to `post` after it.
    func round(_ recorder: MonitorRecorder, _ row: inout ClickRow, _ trigger: () throws -> Void) throws {
        let mark = recorder.count
        try trigger()
        let end = mark + Int(r * post)
        guard waitFor(10, { recorder.count >= end }) else { throw BenchFailure("the recording stopped") }
        let samples = recorder.samples(max(0, mark - Int(r * pre))..<end)
        let dropout = firstDropout(samples, rate: r)
        let measure = dropout == nil ? measureChange(samples, rate: r) : nil
        if dropout != nil {
            row.dropouts += 1
        } else if let measure {
            row.measures.append(measure)
        } else {
            row.missed += 1
        }
        let number = row.measures.count + row.missed + row.dropouts
        // BENCH_CLICK_SAVE=DIR: each round's recording, raw (s16le, mono, the sink's rate), to look at a bad one.
        if let dir = ProcessInfo.processInfo.environment["BENCH_CLICK_SAVE"], !dir.isEmpty {
            let name = "\(kind)-\(row.transition)-\(number)"
                .map { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." ? $0 : "_" }
            let data = samples.withUnsafeBufferPointer { Data(buffer: $0) }
            try? data.write(to: URL(fileURLWithPath: dir + "/" + String(name) + ".raw"))
        }
        // BENCH_CLICK_DUMP=1: each round's figures, to find the one behind a worst case.
        if ProcessInfo.processInfo.environment["BENCH_CLICK_DUMP"] == "1" {
            let figures =
                dropout.map { String(format: "a dropout at %.1f ms, not counted", $0) }
                ?? measure.map { String(format: "%.0f dB, %.1f ms", $0.splatterDb, $0.lengthMs) } ?? "not measured"
            print("clicks: \(kind): \(row.transition): round \(number): \(figures)")
        }
        usleep(100_000)
    }

    // The method on the server: `pactl` mutes the tone and gives it back, a hard step each way.
    do {
        let recorder = try MonitorRecorder(server, rate: rate)
        defer { recorder.stop() }
        let hum = try play("hum-app", tone)
        defer { hum.child.kill() }
        usleep(useconds_t(pre * 1e6))
        var mute = ClickRow(transition: "`pactl` mute (a hard step)", by: "the method's check")
        var unmute = ClickRow(transition: "`pactl` unmute (a hard step)", by: "the method's check")
        for _ in 0..<rounds {
            try round(recorder, &mute) { _ = try server.pactl(["set-sink-input-mute", "\(hum.index)", "1"]) }
            try round(recorder, &unmute) { _ = try server.pactl(["set-sink-input-mute", "\(hum.index)", "0"]) }
        }
        out.rows += [mute, unmute]
    }

    // audiod, with rules for the game (ambient) and the video (playback), and no linger.
    let config = try listeningConfig(server)
    let busAddress = server.environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
    let bus = try BusClient(address: busAddress, recordSignals: false)
    defer { bus.close() }
    let (audiod, _) = try startAudiod(server, config: config, client: bus, part: "-clicks")
    defer {
        audiod.signal(SIGTERM)
        _ = audiod.wait(timeout: 10)
    }
    let holder = try server.spawn(["sleep", "86400"])

    // Silent mode over a game: silenced, and given back.
    do {
        let recorder = try MonitorRecorder(server, rate: rate)
        defer { recorder.stop() }
        let game = try play("game-app", tone)
        defer { game.child.kill() }
        usleep(useconds_t(settle * 1e6))
        var on = ClickRow(transition: "silent mode on over a game", by: "audiod")
        var off = ClickRow(transition: "silent mode off: the game given back", by: "audiod")
        for _ in 0..<rounds {
            try round(recorder, &on) { try setSilentMode(bus, true) }
            try round(recorder, &off) { try setSilentMode(bus, false) }
        }
        out.rows += [on, off]
    }

    // A picture-in-picture video (playing silence) is unmuted beside a game, and muted again: the game is silenced
    // as secondary audio, and given back.
    do {
        let recorder = try MonitorRecorder(server, rate: rate)
        defer { recorder.stop() }
        let game = try play("game-app", tone)
        defer { game.child.kill() }
        let video = try play("video-app", "/dev/zero")
        defer { video.child.kill() }
        _ = try server.pactl(["set-sink-input-mute", "\(video.index)", "1"])
        usleep(useconds_t(settle * 1e6))
        var silenced = ClickRow(transition: "a game silenced as secondary audio (a video unmuted)", by: "audiod")
        var given = ClickRow(transition: "the game given back (the video muted)", by: "audiod")
        for _ in 0..<rounds {
            try round(recorder, &silenced) { _ = try server.pactl(["set-sink-input-mute", "\(video.index)", "0"]) }
            try round(recorder, &given) { _ = try server.pactl(["set-sink-input-mute", "\(video.index)", "1"]) }
        }
        out.rows += [silenced, given]
    }

    // A `duck-others` session activates over music, and deactivates.
    do {
        let recorder = try MonitorRecorder(server, rate: rate)
        defer { recorder.stop() }
        let music = try play("music-app", tone, ["media.role=music"])
        defer { music.child.kill() }
        let ducker = try bus.makeSession(pid: holder.pid, "playback", options: ["duck-others"])
        usleep(useconds_t(settle * 1e6))
        var duck = ClickRow(transition: "a duck (to 0.2)", by: "audiod")
        var unduck = ClickRow(transition: "the duck undone", by: "audiod")
        for _ in 0..<rounds {
            try round(recorder, &duck) {
                try expectSuccess(bus.session(ducker, "SetActive", [.bool(true), .strings([])]), "SetActive")
            }
            try round(recorder, &unduck) {
                try expectSuccess(bus.session(ducker, "SetActive", [.bool(false), .strings([])]), "SetActive")
            }
        }
        out.rows += [duck, unduck]
    }

    // A video (playing silence: only the music's change is heard) interrupts the music, then ends.
    do {
        let recorder = try MonitorRecorder(server, rate: rate)
        defer { recorder.stop() }
        let music = try play("music-app", tone, ["media.role=music"])
        defer { music.child.kill() }
        usleep(useconds_t(settle * 1e6))
        var interrupted = ClickRow(transition: "music interrupted by a video", by: "audiod")
        var back = ClickRow(transition: "music given back when the video ends", by: "audiod")
        for _ in 0..<rounds {
            var video: Child?
            try round(recorder, &interrupted) {
                video = try server.spawn(
                    [
                        "pacat", "--playback", "/dev/zero", "--format=s16le", "--channels=1", "--rate=\(rate)",
                        "--client-name=video-app", "--property=media.role=video",
                    ])
            }
            try round(recorder, &back) { video?.kill() }
        }
        out.rows += [interrupted, back]
    }

    // mpv (MPRIS) playing the hum is paused by a video's session and resumed through MPRIS when that ends with
    // notify: what is heard is the player's first sound after audiod's `Play`, a change audiod does not time itself.
    do {
        let recorder = try MonitorRecorder(server, rate: rate)
        defer { recorder.stop() }
        let (mpv, player) = try startMPV(
            server,
            [
                "--demuxer=rawaudio", "--demuxer-rawaudio-format=s16le", "--demuxer-rawaudio-channels=1",
                "--demuxer-rawaudio-rate=\(rate)",
            ], file: tone)
        defer { mpv.kill() }
        let viewer = try server.spawn(["sleep", "86400"])
        defer { viewer.kill() }
        let video = try bus.makeSession(pid: viewer.pid, "playback")
        usleep(useconds_t(settle * 1e6))
        var resumed = ClickRow(transition: "mpv resumed through MPRIS when the video ends", by: "audiod")
        for _ in 0..<rounds {
            try expectSuccess(bus.session(video, "SetActive", [.bool(true), .strings([])]), "SetActive")
            guard waitFor(10, { mprisStatus(server, player) == "Paused" }) else {
                throw BenchFailure("the video did not pause mpv")
            }
            // The recording before the trigger is the paused player's silence.
            usleep(useconds_t((pre + 0.2) * 1e6))
            try round(recorder, &resumed) {
                try expectSuccess(
                    bus.session(video, "SetActive", [.bool(false), .strings(["notify-others-on-deactivation"])]),
                    "SetActive")
            }
            guard waitFor(10, { mprisStatus(server, player) == "Playing" }) else {
                throw BenchFailure("mpv was not resumed")
            }
            // Past the fade-in, so that the next round's pause is not measured inside it.
            usleep(useconds_t(settle * 1e6))
        }
        out.rows.append(resumed)
    }
    return out
}

func printClicks(_ all: [(ServerKind, ClickResults)]) {
    print(
        "\n### What a policy change sounds like: a 100 Hz tone at half scale, recorded from the null sink's monitor\n")
    print(
        "| server | transition | by | rounds | energy above 1 kHz re the tone, p50 | worst | second difference re steady play, p50 | worst | 10–90 % length p50 | max | level change p50 |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    func db(_ x: Double?) -> String { x.map { String(format: "%+.0f dB", $0) } ?? "—" }
    // Below the 16-bit floor: silence.
    func level(_ x: Double?) -> String {
        guard let x else { return "—" }
        return x < -60 ? "to silence" : x > 60 ? "from silence" : db(x)
    }
    for (kind, c) in all {
        for row in c.rows {
            let m = row.measures
            print(
                "| \(kind) | \(row.transition) | \(row.by) | \(m.count)\(row.missed > 0 ? " (+\(row.missed) not measured)" : "")\(row.dropouts > 0 ? " (+\(row.dropouts) with a dropout)" : "") "
                    + "| \(db(dpercentile(m.map(\.splatterDb), 0.5))) | \(db(m.map(\.splatterDb).max())) "
                    + "| \(db(dpercentile(m.map(\.secondDifferenceDb), 0.5))) | \(db(m.map(\.secondDifferenceDb).max())) "
                    + "| \(dms(dpercentile(m.map(\.lengthMs), 0.5))) | \(dms(m.map(\.lengthMs).max())) "
                    + "| \(level(dpercentile(m.map(\.stepDb), 0.5))) |")
        }
    }
}
