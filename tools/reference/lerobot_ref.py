#!/usr/bin/python3
"""Independent reference of LeRobot's pi0 / pi0.5 inference pipeline (PI0Policy / PI05Policy with their saved
pre/post-processors), for checking the C engine's LeRobot mode.

  lerobot_ref.py --checkpoint DIR --tokenizer FILE.model [--default-prompt TEXT] [--steps N]
     [--obs FILE.safetensors] [--task TEXT] --noise FILE.safetensors --out OUT.json [--dump-inputs FILE.safetensors]
  lerobot_ref.py --self-check

Restated with numpy from LeRobot's own code at commit 7427f31 (no engine code was read):
  common/control_utils.py predict_action: prepare_observation_for_inference -> preprocessor -> select_action
    -> postprocessor; policies/utils.py prepare_observation_for_inference (to the policy's device, then uint8 ->
    float32 u/255, HWC -> CHW, batch dim, task "" when none is given);
  processor/pipeline.py (policy_preprocessor.json / policy_postprocessor.json: steps run in file order, each
    {"registry_name", "config", "state_file"}); processor/{rename_processor, batch_processor, device_processor,
    tokenizer_processor, relative_action_processor, normalize_processor}.py; policies/pi0/processor_pi0.py
    (pi0_new_line_processor); policies/pi05/processor_pi05.py (pi05_prepare_state_tokenizer_processor_step);
  policies/pi0{,5}/configuration_pi0{,5}.py (defaults, validate_features: empty cameras, state/action features);
  policies/pi0{,5}/modeling_pi0{,5}.py (_preprocess_images, prepare_state, predict_action_chunk, select_action,
    from_pretrained + _fix_pytorch_state_dict_keys); policies/common/vla_utils.py (resize_with_pad_torch,
    pad_vector); policies/common/flow_matching.py (euler_integrate).
The network itself is tools/reference/pi0_ref.py (float64): LeRobot's model.safetensors keys are mapped onto the
openpi names it reads (a temporary canonical checkpoint directory). The denoising loop is LeRobot's, not
pi0_ref.sample_actions: dt = -1.0/n (double), t_k = float32(1.0 + k*dt) for k < n, x += dt*v; openpi instead
accumulates t in float32 (t = 0.70000005 vs 0.7 at n = 10).

LeRobot facts that an implementer may not expect (all from the files above):
  * present cameras come first in feature order, then each missing camera as an all -1 image with mask 0;
  * resize_with_pad_torch clamps the resized image to [0, 1] (after any VISUAL normalisation), pads with 0.0;
  * the normaliser's stats are float32 (load_state_dict) and are converted to the INPUT tensor's dtype;
    MEAN_STD inverse is x*std + mean (no eps); MIN_MAX / QUANTILES use eps only where the range is exactly 0;
  * pi0 tokenises task + "\\n" (newline step) with BOS, right padding with id 0; pi0.5 tokenises
    "Task: {clean task}, State: {digitised normalised state};\\nAction: " (state NOT padded);
  * the tokenizer step's own max_length is used, not the policy config's tokenizer_max_length.

Engine decisions (choices made for the C engine, implemented here as stated):
  1. Images: uint8 HWC or CHW (CHW when shape[0] == 3) -> float32(u) * float32(1.0f/255.0f) (the reciprocal
     computed in float32), CHW; float32/float64 arrays are float32 values in [0,1], CHW when shape[0] == 3 else
     HWC; a leading batch dimension of 1 is allowed; non-finite values are an error.  (LeRobot assumes HWC, as
     robots send it.)  Reason for the reciprocal: prepare_observation_for_inference (policies/utils.py) moves the
     tensor to the policy's device BEFORE `tensor.type(torch.float32) / 255`, and on CUDA PyTorch divides a tensor
     by a CPU scalar as a multiplication by the float32 reciprocal (measured on torch 2.11 CUDA: 126 of the 256
     values u/255 differ from true division; CPU does true division).  pi0 runs on GPUs, so the engine takes the
     GPU's values.
  2. Resize (only when the size differs from R): PyTorch >= 2.7's float32 F.interpolate(mode="bilinear",
     align_corners=False, antialias=False) reproduced bit for bit (LeRobot requires torch >= 2.7, < 2.12; measured
     on torch 2.11.0+cu130, H200 machine: CPU NCHW, CPU channels-last and CUDA give identical results, and this
     formula reproduces them on 480x640->168x224, 96x128->168x224, 100x37->224x82 random images).  All float32,
     fma = exactly rounded a*b+c (one rounding; emulated exactly by fma32):
       per axis (in -> out): scale = float32(in)/float32(out); src = max(fma(scale, float32(d) + 0.5f, -0.5f), 0);
         i0 = min(floor(src), in-1); i1 = min(i0+1, in-1); lam = clamp(src - float32(i0), 0, 1); w0 = 1-lam; w1 = lam
       t0 = fma(wx0, x00, wx1*x01); t1 = fma(wx0, x10, wx1*x11); v = fma(wy0, t0, wy1*t1)
     then clamped to [0,1] and padded with 0.0.  (An earlier decision used the exactly rounded float64 value; it
     was replaced because LeRobot runs on torch >= 2.7, whose float32 kernel gives these values, so the engine
     now matches what LeRobot computes instead of an idealised value.)  The self-check compares fma32 with exact Fraction arithmetic and, informationally,
     the resize with the local torch on CPU (and CUDA when present).  Measured with this file on torch
     2.11.0+cu130 (H200): CUDA equal on all seven sizes of the self-check; CPU (NCHW and channels-last alike)
     equal on the three sizes above and on 333x111->224x74, but differing in up to ~40% of the values (max
     1.2e-7) on 224x224->56x56, 20x30->37x56 and 57x57->56x56: the formula is CUDA's kernel, which is what pi0
     on a GPU sees (as in decision 1).  Debian's torch 1.13 differs everywhere (up to 3.3e-5).
  3. State: float64 is normalised in float64, float32 in float32, integers become float32 first; the model
     input is the padded normalised state rounded to float32; pi0.5 digitises the normalised state in its
     own precision.  (As LeRobot does with the tensor the caller provides.)  Non-finite state is an error.
  4. Observation keys: '/' separators read as '.'; then the rename map; every key must then be a camera
     feature or observation.state (error naming the key); observation.state is required and its length must
     equal input_features["observation.state"].shape[0].  Renaming is done before the other steps (it is the
     first step of both LeRobot pipelines and commutes with batching).
  5. Actions: float32 model actions [H, max_action_dim] -> first n_action_steps rows, first action_dim columns
     -> unnormalised in float32 with the postprocessor's stats -> float64 JSON.  The float64 model output is
     rounded to float32 first because the engine's model (like LeRobot's) returns float32.
  6. Errors (message on stderr, exit status 1): missing policy_preprocessor.json / policy_postprocessor.json,
     an unknown registry_name, a missing state_file, a missing stat needed by a norm mode, a stats shape that
     contradicts the feature shape, an unknown "type", relative/absolute actions enabled, MEM/RTC enabled.
"""
import argparse
import json
import os
import re
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pi0_ref import F64, Pi0Reference, read_safetensors, write_safetensors  # noqa: E402

