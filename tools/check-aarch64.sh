#!/bin/sh
# Checks an aarch64 (Jetson) cross-build on the machine that made it (docs/jetson.md): every binary is ARM aarch64,
# a CUDA build carries SASS for Orin (sm_87) and Thor (sm_110) and PTX, and the CPU backend's hot loops are NEON
# (tools/check-neon.sh).   tools/check-aarch64.sh [BUILD]   BUILD: build-aarch64 unless given
# Prints one line per check; exits 1 on any failure.
set -u
BUILD=${1:-build-aarch64}
cache=${AARCH64_DEPS:-${XDG_CACHE_HOME:-$HOME/.cache}/pi0-aarch64}
fail=0
for b in pi0 pi0-server libpi0.so tests/test_unit tests/test_golden tests/test_server; do
    f=$(file -b "$BUILD/$b" 2>&1)
    case $f in
        *"ARM aarch64"*) echo "$BUILD/$b: ARM aarch64  OK" ;;
        *) echo "$BUILD/$b: expected an ARM aarch64 ELF file, found: $f  FAIL"; fail=1 ;;
    esac
done
if grep -q -- -DPI0_HAVE_CUDA "$BUILD/flags.txt" 2>/dev/null; then
    co="$cache/tools/bin/cuobjdump"
    if [ ! -x "$co" ]; then
        echo "check-aarch64: no $co (tools/install-deps.sh --aarch64 installs it)  FAIL"; fail=1
    else
        # the SASS and PTX targets, one line each: "sm_110 sm_87", "sm_87"
        elf=$("$co" --list-elf "$BUILD/libpi0.so" | sed -nE 's/.*\.(sm_[0-9a-z]+)\.cubin$/\1/p' | sort -u | tr '\n' ' ')
        ptx=$("$co" --list-ptx "$BUILD/libpi0.so" | sed -nE 's/.*\.(sm_[0-9a-z]+)\.ptx$/\1/p' | sort -u | tr '\n' ' ')
        for a in sm_87 sm_110; do
            case " $elf" in *" $a "*) ;; *) echo "$BUILD/libpi0.so: no $a code (found: ${elf:-none})  FAIL"; fail=1 ;; esac
        done
        [ -n "$ptx" ] || { echo "$BUILD/libpi0.so: no PTX  FAIL"; fail=1; }
        echo "$BUILD/libpi0.so: SASS ${elf}PTX ${ptx}($("$co" --list-elf "$BUILD/libpi0.so" | wc -l) cubins)"
    fi
else
    echo "$BUILD: built without CUDA (NVCC empty or no nvcc found): the CPU backend alone"
fi
sh "$(dirname "$0")/check-neon.sh" "$BUILD/src/cpu/cpu_backend.o" || fail=1
exit "$fail"
