#!/bin/sh
# session 22 call 3: test_cuda (the gated kernel's per-row checks, K = 40); ncu kernel sums of one un-graphed
# inference of pi0-h50 and pi0-3cam (stages), to size the norm kernels and the per-step head at 51 and 11 rows
OUT=$1; B=build-carry; export LD_LIBRARY_PATH=$PWD/$B/lib; ck=/tmp/pi0-ckpt
$B/s22/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null
timeout 200 $B/s22/tests/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?"; tail -1 $OUT/test_cuda.log
grep -E "FAIL" $OUT/test_cuda.log | head; grep -E "mlp_up .*worst" $OUT/test_cuda.log | sort -t= -k3 -g | tail -3
for w in pi0-h50 pi0-3cam; do
  PI0_CUDA_GRAPHS=0 timeout 200 ncu --clock-control none --csv --metrics gpu__time_duration.sum $B/s22/pi0 bench --backend cuda \
    --checkpoint $ck/pi0 --workload $w --no-graph --warmup 0 --iters 1 > $OUT/ncu-$w.csv 2>/dev/null; echo "ncu $w rc=$?"
  python3 $B/kernel_times.py $OUT/ncu-$w.csv --stages > $OUT/kernels-$w.txt 2>&1; grep -A14 "^denoise" $OUT/kernels-$w.txt | cut -c1-130
  gzip $OUT/ncu-$w.csv
done
