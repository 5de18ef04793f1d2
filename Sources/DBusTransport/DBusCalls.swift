// Every libdbus call in audiod lives in this file (STYLE.md §2).
//
// Threading: a connection is confined to the thread of the `DBusLoop` it joins (audiod: the pa_mainloop thread,
// shared with libpulse). libdbus joins that loop through its watch, timeout and dispatch-status functions, as
// PulseAudio's own dbus-util does; nothing polls.
//
// Lifetimes: watch/timeout userdata and filter/pending-call userdata are retained Swift objects released by the
// free functions libdbus calls; every message we create or take is unreferenced by the `DBusMessage` that owns it.

import CDBus
import Dispatch
import FoundationEssentials
import Glibc

// MARK: - The loop libdbus joins

/// The event loop a connection joins: fd watches, one-shot timers and deferred work, all on one thread.
public protocol DBusLoop: AnyObject, Sendable {
    /// Watch `fd`; the handler gets (readable, writable, hangup/error).
    func dbusWatch(fd: Int32, readable: Bool, writable: Bool, _ handler: @escaping (Bool, Bool, Bool) -> Void)
        -> any DBusLoopWatch
    func dbusTimer(afterNanoseconds ns: UInt64, _ handler: @escaping () -> Void) -> (any DBusLoopTimer)?
    /// Run `work` on the loop thread after the current callback returns.
    func dbusSoon(_ work: @escaping () -> Void)
}

public protocol DBusLoopWatch: AnyObject {
    func update(readable: Bool, writable: Bool)
    func cancel()
}

public protocol DBusLoopTimer: AnyObject {
    func cancel()
}

// MARK: - Type codes (DBUS_TYPE_* are cast macros that do not import)

enum TypeCode {
    static let byte = Int32(UInt8(ascii: "y"))
    static let bool = Int32(UInt8(ascii: "b"))
    static let int16 = Int32(UInt8(ascii: "n"))
    static let uint16 = Int32(UInt8(ascii: "q"))
    static let int32 = Int32(UInt8(ascii: "i"))
    static let uint32 = Int32(UInt8(ascii: "u"))
    static let int64 = Int32(UInt8(ascii: "x"))
    static let uint64 = Int32(UInt8(ascii: "t"))
    static let double = Int32(UInt8(ascii: "d"))
    static let string = Int32(UInt8(ascii: "s"))
    static let objectPath = Int32(UInt8(ascii: "o"))
    static let signature = Int32(UInt8(ascii: "g"))
    static let unixFD = Int32(UInt8(ascii: "h"))
    static let array = Int32(UInt8(ascii: "a"))
    static let variant = Int32(UInt8(ascii: "v"))
    static let structure = Int32(UInt8(ascii: "r"))
    static let dictEntry = Int32(UInt8(ascii: "e"))
    static let invalid: Int32 = 0
}

// MARK: - Messages

/// A D-Bus message (owns one reference to a `DBusMessage*`). Not Sendable: libdbus changes a message as it is
/// appended to, read (the header fields below are cached on first read) and sent, so it stays on the thread that made
/// or received it.
public final class DBusMessage {
    let raw: OpaquePointer

    public enum Kind: Sendable { case methodCall, methodReturn, error, signal, other }

    init(taking raw: OpaquePointer) { self.raw = raw }

    init(retaining raw: OpaquePointer) {
        self.raw = raw
        dbus_message_ref(raw)
    }

    deinit { dbus_message_unref(raw) }

    /// `dbus_message_new_method_call`; nil when a name is not valid D-Bus syntax.
    public static func methodCall(destination: String?, path: String, interface: String?, member: String)
        -> DBusMessage?
    {
        guard DBusSyntax.isPath(path), DBusSyntax.isMember(member),
            interface.map(DBusSyntax.isInterface) ?? true, destination.map(DBusSyntax.isBusName) ?? true,
            let m = dbus_message_new_method_call(destination, path, interface, member)
        else { return nil }
        return DBusMessage(taking: m)
    }

    /// `dbus_message_new_signal`.
    public static func signal(path: String, interface: String, member: String) -> DBusMessage? {
        guard DBusSyntax.isPath(path), DBusSyntax.isInterface(interface), DBusSyntax.isMember(member),
            let m = dbus_message_new_signal(path, interface, member)
        else { return nil }
        return DBusMessage(taking: m)
    }

    /// `dbus_message_new_method_return`.
    public func makeReturn() -> DBusMessage? {
        dbus_message_new_method_return(raw).map { DBusMessage(taking: $0) }
    }

    /// `dbus_message_new_error`; an invalid error name becomes `org.freedesktop.DBus.Error.Failed`.
    public func makeError(name: String, message: String) -> DBusMessage? {
        let n = DBusSyntax.isErrorName(name) ? name : "org.freedesktop.DBus.Error.Failed"
        return dbus_message_new_error(raw, n, message).map { DBusMessage(taking: $0) }
    }

    public var kind: Kind {
        switch dbus_message_get_type(raw) {
        case DBUS_MESSAGE_TYPE_METHOD_CALL: return .methodCall
        case DBUS_MESSAGE_TYPE_METHOD_RETURN: return .methodReturn
        case DBUS_MESSAGE_TYPE_ERROR: return .error
        case DBUS_MESSAGE_TYPE_SIGNAL: return .signal
        default: return .other
        }
    }

