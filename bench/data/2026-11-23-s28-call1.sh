#!/bin/sh
# session 28 call 1: gate|up's weight rows issued in paced groups (PI0_CUDA_PACE=rows,depth) so that fewer bytes are
# in flight while decode attention and o run; chain lab, chain_prof, A/B; the first call's split (plans vs graph)
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
for v in 0,1 16,1 16,2 8,2 32,1 8,4 8,1 0,1; do
  PI0_CUDA_PACE=$v timeout 100 $B/N/tests/denoise_chain > $OUT/chain-$v.txt 2>&1
  echo "chain $v: $(grep -E '^layer \(norms fused\)' $OUT/chain-$v.txt | tr -s ' ' | tr '\n' ' ')"
done
PI0_CUDA_PACE=16,2 timeout 150 $B/N/tests/test_cuda > $OUT/test_cuda-p16x2.log 2>&1; echo "test_cuda p16x2 rc=$? $(tail -1 $OUT/test_cuda-p16x2.log)"
for v in 0,1 16,2; do PI0_CUDA_PACE=$v LAB_PROF=1 timeout 150 $B/N/tests/chain_prof > $OUT/prof-$v.txt 2>&1; echo "prof $v rc=$?"; done
grep -E "^layer|SM clock" $OUT/prof-0,1.txt | head -4; grep -E "^layer|SM clock" $OUT/prof-16,2.txt | head -4
tar czf $OUT/prof.tgz -C $OUT prof-0,1.txt prof-16,2.txt && rm $OUT/prof-*.txt
sh $B/ab.sh $OUT 2 "$B/N/p0x1 $B/N/p16x1 $B/N/p16x2 $B/N/p8x2" pi0-3cam pi05-3cam > /dev/null
awk '{print $1, $2, $4, $10, $20}' $OUT/ab.txt
for g in 0 1; do PI0_CUDA_GRAPHS=$g timeout 100 $B/N/pi0 bench --backend cuda --checkpoint $ck/pi0 --workload pi0-3cam --warmup 0 --iters 3 2>&1 | tail -1; done
