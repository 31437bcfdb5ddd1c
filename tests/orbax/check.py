#!/usr/bin/env python3
"""Orbax checkpoints against build/pi0: check.py BUILD NAME (run by tests/orbax/run.sh inside a venv with
orbax-checkpoint). Every checkpoint here is written by orbax-checkpoint itself (tools/reference/orbax_checkpoint.py,
from the tiny fixtures); bad inputs are made by cutting or editing those files, or by writing into them with
tensorstore. Checks:
- `pi0 info` names the format and every dimension; `pi0 convert` gives exactly the tensors that the reference
  script gets by restoring the checkpoint with orbax and applying openpi's JAX -> PyTorch mapping (bit for bit);
- `pi0 infer` on the Orbax directory gives the actions of the converted directory, and of the source fixture
  whenever the stored dtype loses nothing (bit for bit);
- `pi0 run` (the policy) takes its horizon from --config, and equals the fixture's actions;
- pi0-FAST (a tiny checkpoint from `pi0 gen-checkpoint --variant tiny-pi0-fast`): info names it, convert gives the
  source's tensors, `pi0 infer` gives the source's output_tokens; a stray action-expert parameter is refused;
- training-run layouts (run dir, step dir, params dir), nnx "value" leaves, bf16 / f32 / mixed, OCDBT or not;
- bad input: a clear error naming the file or parameter, never a crash or a hang.
Prints one line per check and "orbax-NAME: N passed, M failed".
"""
import argparse
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile

import numpy as np
import tensorstore as ts

sys.dont_write_bytecode = True
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
import orbax_checkpoint as oc  # noqa: E402

BUILD, NAME = sys.argv[1], sys.argv[2]
PI0 = os.path.join(ROOT, BUILD, "pi0")
FIX = os.path.join(ROOT, "tests", "fixtures")
TOKENS = {"tiny-pi0": "12", "tiny-pi05": "16"}
counts = [0, 0]


def check(name, ok, detail=""):
    counts[0 if ok else 1] += 1
    print(f"{'PASS' if ok else 'FAIL'} {name}" + ("" if ok or not detail else f": {detail}"))
    return ok


