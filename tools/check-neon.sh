#!/bin/sh
# Checks that the CPU backend's hot loops compiled to NEON fused multiply-adds in an aarch64 build: the GEMM
# micro-kernel and the dot product (GCC vector extensions, lowered by the compiler, so the vectoriser's report is
# silent about them and the disassembly is the evidence), and the transposed product of the backward pass (plain
# loops, auto-vectorised). Emulation says nothing about speed; this says the instructions are the right ones.
#   tools/check-neon.sh [OBJ]   OBJ: build-aarch64/src/cpu/cpu_backend.o unless given
# Prints one line per function; exits 1 when any is not vectorised or cannot be found.
set -u
obj=${1:-build-aarch64/src/cpu/cpu_backend.o}
objdump=${OBJDUMP:-aarch64-linux-gnu-objdump}
command -v "$objdump" >/dev/null 2>&1 || { echo "check-neon: no $objdump (tools/install-deps.sh --aarch64 installs it)"; exit 1; }
[ -f "$obj" ] || { echo "check-neon: no $obj (make CROSS=aarch64-linux-gnu- builds it)"; exit 1; }
case $(file -b "$obj") in *aarch64*) ;; *) echo "check-neon: $obj: expected an ARM aarch64 object, found: $(file -b "$obj")"; exit 1 ;; esac
dis=$(mktemp)
trap 'rm -f "$dis"' EXIT
"$objdump" -d --no-show-raw-insn "$obj" > "$dis" || { echo "check-neon: $objdump -d $obj failed"; exit 1; }

fail=0
# check FUNCTION WHAT MIN_FMLA LANES SCALAR_MAX: FUNCTION's body holds at least MIN_FMLA `fmla vN.LANES` and at most
# SCALAR_MAX scalar multiply(-add)s of the same precision
check() {
    fn=$1; what=$2; min=$3; lanes=$4; smax=$5
    body=$(awk -v f="<$fn>:" '$2 == f { p = 1; next } p && /^$/ { exit } p' "$dis")
    if [ -z "$body" ]; then
        echo "check-neon: $fn ($what): not found in $obj (renamed or inlined? update tools/check-neon.sh)"; fail=1; return
    fi
    reg=$(case $lanes in 4s) echo s ;; 2d) echo d ;; esac)
    n=$(printf '%s\n' "$body" | grep -cE "fmla[[:space:]]+v[0-9]+\.$lanes")
    s=$(printf '%s\n' "$body" | grep -cE "(fmadd|fmul)[[:space:]]+$reg[0-9]+,")
    if [ "$n" -ge "$min" ] && [ "$s" -le "$smax" ]; then st=OK; else st=FAIL; fail=1; fi
    printf '%-26s %-34s fmla .%s: %3d (>= %d)  scalar: %2d (<= %d)  %s\n' "$fn" "$what" "$lanes" "$n" "$min" "$s" "$smax" "$st"
}
# kernel_rows: 4 rows x 2 weight rows of 8 lanes, 16 fmla per 8 columns, and nothing scalar
check kernel_rows "GEMM micro-kernel (cpu_linear)" 16 4s 0
# dot, inlined into the attention's parallel body: 8 lanes, 2 fmla; the scalar tail and the softmax stay scalar
check cpu_attention._omp_fn.0 "attention scores (dot)" 2 4s 32
# the backward pass's transposed product, in double: the vectoriser's work
check linear_t_rows._omp_fn.0 "transposed product (linear_t)" 1 2d 8
[ "$fail" -eq 0 ] && echo "check-neon: $obj: the hot loops are NEON" || echo "check-neon: $obj: a hot loop is not vectorised"
exit "$fail"
