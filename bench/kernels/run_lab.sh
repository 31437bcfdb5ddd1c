#!/bin/sh
# Builds (where nvcc and build-gpu/libpi0.a exist) and runs the kernel labs of bench/kernels.
# Usage: sh bench/kernels/run_lab.sh build        (here: make BUILD=build-gpu first)
#        sh bench/kernels/run_lab.sh run OUTDIR   (device machine: timings; NCU=1 adds ncu DRAM throughput)
B=${BUILD:-build-gpu}
if [ "$1" = build ]; then
    nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -lineinfo -Iinclude -Isrc -DPI0_HAVE_CUDA \
        bench/kernels/gemv_smallm.cu $B/libpi0.a -o $B/gemv_smallm \
        /usr/lib/x86_64-linux-gnu/libjansson.a -Xcompiler -fopenmp -lcublasLt -lgomp || exit 1
    for k in decode_attn denoise_chain gateup_lab gelu_epilogue pdl_drain sm_stream wgemm_lab; do
        nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -lineinfo -Iinclude -Isrc -DPI0_HAVE_CUDA \
            bench/kernels/$k.cu $B/libpi0.a -o $B/$k /usr/lib/x86_64-linux-gnu/libjansson.a -Xcompiler -fopenmp \
            -lcublasLt -lgomp || exit 1
    done
    nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Iinclude -Isrc -DPI0_HAVE_CUDA bench/kernels/wgmma_rate.cu \
        -o $B/wgmma_rate || exit 1
    nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Iinclude -Isrc bench/kernels/lt_search.cu -o $B/lt_search \
        -lcublasLt || exit 1
    # denoise_chain with per-block phase stamps in the few-row products (LAB_PROF=1 prints them)
    patch -s -o $B/gemv_prof.cu src/cuda/gemv.cu bench/kernels/gemv_prof.patch || exit 1
    patch -s -o $B/attention_prof.cu src/cuda/attention.cu bench/kernels/attn_prof.patch || exit 1
    nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -lineinfo -Iinclude -Isrc -Isrc/cuda -DPI0_HAVE_CUDA \
        -DGEMV_PROF bench/kernels/denoise_chain.cu $B/gemv_prof.cu $B/attention_prof.cu $B/libpi0.a -o $B/chain_prof \
        /usr/lib/x86_64-linux-gnu/libjansson.a -Xcompiler -fopenmp -lcublasLt -lgomp || exit 1
    # gemv.cu's warpgroup kernel (17-64 rows) with per-block phase stamps
    patch -s -o $B/gemv_wgprof.cu src/cuda/gemv.cu bench/kernels/wg_prof.patch || exit 1
    nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -lineinfo -Iinclude -Isrc -Isrc/cuda -DPI0_HAVE_CUDA \
        bench/kernels/wg_prof.cu $B/gemv_wgprof.cu $B/libpi0.a -o $B/wg_prof /usr/lib/x86_64-linux-gnu/libjansson.a \
        -Xcompiler -fopenmp -lcublasLt -lgomp || exit 1
    # attention.cu's prefix flash kernel with per-block, per-step stamps
    patch -s -o $B/attention_fwprof.cu src/cuda/attention.cu bench/kernels/fw_prof.patch || exit 1
    nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -lineinfo -Iinclude -Isrc -Isrc/cuda -DPI0_HAVE_CUDA \
        bench/kernels/fw_prof.cu $B/attention_fwprof.cu $B/libpi0.a -o $B/fw_prof /usr/lib/x86_64-linux-gnu/libjansson.a \
        -Xcompiler -fopenmp -lcublasLt -lgomp || exit 1
    exit 0
fi
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
$B/sm_stream | tee "$out/sm_stream.txt"
$B/wgemm_lab | tee "$out/wgemm_lab.txt"
$B/gateup_lab | tee "$out/gateup_lab.txt"
$B/wgmma_rate | tee "$out/wgmma_rate.txt"
$B/lt_search | tee "$out/lt_search.txt"
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
