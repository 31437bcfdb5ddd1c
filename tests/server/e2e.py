"""pi0-server end to end, with the real client: openpi-client from PyPI (run by the virtualenv's python,
see tests/server/run.sh) against build/pi0-server on loopback, tiny checkpoints, a tiny trained tokenizer.

  robots    LIBERO (tiny-pi0, --robot libero), DROID (tiny-pi05, --config pi05_droid, bytes prompt),
            ALOHA (tiny-pi0, --config pi0_aloha_towel: nested CHW cameras, no prompt, reset_pose metadata):
            the reply equals `pi0 run --json` on the same observation and noise, bit for bit; reply keys,
            dtypes, policy_timing / server_timing (prev_total_ms absent in the first reply only)
  π0-FAST   --config pi0_fast_droid on a tiny model built to write chosen tokens: replies equal `pi0 run`, decoded
            chunks and openpi's zero fallback, alone and batched; noise / rtc refused; /metrics model and zero count
  live      /healthz 200 and a websocket ping answered while a batch of inferences runs
  load      8 clients x 50 requests, batching off (--max-batch 1) and on (--max-batch 8): every reply
            equals the expected chunk of its own request (16 observation/noise variants); requests/s, p50/p99
  faults    text frame, garbage, truncated msgpack, wrong keys / dtypes / shapes, absurd shape, oversized
            message, hanging up mid-frame and mid-request, wrong or missing API key: the client gets an error
            (or a 401), and another client stays served throughout
  haproxy   server/haproxy.cfg on loopback in front of two servers: health checks, connections spread over
            both, a server stopped (SIGTERM, clean exit) and the other takes the new robots
  shutdown  every server exits 0 on SIGTERM (in the sanitizer build: no leak reports)

Usage: VENV_PYTHON tests/server/e2e.py BUILD_DIR.  Prints one line per check and
`server_e2e: N passed, M failed`; exit status 1 on any failure."""
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np
import websockets.sync.client
from openpi_client import msgpack_numpy
from openpi_client import websocket_client_policy as wcp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
SERVER, PI0 = os.path.join(BUILD, "pi0-server"), os.path.join(BUILD, "pi0")
H, A = 5, 32  # tiny checkpoints: horizon 5, model action dim 32
ENV = dict(os.environ)
# pi0 run yields its cores when idle, so it does not fight the servers' worker threads; the servers keep
# OpenMP's default (active) waiting: PASSIVE halves their throughput here (100 -> 44 requests/s at batch 1)
RUN_ENV = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
passed = failed = 0


def check(name, ok, detail="", on_fail=""):
    """One line per check; on_fail (a log tail) is printed only when the check fails."""
    global passed, failed
    passed += bool(ok)
    failed += not ok
    detail = detail or ("" if ok else on_fail)
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    return ok


# ---- setup ------------------------------------------------------------------------------------------

def norm_stats(rng, ns, na):
    def block(n):
        mean, std = rng.standard_normal(n) * 0.5, np.abs(rng.standard_normal(n) * 0.3 + 0.5) + 0.05
        return {"mean": mean.tolist(), "std": std.tolist(), "q01": (mean - 2 * std).tolist(), "q99": (mean + 2 * std).tolist()}
    return {"norm_stats": {"state": block(ns), "actions": block(na)}}


def checkpoint(tmp, name, src, asset, ns, na, rng):
    d = os.path.join(tmp, name)
    os.makedirs(os.path.join(d, "assets", asset))
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(ROOT, "tests", "fixtures", src, f), d)
    with open(os.path.join(d, "assets", asset, "norm_stats.json"), "w") as f:
        json.dump(norm_stats(rng, ns, na), f)
    return d


