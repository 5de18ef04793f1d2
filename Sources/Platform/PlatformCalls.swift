import AudioPolicy
import DBusTransport
import Logging

/// One call as a source reports it, in the one vocabulary of SPEC §10.
enum CallPhase: Equatable, Sendable {
    /// Ringing in, or waiting.
    case ringing
    /// Dialling, or ringing out.
    case dialing
    case active
    case held

    /// ModemManager's `Call.State` (`i`): 1 dialing, 2 ringing-out, 3 ringing-in, 4 active, 5 held, 6 waiting;
    /// 7 terminated and anything unknown is no call. Plasma's CallUtils follows the same order.
    static func modemManager(_ state: Int32) -> CallPhase? {
        switch state {
        case 1, 2: .dialing
        case 3, 6: .ringing
        case 4: .active
        case 5: .held
        default: nil
        }
    }

    /// GNOME Calls' `State` (`u`): 1 active, 2 held, 3 dialing, 4 alerting, 5 incoming, 6 waiting; 7
    /// disconnected and anything unknown is no call.
    static func gnomeCalls(_ state: UInt32) -> CallPhase? {
        switch state {
        case 1: .active
        case 2: .held
        case 3, 4: .dialing
        case 5, 6: .ringing
        default: nil
        }
    }
}

/// The platform's calls merged into one platform call (SPEC §10): every source's calls, the `CallState` precedence,
/// and whether every call only rings. The engine hears of it only when the merge changes. Confined to the loop
/// thread.
final class PlatformCalls {
    private weak var host: PlatformHost?
    private var logger: Logger
    /// Calls by source, then by the source's key for the call (its object path, never its number).
    private var calls: [String: [String: CallPhase]] = [:]
    /// The call app of a source whose calls are an app's (GNOME Calls, Plasma's dialer): its streams are the call's.
    private var apps: [String: (id: String, name: String)] = [:]
    private var last: PlatformCall?
    /// More calls than a phone has at once are not followed (a misbehaving source must not grow audiod).
    static let maximumCallsPerSource = 32

    init(host: PlatformHost, logger: Logger) {
        self.host = host
        self.logger = logger
    }

    func setApp(of source: String, id: String, name: String) { apps[source] = (id, name) }

    /// What a source says of one of its calls; nil: it is over (terminated, disconnected, unknown, gone).
    func set(_ source: String, call key: String, _ phase: CallPhase?) {
        var mine = calls[source] ?? [:]
        if let phase {
            guard mine[key] != nil || mine.count < Self.maximumCallsPerSource else {
                logger.debug(
                    "platform calls: \(source) reports more than \(Self.maximumCallsPerSource) calls; the rest are not followed"
                )
                return
            }
            mine[key] = phase
        } else {
            mine[key] = nil
        }
        calls[source] = mine.isEmpty ? nil : mine
        publish()
    }

    /// A source's whole list of calls, replacing what it said before.
    func replace(_ source: String, with list: [(String, CallPhase?)]) {
        var mine: [String: CallPhase] = [:]
        for (key, phase) in list { mine[key] = phase }
        calls[source] = mine.isEmpty ? nil : mine
        publish()
    }

    /// A source went away (or was read again from the start): its calls are over. `busLost`: its bus was lost, so
    /// they may still be going on — they end without resuming anyone (SPEC §10).
    func clear(_ source: String, busLost: Bool = false) {
        guard calls.removeValue(forKey: source) != nil else { return }
        publish(busLost: busLost)
    }

