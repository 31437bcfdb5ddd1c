#!/usr/bin/env python3
"""Writes a full-size random openpi Orbax checkpoint (pi0 or pi0.5, bf16 or f32) with orbax-checkpoint, for
timing `pi0 info` / `pi0 convert` on a real-size Orbax load (bench/RESULTS.md, "Checkpoint loading").

  python bench/orbax_load.py OUT [--pi05] [--dtype bf16|f32] [--ocdbt 1|0]

Values are N(0, 0.02) (norm scales N(0, 0.1)), like trained weights, so zstd sees realistic exponent statistics.
The tree and shapes are openpi's (PaliGemma/img, PaliGemma/llm with the `_1` expert, the projections); leaves are
made one at a time as jax arrays and saved as openpi's CheckpointManager does ({"params": tree}).
Needs a venv with orbax-checkpoint, jax[cpu], tensorstore (the pins of tests/orbax/run.sh).
"""
import argparse
import os
import shutil
import tempfile

import jax
import ml_dtypes
import numpy as np
import orbax.checkpoint as ocp

jax.config.update("jax_platforms", "cpu")


def shapes(pi05):
    V, D, F, H, Dh, De, Fe, L, Lv, Wv, Fv, Hv = 257152, 2048, 16384, 8, 256, 1024, 4096, 18, 27, 1152, 4304, 16
    s = {"PaliGemma/img/embedding/kernel": (14, 14, 3, Wv), "PaliGemma/img/embedding/bias": (Wv,),
         "PaliGemma/img/pos_embedding": (1, 256, Wv), "PaliGemma/img/head/kernel": (Wv, D), "PaliGemma/img/head/bias": (D,),
         "PaliGemma/img/Transformer/encoder_norm/scale": (Wv,), "PaliGemma/img/Transformer/encoder_norm/bias": (Wv,),
         "PaliGemma/llm/embedder/input_embedding": (V, D), "PaliGemma/llm/final_norm/scale": (D,)}
    enc = "PaliGemma/img/Transformer/encoderblock/"
    for n in ("LayerNorm_0", "LayerNorm_1"):
        s[enc + n + "/scale"] = s[enc + n + "/bias"] = (Lv, Wv)
    for n in ("query", "key", "value"):
        s[enc + f"MultiHeadDotProductAttention_0/{n}/kernel"] = (Lv, Wv, Hv, Wv // Hv)
        s[enc + f"MultiHeadDotProductAttention_0/{n}/bias"] = (Lv, Hv, Wv // Hv)
    s[enc + "MultiHeadDotProductAttention_0/out/kernel"] = (Lv, Hv, Wv // Hv, Wv)
    s[enc + "MultiHeadDotProductAttention_0/out/bias"] = (Lv, Wv)
    s[enc + "MlpBlock_0/Dense_0/kernel"], s[enc + "MlpBlock_0/Dense_0/bias"] = (Lv, Wv, Fv), (Lv, Fv)
    s[enc + "MlpBlock_0/Dense_1/kernel"], s[enc + "MlpBlock_0/Dense_1/bias"] = (Lv, Fv, Wv), (Lv, Wv)
    lay = "PaliGemma/llm/layers/"
    for sfx, w, f in (("", D, F), ("_1", De, Fe)):
        s[lay + f"attn/q_einsum{sfx}/w"] = (L, H, w, Dh)
        s[lay + f"attn/kv_einsum{sfx}/w"] = (L, 2, 1, w, Dh)
        s[lay + f"attn/attn_vec_einsum{sfx}/w"] = (L, H, Dh, w)
        s[lay + f"mlp{sfx}/gating_einsum"] = (L, 2, w, f)
        s[lay + f"mlp{sfx}/linear"] = (L, f, w)
    s[lay + "pre_attention_norm/scale"] = s[lay + "pre_ffw_norm/scale"] = (L, D)
    if pi05:
        for n in ("pre_attention_norm_1", "pre_ffw_norm_1"):
            s[lay + n + "/Dense_0/kernel"], s[lay + n + "/Dense_0/bias"] = (L, De, 3 * De), (L, 3 * De)
        s["PaliGemma/llm/final_norm_1/Dense_0/kernel"], s["PaliGemma/llm/final_norm_1/Dense_0/bias"] = (De, 3 * De), (3 * De,)
        heads = {"time_mlp_in": (De, De), "time_mlp_out": (De, De)}
    else:
        s[lay + "pre_attention_norm_1/scale"] = s[lay + "pre_ffw_norm_1/scale"] = (L, De)
        s["PaliGemma/llm/final_norm_1/scale"] = (De,)
        heads = {"state_proj": (32, De), "action_time_mlp_in": (2 * De, De), "action_time_mlp_out": (De, De)}
    heads.update({"action_in_proj": (32, De), "action_out_proj": (De, 32)})
    for n, k in heads.items():
        s[n + "/kernel"], s[n + "/bias"] = k, (k[1],)
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--pi05", action="store_true")
    ap.add_argument("--dtype", choices=("bf16", "f32"), default="bf16")
    ap.add_argument("--ocdbt", type=int, choices=(0, 1), default=1)
    a = ap.parse_args()
    dt = ml_dtypes.bfloat16 if a.dtype == "bf16" else np.float32
    rng = np.random.default_rng(0)
    tree = {}
    for path, shp in shapes(a.pi05).items():
        std = 0.1 if path.endswith(("scale", "bias")) else 0.02
        x = (rng.standard_normal(shp, dtype=np.float32) * std).astype(dt)
        node = tree
        for k in path.split("/")[:-1]:
            node = node.setdefault(k, {})
        node[path.split("/")[-1]] = jax.device_put(x)
        del x
    run = tempfile.mkdtemp(prefix=".orbax-", dir=os.path.dirname(os.path.abspath(a.out)))
    mngr = ocp.CheckpointManager(run, item_handlers={"params": ocp.PyTreeCheckpointHandler(use_ocdbt=bool(a.ocdbt))},
                                 options=ocp.CheckpointManagerOptions(max_to_keep=1, create=True))
    mngr.save(0, args=ocp.args.Composite(params=ocp.args.PyTreeSave({"params": tree})))
    mngr.wait_until_finished()
    mngr.close()
    shutil.move(os.path.join(run, "0"), a.out)
    shutil.rmtree(run)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
