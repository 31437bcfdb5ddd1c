#!/bin/sh
# session 30 call 2: graph capture / instantiation faults (cuda_graph_fault) in test_cuda; test_cuda --full
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
timeout 400 $B/S/tests/test_cuda --full $ck/pi0 $ck/pi05 > $OUT/test_cuda_full.log 2>&1; echo "test_cuda --full rc=$? $(tail -1 $OUT/test_cuda_full.log)"
grep -E -B2 -A2 "graph fault" $OUT/test_cuda_full.log | head -20
grep -E "FAIL|full-size.*B=1" $OUT/test_cuda_full.log | head -12
