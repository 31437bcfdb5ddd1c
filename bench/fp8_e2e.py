#!/usr/bin/env python3
"""What FP8 products would do to the actions, end to end (issue 5's FP8 lead; bench/RESULTS.md session 31).

fp8_probe.py measured one product's FP8 error (3.7e-2 rel L2 on random data, against bf16's 1.7e-3) and its speed.
This runs whole inferences of the independent float64 reference (tools/reference/pi0_ref.py) on the GPU with the
operands of the big matrix products rounded as an FP8 pipeline would round them, and compares the actions with the
unrounded float64 actions (the CUDA backend issue's metric: rel L2 of the actions, bound 2e-2).

Rounded products: per stage, the layers' q / k / v / o and MLP products (SigLIP also its projector); the patch
embedding, the small suffix products, the head and attention's own products stay exact. Modes per stage:
  x  exact (float64)
  b  both operands rounded to bf16 (the checkpoint's weights are bf16 already, so this rounds the activations)
  8  W8A8: e4m3 weights with one scale per output row, e4m3 activations with one scale per row (token)
  w  W8A16: e4m3 weights as above, bf16 activations
  k  W8A8 with finer scales: one per 128 consecutive columns of each row, weights and activations (DeepSeek-V3's
     activation blocks; finer than its 128 x 128 weight blocks)
Each product's result stays float64, so the table isolates the operands' rounding (the engine also rounds its
outputs and attention to bf16: its measured GPU-vs-CPU error is 3.0e-3 for pi0-3cam).

Random-weight checkpoints (`pi0 gen-checkpoint`) have no outlier features, so these errors are a lower bound for
real checkpoints, whose activations FP8 handles worse.

usage: python3 bench/fp8_e2e.py CKPT_DIR [CKPT_DIR ...]   (env SEEDS=2, MODES=bbb,888,..., DEV=cuda)
"""
import math
import os
import sys
import time

import numpy as np
import torch

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "reference"))
import pi0_ref as ref  # noqa: E402

F64 = torch.float64
E4M3_MAX = 448.0
MODES = os.environ.get("MODES", "bbb,888,www,88b,8bb,b8b,bb8,bbw").split(",")
DEV = os.environ.get("DEV", "cuda")   # cpu: a smoke test of the x / b modes on a tiny checkpoint


def bf16(t):
    return t.float().to(torch.bfloat16).to(F64)


def e4m3_rows(t):
    """t rounded to e4m3 with one scale per row of the last dimension (amax -> 448)."""
    s = t.abs().amax(dim=-1, keepdim=True).clamp(min=1e-30) / E4M3_MAX
    return (t / s).float().to(torch.float8_e4m3fn).to(F64) * s


