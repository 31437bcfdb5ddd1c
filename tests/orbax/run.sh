#!/bin/sh
# Orbax checkpoint tests: tests/orbax/run.sh BUILD
# Real Orbax checkpoints are written by orbax-checkpoint itself (tools/reference/orbax_checkpoint.py) in two
# virtualenvs made once under build/ (PI0_ORBAX_VENVS overrides; the sanitizer build shares them): the versions
# openpi pins in its lock file, and the newest on PyPI. Each venv runs tests/orbax/check.py: loads, conversions,
# actions and bad input against BUILD/pi0.
# Prints every check and "orbax: N passed, M failed"; no network for PyPI is a failure, not a skip.
BUILD=${1:-build}
PINNED="orbax-checkpoint==0.11.13 jax[cpu]==0.5.3 jaxlib==0.5.3 tensorstore==0.1.74 ml-dtypes==0.4.1 numpy==1.26.4"
CURRENT="orbax-checkpoint jax[cpu]"
VENVS=${PI0_ORBAX_VENVS:-build}
pass=0; fail=0
mkdir -p "$BUILD/tests" "$VENVS"

# venv NAME PACKAGES: makes $VENVS/venv-orbax-NAME once (under a lock: parallel test runs share it)
venv() {
    v="$VENVS/venv-orbax-$1"
    "$v/bin/python" -c "import orbax.checkpoint, jax, tensorstore" 2>/dev/null ||
        echo "making $v: $2 from PyPI (about a minute)"
    (
        flock 9
        if ! "$v/bin/python" -c "import orbax.checkpoint, jax, tensorstore" 2>/dev/null; then
            rm -rf "$v"
            /usr/bin/python3 -m venv "$v" && "$v/bin/pip" install -q --disable-pip-version-check $2 >&2
        fi
    ) 9>"$v.lock" 2>"$BUILD/tests/venv-orbax-$1.log"
    "$v/bin/python" -c "import orbax.checkpoint, jax, tensorstore" 2>/dev/null
}

for name in pinned current; do
    [ $name = pinned ] && pk=$PINNED || pk=$CURRENT
    echo "== orbax ($name: $pk)"
    if ! venv $name "$pk"; then
        echo "FAIL orbax $name: could not install $pk from PyPI:"; tail -n 5 "$BUILD/tests/venv-orbax-$name.log"
        fail=$((fail + 1)); continue
    fi
    out=$("$VENVS/venv-orbax-$name/bin/python" tests/orbax/check.py "$BUILD" $name 2>"$BUILD/tests/orbax-$name.log"); st=$?
    printf '%s\n' "$out"
    line=$(printf '%s\n' "$out" | grep -E "^orbax-$name: [0-9]+ passed, [0-9]+ failed" | tail -n 1)
    if [ -z "$line" ]; then
        echo "orbax-$name: crashed or printed no summary (exit $st); last lines of $BUILD/tests/orbax-$name.log:"
        tail -n 20 "$BUILD/tests/orbax-$name.log"; fail=$((fail + 1)); continue
    fi
    pass=$((pass + $(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')))
    fail=$((fail + $(echo "$line" | sed -E 's/.*, ([0-9]+) failed.*/\1/')))
done
echo "orbax: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
