#!/usr/bin/env python3
"""Check pi0_fast_ref.py and the tiny-pi0-fast fixtures against openpi's own JAX π0-FAST (Pi0FAST.sample_actions).

Not run in CI: openpi is not on PyPI and needs JAX and flax; run it by hand in a venv of PyPI packages with openpi's
pins (pyproject.toml at commit 15a9616) and a checkout of openpi's src/:
    python3 -m venv /work/venv-openpi
    /work/venv-openpi/bin/pip install "jax[cpu]==0.5.3" "flax==0.10.2" "jaxtyping==0.2.36" "beartype==0.19.0" \
        "ml_collections==1.0.0" "ml-dtypes==0.4.1" "numpy<2" einops typing_extensions
    mkdir -p /tmp/openpi && git -C OPENPI_CLONE archive HEAD src | tar -x -C /tmp/openpi
    /work/venv-openpi/bin/python tools/reference/pi0_fast_openpi_check.py --openpi /tmp/openpi/src
openpi's models/{pi0_fast,gemma_fast,siglip,lora,model}.py, shared/{array_typing,nnx_utils}.py and
training/sharding.py run unmodified. Stubbed: the imports the model never calls (torch, augmax, orbax.checkpoint,
safetensors, openpi.models_pytorch, openpi.shared.image_tools); gemma_fast.get_config and siglip.decode_variant return
the fixture's dims; IMAGE_RESOLUTION and preprocess_observation's default resolution become the fixture's image size
(else it would resize to 224).
The model is built with Pi0FASTConfig(dtype="float32"), its params replaced by the fixture's weights (BF16 widened
exactly to float32), and run on CPU in two ways per case: sample_actions as openpi calls it (its while_loop compiled)
for the tokens, and again under jax.disable_jit() with a flax method interceptor that records the logits of every
gemma call, for the logits. Both are compared with the reference (run through /usr/bin/python3, which has torch) in
float64 and in float32, and with the tokens stored in the fixture. One line per check; exit status 1 on a failure.
Last, for information only, openpi's default dtype "bfloat16" (bf16 params and activations): are the tokens the same?
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import types

import numpy as np

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
V = "paligemma_with_expert.paligemma.model.vision_tower.vision_model"
LM = "paligemma_with_expert.paligemma.model.language_model"
PROJ = "paligemma_with_expert.paligemma.model.multi_modal_projector.linear"
EMBED = LM + ".embed_tokens.weight"
CAMERAS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")   # model.IMAGE_KEYS, in the fixtures' slot order
failures = []


def report(name, ok, detail=""):
    print(f"{name:<52} {detail:<52} {'OK' if ok else 'FAIL'}")
    if not ok:
        failures.append(name)


def read_safetensors(path):
    """{name: numpy array}; BF16 widened exactly to float32."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    kinds = {"F32": "<f4", "I32": "<i4", "BOOL": "?", "BF16": "<u2"}
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        a = np.frombuffer(raw[8 + n + b:8 + n + e], kinds[info["dtype"]])
        if info["dtype"] == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = a.reshape(info["shape"])
    return out


