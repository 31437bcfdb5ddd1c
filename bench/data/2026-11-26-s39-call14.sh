#!/bin/sh
# Session 39, call 14 (H100), after the closing review: phase_lab with one non-blocking stream loop for cooperative
# and cluster launches (was two), megakernel and denoise_chain with the few-row X load shared (few_rows.cuh): the
# cooperative stream rows against calls 6-7, the labs' correctness checks.
cd "$(dirname "$0")/.."; . bench/device_lib.sh
TO=120 TL=0 t phase_lab $D/lab/phase_lab; grep -E "stream|FAIL|checks" $O/phase_lab.log | head -40
TO=60 TL=0 t megakernel $D/lab/megakernel 18 5; grep -E "correctness|determinism|^the chain" $O/megakernel.log
TO=120 TL=0 t chain $D/lab/denoise_chain; grep -E "persistent kernel vs|layer \(norms fused\)" $O/chain.log