    // Read once: a call's handling asks for its path, member and sender several times. (A message's header is not
    // changed after it is built, except a destination set by `setDestination` before anything reads it.)
    public private(set) lazy var path: String? = dbus_message_get_path(raw).map { String(cString: $0) }
    public private(set) lazy var interface: String? = dbus_message_get_interface(raw).map { String(cString: $0) }
    public private(set) lazy var member: String? = dbus_message_get_member(raw).map { String(cString: $0) }
    public private(set) lazy var sender: String? = dbus_message_get_sender(raw).map { String(cString: $0) }
    public var destination: String? { dbus_message_get_destination(raw).map { String(cString: $0) } }
    public var errorName: String? { dbus_message_get_error_name(raw).map { String(cString: $0) } }
    public var signature: String { dbus_message_get_signature(raw).map { String(cString: $0) } ?? "" }
    /// Asks the bus not to start the destination's service if it is not running (`dbus_message_set_auto_start`):
    /// audiod talks only to services that are there, and never starts one by asking.
    public func setNoAutoStart() { dbus_message_set_auto_start(raw, 0) }

    /// Addresses the message to one connection (a unicast signal, in tests that speak as a hostile peer).
    @discardableResult
    public func setDestination(_ name: String) -> Bool {
        DBusSyntax.isBusName(name) && dbus_message_set_destination(raw, name) != 0
    }

    /// The bus driver itself (`org.freedesktop.DBus`) sent this message; dbus-daemon sets the sender, so a peer
    /// cannot forge it.
    public var isFromBus: Bool { sender == "org.freedesktop.DBus" }

    /// The caller does not want a reply.
    public var noReply: Bool { dbus_message_get_no_reply(raw) != 0 }

    /// The arguments, decoded (`dbus_message_iter_*`).
    public var arguments: [DBusValue] {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(raw, &iter) != 0 else { return [] }
        var out: [DBusValue] = []
        while dbus_message_iter_get_arg_type(&iter) != TypeCode.invalid {
            if let v = Self.read(&iter) { out.append(v) }
            dbus_message_iter_next(&iter)
        }
        return out
    }

    /// The message's first argument if it is a string, read alone.
    public func peekFirstString() -> String? {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(raw, &iter) != 0, dbus_message_iter_get_arg_type(&iter) == TypeCode.string else {
            return nil
        }
        var p: UnsafePointer<CChar>?
        dbus_message_iter_get_basic(&iter, &p)
        return p.map { String(cString: $0) }
    }

    /// The size of the message's arguments as marshaled, counted without decoding them: an array counts by its
    /// length prefix, a string by its length; a structure's or variant's contents are counted the same way. Counting
    /// stops once it passes `limit` (the answer is then some size above it). What any peer may send audiod is
    /// checked with it before anything is decoded.
    public func argumentBytes(upTo limit: Int) -> Int {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(raw, &iter) != 0 else { return 0 }
        var total = 0
        Self.count(&iter, into: &total, limit: limit, depth: 0)
        return total
    }

    private static func count(_ iter: inout DBusMessageIter, into total: inout Int, limit: Int, depth: Int) {
        while total <= limit {
            let type = dbus_message_iter_get_arg_type(&iter)
            switch type {
            case TypeCode.invalid: return
            case TypeCode.array:
                var sub = DBusMessageIter()
                dbus_message_iter_recurse(&iter, &sub)
                total += 4 + Int(audiod_dbus_iter_array_bytes(&sub))
            case TypeCode.string, TypeCode.objectPath, TypeCode.signature:
                var p: UnsafePointer<CChar>?
                dbus_message_iter_get_basic(&iter, &p)
                total += 5 + (p.map { strlen($0) } ?? 0)
            case TypeCode.variant, TypeCode.structure, TypeCode.dictEntry:
                // The protocol nests at most 64 deep; libdbus validated that already.
                var sub = DBusMessageIter()
                dbus_message_iter_recurse(&iter, &sub)
                total += 8
                if depth < 64 { count(&sub, into: &total, limit: limit, depth: depth + 1) }
            default:
                total += 8
            }
            if dbus_message_iter_next(&iter) == 0 { return }
        }
    }

    /// The string inside the variant that is the message's first argument, read alone (nil: not a variant holding a
    /// string).
    public func peekVariantString() -> String? {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(raw, &iter) != 0, dbus_message_iter_get_arg_type(&iter) == TypeCode.variant else {
            return nil
        }
        var sub = DBusMessageIter()
        dbus_message_iter_recurse(&iter, &sub)
        guard dbus_message_iter_get_arg_type(&sub) == TypeCode.string else { return nil }
        var p: UnsafePointer<CChar>?
        dbus_message_iter_get_basic(&sub, &p)
        return p.map { String(cString: $0) }
    }

    /// What `peekDictionaryEntry` found.
    public enum DictionaryPeek: Equatable {
        /// The entry's value (nil: no such entry, or the value did not decode).
        case value(DBusValue?)
        /// The dictionary is larger than the bound: nothing of it was decoded.
        case tooLarge(bytes: Int, entries: Int)
    }

