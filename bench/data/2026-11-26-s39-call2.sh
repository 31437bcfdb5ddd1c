#!/bin/sh
# Session 39, call 2: phase_lab with a background weight stream (flat out and paced), issue 41's loaded latency.
cd "$(dirname "$0")/.."; . bench/device_lib.sh
TO=200 TL=80 t phase_lab $D/lab/phase_lab
cat $O/phase_lab.log
