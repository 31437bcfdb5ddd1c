#!/bin/sh
# Session 39, call 9 (an H200) and call 10 (an H100): the production chain lab against the megakernel lab, same call.
cd "$(dirname "$0")/.."; . bench/device_lib.sh
for i in 1 2; do
  TO=120 TL=0 t chain$i $D/lab/denoise_chain; sed -n "/18 layers, one step/,/^$/p" $O/chain$i.log | head -14
  TO=60 TL=0 t mk$i $D/lab/megakernel 18 5; grep -E "^(the chain|weight stream|no weight)" $O/mk$i.log | head -4
done
