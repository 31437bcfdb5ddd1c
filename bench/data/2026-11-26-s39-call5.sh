#!/bin/sh
# Session 39, call 5: the megakernel lab with a paced loader (ns per page per block; 8 pages a block a layer, so
# 2500 ns a page is a 20 us layer's average rate, 1.73 TB/s); phase_lab says a dependent phase costs less the
# slower the weights stream.
cd "$(dirname "$0")/.."; . bench/device_lib.sh
for p in 0 1500 2000 2250 2500 2750 3000; do TO=60 TL=3 t mkp$p $D/lab/megakernel 18 5 5 $p > /dev/null; grep -E "^(megakernel lab|the chain)" $O/mkp$p.log | head -2; done
TO=60 TL=3 t mkp2500_1 $D/lab/megakernel 18 5 1 2500 > /dev/null; grep -E "^(megakernel lab|the chain)" $O/mkp2500_1.log | head -2
TO=60 TL=3 t mkp0b $D/lab/megakernel 18 5 5 0 > /dev/null; grep -E "^(megakernel lab|the chain)" $O/mkp0b.log | head -2
