#!/usr/bin/env python3
"""Sums Nsight Compute per-kernel durations (ncu --csv --metrics gpu__time_duration.sum) by kernel name.
Usage: ncu --clock-control none --csv --metrics gpu__time_duration.sum CMD > ncu.csv; kernel_times.py ncu.csv"""
import csv, sys, collections

tot = collections.defaultdict(float)
cnt = collections.Counter()
with open(sys.argv[1]) as f:
    rows = [l for l in f if l.startswith('"')]
for r in csv.DictReader(rows):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    name = r["Kernel Name"][:90]
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "nsecond")
    tot[name] += v * (1e-3 if unit in ("nsecond", "ns") else 1.0)   # -> microseconds
    cnt[name] += 1
s = sum(tot.values())
print(f"total kernel time {s/1e3:.2f} ms over {sum(cnt.values())} kernels")
for k, v in sorted(tot.items(), key=lambda kv: -kv[1])[:25]:
    print(f"{v/1e3:9.3f} ms {100*v/s:5.1f}% {cnt[k]:6d} x {v/cnt[k]:8.2f} us  {k}")
