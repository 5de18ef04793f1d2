import DBusTransport
import Foundation
import Glibc
import Logging
import Synchronization
import Testing

@testable import Platform

/// The system bus's link against a bus that does not answer: connecting must never hold the loop, which every
/// decision of audiod's runs on.
struct BusLinkTests {
    final class Objects {
        var link: BusLink?
    }

    /// A unix socket that takes connections into its backlog and never answers one (a bus daemon stopped, or one
    /// coming back): the fd and the address.
    func silentListener() throws -> (Int32, String) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent(
            "audiod-silent-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let path = dir.appendingPathComponent("bus").path
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw DBusError.failed("socket: \(errno)") }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { buf in
            for (i, b) in path.utf8.prefix(buf.count - 1).enumerated() { buf[i] = b }
        }
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0, listen(fd, 8) == 0 else { throw DBusError.failed("bind/listen: \(errno)") }
        return (fd, "unix:path=\(path)")
    }

    @Test(
        "a system bus that accepts and never answers Hello does not hold the loop; its failure is reported",
        .timeLimit(.minutes(1)))
    func silentBusDoesNotHoldTheLoop() throws {
        let (listener, address) = try silentListener()
        var listening = true
        defer { if listening { close(listener) } }
        let loop = try PollLoop()
        let objects = loop.bind(Objects())
        loop.start()
        defer { loop.stop() }
        let start = Date()
        loop.sync {
            let link = BusLink(system: address, loop: loop, logger: Logger(label: "test"))
            objects.value.link = link
            link.connect()
        }
        // The loop answers at once and runs its timers on time while the connection waits for its Hello.
        let timerRan = Mutex(false)
        loop.sync {
            _ = loop.dbusTimer(afterNanoseconds: 50_000_000) { timerRan.withLock { $0 = true } }
        }
        let deadline = Date().addingTimeInterval(3)
        while Date() < deadline, !timerRan.withLock({ $0 }) { usleep(10_000) }
        let took = Date().timeIntervalSince(start)
        #expect(timerRan.withLock { $0 } && took < 2, "the loop was held for \(took) s")
        #expect(loop.sync { objects.value.link?.connection == nil })
        // The daemon goes away: the attempt fails, and the link says so and tries again.
        close(listener)
        listening = false
        let end = Date().addingTimeInterval(10)
        var reason: String?
        while Date() < end {
            reason = loop.sync { objects.value.link?.downReason }
            if reason == "no system bus; retrying" { break }
            usleep(20_000)
        }
        #expect(reason == "no system bus; retrying")
        loop.sync {
            objects.value.link?.close()
            objects.value.link = nil
        }
    }
}