OBS_STATE, OBS_IMAGES, ACTION = "observation.state", "observation.images", "action"
PRE_STEPS = {"rename_observations_processor", "to_batch_processor", "pi0_new_line_processor", "tokenizer_processor",
             "device_processor", "relative_actions_processor", "normalizer_processor",
             "pi05_prepare_state_tokenizer_processor_step"}
POST_STEPS = {"unnormalizer_processor", "absolute_actions_processor", "device_processor"}
NORM_STATS = {"MEAN_STD": ("mean", "std"), "MIN_MAX": ("min", "max"), "QUANTILES": ("q01", "q99"),
              "QUANTILE10": ("q10", "q90")}
U8_SCALE = np.float32(1.0) / np.float32(255.0)                   # float32 reciprocal, as CUDA divides by 255
FLOAT_DTYPES = {"float32": np.float32, "float": np.float32, "float64": np.float64, "double": np.float64}
DEFAULTS = dict(chunk_size=50, n_action_steps=50, max_state_dim=32, max_action_dim=32, num_inference_steps=10,
                image_resolution=[224, 224], empty_cameras=0, min_period=4e-3, max_period=4.0,
                paligemma_variant="gemma_2b", action_expert_variant="gemma_300m")


class RefError(Exception):
    pass


def load_json(path, what):
    if not os.path.isfile(path):
        raise RefError(f"{path}: missing {what}")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise RefError(f"{path}: cannot read {what}: {e}") from None


# --------------------------------------------------------------------------------------------------
# Policy config (configuration_pi0.py / configuration_pi05.py)
# --------------------------------------------------------------------------------------------------

def parse_features(raw, where):
    out = {}
    for k, v in (raw or {}).items():
        if not isinstance(v, dict) or "type" not in v or "shape" not in v:
            raise RefError(f"{where}: feature {k!r} must be {{'type', 'shape'}}")
        out[k] = (str(v["type"]), tuple(int(s) for s in v["shape"]))
    return out


def load_policy_config(ckpt):
    path = os.path.join(ckpt, "config.json")
    raw = load_json(path, "policy config")
    typ = raw.get("type")
    if typ not in ("pi0", "pi05"):
        raise RefError(f"{path}: unknown policy type {typ!r} (expected 'pi0' or 'pi05')")
    c = dict(DEFAULTS, tokenizer_max_length=48 if typ == "pi0" else 200)
    c.update({k: raw[k] for k in list(c) if k in raw})
    c["type"], c["raw"] = typ, raw
    if c["n_action_steps"] > c["chunk_size"]:
        raise RefError(f"{path}: n_action_steps ({c['n_action_steps']}) > chunk_size ({c['chunk_size']})")
    res = list(c["image_resolution"])
    if len(res) != 2 or res[0] != res[1]:
        raise RefError(f"{path}: image_resolution must be square, got {res}")
    c["R"] = int(res[0])
    for k in ("paligemma_variant", "action_expert_variant"):
        if c[k] not in ("gemma_300m", "gemma_2b"):
            raise RefError(f"{path}: invalid {k} {c[k]!r}")
    for k in ("use_visual_memory", "use_proprioceptive_memory", "use_relative_actions"):
        if raw.get(k):
            raise RefError(f"{path}: {k} = true is not supported")
    if isinstance(raw.get("rtc_config"), dict) and raw["rtc_config"].get("enabled"):
        raise RefError(f"{path}: rtc_config.enabled = true is not supported")
    if (c["min_period"], c["max_period"]) != (4e-3, 4.0):
        raise RefError(f"{path}: min_period/max_period other than 4e-3/4.0 are not supported by pi0_ref")
    inp = parse_features(raw.get("input_features"), path)
    out = parse_features(raw.get("output_features"), path)
    for i in range(int(c["empty_cameras"])):                        # validate_features
        inp[f"{OBS_IMAGES}.empty_camera_{i}"] = ("VISUAL", (3, c["R"], c["R"]))
    inp.setdefault(OBS_STATE, ("STATE", (c["max_state_dim"],)))
    out.setdefault(ACTION, ("ACTION", (c["max_action_dim"],)))
    c["cameras"] = [k for k, (t, _) in inp.items() if t == "VISUAL"]
    c["state_dim"], c["action_dim"] = inp[OBS_STATE][1][0], out[ACTION][1][0]
    if c["state_dim"] > c["max_state_dim"] or c["action_dim"] > c["max_action_dim"]:
        raise RefError(f"{path}: state/action dims {c['state_dim']}/{c['action_dim']} exceed "
                       f"max_state_dim/max_action_dim {c['max_state_dim']}/{c['max_action_dim']}")
    if typ == "pi0" and c["max_state_dim"] != c["max_action_dim"]:
        raise RefError(f"{path}: pi0_ref needs max_state_dim == max_action_dim (state_proj input)")
    if not c["cameras"]:
        raise RefError(f"{path}: the policy has no VISUAL input feature")
    return c


