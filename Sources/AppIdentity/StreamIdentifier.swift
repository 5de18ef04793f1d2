import AudioPolicy

/// Who plays a stream: the host's word on its process (a believed pid, the Flatpak app), the process chain, and the
/// app as the desktop knows it. Reading that costs /proc reads per stream, and a burst of streams from one process (a
/// browser's tabs, a game's effects) would read the same files again and again; so an answer is kept while the
/// process it names is still the same one, and for at most `keepNanoseconds` (a parent that exits changes the chain).
///
/// "The same one": where the sound server vouches for it — on PulseAudio a stream on the same, still connected client
/// connection comes from the same process, since a connection dies with its process and PulseAudio never gives a
/// connection's index to another — the answer stands without a read; otherwise (and on PipeWire, whose ids may be
/// given again) the process's start time in /proc must match the one the answer was made with.
///
/// A value confined to its owner's thread; time comes in as an argument, and /proc through `Processes`, so the rules
/// run in tests without a process of their own.
public struct StreamIdentifier {
    /// What it reads of processes (`/proc` in the daemon).
    public struct Processes {
        /// What the host says of the process behind a stream's properties.
        public var host: ([String: String]) -> StreamIdentity.Host
        /// The pid and its ancestors, with the pid's start time (nil: it does not exist).
        public var chainAndStart: (UInt32) -> (chain: [UInt32], start: UInt64?)
        /// A pid's start time, nil when no such process runs.
        public var startTime: (UInt32) -> UInt64?
        /// What identity resolution needs of a live process, with notes for the debug log.
        public var facts:
            (_ pid: UInt32, _ chain: [UInt32], _ applicationID: String?, _ flatpakID: String?) -> (
                ProcessFacts, [String]
            )

        public init(
            host: @escaping ([String: String]) -> StreamIdentity.Host,
            chainAndStart: @escaping (UInt32) -> (chain: [UInt32], start: UInt64?),
            startTime: @escaping (UInt32) -> UInt64?,
            facts: @escaping (UInt32, [UInt32], String?, String?) -> (ProcessFacts, [String])
        ) {
            self.host = host
            self.chainAndStart = chainAndStart
            self.startTime = startTime
            self.facts = facts
        }

        public static var proc: Processes {
            Processes(
                host: StreamIdentity.host, chainAndStart: ProcessTable.chainAndStart,
                startTime: { ProcessTable.stat($0)?.start },
                facts: { ProcessReader.facts(pid: $0, chain: $1, applicationID: $2, flatpakID: $3) })
        }
    }

    /// Who plays a stream.
    public struct Identified {
        public var host: StreamIdentity.Host
        /// The believed pid and its ancestors (just the pid when its process has exited; empty without one).
        public var chain: [UInt32]
        public var app: AppProfile?
        /// What could not be read, and what was found: for the debug log.
        public var notes: [String]
    }

    private struct Kept {
        var host: StreamIdentity.Host
        var chain: [UInt32]
        var start: UInt64
        var at: UInt64
        var client: UInt32?
        var app: AppProfile?
    }

    public static let keepNanoseconds: UInt64 = 1_000_000_000
    /// More answers than this at once means a churn of processes: the old ones go.
    public static let keptAtMost = 64

    private var processes: Processes
    private var kept: [[String?]: Kept] = [:]
    /// The desktop's entries; nil until they have been read (then only what /proc says names an app).
    public private(set) var entries: DesktopEntrySnapshot?
    /// Whether answers carry their notes (`--log-level debug`): none are formatted otherwise.
    public var keepsNotes = false

    public init(processes: Processes = .proc) {
        self.processes = processes
    }

    /// Who plays the stream with these properties on client connection `client`. `clientVouches`: the server keeps
    /// client indices for the life of their process and the client is still connected (PulseAudio).
    public mutating func identify(
        _ props: [String: String], client: UInt32?, clientVouches: Bool, now: UInt64
    ) -> Identified {
        let key = StreamIdentity.sourceKeys.map { props[$0] }
        if let k = kept[key], now - k.at < Self.keepNanoseconds, let pid = k.host.pid {
            if clientVouches, let client, k.client == client {
                return Identified(host: k.host, chain: k.chain, app: k.app, notes: [])
            }
            if let start = processes.startTime(pid), start == k.start {
                return Identified(host: k.host, chain: k.chain, app: k.app, notes: [])
            }
        }
        let host = processes.host(props)
        let walked = host.pid.map(processes.chainAndStart)
        var chain = walked?.chain ?? []
        // A process that already exited still has its pid: the engine matches by the pid first.
        if chain.isEmpty, let pid = host.pid { chain = [pid] }
        var notes: [String] = []
        let app = profile(host: host, chain: chain, props: props, notes: &notes)
        if kept.count >= Self.keptAtMost {
            kept = kept.filter { now - $0.value.at < Self.keepNanoseconds }
            if kept.count >= Self.keptAtMost { kept.removeAll() }
        }
        // Only a pid the stream itself names (the kernel's, or the reported one the host vouched for) is kept: any
        // other answer came from scanning the sandboxes, which the next sandbox with the same inner pid and binary
        // changes.
        let named = [props["pipewire.sec.pid"], props["application.process.id"]].compactMap {
            $0.flatMap { UInt32($0) }
        }
        if let pid = host.pid, named.contains(pid), let start = walked?.start {
            kept[key] = Kept(host: host, chain: chain, start: start, at: now, client: client, app: app)
        }
        return Identified(host: host, chain: chain, app: app, notes: notes)
    }

    /// The desktop entries were read, or changed: every answer kept is made again at its stream's next report.
    public mutating func entriesChanged(_ index: DesktopEntrySnapshot) {
        entries = index
        kept.removeAll()
    }

    /// How many answers are kept (for tests and the debug log).
    public var keptCount: Int { kept.count }

    /// Who the app is, as the desktop knows it: read from /proc once per process, resolved against the desktop
    /// entries. Without a believed pid, only what the stream says.
    private func profile(host: StreamIdentity.Host, chain: [UInt32], props: [String: String], notes: inout [String])
        -> AppProfile
    {
        let index: any DesktopEntries = entries ?? NoDesktopEntries()
        guard let pid = host.pid else {
            let facts = ProcessFacts(
                pid: 0, flatpakID: host.app, applicationID: props["application.id"],
                program: props["application.process.binary"])
            return IdentityResolver.resolve(facts, index)
        }
        var (facts, read) = processes.facts(pid, chain, props["application.id"], host.app)
        if facts.program == nil { facts.program = props["application.process.binary"] }
        let p = IdentityResolver.resolve(facts, index)
        guard keepsNotes else { return p }
        notes += read.map { "\($0); the next-weaker evidence decides" }
        if let id = p.id {
            notes.append(
                "pid \(pid) is \(id.name), found through \(id.source.phrase)\(p.entry.map { "; desktop entry \($0.path)" } ?? "")"
            )
        }
        return p
    }
}

/// No desktop entries (before they are read).
struct NoDesktopEntries: DesktopEntries {
    func entry(id: String) -> DesktopEntry? { nil }
    func entries(program: String) -> [DesktopEntry] { [] }
}
