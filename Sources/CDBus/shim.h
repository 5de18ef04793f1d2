// libdbus-1 for Swift. Only DBusService imports this module (STYLE.md §2). DBUS_TYPE_* are cast macros that do
// not import; DBusService spells them out (DBusValue.swift) and builds messages with DBusMessageIter, never the
// variadic dbus_message_append_args.
#include <dbus/dbus.h>