    /// One entry of the `a{s…}` dictionary that is the message's argument `argument`, decoded alone: the others are
    /// skipped by their length prefixes, unread. A peer's message may be tens of MB (libdbus has validated it by
    /// now: ~1 ms per MB); decoding all of it would hold the loop far longer, for one value. A dictionary of more
    /// than `maxBytes` bytes or `maxEntries` entries is `tooLarge` before anything in it is read. nil: the message
    /// has no such argument, or it is not a dictionary with string keys.
    public func peekDictionaryEntry(argument: Int, key wanted: String, maxBytes: Int, maxEntries: Int)
        -> DictionaryPeek?
    {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(raw, &iter) != 0 else { return nil }
        for _ in 0..<argument where dbus_message_iter_next(&iter) == 0 { return nil }
        guard dbus_message_iter_get_arg_type(&iter) == TypeCode.array, Self.iterSignature(&iter).hasPrefix("a{s")
        else { return nil }
        var sub = DBusMessageIter()
        dbus_message_iter_recurse(&iter, &sub)
        // Asked of the iterator inside the array, as libdbus's own element count does.
        let bytes = Int(audiod_dbus_iter_array_bytes(&sub))
        guard bytes <= maxBytes else { return .tooLarge(bytes: bytes, entries: 0) }
        var entries = 0
        var found: DBusValue?
        while dbus_message_iter_get_arg_type(&sub) == TypeCode.dictEntry {
            entries += 1
            guard entries <= maxEntries else { return .tooLarge(bytes: bytes, entries: entries) }
            var entry = DBusMessageIter()
            dbus_message_iter_recurse(&sub, &entry)
            var p: UnsafePointer<CChar>?
            dbus_message_iter_get_basic(&entry, &p)
            if found == nil, let p, String(cString: p) == wanted, dbus_message_iter_next(&entry) != 0 {
                found = Self.read(&entry)
                break
            }
            dbus_message_iter_next(&sub)
        }
        return .value(found)
    }

    /// The descriptor that is the message's only argument (signature `h`), which the caller then owns; nil for any
    /// other message. `arguments` closes every descriptor a message carries: this is the one way to keep one, and
    /// only audiod's own logind inhibitor uses it (docs/API.md "Trust").
    public func takeOnlyUnixFD() -> Int32? {
        guard signature == "h" else { return nil }
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(raw, &iter) != 0, dbus_message_iter_get_arg_type(&iter) == TypeCode.unixFD else {
            return nil
        }
        // libdbus hands out a duplicate (close-on-exec); the message's own copy goes with the message.
        var fd: Int32 = -1
        dbus_message_iter_get_basic(&iter, &fd)
        return fd >= 0 ? fd : nil
    }

    /// Appends arguments; false if libdbus refused one (out of memory, or a value that does not fit).
    @discardableResult
    public func append(_ args: [DBusValue]) -> Bool {
        var iter = DBusMessageIter()
        dbus_message_iter_init_append(raw, &iter)
        for a in args where !Self.write(a, &iter) { return false }
        return true
    }

    private static func read(_ iter: inout DBusMessageIter) -> DBusValue? {
        let type = dbus_message_iter_get_arg_type(&iter)
        func basic<T: BitwiseCopyable>(_ zero: T) -> T {
            var v = zero
            dbus_message_iter_get_basic(&iter, &v)
            return v
        }
        switch type {
        case TypeCode.byte: return .byte(basic(UInt8(0)))
        case TypeCode.bool: return .bool(basic(UInt32(0)) != 0)
        case TypeCode.int16: return .int16(basic(Int16(0)))
        case TypeCode.uint16: return .uint16(basic(UInt16(0)))
        case TypeCode.int32: return .int32(basic(Int32(0)))
        case TypeCode.uint32: return .uint32(basic(UInt32(0)))
        case TypeCode.int64: return .int64(basic(Int64(0)))
        case TypeCode.uint64: return .uint64(basic(UInt64(0)))
        case TypeCode.double: return .double(basic(Double(0)))
        case TypeCode.unixFD:
            // libdbus hands out a duplicate that the reader owns. audiod never uses a descriptor from the bus, so
            // it is closed at once: a peer must not be able to fill audiod's descriptor table.
            let fd = basic(Int32(-1))
            if fd >= 0 { Glibc.close(fd) }
            return .unixFD(-1)
        case TypeCode.string, TypeCode.objectPath, TypeCode.signature:
            var p: UnsafePointer<CChar>?
            dbus_message_iter_get_basic(&iter, &p)
            let s = p.map { String(cString: $0) } ?? ""
            return type == TypeCode.string ? .string(s) : type == TypeCode.objectPath ? .objectPath(s) : .signature(s)
        case TypeCode.variant:
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            return read(&sub).map { .variant($0) }
        case TypeCode.structure:
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            var fields: [DBusValue] = []
            while dbus_message_iter_get_arg_type(&sub) != TypeCode.invalid {
                if let v = read(&sub) { fields.append(v) }
                dbus_message_iter_next(&sub)
            }
            return .structure(fields)
        case TypeCode.array:
            let full = iterSignature(&iter)
            let element = String(full.dropFirst())
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            if element.hasPrefix("{") {
                let inner = String(element.dropFirst().dropLast())
                let keySig = String(inner.prefix(1))
                let valueSig = String(inner.dropFirst())
                var pairs: [(DBusValue, DBusValue)] = []
                while dbus_message_iter_get_arg_type(&sub) == TypeCode.dictEntry {
                    var entry = DBusMessageIter()
                    dbus_message_iter_recurse(&sub, &entry)
                    if let k = read(&entry), dbus_message_iter_next(&entry) != 0, let v = read(&entry) {
                        pairs.append((k, v))
                    }
                    dbus_message_iter_next(&sub)
                }
                return .dict(key: keySig, value: valueSig, pairs)
            }
            var items: [DBusValue] = []
            while dbus_message_iter_get_arg_type(&sub) != TypeCode.invalid {
                if let v = read(&sub) { items.append(v) }
                dbus_message_iter_next(&sub)
            }
            return .array(element: element, items)
        default:
            return nil
        }
    }

