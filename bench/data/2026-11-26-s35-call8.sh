#!/bin/sh
# device run (issue 47): 8 robots, 1 robot and 8 clients sending batch requests of 8, --warmup all --warmup-prompt
cd "$(dirname "$0")/.."
D=devc; O=${OUT:-/tmp/out}
export LD_LIBRARY_PATH=$PWD/$D/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ck=/tmp/ck
[ -f $ck/pi0/model.safetensors ] || $D/h/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 > /dev/null || exit 1
python3 -c "
import zipfile, glob
for w in glob.glob('$D/wheels/*.whl'): zipfile.ZipFile(w).extractall('/tmp/pylib')"
export PYTHONPATH=/tmp/pylib
run() { tag=$1; shift; echo "== $tag: $*"
  timeout 200 python3 bench/serve_bench.py --server $D/h/pi0-server --server-args "--checkpoint $ck/pi0 --tokenizer $D/tok.model --robot libero --backend cuda --max-batch 64 --batch-window-ms 5 --warmup all --warmup-prompt \"pick up the black bowl\"" --settle-s 2 "$@" > $O/sb_$tag.txt 2>&1
  tail -6 $O/sb_$tag.txt; }
run r8 --robots 8 --seconds 10
run r1 --robots 1 --seconds 6
run b8 --robots 8 --batch 8 --seconds 12
