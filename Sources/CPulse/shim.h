// libpulse for Swift. Only PulseBackend imports this module (STYLE.md §2); its tests check AudioPolicy's
// re-implementation of libpulse's volume arithmetic against the real functions.
#include <pulse/pulseaudio.h>
// Not in pulseaudio.h: the stream-restore extension, used to keep policy values out of module-stream-restore.
#include <pulse/ext-stream-restore.h>
