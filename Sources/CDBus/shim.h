// libdbus-1 for Swift. Only DBusService imports this module (STYLE.md §2). DBUS_TYPE_* are cast macros that do
// not import; DBusService spells them out (DBusValue.swift) and builds messages with DBusMessageIter, never the
// variadic dbus_message_append_args.
#include <dbus/dbus.h>

// The byte length of the array the iterator is inside (recursed into), as marshaled: read from its length prefix, so O(1) however
// large the array (dbus_message_iter_get_element_count walks variable-length elements). libdbus marks it deprecated
// in favour of that walk; audiod needs the size before deciding to look inside at all.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static inline int audiod_dbus_iter_array_bytes(DBusMessageIter *iter) { return dbus_message_iter_get_array_len(iter); }
#pragma GCC diagnostic pop
