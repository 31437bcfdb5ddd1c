#!/bin/sh
# session 27 call 3 (lab build on 3054871): which expert ops trigger their dependent at entry (PI0_LAB_EARLY bits:
# 1 o, 2 mlp_up incl. its pre-norm kernel at M > 16, 4 q|k|v, 16 decode attention); e1 = production
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
PI0_LAB_EARLY=23 timeout 200 $B/N/tests/test_cuda > $OUT/test_cuda-e23.log 2>&1; echo "test_cuda e23 rc=$? $(tail -1 $OUT/test_cuda-e23.log)"
sh $B/ab.sh $OUT 2 "$B/N/e1 $B/N/e3 $B/N/e5 $B/N/e17 $B/N/e21" pi0-3cam pi05-3cam pi0-h50 > /dev/null
cat $OUT/ab.txt | awk '{print $1, $2, $4, $10, $18, $19, $20}'
