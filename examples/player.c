// SPDX-License-Identifier: Apache-2.0
//
// A media player's integration with audiod, in C with GDBus (GLib's D-Bus library):
//   play whether audiod runs or not; when it is there (at start, or once it appears), create a session, set the
//   playback category and activate it; pause when it is interrupted, resume when the interruption ends with
//   should_resume; make the session again when audiod restarts; release it when the player quits. It never starts
//   audiod itself (audiod runs as a user service from login).
//
// Build:  cc -o player player.c $(pkg-config --cflags --libs gio-2.0 gio-unix-2.0)
// Run:    ./player [COMMAND …]   (COMMAND stands for the player's audio: it is started as a child, so its
//                                  streams belong to the session; default: pacat --playback /dev/zero)
// Stop:   SIGINT or SIGTERM — the session is released with notify, so apps it interrupted may resume.

#include <gio/gio.h>
#include <glib-unix.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#define AUDIOD "org.audiod.AudioSession1"
#define MANAGER_PATH "/org/audiod/AudioSession1"
#define MANAGER_IFACE "org.audiod.AudioSession1.Manager"
#define SESSION_IFACE "org.audiod.AudioSession1.Session"

static GDBusConnection *bus;
static GMainLoop *loop;
static char *session;  // NULL while audiod is not there
static guint subscription = 0;
static GPid audio = 0;
// audiod paused us and has not said we may resume: we stay paused, even across its restart.
static gboolean interrupted = FALSE;
// audiod refused our activation (a call holds the audio): no InterruptionEnded will come, so we try again when
// nothing is primary audio any more. A real player would also wait for the user's next Play.
static gboolean refused = FALSE;
static char **command;
// audiod was there once: its next appearance is a restart.
static gboolean seen = FALSE;

// One call to audiod; prints audiod's error message (it says what was wrong and what is accepted) and returns NULL
// on failure.
static GVariant *call(const char *path, const char *iface, const char *method, GVariant *args, const char *reply) {
    GError *error = NULL;
    GVariant *r = g_dbus_connection_call_sync(bus, AUDIOD, path, iface, method, args,
                                              reply ? G_VARIANT_TYPE(reply) : NULL, G_DBUS_CALL_FLAGS_NO_AUTO_START, 5000,
                                              NULL, &error);
    if (!r) {
        char *remote = g_dbus_error_get_remote_error(error);
        g_dbus_error_strip_remote_error(error);
        fprintf(stderr, "player: %s failed: %s (%s)\n", method, error->message, remote ? remote : "no D-Bus error");
        g_free(remote);
        g_error_free(error);
    }
    return r;
}

static gboolean activate(void) {
    GVariant *r = call(session, SESSION_IFACE, "SetActive", g_variant_new("(b@as)", TRUE, g_variant_new_strv(NULL, 0)), NULL);
    if (r) g_variant_unref(r);
    return r != NULL;
}

// A real player would pause and resume its decoder here; this one stops and continues its audio process.
static void set_playing(gboolean on) {
    if (audio) kill(audio, on ? SIGCONT : SIGSTOP);
}

static void on_signal(GDBusConnection *c, const char *sender, const char *path, const char *iface, const char *member,
                      GVariant *params, gpointer data) {
    (void)c; (void)sender; (void)path; (void)iface; (void)data;
    if (!session) return;
    if (strcmp(member, "InterruptionBegan") == 0) {
        const char *reason;
        g_variant_get(params, "(&s@a{sv})", &reason, NULL);
        printf("interrupted (%s): pausing\n", reason);
        interrupted = TRUE;
        set_playing(FALSE);
    } else if (strcmp(member, "InterruptionEnded") == 0) {
        gboolean resume;
        g_variant_get(params, "(b@a{sv})", &resume, NULL);
        if (resume && activate()) {
            interrupted = FALSE;
            printf("interruption ended: resuming\n");
            set_playing(TRUE);
        } else {
            printf("interruption ended: staying paused\n");
        }
    }
    fflush(stdout);
}

static void on_manager_changed(GDBusConnection *c, const char *sender, const char *path, const char *iface,
                               const char *member, GVariant *params, gpointer data) {
    (void)c; (void)sender; (void)path; (void)iface; (void)member; (void)data;
    GVariant *changed = NULL;
    g_variant_get(params, "(&s@a{sv}@as)", NULL, &changed, NULL);
    const char *primary = NULL;
    if (refused && session && g_variant_lookup(changed, "PrimaryAudioSession", "&o", &primary) &&
        strcmp(primary, "/") == 0 && activate()) {
        refused = FALSE;
        interrupted = FALSE;
        printf("the audio is free again: resuming\n");
        fflush(stdout);
        set_playing(TRUE);
    }
    g_variant_unref(changed);
}

static void audio_ended(GPid pid, gint status, gpointer data);