def import_openpi(src, cfg):
    """Imports openpi's model modules from the checkout `src` with the stubs of the docstring; returns pi0_fast."""
    sys.path.insert(0, src)
    import jax
    jax.config.update("jax_platforms", "cpu")
    torch = types.ModuleType("torch")
    torch.Tensor = type("Tensor", (), {})              # only named in type annotations (Array = jax.Array | Tensor)
    torch.uint8 = object()
    sys.modules["torch"] = torch
    for name in ("augmax", "orbax", "orbax.checkpoint", "safetensors", "openpi.models_pytorch",
                 "openpi.models_pytorch.pi0_pytorch", "openpi.shared.image_tools"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["openpi.models_pytorch"].pi0_pytorch = sys.modules["openpi.models_pytorch.pi0_pytorch"]
    import ml_collections
    import openpi.models.gemma_fast as gemma_fast
    import openpi.models.model as model
    import openpi.models.pi0_fast as pi0_fast
    import openpi.models.siglip as siglip
    pg, vs = cfg["paligemma"], cfg["vision"]
    res = (vs["image_size"], vs["image_size"])
    model.IMAGE_RESOLUTION = res
    model.preprocess_observation.__kwdefaults__["image_resolution"] = res
    gemma_fast.get_config = lambda variant: ml_collections.ConfigDict(dict(
        variant=variant, norm_eps=1e-6, scan=True, remat_policy="nothing_saveable", **pg))
    siglip.decode_variant = lambda variant: dict(
        width=vs["width"], depth=vs["depth"], mlp_dim=vs["mlp_dim"], num_heads=vs["num_heads"],
        patch_size=(vs["patch_size"], vs["patch_size"]))
    return pi0_fast


def openpi_params(w, cfg):
    """Engine tensor names -> openpi's params tree (the PaliGemma part of openpi's JAX <-> PyTorch conversion)."""
    vs, pg = cfg["vision"], cfg["paligemma"]
    Wv, nh = vs["width"], vs["num_heads"]
    D, H = pg["width"], pg["head_dim"]

    def stack(fmt, n, f):
        return np.stack([f(fmt.format(i)) for i in range(n)])

    L = V + ".encoder.layers.{}."
    enc = {jl: {"scale": stack(L, vs["depth"], lambda p, tl=tl: w[p + tl + ".weight"]),
                "bias": stack(L, vs["depth"], lambda p, tl=tl: w[p + tl + ".bias"])}
           for jl, tl in (("LayerNorm_0", "layer_norm1"), ("LayerNorm_1", "layer_norm2"))}
    mha = {}
    for jp, tp in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):   # [nh*hd, Wv] -> [Wv, nh, hd]
        mha[jp] = {"kernel": stack(L, vs["depth"],
                                   lambda p, tp=tp: w[p + f"self_attn.{tp}.weight"].T.reshape(Wv, nh, -1)),
                   "bias": stack(L, vs["depth"], lambda p, tp=tp: w[p + f"self_attn.{tp}.bias"].reshape(nh, -1))}
    mha["out"] = {"kernel": stack(L, vs["depth"], lambda p: w[p + "self_attn.out_proj.weight"].T.reshape(nh, -1, Wv)),
                  "bias": stack(L, vs["depth"], lambda p: w[p + "self_attn.out_proj.bias"])}
    enc["MultiHeadDotProductAttention_0"] = mha
    enc["MlpBlock_0"] = {jd: {"kernel": stack(L, vs["depth"], lambda p, fc=fc: w[p + f"mlp.{fc}.weight"].T),
                              "bias": stack(L, vs["depth"], lambda p, fc=fc: w[p + f"mlp.{fc}.bias"])}
                         for jd, fc in (("Dense_0", "fc1"), ("Dense_1", "fc2"))}
    img = {"embedding": {"kernel": w[V + ".embeddings.patch_embedding.weight"].transpose(2, 3, 1, 0),   # OIHW -> HWIO
                         "bias": w[V + ".embeddings.patch_embedding.bias"]},
           "pos_embedding": w[V + ".embeddings.position_embedding.weight"][None],
           "Transformer": {"encoderblock": enc,
                           "encoder_norm": {"scale": w[V + ".post_layernorm.weight"],
                                            "bias": w[V + ".post_layernorm.bias"]}},
           "head": {"kernel": w[PROJ + ".weight"].T, "bias": w[PROJ + ".bias"]}}
    L = LM + ".layers.{}."
    n = pg["depth"]
    layers = {
        "attn": {
            "q_einsum": {"w": stack(L, n, lambda p: w[p + "self_attn.q_proj.weight"].reshape(-1, H, D)
                                    .transpose(0, 2, 1))},
            "kv_einsum": {"w": stack(L, n, lambda p: np.stack([w[p + f"self_attn.{t}_proj.weight"].reshape(-1, H, D)
                                                               .transpose(0, 2, 1) for t in ("k", "v")]))},
            "attn_vec_einsum": {"w": stack(L, n, lambda p: w[p + "self_attn.o_proj.weight"].reshape(D, -1, H)
                                           .transpose(1, 2, 0))}},
        "mlp": {"gating_einsum": stack(L, n, lambda p: np.stack([w[p + "mlp.gate_proj.weight"].T,
                                                                 w[p + "mlp.up_proj.weight"].T])),
                "linear": stack(L, n, lambda p: w[p + "mlp.down_proj.weight"].T)},
        "pre_attention_norm": {"scale": stack(L, n, lambda p: w[p + "input_layernorm.weight"])},
        "pre_ffw_norm": {"scale": stack(L, n, lambda p: w[p + "post_attention_layernorm.weight"])}}
    llm = {"embedder": {"input_embedding": w[EMBED]}, "layers": layers,
           "final_norm": {"scale": w[LM + ".norm.weight"]}}
    return {"PaliGemma": {"img": img, "llm": llm}}


