#!/usr/bin/env python3
"""Which calibration-free 8-bit (W8A8 int8) scheme keeps the actions within the noise scale (bench/RESULTS.md, 8-bit).

Runs whole inferences of the independent float64 reference (tools/reference/pi0_ref.py) with the operands of the
products of docs/precision.md 1 (SigLIP q/k/v/out/fc1/fc2, the Gemma prefix's and the action expert's
q/k/v/o/gate/up/down) quantised and dequantised as a kernel would quantise them, and everything else exact:
  W: the checkpoint's value rounded to bf16 (then, for the schemes that say so, gain-folded and rotated in fp32),
     quantised with fp32 scales amax / 127, round half to even, clamp to +-127 (docs/precision.md 2);
  x: rounded to fp32 (the CPU twin's activations; rotated in fp32 for the rotating schemes) and quantised the same
     way from its live values (docs/precision.md 3);
  y = dequant(x) . dequant(W)^T + b in float64. The int32 products of the engine are exact, so this is the engine's
     product up to the final fp32 rounding of its fma (scheme `row` is checked against pi0_ref's bit-level int8
     product: see --check).
Schemes: tokens joined by '+'; without a scale token, one scale per row.
  row        one scale per row of W (output feature) and per row of x (token): the engine today
  kN         one scale per N consecutive elements of K in every row of W and of x (a short last block as it is);
             wkN / xkN: for W or x alone (the other per row)
  had        Hadamard rotation along K of both operands, W' = W H, x' = x H (H orthonormal, Sylvester order,
             block-diagonal with blocks of the largest power of two dividing K: SigLIP K = 1152 -> 128,
             4304 -> 16; Gemma 2048, 16384 and the expert's 1024, 2048, 4096 -> one block of K)
  hadp       the same, but a K whose largest power-of-two divisor is under 128 (SigLIP fc2, 4304) is padded with
             zero columns to a multiple of 256 (4352) and rotated in blocks of 256
  hada       hadp where it makes W's own int8 rounding error smaller, no rotation elsewhere (decided per weight at
             load, from W alone)
  fold       the norm's gain (and LayerNorm's bias) moved into the weights of the products it feeds: Gemma's
             (1 + w) and SigLIP's LayerNorm w into W's columns, its bias into b (b + W beta); x is then the
             normalised row without the gain. Only where the gain is a weight: not π0.5's adaRMS modulation
             (a function of the time), whose products keep x as it is
  fold+had   the two: what a QuaRot-style engine gets with the rotation folded into the weights (residual
             stream rotated, gains folded first); o / down / fc2 rotate online (as had)
  mse        W's scale per row (or block) clipped to the fraction c of amax in {1, 0.95, ..., 0.5} that
             minimises the row's squared rounding error (computed at load, free at run time)
  a2         x as two int8 terms, x = s1 q1 + s2 q2 (q2 quantises what q1 left): twice the integer products
  wonly / aonly / bf16   diagnostics: W in int8 and x exact (fp32) / x in int8 and W exact / both in bf16
Each configuration quantises one stage (vision, prefix or expert) or all three and is compared with the exact run
on the same inputs: rel L2 of the actions over every sample and the smallest per-sample cosine, next to the noise
scale: the rel L2 of the exact actions when every pixel of every camera moves by +-1 intensity level (2/255 in
[-1, 1], random sign per pixel, clamped), as `pi0 check-precision` measures it.

Trained-like outliers (a checkpoint argument DIR:outliers): a fixed perturbation of the random checkpoint, drawn
from a seed, every changed tensor rounded to bf16 again:
  - in every quantised weight, one input column (k) in 200 (at least one) scaled 6x;
  - per stage one residual channel in 200 (at least one), the same in every layer, written 40x: those rows (and
    bias entries) of SigLIP out_proj / fc2 and Gemma / expert o_proj / down_proj;
  - in every norm feeding a quantised product, one channel in 200 (at least one), drawn per norm, with its gain 5x
    (Gemma (1 + w) -> 5 (1 + w); LayerNorm w -> 5 w; π0.5's adaRMS: the scale rows of its dense -> 5 (1 + scale)).

usage: python3 bench/int8_schemes.py CKPT_DIR[:outliers] [...]
       python3 bench/int8_schemes.py --check CKPT_DIR [...]   (scheme row against pi0_ref's int8; tiny checkpoints)
       python3 bench/int8_schemes.py --products   (one product's error per scheme on synthetic operands, seconds)
  env: SCHEMES=row,k128,... (default below)  STAGES=all,prefix,expert,vision  SEEDS=2  BATCH=4  DEV=cpu|cuda
       CAMERAS=3 (how many of the 3 camera slots hold an image; the others are masked)
Inputs per seed (as `pi0 check-precision`): BATCH observations, images uniform in [-1, 1], 20 valid random prompt
tokens (of max_token_len), a state of 8 normal values, normal flow noise, horizon and cameras of the checkpoint,
10 steps. Inputs are drawn on the CPU, so DEV=cpu and DEV=cuda see the same ones.
"""
import json
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
DEV = os.environ.get("DEV", "cpu")
SCHEMES = os.environ.get("SCHEMES", "row,k128,k64,k32,had+row,had+k128,had+k32,fold+row,fold+had+row,mse,had+mse,"
                         "wonly,aonly,xk32,a2,bf16").split(",")
