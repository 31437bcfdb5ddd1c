"""pi0.Policy on a π0-FAST checkpoint against `pi0 run --json` (bit for bit): a tiny model built to write chosen
tokens (tests/fast_policy_fixture.py droid_policy), so that its actions are decoded ones. Two chains: a short prompt
decodes the chunk's tokens ("Action: ", FAST tokens, end token, no "|"), a prompt cut at max_token_len decodes 100 byte
pieces and never ends. In one batch the first sample therefore decodes on after its end token; openpi, one observation at a
time, stops there: a batch must give each sample's single result. Errors name what is wrong."""
import json
import os
import sys

import numpy as np
import pytest

import pi0
from conftest import PI0_BIN, ROOT, TOKENIZER, flatten, read_st, run_cli, write_st

sys.path.insert(0, os.path.join(ROOT, "tests"))
import fast_policy_fixture as F  # noqa: E402

H, A = 10, 8
SHORT, LONG = F.SHORT, F.LONG


@pytest.fixture(scope="module")
def fast(tmp_path_factory, ckpts):
    """fast_policy_fixture.droid_policy's checkpoint and tokenizers, and a π0 checkpoint."""
    f = F.droid_policy(str(tmp_path_factory.mktemp("fast")), TOKENIZER, PI0_BIN)
    return {**f, "L": F.CUT, "pi0": ckpts["pi0"]}


def droid_obs(rng):
    return {"observation/exterior_image_1_left": rng.randint(0, 256, (70, 90, 3)).astype(np.uint8),
            "observation/wrist_image_left": rng.rand(56, 56, 3).astype(np.float32),
            "observation/joint_position": rng.randn(7) * 0.5, "observation/gripper_position": np.array([0.3])}


def policy(f, **kw):
    return pi0.Policy(f["ckpt"], config="pi0_fast_droid", tokenizer=f["tok"], fast_tokenizer=f["fast"], backend="cpu",
                      max_token_len=f["L"], quiet=True, **kw)


def cli(f, tmp_path, obs, prompt):
    write_st(tmp_path / "obs.safetensors", flatten(obs))
    p = run_cli("run", "--checkpoint", f["ckpt"], "--tokenizer", f["tok"], "--fast-tokenizer", f["fast"], "--config",
                "pi0_fast_droid", "--max-token-len", str(f["L"]), "--obs", str(tmp_path / "obs.safetensors"), "--prompt",
                prompt, "--backend", "cpu", "--json", "--dump-inputs", str(tmp_path / "cli.safetensors"))
    return np.array(json.loads(p.stdout)["actions"], dtype=np.float64)


def test_infer_equals_cli(fast, tmp_path):
    obs = droid_obs(np.random.RandomState(1))
    with policy(fast) as p:
        got = p.infer({**obs, "prompt": SHORT})
        p.save_inputs({**obs, "prompt": SHORT}, tmp_path / "py.safetensors")
        assert p.info["fast"] and not p.info["pi05"] and p.info["quantile_norm"] and p.info["discrete_state"]
        assert p.metadata == {} and (p.info["action_horizon"], p.info["action_dim"]) == (H, A)
        assert p.zero_chunks == 0
    want = cli(fast, tmp_path, obs, SHORT)
    assert got["actions"].shape == (H, A) and got["actions"].dtype == np.float64
    assert np.array_equal(got["actions"], want), np.abs(got["actions"] - want).max()
    assert got["zero_chunk"] is False and np.abs(want).max() > 0.1
    a, b = read_st(tmp_path / "py.safetensors"), read_st(tmp_path / "cli.safetensors")
    assert sorted(a) == sorted(b) == ["image_masks", "images", "token_ar_mask", "token_mask", "tokens"]
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
    assert a["image_masks"].tolist() == [[1, 1, 1]] and np.all(a["images"][0, 1] == -1)   # base_1_rgb: zeros, unmasked


def test_chunk_is_the_decoded_one(fast):
    """last_chunk: the chunk the tokens decode to (normalised), the inverse DCT of the chosen coefficients."""
    n = np.arange(H)
    k = n[:, None]
    basis = np.sqrt(2.0 / H) * np.cos(np.pi * k * (2 * n[None, :] + 1) / (2 * H))
    basis[0] = np.sqrt(1.0 / H)
    want = basis.T @ (fast["coef"] / 10.0)
    with policy(fast) as p:
        p.infer({**droid_obs(np.random.RandomState(2)), "prompt": SHORT})
        got = p.last_chunk()
    assert got.shape == (H, A) and np.abs(got - want).max() < 1e-5


def test_zero_chunk_flag_and_counter(fast):
    obs = droid_obs(np.random.RandomState(4))
    with policy(fast) as p:
        r = p.infer({**obs, "prompt": LONG})
        assert r["zero_chunk"] is True and p.zero_chunks == 1
        assert p.infer({**obs, "prompt": SHORT})["zero_chunk"] is False and p.zero_chunks == 1
        p.infer({**obs, "prompt": LONG})
        assert p.zero_chunks == 2


def test_batch_equals_single_runs(fast):
    """A sample that ends before the others decodes on in the batch; its result is still its single run's."""
    rng = np.random.RandomState(5)
    obs = [{**droid_obs(rng), "prompt": SHORT}, {**droid_obs(rng), "prompt": LONG}, {**droid_obs(rng), "prompt": SHORT}]
    with policy(fast, max_batch=3) as p:
        single = [p.infer(o) for o in obs]
        batch = p.infer_batch(obs)
        assert p.zero_chunks == 2   # the cut prompt's sample, alone and in the batch
    assert [s["zero_chunk"] for s in single] == [False, True, False]
    for s, b in zip(single, batch):
        assert np.array_equal(s["actions"], b["actions"])


def test_errors(fast):
    with pytest.raises(pi0.InputError, match="needs the FAST action tokenizer"):
        pi0.Policy(fast["ckpt"], config="pi0_fast_droid", tokenizer=fast["tok"], backend="cpu")
    with pytest.raises(pi0.InputError, match="holds a π0 model: a FAST tokenizer is for π0-FAST checkpoints"):
        pi0.Policy(fast["pi0"], config="pi0_droid", tokenizer=TOKENIZER, fast_tokenizer=fast["fast"], backend="cpu")
    with pytest.raises(pi0.InputError, match="num_steps 10.*no flow-matching steps"):
        policy(fast, steps=10)
    with pytest.raises(pi0.InputError, match="config pi0_droid is for a π0 checkpoint"):
        pi0.Policy(fast["ckpt"], config="pi0_droid", tokenizer=fast["tok"], fast_tokenizer=fast["fast"], backend="cpu")
    obs = {**droid_obs(np.random.RandomState(6)), "prompt": SHORT}
    with policy(fast) as p:
        with pytest.raises(pi0.InputError, match="takes no noise"):
            p.infer(obs, np.zeros((H, A), np.float32))
        with pytest.raises(pi0.InputError, match="real-time chunking"):
            p.infer(obs, rtc={"prev_chunk": np.zeros((2, A), np.float32)})
        assert p.infer(obs)["zero_chunk"] is False   # still serves after the refusals


def test_fast_tokenizer_json_path(fast):
    obs = {**droid_obs(np.random.RandomState(7)), "prompt": SHORT}
    with policy(fast) as p:
        a = p.infer(obs)["actions"]
    with pi0.Policy(fast["ckpt"], config="pi0_fast_droid", tokenizer=fast["tok"], backend="cpu", max_token_len=fast["L"],
                    fast_tokenizer=os.path.join(fast["fast"], "tokenizer.json")) as p:
        assert np.array_equal(p.infer(obs)["actions"], a)
