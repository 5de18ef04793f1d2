import AudiodCore
import AudiodTestKit
import DBusService
import Foundation
import LoopThread
import PulseBackend
import PulseLoop
import Testing

/// libdbus joined to the audiod loop, on a real private dbus-daemon: calls, replies, errors and every value shape
/// the API uses survive a round trip between two connections.
@Suite struct DBusTransportTests {
    /// A service connection that echoes `Echo` calls and answers everything else with UnknownMethod, plus a client.
    final class Pair: @unchecked Sendable {
        let bus: TestBus
        let loop: MainLoop
        var service: LoopBound<DBusConnection>?
        var client: LoopBound<DBusConnection>?

        init(bounds: DBusConnection.Bounds = DBusConnection.Bounds()) throws {
            bus = try TestBus()
            loop = try MainLoop()
            loop.start()
            let address = bus.address
            let loop = self.loop
            let result: Result<(LoopBound<DBusConnection>, LoopBound<DBusConnection>), DBusError> = loop.sync {
                do {
                    let s = try DBusConnection(address: address, loop: loop, bounds: bounds)
                    try s.requestName("org.audiod.Test")
                    s.onMessage = { [weak s] m in
                        guard let s, m.kind == .methodCall, !m.noReply else { return }
                        switch m.member {
                        case "Echo":
                            // A message built and sent by hand…
                            if let r = m.makeReturn() {
                                r.append(m.arguments)
                                s.send(r)
                            }
                        case "EchoReply":
                            // …and `reply(to:)`, which the daemon uses for every reply.
                            if !s.reply(to: m, m.arguments) {
                                s.replyError(to: m, name: "org.audiod.Test.Refused", message: "not encodable")
                            }
                        case "Burst":
                            // `count` signals of `bytes` each, then the reply: one loop turn's worth of messages.
                            let a = m.arguments
                            guard case .uint32(let count)? = a.first, case .uint32(let bytes)? = a.last else { return }
                            let filler = String(repeating: "x", count: Int(bytes))
                            for i in 0..<count {
                                s.emit(
                                    path: "/org/audiod/Test", interface: "org.audiod.Test", member: "Tick",
                                    [.uint32(i), .string(filler)])
                            }
                            s.reply(to: m, [.uint32(count)])
                        default:
                            s.replyError(
                                to: m, name: "org.freedesktop.DBus.Error.UnknownMethod", message: "no \(m.member ?? "")"
                            )
                        }
                    }
                    let c = try DBusConnection(address: address, loop: loop)
                    return .success((loop.bind(s), loop.bind(c)))
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
                guard let c = c?.value,
                    let m = DBusMessage.methodCall(
                        destination: "org.audiod.Test", path: "/org/audiod/Test", interface: "org.audiod.Test",
                        member: member)
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
                s?.value.close()
                c?.value.close()
            }
            service = nil
            client = nil
            loop.stop()
            bus.stop()
        }
    }

    final class ReplyHolder: @unchecked Sendable { var message: DBusMessage? }

    @Test(
        "every value shape of the API round-trips, sent as a built message (Echo) and as a reply (EchoReply)",
        arguments: ["Echo", "EchoReply"])
    func roundTrip(_ member: String) throws {
        let pair = try Pair()
        defer { pair.close() }
        let args: [DBusValue] = [
            .properties([("application-name", .string("Podcasts ✓")), ("pid", .uint32(4242)), ("x", .double(0.2))]),
            .strings(["mix-with-others", "duck-others"]),
            .strings([]),
            .array(element: "a{sv}", [.properties([("index", .uint32(7)), ("kind", .string("playback"))])]),
            .array(
                element: "(sssas)",
                [.structure([.string("mpv"), .string("playback"), .string("default"), .strings([])])]),
            .objectPath("/org/audiod/AudioSession1/session/12"),
            .bool(true), .int64(-5), .uint64(1 << 40), .byte(255), .int16(-3), .uint16(9), .int32(-7),
            .byte(1), .array(element: "x", [.int64(-1)]), .variant(.structure([.byte(3), .int64(4)])),
            .variant(.variant(.string("nested"))),
        ]
        let reply = try #require(pair.call(member, args), "no reply")
        #expect(reply.kind == .methodReturn)
        #expect(reply.signature == signature(of: args))
        #expect(reply.arguments == args)
    }

    @Test("a value libdbus refuses is not sent half-made: the caller gets an error")
    func refusedOverTheBus() throws {
        let pair = try Pair()
        defer { pair.close() }
        // The service decodes the descriptor (closing it) as .unixFD(-1), which cannot be written back.
        let refused = try #require(pair.call("EchoReply", [.string("ok"), .unixFD(0)]))
        #expect(refused.kind == .error)
        #expect(refused.errorName == "org.audiod.Test.Refused")
    }

