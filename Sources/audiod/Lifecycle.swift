import AudioPolicy
import AudiodConfig
import AudiodCore
import DBusService
import Dispatch
import FoundationEssentials
import Glibc
import Logging
import LoopThread
import PulseBackend
import PulseLoop

/// audiod's life: the arbiter (engine + sound server) and its D-Bus API on one loop thread, and the main thread
/// waiting for signals with `sigwait`.
///
/// Why not swift-service-lifecycle's ServiceGroup: awaiting in Swift's cooperative pool makes libdispatch wake a
/// thread once a second for as long as the process lives (measured here: ~40 syscalls per 10 s in a trivial
/// program that only does `for await` on a stream, none when the main thread blocks in a system call). audiod must
/// wake zero times a second when idle, so the main thread blocks in `sigwait` and no async code runs.
struct Lifecycle {
    let settings: Settings
    /// Re-read on SIGHUP; nil when audiod runs on built-in settings (then SIGHUP looks for a file again).
    let configPath: String?
    let statePath: String?
    let options: PulseBackend.Options
    /// The bus address; nil for `$DBUS_SESSION_BUS_ADDRESS`.
    let busAddress: String?
    /// How long and how much audiod holds for a bus daemon that reads nothing before it gives up.
    var busBounds = DBusConnection.Bounds()
    let logger: Logger

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// The lock a running audiod holds beside its journal: `audiod --restore` does nothing while it is held (the
    /// running audiod restores by itself), and the kernel drops it however audiod ends.
    static func lockPath(journal: String) -> String { journal + ".lock" }

