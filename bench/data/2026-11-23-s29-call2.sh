#!/bin/sh
# session 29 call 2: where each denoise kernel triggers its dependent (lab env PI0_LAB_LATE_*)
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
L=$B/L
sh $B/ab.sh $OUT 2 "$B/N/pi0 $L/pi0 $L/q1 $L/q2 $L/g1 $L/g2 $L/d1 $L/d2 $L/a1 $L/a2 $L/a3" pi0-3cam pi05-3cam > /dev/null
awk '{print $1, $2, $4, $10, $NF}' $OUT/ab.txt
