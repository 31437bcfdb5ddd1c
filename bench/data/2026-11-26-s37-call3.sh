#!/bin/sh
# device run (issue 41, lab): the dataflow megakernel skeleton (bench/kernels/megakernel.cu) at 6, 4 and 2 pages,
# then the production chain's lab (denoise_chain) in the same call for its per-layer numbers
cd "$(dirname "$0")/.."
. bench/device_lib.sh
for p in 6 4 2; do timeout 120 $D/lab/megakernel 18 $p 2>&1 | tee $O/megakernel_p$p.txt; echo "exit $?"; done
timeout 200 $D/lab/denoise_chain > $O/denoise_chain.txt 2>&1; echo "denoise_chain exit $?"
grep -E "^(layer|  without|  only|persistent)" $O/denoise_chain.txt | head -30
