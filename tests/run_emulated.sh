#!/bin/sh
# Runs the CPU test suite of an aarch64 build on this x86-64 machine under qemu-user: `make test-aarch64`.
#   tests/run_emulated.sh [BUILD]   BUILD: build-aarch64 unless given
# The binaries run through wrapper scripts in BUILD/emu, a copy of the build's layout (pi0, pi0-server, tests/test_*)
# that the suite runs as it would the build itself (tests/run.sh with BUILD=BUILD/emu); the test scripts stay
# x86-64 Python. Left out: the Python package's tests (x86-64 Python cannot load the aarch64 libpi0.so) and the GPU
# tests. Prints tests/run.sh's closing "N passed, M failed"; exits 1 on any failure.
set -u
BUILD=${1:-build-aarch64}
QEMU=${QEMU:-qemu-aarch64-static}
CROSS=${CROSS:-aarch64-linux-gnu-}
cache=${AARCH64_DEPS:-${XDG_CACHE_HOME:-$HOME/.cache}/pi0-aarch64}
fail() { echo "run_emulated: $*"; exit 1; }
command -v "$QEMU" >/dev/null 2>&1 || fail "no $QEMU (tools/install-deps.sh --aarch64 installs it)"
[ -x "$BUILD/pi0" ] || fail "no $BUILD/pi0 (make CROSS=aarch64-linux-gnu- builds it)"
case $(file -b "$BUILD/pi0") in *aarch64*) ;; *) fail "$BUILD/pi0 is not an aarch64 binary: $(file -b "$BUILD/pi0")" ;; esac
root=$(cd "$BUILD" && pwd)
emu="$BUILD/emu"
bins="pi0 pi0-server tests/test_unit tests/test_golden tests/test_errors tests/test_image tests/test_policy
      tests/test_policy_api tests/test_grad tests/test_server tests/test_fast tests/test_fast_model"
rm -rf "$emu" && mkdir -p "$emu/tests" "$emu/lib"
for b in $bins; do [ -x "$root/$b" ] || fail "$BUILD/$b is missing"; done

# A CUDA build links the 600 MB cuBLASLt, whose loading dominates an emulated process's start, and the suite starts
# hundreds of processes. First the binaries load once with the real aarch64 library, every symbol bound (LD_BIND_NOW): they
# link and resolve against it. Then the suite runs them with a stand-in of the same soname that defines the same
# symbols: without a GPU (none under emulation) the CUDA backend stops at device discovery, before cuBLASLt; were a
# stand-in called, it would return CUBLAS_STATUS_NOT_INITIALIZED (1), which the backend reports as an error.
syms=$(for b in $bins; do "${CROSS}nm" -D --undefined-only "$root/$b"; done | sed -nE 's/^ +U (cublasLt[A-Za-z0-9_]*)@.*/\1/p' | sort -u)
if [ -n "$syms" ]; then
    [ -f "$cache/cuda/lib/libcublasLt.so.13" ] || fail "no $cache/cuda/lib/libcublasLt.so.13 (tools/install-deps.sh --aarch64)"
    for b in pi0 pi0-server; do
        out=$("$QEMU" -E LD_BIND_NOW=1 -E LD_LIBRARY_PATH="$cache/cuda/lib" "$root/$b" --help 2>&1) ||
            fail "$BUILD/$b --help with the aarch64 cuBLASLt failed: $(printf '%s\n' "$out" | head -n 3)"
        echo "$BUILD/$b: loads with the aarch64 cuBLASLt, $(printf '%s\n' "$syms" | wc -l) symbols bound  OK"
    done
    { echo "libcublasLt.so.13 { global:"; printf '%s;\n' $syms; echo "local: *; };"; } > "$emu/lib/cublasLt.map"
    printf 'int %s(void) { return 1; }\n' $syms > "$emu/lib/cublasLt_stub.c"
    "${CROSS}gcc" -shared -fPIC -o "$emu/lib/libcublasLt.so.13" "$emu/lib/cublasLt_stub.c" -Wl,-soname,libcublasLt.so.13 \
        -Wl,--version-script,"$emu/lib/cublasLt.map" || fail "cannot build the cuBLASLt stand-in"
fi
# The guest's loader finds Debian's arm64 libraries (multiarch) itself. -E sets the variable in the emulated process
# alone, not in the x86-64 scripts around it.
for b in $bins; do
    printf '#!/bin/sh\nexec %s -E LD_LIBRARY_PATH=%s %s "$@"\n' "$QEMU" "$(cd "$emu/lib" && pwd)" "$root/$b" > "$emu/$b"
    chmod +x "$emu/$b"
done
BUILD="$emu" SKIP="python" exec sh tests/run.sh