# --------------------------------------------------------------------------------------------------
# Weights: from_pretrained + _fix_pytorch_state_dict_keys, then LeRobot "model." names -> openpi names
# --------------------------------------------------------------------------------------------------

LM_HEAD = "paligemma_with_expert.paligemma.lm_head.weight"
EMBED = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
_EXPERT_NORM = re.compile(r"paligemma_with_expert\.gemma_expert\.model\.(layers\.\d+\.(input_layernorm|"
                          r"post_attention_layernorm)|norm)\.weight")


def lerobot_to_openpi(arrays, pi05):
    fixed, lm_head = {}, None
    for key, v in arrays.items():
        new = key
        if pi05 and _EXPERT_NORM.match(key):                        # adaRMS mismatch: dropped (unprefixed only)
            continue
        if pi05:
            for a, b in (("action_time_mlp_in.", "time_mlp_in."), ("action_time_mlp_out.", "time_mlp_out.")):
                if key.startswith(a):
                    new = key.replace(a, b)
            if key.startswith("state_proj."):
                continue
        else:
            for a, b in (("time_mlp_in.", "action_time_mlp_in."), ("time_mlp_out.", "action_time_mlp_out.")):
                if key.startswith(a):
                    new = key.replace(a, b)
        if key in ("model." + LM_HEAD, LM_HEAD):
            lm_head = v                                             # copied to embed_tokens (tied weights)
        fixed[new if new.startswith("model.") else "model." + new] = v
    # Files written by safetensors store lm_head before embed_tokens (same dtype, sorted names), so an explicit
    # embed_tokens tensor overrides the lm_head copy.
    if "model." + EMBED not in fixed and lm_head is not None:
        fixed["model." + EMBED] = lm_head
    return {k[len("model."):]: v for k, v in fixed.items()}


def build_model(ckpt, c, max_len):
    st = os.path.join(ckpt, "model.safetensors")
    if not os.path.isfile(st):
        raise RefError(f"{st}: missing model weights")
    arrays, _ = read_safetensors(st)
    weights = lerobot_to_openpi(arrays, c["type"] == "pi05")
    raw = c["raw"]
    vision = dict(raw.get("vision", {}))
    if vision.get("image_size", c["R"]) != c["R"]:
        raise RefError(f"config.json: vision.image_size {vision['image_size']} != image_resolution {c['R']}")
    vision["image_size"] = c["R"]
    canon = {"pi05": c["type"] == "pi05", "action_dim": c["max_action_dim"], "action_horizon": c["chunk_size"],
             "max_token_len": max_len, "paligemma_variant": c["paligemma_variant"],
             "action_expert_variant": c["action_expert_variant"], "vision": vision,
             "paligemma": raw.get("paligemma", {}), "action_expert": raw.get("action_expert", {})}
    st_dt = {np.dtype(np.float64): "F64", np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}
    with tempfile.TemporaryDirectory(prefix="lerobot_ref_") as tmp:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(canon, f)
        bad = [k for k, v in weights.items() if v.dtype not in st_dt]
        if bad:
            raise RefError(f"{st}: tensor {bad[0]} has unsupported dtype {weights[bad[0]].dtype}")
        write_safetensors(os.path.join(tmp, "model.safetensors"), {k: (st_dt[v.dtype], v) for k, v in weights.items()})
        try:
            return Pi0Reference(tmp, verbose=True)
        except ValueError as e:
            raise RefError(f"{st} (mapped to openpi names): {e}") from None


def lerobot_sample_actions(model, inputs, num_steps):
    """PI0Pytorch/PI05Pytorch.sample_actions with euler_integrate (flow_matching.py), on pi0_ref's float64 net."""
    g = {k: torch.as_tensor(np.asarray(v)) for k, v in inputs.items()}
    emb, valid, _ = model.embed_prefix(g["images"].to(F64), g["image_masks"], g["tokens"], g["token_mask"])
    cache = model.prefix_pass(emb, valid)
    state, x = g["state"].to(F64), g["noise"].to(F64)
    dt = -1.0 / num_steps
    for step in range(num_steps):
        t = float(np.float32(1.0 + step * dt))                     # torch.tensor(time, dtype=float32)
        v = model.expert_forward(cache, valid, state, x, torch.full((x.shape[0],), t, dtype=F64))
        x = x + dt * v
    return x


# --------------------------------------------------------------------------------------------------
# Normaliser (normalize_processor.py _NormalizationMixin)
# --------------------------------------------------------------------------------------------------

