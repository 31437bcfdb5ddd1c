#!/usr/bin/python3
"""Writes the seeds of fuzz_lerobot_dir (tests/fuzz/seeds_lerobot_dir): LeRobot policy directories as
tests/lerobot_check.py writes them (its policy_dir: config.json, the processor files and the normaliser stats, the
way LeRobot's save_pretrained lays them out), packed as the harness's records (u16 LE name length, name, u32 LE data
length, data). model.safetensors is left out: the pipeline does not read it.

  /usr/bin/python3 tests/fuzz/make_seed_lerobot_dir.py tests/fuzz/seeds_lerobot_dir
"""
import os
import struct
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
out = sys.argv[1] if len(sys.argv) > 1 else sys.exit(__doc__)
sys.argv = [sys.argv[0]]   # lerobot_check reads its own argv at import
import lerobot_check as lc  # noqa: E402


def pack(d):
    data = bytearray()
    for name in sorted(os.listdir(d)):
        if name == "model.safetensors":
            continue
        blob = open(os.path.join(d, name), "rb").read()
        nb = name.encode()
        data += struct.pack("<H", len(nb)) + nb + struct.pack("<I", len(blob)) + blob
    return bytes(data)


MS = {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
Q = {"VISUAL": "IDENTITY", "STATE": "QUANTILES", "ACTION": "QUANTILES"}
MM = {"VISUAL": "IDENTITY", "STATE": "MIN_MAX", "ACTION": "MIN_MAX"}
os.makedirs(out, exist_ok=True)
rng = np.random.RandomState(1)
with tempfile.TemporaryDirectory() as tmp:
    for name, args, kw in (("pi0-meanstd", ("tiny-pi0", lc.CAMS3, 8, 7, MS), {}),
                           ("pi0-minmax-rename", ("tiny-pi0", lc.CAMS3, 6, 6, MM),
                            dict(rename={"observation.images.top": lc.CAMS3[0]}, n_action_steps=3)),
                           ("pi05-quantiles-empty-camera", ("tiny-pi05", lc.CAMS3[:2], 8, 7, Q), dict(empty_cameras=1))):
        d = lc.policy_dir(tmp, name, *args, rng, **kw)
        blob = pack(d)
        open(os.path.join(out, name), "wb").write(blob)
        print(f"{out}/{name}: {len(blob)} bytes")
