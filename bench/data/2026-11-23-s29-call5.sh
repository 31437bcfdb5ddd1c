#!/bin/sh
# session 29 call 5: review fixes (capture failure falls back to no graphs; replay counter; tests replay on other noise)
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
timeout 300 $B/F/tests/test_cuda --full $ck/pi0 $ck/pi05 > $OUT/test_cuda_full.log 2>&1; echo "test_cuda --full rc=$? $(tail -1 $OUT/test_cuda_full.log)"
grep -E "FAIL|prompt lengths|full-size.*B=1|replay" $OUT/test_cuda_full.log | head -12
for w in pi0-3cam pi05-3cam; do
  case $w in pi05*) c=$ck/pi05;; *) c=$ck/pi0;; esac
  echo "$w: $(timeout 120 $B/F/pi0 bench --backend cuda --checkpoint $c --workload $w --warmup 0 --iters 30 --vary-tokens 5 2>&1 | grep -E 'first|^pi0' | awk '{$1=$1};1' | tr '\n' ' ')"
done
sh $B/ab.sh $OUT 1 "$B/F/pi0" pi0-3cam pi05-3cam pi0-libero pi0-h50 pi0-3cam-b8 > /dev/null
awk '{print $1, $2, $4, $10, $NF}' $OUT/ab.txt
