#!/bin/sh
# device run: pi0 info's device footprint (issue 42) on both paths; fleets with different prompts (issue 47)
cd "$(dirname "$0")/.."
D=devc; O=${OUT:-/tmp/out}
export LD_LIBRARY_PATH=$PWD/$D/lib PI0_LIBRARY=$PWD/$D/h/libpi0.so
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
ck=/tmp/ck
$D/h/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 > /dev/null && $D/h/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 > /dev/null || exit 1
for v in pi0 pi05; do for p in hopper portable; do for b in 1 64; do
  echo "== info $v $p max-batch $b"; PI0_CUDA_PATH=$p $D/h/pi0 info --checkpoint $ck/$v --backend cuda --max-batch $b 2>&1 | grep -E "device memory|error"
done; done; done
python3 -c "
import zipfile, glob
for w in glob.glob('$D/wheels/*.whl'): zipfile.ZipFile(w).extractall('/tmp/pylib')"
export PYTHONPATH=/tmp/pylib:$PWD/python
python3 - <<PY
import time, numpy as np, pi0
import importlib.util, sys
spec = importlib.util.spec_from_file_location("sb", "bench/serve_bench.py"); sb = importlib.util.module_from_spec(spec); spec.loader.exec_module(sb)
p = pi0.Policy("$ck/pi0", robot="libero", tokenizer="$D/tok.model", backend="cuda", max_batch=64, quiet=True)
rng = np.random.default_rng(0)
for tag, prompts in (("1 prompt", 0), ("10 prompts", 10)):
    obs = [sb.observation("libero", rng, 224, sb.TASKS[i % prompts] if prompts else None) for i in range(64)]
    for B in (64, 8):
        p.infer_batch(obs[:B]); p.infer_batch(obs[:B])
        ts = []
        for _ in range(5 if B == 64 else 20):
            t0 = time.perf_counter(); p.infer_batch(obs[:B]); ts.append(time.perf_counter() - t0)
        print(f"engine ({tag}, pi0.Policy.infer_batch, LIBERO, horizon {p.info['action_horizon']}) B={B}: median {np.median(ts)*1e3:.1f} ms, {B/np.median(ts):.1f} samples/s")
PY
run() { n=$1; k=$2; s=$3; st=$4; echo "== $n robots, --prompts $k, --warmup all, settle $st s"
  timeout 200 python3 bench/serve_bench.py --server $D/h/pi0-server --server-args "--checkpoint $ck/pi0 --tokenizer $D/tok.model --robot libero --backend cuda --max-batch 64 --batch-window-ms 5 --warmup all" --robots $n --seconds $s --settle-s $st --prompts $k > $O/sb_${n}_$k.txt 2>&1
  cat $O/sb_${n}_$k.txt | tail -6; }
run 64 10 16 4
run 8 8 8 2
run 8 0 8 2
