#!/bin/sh
# session 25 call 1: ncu kernel sums of one un-graphed pi0-3cam-b64 and pi0-libero inference at HEAD (06c91cb),
# to size where B = 64 spends its time now; bench rows of the B = 1 workloads and b64 as the session baseline
OUT=$1; B=build-carry; export LD_LIBRARY_PATH=$PWD/$B/H/lib; ck=/tmp/pi0-ckpt
$B/H/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/H/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv
for w in pi0-3cam-b64 pi0-libero; do
  PI0_CUDA_GRAPHS=0 timeout 280 ncu --clock-control none --csv --metrics gpu__time_duration.sum $B/H/pi0 bench --backend cuda \
    --checkpoint $ck/pi0 --workload $w --no-graph --warmup 0 --iters 1 > $OUT/ncu-$w.csv 2>/dev/null; echo "ncu $w rc=$?"
  python3 $B/kernel_times.py $OUT/ncu-$w.csv --stages > $OUT/kernels-$w.txt 2>&1; cut -c1-150 $OUT/kernels-$w.txt | head -60
  gzip $OUT/ncu-$w.csv
done
sh $B/ab.sh $OUT 1 "$B/H/pi0" pi0-3cam pi0-3cam-b64
