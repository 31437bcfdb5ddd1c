"""pi0.Model against `pi0 infer` on the golden fixtures' inputs (bit for bit), RTC, and refused inputs."""
import os

import numpy as np
import pytest

import pi0
from conftest import ROOT, read_st, run_cli, write_st

FIX = os.path.join(ROOT, "tests", "fixtures")


def cli_infer(tmp_path, ckpt, inputs, *extra):
    out = tmp_path / "out.safetensors"
    run_cli("infer", "--checkpoint", ckpt, "--inputs", inputs, "--output", str(out), "--backend", "cpu", *extra)
    return read_st(out)["actions"]


@pytest.mark.parametrize("model,case", [("tiny-pi0", "b1"), ("tiny-pi0", "b2"), ("tiny-pi05", "b2"),
                                        ("tiny-pi05", "b1-masked")])
def test_model_equals_cli(tmp_path, model, case):
    ckpt, inputs = os.path.join(FIX, model), os.path.join(FIX, model, case + ".in.safetensors")
    t = read_st(inputs)
    B = t["images"].shape[0]
    with pi0.Model(ckpt, backend="cpu", max_batch=2) as m:
        got = m.infer(t["images"], t["state"], t["tokens"], t["token_mask"], t["image_masks"], t["noise"])
        assert m.timing()["total_ms"] > 0
    assert got.dtype == np.float32 and got.shape == (B, 5, 32)
    assert np.array_equal(got, cli_infer(tmp_path, ckpt, inputs))


def test_model_rtc_equals_cli(tmp_path):
    ckpt = os.path.join(FIX, "tiny-pi0")
    t = dict(read_st(os.path.join(FIX, "tiny-pi0", "b2.in.safetensors")))
    prev = np.random.RandomState(1).randn(2, 5, 32).astype(np.float32)
    write_st(tmp_path / "in.safetensors", {**t, "rtc_prev": prev})
    want = cli_infer(tmp_path, ckpt, str(tmp_path / "in.safetensors"), "--rtc", "lerobot", "--rtc-delay", "1",
                     "--rtc-horizon", "4", "--rtc-leftover", "4", "--rtc-schedule", "exp", "--rtc-max-weight", "3")
    w = pi0.Model.prefix_weights(5, 1, 4, 4, "exp")
    with pi0.Model(ckpt, backend="cpu", max_batch=2) as m:
        got = m.infer(t["images"], t["state"], t["tokens"], t["token_mask"], t["image_masks"], t["noise"],
                      rtc={"prev": prev, "weights": np.stack([w, w]), "max_weight": 3.0})
        plain = m.infer(t["images"], t["state"], t["tokens"], t["token_mask"], t["image_masks"], t["noise"])
    assert np.array_equal(got, want) and not np.array_equal(got, plain)


def test_model_rtc_exact_equals_cli(tmp_path):
    """The exact form (the expert's transpose): the CLI's --rtc exact bit for bit, and not LeRobot's form."""
    ckpt = os.path.join(FIX, "tiny-pi05")
    t = dict(read_st(os.path.join(FIX, "tiny-pi05", "b2.in.safetensors")))
    prev = np.random.RandomState(2).randn(2, 5, 32).astype(np.float32)
    write_st(tmp_path / "in.safetensors", {**t, "rtc_prev": prev})
    want = cli_infer(tmp_path, ckpt, str(tmp_path / "in.safetensors"), "--rtc", "exact", "--rtc-delay", "2",
                     "--rtc-horizon", "4", "--rtc-schedule", "linear", "--rtc-max-weight", "10")
    w = pi0.Model.prefix_weights(5, 2, 4, 5, "linear")
    rtc = {"prev": prev, "weights": np.stack([w, w]), "max_weight": 10.0}
    with pi0.Model(ckpt, backend="cpu", max_batch=2) as m:
        got = m.infer(t["images"], t["state"], t["tokens"], t["token_mask"], t["image_masks"], t["noise"],
                      rtc={**rtc, "mode": "exact"})
        lerobot = m.infer(t["images"], t["state"], t["tokens"], t["token_mask"], t["image_masks"], t["noise"], rtc=rtc)
        with pytest.raises(pi0.InputError, match="mode"):
            m.infer(t["images"], t["state"], t["tokens"], t["token_mask"], t["image_masks"], t["noise"],
                    rtc={**rtc, "mode": "vjp"})
    assert np.array_equal(got, want) and not np.array_equal(got, lerobot)


