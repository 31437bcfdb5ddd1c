#!/bin/sh
# session 30 call 1: FP8 against bf16 products (cuBLAS via torch) for the vision and prefill stages, B = 1 and 64
OUT=$1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
(nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader -lms 200 > $OUT/smi.txt &) 
timeout 500 python3 bench/fp8_probe.py 1 64 2>&1 | tee $OUT/fp8_probe.txt
pkill -f "nvidia-smi --query" ; true
