#!/bin/sh
# session 28 call 7: GEMM timing shared within 64-row buckets + capture-first graphs + 32 cached graphs: full tests,
# the cost of new prompt lengths (pi0 bench --vary-tokens), the steady-state workloads
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
timeout 300 $B/N/tests/test_cuda --full $ck/pi0 $ck/pi05 > $OUT/test_cuda_full.log 2>&1; echo "test_cuda --full rc=$? $(tail -1 $OUT/test_cuda_full.log)"
grep -E "FAIL|prompt lengths|full-size" $OUT/test_cuda_full.log | head -8
for g in 1 0; do for w in pi0-3cam pi05-3cam; do
  case $w in pi05*) c=$ck/pi05;; *) c=$ck/pi0;; esac
  echo "graphs=$g $w: $(PI0_CUDA_GRAPHS=$g timeout 120 $B/N/pi0 bench --backend cuda --checkpoint $c --workload $w --warmup 0 --iters 30 --vary-tokens 5 2>&1 | grep -E 'first|^pi0' | awk '{$1=$1};1' | tr '\n' ' ')"
done; done
echo "graphs=1 pi0-3cam, 10 lengths: $(timeout 120 $B/N/pi0 bench --backend cuda --checkpoint $ck/pi0 --workload pi0-3cam --warmup 0 --iters 40 --vary-tokens 10 2>&1 | grep -E 'first|^pi0' | awk '{$1=$1};1' | tr '\n' ' ')"
echo "graphs=1 pi05-3cam, 20 lengths: $(timeout 120 $B/N/pi0 bench --backend cuda --checkpoint $ck/pi05 --workload pi05-3cam --warmup 0 --iters 60 --vary-tokens 20 2>&1 | grep -E 'first|^pi0' | awk '{$1=$1};1' | tr '\n' ' ')"
for w in pi0-3cam pi05-3cam pi0-libero pi0-h50; do
  case $w in pi05*) c=$ck/pi05;; *) c=$ck/pi0;; esac
  timeout 120 $B/N/pi0 bench --backend cuda --checkpoint $c --workload $w 2>/dev/null | tail -1
done
