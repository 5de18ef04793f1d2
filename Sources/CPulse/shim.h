// libpulse for Swift. Only PulseBackend imports this module (STYLE.md §2); its tests check AudioPolicy's
// re-implementation of libpulse's volume arithmetic against the real functions.
#include <pulse/pulseaudio.h>
// Not in pulseaudio.h: the stream-restore extension, used to keep policy values out of module-stream-restore.
#include <pulse/ext-stream-restore.h>
// The loop's timers are timerfds watched by pa_mainloop (monotonic, and independent of any pa_context); Swift's
// Glibc module does not export <sys/timerfd.h>.
#include <sys/timerfd.h>
// The loop's cross-thread wakeup; not exported by Swift's Glibc module either.
#include <sys/eventfd.h>
// Process-exit watches (pidfd_open, glibc 2.36+): an exited session owner is seen at once, without polling /proc.
#include <sys/pidfd.h>
