#!/bin/sh
# Session 39, call 1: issue 41's labs, first run (phase_lab, megakernel2 at 18 layers, megakernel as calibration).
cd "$(dirname "$0")/.."; . bench/device_lib.sh
TO=120 TL=60 t phase_lab $D/lab/phase_lab
TO=120 TL=60 t megakernel2 $D/lab/megakernel2 18
TO=120 TL=40 t megakernel $D/lab/megakernel 18 5
for f in phase_lab megakernel2 megakernel; do echo "=== $f"; cat $O/$f.log; done
