#!/usr/bin/python3
"""Self-checks of the float64 references (pi0_ref.py, pi0_fast_ref.py) and of the fixtures they wrote
(make_fixtures.py, make_fast_fixtures.py).

Each check prints one line `name  detail  OK|FAIL`; the exit status is non-zero if any check fails.
These checks can fail: they compare the reference against a second formulation of the same math (torch
library ops, compacted prefix, joint two-expert sequence without KV cache, a mask built from the spec's
prose) and check the invariances and sensitivities the spec implies (docs/model.md 3.3, 3.8, 3.13). The π0-FAST
part compares openpi's cached decoding loop with a full recomputation over the valid tokens only: equal where no
camera is masked, different where one is (the window quirk is exercised), and checks the end-token stop.
Usage: /usr/bin/python3 tools/reference/check_ref.py   (after make_fixtures.py and make_fast_fixtures.py)
"""
import bisect
import json
import math
import os
import shutil
import struct
import sys
import tempfile
from fractions import Fraction

import numpy as np
import torch
import torch.nn.functional as Fn

sys.dont_write_bytecode = True   # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pi0_fast_ref as fr  # noqa: E402
import pi0_ref as ref  # noqa: E402

F64 = torch.float64
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures")
MODELS = ("tiny-pi0", "tiny-pi05")
CASES = ("b1", "b1-masked", "b2")
FAST = os.path.join(FIX, "tiny-pi0-fast")
FAST_CASES = ("b1", "b1-masked", "b2", "b1-ar", "b2-eos")
failures = []


def report(name, ok, detail=""):
    print(f"{name:<58} {detail:<40} {'OK' if ok else 'FAIL'}")
    if not ok:
        failures.append(name)


def maxdiff(a, b):
    return float((torch.as_tensor(a, dtype=F64) - torch.as_tensor(b, dtype=F64)).abs().max())


def load_case(model_name, case):
    return ref.load_inputs(os.path.join(FIX, model_name, f"{case}.in.safetensors"))


def run_from_prefix(m, emb, valid, state, noise, steps=10, pos=None):
    """Euler loop from a given prefix embedding (for the compacted variant)."""
    cache = m.prefix_pass(emb, valid, pos)
    dt, ts = ref.time_schedule(steps)
    x = noise
    for t in ts:
        x = x + float(dt) * m.expert_forward(cache, valid, state, x, torch.full((x.shape[0],), float(t), dtype=F64))
    return x


# ---- building blocks against torch library ops / other formulations ----

