#!/usr/bin/env python3
"""Seed corpus for tests/fuzz/fuzz_msgpack.c: requests as openpi-client's msgpack_numpy packs them
(numpy arrays and scalars as maps with bin keys), shaped like the LIBERO, DROID and ALOHA examples
(small images so the fuzzer's max_len holds them), with noise [5, 32], a bin prompt and a numpy
unicode prompt. Usage: fuzz_seeds.py OUT_DIR   (python3-msgpack, python3-numpy)"""
import os, sys

import msgpack
import numpy as np


def pack_array(obj):  # openpi_client/msgpack_numpy.py, restated
    if isinstance(obj, np.ndarray):
        return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": obj.shape}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    return obj


rng = np.random.default_rng(0)
img = lambda *s: rng.integers(0, 256, s, dtype=np.uint8)
seeds = {
    "libero": {"observation/image": img(8, 8, 3), "observation/wrist_image": img(8, 8, 3),
               "observation/state": rng.standard_normal(8), "prompt": "pick up the red block"},
    "droid": {"observation/exterior_image_1_left": img(6, 8, 3), "observation/wrist_image_left": img(6, 8, 3),
              "observation/joint_position": rng.standard_normal(7), "observation/gripper_position": np.float64(0.5),
              "prompt": b"open the drawer"},
    "aloha": {"state": np.ones(14), "images": {"cam_high": img(3, 6, 6), "cam_left_wrist": img(3, 6, 6)}},
    "noise": {"observation/state": rng.standard_normal(8).astype(">f4"), "prompt": np.array("cup"),
              "noise": rng.standard_normal((5, 32)).astype(np.float32), "step": np.int32(3)},
    "rtc": {"observation/state": rng.standard_normal(8), "prompt": "cup",
            "rtc": {"executed": 2, "inference_delay": 1, "execution_horizon": 4, "schedule": "EXP",
                    "max_guidance_weight": 5.0, "prev_chunk": rng.standard_normal((3, 32)).astype(np.float32)}},
    "rtc_exact": {"observation/state": rng.standard_normal(8), "prompt": "cup",
                  "rtc": {"executed": 1, "inference_delay": 2, "mode": "exact"}},
    "batch": {"batch": [{"observation/state": rng.standard_normal(8), "prompt": "cup"}, 5,
                        {"observation/image": img(4, 4, 3), "noise": rng.standard_normal((5, 32)).astype(np.float32)}]},
}
os.makedirs(sys.argv[1], exist_ok=True)
for name, obs in seeds.items():
    with open(os.path.join(sys.argv[1], name + ".msgpack"), "wb") as f:
        f.write(msgpack.packb(obs, default=pack_array))
# Keys given twice (a dict cannot hold them): once leaked the first prompt.
with open(os.path.join(sys.argv[1], "twice.msgpack"), "wb") as f:
    pk = msgpack.Packer(default=pack_array)
    pairs = [("prompt", "cup"), ("prompt", b"bowl"), ("noise", np.zeros((2, 3), np.float32)),
             ("noise", np.ones((2, 3), np.float32)), ("observation/state", np.ones(8))]
    f.write(pk.pack_map_header(len(pairs)) + b"".join(pk.pack(k) + pk.pack(v) for k, v in pairs))
