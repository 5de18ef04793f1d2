import AudiodCore
import AudiodTestKit
import DBusService
import Foundation
import PulseBackend
import Testing

/// libdbus joined to the audiod loop, on a real private dbus-daemon: calls, replies, errors and every value shape
/// the API uses survive a round trip between two connections.
@Suite struct DBusTransportTests {
    /// A service connection that echoes `Echo` calls and answers everything else with UnknownMethod, plus a client.
    final class Pair: @unchecked Sendable {
        let bus: TestBus
        let loop: MainLoop
        var service: DBusConnection?
        var client: DBusConnection?

        init() throws {
            bus = try TestBus()
            loop = try MainLoop()
            loop.start()
            let address = bus.address
            let loop = self.loop
            let result: Result<(DBusConnection, DBusConnection), DBusError> = loop.sync {
                do {
                    let s = try DBusConnection(address: address, loop: loop)
                    try s.requestName("org.audiod.Test")
                    s.onMessage = { [weak s] m in
                        guard let s, m.kind == .methodCall, !m.noReply else { return }
                        if m.member == "Echo", let r = m.makeReturn() {
                            r.append(m.arguments)
                            s.send(r)
                        } else if let e = m.makeError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "no \(m.member ?? "")") {
                            s.send(e)
                        }
                    }
                    let c = try DBusConnection(address: address, loop: loop)
                    return .success((s, c))
                } catch let error as DBusError {
                    return .failure(error)
                } catch {
                    return .failure(.failed("\(error)"))
                }
            }
            (service, client) = try result.get()
        }

        func call(_ member: String, _ args: [DBusValue]) -> DBusMessage? {
            let c = client
            let done = DispatchSemaphore(value: 0)
            let box = ReplyHolder()
            loop.execute {
                guard let c, let m = DBusMessage.methodCall(
                    destination: "org.audiod.Test", path: "/org/audiod/Test", interface: "org.audiod.Test", member: member)
                else {
                    done.signal()
                    return
                }
                m.append(args)
                c.call(m) { r in
                    box.message = r
                    done.signal()
                }
            }
            _ = done.wait(timeout: .now() + 10)
            return box.message
        }

        func close() {
            let (s, c) = (service, client)
            loop.sync {
                s?.close()
                c?.close()
            }
            service = nil
            client = nil
            loop.stop()
            bus.stop()
        }
    }

    final class ReplyHolder: @unchecked Sendable { var message: DBusMessage? }

    @Test("every value shape of the API round-trips")
    func roundTrip() throws {
        let pair = try Pair()
        defer { pair.close() }
        let args: [DBusValue] = [
            .properties([("application-name", .string("Podcasts ✓")), ("pid", .uint32(4242)), ("x", .double(0.2))]),
            .strings(["mix-with-others", "duck-others"]),
            .strings([]),
            .array(element: "a{sv}", [.properties([("index", .uint32(7)), ("kind", .string("playback"))])]),
            .array(element: "(sssas)", [.structure([.string("mpv"), .string("playback"), .string("default"), .strings([])])]),
            .objectPath("/org/audiod/AudioSession1/session/12"),
            .bool(true), .int64(-5), .uint64(1 << 40), .byte(255), .int16(-3), .uint16(9), .int32(-7),
            .variant(.variant(.string("nested"))),
        ]
        let reply = try #require(pair.call("Echo", args), "no reply")
        #expect(reply.kind == .methodReturn)
        #expect(reply.signature == signature(of: args))
        #expect(reply.arguments == args)
    }

    @Test("an error reply carries its name and message")
    func errorReply() throws {
        let pair = try Pair()
        defer { pair.close() }
        let reply = try #require(pair.call("Nope", []))
        #expect(reply.kind == .error)
        #expect(reply.errorName == "org.freedesktop.DBus.Error.UnknownMethod")
        #expect(reply.arguments == [.string("no Nope")])
    }

    @Test("a second owner of the name is refused with a clear message")
    func nameTaken() throws {
        let pair = try Pair()
        defer { pair.close() }
        let address = pair.bus.address
        let loop = pair.loop
        let message: String? = loop.sync { () -> String? in
            do {
                let other = try DBusConnection(address: address, loop: loop)
                defer { other.close() }
                try other.requestName("org.audiod.Test")
                return nil
            } catch let error as DBusError {
                return error.message
            } catch {
                return "\(error)"
            }
        }
        #expect(message?.contains("already owned") == true, "\(String(describing: message))")
    }

    @Test("many calls in a row all get their replies")
    func manyCalls() throws {
        let pair = try Pair()
        defer { pair.close() }
        for i in 0..<500 {
            let r = pair.call("Echo", [.uint32(UInt32(i))])
            #expect(r?.arguments == [.uint32(UInt32(i))])
        }
    }
}
