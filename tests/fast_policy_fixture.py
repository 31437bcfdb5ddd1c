"""A tiny π0-FAST checkpoint whose greedy decoding is chosen in advance, and the tokenizers it needs, for the tests of
the π0-FAST policy (fast_policy_check.py, python/test_fast.py, server/e2e.py). numpy and the standard library only.

A random π0-FAST model writes random tokens, which openpi's extract_actions turns into its zero fallback: no test of
the policy's action path could see a wrong number. Here the model's tokens are a chain we choose, so the actions
are real:

  - every Gemma layer's projections are zero, so the residual stream of a token is its embedding row (times
    sqrt(width)), and the last token's logits are E D e / rms, with e its row and D = diag(1 + w) the final
    RMSNorm's scales: the next token is argmax_j E[j] D e;
  - the rows have two halves: element k of the chain (k = 0 is a start element before its first token) gets
    p = c_k (x_k + x_{k+1}) in the first and q = c_k sqrt(5/2) x_k in the second, x the unit vectors, c_k = 1 + k/16;
    w is 0 on the first half and -2 on the second (D = +1, -1). Element j's logit for element k is then
    c_j c_k if |j - k| = 1, -c_k^2 / 2 if j = k, 0 otherwise: the next element wins (c_{k+1} > c_{k-1}), by a
    margin of 2 c_k / 16 over the previous one (tied embeddings with D = +1 would need rows whose norms grow
    geometrically along the chain, beyond float32 over 80 tokens; D = -1 on the second half lets them grow slowly);
  - every token outside the chain gets the start element's row, so that whatever the prompt ends with, decoding
    writes the chain from its first token; the chain ends with PaliGemma's end token (1), where openpi's decoding of
    one observation stops. A second chain, on dims of its own, can start from one chosen token instead (a prompt cut
    at max_token_len ends with it): samples of one batch then decode chains of two lengths.

The chain is what openpi trains π0-FAST to write: "Action: ", the FAST tokens of a chunk mapped into PaliGemma's
vocabulary (id = V - 1 - 128 - FAST id), "|", the end token. Greedy decoding cannot repeat a token with two
different successors, so the chunk's quantised DCT coefficients are distinct integers: every BPE token of its text
then occurs once. The tokenizer is tests/make_tokenizer.py's with PaliGemma's tail appended (<locNNNN> and 128
<segNNN> user-defined pieces), so that FAST ids land on pieces that encode back to themselves, as in PaliGemma's.
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from protobuf_wire import enc, fields  # noqa: E402

END = 1          # PaliGemma's end token
# droid_policy's prompts: SHORT decodes the chunk, LONG cut at CUT tokens the chain that never ends
SHORT, LONG, CUT = "pick up the cup", "pick up the red block and place it in the top drawer then close the drawer", 12
VISION = {"width": 32, "depth": 1, "mlp_dim": 48, "num_heads": 4, "patch_size": 14, "image_size": 56}
LM = {"width": 384, "depth": 1, "mlp_dim": 64, "num_heads": 4, "num_kv_heads": 1, "head_dim": 32}
V_ = "paligemma_with_expert.paligemma.model.vision_tower.vision_model."
LM_ = "paligemma_with_expert.paligemma.model.language_model."


def pieces(model):
    """[(piece, type)] of a SentencePiece .model file, in id order (type 1 normal, 2 unknown, 3 control, 4 user, 6 byte)."""
    out = []
    for f, wt, v in fields(open(model, "rb").read()):
        if f == 1 and wt == 2:
            sub = list(fields(v))
            out.append((next(x for g, _, x in sub if g == 1).decode(), next((x for g, _, x in sub if g == 3), 1)))
    return out


def paligemma_like(src, dst, n_loc):
    """src's pieces with n_loc <locNNNN> and 128 <segNNN> user-defined pieces appended, as PaliGemma's vocabulary
    ends; returns the piece count V."""
    def user(text):   # a ModelProto.pieces entry: piece, score 0, type USER_DEFINED
        return enc(1, 2, enc(1, 2, text.encode()) + enc(2, 5, b"\0\0\0\0") + enc(3, 0, 4))
    extra = b"".join(user("<loc%04d>" % i) for i in range(n_loc)) + b"".join(user("<seg%03d>" % i) for i in range(128))
    with open(dst, "wb") as f:
        f.write(open(src, "rb").read() + extra)
    return len(pieces(dst))


def byte_level_unicode():
    """GPT-2's byte-level table, byte -> character (what tokenizers' ByteLevel uses)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def write_byte_level_fast(directory, scale, min_token):
    """A FAST processor directory whose BPE has no merges: one token per byte, FAST id = the byte. Coefficients whose
    code point (c - min_token) is below 128 are then one token each, FAST id = c - min_token."""
    os.makedirs(directory, exist_ok=True)
    table = byte_level_unicode()
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                               "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": {table[b]: b for b in range(256)}, "merges": []}}
    with open(os.path.join(directory, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    with open(os.path.join(directory, "processor_config.json"), "w") as f:
        json.dump({"action_dim": None, "min_token": min_token, "processor_class": "UniversalActionProcessor",
                   "scale": scale, "time_horizon": None, "vocab_size": 256}, f)


def distinct_coefficients(rng, H, A, pool):
    """(H, A) distinct integers of pool, the larger ones first along H as in a smooth chunk's DCT."""
    vals = rng.choice(np.asarray(pool), size=H * A, replace=False)
    order = np.argsort(-np.abs(vals), kind="stable")
    return vals[order].reshape(H, A)


def chain(encode, V, fast_ids, action=True, bar=True):
    """The tokens the model is built to write: encode("Action: ") + FAST ids in PaliGemma's vocabulary + encode("|") +
    the end token (action / bar False leave a part out, for openpi's fallbacks)."""
    pg = [V - 1 - 128 - int(f) for f in fast_ids]
    return (list(encode("Action: ")) if action else []) + pg + (list(encode("|")) if bar else []) + [END]


def embedding(V, width, chains):
    """The (V, width) table and the final norm's weight (width) of a model that writes chains: a list of (start, ids),
    where greedy decoding writes ids after a prompt whose last token is start; the chain whose start is None follows
    every token that no chain names."""
    half = width // 2
    c = 1 + np.arange(half) / 16
    rows, E, off = [], None, 0
    named = [t for st, ids in chains for t in ids] + [st for st, _ in chains if st is not None]
    assert len(set(named)) == len(named), "a token repeats in the chains: greedy decoding could not follow them"
    for _, ids in chains:                   # each chain on its own dims: elements of two chains are orthogonal
        n = len(ids) + 1                    # its start element, then the chain
        assert off + n + 1 <= half, f"chains of {off + n + 1} elements need an embedding width of at least {2 * (off + n + 1)}"
        r = np.zeros((n, width))
        for k in range(n):
            r[k, off + k] = r[k, off + k + 1] = c[k]
            r[k, half + off + k] = c[k] * np.sqrt(2.5)
        rows.append(r)
        off += n + 1
    default = [i for i, (st, _) in enumerate(chains) if st is None]
    E = np.repeat(rows[default[0]][:1] if default else np.zeros((1, width)), V, axis=0)
    for (st, ids), r in zip(chains, rows):
        if st is not None:
            E[st] = r[0]
        E[np.array(ids)] = r[1:]
    w = np.where(np.arange(width) < half, 0.0, -2.0)
    return E.astype(np.float32), w.astype(np.float32)


def write_safetensors(path, tensors):
    names = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.int32): "I32",
             np.dtype(np.uint8): "U8", np.dtype(np.int64): "I64", np.dtype(np.bool_): "BOOL"}
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        b = a.tobytes()
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    dt = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "U8": np.uint8, "BOOL": np.bool_}
    out = {}
    for k, v in json.loads(b[8:8 + n]).items():
        if k != "__metadata__":
            s, e = v["data_offsets"]
            out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=dt[v["dtype"]]).reshape(v["shape"])
    return out


