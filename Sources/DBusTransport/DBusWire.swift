// The D-Bus wire format, written by hand for the messages audiod sends most: replies, errors and signals.
//
// Why not libdbus's writer: every value appended at the top level of a message makes libdbus rewrite the header's
// SIGNATURE field in place (`_dbus_header_set_field_basic`), so a three-argument `PropertiesChanged` cost 4.8 µs to
// build — a quarter of audiod's CPU per `SetActive`. Encoding here costs a fraction of that, and the bytes go to the
// socket together with the other messages of the same loop turn (see `DBusConnection.queue`).
//
// Only what libdbus would also accept is written: names are checked with libdbus's own validators before a message
// is built (`DBusSyntax`), an array's element and a variant's content must be one complete type, every item must
// have the signature its array declares, and file descriptors are refused (audiod never sends one). A message that
// dbus-daemon found malformed would cost audiod its bus connection; the tests decode every shape written here with
// `dbus_message_demarshal`, libdbus's full validator.

import Glibc

/// One message's fields, as the wire format orders them.
struct WireHeader {
    enum Kind: UInt8 { case methodReturn = 2, error = 3, signal = 4 }
    var kind: Kind
    var serial: UInt32
    var path: String?
    var interface: String?
    var member: String?
    var errorName: String?
    var replySerial: UInt32?
    var destination: String?
}

enum DBusWire {
    /// The largest body written (the specification allows 128 MiB for a whole message; audiod's are a few kB).
    static let maxBody = 64 << 20

    /// Appends one complete message to `out`; false (and `out` unchanged) if a value cannot be written.
    static func encode(_ h: WireHeader, _ body: [DBusValue], into out: inout [UInt8], scratch: inout [UInt8]) -> Bool {
        scratch.removeAll(keepingCapacity: true)
        var signature = ""
        for v in body {
            guard write(v, &scratch) else { return false }
            appendSignature(of: v, to: &signature)
        }
        guard scratch.count <= maxBody, signature.utf8.count < 256 else { return false }

        let start = out.count
        out.append(UInt8(ascii: "l"))
        out.append(h.kind.rawValue)
        out.append(0x1)  // NO_REPLY_EXPECTED: libdbus sets it on every reply, error and signal
        out.append(1)  // protocol version
        appendUInt32(UInt32(scratch.count), &out)
        appendUInt32(h.serial, &out)
        let lengthAt = out.count
        appendUInt32(0, &out)  // the header fields' length, filled in below
        let fieldsStart = out.count
        func field(_ code: UInt8, _ type: UInt8, _ text: String) {
            pad(&out, to: 8, from: start)
            out.append(code)
            out.append(1)
            out.append(type)
            out.append(0)
            if type == UInt8(ascii: "g") {
                out.append(UInt8(text.utf8.count))
                out.append(contentsOf: text.utf8)
                out.append(0)
            } else {
                pad(&out, to: 4, from: start)
                appendUInt32(UInt32(text.utf8.count), &out)
                out.append(contentsOf: text.utf8)
                out.append(0)
            }
        }
        if let p = h.path { field(1, UInt8(ascii: "o"), p) }
        if let i = h.interface { field(2, UInt8(ascii: "s"), i) }
        if let m = h.member { field(3, UInt8(ascii: "s"), m) }
        if let e = h.errorName { field(4, UInt8(ascii: "s"), e) }
        if let r = h.replySerial {
            pad(&out, to: 8, from: start)
            out.append(contentsOf: [5, 1, UInt8(ascii: "u"), 0])
            appendUInt32(r, &out)
        }
        if let d = h.destination { field(6, UInt8(ascii: "s"), d) }
        if !signature.isEmpty { field(8, UInt8(ascii: "g"), signature) }
        let fieldsLength = UInt32(out.count - fieldsStart)
        withUnsafeBytes(of: fieldsLength.littleEndian) { b in
            for k in 0..<4 { out[lengthAt + k] = b[k] }
        }
        pad(&out, to: 8, from: start)
        out.append(contentsOf: scratch)
        return true
    }

    // MARK: Body

    private static func appendUInt32(_ v: UInt32, _ out: inout [UInt8]) {
        withUnsafeBytes(of: v.littleEndian) { out.append(contentsOf: $0) }
    }

    /// Zero bytes until `out` (counted from `base`) is a multiple of `n`. A body starts 8-aligned in its message,
    /// so aligning within the body is aligning within the message.
    private static func pad(_ out: inout [UInt8], to n: Int, from base: Int = 0) {
        let r = (out.count - base) % n
        if r != 0 { out.append(contentsOf: repeatElement(0, count: n - r)) }
    }

    private static func fixed<T: FixedWidthInteger>(_ v: T, _ out: inout [UInt8]) {
        pad(&out, to: MemoryLayout<T>.size)
        withUnsafeBytes(of: v.littleEndian) { out.append(contentsOf: $0) }
    }

    private static func text(_ s: String, _ out: inout [UInt8]) {
        pad(&out, to: 4)
        appendUInt32(UInt32(s.utf8.count), &out)
        out.append(contentsOf: s.utf8)
        out.append(0)
    }

    /// `memchr` over the string's bytes where they are contiguous (a native string), else a byte-by-byte scan.
    private static func hasNUL(_ s: String) -> Bool {
        let found = s.utf8.withContiguousStorageIfAvailable { b -> Bool in
            guard let base = b.baseAddress, !b.isEmpty else { return false }
            return memchr(base, 0, b.count) != nil
        }
        return found ?? s.utf8.contains(0)
    }

