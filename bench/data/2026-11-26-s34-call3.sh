#!/bin/sh
# device run: fleet serving after the early window end (issue 47): engine B=64 throughput on the same observations
# (Python binding, horizon 50), then serve_bench 1 / 8 / 64 robots at --max-batch 64 --batch-window-ms 5
cd "$(dirname "$0")/.."
D=devcarry
export LD_LIBRARY_PATH=$PWD/$D/lib PI0_LIBRARY=$PWD/$D/libpi0.so
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "
import zipfile, glob
for w in glob.glob('$D/wheels/*.whl'): zipfile.ZipFile(w).extractall('/tmp/pylib')"
export PYTHONPATH=/tmp/pylib:$PWD/python
ck=/tmp/pi0ck
$D/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 > /dev/null || exit 1
python3 - <<PY
import time, numpy as np, pi0
p = pi0.Policy("$ck/pi0", robot="libero", tokenizer="$D/tok.model", backend="cuda", max_batch=64, quiet=True)
rng = np.random.default_rng(0)
img = lambda: rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)
obs = [{"observation/image": img(), "observation/wrist_image": img(), "observation/state": rng.standard_normal(8),
        "prompt": "pick up the black bowl"} for _ in range(64)]
for B in (64, 8, 1):
    p.infer_batch(obs[:B]); p.infer_batch(obs[:B])
    ts = []
    for _ in range(5 if B == 64 else 20):
        t0 = time.perf_counter(); p.infer_batch(obs[:B]); ts.append(time.perf_counter() - t0)
    print(f"engine (pi0.Policy.infer_batch, LIBERO, horizon {p.info['action_horizon']}) B={B}: median {np.median(ts)*1e3:.1f} ms, {B/np.median(ts):.1f} samples/s")
PY
for n in 1 8 64; do
  s=5; [ $n = 64 ] && s=12
  echo "== $n robots"
  timeout 150 python3 bench/serve_bench.py --server $D/pi0-server --server-args "--checkpoint $ck/pi0 --tokenizer $D/tok.model --robot libero --backend cuda --max-batch 64 --batch-window-ms 5" --robots $n --seconds $s 2>&1 | tail -3
done
