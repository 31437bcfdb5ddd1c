#!/bin/sh
# session 28 call 2: gate|up's (or every few-row product's) weight rows issued one every PI0_CUDA_PACE2 cycles by
# one thread (time-paced, no round trips), so that fewer bytes queue in L2 while attention and o run
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
for v in 0 100 150 200 60 100,0 150,0 0; do
  PI0_CUDA_PACE2=$v timeout 100 $B/N/tests/denoise_chain > $OUT/chain.txt 2>&1
  echo "chain $v: $(grep -E '^layer \(norms fused\)' $OUT/chain.txt | tr -s ' ' | tr '\n' ' ')"
done
PI0_CUDA_PACE2=150,0 timeout 150 $B/N/tests/test_cuda > $OUT/test_cuda-q150x0.log 2>&1; echo "test_cuda q150x0 rc=$? $(tail -1 $OUT/test_cuda-q150x0.log)"
for v in 0 150; do PI0_CUDA_PACE2=$v LAB_PROF=1 timeout 150 $B/N/tests/chain_prof > $OUT/prof-$v.txt 2>&1; echo "prof $v rc=$?"; done
tar czf $OUT/prof.tgz -C $OUT prof-0.txt prof-150.txt && rm $OUT/prof-*.txt
sh $B/ab.sh $OUT 2 "$B/N/q0 $B/N/q100 $B/N/q150 $B/N/q200 $B/N/q150x0" pi0-3cam pi05-3cam > /dev/null
awk '{print $1, $2, $4, $10, $20}' $OUT/ab.txt