def build_model(pi0_fast, fixdir, cfg, dtype="float32"):
    """openpi's Pi0FAST with config dtype `dtype` and the fixture's weights as params of that dtype."""
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from flax import traverse_util
    config = pi0_fast.Pi0FASTConfig(dtype=dtype, action_dim=cfg["action_dim"],
                                    action_horizon=cfg["action_horizon"], max_token_len=cfg["max_token_len"])
    model = config.create(jax.random.key(0))
    graphdef, state = nnx.split(model)
    want = traverse_util.flatten_dict(state.to_pure_dict())
    got = traverse_util.flatten_dict(openpi_params(read_safetensors(os.path.join(fixdir, "model.safetensors")), cfg))
    bad = sorted(set(want) ^ set(got)) or [k for k in want if want[k].shape != got[k].shape]
    report(f"params tree ({dtype}): every leaf mapped, shapes equal", not bad,
           f"{len(want)} leaves" if not bad else f"e.g. {'/'.join(bad[0])}")
    if bad:
        sys.exit(1)
    state.replace_by_pure_dict(traverse_util.unflatten_dict({k: jnp.asarray(v, dtype) for k, v in got.items()}))
    return config, nnx.merge(graphdef, state)


def observation(model, inp):
    import jax.numpy as jnp
    from openpi.models import model as _model
    B = inp["tokens"].shape[0]
    return _model.Observation(
        images={c: jnp.asarray(inp["images"][:, i]) for i, c in enumerate(CAMERAS)},
        image_masks={c: jnp.asarray(inp["image_masks"][:, i]) for i, c in enumerate(CAMERAS)},
        state=jnp.zeros((B, model.action_dim), jnp.float32),
        tokenized_prompt=jnp.asarray(inp["tokens"]), tokenized_prompt_mask=jnp.asarray(inp["token_mask"]),
        token_ar_mask=jnp.asarray(inp["token_ar_mask"]))


def run_openpi(pi0_fast, model, inp, steps):
    """-> (tokens from sample_actions as openpi calls it; tokens and per-call logits [calls, B, V] under
    disable_jit)."""
    import flax.linen as nn
    import jax
    obs = observation(model, inp)
    rng = jax.random.key(0)
    compiled = np.asarray(model.sample_actions(rng, obs, max_decoding_steps=steps, temperature=0.0))
    calls = []

    def record(next_fun, args, kwargs, context):
        out = next_fun(*args, **kwargs)
        if isinstance(context.module, pi0_fast._gemma.Module) and context.method_name == "__call__" \
                and isinstance(out, tuple) and len(out) == 3:
            calls.append(np.asarray(out[0][:, -1]))
        return out

    with jax.disable_jit(), nn.intercept_methods(record):
        eager = np.asarray(model.sample_actions(rng, obs, max_decoding_steps=steps, temperature=0.0))
    return compiled, eager, np.stack(calls)


