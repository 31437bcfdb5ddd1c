#!/bin/sh
# session 29 call 4: the few-row product's epilogue constants (RoPE rotation, adaRMS gates) read before the PDL wait (E)
# against 372d064 (G)
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
timeout 300 $B/E/tests/test_cuda --full $ck/pi0 $ck/pi05 > $OUT/test_cuda_full.log 2>&1; echo "test_cuda --full rc=$? $(tail -1 $OUT/test_cuda_full.log)"
grep -E "FAIL|prompt lengths|full-size.*B=1" $OUT/test_cuda_full.log | head -8
sh $B/ab.sh $OUT 3 "$B/G/pi0 $B/E/pi0" pi0-3cam pi05-3cam pi0-libero pi0-h50 > /dev/null
awk '{print $1, $2, $4, $10, $NF}' $OUT/ab.txt