    private static func iterSignature(_ iter: inout DBusMessageIter) -> String {
        guard let p = dbus_message_iter_get_signature(&iter) else { return "" }
        defer { dbus_free(p) }
        return String(cString: p)
    }

    private static func open(
        _ iter: inout DBusMessageIter, _ type: Int32, _ contained: String?, _ body: (inout DBusMessageIter) -> Bool
    ) -> Bool {
        var sub = DBusMessageIter()
        let opened: Bool
        if let contained {
            opened = contained.withCString { dbus_message_iter_open_container(&iter, type, $0, &sub) != 0 }
        } else {
            opened = dbus_message_iter_open_container(&iter, type, nil, &sub) != 0
        }
        guard opened else { return false }
        guard body(&sub) else {
            dbus_message_iter_abandon_container(&iter, &sub)
            return false
        }
        return dbus_message_iter_close_container(&iter, &sub) != 0
    }

    private static func write(_ value: DBusValue, _ iter: inout DBusMessageIter) -> Bool {
        func basic<T: BitwiseCopyable>(_ type: Int32, _ v: T) -> Bool {
            var v = v
            return dbus_message_iter_append_basic(&iter, type, &v) != 0
        }
        func text(_ type: Int32, _ s: String) -> Bool {
            s.withCString { p in
                var p: UnsafePointer<CChar>? = p
                return dbus_message_iter_append_basic(&iter, type, &p) != 0
            }
        }
        switch value {
        case .byte(let v): return basic(TypeCode.byte, v)
        case .bool(let v): return basic(TypeCode.bool, UInt32(v ? 1 : 0))
        case .int16(let v): return basic(TypeCode.int16, v)
        case .uint16(let v): return basic(TypeCode.uint16, v)
        case .int32(let v): return basic(TypeCode.int32, v)
        case .uint32(let v): return basic(TypeCode.uint32, v)
        case .int64(let v): return basic(TypeCode.int64, v)
        case .uint64(let v): return basic(TypeCode.uint64, v)
        case .double(let v): return basic(TypeCode.double, v)
        case .unixFD(let fd):
            // Only tests send descriptors (to check that audiod drops them); libdbus duplicates the fd it is given.
            return fd >= 0 && basic(TypeCode.unixFD, fd)
        case .string(let s):
            // libdbus aborts on a string with an embedded NUL; Swift strings are otherwise valid UTF-8.
            return text(TypeCode.string, s.contains("\0") ? s.filter { $0 != "\0" } : s)
        case .objectPath(let s): return DBusSyntax.isPath(s) && text(TypeCode.objectPath, s)
        case .signature(let s): return DBusSyntax.isSignature(s) && text(TypeCode.signature, s)
        case .variant(let inner):
            return open(&iter, TypeCode.variant, inner.signature) { write(inner, &$0) }
        case .structure(let fields):
            return open(&iter, TypeCode.structure, nil) { sub in fields.allSatisfy { write($0, &sub) } }
        case .array(let element, let items):
            guard DBusSyntax.isSignature(element) else { return false }
            return open(&iter, TypeCode.array, element) { sub in
                items.allSatisfy { $0.signature == element && write($0, &sub) }
            }
        case .dict(let k, let v, let pairs):
            guard DBusSyntax.isSignature("a{" + k + v + "}") else { return false }
            return open(&iter, TypeCode.array, "{" + k + v + "}") { sub in
                pairs.allSatisfy { pair in
                    open(&sub, TypeCode.dictEntry, nil) { entry in
                        pair.0.signature == k && pair.1.signature == v && write(pair.0, &entry)
                            && write(pair.1, &entry)
                    }
                }
            }
        }
    }
}

/// D-Bus name and signature syntax (`dbus_validate_*`, `dbus_signature_validate`): libdbus aborts the process on a
/// malformed name handed to its constructors, so everything is checked first.
public enum DBusSyntax {
    // `withCString` lends a native string's own bytes; passing the String straight to C copies it into a new array.
    public static func isPath(_ s: String) -> Bool { s.withCString { dbus_validate_path($0, nil) != 0 } }
    public static func isInterface(_ s: String) -> Bool { s.withCString { dbus_validate_interface($0, nil) != 0 } }
    public static func isMember(_ s: String) -> Bool { s.withCString { dbus_validate_member($0, nil) != 0 } }
    public static func isErrorName(_ s: String) -> Bool { s.withCString { dbus_validate_error_name($0, nil) != 0 } }
    public static func isBusName(_ s: String) -> Bool { s.withCString { dbus_validate_bus_name($0, nil) != 0 } }
    public static func isSignature(_ s: String) -> Bool { s.withCString { dbus_signature_validate($0, nil) != 0 } }
}

// MARK: - Errors