def test_model_refuses(tmp_path):
    t = read_st(os.path.join(FIX, "tiny-pi0", "b2.in.safetensors"))
    with pi0.Model(os.path.join(FIX, "tiny-pi0"), backend="cpu", max_batch=1) as m:
        assert m.info["n_cameras"] == 3 and m.info["image_size"] == 56 and m.backend == "cpu"
        with pytest.raises(pi0.InputError, match="1..1"):
            m.infer(t["images"], t["state"], t["tokens"], t["token_mask"])
        with pytest.raises(pi0.InputError, match=r"images: expected shape \[B, 3, 56, 56, 3\]"):
            m.infer(t["images"][:1, :2], t["state"][:1], t["tokens"][:1])
        with pytest.raises(pi0.InputError, match="tokens: expected integers"):
            m.infer(t["images"][:1], t["state"][:1], t["tokens"][:1].astype(np.float32))
        with pytest.raises(pi0.InputError, match=r"state: expected shape \[1, 32\]"):
            m.infer(t["images"][:1], t["state"][:1, :8], t["tokens"][:1])
        with pytest.raises(pi0.InputError, match=r"noise\[0\] is not finite"):
            m.infer(t["images"][:1], t["state"][:1], t["tokens"][:1], noise=np.full((1, 5, 32), np.inf))
        with pytest.raises(pi0.InputError):   # longer than the model's prompt length: the library refuses it
            m.infer(t["images"][:1], t["state"][:1], np.zeros((1, 200), np.int32))
        ok = m.infer(t["images"][:1], t["state"][:1], t["tokens"][:1], seed=3)
        assert np.isfinite(ok).all()
    with pytest.raises(pi0.Error, match="nowhere"):
        pi0.Model(tmp_path / "nowhere", backend="cpu")


def test_model_int8_equals_cli(tmp_path):
    """precision / quant_stages reach the library: the same actions as `pi0 infer --precision int8`, bit for bit, and
    not bf16's; the model's info says what runs in int8."""
    ckpt, inputs = os.path.join(FIX, "tiny-pi05"), os.path.join(FIX, "tiny-pi05", "b2.in.safetensors")
    t = read_st(inputs)
    args = (t["images"], t["state"], t["tokens"], t["token_mask"], t["image_masks"], t["noise"])
    with pi0.Model(ckpt, backend="cpu", max_batch=2, precision="int8", quant_stages="prefix,expert") as m:
        got = m.infer(*args)
        info = m.info
    assert info["precision"] == "int8" and info["quant_stages"] == ["prefix", "expert"]
    assert np.array_equal(got, cli_infer(tmp_path, ckpt, inputs, "--precision", "int8", "--quant-stages", "prefix,expert"))
    with pi0.Model(ckpt, backend="cpu", max_batch=2) as m:
        bf = m.infer(*args)
        assert m.info["precision"] == "bf16"
    assert not np.array_equal(got, bf)


def test_model_fp8_equals_cli(tmp_path):
    """precision="fp8" reaches the library: without quant_stages it runs vision and prefix (its default), the same actions
    as `pi0 infer --precision fp8` bit for bit, and not int8's of the same stages."""
    ckpt, inputs = os.path.join(FIX, "tiny-pi0"), os.path.join(FIX, "tiny-pi0", "b2.in.safetensors")
    t = read_st(inputs)
    args = (t["images"], t["state"], t["tokens"], t["token_mask"], t["image_masks"], t["noise"])
    with pi0.Model(ckpt, backend="cpu", max_batch=2, precision="fp8") as m:
        got = m.infer(*args)
        info = m.info
    assert info["precision"] == "fp8" and info["quant_stages"] == ["vision", "prefix"]
    assert np.array_equal(got, cli_infer(tmp_path, ckpt, inputs, "--precision", "fp8"))
    with pi0.Model(ckpt, backend="cpu", max_batch=2, precision="int8", quant_stages="vision,prefix") as m:
        assert not np.array_equal(got, m.infer(*args))


@pytest.mark.parametrize("kw,msg", [({"precision": "fp4"}, "precision"), ({"quant_stages": "prefix"}, "needs"),
                                    ({"precision": "int8", "quant_stages": ["vision", "lm"]}, "quant_stages"),
                                    ({"precision": "int8", "quant_stages": []}, "at least one"),
                                    ({"precision": "fp8", "quant_stages": "prefix,expert"}, "expert")])
def test_model_precision_refused(kw, msg):
    with pytest.raises(pi0.InputError, match=msg):
        pi0.Model(os.path.join(FIX, "tiny-pi0"), backend="cpu", **kw)