    @Test(
        "a turn's queued signals and reply arrive whole and in order, and a Ping sent after them comes back after them")
    func burstInOrder() throws {
        let pair = try Pair()
        defer { pair.close() }
        // 2,000 signals of 300 bytes: more than a socket holds, so writing waits for dbus-daemon and hands over.
        let count: UInt32 = 2000
        final class Log: @unchecked Sendable { var events: [String] = [] }
        let log = Log()
        let done = DispatchSemaphore(value: 0)
        let bc = try #require(pair.client)
        pair.loop.execute {
            let c = bc.value
            c.addMatch("type='signal',interface='org.audiod.Test',member='Tick'")
            c.onMessage = { m in
                if m.member == "Tick", case .uint32(let i)? = m.arguments.first { log.events.append("tick \(i)") }
            }
            guard
                let burst = DBusMessage.methodCall(
                    destination: "org.audiod.Test", path: "/org/audiod/Test", interface: "org.audiod.Test",
                    member: "Burst"),
                let ping = DBusMessage.methodCall(
                    destination: "org.audiod.Test", path: "/", interface: "org.freedesktop.DBus.Peer", member: "Ping")
            else {
                done.signal()
                return
            }
            burst.append([.uint32(count), .uint32(300)])
            // Both calls leave before either is answered.
            c.call(burst) { r in
                log.events.append(
                    r?.kind == .methodReturn ? "reply \(r?.arguments.first?.description ?? "")" : "no reply")
            }
            c.call(ping) { r in
                log.events.append(r?.kind == .methodReturn ? "ping" : "no ping")
                done.signal()
            }
        }
        #expect(done.wait(timeout: .now() + 30) == .success)
        let events = pair.loop.sync { log.events }
        let expected = (0..<count).map { "tick \($0)" } + ["reply \(count)", "ping"]
        #expect(events.count == expected.count)
        // The first place they differ, not the whole lists (thousands of lines).
        let difference = zip(events, expected).enumerated().first { $0.element.0 != $0.element.1 }
        #expect(
            difference == nil,
            "at \(difference?.offset ?? 0): \(difference?.element.0 ?? "") instead of \(difference?.element.1 ?? "")")
    }

    @Test(
        "signals queued while dbus-daemon reads nothing all arrive, in order, once it reads again; the loop runs on meanwhile",
        arguments: [false, true])
    func stalledBus(bigFirst: Bool) throws {
        let pair = try Pair()
        defer { pair.close() }
        let (bs, bc) = (try #require(pair.service), try #require(pair.client))
        final class Log: @unchecked Sendable { var events: [String] = [] }
        let log = Log()
        pair.loop.sync {
            let c = bc.value
            c.addMatch("type='signal',interface='org.audiod.Test'")
            c.onMessage = { m in
                if m.kind == .signal, let name = m.member, case .uint32(let i)? = m.arguments.first {
                    log.events.append("\(name) \(i)")
                }
            }
        }
        #expect(pair.call("EchoReply", [])?.kind == .methodReturn)  // the match rule is in place
        // ~1 MB while the daemon is stopped: the socket fills inside a message or between two. With bigFirst, large
        // messages fill it first and leave a backlog, which the small ones must wait behind.
        let count: UInt32 = 3000
        let filler = String(repeating: "x", count: 300)
        pair.bus.send(signal: SIGSTOP)
        let bus = pair.bus
        var expected: [String] = []
        if bigFirst {
            for i in 0..<UInt32(300) { expected.append("Big \(i)") }
        }
        for i in 0..<count { expected.append("Tick \(i)") }
        pair.loop.execute {
            let s = bs.value
            if bigFirst {
                let big = String(repeating: "y", count: 4000)
                for i in 0..<UInt32(300) {
                    guard
                        let m = DBusMessage.signal(
                            path: "/org/audiod/Test", interface: "org.audiod.Test", member: "Big")
                    else { continue }
                    m.append([.uint32(i), .string(big)])
                    s.send(m)
                }
            }
            for i in 0..<count {
                s.emit(
                    path: "/org/audiod/Test", interface: "org.audiod.Test", member: "Tick",
                    [.uint32(i), .string(filler)])
            }
        }
        // Everything is queued, the daemon still stopped: the loop answers other work at once, and holds the rest.
        let queued = pair.loop.sync { bs.value.queuedBytes }
        #expect(queued > 500_000, "only \(queued) bytes queued: the test did not fill the socket")
        let t0 = DispatchTime.now().uptimeNanoseconds
        for _ in 0..<20 { pair.loop.sync {} }
        let turns = DispatchTime.now().uptimeNanoseconds - t0
        #expect(turns < 500_000_000, "20 loop turns took \(turns / 1_000_000) ms while the bus was stopped")
        bus.send(signal: SIGCONT)
        let all = waitFor(30) { pair.loop.sync { log.events.count } >= expected.count }
        #expect(all, "\(pair.loop.sync { log.events.count }) of \(expected.count) signals arrived")
        let events = pair.loop.sync { log.events }
        // The first place they differ, not the whole lists (thousands of lines).
        let difference = zip(events, expected).enumerated().first { $0.element.0 != $0.element.1 }
        #expect(
            difference == nil,
            "at \(difference?.offset ?? 0): \(difference?.element.0 ?? "") instead of \(difference?.element.1 ?? "")")
        // The connection still works afterwards.
        #expect(pair.call("EchoReply", [.string("after")])?.arguments == [.string("after")])
        #expect(pair.loop.sync { bs.value.queuedBytes } == 0)
    }