// The audio starts once we know whether audiod is there, so that, when it is, the session exists before the audio's
// first stream and that stream is the session's from the start.
static void start_audio(void) {
    static gboolean started = FALSE;
    if (started) return;
    started = TRUE;
    GError *error = NULL;
    // DO_NOT_REAP_CHILD: a direct child (GLib would otherwise fork twice, and the audio would no longer descend from
    // the process the session was made for).
    if (!g_spawn_async(NULL, command, NULL, G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL, &audio,
                       &error)) {
        fprintf(stderr, "player: cannot start %s: %s\n", command[0], error->message);
        g_error_free(error);
        g_main_loop_quit(loop);
        return;
    }
    g_child_watch_add(audio, audio_ended, NULL);
}

static void audiod_appeared(GDBusConnection *c, const char *name, const char *owner, gpointer data) {
    (void)c; (void)name; (void)owner; (void)data;
    gboolean restarted = seen;
    seen = TRUE;
    GVariantBuilder hints;
    g_variant_builder_init(&hints, G_VARIANT_TYPE("a{sv}"));
    g_variant_builder_add(&hints, "{sv}", "application-name", g_variant_new_string("example-player"));
    GVariant *r = call(MANAGER_PATH, MANAGER_IFACE, "CreateSession", g_variant_new("(a{sv})", &hints), "(o)");
    if (!r) {
        start_audio();
        return;
    }
    g_free(session);
    g_variant_get(r, "(o)", &session);
    g_variant_unref(r);
    // Subscribe before anything can interrupt us. Naming audiod's well-known name as the sender makes GDBus believe
    // these signals only from the connection that owns it. A session of the last run may have had the same path.
    if (subscription) g_dbus_connection_signal_unsubscribe(bus, subscription);
    subscription = g_dbus_connection_signal_subscribe(bus, AUDIOD, SESSION_IFACE, NULL, session, NULL,
                                                      G_DBUS_SIGNAL_FLAGS_NONE, on_signal, NULL, NULL);
    const char *strv[] = {NULL};
    r = call(session, SESSION_IFACE, "SetCategory", g_variant_new("(ss^as)", "playback", "default", strv), NULL);
    if (r) g_variant_unref(r);
    const char *state;
    if (interrupted) {
        // Paused by the last run: the session comes back inactive; the user plays again when they want to.
        state = "inactive, paused as the last run left it";
    } else if (activate()) {
        state = "active";
    } else {
        // Refused (a call holds the audio): paused until nothing is primary audio any more.
        refused = TRUE;
        state = "refused, pausing";
    }
    printf("%s %s (%s)\n", restarted ? "audiod restarted: session made again" : "playing in", session, state);
    fflush(stdout);
    start_audio();
    if (refused) set_playing(FALSE);
}

static void audiod_vanished(GDBusConnection *c, const char *name, gpointer data) {
    (void)c; (void)name; (void)data;
    if (session) {
        printf("audiod went away: playing on without it\n");
    } else if (!seen) {
        printf("audiod is not running: playing without it\n");
    }
    fflush(stdout);
    g_free(session);
    session = NULL;
    // Its signals are gone with it; the next run's session may reuse the path for another app.
    if (subscription) {
        g_dbus_connection_signal_unsubscribe(bus, subscription);
        subscription = 0;
    }
    if (refused) {
        refused = FALSE;
        set_playing(TRUE);
    }
    start_audio();
}

static void audio_ended(GPid pid, gint status, gpointer data) {
    (void)status; (void)data;
    g_spawn_close_pid(pid);
    audio = 0;
    g_main_loop_quit(loop);
}

static gboolean quit(gpointer data) {
    (void)data;
    g_main_loop_quit(loop);
    return G_SOURCE_REMOVE;
}

int main(int argc, char **argv) {
    GError *error = NULL;
    bus = g_bus_get_sync(G_BUS_TYPE_SESSION, NULL, &error);
    if (!bus) {
        fprintf(stderr, "player: no session bus: %s\n", error->message);
        return 1;
    }
    char *fallback[] = {"pacat", "--playback", "/dev/zero", "--client-name=example-player", NULL};
    command = argc > 1 ? argv + 1 : fallback;
    loop = g_main_loop_new(NULL, FALSE);
    g_dbus_connection_signal_subscribe(bus, AUDIOD, "org.freedesktop.DBus.Properties", "PropertiesChanged", MANAGER_PATH,
                                       MANAGER_IFACE, G_DBUS_SIGNAL_FLAGS_NONE, on_manager_changed, NULL, NULL);
    g_bus_watch_name_on_connection(bus, AUDIOD, G_BUS_NAME_WATCHER_FLAGS_NONE, audiod_appeared, audiod_vanished, NULL,
                                   NULL);
    g_unix_signal_add(SIGINT, quit, NULL);
    g_unix_signal_add(SIGTERM, quit, NULL);
    g_main_loop_run(loop);

    if (audio) {
        kill(audio, SIGCONT);
        kill(audio, SIGTERM);
    }
    if (session) {
        GVariant *r = call(session, SESSION_IFACE, "Release", NULL, NULL);
        if (r) g_variant_unref(r);
    }
    printf("released\n");
    return 0;
}
