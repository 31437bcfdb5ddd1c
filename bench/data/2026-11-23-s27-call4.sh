#!/bin/sh
# session 27 call 4: q|k|v and o trigger their dependents at entry (N, working tree on 3054871) against 3ad567d (A):
# full-size tests, the chain lab, A/B on the B = 1 workloads, b8 / b64 once
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
timeout 200 $B/N/tests/test_cuda --full $ck/pi0 $ck/pi05 > $OUT/test_cuda_full.log 2>&1; echo "test_cuda --full rc=$?"
grep -E "FAIL|full-size|test_cuda:" $OUT/test_cuda_full.log | tail -5
timeout 120 $B/N/tests/denoise_chain > $OUT/chain.txt 2>&1; grep -E '^layer \(norms fused\)' $OUT/chain.txt
sh $B/ab.sh $OUT 3 "$B/A/pi0 $B/N/pi0" pi0-3cam pi05-3cam pi0-libero pi0-h50 > /dev/null
awk '{print $1, $2, $4, $10, $18, $19, $20}' $OUT/ab.txt
for w in pi0-3cam-b8 pi0-3cam-b64; do timeout 150 $B/N/pi0 bench --backend cuda --checkpoint $ck/pi0 --workload $w 2>/dev/null | tail -1; done | tee $OUT/batch.txt