class Normalizer:
    def __init__(self, step, where):
        cfg = step.get("config", {}) or {}
        self.where = where
        self.eps = float(cfg.get("eps", 1e-8))
        self.features = parse_features(cfg.get("features"), where)
        self.norm_map = {str(k): str(v) for k, v in (cfg.get("norm_map") or {}).items()}
        for k, m in self.norm_map.items():
            if m != "IDENTITY" and m not in NORM_STATS:
                raise RefError(f"{where}: unsupported normalization mode {m!r} for {k}")
        keys = cfg.get("normalize_observation_keys")
        self.obs_keys = None if keys is None else set(keys)
        self.stats = {}
        if step.get("state_path"):
            arrays, _ = read_safetensors(step["state_path"])
            for flat, v in arrays.items():                          # load_state_dict: float32, "<key>.<stat>"
                key, stat = flat.rsplit(".", 1)
                self.stats.setdefault(key, {})[stat] = np.asarray(v, dtype=np.float32)
        for key, (typ, _) in self.features.items():                 # _reshape_visual_stats
            if typ == "VISUAL" and key in self.stats:
                for s, v in self.stats[key].items():
                    if v.ndim == 1:
                        self.stats[key][s] = v.reshape(-1, 1, 1)

    def apply(self, x, key, ftype, shape, inverse):
        mode = self.norm_map.get(ftype, "IDENTITY")
        if mode == "IDENTITY" or key not in self.stats:
            return x
        lo_name, hi_name = NORM_STATS[mode]
        st = self.stats[key]
        for s in (lo_name, hi_name):
            if s not in st:
                raise RefError(f"{self.where}: {mode} normalization of {key!r} needs stat '{s}' ({key}.{s} missing)")
            want = (shape[0], 1, 1) if ftype == "VISUAL" else tuple(shape)
            if st[s].shape != want:
                raise RefError(f"{self.where}: stat {key}.{s} has shape {list(st[s].shape)}, feature shape "
                               f"{list(shape)} needs {list(want)}")
        return normalize_formula(x, mode, st[lo_name], st[hi_name], self.eps, inverse)


def normalize_formula(x, mode, a, b, eps, inverse):
    """_apply_transform in x's dtype (stats converted from float32 to it), same operation order as LeRobot."""
    dt = x.dtype.type
    a, b = a.astype(x.dtype), b.astype(x.dtype)
    if mode == "MEAN_STD":                                          # a = mean, b = std
        return x * b + a if inverse else (x - a) / (b + dt(eps))
    denom = b - a
    denom = np.where(denom == 0, dt(eps), denom).astype(x.dtype)
    if mode == "MIN_MAX":
        return (x + dt(1)) / dt(2) * denom + a if inverse else dt(2) * (x - a) / denom - dt(1)
    return (x + dt(1.0)) * denom / dt(2.0) + a if inverse else dt(2.0) * (x - a) / denom - dt(1.0)


# --------------------------------------------------------------------------------------------------
# Images (prepare_observation_for_inference, _preprocess_images, resize_with_pad_torch)
# --------------------------------------------------------------------------------------------------

def image_to_chw(key, a):
    a = np.asarray(a)
    if a.ndim == 4 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 3:
        raise RefError(f"{key}: expected an image [H,W,3] or [3,H,W] (optionally with batch 1), got {list(a.shape)}")
    if a.dtype == np.uint8:                                         # CUDA's u / 255: u * float32(1/255)
        f = a.astype(np.float32) * U8_SCALE
    elif a.dtype in (np.float32, np.float64):
        f = a.astype(np.float32)
        if not np.all(np.isfinite(f)):
            raise RefError(f"{key}: image values must be finite")
    else:
        raise RefError(f"{key}: unsupported image dtype {a.dtype} (U8/F32/F64)")
    if f.shape[0] != 3:
        f = f.transpose(2, 0, 1)
    if f.shape[0] != 3 or f.shape[1] == 0 or f.shape[2] == 0:
        raise RefError(f"{key}: expected 3 channels, got shape {list(a.shape)}")
    return np.ascontiguousarray(f)[None]                            # [1,3,H,W]


def fma32(a, b, c):
    """Exactly rounded float32 a*b + c (one rounding, round to nearest even), vectorised, for float32 arrays.

    p = a*b is exact in float64 (24 + 24 bits); TwoSum gives s + err == p + c exactly; float32(s) is the correctly
    rounded result unless s is exactly halfway between two adjacent float32 values and err != 0: then the result is
    the neighbour on err's side.  An overflowing s (float32(s) = inf) uses 2^128 as the value of inf, so the
    halfway point between FLT_MAX and inf is handled too."""
    a, b, c = (np.asarray(v, dtype=np.float32) for v in (a, b, c))
    p = a.astype(np.float64) * b.astype(np.float64)
    c64 = c.astype(np.float64)
    s = p + c64                                                     # TwoSum (Knuth): s + err == p + c exactly
    bv = s - p
    err = (p - (s - bv)) + (c64 - bv)
    with np.errstate(over="ignore", invalid="ignore"):
        r = s.astype(np.float32)
        r64 = r.astype(np.float64)
        r64 = np.where(np.isinf(r) & np.isfinite(s), np.copysign(2.0 ** 128, s), r64)
        n = np.nextafter(r, np.where(r64 < s, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32))
        n64 = n.astype(np.float64)
        n64 = np.where(np.isinf(n), np.copysign(2.0 ** 128, n64), n64)
        halfway = (r64 != s) & ((r64 + n64) * 0.5 == s) & (err != 0)
        toward_n = (n64 - s) * err > 0                              # err on the neighbour's side
    return np.where(halfway & toward_n, n, r).astype(np.float32)


def _axis(n_in, n_out):
    """PyTorch's float32 source index and weights (align_corners=False): src = fma(in/out, d + 0.5, -0.5)."""
    scale = np.float32(n_in) / np.float32(n_out)
    d = np.arange(n_out).astype(np.float32) + np.float32(0.5)
    src = np.maximum(fma32(scale, d, np.float32(-0.5)), np.float32(0.0))
    i0 = np.minimum(np.floor(src), np.float32(n_in - 1)).astype(np.int64)
    lam = np.clip(src - i0.astype(np.float32), np.float32(0.0), np.float32(1.0)).astype(np.float32)
    return i0, np.minimum(i0 + 1, n_in - 1), (np.float32(1.0) - lam).astype(np.float32), lam


