#!/bin/sh
cd "$(dirname "$0")/.."
. bench/device_lib.sh
for p in 5; do timeout 120 $D/lab/megakernel 18 $p 2>&1 | tee $O/megakernel_p$p.txt; echo "exit $?"; done