    /// The alignment of values whose signature starts with `c`.
    private static func alignment(_ c: UInt8) -> Int {
        switch c {
        case UInt8(ascii: "y"), UInt8(ascii: "g"), UInt8(ascii: "v"): return 1
        case UInt8(ascii: "n"), UInt8(ascii: "q"): return 2
        case UInt8(ascii: "x"), UInt8(ascii: "t"), UInt8(ascii: "d"), UInt8(ascii: "("), UInt8(ascii: "{"): return 8
        default: return 4
        }
    }

    /// An element type must be exactly one complete type (libdbus would abort on anything else). The common ones —
    /// a basic type or a variant — are recognised here; the rest are left to libdbus's check.
    private static func isSingle(_ s: String) -> Bool {
        let u = s.utf8
        if u.count == 1, let c = u.first { return isBasic(c) || c == UInt8(ascii: "v") }
        return DBusSyntax.isSingleType(s)
    }

    /// `a{kv}` is one complete type: a basic key, any single value.
    private static func isDictionary(_ k: String, _ v: String) -> Bool {
        if k.utf8.count == 1, let c = k.utf8.first, isBasic(c), isSingle(v) { return true }
        return DBusSyntax.isSingleType("a{" + k + v + "}")
    }

    private static func isBasic(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "y"), UInt8(ascii: "b"), UInt8(ascii: "n"), UInt8(ascii: "q"), UInt8(ascii: "i"),
            UInt8(ascii: "u"), UInt8(ascii: "x"), UInt8(ascii: "t"), UInt8(ascii: "d"), UInt8(ascii: "s"),
            UInt8(ascii: "o"), UInt8(ascii: "g"), UInt8(ascii: "h"):
            return true
        default: return false
        }
    }

    /// Containers nest at most 32 deep (the specification's limit for arrays, and for structures, separately);
    /// one limit for all of them is stricter, and audiod's values are a few levels deep.
    private static let maxDepth = 32

    private static func write(_ value: DBusValue, _ out: inout [UInt8], depth: Int = 0) -> Bool {
        switch value {
        case .byte(let v): out.append(v)
        case .bool(let v): fixed(UInt32(v ? 1 : 0), &out)
        case .int16(let v): fixed(v, &out)
        case .uint16(let v): fixed(v, &out)
        case .int32(let v): fixed(v, &out)
        case .uint32(let v): fixed(v, &out)
        case .int64(let v): fixed(v, &out)
        case .uint64(let v): fixed(v, &out)
        case .double(let v): fixed(v.bitPattern, &out)
        case .unixFD: return false  // a descriptor travels beside the bytes; audiod never sends one
        case .string(let s):
            // A NUL cannot be in a D-Bus string; libdbus would abort on it. Swift strings are otherwise valid UTF-8.
            text(hasNUL(s) ? s.filter { $0 != "\0" } : s, &out)
        case .objectPath(let s):
            guard DBusSyntax.isPath(s) else { return false }
            text(s, &out)
        case .signature(let s):
            guard DBusSyntax.isSignature(s) else { return false }
            out.append(UInt8(s.utf8.count))
            out.append(contentsOf: s.utf8)
            out.append(0)
        case .variant(let inner):
            var sig = ""
            appendSignature(of: inner, to: &sig)
            guard sig.utf8.count < 256 else { return false }
            out.append(UInt8(sig.utf8.count))
            out.append(contentsOf: sig.utf8)
            out.append(0)
            return depth < maxDepth && write(inner, &out, depth: depth + 1)
        case .structure(let fields):
            guard !fields.isEmpty, depth < maxDepth else { return false }
            pad(&out, to: 8)
            return fields.allSatisfy { write($0, &out, depth: depth + 1) }
        case .array(let element, let items):
            guard let first = element.utf8.first, depth < maxDepth, isSingle(element) else { return false }
            return array(alignment(first), &out) { out in
                items.allSatisfy { item in
                    var sig = ""
                    appendSignature(of: item, to: &sig)
                    return sig == element && write(item, &out, depth: depth + 1)
                }
            }
        case .dict(let k, let v, let pairs):
            guard depth < maxDepth, isDictionary(k, v) else { return false }
            return array(8, &out) { out in
                pairs.allSatisfy { pair in
                    var ks = "", vs = ""
                    appendSignature(of: pair.0, to: &ks)
                    appendSignature(of: pair.1, to: &vs)
                    guard ks == k, vs == v else { return false }
                    pad(&out, to: 8)
                    return write(pair.0, &out, depth: depth + 1) && write(pair.1, &out, depth: depth + 1)
                }
            }
        }
        return true
    }

    /// An array: its byte length, padding to the first element's alignment (not counted), then the elements.
    private static func array(_ align: Int, _ out: inout [UInt8], _ items: (inout [UInt8]) -> Bool) -> Bool {
        pad(&out, to: 4)
        let lengthAt = out.count
        appendUInt32(0, &out)
        pad(&out, to: align)
        let start = out.count
        guard items(&out) else { return false }
        let length = out.count - start
        guard length <= maxBody else { return false }
        withUnsafeBytes(of: UInt32(length).littleEndian) { b in
            for k in 0..<4 { out[lengthAt + k] = b[k] }
        }
        return true
    }

    /// The value's signature, appended without building intermediate strings.
    private static func appendSignature(of value: DBusValue, to s: inout String) {
        switch value {
        case .array(let e, _): s += "a"; s += e
        case .dict(let k, let v, _): s += "a{"; s += k; s += v; s += "}"
        case .structure(let fields):
            s += "("
            for f in fields { appendSignature(of: f, to: &s) }
            s += ")"
        default: s += value.signature
        }
    }
}
