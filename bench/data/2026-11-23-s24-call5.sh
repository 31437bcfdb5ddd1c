#!/bin/sh
# session 24 call 5: the pixel scan during the graph replay (N2) against the vectorised scan before it (N); test_cuda
OUT=$1; B=build-carry; export LD_LIBRARY_PATH=$PWD/$B/lib; ck=/tmp/pi0-ckpt
$B/N2/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N2/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
timeout 220 $B/N2/tests/test_cuda --full $ck/pi0 $ck/pi05 > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?"; tail -1 $OUT/test_cuda.log
grep -E "FAIL|full-size|bad image" $OUT/test_cuda.log | head -20
sh $B/ab.sh $OUT 2 "$B/N/pi0 $B/N2/pi0" pi0-3cam pi0-libero pi0-3cam-b64
