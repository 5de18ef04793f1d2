import AudioPolicy
import DBusTransport
import Testing

@testable import DBusService

/// Answers leave in the order of the calls, scripted without a bus: what `AudioSessionService` sends is what
/// `ReplyOrder` returns, in the order it returns it.
@Suite struct ReplyOrderTests {
    static func call(_ member: String) throws -> DBusMessage {
        try #require(
            DBusMessage.methodCall(
                destination: "org.audiod.AudioSession1", path: "/org/audiod/AudioSession1",
                interface: "org.audiod.AudioSession1.Manager", member: member))
    }

    /// Runs the sends as the service does, recording their labels.
    final class Sent {
        var labels: [String] = []
        func send(_ label: String) -> () -> Void { { self.labels.append(label) } }
        func run(_ sends: [() -> Void]) { for s in sends { s() } }
    }

    @Test("a Get made after a SetActive still waiting for the engine is answered after it, not before")
    func aLaterAnswerWaitsForAnEarlierRequest() throws {
        var order = ReplyOrder()
        let sent = Sent()
        order.expect(RequestID(1), try Self.call("SetActive"), encode: { _ in [] })
        // The Get is answered now (no request of its own): it must wait for request 1.
        sent.run(order.deliver(nil, sent.send("get")))
        #expect(sent.labels.isEmpty, "the Get left before the SetActive it followed: \(sent.labels)")
        let ptaken = order.take(RequestID(1))
        let p = try #require(ptaken)
        sent.run(order.deliver(p.order, sent.send("setActive")))
        #expect(sent.labels == ["setActive", "get"])
        let again = order.take(RequestID(1))
        #expect(again == nil, "a request is answered once")
    }

    @Test("requests answered out of order leave in the order they were made")
    func requestsLeaveInTheirOrder() throws {
        var order = ReplyOrder()
        let sent = Sent()
        for i in 1...3 { order.expect(RequestID(UInt64(i)), try Self.call("M\(i)"), encode: { _ in [] }) }
        let p3taken = order.take(RequestID(3))
        let p3 = try #require(p3taken)
        sent.run(order.deliver(p3.order, sent.send("3")))
        let p2taken = order.take(RequestID(2))
        let p2 = try #require(p2taken)
        sent.run(order.deliver(p2.order, sent.send("2")))
        #expect(sent.labels.isEmpty, "answers left while request 1 was still with the engine: \(sent.labels)")
        let p1taken = order.take(RequestID(1))
        let p1 = try #require(p1taken)
        sent.run(order.deliver(p1.order, sent.send("1")))
        #expect(sent.labels == ["1", "2", "3"])
    }

    @Test("with nothing waiting, an answer leaves at once")
    func nothingWaiting() throws {
        var order = ReplyOrder()
        let sent = Sent()
        sent.run(order.deliver(nil, sent.send("now")))
        #expect(sent.labels == ["now"])
        #expect(order.released().isEmpty)
    }
}