STAGESETS = os.environ.get("STAGES", "all,prefix,expert,vision").split(",")
SEEDS = int(os.environ.get("SEEDS", "2"))
BATCH = int(os.environ.get("BATCH", "4"))
CAMERAS = int(os.environ.get("CAMERAS", "3"))
STAGES = ("vision", "prefix", "expert")
CLIPS = [1.0 - 0.05 * i for i in range(11)]


# ---- loading (bf16 -> float64 on the device, no float64 copy of the file in host memory) ----

def load(ckpt):
    with open(os.path.join(ckpt, "config.json")) as f:
        raw = json.load(f)
    path = os.path.join(ckpt, "model.safetensors")
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", None) or {}
    mm = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    m = QModel.__new__(QModel)
    m.cfg = ref.make_config(raw, tensor_names=set(header))
    m.quant, m.mode, m.cache, m.cached = {}, {}, {}, None
    names = {k: k for k in ref.expected_tensors(m.cfg)}
    if ref.EMBED not in header:
        names[ref.EMBED] = meta.get(ref.EMBED, ref.LM_HEAD)
    m.w = {}
    for name, src in names.items():
        info = header[src]
        b, e = info["data_offsets"]
        if info["dtype"] == "BF16":
            t = torch.from_numpy(np.array(mm[b:e]).view(np.int16)).to(DEV)
            t = ((t.to(torch.int32) & 0xFFFF) << 16).view(torch.float32).to(F64)
        elif info["dtype"] == "F32":
            t = torch.from_numpy(np.array(mm[b:e]).view(np.float32)).to(DEV).to(F64)
        else:
            raise ValueError(f"{path}: {src}: dtype {info['dtype']} (expected BF16 or F32)")
        m.w[name] = t.reshape(info["shape"])
    m.setup()
    return m


def bf16(t):
    return t.to(torch.float32).to(torch.bfloat16).to(F64)


# ---- the operand transforms ----

