/* A softphone as the identity tests need one: it plays the far end for as long as it runs, and captures from the
 * microphone ("mic") for the first CAPTURE_MS milliseconds only, then closes its record stream — a call that
 * ended while the app plays on (a ring-back tone, a message). Built by the tests with gcc and libpulse-simple. */
#include <pthread.h>
#include <pulse/simple.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *play(void *arg) {
    (void)arg;
    pa_sample_spec ss = {.format = PA_SAMPLE_S16LE, .rate = 44100, .channels = 2};
    pa_simple *s = pa_simple_new(NULL, "softphone", PA_STREAM_PLAYBACK, NULL, "far end", &ss, NULL, NULL, NULL);
    if (!s) exit(2);
    static short buffer[4410 * 2];
    for (int i = 0; i < 4410 * 2; i++) buffer[i] = (short)((i % 100) * 40);
    for (;;) pa_simple_write(s, buffer, sizeof buffer, NULL);
    return NULL;
}

int main(int argc, char **argv) {
    int capture_ms = argc > 1 ? atoi(argv[1]) : 1500;
    pthread_t t;
    pthread_create(&t, NULL, play, NULL);
    pa_sample_spec ss = {.format = PA_SAMPLE_S16LE, .rate = 44100, .channels = 1};
    pa_simple *r = pa_simple_new(NULL, "softphone", PA_STREAM_RECORD, "mic", "microphone", &ss, NULL, NULL, NULL);
    if (!r) return 3;
    static short in[441];
    for (int ms = 0; ms < capture_ms; ms += 10) pa_simple_read(r, in, sizeof in, NULL);
    pa_simple_free(r);
    for (;;) pause();
}
