#!/bin/sh
# session 28 call 9: after the review fixes (single-candidate plans never make a draft graph; padding-safe key copies)
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
timeout 300 $B/N/tests/test_cuda --full $ck/pi0 $ck/pi05 > $OUT/test_cuda_full.log 2>&1; echo "test_cuda --full rc=$? $(tail -1 $OUT/test_cuda_full.log)"
grep -E "FAIL|prompt lengths|full-size.*B=1" $OUT/test_cuda_full.log | head -8
for w in pi0-3cam pi05-3cam; do
  case $w in pi05*) c=$ck/pi05;; *) c=$ck/pi0;; esac
  echo "$w: $(timeout 120 $B/N/pi0 bench --backend cuda --checkpoint $c --workload $w --warmup 0 --iters 30 --vary-tokens 5 2>&1 | grep -E 'first|^pi0' | awk '{$1=$1};1' | tr '\n' ' ')"
done
