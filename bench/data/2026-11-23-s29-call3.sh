#!/bin/sh
# session 29 call 3: a new graph key runs un-captured and is captured + instantiated behind the run (G) vs HEAD (N)
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
timeout 300 $B/G/tests/test_cuda --full $ck/pi0 $ck/pi05 > $OUT/test_cuda_full.log 2>&1; echo "test_cuda --full rc=$? $(tail -1 $OUT/test_cuda_full.log)"
grep -E "FAIL|prompt lengths|full-size.*B=1" $OUT/test_cuda_full.log | head -8
for r in 1 2; do
for w in pi0-3cam pi05-3cam; do
  case $w in pi05*) c=$ck/pi05;; *) c=$ck/pi0;; esac
  for b in N G; do
    echo "r$r $b $w: $(timeout 120 $B/$b/pi0 bench --backend cuda --checkpoint $c --workload $w --warmup 0 --iters 30 --vary-tokens 5 2>&1 | grep -E 'first|^pi0' | awk '{$1=$1};1' | tr '\n' ' ')"
    echo "r$r $b $w 10 lengths: $(timeout 120 $B/$b/pi0 bench --backend cuda --checkpoint $c --workload $w --warmup 0 --iters 30 --vary-tokens 10 2>&1 | grep -E 'first|^pi0' | awk '{$1=$1};1' | tr '\n' ' ')"
  done
done
done
sh $B/ab.sh $OUT 2 "$B/N/pi0 $B/G/pi0" pi0-3cam pi05-3cam pi0-libero pi0-h50 > /dev/null
awk '{print $1, $2, $4, $10, $NF}' $OUT/ab.txt
