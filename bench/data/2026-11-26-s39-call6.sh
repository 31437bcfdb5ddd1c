#!/bin/sh
# Session 39, call 6 (H100; the same script ran again as call 7, which asked for an H200 and got an H100, and as call 8): phase_lab with the paced and shallow streams,
# megakernel2 and the megakernel lab (calibration against session 37's H200 numbers).
cd "$(dirname "$0")/.."; . bench/device_lib.sh
TO=300 TL=3 t phase_lab $D/lab/phase_lab
TO=120 TL=3 t megakernel2 $D/lab/megakernel2 18
TO=120 TL=3 t megakernel $D/lab/megakernel 18 5
grep -E "mode|==|resident" $O/phase_lab.log
grep -E "^(the layer|weight stream|no weight|  phase|==)" $O/megakernel2.log
grep -E "^(the chain|weight stream|no weight|==)" $O/megakernel.log
