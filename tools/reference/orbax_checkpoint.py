#!/usr/bin/env python3
"""Write and check real Orbax checkpoints of openpi's pi0 / pi0.5 / pi0-FAST JAX params whose weights are known.

`write` inverts openpi's examples/convert_jax_model_to_pytorch.py: from a checkpoint in openpi's PyTorch layout
(model.safetensors + config.json) it rebuilds openpi's JAX params tree (scanned layer stacks, einsum layouts, the
`_1` action-expert copies) that the converter turns back into exactly the source tensors, and saves it with
orbax-checkpoint as openpi's training code does (CheckpointManager, item "params" = {"params": tree}).
A source without the action expert (no gemma_expert tensors, no action_in_proj) is pi0-FAST: openpi's Pi0FAST
params are PaliGemma/img and PaliGemma/llm alone, under the names of pi0's PaliGemma part (gemma_fast.py names its
parameters as gemma.py names the first expert's), and the mapping back is the converter's PaliGemma part.
`--expect FILE` restores what was saved as openpi's restore_params does, applies this script's own forward mapping
(written from that converter) and writes the result (PyTorch names, dtypes as saved) to a safetensors file that a
native reader of the Orbax files must reproduce bit for bit. `verify` restores the same way and compares with SRC.

  orbax_checkpoint.py write SRC OUT [--ocdbt {1,0}] [--dtype {bf16,f32,mixed,source}] [--nnx-value]
                                    [--train-run STEP] [--expect FILE]
  orbax_checkpoint.py verify SRC OUT
OUT: the checkpoint dir a user downloads (params/, _CHECKPOINT_METADATA, assets/<id>/); with --train-run STEP a
training run dir holding OUT/STEP/{params,train_state,assets} (verify takes either dir; a run dir: newest step).
--dtype: all bf16 / all f32 / mixed (kernels, einsums, embeddings bf16; norm scales, biases f32) / as the source.
--nnx-value: every leaf under a trailing "value" key, as a saved nnx.State has. Imports only numpy, ml_dtypes,
jax, orbax-checkpoint (+ tensorstore) and the standard library.
"""
import argparse
import itertools
import json
import logging
import os
import shutil
import struct
import sys
import tempfile
import time

import jax
import ml_dtypes
import numpy as np
import orbax.checkpoint as ocp

sys.dont_write_bytecode = True
jax.config.update("jax_platforms", "cpu")

BF16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)
ST_DTYPES = {"BF16": BF16, "F32": F32}
V = "paligemma_with_expert.paligemma.model.vision_tower.vision_model"
LM = "paligemma_with_expert.paligemma.model.language_model"
EX = "paligemma_with_expert.gemma_expert.model"
PROJ = "paligemma_with_expert.paligemma.model.multi_modal_projector.linear"
EMBED = LM + ".embed_tokens.weight"
LM_HEAD = "paligemma_with_expert.paligemma.lm_head.weight"            # tied to EMBED, may be stored instead
ORPHAN = "paligemma_with_expert.gemma_expert.lm_head.weight"          # never filled by the converter
ADARMS = EX + ".layers.0.input_layernorm.dense.weight"                # present iff pi0.5
VISION_HEADS = 16                                                     # SigLIP So400m/14
GEMMA_HEAD_DIM = {"gemma_2b": 256, "gemma_300m": 256, "dummy": 16}    # if config.json has no explicit block
BF16_LEAVES = ("kernel", "w", "gating_einsum", "linear", "input_embedding", "pos_embedding")   # --dtype mixed
IMG, LLM, LAY = "PaliGemma/img/", "PaliGemma/llm/", "PaliGemma/llm/layers/"
ENC = IMG + "Transformer/encoderblock/"
MHA = ENC + "MultiHeadDotProductAttention_0/"
NORMS = (("pre_attention_norm", "input_layernorm"), ("pre_ffw_norm", "post_attention_layernorm"))
HEADS = {True: ("action_in_proj", "action_out_proj", "time_mlp_in", "time_mlp_out"),      # by pi05
         False: ("action_in_proj", "action_out_proj", "state_proj", "action_time_mlp_in", "action_time_mlp_out")}