    private func publish(busLost: Bool = false) {
        let merged = Self.merge(calls, apps: apps)
        guard merged != last else { return }
        last = merged
        logger.debug("platform call: \(merged?.state.rawValue ?? "none")\(busLost ? " (a source's bus was lost)" : "")")
        host?.handle(busLost ? .platformCallSourceLost(remaining: merged) : .platformCall(merged))
    }

    /// SPEC §10: `ringing` if any call rings in or waits, else `dialing`, else `active`, else `held`; no call, nil.
    static func merge(_ calls: [String: [String: CallPhase]], apps: [String: (id: String, name: String)])
        -> PlatformCall?
    {
        let all = calls.values.flatMap(\.values)
        guard !all.isEmpty else { return nil }
        let state: CallState =
            all.contains(.ringing)
            ? .ringing : all.contains(.dialing) ? .dialing : all.contains(.active) ? .active : .held
        // The call app: that of a source with calls, in a fixed order so that two sources never flip it.
        let app = calls.keys.sorted().lazy.compactMap { apps[$0] }.first
        return PlatformCall(
            state: state, allRinging: all.allSatisfy { $0 == .ringing }, appID: app?.id,
            applicationName: app?.name ?? "")
    }
}

/// One source of calls on one bus: GNOME Calls, ModemManager or callaudiod. Through its `NameWatch` it talks only to
/// the name's owner (NO_AUTO_START on every call), believes signals only from that owner, and reads everything
/// again when the owner changes. Confined to the loop thread.
final class CallSource {
    enum Kind: String {
        case gnomeCalls = "GNOME Calls"
        case plasma = "Plasma's dialer"
        case modemManager = "ModemManager"
        case callaudiod

        var name: String {
            switch self {
            case .gnomeCalls: "org.gnome.Calls"
            case .plasma: "org.kde.telephony.CallUtils"
            case .modemManager: "org.freedesktop.ModemManager1"
            case .callaudiod: "org.mobian_project.CallAudio"
            }
        }

        /// The Flatpak apps that may own the name from a sandbox (GNOME Calls and Plasma's dialer ship as Flatpaks);
        /// nil for ModemManager, on the system bus, which no sandbox of the user's can own.
        var speakers: Set<String>? {
            switch self {
            case .gnomeCalls: ["org.gnome.Calls"]
            case .plasma: ["org.kde.phone.dialer", "org.kde.plasmadialer"]
            case .callaudiod: []
            case .modemManager: nil
            }
        }

        var root: String {
            switch self {
            case .gnomeCalls: "/org/gnome/Calls"
            case .plasma: "/org/kde/telephony/CallUtils/tel/mm"
            case .modemManager: "/org/freedesktop/ModemManager1"
            case .callaudiod: "/org/mobian_project/CallAudio"
            }
        }
    }

    static let mmVoice = "org.freedesktop.ModemManager1.Modem.Voice"
    static let mmCall = "org.freedesktop.ModemManager1.Call"
    static let gnomeCall = "org.gnome.Calls.Call"
    static let properties = "org.freedesktop.DBus.Properties"

    let kind: Kind
    private let watch: NameWatch
    private let calls: PlatformCalls
    private var logger: Logger
    var owner: String? { watch.owner }
    /// Why the name's owner is not believed; empty when it is (or there is none).
    var refused: String { watch.refused }

    init(_ kind: Kind, link: BusLink, calls: PlatformCalls, logger: Logger) {
        self.kind = kind
        self.calls = calls
        self.logger = logger
        watch = link.follow(kind.name, signals: ["type='signal',sender='\(kind.name)'"], speakers: kind.speakers)
        if kind == .gnomeCalls { calls.setApp(of: kind.rawValue, id: "org.gnome.Calls", name: "Calls") }
        if kind == .plasma { calls.setApp(of: kind.rawValue, id: "org.kde.phone.dialer", name: "Phone") }
        watch.onAppeared = { [weak self] _ in self?.appeared() }
        watch.onVanished = { [weak self] loss in self?.vanished(loss) }
        link.onSignal { [weak self] m in _ = self?.received(m) }
    }

    func start() { watch.start() }

    /// Handles a signal if it is this source's; false otherwise.
    func received(_ m: DBusMessage) -> Bool {
        guard watch.isOwner(m.sender), let path = m.path, let member = m.member else { return false }
        let a = m.arguments
        switch (kind, m.interface ?? "", member) {
        case (.gnomeCalls, "org.freedesktop.DBus.ObjectManager", "InterfacesAdded"):
            guard case .objectPath(let p)? = a.first, let ifaces = a.last?.stringKeyed else { return true }
            if let props = ifaces[Self.gnomeCall]?.propertyMap { gnomeCall(p, props) }
        case (.gnomeCalls, "org.freedesktop.DBus.ObjectManager", "InterfacesRemoved"):
            guard case .objectPath(let p)? = a.first, a.last?.stringArray?.contains(Self.gnomeCall) == true else {
                return true
            }
            calls.set(kind.rawValue, call: p, nil)
        case (.gnomeCalls, Self.properties, "PropertiesChanged"):
            guard a.first?.stringValue == Self.gnomeCall, let changed = a.dropFirst().first?.propertyMap else {
                return true
            }
            gnomeCall(path, changed)
        case (.modemManager, Self.mmVoice, "CallAdded"):
            guard case .objectPath(let p)? = a.first else { return true }
            readModemCall(p)
        case (.modemManager, Self.mmVoice, "CallDeleted"):
            guard case .objectPath(let p)? = a.first else { return true }
            calls.set(kind.rawValue, call: p, nil)
        case (.modemManager, Self.mmCall, "StateChanged"):
            // (i old, i new, u reason)
            guard a.count == 3, case .int32(let state) = a[1] else { return badValue(member, m.signature) }
            calls.set(kind.rawValue, call: path, CallPhase.modemManager(state))
        case (.modemManager, Self.properties, "PropertiesChanged"):
            guard a.first?.stringValue == Self.mmCall, let changed = a.dropFirst().first?.propertyMap,
                let v = changed["State"]
            else { return true }
            guard case .int32(let state) = v else { return badValue("State", v.signature) }
            calls.set(kind.rawValue, call: path, CallPhase.modemManager(state))
        case (.plasma, kind.name, "callAdded"), (.plasma, kind.name, "callStateChanged"):
            // (s device, s call, (i) direction, (i) state, (i) reason[, s with]): states in ModemManager's order.
            guard path == kind.root, a.count >= 5, let call = a[1].stringValue, case .structure(let f) = a[3],
                case .int32(let state)? = f.first
            else { return badValue(member, m.signature) }
            calls.set(kind.rawValue, call: call, CallPhase.modemManager(state))
        case (.plasma, kind.name, "callDeleted"):
            guard path == kind.root, a.count == 2, let call = a[1].stringValue else {
                return badValue(member, m.signature)
            }
            calls.set(kind.rawValue, call: call, nil)
        case (.plasma, kind.name, "fetchedCallsChanged"):
            // a(sssss(i)(i)(i)ixi): the call's id first, its state seventh. Every call the dialer has, so the list
            // replaces what was known.
            guard path == kind.root, case .array(_, let items)? = a.first else { return badValue(member, m.signature) }
            var now: [(String, CallPhase?)] = []
            for case .structure(let f) in items.prefix(PlatformCalls.maximumCallsPerSource) {
                guard f.count >= 7, let call = f[0].stringValue, case .structure(let s) = f[6],
                    case .int32(let state)? = s.first
                else { continue }
                now.append((call, CallPhase.modemManager(state)))
            }
            calls.replace(kind.rawValue, with: now)
        case (.callaudiod, Self.properties, "PropertiesChanged"):
            guard a.first?.stringValue == kind.name, let v = a.dropFirst().first?.propertyMap?["AudioMode"] else {
                return true
            }
            audioMode(v)
        default:
            return false
        }
        return true
    }

    private func badValue(_ what: String, _ signature: String) -> Bool {
        logger.debug("\(kind.rawValue): \(what) of type \(signature) ignored")
        return true
    }

    private func appeared() {
        logger.info("\(kind.rawValue) found: its calls interrupt others")
        readAll()
    }

    private func vanished(_ loss: NameWatch.Loss) {
        if loss == .released { logger.info("\(kind.rawValue) went away: its calls are over") }
        calls.clear(kind.rawValue, busLost: loss == .busLost)
    }

    /// Everything again, for a source found while calls may already be under way.
    private func readAll() {
        switch kind {
        case .gnomeCalls, .modemManager:
            call(kind.root, "org.freedesktop.DBus.ObjectManager", "GetManagedObjects", []) { [weak self] r in
                guard let self, let objects = r?.first?.entries else { return }
                for (key, value) in objects.prefix(256) {
                    guard case .objectPath(let p) = key, let ifaces = value.stringKeyed else { continue }
                    if let props = ifaces[Self.gnomeCall]?.propertyMap, self.kind == .gnomeCalls {
                        self.gnomeCall(p, props)
                    }
                    if let voice = ifaces[Self.mmVoice]?.propertyMap, self.kind == .modemManager {
                        for case .objectPath(let c) in voice["Calls"]?.arrayItems.prefix(
                            PlatformCalls.maximumCallsPerSource) ?? []
                        {
                            self.readModemCall(c)
                        }
                    }
                }
            }
        case .plasma:
            // The answer comes as fetchedCallsChanged.
            call(kind.root, kind.name, "fetchCalls", []) { _ in }
        case .callaudiod:
            call(kind.root, Self.properties, "Get", [.string(kind.name), .string("AudioMode")]) { [weak self] r in
                guard let self, let v = r?.first else { return }
                self.audioMode(v)
            }
        }
    }

    private func gnomeCall(_ path: String, _ props: [String: DBusValue]) {
        guard let v = props["State"] else { return }
        guard case .uint32(let state) = v else {
            _ = badValue("State", v.signature)
            return
        }
        calls.set(kind.rawValue, call: path, CallPhase.gnomeCalls(state))
    }

    private func readModemCall(_ path: String) {
        call(path, Self.properties, "Get", [.string(Self.mmCall), .string("State")]) { [weak self] r in
            guard let self else { return }
            guard case .variant(.int32(let state))? = r?.first else {
                self.logger.debug("ModemManager: a call's State could not be read")
                return
            }
            self.calls.set(self.kind.rawValue, call: path, CallPhase.modemManager(state))
        }
    }

    /// callaudiod's `AudioMode`: 1 is in a call (it has no ringing phase), 0 is not.
    private func audioMode(_ v: DBusValue) {
        let inner: DBusValue = { if case .variant(let x) = v { return x } else { return v } }()
        guard let mode = inner.uint32Value else {
            _ = badValue("AudioMode", inner.signature)
            return
        }
        calls.set(kind.rawValue, call: "audio-mode", mode == 1 ? .active : nil)
    }

    /// A method call to the current owner, without starting anything; `reply` gets the answer's arguments (nil on
    /// an error or when the owner changed meanwhile).
    private func call(
        _ path: String, _ interface: String, _ member: String, _ args: [DBusValue],
        _ reply: @escaping ([DBusValue]?) -> Void
    ) {
        watch.call(path, interface, member, args) { r in reply(r?.kind == .methodReturn ? r?.arguments : nil) }
    }
}

extension DBusValue {
    /// The entries of any dictionary, nil for any other type.
    fileprivate var entries: [(DBusValue, DBusValue)]? {
        if case .dict(_, _, let pairs) = self { return pairs }
        return nil
    }

    /// A dictionary keyed by strings (`a{s…}`), the first entry for a key winning; nil for any other type.
    fileprivate var stringKeyed: [String: DBusValue]? {
        guard case .dict("s", _, let pairs) = self else { return nil }
        return Dictionary(
            pairs.compactMap { k, v in k.stringValue.map { ($0, v) } }, uniquingKeysWith: { first, _ in first })
    }

    fileprivate var arrayItems: [DBusValue] {
        if case .array(_, let items) = self { return items }
        return []
    }
}
