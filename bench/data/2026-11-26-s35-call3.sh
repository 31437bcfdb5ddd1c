#!/bin/sh
# device run (issue 42): the portable few-row kernel: GPU tests on the three paths, speed against cuBLASLt few-row products
cd "$(dirname "$0")/.."
D=devc; O=${OUT:-/tmp/out}
export LD_LIBRARY_PATH=$PWD/$D/lib
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
ck=/tmp/ck
[ -f $ck/pi0/model.safetensors ] || $D/h/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 > /dev/null || exit 1
[ -f $ck/pi05/model.safetensors ] || $D/h/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 > /dev/null || exit 1
t() { n=$1; shift; s=$(date +%s); timeout 240 "$@" > $O/$n.log 2>&1; echo "$n exit $? ($(( $(date +%s) - s )) s)"; grep -E "FAIL|worst|passed|failed" $O/$n.log | tail -8; }
t ops_hopper $D/h/test_cuda_ops
PI0_CUDA_PATH=portable t ops_portable $D/h/test_cuda_ops
t ops_p80 $D/p80/test_cuda_ops
PI0_CUDA_PATH=portable t e2e_portable $D/h/test_cuda_e2e --full $ck/pi0 $ck/pi05
b() { c=$ck/pi0; case "$*" in *pi05*) c=$ck/pi05;; esac; timeout 120 "$@" --backend cuda --checkpoint $c --csv $O/bench.csv 2>>$O/bench.err | grep -E "^pi0"; }
for w in pi0-3cam pi05-3cam pi0-h50 pi0-3cam-b64; do
  b $D/h/pi0 bench --workload $w | sed 's/^/hopper:          /'
  PI0_CUDA_PATH=portable b $D/h/pi0 bench --workload $w | sed 's/^/portable-90a:    /'
  PI0_CUDA_PATH=portable PI0_CUDA_SMALL=0 b $D/h/pi0 bench --workload $w | sed 's/^/portable-cublas: /'
  b $D/p80/pi0 bench --workload $w | sed 's/^/portable-ptx80:  /'
done
t e2e_hopper $D/h/test_cuda_e2e --full $ck/pi0 $ck/pi05
echo "== chain portable"; PI0_CUDA_PATH=portable timeout 100 $D/lab/denoise_chain 2>&1 | tail -20
