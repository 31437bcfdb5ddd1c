#!/bin/sh
# device run (issue 40; calls 1 and 2, with the binaries of each step): op tests on both paths, end to end against the CPU, then exact RTC against
# plain inference, alternating, twice; then one exact layer-step's kernels under ncu (durations without launch gaps)
cd "$(dirname "$0")/.."
D=devc; O=${OUT:-/tmp/out}
export LD_LIBRARY_PATH=$PWD/$D/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ck=/tmp/ck
[ -f $ck/pi0/model.safetensors ] || $D/h/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 > /dev/null || exit 1
[ -f $ck/pi05/model.safetensors ] || $D/h/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 > /dev/null || exit 1
t() { n=$1; shift; s=$(date +%s); timeout 300 "$@" > $O/$n.log 2>&1; echo "$n exit $? ($(( $(date +%s) - s )) s)"; grep -E "FAIL|worst|rtc exact|passed|failed" $O/$n.log | tail -10; }
t ops_hopper $D/h/test_cuda_ops
PI0_CUDA_PATH=portable t ops_portable $D/h/test_cuda_ops
PI0_CUDA_PATH=portable t e2e_portable $D/h/test_cuda_e2e
t e2e_hopper $D/h/test_cuda_e2e --full $ck/pi0 $ck/pi05
b() { ckp=$1; shift; timeout 150 $D/h/pi0 bench --backend cuda --checkpoint $ck/$ckp "$@" 2>>$O/bench.err | grep -E "^(pi0|pi05|workload)" | tail -1; }
for r in 1 2; do
  for w in pi0-3cam pi0-3cam-rtc-exact; do b pi0 --workload $w; done
  for w in pi05-3cam pi05-3cam-rtc-exact; do b pi05 --workload $w; done
  for w in pi0-3cam-b8 pi0-3cam-b8-rtc-exact; do b pi0 --workload $w; done
done
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 200 $NCU --metrics gpu__time_duration.sum --csv --launch-skip 3000 --launch-count 120 \
  $D/h/pi0 bench --backend cuda --checkpoint $ck/pi0 --workload pi0-3cam-rtc-exact --no-graph --iters 1 --warmup 0 \
  > $O/ncu_exact.csv 2> $O/ncu_exact.err
echo "ncu exit $? ($(grep -c gpu__time_duration $O/ncu_exact.csv) kernels)"