def bilinear_torch(img, oh, ow):
    """img float32 [H,W,C] -> float32 [oh,ow,C]: PyTorch >= 2.7's float32 F.interpolate(bilinear,
    align_corners=False, antialias=False), bit for bit: t = fma(wx0, x0, wx1*x1) per row, fma(wy0, t0, wy1*t1)."""
    x = np.asarray(img, dtype=np.float32)
    y0, y1, wy0, wy1 = _axis(x.shape[0], oh)
    x0, x1, wx0, wx1 = _axis(x.shape[1], ow)
    wx0, wx1 = wx0[None, :, None], wx1[None, :, None]

    def row(rows):
        return fma32(wx0, x[rows][:, x0], (wx1 * x[rows][:, x1]).astype(np.float32))

    t0, t1 = row(y0), row(y1)
    return fma32(wy0[:, None, None], t0, (wy1[:, None, None] * t1).astype(np.float32))


def resize_with_pad(img, R):
    h, w = img.shape[:2]
    ratio = max(w / R, h / R)
    rh, rw = int(h / ratio), int(w / ratio)
    if rh < 1 or rw < 1:
        raise RefError(f"image {h}x{w} resizes to an empty {rh}x{rw}")
    out = np.clip(bilinear_torch(img, rh, rw), np.float32(0.0), np.float32(1.0))
    ph, pw = (R - rh) // 2, (R - rw) // 2
    canvas = np.zeros((R, R, img.shape[2]), dtype=np.float32)
    canvas[ph:ph + rh, pw:pw + rw] = out
    return canvas


# --------------------------------------------------------------------------------------------------
# Pipelines
# --------------------------------------------------------------------------------------------------

def load_pipeline(ckpt, fname, known):
    path = os.path.join(ckpt, fname)
    cfg = load_json(path, "processor pipeline")
    steps = cfg.get("steps") if isinstance(cfg, dict) else None
    if not isinstance(steps, list):
        raise RefError(f"{path}: expected an object with a 'steps' list")
    for i, s in enumerate(steps):
        name = s.get("registry_name") if isinstance(s, dict) else None
        if name not in known:
            raise RefError(f"{path}: step {i}: unknown processor step "
                           f"{name or (s.get('class') if isinstance(s, dict) else s)!r}")
        s["where"] = f"{path} step {i} ({name})"
        if s.get("state_file"):
            sp = os.path.join(ckpt, s["state_file"])
            if not os.path.isfile(sp):
                raise RefError(f"{path}: step {i} ({name}): state file {sp} not found")
            s["state_path"] = sp
        if name in ("relative_actions_processor", "absolute_actions_processor") and (s.get("config") or {}).get("enabled"):
            raise RefError(f"{path}: step {i} ({name}): enabled = true is not supported")
    return steps


def cast_float(arr, step):
    fd = (step.get("config") or {}).get("float_dtype")
    if fd is None or not np.issubdtype(arr.dtype, np.floating):
        return arr
    if fd not in FLOAT_DTYPES:
        raise RefError(f"{step['where']}: float_dtype {fd!r} is not supported")
    return arr.astype(FLOAT_DTYPES[fd])


def tokenize(sp, text, cfg, where):
    """TokenizerProcessorStep with the PaliGemma tokenizer: BOS + pieces, truncation, padding id 0."""
    if cfg.get("task_key", "task") != "task" or cfg.get("padding", "max_length") != "max_length":
        raise RefError(f"{where}: only task_key 'task' and padding 'max_length' are supported")
    max_len = int(cfg.get("max_length", 512))
    ids = list(sp.encode(text, add_bos=True))
    if cfg.get("truncation", True):
        ids = ids[:max_len]
    pad = max(0, max_len - len(ids))
    side = cfg.get("padding_side", "right")
    if side not in ("right", "left"):
        raise RefError(f"{where}: padding_side {side!r}")
    mask = [1] * len(ids)
    ids, mask = (ids + [0] * pad, mask + [0] * pad) if side == "right" else ([0] * pad + ids, [0] * pad + mask)
    return np.asarray([ids], dtype=np.int32), np.asarray([mask], dtype=np.uint8)


def read_observation(path, c, pre):
    arrays = {}
    if path:
        for k, v in read_safetensors(path)[0].items():
            arrays[k.replace("/", ".")] = v
    for s in pre:                                                   # rename_observations_processor
        if s["registry_name"] == "rename_observations_processor":
            rmap = (s.get("config") or {}).get("rename_map") or {}
            arrays = {rmap.get(k, k): v for k, v in arrays.items()}
    obs = {}
    for k, v in arrays.items():
        if k == OBS_STATE:
            a = np.asarray(v)
            if a.ndim == 2 and a.shape[0] == 1:
                a = a[0]
            if a.ndim != 1:
                raise RefError(f"{k}: expected a 1-D state, got shape {list(a.shape)}")
            if np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_:
                a = a.astype(np.float32)
            elif a.dtype not in (np.float32, np.float64):
                raise RefError(f"{k}: unsupported state dtype {a.dtype}")
            if a.shape[0] != c["state_dim"]:
                raise RefError(f"{k}: expected {c['state_dim']} values (input_features), got {a.shape[0]}")
            if not np.all(np.isfinite(a)):
                raise RefError(f"{k}: state values must be finite, got {a.tolist()}")
            obs[k] = a[None]
        elif k in c["cameras"]:
            obs[k] = image_to_chw(k, v)
        else:
            raise RefError(f"observation key {k!r} is not a feature of this policy "
                           f"(cameras: {', '.join(c['cameras'])}; {OBS_STATE})")
    if OBS_STATE not in obs:
        raise RefError(f"missing observation key '{OBS_STATE}'")
    return obs


