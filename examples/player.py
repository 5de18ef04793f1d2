#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
#
# A media player's integration with audiod, in Python with Gio (Debian and Ubuntu: python3-gi):
#   play whether audiod runs or not; when it is there (at start, or once it appears), create a session, set the
#   playback category and activate it; pause when it is interrupted, resume when the interruption ends with
#   should_resume; make the session again when audiod restarts; release it when the player quits. It never starts
#   audiod itself (audiod runs as a user service from login).
#
# Run:   ./player.py [COMMAND …]   (COMMAND stands for the player's audio: it is started as a child, so its
#                                    streams belong to the session; default: pacat --playback /dev/zero)
# Stop:  SIGINT or SIGTERM — the session is released with notify, so apps it interrupted may resume.

import os
import signal
import subprocess
import sys

from gi.repository import Gio, GLib

AUDIOD = "org.audiod.AudioSession1"
MANAGER_PATH = "/org/audiod/AudioSession1"
MANAGER_IFACE = "org.audiod.AudioSession1.Manager"
SESSION_IFACE = "org.audiod.AudioSession1.Session"


def say(text):
    print(text, flush=True)


class Player:
    def __init__(self, command):
        self.bus = Gio.bus_get_sync(Gio.BusType.SESSION, None)
        self.command = command
        self.audio = None
        self.session = None
        self.subscription = None
        # audiod paused us and has not said we may resume: we stay paused, even across its restart.
        self.interrupted = False
        # audiod refused our activation (a call holds the audio): no InterruptionEnded will come, so we try again
        # when nothing is primary audio any more. A real player would also wait for the user's next Play.
        self.refused = False
        # audiod was there once: its next appearance is a restart.
        self.seen = False
        self.started = False

    def call(self, path, iface, method, args=None, reply=None):
        """One call to audiod; None when it failed (audiod's message says what was wrong and what is accepted)."""
        try:
            return self.bus.call_sync(AUDIOD, path, iface, method, args,
                                      GLib.VariantType(reply) if reply else None, Gio.DBusCallFlags.NO_AUTO_START,
                                      5000, None)
        except GLib.Error as e:
            # Gio puts the D-Bus error's name before audiod's message ("GDBus.Error:NAME: message").
            remote = Gio.dbus_error_get_remote_error(e) or "no D-Bus error"
            message = e.message
            prefix = f"GDBus.Error:{remote}: "
            if message.startswith(prefix):
                message = message[len(prefix):]
            say(f"player: {method} failed: {message} ({remote})")
            return None

    # A real player would pause and resume its decoder here; this one stops and continues its audio process.
    def set_playing(self, on):
        if self.audio:
            os.kill(self.audio.pid, signal.SIGCONT if on else signal.SIGSTOP)

    def activate(self):
        return self.call(self.session, SESSION_IFACE, "SetActive", GLib.Variant("(bas)", (True, []))) is not None

    def on_signal(self, _bus, _sender, _path, _iface, member, params):
        if self.session is None:
            return
        if member == "InterruptionBegan":
            say(f"interrupted ({params[0]}): pausing")
            self.interrupted = True
            self.set_playing(False)
        elif member == "InterruptionEnded":
            if params[0] and self.activate():
                self.interrupted = False
                say("interruption ended: resuming")
                self.set_playing(True)
            else:
                say("interruption ended: staying paused")

    def on_manager_changed(self, _bus, _sender, _path, _iface, _member, params):
        changed = params[1]
        if self.refused and self.session is not None and changed.get("PrimaryAudioSession") == "/" and self.activate():
            self.refused = False
            self.interrupted = False
            say("the audio is free again: resuming")
            self.set_playing(True)

    def start_audio(self):
        # The audio starts once we know whether audiod is there, so that, when it is, the session exists before the
        # audio's first stream and that stream is the session's from the start.
        if not self.started:
            self.started = True
            self.audio = subprocess.Popen(self.command)
            GLib.child_watch_add(GLib.PRIORITY_DEFAULT, self.audio.pid, self.audio_ended)

    def audio_ended(self, _pid, _status):
        # GLib has reaped it: nothing is left to stop or continue.
        self.audio = None
        self.loop.quit()

    def audiod_appeared(self, _bus, _name, _owner):
        restarted = self.seen
        self.seen = True
        hints = {"application-name": GLib.Variant("s", "example-player-py")}
        made = self.call(MANAGER_PATH, MANAGER_IFACE, "CreateSession", GLib.Variant("(a{sv})", (hints,)), "(o)")
        if made is None:
            self.start_audio()
            return
        self.session = made[0]
        # Subscribe before anything can interrupt us. Naming audiod's well-known name as the sender makes Gio believe
        # these signals only from the connection that owns it. A session of the last run may have had the same path.
        if self.subscription is not None:
            self.bus.signal_unsubscribe(self.subscription)
        self.subscription = self.bus.signal_subscribe(AUDIOD, SESSION_IFACE, None, self.session, None,
                                                      Gio.DBusSignalFlags.NONE, self.on_signal)
        self.call(self.session, SESSION_IFACE, "SetCategory", GLib.Variant("(ssas)", ("playback", "default", [])))
        if self.interrupted:
            # Paused by the last run: the session comes back inactive; the user plays again when they want to.
            state = "inactive, paused as the last run left it"
        elif self.activate():
            state = "active"
        else:
            # Refused (a call holds the audio): paused until nothing is primary audio any more.
            self.refused = True
            self.set_playing(False)
            state = "refused, pausing"
        say(f"{'audiod restarted: session made again' if restarted else 'playing in'} {self.session} ({state})")
        self.start_audio()
        if self.refused:
            self.set_playing(False)

    def audiod_vanished(self, _bus, _name):
        if self.session is not None:
            say("audiod went away: playing on without it")
        elif not self.seen:
            say("audiod is not running: playing without it")
        self.session = None
        # Its signals are gone with it; the next run's session may reuse the path for another app.
        if self.subscription is not None:
            self.bus.signal_unsubscribe(self.subscription)
            self.subscription = None
        if self.refused:
            self.refused = False
            self.set_playing(True)
        self.start_audio()

    def run(self):
        self.loop = GLib.MainLoop()
        self.bus.signal_subscribe(AUDIOD, "org.freedesktop.DBus.Properties", "PropertiesChanged", MANAGER_PATH,
                                  MANAGER_IFACE, Gio.DBusSignalFlags.NONE, self.on_manager_changed)
        Gio.bus_watch_name_on_connection(self.bus, AUDIOD, Gio.BusNameWatcherFlags.NONE,
                                         self.audiod_appeared, self.audiod_vanished)
        for s in (signal.SIGINT, signal.SIGTERM):
            GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, s, self.loop.quit)
        self.loop.run()

        if self.audio:
            self.set_playing(True)
            self.audio.terminate()
        if self.session is not None:
            self.call(self.session, SESSION_IFACE, "Release")
        say("released")


if __name__ == "__main__":
    Player(sys.argv[1:] or ["pacat", "--playback", "/dev/zero", "--client-name=example-player-py"]).run()
