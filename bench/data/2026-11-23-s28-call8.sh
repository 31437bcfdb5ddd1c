#!/bin/sh
# session 28 call 8: pi0-server on the GPU warms up (batch 1 and --max-batch 4) before it listens; the log's times
OUT=$1; B=build-carry; ck=/tmp/pi0-ckpt
export LD_LIBRARY_PATH=$PWD/$B/N/lib
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
$B/N/pi0 gen-checkpoint --variant pi0 --seed 1 $ck/pi0 >/dev/null; $B/N/pi0 gen-checkpoint --variant pi05 --seed 2 $ck/pi05 >/dev/null
for c in "pi0 1" "pi0 4" "pi05 1"; do
  set -- $c
  $B/N/pi0-server --checkpoint $ck/$1 --tokenizer $B/N/tok.model --robot libero --asset-id random --backend cuda \
    --host 127.0.0.1 --port 0 --max-batch $2 > $OUT/server-$1-$2.log 2>&1 &
  pid=$!
  for i in $(seq 120); do grep -q "listening on" $OUT/server-$1-$2.log && break; sleep 0.5; done
  kill -TERM $pid; wait $pid; echo "== $1 max-batch $2 (exit $?)"; cat $OUT/server-$1-$2.log
done
