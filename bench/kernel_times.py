#!/usr/bin/env python3
"""Sums Nsight Compute per-kernel durations (ncu --csv --metrics gpu__time_duration.sum) by kernel name.
Usage: ncu --clock-control none --csv --metrics gpu__time_duration.sum CMD > ncu.csv; kernel_times.py ncu.csv
       kernel_times.py ncu.csv --stages   the last inference only, split into vision / prefill / denoise
With --stages, CMD must run un-graphed inferences (PI0_CUDA_GRAPHS=0 pi0 bench ... --warmup 0 --iters 1), any batch:
an inference starts at im2col_kernel (patch embedding), the prefill at embed_kernel (text tokens), the denoise at
the first fp32 -> fp32 copy_rows_kernel after it (x = noise). ncu serialises kernels: use the sums for ratios."""
import collections
import csv
import gzip
import signal
import sys

signal.signal(signal.SIGPIPE, signal.SIG_DFL)   # quiet when piped into head


def load(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        rows = [l for l in f if l.startswith('"')]
    ks = []
    for r in csv.DictReader(rows):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        v *= {"nsecond": 1e-3, "ns": 1e-3, "msecond": 1e3}.get(unit, 1.0)   # -> microseconds
        ks.append((int(r["ID"]), r["Kernel Name"][:90], v))
    return sorted(ks)


def table(title, ks, top):
    tot = collections.defaultdict(float)
    cnt = collections.Counter()
    for _, name, v in ks:
        tot[name] += v
        cnt[name] += 1
    s = sum(tot.values())
    print(f"{title}: {s/1e3:.3f} ms over {len(ks)} kernels")
    for k, v in sorted(tot.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{v/1e3:9.3f} ms {100*v/s:5.1f}% {cnt[k]:6d} x {v/cnt[k]:8.2f} us  {k}")


ks = load(sys.argv[1])
if "--stages" not in sys.argv[2:]:
    table("total kernel time", ks, 25)
    sys.exit(0)
start = max(i for i, k in enumerate(ks) if "im2col_kernel" in k[1])
last = ks[start:]
e = next(i for i, k in enumerate(last) if "embed_kernel" in k[1])
# the denoise starts with x = noise, the only fp32 -> fp32 row copy after the text embedding (at B >= 64 the state
# token's product runs on cuBLASLt, so the first linear_f32_kernel is no longer the start)
d = next(i for i, k in enumerate(last) if i > e and "copy_rows_kernel<float, float>" in k[1])
for name, seg in (("vision", last[:e]), ("prefill", last[e:d]), ("denoise", last[d:])):
    table(name, seg, 10)
