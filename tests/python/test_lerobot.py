"""pi0.Policy on a LeRobot policy directory (written by tests/lerobot_check.py as LeRobot writes one) against
`pi0 run --json`, bit for bit; its keys, the "task" prompt and its metadata."""
import json
import os
import re
import sys

import numpy as np
import pytest

import pi0
from conftest import A, H, ROOT, TOKENIZER, run_cli, write_st
from test_boundary import Peak, huge

sys.path.insert(0, os.path.join(ROOT, "tests"))
import lerobot_check as lc  # noqa: E402  (numpy only: writes the directories, weights, processor files and stats)


@pytest.fixture(scope="module")
def lerobot_dirs(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("lerobot"))
    rng = np.random.RandomState(3)
    modes = {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
    return {"pi0": lc.policy_dir(tmp, "pi0", "tiny-pi0", lc.CAMS3, 8, 7, modes, rng),
            "pi05": lc.policy_dir(tmp, "pi05", "tiny-pi05", lc.CAMS3, 8, 7,
                                  {"VISUAL": "IDENTITY", "STATE": "QUANTILES", "ACTION": "QUANTILES"}, rng)}


def lerobot_obs(rng):
    """As a LeRobot robot or dataset gives it: float32 CHW images in [0, 1] (one uint8 HWC), a float32 state."""
    return {lc.CAMS3[0]: lc.image(rng, 60, 80, "f32chw"), lc.CAMS3[1]: lc.image(rng, 56, 56, "u8"),
            lc.CAMS3[2]: lc.image(rng, 70, 50, "f32chw"), "observation.state": rng.randn(8).astype(np.float32)}


@pytest.mark.parametrize("model", ["pi0", "pi05"])
def test_lerobot_equals_cli(lerobot_dirs, tmp_path, model):
    rng = np.random.RandomState(4)
    obs = lerobot_obs(rng)
    noise = rng.randn(H, A).astype(np.float32)
    with pi0.Policy(lerobot_dirs[model], tokenizer=TOKENIZER, backend="cpu") as p:
        got = p.infer({**obs, "task": "pick up the cube"}, noise)["actions"]
        again = p.infer({**obs, "prompt": "pick up the cube"}, noise)["actions"]
        assert p.info["robot"] == "lerobot" and p.info["lerobot"]
        assert p.metadata["lerobot"]["cameras"] == lc.CAMS3 and p.metadata["lerobot"]["action_dim"] == 7
        with pytest.raises(pi0.InputError, match="once"):
            p.infer({**obs, "task": "a", "prompt": "b"}, noise)
        with pytest.raises(pi0.InputError, match="observation.state"):
            p.infer({k: v for k, v in obs.items() if k != "observation.state"} | {"task": "x"}, noise)
    write_st(tmp_path / "obs.safetensors", obs)
    write_st(tmp_path / "noise.safetensors", {"noise": noise})
    out = run_cli("run", "--checkpoint", lerobot_dirs[model], "--tokenizer", TOKENIZER, "--obs",
                  str(tmp_path / "obs.safetensors"), "--noise", str(tmp_path / "noise.safetensors"), "--prompt",
                  "pick up the cube", "--backend", "cpu", "--json")
    want = np.array(json.loads(out.stdout)["actions"])
    assert got.shape == want.shape and np.array_equal(got, want) and np.array_equal(again, want)


def test_lerobot_unreadable_key_refused(lerobot_dirs):
    """A LeRobot policy reads (or refuses) every key it is sent: a camera in a form the binding does not pass (another
    dtype, a view larger than any image the library reads) is refused by name, not run as a missing camera, and the
    view is not copied. The binding's bound on views is the library's (LR_MAX_SIDE) for a contiguous array."""
    rng = np.random.RandomState(5)
    obs = {**lerobot_obs(rng), "task": "x"}
    cam = lc.CAMS3[1]
    tall = np.zeros((8193, 8, 6), np.uint8)
    with pi0.Policy(lerobot_dirs["pi0"], tokenizer=TOKENIZER, backend="cpu") as p:
        for bad in (obs[cam].astype(np.int16), huge((9000, 9000, 3))):
            with Peak() as m, pytest.raises(pi0.InputError, match=cam):
                p.infer({**obs, cam: bad}, seed=1)
            assert m.bytes < 16 << 20, m.bytes
        with pytest.raises(pi0.InputError) as c:
            p.infer({**obs, cam: np.ascontiguousarray(tall[:, :, :3])}, seed=1)
        with pytest.raises(pi0.InputError) as py:
            p.infer({**obs, cam: tall[:, :, ::2]}, seed=1)
        assert p.infer(obs, seed=1)["actions"].shape == (5, 7)
    library = re.search(r"sides of 1\.\.(\d+)", str(c.value))
    binding = re.search(r"sides of at most (\d+)", str(py.value))
    assert library and binding and library.group(1) == binding.group(1), (str(c.value), str(py.value))
