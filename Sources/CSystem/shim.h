// Linux system calls Swift's Glibc module does not export: the loop's timers are timerfds (monotonic, and
// independent of any sound-server connection), its cross-thread wakeup is an eventfd, and process-exit watches
// are pidfds (pidfd_open, glibc 2.36+: an exited session owner is seen at once, without polling /proc).
#include <sys/timerfd.h>
#include <sys/eventfd.h>
#include <sys/pidfd.h>