# ------------------------------------------------------------------------------------------------ safetensors
def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", None) or {}
    out = {}
    for name, info in header.items():
        dt = ST_DTYPES[info["dtype"]]
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(raw, dt, (e - b) // dt.itemsize, 8 + n + b).reshape(info["shape"])
    return out, meta


def write_safetensors(path, tensors):
    """Header keys sorted; data ordered by (dtype size descending, name) as the safetensors library does."""
    order = sorted(tensors, key=lambda k: (-tensors[k].dtype.itemsize, k))
    names, header, off = {v: k for k, v in ST_DTYPES.items()}, {}, 0
    for k in order:
        a = tensors[k]
        header[k] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    hb = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for k in order:
            f.write(np.ascontiguousarray(tensors[k]).tobytes())


def source_tensors(src_dir):
    """The source's tensors by PyTorch name: embedding under EMBED, tied duplicate and orphan lm_head dropped."""
    t, meta = read_safetensors(os.path.join(src_dir, "model.safetensors"))
    if EMBED not in t:
        t[EMBED] = t.pop(meta.get(EMBED, LM_HEAD))
    t.pop(LM_HEAD, None)
    t.pop(ORPHAN, None)
    return t


# ------------------------------------------------------------------------------ PyTorch -> JAX (the inverse)
def to_jax(src, cfg):
    """Returns ({'/'-path: float32 array}, {'/'-path: dtype of its source tensors}), openpi's JAX params tree."""
    left, flat, src_dtype, seen = dict(src), {}, {}, []

    def g(name):                      # a source tensor as float32 (exact), remembering its dtype
        seen.append(left[name].dtype)
        return left.pop(name).astype(F32)

    def w(prefix, module):
        return g(prefix + module + ".weight")

    def put(path, arr):               # `seen` now holds the dtypes of the tensors `arr` was made from
        flat[path] = arr
        src_dtype[path] = BF16 if all(d == BF16 for d in seen) else F32
        seen.clear()

    def stack(fmt, f):                # f(prefix of layer i) for every layer i, stacked on a new axis 0
        n = next(i for i in itertools.count() if not any(k.startswith(fmt.format(i)) for k in src))
        return np.stack([f(fmt.format(i)) for i in range(n)])

    nh = (cfg.get("vision") or {}).get("num_heads", VISION_HEADS)
    D = src[V + ".post_layernorm.weight"].shape[0]
    put(IMG + "embedding/kernel", g(V + ".embeddings.patch_embedding.weight").transpose(2, 3, 1, 0))   # HWIO
    put(IMG + "embedding/bias", g(V + ".embeddings.patch_embedding.bias"))
    put(IMG + "pos_embedding", g(V + ".embeddings.position_embedding.weight")[None])
    L = V + ".encoder.layers.{}."
    for jax_ln, pt_ln in (("LayerNorm_0", "layer_norm1"), ("LayerNorm_1", "layer_norm2")):
        put(ENC + jax_ln + "/scale", stack(L, lambda p: w(p, pt_ln)))
        put(ENC + jax_ln + "/bias", stack(L, lambda p: g(p + pt_ln + ".bias")))
    for jax_p, pt_p in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):   # [nh*hd, D] -> [D, nh, hd]
        put(MHA + jax_p + "/kernel", stack(L, lambda p: w(p, "self_attn." + pt_p).T.reshape(D, nh, -1)))
        put(MHA + jax_p + "/bias", stack(L, lambda p: g(p + f"self_attn.{pt_p}.bias").reshape(nh, -1)))
    put(MHA + "out/kernel", stack(L, lambda p: w(p, "self_attn.out_proj").T.reshape(nh, -1, D)))
    put(MHA + "out/bias", stack(L, lambda p: g(p + "self_attn.out_proj.bias")))
    for jax_d, fc in (("Dense_0", "fc1"), ("Dense_1", "fc2")):
        put(ENC + f"MlpBlock_0/{jax_d}/kernel", stack(L, lambda p: w(p, "mlp." + fc).T))
        put(ENC + f"MlpBlock_0/{jax_d}/bias", stack(L, lambda p: g(p + f"mlp.{fc}.bias")))
    put(IMG + "Transformer/encoder_norm/scale", g(V + ".post_layernorm.weight"))
    put(IMG + "Transformer/encoder_norm/bias", g(V + ".post_layernorm.bias"))
    put(IMG + "head/kernel", g(PROJ + ".weight").T)
    put(IMG + "head/bias", g(PROJ + ".bias"))
    put(LLM + "embedder/input_embedding", g(EMBED))

    pi05 = ADARMS in src
    fast = "action_in_proj.weight" not in src and not any(k.startswith(EX + ".") for k in src)
    for sfx, pt, blk in (("", LM, "paligemma"), ("_1", EX, "action_expert"))[:1 if fast else 2]:
        H = (cfg.get(blk) or {}).get("head_dim") or GEMMA_HEAD_DIM[cfg[blk + "_variant"].removesuffix("_lora")]
        L = pt + ".layers.{}."
        W = src[L.format(0) + "mlp.down_proj.weight"].shape[0]
        if src[L.format(0) + "self_attn.k_proj.weight"].shape[0] != H:
            sys.exit("openpi's converter handles only num_kv_heads == 1 (it reads kv_einsum[l, :, 0])")
        put(LAY + f"attn/q_einsum{sfx}/w",                  # [N*H, W] -> [N, W, H]
            stack(L, lambda p: w(p, "self_attn.q_proj").reshape(-1, H, W).transpose(0, 2, 1)))
        put(LAY + f"attn/kv_einsum{sfx}/w",                 # 2 x [H, W] -> [2, 1, W, H]
            stack(L, lambda p: np.stack([w(p, "self_attn.k_proj").T[None], w(p, "self_attn.v_proj").T[None]])))
        put(LAY + f"attn/attn_vec_einsum{sfx}/w",           # [W, N*H] -> [N, H, W]
            stack(L, lambda p: w(p, "self_attn.o_proj").reshape(W, -1, H).transpose(1, 2, 0)))
        put(LAY + f"mlp{sfx}/gating_einsum",               # 2 x [F, W] -> [2, W, F]
            stack(L, lambda p: np.stack([w(p, "mlp.gate_proj").T, w(p, "mlp.up_proj").T])))
        put(LAY + f"mlp{sfx}/linear", stack(L, lambda p: w(p, "mlp.down_proj").T))
        for jax_n, pt_n in NORMS:
            if pi05 and sfx:          # adaRMS: Dense_0 kernel [W, 3W]
                put(LAY + f"{jax_n}{sfx}/Dense_0/kernel", stack(L, lambda p: w(p, pt_n + ".dense").T))
                put(LAY + f"{jax_n}{sfx}/Dense_0/bias", stack(L, lambda p: g(p + pt_n + ".dense.bias")))
            else:
                put(LAY + f"{jax_n}{sfx}/scale", stack(L, lambda p: w(p, pt_n)))
        if pi05 and sfx:
            put(LLM + f"final_norm{sfx}/Dense_0/kernel", g(pt + ".norm.dense.weight").T)
            put(LLM + f"final_norm{sfx}/Dense_0/bias", g(pt + ".norm.dense.bias"))
        else:
            put(LLM + f"final_norm{sfx}/scale", g(pt + ".norm.weight"))
    for name in () if fast else HEADS[pi05]:
        put(name + "/kernel", g(name + ".weight").T)
        put(name + "/bias", g(name + ".bias"))
    if left:
        sys.exit(f"source tensors not mapped: {sorted(left)}")
    return flat, src_dtype


