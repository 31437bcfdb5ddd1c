#!/bin/sh
cd "$(dirname "$0")/.."
. bench/device_lib.sh
for r in 1 2; do
  echo "-- round $r: without the norm-factor prefetch"; timeout 150 $D/lab/megakernel_prev 18 5 2>&1 | grep -E "^==|chain|stream|traffic|MMAs \(wrong" | head -5
  echo "-- round $r: with it"; timeout 150 $D/lab/megakernel 18 5 2>&1 | tee $O/megakernel_p5_r$r.txt | grep -E "^==|chain|stream|traffic|MMAs \(wrong" | head -5
done
