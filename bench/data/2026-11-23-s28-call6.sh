#!/bin/sh
# session 28 call 6: the cost of a new prompt length (pi0 bench --vary-tokens: new prefix row counts), graphs on and
# off; the paced gate|up stream (PI0_CUDA_PACE4=1000,8) against none, 3 rounds on the B = 1 workloads
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
for g in 1 0; do for w in pi0-3cam pi05-3cam; do
  case $w in pi05*) c=$ck/pi05;; *) c=$ck/pi0;; esac
  echo "graphs=$g $w: $(PI0_CUDA_GRAPHS=$g timeout 120 $B/N/pi0 bench --backend cuda --checkpoint $c --workload $w --warmup 0 --iters 30 --vary-tokens 5 2>&1 | grep -E 'first|^pi0' | awk '{$1=$1};1' | tr '\n' ' ')"
done; done
echo "graphs=1 pi0-3cam, 10 lengths: $(timeout 120 $B/N/pi0 bench --backend cuda --checkpoint $ck/pi0 --workload pi0-3cam --warmup 0 --iters 40 --vary-tokens 10 2>&1 | grep -E 'first|^pi0' | awk '{$1=$1};1' | tr '\n' ' ')"
sh $B/ab.sh $OUT 3 "$B/N/v0 $B/N/v1000x8" pi0-3cam pi05-3cam pi0-libero pi0-h50 > /dev/null
awk '{print $1, $2, $4, $10, $20}' $OUT/ab.txt
