#!/bin/sh
# device run (issue 40, final): op tests on both paths, end to end against the CPU (tiny fixtures on both paths; full
# size B 1 and 2 on the Hopper path), then exact RTC against plain inference and LeRobot's form, alternating, twice
cd "$(dirname "$0")/.."
. bench/device_lib.sh
ckpts
tests_both
for r in 1 2; do
  for w in pi0-3cam pi0-3cam-rtc pi0-3cam-rtc-exact; do b pi0 --workload $w; done
  for w in pi05-3cam pi05-3cam-rtc-exact; do b pi05 --workload $w; done
  for w in pi0-3cam-b8 pi0-3cam-b8-rtc-exact; do b pi0 --workload $w; done
done
$D/h/pi0 info --backend cuda --checkpoint $ck/pi0 2>&1 | grep -i "memory" | head -3