def write_checkpoint(directory, V, chains, H, A, L, seed):
    """config.json + model.safetensors (F32) of a π0-FAST model that writes chains (embedding's); horizon H, action
    dim A and prompt length L go to config.json (they do not change the weights)."""
    rng = np.random.default_rng(seed)
    os.makedirs(directory, exist_ok=True)
    vw, vf, lw = VISION["width"], VISION["mlp_dim"], LM["width"]
    T = (VISION["image_size"] // VISION["patch_size"]) ** 2
    t = {}

    def rnd(name, *shape, scale=0.05):
        t[name] = (rng.standard_normal(shape) * scale).astype(np.float32)

    rnd(V_ + "embeddings.patch_embedding.weight", vw, 3, VISION["patch_size"], VISION["patch_size"])
    rnd(V_ + "embeddings.patch_embedding.bias", vw)
    rnd(V_ + "embeddings.position_embedding.weight", T, vw)
    for i in range(VISION["depth"]):
        p = V_ + f"encoder.layers.{i}."
        for n in ("layer_norm1", "layer_norm2"):
            t[p + n + ".weight"] = np.ones(vw, np.float32)
            rnd(p + n + ".bias", vw)
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            rnd(p + "self_attn." + n + ".weight", vw, vw)
            rnd(p + "self_attn." + n + ".bias", vw)
        rnd(p + "mlp.fc1.weight", vf, vw)
        rnd(p + "mlp.fc1.bias", vf)
        rnd(p + "mlp.fc2.weight", vw, vf)
        rnd(p + "mlp.fc2.bias", vw)
    t[V_ + "post_layernorm.weight"] = np.ones(vw, np.float32)
    rnd(V_ + "post_layernorm.bias", vw)
    rnd("paligemma_with_expert.paligemma.model.multi_modal_projector.linear.weight", lw, vw)
    rnd("paligemma_with_expert.paligemma.model.multi_modal_projector.linear.bias", lw)
    kv = LM["num_kv_heads"] * LM["head_dim"]
    shapes = {"self_attn.q_proj": (LM["num_heads"] * LM["head_dim"], lw), "self_attn.k_proj": (kv, lw),
              "self_attn.v_proj": (kv, lw), "self_attn.o_proj": (lw, LM["num_heads"] * LM["head_dim"]),
              "mlp.gate_proj": (LM["mlp_dim"], lw), "mlp.up_proj": (LM["mlp_dim"], lw), "mlp.down_proj": (lw, LM["mlp_dim"]),
              "input_layernorm": (lw,), "post_attention_layernorm": (lw,)}
    for i in range(LM["depth"]):   # all zero: each layer adds nothing to the residual stream
        for n, shape in shapes.items():
            t[LM_ + f"layers.{i}.{n}.weight"] = np.zeros(shape, np.float32)
    t[LM_ + "embed_tokens.weight"], t[LM_ + "norm.weight"] = embedding(V, lw, chains)
    write_safetensors(os.path.join(directory, "model.safetensors"), t)
    cfg = {"model_type": "pi0_fast", "action_dim": A, "action_horizon": H, "max_token_len": L,
           "paligemma_variant": "gemma_2b", "precision": "float32", "vision": VISION, "paligemma": {**LM, "vocab_size": V}}
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def norm_stats(rng, ns, na):
    """Quantile and z-score stats of ns state and na action values (π0-FAST normalises with the quantiles)."""
    def block(n):
        mean = rng.standard_normal(n) * 0.5
        std = np.abs(rng.standard_normal(n) * 0.3 + 0.5) + 0.05
        q01 = mean - 2.0 * std - np.abs(rng.standard_normal(n)) * 0.1
        q99 = mean + 2.0 * std + np.abs(rng.standard_normal(n)) * 0.1
        return {"mean": mean.tolist(), "std": std.tolist(), "q01": q01.tolist(), "q99": q99.tolist()}
    return {"norm_stats": {"state": block(ns), "actions": block(na)}}


def write_norm_stats(directory, asset_id, stats):
    d = os.path.join(directory, "assets", asset_id)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "norm_stats.json"), "w") as f:
        json.dump(stats, f, indent=1)


