import AudiodTestKit
import DBusTransport
import Foundation

/// The platform rings, `rounds` times: from the signal that announces an incoming call to the music stream muted,
/// as another client of the server sees it. This process owns `org.gnome.Calls` on the session bus and speaks as
/// GNOME Calls does — `InterfacesAdded` for a call with `State` 5 (incoming), then `PropertiesChanged` to 7
/// (disconnected) — so the time is audiod's and the bus's, not a stand-in's.
func rings(_ server: TestServer, bus address: String, observer: Observer, music: UInt32, rounds: Int) throws -> [UInt64]
{
    let calls = try BusClient(address: address, recordSignals: false)
    defer { calls.close() }
    guard case .success(let r) = calls.callBus("RequestName", [.string("org.gnome.Calls"), .uint32(4)]),
        r.first == .uint32(1)
    else {
        throw BenchFailure("could not own org.gnome.Calls")
    }
    // audiod follows the name once it has an owner.
    usleep(300_000)
    var times: [UInt64] = []
    for i in 0..<rounds {
        guard observer.wait([music], muted: false) != nil else { throw BenchFailure("music muted before the ring") }
        let path = "/org/gnome/Calls/Call/\(i)"
        guard
            let added = DBusMessage.signal(
                path: "/org/gnome/Calls", interface: "org.freedesktop.DBus.ObjectManager", member: "InterfacesAdded"),
            let ended = DBusMessage.signal(
                path: path, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged")
        else { throw BenchFailure("cannot build the call's signals") }
        added.append([
            .objectPath(path),
            .dict(
                key: "s", value: "a{sv}",
                [(.string("org.gnome.Calls.Call"), .properties([("State", .uint32(5)), ("Inbound", .bool(true))]))]),
        ])
        ended.append([.string("org.gnome.Calls.Call"), .properties([("State", .uint32(7))]), .strings([])])
        let sent = nowNs()
        calls.send(added)
        guard let muted = observer.wait([music], muted: true) else {
            throw BenchFailure("the ring did not mute the music")
        }
        times.append(muted - sent)
        calls.send(ended)
        guard observer.wait([music], muted: false) != nil else {
            throw BenchFailure("the music stayed muted after the call")
        }
    }
    return times
}