# ---------------------------------------------------------------------- JAX -> PyTorch (openpi's converter)
def to_pytorch(flat):
    """Pops every leaf it maps from `flat` ('/'-path -> array); returns {PyTorch name: array}, dtypes kept."""
    out, t = {}, flat.pop
    out[V + ".embeddings.patch_embedding.weight"] = t(IMG + "embedding/kernel").transpose(3, 2, 0, 1)
    out[V + ".embeddings.patch_embedding.bias"] = t(IMG + "embedding/bias")
    pos = t(IMG + "pos_embedding")
    out[V + ".embeddings.position_embedding.weight"] = pos.reshape(-1, pos.shape[-1])
    kb = ("kernel", "bias")
    enc = {k: t(ENC + k) for k in (f"LayerNorm_{j}/{s}" for j in (0, 1) for s in ("scale", "bias"))}
    enc.update({k: t(ENC + "MlpBlock_0/" + k) for k in (f"Dense_{j}/{s}" for j in (0, 1) for s in kb)})
    enc.update({k: t(MHA + k) for k in (f"{p}/{s}" for p in ("query", "key", "value", "out") for s in kb)})
    for i in range(enc["LayerNorm_0/scale"].shape[0]):
        L = V + f".encoder.layers.{i}."
        for j in (0, 1):
            out[L + f"layer_norm{j + 1}.weight"] = enc[f"LayerNorm_{j}/scale"][i]
            out[L + f"layer_norm{j + 1}.bias"] = enc[f"LayerNorm_{j}/bias"][i]
            out[L + f"mlp.fc{j + 1}.weight"] = enc[f"Dense_{j}/kernel"][i].T
            out[L + f"mlp.fc{j + 1}.bias"] = enc[f"Dense_{j}/bias"][i]
        for jax_p, pt_p in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
            k = enc[jax_p + "/kernel"][i]
            out[L + f"self_attn.{pt_p}.weight"] = k.reshape(k.shape[0], -1).T
            out[L + f"self_attn.{pt_p}.bias"] = enc[jax_p + "/bias"][i].reshape(-1)
        k = enc["out/kernel"][i]
        out[L + "self_attn.out_proj.weight"] = k.reshape(-1, k.shape[-1]).T
        out[L + "self_attn.out_proj.bias"] = enc["out/bias"][i]
    out[V + ".post_layernorm.weight"] = t(IMG + "Transformer/encoder_norm/scale")
    out[V + ".post_layernorm.bias"] = t(IMG + "Transformer/encoder_norm/bias")
    out[PROJ + ".weight"] = t(IMG + "head/kernel").T
    out[PROJ + ".bias"] = t(IMG + "head/bias")
    out[EMBED] = t(LLM + "embedder/input_embedding")

    pi05 = LAY + "pre_attention_norm_1/Dense_0/kernel" in flat      # the converter tests "pi05" in its path
    fast = LAY + "attn/q_einsum_1/w" not in flat and "action_in_proj/kernel" not in flat   # Pi0FAST: PaliGemma alone
    for sfx, pt in (("", LM), ("_1", EX))[:1 if fast else 2]:
        q, kv, o = (t(LAY + f"attn/{e}{sfx}/w") for e in ("q_einsum", "kv_einsum", "attn_vec_einsum"))
        gating, linear = t(LAY + f"mlp{sfx}/gating_einsum"), t(LAY + f"mlp{sfx}/linear")
        ada = pi05 and sfx
        norms = {pt_n: (t(LAY + f"{jax_n}{sfx}/Dense_0/kernel"), t(LAY + f"{jax_n}{sfx}/Dense_0/bias")) if ada
                 else t(LAY + f"{jax_n}{sfx}/scale") for jax_n, pt_n in NORMS}
        if kv.shape[2] != 1:
            sys.exit(f"kv_einsum{sfx} has {kv.shape[2]} kv heads; openpi's converter keeps only the first")
        for i in range(q.shape[0]):
            L = pt + f".layers.{i}."
            out[L + "self_attn.q_proj.weight"] = q[i].transpose(0, 2, 1).reshape(-1, q.shape[2])
            out[L + "self_attn.k_proj.weight"] = kv[i, 0, 0].T
            out[L + "self_attn.v_proj.weight"] = kv[i, 1, 0].T
            out[L + "self_attn.o_proj.weight"] = o[i].transpose(2, 0, 1).reshape(o.shape[3], -1)
            out[L + "mlp.gate_proj.weight"] = gating[i, 0].T
            out[L + "mlp.up_proj.weight"] = gating[i, 1].T
            out[L + "mlp.down_proj.weight"] = linear[i].T
            for pt_n, v in norms.items():
                if ada:
                    out[L + pt_n + ".dense.weight"], out[L + pt_n + ".dense.bias"] = v[0][i].T, v[1][i]
                else:
                    out[L + pt_n + ".weight"] = v[i]
        if ada:
            out[pt + ".norm.dense.weight"] = t(LLM + f"final_norm{sfx}/Dense_0/kernel").T
            out[pt + ".norm.dense.bias"] = t(LLM + f"final_norm{sfx}/Dense_0/bias")
        else:
            out[pt + ".norm.weight"] = t(LLM + f"final_norm{sfx}/scale")
    for name in () if fast else HEADS[pi05]:
        out[name + ".weight"] = t(name + "/kernel").T
        out[name + ".bias"] = t(name + "/bias")
    return out


