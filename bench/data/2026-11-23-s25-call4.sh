#!/bin/sh
# session 25 call 4: decode attention's S with each warp on two key tiles (A) against 45f07de (G): test_cuda --full
# on A; the chain lab before (lab) and after (lab2); A/B end to end
OUT=$1; B=build-carry; export LD_LIBRARY_PATH=$PWD/$B/A/lib; ck=/tmp/pi0-ckpt
$B/A/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/A/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
timeout 200 $B/A/tests/test_cuda --full $ck/pi0 $ck/pi05 > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?"; tail -1 $OUT/test_cuda.log
grep -E "FAIL|full-size" $OUT/test_cuda.log | head -20; grep -iE "attention|decode" $OUT/test_cuda.log | head -30 > $OUT/test_cuda_attn.txt
for v in lab lab2; do $B/$v/denoise_chain > $OUT/denoise_chain-$v.txt 2>&1; grep -E "layer \(norms fused\)|only attention|without attention" $OUT/denoise_chain-$v.txt | sed "s/^/$v /"; done
for v in lab lab2; do $B/$v/denoise_chain > $OUT/denoise_chain2-$v.txt 2>&1; grep -E "layer \(norms fused\)|only attention" $OUT/denoise_chain2-$v.txt | sed "s/^/$v /"; done
{ $B/lab2/decode_attn 11 788; $B/lab2/decode_attn 10 968; $B/lab2/decode_attn 51 788; } > $OUT/decode_attn-lab2.txt 2>&1; tail -20 $OUT/decode_attn-lab2.txt
LAB_PROF=1 $B/lab2/chain_prof > $OUT/chain_prof-lab2.txt 2>&1; echo "chain_prof rc=$?"
sh $B/ab.sh $OUT 3 "$B/G/pi0 $B/A/pi0" pi0-3cam pi0-libero pi05-3cam pi0-h50
