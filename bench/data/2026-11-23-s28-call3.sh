#!/bin/sh
# session 28 call 3: gate|up's weight copies start PI0_CUDA_DELAY cycles after the block starts (all rows at once)
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
for v in 0 1000 2000 3000 4000 5000 7000 0; do
  PI0_CUDA_DELAY=$v timeout 100 $B/N/tests/denoise_chain > $OUT/chain.txt 2>&1
  echo "chain $v: $(grep -E '^layer \(norms fused\)' $OUT/chain.txt | tr -s ' ' | tr '\n' ' ')"
done
for v in 0 3000; do PI0_CUDA_DELAY=$v LAB_PROF=1 timeout 150 $B/N/tests/chain_prof > $OUT/prof-$v.txt 2>&1; echo "prof $v rc=$?"; done
tar czf $OUT/prof.tgz -C $OUT prof-0.txt prof-3000.txt && rm $OUT/prof-*.txt
sh $B/ab.sh $OUT 2 "$B/N/d0 $B/N/d1500 $B/N/d3000 $B/N/d4500" pi0-3cam pi05-3cam > /dev/null
awk '{print $1, $2, $4, $10, $20}' $OUT/ab.txt
