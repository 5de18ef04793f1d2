// audiod's reach into PipeWire's native protocol: only what a server-side volume ramp needs. libpipewire is
// opened with dlopen, so audiod does not depend on it where PulseAudio is the server; every call here runs on the
// thread that made the connection (audiod's one loop).
#ifndef AUDIOD_CPIPEWIRE_H
#define AUDIOD_CPIPEWIRE_H

#include <stddef.h>
#include <stdint.h>

typedef struct audiod_pw audiod_pw;

/// Opens libpipewire and connects to `remote` (a socket path; NULL for the user's default). NULL on failure, with
/// why in `error`.
audiod_pw *audiod_pw_open(const char *remote, char *error, size_t error_size);
void audiod_pw_close(audiod_pw *pw);

/// The fd to watch for input; `audiod_pw_dispatch` then runs what is ready, without blocking.
int audiod_pw_fd(audiod_pw *pw);
void audiod_pw_dispatch(audiod_pw *pw);

/// 1 once the server has described itself, -1 once the connection failed, 0 before.
int audiod_pw_state(audiod_pw *pw);
/// The server's version ("1.4.2"), once described; empty before.
const char *audiod_pw_server_version(audiod_pw *pw);
/// The last error the server reported, or empty.
const char *audiod_pw_last_error(audiod_pw *pw);

/// Sets the node's volume factor (`Props` `volume`); with `ramp_samples` > 0, as a linear ramp in steps of
/// `step_samples` from the factor's last value. Also sets the node's mute when `mute` is 0 or 1 (-1: leaves it), and
/// its channel volumes (linear, the user's volume as pulse clients see it, cubed) when `n_channels` > 0 — in the
/// same `Props`, so that the factor and what a mixer shows change together.
/// Returns a sequence number that `audiod_pw_done` reaches once the server has passed the change on, or < 0.
int audiod_pw_set_volume(audiod_pw *pw, uint32_t node, float volume, int32_t ramp_samples, int32_t step_samples,
                         int mute, const float *channel_volumes, uint32_t n_channels);
/// The last sequence number the server answered.
int audiod_pw_done(audiod_pw *pw);
/// Forgets the node (its stream is gone).
void audiod_pw_release(audiod_pw *pw, uint32_t node);

// Subscribes to the node's Props (once) and forgets the factor it last reported; then audiod_pw_factor gives 1 and
// the factor once the node has reported it again, 0 before that, -1 for a node not watched.
int audiod_pw_watch_factor(audiod_pw *pw, uint32_t node);
int audiod_pw_factor(audiod_pw *pw, uint32_t node, float *factor);

#endif
