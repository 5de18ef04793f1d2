import AppIdentity
import AudioPolicy
import DBusService
import PulseBackend
import PulseLoop

extension Arbiter: PolicyHost {
    public var connectedServerName: String? { serverInfo?.name }

    public func processChain(_ pid: UInt32) -> [UInt32] { ProcessTable.chain(pid) }

    public func processOwner(_ pid: UInt32) -> UInt32? { ProcessTable.owner(of: pid) }

    public func processStartTime(_ pid: UInt32) -> UInt64? { ProcessTable.stat(pid)?.start }

    public func hostPid(_ pid: UInt32, seenBy viewer: UInt32) -> UInt32? { ProcessTable.hostPid(pid, seenBy: viewer) }

    public func reloadConfig() -> ConfigReload {
        let loaded: (settings: Settings, file: String)?
        do {
            loaded = try readSettings?()
        } catch {
            return .invalid("\(error)")
        }
        // No file any more: the built-in settings, as a start without one would have.
        let settings = loaded?.settings ?? Settings()
        let r = makeRequestID()
        for case .reply(r, .error(let e)) in handle(.configure(r, settings)) {
            return .invalid("\(loaded?.file ?? "the built-in settings"): \(e.message)")
        }
        backend.volumeTolerance = settings.volumeTolerance
        backend.deClickMilliseconds = UInt32(settings.deClickNanoseconds / 1_000_000)
        onReload?(settings)
        return .reloaded(file: loaded?.file)
    }

    public func watchExit(of pid: UInt32, _ handler: @escaping () -> Void) -> AnyObject? {
        ProcessExitWatch(pid: pid, loop: loop, handler)
    }
}
