#!/bin/sh
# device run (after the closing review: shared few-row helpers for linear_gated / residual_save and mlp_up /
# mlp_up_save): the op tests on both paths and the tiny end-to-end checks
cd "$(dirname "$0")/.."
D=devc; O=${OUT:-/tmp/out}
export LD_LIBRARY_PATH=$PWD/$D/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t() { n=$1; shift; s=$(date +%s); timeout 120 "$@" > $O/$n.log 2>&1; echo "$n exit $? ($(( $(date +%s) - s )) s)"; grep -E "FAIL|worst|passed|failed" $O/$n.log | tail -4; }
t ops_hopper $D/h/test_cuda_ops
PI0_CUDA_PATH=portable t ops_portable $D/h/test_cuda_ops
t e2e_hopper $D/h/test_cuda_e2e
