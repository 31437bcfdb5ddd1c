#!/usr/bin/env python3
"""Serving benchmark: N robots, each a separate process with a fast websocket client, sending LIBERO / DROID / ALOHA
observations back to back to one pi0-server for a fixed time; reports requests/s, latency p50 / p90 / p99 over all
requests, the spread between robots, and the server's batch-size histogram (from its log). With --batch K each
robot sends openpi's batch request {"batch": [K observations]} instead (samples/s counts the elements).

  python3 bench/serve_bench.py --server build/pi0-server --server-args "--checkpoint DIR --tokenizer T --robot libero
      --max-batch 64 --batch-window-ms 5 --backend cuda" --robots 8 --seconds 20 [--robot libero|droid|aloha]
      [--batch K] [--image-size 224] [--csv FILE]

Needs numpy, msgpack and websockets (the server tests' venv has them: build/venv-server). The server is started
here on a free port and stopped (SIGTERM) at the end; its log is printed on failure. Observations carry images of
--image-size (224: no resize on the server) and random states; every robot's first request is not timed (it may pay
a graph capture). Prints one summary line per run, `serve_bench: ...`."""
import argparse
import multiprocessing as mp
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

import msgpack
import numpy as np
import websockets.sync.client


def pack_array(obj):   # openpi_client/msgpack_numpy.py's encoding
    if isinstance(obj, np.ndarray):
        return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": obj.shape}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    return obj


# Instructions of LIBERO's suites (different lengths): with --prompts K, robot i works on task i % K
TASKS = ["pick up the black bowl", "open the middle drawer of the cabinet", "put the bowl on the plate",
         "turn on the stove", "put the wine bottle on top of the cabinet",
         "pick up the alphabet soup and place it in the basket", "push the plate to the front of the stove",
         "put both the cream cheese box and the butter in the basket", "close the microwave",
         "put the black bowl in the bottom drawer of the cabinet and close it"]


def observation(robot, rng, size, prompt=None):
    img = lambda *s: rng.integers(0, 256, s, dtype=np.uint8)   # noqa: E731
    if robot == "libero":
        return {"observation/image": img(size, size, 3), "observation/wrist_image": img(size, size, 3),
                "observation/state": rng.standard_normal(8), "prompt": prompt or "pick up the black bowl"}
    if robot == "droid":
        return {"observation/exterior_image_1_left": img(size, size, 3), "observation/wrist_image_left": img(size, size, 3),
                "observation/joint_position": rng.standard_normal(7), "observation/gripper_position": rng.random(1),
                "prompt": prompt or "open the drawer"}
    return {"state": rng.standard_normal(14), "images": {k: img(3, size, size) for k in
                                                          ("cam_high", "cam_left_wrist", "cam_right_wrist")}}