/// A D-Bus error: a name (`org.freedesktop.DBus.Error.*`, `org.audiod.AudioSession1.Error.*`) and a message.
public struct DBusError: Error, Equatable, Sendable, CustomStringConvertible {
    public var name: String
    public var message: String
    public init(name: String, message: String) {
        self.name = name
        self.message = message
    }
    public var description: String { "\(name): \(message)" }

    public static func failed(_ message: String) -> DBusError {
        DBusError(name: "org.freedesktop.DBus.Error.Failed", message: message)
    }
}

/// Takes a libdbus `DBusError` out (and frees it).
private func take(_ e: inout CDBus.DBusError) -> DBusError? {
    guard dbus_error_is_set(&e) != 0 else { return nil }
    defer { dbus_error_free(&e) }
    return DBusError(
        name: e.name.map { String(cString: $0) } ?? "org.freedesktop.DBus.Error.Failed",
        message: e.message.map { String(cString: $0) } ?? "")
}

// MARK: - Connection

/// A private connection to a bus, joined to a `DBusLoop`. Confined to the loop thread: not Sendable, so other
/// threads hold it only as a `LoopBound` (`PollLoop.bind`, `MainLoop.bind`).
public final class DBusConnection {

    let raw: OpaquePointer
    /// The loop the connection runs on (for timers of its users).
    public let loop: any DBusLoop
    /// Gets every incoming message (method calls to us, signals we matched, replies nobody waits for).
    public var onMessage: ((DBusMessage) -> Void)?
    /// Called once if the bus connection is lost.
    public var onDisconnect: (() -> Void)?
    private var dispatchScheduled = false
    private var closed = false
    /// Replies still owed, so that closing answers every one of them (libdbus would only after a dispatch that a
    /// closed connection never gets).
    private var inFlight: [UInt64: ReplyBox] = [:]
    private var nextCall: UInt64 = 0
    /// Called once when the bus has read nothing of what audiod queued for too long, or the queue has grown past
    /// its bound (`Bounds`): audiod cannot serve any more, and waiting on the bus would stop enforcement.
    public var onStalled: ((String) -> Void)?
    private let bounds: Bounds
    /// The last time the outgoing queue was empty or shrank (monotonic ns).
    private var lastProgress: UInt64 = 0
    private var stallCheck: (any DBusLoopTimer)?
    private var stalled = false
    /// Called once when the queue passes `Bounds.backlogBytes`, and again only after it has emptied: a bus daemon
    /// slow to read is worth a line in the log long before the bounds are reached.
    public var onBacklog: ((Int) -> Void)?
    private var backlogReported = false

    /// How long and how much the connection holds for a bus daemon that reads nothing. Everything queued stays
    /// queued (in libdbus's outgoing queue, written as the socket takes it) until either bound is passed.
    public struct Bounds: Sendable {
        public var withoutProgressNanoseconds: UInt64
        public var queuedBytes: Int
        /// A queue this large is reported (`onBacklog`).
        public var backlogBytes: Int
        public init(
            withoutProgressNanoseconds: UInt64 = 60_000_000_000, queuedBytes: Int = 64 << 20,
            backlogBytes: Int = 1 << 20
        ) {
            self.withoutProgressNanoseconds = withoutProgressNanoseconds
            self.queuedBytes = queuedBytes
            self.backlogBytes = backlogBytes
        }
    }

    /// Connects to `address` (nil: `$DBUS_SESSION_BUS_ADDRESS`) and registers with the bus (`Hello`).
    public init(address: String?, loop: any DBusLoop, bounds: Bounds = Bounds()) throws(DBusError) {
        _ = dbus_threads_init_default()
        var err = CDBus.DBusError()
        dbus_error_init(&err)
        let addr = address ?? ProcessInfo.processInfo.environment["DBUS_SESSION_BUS_ADDRESS"]
        guard let addr, !addr.isEmpty else {
            throw DBusError(
                name: "org.freedesktop.DBus.Error.NoServer",
                message: "no session bus: DBUS_SESSION_BUS_ADDRESS is not set")
        }
        guard let c = dbus_connection_open_private(addr, &err) else {
            throw take(&err) ?? .failed("cannot connect to the bus at \(addr)")
        }
        guard dbus_bus_register(c, &err) != 0 else {
            dbus_connection_close(c)
            dbus_connection_unref(c)
            throw take(&err) ?? .failed("bus registration failed")
        }
        raw = c
        self.loop = loop
        self.bounds = bounds
        dbus_connection_set_exit_on_disconnect(c, 0)
        let me = Unmanaged.passUnretained(self).toOpaque()
        _ = dbus_connection_add_filter(c, filterCallback, me, nil)
        _ = dbus_connection_set_watch_functions(c, addWatch, removeWatch, toggleWatch, me, nil)
        _ = dbus_connection_set_timeout_functions(c, addTimeout, removeTimeout, toggleTimeout, me, nil)
        dbus_connection_set_dispatch_status_function(
            c,
            { _, status, data in
                guard let data else { return }
                let me = Unmanaged<DBusConnection>.fromOpaque(data).takeUnretainedValue()
                if status == DBUS_DISPATCH_DATA_REMAINS { me.scheduleDispatch() }
            }, me, nil)
        scheduleDispatch()
    }

    deinit { close() }

