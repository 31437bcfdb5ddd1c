#!/bin/sh
# Runs every GPU-free test binary, then prints the overall "N passed, N failed" line.
# BUILD selects the build directory (build or build-debug). SKIP names scripts that cannot run on this build
# (tests/run_emulated.sh: the Python package under emulation); each one left out is said so.
BUILD=${BUILD:-build}
export PI0_BIN="$BUILD/pi0"
total_pass=0; total_fail=0; rc=0
img="$BUILD/tests/images.safetensors"
${PY:-/usr/bin/python3} tests/image_check.py "$img" || echo "image_check.py failed (test_image will report it)"
pol="$BUILD/tests/policy"
${PY:-/usr/bin/python3} tests/policy_check.py "$pol" || echo "policy_check.py failed (test_policy will report it)"
tok="$BUILD/tests/tok.model"
${PY:-/usr/bin/python3} tests/make_tokenizer.py "$tok" || echo "make_tokenizer.py failed (test_policy_api will report it)"
for t in test_unit test_golden test_errors test_image test_policy test_policy_api test_grad test_fast test_fast_model; do
    echo "== $t"
    case $t in
        test_policy) set -- "$pol" ;;
        test_policy_api) rm -rf "$BUILD/tests/policy_api"; set -- "$BUILD/tests/policy_api" "$tok" ;;
        test_fast) set -- "$tok" ;;
        *) set -- "$img" ;;
    esac
    out=$("$BUILD/tests/$t" "$@" 2>&1); st=$?
    printf '%s\n' "$out"
    line=$(printf '%s\n' "$out" | grep -E "^$t: [0-9]+ passed, [0-9]+ failed" | tail -n 1)
    if [ -z "$line" ]; then echo "$t: crashed or printed no summary (exit $st)"; total_fail=$((total_fail + 1)); rc=1; continue; fi
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed.*/\1/')
    f=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed.*/\2/')
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    [ "$st" -ne 0 ] && rc=1
done
# Scripts that print "NAME: N passed, M failed": script NAME COMMAND...
script() {
    name=$1; shift
    case " ${SKIP:-} " in *" $name "*) echo "== $name: left out (SKIP)"; return ;; esac
    echo "== $name"
    # every listed script must exist: a missing one is a failure, never a silent skip
    for f in "$@"; do
        case $f in tests/*) [ -f "$f" ] || { echo "$name: $f is missing"; total_fail=$((total_fail + 1)); rc=1; return; } ;; esac
    done
    # streamed as it runs (a venv made from PyPI takes a minute: its progress line shows at once), kept for the summary
    tmpo=$(mktemp); tmps=$(mktemp)
    { "$@" 2>&1; echo $? > "$tmps"; } | tee "$tmpo"
    out=$(cat "$tmpo"); st=$(cat "$tmps"); rm -f "$tmpo" "$tmps"
    line=$(printf '%s\n' "$out" | grep -E "^$name: [0-9]+ passed, [0-9]+ failed" | tail -n 1)
    if [ -z "$line" ]; then echo "$name: no summary (exit $st)"; total_fail=$((total_fail + 1)); rc=1; return; fi
    total_pass=$((total_pass + $(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')))
    total_fail=$((total_fail + $(echo "$line" | sed -E 's/.*, ([0-9]+) failed.*/\1/')))
    [ "$st" -ne 0 ] && rc=1
}
PYTHON=${PY:-/usr/bin/python3}
# the tokenizer against SentencePiece itself (python3-sentencepiece is the oracle)
script tokenizer "$PYTHON" tests/tokenizer_check.py "$BUILD/pi0"
# π0-FAST's action tokenizer and SentencePiece decoding against SentencePiece, transformers and openpi restated (venv from PyPI)
script fast "$PYTHON" tests/fast_check.py "$BUILD"
# π0-FAST served by the policy (`pi0 run --fast-tokenizer`) against openpi's pipeline restated, on checkpoints built to
# write chosen tokens (same venv)
script fast_policy "$PYTHON" tests/fast_policy_check.py "$BUILD"
# the whole policy (`pi0 run`) against the independent reference policy script
script policy_e2e "$PYTHON" tests/policy_e2e.py "$BUILD/pi0"
# LeRobot policy directories (the model: keys, config fields, refused options)
script lerobot "$PYTHON" tests/lerobot_check.py "$BUILD/pi0"
# real-time chunking at the model level against the independent reference (LeRobot's form)
script rtc "$PYTHON" tests/rtc_check.py "$BUILD/pi0"
# 8-bit precision against the independent reference's reading of docs/precision.md (and exact RTC's refusal)
script quant "$PYTHON" tests/quant_check.py "$BUILD/pi0"
# Orbax checkpoints written by orbax-checkpoint itself (pinned and newest, venvs from PyPI)
script orbax sh tests/orbax/run.sh "$BUILD"
# the Python package (pip install ./python, pytest): Policy / Model against the command line, bit for bit
script python sh tests/python/run.sh "$BUILD"
# pi0-server: protocol, openpi-client, load and faults
script server sh tests/server/run.sh "$BUILD"
echo "$total_pass passed, $total_fail failed"
exit $rc
