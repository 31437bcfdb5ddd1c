#!/bin/sh
# Installs the Debian packages that the build needs (and, with --test, what the tests and the
# reference script need). Does nothing when they are already there. Uses sudo when not root.
set -e
pk="build-essential pkg-config libjansson-dev libzstd-dev libmsgpack-dev libwebsockets-dev libturbojpeg0-dev libspng-dev"
if [ "${1:-}" = "--test" ]; then
    pk="$pk clang libclang-rt-14-dev python3 python3-numpy python3-torch python3-sentencepiece python3-pil
        python3-msgpack python3-venv sentencepiece haproxy curl"
fi
missing=""
for p in $pk; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "installing:$missing"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