    /// Takes the lock (`flock`, exclusive, not waiting); the open descriptor holds it, nil when another process does.
    static func lock(_ path: String) -> Int32? {
        let dir = String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])
        if !dir.isEmpty { mkdir(dir, 0o700) }
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return -1 }  // Cannot lock (read-only runtime dir): go on without.
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            return nil
        }
        return fd
    }

    /// Runs until SIGTERM/SIGINT (or the bus going away), then restores every stream it changed and returns.
    func run() throws {
        if let journal = options.journalPath, Self.lock(Self.lockPath(journal: journal)) == nil {
            throw Failure(
                description: "another audiod holds \(Self.lockPath(journal: journal)): only one may enforce at a time")
        }
        // Taken only by sigwait on this thread: blocked here before any other thread exists, and threads inherit
        // the mask. SIGUSR1 is audiod's own "the bus went away", SIGUSR2 "the bus reads nothing".
        var signals = sigset_t()
        sigemptyset(&signals)
        for s in [SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2] { sigaddset(&signals, s) }
        pthread_sigmask(SIG_BLOCK, &signals, nil)

        let loop = try MainLoop()
        loop.start()
        let log = logger
        let address = busAddress
        let bounds = busBounds
        let configPath = configPath
        let (settings, options, statePath) = (settings, options, statePath)
        // Both live on the loop thread; this thread holds them only to hand them back to it.
        let (bound, serviceBox) = loop.sync {
            let arbiter = Arbiter(loop: loop, settings: settings, backend: options, statePath: statePath, logger: log)
            arbiter.readSettings = {
                guard let path = configPath ?? ConfigFile.find() else { return nil }
                return (try ConfigFile.load(path: path), path)
            }
            return (loop.bind(arbiter), loop.bind(ServiceBox()))
        }
        let started: Result<Void, DBusError> = loop.sync {
            let arbiter = bound.value
            let serviceBox = serviceBox.value
            do {
                let bus = try DBusConnection(address: address, loop: loop, bounds: bounds)
                let service = AudioSessionService(bus: bus, host: arbiter, logger: log)
                serviceBox.service = service
                arbiter.onStep = { _, effects in service.publish(effects) }
                arbiter.onServerStatus = { info in
                    if let info {
                        log.info("enforcing on \(info.name)")
                    } else {
                        log.warning("sound server gone; reconnecting")
                    }
                    service.serverStatusChanged()
                }
                bus.onDisconnect = {
                    log.error("lost the session bus")
                    kill(getpid(), SIGUSR1)
                }
                bus.onBacklog = { bytes in
                    log.warning(
                        "the session bus is slow to read: \(bytes) bytes are queued for it; enforcement goes on, and the queue is kept for up to \(bounds.withoutProgressNanoseconds / 1_000_000_000) s without progress or \(bounds.queuedBytes >> 20) MB"
                    )
                }
                bus.onStalled = { why in
                    // Everything stays queued until here; past the bound, serving is over. The streams are restored
                    // without waiting on the bus, and systemd starts audiod again.
                    log.error("the session bus takes nothing more: \(why); restoring every stream and exiting")
                    kill(getpid(), SIGUSR2)
                }
                arbiter.start()
                service.followMediaPlayers()
                service.followGameMode()
                service.followPlatform()
                // After followPlatform: RealtimeKit is asked on the system bus when the kernel refuses audiod.
                service.setLoopPriority(nice: settings.niceLevel)
                service.setTrustedPlatformApps(settings.trustedPlatformApps)
                arbiter.onReload = {
                    service.setLoopPriority(nice: $0.niceLevel)
                    service.setTrustedPlatformApps($0.trustedPlatformApps)
                }
                // Before the name is owned: a shell's `audioctl` that finds its session finds the one made again.
                // Kept from here on: once, for what was made again (the file drops what was not), then on each change.
                service.remakeProcessSessions(arbiter.keptProcessSessions())
                service.onProcessSessions = { arbiter.keepProcessSessions($0) }
                service.processSessionsMayHaveChanged(always: true)
                try service.claimName()
                log.info("ready on the session bus as \(API.busName)")
                // Once connecting (to the bus and the sound server) is over, what start-up ran can go.
                serviceBox.trim = loop.timer(afterNanoseconds: 2_000_000_000) { ResidentCode.dropStartupPages() }
                return .success(())
            } catch let e as DBusError {
                return .failure(e)
            } catch {
                return .failure(.failed("\(error)"))
            }
        }
        if case .failure(let e) = started {
            stop(bound, loop, serviceBox, waitForBus: false)
            throw Failure(description: "cannot serve on the session bus: \(e.message)")
        }

        var busGone = false
        var busStalled = false
        waiting: while true {
            var sig: Int32 = 0
            guard sigwait(&signals, &sig) == 0 else { continue }
            switch sig {
            case SIGHUP: reload(bound, loop)
            case SIGUSR1:
                busGone = true
                break waiting
            case SIGUSR2:
                busStalled = true
                break waiting
            default:
                logger.info("signal \(sig): stopping")
                break waiting
            }
        }
        stop(bound, loop, serviceBox, waitForBus: !busGone && !busStalled)
        if busGone { throw Failure(description: "the session bus went away; every stream change was undone") }
        if busStalled { throw Failure(description: "the session bus stopped reading; every stream change was undone") }
    }

    /// SIGHUP: re-read the config, as `Reload` does; a broken file is logged and the settings in force stay.
    private func reload(_ arbiter: LoopBound<Arbiter>, _ loop: MainLoop) {
        let outcome = loop.sync { arbiter.value.reloadConfig() }
        switch outcome {
        case .reloaded(let file?): logger.info("SIGHUP: config reloaded from \(file)")
        case .reloaded(nil): logger.info("SIGHUP: no config file; the built-in settings are in force")
        case .invalid(let why): logger.error("SIGHUP: config not reloaded, the settings in force stay: \(why)")
        }
    }

    /// Stopping in phases (docs/API.md): stop deciding → restore → wait for the server (bounded) → release the name
    /// and write what is queued for the bus (at most 1 s; not at all when the bus is gone or reads nothing) → close
    /// the connection, on the loop thread, before the loop ends.
    private func stop(_ arbiter: LoopBound<Arbiter>, _ loop: MainLoop, _ bound: LoopBound<ServiceBox>, waitForBus: Bool)
    {
        let done = DispatchSemaphore(value: 0)
        loop.execute {
            let box = bound.value
            arbiter.value.shutdown {
                if waitForBus { box.service?.releaseName(within: 1_000_000_000) }
                box.service?.close()
                box.service = nil
                box.trim?.cancel()
                box.trim = nil
                done.signal()
            }
        }
        done.wait()
        loop.stop()
        logger.info("stopped; every stream change undone")
    }
}

/// The D-Bus service, made and used on the loop thread only.
private final class ServiceBox {
    var service: AudioSessionService?
    var trim: LoopTimer?
}
