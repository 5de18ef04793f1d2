import AudioPolicy
import AudiodCore
import Logging
import PulseBackend
import ServiceLifecycle

/// The arbiter as a service: connects to the sound server, enforces the policy, and on graceful shutdown
/// (SIGTERM/SIGINT) restores every stream it changed before it returns.
struct ArbiterService: Service {
    let settings: Settings
    let options: PulseBackend.Options
    let logger: Logger

    func run() async throws {
        let loop = try MainLoop()
        loop.start()
        let arbiter = Arbiter(loop: loop, settings: settings, backend: options, logger: logger)
        let log = logger
        await loop.run {
            arbiter.onServerStatus = { info in
                if let info {
                    log.info("enforcing on \(info.name)")
                } else {
                    log.warning("sound server gone; reconnecting")
                }
            }
            arbiter.start()
        }
        // Until SIGTERM/SIGINT (or cancellation); either way, put every stream back before exiting.
        try? await gracefulShutdown()
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            loop.execute { arbiter.shutdown { c.resume() } }
        }
        loop.stop()
        logger.info("stopped; every stream change undone")
    }
}
