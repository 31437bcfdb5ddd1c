#!/usr/bin/python3
"""Independent float64 reference of openpi's π0-FAST greedy decoding (`Pi0FAST.sample_actions`), for the C engine.

Restated from openpi's own code at commit 15a9616 (src/openpi/models/pi0_fast.py: embed_inputs, make_attn_mask,
left_to_right_align, sample_actions; gemma_fast.py: Module, Block, Attention, RMSNorm, Embedder, _apply_rope;
siglip.py: _Module with pool_type "none"; model.py: Observation), quirks included; no engine code was read.
It owns: the pi0_fast config and checkpoint binding (PaliGemma tensors only, under pi0_ref.py's names), SigLIP and
the Gemma decoder with openpi's KV cache of prefill + max_decoding_steps slots, and the decoding loop (temperature 0:
greedy argmax, first index on ties; early stop when every row's token is the end token at the same step).
It deliberately does NOT fix what openpi's loop does oddly (see QUIRKS below); `window="valid"` exists only so that
check_ref.py can show that the fixtures exercise them. Not here: the prompt (FASTTokenizer.tokenize) and the action
decoding (extract_actions), documented in docs/fast.md; sampling with temperature > 0.
float32 mode (`--dtype float32`) follows openpi JAX's float32 operation order (q scaled after RoPE, RoPE angle as
position / timescale, flax LayerNorm with the fast variance, RMSNorm as x * reciprocal(sqrt(var + eps))), so that it
can be compared with openpi run with dtype "float32".

Usage: /usr/bin/python3 tools/reference/pi0_fast_ref.py --checkpoint DIR --inputs IN.safetensors
       --output OUT.safetensors --max-decoding-steps N [--dtype float64|float32] [--dump]
Shape letters: B batch, C camera slots, R image size, T tokens per image, L prompt length, P prefill size (C*T + L),
N max decoding steps, S cache slots (P + N), D width, Hq query heads, K kv heads, Dh head dim, V vocabulary.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.dont_write_bytecode = True   # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pi0_ref as ref  # noqa: E402

EOS_TOKEN = 1                    # pi0_fast.PALIGEMMA_EOS_TOKEN
BIG_NEG = -2.3819763e38          # gemma_fast.Attention: masked logits (finite, so a row with no key is uniform)
EPS = 1e-6                       # gemma_fast.RMSNorm and flax nn.LayerNorm (SigLIP)
ROPE_MAX_WAVELENGTH = 10_000     # gemma_fast._apply_rope
FAST_DEFAULTS = dict(action_dim=32, action_horizon=32, max_token_len=250)   # pi0_fast.Pi0FASTConfig
PG = "paligemma_with_expert.paligemma."

QUIRKS = """openpi's loop as written (pi0_fast.py), reproduced here:
1. left_to_right_align rolls each row left by (last valid index + 1); a masked camera stays inside the sequence.
2. Prefill positions are cumsum(mask) - 1 after the roll: leading pads get -1, masked tokens repeat the position
   of the valid token before them.
3. The KV cache has P + N slots; prefill keys beyond P are zeros. A query row with no admitted key (a pad or a
   masked camera token) gets equal logits BIG_NEG everywhere, so a uniform softmax over all P + N slots.
4. Decode step s uses position prefill_len + s + 1 (prefill_len itself is skipped), writes cache slot P + s and
   admits slots [P - prefill_len, P + s] whatever they hold: with a masked camera this window takes in the masked
   camera's tokens and leaves out as many valid tokens at its start (the first camera's first ones).
