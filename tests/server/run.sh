#!/bin/sh
# pi0-server tests: tests/server/run.sh BUILD
#   test_server   the protocol layer without a policy (decoder, encoder, live websocket server over a
#                 test double: healthz, pings, faults, batching, API key, graceful stop)
# Prints every check and finally "server: N passed, M failed"; exits 1 on any failure.
BUILD=${1:-build}
pass=0; fail=0
mkdir -p "$BUILD/tests"

# run NAME LOG COMMAND...: runs a test printing "NAME: N passed, M failed", adds its counts up.
run() {
    name=$1; log=$2; shift 2
    out=$("$@" 2>"$log"); st=$?
    printf '%s\n' "$out"
    line=$(printf '%s\n' "$out" | grep -E "^$name: [0-9]+ passed, [0-9]+ failed" | tail -n 1)
    if [ -z "$line" ]; then
        echo "$name: crashed or printed no summary (exit $st); last lines of $log:"
        tail -n 20 "$log"
        fail=$((fail + 1))
        return
    fi
    pass=$((pass + $(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')))
    f=$(echo "$line" | sed -E 's/.*, ([0-9]+) failed.*/\1/')
    fail=$((fail + f))
    if [ "$st" -ne 0 ] && [ "$f" -eq 0 ]; then echo "$name: exit status $st"; fail=$((fail + 1)); fi
    [ "$f" -ne 0 ] && { echo "$name: server log $log:"; tail -n 30 "$log"; }
}

run test_server "$BUILD/tests/test_server.log" "$BUILD/tests/test_server"

echo "server: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
