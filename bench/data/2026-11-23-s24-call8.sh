#!/bin/sh
# session 24 call 8 (lab): what the uploads before the graph cost at B = 1. pi0: as committed (62f3aaa);
# pi0-noimg: after the first call the image copy is skipped (same images); pi0-noup: every upload skipped
OUT=$1; B=build-carry; export LD_LIBRARY_PATH=$PWD/$B/lib; ck=/tmp/pi0-ckpt
$B/U/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null
sh $B/ab.sh $OUT 2 "$B/U/pi0 $B/U/pi0-noimg $B/U/pi0-noup" pi0-3cam pi0-libero
