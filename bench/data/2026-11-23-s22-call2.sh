#!/bin/sh
# session 22 call 2: the reverted build (9ab82e9 = 71e87c0's sources): device_run.sh (test_cuda --full, every
# workload graphed / un-graphed), then an in-graph kernel timeline of pi0-3cam with nsys when the machine has it
OUT=$1; B=build-carry; export LD_LIBRARY_PATH=$PWD/$B/lib; ck=/tmp/pi0-ckpt
BUILD=$B/s22 sh bench/device_run.sh $OUT 2>&1 | tail -30
which nsys ncu; ls /usr/local/cuda/bin | grep -i nsys; ls -d /opt/nvidia/nsight* /usr/local/cuda/nsight* 2>/dev/null
NSYS=$(which nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$NSYS" ]; then
  timeout 200 $NSYS profile --cuda-graph-trace=node -o $OUT/p3cam -f true $B/s22/pi0 bench --backend cuda --checkpoint $ck/pi0 \
    --workload pi0-3cam --warmup 3 --iters 5 > $OUT/nsys.log 2>&1; echo "nsys rc=$?"
  timeout 120 $NSYS export --type sqlite -o $OUT/p3cam.sqlite $OUT/p3cam.nsys-rep > /dev/null 2>&1
  python3 - $OUT/p3cam.sqlite > $OUT/graph_kernels.txt <<'PY'
import sqlite3, sys, collections
db = sqlite3.connect(sys.argv[1])
names = dict(db.execute("select id, value from StringIds"))
rows = db.execute("select start, end, demangledName, shortName from CUPTI_ACTIVITY_KIND_KERNEL order by start").fetchall()
print("kernels", len(rows))
# the last inference: from the last im2col_kernel on
last = max(i for i, r in enumerate(rows) if 'im2col' in names.get(r[3], ''))
inf = rows[last:]
print("last inference: %d kernels, %.3f ms from first start to last end" % (len(inf), (inf[-1][1] - inf[0][0]) / 1e6))
for i, (s, e, dn, sn) in enumerate(inf):
    gap = (s - inf[i - 1][1]) / 1e3 if i else 0
    print("%5d %9.2f %7.2f %6.2f  %s" % (i, (s - inf[0][0]) / 1e3, (e - s) / 1e3, gap, names.get(dn, '?')[:100]))
PY
  head -3 $OUT/graph_kernels.txt; rm -f $OUT/p3cam.sqlite
fi
