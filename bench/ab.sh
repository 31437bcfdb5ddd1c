#!/bin/sh
# A/B of pi0 binaries (or env wrappers) on the device machine: sh bench/ab.sh OUT ROUNDS "bin1 bin2 ..." workload...
# (checkpoints in /tmp/pi0-ckpt/pi0 and /tmp/pi0-ckpt/pi05, made with pi0 gen-checkpoint as in device_run.sh).
# Odd rounds run the binaries in the given order, even rounds reversed. Prints one bench row per run.
OUT=$1; R=$2; BINS=$3; shift 3
ck=/tmp/pi0-ckpt
for r in $(seq $R); do
  if [ $((r % 2)) = 1 ]; then order=$BINS; else order=$(echo $BINS | awk '{for(i=NF;i>0;i--) printf "%s ", $i}'); fi
  for w in "$@"; do
    case $w in pi05*) c=$ck/pi05;; *) c=$ck/pi0;; esac
    for b in $order; do
      row=$(timeout 150 $b bench --backend cuda --checkpoint $c --workload $w 2>>$OUT/ab.err | grep -E "^pi0" | tail -1); case "$row" in ""|workload*) row="FAILED: $(tail -1 $OUT/ab.err)";; esac
      echo "r$r $b | $row"
    done
  done
done | tee -a $OUT/ab.txt
