#!/bin/sh
# One build-free device cycle (binaries carried in $BUILD, default build/): GPU tests, full-size checks,
# all workloads with graphs on and off. Usage on the GPU machine: [BUILD=dir] sh bench/device_run.sh OUTDIR [quick]
# Writes OUTDIR/test_cuda_ops.log, OUTDIR/test_cuda_e2e.log, OUTDIR/bench.csv, OUTDIR/bench.txt, OUTDIR/trace.json, and
# the same tests and two workloads on the portable path (PI0_CUDA_PATH=portable): *_portable.log, bench_portable.*.
out=${1:-/tmp/pi0-out}
b=${BUILD:-build}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
ck=/tmp/pi0-ckpt
[ -f $ck/pi0/model.safetensors ] || $b/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0
[ -f $ck/pi05/model.safetensors ] || $b/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05
timeout 300 $b/tests/test_cuda_ops > "$out/test_cuda_ops.log" 2>&1
echo "test_cuda_ops exit $?"
grep -E "FAIL|worst op|test_cuda_ops:" "$out/test_cuda_ops.log"
timeout 300 $b/tests/test_cuda_e2e --full $ck/pi0 $ck/pi05 > "$out/test_cuda_e2e.log" 2>&1
echo "test_cuda_e2e exit $?"
grep -E "FAIL|full-size|max_batch|session create|test_cuda_e2e:" "$out/test_cuda_e2e.log"
# the portable path (issue 42) on this Hopper GPU: the same tests, then its speed next to the Hopper path's below
PI0_CUDA_PATH=portable timeout 300 $b/tests/test_cuda_ops > "$out/test_cuda_ops_portable.log" 2>&1
echo "test_cuda_ops (portable) exit $?"
grep -E "FAIL|worst op|test_cuda_ops:" "$out/test_cuda_ops_portable.log"
PI0_CUDA_PATH=portable timeout 300 $b/tests/test_cuda_e2e --full $ck/pi0 $ck/pi05 > "$out/test_cuda_e2e_portable.log" 2>&1
echo "test_cuda_e2e (portable) exit $?"
grep -E "FAIL|full-size|test_cuda_e2e:" "$out/test_cuda_e2e_portable.log"
[ "$2" = quick ] && exit 0
for w in pi0-3cam pi0-3cam-b64; do
    PI0_CUDA_PATH=portable timeout 120 $b/pi0 bench --backend cuda --checkpoint $ck/pi0 --workload $w \
        --csv "$out/bench_portable.csv" 2>>"$out/bench.err"
done | sed 's/^/portable: /' | tee "$out/bench_portable.txt"
for g in "" --no-graph; do
    for w in pi0-3cam pi0-libero pi0-h50 pi0-3cam-b8 pi0-3cam-b64; do
        timeout 120 $b/pi0 bench --backend cuda --checkpoint $ck/pi0 --workload $w $g --csv "$out/bench.csv" \
            ${g:+} $( [ -z "$g" ] && [ $w = pi0-3cam ] && echo --trace "$out/trace.json" ) 2>>"$out/bench.err"
    done
    timeout 120 $b/pi0 bench --backend cuda --checkpoint $ck/pi05 --workload pi05-3cam $g --csv "$out/bench.csv" 2>>"$out/bench.err"
done | tee "$out/bench.txt"
tail -3 "$out/bench.err"
