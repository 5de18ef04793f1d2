// swift-tools-version:6.1
import PackageDescription

// Layering (STYLE.md §1): AudioPolicy is the pure engine and depends on nothing but the standard library.
// Everything that does I/O sits on top of it.
let package = Package(
    name: "audiod",
    products: [
        .executable(name: "audiod", targets: ["audiod"]),
        .executable(name: "audioctl", targets: ["audioctl"]),
        .library(name: "AudioPolicy", targets: ["AudioPolicy"]),
        .library(name: "AudiodClient", targets: ["AudiodClient"]),
    ],
    dependencies: [
        .package(url: "https://github.com/x-sheep/swift-property-based.git", from: "2.0.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.0"),
    ],
    targets: [
        // The words of the contract (categories, modes, options, reasons, error and bus names): shared by the
        // engine, the daemon and the client library, depending on nothing.
        .target(
            name: "AudioVocabulary",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .target(
            name: "AudioPolicy",
            dependencies: ["AudioVocabulary"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The thread, cross-thread work and start/stop that MainLoop (PulseLoop) and PollLoop (DBusTransport) share.
        .target(
            name: "LoopThread",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // libpulse (Debian: libpulse-dev, installed by scripts/test). Never a product: C stays in leaf targets
        // (STYLE.md §1–§2). No pkgConfig: libpulse.pc's `-D_REENTRANT -pthread` are flags SwiftPM refuses with a
        // warning, and the headers live in /usr/include anyway; the modulemap links `pulse`.
        .systemLibrary(name: "CPulse"),
        // Linux calls Swift's Glibc module does not export (timerfd, eventfd, pidfd): headers only, nothing to link.
        .systemLibrary(name: "CSystem"),
        // PipeWire's native protocol, for the volume ramps only its server has (0.3.68 and later). libpipewire is
        // opened with dlopen at run time, so nothing links it: the headers (Debian: libpipewire-0.3-dev) are needed
        // to build, the library only where PipeWire runs.
        .target(
            name: "CPipeWire",
            cSettings: [.unsafeFlags(["-I/usr/include/pipewire-0.3", "-I/usr/include/spa-0.2"])]
        ),
        // The daemon's one loop: a pa_mainloop on its own thread, its fd watches, monotonic timers and process-exit
        // watches. The sound-server connection, the bus connections and the process watches all run on it.
        .target(
            name: "PulseLoop",
            dependencies: ["CPulse", "CSystem", "LoopThread"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // libdbus-1 (Debian: libdbus-1-dev). Never a product; only DBusTransport imports it.
        .systemLibrary(name: "CDBus", pkgConfig: "dbus-1", providers: [.apt(["libdbus-1-dev"])]),
        // The only importer of CDBus: bus connections joined to a loop (the daemon's, or a PollLoop of their own
        // for clients), messages and values. Shared by the daemon's service, the client library and audioctl.
        .target(
            name: "DBusTransport",
            dependencies: ["CDBus", "LoopThread"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The desktop and the phone as audiod follows them (SPEC §7, §10): MPRIS players, GameMode, calls,
        // feedbackd, logind, RealtimeKit — each through one name-following primitive on a link per bus that owns the
        // connection's life. Engine events out, the platform's effects in; never the API server, the backend or the
        // core.
        .target(
            name: "Platform",
            dependencies: [
                "AudioPolicy", "AppIdentity", "DBusTransport", .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The API server: org.audiod.AudioSession1's objects on the session bus, routing, authorization and
        // publishing; it hands the platform (which follows who owns which session) its bus and the engine's effects.
        .target(
            name: "DBusService",
            dependencies: [
                "AudioPolicy", "AudioVocabulary", "DBusTransport", "Platform",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The Swift client library: AudioSession for apps, AudiodConnection for tools; the public API only. It
        // links the transport and the vocabulary, never the engine or the service.
        .target(
            name: "AudiodClient",
            dependencies: ["DBusTransport", "LoopThread", "AudioVocabulary"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // Who an app is, as the desktop knows it (SPEC §7): a pure resolver over what one small reader of /proc,
        // cgroups, environments and desktop entries collected. No D-Bus, no libpulse.
        .target(
            name: "AppIdentity",
            dependencies: ["AudioPolicy"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The sound server as engine events in, engine effects out: every libpulse call of the connection. (PulseLoop
        // imports CPulse for the loop itself; nothing else in the daemon does.)
        .target(
            name: "PulseBackend",
            dependencies: [
                "AudioPolicy", "AppIdentity", "CPulse", "CPipeWire", "PulseLoop", "LoopThread",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The engine run against the server on one loop thread, with timers, saved state and clean shutdown. It is the
        // API server's PolicyHost, so it builds on DBusService (and through it on the platform); audiod builds on it.
        .target(
            name: "AudiodCore",
            dependencies: [
                "AudioPolicy", "AppIdentity", "PulseBackend", "PulseLoop", "LoopThread", "DBusService",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // audiod.toml: parsing (its own TOML parser: TOMLKit would link Foundation and ICU into the daemon) and
        // checking, with errors that name file, line and key.
        .target(
            name: "AudiodConfig",
            dependencies: ["AudioPolicy"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The daemon: command line, logging and services only.
        .executableTarget(
            name: "audiod",
            dependencies: [
                "AudioPolicy", "AudioVocabulary", "AudiodCore", "PulseBackend", "PulseLoop", "LoopThread",
                "DBusService",
                "AudiodConfig", .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // audioctl: the public D-Bus API from a terminal, through the client library only.
        .executableTarget(
            name: "audioctl",
            dependencies: [
                "AudiodClient", "AudioVocabulary",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // Test support (no product): a private bus and sound server per test run, client processes, an observer.
        .target(
            name: "AudiodTestKit",
            dependencies: ["AudiodCore", "DBusService", "PulseBackend", "PulseLoop", "LoopThread", "CPulse"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // Both benchmarks' guard: a calibration workload and a committed baseline of each figure as a multiple of it.
        .target(
            name: "BenchGuard",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .executableTarget(
            name: "AudioPolicyBenchmarks",
            dependencies: ["AudioPolicy", "BenchGuard"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The benchmark command: the built audiod on private servers, next to the floor and the peers.
        .executableTarget(
            name: "AudiodBenchmarks",
            dependencies: [
                "AudioPolicy", "AppIdentity", "AudiodCore", "PulseBackend", "PulseLoop", "LoopThread", "DBusService",
                "AudiodTestKit", "BenchGuard",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            name: "AudioPolicyTests",
            dependencies: [
                "AudioPolicy", "AudioVocabulary",
                .product(name: "PropertyBased", package: "swift-property-based"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            // PulseBackend's pure parts, scripted: no server, no bus.
            name: "PulseBackendTests",
            dependencies: ["AudioPolicy", "PulseBackend"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            // The backend and the arbiter against real servers (PulseAudio and PipeWire), in process.
            name: "AudiodCoreTests",
            dependencies: [
                "AudioPolicy", "AppIdentity", "PulseBackend", "PulseLoop", "LoopThread", "AudiodCore", "AudiodTestKit",
                "DBusService",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // Runs the built audiod binary (built by `swift build --build-tests`) against real servers.
        .testTarget(
            name: "AudiodTests",
            dependencies: [
                "AudiodTestKit", "AudioPolicy", "AppIdentity", "DBusService", "AudiodCore", "PulseBackend", "PulseLoop",
                "LoopThread", "AudiodClient",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            // The platform's rules scripted without a bus: call merging, feedbackd's echoes, the sleep gate.
            name: "PlatformTests",
            dependencies: [
                "Platform", "AudioPolicy", "DBusTransport", .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            name: "LoopThreadTests",
            dependencies: ["LoopThread"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            name: "DBusServiceTests",
            dependencies: [
                "DBusService", "DBusTransport", "AudiodCore", "PulseBackend", "PulseLoop", "LoopThread",
                "AudiodTestKit",
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            name: "AppIdentityTests",
            dependencies: ["AppIdentity", "AudioPolicy"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            name: "AudiodConfigTests",
            dependencies: ["AudiodConfig", "AudioPolicy"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            name: "CPulseTests",
            dependencies: ["AudioPolicy", "CPulse"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
