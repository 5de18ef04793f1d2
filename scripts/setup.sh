# Sourced by the scripts in this directory: installs the Debian packages given (only those missing) and checks
# that Swift is there. Usage: source scripts/setup.sh; setup_packages pkg…
setup_packages() {
    local missing=() p sudo=""
    for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
    if [ ${#missing[@]} -gt 0 ]; then
        [ "$(id -u)" = 0 ] || sudo="sudo"
        echo "installing: ${missing[*]}"
        $sudo apt-get update -qq
        $sudo apt-get install -y --no-install-recommends "${missing[@]}"
    fi
    if ! command -v swift >/dev/null; then
        echo "error: swift is not on PATH. Install Swift 6.1 or newer (https://www.swift.org/install/linux/)." >&2
        exit 1
    fi
}

# What building audiod needs; what talking to a sound server and a bus needs (pactl, pacat, dbus-daemon); the
# PulseAudio daemon, for a private server when none answers, and the tests.
# libpipewire-0.3-dev: headers only; audiod opens libpipewire at run time, where PipeWire runs (docs/FADES.md).
build_packages=(pkg-config libpulse-dev libdbus-1-dev libpipewire-0.3-dev python3)
client_packages=(pulseaudio-utils dbus)
server_packages=("${client_packages[@]}" pulseaudio systemd)
# PipeWire with WirePlumber and pipewire-pulse: the second server every test and benchmark also runs on.
pipewire_packages=(pipewire pipewire-pulse wireplumber)

# Release builds link the Swift standard library statically: audiod's resident size is 14.7 MB instead of 18.2 MB
# (the shared runtime libraries are mapped whole). One set of flags for every release build (the test command's,
# the run command's, the benchmarks'), so that none rebuilds what another built.
release=(-c release --static-swift-stdlib -Xswiftc -warnings-as-errors)
