import DBusTransport
import Foundation
import Glibc
import Logging
import Testing

@testable import Platform

/// The name-following primitive against a private dbus-daemon of its own (the one piece of the platform whose rules
/// are the bus's): it believes only the current owner, and drops an answer that comes from an earlier one.
struct NameWatchTests {
    static let name = "org.example.Watched"

    final class Seen: @unchecked Sendable {
        let lock = NSLock()
        var appeared: [String] = []
        var vanished = 0
        var answers = 0
        var signals: [String] = []
        var held: DBusMessage?
        func with<T>(_ body: (Seen) -> T) -> T {
            lock.lock()
            defer { lock.unlock() }
            return body(self)
        }
    }

    final class Objects {
        var link: BusLink?
        var watch: NameWatch?
        var first: DBusConnection?
        var second: DBusConnection?
        var watcher: DBusConnection?
    }

    func privateBus() throws -> (Process, String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
        p.arguments = ["--session", "--nofork", "--nopidfile", "--print-address=1"]
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line.append(chunk)
        }
        let address = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !address.isEmpty else { throw DBusError.failed("dbus-daemon gave no address") }
        return (p, address)
    }

    func waitFor(_ seconds: Double, _ condition: () -> Bool) -> Bool {
        let end = Date().addingTimeInterval(seconds)
        while Date() < end {
            if condition() { return true }
            usleep(10_000)
        }
        return condition()
    }

    @Test(
        "a name's owner changes: the answer the earlier owner sends afterwards is dropped, and only the new owner's signals are believed"
    )
    func ownerChange() throws {
        let (daemon, address) = try privateBus()
        defer {
            // dbus-daemon ignores SIGTERM here; it holds the test's stderr until it is gone.
            kill(daemon.processIdentifier, SIGKILL)
            daemon.waitUntilExit()
        }
        let loop = try PollLoop()
        let objects = loop.bind(Objects())
        loop.start()
        defer { loop.stop() }
        let seen = Seen()
        let started: Bool = loop.sync {
            let o = objects.value
            guard let first = try? DBusConnection(address: address, loop: loop),
                let watcher = try? DBusConnection(address: address, loop: loop)
            else { return false }
            o.first = first
            o.watcher = watcher
            try? first.requestName(Self.name)
            // The first owner keeps the calls it gets, to answer one when it no longer owns the name.
            first.onMessage = { m in if m.kind == .methodCall { seen.with { $0.held = m } } }
            let link = BusLink(session: watcher, logger: Logger(label: "test"))
            // Signals of the interface from anyone reach the watcher: the watch must tell the owner's from the rest.
            let watch = link.follow(Self.name, signals: ["type='signal',interface='org.example.Thing'"])
            watch.onAppeared = { unique in seen.with { $0.appeared.append(unique) } }
            watch.onVanished = { _ in seen.with { $0.vanished += 1 } }
            link.onSignal { [weak watch] m in
                guard watch?.isOwner(m.sender) == true else { return }
                seen.with { $0.signals.append(m.member ?? "") }
            }
            watch.start()
            o.link = link
            o.watch = watch
            return true
        }
        #expect(started)
        #expect(waitFor(5) { seen.with { $0.appeared.count } == 1 })
        loop.sync {
            objects.value.watch?.call("/org/example/Thing", "org.example.Thing", "Ask") { _ in
                seen.with { $0.answers += 1 }
            }
        }
        #expect(waitFor(5) { seen.with { $0.held != nil } })
        // The name moves to a second connection.
        loop.sync {
            let o = objects.value
            o.first?.releaseName(Self.name)
            o.second = try? DBusConnection(address: address, loop: loop)
            try? o.second?.requestName(Self.name)
        }
        #expect(
            waitFor(5) { seen.with { $0.appeared.count == 2 && $0.vanished == 1 } },
            "\(seen.with { ($0.appeared, $0.vanished) })")
        loop.sync {
            let o = objects.value
            if let held = seen.with({ $0.held }) { _ = o.first?.reply(to: held, [.string("stale")]) }
            _ = o.first?.emit(
                path: "/org/example/Thing", interface: "org.example.Thing", member: "FromTheEarlierOwner", [])
            _ = o.second?.emit(path: "/org/example/Thing", interface: "org.example.Thing", member: "FromTheOwner", [])
        }
        #expect(waitFor(5) { seen.with { $0.signals.contains("FromTheOwner") } })
        usleep(200_000)
        #expect(seen.with { $0.answers } == 0, "the earlier owner's answer was taken")
        #expect(seen.with { $0.signals } == ["FromTheOwner"])
        loop.sync {
            let o = objects.value
            o.watch = nil
            o.link = nil
            o.first?.close()
            o.second?.close()
            o.watcher?.close()
        }
    }
}