    /// Closes the connection (`dbus_connection_close`); safe to call twice.
    public func close() {
        guard !closed else { return }
        closed = true
        stallCheck?.cancel()
        stallCheck = nil
        let owed = inFlight.values
        inFlight.removeAll()
        for box in owed { box.fire(nil) }
        dbus_connection_set_dispatch_status_function(raw, nil, nil, nil)
        dbus_connection_remove_filter(raw, filterCallback, Unmanaged.passUnretained(self).toOpaque())
        dbus_connection_close(raw)
        // Closing removes the watches and timeouts (their free functions run now).
        _ = dbus_connection_set_watch_functions(raw, nil, nil, nil, nil, nil)
        _ = dbus_connection_set_timeout_functions(raw, nil, nil, nil, nil, nil)
        dbus_connection_unref(raw)
    }

    /// This connection's unique name (`:1.42`).
    public var uniqueName: String { dbus_bus_get_unique_name(raw).map { String(cString: $0) } ?? "" }

    fileprivate func scheduleDispatch() {
        guard !dispatchScheduled, !closed else { return }
        dispatchScheduled = true
        loop.dbusSoon { [weak self] in self?.dispatch() }
    }

    private func dispatch() {
        dispatchScheduled = false
        guard !closed else { return }
        // A bounded batch per turn keeps one chatty peer from starving the sound server's events.
        var n = 0
        // libdbus's own dispatch: the peer interface (Ping) answered inside it, everything else through the filter
        // (`received`). Each call moves what the socket delivered into messages first.
        while !closed, dbus_connection_get_dispatch_status(raw) == DBUS_DISPATCH_DATA_REMAINS {
            _ = dbus_connection_dispatch(raw)
            n += 1
            if n >= 64 {
                scheduleDispatch()
                return
            }
        }
    }

    fileprivate func received(_ m: DBusMessage) -> Bool {
        if m.kind == .signal, m.interface == "org.freedesktop.DBus.Local", m.member == "Disconnected" {
            // The owner hears of the loss first, so that the replies still owed (answered with nothing now) find it
            // known: a follower drops them instead of taking "no answer" from a bus that is gone.
            let cb = onDisconnect
            onDisconnect = nil
            cb?()
            let owed = inFlight.values
            inFlight.removeAll()
            for box in owed { box.fire(nil) }
            return true
        }
        // A signal addressed to us alone did not pass any match rule: only the bus driver's own (NameAcquired,
        // NameLost) are believed. Dropped unread, before anything decodes it.
        if m.kind == .signal, m.destination != nil, !m.isFromBus { return true }
        onMessage?(m)
        return true
    }

    /// `dbus_connection_send`; false when the message could not be queued. libdbus writes what the socket takes
    /// at once and keeps the rest in its outgoing queue, written when the socket is writable (its write watch, on
    /// the loop): sending never waits for the bus daemon, and every message leaves in the order it was sent.
    @discardableResult
    public func send(_ m: DBusMessage) -> Bool {
        guard !closed else { return false }
        let before = dbus_connection_get_outgoing_size(raw)
        guard dbus_connection_send(raw, m.raw, nil) != 0 else { return false }
        noteQueue(before: before)
        return true
    }

    /// Sends a signal; false if a name or an argument cannot be written (nothing is sent then).
    @discardableResult
    public func emit(path: String, interface: String, member: String, _ args: [DBusValue]) -> Bool {
        guard let m = DBusMessage.signal(path: path, interface: interface, member: member), m.append(args) else {
            return false
        }
        return send(m)
    }

    /// Sends the method return for `call`; false if an argument cannot be written (nothing is sent then).
    @discardableResult
    public func reply(to call: DBusMessage, _ args: [DBusValue]) -> Bool {
        guard let m = call.makeReturn(), m.append(args) else { return false }
        return send(m)
    }

    /// Sends an error reply for `call`; an invalid error name becomes `org.freedesktop.DBus.Error.Failed`.
    @discardableResult
    public func replyError(to call: DBusMessage, name: String, message: String) -> Bool {
        guard let m = call.makeError(name: name, message: message) else { return false }
        return send(m)
    }

    /// Bytes libdbus holds for the bus daemon (`dbus_connection_get_outgoing_size`).
    public var queuedBytes: Int { closed ? 0 : Int(dbus_connection_get_outgoing_size(raw)) }

    /// Follows the outgoing queue after a send or a write: progress is a queue that emptied or shrank (or a send
    /// that left whole). A queue that stays unwritten is checked by a timer that runs only while it is not empty,
    /// so an idle audiod still wakes never.
    private func noteQueue(before: Int) {
        let size = Int(dbus_connection_get_outgoing_size(raw))
        if size == 0 || size <= before { lastProgress = monotonicNanoseconds() }
        if size == 0 {
            stallCheck?.cancel()
            stallCheck = nil
            backlogReported = false
            return
        }
        if size > bounds.backlogBytes, !backlogReported {
            backlogReported = true
            onBacklog?(size)
        }
        if size > bounds.queuedBytes {
            return stall("\(size) bytes are queued for the bus daemon, more than the bound of \(bounds.queuedBytes)")
        }
        if stallCheck == nil { armStallCheck() }
    }

