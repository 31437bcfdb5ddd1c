#!/bin/sh
# session 28 call 5: gate|up's weight rows issued by lanes < L of warp 1, L rows every P cycles (PI0_CUDA_PACE4=P,L)
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
for v in 0 1,64 600,8 800,8 1000,8 1200,16 1600,16 2000,16 1000,16 0; do
  PI0_CUDA_PACE4=$v timeout 100 $B/N/tests/denoise_chain > $OUT/chain.txt 2>&1
  echo "chain $v: $(grep -E '^layer \(norms fused\)' $OUT/chain.txt | tr -s ' ' | tr '\n' ' ')"
done
PI0_CUDA_PACE4=1000,8,0 timeout 150 $B/N/tests/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda 1000,8,0 rc=$? $(tail -1 $OUT/test_cuda.log)"
for v in 0 1000,8; do PI0_CUDA_PACE4=$v LAB_PROF=1 timeout 150 $B/N/tests/chain_prof > $OUT/prof-$v.txt 2>&1; echo "prof $v rc=$?"; done
tar czf $OUT/prof.tgz -C $OUT prof-0.txt prof-1000,8.txt && rm $OUT/prof-*.txt
sh $B/ab.sh $OUT 2 "$B/N/v0 $B/N/v1000x8 $B/N/v1000x16" pi0-3cam pi05-3cam > /dev/null
awk '{print $1, $2, $4, $10, $20}' $OUT/ab.txt