    @Test(
        "a bus daemon that reads nothing past the bound is reported once, and a queue past its size at once",
        arguments: [false, true])
    func stallBound(bySize: Bool) throws {
        let bounds =
            bySize
            ? DBusConnection.Bounds(withoutProgressNanoseconds: 60_000_000_000, queuedBytes: 400_000)
            : DBusConnection.Bounds(withoutProgressNanoseconds: 1_000_000_000, queuedBytes: 64 << 20)
        let pair = try Pair(bounds: bounds)
        defer {
            pair.bus.send(signal: SIGCONT)
            pair.close()
        }
        let bs = try #require(pair.service)
        final class Reports: @unchecked Sendable { var why: [String] = [] }
        let reports = Reports()
        pair.loop.sync { bs.value.onStalled = { reports.why.append($0) } }
        pair.bus.send(signal: SIGSTOP)
        let t0 = DispatchTime.now().uptimeNanoseconds
        let filler = String(repeating: "x", count: 1000)
        pair.loop.sync {
            for i in 0..<UInt32(800) {
                bs.value.emit(
                    path: "/org/audiod/Test", interface: "org.audiod.Test", member: "Tick",
                    [.uint32(i), .string(filler)])
            }
        }
        #expect(waitFor(10) { pair.loop.sync { !reports.why.isEmpty } })
        let after = DispatchTime.now().uptimeNanoseconds - t0
        // Queue a little more: no second report.
        _ = pair.loop.sync {
            bs.value.emit(
                path: "/org/audiod/Test", interface: "org.audiod.Test", member: "Tick", [.uint32(0), .string(filler)])
        }
        Thread.sleep(forTimeInterval: 0.2)
        let why = pair.loop.sync { reports.why }
        #expect(why.count == 1, "\(why)")
        if bySize {
            #expect(why.first?.contains("more than the bound") == true, "\(why)")
            #expect(after < 1_000_000_000)
        } else {
            #expect(why.first?.contains("has read nothing") == true, "\(why)")
            #expect(after >= 1_000_000_000, "reported after \(after / 1_000_000) ms, before the bound")
        }
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

/// One entry of a peer's dictionary is read without decoding the rest, and an oversized dictionary is refused
/// before anything in it is read (a followed MPRIS player's `PropertiesChanged`, issue 43).
struct DictionaryPeekTests {
    func propertiesChanged(_ entries: [(String, DBusValue)]) throws -> DBusMessage {
        let s = try #require(
            DBusMessage.signal(
                path: "/org/mpris/MediaPlayer2", interface: "org.freedesktop.DBus.Properties",
                member: "PropertiesChanged"))
        let appended = s.append([.string("org.mpris.MediaPlayer2.Player"), .properties(entries), .strings([])])
        #expect(appended)
        return s
    }

    @Test("the status is found beside large metadata, and a dictionary over the bound is refused unread")
    func peek() throws {
        let metadata: DBusValue = .properties([("xesam:title", .string(String(repeating: "x", count: 200_000)))])
        let m = try propertiesChanged([("Metadata", metadata), ("PlaybackStatus", .string("Playing"))])
        #expect(m.peekFirstString() == "org.mpris.MediaPlayer2.Player")
        #expect(
            m.peekDictionaryEntry(argument: 1, key: "PlaybackStatus", maxBytes: 1 << 20, maxEntries: 8)
                == .value(.variant(.string("Playing"))))
        #expect(
            m.peekDictionaryEntry(argument: 1, key: "Volume", maxBytes: 1 << 20, maxEntries: 8) == .value(nil))
        guard
            case .tooLarge(let bytes, _)? = m.peekDictionaryEntry(
                argument: 1, key: "PlaybackStatus", maxBytes: 100_000, maxEntries: 8)
        else {
            Issue.record("a 200 KB dictionary passed a 100 KB bound")
            return
        }
        #expect(bytes > 200_000)
        let many = try propertiesChanged((0..<300).map { ("k\($0)", .int32(Int32($0))) })
        let manyPeek = many.peekDictionaryEntry(
            argument: 1, key: "PlaybackStatus", maxBytes: 1 << 20, maxEntries: 256)
        guard case .tooLarge(_, let entries)? = manyPeek else {
            Issue.record("300 entries passed a bound of 256: \(String(describing: manyPeek))")
            return
        }
        #expect(entries == 257, "refused at the first entry over the bound")
        // Not a dictionary, or no such argument: nothing.
        #expect(m.peekDictionaryEntry(argument: 2, key: "x", maxBytes: 1 << 20, maxEntries: 8) == nil)
        #expect(m.peekDictionaryEntry(argument: 5, key: "x", maxBytes: 1 << 20, maxEntries: 8) == nil)
    }
}
