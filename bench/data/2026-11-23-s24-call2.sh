#!/bin/sh
# session 24 call 2: lanes fixed (fork event made for lane 0 too); test_cuda --full, A/B lanes vs PI0_CUDA_LANES=0
OUT=$1; B=build-carry; export LD_LIBRARY_PATH=$PWD/$B/lib; ck=/tmp/pi0-ckpt
$B/L/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/L/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
sh $B/ab.sh $OUT 1 "$B/L/pi0 $B/L/pi0-nolanes" pi0-3cam
timeout 220 $B/L/tests/test_cuda --full $ck/pi0 $ck/pi05 > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?"; tail -1 $OUT/test_cuda.log
grep -E "FAIL|full-size|^lanes" $OUT/test_cuda.log | head -20
sh $B/ab.sh $OUT 2 "$B/L/pi0 $B/L/pi0-nolanes" pi0-3cam pi0-libero pi05-3cam
