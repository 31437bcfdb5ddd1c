#!/usr/bin/python3
"""Independent float64 numerical reference of the Pi0 / Pi0.5 policy model (openpi), for checking the C engine.

Written from the specification now restated in docs/model.md (sections 1-3) and docs/formats.md (1-2) only; no
engine code was read.
It owns: a minimal safetensors reader/writer, the config/variant table, the checkpoint binding with shape
checks, and the whole forward pass (SigLIP, Gemma prefix pass with KV cache, action expert for Pi0 and
Pi0.5, flow-matching Euler loop) in torch.float64, batched.
It deliberately does NOT compact the prefix: masked cameras and padded tokens stay in the sequence and are
handled with the mask rule of docs/model.md 3.6 (large finite negative logit) and positions cumsum(valid)-1, exactly
as openpi computes it, so that an engine that drops them is checked against the uncompacted math.
Also the 8-bit formats of docs/precision.md (the only source for them), as an option: `quant` names the stages
whose large products run on 8-bit codes, `precision` whether those are int8 (sections 2-4) or E4M3 (section 8, vision
and prefix only); their fp32 steps (scales, codes, the fma) are done in float32 numpy so they round as the document
says, and everything between them stays float64.
Not here: tokenizer, image resize, norm stats / robot transforms (docs/model.md 3.2, 3.5, 4).

Usage as a tool:  /usr/bin/python3 tools/reference/pi0_ref.py --checkpoint DIR --inputs IN.safetensors
                  --output OUT.safetensors [--steps 10] [--dump] [--precision bf16|int8|fp8]
                  [--quant-stages vision,prefix,expert]   (fp8: vision,prefix only; its default)
Shape letters: B batch, N camera slots, R image size, T tokens per image, P prefix length, L prompt length,
S suffix length, H action horizon, A action dim (32), D width, Hq query heads, K kv heads, Dh head dim.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

F64 = torch.float64
MASK_VALUE = -2.3819763e38          # docs/model.md 1.2 / 3.7: masked attention logits are set to this value
RMS_EPS = 1e-6                      # docs/model.md 3.7
LN_EPS = 1e-6                       # docs/model.md 1.3
ROPE_THETA = 10000.0                # docs/model.md 1.2
PALIGEMMA_VOCAB_SIZE = 257152       # docs/model.md 1.2
QUANT_STAGES = ("vision", "prefix", "expert")   # docs/precision.md 1

# --------------------------------------------------------------------------------------------------
# safetensors I/O (8-byte LE header length, JSON header, raw little-endian data)
# --------------------------------------------------------------------------------------------------

_NP_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
              "I8": "i1", "U8": "u1", "BOOL": "?"}
_ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def read_safetensors(path):
    """Returns ({name: numpy array}, metadata dict). BF16 is widened exactly to float32."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: file too short for a safetensors header")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} exceeds file size {len(raw)}")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = memoryview(raw)[8 + n:]
    meta = header.pop("__metadata__", None) or {}
    out = {}
    for name, info in header.items():
        dt, shape, (b, e) = info["dtype"], list(info["shape"]), info["data_offsets"]
        count = int(np.prod(shape)) if shape else 1
        if dt not in _ITEMSIZE:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
        if not (0 <= b <= e <= len(data)) or e - b != count * _ITEMSIZE[dt]:
            raise ValueError(f"{path}: tensor {name}: bad data_offsets {b},{e} for {dt} {shape}")
        buf = data[b:e]
        if dt == "BF16":
            bits = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            arr = np.frombuffer(buf, dtype=_NP_DTYPES[dt]).copy()
        out[name] = arr.reshape(shape)
    return out, meta


