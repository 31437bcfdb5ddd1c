#!/usr/bin/env python3
"""Writes norm-stats cases for build/tests/test_policy: a norm_stats.json (z-score and quantile stats,
8-dim state, 7-dim actions, as openpi stores them) and a safetensors file with inputs and the expected
results of openpi's Normalize / Unnormalize (transforms.py, restated with numpy float64; the results are
float64, as openpi returns them). Seeded. Usage: policy_check.py OUTDIR"""
import json, os, struct, sys

import numpy as np

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.RandomState(11)
def vec(n, scale, off=0.0):
    return (rng.randn(n) * scale + off).tolist()
mean_s, std_s, mean_a, std_a = vec(8, 0.5), np.abs(vec(8, 0.3, 0.5)).tolist(), vec(7, 0.5), np.abs(vec(7, 0.3, 0.5)).tolist()
stats = {"norm_stats": {
    "state": {"mean": mean_s, "std": std_s, "q01": (np.array(mean_s) - 2.3 * np.array(std_s)).tolist(),
              "q99": (np.array(mean_s) + 2.3 * np.array(std_s)).tolist()},
    "actions": {"mean": mean_a, "std": std_a, "q01": (np.array(mean_a) - 2 * np.array(std_a)).tolist(),
                "q99": (np.array(mean_a) + 2 * np.array(std_a)).tolist()}}}
json.dump(stats, open(os.path.join(out, "norm_stats.json"), "w"), indent=1)
ns, na = stats["norm_stats"]["state"], stats["norm_stats"]["actions"]
x = (rng.randn(20, 8) * 2).astype(np.float32)        # raw states
a = (rng.randn(20, 10, 32) * 1.5).astype(np.float32)  # model outputs [batch, H, 32]
def f64(v): return np.asarray(v, dtype=np.float64)
t = {
    "state": x,
    "state_z": (x - f64(ns["mean"])[:8]) / (f64(ns["std"])[:8] + 1e-6),
    "state_q": (x - f64(ns["q01"])[:8]) / (f64(ns["q99"])[:8] - f64(ns["q01"])[:8] + 1e-6) * 2.0 - 1.0,
    "model_actions": a,
}
mean = np.pad(f64(na["mean"]), (0, 32 - 7), constant_values=0.0)
std = np.pad(f64(na["std"]), (0, 32 - 7), constant_values=1.0)
t["actions_z"] = a * (std + 1e-6) + mean
q01, q99 = f64(na["q01"]), f64(na["q99"])
t["actions_q"] = np.concatenate([(a[..., :7] + 1.0) / 2.0 * (q99 - q01 + 1e-6) + q01, a[..., 7:]], axis=-1)
# the state round trip of openpi's output side: normalised float64 state, padded to 32, unnormalised
q01s, q99s = f64(ns["q01"]), f64(ns["q99"])
zpad, qpad = np.pad(t["state_z"], ((0, 0), (0, 24))), np.pad(t["state_q"], ((0, 0), (0, 24)))
t["state_rt_z"] = zpad * (np.pad(f64(ns["std"]), (0, 24), constant_values=1.0) + 1e-6) + np.pad(f64(ns["mean"]), (0, 24))
t["state_rt_q"] = np.concatenate([(qpad[:, :8] + 1.0) / 2.0 * (q99s - q01s + 1e-6) + q01s, qpad[:, 8:]], axis=-1)
header, blobs, off = {}, [], 0
for name, v in t.items():
    b = np.ascontiguousarray(v).tobytes()
    header[name] = {"dtype": {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64"}[v.dtype], "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
open(os.path.join(out, "norm_cases.safetensors"), "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
print("policy_check: wrote norm stats cases to %s" % out)
