#!/bin/sh
# Runs the kernel labs of bench/kernels on the GPU machine. Build them here first with `make lab` (into build/lab;
# the *_prof labs are the production kernels compiled with their lab switch, src/cuda/lab_hooks.cuh), carry
# build/lab, then: sh bench/kernels/run_lab.sh run OUTDIR   (NCU=1 adds ncu DRAM throughput)
B=${LAB:-build/lab}
if [ "$1" = build ]; then exec make lab; fi
out=${2:-/tmp/lab}
mkdir -p "$out"
$B/gemv_smallm | tee "$out/gemv_smallm.txt"
$B/gemv_smallm 51 | tee "$out/gemv_smallm51.txt"
$B/wg_prof 51 | tee "$out/wg_prof.txt"
PI0_CUDA_PDL=0 $B/fw_prof | tee "$out/fw_prof.txt"
{ $B/decode_attn 11 788; $B/decode_attn 10 968; $B/decode_attn 51 788; } | tee "$out/decode_attn.txt"
$B/denoise_chain | tee "$out/denoise_chain.txt"
$B/gelu_epilogue | tee "$out/gelu_epilogue.txt"
$B/pdl_drain | tee "$out/pdl_drain.txt"
$B/gateup_lab | tee "$out/gateup_lab.txt"
$B/wgmma_rate | tee "$out/wgmma_rate.txt"
$B/lt_search | tee "$out/lt_search.txt"
$B/lt_fp8 | tee "$out/lt_fp8.txt"
LAB_PROF=1 $B/chain_prof | tee "$out/chain_prof.txt"
if [ -n "$NCU" ] && command -v ncu >/dev/null; then   # NCU=1: DRAM throughput of each version (slow)
    ncu --clock-control none --csv --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum \
        $B/gemv_smallm once > "$out/gemv_ncu.csv" 2>/dev/null
    python3 - "$out/gemv_ncu.csv" <<'PY'
import csv, sys, collections
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
agg = collections.OrderedDict()
for r in csv.DictReader(rows):
    k = (r["ID"], r["Kernel Name"][:60])
    agg.setdefault(k, {})[r["Metric Name"]] = r["Metric Value"] + " " + r.get("Metric Unit", "")
print("ncu: %d kernels" % len(agg))
for (i, name), m in list(agg.items())[:400]:
    print(i, name, "|", " | ".join("%s=%s" % (a.split("__")[1][:24], b) for a, b in m.items()))
PY
fi
