#!/bin/sh
# Runs the two commands at the top of README.md exactly as written, in the repository root, as a new user would on
# a bare machine: an empty HOME (no pip cache or config), Debian's default PATH for root, nothing else inherited
# but CI (warnings as errors). .ci/run runs the tests this way, so the README cannot drift from what works.
# Prints each command, then its output; exits with the first failing command's status.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cmds=$(awk '/^```/ { n++; next } n == 1 && NF' "$root/README.md")
count=$(printf '%s\n' "$cmds" | grep -c .)
if [ "$count" -ne 2 ]; then
    echo "readme: expected exactly 2 commands in README.md's first code block, found $count"
    exit 1
fi
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
old_ifs=$IFS
IFS='
'
for c in $cmds; do
    IFS=$old_ifs
    echo "readme\$ $c"
    (cd "$root" && env -i HOME="$home" PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 ${CI:+CI=$CI} sh -c "$c") || {
        st=$?
        echo "readme: '$c' failed (exit $st)"
        exit $st
    }
done
