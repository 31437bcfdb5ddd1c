#!/bin/sh
# device run (issue 40; calls 10 and 11, with the binaries of mlp_up_save and of residual_save): op tests, end to end, exact RTC against plain
cd "$(dirname "$0")/.."
. bench/device_lib.sh
ckpts
tests_both
for r in 1 2; do for w in pi0-3cam pi0-3cam-rtc-exact; do b pi0 --workload $w; done; for w in pi05-3cam pi05-3cam-rtc-exact; do b pi05 --workload $w; done; done