def e4m3_blocks(t, blk=128):
    """t rounded to e4m3 with one scale per 128 consecutive elements of each row (a short last block as is)."""
    k = t.shape[-1]
    pad = (-k) % blk
    u = torch.nn.functional.pad(t, (0, pad)).reshape(*t.shape[:-1], (k + pad) // blk, blk)
    return e4m3_rows(u).reshape(*t.shape[:-1], k + pad)[..., :k]


ROUND = {"x": (lambda x: x, lambda w: w), "b": (bf16, bf16), "8": (e4m3_rows, e4m3_rows), "w": (bf16, e4m3_rows),
         "k": (e4m3_blocks, e4m3_blocks)}
STAGE_OF = {}      # id(weight) -> 0 vision, 1 prefill, 2 expert
CURRENT = ["xxx"]  # the mode string in use
_exact_linear = ref.linear


def rounded_linear(x, w, b=None):
    st = STAGE_OF.get(id(w))
    if st is None or CURRENT[0][st] == "x":
        return _exact_linear(x, w, b)
    rx, rw = ROUND[CURRENT[0][st]]
    return _exact_linear(rx(x), rw(w), b)


ref.linear = rounded_linear   # pi0_ref's methods look the name up at call time


def stage_map(m):
    cfg, w = m.cfg, m.w
    names = {0: [ref.PROJ + ".weight"], 1: [], 2: []}
    for i in range(cfg["vision"]["depth"]):
        b = f"{ref.V}.encoder.layers.{i}"
        names[0] += [f"{b}.self_attn.{n}_proj.weight" for n in ("q", "k", "v", "out")]
        names[0] += [f"{b}.mlp.fc1.weight", f"{b}.mlp.fc2.weight"]
    for st, pre, key in ((1, ref.LM + ".layers", "paligemma"), (2, ref.EX + ".model.layers", "action_expert")):
        for l in range(cfg[key]["depth"]):
            b = f"{pre}.{l}"
            names[st] += [f"{b}.self_attn.{n}_proj.weight" for n in ("q", "k", "v", "o")]
            names[st] += [f"{b}.mlp.{n}_proj.weight" for n in ("gate", "up", "down")]
    STAGE_OF.clear()
    for st, ns in names.items():
        for n in ns:
            STAGE_OF[id(w[n])] = st
    return sum(len(v) for v in names.values())


def inputs(cfg, vocab, seed, cams=3, prompt=20, horizon=10):
    """pi0-3cam-shaped inputs (PI0_IO.md section 3): B = 1, 3 valid cameras, 20 valid tokens, horizon 10."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    R = cfg["vision"]["image_size"]
    return {"images": torch.rand(1, cams, R, R, 3, generator=g, device=DEV, dtype=F64) * 2 - 1,
            "image_masks": torch.ones(1, cams, dtype=torch.bool, device=DEV),
            "tokens": torch.randint(0, vocab, (1, prompt), generator=g, device=DEV),
            "token_mask": torch.ones(1, prompt, dtype=torch.bool, device=DEV),
            "state": torch.randn(1, 32, generator=g, device=DEV, dtype=F64),
            "noise": torch.randn(1, horizon, 32, generator=g, device=DEV, dtype=F64)}


def sample(m, inp, steps=10):
    emb, valid, _ = m.embed_prefix(inp["images"], inp["image_masks"], inp["tokens"], inp["token_mask"])
    cache = m.prefix_pass(emb, valid)
    dt, ts = ref.time_schedule(steps)
    x = inp["noise"]
    for t in ts:
        x = x + float(dt) * m.expert_forward(cache, valid, inp["state"], x, torch.full((1,), float(t), dtype=F64))
    return x


def rel(a, b):
    return float((a - b).norm() / b.norm())


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if DEV != "cpu":
        torch.set_default_device(DEV)
        torch.backends.cuda.matmul.allow_tf32 = False
    seeds = int(os.environ.get("SEEDS", "2"))
    print("mode = rounding of (vision, prefill, expert) products: x exact, b bf16, 8 W8A8 e4m3, w W8A16, k W8A8 "
          "in 128-column blocks")
    print("columns: rel L2 of the actions against the exact float64 run (the CUDA issue's metric, bound 2e-2),")
    print("         rel L2 of actions - noise (what the ten steps add), max |diff| of the actions")
    for ck in sys.argv[1:]:
        t0 = time.time()
        m = ref.Pi0Reference(ck)
        m.w = {k: v.to(DEV) for k, v in m.w.items()}
        n = stage_map(m)
        print(f"\n{ck} ({'pi05' if m.cfg['pi05'] else 'pi0'}): {n} rounded weight matrices, loaded in "
              f"{time.time() - t0:.0f} s")
        for seed in range(seeds):
            inp = inputs(m.cfg, m.w[ref.EMBED].shape[0], 1000 + seed)
            CURRENT[0] = "xxx"
            exact = sample(m, inp)
            d_exact = exact - inp["noise"]
            for mode in MODES:
                if len(mode) != 3 or any(c not in ROUND for c in mode):
                    sys.exit(f"fp8_e2e: bad mode '{mode}' (three of x, b, 8, w, k)")
                CURRENT[0] = mode
                t1 = time.time()
                a = sample(m, inp)
                print(f"  seed {seed} mode {mode}: actions rel_l2={rel(a, exact):.3e}  "
                      f"(actions - noise) rel_l2={rel(a - inp['noise'], d_exact):.3e}  "
                      f"max_abs={float((a - exact).abs().max()):.3e}  ({time.time() - t1:.1f} s)", flush=True)
        del m
        if DEV != "cpu":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
