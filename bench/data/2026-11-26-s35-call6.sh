#!/bin/sh
# device run (issue 47): batches of different prompts ordered by prefix length in pi0_policy_run (new) vs batch order (old)
cd "$(dirname "$0")/.."
D=devc; O=${OUT:-/tmp/out}
export LD_LIBRARY_PATH=$PWD/$D/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ck=/tmp/ck
$D/h/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 > /dev/null || exit 1
python3 -c "
import zipfile, glob
for w in glob.glob('$D/wheels/*.whl'): zipfile.ZipFile(w).extractall('/tmp/pylib')"
export PYTHONPATH=/tmp/pylib:$PWD/python
for v in old h; do
PI0_LIBRARY=$PWD/$D/$v/libpi0.so python3 - <<PY
import time, numpy as np, pi0, importlib.util, os
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
        print(f"$v engine ({tag}, LIBERO, horizon {p.info['action_horizon']}) B={B}: median {np.median(ts)*1e3:.1f} ms, {B/np.median(ts):.1f} samples/s")
PY
done
run() { v=$1; n=$2; k=$3; s=$4; st=$5; echo "== $v: $n robots, --prompts $k, --warmup all, settle $st s"
  PI0_LIBRARY= timeout 200 python3 bench/serve_bench.py --server $D/$v/pi0-server --server-args "--checkpoint $ck/pi0 --tokenizer $D/tok.model --robot libero --backend cuda --max-batch 64 --batch-window-ms 5 --warmup all" --robots $n --seconds $s --settle-s $st --prompts $k > $O/sb_${v}_${n}_$k.txt 2>&1
  tail -6 $O/sb_${v}_${n}_$k.txt; }
run h 64 10 16 4
run h 8 8 8 2
run old 8 8 8 2
