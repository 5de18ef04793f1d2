// An app using the client library speaks in its words and values: the vocabulary (categories, modes, options,
// error names) and the transport's `DBusValue` come with it.
@_exported import AudioVocabulary
@_exported import DBusTransport
