#!/bin/sh
# device run (issue 40, L136): linear_t through transposed weight copies (gemv.cu's few-row kernel) — op and e2e tests,
# exact RTC against plain, alternating; then a kernel-time breakdown of pi0-3cam-rtc-exact under nsys where it exists
cd "$(dirname "$0")/.."
. bench/device_lib.sh
ckpts
TL=8
t ops_hopper $D/h/test_cuda_ops
t e2e_hopper $D/h/test_cuda_e2e
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