def robot_main(idx, port, seconds, robot, batch, size, start, out, prompts=0):
    rng = np.random.default_rng(idx)
    obs = [observation(robot, rng, size, TASKS[idx % prompts] if prompts else None) for _ in range(4)]
    msgs = [msgpack.packb({"batch": [obs[(i + j) % 4] for j in range(batch)]} if batch else obs[i], default=pack_array)
            for i in range(4)]
    lat, sent, split, errors = [], [], [], 0
    with websockets.sync.client.connect(f"ws://127.0.0.1:{port}", compression=None, max_size=None) as ws:
        ws.recv()   # metadata
        ws.send(msgs[0])
        ws.recv()   # untimed: a first request may pay one-time costs
        start.wait()
        t_start = time.perf_counter()
        t_end, i = t_start + seconds, 0
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            ws.send(msgs[i % 4])
            reply = ws.recv()
            lat.append(time.perf_counter() - t0)
            sent.append(t0 - t_start)
            if not isinstance(reply, bytes):   # an error frame
                errors += 1
                break
            if not batch:   # the server's clocks, read after the timed round trip
                r = msgpack.unpackb(reply)
                split.append((r["server_timing"]["infer_ms"], r["policy_timing"]["infer_ms"]))
            i += 1
    out.put((idx, lat, errors, split, sent))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--server-args", required=True)
    ap.add_argument("--robots", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--robot", choices=("libero", "droid", "aloha"), default="libero")
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--prompts", type=int, default=0, choices=range(0, len(TASKS) + 1), metavar="K",
                    help="robot i sends LIBERO task i %% K's instruction (K different prompt lengths in a batch; "
                         "default: every robot the same one)")
    ap.add_argument("--settle-s", type=float, default=0,
                    help="also report the requests sent after the first S seconds (the fleet's start transient: every "
                         "robot sends at the same instant, and new batch sizes meet their first run)")
    ap.add_argument("--csv")
    a = ap.parse_args()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    srv = subprocess.Popen([a.server, "--host", "127.0.0.1", "--port", "0", *shlex.split(a.server_args)], stdout=log,
                           stderr=subprocess.STDOUT)
    port, deadline = None, time.time() + 600
    while port is None and time.time() < deadline and srv.poll() is None:
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", open(log.name).read())
        port = int(m.group(1)) if m else None
        time.sleep(0.05)
    if port is None:
        print(open(log.name).read()[-3000:])
        print("serve_bench: the server did not start")
        return 1
    start, out = mp.Event(), mp.Queue()
    procs = [mp.Process(target=robot_main, args=(i, port, a.seconds, a.robot, a.batch, a.image_size, start, out, a.prompts))
             for i in range(a.robots)]
    for p in procs:
        p.start()
    time.sleep(1.0 + 0.05 * a.robots)   # every robot connected and through its first request
    t0 = time.perf_counter()
    start.set()
    results = [out.get(timeout=a.seconds + 600) for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
    srv.send_signal(signal.SIGTERM)
    rc = srv.wait(60)
    text = open(log.name).read()
    lat = np.array([x for _, l, _, _, _ in results for x in l]) * 1e3
    errors = sum(e for _, _, e, _, _ in results)
    per = [len(l) / a.seconds for _, l, _, _, _ in results]
    split = [(x * 1e3, s, m) for _, l, _, sp, _ in results for x, (s, m) in zip(l, sp)]
    steady = np.array([x for _, l, _, _, st in results for x, t in zip(l, st) if t >= a.settle_s]) * 1e3
    hist = re.findall(r"batch sizes \(size:runs\):(.*)", text)
    n = len(lat) * max(a.batch, 1)
    p50, p90, p99 = (np.percentile(lat, q) for q in (50, 90, 99)) if len(lat) else (0, 0, 0)
    line = (f"serve_bench: {a.robots} robots ({a.robot}{f', batch requests of {a.batch}' if a.batch else ''}"
            f"{f', {a.prompts} prompts' if a.prompts else ''}), {wall:.1f} s: "
            f"{len(lat) / wall:.1f} requests/s, {n / wall:.1f} samples/s, p50 {p50:.1f} ms, p90 {p90:.1f} ms, "
            f"p99 {p99:.1f} ms, p99/p50 {p99 / max(p50, 1e-9):.2f}, per robot {min(per):.1f}-{max(per):.1f} req/s, "
            f"{errors} errors, server exit {rc}")
    print(line)
    print("serve_bench: batch sizes (size:runs):" + (hist[-1] if hist else " ?"))
    for w in re.findall(r"warm-up: every batch size .*", text):
        print("serve_bench: server " + w)
    if a.settle_s > 0 and len(steady):
        s50, s99 = np.percentile(steady, 50), np.percentile(steady, 99)
        print(f"serve_bench: sent after the first {a.settle_s:g} s: {len(steady)} requests, p50 {s50:.1f} ms, "
              f"p99 {s99:.1f} ms, p99/p50 {s99 / max(s50, 1e-9):.2f}")
    if split:   # where a request's time goes (medians): the model run, the server around it, the rest of the trip
        rtt, srv_ms, model = (np.median([t[k] for t in split]) for k in range(3))
        out_srv = np.median([t[0] - t[1] for t in split])
        in_srv = np.median([t[1] - t[2] for t in split])
        print(f"serve_bench: split (medians): round trip {rtt:.2f} ms = model run {model:.2f} + server around it "
              f"{in_srv:.2f} (server clock {srv_ms:.2f}) + outside the server's clock {out_srv:.2f} (transfer, decode, "
              f"client)")
    if a.csv:
        new = not os.path.exists(a.csv)
        with open(a.csv, "a") as f:
            if new:
                f.write("robots,robot,batch_request,seconds,requests_per_s,samples_per_s,p50_ms,p90_ms,p99_ms,errors\n")
            f.write(f"{a.robots},{a.robot},{a.batch},{wall:.2f},{len(lat) / wall:.2f},{n / wall:.2f},{p50:.2f},{p90:.2f},"
                    f"{p99:.2f},{errors}\n")
    if errors or rc != 0 or not len(lat):
        print(text[-3000:])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
