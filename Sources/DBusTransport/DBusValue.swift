/// A D-Bus value of any type, as read from or written to a message.
///
/// Arrays and dictionaries carry their element signature so that an empty one can still be written.
/// Only containers are boxed (`indirect`): an indirect enum would allocate for every string and number as well.
public enum DBusValue: Equatable, Sendable, CustomStringConvertible {
    case byte(UInt8)
    case bool(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(String)
    case signature(String)
    indirect case array(element: String, [DBusValue])
    indirect case dict(key: String, value: String, [(DBusValue, DBusValue)])
    indirect case structure([DBusValue])
    indirect case variant(DBusValue)
    /// A file descriptor. audiod never keeps one: a received descriptor is closed as it is decoded (the value then
    /// holds -1); only tests write one, to check exactly that.
    case unixFD(Int32)

    /// The value's D-Bus type signature.
    public var signature: String {
        switch self {
        case .byte: return "y"
        case .bool: return "b"
        case .int16: return "n"
        case .uint16: return "q"
        case .int32: return "i"
        case .uint32: return "u"
        case .int64: return "x"
        case .uint64: return "t"
        case .double: return "d"
        case .string: return "s"
        case .objectPath: return "o"
        case .signature: return "g"
        case .array(let e, _): return "a" + e
        case .dict(let k, let v, _): return "a{" + k + v + "}"
        case .structure(let fields): return "(" + fields.map(\.signature).joined() + ")"
        case .variant: return "v"
        case .unixFD: return "h"
        }
    }

    public static func == (a: DBusValue, b: DBusValue) -> Bool {
        switch (a, b) {
        case (.byte(let x), .byte(let y)): return x == y
        case (.bool(let x), .bool(let y)): return x == y
        case (.int16(let x), .int16(let y)): return x == y
        case (.uint16(let x), .uint16(let y)): return x == y
        case (.int32(let x), .int32(let y)): return x == y
        case (.uint32(let x), .uint32(let y)): return x == y
        case (.int64(let x), .int64(let y)): return x == y
        case (.uint64(let x), .uint64(let y)): return x == y
        case (.double(let x), .double(let y)): return x == y
        case (.string(let x), .string(let y)): return x == y
        case (.objectPath(let x), .objectPath(let y)): return x == y
        case (.signature(let x), .signature(let y)): return x == y
        case (.array(let e1, let x), .array(let e2, let y)): return e1 == e2 && x == y
        case (.dict(let k1, let v1, let x), .dict(let k2, let v2, let y)):
            return k1 == k2 && v1 == v2 && x.count == y.count && zip(x, y).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        case (.structure(let x), .structure(let y)): return x == y
        case (.variant(let x), .variant(let y)): return x == y
        case (.unixFD(let x), .unixFD(let y)): return x == y
        default: return false
        }
    }

    public var description: String {
        switch self {
        case .byte(let v): return "\(v)"
        case .bool(let v): return "\(v)"
        case .int16(let v): return "\(v)"
        case .uint16(let v): return "\(v)"
        case .int32(let v): return "\(v)"
        case .uint32(let v): return "\(v)"
        case .int64(let v): return "\(v)"
        case .uint64(let v): return "\(v)"
        case .double(let v): return "\(v)"
        case .string(let v): return "\"\(v)\""
        case .objectPath(let v): return v
        case .signature(let v): return "signature \(v)"
        case .array(_, let items): return "[" + items.map(\.description).joined(separator: ", ") + "]"
        case .dict(_, _, let pairs): return "{" + pairs.map { "\($0.0): \($0.1)" }.joined(separator: ", ") + "}"
        case .structure(let f): return "(" + f.map(\.description).joined(separator: ", ") + ")"
        case .variant(let v): return "<\(v)>"
        case .unixFD(let v): return "fd \(v)"
        }
    }

    // MARK: Convenience

    /// A string array (`as`).
    public static func strings(_ s: [String]) -> DBusValue { .array(element: "s", s.map { .string($0) }) }

    /// A property map (`a{sv}`).
    public static func properties(_ p: [(String, DBusValue)]) -> DBusValue {
        .dict(key: "s", value: "v", p.map { (.string($0.0), .variant($0.1)) })
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    public var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }

    public var uint32Value: UInt32? {
        if case .uint32(let v) = self { return v }
        return nil
    }

    public var doubleValue: Double? {
        if case .double(let v) = self { return v }
        return nil
    }

    /// The items of an `as`, nil for any other type.
    public var stringArray: [String]? {
        guard case .array("s", let items) = self else { return nil }
        return items.compactMap(\.stringValue)
    }

    /// The entries of an `a{sv}` (variants unwrapped), nil for any other type.
    public var propertyMap: [String: DBusValue]? {
        guard case .dict("s", "v", let pairs) = self else { return nil }
        var out: [String: DBusValue] = [:]
        for (k, v) in pairs {
            guard case .string(let key) = k else { return nil }
            if case .variant(let inner) = v { out[key] = inner } else { out[key] = v }
        }
        return out
    }
}

/// The signature of a list of arguments.
public func signature(of args: [DBusValue]) -> String { args.map(\.signature).joined() }
