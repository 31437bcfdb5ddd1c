#!/bin/sh
# session 25 call 2: GELU as x / (1 + e^(-2u)) (G) against tanhf (H, 06c91cb); L = G's gate|up epilogue without
# its GELU (lab bound, wrong results). test_cuda --full on G; ncu of the gate|up kernels; A/B end to end
OUT=$1; B=build-carry; export LD_LIBRARY_PATH=$PWD/$B/H/lib; ck=/tmp/pi0-ckpt
$B/H/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/H/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
timeout 200 $B/G/tests/test_cuda --full $ck/pi0 $ck/pi05 > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?"; tail -1 $OUT/test_cuda.log
grep -E "FAIL|full-size" $OUT/test_cuda.log | head -20
for v in H G L; do for w in pi0-3cam pi0-3cam-b64; do
  timeout 120 ncu --clock-control none --csv --metrics gpu__time_duration.sum -k regex:gateup --launch-count 6 $B/$v/pi0 bench --backend cuda \
    --checkpoint $ck/pi0 --workload $w --no-graph --warmup 0 --iters 1 2>/dev/null | grep gateup | awk -F'","' -v v=$v -v w=$w '{print v, w, $5, $NF}' | tr -d '"'
done; done | tee $OUT/ncu-gateup.txt
sh $B/ab.sh $OUT 2 "$B/H/pi0 $B/G/pi0 $B/L/pi0" pi0-3cam pi0-3cam-b64
