#!/bin/sh
# device run: Python binding overhead on the GPU (full-size pi0, random weights) and the CPU-side conversion
set -x
cd "$(dirname "$0")/.."
D=devcarry
export LD_LIBRARY_PATH=$PWD/$D/lib PI0_LIBRARY=$PWD/$D/libpi0.so PYTHONPATH=$PWD/python
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 --version
python3 -c "import zipfile, glob; zipfile.ZipFile(glob.glob('$D/wheels/numpy-*.whl')[0]).extractall('/tmp/pylib')"
export PYTHONPATH=$PYTHONPATH:/tmp/pylib
python3 -c "import numpy, pi0; print(numpy.__version__, pi0.backend_available('cuda'))" || exit 1
ck=/tmp/pi0ck
t0=$(date +%s)
$D/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 > /dev/null || exit 1
echo "gen $(( $(date +%s) - t0 )) s"
for r in libero aloha; do
  python3 bench/python_overhead.py --checkpoint $ck/pi0 --tokenizer $D/tok.model --robot $r \
      --backend cuda --iters 300 --json $OUT/overhead_$r.json 2>&1 | grep -v warning
done
# the CPU backend on the tiny model (LIBERO-shaped: its norm stats have 8 state values)
cp -r tests/fixtures/tiny-pi0 /tmp/tiny-pi0
for t in 1 8; do
  OMP_WAIT_POLICY=PASSIVE python3 bench/python_overhead.py --checkpoint /tmp/tiny-pi0 --tokenizer $D/tok.model --robot libero \
      --backend cpu --threads $t --iters 500 --json $OUT/overhead_cpu_t$t.json 2>&1 | grep -v warning
done
# the same binary's C path, for the -fPIC build (compare with bench/RESULTS.md's H100 pi0-3cam)
$D/pi0 bench --backend cuda --checkpoint $ck/pi0 --workload pi0-3cam --iters 200 2>&1 | grep -E "^pi0-3cam"
