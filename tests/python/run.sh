#!/bin/sh
# The Python package (python/, `import pi0`): tests/python/run.sh BUILD
# Installs the package with `pip install ./python` into a virtualenv made once under BUILD (numpy and pytest come
# from PyPI: nothing of Debian's Python is used) and runs tests/python with pytest against BUILD's pi0 command line.
# For the sanitizer build (BUILD/libpi0.so compiled with ASan + UBSan) the same tests load that library with the
# sanitizer runtime preloaded. Prints "python: N passed, M failed"; no network for PyPI is a failure, not a skip.
BUILD=${1:-build}
V="$BUILD/venv-python"
log="$BUILD/tests/venv-python.log"
mkdir -p "$BUILD/tests"
fail() { echo "FAIL python: $1"; [ -f "$log" ] && tail -n 15 "$log"; echo "python: 0 passed, 1 failed"; exit 1; }
if ! "$V/bin/python" -c "import numpy, pytest" 2>/dev/null; then
    echo "making $V: numpy and pytest from PyPI"
    rm -rf "$V"
    { /usr/bin/python3 -m venv "$V" && "$V/bin/pip" install -q --disable-pip-version-check numpy pytest; } >"$log" 2>&1 ||
        fail "could not make the virtualenv (numpy, pytest from PyPI)"
fi
# the package as a user installs it; the library it carries is BUILD's regular build (the sanitizer build's is
# loaded through PI0_LIBRARY below, so that pip's make does not rebuild build-debug without its flags)
case "$BUILD" in
    *debug*) lib_build=build; san=1 ;;
    *) lib_build=$BUILD; san= ;;
esac
# (MAKEFLAGS unset: under `make debug` it carries the sanitizer build's variables into pip's make of the regular library)
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL PI0_BUILD_DIR=$lib_build "$V/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps ./python \
    >>"$log" 2>&1 || fail "pip install ./python failed"
export PI0_TEST_BUILD="$BUILD" OMP_WAIT_POLICY=PASSIVE
if [ -n "$san" ]; then
    asan=$(${CC:-gcc} -print-file-name=libasan.so)
    ubsan=$(${CC:-gcc} -print-file-name=libubsan.so)
    export PI0_LIBRARY="$(pwd)/$BUILD/libpi0.so" LD_PRELOAD="$asan $ubsan" ASAN_OPTIONS=detect_leaks=0:quarantine_size_mb=0:thread_local_quarantine_size_kb=0   # no quarantine: the RSS leak check holds
fi
out=$(cd tests/python && "../../$V/bin/python" -m pytest -q -p no:cacheprovider . 2>&1); st=$?
printf '%s\n' "$out"
last=$(printf '%s\n' "$out" | tail -n 1)
passed=$(printf '%s\n' "$last" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+')
f=$(printf '%s\n' "$last" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+')
e=$(printf '%s\n' "$last" | grep -oE '[0-9]+ errors?' | grep -oE '[0-9]+')
passed=${passed:-0}; failed=$(( ${f:-0} + ${e:-0} ))
[ "$st" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
echo "python: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
