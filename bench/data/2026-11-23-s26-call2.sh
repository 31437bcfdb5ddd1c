#!/bin/sh
# session 26 call 2: clocks and power while the benchmarks run (nvidia-smi every 50 ms), a sustained bf16 GEMM
# through torch (the machine's sustained matrix rate), gate|up at M = 50432 under ncu without clock control
OUT=$1; B=build-carry; export LD_LIBRARY_PATH=$PWD/$B/N/lib; ck=/tmp/pi0-ckpt
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null
q="timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,clocks_event_reasons.sw_thermal_slowdown,clocks_event_reasons.hw_power_brake_slowdown"
smi() { nvidia-smi --query-gpu=$q --format=csv,noheader -lms 50 > $OUT/smi-$1.csv & echo $! > /tmp/smi.pid; }
stop() { kill $(cat /tmp/smi.pid); sleep 0.2; python3 - $OUT/smi-$1.csv $1 <<'PY'
import sys
rows=[l.split(", ") for l in open(sys.argv[1]) if l.strip()]
def num(s): 
    try: return float(s.split()[0])
    except: return None
clk=[num(r[1]) for r in rows if num(r[1])]; pw=[num(r[2]) for r in rows if num(r[2])]
busy=[ (c,p) for c,p in zip(clk,pw) if p and p>200]
pc=sum(1 for r in rows if len(r)>4 and "Active" in r[4]); hw=sum(1 for r in rows if len(r)>5 and "Active" in r[5])
import statistics as st
if busy: print(sys.argv[2], "samples %d, under load (>200 W) %d: clock median %.0f MHz (min %.0f), power median %.0f W (max %.0f); sw power cap active %d, hw slowdown %d" % (len(rows), len(busy), st.median([c for c,_ in busy]), min(c for c,_ in busy), st.median([p for _,p in busy]), max(p for _,p in busy), pc, hw))
else: print(sys.argv[2], "no samples under load", len(rows))
PY
}
for w in pi0-3cam-b64 pi0-3cam; do for v in gu1 gu2; do
  smi $v-$w; row=$($B/N/$v bench --backend cuda --checkpoint $ck/pi0 --workload $w 2>&1 | tail -1); stop $v-$w; echo "$v $w | $row"
done; done
smi torch; python3 - <<'PY' 2>&1 | tee $OUT/torch_gemm.txt
import torch, time
for n in (8192, 16384):
    a=torch.randn(n,n,device="cuda",dtype=torch.bfloat16); b=torch.randn(n,n,device="cuda",dtype=torch.bfloat16)
    for _ in range(3): c=a@b
    torch.cuda.synchronize()
    for rep in range(4):
        k = 200 if n == 8192 else 25
        t=time.time()
        for _ in range(k): c=a@b
        torch.cuda.synchronize(); dt=time.time()-t
        print("n=%d pass %d: %.0f TFLOP/s over %.2f s" % (n, rep, 2*n**3*k/dt/1e12, dt))
PY
stop torch
for m in 1 2; do
  PI0_CUDA_GATEUP=$m timeout 100 ncu --clock-control none --section SpeedOfLight --csv --kernel-name regex:gateup --launch-count 3 $B/N/gateup_lab once 50432 256 > $OUT/ncu-none-gu$m.csv 2>&1
  echo "ncu (no clock control) gu$m:"; grep -E "\"Duration|SM Frequency|Compute \(SM\)" $OUT/ncu-none-gu$m.csv | awk -F'","' '{print $(NF-2), $(NF-1), $NF}'
done