def run_preprocessor(pre, obs, task, c, sp):
    tokens = None
    for s in pre:
        name, cfg = s["registry_name"], s.get("config") or {}
        if name == "pi0_new_line_processor":
            if not task.endswith("\n"):
                task = task + "\n"
        elif name == "tokenizer_processor":
            tokens = tokenize(sp, task, cfg, s["where"])
        elif name == "device_processor":
            obs = {k: cast_float(v, s) for k, v in obs.items()}
        elif name == "normalizer_processor":
            norm = Normalizer(s, s["where"])
            for key, (ftype, shape) in norm.features.items():
                if norm.obs_keys is not None and key not in norm.obs_keys:
                    continue
                if ftype != "ACTION" and key in obs:
                    obs[key] = norm.apply(obs[key], key, ftype, shape, inverse=False)
        elif name == "pi05_prepare_state_tokenizer_processor_step":
            if cfg.get("task_key", "task") != "task":
                raise RefError(f"{s['where']}: only task_key 'task' is supported")
            disc = np.digitize(obs[OBS_STATE], bins=np.linspace(-1, 1, 256 + 1)[:-1]) - 1
            cleaned = task.strip().replace("_", " ").replace("\n", " ")
            if cfg.get("include_state_in_prompt", True):
                task = f"Task: {cleaned}, State: {' '.join(map(str, disc[0]))};\nAction: "
            else:
                task = f"Task: {cleaned};\nAction: "
        # rename (done in read_observation), to_batch (batch 1 already), relative_actions (checked disabled): no-ops
    if tokens is None:
        raise RefError("policy_preprocessor.json has no tokenizer_processor step")
    return obs, tokens


def model_inputs(obs, tokens, noise, c):
    R, images, masks = c["R"], [], []
    present = [k for k in c["cameras"] if k in obs]
    if not present:
        raise RefError(f"all cameras are missing; at least one of {', '.join(c['cameras'])} is required")
    for k in present:
        img = obs[k].astype(np.float32)[0].transpose(1, 2, 0)       # [B,C,H,W] -> HWC
        if img.shape[:2] != (R, R):
            img = resize_with_pad(img, R)
        images.append(img * np.float32(2.0) - np.float32(1.0))
        masks.append(1)
    for _ in range(len(c["cameras"]) - len(present)):
        images.append(np.full((R, R, 3), -1.0, dtype=np.float32))
        masks.append(0)
    st = obs[OBS_STATE]
    st = np.concatenate([st, np.zeros((1, c["max_state_dim"] - st.shape[1]), dtype=st.dtype)], axis=1)  # pad_vector
    return {"images": np.stack(images)[None], "image_masks": np.asarray([masks], dtype=np.uint8),
            "state": st.astype(np.float32), "tokens": tokens[0], "token_mask": tokens[1], "noise": noise}


def run(a):
    import sentencepiece
    c = load_policy_config(a.checkpoint)
    pre = load_pipeline(a.checkpoint, "policy_preprocessor.json", PRE_STEPS)
    post = load_pipeline(a.checkpoint, "policy_postprocessor.json", POST_STEPS)
    H, A = c["chunk_size"], c["max_action_dim"]
    nt, _ = read_safetensors(a.noise)
    if "noise" not in nt:
        raise RefError(f"{a.noise}: no tensor 'noise'")
    noise = nt["noise"]
    if noise.dtype != np.float32 or noise.shape not in ((H, A), (1, H, A)):
        raise RefError(f"{a.noise}: noise must be F32 [{H},{A}] or [1,{H},{A}], got {noise.dtype} {list(noise.shape)}")
    sp = sentencepiece.SentencePieceProcessor()
    try:
        sp.Load(a.tokenizer)
    except (OSError, RuntimeError) as e:
        raise RefError(f"{a.tokenizer}: cannot load the SentencePiece model: {e}") from None

    task = a.task if a.task is not None else (a.default_prompt if a.default_prompt is not None else "")
    obs = read_observation(a.obs, c, pre)
    obs, tokens = run_preprocessor(pre, obs, task, c, sp)
    inputs = model_inputs(obs, tokens, noise.reshape(1, H, A), c)
    if a.dump_inputs:
        write_safetensors(a.dump_inputs, {
            "images": ("F32", inputs["images"]), "image_masks": ("U8", inputs["image_masks"]),
            "state": ("F32", inputs["state"]), "tokens": ("I32", inputs["tokens"]),
            "token_mask": ("U8", inputs["token_mask"]), "noise": ("F32", inputs["noise"])})
    steps = a.steps if a.steps is not None else int(c["num_inference_steps"])
    model = build_model(a.checkpoint, c, inputs["tokens"].shape[1])
    actions = lerobot_sample_actions(model, inputs, steps).numpy().astype(np.float32)[0]   # [H, max_action_dim]
    actions = np.ascontiguousarray(actions[:c["n_action_steps"], :c["action_dim"]])
    for s in post:
        if s["registry_name"] == "unnormalizer_processor":
            norm = Normalizer(s, s["where"])
            shape = norm.features.get(ACTION, ("ACTION", (c["action_dim"],)))[1]
            actions = norm.apply(actions, ACTION, "ACTION", shape, inverse=True)
        elif s["registry_name"] == "device_processor":
            actions = cast_float(actions, s)
    return actions.astype(np.float64)


