import AudioPolicy
import AudiodCore
import DBusService
import Logging
import PulseBackend
import ServiceLifecycle

/// audiod as one service: the arbiter (engine + sound server) and its D-Bus API on one loop thread. It owns
/// `org.audiod.AudioSession1` once everything is ready; on graceful shutdown (SIGTERM/SIGINT) — or if the bus goes
/// away — it restores every stream it changed before it returns.
struct ArbiterService: Service {
    let settings: Settings
    let options: PulseBackend.Options
    /// The bus address; nil for `$DBUS_SESSION_BUS_ADDRESS`.
    let busAddress: String?
    let logger: Logger

    struct BusLost: Error, CustomStringConvertible {
        var description: String { "the session bus went away; every stream change was undone" }
    }

    func run() async throws {
        let loop = try MainLoop()
        loop.start()
        let arbiter = Arbiter(loop: loop, settings: settings, backend: options, logger: logger)
        let (lost, lostSignal) = AsyncStream<Void>.makeStream()
        let log = logger
        let address = busAddress
        let started: Result<Void, DBusError> = await loop.run {
            do {
                let bus = try DBusConnection(address: address, loop: loop)
                let service = AudioSessionService(bus: bus, host: arbiter, logger: log)
                arbiter.onStep = { _, effects in service.publish(effects) }
                arbiter.onServerStatus = { info in
                    if let info { log.info("enforcing on \(info.name)") } else { log.warning("sound server gone; reconnecting") }
                    service.serverStatusChanged()
                }
                bus.onDisconnect = {
                    log.error("lost the session bus")
                    lostSignal.yield()
                }
                arbiter.start()
                try service.claimName()
                log.info("ready on the session bus as \(API.busName)")
                return .success(())
            } catch let e as DBusError {
                return .failure(e)
            } catch {
                return .failure(.failed("\(error)"))
            }
        }
        if case .failure(let e) = started {
            await stop(arbiter, loop)
            throw e
        }
        // Until SIGTERM/SIGINT, cancellation, or the bus going away.
        let busGone = await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                try? await gracefulShutdown()
                return false
            }
            group.addTask {
                for await _ in lost { return true }
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            lostSignal.finish()
            return first
        }
        await stop(arbiter, loop)
        if busGone { throw BusLost() }
    }

    private func stop(_ arbiter: Arbiter, _ loop: MainLoop) async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            loop.execute { arbiter.shutdown { c.resume() } }
        }
        loop.stop()
        logger.info("stopped; every stream change undone")
    }
}
