#!/usr/bin/env python3
"""What FP8 products would do to the actions, end to end (issue 5's FP8 lead; bench/RESULTS.md L123).

fp8_probe.py measured one product's FP8 error (3.7e-2 rel L2 on random data, against bf16's 1.7e-3) and its speed.
This runs whole inferences of the independent float64 reference (tools/reference/pi0_ref.py) on the GPU with the
operands of the big matrix products rounded as an FP8 pipeline would round them, and compares the actions with the
unrounded float64 actions (the CUDA backend issue's metric: rel L2 of the actions, bound 2e-2).

Rounded products: per stage, the layers' q / k / v / o and MLP products (SigLIP also its projector). The patch
embedding, the small suffix products, π0.5's adaRMS modulations (the engine computes them once per session, spec
3.13), the head and attention's own products stay exact. Modes per stage:
  x  exact (float64)
  b  both operands rounded to bf16 (the checkpoint's weights are bf16 already, so this rounds the activations)
  8  W8A8: e4m3 weights with one scale per output row, e4m3 activations with one scale per row (token)
  w  W8A16: e4m3 weights as above, bf16 activations
  a  e4m3 activations only (bf16 weights): splits 8's error into its two operands
  k  W8A8 with finer scales: one per 128 consecutive columns of each row, weights and activations (DeepSeek-V3's
     activation blocks; finer than its 128 x 128 weight blocks)
Each product's result stays float64, so the table isolates the operands' rounding (the engine also rounds its
outputs and attention to bf16: its measured GPU-vs-CPU error is 3.0e-3 for pi0-3cam).

A weight's rounding is one fixed perturbation of the model, so one rounding is one draw of the error. Realization 0
scales every row's amax to 448, as a pipeline would; realizations r > 0 scale it to 448 u, u uniform in [0.5, 1] per
row (or block), drawn from r, the product and the operand. The draws are the same in every call of a run, so equal
inputs round equally, as in a real pipeline (pi0's state token has the same activations in all ten steps: per-call
draws would decorrelate its errors and halve the activations' share). The spread over realizations and input seeds
is the error's spread.
Random-weight checkpoints (`pi0 gen-checkpoint`) have no outlier channels and no trained sensitivity: real
checkpoints can land on either side of these numbers.

usage: python3 bench/fp8_e2e.py CKPT_DIR [CKPT_DIR ...]   (env SEEDS=2 REALS=3 MODES=bbb,888,... DEV=cuda)
Inputs per model: pi0-3cam's shape (3 cameras, 20 tokens) for π0, pi05-3cam's (64 valid of 200 tokens) for π0.5,
horizon 10, B = 1, 10 steps.
"""
import os
import statistics
import sys
import time

import torch

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "reference"))
import pi0_ref as ref  # noqa: E402

F64 = torch.float64
E4M3_MAX = 448.0
MODES = os.environ.get("MODES", "bbb,888,88b,8bb,b8b,bb8,www,bbw,aaa,kkk").split(",")
DEV = os.environ.get("DEV", "cuda")   # cpu: a smoke test of the x / b modes on a tiny checkpoint (no float8 needed)
SEEDS = int(os.environ.get("SEEDS", "2"))
REALS = int(os.environ.get("REALS", "3"))
STAGES = ("vision", "prefill", "expert")

REAL = [0]          # the rounding realization in use
CURRENT = ["xxx"]   # the mode in use
KEY_OF = {}         # id(weight) -> (stage, index)
HITS = set()        # ids of the weights rounded in the current run


def bf16(t, key=None):
    return t.float().to(torch.bfloat16).to(F64)


def _jitter(shape, key):
    """u in [0.5, 1] per row for realization > 0 (None for realization 0); key: 2 x the product's index + 1 for X."""
    if REAL[0] == 0:
        return None
    g = torch.Generator(device=DEV).manual_seed(REAL[0] * 1000003 + key)
    return 0.5 + 0.5 * torch.rand(shape, generator=g, device=DEV, dtype=F64)


def e4m3_rows(t, key=None):
    """t rounded to e4m3 with one scale per row of the last dimension (the row's amax -> 448 u)."""
    amax = t.abs().amax(dim=-1, keepdim=True).clamp(min=1e-30)
    u = _jitter(amax.shape, key)
    s = amax / E4M3_MAX if u is None else amax / (E4M3_MAX * u)
    return (t / s).float().to(torch.float8_e4m3fn).to(F64) * s