def check_blocks():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 5, 24, generator=g, dtype=F64)
    w, b = torch.randn(24, generator=g, dtype=F64), torch.randn(24, generator=g, dtype=F64)
    report("layer_norm == F.layer_norm", maxdiff(ref.layer_norm(x, w, b), Fn.layer_norm(x, (24,), w, b, 1e-6)) < 1e-12)
    report("gelu_tanh == F.gelu(approximate=tanh)",
           maxdiff(ref.gelu_tanh(x), Fn.gelu(x, approximate="tanh")) < 1e-12)
    # RoPE half split == complex rotation of (x[:half] + i x[half:]) by pos * 10000^(-2i/Dh)
    q = torch.randn(2, 6, 3, 16, generator=g, dtype=F64)
    pos = torch.tensor([[-1, 0, 1, 2, 2, 40], [0, 0, 3, 4, 5, 6]])
    z = torch.complex(q[..., :8], q[..., 8:])
    ang = pos[..., None, None].to(F64) * torch.tensor([10000.0 ** (-2 * i / 16) for i in range(8)], dtype=F64)
    zr = z * torch.polar(torch.ones_like(ang), ang)
    report("rope == complex rotation", maxdiff(ref.rope(q, pos), torch.cat([zr.real, zr.imag], -1)) < 1e-12)
    # grouped-query attention == per-head loop with kv head h // (Hq/K), explicit softmax
    Hq, K, Dh = 4, 2, 8
    q, k, v = (torch.randn(2, n, h, Dh, generator=g, dtype=F64) for n, h in ((5, Hq), (7, K), (7, K)))
    allowed = torch.rand(2, 5, 7, generator=g) > 0.3
    allowed[:, :, 0] = True
    out = torch.zeros(2, 5, Hq, Dh, dtype=F64)
    for bb in range(2):
        for h in range(Hq):
            for i in range(5):
                lg = [float(q[bb, i, h] @ k[bb, j, h // (Hq // K)]) / math.sqrt(Dh) if allowed[bb, i, j] else None
                      for j in range(7)]
                mx = max(a for a in lg if a is not None)
                e = [math.exp(a - mx) if a is not None else 0.0 for a in lg]
                out[bb, i, h] = sum(e[j] / sum(e) * v[bb, j, h // (Hq // K)] for j in range(7))
    report("attention (GQA K=2) == explicit loop", maxdiff(ref.attention(q, k, v, allowed), out.reshape(2, 5, -1)) < 1e-12)
    none = torch.zeros(2, 5, 7, dtype=torch.bool)
    report("attention fully-masked rows are finite", bool(torch.isfinite(ref.attention(q, k, v, none)).all()))
    # time schedule: fp32 accumulation, runs exactly num_steps times
    counts = {n: len(ref.time_schedule(n)[1]) for n in (1, 2, 3, 7, 10, 50, 100)}
    ts = [float(t) for t in ref.time_schedule(10)[1]]
    ok = all(c == n for n, c in counts.items()) and ts[0] == 1.0 and abs(ts[-1] - 0.1) < 1e-6
    report("time schedule runs num_steps times", ok, f"t = {ts[0]:.1f} .. {ts[-1]:.9f}")
    e = ref.posemb_sincos(torch.tensor([0.0, 1.0], dtype=F64), 32)
    ok = maxdiff(e[0], torch.cat([torch.zeros(16), torch.ones(16)])) == 0 and \
        abs(float(e[1, 0]) - math.sin(2 * math.pi / 0.004)) < 1e-12 and \
        abs(float(e[1, 31]) - math.cos(2 * math.pi / 4.0)) < 1e-12
    report("posemb_sincos periods 0.004 .. 4.0", ok)


def check_patch_conv(m, inp):
    vs = m.cfg["vision"]
    img = torch.as_tensor(inp["images"]).to(F64)
    B, N, R = img.shape[:3]
    x = img.reshape(B * N, R, R, 3).permute(0, 3, 1, 2)
    w = m.w
    conv = Fn.conv2d(x, w[ref.V + ".embeddings.patch_embedding.weight"], w[ref.V + ".embeddings.patch_embedding.bias"],
                     stride=vs["patch_size"]).flatten(2).transpose(1, 2)
    p, C, g = vs["patch_size"], 3, R // vs["patch_size"]
    xr = img.reshape(B * N, g, p, g, p, C).permute(0, 1, 3, 2, 4, 5).reshape(B * N, g * g, -1)
    wp = w[ref.V + ".embeddings.patch_embedding.weight"].permute(0, 2, 3, 1).reshape(vs["width"], -1)
    mine = ref.linear(xr, wp, w[ref.V + ".embeddings.patch_embedding.bias"])
    return maxdiff(mine, conv)


# ---- second formulation: joint [prefix | suffix] sequence, both experts per layer, no cache (docs/model.md 3.8) ----

def prose_mask(valid, pi05, S):
    """Mask written from docs/model.md 3.6/3.10 prose: prefix<->valid prefix; suffix -> valid prefix; Pi0 state token
    sees itself only within the suffix; actions see state and all actions; Pi0.5 actions see all actions."""
    B, P = valid.shape
    M = torch.zeros(B, P + S, P + S, dtype=torch.bool)
    for b in range(B):
        for i in range(P + S):
            for j in range(P + S):
                if i < P:
                    M[b, i, j] = j < P and bool(valid[b, i]) and bool(valid[b, j])
                elif j < P:
                    M[b, i, j] = bool(valid[b, j])
                elif pi05:
                    M[b, i, j] = True
                else:
                    M[b, i, j] = (i - P == 0 and j - P == 0) or (i - P >= 1)
    return M


def joint_velocity(m, emb, valid, state, x, t, mask):
    pg, ex = m.cfg["paligemma"], m.cfg["action_expert"]
    s, ar, cond = m.embed_suffix(state, x, t)
    B, P = valid.shape
    S, H = s.shape[1], x.shape[1]
    jv = torch.cat([valid, torch.ones(B, S, dtype=torch.bool)], 1)
    pos = torch.cumsum(jv.to(torch.int64), 1) - 1
    h0, h1 = emb, s
    for l in range(pg["depth"]):
        b0, b1 = f"{ref.LM}.layers.{l}", f"{ref.EX}.model.layers.{l}"
        y0 = ref.gemma_rms_norm(h0, m.w[b0 + ".input_layernorm.weight"])
        y1, g1 = m._expert_norm(b1 + ".input_layernorm", h1, cond)
        (q0, k0, v0), (q1, k1, v1) = m._qkv(b0, y0, pg), m._qkv(b1, y1, ex)
        q = ref.rope(torch.cat([q0, q1], 1), pos)
        k = ref.rope(torch.cat([k0, k1], 1), pos)
        o = ref.attention(q, k, torch.cat([v0, v1], 1), mask)
        h0 = h0 + ref.linear(o[:, :P], m.w[b0 + ".self_attn.o_proj.weight"])
        h1 = h1 + m._gated(ref.linear(o[:, P:], m.w[b1 + ".self_attn.o_proj.weight"]), g1)
        h0 = h0 + m._mlp(b0, ref.gemma_rms_norm(h0, m.w[b0 + ".post_attention_layernorm.weight"]))
        y1, g2 = m._expert_norm(b1 + ".post_attention_layernorm", h1, cond)
        h1 = h1 + m._gated(m._mlp(b1, y1), g2)
    y, _ = m._expert_norm(ref.EX + ".model.norm", h1, cond)
    return ref.linear(y[:, -H:], m.w["action_out_proj.weight"], m.w["action_out_proj.bias"])


# ---- the 8-bit products (docs/precision.md) against scalar restatements ----

def _f32(v):
    """Python float -> nearest float32, as a Python float (struct rounds to nearest, ties to even)."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


def _round_f32(v):
    """Correct float32 rounding of an exact Fraction: the nearest of the float32 neighbours, ties to even."""
    f = np.float32(float(v))
    cands = (np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf)))
    return min(cands, key=lambda c: (abs(Fraction(float(c)) - v), int(np.float32(c).view(np.uint32)) & 1))


def check_quant():
    rng = np.random.default_rng(11)
    # fma: random operands over wide exponent ranges, plus two sums that land exactly halfway between two float32
    # values in float64 (a*b = 2^-24 (1 + 4688 2^-46), so 1 + a*b rounds to the tie 1 + 2^-24 in float64):
    # float32(float64 sum) breaks the tie to even and gets them wrong, the fma must not
    n = 4000
    a = (rng.standard_normal(n) * np.exp2(rng.integers(-30, 30, n))).astype(np.float32)
    b = (rng.standard_normal(n) * np.exp2(rng.integers(-30, 30, n))).astype(np.float32)
    c = (rng.standard_normal(n) * np.exp2(rng.integers(-60, 60, n))).astype(np.float32)
    ta, tb = np.float32(1 + 2896 * 2.0 ** -23), np.float32(2.0 ** -24 * (1 - 2895 * 2.0 ** -23))
    a, b, c = np.append(a, [ta, ta]), np.append(b, [tb, -tb]), np.append(c, np.float32([1.0, -1.0]))
    want = np.array([_round_f32(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)))
                     for x, y, z in zip(a, b, c)], np.float32)
    got = ref.fma_f32(a, b, c)
    naive = (a.astype(np.float64) * b + c).astype(np.float32)
    bad = int((got.view(np.uint32) != want.view(np.uint32)).sum())
    naive_bad = int((naive.view(np.uint32) != want.view(np.uint32)).sum())
    report("fma_f32 == exact sum rounded once (4002 cases)", bad == 0 and naive_bad >= 2,
           f"{bad} differ (float64 sum then fp32: {naive_bad})")

    # codes: numpy float32 steps against Python doubles rounded to float32 (a double result of one operation on
    # float32 values, rounded to float32, is the correctly rounded float32 result) and round() (half to even)
    x = (rng.standard_normal((6, 37)) * np.exp2(rng.integers(-20, 20, (6, 1)))).astype(np.float32)
    x[1] = 0.0
    x[2, 5] = np.float32(-3.0) * np.abs(x[2]).max()    # the row's extreme is negative
    x[3, :4] = np.float32([127, -127, 63.5, -0.5])      # s = 1: codes hit the .5 ties exactly
    x[3, 4:] = 0.25
    x[4, 7] = np.nan
    q, sc = ref.quantize_rows(x)
    ok = True
    for r in range(x.shape[0]):
        row = [float(v) for v in x[r]]
        if not all(math.isfinite(v) for v in row):
            ok &= bool(np.isnan(sc[r])) and not q[r].any()
            continue
        s = _f32(max(abs(v) for v in row) / 127.0)
        codes = [0 if s == 0 else max(-127, min(127, round(_f32(v / s)))) for v in row]
        ok &= float(sc[r]) == s and q[r].tolist() == codes
    ok &= q[3, :4].tolist() == [127, -127, 64, 0] and int(np.abs(q[0]).max()) == 127 and q[2, 5] == -127
    report("quantize_rows == scalar restatement (ties, zero, NaN rows)", ok, f"{x.shape[0]} rows")

    # one product restated with exact rationals, and its distance from the float64 product
    xs = torch.from_numpy(rng.standard_normal((5, 40)))
    w = ref.round_bf16(rng.standard_normal((7, 40)).astype(np.float32))
    bias = torch.from_numpy(rng.standard_normal(7).astype(np.float32).astype(np.float64))
    qw, sw = ref.quantize_rows(w)
    y = ref.linear_int8(xs, qw, sw, bias).numpy()
    qx, sx = ref.quantize_rows(xs.numpy().astype(np.float32))
    ok = True
    for i in range(5):
        for j in range(7):
            acc = sum(int(qx[i, k]) * int(qw[j, k]) for k in range(40))
            v = Fraction(float(np.float32(acc))) * Fraction(float(np.float32(sx[i] * sw[j]))) + Fraction(float(bias[j]))
            ok &= float(_round_f32(v)) == float(y[i, j])
    full = ref.linear(xs, torch.from_numpy(w.astype(np.float64)), bias).numpy()
    rel = float(np.linalg.norm(y - full) / np.linalg.norm(full))
    report("linear_int8 == exact-rational product; near float64", ok and 1e-4 < rel < 5e-2, f"rel L2 vs float {rel:.1e}")
    try:
        ref.linear_int8(xs.clone().requires_grad_(True), qw, sw)
        refused = False
    except ValueError:
        refused = True
    report("linear_int8 refuses a tensor that needs a gradient", refused)


# ---- the FP8 products (docs/precision.md 8) against exact rationals ----

def _e4m3_exact(code):
    """Section 8's value of an E4M3 code as a Fraction (None for the NaN codes), from the bit fields directly."""
    sign, e, m = code >> 7, (code >> 3) & 15, code & 7
    if e == 15 and m == 7:
        return None
    v = Fraction(m, 2 ** 9) if e == 0 else (8 + m) * Fraction(2) ** (e - 10)
    return -v if sign else v


_E4M3_EXACT = [_e4m3_exact(c) for c in range(128)]       # the non-negative half, codes 0..127 (127: NaN)
_E4M3_SORTED = sorted((v, c) for c, v in enumerate(_E4M3_EXACT) if v is not None)


def _f8_oracle(v):
    """The code of f8(v) for a finite or infinite Python float v, by exact distances: of the two finite E4M3
    magnitudes around |v| the nearer, on a tie the one with the even mantissa field; above 448, 448. The sign bit is
    v's (so -0.0 and negative values that round to zero give 0x80)."""
    sign = 0x80 if math.copysign(1.0, v) < 0 else 0
    if math.isinf(v):
        return sign | _E4M3_SORTED[-1][1]
    a = abs(Fraction(v))
    vals = [t[0] for t in _E4M3_SORTED]
    i = bisect.bisect_left(vals, a)
    if i == len(vals):
        return sign | _E4M3_SORTED[-1][1]
    cands = [_E4M3_SORTED[i]] + ([_E4M3_SORTED[i - 1]] if i > 0 else [])
    best = min(cands, key=lambda t: (abs(t[0] - a), t[1] & 1))
    return sign | best[1]


def check_fp8():
    rng = np.random.default_rng(8)
    # every code decodes to section 8's value; the table is increasing and ends at 448
    ok = True
    for c in range(256):
        want = _e4m3_exact(c)
        got = ref.E4M3_VALUES[c]
        ok &= bool(np.isnan(got)) if want is None else (not np.isnan(got) and Fraction(float(got)) == want)
    mags = [v for v in _E4M3_EXACT if v is not None]
    ok &= len(mags) == 127 and mags == sorted(set(mags)) and mags[-1] == 448 and mags[1] == Fraction(1, 512)
    report("E4M3 table == section 8's formula (256 codes)", ok, f"{len(mags)} finite magnitudes")

    # the encoder against exact nearest-with-ties-to-even: the midpoints between neighbouring codes (ties), the
    # float32 and float64 values next to them and next to every code, values above 448, the subnormal range, zeros,
    # random values over wide exponent ranges; each with both signs
    inputs = [0.0, 2.0 ** -149, 2.0 ** -126, 1e-30, 2.0 ** -10, 3 * 2.0 ** -10, 2.0 ** -9, 448.0, 464.0, 480.0,
              1e6, float(np.finfo(np.float32).max), math.inf]
    for lo, hi in zip(mags, mags[1:]):
        mid = (lo + hi) / 2
        for v in (lo, mid):
            f = float(v)
            inputs += [f, float(np.nextafter(np.float32(f), np.float32(-1))), float(np.nextafter(np.float32(f), np.float32(1e9))),
                       math.nextafter(f, -1.0), math.nextafter(f, 1e9)]
    inputs += [float(v) for v in rng.uniform(0, 2.0 ** -6, 3000).astype(np.float32)]          # subnormal codes
    inputs += [float(v) for v in (rng.standard_normal(12000) * np.exp2(rng.integers(-14, 11, 12000))).astype(np.float32)]
    inputs += [float(v) for v in rng.uniform(400, 600, 1000).astype(np.float32)]
    inputs = np.array(inputs + [-v for v in inputs], np.float64)
    want = np.array([_f8_oracle(float(v)) for v in inputs], np.uint8)
    mids = {(a + b) / 2 for a, b in zip(mags, mags[1:])}
    ties = sum(1 for v in inputs if math.isfinite(v) and abs(Fraction(float(v))) in mids)
    bad64 = int((ref.e4m3_encode(inputs) != want).sum())
    as32 = inputs.astype(np.float32)
    exact32 = as32.astype(np.float64) == inputs                                       # those float32 holds
    bad32 = int((ref.e4m3_encode(as32[exact32]) != want[exact32]).sum())
    try:
        ref.e4m3_encode(np.array([1.0, np.nan]))
        nan_refused = False
    except ValueError:
        nan_refused = True
    report(f"e4m3_encode == exact nearest, ties to even ({len(inputs)})", bad64 == 0 and bad32 == 0 and nan_refused
           and ties >= 2 * 126, f"{bad64} + {bad32} (float32) differ, {ties} ties")

    # scales and codes against a scalar restatement in Python doubles (one float32 operation each, as in
    # check_quant) and the oracle above
    x = (rng.standard_normal((8, 37)) * np.exp2(rng.integers(-20, 20, (8, 1)))).astype(np.float32)
    x[1] = 0.0
    x[2, 5] = np.float32(-3.0) * np.abs(x[2]).max()         # the row's extreme is negative
    x[3, :8] = np.float32([448, -448, 17, -19, 1.0625, 3 * 2.0 ** -10, 2.0 ** -10, -432])   # s = 1: exact ties
    x[3, 8:] = 0.25
    x[4, 7] = np.nan
    x[5, 3] = -np.inf
    x[6] = np.float32(2.0 ** -147) * np.sign(x[6])           # subnormal activations: s underflows to 0
    x[7] = np.float32(2.0 ** -140) * np.sign(x[7])           # s = 2^-149, every x / s = 512: saturates to 448
    q, sc = ref.quantize_rows_fp8(x)
    ok = True
    for r in range(x.shape[0]):
        row = [float(v) for v in x[r]]
        if not all(math.isfinite(v) for v in row):
            ok &= bool(np.isnan(sc[r])) and not q[r].any()
            continue
        s = _f32(max(abs(v) for v in row) / 448.0)
        codes = [0 if s == 0 else _f8_oracle(_f32(v / s)) for v in row]
        ok &= float(sc[r]) == s and q[r].tolist() == codes
    vals = ref.E4M3_VALUES[q]
    ok &= vals[3, :8].tolist() == [448, -448, 16, -20, 1.0, 2.0 ** -8, 0.0, -448] and float(sc[3]) == 1.0
    ok &= float(np.abs(vals[0]).max()) == 448 and vals[2, 5] == -448 and float(sc[6]) == 0.0 and not q[6].any()
    ok &= (np.abs(vals[7]) == 448).all()
    # a row whose quotients x / s, exactly, lie a little off a midpoint, but whose float32 quotients are on it: the
    # code must follow the float32 quotient (ties to even), which a float64 division would not
    s3 = np.float32(np.float32(3.0) / np.float32(448))
    row = [np.float32(3.0)]
    for mid in (a + b for a, b in zip(mags[40:120], mags[41:121])):
        f = np.float32(float(mid / 2) * float(s3))
        row += [f, np.nextafter(f, np.float32(-1)), np.nextafter(f, np.float32(9))]
    row = np.array([row], np.float32)
    q2, sc2 = ref.quantize_rows_fp8(row)
    on_tie = sum(1 for v in row[0] if Fraction(_f32(float(v) / float(sc2[0]))) in mids
                 and Fraction(float(v)) / Fraction(float(sc2[0])) not in mids)
    ok &= float(sc2[0]) == float(s3) and on_tie >= 10 and q2[0].tolist() == [_f8_oracle(_f32(float(v) / float(s3)))
                                                                            for v in row[0]]
    report("quantize_rows_fp8 == scalar restatement", ok, f"{x.shape[0] + 1} rows, {on_tie} float32 ties")

    # the float64 sum of decoded products is exact: against Fraction sums, on random codes (every finite code
    # equally likely, so terms from 2^-18 to 448^2 mix), the largest terms alone, and K up to 16384; a float32
    # running sum of the same terms is not exact, so the check can fail
    finite = np.array([c for c in range(256) if c & 0x7F != 0x7F], np.uint8)
    bad, naive_bad, n = 0, 0, 0
    for K in (1, 7, 1000, 16384):
        cx = rng.choice(finite, (2, K)).astype(np.uint8)
        cw = rng.choice(finite, (3, K)).astype(np.uint8)
        if K == 16384:
            cx[1], cw[2] = 0x7E, 0x7E                   # 448 * 448 in every term: the largest sum
            cx[0, ::2] = 0x01                            # 2^-9 next to large weights: the smallest steps
        acc = ref.fp8_dot(cx, cw)
        for i in range(cx.shape[0]):
            for j in range(cw.shape[0]):
                terms = [_E4M3_EXACT[a & 0x7F] * (-1 if a >> 7 else 1) * _E4M3_EXACT[b & 0x7F] * (-1 if b >> 7 else 1)
                         for a, b in zip(cx[i].tolist(), cw[j].tolist())]
                exact = sum(terms, Fraction(0))
                bad += Fraction(float(acc[i, j])) != exact
                f = np.float32(0)
                for t in terms:
                    f = np.float32(f + np.float32(float(t)))
                naive_bad += Fraction(float(f)) != exact
                n += 1
    try:
        ref.fp8_dot(np.zeros((1, 200000), np.uint8), np.zeros((1, 200000), np.uint8))
        long_refused = False
    except ValueError:
        long_refused = True
    report("fp8_dot == exact Fraction sum (K up to 16384)", bad == 0 and naive_bad >= 4 and long_refused,
           f"{bad} of {n} differ (float32 running sum: {naive_bad})")

    # one product restated with exact rationals: codes by the oracle, the exact sum rounded once to float32, then
    # the fma rounded once; and its distance from the float64 product
    xs = torch.from_numpy(rng.standard_normal((5, 40)))
    xs[2] = 0.0
    w = ref.round_bf16(rng.standard_normal((7, 40)).astype(np.float32))
    bias = torch.from_numpy(rng.standard_normal(7).astype(np.float32).astype(np.float64))
    cw, sw = ref.quantize_rows_fp8(w)
    y = ref.linear_fp8(xs, cw, sw, bias).numpy()
    ok = True
    for i in range(5):
        row = [_f32(float(v)) for v in xs[i]]
        sx = _f32(max(abs(v) for v in row) / 448.0)
        cx = [0 if sx == 0 else _f8_oracle(_f32(v / sx)) for v in row]
        fx = [_E4M3_EXACT[c & 0x7F] * (-1 if c >> 7 else 1) for c in cx]
        for j in range(7):
            fw = [_E4M3_EXACT[c & 0x7F] * (-1 if c >> 7 else 1) for c in cw[j].tolist()]
            acc = float(_round_f32(sum((a * b for a, b in zip(fx, fw)), Fraction(0))))
            v = Fraction(acc) * Fraction(float(np.float32(np.float32(sx) * sw[j]))) + Fraction(float(bias[j]))
            ok &= float(_round_f32(v)) == float(y[i, j])
    full = ref.linear(xs, torch.from_numpy(w.astype(np.float64)), bias).numpy()
    rel = float(np.linalg.norm(y - full) / np.linalg.norm(full))
    y8 = ref.linear_int8(xs, *ref.quantize_rows(w), bias).numpy()
    rel8 = float(np.linalg.norm(y8 - full) / np.linalg.norm(full))
    report("linear_fp8 == exact-rational product; near float64", ok and 1e-3 < rel < 1e-1 and rel != rel8,
           f"rel L2 vs float {rel:.1e} (int8 {rel8:.1e})")
    try:
        ref.linear_fp8(xs.clone().requires_grad_(True), cw, sw)
        refused = False
    except ValueError:
        refused = True
    report("linear_fp8 refuses a tensor that needs a gradient", refused)

    # the options: fp8 defaults to vision,prefix and refuses the expert; int8 keeps its three stages
    qs = ref.quant_stages
    ok = (qs("fp8", None) == (["vision", "prefix"], None) and qs("fp8", "prefix") == (["prefix"], None)
          and qs("int8", None) == (list(ref.QUANT_STAGES), None) and qs("bf16", None) == ([], None)
          and "expert" in (qs("fp8", "vision,expert")[1] or "") and "expert" in (qs("fp8", "expert")[1] or "")
          and qs("bf16", "vision")[1] is not None and qs("fp8", "vision,text")[1] is not None)
    report("quant_stages: fp8 is vision,prefix, refuses expert", ok)


def check_model(name):
    m = ref.Pi0Reference(os.path.join(FIX, name))
    pi05 = m.cfg["pi05"]
    H = m.cfg["action_horizon"]
    S = H if pi05 else H + 1
    tag = f"[{name}]"
    report(f"{tag} pi05 detected", pi05 == (name == "tiny-pi05"))
    inp = load_case(name, "b2")
    report(f"{tag} patch embed reshape == F.conv2d", check_patch_conv(m, inp) < 1e-12)

    # fixtures: recompute, zero convention, names
    for case in CASES:
        inp = load_case(name, case)
        stored, _ = ref.read_safetensors(os.path.join(FIX, name, f"{case}.out.safetensors"))
        dump = {}
        m.sample_actions(inp, 10, dump=dump)
        err = max(maxdiff(stored[k], dump[k].to(torch.float32)) for k in dump)
        names_ok = sorted(stored) == sorted(dump)
        emb, valid, _ = m.embed_prefix(*(torch.as_tensor(inp[k]) for k in ("images", "image_masks", "tokens", "token_mask")))
        zero_ok = True
        for k, v in stored.items():
            if not np.isfinite(v).all():
                zero_ok = False
            if k.startswith("prefix."):
                rows_zero = (v == 0).all(-1)
                zero_ok &= bool((rows_zero == ~valid.numpy()).all())
            if k == "vision.out":
                zero_ok &= bool(((v == 0).all((-1, -2)) == ~inp["image_masks"]).all())
        report(f"{tag} fixture {case} reproduces", err < 1e-6 and names_ok and zero_ok,
               f"max|d|={err:.1e} zero-rows={'ok' if zero_ok else 'BAD'}")

    # (1) compacted prefix == uncompacted, per sample; (5) joint no-cache == cached; prose mask == rule
    for case in CASES:
        inp = load_case(name, case)
        ti = {k: torch.as_tensor(v) for k, v in inp.items()}
        full = m.sample_actions(inp)
        emb, valid, _ = m.embed_prefix(ti["images"], ti["image_masks"], ti["tokens"], ti["token_mask"])
        state, noise = ti["state"].to(F64), ti["noise"].to(F64)
        d = 0.0
        for b in range(noise.shape[0]):
            e = emb[b:b + 1, valid[b]]
            comp = run_from_prefix(m, e, torch.ones(1, e.shape[1], dtype=torch.bool), state[b:b + 1], noise[b:b + 1])
            d = max(d, maxdiff(comp, full[b:b + 1]))
        report(f"{tag} compacted == uncompacted ({case})", d < 1e-12, f"max|d|={d:.1e}")
        mask = prose_mask(valid, pi05, S)
        _, ar, _ = m.embed_suffix(state, noise, torch.ones(noise.shape[0], dtype=F64))
        jv = torch.cat([valid, torch.ones(valid.shape[0], S, dtype=torch.bool)], 1)
        jar = torch.cat([torch.zeros(valid.shape[0], valid.shape[1], dtype=torch.int64), ar[None].expand(valid.shape[0], S)], 1)
        rule = ref.make_attn_mask(jv, jar)
        report(f"{tag} mask rule 3.6 == prose mask ({case})", bool((rule == mask).all()))
        cache = m.prefix_pass(emb, valid)
        t = torch.full((noise.shape[0],), 0.7, dtype=F64)
        d = maxdiff(joint_velocity(m, emb, valid, state, noise, t, mask), m.expert_forward(cache, valid, state, noise, t))
        report(f"{tag} joint 2-expert pass == KV-cached ({case})", d < 1e-12, f"max|d|={d:.1e}")

    # (2) masked content and pads do not matter
    inp = load_case(name, "b2")
    base = m.sample_actions(inp)
    alt = {k: v.copy() for k, v in inp.items()}
    rs = np.random.RandomState(5)
    alt["images"][1, 1] = rs.uniform(-1, 1, alt["images"][1, 1].shape)
    alt["tokens"][~alt["token_mask"]] = rs.randint(1, m.cfg["paligemma"]["vocab_size"], (~alt["token_mask"]).sum())
    d = maxdiff(m.sample_actions(alt), base)
    report(f"{tag} masked pixels / pad ids ignored", d == 0.0, f"max|d|={d:.1e}")
    alt = {k: v.copy() for k, v in inp.items()}
    alt["state"] = alt["state"] + 0.5
    d = maxdiff(m.sample_actions(alt), base)
    report(f"{tag} state " + ("ignored (Pi0.5)" if pi05 else "used (Pi0)"), (d == 0.0) if pi05 else (d > 1e-6),
           f"max|d|={d:.1e}")
    alt = {k: v.copy() for k, v in inp.items()}
    alt["image_masks"][1, 1] = True
    d = maxdiff(m.sample_actions(alt)[1], base[1])
    report(f"{tag} unmasking a camera changes actions", d > 1e-6, f"max|d|={d:.1e}")

    # (4) batch of 2 == two batches of 1
    d = 0.0
    for b in range(2):
        one = {k: v[b:b + 1] for k, v in inp.items()}
        d = max(d, maxdiff(m.sample_actions(one), base[b:b + 1]))
    report(f"{tag} batch 2 == 2 x batch 1", d < 1e-12, f"max|d|={d:.1e}")

    # 8-bit (docs/precision.md 1): the listed products of each stage and only those; each stage moves the actions
    # by a quantisation-sized amount; scales are per row, so a sample's actions do not depend on the batch
    vs, pg, ex = m.cfg["vision"], m.cfg["paligemma"], m.cfg["action_expert"]
    want = {"vision": 6 * vs["depth"], "prefix": 7 * pg["depth"], "expert": 7 * ex["depth"]}
    got = {st: len(ref.quantised_weights(m.cfg, {st})) for st in ref.QUANT_STAGES}
    report(f"{tag} int8 weight counts per stage", got == want, str(got))
    for stages in (("vision",), ("prefix",), ("expert",), ref.QUANT_STAGES):
        mq = ref.Pi0Reference(os.path.join(FIX, name), quant=stages)
        q8 = mq.sample_actions(inp)
        rel = float((q8 - base).norm() / base.norm())
        label = "every stage" if len(stages) == 3 else stages[0]
        report(f"{tag} int8 {label} vs bf16: rel L2 in (1e-4, 1e-1)", 1e-4 < rel < 1e-1, f"{rel:.1e}")
    d = max(maxdiff(mq.sample_actions({k: v[b:b + 1] for k, v in inp.items()}), q8[b:b + 1]) for b in range(2))
    report(f"{tag} int8 batch 2 == 2 x batch 1", d == 0.0, f"max|d|={d:.1e}")
    # FP8 (docs/precision.md 8): vision and prefix only, each moving the actions by an 8-bit-sized amount and not as
    # int8 does; the expert is refused; per-row scales again make a sample independent of the batch
    for stages in (("vision",), ("prefix",), ref.FP8_STAGES):
        mf = ref.Pi0Reference(os.path.join(FIX, name), quant=stages, precision="fp8")
        f8 = mf.sample_actions(inp)
        rel = float((f8 - base).norm() / base.norm())
        i8 = ref.Pi0Reference(os.path.join(FIX, name), quant=stages).sample_actions(inp)
        rel8 = float((f8 - i8).norm() / i8.norm())
        label = "vision,prefix" if len(stages) == 2 else stages[0]
        report(f"{tag} fp8 {label} vs bf16: rel L2 in (1e-4, 3e-1)", 1e-4 < rel < 3e-1 and rel8 > 1e-4,
               f"{rel:.1e} (vs int8 {rel8:.1e})")
    d = max(maxdiff(mf.sample_actions({k: v[b:b + 1] for k, v in inp.items()}), f8[b:b + 1]) for b in range(2))
    report(f"{tag} fp8 batch 2 == 2 x batch 1", d == 0.0, f"max|d|={d:.1e}")
    try:
        ref.Pi0Reference(os.path.join(FIX, name), quant=("vision", "expert"), precision="fp8")
        refused = ""
    except ValueError as e:
        refused = str(e)
    report(f"{tag} fp8 with the expert is refused", "expert" in refused)

    # (3) every weight tensor matters, except those the spec says are unused
    last = m.cfg["paligemma"]["depth"] - 1
    unused = {ref.LM + ".norm.weight"} | {f"{ref.LM}.layers.{last}.{n}.weight" for n in (
        "self_attn.q_proj", "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
        "mlp.down_proj")}
    invariant = {k for k in m.w if k.endswith("self_attn.k_proj.bias")}   # softmax shift invariance
    g = torch.Generator().manual_seed(11)
    bad_used, bad_unused, n_used, min_used = [], [], 0, float("inf")
    for k in sorted(m.w):
        orig = m.w[k]
        m.w[k] = orig + 0.1 * torch.randn(orig.shape, generator=g, dtype=F64)
        d = maxdiff(m.sample_actions(inp), base)
        m.w[k] = orig
        if k in unused:
            if d != 0.0:
                bad_unused.append(k)
        elif k in invariant:
            if d > 1e-12:
                bad_unused.append(k)
        else:
            n_used += 1
            min_used = min(min_used, d)
            if d < 1e-6:
                bad_used.append(k)
    report(f"{tag} each of {n_used} used weights changes actions", not bad_used,
           f"min max|d|={min_used:.1e}" + (f" e.g. {bad_used[0]}" if bad_used else ""))
    report(f"{tag} {len(unused) + len(invariant)} unused/invariant weights do not",
           not bad_unused, bad_unused[0] if bad_unused else "(last LM layer q/o/MLP, LM norm, k bias)")
    if pi05:
        k = ref.EX + ".model.norm.dense.weight"
        orig = m.w[k]
        We = m.cfg["action_expert"]["width"]
        pert = orig.clone()
        pert[2 * We:] += 1.0
        m.w[k] = pert
        d = maxdiff(m.sample_actions(inp), base)
        m.w[k] = orig
        report(f"{tag} final adaRMS gate rows unused", d == 0.0, f"max|d|={d:.1e}")
    return m


def check_loader():
    tmp = tempfile.mkdtemp(prefix="pi0ref_")
    try:
        # the Pi0.5 F32 checkpoint re-saved with the embedding under the lm_head name + metadata alias, and a
        # config.json without "pi05" (so Pi0.5 must be detected from the adaRMS tensors)
        src = os.path.join(FIX, "tiny-pi05")
        arrays, _ = ref.read_safetensors(os.path.join(src, "model.safetensors"))
        arrays[ref.LM_HEAD] = arrays.pop(ref.EMBED)
        ref.write_safetensors(os.path.join(tmp, "model.safetensors"), {k: ("F32", v) for k, v in arrays.items()},
                              metadata={ref.EMBED: ref.LM_HEAD})
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        del cfg["pi05"]
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(cfg, f)
        inp = load_case("tiny-pi05", "b1-masked")
        m = ref.Pi0Reference(tmp)
        d = maxdiff(m.sample_actions(inp), ref.Pi0Reference(src).sample_actions(inp))
        report("loader: lm_head alias, pi05 from tensors", m.cfg["pi05"] and d == 0.0, f"max|d|={d:.1e}")
        cfg["pi05"] = False
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(cfg, f)
        try:
            ref.Pi0Reference(tmp)
            report("loader: pi05 flag/tensor mismatch refused", False)
        except ValueError as e:
            report("loader: pi05 flag/tensor mismatch refused", "pi05" in str(e))
        del cfg["pi05"]
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(cfg, f)
        del arrays[ref.EX + ".model.layers.1.mlp.up_proj.weight"]
        ref.write_safetensors(os.path.join(tmp, "model.safetensors"), {k: ("F32", v) for k, v in arrays.items()})
        try:
            ref.Pi0Reference(tmp)
            report("loader: missing tensor refused", False)
        except ValueError as e:
            report("loader: missing tensor refused", "up_proj" in str(e))
        # named variants without explicit blocks give the docs/model.md 1.2/1.3 shapes
        full = ref.make_config({"paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m_lora"})
        n = len(ref.expected_tensors(full)) + 1   # + orphan expert lm_head (embedding stored once)
        report("variants: full Pi0 tensor count 777", n == 777 and full["max_token_len"] == 48, f"{n}")
        full["pi05"] = True
        n = len(ref.expected_tensors(full)) + 1
        report("variants: full Pi0.5 tensor count 812", n == 812, f"{n}")
    finally:
        shutil.rmtree(tmp)


# ---- π0-FAST (pi0_fast_ref.py): a second formulation of the decoding loop, the quirks, the stop rule ----

def fast_case(case):
    return ref.load_inputs(os.path.join(FAST, f"{case}.in.safetensors"))


def fast_recompute(m, inputs, steps, skip=1):
    """Greedy decoding written without openpi's machinery: per sample, only the valid prefix tokens (positions
    0..n-1, the prefix-LM mask of their ar flags), then the decoded tokens at positions n + skip + j, each seeing
    every valid prefix token and the decoded ones up to itself; the whole sequence recomputed at every step, no KV
    cache, no alignment, no window. Runs exactly `steps` steps. -> (tokens [B,steps], logits [B,steps,V])."""
    g = {k: torch.as_tensor(np.asarray(v)) for k, v in inputs.items()}
    emb, valid, ar = m.embed_inputs(g["images"], g["image_masks"], g["tokens"], g["token_mask"], g["token_ar_mask"])
    toks, logits = [], []
    for b in range(emb.shape[0]):
        e, a = emb[b, valid[b]], ar[b, valid[b]]
        n = e.shape[0]
        row, lrow = [], []
        for _ in range(steps):
            t = torch.tensor(row, dtype=torch.int64)
            x = torch.cat([e, m.embed(t)])[None]
            flags = torch.cat([a, torch.ones(len(row), dtype=torch.int64)])[None]
            pos = torch.cat([torch.arange(n), n + skip + torch.arange(len(row))])[None]
            seen = fr.make_attn_mask(torch.ones_like(flags, dtype=torch.bool), flags)
            lg, _ = m.llm(x, pos, seen, num_slots=x.shape[1])
            row.append(int(np.argmax(lg[0].numpy())))
            lrow.append(lg[0])
        toks.append(row)
        logits.append(torch.stack(lrow))
    return torch.tensor(toks, dtype=torch.int64), torch.stack(logits)


def check_fast():
    m = fr.Pi0FastReference(FAST)
    tag = "[tiny-pi0-fast]"
    outs = {}
    for case in FAST_CASES:
        inp = fast_case(case)
        stored, _ = ref.read_safetensors(os.path.join(FAST, f"{case}.out.safetensors"))
        N = stored["output_tokens"].shape[1]
        out = m.sample_tokens(inp, N)
        outs[case] = out
        new = {k: v.numpy() for k, (_, v) in fr.output_tensors(out).items()}
        same = sorted(new) == sorted(stored) and all(np.array_equal(new[k], stored[k]) for k in new)
        tail_zero = not stored["output_tokens"][:, out["steps"]:].any()
        report(f"{tag} fixture {case} reproduces bit for bit", same and tail_zero,
               f"{out['steps']} of {N} steps, min margin {float(out['logit_margin'][:, :out['steps']].min()):.3f}")

    # the prefix-LM rule against the docstring's prose; the alignment against an index formula
    inp = fast_case("b1-ar")
    valid = torch.as_tensor(inp["token_mask"])
    ar = torch.as_tensor(inp["token_ar_mask"])
    L = valid.shape[1]
    want = torch.zeros(1, L, L, dtype=torch.bool)
    for i in range(L):
        for j in range(L):   # a bidirectional block up to the causal tail, each tail token a block of its own
            want[0, i, j] = bool(valid[0, i] and valid[0, j]) and (j <= i or not bool(ar[0, i + 1:j + 1].any()))
    report(f"{tag} make_attn_mask == prose (prefix-LM, causal tail)",
           bool((fr.make_attn_mask(valid, ar) == want).all()))
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 9, 3, generator=g, dtype=F64)
    mask = torch.tensor([[1, 1, 0, 1, 1, 0, 0, 0, 0], [0, 1, 1, 1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    am = torch.rand(2, 9, 9, generator=g) > 0.5
    xa, ma, ama = fr.left_to_right_align(x, mask, am)
    ok = True
    for b, last in enumerate((4, 8)):
        idx = [(i + last + 1) % 9 for i in range(9)]   # new slot i holds old slot (i + last valid + 1) mod 9
        ok &= torch.equal(xa[b], x[b, idx]) and torch.equal(ma[b], mask[b, idx]) \
            and torch.equal(ama[b], am[b][idx][:, idx])
    report(f"{tag} left_to_right_align == index formula", ok)

    # cached decoding == full recomputation on the valid tokens where no camera is masked; with the prefix's valid
    # slots as the window it is equal everywhere; openpi's window changes the tokens where a camera is masked
    for case in FAST_CASES:
        inp = fast_case(case)
        out = outs[case]
        steps = out["steps"]
        toks, logits = fast_recompute(m, inp, steps)
        alt = m.sample_tokens(inp, out["output_tokens"].shape[1], window="valid", early_stop=False)
        d_alt = maxdiff(alt["step_logits"][:, :steps], logits)
        alt_ok = torch.equal(alt["output_tokens"][:, :steps], toks) and d_alt < 1e-10
        for b in range(toks.shape[0]):
            masked = not inp["image_masks"][b].all()
            same = torch.equal(out["output_tokens"][b, :steps], toks[b])
            d = maxdiff(out["step_logits"][b, :steps], logits[b])
            if masked:
                report(f"{tag} {case}[{b}] masked camera: openpi's window changes tokens", not same and alt_ok,
                       f"first differing step {int(np.argmax((out['output_tokens'][b, :steps] != toks[b]).numpy()))}; "
                       f"valid-slot window == recompute {d_alt:.1e}")
            else:
                report(f"{tag} {case}[{b}] cached decoding == full recompute", same and d < 1e-10 and alt_ok,
                       f"max|d logits| {d:.1e}")
    inp = fast_case("b1")
    _, logits = fast_recompute(m, inp, 4, skip=0)
    d = maxdiff(logits, outs["b1"]["step_logits"][:, :4])
    report(f"{tag} decode position n + s + 1 (not n + s) matters", d > 1e-3, f"max|d logits| {d:.1e}")

    # what the quirk lets in: pad ids and masked pixels reach the outputs only through a masked camera
    rs = np.random.RandomState(5)
    for case, want_change in (("b1", False), ("b1-masked", True)):
        inp = fast_case(case)
        alt = {k: v.copy() for k, v in inp.items()}
        pads = ~alt["token_mask"]
        alt["tokens"][pads] = rs.randint(4, 512, int(pads.sum()))
        o = m.sample_tokens(alt, 16, early_stop=False)
        d = maxdiff(o["step_logits"], m.sample_tokens(inp, 16, early_stop=False)["step_logits"])
        report(f"{tag} {case}: pad ids " + ("change" if want_change else "do not change") + " the logits",
               d > 1e-6 if want_change else d == 0.0, f"max|d|={d:.1e}")
    inp = fast_case("b1-masked")
    alt = {k: v.copy() for k, v in inp.items()}
    alt["images"][0, 2] = rs.uniform(-1, 1, alt["images"][0, 2].shape)
    d = maxdiff(m.sample_tokens(alt, 16)["step_logits"], outs["b1-masked"]["step_logits"])
    report(f"{tag} b1-masked: the masked camera's pixels change the logits", d > 1e-6, f"max|d|={d:.1e}")

    # the stop rule: one sample writes EOS first and goes on; the loop stops at the first step where both do
    out = outs["b2-eos"]
    t, steps = out["output_tokens"], out["steps"]
    first = [int(np.argmax((row == fr.EOS_TOKEN).numpy())) for row in t]
    ok = bool((t[:, steps - 1] == fr.EOS_TOKEN).all()) and min(first) < steps - 1 and max(first) == steps - 1 \
        and not t[:, steps:].any()
    full = m.sample_tokens(fast_case("b2-eos"), t.shape[1], early_stop=False)["output_tokens"]
    ok &= torch.equal(full[:, :steps], t[:, :steps]) and bool(full[:, steps:].all())
    early = first.index(min(first))
    alone = m.sample_tokens({k: v[early:early + 1] for k, v in fast_case("b2-eos").items()}, t.shape[1])
    ok &= alone["steps"] == min(first) + 1
    report(f"{tag} b2-eos stops when every row writes EOS", ok,
           f"first EOS at steps {first}, stop after {steps}; alone: {alone['steps']}")

    # batch of 2 == 2 x batch of 1 (no EOS in b2); float32 mode gives the same tokens
    inp = fast_case("b2")
    d, same = 0.0, True
    for b in range(2):
        one = m.sample_tokens({k: v[b:b + 1] for k, v in inp.items()}, 16)
        d = max(d, maxdiff(one["step_logits"], outs["b2"]["step_logits"][b:b + 1]))
        same &= torch.equal(one["output_tokens"], outs["b2"]["output_tokens"][b:b + 1])
    report(f"{tag} batch 2 == 2 x batch 1", same and d < 1e-12, f"max|d|={d:.1e}")
    m32 = fr.Pi0FastReference(FAST, dtype=torch.float32)
    d, same = 0.0, True
    for case in FAST_CASES:
        o = m32.sample_tokens(fast_case(case), outs[case]["output_tokens"].shape[1])
        same &= torch.equal(o["output_tokens"], outs[case]["output_tokens"])
        d = max(d, maxdiff(o["step_logits"], outs[case]["step_logits"]))
    report(f"{tag} float32 mode: same tokens, logits near float64", same and d < 1e-4, f"max|d logits| {d:.1e}")

    # every tensor moves the first logits, except SigLIP's k_proj bias (softmax shift invariance)
    inp = fast_case("b1")
    base = outs["b1"]["prefill_logits"]
    g = torch.Generator().manual_seed(11)
    bad, least = [], float("inf")
    for k in sorted(m.w):
        orig = m.w[k]
        m.w[k] = orig + 0.1 * torch.randn(orig.shape, generator=g, dtype=F64)
        d = maxdiff(m.sample_tokens(inp, 1)["prefill_logits"], base)
        m.w[k] = orig
        if k.endswith("self_attn.k_proj.bias"):
            bad += [k] if d > 1e-12 else []
        else:
            least = min(least, d)
            bad += [k] if d < 1e-6 else []
    report(f"{tag} each of {len(m.w)} tensors matters (but k bias)", not bad,
           bad[0] if bad else f"min max|d|={least:.1e}")

    # the loader: the lm_head alias, refusals
    tmp = tempfile.mkdtemp(prefix="fastref_")
    try:
        arrays, _ = ref.read_safetensors(os.path.join(FAST, "model.safetensors"))
        shutil.copy(os.path.join(FAST, "config.json"), tmp)
        st = os.path.join(tmp, "model.safetensors")
        moved = dict(arrays)
        moved[ref.LM_HEAD] = moved.pop(ref.EMBED)
        ref.write_safetensors(st, {k: ("BF16", v) for k, v in moved.items()}, metadata={ref.EMBED: ref.LM_HEAD})
        d = maxdiff(fr.Pi0FastReference(tmp).sample_tokens(inp, 16)["step_logits"], outs["b1"]["step_logits"])
        report(f"{tag} loader: lm_head alias", d == 0.0, f"max|d|={d:.1e}")
        refusals = {"action expert tensor": dict(arrays, **{"action_in_proj.weight": np.zeros((32, 7), np.float32)}),
                    "missing final norm": {k: v for k, v in arrays.items() if k != ref.LM + ".norm.weight"}}
        for what, tensors in refusals.items():
            ref.write_safetensors(st, {k: ("BF16", v) for k, v in tensors.items()})
            try:
                fr.Pi0FastReference(tmp)
                report(f"{tag} loader: {what} refused", False)
            except ValueError as e:
                report(f"{tag} loader: {what} refused", "action_in_proj" in str(e) or "norm" in str(e))
        try:
            fr.Pi0FastReference(os.path.join(FIX, "tiny-pi0"))
            report(f"{tag} loader: a pi0 checkpoint refused", False)
        except ValueError as e:
            report(f"{tag} loader: a pi0 checkpoint refused", "model_type" in str(e))
    finally:
        shutil.rmtree(tmp)


def main():
    if not all(os.path.exists(os.path.join(FIX, n, "model.safetensors")) for n in MODELS + ("tiny-pi0-fast",)):
        sys.exit(f"fixtures missing in {FIX}: run /usr/bin/python3 tools/reference/make_fixtures.py and "
                 "make_fast_fixtures.py first")
    torch.set_num_threads(1)
    check_blocks()
    check_quant()
    check_fp8()
    for name in MODELS:
        check_model(name)
    check_loader()
    check_fast()
    print(f"{len(failures)} failed" if failures else "all checks passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
