# device_lib.sh — what every archived device script (bench/data/*-callN.sh, run on the GPU machine from the repo root
# with the stripped binaries in devc/h, the runtime libraries in devc/lib and the labs in devc/lab) starts with.
# Source it: `. bench/device_lib.sh`. (The scripts of sessions 36-37 were rewritten to source it; what they ran is
# unchanged, the GPU line and the lines of results they print may differ slightly.) Sets D (devc) and O ($OUT), the library path; prints the GPU.
#   ckpts           full-size random π0 and π0.5 checkpoints in $ck (made once per machine)
#   t NAME CMD ...  runs CMD (timeout $TO, default 300 s) into $O/NAME.log, prints its exit code, time and the last
#                   $TL (default 10) lines that report results
#   tests_both      the op tests on the Hopper and the portable path, the tiny end-to-end checks on the portable one
#                   and the full-size ones on the Hopper path (needs ckpts)
#   b CKPT ARGS ... one `pi0 bench` on the CUDA backend of checkpoint $ck/CKPT, its result line
D=devc; O=${OUT:-/tmp/out}
export LD_LIBRARY_PATH=$PWD/$D/lib
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
ck=/tmp/ck
ckpts() {
  [ -f $ck/pi0/model.safetensors ] || $D/h/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 > /dev/null || exit 1
  [ -f $ck/pi05/model.safetensors ] || $D/h/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 > /dev/null || exit 1
}
t() { n=$1; shift; s=$(date +%s); timeout ${TO:-300} "$@" > $O/$n.log 2>&1; echo "$n exit $? ($(( $(date +%s) - s )) s)"
      grep -E "FAIL|worst|rtc exact|passed|failed" $O/$n.log | tail -${TL:-10}; }
b() { ckp=$1; shift; timeout 150 $D/h/pi0 bench --backend cuda --checkpoint $ck/$ckp "$@" 2>>$O/bench.err | grep -E "^(pi0|pi05|workload)" | tail -1; }
tests_both() {
  t ops_hopper $D/h/test_cuda_ops
  PI0_CUDA_PATH=portable t ops_portable $D/h/test_cuda_ops
  PI0_CUDA_PATH=portable t e2e_portable $D/h/test_cuda_e2e
  t e2e_hopper $D/h/test_cuda_e2e --full $ck/pi0 $ck/pi05
}
