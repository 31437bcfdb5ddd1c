#!/bin/sh
# session 26 call 1: gate|up in clusters of two sharing the token tile (multicast) vs single blocks:
# op tests, the lab at M = 788 / 6304 / 50432, ncu SOL at b64 size, A/B end to end
OUT=$1; B=build-carry; export LD_LIBRARY_PATH=$PWD/$B/N/lib; ck=/tmp/pi0-ckpt
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
timeout 200 $B/N/tests/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?"; tail -2 $OUT/test_cuda.log; grep -c "gateup.cu width" $OUT/test_cuda.log
grep FAIL $OUT/test_cuda.log | head
timeout 240 $B/N/gateup_lab 788 6304 50432 > $OUT/gateup_lab.txt 2>&1; echo "lab rc=$?"; cat $OUT/gateup_lab.txt
for m in 1 2; do
  PI0_CUDA_GATEUP=$m timeout 100 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --csv --kernel-name regex:gateup --launch-count 1 $B/N/gateup_lab once 50432 256 > $OUT/ncu-gu$m.csv 2>&1
  echo "ncu gu$m rc=$?"; grep -E "Duration|Throughput|Busy|Hit Rate|Elapsed Cycles|SM Frequency" $OUT/ncu-gu$m.csv | awk -F'","' '{print $(NF-2), $(NF-1), $NF}' | head -24
done
sh $B/ab.sh $OUT 2 "$B/N/gu1 $B/N/gu2" pi0-3cam pi05-3cam pi0-3cam-b8 pi0-3cam-b64