def policy_dir(directory, V, chains, H, A, L, asset_id, ns, na, seed):
    """A whole π0-FAST policy checkpoint that writes chains (a list of ids alone: that chain after any prompt), with
    norm stats of ns / na values under assets/asset_id."""
    if chains and not isinstance(chains[0], tuple):
        chains = [(None, chains)]
    write_checkpoint(directory, V, chains, H, A, L, seed)
    write_norm_stats(directory, asset_id, norm_stats(np.random.default_rng(seed + 1), ns, na))


def droid_policy(directory, base_model, pi0_bin, seed=11):
    """A π0-FAST DROID policy of pi0_fast_droid's shape (H 10, A 8) in directory/ckpt, with directory/tok.model
    (base_model with PaliGemma's tail) and directory/fast (a FAST tokenizer without merges: coefficients -40..39 are
    one token each), for the tests of the Python package and the server. Two chains: after SHORT (or any prompt that
    ends with its own newline) the FAST tokens of chosen coefficients ("Action: ", the tokens, the end token, no "|");
    after LONG cut at CUT tokens, 100 byte pieces without "Action: " and no end (openpi's zero fallback; a batch
    holding both decodes on past the first chain's end). Encoding and the cut prompt's last token come from pi0_bin.
    Returns {"ckpt", "tok", "fast", "coef"}."""
    os.makedirs(directory, exist_ok=True)
    tok, fast, ck = (os.path.join(directory, n) for n in ("tok.model", "fast", "ckpt"))
    V = paligemma_like(base_model, tok, 128)
    write_byte_level_fast(fast, 10, -44)
    rng = np.random.default_rng(seed)
    coef = distinct_coefficients(rng, 10, 8, np.arange(-40, 40))

    def encode(text):
        out = subprocess.run([pi0_bin, "tokenize", "--tokenizer", tok, "--", text], capture_output=True, text=True,
                             check=True).stdout
        return [int(x) for x in out.split()]

    short = chain(encode, V, (coef.flatten() + 44).tolist(), bar=False)
    policy_dir(ck, V, short, 10, 8, 250, "droid", 8, 8, seed)
    obs, dump = os.path.join(directory, "cut.obs.safetensors"), os.path.join(directory, "cut.in.safetensors")
    write_safetensors(obs, {"observation/exterior_image_1_left": np.zeros((56, 56, 3), np.uint8),
                            "observation/wrist_image_left": np.zeros((56, 56, 3), np.uint8),
                            "observation/joint_position": np.zeros(7), "observation/gripper_position": np.zeros(1)})
    subprocess.run([pi0_bin, "run", "--checkpoint", ck, "--config", "pi0_fast_droid", "--tokenizer", tok,
                    "--fast-tokenizer", fast, "--max-token-len", str(CUT), "--obs", obs, "--prompt", LONG,
                    "--dump-inputs", dump], capture_output=True, check=True)
    last = int(read_safetensors(dump)["tokens"][0, CUT - 1])
    bytes_ = [4 + b for b in range(128, 228)]   # <0x80>..<0xE3> (ids 4..259 are the byte pieces): no "Action: "
    assert last not in short and last not in bytes_
    policy_dir(ck, V, [(None, short), (last, bytes_)], 10, 8, 250, "droid", 8, 8, seed)
    return {"ckpt": ck, "tok": tok, "fast": fast, "coef": coef}
