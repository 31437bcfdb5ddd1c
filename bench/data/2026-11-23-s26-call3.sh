#!/bin/sh
# session 26 call 3: the B = 1 head reads / writes the suffix rows in place (fp32 products with ACT x or y):
# op tests, full-size GPU vs CPU, A/B against fb6b86d (A) on the B = 1 workloads
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
timeout 300 $B/N/tests/test_cuda --full $ck/pi0 $ck/pi05 > $OUT/test_cuda_full.log 2>&1; echo "test_cuda --full rc=$?"; tail -2 $OUT/test_cuda_full.log
grep -E "FAIL|x16|y16" $OUT/test_cuda_full.log | head -12; grep -iE "full.size|rel_l2 .*pi0|e2e" $OUT/test_cuda_full.log | tail -8
sh $B/ab.sh $OUT 3 "$B/A/pi0 $B/N/pi0" pi0-3cam pi05-3cam pi0-h50 pi0-libero
