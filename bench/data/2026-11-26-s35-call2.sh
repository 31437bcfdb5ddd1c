#!/bin/sh
# device run: speed of the three paths (issue 42), then fleet serving with --warmup all (issue 47)
cd "$(dirname "$0")/.."
D=devc; O=${OUT:-/tmp/out}
export LD_LIBRARY_PATH=$PWD/$D/lib PI0_LIBRARY=$PWD/$D/h/libpi0.so
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
ck=/tmp/ck
[ -f $ck/pi0/model.safetensors ] || $D/h/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 > /dev/null || exit 1
[ -f $ck/pi05/model.safetensors ] || $D/h/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 > /dev/null || exit 1
b() { c=$ck/pi0; case "$*" in *pi05*) c=$ck/pi05;; esac; timeout 120 "$@" --backend cuda --checkpoint $c --csv $O/bench.csv 2>>$O/bench.err | grep -E "^pi0|device memory"; }
for w in pi0-3cam pi05-3cam pi0-3cam-b8 pi0-3cam-b64; do
  b $D/h/pi0 bench --workload $w | sed 's/^/hopper:        /'
  PI0_CUDA_PATH=portable b $D/h/pi0 bench --workload $w | sed 's/^/portable-90a:  /'
  b $D/p80/pi0 bench --workload $w | sed 's/^/portable-ptx80: /'
done
python3 -c "
import zipfile, glob
for w in glob.glob('$D/wheels/*.whl'): zipfile.ZipFile(w).extractall('/tmp/pylib')"
export PYTHONPATH=/tmp/pylib:$PWD/python
python3 - <<PY
import time, numpy as np, pi0
p = pi0.Policy("$ck/pi0", robot="libero", tokenizer="$D/tok.model", backend="cuda", max_batch=64, quiet=True)
rng = np.random.default_rng(0)
img = lambda: rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)
obs = [{"observation/image": img(), "observation/wrist_image": img(), "observation/state": rng.standard_normal(8),
        "prompt": "pick up the black bowl"} for _ in range(64)]
for B in (64, 8):
    p.infer_batch(obs[:B]); p.infer_batch(obs[:B])
    ts = []
    for _ in range(5 if B == 64 else 20):
        t0 = time.perf_counter(); p.infer_batch(obs[:B]); ts.append(time.perf_counter() - t0)
    print(f"engine (pi0.Policy.infer_batch, LIBERO, horizon {p.info['action_horizon']}) B={B}: median {np.median(ts)*1e3:.1f} ms, {B/np.median(ts):.1f} samples/s")
PY
for n in 64 8; do
  s=8; st=2; [ $n = 64 ] && s=16 && st=4
  echo "== $n robots, --warmup all, settle $st s"
  timeout 200 python3 bench/serve_bench.py --server $D/h/pi0-server --server-args "--checkpoint $ck/pi0 --tokenizer $D/tok.model --robot libero --backend cuda --max-batch 64 --batch-window-ms 5 --warmup all" --robots $n --seconds $s --settle-s $st > $O/sb_$n.txt 2>&1
  tail -8 $O/sb_$n.txt
done
