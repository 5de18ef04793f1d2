import AudioPolicy
import AudiodConfig
import AudiodCore
import DBusService
import Logging
import PulseBackend
import ServiceLifecycle
import UnixSignals

/// audiod as one service: the arbiter (engine + sound server) and its D-Bus API on one loop thread. It owns
/// `org.audiod.AudioSession1` once everything is ready; on graceful shutdown (SIGTERM/SIGINT) — or if the bus goes
/// away — it restores every stream it changed before it returns.
struct ArbiterService: Service {
    let settings: Settings
    /// Re-read on SIGHUP; nil when audiod runs on built-in settings (then SIGHUP looks for a file again).
    let configPath: String?
    let statePath: String?
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
        let arbiter = Arbiter(loop: loop, settings: settings, backend: options, statePath: statePath, logger: logger)
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
            group.addTask {
                for await _ in await UnixSignalsSequence(trapping: .sighup) { await reload(arbiter, loop) }
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

    /// SIGHUP: re-read the config; a broken file is logged and the settings in force stay.
    private func reload(_ arbiter: Arbiter, _ loop: MainLoop) async {
        guard let path = configPath ?? ConfigFile.find() else {
            logger.info("SIGHUP: no config file; built-in settings stay")
            return
        }
        let settings: Settings
        do {
            settings = try ConfigFile.load(path: path)
        } catch {
            logger.error("SIGHUP: config not reloaded, the settings in force stay: \(error)")
            return
        }
        let log = logger
        await loop.run {
            let r = arbiter.makeRequestID()
            for case .reply(r, let answer) in arbiter.handle(.configure(r, settings)) {
                if case .error(let e) = answer { log.error("SIGHUP: config refused: \(e)") } else { log.info("config reloaded", metadata: ["path": "\(path)"]) }
            }
        }
    }

    private func stop(_ arbiter: Arbiter, _ loop: MainLoop) async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            loop.execute { arbiter.shutdown { c.resume() } }
        }
        loop.stop()
        logger.info("stopped; every stream change undone")
    }
}
