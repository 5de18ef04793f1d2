import DBusService
import PulseBackend
import PulseLoop

// libdbus joins the pa_mainloop that already runs libpulse (STYLE.md §4): one thread, one poll, no polling.

extension MainLoop: DBusLoop {
    public func dbusWatch(fd: Int32, readable: Bool, writable: Bool, _ handler: @escaping (Bool, Bool, Bool) -> Void)
        -> any DBusLoopWatch
    {
        let w = watch(fd: fd, events: IOEvents(readable: readable, writable: writable)) { ev in
            handler(ev.contains(.input), ev.contains(.output), !ev.isDisjoint(with: [.hangup, .error]))
        }
        return w
    }

    public func dbusTimer(afterNanoseconds ns: UInt64, _ handler: @escaping () -> Void) -> (any DBusLoopTimer)? {
        timer(afterNanoseconds: ns, handler)
    }

    public func dbusSoon(_ work: @escaping () -> Void) {
        soon(work)
    }
}

extension IOEvents {
    init(readable: Bool, writable: Bool) {
        self = []
        if readable { insert(.input) }
        if writable { insert(.output) }
    }
}

extension IOWatch: DBusLoopWatch {
    public func update(readable: Bool, writable: Bool) {
        update(IOEvents(readable: readable, writable: writable))
    }
}

extension LoopTimer: DBusLoopTimer {}