def e4m3_blocks(t, key=None, blk=128):
    """t rounded to e4m3 with one scale per 128 consecutive elements of each row (a short last block as is)."""
    k = t.shape[-1]
    pad = (-k) % blk
    u = torch.nn.functional.pad(t, (0, pad)).reshape(*t.shape[:-1], (k + pad) // blk, blk)
    return e4m3_rows(u, key).reshape(*t.shape[:-1], k + pad)[..., :k]


def same(t, key=None):
    return t


ROUND = {"x": (same, same), "b": (bf16, bf16), "8": (e4m3_rows, e4m3_rows), "w": (bf16, e4m3_rows),
         "a": (e4m3_rows, bf16), "k": (e4m3_blocks, e4m3_blocks)}
_exact_linear = ref.linear


def rounded_linear(x, w, b=None):
    key = KEY_OF.get(id(w))
    if key is None or CURRENT[0][key[0]] == "x":
        return _exact_linear(x, w, b)
    HITS.add(id(w))
    rx, rw = ROUND[CURRENT[0][key[0]]]
    return _exact_linear(rx(x, 2 * key[1] + 1), rw(w, 2 * key[1]), b)


ref.linear = rounded_linear   # pi0_ref's methods look the name up at call time


def stage_map(m):
    """Fills KEY_OF for m's big products; returns the weights' ids per stage."""
    cfg, w = m.cfg, m.w
    names = ([ref.PROJ + ".weight"], [], [])
    for i in range(cfg["vision"]["depth"]):
        b = f"{ref.V}.encoder.layers.{i}"
        names[0].extend([f"{b}.self_attn.{n}_proj.weight" for n in ("q", "k", "v", "out")])
        names[0].extend([f"{b}.mlp.fc1.weight", f"{b}.mlp.fc2.weight"])
    for st, pre, part in ((1, ref.LM + ".layers", "paligemma"), (2, ref.EX + ".model.layers", "action_expert")):
        for l in range(cfg[part]["depth"]):
            b = f"{pre}.{l}"
            names[st].extend([f"{b}.self_attn.{n}_proj.weight" for n in ("q", "k", "v", "o")])
            names[st].extend([f"{b}.mlp.{n}_proj.weight" for n in ("gate", "up", "down")])
    KEY_OF.clear()
    ids = ([], [], [])
    for st, ns in enumerate(names):
        for n in ns:
            KEY_OF[id(w[n])] = (st, len(KEY_OF))
            ids[st].append(id(w[n]))
    return ids


def inputs(m, seed, horizon=10):
    """pi0-3cam's shape for π0 (20 of 20 tokens), pi05-3cam's for π0.5 (64 of 200): tools/bench.c."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    R = m.cfg["vision"]["image_size"]
    vocab = m.w[ref.EMBED].shape[0]
    valid, padded = (64, 200) if m.cfg["pi05"] else (20, 20)
    return {"images": torch.rand(1, 3, R, R, 3, generator=g, device=DEV, dtype=F64) * 2 - 1,
            "image_masks": torch.ones(1, 3, dtype=torch.bool, device=DEV),
            "tokens": torch.randint(0, vocab, (1, padded), generator=g, device=DEV),
            "token_mask": torch.arange(padded, device=DEV)[None] < valid,
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
    for mode in MODES:   # before the long load
        if len(mode) != 3 or any(c not in ROUND for c in mode):
            sys.exit(f"fp8_e2e: bad mode '{mode}': three letters of {''.join(ROUND)} (vision, prefill, expert)")
    if DEV != "cpu":
        torch.set_default_device(DEV)
        torch.backends.cuda.matmul.allow_tf32 = False
    print("mode = rounding of (vision, prefill, expert) products: x exact, b bf16, 8 W8A8 e4m3, w W8A16, "
          "a A8 only, k W8A8 in 128-column blocks")
    print("per run: rel L2 of the actions against the exact float64 run (the CUDA issue's metric, bound 2e-2),")
    print("         rel L2 of actions - noise (what the ten steps add); realization 0: amax -> 448, r > 0: jittered")
    bad = 0
    for ck in sys.argv[1:]:
        t0 = time.time()
        m = ref.Pi0Reference(ck)
        m.w = {k: v.to(DEV) for k, v in m.w.items()}
        ids = stage_map(m)
        print(f"\n{ck} ({'pi05' if m.cfg['pi05'] else 'pi0'}): {' + '.join(str(len(i)) for i in ids)} rounded "
              f"weight matrices (vision + prefill + expert), loaded in {time.time() - t0:.0f} s")
        res = {mode: [] for mode in MODES}
        for seed in range(SEEDS):
            inp = inputs(m, 1000 + seed)
            CURRENT[0] = "xxx"
            exact = sample(m, inp)
            d_exact = exact - inp["noise"]
            for mode in MODES:
                for r in range(REALS if any(c not in "xb" for c in mode) else 1):
                    CURRENT[0], REAL[0] = mode, r
                    HITS.clear()
                    t1 = time.time()
                    a = sample(m, inp)
                    missed = [STAGES[st] for st in range(3) if mode[st] != "x" and not HITS.issuperset(ids[st])]
                    if missed:   # a product that bypassed the patch would silently stay exact
                        print(f"fp8_e2e: mode {mode}: not every {', '.join(missed)} weight was rounded")
                        bad = 1
                    e = rel(a, exact)
                    res[mode].append(e)
                    print(f"  seed {seed} mode {mode} r {r}: actions rel_l2={e:.3e}  (actions - noise) "
                          f"rel_l2={rel(a - inp['noise'], d_exact):.3e}  ({time.time() - t1:.1f} s)", flush=True)
        print(f"summary {ck}: actions rel_l2 over {SEEDS} seeds x realizations: min / median / max")
        for mode, v in res.items():
            print(f"  {mode}: {min(v):.2e} / {statistics.median(v):.2e} / {max(v):.2e}  ({len(v)} runs)")
        del m
        if DEV != "cpu":
            torch.cuda.empty_cache()
    sys.exit(bad)


if __name__ == "__main__":
    main()