def fwht(x, blk):
    """x . H along the last dimension, H block-diagonal with orthonormal Sylvester-Hadamard blocks of size blk."""
    shape, K = x.shape, x.shape[-1]
    y = x.reshape(-1, K // blk, blk)
    h = 1
    while h < blk:
        y = y.reshape(-1, K // blk, blk // (2 * h), 2, h)
        y = torch.stack((y[..., 0, :] + y[..., 1, :], y[..., 0, :] - y[..., 1, :]), dim=-2)
        h *= 2
    return y.reshape(shape) / math.sqrt(blk)


def quant(t, blk, clip=None):
    """Quantise-dequantise fp32 rows t [..., K] (docs/precision.md 2-3) with one scale per row (blk None) or per blk
    elements; clip: per-scale factors on amax (same shape as the scales). Returns (float64 values, scales)."""
    K = t.shape[-1]
    if blk is None or blk >= K:
        g = t.unsqueeze(-2)
    else:
        g = torch.nn.functional.pad(t, (0, (-K) % blk)).reshape(*t.shape[:-1], -1, blk)
    amax = g.abs().amax(dim=-1, keepdim=True)
    if clip is not None:
        amax = (amax.to(F64) * clip).to(torch.float32)
    s = amax / torch.tensor(127.0, dtype=torch.float32, device=t.device)
    q = torch.where(s > 0, torch.clamp(torch.round(g / s), -127, 127), torch.zeros_like(g))
    return (q.to(F64) * s.to(F64)).reshape(*t.shape[:-1], -1)[..., :K], s


def mse_clip(w, blk):
    """Per scale, the factor of CLIPS whose quantisation of w (fp32 rows) has the least squared error."""
    best, err = None, None
    for c in CLIPS:
        _, s = quant(w, blk)
        f = torch.full(s.shape, c, dtype=F64, device=w.device)
        d, _ = quant(w, blk, f)
        e = (d - w.to(F64)) ** 2
        K = w.shape[-1]
        e = e.unsqueeze(-2) if blk is None or blk >= K else \
            torch.nn.functional.pad(e, (0, (-K) % blk)).reshape(*e.shape[:-1], -1, blk)
        e = e.sum(-1, keepdim=True)
        best = f if best is None else torch.where(e < err, f, best)
        err = e if err is None else torch.minimum(e, err)
    return best


class Scheme:
    def __init__(self, name):
        self.name, self.had, self.fold, self.mse, self.a2 = name, None, False, False, False
        self.wblk = self.xblk = None      # scale granularity of W and x: None = one per row
        self.wq = self.xq = "int8"        # "int8", "exact" (fp32 x / the checkpoint's W) or "bf16"
        for tk in name.split("+"):
            if tk == "row":
                pass
            elif tk in ("fold", "mse", "a2"):
                setattr(self, tk, True)
            elif tk == "bf16":
                self.wq = self.xq = "bf16"
            elif tk == "wonly":
                self.xq = "exact"
            elif tk == "aonly":
                self.wq = "exact"
            elif tk == "had":
                self.had = "div"
            elif tk in ("hadp", "hada"):
                self.had = "pad" if tk == "hadp" else "auto"
            elif tk[:1] in "kwx" and tk.lstrip("wx")[:1] == "k" and tk.lstrip("wx")[1:].isdigit():
                n = int(tk.lstrip("wx")[1:])
                if tk[0] != "x":
                    self.wblk = n
                if tk[0] != "w":
                    self.xblk = n
            else:
                raise ValueError(f"int8_schemes: scheme '{name}': unknown token '{tk}'")

    def rot(self, t):
        """t rotated along K (fp32 in, fp32 out): blocks of the largest power of two dividing K; with hadp, a K whose
        largest such block is under 128 is first padded with zeros to a multiple of 256 and rotated in blocks of 256
        (x' W'^T is unchanged: the padded columns are zero in both operands)."""
        if not self.had:
            return t
        K = t.shape[-1]
        blk = K & -K
        if self.had != "div" and blk < 128:
            t, blk = torch.nn.functional.pad(t, (0, (-K) % 256)), 256
        return fwht(t.to(F64), blk).to(torch.float32)


def operand(t, kind, blk, clip=None, two=False):
    """The operand the product sees: fp32 rows t quantised-dequantised as `kind` says (float64)."""
    if kind == "exact":
        return t.to(F64)
    if kind == "bf16":
        return bf16(t)
    d = quant(t, blk, clip)[0]
    if two:   # a second int8 term for what the first left: x = s1 q1 + s2 q2
        d = d + quant((t.to(F64) - d).to(torch.float32), blk)[0]
    return d


# ---- the model with quantised products ----

class QModel(ref.Pi0Reference):
    def setup(self):
        cfg = self.cfg
        self.stage_of, self.norm_of = {}, {}
        for st in STAGES:
            for n in ref.quantised_weights(cfg, {st}):
                self.stage_of[n[: -len(".weight")]] = st
        for i in range(cfg["vision"]["depth"]):
            b = f"{ref.V}.encoder.layers.{i}"
            for n in ("q_proj", "k_proj", "v_proj"):
                self.norm_of[f"{b}.self_attn.{n}"] = (f"{b}.layer_norm1", "ln")
            self.norm_of[f"{b}.mlp.fc1"] = (f"{b}.layer_norm2", "ln")
        parts = [(ref.LM + ".layers", cfg["paligemma"]["depth"])]
        if not cfg["pi05"]:   # π0.5's expert norms are adaRMS: the gain is a function of the time, not a weight
            parts.append((ref.EX + ".model.layers", cfg["action_expert"]["depth"]))
        for pre, depth in parts:
            for l in range(depth):
                b = f"{pre}.{l}"
                for n in ("q_proj", "k_proj", "v_proj"):
                    self.norm_of[f"{b}.self_attn.{n}"] = (f"{b}.input_layernorm", "rms")
                for n in ("gate_proj", "up_proj"):
                    self.norm_of[f"{b}.mlp.{n}"] = (f"{b}.post_attention_layernorm", "rms")
        self.hits = set()

    def set_mode(self, mode):
        """mode: {stage: Scheme}; stages not named stay exact. The weights' cache holds one scheme's weights."""
        for s in mode.values():
            if s is not self.cached:
                self.cache, self.cached = {}, s
        self.mode = dict(mode)

    def _gain(self, name):
        norm, kind = self.norm_of[name]
        if kind == "rms":
            return 1.0 + self.w[norm + ".weight"], None
        return self.w[norm + ".weight"], self.w[norm + ".bias"]

    def _weight(self, name, sch):
        """The dequantised weight (float64) and the bias correction of the scheme, cached per mode."""
        if name not in self.cache:
            w = bf16(self.w[name + ".weight"])
            db = None
            if sch.fold and name in self.norm_of:
                g, beta = self._gain(name)
                if beta is not None:
                    db = w @ beta
                w = w * g
            w = w.to(torch.float32)
            rot = bool(sch.had)
            if sch.had == "auto":   # rotate where that makes W's own rounding error smaller (W alone decides)
                err = [float(((operand(v, sch.wq, sch.wblk) - v.to(F64)).norm() / v.norm()))
                       for v in (w, sch.rot(w))]
                rot = err[1] < err[0]
            w = sch.rot(w) if rot else w
            clip = mse_clip(w, sch.wblk) if sch.mse else None
            self.cache[name] = (operand(w, sch.wq, sch.wblk, clip), db, rot)
        return self.cache[name]

    def _proj(self, x, name, bias=False):
        b = self.w[name + ".bias"] if bias else None
        sch = self.mode.get(self.stage_of.get(name))
        if sch is None:
            return ref.linear(x, self.w[name + ".weight"], b)
        self.hits.add(name)
        wq, db, rot = self._weight(name, sch)
        if sch.fold and name in self.norm_of:   # the row the norm made, before its gain (and bias)
            g, beta = self._gain(name)
            x = (x - beta) / g if beta is not None else x / g
            b = db if b is None else (b + db if db is not None else b)
        x = sch.rot(x.to(torch.float32)) if rot else x.to(torch.float32)
        return ref.linear(operand(x, sch.xq, sch.xblk, two=sch.a2), wq, b)


# ---- trained-like outliers ----

def add_outliers(m, seed=7):
    g = torch.Generator().manual_seed(seed)
    w, cfg = m.w, m.cfg

    def pick(n):
        return torch.randperm(n, generator=g, device="cpu")[: max(1, round(n / 200))].to(DEV)

    for name in m.stage_of:   # one input column in 200 of every quantised weight, 6x
        W = w[name + ".weight"]
        W[:, pick(W.shape[1])] *= 6
    for st, (pre, depth, width, writers) in {
            "vision": (f"{ref.V}.encoder.layers", cfg["vision"]["depth"], cfg["vision"]["width"],
                       ("self_attn.out_proj", "mlp.fc2")),
            "prefix": (ref.LM + ".layers", cfg["paligemma"]["depth"], cfg["paligemma"]["width"],
                       ("self_attn.o_proj", "mlp.down_proj")),
            "expert": (ref.EX + ".model.layers", cfg["action_expert"]["depth"], cfg["action_expert"]["width"],
                       ("self_attn.o_proj", "mlp.down_proj"))}.items():
        rows = pick(width)   # the stage's massive residual channels, the same in every layer
        for l in range(depth):
            for wr in writers:
                w[f"{pre}.{l}.{wr}.weight"][rows] *= 40
                if f"{pre}.{l}.{wr}.bias" in w:
                    w[f"{pre}.{l}.{wr}.bias"][rows] *= 40
            norms = ("input_layernorm", "post_attention_layernorm")
            for nn in ("layer_norm1", "layer_norm2") if st == "vision" else norms:
                base = f"{pre}.{l}.{nn}"
                c = pick(width)
                if st == "vision":
                    w[base + ".weight"][c] *= 5
                elif base + ".weight" in w:
                    w[base + ".weight"][c] = 5 * (1 + w[base + ".weight"][c]) - 1
                else:   # adaRMS: scale = dense rows [W, 2W)
                    w[base + ".dense.weight"][width + c] *= 5
                    w[base + ".dense.bias"][width + c] = 5 * (1 + w[base + ".dense.bias"][width + c]) - 1
    for k in w:
        if k != ref.EMBED:
            w[k] = bf16(w[k])


# ---- runs ----

def inputs(m, seed):
    g = torch.Generator().manual_seed(seed)
    cfg = m.cfg
    R, N = cfg["vision"]["image_size"], 3
    L, H, A = cfg["max_token_len"], cfg["action_horizon"], cfg["action_dim"]
    vocab = m.w[ref.EMBED].shape[0]
    state = torch.randn(BATCH, A, generator=g, dtype=F64, device="cpu")
    state[:, 8:] = 0
    return {"images": (torch.rand(BATCH, N, R, R, 3, generator=g, dtype=F64, device="cpu") * 2 - 1).to(DEV),
            "image_masks": (torch.arange(N)[None].expand(BATCH, N) < CAMERAS).to(DEV),
            "tokens": torch.randint(2, vocab, (BATCH, L), generator=g, device="cpu").to(DEV),
            "token_mask": (torch.arange(L)[None].expand(BATCH, L) < min(20, L)).to(DEV),
            "state": state.to(DEV),
            "noise": torch.randn(BATCH, H, A, generator=g, dtype=F64, device="cpu").to(DEV),
            "pixel_noise": (torch.randint(0, 2, (BATCH, N, R, R, 3), generator=g, device="cpu") * 4 - 2)
            .to(F64).to(DEV) / 255}


def embed(m, vis, inp):
    B, N, T, Dp = vis.shape
    txt = m.w[ref.EMBED][inp["tokens"]] * math.sqrt(m.cfg["paligemma"]["width"])
    emb = torch.cat([vis.reshape(B, N * T, Dp), txt], dim=1)
    valid = torch.cat([inp["image_masks"][:, :, None].expand(B, N, T).reshape(B, N * T), inp["token_mask"]], dim=1)
    return emb, valid


def denoise(m, cache, valid, inp, steps=10):
    dt, ts = ref.time_schedule(steps)
    x = inp["noise"]
    for t in ts:
        x = x + float(dt) * m.expert_forward(cache, valid, inp["state"], x, torch.full((BATCH,), float(t), dtype=F64))
    return x


def deviation(a, r):
    """(rel L2 over everything, per-sample cosines) of actions a against r, [S, H, A]."""
    a, r = a.reshape(a.shape[0], -1), r.reshape(r.shape[0], -1)
    return float((a - r).norm() / r.norm()), ((a * r).sum(1) / (a.norm(dim=1) * r.norm(dim=1))).tolist()


def run_model(m, label):
    t0 = time.time()
    exact, noisy, noisy16, got = [], [], [], {(s, st): [] for s in SCHEMES for st in STAGESETS}
    for seed in range(SEEDS):
        inp = inputs(m, 1000 + seed)
        m.set_mode({})
        t1 = time.time()
        vis_e = m.vision(inp["images"])
        emb_e, valid = embed(m, vis_e, inp)
        cache_e = m.prefix_pass(emb_e, valid)
        act_e = denoise(m, cache_e, valid, inp)
        print(f"  seed {seed}: exact inference {time.time() - t1:.1f} s", flush=True)
        exact.append(act_e)
        noisy_img = torch.clamp(inp["images"] + inp["pixel_noise"], -1, 1)
        emb_n, _ = embed(m, m.vision(noisy_img), inp)
        noisy.append(denoise(m, m.prefix_pass(emb_n, valid), valid, inp))
        if "bf16" in SCHEMES:   # the noise scale as the engine's bf16 path sees it (products' operands in bf16)
            m.set_mode({x: Scheme("bf16") for x in STAGES})
            for img, out in ((inp["images"], noisy16), (noisy_img, noisy16)):
                emb, _ = embed(m, m.vision(img), inp)
                out.append(denoise(m, m.prefix_pass(emb, valid), valid, inp))
        for name in SCHEMES:
            s = Scheme(name)
            t1 = time.time()
            vis_s = None
            for st in STAGESETS:
                on = STAGES if st == "all" else (st,)
                m.set_mode({x: s for x in on})
                m.hits.clear()
                if "vision" in on:
                    if vis_s is None:
                        vis_s, vis_hits = m.vision(inp["images"]), set(m.hits)
                    m.hits |= vis_hits
                    emb = embed(m, vis_s, inp)[0]
                else:
                    emb = emb_e
                cache = m.prefix_pass(emb, valid) if set(on) & {"vision", "prefix"} else cache_e
                got[(name, st)].append(denoise(m, cache, valid, inp))
                want = {n for n, x in m.stage_of.items() if x in on}
                if want - m.hits:
                    sys.exit(f"int8_schemes: {name} {st}: {len(want - m.hits)} products were not quantised")
            n_rot = sum(v[2] for v in m.cache.values())
            rot = f", rotated {n_rot} of {len(m.cache)} weights" if s.had == "auto" else ""
            print(f"  seed {seed}: {name}: {time.time() - t1:.1f} s{rot}", flush=True)
    ex, ns = torch.cat(exact), torch.cat(noisy)
    scale, cos_n = deviation(ns, ex)
    print(f"\n{label}: {SEEDS} seeds x {BATCH} observations, {time.time() - t0:.0f} s")
    print(f"| {label} | rel L2 | x noise scale | min cosine |")
    print(f"| noise scale (+-1 level) | {scale:.2e} | 1.0 | {min(cos_n):.6f} |")
    if noisy16:
        d, c = deviation(torch.cat(noisy16[1::2]), torch.cat(noisy16[0::2]))
        print(f"| noise scale, bf16 operands in both runs | {d:.2e} | {d / scale:.2f} | {min(c):.6f} |")
    for name in SCHEMES:
        for st in STAGESETS:
            d, c = deviation(torch.cat(got[(name, st)]), ex)
            per = [deviation(a, e)[0] / deviation(n, e)[0] for a, e, n in zip(got[(name, st)], exact, noisy)]
            print(f"| {name} {st} | {d:.2e} | {d / scale:.2f} (seeds {' '.join(f'{p:.2f}' for p in per)}) "
                  f"| {min(c):.6f} |", flush=True)


def check(ckpt):
    """Scheme `row` against pi0_ref's int8 (docs/precision.md): the same codes and scales on the checkpoint's weights
    and on activation-like rows (bit for bit), then whole inferences with one stage quantised."""
    m = load(ckpt)
    ok = True
    g = torch.Generator().manual_seed(5)
    for name in m.stage_of:
        w = m.w[name + ".weight"]
        x = torch.randn(7, w.shape[1], generator=g, dtype=F64) * torch.rand(1, w.shape[1], generator=g, dtype=F64) * 9
        for t in (bf16(w).cpu(), x):
            d, s = quant(t.to(torch.float32), None)
            q, sr = ref.quantize_rows(t.numpy().astype(np.float32))
            ok &= bool((d.cpu() == torch.from_numpy(q * sr[:, None].astype(np.float64))).all())
    print(f"check {ckpt}: codes and scales of every quantised weight and of random rows equal pi0_ref's: {ok}")
    inp = inputs(m, 1000)
    cpu = {k: inp[k].cpu() for k in ("images", "image_masks", "tokens", "token_mask", "state", "noise")}
    m.set_mode({})
    emb, valid = embed(m, m.vision(inp["images"]), inp)
    e = denoise(m, m.prefix_pass(emb, valid), valid, inp).cpu()
    for st in STAGES:
        m.set_mode({st: Scheme("row")})
        emb, valid = embed(m, m.vision(inp["images"]), inp)
        a = denoise(m, m.prefix_pass(emb, valid), valid, inp).cpu()
        b = ref.Pi0Reference(ckpt, quant=(st,)).sample_actions(cpu)
        print(f"  int8 {st}: rel L2 against pi0_ref int8 {deviation(a, b)[0]:.1e} (pi0_ref int8 against exact "
              f"{deviation(b, e)[0]:.1e}; the difference is the engine's fp32 output rounding, and the codes it flips)")
    return ok


def products():
    """One product (M = 256 rows, K = 2048, N = 1024) per scheme, rel L2 against float64: uniform weights (as
    gen-checkpoint draws them) or normal ones (closer to trained), with one column in 200 at 6x or not; normal
    activations, with one channel in 200 at 20x or not."""
    g = torch.Generator().manual_seed(3)
    M, K, N = 256, 2048, 1024
    names = ("row", "k128", "k32", "had+row", "had+k128", "had+k32", "wonly", "aonly")
    print("| W | x | " + " | ".join(names) + " |")
    for wk in ("uniform", "normal", "uniform, outlier columns", "normal, outlier columns"):
        for xk in ("normal", "outlier channels"):
            if wk.startswith("uniform"):
                w = (torch.rand(N, K, generator=g, dtype=F64) * 2 - 1) * math.sqrt(3 / K)
            else:
                w = torch.randn(N, K, generator=g, dtype=F64) / math.sqrt(K)
            if wk.endswith("columns"):
                w[:, torch.randperm(K, generator=g)[: K // 200]] *= 6
            w = bf16(w)
            x = torch.randn(M, K, generator=g, dtype=F64)
            if xk != "normal":
                x[:, torch.randperm(K, generator=g)[: K // 200]] *= 20
            y, errs = x @ w.t(), []
            for name in names:
                sch = Scheme(name)
                w32, x32 = sch.rot(w.to(torch.float32)), sch.rot(x.to(torch.float32))
                yq = operand(x32, sch.xq, sch.xblk) @ operand(w32, sch.wq, sch.wblk).t()
                errs.append(float((yq - y).norm() / y.norm()))
            print(f"| {wk} | {xk} | " + " | ".join(f"{e:.1e}" for e in errs) + " |")


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    if args[0] == "--products":
        return products()
    if args[0] == "--check":
        sys.exit(0 if all(check(c) for c in args[1:]) else 1)
    for name in SCHEMES:
        Scheme(name)
    if DEV != "cpu":
        torch.set_default_device(DEV)
    print(f"torch {torch.__version__}, device {DEV}" +
          (f" ({torch.cuda.get_device_name()})" if DEV != "cpu" else f", {torch.get_num_threads()} threads"))
    for arg in args:
        ck, _, opt = arg.partition(":")
        t0 = time.time()
        m = load(ck)
        if opt == "outliers":
            add_outliers(m)
        elif opt:
            sys.exit(f"int8_schemes: '{arg}': the only option is ':outliers'")
        label = f"{'pi05' if m.cfg['pi05'] else 'pi0'}{' outliers' if opt else ''}"
        print(f"\n{arg} ({label}), loaded in {time.time() - t0:.0f} s", flush=True)
        run_model(m, label)
        del m
        if DEV != "cpu":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
