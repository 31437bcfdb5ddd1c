#!/bin/sh
# session 27 call 5: per-block phase stamps of the denoise chain at 3054871 (o triggers gate|up at entry)
OUT=$1; B=build-carry
LAB_PROF=1 timeout 200 $B/N/tests/chain_prof > $OUT/chain_prof.txt 2>&1; echo "chain_prof rc=$?"
grep -E "^layer \(norms fused\)|SM clock" $OUT/chain_prof.txt | head; gzip -k $OUT/chain_prof.txt
