// Reading audiod's own log after a benchmark run: where a step's time went (trace), and whether every stream
// write follows the decision that names it (debug).

/// The trace log's "step timing" lines of the activation rounds, each matched with the round whose call it
/// followed: the phases in µs from the client's call (the clocks are the same CLOCK_MONOTONIC).
/// `told`: for a stream's step, the phase in which the server told audiod of the stream (its "stream event" line),
/// before audiod had read it.
func breakdown(_ log: String, event: String, sent: [UInt64], seen: [UInt64], first: String, told: String? = nil) -> [(
    phase: String, us: [UInt64]
)] {
    var steps: [(at: UInt64, fields: [String: UInt64])] = []
    var events: [UInt64] = []
    var reads: [UInt64] = []
    for line in log.split(separator: "\n") {
        let isStep = line.contains("step timing") && line.contains(event)
        let isRead = told != nil && line.hasSuffix("] stream read")
        guard isStep || isRead || (told != nil && line.hasSuffix("] stream event") && line.contains("change=new"))
        else { continue }
        var f: [String: UInt64] = [:]
        for word in line.split(separator: " ") {
            let kv = word.split(separator: "=", maxSplits: 1)
            if kv.count == 2, let v = UInt64(kv[1]) { f[String(kv[0])] = v }
        }
        guard let at = f["at"] else { continue }
        if isStep { steps.append((at, f)) } else if isRead { reads.append(at) } else { events.append(at) }
    }
    let phases = ["decided", "logged", "journaled", "queued", "written", "acknowledged"]
    var out: [(phase: String, us: [UInt64])] =
        (told.map { [($0, []), ("the server's answer to audiod's read arrives", [])] } ?? []) + [(first, [])]
        + phases.map { ("audiod: \($0)", []) } + [("observer sees the mute", [])]
    let base = told == nil ? 0 : 2
    for (t0, t1) in zip(sent, seen) {
        // The step this round caused: the first after the call that muted something (it has "written").
        guard let step = steps.first(where: { $0.at >= t0 && $0.at <= t1 && $0.fields["written"] != nil }) else {
            continue
        }
        if told != nil {
            guard let e = events.first(where: { $0 >= t0 && $0 <= step.at }),
                let r = reads.last(where: { $0 >= e && $0 <= step.at })
            else { continue }
            out[0].us.append((e - t0) / 1000)
            out[1].us.append((r - t0) / 1000)
        }
        let inbound = (step.at - t0) / 1000
        out[base].us.append(inbound)
        for (i, p) in phases.enumerated() { if let v = step.fields[p] { out[base + i + 1].us.append(inbound + v) } }
        out[base + phases.count + 1].us.append((t1 - t0) / 1000)
    }
    return out.filter { !$0.us.isEmpty }
}

/// --log-level debug: every stream write audiod made ("write: …", logged by the backend as it sends it) must
/// be one of the effects of the decision logged just before it ("<cause> → <effects>"). Returns the writes
/// and those that no decision explains.
func unexplainedWrites(_ log: String) -> (writes: Int, unexplained: [String]) {
    var lastDecision = ""
    var writes = 0
    var unexplained: [String] = []
    for line in log.split(separator: "\n") {
        if let r = line.range(of: " write: ") {
            writes += 1
            if !lastDecision.contains(line[r.upperBound...]) { unexplained.append(String(line)) }
        } else if line.contains(" → ") {
            lastDecision = String(line)
        }
    }
    return (writes, unexplained)
}
