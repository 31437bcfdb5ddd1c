#!/bin/sh
# device run: where a single robot's round trip goes on the GPU (serve_bench's split), full-size pi0, LIBERO
cd "$(dirname "$0")/.."
D=devcarry
export LD_LIBRARY_PATH=$PWD/$D/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "
import zipfile, glob
for w in glob.glob('$D/wheels/*.whl'): zipfile.ZipFile(w).extractall('/tmp/pylib')"
export PYTHONPATH=/tmp/pylib
ck=/tmp/pi0ck
$D/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 > /dev/null || exit 1
$D/pi0 bench --backend cuda --checkpoint $ck/pi0 --workload pi0-libero --iters 100 2>&1 | grep -E "^pi0-libero"
for args in "--max-batch 1" "--max-batch 64 --batch-window-ms 5"; do
  echo "== $args"
  timeout 120 python3 bench/serve_bench.py --server $D/pi0-server --server-args "--checkpoint $ck/pi0 --tokenizer $D/tok.model --robot libero --backend cuda $args" --robots 1 --seconds 5 2>&1 | tail -3
done