# --------------------------------------------------------------------------------------------- orbax I/O
def restore(item_dir):
    """An item restored as openpi's restore_params does it (restore_type=np.ndarray, dtype=None: as stored)."""
    with ocp.PyTreeCheckpointer() as ckptr:
        meta = ckptr.metadata(item_dir)
        item = dict(getattr(meta, "item_metadata", meta))       # orbax >= 0.12 wraps it in a StepMetadata
        args = jax.tree.map(lambda _: ocp.ArrayRestoreArgs(restore_type=np.ndarray), item)
        return ckptr.restore(item_dir, ocp.args.PyTreeRestore(item=item, restore_args=args))


def restore_params(params_dir):
    """{'/'-path: array} of params/["params"]; the trailing "value" is stripped if every path ends in it."""
    def walk(d, path=()):
        for k, v in d.items():
            yield from walk(v, path + (k,)) if isinstance(v, dict) else [(path + (k,), np.asarray(v))]

    flat = dict(walk(restore(params_dir)["params"]))
    if all(kp[-1] == "value" for kp in flat):
        flat = {kp[:-1]: v for kp, v in flat.items()}
    return {"/".join(kp): v for kp, v in flat.items()}


def write(a):
    t0 = time.perf_counter()
    with open(os.path.join(a.src, "config.json")) as f:
        flat, src_dtype = to_jax(source_tensors(a.src), json.load(f))
    tree = {}
    for path, arr in flat.items():
        dt = {"bf16": BF16, "f32": F32, "source": src_dtype[path]}.get(
            a.dtype, BF16 if path.rsplit("/", 1)[-1] in BF16_LEAVES else F32)
        keys = path.split("/") + (["value"] if a.nnx_value else [])
        node = tree
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = jax.device_put(arr.astype(dt))        # openpi saves jax.Arrays
    out = os.path.abspath(a.out)
    if os.path.exists(out) and os.listdir(out):
        sys.exit(f"{out} exists and is not empty")
    os.makedirs(out, exist_ok=True)
    handlers = {"params": ocp.PyTreeCheckpointHandler(use_ocdbt=bool(a.ocdbt))}
    items = {"params": ocp.args.PyTreeSave({"params": tree})}
    if a.train_run is None:           # save step 0 in a scratch run dir, then move the step's contents to OUT
        step, run_dir, ckpt = 0, tempfile.mkdtemp(prefix=".orbax-", dir=os.path.dirname(out)), out
    else:
        step, run_dir, ckpt = a.train_run, out, os.path.join(out, str(a.train_run))
        handlers["train_state"] = ocp.PyTreeCheckpointHandler(use_ocdbt=bool(a.ocdbt))
        items["train_state"] = ocp.args.PyTreeSave({"step": np.int64(step), "opt_state": {
            "mu": jax.device_put(np.zeros(4, F32)), "nu": jax.device_put(np.full(4, 0.5, F32))}})
    # openpi calls mngr.save(step, {"params": {"params": params}, ...}); these args are what that resolves to.
    mngr = ocp.CheckpointManager(run_dir, item_handlers=handlers,
                                 options=ocp.CheckpointManagerOptions(max_to_keep=1, create=True))
    mngr.save(step, args=ocp.args.Composite(**items))
    mngr.wait_until_finished()
    mngr.close()
    if a.train_run is None:
        for e in os.listdir(os.path.join(run_dir, "0")):
            shutil.move(os.path.join(run_dir, "0", e), os.path.join(out, e))
        shutil.rmtree(run_dir)
    shutil.copytree(os.path.join(a.src, "assets"), os.path.join(ckpt, "assets"))
    print(f"orbax_checkpoint write: {ckpt} ({len(flat)} leaves, ocdbt={a.ocdbt}, dtype={a.dtype}, "
          f"nnx_value={a.nnx_value}) in {time.perf_counter() - t0:.2f} s")
    if a.expect:
        restored = restore_params(os.path.join(ckpt, "params"))
        tensors = to_pytorch(restored)
        if restored:
            sys.exit(f"leaves not mapped: {sorted(restored)}")
        write_safetensors(a.expect, tensors)
        print(f"orbax_checkpoint write: {a.expect} ({len(tensors)} tensors)")


