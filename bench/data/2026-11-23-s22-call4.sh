#!/bin/sh
# session 22 call 4: linear_f32_kernel's row block: A (LF_M 8, LF_K 1024, as committed), B (16, 512), C (32, 256)
OUT=$1; B=build-carry; export LD_LIBRARY_PATH=$PWD/$B/lib; ck=/tmp/pi0-ckpt
$B/s22/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null
for v in s22b s22c; do timeout 150 $B/$v/tests/test_cuda > $OUT/test_cuda-$v.log 2>&1; echo "$v test_cuda rc=$? $(tail -1 $OUT/test_cuda-$v.log)"; grep FAIL $OUT/test_cuda-$v.log | head -5; done
sh $B/ab.sh $OUT 3 "s22/pi0 s22b/pi0 s22c/pi0" pi0-3cam pi0-h50 pi0-libero > /dev/null
awk '{k=substr($0,1,index($0," round")-1); v[k]=v[k]" "$(NF-8)} END {for (k in v) print k": "v[k]}' $OUT/ab.txt | sort
tail -1 $OUT/ab.txt