    private func armStallCheck() {
        let now = monotonicNanoseconds()
        let due = lastProgress + bounds.withoutProgressNanoseconds
        stallCheck = loop.dbusTimer(afterNanoseconds: due > now ? due - now : 1) { [weak self] in
            guard let self else { return }
            self.stallCheck = nil
            guard !self.closed else { return }
            let size = Int(dbus_connection_get_outgoing_size(self.raw))
            guard size > 0 else { return }
            let quiet = monotonicNanoseconds() - self.lastProgress
            if quiet >= self.bounds.withoutProgressNanoseconds {
                self.stall("the bus daemon has read nothing for \(quiet / 1_000_000_000) s (\(size) bytes queued)")
            } else {
                self.armStallCheck()
            }
        }
    }

    private func stall(_ why: String) {
        guard !stalled else { return }
        stalled = true
        stallCheck?.cancel()
        stallCheck = nil
        onStalled?(why)
    }

    /// Writes what is queued for at most `nanoseconds`, waiting on this thread (`dbus_connection_read_write`): for
    /// the last phase of stopping, which must not wait on a bus daemon that reads nothing.
    public func flush(within nanoseconds: UInt64) {
        guard !closed else { return }
        let end = monotonicNanoseconds() + nanoseconds
        while dbus_connection_has_messages_to_send(raw) != 0 {
            let now = monotonicNanoseconds()
            guard now < end else { return }
            let ms = Int32(max(1, min((end - now) / 1_000_000, 1000)))
            if dbus_connection_read_write(raw, ms) == 0 { return }
        }
    }

    /// Sends a method call and calls `reply` with the return or error message (libdbus turns a timeout into an
    /// `org.freedesktop.DBus.Error.NoReply` error), or nil if it could not be sent. The reply slot is a
    /// `DBusPendingCall` that exists before the message leaves (`dbus_connection_send_with_reply`).
    public func call(_ m: DBusMessage, timeoutMilliseconds: Int32 = 25_000, reply: @escaping (DBusMessage?) -> Void) {
        guard !closed else { return reply(nil) }
        var pending: OpaquePointer?
        let before = dbus_connection_get_outgoing_size(raw)
        guard dbus_connection_send_with_reply(raw, m.raw, &pending, timeoutMilliseconds) != 0, let pending else {
            return reply(nil)
        }
        noteQueue(before: before)
        nextCall &+= 1
        let token = nextCall
        let replyBox = ReplyBox { [weak self] r in
            self?.inFlight[token] = nil
            reply(r)
        }
        inFlight[token] = replyBox
        let box = Unmanaged.passRetained(replyBox).toOpaque()
        let ok = dbus_pending_call_set_notify(
            pending,
            { p, data in
                guard let p, let data else { return }
                let box = Unmanaged<ReplyBox>.fromOpaque(data).takeUnretainedValue()
                let r = dbus_pending_call_steal_reply(p).map { DBusMessage(taking: $0) }
                box.fire(r)
            }, box,
            { data in
                guard let data else { return }
                Unmanaged<ReplyBox>.fromOpaque(data).release()
            })
        if ok == 0 { Unmanaged<ReplyBox>.fromOpaque(box).release() }
        dbus_pending_call_unref(pending)
        if ok == 0 { replyBox.fire(nil) }
    }

    /// `RequestName` with DO_NOT_QUEUE; throws if another connection owns it.
    public func requestName(_ name: String) throws(DBusError) {
        var err = CDBus.DBusError()
        dbus_error_init(&err)
        let r = dbus_bus_request_name(raw, name, UInt32(DBUS_NAME_FLAG_DO_NOT_QUEUE), &err)
        if let e = take(&err) { throw e }
        guard r == DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER || r == DBUS_REQUEST_NAME_REPLY_ALREADY_OWNER else {
            throw DBusError(
                name: "org.freedesktop.DBus.Error.AddressInUse",
                message: "the bus name \(name) is already owned by another process (is audiod already running?)")
        }
    }

    /// `ReleaseName`, without waiting for the answer: the name's queue moves on (a starting audiod may take it)
    /// once the bus daemon reads it, at the latest when this process exits. Follow it with `flush(within:)`.
    public func releaseName(_ name: String) {
        guard !closed,
            let m = DBusMessage.methodCall(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "ReleaseName")
        else { return }
        m.append([.string(name)])
        dbus_message_set_no_reply(m.raw, 1)
        send(m)
    }

    /// Sends a method call and waits for its reply on this thread (libdbus reads the socket itself; messages that
    /// arrive meanwhile stay queued for the loop). For set-up only, never on a path that serves others.
    public func callBlocking(_ m: DBusMessage, timeoutMilliseconds: Int32 = 5_000) -> DBusMessage? {
        guard !closed else { return nil }
        var err = CDBus.DBusError()
        dbus_error_init(&err)
        let r = dbus_connection_send_with_reply_and_block(raw, m.raw, timeoutMilliseconds, &err)
        _ = take(&err)
        return r.map { DBusMessage(taking: $0) }
    }

    /// `AddMatch` without waiting for the bus's answer.
    public func addMatch(_ rule: String) {
        guard !closed else { return }
        let before = dbus_connection_get_outgoing_size(raw)
        dbus_bus_add_match(raw, rule, nil)
        noteQueue(before: before)
    }

    /// `RemoveMatch` without waiting for the bus's answer (one rule added by `addMatch`, exactly as written there).
    public func removeMatch(_ rule: String) {
        guard !closed else { return }
        let before = dbus_connection_get_outgoing_size(raw)
        dbus_bus_remove_match(raw, rule, nil)
        noteQueue(before: before)
    }