def write_safetensors(path, tensors):
    names = {np.uint8: "U8", np.float32: "F32", np.float64: "F64", np.int32: "I32", np.int64: "I64", np.bool_: "BOOL"}
    header, blobs, off = {}, [], 0
    for k, a in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[k] = {"dtype": names[a.dtype.type], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


class Server:
    """pi0-server on 127.0.0.1 and a kernel-chosen port; its log goes to TMP/NAME.log."""

    def __init__(self, tmp, name, args):
        self.name, self.logpath = name, os.path.join(tmp, name + ".log")
        self.log = open(self.logpath, "w")
        self.p = subprocess.Popen([SERVER, "--host", "127.0.0.1", "--port", "0", *args], stdout=self.log,
                                  stderr=subprocess.STDOUT, env=ENV)
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline and self.p.poll() is None and self.port is None:
            for line in open(self.logpath):
                if "listening on 127.0.0.1:" in line:
                    self.port = int(line.rsplit(":", 1)[1])
            time.sleep(0.05)
        if self.port is None:
            raise RuntimeError(f"{name} did not start:\n{self.text()}")

    def text(self):
        with open(self.logpath) as f:
            return f.read()

    def stop(self):
        """SIGTERM; returns the exit status (0 = graceful, and in the sanitizer build: no leaks)."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()
        return self.p.returncode


def client(port, api_key=None):
    return wcp.WebsocketClientPolicy("127.0.0.1", port, api_key=api_key)


def pi0_run(args, obs, noise, tmp, tag):
    """`pi0 run --json` on the arrays of obs (the prompt goes to --prompt) and noise (None: none); returns the
    actions."""
    arrays, prompt = {}, None
    for k, v in obs.items():
        if k in ("prompt", "task"):   # LeRobot's batches carry the prompt as "task"
            prompt = v.decode() if isinstance(v, bytes) else v
        elif isinstance(v, dict):
            arrays.update({f"{k}/{kk}": vv for kk, vv in v.items()})
        else:
            arrays[k] = np.asarray(v)
    write_safetensors(os.path.join(tmp, tag + ".obs.safetensors"), arrays)
    cmd = [PI0, "run", *args, "--obs", os.path.join(tmp, tag + ".obs.safetensors"), "--json"]
    if noise is not None:
        write_safetensors(os.path.join(tmp, tag + ".noise.safetensors"), {"noise": noise})
        cmd += ["--noise", os.path.join(tmp, tag + ".noise.safetensors")]
    cmd += ["--prompt", prompt] if prompt is not None else []
    r = subprocess.run(cmd, capture_output=True, text=True, env=RUN_ENV, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"pi0 run failed: {r.stderr}")
    return np.array(json.loads(r.stdout)["actions"], dtype=np.float64)


def images(rng, shape, keys):
    return {k: rng.integers(0, 256, shape, dtype=np.uint8) for k in keys}


def libero_obs(rng):
    o = images(rng, (224, 224, 3), ("observation/image", "observation/wrist_image"))
    o.update({"observation/state": rng.standard_normal(8), "prompt": "pick up the red block"})
    return o


def droid_obs(rng):
    o = images(rng, (224, 224, 3), ("observation/exterior_image_1_left", "observation/wrist_image_left"))
    o.update({"observation/joint_position": rng.standard_normal(7), "observation/gripper_position": rng.random(1),
              "prompt": b"open the top drawer"})  # bytes: decoded as UTF-8, as openpi's DROID policy does
    return o


def lerobot_obs(rng):
    """LeRobot's keys: a camera as uint8 HWC of another size (resized by the policy), one camera left out (a -1
    image), the state float32, the prompt as "task" """
    return {"observation.images.base_0_rgb": rng.integers(0, 256, (60, 80, 3), dtype=np.uint8),
            "observation.images.left_wrist_0_rgb": rng.integers(0, 256, (56, 56, 3), dtype=np.uint8),
            "observation.state": rng.standard_normal(8).astype(np.float32), "task": "pick up the cup"}


def aloha_obs(rng):
    return {"state": rng.standard_normal(14),
            "images": images(rng, (3, 224, 224), ("cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist"))}


# ---- the checks -------------------------------------------------------------------------------------

def test_robots(tmp, robots):
    for name, (args, make_obs, dim, meta) in robots.items():
        rng = np.random.default_rng(len(name))
        srv = Server(tmp, "robot-" + name, args)
        try:
            c = client(srv.port)
            check(f"{name}: metadata", c.get_server_metadata() == meta, str(c.get_server_metadata()))
            obs, noise = make_obs(rng), rng.standard_normal((H, A)).astype(np.float32)
            r1 = c.infer({**obs, "noise": noise})
            r2 = c.infer({**obs, "noise": noise})
            want = pi0_run(args, obs, noise, tmp, name)
            a = r1["actions"]
            check(f"{name}: actions [{H}, {dim}] float64", a.shape == (H, dim) and a.dtype == np.float64, f"{a.shape} {a.dtype}")
            diff = float(np.abs(a - want).max()) if a.shape == want.shape else float("inf")
            check(f"{name}: equal to pi0 run on the same observation and noise", np.array_equal(a, want)
                  and np.array_equal(r2["actions"], want), f"max |diff| {diff:.3g}")
            keys_ok = set(r1) == {"actions", "policy_timing", "server_timing"} and set(r1["policy_timing"]) == {"infer_ms"}
            check(f"{name}: timings (prev_total_ms from the 2nd reply on)", keys_ok and set(r1["server_timing"]) == {"infer_ms"}
                  and set(r2["server_timing"]) == {"infer_ms", "prev_total_ms"}
                  and r2["server_timing"]["infer_ms"] >= r2["policy_timing"]["infer_ms"] > 0,
                  f"{r1['policy_timing']} {r2['server_timing']}")
            c._ws.close()
        finally:
            check(f"{name}: SIGTERM -> exit 0", srv.stop() == 0, on_fail=srv.text()[-1500:])


def test_live(tmp, libero_args):
    """A batch of 8 inferences at 100 steps runs while /healthz and a ping on an idle connection are
    probed in a loop: the probes that fall inside the batch's run (its model time, ending before the
    first reply arrived) must be answered, each within 100 ms."""
    bad = subprocess.run([SERVER, "--port", "0", "--warmup", "0", "--warmup-prompt", "x"] + libero_args,
                         capture_output=True, text=True, timeout=60, env=ENV)
    check("--warmup-prompt with --warmup 0 refused (exit 2)", bad.returncode == 2 and "--warmup-prompt" in bad.stderr,
          bad.stderr[-300:])
    long = " ".join(["pick"] * 40)   # more tokens than the tiny model's prompt length: the tokenizer says so
    srv = Server(tmp, "live", libero_args + ["--steps", "100", "--max-batch", "8", "--batch-window-ms", "100", "--warmup", "1",
                                             "--warmup-prompt", "pick up the bowl", "--warmup-prompt", "go",
                                             "--warmup-prompt", long])
    log = srv.text()
    check("live: warm-up of batches 1 and 8 with each --warmup-prompt before listening",
          all(f'warm-up: batch {b} with "{t}" in' in log for b in (1, 8) for t in ("pick up the bowl", "go", long))
          and log.index(f'warm-up: batch 8 with "{long}"') < log.index("listening on"), log[-600:])
    check("live: the warm-up's prompt reaches the tokenizer (a long one is truncated, with openpi's warning)",
          "exceeds max_token_len" in log and log.index("exceeds max_token_len") < log.index("listening on"), log[-600:])
    try:
        rng = np.random.default_rng(5)
        clients = [client(srv.port) for _ in range(9)]
        obs = libero_obs(rng)
        replies, probes, stop = [], [], threading.Event()

        def infer(c):
            r = c.infer(obs)
            replies.append((time.perf_counter(), r["policy_timing"]["infer_ms"], r["actions"].shape))

        def probe():
            while not stop.is_set():
                t0 = time.perf_counter()
                ok = urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/healthz", timeout=10).status == 200
                t1 = time.perf_counter()
                ok &= clients[8]._ws.ping().wait(10)
                probes.append((t0, t1, time.perf_counter(), ok))
                time.sleep(0.005)

        threads = [threading.Thread(target=infer, args=(c,)) for c in clients[:8]]
        prober = threading.Thread(target=probe)
        prober.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        prober.join()
        first = min(r[0] for r in replies)
        model_s = replies[0][1] / 1e3
        inside = [p for p in probes if p[0] >= first - model_s and p[2] <= first]
        worst_h = max((p[1] - p[0] for p in inside), default=0) * 1e3
        worst_p = max((p[2] - p[1] for p in inside), default=0) * 1e3
        check("healthz 200 and pong while 8 batched inferences run",
              len(inside) >= 2 and all(p[3] for p in inside) and worst_h < 100 and worst_p < 100,
              f"{len(inside)} probes inside the {model_s * 1e3:.0f} ms run, slowest healthz {worst_h:.1f} ms, "
              f"pong {worst_p:.1f} ms")
        check("the 8 batched requests answered", sorted(r[2] for r in replies) == [(H, 7)] * 8)
        for c in clients:
            c._ws.close()
    finally:
        check("live server: SIGTERM -> exit 0", srv.stop() == 0, on_fail=srv.text()[-1500:])


def test_window(tmp, libero_args):
    """The batch window ends as soon as no connection could add a request: one robot alone, or every connected robot
    with its request in, runs at once; while another connection is idle, the window runs in full. The window here is
    1.5 s (the tiny model runs in milliseconds), so the bounds cannot be met by chance on a slow machine."""
    srv = Server(tmp, "window", libero_args + ["--max-batch", "8", "--batch-window-ms", "1500", "--max-wait-ms", "0",
                                               "--warmup", "all"])
    log = srv.text()
    check("window: --warmup all ran every batch size 1..8 before listening",
          all(f"warm-up: batch {b} in" in log for b in range(1, 9)) and "every batch size 1..8 in" in log
          and log.index("every batch size") < log.index("listening on"), log[-600:])
    try:
        rng = np.random.default_rng(9)
        obs = libero_obs(rng)
        a = client(srv.port)
        a.infer(obs)   # untimed: one-time costs
        t = []
        for _ in range(3):
            t0 = time.perf_counter()
            a.infer(obs)
            t.append(time.perf_counter() - t0)
        check("window: a single robot's requests run at once (window 1500 ms)", max(t) < 0.75,
              f"round trips {[round(x * 1e3) for x in t]} ms")
        b = client(srv.port)   # connected and idle: it could send, so the window runs
        t0 = time.perf_counter()
        a.infer(obs)
        t_idle = time.perf_counter() - t0
        check("window: with another connection idle the window runs in full", t_idle >= 1.45,
              f"round trip {t_idle * 1e3:.0f} ms")
        done = []

        def infer(c):
            t0 = time.perf_counter()
            c.infer(obs)
            done.append(time.perf_counter() - t0)
        ts = [threading.Thread(target=infer, args=(c,)) for c in (a, b)]
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        check("window: both connected robots' requests in -> they run without waiting out the window",
              len(done) == 2 and max(done) < 0.75, f"round trips {[round(x * 1e3) for x in done]} ms")
        a._ws.close()
        b._ws.close()
    finally:
        rc = srv.stop()
    hist = [l for l in srv.text().splitlines() if "batch sizes" in l]
    check("window: server exit 0, the two concurrent requests ran as one batch of 2",
          rc == 0 and bool(hist) and " 2:1" in hist[-1], hist[-1] if hist else srv.text()[-800:])


def test_fast(tmp, args):
    """π0-FAST (fast_policy_fixture.droid_policy: a tiny model built to write chosen tokens): openpi's metadata ({}) and
    reply keys; each reply equals `pi0 run` on the same observation bit for bit, the decoded chunk and openpi's zero
    fallback alike, also as one batch of both; noise and "rtc" are refused with the reason; GET /metrics names the
    model and counts the zero chunks; the log names π0-FAST and warns once."""
    import fast_policy_fixture as F   # (tests/, on the path from main)
    rng = np.random.default_rng(23)
    obs = {**images(rng, (224, 224, 3), ("observation/exterior_image_1_left", "observation/wrist_image_left")),
           "observation/joint_position": rng.standard_normal(7), "observation/gripper_position": rng.random(1)}
    short, cut = {**obs, "prompt": F.SHORT}, {**obs, "prompt": F.LONG}
    want_s, want_c = pi0_run(args, short, None, tmp, "fast-s"), pi0_run(args, cut, None, tmp, "fast-c")
    srv = Server(tmp, "fast", args + ["--max-batch", "2", "--batch-window-ms", "200"])
    try:
        c = client(srv.port)
        check("fast: metadata {} (openpi's pi0_fast_droid sends none)", c.get_server_metadata() == {},
              str(c.get_server_metadata()))
        r = c.infer(short)
        check("fast: reply keys and [10, 8] float64 actions, as openpi's", set(r) == {"actions", "policy_timing",
              "server_timing"} and r["actions"].shape == (10, 8) and r["actions"].dtype == np.float64, str(set(r)))
        check("fast: a decoded chunk equals pi0 run (bit for bit)", np.array_equal(r["actions"], want_s)
              and np.abs(want_s).max() > 0.1, f"max |diff| {np.abs(r['actions'] - want_s).max():.3g}")
        check("fast: openpi's zero chunk equals pi0 run", np.array_equal(c.infer(cut)["actions"], want_c))
        d, out = client(srv.port), {}

        def other():
            out["d"] = d.infer(cut)["actions"]
        th = threading.Thread(target=other)
        th.start()
        out["c"] = c.infer(short)["actions"]
        th.join()
        check("fast: the two in one batch, each equal to pi0 run", np.array_equal(out["c"], want_s) and
              np.array_equal(out["d"], want_c))
        for label, extra, want in (("noise", {"noise": np.zeros((10, 8), np.float32)}, "takes no noise"),
                                   ("rtc", {"rtc": {"prev_chunk": np.zeros((2, 8), np.float32)}}, "real-time chunking")):
            e = client(srv.port)
            try:
                e.infer({**short, **extra})
                check(f"fast: {label} refused", False, "answered")
            except Exception as ex_:  # noqa: BLE001 - the client raises with the server's reason
                check(f"fast: {label} refused", want in str(ex_), str(ex_)[:200])
        text = urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/metrics", timeout=10).read().decode()
        check("fast: /metrics pi0_model_info{model=\"pi0_fast\"} 1, pi0_zero_chunks_total 2",
              'pi0_model_info{model="pi0_fast"} 1' in text and "\npi0_zero_chunks_total 2\n" in text,
              "\n".join(l for l in text.splitlines() if "model_info" in l or "zero_chunks" in l))
        for x in (c, d):
            x._ws.close()
    finally:
        rc = srv.stop()
    log = srv.text()
    hist = [l for l in log.splitlines() if "batch sizes" in l]
    check("fast: SIGTERM -> exit 0; the log names π0-FAST, warns of the zero chunk once, ran a batch of 2",
          rc == 0 and "π0-FAST, greedy decoding" in log and log.count("warning: π0-FAST") == 1 and bool(hist)
          and " 2:1" in hist[-1], log[-1500:])


def variants(n):
    rng = np.random.default_rng(11)
    return [({**libero_obs(rng), "prompt": f"task {i}"}, rng.standard_normal((H, A)).astype(np.float32)) for i in range(n)]


def load(port, cases, expected, n_clients=8, n_requests=50):
    lat, bad, lost = [], [], []
    lock = threading.Lock()

    def work(ci):
        c = client(port)
        for i in range(n_requests):
            k = (ci * 7 + i) % len(cases)
            obs, noise = cases[k]
            t = time.perf_counter()
            try:
                a = c.infer({**obs, "noise": noise})["actions"]
            except Exception as e:  # noqa: BLE001 - every failure counts
                with lock:
                    lost.append(f"client {ci} request {i}: {e}")
                continue
            dt = time.perf_counter() - t
            with lock:
                lat.append(dt)
                # its own chunk, and nobody else's (the variants differ by far more than rounding)
                if not np.allclose(a, expected[k], rtol=0, atol=1e-9) or \
                        min(np.abs(a - expected[j]).max() for j in range(len(cases)) if j != k) < 1e-3:
                    bad.append((ci, i, float(np.abs(a - expected[k]).max())))
        c._ws.close()

    threads = [threading.Thread(target=work, args=(ci,)) for ci in range(n_clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat = np.array(lat) * 1e3
    stats = {"n": len(lat), "rps": len(lat) / wall, "p50": float(np.percentile(lat, 50)) if len(lat) else 0,
             "p99": float(np.percentile(lat, 99)) if len(lat) else 0, "wall": wall}
    return stats, bad, lost


def batches(log):
    line = [l for l in log.splitlines() if "stopped:" in l]
    return line[-1].split("stopped: ", 1)[1] if line else "?"


def test_lerobot_batched(tmp, args):
    """A LeRobot policy served with batching: 4 clients x 12 requests over 6 observation/noise variants, each reply
    its own chunk (equal to `pi0 run` on it), batches of more than one formed."""
    rng = np.random.default_rng(21)
    cases = [({**lerobot_obs(rng), "task": f"task {i}"}, rng.standard_normal((H, A)).astype(np.float32)) for i in range(6)]
    expected = [pi0_run(args, o, n, tmp, f"lr{i}") for i, (o, n) in enumerate(cases)]
    srv = Server(tmp, "lerobot-batched", args + ["--max-batch", "4", "--batch-window-ms", "20"])
    try:
        stats, bad, lost = load(srv.port, cases, expected, n_clients=4, n_requests=12)
    finally:
        rc = srv.stop()
    log = batches(srv.text())
    check("LeRobot, batching on: 4 clients x 12 requests, each its own chunk", stats["n"] == 48 and not bad and not lost
          and rc == 0, f"{stats['n']} replies, {len(bad)} wrong, {len(lost)} lost {lost[:2]} {bad[:2]}; {log}")
    check("LeRobot, batching on: batches of more than one request ran", not log.endswith("largest batch 1"), log)


def test_load(tmp, libero_args, cases, expected):
    results = {}
    for label, extra in (("batching off", ["--max-batch", "1"]), ("batching on", ["--max-batch", "8", "--batch-window-ms", "2"])):
        srv = Server(tmp, "load-" + label.split()[1], libero_args + extra)
        try:
            stats, bad, lost = load(srv.port, cases, expected)
        finally:
            rc = srv.stop()
        s = stats
        check(f"load, {label}: 8 clients x 50 requests, all answered, each its own chunk",
              s["n"] == 400 and not bad and not lost and rc == 0,
              f"{s['n']} replies, {len(bad)} wrong, {len(lost)} lost {lost[:2]} {bad[:2]}")
        print(f"    {label} ({' '.join(extra)}): {s['rps']:.1f} requests/s, p50 {s['p50']:.1f} ms, p99 {s['p99']:.1f} ms, "
              f"{s['wall']:.1f} s; server: {batches(srv.text())}", flush=True)
        results[label] = s
    return results


def raw_ws(port):
    """A websockets connection that has read the metadata frame."""
    ws = websockets.sync.client.connect(f"ws://127.0.0.1:{port}", compression=None, max_size=None)
    ws.recv()
    return ws


def expect_error(ws, send, want, code=1011):
    """Sends `send` (str = text frame); expects a text frame containing `want`, then close `code`."""
    msg, closed = None, None
    try:
        ws.send(send)
        msg = ws.recv(timeout=30)
        ws.recv(timeout=30)
    except websockets.exceptions.ConnectionClosed as e:
        closed = e.rcvd.code if e.rcvd else None
    except TimeoutError:
        closed = "timeout"
    got = msg if isinstance(msg, str) or msg is None else f"binary reply of {len(msg)} bytes"
    return isinstance(msg, str) and want in msg and closed == code, f"{str(got)[:160]!r}, close {closed}"


def nd(data, dtype, shape):
    return {b"__ndarray__": True, b"data": data, b"dtype": dtype, b"shape": shape}


def read_chunk(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    h = json.loads(raw[8:8 + n])
    v = h["chunk"]
    return np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32).reshape(v["shape"])


def test_rtc(tmp, libero_args):
    """Real-time chunking through the server: each connection keeps its last model-space chunk; a request with
    "rtc": {"executed", "inference_delay", "execution_horizon"} is guided towards that chunk's unexecuted rows and
    equals `pi0 run --rtc-prev` on them bit for bit (both forms: "mode": "exact" as `--rtc-mode exact`); another connection's requests in between do not matter; an
    explicit "prev_chunk" does the same; a new connection has no chunk (unguided); bad "rtc" values are refused."""
    rng = np.random.default_rng(41)
    obs1, obs2, obs3 = libero_obs(rng), libero_obs(rng), libero_obs(rng)
    n1, n2, n3 = (rng.standard_normal((H, A)).astype(np.float32) for _ in range(3))
    c1 = os.path.join(tmp, "rtc.c1")
    e1 = pi0_run(libero_args + ["--save-chunk", c1], obs1, n1, tmp, "rtc1")
    ex, delay, horizon = 2, 1, 3
    prev = np.ascontiguousarray(read_chunk(c1)[ex:])
    write_safetensors(os.path.join(tmp, "rtc.prev"), {"rtc_prev": prev})
    e3 = pi0_run(libero_args + ["--rtc-prev", os.path.join(tmp, "rtc.prev"), "--rtc-delay", str(delay), "--rtc-horizon",
                                str(horizon)], obs3, n3, tmp, "rtc3")
    plain3 = pi0_run(libero_args, obs3, n3, tmp, "rtc3p")
    e3x = pi0_run(libero_args + ["--rtc-prev", os.path.join(tmp, "rtc.prev"), "--rtc-delay", str(delay), "--rtc-horizon",
                                 str(horizon), "--rtc-mode", "exact"], obs3, n3, tmp, "rtc3x")
    rtc = {"executed": ex, "inference_delay": delay, "execution_horizon": horizon}
    srv = Server(tmp, "rtc", libero_args + ["--max-batch", "2", "--batch-window-ms", "5"])
    try:
        a, b = client(srv.port), client(srv.port)
        r1 = a.infer({**obs1, "noise": n1})["actions"]
        b.infer({**obs2, "noise": n2})                     # another robot in between: its chunk is its own
        r3 = a.infer({**obs3, "noise": n3, "rtc": rtc})["actions"]
        check("rtc: the first reply equals pi0 run", np.array_equal(r1, e1), f"max {np.abs(r1 - e1).max():.3g}")
        check("rtc: guided by the connection's own last chunk == pi0 run --rtc-prev (bit for bit)", np.array_equal(r3, e3),
              f"max |diff| {np.abs(r3 - e3).max():.3g}")
        check("rtc: guidance changed the chunk", np.abs(e3 - plain3).max() > 1e-3, f"{np.abs(e3 - plain3).max():.3g}")
        c = client(srv.port)
        r3x = c.infer({**obs3, "noise": n3, "rtc": {"prev_chunk": prev, "inference_delay": delay,
                                                      "execution_horizon": horizon}})["actions"]
        check("rtc: an explicit prev_chunk == the kept chunk", np.array_equal(r3x, e3), f"{np.abs(r3x - e3).max():.3g}")
        r3e = c.infer({**obs3, "noise": n3, "rtc": {"prev_chunk": prev, "inference_delay": delay,
                                                      "execution_horizon": horizon, "mode": "exact"}})["actions"]
        check("rtc: mode exact == pi0 run --rtc-mode exact (bit for bit), and differs from LeRobot's form",
              np.array_equal(r3e, e3x) and np.abs(e3x - e3).max() > 1e-4,
              f"{np.abs(r3e - e3x).max():.3g} / {np.abs(e3x - e3).max():.3g}")
        d = client(srv.port)   # a new connection (a reconnect) has no chunk yet: unguided
        r3d = d.infer({**obs3, "noise": n3, "rtc": rtc})["actions"]
        check("rtc: a new connection's first request runs unguided", np.array_equal(r3d, plain3), f"{np.abs(r3d - plain3).max():.3g}")
        for label, bad, want in ((">H rows executed", {"executed": H + 4}, "rtc.executed"),
                                 ("unknown key", {"executd": 1}, "unknown key 'executd'"),
                                 ("bad schedule", {"schedule": "cosine"}, "rtc.schedule"),
                                 ("bad mode", {"mode": "vjp"}, "rtc.mode"),
                                 ("prev_chunk of the wrong width", {"prev_chunk": np.zeros((2, 7), np.float32)}, "rtc.prev_chunk")):
            e = client(srv.port)
            e.infer({**obs1, "noise": n1})
            try:
                e.infer({**obs1, "noise": n1, "rtc": bad})
                check(f"rtc: {label} refused", False, "answered")
            except Exception as ex_:  # noqa: BLE001 - the client raises with the server's reason
                check(f"rtc: {label} refused", want in str(ex_), str(ex_)[:200])
        for x in (a, b, c, d):
            x._ws.close()
    finally:
        check("rtc server: SIGTERM -> exit 0", srv.stop() == 0, on_fail=srv.text()[-1500:])


def test_batch(tmp, libero_args, cases, expected):
    """openpi PR #941's batch request {"batch": [obs, ...]} -> {"batch": [reply, ...]}: every element through the
    dynamic batcher (with a second client's single requests in the same runs), each reply equal to its own chunk, a
    refused element answered with {"error": ...} while the others are served, an element that is not a map too."""
    srv = Server(tmp, "batchreq", libero_args + ["--max-batch", "4", "--batch-window-ms", "20"])
    try:
        a, b = client(srv.port), client(srv.port)
        bad = {k: v for k, v in cases[2][0].items() if k != "observation/state"}
        elems = [{**cases[k][0], "noise": cases[k][1]} for k in range(6)]
        elems[2] = {**bad, "noise": cases[2][1]}
        single = []
        t = threading.Thread(target=lambda: single.append(b.infer({**cases[7][0], "noise": cases[7][1]})["actions"]))
        t.start()
        r = a.infer({"batch": elems})
        t.join()
        out = r.get("batch", [])
        good = len(out) == 6 and all(np.allclose(out[k]["actions"], expected[k], rtol=0, atol=1e-9) for k in (0, 1, 3, 4, 5))
        check("batch request: 6 elements answered in order, each its own chunk", good and set(r) == {"batch"},
              f"{len(out)} replies, keys {sorted(r)}")
        check("batch request: the refused element carries its error, the others are served",
              len(out) == 6 and set(out[2]) == {"error"} and "observation/state" in out[2]["error"], str(out[2])[:200] if len(out) == 6 else "")
        check("batch request: elements have their own timings",
              len(out) == 6 and all(set(out[k]) == {"actions", "policy_timing", "server_timing"} for k in (0, 1, 3, 4, 5)))
        check("batch request: a concurrent single request served alongside",
              len(single) == 1 and np.allclose(single[0], expected[7], rtol=0, atol=1e-9))
        r2 = a.infer({"batch": [{**cases[0][0], "noise": cases[0][1]}, 5]})["batch"]
        check("batch request: an element that is not a map is refused alone",
              len(r2) == 2 and np.allclose(r2[0]["actions"], expected[0], rtol=0, atol=1e-9) and "expected a map" in r2[1]["error"],
              str(r2)[:200])
        try:
            a.infer({"batch": [], "prompt": "x"})
            check("batch request: a malformed batch is refused", False, "answered")
        except Exception as e:  # noqa: BLE001
            check("batch request: a malformed batch is refused", "only the key 'batch'" in str(e), str(e)[:200])
        b._ws.close()
        # GET /metrics (Prometheus text format): what the server served so far
        resp = urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/metrics", timeout=10)
        text = resp.read().decode()
        m = dict(l.rsplit(" ", 1) for l in text.splitlines() if l and not l.startswith("#"))
        ok = (resp.status == 200 and resp.headers.get("Content-Type", "").startswith("text/plain")
              and m.get("pi0_requests_total") == "10" and m.get("pi0_request_errors_total") == "3"   # + the malformed one
              and m.get("pi0_request_latency_seconds_count") == "7" and m.get('pi0_batch_size_bucket{le="+Inf"}') == m.get("pi0_batches_total")
              and int(m.get('pi0_batch_size_bucket{le="1"}', -1)) < int(m.get("pi0_batches_total", 0))
              and m.get("pi0_connections") == "0" and "pi0_queue_depth" in m and "pi0_model_latency_seconds_sum" in m)   # both closed
        check("GET /metrics: counters, histograms and gauges of what was served", ok, text[:1500])
    finally:
        rc = srv.stop()
    log = batches(srv.text())
    check("batch request: SIGTERM -> exit 0; the elements ran in batches of more than one", rc == 0
          and not log.endswith("largest batch 1"), log)


def test_serve_bench(libero_args):
    """bench/serve_bench.py as a smoke test (CPU, tiny model): 3 robots for 2 s, plain, with batch requests and with
    three prompts (one per robot, truncated to the tiny model's 12 tokens as openpi's tokenizer does)."""
    for extra in ([], ["--batch", "2"], ["--prompts", "3"]):
        p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "serve_bench.py"), "--server", SERVER,
                            "--server-args", " ".join(libero_args + ["--max-batch", "4", "--batch-window-ms", "2"]),
                            "--robots", "3", "--seconds", "2", "--image-size", "56", *extra], capture_output=True,
                           text=True, timeout=300, env=ENV)
        line = [l for l in p.stdout.splitlines() if l.startswith("serve_bench: 3 robots")]
        check(f"serve_bench {' '.join(extra) or 'plain'}: runs, 0 errors, a batch-size histogram",
              p.returncode == 0 and line and " 0 errors" in line[0] and "batch sizes (size:runs): " in p.stdout,
              (line[0] if line else p.stdout[-500:] + p.stderr[-500:]))


def test_faults(tmp, libero_args, cases, expected):
    srv = Server(tmp, "faults", libero_args + ["--max-message-bytes", "1000000"])
    check("faults: no warm-up on the CPU by default", "warm-up" not in srv.text(), srv.text()[-400:])
    other = client(srv.port)  # a robot that keeps working through everything below

    def other_ok():
        obs, noise = cases[0]
        return np.array_equal(other.infer({**obs, "noise": noise})["actions"], expected[0])

    obs, noise = cases[1]
    good = msgpack_numpy.packb({**obs, "noise": noise})
    state_key = {k: v for k, v in obs.items() if k != "observation/state"}
    fake_image = dict(obs, **{"observation/image": nd(b"\0" * 16, "|u1", [2**40, 2**40, 3])})
    faults = [
        ("text frame", "{\"observation/state\": [1, 2]}", "text frame", 1011),
        ("garbage bytes", b"\xc1\x00garbage\xff" * 10, "invalid msgpack", 1011),
        ("truncated msgpack", good[: len(good) // 2], "truncated msgpack", 1011),
        ("missing key (no state)", msgpack_numpy.packb(state_key), "observation/state", 1011),
        ("wrong dtype (state int8)", msgpack_numpy.packb(dict(obs, **{"observation/state": np.zeros(8, np.int8)})), "|i1", 1011),
        ("wrong dtype (complex image)", msgpack_numpy.packb(dict(obs, **{"observation/image": nd(b"\0" * 8, "<c8", [1])})),
         "<c8", 1011),
        ("wrong shape (2-d image)", msgpack_numpy.packb(dict(obs, **{"observation/image": np.zeros((224, 224), np.uint8)})),
         "observation/image", 1011),
        ("wrong noise shape", msgpack_numpy.packb({**obs, "noise": np.zeros((H, 7), np.float32)}), "noise: expected shape", 1011),
        ("absurd shape (2^80 elements)", msgpack_numpy.packb(fake_image), "overflows", 1011),
        ("oversized message (2 MB, limit 1 MB)", b"\x00" * 2_000_000, "larger than 1000000", 1009),
    ]
    for name, send, want, code in faults:
        ws = raw_ws(srv.port)
        ok, detail = expect_error(ws, send, want, code)
        ws.close()
        check(f"fault: {name} -> error, close {code}; other robot served", ok and other_ok(), detail)

    c = client(srv.port)  # the real client turns the error frame into RuntimeError
    try:
        c.infer(state_key)
        got = "no error"
    except RuntimeError as e:
        got = str(e)
    check("openpi-client raises RuntimeError with the reason", "Error in inference server" in got and "observation/state" in got,
          got.replace("\n", " ")[:160])

    for name, payload in (("mid-frame", None), ("mid-request", good)):
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        time.sleep(0.1)
        if payload is None:  # a header announcing 64 kB, then 10 bytes, then gone
            s.sendall(b"\x82\xfe\x10\x00" + b"\0\0\0\0" + b"\x81" * 10)
        else:  # a whole request, then gone before the reply
            s.sendall(b"\x82\xff" + struct.pack(">Q", len(payload)) + b"\0\0\0\0" + payload)
        s.close()
        time.sleep(0.2)
        check(f"client hangs up {name}: server still serves", srv.p.poll() is None and other_ok())

    other._ws.close()
    rc = srv.stop()
    log = srv.text()
    n_err = log.count(": error: ")
    check("faults server: one log line per error and per connection; SIGTERM -> exit 0",
          rc == 0 and n_err == len(faults) + 1 and log.count(" requests in ") >= len(faults) + 4,
          f"exit {rc}, {n_err} error lines")

    key = Server(tmp, "apikey", libero_args + ["--api-key", "robot-fleet-7"])
    try:
        for label, k in (("missing", None), ("wrong", "robot-fleet-8")):
            try:
                client(key.port, api_key=k)
                got = "connected"
            except websockets.exceptions.InvalidStatus as e:
                got = e.response.status_code
            check(f"API key {label} -> refused with 401", got == 401, str(got))
        c = client(key.port, api_key="robot-fleet-7")
        obs, noise = cases[2]
        check("right API key -> served", np.array_equal(c.infer({**obs, "noise": noise})["actions"], expected[2]))
        c._ws.close()
    finally:
        rc = key.stop()
        check("API key server: refusals logged; SIGTERM -> exit 0", rc == 0 and key.text().count("API key") >= 2,
              on_fail=key.text()[-1500:])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_haproxy(tmp, libero_args, cases, expected):
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    s1, s2 = Server(tmp, "gpu0", libero_args), Server(tmp, "gpu1", libero_args + ["--max-batch", "4"])
    port = free_port()
    env = dict(ENV, PI0_LISTEN=f"127.0.0.1:{port}", PI0_SERVER_1=f"127.0.0.1:{s1.port}", PI0_SERVER_2=f"127.0.0.1:{s2.port}")
    hlog = open(os.path.join(tmp, "haproxy.log"), "w")
    hp = subprocess.Popen([haproxy, "-db", "-f", os.path.join(ROOT, "server", "haproxy.cfg")], stdout=hlog,
                          stderr=subprocess.STDOUT, env=env)
    try:
        status, deadline = None, time.time() + 15
        while time.time() < deadline and status != 200:
            try:
                status = urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).status
            except OSError:
                time.sleep(0.2)
        check("haproxy: /healthz through the proxy", status == 200, str(status))
        clients = [client(port) for _ in range(6)]
        ok = True
        for i, c in enumerate(clients * 2):
            obs, noise = cases[i % len(cases)]
            ok &= np.array_equal(c.infer({**obs, "noise": noise})["actions"], expected[i % len(cases)])
        for c in clients:
            c._ws.close()
        time.sleep(0.3)
        n1, n2 = s1.text().count(" via 127.0.0.1"), s2.text().count(" via 127.0.0.1")
        check("haproxy: 6 robots spread over both servers, replies correct", ok and n1 >= 2 and n2 >= 2,
              f"{n1} + {n2} connections")
        rc = s2.stop()
        time.sleep(2.5)  # two failed checks at 1 s intervals mark it down
        ok, n_before = True, s1.text().count(" via 127.0.0.1")
        for i in range(4):
            c = client(port)
            obs, noise = cases[i]
            ok &= np.array_equal(c.infer({**obs, "noise": noise})["actions"], expected[i])
            c._ws.close()
        time.sleep(0.3)
        check("haproxy: one server stopped (exit 0), the other takes the new robots",
              ok and rc == 0 and s1.text().count(" via 127.0.0.1") == n_before + 4)
    finally:
        hp.terminate()
        hp.wait(10)
        hlog.close()
        check("haproxy: the remaining server exits 0 on SIGTERM", s1.stop() == 0)
        s2.stop()


def main():
    import openpi_client
    print(f"openpi-client {getattr(openpi_client, '__version__', '?')} from {os.path.dirname(openpi_client.__file__)}, "
          f"websockets {websockets.version.version}", flush=True)
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="pi0_server_e2e.")
    try:
        rng = np.random.default_rng(1)
        tok = os.path.join(tmp, "tokenizer.model")
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "make_tokenizer.py"), tok], check=True)
        ck_l = checkpoint(tmp, "libero", "tiny-pi0", "libero", 8, 7, rng)
        ck_d = checkpoint(tmp, "droid", "tiny-pi05", "droid", 8, 8, rng)
        ck_a = checkpoint(tmp, "aloha", "tiny-pi0", "trossen", 14, 14, rng)
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        import lerobot_check   # writes LeRobot policy directories (processor files, stats) from the tiny fixtures
        cams = lerobot_check.CAMS3
        ck_r = lerobot_check.policy_dir(tmp, "lerobot", "tiny-pi0", cams, 8, 7, {"VISUAL": "IDENTITY", "STATE": "MEAN_STD",
                                        "ACTION": "MEAN_STD"}, np.random.RandomState(3))
        common = ["--tokenizer", tok]
        libero_args = ["--checkpoint", ck_l, "--robot", "libero"] + common
        robots = {
            "LIBERO": (libero_args, libero_obs, 7, {}),
            "DROID": (["--checkpoint", ck_d, "--config", "pi05_droid"] + common, droid_obs, 8, {}),
            "ALOHA": (["--checkpoint", ck_a, "--config", "pi0_aloha_towel"] + common, aloha_obs, 14,
                      {"reset_pose": [0, -1.5, 1.5, 0, 0, 0]}),
            "LeRobot": (["--checkpoint", ck_r] + common, lerobot_obs, 7,
                        {"lerobot": {"type": "pi0", "cameras": cams, "state": "observation.state", "state_dim": 8,
                                     "action_dim": 7, "n_action_steps": 5, "prompt_key": "task"}}),
        }
        test_robots(tmp, robots)
        import fast_policy_fixture   # a π0-FAST model built to write chosen tokens, with its tokenizers
        f = fast_policy_fixture.droid_policy(os.path.join(tmp, "fast"), tok, PI0)
        test_fast(tmp, ["--checkpoint", f["ckpt"], "--config", "pi0_fast_droid", "--tokenizer", f["tok"],
                        "--fast-tokenizer", f["fast"], "--max-token-len", str(fast_policy_fixture.CUT)])
        test_lerobot_batched(tmp, robots["LeRobot"][0])
        test_live(tmp, libero_args)
        test_rtc(tmp, libero_args)
        test_window(tmp, libero_args)
        cases = variants(16)
        expected = [pi0_run(libero_args, o, n, tmp, f"v{i}") for i, (o, n) in enumerate(cases)]
        test_load(tmp, libero_args, cases, expected)
        test_batch(tmp, libero_args, cases, expected)
        test_serve_bench(libero_args)
        test_faults(tmp, libero_args, cases, expected)
        test_haproxy(tmp, libero_args, cases, expected)
    except Exception as e:  # noqa: BLE001 - a crash of the test is a failure, with its reason
        import traceback
        traceback.print_exc()
        check("e2e ran to the end", False, repr(e))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"({time.time() - t0:.1f} s)")
    print(f"server_e2e: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
