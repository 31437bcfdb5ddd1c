#!/bin/sh
# session 27 call 2: the expert's o triggering gate|up at entry (backend.h early_next; N), also gate|up triggering
# down (N3), against HEAD 3ad567d (A): full-size tests, the chain lab, A/B on the B = 1 workloads
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
timeout 200 $B/N/tests/test_cuda --full $ck/pi0 $ck/pi05 > $OUT/test_cuda_full.log 2>&1; echo "test_cuda --full rc=$? $(tail -1 $OUT/test_cuda_full.log)"
grep -iE "FAIL" $OUT/test_cuda_full.log | head -5; grep -iE "full.size|rel_l2" $OUT/test_cuda_full.log | tail -4
timeout 120 $B/N/tests/denoise_chain > $OUT/chain.txt 2>&1; grep -E '^layer \(norms fused\)' $OUT/chain.txt
sh $B/ab.sh $OUT 3 "$B/A/pi0 $B/N/pi0 $B/N3/pi0" pi0-3cam pi05-3cam pi0-libero pi0-h50 > /dev/null
cat $OUT/ab.txt | awk '{print $1, $2, $4, $10, $18, $19, $20}'
