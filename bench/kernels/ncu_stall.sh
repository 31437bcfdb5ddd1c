# ncu stall reasons per issued instruction of 8 few-row products (gemv.cu) of one pi0-3cam inference, no cache
# flush, serialised. Usage (device machine): sh bench/kernels/ncu_stall.sh OUT [BIN]   (BUILD = the folder of BIN;
# the checkpoint: BIN gen-checkpoint --variant pi0 --seed 1 /tmp/pi0-ckpt/pi0)
B=${BUILD:-build}; out=$1; bin=${2:-pi0}
ncu --clock-control none --cache-control none --kernel-name regex:gemv_kernel --launch-skip 300 --launch-count 8 --csv \
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,gpu__time_duration.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg" \
  $B/$bin bench --backend cuda --checkpoint /tmp/pi0-ckpt/pi0 --workload pi0-3cam --no-graph --warmup 0 --iters 1 > $out/ncu_$bin.csv 2>/dev/null
python3 - $out/ncu_$bin.csv <<'PY'
import csv, sys, collections
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
agg = collections.OrderedDict()
for r in csv.DictReader(rows):
    k = (r["ID"], r["Kernel Name"][:24], r["Grid Size"])
    agg.setdefault(k, {})[r["Metric Name"].replace("smsp__average_warps_issue_stalled_","").replace("_per_issue_active.ratio","")] = float(r["Metric Value"].replace(",",""))
for k, m in agg.items():
    top = sorted(((v, n) for n, v in m.items() if "__" not in n and n != "smsp"), reverse=True)[:7]
    print(k[0], k[1], k[2], "t=%.2fus inst=%d" % (m.get("gpu__time_duration.sum", 0) / 1e3, m.get("smsp__inst_executed.sum", 0)), " ".join("%s=%.2f" % (n, v) for v, n in top))
PY
