#!/bin/sh
# session 25 call 5 (lab): the expert's gate|up at M <= 16 as two launches of F / 2 features (PI0_LAB_SPLIT_GU = the
# row tiles per block, 4 or 8), so that the second half's weights stream in during the first; 0 = one launch
OUT=$1; B=build-carry; export LD_LIBRARY_PATH=$PWD/$B/S/lib; ck=/tmp/pi0-ckpt
$B/S/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/S/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
for v in 0 8 4 0 8 4; do PI0_LAB_SPLIT_GU=$v $B/S/denoise_chain > $OUT/chain-$v.txt 2>&1; grep -E "^layer \(norms fused\)|only norm\+gate|only gate" $OUT/chain-$v.txt | sed "s/^/split $v: /"; done
PI0_LAB_SPLIT_GU=8 timeout 200 $B/S/tests/test_cuda > $OUT/test_cuda-split8.log 2>&1; echo "test_cuda split8 rc=$?"; tail -1 $OUT/test_cuda-split8.log
sh $B/ab.sh $OUT 3 "$B/S/split0 $B/S/split8 $B/S/split4" pi0-3cam pi05-3cam