def _to_bytes(arr, dt):
    if dt == "BF16":
        t = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32)).to(torch.bfloat16)
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    return np.ascontiguousarray(arr).astype(_NP_DTYPES[dt]).tobytes()


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (dtype string, array-like)}. Layout like the safetensors library: data sorted by
    (dtype size descending, name), so every tensor is naturally aligned; header padded with spaces to 8."""
    order = sorted(tensors, key=lambda k: (-_ITEMSIZE[tensors[k][0]], k))
    header, chunks, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in order:
        dt, arr = tensors[name]
        arr = arr.detach().cpu().numpy() if isinstance(arr, torch.Tensor) else np.asarray(arr)
        b = _to_bytes(arr, dt)
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        chunks.append(b)
        off += len(b)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for c in chunks:
            f.write(c)


# --------------------------------------------------------------------------------------------------
# Configuration (docs/model.md 1.1-1.3, docs/formats.md 1)
# --------------------------------------------------------------------------------------------------

GEMMA_VARIANTS = {   # docs/model.md 1.2
    "gemma_2b": dict(width=2048, depth=18, mlp_dim=16384, num_heads=8, num_kv_heads=1, head_dim=256),
    "gemma_300m": dict(width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1, head_dim=256),
    "dummy": dict(width=64, depth=4, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=16),
}
SO400M = dict(width=1152, depth=27, mlp_dim=4304, num_heads=16, patch_size=14, image_size=224)  # docs/model.md 1.3

V = "paligemma_with_expert.paligemma.model.vision_tower.vision_model"
LM = "paligemma_with_expert.paligemma.model.language_model"
EX = "paligemma_with_expert.gemma_expert"
PROJ = "paligemma_with_expert.paligemma.model.multi_modal_projector.linear"
LM_HEAD = "paligemma_with_expert.paligemma.lm_head.weight"
EMBED = LM + ".embed_tokens.weight"
ADARMS_PROBE = EX + ".model.layers.0.input_layernorm.dense.weight"


def _variant(name):
    base = name[:-5] if name.endswith("_lora") else name
    if base not in GEMMA_VARIANTS:
        raise ValueError(f"config.json: unknown gemma variant {name!r} (known: {sorted(GEMMA_VARIANTS)})")
    return dict(GEMMA_VARIANTS[base])


def make_config(raw, tensor_names=()):
    """raw: parsed config.json. tensor_names: names in model.safetensors (used to detect Pi0.5)."""
    probe = ADARMS_PROBE in tensor_names
    if "pi05" in raw:
        pi05 = bool(raw["pi05"])
        if tensor_names and pi05 != probe:
            raise ValueError(f"config.json says pi05={pi05} but tensor {ADARMS_PROBE} is "
                             f"{'present' if probe else 'absent'}")
    else:
        pi05 = probe
    vis = dict(SO400M)
    vis.update(raw.get("vision", {}))
    pg = _variant(raw.get("paligemma_variant", "gemma_2b"))
    pg["vocab_size"] = PALIGEMMA_VOCAB_SIZE
    pg.update(raw.get("paligemma", {}))
    ex = _variant(raw.get("action_expert_variant", "gemma_300m"))
    ex.update(raw.get("action_expert", {}))
    cfg = dict(
        pi05=pi05,
        action_dim=int(raw.get("action_dim", 32)),
        action_horizon=int(raw.get("action_horizon", 50)),
        max_token_len=int(raw.get("max_token_len", 200 if pi05 else 48)),
        vision=vis, paligemma=pg, action_expert=ex,
    )
    for k in ("depth", "num_heads", "num_kv_heads", "head_dim"):
        if pg[k] != ex[k]:
            raise ValueError(f"config: paligemma.{k}={pg[k]} != action_expert.{k}={ex[k]} (must be shared)")
    if pg["num_heads"] % pg["num_kv_heads"]:
        raise ValueError("config: num_heads must be a multiple of num_kv_heads")
    if vis["image_size"] % vis["patch_size"] or vis["width"] % vis["num_heads"]:
        raise ValueError("config: vision image_size % patch_size and width % num_heads must be 0")
    if pg["head_dim"] % 2:
        raise ValueError("config: head_dim must be even (RoPE half split)")
    return cfg


def expected_tensors(cfg):
    """{name: shape} of every tensor the model uses (docs/model.md 2.1), with the embedding under EMBED.
    The orphan expert lm_head is not listed (it is not used)."""
    vs, pg, ex = cfg["vision"], cfg["paligemma"], cfg["action_expert"]
    Wv, Fv, p = vs["width"], vs["mlp_dim"], vs["patch_size"]
    T = (vs["image_size"] // p) ** 2
    A = cfg["action_dim"]
    e = {
        V + ".embeddings.patch_embedding.weight": [Wv, 3, p, p],
        V + ".embeddings.patch_embedding.bias": [Wv],
        V + ".embeddings.position_embedding.weight": [T, Wv],
        V + ".post_layernorm.weight": [Wv], V + ".post_layernorm.bias": [Wv],
        PROJ + ".weight": [pg["width"], Wv], PROJ + ".bias": [pg["width"]],
        EMBED: [pg["vocab_size"], pg["width"]],
        LM + ".norm.weight": [pg["width"]],
    }
    for i in range(vs["depth"]):
        b = f"{V}.encoder.layers.{i}"
        for n in ("layer_norm1", "layer_norm2"):
            e[f"{b}.{n}.weight"] = [Wv]
            e[f"{b}.{n}.bias"] = [Wv]
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            e[f"{b}.self_attn.{n}.weight"] = [Wv, Wv]
            e[f"{b}.self_attn.{n}.bias"] = [Wv]
        e[f"{b}.mlp.fc1.weight"], e[f"{b}.mlp.fc1.bias"] = [Fv, Wv], [Fv]
        e[f"{b}.mlp.fc2.weight"], e[f"{b}.mlp.fc2.bias"] = [Wv, Fv], [Wv]
    for prefix, c, ada in ((LM, pg, False), (EX + ".model", ex, cfg["pi05"])):
        W, F, hd = c["width"], c["mlp_dim"], c["head_dim"]
        for l in range(c["depth"]):
            b = f"{prefix}.layers.{l}"
            e[f"{b}.self_attn.q_proj.weight"] = [c["num_heads"] * hd, W]
            e[f"{b}.self_attn.k_proj.weight"] = [c["num_kv_heads"] * hd, W]
            e[f"{b}.self_attn.v_proj.weight"] = [c["num_kv_heads"] * hd, W]
            e[f"{b}.self_attn.o_proj.weight"] = [W, c["num_heads"] * hd]
            e[f"{b}.mlp.gate_proj.weight"] = [F, W]
            e[f"{b}.mlp.up_proj.weight"] = [F, W]
            e[f"{b}.mlp.down_proj.weight"] = [W, F]
            for n in ("input_layernorm", "post_attention_layernorm"):
                if ada:
                    e[f"{b}.{n}.dense.weight"], e[f"{b}.{n}.dense.bias"] = [3 * W, W], [3 * W]
                else:
                    e[f"{b}.{n}.weight"] = [W]
    We = ex["width"]
    if cfg["pi05"]:
        e[EX + ".model.norm.dense.weight"], e[EX + ".model.norm.dense.bias"] = [3 * We, We], [3 * We]
        e["time_mlp_in.weight"], e["time_mlp_in.bias"] = [We, We], [We]
        e["time_mlp_out.weight"], e["time_mlp_out.bias"] = [We, We], [We]
    else:
        e[EX + ".model.norm.weight"] = [We]
        e["state_proj.weight"], e["state_proj.bias"] = [We, A], [We]
        e["action_time_mlp_in.weight"], e["action_time_mlp_in.bias"] = [We, 2 * We], [We]
        e["action_time_mlp_out.weight"], e["action_time_mlp_out.bias"] = [We, We], [We]
    e["action_in_proj.weight"], e["action_in_proj.bias"] = [We, A], [We]
    e["action_out_proj.weight"], e["action_out_proj.bias"] = [A, We], [A]
    return e


# --------------------------------------------------------------------------------------------------
# Building blocks (docs/model.md 3.4, 3.6, 3.7)
# --------------------------------------------------------------------------------------------------

def linear(x, w, b=None):
    y = x @ w.t()
    return y + b if b is not None else y


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def swish(x):
    return x * torch.sigmoid(x)


def layer_norm(x, w, b, eps=LN_EPS):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def rms_normalize(x):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + RMS_EPS)


def gemma_rms_norm(x, w):
    """Gemma RMSNorm, '1 + w' form (docs/model.md 3.7)."""
    return rms_normalize(x) * (1.0 + w)


def ada_rms_norm(x, dense_w, dense_b, cond):
    """adaRMSNorm (docs/model.md 3.7): x [B,S,W], cond [B,W] -> (y, gate [B,1,W])."""
    m = linear(cond, dense_w, dense_b)
    W = x.shape[-1]
    scale, shift, gate = m[:, None, :W], m[:, None, W:2 * W], m[:, None, 2 * W:]
    return rms_normalize(x) * (1.0 + scale) + shift, gate


def rope(x, pos):
    """Half-split RoPE (docs/model.md 3.7). x [B,S,n,Dh], pos [B,S] (integer, may be -1)."""
    Dh = x.shape[-1]
    half = Dh // 2
    inv_freq = ROPE_THETA ** (-2.0 * torch.arange(half, dtype=F64) / Dh)
    theta = pos.to(F64)[:, :, None, None] * inv_freq            # [B,S,1,half]
    c, s = torch.cos(theta), torch.sin(theta)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def make_attn_mask(valid, ar):
    """docs/model.md 3.6: query i may attend key j iff cumsum(ar)_j <= cumsum(ar)_i and valid_i and valid_j.
    valid, ar [B,S] bool/int -> [B,S,S] bool (rows = queries)."""
    c = torch.cumsum(ar.to(torch.int64), dim=1)
    allowed = c[:, None, :] <= c[:, :, None]
    return allowed & valid[:, :, None].bool() & valid[:, None, :].bool()


def attention(q, k, v, allowed):
    """q [B,Sq,Hq,Dh], k/v [B,Sk,K,Dh], allowed [B,Sq,Sk] -> [B,Sq,Hq*Dh].
    Query head h uses kv head h // (Hq/K) (MQA/GQA grouping); scale 1/sqrt(Dh); masked logits are
    replaced by MASK_VALUE before a softmax over keys."""
    B, Sq, Hq, Dh = q.shape
    K = k.shape[2]
    G = Hq // K
    qg = q.reshape(B, Sq, K, G, Dh)
    logits = torch.einsum("bqkgd,bskd->bkgqs", qg, k) / math.sqrt(Dh)
    logits = torch.where(allowed[:, None, None, :, :], logits, torch.tensor(MASK_VALUE, dtype=F64))
    probs = torch.softmax(logits, dim=-1)
    o = torch.einsum("bkgqs,bskd->bqkgd", probs, v)
    return o.reshape(B, Sq, Hq * Dh)


def posemb_sincos(t, dim, min_period=4e-3, max_period=4.0):
    """Time embedding (docs/model.md 3.10). t [B] -> [B,dim], sin block first."""
    half = dim // 2
    frac = torch.arange(half, dtype=F64) / (half - 1)
    period = min_period * (max_period / min_period) ** frac
    ang = t.to(F64)[:, None] * (2.0 * math.pi / period)[None, :]
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1)


# --------------------------------------------------------------------------------------------------
# 8-bit products (docs/precision.md 2-4)
# --------------------------------------------------------------------------------------------------

def round_bf16(w):
    """float32 values rounded to the nearest bf16 (ties to even), returned as float32."""
    return torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32)).to(torch.bfloat16).to(torch.float32).numpy()


def quantize_rows(x):
    """docs/precision.md 2-3: float32 rows [..., K] -> (codes int64 [..., K], scales float32 [...]).
    s = max|x| / 127 and x / s are single float32 operations (numpy rounds each float32 division correctly);
    np.rint rounds half to even. A zero row has s = 0 and codes 0; a row holding NaN or Inf has s = NaN, codes 0."""
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise TypeError(f"quantize_rows expects float32 rows, got {x.dtype}")
    finite = np.isfinite(x).all(axis=-1)
    with np.errstate(all="ignore"):
        s = np.max(np.abs(x), axis=-1) / np.float32(127.0)
        q = np.clip(np.rint(x / s[..., None]), -127, 127)
    q = np.where((s[..., None] > 0) & finite[..., None], q, 0).astype(np.int64)
    s = np.where(finite, s, np.float32(np.nan)).astype(np.float32)
    return q, s


def fma_f32(a, b, c):
    """fma(a, b, c) of float32 arrays, rounded once to float32 (docs/precision.md 4).
    a * b is exact in float64 (two 24-bit significands make at most 48 bits). The sum with c is not always
    exact in float64, so it is taken as s + e exactly (Knuth's TwoSum). Rounding s to float32 is the correct
    rounding of s + e except where s lies exactly halfway between two float32 values and e != 0: the true sum
    is then on e's side of the halfway point, whereas float32(s) would break the tie to even."""
    with np.errstate(all="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)
        c = np.asarray(c).astype(np.float64)
        s = p + c
        bv = s - p
        e = (p - (s - bv)) + (c - bv)
        r = s.astype(np.float32)
        other = np.nextafter(r, np.where(s > r, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32))
        tie = (s != r) & (np.abs(s - r.astype(np.float64)) == np.abs(other.astype(np.float64) - s)) & (e != 0)
        hi, lo = np.maximum(r, other), np.minimum(r, other)
        return np.where(tie & (e > 0), hi, np.where(tie & (e < 0), lo, r))


def linear_int8(x, qw, sw, b=None):
    """docs/precision.md 3-4. x float64 [..., K]; qw int64 [N, K], sw float32 [N] (quantize_rows of the
    bf16-rounded weight); b float64 [N] or None. Each row of x is first rounded to float32 (the activations the
    CPU twin holds), quantised, multiplied exactly in integers, then y = fma(float(acc), s_x * s_w, b) in
    float32. Returns float64 [..., N]. Not differentiable (exact RTC is refused with an 8-bit expert)."""
    if x.requires_grad:
        raise ValueError("an 8-bit product has no gradient (docs/precision.md 5: exact RTC needs a bf16 expert)")
    lead, K = x.shape[:-1], x.shape[-1]
    qx, sx = quantize_rows(x.detach().reshape(-1, K).numpy().astype(np.float32))
    acc = qx @ qw.T                                              # int64: exact (|acc| <= 127^2 K)
    scale = sx[:, None] * sw[None, :]                            # one float32 multiplication
    bias = np.zeros(qw.shape[0], np.float32) if b is None else b.numpy().astype(np.float32)
    y = fma_f32(acc.astype(np.float64).astype(np.float32), scale, bias[None, :])
    return torch.from_numpy(y.astype(np.float64)).reshape(*lead, qw.shape[0])


def quantised_weights(cfg, stages):
    """Names of the weights docs/precision.md 1 puts in int8 for the given stages."""
    names = []
    if "vision" in stages:
        for i in range(cfg["vision"]["depth"]):
            b = f"{V}.encoder.layers.{i}"
            names += [f"{b}.self_attn.{n}.weight" for n in ("q_proj", "k_proj", "v_proj", "out_proj")]
            names += [f"{b}.mlp.{n}.weight" for n in ("fc1", "fc2")]
    for stage, prefix, c in (("prefix", LM, cfg["paligemma"]), ("expert", EX + ".model", cfg["action_expert"])):
        if stage in stages:
            for l in range(c["depth"]):
                b = f"{prefix}.layers.{l}"
                names += [f"{b}.self_attn.{n}.weight" for n in ("q_proj", "k_proj", "v_proj", "o_proj")]
                names += [f"{b}.mlp.{n}.weight" for n in ("gate_proj", "up_proj", "down_proj")]
    return names

# --------------------------------------------------------------------------------------------------
# FP8 products (docs/precision.md 8)
# --------------------------------------------------------------------------------------------------

FP8_STAGES = ("vision", "prefix")   # docs/precision.md 8: the expert has no FP8 path
E4M3_MAX = 448.0


def _e4m3_magnitudes():
    """Values of the 127 non-negative finite E4M3 codes 0..126, from section 8's formula: exponent field e = code >> 3,
    mantissa field m = code & 7; (8 + m) 2^(e - 10) for e >= 1, m 2^-9 for e = 0. Code 127 (e = 15, m = 7) is NaN.
    Python floats hold each exactly (at most 4 significant bits, exponents -9..8)."""
    vals = [m * 2.0 ** -9 if e == 0 else (8 + m) * 2.0 ** (e - 10) for e, m in (divmod(c, 8) for c in range(127))]
    if vals[-1] != E4M3_MAX or any(b <= a for a, b in zip(vals, vals[1:])):
        raise AssertionError("E4M3 table: not increasing or not ending at 448")
    return np.array(vals, np.float64)


E4M3_MAGNITUDES = _e4m3_magnitudes()
# the 256 codes' values (bit 7 the sign); 0x7F and 0xFF are NaN and never produced
E4M3_VALUES = np.concatenate([E4M3_MAGNITUDES, [np.nan], -E4M3_MAGNITUDES, [np.nan]])
# halfway points between neighbouring magnitudes: exact in float64 (one more significant bit than the codes)
_E4M3_MIDPOINTS = (E4M3_MAGNITUDES[:-1] + E4M3_MAGNITUDES[1:]) / 2


def e4m3_encode(v):
    """docs/precision.md 8, f8(v): the E4M3 code (uint8, bit 7 the sign) of the value nearest to each v (float32 or
    float64), ties to the even code (the two candidates are consecutive codes, so one has an even mantissa field),
    magnitudes above 448 (infinities included) taken to 448. The sign is v's, so a negative v that rounds to zero
    gives 0x80 (-0). Every comparison is exact: |v| and the midpoints are float64 values, compared, never subtracted.
    NaN has no code: it is an error (callers zero non-finite rows first)."""
    v = np.asarray(v)
    if np.isnan(v).any():
        raise ValueError("e4m3_encode: NaN has no E4M3 code")
    a = np.abs(v.astype(np.float64))
    # i = the number of midpoints below a: a lies in [mid[i-1], mid[i]], code i unless a sits exactly on an end
    i = np.searchsorted(_E4M3_MIDPOINTS, a, side="left")          # mid[i-1] < a <= mid[i]
    on_upper = (i < len(_E4M3_MIDPOINTS)) & (a == _E4M3_MIDPOINTS[np.minimum(i, len(_E4M3_MIDPOINTS) - 1)])
    # a == mid[i]: a tie between codes i and i + 1; the even one wins
    code = np.where(on_upper & (i % 2 == 1), i + 1, i)
    return (code | np.where(np.signbit(v), 0x80, 0)).astype(np.uint8)


def quantize_rows_fp8(x):
    """docs/precision.md 8, scales: float32 rows [..., K] -> (E4M3 codes uint8 [..., K], scales float32 [...]).
    s = max|x| / 448 and x / s are single float32 operations (numpy rounds each correctly); codes f8(x / s).
    A zero row (s = 0) has codes 0; a row holding NaN or Inf has s = NaN and codes 0 (docs/precision.md 3)."""
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise TypeError(f"quantize_rows_fp8 expects float32 rows, got {x.dtype}")
    finite = np.isfinite(x).all(axis=-1)
    with np.errstate(all="ignore"):
        s = np.max(np.abs(x), axis=-1) / np.float32(E4M3_MAX)
        u = x / s[..., None]
    ok = (s > 0) & finite
    codes = e4m3_encode(np.where(ok[..., None], u, np.float32(0)))
    codes = np.where(ok[..., None], codes, np.uint8(0)).astype(np.uint8)
    s = np.where(finite, s, np.float32(np.nan)).astype(np.float32)
    return codes, s


def fp8_dot(cx, cw):
    """docs/precision.md 8: acc[m, n] = sum_k f8x[m, k] f8w[n, k] over the decoded values, for codes cx [M, K] and
    cw [N, K] (uint8) -> float64 [M, N], exact. Every product of two E4M3 values is a multiple of 2^-18 of magnitude
    at most 448^2 < 2^18, so every partial sum, in whatever order BLAS takes the terms, is a multiple of 2^-18 below
    K 2^18, which float64 holds exactly while K 448^2 < 2^35 (K < 171196; the document needs K <= 16384)."""
    K = cx.shape[-1]
    if K * E4M3_MAX ** 2 >= 2.0 ** 35:
        raise ValueError(f"fp8_dot: K = {K} is too long for an exact float64 sum")
    return E4M3_VALUES[cx] @ E4M3_VALUES[cw].T


def linear_fp8(x, cw, sw, b=None):
    """docs/precision.md 8, the product. x float64 [..., K]; cw uint8 [N, K], sw float32 [N] (quantize_rows_fp8 of
    the bf16-rounded weight); b float64 [N] or None. Each row of x is rounded to float32 (the CPU twin's activations)
    and coded; acc = the sum of the decoded products, exact in float64, rounded once to float32; then
    y = fma(acc, s_x * s_w, b) in float32 (fma_f32). Returns float64 [..., N]. Not differentiable."""
    if x.requires_grad:
        raise ValueError("an 8-bit product has no gradient")
    lead, K = x.shape[:-1], x.shape[-1]
    cx, sx = quantize_rows_fp8(x.detach().reshape(-1, K).numpy().astype(np.float32))
    acc = fp8_dot(cx, cw)                                        # float64, exact
    scale = sx[:, None] * sw[None, :]                            # one float32 multiplication
    bias = np.zeros(cw.shape[0], np.float32) if b is None else b.numpy().astype(np.float32)
    y = fma_f32(acc.astype(np.float32), scale, bias[None, :])
    return torch.from_numpy(y.astype(np.float64)).reshape(*lead, cw.shape[0])


def time_schedule(num_steps):
    """fp32 time values of the Euler loop (docs/model.md 3.11): t=1.0f, dt=fp32(-1/n), while t >= -dt/2: t += dt."""
    dt = np.float32(-1.0 / num_steps)
    t = np.float32(1.0)
    ts = []
    while t >= np.float32(-dt) / np.float32(2.0):
        ts.append(t)
        t = np.float32(t + dt)
    return dt, ts


# --------------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------------

class Pi0Reference:
    def __init__(self, ckpt_dir, verbose=False, quant=(), precision="int8"):
        """quant: the stages (of QUANT_STAGES) whose products are 8-bit (docs/precision.md); () is bf16.
        precision: the 8-bit format of those stages, "int8" (sections 2-4) or "fp8" (section 8: vision and prefix
        only, an expert stage is an error)."""
        with open(os.path.join(ckpt_dir, "config.json")) as f:
            raw_cfg = json.load(f)
        st_path = os.path.join(ckpt_dir, "model.safetensors")
        arrays, meta = read_safetensors(st_path)
        self.cfg = make_config(raw_cfg, tensor_names=set(arrays))
        self.source_dtypes = {}
        expected = expected_tensors(self.cfg)
        # Tied LM embedding (docs/model.md 2.2): embed_tokens, else the metadata alias, else the lm_head name.
        if EMBED not in arrays:
            alias = meta.get(EMBED, LM_HEAD)
            if alias not in arrays:
                raise ValueError(f"{st_path}: tensor {EMBED} missing and no {alias} to alias it")
            arrays[EMBED] = arrays[alias]
        self.w = {}
        for name, shape in expected.items():
            if name not in arrays:
                raise ValueError(f"{st_path}: missing tensor {name} (expected shape {shape})")
            got = list(arrays[name].shape)
            if got != shape:
                raise ValueError(f"{st_path}: tensor {name}: expected shape {shape}, found {got}")
            self.w[name] = torch.from_numpy(np.asarray(arrays[name], dtype=np.float64))
        ignored = {EX + ".lm_head.weight", LM_HEAD}
        extra = sorted(set(arrays) - set(expected) - ignored)
        if extra and verbose:
            print(f"pi0_ref: ignoring {len(extra)} unknown tensors, e.g. {extra[0]}", file=sys.stderr)
        unknown = sorted(set(quant) - set(QUANT_STAGES))
        if unknown:
            raise ValueError(f"unknown quantisation stage(s) {unknown} (known: {', '.join(QUANT_STAGES)})")
        if precision not in ("int8", "fp8"):
            raise ValueError(f"unknown 8-bit precision {precision!r} (known: int8, fp8)")
        if precision == "fp8" and not set(quant) <= set(FP8_STAGES):
            raise ValueError(f"fp8 has no expert stage (docs/precision.md 8): quantise {' and/or '.join(FP8_STAGES)}, "
                             f"got {', '.join(quant)}")
        self.precision = precision
        code = quantize_rows if precision == "int8" else quantize_rows_fp8
        self.quant = {n: code(round_bf16(self.w[n].numpy())) for n in quantised_weights(self.cfg, set(quant))}

    def _proj(self, x, name, bias=False):
        """The product x @ W^T (+ b) of the weight `name.weight`: 8-bit where self.quant holds it."""
        b = self.w[name + ".bias"] if bias else None
        if name + ".weight" in self.quant:
            product = linear_int8 if self.precision == "int8" else linear_fp8
            return product(x, *self.quant[name + ".weight"], b)
        return linear(x, self.w[name + ".weight"], b)

    # ---- SigLIP (docs/model.md 3.4) ----
    def vision(self, images):
        """images [B,N,R,R,3] in [-1,1] -> projector output [B,N,T,Dp]. Every image is computed."""
        vs = self.cfg["vision"]
        w = self.w
        B, N, R, _, C = images.shape
        p, Wv, nh = vs["patch_size"], vs["width"], vs["num_heads"]
        g = R // p
        x = images.to(F64).reshape(B * N, g, p, g, p, C).permute(0, 1, 3, 2, 4, 5)   # [BN,gy,gx,ky,kx,c]
        x = x.reshape(B * N, g * g, p * p * C)
        wp = w[V + ".embeddings.patch_embedding.weight"].permute(0, 2, 3, 1).reshape(Wv, p * p * C)  # OIHW -> O,(y,x,c)
        h = linear(x, wp, w[V + ".embeddings.patch_embedding.bias"])
        h = h + w[V + ".embeddings.position_embedding.weight"][None]
        M, T = B * N, g * g
        hd = Wv // nh
        for i in range(vs["depth"]):
            b = f"{V}.encoder.layers.{i}"
            a = layer_norm(h, w[b + ".layer_norm1.weight"], w[b + ".layer_norm1.bias"])
            q, k, v = (self._proj(a, f"{b}.self_attn.{n}", bias=True).reshape(M, T, nh, hd)
                       for n in ("q_proj", "k_proj", "v_proj"))
            allowed = torch.ones(M, T, T, dtype=torch.bool)
            o = attention(q, k, v, allowed)
            h = h + self._proj(o, b + ".self_attn.out_proj", bias=True)
            a = layer_norm(h, w[b + ".layer_norm2.weight"], w[b + ".layer_norm2.bias"])
            h = h + self._proj(gelu_tanh(self._proj(a, b + ".mlp.fc1", bias=True)), b + ".mlp.fc2", bias=True)
        h = layer_norm(h, w[V + ".post_layernorm.weight"], w[V + ".post_layernorm.bias"])
        out = linear(h, w[PROJ + ".weight"], w[PROJ + ".bias"])
        return out.reshape(B, N, T, -1)

    # ---- prefix (docs/model.md 3.6) ----
    def embed_prefix(self, images, image_masks, tokens, token_mask):
        """-> (emb [B,P,Dp], valid [B,P] bool, vision_out [B,N,T,Dp]); P = N*T + L."""
        vis = self.vision(images)
        B, N, T, Dp = vis.shape
        txt = self.w[EMBED][tokens.long()] * math.sqrt(self.cfg["paligemma"]["width"])
        emb = torch.cat([vis.reshape(B, N * T, Dp), txt], dim=1)
        valid = torch.cat([image_masks.bool()[:, :, None].expand(B, N, T).reshape(B, N * T),
                           token_mask.bool()], dim=1)
        return emb, valid, vis

    def _qkv(self, prefix, y, c):
        B, S, _ = y.shape
        hd = c["head_dim"]
        q = self._proj(y, prefix + ".self_attn.q_proj").reshape(B, S, c["num_heads"], hd)
        k = self._proj(y, prefix + ".self_attn.k_proj").reshape(B, S, c["num_kv_heads"], hd)
        v = self._proj(y, prefix + ".self_attn.v_proj").reshape(B, S, c["num_kv_heads"], hd)
        return q, k, v

    def _mlp(self, prefix, y):
        return self._proj(gelu_tanh(self._proj(y, prefix + ".mlp.gate_proj")) * self._proj(y, prefix + ".mlp.up_proj"),
                          prefix + ".mlp.down_proj")

    def prefix_pass(self, emb, valid, pos=None):
        """Gemma expert 0 over the prefix (docs/model.md 3.9). Returns [(K, V)] per layer, each [B,P,K,Dh];
        K after RoPE. pos defaults to cumsum(valid)-1."""
        c = self.cfg["paligemma"]
        if pos is None:
            pos = torch.cumsum(valid.to(torch.int64), dim=1) - 1
        allowed = make_attn_mask(valid, torch.zeros_like(valid, dtype=torch.int64))
        h = emb
        cache = []
        for l in range(c["depth"]):
            b = f"{LM}.layers.{l}"
            y = gemma_rms_norm(h, self.w[b + ".input_layernorm.weight"])
            q, k, v = self._qkv(b, y, c)
            q, k = rope(q, pos), rope(k, pos)
            cache.append((k, v))
            h = h + self._proj(attention(q, k, v, allowed), b + ".self_attn.o_proj")
            h = h + self._mlp(b, gemma_rms_norm(h, self.w[b + ".post_attention_layernorm.weight"]))
        return cache

    # ---- suffix (docs/model.md 3.10) ----
    def embed_suffix(self, state, x, t):
        """state [B,A], x [B,H,A], t [B] -> (suffix [B,S,We], ar flags [S], adarms cond [B,We] or None)."""
        w = self.w
        We = self.cfg["action_expert"]["width"]
        H = x.shape[1]
        act = linear(x, w["action_in_proj.weight"], w["action_in_proj.bias"])
        temb = posemb_sincos(t, We)
        if self.cfg["pi05"]:
            cond = swish(linear(temb, w["time_mlp_in.weight"], w["time_mlp_in.bias"]))
            cond = swish(linear(cond, w["time_mlp_out.weight"], w["time_mlp_out.bias"]))
            ar = torch.tensor([1] + [0] * (H - 1), dtype=torch.int64)
            return act, ar, cond
        st = linear(state, w["state_proj.weight"], w["state_proj.bias"])[:, None, :]
        z = torch.cat([act, temb[:, None, :].expand(-1, H, -1)], dim=-1)
        z = swish(linear(z, w["action_time_mlp_in.weight"], w["action_time_mlp_in.bias"]))
        act_tok = linear(z, w["action_time_mlp_out.weight"], w["action_time_mlp_out.bias"])
        ar = torch.tensor([1, 1] + [0] * (H - 1), dtype=torch.int64)
        return torch.cat([st, act_tok], dim=1), ar, None

    def _expert_norm(self, name, x, cond):
        if cond is None:
            return gemma_rms_norm(x, self.w[name + ".weight"]), None
        return ada_rms_norm(x, self.w[name + ".dense.weight"], self.w[name + ".dense.bias"], cond)

    @staticmethod
    def _gated(x, g):
        return x if g is None else x * g

    def suffix_mask_and_pos(self, prefix_valid, ar):
        """Suffix query rows of the joint [prefix | suffix] mask (docs/model.md 3.6/3.10) and suffix positions."""
        B, P = prefix_valid.shape
        S = ar.shape[0]
        jv = torch.cat([prefix_valid.bool(), torch.ones(B, S, dtype=torch.bool)], dim=1)
        jar = torch.cat([torch.zeros(B, P, dtype=torch.int64), ar[None].expand(B, S)], dim=1)
        allowed = make_attn_mask(jv, jar)[:, P:, :]
        pos = prefix_valid.to(torch.int64).sum(1, keepdim=True) + torch.arange(S)[None]
        return allowed, pos

    def expert_forward(self, cache, prefix_valid, state, x, t):
        """One denoise evaluation: velocity [B,H,A] at (x, t) (docs/model.md 3.12 inner loop)."""
        c = self.cfg["action_expert"]
        H = x.shape[1]
        s, ar, cond = self.embed_suffix(state, x, t)
        allowed, pos = self.suffix_mask_and_pos(prefix_valid, ar)
        for l in range(c["depth"]):
            b = f"{EX}.model.layers.{l}"
            y, g1 = self._expert_norm(b + ".input_layernorm", s, cond)
            q, k, v = self._qkv(b, y, c)
            q, k = rope(q, pos), rope(k, pos)
            K = torch.cat([cache[l][0], k], dim=1)
            Vv = torch.cat([cache[l][1], v], dim=1)
            o = self._proj(attention(q, K, Vv, allowed), b + ".self_attn.o_proj")
            s = s + self._gated(o, g1)
            y, g2 = self._expert_norm(b + ".post_attention_layernorm", s, cond)
            s = s + self._gated(self._mlp(b, y), g2)
        y, _ = self._expert_norm(EX + ".model.norm", s, cond)
        return linear(y[:, -H:], self.w["action_out_proj.weight"], self.w["action_out_proj.bias"])

    # ---- whole inference (docs/model.md 3.11, 3.12) ----
    def sample_actions(self, inputs, num_steps=10, dump=None):
        """inputs: dict of tensors/arrays named as docs/formats.md 2 (noise required).
        dump: optional dict that receives float64 intermediates (see tests/fixtures/README.md)."""
        g = {k: torch.as_tensor(np.asarray(v)) for k, v in inputs.items()}
        images = g["images"].to(F64)
        state = g["state"].to(F64)
        x = g["noise"].to(F64)
        emb, valid, vis = self.embed_prefix(images, g["image_masks"], g["tokens"], g["token_mask"])
        cache = self.prefix_pass(emb, valid)
        dt, ts = time_schedule(num_steps)
        B = x.shape[0]
        for step, t in enumerate(ts):
            v = self.expert_forward(cache, valid, state, x, torch.full((B,), float(t), dtype=F64))
            x = x + float(dt) * v
            if dump is not None:
                dump[f"denoise.v.{step:02d}"] = v
                dump[f"denoise.x.{step:02d}"] = x
        if dump is not None:   # rows of masked cameras / padded tokens are written as exact +0.0
            zero = torch.zeros((), dtype=F64)
            keep = valid[:, :, None]
            dump["vision.out"] = torch.where(g["image_masks"].bool()[:, :, None, None], vis, zero)
            dump["prefix.emb"] = torch.where(keep, emb, zero)
            for l, (k, v) in enumerate(cache):
                dump[f"prefix.k.{l:02d}"] = torch.where(keep, k.reshape(B, k.shape[1], -1), zero)
                dump[f"prefix.v.{l:02d}"] = torch.where(keep, v.reshape(B, v.shape[1], -1), zero)
            dump["actions"] = x
        return x


def quant_stages(precision, option):
    """The stages that --precision PRECISION [--quant-stages OPTION] puts in 8-bit -> (list, error message or None).
    bf16: none, and --quant-stages is an error; int8: OPTION or all three; fp8: OPTION or vision,prefix, and
    naming the expert is an error (docs/precision.md 8)."""
    if precision == "bf16":
        return [], ("--quant-stages needs --precision int8 or fp8" if option is not None else None)
    known = QUANT_STAGES if precision == "int8" else FP8_STAGES
    stages = (option if option is not None else ",".join(known)).split(",")
    if precision == "fp8" and "expert" in stages:
        return [], (f"--quant-stages: fp8 has no expert stage (docs/precision.md 8): use a subset of "
                    f"{','.join(FP8_STAGES)}, got {option!r}")
    if not set(stages) <= set(known):
        return [], f"--quant-stages: expected a comma-separated subset of {','.join(known)}, got {option!r}"
    return stages, None


def load_inputs(path):
    arrays, _ = read_safetensors(path)
    return arrays


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--dump", action="store_true", help="also write the named intermediates")
    ap.add_argument("--precision", choices=("bf16", "int8", "fp8"), default="bf16",
                    help="int8: the products of docs/precision.md 1 on 8-bit integer codes; fp8: on E4M3 codes "
                         "(docs/precision.md 8)")
    ap.add_argument("--quant-stages",
                    help="with --precision int8: comma-separated subset of vision,prefix,expert (default all); "
                         "with fp8: of vision,prefix (default both)")
    a = ap.parse_args()
    stages, err = quant_stages(a.precision, a.quant_stages)
    if err:
        ap.error(err)
    model = Pi0Reference(a.checkpoint, verbose=True, quant=stages, precision=a.precision if stages else "int8")
    inputs = load_inputs(a.inputs)
    if "noise" not in inputs:
        sys.exit("pi0_ref: the inputs file must contain 'noise' (the reference draws no random numbers)")
    dump = {}
    actions = model.sample_actions(inputs, a.steps, dump=dump)
    out = dump if a.dump else {"actions": actions}
    write_safetensors(a.output, {k: ("F32", v.to(torch.float32)) for k, v in out.items()})


if __name__ == "__main__":
    main()
