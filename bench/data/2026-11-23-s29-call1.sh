#!/bin/sh
# session 29 call 1: upper bound of programmatic edges into cuBLASLt (PI0_LAB_PDL_ALL, unsafe lab); capture / instantiate times
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
for w in pi0-3cam pi05-3cam; do
  case $w in pi05*) c=$ck/pi05;; *) c=$ck/pi0;; esac
  PI0_LAB_GTIME=1 timeout 120 $B/L/pi0 bench --backend cuda --checkpoint $c --workload $w --warmup 0 --iters 12 --vary-tokens 4 > $OUT/gtime-$w.txt 2>&1
  echo "== $w"; grep -E "graph:|first" $OUT/gtime-$w.txt | head -12
  PI0_LAB_GTIME=1 timeout 120 $B/L/pdlall bench --backend cuda --checkpoint $c --workload $w --warmup 0 --iters 3 2>&1 | grep -E "pdl_all" | head -3
done
sh $B/ab.sh $OUT 3 "$B/N/pi0 $B/L/pdlall" pi0-3cam pi05-3cam pi0-libero pi0-h50 > /dev/null
cat $OUT/ab.txt