def verify(a):
    ckpt = os.path.abspath(a.out)
    if not os.path.isdir(os.path.join(ckpt, "params")):       # a training run dir: its newest step
        steps = [int(s) for s in os.listdir(ckpt) if s.isdigit() and os.path.isdir(os.path.join(ckpt, s, "params"))]
        if not steps:
            sys.exit(f"{ckpt}: neither params/ nor <step>/params/")
        ckpt = os.path.join(ckpt, str(max(steps)))
    src = source_tensors(a.src)
    restored = restore_params(os.path.join(ckpt, "params"))
    try:
        got = to_pytorch(restored)
    except KeyError as e:
        sys.exit(f"FAIL leaf missing from the checkpoint: {e}")
    fails = [f"leaf not used by the mapping: {p}" for p in sorted(restored)]
    fails += [f"source tensor missing from the checkpoint: {k}" for k in sorted(set(src) - set(got))]
    fails += [f"tensor the source does not have: {k}" for k in sorted(set(got) - set(src))]
    for k in sorted(set(src) & set(got)):
        have, want = got[k], src[k].astype(got[k].dtype)      # exact, or round-to-nearest-even to bf16
        if have.dtype not in (BF16, F32) or have.shape != want.shape or have.tobytes() != want.tobytes():
            fails.append(f"{k}: got {have.dtype}{list(have.shape)}, want {want.dtype}{list(want.shape)}")
    sa, ca = os.path.join(a.src, "assets"), os.path.join(ckpt, "assets")
    rel = {os.path.relpath(os.path.join(d, f), r) for r in (sa, ca) for d, _, fs in os.walk(r) for f in fs}
    for f in sorted(rel):
        pair = [os.path.join(r, f) for r in (sa, ca)]
        if not all(map(os.path.isfile, pair)) or len({open(p, "rb").read() for p in pair}) != 1:
            fails.append(f"assets/{f} differs from the source's")
    if os.path.isdir(os.path.join(ckpt, "train_state")):
        step = int(restore(os.path.join(ckpt, "train_state"))["step"])
        if str(step) != os.path.basename(ckpt):
            fails.append(f"train_state step {step} != step dir {os.path.basename(ckpt)}")
    for f in fails:
        print(f"FAIL {f}")
    if fails:
        sys.exit(1)
    print(f"orbax_checkpoint verify: {len(got)} tensors OK")


def main():
    logging.getLogger("absl").setLevel(logging.ERROR)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="SRC (openpi PyTorch layout) -> Orbax checkpoint OUT")
    w.add_argument("--ocdbt", type=int, choices=(1, 0), default=1)
    w.add_argument("--dtype", choices=("bf16", "f32", "mixed", "source"), default="source")
    w.add_argument("--nnx-value", action="store_true")
    w.add_argument("--train-run", type=int, metavar="STEP")
    w.add_argument("--expect", metavar="FILE", help="safetensors of what openpi's converter makes of OUT")
    v = sub.add_parser("verify", help="restore OUT with orbax, convert it, compare with SRC")
    for p in (w, v):
        p.add_argument("src")
        p.add_argument("out")
    a = ap.parse_args()
    (write if a.cmd == "write" else verify)(a)


if __name__ == "__main__":
    main()
