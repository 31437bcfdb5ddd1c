#!/bin/sh
# pi0-server tests: tests/server/run.sh BUILD
#   test_server   the protocol layer without a policy (decoder, encoder, live websocket server over a
#                 test double: healthz, pings, faults, batching, API key, graceful stop)
#   server_e2e    BUILD/pi0-server with the real client, openpi-client from PyPI, in a virtualenv made once
#                 at build/venv-server (PI0_SERVER_VENV overrides): robots vs `pi0 run`, load, faults, HAProxy
# Prints every check and finally "server: N passed, M failed"; exits 1 on any failure. No network for
# PyPI is a failure, not a skip.
BUILD=${1:-build}
VENV=${PI0_SERVER_VENV:-build/venv-server}
OPENPI_CLIENT="openpi-client==0.1.2"
pass=0; fail=0
mkdir -p "$BUILD/tests" "$(dirname "$VENV")"

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
    [ "$f" -ne 0 ] && { echo "$name: stderr in $log:"; tail -n 30 "$log"; }
}

run test_server "$BUILD/tests/test_server.log" "$BUILD/tests/test_server"

# the virtualenv with openpi-client, made once (under a lock: parallel `make test` runs share it)
"$VENV/bin/python" -c "import openpi_client" 2>/dev/null || echo "making $VENV: $OPENPI_CLIENT from PyPI (about a minute)"
(
    flock 9
    if ! "$VENV/bin/python" -c "import openpi_client, websockets.sync.client" 2>/dev/null; then
        echo "making $VENV: $OPENPI_CLIENT from PyPI"
        rm -rf "$VENV"
        /usr/bin/python3 -m venv --system-site-packages "$VENV" &&
            "$VENV/bin/pip" install -q --disable-pip-version-check "$OPENPI_CLIENT"
    fi
) 9>"$VENV.lock" >"$BUILD/tests/venv-server.log" 2>&1
if "$VENV/bin/python" -c "import openpi_client" 2>/dev/null; then
    run server_e2e "$BUILD/tests/server_e2e.log" "$VENV/bin/python" -W ignore::DeprecationWarning tests/server/e2e.py "$BUILD"
else
    echo "FAIL server_e2e: could not install $OPENPI_CLIENT from PyPI into $VENV:"
    tail -n 5 "$BUILD/tests/venv-server.log"
    fail=$((fail + 1))
fi

echo "server: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
