#!/bin/sh
# session 24 call 7: resize_with_pad before (rs2old: image.c of 27d86dd) and after (b28199a) on the device host
B=build-carry
for s in "480 640" "960 1280" "224 300"; do
  for t in 1 4 16; do
    echo "threads $t: old $(OMP_NUM_THREADS=$t $B/R/rs2old $s) | new $(OMP_NUM_THREADS=$t $B/R/rs2new $s)"
  done
done
