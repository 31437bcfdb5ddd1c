#!/bin/sh
# device run (issue 40, L136): linear_t through transposed weight copies (gemv.cu's few-row kernel) — op and e2e tests,
# exact RTC against plain, alternating; then a kernel-time breakdown of pi0-3cam-rtc-exact under nsys where it exists
cd "$(dirname "$0")/.."
D=devc; O=${OUT:-/tmp/out}
export LD_LIBRARY_PATH=$PWD/$D/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ck=/tmp/ck
[ -f $ck/pi0/model.safetensors ] || $D/h/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 > /dev/null || exit 1
[ -f $ck/pi05/model.safetensors ] || $D/h/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 > /dev/null || exit 1
t() { n=$1; shift; s=$(date +%s); timeout 300 "$@" > $O/$n.log 2>&1; echo "$n exit $? ($(( $(date +%s) - s )) s)"; grep -E "FAIL|worst|rtc exact|passed|failed" $O/$n.log | tail -8; }
t ops_hopper $D/h/test_cuda_ops
t e2e_hopper $D/h/test_cuda_e2e
b() { ckp=$1; shift; timeout 150 $D/h/pi0 bench --backend cuda --checkpoint $ck/$ckp "$@" 2>>$O/bench.err | grep -E "^(pi0|pi05|workload)" | tail -1; }
for r in 1 2; do
  for w in pi0-3cam pi0-3cam-rtc-exact; do b pi0 --workload $w; done
  for w in pi05-3cam pi05-3cam-rtc-exact; do b pi05 --workload $w; done
done
for w in pi0-3cam-b8 pi0-3cam-b8-rtc-exact; do b pi0 --workload $w; done
NS=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: $NS"
if [ -n "$NS" ]; then
  timeout 200 $NS profile -o $O/exact --force-overwrite true $D/h/pi0 bench --backend cuda --checkpoint $ck/pi0 --workload pi0-3cam-rtc-exact --iters 5 --warmup 2 > /dev/null 2>&1
  timeout 100 $NS stats --report cuda_gpu_kern_sum --format csv $O/exact.nsys-rep 2>/dev/null > $O/kern.csv
  head -30 $O/kern.csv | cut -c1-200
  rm -f $O/exact.nsys-rep $O/exact.sqlite
fi
