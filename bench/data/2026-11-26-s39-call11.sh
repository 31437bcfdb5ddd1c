#!/bin/sh
# Session 39, call 11 (H100): the first GPU run of session 38's hardened parsers and limits: op tests on both paths,
# end-to-end checks, then the headline workloads on the current code (B = 1 twice, b8 and b64 once).
cd "$(dirname "$0")/.."; . bench/device_lib.sh
ckpts
tests_both
for r in 1 2; do for w in pi0-3cam pi0-libero pi0-h50; do b pi0 --workload $w; done; b pi05 --workload pi05-3cam; done
b pi0 --workload pi0-3cam-b8
b pi0 --workload pi0-3cam-b64
