#!/bin/sh
# Session 39, call 3: phase_lab with the background stream's depth swept (bytes in flight per SM), and the
# megakernel lab with 2, 3 and 5 pages in its ring (a shallower weight queue).
cd "$(dirname "$0")/.."; . bench/device_lib.sh
TO=300 TL=80 t phase_lab $D/lab/phase_lab
for np in 2 3 5; do TO=60 TL=3 t mk$np $D/lab/megakernel 18 $np; grep -E "^(the chain|weight stream|no weight)" $O/mk$np.log; done
grep -E "stream|==" $O/phase_lab.log
