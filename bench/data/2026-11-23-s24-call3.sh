#!/bin/sh
# session 24 call 3: cuBLASLt tuning over 128 heuristic candidates instead of 16 (tuned times per shape, A/B)
OUT=$1; B=build-carry; export LD_LIBRARY_PATH=$PWD/$B/lib; ck=/tmp/pi0-ckpt
$B/C/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/C/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
for n in 16 128; do
  PI0_LAB_GEMM_LOG=1 PI0_LAB_GEMM_CANDIDATES=$n $B/C/pi0 bench --backend cuda --checkpoint $ck/pi0 --workload pi0-3cam --iters 3 --warmup 1 > $OUT/log-$n.txt 2>&1
  PI0_LAB_GEMM_LOG=1 PI0_LAB_GEMM_CANDIDATES=$n $B/C/pi0 bench --backend cuda --checkpoint $ck/pi0 --workload pi0-3cam-b64 --iters 2 --warmup 1 > $OUT/log-b64-$n.txt 2>&1
done
paste $OUT/log-16.txt $OUT/log-128.txt | grep tuned | awk -F'\t' '{print substr($1,1,75) " || " substr($2,21,40)}'
sh $B/ab.sh $OUT 2 "$B/C/pi0 $B/C/pi0-c128" pi0-3cam pi0-libero pi05-3cam
sh $B/ab.sh $OUT 1 "$B/C/pi0 $B/C/pi0-c128" pi0-3cam-b64
