"""What crosses from Python into the C library: strings that C reads up to their first NUL, arguments of the wrong
type, and array views whose copy would be far larger than anything the library reads."""
import os
import re
import tracemalloc

import numpy as np
import pytest

import pi0
from conftest import A, H, TOKENIZER, observation, read_st
from test_model import FIX


def policy(ckpts, **kw):
    return pi0.Policy(ckpts["pi0"], **{"config": "pi0_libero", "tokenizer": TOKENIZER, "backend": "cpu", **kw})


def huge(shape, dtype=np.uint8):
    """A broadcast view of one element that describes `shape`; its copy would take the whole size."""
    return np.broadcast_to(np.zeros(1, dtype), shape)


class Peak:
    """The most memory Python and numpy allocated during the block (numpy reports its buffers to tracemalloc)."""

    def __enter__(self):
        tracemalloc.start()
        return self

    def __exit__(self, *exc):
        self.bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


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


def test_huge_views_refused_before_copy(ckpts):
    """A view that would need a copy is judged on its shape first, against the largest array the library reads
    (image sides of at most 8192, 3 x 8192 x 8192 elements): a needed key is refused with the reason and nothing is
    copied; a key no transform reads is ignored, as any other."""
    rng = np.random.RandomState(22)
    obs = {**observation("libero", rng), "prompt": "x"}
    noise = rng.randn(H, A).astype(np.float32)
    with policy(ckpts) as p:
        base = p.infer(obs, noise)["actions"]
        # a copy of 3 EiB: without the check first, numpy's MemoryError (or the machine's memory) ends the call
        with pytest.raises(pi0.InputError, match=r"'observation/image' was given as .*\[1073741824, 1073741824, 3\]"):
            p.infer({**obs, "observation/image": huge((2 ** 30, 2 ** 30, 3))}, noise)
        assert np.array_equal(p.infer({**obs, "depth": huge((2 ** 30, 2 ** 30, 3))}, noise)["actions"], base)
        with pytest.raises(pi0.InputError, match=r"noise: expected shape \[5, 32\]"):
            p.infer(obs, huge((2 ** 26, 2 ** 26, A), np.float32))
        # copies that would fit: one side over the bound (243 MB), more elements than any image (268 MB)
        for shape in ((9000, 9000, 3), (8192, 8192, 4)):
            with Peak() as m, pytest.raises(pi0.InputError, match="observation/image"):
                p.infer({**obs, "observation/image": huge(shape)}, noise)
            assert m.bytes < 16 << 20, (shape, m.bytes)
        # the measure sees a copy: a view within the bound is copied (48 MB) and read
        with Peak() as m:
            p.infer({**obs, "observation/image": huge((4000, 4000, 3))}, noise)
        assert m.bytes >= 4000 * 4000 * 3, m.bytes


def test_view_bound_is_the_librarys(ckpts):
    """The bound the binding applies to views is the one the library states for a contiguous array of that shape."""
    rng = np.random.RandomState(23)
    obs = {**observation("libero", rng), "prompt": "x"}
    tall = np.zeros((8193, 8, 6), np.uint8)
    with policy(ckpts) as p:
        with pytest.raises(pi0.InputError) as c:
            p.infer({**obs, "observation/image": np.ascontiguousarray(tall[:, :, :3])}, seed=1)
        with pytest.raises(pi0.InputError) as py:
            p.infer({**obs, "observation/image": tall[:, :, ::2]}, seed=1)
    library = re.search(r"sides must be 1\.\.(\d+)", str(c.value))
    binding = re.search(r"sides of at most (\d+)", str(py.value))
    assert library and binding and library.group(1) == binding.group(1), (str(c.value), str(py.value))


def test_model_views_refused_before_copy():
    t = read_st(os.path.join(FIX, "tiny-pi0", "b1.in.safetensors"))
    with pi0.Model(os.path.join(FIX, "tiny-pi0"), backend="cpu") as m:
        with pytest.raises(pi0.InputError, match="images: expected shape"):
            m.infer(huge((1, 3, 2 ** 28, 2 ** 28, 3), np.float32), t["state"], t["tokens"])
        with pytest.raises(pi0.InputError, match=r"noise: expected shape \[1, 5, 32\]"):
            m.infer(t["images"], t["state"], t["tokens"], noise=huge((2 ** 26, 2 ** 26, A), np.float32))
        with Peak() as peak, pytest.raises(pi0.InputError, match="max_token_len"):   # a copy of 400 MB
            m.infer(t["images"], t["state"], huge((1, 10 ** 8), np.int64))
        assert peak.bytes < 16 << 20, peak.bytes
    with pytest.raises(pi0.InputError, match="state: .* at most 4096"):
        pi0.Tokenizer(TOKENIZER).prompt("x", 16, "pi05", state=huge((2 ** 28, 2 ** 28), np.float64))