# --------------------------------------------------------------------------------------------------
# Self-check
# --------------------------------------------------------------------------------------------------

def _torch_lerobot_transform(tensor, mode, stats, eps, inverse):
    """normalize_processor.py _apply_transform, verbatim torch expressions (stats float32 -> tensor dtype)."""
    st = {k: torch.from_numpy(v).to(dtype=tensor.dtype) for k, v in stats.items()}
    if mode == "MEAN_STD":
        mean, std = st["mean"], st["std"]
        denom = std + eps
        return tensor * std + mean if inverse else (tensor - mean) / denom
    lo, hi = {"MIN_MAX": ("min", "max"), "QUANTILES": ("q01", "q99"), "QUANTILE10": ("q10", "q90")}[mode]
    denom = st[hi] - st[lo]
    denom = torch.where(denom == 0, torch.tensor(eps, device=tensor.device, dtype=tensor.dtype), denom)
    if mode == "MIN_MAX":
        return (tensor + 1) / 2 * denom + st[lo] if inverse else 2 * (tensor - st[lo]) / denom - 1
    return (tensor + 1.0) * denom / 2.0 + st[lo] if inverse else 2.0 * (tensor - st[lo]) / denom - 1.0


def _fraction_to_f32(q):
    """Brute force: the rational q rounded to the nearest float32 (ties to even), subnormals and overflow included."""
    from fractions import Fraction
    if q == 0:
        return 0.0
    sign, m = (-1 if q < 0 else 1), abs(q)
    e = m.numerator.bit_length() - m.denominator.bit_length()      # 2^e <= m < 2^(e+1) after the correction
    if Fraction(2) ** e > m:
        e -= 1
    quantum = Fraction(2) ** (max(e, -126) - 23)
    n, rem = divmod(m, quantum)
    n = int(n)
    if rem * 2 > quantum or (rem * 2 == quantum and n % 2 == 1):
        n += 1
    v = n * quantum
    if v >= Fraction(2) ** 128:
        return sign * float("inf")
    return sign * float(v)                                         # exact: v is a float32 value


def _fma_exact(a, b, c):
    """float32 a*b + c rounded once, with IEEE's sign of an exact zero (round to nearest)."""
    from fractions import Fraction
    a, b, c = float(a), float(b), float(c)
    q = Fraction(a) * Fraction(b) + Fraction(c)
    if q != 0:
        return np.float32(_fraction_to_f32(q))
    prod_neg = (np.signbit(a) != np.signbit(b))
    if a * b == 0 and c == 0:                                       # zero + zero: -0 only if both are -0
        return np.float32(-0.0 if (prod_neg and np.signbit(c)) else 0.0)
    return np.float32(0.0)                                          # x + (-x) = +0


def _fma_triples(rng):
    """Random, resize-like and constructed halfway triples: c + p with p = +-H*(1 - j^2 2^-46), H = half an ulp of c,
    lands (for small j) exactly halfway between two float32 values after rounding to float64, with err != 0."""
    f32 = np.float32
    A, B, C = [], [], []

    def add(a, b, c):
        A.extend(np.asarray(a, f32).ravel())
        B.extend(np.asarray(b, f32).ravel())
        C.extend(np.asarray(c, f32).ravel())
    n = 1000
    add(rng.randn(n), rng.randn(n), rng.randn(n))
    add(rng.randn(n) * 10.0 ** rng.uniform(-30, 30, n), rng.randn(n) * 10.0 ** rng.uniform(-30, 30, n),
        rng.randn(n) * 10.0 ** rng.uniform(-40, 38, n))
    add(rng.rand(n), rng.randint(0, 256, n) / 255.0, rng.rand(n) * rng.rand(n))           # resize weights * pixels
    add(rng.uniform(0.1, 4, n), np.arange(n) + 0.5, np.full(n, -0.5))                    # source indices
    tiny = np.float32(2.0 ** -149)
    add([tiny, -tiny, tiny, 2.0 ** -126, 1e19, 3.4e38, 0.0, -0.0, 0.0, 1.0],
        [0.5, 0.5, 3.0, -2.0 ** -25, 3.4e19, 1.0, -1.0, 5.0, -0.0, 1.0],
        [0.0, tiny, -tiny, 2.0 ** -126, 0.0, 3.4e38, -0.0, -0.0, 0.0, -1.0])
    m = 3000                                                        # constructed halfway cases
    c = (rng.uniform(1, 2, m) * 2.0 ** rng.randint(-120, 120, m) * rng.choice([-1, 1], m)).astype(f32)
    ulp = np.abs(np.nextafter(c, np.float32(np.inf)).astype(np.float64) - np.abs(c).astype(np.float64))
    ulp = np.where(c < 0, np.abs(np.nextafter(c, np.float32(-np.inf)).astype(np.float64) - c.astype(np.float64)), ulp)
    j = rng.randint(1, 700, m)
    u = j * 2.0 ** -23
    a = ((1 + u) * (ulp / 2) * rng.choice([-1, 1], m)).astype(f32)   # exact float32 values by construction
    b = (1 - u).astype(f32)
    add(a, b, c)
    add(np.float32(2.0 ** 6) * (1 + 2.0 ** -23), 1 - 2.0 ** -23, 2.0 ** 30 + 2.0 ** 7)   # ties-to-even goes wrong
    return np.asarray(A, f32), np.asarray(B, f32), np.asarray(C, f32)


