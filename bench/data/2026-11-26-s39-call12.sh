#!/bin/sh
# Session 39, call 12 (H100) and call 13 (asked for an H200): phase_lab's last section alone: clusters of 8 whose stream warp joins every cluster
# barrier, so that the cluster-first sum (mode 2) is measured beside the weight stream too (the review's open point).
cd "$(dirname "$0")/.."; . bench/device_lib.sh
TO=90 TL=0 t phase_lab_cluster $D/lab/phase_lab cluster
cat $O/phase_lab_cluster.log
