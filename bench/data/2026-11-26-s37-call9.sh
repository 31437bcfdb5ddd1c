#!/bin/sh
# device run (issue 40, after the review): op tests on both paths, end to end against the CPU, exact RTC against plain
cd "$(dirname "$0")/.."
. bench/device_lib.sh
ckpts
tests_both
for w in pi0-3cam pi0-3cam-rtc-exact pi0-3cam pi0-3cam-rtc-exact; do b pi0 --workload $w; done
