"""Shared set-up of the Python package's tests (tests/python/run.sh runs them in a venv with the package installed).

The oracle is the command line, `pi0 run --json` and `pi0 infer`, built from the same C library: the package must
give exactly what they give. Checkpoints are the tiny fixtures with norm stats for each robot; the tokenizer is
the one tests/make_tokenizer.py made for the C tests. Safetensors files are read and written here with numpy alone.
"""
import json
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("PI0_TEST_BUILD", "build"))
PI0_BIN = os.path.join(BUILD, "pi0")
TOKENIZER = os.environ.get("PI0_TEST_TOKENIZER", os.path.join(BUILD, "tests", "tok.model"))
# robot: (state dim, action dim) of its norm stats; asset ids of the configs used
ROBOT_DIMS = {"libero": (8, 7), "droid": (8, 8), "aloha": (14, 14)}
ASSETS = {"physical-intelligence/libero": "libero", "droid": "droid", "trossen": "aloha"}
H, A = 5, 32   # the tiny models' horizon and action width

_DT = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I32": np.int32, "I64": np.int64, "U8": np.uint8,
       "BOOL": np.bool_}
_NAMES = {np.dtype(v): k for k, v in _DT.items()}


def write_st(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        b = a.tobytes()
        header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hb = json.dumps(header).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))


def read_st(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=_DT[v["dtype"]]).reshape(v["shape"])
    return out


def run_cli(*args, check=True):
    """`pi0 ARGS`; OMP_WAIT_POLICY=PASSIVE keeps libgomp's threads from spinning on a busy 2-core machine."""
    p = subprocess.run([PI0_BIN, *args], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    if check and p.returncode != 0:
        raise AssertionError(f"pi0 {' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p


def norm_stats(rng, ns, na):
    def block(n):
        mean = rng.randn(n) * 0.5
        std = np.abs(rng.randn(n) * 0.3 + 0.5) + 0.05
        return {"mean": mean.tolist(), "std": std.tolist(), "q01": (mean - 2 * std).tolist(),
                "q99": (mean + 2 * std).tolist()}
    return {"norm_stats": {"state": block(ns), "actions": block(na)}}


@pytest.fixture(scope="session")
def ckpts(tmp_path_factory):
    """{"pi0": DIR, "pi05": DIR}: the tiny fixtures with norm stats for LIBERO, DROID and ALOHA."""
    assert os.path.exists(PI0_BIN), f"{PI0_BIN} is missing: build first (make)"
    assert os.path.exists(TOKENIZER), f"{TOKENIZER} is missing (tests/make_tokenizer.py makes it)"
    tmp = tmp_path_factory.mktemp("ckpt")
    rng = np.random.RandomState(7)
    stats = {a: norm_stats(rng, *ROBOT_DIMS[r]) for a, r in ASSETS.items()}
    out = {}
    for name, src in (("pi0", "tiny-pi0"), ("pi05", "tiny-pi05")):
        d = tmp / name
        d.mkdir()
        for f in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(ROOT, "tests", "fixtures", src, f), d)
        for asset_id, st in stats.items():
            (d / "assets" / asset_id).mkdir(parents=True)
            (d / "assets" / asset_id / "norm_stats.json").write_text(json.dumps(st))
        out[name] = str(d)
    return out


def image(rng, h, w, chw=False):
    a = rng.randint(0, 256, size=(h, w, 3)).astype(np.uint8)
    return np.ascontiguousarray(a.transpose(2, 0, 1)) if chw else a


def observation(robot, rng, nested=False):
    """An observation as the robot's openpi client sends it (images of several sizes and layouts)."""
    if robot == "libero":
        return {"observation/image": image(rng, 96, 128), "observation/wrist_image": image(rng, 56, 56, chw=True),
                "observation/state": rng.randn(8) * 0.7}
    if robot == "droid":
        return {"observation/exterior_image_1_left": image(rng, 180, 320),
                "observation/wrist_image_left": (rng.rand(70, 90, 3)).astype(np.float32),
                "observation/joint_position": rng.randn(7) * 0.5, "observation/gripper_position": np.array([0.3])}
    cams = {c: image(rng, 60, 80, chw=True) for c in ("cam_high", "cam_left_wrist", "cam_right_wrist")}
    state = rng.randn(14) * 0.4
    if nested:
        return {"images": cams, "state": state}
    return {**{"images/" + c: v for c, v in cams.items()}, "state": state}


def flatten(obs, prefix=""):
    out = {}
    for k, v in obs.items():
        if isinstance(v, dict):
            out.update(flatten(v, prefix + k + "/"))
        else:
            out[prefix + k] = np.asarray(v)
    return out


def cli_actions(tmp_path, ckpt, config, obs, prompt, noise, extra=()):
    """`pi0 run --json` on the same observation (written with --obs) and noise: actions float64 [H, D]."""
    of, nf = tmp_path / "obs.safetensors", tmp_path / "noise.safetensors"
    write_st(of, flatten(obs))
    write_st(nf, {"noise": noise.astype(np.float32)})
    args = ["run", "--checkpoint", ckpt, "--tokenizer", TOKENIZER, "--config", config, "--obs", str(of),
            "--noise", str(nf), "--backend", "cpu", "--json", *extra]
    if prompt is not None:
        args += ["--prompt", prompt]
    return np.array(json.loads(run_cli(*args).stdout)["actions"], dtype=np.float64)
