#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
#
# A media player's integration with audiod, in Python with Gio (Debian: python3-gi):
#   create a session, set the playback category, activate it, pause when it is interrupted, resume when the
#   interruption ends with should_resume, and release the session when the player quits.
#
# Run:   python3 player.py [COMMAND …]   (COMMAND stands for the player's audio: it is started as a child, so its
#                                          streams belong to the session; default: pacat --playback /dev/zero)
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


def call(bus, path, iface, method, args=None, reply=None):
    """One call to audiod. audiod's error messages say what was wrong and what is accepted."""
    try:
        return bus.call_sync(AUDIOD, path, iface, method, args,
                             GLib.VariantType(reply) if reply else None, Gio.DBusCallFlags.NONE, 5000, None)
    except GLib.Error as e:
        sys.exit(f"player: {method} failed: {Gio.dbus_error_strip_remote_error(e) or e.message}")


def main():
    bus = Gio.bus_get_sync(Gio.BusType.SESSION, None)
    hints = {"application-name": GLib.Variant("s", "example-player-py")}
    session = call(bus, MANAGER_PATH, MANAGER_IFACE, "CreateSession", GLib.Variant("(a{sv})", (hints,)), "(o)")[0]
    command = sys.argv[1:] or ["pacat", "--playback", "/dev/zero", "--client-name=example-player-py"]
    audio = None

    def activate():
        call(bus, session, SESSION_IFACE, "SetActive", GLib.Variant("(bas)", (True, [])))

    # A real player would pause and resume its decoder here; this one stops and continues its audio process.
    def set_playing(on):
        if audio:
            os.kill(audio.pid, signal.SIGCONT if on else signal.SIGSTOP)

    def on_signal(_bus, _sender, _path, _iface, member, params):
        if member == "InterruptionBegan":
            print(f"interrupted ({params[0]}): pausing", flush=True)
            set_playing(False)
        elif member == "InterruptionEnded":
            if params[0]:
                activate()
                print("interruption ended: resuming", flush=True)
                set_playing(True)
            else:
                print("interruption ended: staying paused", flush=True)

    # Subscribe before anything can interrupt us. Naming audiod's well-known name as the sender makes Gio believe
    # these signals only from the connection that owns it.
    bus.signal_subscribe(AUDIOD, SESSION_IFACE, None, session, None, Gio.DBusSignalFlags.NONE, on_signal)
    call(bus, session, SESSION_IFACE, "SetCategory", GLib.Variant("(ssas)", ("playback", "default", [])))
    activate()
    audio = subprocess.Popen(command)
    print(f"playing in {session}", flush=True)

    loop = GLib.MainLoop()
    for s in (signal.SIGINT, signal.SIGTERM):
        GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, s, loop.quit)
    loop.run()

    set_playing(True)
    audio.terminate()
    call(bus, session, SESSION_IFACE, "Release")
    print("released", flush=True)


if __name__ == "__main__":
    main()
