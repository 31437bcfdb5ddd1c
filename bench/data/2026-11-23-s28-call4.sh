#!/bin/sh
# session 28 call 4: gate|up's weight rows issued one every PI0_CUDA_PACE3 cycles by lane 0 of warp 1 (the whole warp paces)
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
for v in 0 50 100 150 200 100,0 150,0 0; do
  PI0_CUDA_PACE3=$v timeout 100 $B/N/tests/denoise_chain > $OUT/chain.txt 2>&1
  echo "chain $v: $(grep -E '^layer \(norms fused\)' $OUT/chain.txt | tr -s ' ' | tr '\n' ' ')"
done
PI0_CUDA_PACE3=150,0 timeout 150 $B/N/tests/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda 150,0 rc=$? $(tail -1 $OUT/test_cuda.log)"
for v in 0 150; do PI0_CUDA_PACE3=$v LAB_PROF=1 timeout 150 $B/N/tests/chain_prof > $OUT/prof-$v.txt 2>&1; echo "prof $v rc=$?"; done
tar czf $OUT/prof.tgz -C $OUT prof-0.txt prof-150.txt && rm $OUT/prof-*.txt
sh $B/ab.sh $OUT 2 "$B/N/w0 $B/N/w100 $B/N/w150 $B/N/w100x0" pi0-3cam pi05-3cam > /dev/null
awk '{print $1, $2, $4, $10, $20}' $OUT/ab.txt
