#!/bin/sh
cd "$(dirname "$0")/.."
D=devc; O=${OUT:-/tmp/out}
export LD_LIBRARY_PATH=$PWD/$D/lib
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
timeout 150 $D/lab/megakernel 18 5 2>&1 | tee $O/megakernel_p5.txt; echo "exit $?"
timeout 200 $D/lab/denoise_chain > $O/denoise_chain.txt 2>&1; echo "denoise_chain exit $?"
grep -E "^layer|norms fused|without attention|only attention" $O/denoise_chain.txt
