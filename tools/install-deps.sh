#!/bin/sh
# Installs the Debian packages that the build needs (and, with --test, what the tests and the reference script
# need; with --aarch64, what the aarch64 cross-build and its emulated tests need: install-deps-aarch64.sh). Does
# nothing when they are already there. Uses sudo when not root. Prints what it does; on failure one
# line says what could not be installed and why, and it exits 1.
set -u
pk="build-essential pkg-config libjansson-dev libzstd-dev libmsgpack-dev libwebsockets-dev libturbojpeg0-dev libspng-dev"
if [ "${1:-}" = "--test" ]; then
    pk="$pk clang libclang-rt-14-dev libomp-dev python3 python3-numpy python3-torch python3-sentencepiece python3-pil
        python3-msgpack python3-venv sentencepiece haproxy curl"
fi
missing=""
for p in $pk; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
# --aarch64 goes on to the cross-build's dependencies once the native ones are there
finish() { [ "${1:-}" = "--aarch64" ] && exec sh "$(dirname "$0")/install-deps-aarch64.sh"; exit 0; }
[ -z "$missing" ] && finish "${1:-}"
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: cannot install$missing: no apt-get (a Debian or Ubuntu machine is assumed); install them by hand"
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "install-deps: cannot install$missing: not root and no sudo"
        exit 1
    fi
    SUDO=sudo
fi
n=$(echo $missing | wc -w)
echo "install-deps: installing $n Debian package(s):$missing"
echo "install-deps: apt-get update"
log=$(mktemp)
if ! $SUDO apt-get update -qq >"$log" 2>&1; then
    echo "install-deps: apt-get update failed: $(tail -n 1 "$log")"; rm -f "$log"; exit 1
fi
echo "install-deps: apt-get install (python3-torch alone is several hundred MB; this can take minutes)"
if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >"$log" 2>&1; then
    echo "install-deps: apt-get install failed: $(tail -n 1 "$log")"; rm -f "$log"; exit 1
fi
rm -f "$log"
echo "install-deps: done"
finish "${1:-}"
