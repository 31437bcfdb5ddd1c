#!/bin/sh
# Session 31, H100 calls 3 and 4 (call 3 with an earlier fp8_e2e.py that drew the activations' scale jitter per call).
# Run from the repository root on the device with build-carry/ carried (pi0 of 4bb742e; gen-checkpoint's BF16 default).
export LD_LIBRARY_PATH=$PWD/build-carry/N/lib
ck=/tmp/pi0-ckpt
mkdir -p $ck
build-carry/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 > /dev/null || exit 1
build-carry/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 > /dev/null || exit 1
python3 -c "import torch; print('torch', torch.__version__)"
SEEDS=2 REALS=4 timeout 540 python3 -u bench/fp8_e2e.py $ck/pi0 $ck/pi05
