#!/bin/sh
# The standard GPU cycle, run on the GPU machine from the repository root with the build folder made here by `make`
# and carried ($BUILD, default build): a build check, `make test-cuda` on both paths (the Hopper path, then the
# portable one with PI0_CUDA_PATH=portable; full-size GPU-vs-CPU checks included), then the end-to-end benchmarks
# behind bench/RESULTS.md's current numbers. Usage: [BUILD=dir] sh bench/device_run.sh [OUTDIR] [quick]
# OUTDIR defaults to $OUT (the device machine's folder that comes back), else /tmp/pi0-out; `quick` stops after the
# tests. Writes OUTDIR/test-cuda.log, bench.txt (the GPU, then one row per run: default / portable / nograph, then
# pi0 bench's columns), bench-default.csv, bench-portable.csv, bench-nograph.csv, trace.json and bench.err. Exits
# non-zero when the build check or a test fails; the benchmarks run either way. "default" is the path the backend
# picks (the Hopper path on an H100 / H200); "nograph" the same with CUDA graphs off.
b=${BUILD:-build}
out=${1:-${OUT:-/tmp/pi0-out}}
ck=${CKPT_DIR:-/tmp/pi0-ckpt}   # full-size random checkpoints, made once per machine (bench/ab.sh uses the same)
mkdir -p "$out" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader |
    sed 's/^/# GPU: /' | tee "$out/bench.txt"

# build check: the CUDA binaries are there; the commit they were built at is printed
for f in pi0 tests/test_cuda_ops tests/test_cuda_e2e; do
    [ -x "$b/$f" ] || { echo "device_run: $b/$f missing: build with make (nvcc found) and carry $b"; exit 1; }
done
# (a warning, not a stop: the device tool's copy of the tree may carry the .git of the session's first commit)
want=$(git rev-parse --short HEAD 2>/dev/null)
have=$(cat "$b/commit.txt" 2>/dev/null)
if [ -n "$want" ] && [ "$want" != "$have" ]; then
    echo "device_run: warning: $b was built at ${have:-an unknown commit}, git says the tree is at $want"
fi
echo "# build: $b at ${have:-an unknown commit}" | tee -a "$out/bench.txt"

[ -f $ck/pi0/model.safetensors ] || $b/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 > /dev/null || exit 1
[ -f $ck/pi05/model.safetensors ] || $b/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 > /dev/null || exit 1

# the GPU tests on both paths, as the Makefile runs them (-o all: the carried binaries, no rebuild here)
s=$(date +%s)
env -u PI0_CUDA_PATH timeout 1800 make --no-print-directory -o all test-cuda BUILD="$b" FULL="$ck/pi0 $ck/pi05" \
    > "$out/test-cuda.log" 2>&1
rc=$?
echo "make test-cuda exit $rc ($(( $(date +%s) - s )) s)"
grep -E "FAIL|worst op|full-size|max_batch|passed, [0-9]+ failed" "$out/test-cuda.log"
[ "$2" = quick ] && exit $rc

# bench RUN CKPT WORKLOAD [ARGS...]: one pi0 bench (5 warm-up, 50 timed runs), its row in bench.txt
bench() {
    p=$1; c=$2; w=$3; shift 3
    if [ $p = portable ]; then path="env PI0_CUDA_PATH=portable"; else path="env -u PI0_CUDA_PATH"; fi
    row=$($path timeout 300 $b/pi0 bench --backend cuda --checkpoint $ck/$c --workload $w --csv "$out/bench-$p.csv" \
          "$@" 2>>"$out/bench.err" | grep -E "^pi0" | tail -1)
    echo "$p ${row:-$w FAILED: $(tail -1 "$out/bench.err")}" | tee -a "$out/bench.txt"
}
for r in 1 2; do   # B = 1 twice, as the current numbers give it
    bench default pi0 pi0-3cam $( [ $r = 1 ] && echo --trace "$out/trace.json" )
    bench default pi0 pi0-libero
    bench default pi0 pi0-h50
    bench default pi05 pi05-3cam
    bench default pi0 pi0-3cam-rtc
    bench default pi0 pi0-3cam-rtc-exact
    bench default pi05 pi05-3cam-rtc-exact
done
for w in pi0-3cam-b8 pi0-3cam-b8-rtc-exact pi0-3cam-b64; do bench default pi0 $w; done
for w in pi0-3cam pi0-libero pi0-h50 pi0-3cam-b8 pi0-3cam-b64; do bench portable pi0 $w; done
bench portable pi05 pi05-3cam
for w in pi0-3cam pi0-libero pi0-h50; do bench nograph pi0 $w --no-graph; done
bench nograph pi05 pi05-3cam --no-graph
exit $rc