5. The loop stops after a step at which every row's token is EOS_TOKEN; rows that produced it earlier keep
   decoding; steps that did not run stay 0. openpi returns the ids in a float32 array (exact below 2^24)."""


# --------------------------------------------------------------------------------------------------
# Configuration and checkpoint
# --------------------------------------------------------------------------------------------------

def make_fast_config(raw):
    """raw: parsed config.json of a pi0_fast checkpoint. Variants as gemma_fast.get_config / siglip "So400m/14";
    the explicit "vision" and "paligemma" blocks override them (as in pi0_ref.make_config)."""
    if raw.get("model_type") != "pi0_fast":
        raise ValueError(f"config.json: model_type must be \"pi0_fast\", found {raw.get('model_type')!r}")
    variant = raw.get("paligemma_variant", "gemma_2b")
    if variant not in ("gemma_2b", "gemma_2b_lora"):   # gemma_fast.Variant
        raise ValueError(f"config.json: paligemma_variant {variant!r} is not a gemma_fast variant (gemma_2b)")
    vis = dict(ref.SO400M)
    vis.update(raw.get("vision", {}))
    pg = dict(ref.GEMMA_VARIANTS["gemma_2b"], vocab_size=ref.PALIGEMMA_VOCAB_SIZE)
    pg.update(raw.get("paligemma", {}))
    cfg = {k: int(raw.get(k, v)) for k, v in FAST_DEFAULTS.items()}
    cfg.update(vision=vis, paligemma=pg)
    if pg["num_heads"] % pg["num_kv_heads"] or pg["head_dim"] % 2:
        raise ValueError("config: num_heads must be a multiple of num_kv_heads and head_dim even")
    if vis["image_size"] % vis["patch_size"] or vis["width"] % vis["num_heads"]:
        raise ValueError("config: vision image_size % patch_size and width % num_heads must be 0")
    if pg["vocab_size"] <= EOS_TOKEN:
        raise ValueError("config: vocab_size must hold the end token 1")
    return cfg


def expected_tensors(cfg):
    """{name: shape}: the PaliGemma part of pi0_ref.expected_tensors (vision tower, projector, Gemma layers,
    embedding, final norm); π0-FAST has no action expert and no action / state / time projections."""
    pi0_like = dict(cfg, pi05=False, action_expert=dict(cfg["paligemma"]))
    return {k: v for k, v in ref.expected_tensors(pi0_like).items() if k.startswith(PG)}


def load_checkpoint(ckpt_dir):
    """-> (cfg, {name: float32 numpy array}). Every expected tensor with its shape; the embedding under EMBED or,
    as in pi0_ref, under the tied lm_head name (optionally aliased in __metadata__); anything else is refused."""
    with open(os.path.join(ckpt_dir, "config.json")) as f:
        cfg = make_fast_config(json.load(f))
    path = os.path.join(ckpt_dir, "model.safetensors")
    arrays, meta = ref.read_safetensors(path)
    if ref.EMBED not in arrays:
        alias = meta.get(ref.EMBED, ref.LM_HEAD)
        if alias not in arrays:
            raise ValueError(f"{path}: tensor {ref.EMBED} missing and no {alias} to alias it")
        arrays[ref.EMBED] = arrays.pop(alias)
    expected = expected_tensors(cfg)
    for name, shape in expected.items():
        if name not in arrays:
            raise ValueError(f"{path}: missing tensor {name} (expected shape {shape})")
        if list(arrays[name].shape) != shape:
            raise ValueError(f"{path}: tensor {name}: expected shape {shape}, found {list(arrays[name].shape)}")
    extra = sorted(set(arrays) - set(expected) - {ref.LM_HEAD})
    if extra:
        raise ValueError(f"{path}: {len(extra)} tensors a pi0_fast checkpoint does not have, e.g. {extra[0]}")
    return cfg, {k: np.asarray(arrays[k], np.float32) for k in expected}


# --------------------------------------------------------------------------------------------------
# The mask and the alignment (pi0_fast.py)
# --------------------------------------------------------------------------------------------------

def make_attn_mask(input_mask, mask_ar):
    """pi0_fast.make_attn_mask: query i sees key j iff cumsum(ar)_j <= cumsum(ar)_i and both are valid.
    [B,P] bool, [B,P] int -> [B,P,P] bool (rows = queries)."""
    c = torch.cumsum(mask_ar.to(torch.int64), dim=1)
    allowed = c[:, None, :] <= c[:, :, None]
    return allowed & input_mask[:, None, :] & input_mask[:, :, None]


def left_to_right_align(x, input_mask, attn_mask):
    """pi0_fast.left_to_right_align, one row at a time: roll left by seqlen = max(mask * arange) + 1."""
    xs, ms, ams = [], [], []
    for b in range(x.shape[0]):
        seqlen = int((input_mask[b].to(torch.int64) * torch.arange(input_mask.shape[1])).max()) + 1
        xs.append(torch.roll(x[b], -seqlen, dims=0))
        ms.append(torch.roll(input_mask[b], -seqlen, dims=0))
        ams.append(torch.roll(attn_mask[b], (-seqlen, -seqlen), dims=(0, 1)))
    return torch.stack(xs), torch.stack(ms), torch.stack(ams)


# --------------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------------

class Pi0FastReference:
    def __init__(self, ckpt_dir, dtype=torch.float64):
        """dtype: float64 (the reference) or float32 (openpi JAX's float32 order, for comparison)."""
        self.dt = dtype
        self.cfg, arrays = load_checkpoint(ckpt_dir)
        self.w = {k: torch.from_numpy(v).to(dtype) for k, v in arrays.items()}

    def _c(self, v):
        return torch.tensor(v, dtype=self.dt)

    def layer_norm(self, x, scale, bias):
        """flax nn.LayerNorm (use_fast_variance): var = mean(x^2) - mean(x)^2,
        y = (x - mu) * (rsqrt(var + eps) * w) + b."""
        mu = x.mean(-1, keepdim=True)
        var = torch.clamp((x * x).mean(-1, keepdim=True) - mu * mu, min=0.0)
        return (x - mu) * (torch.rsqrt(var + EPS) * scale) + bias

    def rms_norm(self, x, scale):
        """gemma_fast.RMSNorm: x * reciprocal(sqrt(mean(x^2) + eps)) * (1 + scale)."""
        return x * torch.reciprocal(torch.sqrt((x * x).mean(-1, keepdim=True) + EPS)) * (1 + scale)

    @staticmethod
    def gelu(x):
        """flax nn.gelu (approximate=True): x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))."""
        return x * (0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3))))

    def rope(self, x, positions):
        """gemma_fast._apply_rope: x [B,T,n,Dh], positions [B,T] ints; angle = position / 10000^(2i/Dh)."""
        Dh = x.shape[-1]
        freq_exponents = (2.0 / Dh) * torch.arange(Dh // 2, dtype=self.dt)
        timescale = ROPE_MAX_WAVELENGTH ** freq_exponents
        radians = (positions.to(self.dt)[..., None] / timescale[None, None, :])[..., None, :]
        sin, cos = torch.sin(radians), torch.cos(radians)
        x1, x2 = x[..., :Dh // 2], x[..., Dh // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    # ---- SigLIP, siglip._Module with pool_type "none" and the "head" Dense (num_classes = LM width) ----
    def vision(self, images):
        """images [B,C,R,R,3] in [-1,1] -> image tokens [B,C,T,D]. Every camera is computed, masked or not."""
        vs, w = self.cfg["vision"], self.w
        V = ref.V
        B, C, R, _, ch = images.shape
        p, Wv, nh = vs["patch_size"], vs["width"], vs["num_heads"]
        g, hd = R // p, Wv // nh
        M, T = B * C, g * g
        x = images.to(self.dt).reshape(M, g, p, g, p, ch).permute(0, 1, 3, 2, 4, 5).reshape(M, T, p * p * ch)
        kernel = w[V + ".embeddings.patch_embedding.weight"].permute(0, 2, 3, 1).reshape(Wv, p * p * ch)  # OIHW
        h = ref.linear(x, kernel, w[V + ".embeddings.patch_embedding.bias"])        # nn.Conv, stride = patch
        h = h + w[V + ".embeddings.position_embedding.weight"][None]
        for i in range(vs["depth"]):
            b = f"{V}.encoder.layers.{i}"
            y = self.layer_norm(h, w[b + ".layer_norm1.weight"], w[b + ".layer_norm1.bias"])
            q, k, v = (ref.linear(y, w[f"{b}.self_attn.{n}.weight"], w[f"{b}.self_attn.{n}.bias"]).reshape(M, T, nh, hd)
                       for n in ("q_proj", "k_proj", "v_proj"))
            q = q / math.sqrt(hd)                                                     # flax dot_product_attention
            probs = torch.softmax(torch.einsum("mqhd,mkhd->mhqk", q, k), dim=-1)
            o = torch.einsum("mhqk,mkhd->mqhd", probs, v).reshape(M, T, Wv)
            h = h + ref.linear(o, w[b + ".self_attn.out_proj.weight"], w[b + ".self_attn.out_proj.bias"])
            y = self.layer_norm(h, w[b + ".layer_norm2.weight"], w[b + ".layer_norm2.bias"])
            y = self.gelu(ref.linear(y, w[b + ".mlp.fc1.weight"], w[b + ".mlp.fc1.bias"]))
            h = h + ref.linear(y, w[b + ".mlp.fc2.weight"], w[b + ".mlp.fc2.bias"])
        h = self.layer_norm(h, w[V + ".post_layernorm.weight"], w[V + ".post_layernorm.bias"])   # encoder_norm
        return ref.linear(h, w[ref.PROJ + ".weight"], w[ref.PROJ + ".bias"]).reshape(B, C, T, -1)

    # ---- Gemma (gemma_fast.Module) ----
    def embed(self, tokens):
        """Embedder.encode: table[ids] * sqrt(width), the factor cast to the table's dtype: float32 here. openpi's
        served policies restore params as bfloat16 (policy_config.py), where the factor for width 2048 is 45.25,
        not 45.2548; the tiny width 64 gives exactly 8 either way."""
        return self.w[ref.EMBED][tokens.long()] * float(np.sqrt(np.float32(self.cfg["paligemma"]["width"])))

    def llm(self, x, positions, mask, cache=None, slot=None, num_slots=None):
        """Module.__call__(embedded_prefix=x, positions, mask, decode=True[, kv_cache]) -> (logits of the last row
        [B,V], cache). x [B,T,D]; mask [B,T,S] bool. Without a cache (prefill) one of S = num_slots slots is made
        per layer, K/V of x in slots [0, T), zeros after (Attention._init_cache); with one (T = 1) the new K/V go to
        slot `slot` of every row (_update_cache writes at idx[0]). Queries see all S slots through the mask."""
        c, w = self.cfg["paligemma"], self.w
        B, T, _ = x.shape
        Hq, K, Dh = c["num_heads"], c["num_kv_heads"], c["head_dim"]
        new_cache = []
        for l in range(c["depth"]):
            b = f"{ref.LM}.layers.{l}"
            y = self.rms_norm(x, w[b + ".input_layernorm.weight"])
            q = ref.linear(y, w[b + ".self_attn.q_proj.weight"]).reshape(B, T, Hq, Dh)
            k = ref.linear(y, w[b + ".self_attn.k_proj.weight"]).reshape(B, T, K, Dh)
            v = ref.linear(y, w[b + ".self_attn.v_proj.weight"]).reshape(B, T, K, Dh)
            q = self.rope(q, positions) * Dh ** -0.5
            k = self.rope(k, positions)
            if cache is None:
                kc = torch.zeros(B, num_slots, K, Dh, dtype=self.dt)
                vc = torch.zeros(B, num_slots, K, Dh, dtype=self.dt)
                kc[:, :T], vc[:, :T] = k, v
            else:
                kc, vc = cache[l][0].clone(), cache[l][1].clone()
                kc[:, slot:slot + 1], vc[:, slot:slot + 1] = k, v
            new_cache.append((kc, vc))
            qg = q.reshape(B, T, K, Hq // K, Dh)
            logits = torch.einsum("btkgh,bskh->bkgts", qg, kc)
            logits = torch.where(mask[:, None, None], logits, self._c(BIG_NEG))
            probs = torch.softmax(logits, dim=-1)
            o = torch.einsum("bkgts,bskh->btkgh", probs, vc).reshape(B, T, Hq * Dh)
            x = x + ref.linear(o, w[b + ".self_attn.o_proj.weight"])
            y = self.rms_norm(x, w[b + ".post_attention_layernorm.weight"])
            y = self.gelu(ref.linear(y, w[b + ".mlp.gate_proj.weight"])) * ref.linear(y, w[b + ".mlp.up_proj.weight"])
            x = x + ref.linear(y, w[b + ".mlp.down_proj.weight"])
        x = self.rms_norm(x[:, -1], w[ref.LM + ".norm.weight"])                     # final_norm
        return x @ w[ref.EMBED].t(), new_cache                                      # Embedder.decode

    # ---- Pi0FAST.embed_inputs ----
    def embed_inputs(self, images, image_masks, tokens, token_mask, token_ar_mask):
        """-> (embeddings [B,P,D], input mask [B,P] bool, ar mask [B,P] int): each camera's tokens (mask repeated,
        ar 0), then the prompt embedded x sqrt(width) with its masks."""
        vis = self.vision(images)
        B, C, T, D = vis.shape
        emb = torch.cat([vis.reshape(B, C * T, D), self.embed(tokens)], dim=1)
        mask = torch.cat([image_masks.bool()[:, :, None].expand(B, C, T).reshape(B, C * T), token_mask.bool()], 1)
        ar = torch.cat([torch.zeros(B, C * T, dtype=torch.int64), token_ar_mask.to(torch.int64)], dim=1)
        return emb, mask, ar

    # ---- Pi0FAST.sample_actions, temperature 0 ----
    def sample_tokens(self, inputs, max_decoding_steps, window="openpi", early_stop=True):
        """inputs: images, image_masks, tokens, token_mask, token_ar_mask (arrays). Returns a dict:
        output_tokens int64 [B,N]; logit_margin [B,N] (top-1 minus top-2 of the logits each token came from, 0 where
        no step ran); step_logits [B,N,V] (those logits, 0 where no step ran); prefill_logits [B,V]; steps (count).
        window "valid" (for check_ref.py only) admits the prefix's valid slots instead of openpi's window (QUIRKS 4);
        early_stop False runs all N steps."""
        g = {k: torch.as_tensor(np.asarray(inputs[k])) for k in
             ("images", "image_masks", "tokens", "token_mask", "token_ar_mask")}
        emb, mask, ar = self.embed_inputs(g["images"], g["image_masks"], g["tokens"], g["token_mask"],
                                          g["token_ar_mask"])
        attn = make_attn_mask(mask, ar)
        emb, mask, attn = left_to_right_align(emb, mask, attn)
        B, P, _ = emb.shape
        N = int(max_decoding_steps)
        S = P + N
        prefill_len = mask.to(torch.int64).sum(-1)
        prefix_start = P - prefill_len
        prefix_mask = torch.cat([attn, torch.zeros(B, P, N, dtype=torch.bool)], dim=2)
        positions = torch.cumsum(mask.to(torch.int64), dim=-1) - 1
        last_logit, cache = self.llm(emb, positions, prefix_mask, num_slots=S)
        prefill_logits = last_logit
        V = last_logit.shape[-1]
        out = {"output_tokens": torch.zeros(B, N, dtype=torch.int64), "logit_margin": torch.zeros(B, N, dtype=self.dt),
               "step_logits": torch.zeros(B, N, V, dtype=self.dt)}
        slots = torch.arange(S)
        step, all_eos = 0, False
        while not all_eos and step < N:
            lg = last_logit.numpy()
            token = torch.from_numpy(np.argmax(lg, axis=-1))                     # first index on ties
            top2 = np.sort(lg, axis=-1)[:, -2:]
            out["output_tokens"][:, step] = token
            out["logit_margin"][:, step] = torch.from_numpy(top2[:, 1] - top2[:, 0])
            out["step_logits"][:, step] = last_logit
            all_eos = early_stop and bool((token == EOS_TOKEN).all())
            if window == "openpi":
                admit = (slots[None, :] >= prefix_start[:, None]) & (slots[None, :] < P + step + 1)
            elif window == "valid":
                admit = torch.cat([mask, (slots[None, P:] < P + step + 1).expand(B, N)], dim=1)
            else:
                raise ValueError(f"window must be 'openpi' or 'valid', not {window!r}")
            positions = (prefill_len + step + 1)[:, None]
            last_logit, cache = self.llm(self.embed(token)[:, None], positions, admit[:, None, :], cache, slot=P + step)
            step += 1
        out["prefill_logits"] = prefill_logits
        out["steps"] = step
        return out


def load_inputs(path):
    arrays, _ = ref.read_safetensors(path)
    need = ("images", "image_masks", "tokens", "token_mask", "token_ar_mask")
    missing = [k for k in need if k not in arrays]
    if missing:
        raise ValueError(f"{path}: missing input tensor(s) {', '.join(missing)}")
    return arrays


def output_tensors(out, dump=False):
    """The OUT.safetensors tensors of a sample_tokens result."""
    t = {"output_tokens": ("I32", out["output_tokens"]),
         "logit_margin": ("F32", out["logit_margin"].to(torch.float32)),
         "prefill_logits": ("F32", out["prefill_logits"].to(torch.float32))}
    if dump:
        t["step_logits"] = ("F32", out["step_logits"].to(torch.float32))
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--max-decoding-steps", type=int, required=True)
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    ap.add_argument("--dump", action="store_true", help="also write step_logits [B,N,V]")
    a = ap.parse_args()
    if a.max_decoding_steps < 1:
        ap.error("--max-decoding-steps must be at least 1")
    torch.set_num_threads(1)
    try:
        model = Pi0FastReference(a.checkpoint, dtype=getattr(torch, a.dtype))
        out = model.sample_tokens(load_inputs(a.inputs), a.max_decoding_steps)
    except (OSError, ValueError) as e:
        sys.exit(f"pi0_fast_ref: {e}")
    ref.write_safetensors(a.output, output_tensors(out, a.dump))


if __name__ == "__main__":
    main()