def run_reference(fixdir, case, steps, dtype, python):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.safetensors")
        subprocess.run([python, os.path.join(HERE, "pi0_fast_ref.py"), "--checkpoint", fixdir,
                        "--inputs", os.path.join(fixdir, f"{case}.in.safetensors"), "--output", out,
                        "--max-decoding-steps", str(steps), "--dtype", dtype, "--dump"], check=True)
        return read_safetensors(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--openpi", required=True, help="openpi's src/ directory (holds openpi/models/pi0_fast.py)")
    ap.add_argument("--fixtures", default=os.path.join(ROOT, "tests", "fixtures", "tiny-pi0-fast"))
    ap.add_argument("--reference-python", default="/usr/bin/python3", help="a python with torch, for pi0_fast_ref.py")
    a = ap.parse_args()
    with open(os.path.join(a.fixtures, "config.json")) as f:
        cfg = json.load(f)
    pi0_fast = import_openpi(a.openpi, cfg)
    import flax
    import jax
    print(f"jax {jax.__version__}, flax {flax.__version__}, numpy {np.__version__}, openpi {a.openpi}")
    _, model = build_model(pi0_fast, a.fixtures, cfg)
    cases = sorted(fn[:-len(".in.safetensors")] for fn in os.listdir(a.fixtures) if fn.endswith(".in.safetensors"))
    worst = {"float64": 0.0, "float32": 0.0}
    for case in cases:
        inp = read_safetensors(os.path.join(a.fixtures, f"{case}.in.safetensors"))
        stored = read_safetensors(os.path.join(a.fixtures, f"{case}.out.safetensors"))
        steps = stored["output_tokens"].shape[1]
        compiled, eager, calls = run_openpi(pi0_fast, model, inp, steps)
        ran = len(calls) - 1                    # the prefill call, then one call per step that ran
        ok = (np.array_equal(compiled.astype(np.int64), stored["output_tokens"])
              and np.array_equal(eager.astype(np.int64), stored["output_tokens"]))
        report(f"{case}: openpi tokens == fixture output_tokens", ok,
               f"{ran} steps, compiled and eager" + ("" if ok else f": {compiled.astype(int).tolist()}"))
        for dtype in ("float64", "float32"):
            r = run_reference(a.fixtures, case, steps, dtype, a.reference_python)
            same = np.array_equal(r["output_tokens"], eager.astype(np.int64))
            d = float(np.abs(r["step_logits"][:, :ran] - calls[:ran].transpose(1, 0, 2)).max())
            scale = float(np.abs(calls[:ran]).max())
            worst[dtype] = max(worst[dtype], d)
            report(f"{case}: reference {dtype} tokens, logits vs openpi", same and d < 1e-4 * max(scale, 1.0),
                   f"max|d logits| {d:.2e} (max|logit| {scale:.2f})")
    print(f"worst logit difference over {len(cases)} cases: float64 reference {worst['float64']:.2e}, "
          f"float32 reference {worst['float32']:.2e}")
    # openpi's default dtype: bf16 activations. Informational (tokens within bf16 noise of a small margin may flip).
    _, model16 = build_model(pi0_fast, a.fixtures, cfg, "bfloat16")
    for case in cases:
        inp = read_safetensors(os.path.join(a.fixtures, f"{case}.in.safetensors"))
        stored = read_safetensors(os.path.join(a.fixtures, f"{case}.out.safetensors"))["output_tokens"]
        toks = np.asarray(model16.sample_actions(jax.random.key(0), observation(model16, inp),
                                                 max_decoding_steps=stored.shape[1], temperature=0.0))
        same = np.array_equal(toks.astype(np.int64), stored)
        detail = "" if same else str(toks.astype(int).tolist())
        print(f"{case + ': openpi bfloat16 tokens == fixture':<52} {detail:<52} "
              f"{'info: same' if same else 'info: DIFFERENT'}")
    print(f"{len(failures)} failed" if failures else "all checks passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