def pi0(*args, timeout=120):
    """(exit code, stdout, stderr); a signal (crash) shows as a negative code, a hang as 'timeout'."""
    try:
        p = subprocess.run([PI0, *args], capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return "timeout", "", "timed out"


def write(src, out, **kw):
    a = argparse.Namespace(src=os.path.join(FIX, src), out=out, ocdbt=1, dtype="source", nnx_value=False,
                           train_run=None, expect=None)
    vars(a).update(kw)
    oc.write(a)


def tensors(path):
    """{name: (dtype, shape, bytes)} of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    h = json.loads(raw[8:8 + n])
    h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}


def save_st(path, arrays):
    names = {np.dtype(np.uint8): "U8", np.dtype(np.float32): "F32", np.dtype(np.bool_): "BOOL", np.dtype(np.int32): "I32"}
    header, off, blobs = {}, 0, []
    for k, a in arrays.items():
        header[k] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        blobs.append(a.tobytes())
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))


def infer(ckpt, fixture, out, *flags):
    rc, _, err = pi0("infer", "--checkpoint", ckpt, "--inputs", os.path.join(FIX, fixture, "b2.in.safetensors"),
                     "--output", out, *flags)
    return rc == 0 and tensors(out)["actions"], err.strip()[-300:]


def model_case(tmp, label, fixture, lossless, **kw):
    d, expect, conv = os.path.join(tmp, label), os.path.join(tmp, label + ".expect.safetensors"), os.path.join(tmp, label + ".conv")
    write(fixture, d, expect=expect, **kw)
    ckpt = d if kw.get("train_run") is None else os.path.join(d, str(kw["train_run"]))
    rc, out, err = pi0("info", "--checkpoint", d)
    fmt = "orbax-ocdbt" if kw.get("ocdbt", 1) else "orbax-zarr"
    want = [f"format: {fmt}", f"model: {'pi05' if fixture.endswith('05') else 'pi0'}", "image_size: 56", "vocab_size: 512",
            "vision: width 32, depth 2, mlp_dim 48, num_heads 4, patch_size 14",
            "paligemma: width 64, depth 2, mlp_dim 128, num_heads 4, num_kv_heads 1, head_dim 16",
            "action_expert: width 32, depth 2, mlp_dim 64, num_heads 4, num_kv_heads 1, head_dim 16"]
    check(f"{label}: info names {fmt} and every dim", rc == 0 and all(w in out for w in want), f"rc {rc} {out}{err}")
    L = TOKENS[fixture]
    rc, _, err = pi0("convert", "--checkpoint", d, "--out", conv, "--action-horizon", "5", "--max-token-len", L)
    got = rc == 0 and tensors(os.path.join(conv, "model.safetensors"))
    want_t = tensors(expect)
    diff = sorted(k for k in set(want_t) | set(got or {}) if not got or got.get(k) != want_t.get(k))
    check(f"{label}: convert == orbax restore + openpi mapping ({len(want_t)} tensors, bit for bit)", got and not diff,
          f"rc {rc} {err[-200:]} differing: {diff[:4]}")
    check(f"{label}: convert copies assets", os.path.isfile(os.path.join(conv, "assets", "tiny", "norm_stats.json")))
    a_ox, e1 = infer(d, fixture, os.path.join(tmp, label + ".a_ox"), "--action-horizon", "5", "--max-token-len", L)
    a_cv, e2 = infer(conv, fixture, os.path.join(tmp, label + ".a_cv"))
    a_in, e4 = infer(d, fixture, os.path.join(tmp, label + ".a_in"))
    check(f"{label}: without flags, pi0 infer sizes the model from the inputs' noise and tokens", a_in and a_in == a_ox, e4)
    check(f"{label}: actions of the Orbax dir == of its conversion", a_ox and a_ox == a_cv, e1 + e2)
    if lossless:
        a_fx, e3 = infer(os.path.join(FIX, fixture), fixture, os.path.join(tmp, label + ".a_fx"))
        check(f"{label}: actions == the source fixture's (bit for bit)", a_ox and a_ox == a_fx, e3)
    return d, ckpt


def policy_checks(tmp, d0, d5):
    tok = os.path.join(ROOT, BUILD, "tests", "tok.model")
    rng = np.random.default_rng(5)
    obs = os.path.join(tmp, "obs.safetensors")
    save_st(obs, {"observation/image": rng.integers(0, 256, (60, 80, 3), dtype=np.uint8),
                  "observation/wrist_image": rng.integers(0, 256, (56, 56, 3), dtype=np.uint8),
                  "observation/state": rng.standard_normal(8).astype(np.float32)})
    for fixture, d, cfg, H in (("tiny-pi0", d0, "pi0_libero", 50), ("tiny-pi05", d5, "pi05_libero", 10)):
        base = ["run", "--config", cfg, "--asset-id", "tiny", "--tokenizer", tok, "--obs", obs, "--prompt", "pick it up",
                "--seed", "3", "--json"]
        r1 = pi0(*base, "--checkpoint", d, "--action-horizon", "5", "--max-token-len", TOKENS[fixture])
        r2 = pi0(*base, "--checkpoint", os.path.join(FIX, fixture))
        same = r1[0] == 0 and r2[0] == 0 and json.loads(r1[1])["actions"] == json.loads(r2[1])["actions"]
        check(f"pi0 run {cfg} on Orbax == on the fixture", same, (r1[2] + r2[2])[-300:])
        r3 = pi0(*base, "--checkpoint", d)
        rows = r3[0] == 0 and len(json.loads(r3[1])["actions"])
        check(f"pi0 run {cfg} on Orbax: horizon {H} from the config", rows == H, f"{rows} rows; {r3[2][-200:]}")


def fast_tokens(ckpt, inputs, out):
    """(output_tokens as (dtype, shape, bytes), stderr's tail) of 8 decoding steps, sampled at temperature 1, seed 3:
    greedy decoding of a tiny random model repeats the last prompt token whatever the weights (the tied embedding reads
    back a residual stream that stays near its input), while sampling reads every logit."""
    rc, _, err = pi0("infer", "--checkpoint", ckpt, "--inputs", inputs, "--output", out, "--max-decoding-steps", "8",
                     "--temperature", "1", "--seed", "3")
    return rc == 0 and tensors(out).get("output_tokens"), err.strip()[-300:]


def fast_case(tmp, label, src, inputs, want, **kw):
    """A pi0-FAST Orbax checkpoint of `src` (the engine's safetensors) against `src` itself, whose tokens are `want`."""
    d, expect, conv = (os.path.join(tmp, label + sfx) for sfx in ("", ".expect.safetensors", ".conv"))
    write(src, d, expect=expect, **kw)
    rc, out, err = pi0("info", "--checkpoint", d)
    fmt = "orbax-ocdbt" if kw.get("ocdbt", 1) else "orbax-zarr"
    want_info = [f"format: {fmt}", "model: pi0_fast", "action_expert: none", "vision: width 32, depth 2, mlp_dim 48, num_heads 4",
                 "paligemma: width 64, depth 2, mlp_dim 128, num_heads 4, num_kv_heads 1, head_dim 16"]
    check(f"{label}: info names {fmt}, pi0_fast and every dim", rc == 0 and all(w in out for w in want_info),
          f"rc {rc} {out}{err}")
    rc, _, err = pi0("convert", "--checkpoint", d, "--out", conv)
    got = rc == 0 and tensors(os.path.join(conv, "model.safetensors"))
    src_t = oc.source_tensors(src)                      # the tied lm_head under the embedding's name
    same = lambda k: (k in got and k in src_t and got[k][1] == list(src_t[k].shape) and  # noqa: E731
                      got[k][2] == src_t[k].astype(oc.ST_DTYPES[got[k][0]]).tobytes())
    diff = sorted(k for k in set(src_t) | set(got or {}) if not got or not same(k))
    check(f"{label}: convert == the source's {len(src_t)} tensors (bit for bit) == orbax restore + openpi mapping",
          got and not diff and got == tensors(expect), f"rc {rc} {err[-200:]} differing: {diff[:4]}")
    t_ox, e1 = fast_tokens(d, inputs, os.path.join(tmp, label + ".tok"))
    t_cv, e2 = fast_tokens(conv, inputs, os.path.join(tmp, label + ".conv.tok"))
    check(f"{label}: output_tokens == the source's == of its conversion", want and t_ox == want and t_cv == want, e1 + e2)
    return d


def fast_checks(tmp):
    """pi0-FAST: PaliGemma alone. The stray-parameter checks read only the engine, so the pinned venv runs them."""
    src, inputs = os.path.join(tmp, "tiny-pi0-fast"), os.path.join(tmp, "fast.in.safetensors")
    rc, _, err = pi0("gen-checkpoint", "--variant", "tiny-pi0-fast", "--seed", "7", src)
    if not check("pi0 gen-checkpoint --variant tiny-pi0-fast", rc == 0, err[-300:]):
        return
    rng = np.random.default_rng(11)
    tm = np.arange(12) < np.array([[8], [5]])           # prompts of 8 and 5 tokens
    ar = np.zeros((2, 12), np.int32)
    ar[0, 6:8] = 1                                       # a causal tail in sample 0, as openpi marks its postfix
    save_st(inputs, {"images": rng.uniform(-1, 1, (2, 3, 56, 56, 3)).astype(np.float32),
                     "image_masks": np.array([[1, 1, 1], [1, 0, 1]], bool),
                     "tokens": np.where(tm, rng.integers(2, 512, (2, 12)), 0).astype(np.int32), "token_mask": tm,
                     "token_ar_mask": ar})
    want, err = fast_tokens(src, inputs, os.path.join(tmp, "fast.tok"))
    n = want and len(set(np.frombuffer(want[2], np.int32).tolist()))
    check(f"tiny-pi0-fast (safetensors): output_tokens {want and want[1]}, {n} distinct", want and n > 4, err)
    fast_case(tmp, "pi0-fast-ocdbt-source", src, inputs, want)
    if NAME != "pinned":
        return
    z = fast_case(tmp, "pi0-fast-zarr-f32-nnx", src, inputs, want, ocdbt=0, dtype="f32", nnx_value=True)
    # one parameter of the action expert makes it a pi0 / pi0.5 checkpoint, which then lacks the rest of the expert
    for leaf, shape, needles in (
            ("action_in_proj/kernel", (32, 32), ("missing parameter 'PaliGemma/llm/layers/attn/q_einsum_1/w'",
                                                 "'action_in_proj/kernel' is present")),
            ("PaliGemma/llm/layers/attn/q_einsum_1/w", (2, 4, 32, 16),
             ("missing parameter 'PaliGemma/llm/layers/attn/kv_einsum_1/w'", "'PaliGemma/llm/layers/attn/q_einsum_1/w' is present")),
            ("state_proj/kernel", (32, 32), ("'state_proj/kernel' but no action expert",))):
        d = fresh(z, tmp, "fast-" + leaf.replace("/", "."))
        add_leaf(d, leaf, np.ones(shape, np.float32))
        expect_error(f"pi0-FAST with a stray '{leaf}'", d, *needles)


def expect_error(label, ckpt, *needles, rc_want=1, args=()):
    rc, out, err = pi0("info", "--checkpoint", ckpt, *args, timeout=20)
    ok = rc == rc_want and all(n in err for n in needles)
    return check(f"bad input: {label}", ok, f"rc {rc}, stderr: {err.strip()[-400:]}")


def fresh(base, tmp, name):
    d = os.path.join(tmp, "bad-" + name)
    shutil.copytree(base, d)
    return d


def add_leaf(d, path, value, nnx=True, chunks=None, ocdbt=False):
    """A new array written by tensorstore (into the OCDBT database when ocdbt) and registered in _METADATA, as Orbax
    would have saved it (an nnx leaf when nnx)."""
    keys = ["params"] + path.split("/") + (["value"] if nnx else [])
    params = os.path.join(d, "params")
    kv = ({"driver": "ocdbt", "base": "file://" + params + "/", "path": ".".join(keys) + "/"} if ocdbt else
          {"driver": "file", "path": os.path.join(params, ".".join(keys))})
    arr = ts.open({"driver": "zarr", "kvstore": kv,
                   "metadata": {"shape": list(value.shape), "chunks": list(chunks or value.shape), "dtype": "<f4",
                                "compressor": {"id": "zstd", "level": 1}}}, create=True).result()
    arr.write(value).result()
    mp = os.path.join(d, "params", "_METADATA")
    meta = json.load(open(mp))
    meta["tree_metadata"][str(tuple(keys))] = {"key_metadata": [{"key": k, "key_type": 2} for k in keys],
                                               "value_metadata": {"value_type": "jax.Array", "skip_deserialize": False,
                                                                  "write_shape": list(value.shape)}}
    json.dump(meta, open(mp, "w"))


def zstd_raw_frame(data, window_log):
    """A zstd frame (RFC 8878) of raw blocks holding data, with no content size and a declared window of
    2^window_log: what a streaming compressor that does not know the input's size may write."""
    out = bytearray(struct.pack("<I", 0xFD2FB528)) + bytes([0x00, (window_log - 10) << 3])
    step = min(128 << 10, 1 << window_log)
    for i in range(0, len(data), step):
        block = data[i:i + step]
        last = i + step >= len(data)
        out += struct.pack("<I", len(block) << 3 | int(last))[:3] + block
    return bytes(out)


def bad_inputs(tmp, ocd, zarr):
    p = os.path.join(ocd, "params")
    d = fresh(ocd, tmp, "manifest")
    with open(os.path.join(d, "params", "manifest.ocdbt"), "r+b") as f:
        f.truncate(20)
    expect_error("truncated manifest", d, "manifest.ocdbt", "truncated")
    root = [os.path.join("params", "d", f) for f in os.listdir(os.path.join(p, "d"))][0]
    d = fresh(ocd, tmp, "node")
    os.truncate(os.path.join(d, root), os.path.getsize(os.path.join(d, root)) // 2)
    expect_error("truncated B+tree node file", d, "B+tree node", "past the end of the file")
    d = fresh(ocd, tmp, "crc")
    with open(os.path.join(d, root), "r+b") as f:
        f.seek(40)
        b = f.read(1)
        f.seek(40)
        f.write(bytes([b[0] ^ 0x10]))
    expect_error("a flipped bit in a B+tree node", d, "B+tree node", "CRC-32C")
    data = os.path.join("params", "ocdbt.process_0", "d")
    big = max(os.listdir(os.path.join(p, "ocdbt.process_0", "d")), key=lambda f: os.path.getsize(os.path.join(p, "ocdbt.process_0", "d", f)))
    d = fresh(ocd, tmp, "data")
    os.truncate(os.path.join(d, data, big), os.path.getsize(os.path.join(d, data, big)) // 2)
    expect_error("truncated data file (a reference past its end)", d, "ocdbt.process_0/d/" + big, "past the end of the file")
    d = fresh(ocd, tmp, "missing-data")
    os.remove(os.path.join(d, data, big))
    expect_error("missing data file", d, "ocdbt.process_0/d/" + big, "missing")
    d = fresh(ocd, tmp, "fifo")
    os.remove(os.path.join(d, "params", "manifest.ocdbt"))
    os.mkfifo(os.path.join(d, "params", "manifest.ocdbt"))
    expect_error("a FIFO as manifest.ocdbt (no hang)", d, "manifest.ocdbt", "not a regular file")
    d = fresh(ocd, tmp, "metadata")
    open(os.path.join(d, "params", "_METADATA"), "w").write('{"tree_metadata": {')
    expect_error("invalid _METADATA", d, "_METADATA", "invalid JSON")
    zp = lambda d, leaf: os.path.join(d, "params", "params." + leaf.replace("/", ".") + ".value")  # noqa: E731 (nnx)
    d = fresh(zarr, tmp, "codec")
    za = os.path.join(zp(d, "PaliGemma/llm/layers/mlp/linear"), ".zarray")
    m = json.load(open(za))
    json.dump(dict(m, compressor={"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1}), open(za, "w"))
    expect_error("unknown codec", d, "params.PaliGemma.llm.layers.mlp.linear.value/.zarray", "compressor 'blosc'")
    d = fresh(zarr, tmp, "shape")
    za = os.path.join(zp(d, "PaliGemma/llm/layers/mlp/linear"), ".zarray")
    m = json.load(open(za))
    json.dump(dict(m, shape=[2, 128, 65], chunks=[2, 128, 65]), open(za, "w"))
    expect_error("a shape that contradicts the others", d, "parameter 'PaliGemma/llm/layers/mlp/linear'",
                 "expected (2, 128, 64)", "found (2, 128, 65)")
    # an empty array (one dimension 0) whose other sizes multiply past int64: refused by its dimensions, before any
    # product (once undefined behaviour; the zarr reader bounds only the element count, 0 here)
    d = fresh(zarr, tmp, "empty-huge")
    za = os.path.join(zp(d, "PaliGemma/img/Transformer/encoderblock/MultiHeadDotProductAttention_0/query/kernel"), ".zarray")
    m = json.load(open(za))
    json.dump(dict(m, shape=[0, 1, 2 ** 40, 2 ** 40], chunks=[1, 1, 1, 1]), open(za, "w"))
    expect_error("an empty array of sizes 0 x 1 x 2^40 x 2^40", d,
                 "parameter 'PaliGemma/img/Transformer/encoderblock/MultiHeadDotProductAttention_0/query/kernel': "
                 "dimension 0 is 0 (expected 1..16777216)")
    d = fresh(zarr, tmp, "chunk")
    ch = os.path.join(zp(d, "PaliGemma/llm/layers/mlp/linear"), "0.0.0")
    os.truncate(ch, os.path.getsize(ch) // 2)
    expect_error("truncated chunk", d, "params.PaliGemma.llm.layers.mlp.linear.value/0.0.0", "truncated")
    os.remove(ch)
    expect_error("missing chunk", d, "params.PaliGemma.llm.layers.mlp.linear.value/0.0.0", "missing")
    # zstd windows: a chunk rewritten as a frame of raw blocks (the same bytes, no content size) that declares a
    # window of 2^27 loads, as a high compression level's frame from a writer that does not pass the size would;
    # one that declares 2^28 is refused with zstd's limit named
    for wl, name in ((27, "window-27"), (28, "window-28")):
        d = fresh(zarr, tmp, name)
        adir = zp(d, "PaliGemma/llm/layers/mlp/linear")
        m = json.load(open(os.path.join(adir, ".zarray")))
        check(f"{name}: the chunk is the whole array", m["chunks"] == m["shape"], str(m))
        data = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": adir}}).result().read().result().tobytes()
        with open(os.path.join(adir, "0.0.0"), "wb") as f:
            f.write(zstd_raw_frame(data, wl))
        if wl == 27:
            rc, _, err = pi0("info", "--checkpoint", d)
            check(f"zstd frame with a 2^{wl} window for a {len(data)}-byte chunk loads", rc == 0, f"rc {rc} {err[-300:]}")
        else:
            expect_error(f"zstd frame asking for a 2^{wl} window", d, "params.PaliGemma.llm.layers.mlp.linear.value/0.0.0",
                         "asks for a window larger than 134217728 bytes (the most this reader allows), for a chunk of 65536 bytes")
    d = fresh(zarr, tmp, "array")
    shutil.rmtree(zp(d, "PaliGemma/llm/final_norm/scale"))
    expect_error("array directory missing", d, "params.PaliGemma.llm.final_norm.scale.value/.zarray", "missing")
    d = fresh(zarr, tmp, "leaf")
    shutil.rmtree(zp(d, "PaliGemma/llm/final_norm/scale"))
    mp = os.path.join(d, "params", "_METADATA")
    meta = json.load(open(mp))
    meta["tree_metadata"] = {k: v for k, v in meta["tree_metadata"].items() if "'final_norm', 'scale'" not in k}
    json.dump(meta, open(mp, "w"))
    expect_error("missing parameter", d, "missing parameter 'PaliGemma/llm/final_norm/scale'")
    d = fresh(zarr, tmp, "nan")
    arr = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": zp(d, "PaliGemma/llm/layers/mlp/linear")}}).result()
    arr[1, 3, 5] = np.float32("nan")
    expect_error("a NaN weight", d, "parameter 'PaliGemma/llm/layers/mlp/linear' layer 1", "non-finite value at flat index 197")
    d = fresh(zarr, tmp, "extra")
    add_leaf(d, "extra_head/kernel", np.ones((4, 4), np.float32))
    rc, _, err = pi0("info", "--checkpoint", d)
    check("extra parameter: loads with a warning naming it", rc == 0 and "1 parameter(s) not used by the model ignored "
          "(first: 'extra_head/kernel')" in err, f"rc {rc} {err[-300:]}")
    # 30000 more keys in the OCDBT database (an unused array of 30000 chunks): more than the largest real checkpoint
    # has (a few thousand), inside the reader's bounds (docs/checkpoints.md, OCDBT)
    d = fresh(ocd, tmp, "many-keys")
    add_leaf(d, "extra_head/kernel", np.arange(120000, dtype=np.float32).reshape(30000, 4), nnx=False, chunks=(1, 4),
             ocdbt=True)
    rc, _, err = pi0("info", "--checkpoint", d)
    check("an OCDBT tree of 30000 more keys loads", rc == 0 and "(first: 'extra_head/kernel')" in err, f"rc {rc} {err[-300:]}")
    d = fresh(zarr, tmp, "lora")
    add_leaf(d, "PaliGemma/llm/layers/attn/q_einsum/lora_a", np.ones((2, 4, 64, 16), np.float32))
    expect_error("LoRA adapters refused", d, "LoRA adapter parameters", "q_einsum/lora_a")
    expect_error("no checkpoint at all", os.path.join(tmp, "nothing-here"), "no checkpoint found")


def main():
    tmp = tempfile.mkdtemp(prefix=f"pi0-orbax-{NAME}-")
    try:
        d0, _ = model_case(tmp, "pi0-ocdbt-source", "tiny-pi0", True)
        d5, _ = model_case(tmp, "pi05-ocdbt-source", "tiny-pi05", True)
        model_case(tmp, "pi05-zarr-mixed-nnx", "tiny-pi05", False, ocdbt=0, dtype="mixed", nnx_value=True)
        fast_checks(tmp)
        if NAME != "pinned":
            return
        zarr, _ = model_case(tmp, "pi0-zarr-f32-nnx", "tiny-pi0", True, ocdbt=0, dtype="f32", nnx_value=True)
        model_case(tmp, "pi05-ocdbt-bf16", "tiny-pi05", False, dtype="bf16")
        run, step = model_case(tmp, "pi0-train-run", "tiny-pi0", True, train_run=3, nnx_value=True)
        for label, where in (("step dir", step), ("params dir", os.path.join(step, "params"))):
            rc, out, err = pi0("info", "--checkpoint", where)
            check(f"train run: --checkpoint at the {label}", rc == 0 and "format: orbax-ocdbt" in out, err[-200:])
        policy_checks(tmp, d0, d5)
        bad_inputs(tmp, d0, zarr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"orbax-{NAME}: {counts[0]} passed, {counts[1]} failed")


if __name__ == "__main__":
    main()
    sys.exit(1 if counts[1] else 0)
