#!/bin/sh
# device run (issue 42): GPU tests and speed of the Hopper path, the portable path (sm_90a build, forced), and the
# portable path from a compute_80 PTX-only build (the Ampere code, JIT-compiled for the H100; auto path)
cd "$(dirname "$0")/.."
D=devc; O=${OUT:-/tmp/out}
export LD_LIBRARY_PATH=$PWD/$D/lib
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
ck=/tmp/ck; t0=$(date +%s)
$D/h/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 > /dev/null && $D/h/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 > /dev/null || exit 1
echo "gen $(( $(date +%s) - t0 )) s"
t() { n=$1; shift; s=$(date +%s); timeout 240 "$@" > $O/$n.log 2>&1; echo "$n exit $? ($(( $(date +%s) - s )) s)"; grep -E "FAIL|worst|warning|error|passed|failed" $O/$n.log | tail -6; }
t ops_hopper $D/h/test_cuda_ops
PI0_CUDA_PATH=portable t ops_portable $D/h/test_cuda_ops
t ops_p80 $D/p80/test_cuda_ops
t e2e_hopper $D/h/test_cuda_e2e --full $ck/pi0 $ck/pi05
PI0_CUDA_PATH=portable t e2e_portable $D/h/test_cuda_e2e --full $ck/pi0 $ck/pi05
b() { timeout 120 "$@" --backend cuda --checkpoint $ck/pi0 2>>$O/bench.err | tail -2; }
for w in pi0-3cam pi0-3cam-b64; do
  echo "== $w"; b $D/h/pi0 bench --workload $w | sed 's/^/hopper: /'
  PI0_CUDA_PATH=portable b $D/h/pi0 bench --workload $w | sed 's/^/portable-90a: /'
  b $D/p80/pi0 bench --workload $w | sed 's/^/portable-ptx80: /'
done
PI0_CUDA_PATH=hopper $D/p80/pi0 bench --backend cuda --checkpoint $ck/pi0 --workload pi0-3cam 2>&1 | tail -2
t e2e_p80 $D/p80/test_cuda_e2e --full $ck/pi0 $ck/pi05
tail -5 $O/bench.err
