"""What crosses from Python into the C library: strings that C reads up to their first NUL, arguments of the wrong
type, and array views whose copy would be far larger than anything the library reads."""
import os

import numpy as np
import pytest

import pi0
from conftest import TOKENIZER, observation


def policy(ckpts, **kw):
    return pi0.Policy(ckpts["pi0"], **{"config": "pi0_libero", "tokenizer": TOKENIZER, "backend": "cpu", **kw})


def test_nul_in_strings_refused(ckpts, tmp_path):
    """A NUL would end the C string early: the library would load the checkpoint, tokenizer, config, asset or file
    named by the part before it, or read 'observation/state' + NUL + 'junk' as the state. Each is refused, named."""
    ck = ckpts["pi0"]
    for kw, name in (({"checkpoint": ck + "\0/x"}, "checkpoint"),
                     ({"checkpoint": os.fsencode(ck) + b"\0x"}, "checkpoint"),
                     ({"tokenizer": TOKENIZER + "\0x"}, "tokenizer"), ({"config": "pi0_libero\0x"}, "config"),
                     ({"config": None, "robot": "libero\0x", "asset_id": "physical-intelligence/libero"}, "robot"),
                     ({"asset_id": "physical-intelligence/libero\0x"}, "asset_id"),
                     ({"default_prompt": "open the drawer\0x"}, "default_prompt")):
        args = {"checkpoint": ck, "config": "pi0_libero", "tokenizer": TOKENIZER, "backend": "cpu", **kw}
        with pytest.raises(pi0.InputError, match=f"{name}.*NUL"):
            pi0.Policy(args.pop("checkpoint"), **args)
    with pytest.raises(pi0.InputError, match="checkpoint.*NUL"):
        pi0.Model(ck + "\0x", backend="cpu")
    with pytest.raises(pi0.InputError, match="tokenizer.*NUL"):
        pi0.Tokenizer(TOKENIZER + "\0x")
    rng = np.random.RandomState(20)
    obs = {**observation("libero", rng), "prompt": "x"}
    state = obs.pop("observation/state")
    with policy(ckpts) as p:
        with pytest.raises(pi0.InputError, match=r"'observation/state\\x00junk'.*NUL"):
            p.infer({**obs, "observation/state\0junk": state}, seed=1)
        with pytest.raises(pi0.InputError, match=r"'observation/image\\x00'.*NUL"):   # nested: {"observation": {...}}
            p.infer({**{k: v for k, v in obs.items() if k != "observation/image"}, "observation/state": state,
                     "observation": {"image\0": obs["observation/image"]}}, seed=1)
        with pytest.raises(pi0.InputError, match="path.*NUL"):
            p.save_inputs({**obs, "observation/state": state}, str(tmp_path / "in.safetensors") + "\0x", seed=1)
        assert not os.path.exists(tmp_path / "in.safetensors")
        with pytest.raises(pi0.InputError, match="prompt.*NUL"):   # the observation's prompt, as pi0-server does
            p.infer({**obs, "observation/state": state, "prompt": "x\0y"}, seed=1)
        p.infer({**obs, "observation/state": state}, seed=1)   # still usable
    with pytest.raises(pi0.InputError, match="prompt.*NUL"):
        pi0.Tokenizer(TOKENIZER).prompt("x\0y", 16)
    # encode takes the text with its length: a NUL is a character like any other (SentencePiece's byte fallback)
    tok = pi0.Tokenizer(TOKENIZER)
    assert len(tok.encode("a\0b")) > len(tok.encode("ab"))


def test_str_arguments_of_other_types_refused(ckpts):
    """bytes (or another type) where a str is expected raise pi0.InputError naming the argument, never
    AttributeError / TypeError from inside the binding; a string where a flag is expected is not taken as True."""
    for kw, name in (({"default_prompt": b"x"}, "default_prompt"), ({"config": b"pi0_libero"}, "config"),
                     ({"config": None, "robot": b"libero"}, "robot"), ({"asset_id": 5}, "asset_id"),
                     ({"backend": np.array(["cpu", "cuda"])}, "backend"), ({"delta_actions": "false"}, "delta_actions"),
                     ({"quiet": "no"}, "quiet")):
        with pytest.raises(pi0.InputError, match=name):
            policy(ckpts, **kw)
    with policy(ckpts, delta_actions=np.bool_(False), quiet=1) as p:
        assert p.info["delta_actions"] is False
        obs = {**observation("libero", np.random.RandomState(21)), "prompt": "x"}
        with pytest.raises(pi0.InputError, match="warmup: prompt"):
            p.warmup(1, b"x")
        with pytest.raises(pi0.InputError, match="rtc.mode"):
            p.infer(obs, seed=1, rtc={"mode": np.array(["exact"])})
    tok = pi0.Tokenizer(TOKENIZER)
    with pytest.raises(pi0.InputError, match="prompt"):
        tok.prompt(b"x", 16)
    with pytest.raises(pi0.InputError, match="fmt"):
        tok.prompt("x", 16, ["pi0"])
    ok, why = pi0.backend_available(np.array(["cpu", "cuda"]))
    assert not ok and "backend" in why