def check_fma(rng):
    a, b, c = _fma_triples(rng)
    mine = fma32(a, b, c)
    want = np.array([_fma_exact(x, y, z) for x, y, z in zip(a, b, c)], dtype=np.float32)
    bad = np.flatnonzero(mine.view(np.uint32) != want.view(np.uint32))
    with np.errstate(over="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)
        naive = (p + c.astype(np.float64)).astype(np.float32)        # one float64 rounding then float32: double rounding
    fixed = int((naive.view(np.uint32) != want.view(np.uint32)).sum())
    print(f"fma32 vs exact Fraction arithmetic: {a.size - bad.size}/{a.size} triples bit-equal "
          f"({fixed} of them are halfway cases where float32(float64(a*b+c)) is wrong)")
    for i in bad[:10]:
        print(f"  MISMATCH fma({a[i]!r}, {b[i]!r}, {c[i]!r}) = {mine[i]!r}, exact {want[i]!r}")
    return bad.size == 0 and fixed > 0


def self_check():
    rng = np.random.RandomState(0)
    ok = check_fma(rng)
    devs = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print(f"resize (PyTorch >= 2.7 float32 bilinear, fma emulated) vs local torch {torch.__version__} F.interpolate "
          f"on {' and '.join(devs)} (informational: on torch >= 2.7 CUDA should give 0 differing values everywhere; "
          f"CPU gives 0 on the first three sizes and differs on some others; torch < 2.7 kernels differ):")
    for (h, w, oh, ow) in ((480, 640, 168, 224), (96, 128, 168, 224), (100, 37, 224, 82), (224, 224, 56, 56),
                           (20, 30, 37, 56), (57, 57, 56, 56), (333, 111, 224, 74)):
        img = rng.rand(h, w, 3).astype(np.float32)
        mine = bilinear_torch(img, oh, ow)
        t = torch.from_numpy(img).permute(2, 0, 1)[None]
        line = []
        for dev in devs:
            ref = (torch.nn.functional.interpolate(t.to(dev), size=(oh, ow), mode="bilinear", align_corners=False)
                   [0].permute(1, 2, 0).cpu().numpy().astype(np.float32))
            nd = int((mine.view(np.uint32) != ref.view(np.uint32)).sum())
            line.append(f"{dev} {nd} of {mine.size} differ (max |diff| {np.abs(mine - ref).max():.3g})")
        print(f"  torch {torch.__version__} {h}x{w} -> {oh}x{ow}: " + "; ".join(line))
    for (h, w, R) in ((480, 640, 224), (100, 37, 56), (20, 30, 56)):
        assert resize_with_pad(rng.rand(h, w, 3).astype(np.float32), R).shape == (R, R, 3)
    u = np.arange(256, dtype=np.uint8)
    mul = image_to_chw("u8", np.broadcast_to(u[:, None, None], (256, 1, 3)))[0, 0, :, 0]
    div = u.astype(np.float32) / np.float32(255.0)
    print(f"uint8: u * float32(1/255) differs from float32 u/255 for {int((mul != div).sum())} of 256 values")
    if not np.array_equal(mul, u.astype(np.float32) * (np.float32(1.0) / np.float32(255.0))):
        ok = False
    fails = cases = 0
    for mode, (lo, hi) in NORM_STATS.items():
        for dt, inverse, _ in ((d, i, k) for d in (np.float32, np.float64) for i in (False, True) for k in range(20)):
            n = 17
            a = (rng.randn(n) * 10 ** rng.uniform(-3, 3)).astype(np.float32)
            b = (a + np.abs(rng.randn(n)) * 10 ** rng.uniform(-9, 2)).astype(np.float32)
            b[:3] = a[:3]                                           # zero range -> eps branch
            if mode == "MEAN_STD":                                  # tiny and zero std
                b = np.abs(rng.randn(n) * 10 ** rng.uniform(-9, 2)).astype(np.float32)
                b[:2] = 0.0
            x = (rng.randn(4, n) * 10 ** rng.uniform(-2, 3)).astype(dt)
            mine = normalize_formula(x, mode, a, b, 1e-8, inverse)
            ref = _torch_lerobot_transform(torch.from_numpy(x), mode, {lo: a, hi: b}, 1e-8, inverse).numpy()
            cases += 1
            if mine.dtype != ref.dtype or not np.array_equal(mine.view(np.uint8), ref.view(np.uint8)):
                fails += 1
                print(f"  MISMATCH {mode} {dt.__name__} inverse={inverse}: max diff "
                      f"{np.abs(mine.astype(np.float64) - ref).max():.3g}")
    print(f"normalizer vs LeRobot's torch formulas: {cases - fails}/{cases} cases bit-equal")
    return 1 if fails or not ok else 0


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------

class _ArgParser(argparse.ArgumentParser):
    def error(self, message):                                       # usage errors exit 1 like every other error
        raise RefError(message)


def parse_args(argv):
    ap = _ArgParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--default-prompt")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--obs")
    ap.add_argument("--task")
    ap.add_argument("--noise", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dump-inputs")
    # Like the C CLI, an option's value is the next argument even when it starts with '-'.
    valued = {o for act in ap._actions for o in act.option_strings if not isinstance(act, argparse._HelpAction)}
    merged, i = [], 0
    while i < len(argv):
        if argv[i] in valued and i + 1 < len(argv):
            merged.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            merged.append(argv[i])
            i += 1
    a = ap.parse_args(merged)
    if a.steps is not None and a.steps < 1:
        raise RefError("--steps must be >= 1")
    return a


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--self-check" in argv:
        return self_check()
    try:
        a = parse_args(argv)
        actions = run(a)
        with open(a.out, "w") as f:
            json.dump({"actions": [[float(v) for v in row] for row in actions]}, f)
            f.write("\n")
    except RefError as e:
        print(f"lerobot_ref: error: {e}", file=sys.stderr)
        return 1
    except (ValueError, KeyError, OSError, TypeError, IndexError) as e:
        print(f"lerobot_ref: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
