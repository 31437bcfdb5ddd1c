#!/bin/sh
# session 24 call 4: pi0_infer's input scan vectorised (N) against HEAD (B)
OUT=$1; B=build-carry; export LD_LIBRARY_PATH=$PWD/$B/lib; ck=/tmp/pi0-ckpt
nproc; lscpu | grep -E "Model name|^CPU\(s\)"
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
sh $B/ab.sh $OUT 2 "$B/B/pi0 $B/N/pi0" pi0-3cam pi0-libero pi05-3cam pi0-h50 pi0-3cam-b8
sh $B/ab.sh $OUT 2 "$B/B/pi0 $B/N/pi0" pi0-3cam-b64
