#!/bin/sh
cd "$(dirname "$0")/.."
. bench/device_lib.sh
timeout 120 $D/lab/megakernel 18 6 2>&1 | tee $O/megakernel_p6.txt; echo "exit $?"
timeout 200 $D/lab/denoise_chain > $O/denoise_chain.txt 2>&1; echo "denoise_chain exit $?"
grep -E "^(layer|  )" $O/denoise_chain.txt | grep -v "^  phase\|^  q|k|v\|^  attention\|^  o \|^  gate\|^  down\|^  sum\|^  kernel" | head -30
timeout 120 $D/lab/megakernel 18 6 2>&1 | grep -E "chain|stream|traffic" | tee $O/megakernel_p6_again.txt
