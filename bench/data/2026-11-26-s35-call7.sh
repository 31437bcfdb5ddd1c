#!/bin/sh
# device run (issue 47): 64 robots, one prompt, --warmup all with and without --warmup-prompt (the start transient)
cd "$(dirname "$0")/.."
D=devc; O=${OUT:-/tmp/out}
export LD_LIBRARY_PATH=$PWD/$D/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ck=/tmp/ck
$D/h/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 > /dev/null || exit 1
python3 -c "
import zipfile, glob
for w in glob.glob('$D/wheels/*.whl'): zipfile.ZipFile(w).extractall('/tmp/pylib')"
export PYTHONPATH=/tmp/pylib
run() { tag=$1; shift; echo "== 64 robots, one prompt, --warmup all $*"
  timeout 250 python3 bench/serve_bench.py --server $D/h/pi0-server --server-args "--checkpoint $ck/pi0 --tokenizer $D/tok.model --robot libero --backend cuda --max-batch 64 --batch-window-ms 5 --warmup all $*" --robots 64 --seconds 16 --settle-s 4 > $O/sb_$tag.txt 2>&1
  tail -6 $O/sb_$tag.txt; }
run prompt --warmup-prompt \"pick up the black bowl\"
run plain
