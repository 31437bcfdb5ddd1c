#!/bin/sh
# device run (after the closing review: shared few-row helpers for linear_gated / residual_save and mlp_up /
# mlp_up_save): the op tests on both paths and the tiny end-to-end checks
cd "$(dirname "$0")/.."
. bench/device_lib.sh
TO=120 TL=4
t ops_hopper $D/h/test_cuda_ops
PI0_CUDA_PATH=portable t ops_portable $D/h/test_cuda_ops
t e2e_hopper $D/h/test_cuda_e2e
