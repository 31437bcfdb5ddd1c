#!/bin/sh
# session 30 call 3: test_cuda --full after the e2e setup refactor (tiny_open); one bench round at HEAD
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
timeout 400 $B/S/tests/test_cuda --full $ck/pi0 $ck/pi05 > $OUT/test_cuda_full.log 2>&1; echo "test_cuda --full rc=$? $(tail -1 $OUT/test_cuda_full.log)"
grep -E "graph fault|bad image|FAIL|full-size.*B=1" $OUT/test_cuda_full.log | head -12
sh $B/ab.sh $OUT 1 "$B/S/pi0" pi0-3cam pi05-3cam pi0-libero pi0-h50 > /dev/null
awk '{print $1, $2, $4, $10, $NF}' $OUT/ab.txt
