#!/bin/sh
# device run (issue 41, lab; calls 6 and 7 on two H200s): the megakernel lab at 5 pages, then the chain lab for its per-layer numbers
cd "$(dirname "$0")/.."
. bench/device_lib.sh
timeout 150 $D/lab/megakernel 18 5 2>&1 | tee $O/megakernel_p5.txt; echo "exit $?"
timeout 200 $D/lab/denoise_chain > $O/denoise_chain.txt 2>&1; echo "denoise_chain exit $?"
grep -E "^layer|norms fused|without attention|only attention" $O/denoise_chain.txt
