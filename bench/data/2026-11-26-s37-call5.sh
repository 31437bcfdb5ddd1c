#!/bin/sh
cd "$(dirname "$0")/.."
D=devc; O=${OUT:-/tmp/out}
export LD_LIBRARY_PATH=$PWD/$D/lib
for p in 5; do timeout 120 $D/lab/megakernel 18 $p 2>&1 | tee $O/megakernel_p$p.txt; echo "exit $?"; done