    fileprivate func handleWatch(_ w: OpaquePointer, readable: Bool, writable: Bool, hangup: Bool) {
        var flags: UInt32 = 0
        if readable { flags |= DBUS_WATCH_READABLE.rawValue }
        if writable { flags |= DBUS_WATCH_WRITABLE.rawValue }
        if hangup { flags |= DBUS_WATCH_HANGUP.rawValue | DBUS_WATCH_ERROR.rawValue }
        let before = dbus_connection_get_outgoing_size(raw)
        _ = dbus_watch_handle(w, flags)
        if writable, !closed { noteQueue(before: before - 1) }
        if dbus_connection_get_dispatch_status(raw) == DBUS_DISPATCH_DATA_REMAINS { scheduleDispatch() }
    }
}

private func monotonicNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// A pending call's reply closure, called once.
private final class ReplyBox {
    private var callback: ((DBusMessage?) -> Void)?
    init(_ cb: @escaping (DBusMessage?) -> Void) { callback = cb }
    func fire(_ m: DBusMessage?) {
        let cb = callback
        callback = nil
        cb?(m)
    }
}

/// A libdbus watch's Swift side, stored as the watch's data and freed by libdbus.
private final class WatchBox {
    var loopWatch: (any DBusLoopWatch)?
}

private final class TimeoutBox {
    var timer: (any DBusLoopTimer)?
}

private func connection(_ data: UnsafeMutableRawPointer?) -> DBusConnection? {
    data.map { Unmanaged<DBusConnection>.fromOpaque($0).takeUnretainedValue() }
}

private let filterCallback: DBusHandleMessageFunction = { _, message, data in
    guard let me = connection(data), let message else { return DBUS_HANDLER_RESULT_NOT_YET_HANDLED }
    return me.received(DBusMessage(retaining: message))
        ? DBUS_HANDLER_RESULT_HANDLED : DBUS_HANDLER_RESULT_NOT_YET_HANDLED
}

private func watchEvents(_ w: OpaquePointer) -> (Bool, Bool) {
    guard dbus_watch_get_enabled(w) != 0 else { return (false, false) }
    let f = dbus_watch_get_flags(w)
    return (f & DBUS_WATCH_READABLE.rawValue != 0, f & DBUS_WATCH_WRITABLE.rawValue != 0)
}

private let addWatch: DBusAddWatchFunction = { w, data in
    guard let w, let me = connection(data) else { return 0 }
    let box = WatchBox()
    let (r, wr) = watchEvents(w)
    box.loopWatch = me.loop.dbusWatch(fd: dbus_watch_get_unix_fd(w), readable: r, writable: wr) {
        [weak me] rd, wt, hu in
        me?.handleWatch(w, readable: rd, writable: wt, hangup: hu)
    }
    dbus_watch_set_data(w, Unmanaged.passRetained(box).toOpaque()) { p in
        guard let p else { return }
        let b = Unmanaged<WatchBox>.fromOpaque(p).takeRetainedValue()
        b.loopWatch?.cancel()
        b.loopWatch = nil
    }
    return 1
}

private let removeWatch: DBusRemoveWatchFunction = { w, _ in
    guard let w, let p = dbus_watch_get_data(w) else { return }
    let b = Unmanaged<WatchBox>.fromOpaque(p).takeUnretainedValue()
    b.loopWatch?.cancel()
    b.loopWatch = nil
}

private let toggleWatch: DBusWatchToggledFunction = { w, _ in
    guard let w, let p = dbus_watch_get_data(w) else { return }
    let (r, wr) = watchEvents(w)
    Unmanaged<WatchBox>.fromOpaque(p).takeUnretainedValue().loopWatch?.update(readable: r, writable: wr)
}

private func arm(_ t: OpaquePointer, _ box: TimeoutBox, _ me: DBusConnection) {
    box.timer?.cancel()
    box.timer = nil
    guard dbus_timeout_get_enabled(t) != 0 else { return }
    let ms = UInt64(max(0, dbus_timeout_get_interval(t)))
    box.timer = me.loop.dbusTimer(afterNanoseconds: ms * 1_000_000) { [weak me, weak box] in
        guard let me, let box else { return }
        _ = dbus_timeout_handle(t)
        // libdbus timeouts repeat until removed or disabled.
        arm(t, box, me)
    }
}

private let addTimeout: DBusAddTimeoutFunction = { t, data in
    guard let t, let me = connection(data) else { return 0 }
    let box = TimeoutBox()
    dbus_timeout_set_data(t, Unmanaged.passRetained(box).toOpaque()) { p in
        guard let p else { return }
        Unmanaged<TimeoutBox>.fromOpaque(p).takeRetainedValue().timer?.cancel()
    }
    arm(t, box, me)
    return 1
}

private let removeTimeout: DBusRemoveTimeoutFunction = { t, _ in
    guard let t, let p = dbus_timeout_get_data(t) else { return }
    let b = Unmanaged<TimeoutBox>.fromOpaque(p).takeUnretainedValue()
    b.timer?.cancel()
    b.timer = nil
}

private let toggleTimeout: DBusTimeoutToggledFunction = { t, data in
    guard let t, let me = connection(data), let p = dbus_timeout_get_data(t) else { return }
    arm(t, Unmanaged<TimeoutBox>.fromOpaque(p).takeUnretainedValue(), me)
}
