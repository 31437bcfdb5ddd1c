#!/bin/sh
# session 24 call 6: π0's action_in composed into action_time_mlp_in (T) against 04b545d (N2); test_cuda on T
OUT=$1; B=build-carry; export LD_LIBRARY_PATH=$PWD/$B/lib; ck=/tmp/pi0-ckpt
$B/T/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/T/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
timeout 200 $B/T/tests/test_cuda --full $ck/pi0 $ck/pi05 > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?"; tail -1 $OUT/test_cuda.log
grep -E "FAIL|full-size|bad image" $OUT/test_cuda.log | head -20
sh $B/ab.sh $OUT 2 "$B/N2/pi0 $B/T/pi0" pi0-3cam pi0-h50 pi0-libero
sh $B/ab.sh $OUT 1 "$B/N2/pi0 $B/T/pi0" pi05-3cam pi0-3cam-b8 pi0-3cam-b64
