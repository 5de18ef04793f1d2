// The service's API speaks in the transport's types (a service is made on a `DBusConnection`), so whoever uses the
// service has them too.
@_exported import DBusTransport
