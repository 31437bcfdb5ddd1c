#!/usr/bin/python3
"""Generate the golden-test fixtures in tests/fixtures/ from the float64 reference (pi0_ref.py).

Writes two tiny random-weight checkpoints in openpi's PyTorch safetensors layout (docs/model.md 2.1; tiny-pi0 all
BF16 with the tied embedding under the lm_head name + __metadata__ alias, tiny-pi05 all F32 under
embed_tokens) plus, per case, an inputs file (docs/formats.md 2) and an outputs file (actions and named
intermediates, see tests/fixtures/README.md). All random numbers come from fixed seeds (SEEDS below);
running it twice gives byte-identical files (the sha256 of every file is printed).
Usage: /usr/bin/python3 tools/reference/make_fixtures.py [--out tests/fixtures]
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np
import torch

sys.dont_write_bytecode = True   # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pi0_ref as ref  # noqa: E402

NUM_STEPS = 10
SEEDS = {"tiny-pi0": 1000, "tiny-pi05": 2000}   # weights: torch.Generator(seed); stats: RandomState(seed+100);
CASES = ("b1", "b1-masked", "b2")               # case i inputs: numpy RandomState(seed + 1 + i)

TINY = {
    "vision": {"width": 32, "depth": 2, "mlp_dim": 48, "num_heads": 4, "patch_size": 14, "image_size": 56},
    "paligemma": {"width": 64, "depth": 2, "mlp_dim": 128, "num_heads": 4, "num_kv_heads": 1, "head_dim": 16,
                  "vocab_size": 512},
    "action_expert": {"width": 32, "depth": 2, "mlp_dim": 64, "num_heads": 4, "num_kv_heads": 1, "head_dim": 16},
}


def tiny_config(pi05):
    c = {"action_dim": 32, "action_horizon": 5, "paligemma_variant": "gemma_2b",
         "action_expert_variant": "gemma_300m", "precision": "float32" if pi05 else "bfloat16",
         "pi05": pi05, "max_token_len": 16 if pi05 else 12}
    c.update(TINY)
    return c


def init_std(name, shape):
    """(mean, std) of the random init of one tensor: activations stay O(1), every weight is non-trivial."""
    if name.endswith((".layer_norm1.weight", ".layer_norm2.weight", ".post_layernorm.weight")):
        return 1.0, 0.1                       # SigLIP LayerNorm scale, used as w
    if name.endswith("layernorm.weight") or name.endswith(".norm.weight"):
        return 0.0, 0.1                       # Gemma RMSNorm scale, used as 1 + w
    if name.endswith(".bias"):
        return 0.0, 0.1
    if name.endswith("position_embedding.weight"):
        return 0.0, 0.5
    fan_in = int(np.prod(shape[1:]))          # Linear [out, in], conv OIHW, embedding [vocab, width]
    return 0.0, 1.0 / np.sqrt(fan_in)


def make_weights(cfg, seed):
    shapes = ref.expected_tensors(cfg)
    shapes[ref.EX + ".lm_head.weight"] = [cfg["paligemma"]["vocab_size"], cfg["action_expert"]["width"]]
    g = torch.Generator().manual_seed(seed)
    w = {}
    for name in sorted(shapes):
        mean, std = init_std(name, shapes[name])
        w[name] = mean + std * torch.randn(shapes[name], generator=g, dtype=torch.float32)
    return w


def norm_stats(seed, quantiles):
    rs = np.random.RandomState(seed)

    def block(d):
        mean = rs.normal(0.0, 0.5, d)
        std = rs.uniform(0.1, 2.0, d)
        r = lambda a: [float(round(x, 6)) for x in a]  # noqa: E731
        return {"mean": r(mean), "std": r(std),
                "q01": r(mean - 2.3 * std) if quantiles else None,
                "q99": r(mean + 2.3 * std) if quantiles else None}
    return {"norm_stats": {"state": block(8), "actions": block(7)}}


def make_inputs(cfg, case, seed):
    rs = np.random.RandomState(seed)
    R, L, H, A = cfg["vision"]["image_size"], cfg["max_token_len"], cfg["action_horizon"], cfg["action_dim"]
    vocab = cfg["paligemma"]["vocab_size"]
    if case == "b1":
        cams, nvalid = [[True, True, True]], [L]
    elif case == "b1-masked":
        cams, nvalid = [[True, True, False]], [7]
    elif case == "b2":
        cams, nvalid = [[True, True, True], [True, False, True]], [9, 5]
    else:
        raise ValueError(case)
    B = len(cams)
    images = rs.uniform(-1.0, 1.0, (B, 3, R, R, 3)).astype(np.float32)
    if case == "b1-masked":
        images[0, 2] = -1.0                   # an openpi "zero image" (uint8 0 -> -1.0)
    state = np.zeros((B, A), np.float32)
    state[:, :8] = rs.standard_normal((B, 8))
    tokens = np.zeros((B, L), np.int32)
    token_mask = np.zeros((B, L), bool)
    for b in range(B):
        tokens[b, :nvalid[b]] = rs.randint(1, vocab, nvalid[b])
        token_mask[b, :nvalid[b]] = True
    noise = rs.standard_normal((B, H, A)).astype(np.float32)
    return {"images": ("F32", images), "image_masks": ("BOOL", np.array(cams, bool)), "state": ("F32", state),
            "tokens": ("I32", tokens), "token_mask": ("BOOL", token_mask), "noise": ("F32", noise)}


def write_model(outdir, name, pi05):
    d = os.path.join(outdir, name)
    os.makedirs(os.path.join(d, "assets", "tiny"), exist_ok=True)
    cfg_raw = tiny_config(pi05)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(json.dumps(cfg_raw, indent=2) + "\n")
    with open(os.path.join(d, "assets", "tiny", "norm_stats.json"), "w") as f:
        f.write(json.dumps(norm_stats(SEEDS[name] + 100, quantiles=pi05), indent=2) + "\n")
    cfg = ref.make_config(cfg_raw)
    w = make_weights(cfg, SEEDS[name])
    if pi05:
        ref.write_safetensors(os.path.join(d, "model.safetensors"), {k: ("F32", v) for k, v in w.items()})
    else:   # what safetensors.torch.save_model does with the tied embedding (docs/model.md 2.2)
        w[ref.LM_HEAD] = w.pop(ref.EMBED)
        ref.write_safetensors(os.path.join(d, "model.safetensors"), {k: ("BF16", v) for k, v in w.items()},
                              metadata={ref.EMBED: ref.LM_HEAD})
    model = ref.Pi0Reference(d)           # the reference reads the weights back from the written file
    for i, case in enumerate(CASES):
        inputs = make_inputs(cfg, case, SEEDS[name] + 1 + i)
        ref.write_safetensors(os.path.join(d, f"{case}.in.safetensors"), inputs)
        dump = {}
        model.sample_actions({k: v for k, (_, v) in inputs.items()}, NUM_STEPS, dump=dump)
        ref.write_safetensors(os.path.join(d, f"{case}.out.safetensors"),
                              {k: ("F32", v.to(torch.float32)) for k, v in dump.items()})
    return d


def main():
    ap = argparse.ArgumentParser()
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    for name, pi05 in (("tiny-pi0", False), ("tiny-pi05", True)):
        write_model(a.out, name, pi05)
    total = 0
    for dirpath, _, files in sorted(os.walk(a.out)):
        for fn in sorted(files):
            if fn == "README.md":
                continue
            p = os.path.join(dirpath, fn)
            with open(p, "rb") as f:
                data = f.read()
            total += len(data)
            print(f"{hashlib.sha256(data).hexdigest()}  {len(data):8d}  {os.path.relpath(p, a.out)}")
    print(f"total {total} bytes, torch {torch.__version__}, numpy {np.__version__}")


if __name__ == "__main__":
    main()
