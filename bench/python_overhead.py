#!/usr/bin/env python3
"""What the Python binding adds to an inference: pi0.Policy.infer against the C call it wraps.

    python bench/python_overhead.py --checkpoint DIR --tokenizer FILE [--config NAME | --robot R]
        [--backend cpu|cuda] [--threads N] [--iters N] [--image-size S] [--json OUT]

Both sides run the same observation (LIBERO: two S x S uint8 images and a state; ALOHA: three CHW cameras) with the
same noise, B = 1, interleaved call by call (the order alternates): `python` is Policy.infer (the observation dict
converted to C structures, pi0_policy_prepare, pi0_policy_run, the model-space chunk kept for real-time chunking,
the result dict); `c` is one pi0_policy_infer (prepare + run) on structures built once, through ctypes with its
arguments bound beforehand. Reports the medians and the median of the paired differences (p10 / p90), and the
conversion of the dict alone. Needs the package importable (pip install ./python, or PYTHONPATH=python with
PI0_LIBRARY=build/libpi0.so).
"""
import argparse
import ctypes
import json
import statistics
import sys
import time

import numpy as np

import pi0
from pi0 import _native as N
from pi0._native import lib


def observation(robot, size, rng):
    img = lambda: rng.randint(0, 256, size=(size, size, 3)).astype(np.uint8)   # noqa: E731
    if robot == "aloha":
        return {"images": {c: np.ascontiguousarray(img().transpose(2, 0, 1))
                           for c in ("cam_high", "cam_left_wrist", "cam_right_wrist")},
                "state": rng.randn(14) * 0.3, "prompt": "transfer the cube"}
    if robot == "droid":
        return {"observation/exterior_image_1_left": img(), "observation/wrist_image_left": img(),
                "observation/joint_position": rng.randn(7) * 0.3, "observation/gripper_position": np.array([0.2]),
                "prompt": "pick up the fork"}
    return {"observation/image": img(), "observation/wrist_image": img(), "observation/state": rng.randn(8) * 0.3,
            "prompt": "pick up the black bowl and place it on the plate"}


def q(xs, f):
    s = sorted(xs)
    return s[min(len(s) - 1, int(f * len(s)))]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--config")
    ap.add_argument("--robot")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads of the CPU backend (0 = all cores)")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    p = pi0.Policy(a.checkpoint, config=a.config, robot=a.robot, tokenizer=a.tokenizer, backend=a.backend,
                   threads=a.threads, quiet=True)
    info = p.info
    rng = np.random.RandomState(0)
    obs = observation(info["robot"], a.image_size, rng)
    noise = rng.randn(info["model_action_horizon"], info["model_action_dim"]).astype(np.float32)
    p.warmup()
    conv = p._convert(obs, noise, None, None, "observation")
    out = np.empty((info["action_horizon"], info["action_dim"]), np.float64)
    tm = N.PolicyTiming()
    c_fn, c_args = lib.pi0_policy_infer, (p._p, ctypes.byref(conv.c), out.ctypes.data, ctypes.byref(tm))
    for _ in range(10):
        p.infer(obs, noise)
        assert c_fn(*c_args) == 0
    c_ms, py_ms, diff_ms, conv_ms = [], [], [], []
    clock = time.perf_counter
    for i in range(a.iters):
        for first in ((0, 1) if i % 2 else (1, 0)):
            t0 = clock()
            if first:
                r = p.infer(obs, noise)
            else:
                st = c_fn(*c_args)
            t1 = clock()
            (py_ms if first else c_ms).append((t1 - t0) * 1e3)
        diff_ms.append(py_ms[-1] - c_ms[-1])
        t0 = clock()
        p._convert(obs, noise, None, None, "observation")
        conv_ms.append((clock() - t0) * 1e3)
    assert st == 0 and np.array_equal(r["actions"], out), "the two paths disagree"
    res = {"device": info["device"], "backend": info["backend"], "robot": info["robot"], "iters": a.iters,
           "threads": a.threads,
           "image_size": a.image_size, "python": sys.version.split()[0], "numpy": np.__version__,
           "c_median_ms": statistics.median(c_ms), "python_median_ms": statistics.median(py_ms),
           "overhead_median_ms": statistics.median(diff_ms), "overhead_p10_ms": q(diff_ms, 0.1),
           "overhead_p90_ms": q(diff_ms, 0.9), "convert_median_ms": statistics.median(conv_ms)}
    print(f"{res['device']} ({res['backend']}), {res['robot']}, {a.image_size}px, {a.iters} pairs: "
          f"C {res['c_median_ms']:.3f} ms, Python {res['python_median_ms']:.3f} ms; binding overhead median "
          f"{res['overhead_median_ms'] * 1e3:.1f} us (p10 {res['overhead_p10_ms'] * 1e3:.1f}, p90 "
          f"{res['overhead_p90_ms'] * 1e3:.1f}), dict conversion alone {res['convert_median_ms'] * 1e3:.1f} us")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
