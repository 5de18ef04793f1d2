import AudioPolicy
import DBusTransport

/// Answers leave in the order of the calls: after the replies of every engine request made before them. A pipelined
/// `Get` that follows a `SetActive` is answered after it — and after the signals of its step, so that it shows what
/// they announced — not before, while the step's stream operations are still on their way. A value: the service
/// runs the sends it returns, after the mutation (a send must not find this order half changed).
struct ReplyOrder {
    typealias Pending = (message: DBusMessage, encode: (Reply) -> [DBusValue]?, order: UInt64)

    /// Calls waiting for the engine's reply, numbered in the order their requests were made.
    private var pending: [RequestID: Pending] = [:]
    /// The orders of `pending`, ascending.
    private var pendingOrders: [UInt64] = []
    private var requestsMade: UInt64 = 0
    /// Answers that may not leave yet because a request made before them is still waiting for the engine (its reply
    /// leaves once the step's stream operations have): sorted by `key`, sent in that order.
    private var held: [(key: UInt64, send: () -> Void)] = []

    /// A request `r` for call `m` goes to the engine now.
    mutating func expect(_ r: RequestID, _ m: DBusMessage, encode: @escaping (Reply) -> [DBusValue]?) {
        pending[r] = (m, encode, requestsMade)
        pendingOrders.append(requestsMade)
        requestsMade += 1
    }

    /// The call request `r` answers, once.
    mutating func take(_ r: RequestID) -> Pending? {
        guard let p = pending.removeValue(forKey: r) else { return nil }
        if pendingOrders.first == p.order {
            pendingOrders.removeFirst()
        } else if let i = pendingOrders.firstIndex(of: p.order) {
            pendingOrders.remove(at: i)
        }
        return p
    }

    /// An answer is ready: the sends that may leave now, in order (`send` among them unless it must wait).
    /// `request`: the order of the engine request this answers (nil: an answer made now, after every request so far).
    mutating func deliver(_ request: UInt64?, _ send: @escaping () -> Void) -> [() -> Void] {
        // Ranks: an engine request's answer just after the calls made before it, another answer after every request
        // made before it.
        let key = request.map { $0 * 2 + 1 } ?? requestsMade * 2
        if held.isEmpty, !blocked(key) { return [send] }
        let at = held.firstIndex { $0.key > key } ?? held.endIndex
        held.insert((key, send), at: at)
        return released()
    }

    /// The held sends that may leave now (a request before them was answered), in order.
    mutating func released() -> [() -> Void] {
        var out: [() -> Void] = []
        while let first = held.first, !blocked(first.key) {
            held.removeFirst()
            out.append(first.send)
        }
        return out
    }

    /// A request made before an answer of this rank is still waiting for the engine.
    private func blocked(_ key: UInt64) -> Bool { pendingOrders.first.map { $0 * 2 + 1 < key } ?? false }
}
