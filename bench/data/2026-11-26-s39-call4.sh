#!/bin/sh
# Session 39, call 4: the megakernel lab with its loader's pages in flight capped (5-page ring, 1..5 in flight);
# phase_lab predicts the dependent phases get cheaper with a shallower weight queue.
cd "$(dirname "$0")/.."; . bench/device_lib.sh
for f in 1 2 3 5; do TO=60 TL=3 t mk5_$f $D/lab/megakernel 18 5 $f; grep -E "^(megakernel lab|the chain|weight stream|no weight)" $O/mk5_$f.log | head -5; done
for f in 1 2; do TO=60 TL=3 t mk5_${f}b $D/lab/megakernel 18 5 $f; grep -E "^(the chain)" $O/mk5_${f}b.log | head -1; done
TO=60 TL=3 t mk5_5b $D/lab/megakernel 18 5 5; grep -E "^(the chain)" $O/mk5_5b.log | head -1
