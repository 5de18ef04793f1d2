@testable import DBusTransport
import Testing

/// audiod writes its replies, errors and signals itself (DBusWire) instead of through libdbus's writer. Here
/// libdbus is the referee: it writes the same message, its marshalled bytes must equal ours, and its validator
/// (`dbus_message_demarshal`) must accept ours and read back every value and header field.
@Suite struct DBusWireTests {
    static let shapes: [[DBusValue]] = [
        [],
        [.string("Podcasts ✓")],
        [.string("org.audiod.AudioSession1.Session"), .properties([("Active", .bool(true))]), .strings([])],
        [.properties([("application-name", .string("mpv")), ("pid", .uint32(4242)), ("x", .double(0.2))])],
        [.strings(["mix-with-others", "duck-others"]), .strings([])],
        [.array(element: "a{sv}", [.properties([("index", .uint32(7)), ("kind", .string("playback"))])])],
        [.array(element: "(sssas)", [.structure([.string("mpv"), .string("playback"), .string("default"), .strings([])])])],
        [.objectPath("/org/audiod/AudioSession1/session/12"), .signature("a{sv}")],
        // Alignment: a byte before every 2-, 4- and 8-byte type, in arrays, structures and variants.
        [.byte(255), .int16(-3), .byte(1), .uint16(9), .byte(2), .int32(-7), .byte(3), .uint32(8), .byte(4), .int64(-5),
         .byte(5), .uint64(1 << 40), .byte(6), .double(-0.125), .byte(7), .bool(false)],
        [.byte(1), .array(element: "x", [.int64(1), .int64(-2)]), .byte(2), .array(element: "(yx)", [
            .structure([.byte(9), .int64(3)]), .structure([.byte(8), .int64(4)]),
        ])],
        [.byte(1), .array(element: "x", []), .byte(2), .dict(key: "x", value: "ay", [])],
        // An array's length is followed by padding to its first element, counted in no length, even when empty.
        [.array(element: "x", [.int64(1)])],
        [.array(element: "t", []), .array(element: "(yx)", [])],
        [.dict(key: "s", value: "v", []), .byte(1), .array(element: "d", [.double(1)])],
        [.dict(key: "u", value: "ay", [(.uint32(1), .array(element: "y", [.byte(1), .byte(2), .byte(3)]))])],
        [.variant(.variant(.string("nested"))), .variant(.structure([.byte(1), .double(2)])), .variant(.int64(7))],
        [.string("with\u{0}nul")],
        [.string(String(repeating: "long ", count: 2000))],
    ]

    private static func header(_ kind: WireHeader.Kind, serial: UInt32) -> WireHeader {
        switch kind {
        case .signal:
            return WireHeader(kind: .signal, serial: serial, path: "/org/audiod/Test", interface: "org.audiod.Test", member: "Shape")
        case .methodReturn:
            return WireHeader(kind: .methodReturn, serial: serial, replySerial: 41, destination: ":1.42")
        case .error:
            return WireHeader(kind: .error, serial: serial, errorName: "org.audiod.Test.Error", replySerial: 41, destination: ":1.42")
        }
    }

    private static func encode(_ h: WireHeader, _ args: [DBusValue]) -> [UInt8]? {
        var out: [UInt8] = [], scratch: [UInt8] = []
        return DBusWire.encode(h, args, into: &out, scratch: &scratch) ? out : nil
    }

    /// The body as libdbus writes it: the last `body length` bytes of its marshalled message.
    private static func body(_ bytes: [UInt8]) -> ArraySlice<UInt8> {
        let n = Int(bytes[4]) | Int(bytes[5]) << 8 | Int(bytes[6]) << 16 | Int(bytes[7]) << 24
        return bytes.suffix(n)
    }

    @Test("a signal is written byte for byte as libdbus writes it", arguments: shapes.indices)
    func signalBytes(_ k: Int) throws {
        let args = Self.shapes[k]
        let lib = try #require(DBusMessage.signal(path: "/org/audiod/Test", interface: "org.audiod.Test", member: "Shape"))
        #expect(lib.append(args))
        // Serial 0: libdbus numbers a message only as it sends it.
        let theirs = try #require(lib.marshalled)
        let ours = try #require(Self.encode(Self.header(.signal, serial: 0), args))
        #expect(ours == theirs)
    }

    @Test("replies and errors pass libdbus's validator with every field and value intact",
          arguments: [WireHeader.Kind.signal, .methodReturn, .error], shapes.indices)
    func validated(_ kind: WireHeader.Kind, _ k: Int) throws {
        let args = kind == .error ? [DBusValue.string("it went wrong")] : Self.shapes[k]
        let h = Self.header(kind, serial: 99)
        let ours = try #require(Self.encode(h, args))
        let m = try #require(ours.withUnsafeBytes { DBusMessage.demarshal($0) }, "libdbus refused the message")
        #expect(m.serial == 99)
        #expect(m.noReply)
        #expect(m.path == h.path)
        #expect(m.interface == h.interface)
        #expect(m.member == h.member)
        #expect(m.errorName == h.errorName)
        #expect(m.replySerial == (h.replySerial ?? 0))
        #expect(m.destination == h.destination)
        let expected = args.map { v -> DBusValue in
            if case .string(let s) = v { return .string(s.filter { $0 != "\0" }) }  // a NUL cannot travel
            return v
        }
        #expect(m.arguments == expected)
        #expect(m.signature == expected.map(\.signature).joined())
        // The body is the one libdbus writes for the same arguments.
        if kind == .methodReturn, let call = DBusMessage.methodCall(destination: nil, path: "/", interface: nil, member: "M") {
            call.serial = 41
            let lib = try #require(call.makeReturn())
            #expect(lib.append(args))
            #expect(Self.body(try #require(lib.marshalled)) == Self.body(ours))
        }
    }

    @Test("values libdbus would refuse are refused, and nothing of the message is written")
    func refused() {
        var nested = DBusValue.array(element: "y", [])
        for _ in 0..<40 { nested = .array(element: nested.signature, [nested]) }
        let bad: [DBusValue] = [
            .unixFD(0),
            .objectPath("not/a/path"),
            .objectPath("/trailing/"),
            .signature("a{vs}"),
            .array(element: "s", [.uint32(1)]),
            .array(element: "ss", []),
            .array(element: "", []),
            .dict(key: "v", value: "s", []),
            .dict(key: "s", value: "v", [(.string("k"), .string("not a variant"))]),
            .structure([]),
            nested,
        ]
        for v in bad {
            var out: [UInt8] = [1, 2, 3], scratch: [UInt8] = []
            #expect(!DBusWire.encode(Self.header(.signal, serial: 1), [.string("before"), v], into: &out, scratch: &scratch),
                    "\(v.signature) was accepted")
            #expect(out == [1, 2, 3])
        }
    }
}
