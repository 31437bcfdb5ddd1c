#!/bin/sh
# session 27 call 1: few-row products triggering their dependents at entry (PI0_LAB_EARLY bits: 1 o, 2 gate|up,
# 4 q|k|v, 8 down) in the chain lab and end to end; cluster occupancy by size; the first call's cost
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
$B/N/tests/cluster_occ > $OUT/cluster_occ.txt 2>&1; cat $OUT/cluster_occ.txt
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
for e in 0 1 2 4 8 3 9 0 1; do
  PI0_LAB_EARLY=$e timeout 120 $B/N/tests/denoise_chain > $OUT/chain-e$e.txt 2>&1
  echo "chain e$e: $(grep -E '^layer \(norms fused\)' $OUT/chain-e$e.txt | tr -s ' ' | tr '\n' ' ')"
done
for e in 1 2; do PI0_LAB_EARLY=$e timeout 200 $B/N/tests/test_cuda > $OUT/test_cuda-e$e.log 2>&1; echo "test_cuda e$e rc=$? $(tail -1 $OUT/test_cuda-e$e.log)"; done
sh $B/ab.sh $OUT 2 "$B/N/e0 $B/N/e1 $B/N/e2 $B/N/e8 $B/N/e9" pi0-3cam pi05-3cam
for i in 1 2; do timeout 100 $B/N/pi0 bench --backend cuda --checkpoint $ck/pi0 --workload pi0-3cam --warmup 0 --iters 3 2>&1 | tail -2; done > $OUT/first-call.txt; cat $OUT/first-call.txt
