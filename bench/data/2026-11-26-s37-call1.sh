#!/bin/sh
# device run (issue 40; calls 1 and 2, with the binaries of each step): op tests on both paths, end to end against the CPU, then exact RTC against
# plain inference, alternating, twice; then one exact layer-step's kernels under ncu (durations without launch gaps)
cd "$(dirname "$0")/.."
. bench/device_lib.sh
ckpts
tests_both
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
