#!/bin/sh
# session 25 call 3: the denoise chain lab at 45f07de: per-op costs (denoise_chain) and per-block phase stamps
# (chain_prof, LAB_PROF=1) of one 18-layer step at M = 11
OUT=$1; B=build-carry
$B/lab/denoise_chain > $OUT/denoise_chain.txt 2>&1; echo "denoise_chain rc=$?"
LAB_PROF=1 $B/lab/chain_prof > $OUT/chain_prof.txt 2>&1; echo "chain_prof rc=$?"
cat $OUT/denoise_chain.txt | head -60
