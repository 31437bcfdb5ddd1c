#!/usr/bin/python3
"""Generate the π0-FAST golden fixtures in tests/fixtures/tiny-pi0-fast/ with the float64 reference (pi0_fast_ref.py).

Writes one tiny random-weight pi0_fast checkpoint (config.json + model.safetensors, all BF16, PaliGemma tensors only,
under pi0_ref.py's names) and, per case, an inputs file and the reference's outputs (output_tokens, logit_margin,
prefill_logits; see tests/fixtures/tiny-pi0-fast/README.md). Two departures from make_fixtures.py's random init, both
needed for decoding to be worth checking: the LM final norm scale is N(-1, 1), so that 1 + w has random signs (with
1 + w near 1 the tied embedding makes a random model repeat its input token forever); embedding row 1 (the end token)
is EOS_ALPHA x row EOS_TWIN, so the model ends where it would have written EOS_TWIN (case b2-eos).
Each case's inputs come from the first seed at or after its base whose outputs have the property the case is
for (CASES below); everything is deterministic and two runs give byte-identical files (sha256 printed).
Usage: /usr/bin/python3 tools/reference/make_fast_fixtures.py [--out tests/fixtures/tiny-pi0-fast]
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
import make_fixtures as mf  # noqa: E402
import pi0_fast_ref as fr  # noqa: E402
import pi0_ref as ref  # noqa: E402

WEIGHT_SEED = 3000               # torch.Generator, tensors in sorted-name order
EOS_TWIN, EOS_ALPHA = 81, 1.05   # embedding row 1 := 1.05 x row 81 before the BF16 rounding
BOS = 2                          # PaliGemma's <bos>; prompt ids are drawn from [FIRST_ID, vocab)
FIRST_ID = 4                     # above <pad> 0, <eos> 1, <bos> 2, <unk> 3
MIN_MARGIN = 0.01                # every step's top-1 minus top-2 logit is at least this (float64)
STEPS = 16                       # max_decoding_steps of every case
MAX_TRIES = 200

CONFIG = {"model_type": "pi0_fast", "action_dim": 7, "action_horizon": 10, "max_token_len": 16,
          "paligemma_variant": "gemma_2b", "precision": "bfloat16",
          "vision": mf.TINY["vision"], "paligemma": mf.TINY["paligemma"]}

# name: (seed base, cameras per sample, valid prompt tokens per sample, causal tail length, what must hold)
CASES = {
    "b1": (3100, [[1, 1, 1]], [11], 0, "all steps run, no EOS"),
    "b1-masked": (3200, [[1, 1, 0]], [9], 0, "all steps run, no EOS; openpi's window changes the tokens"),
    "b2": (3300, [[1, 1, 1], [1, 0, 1]], [12, 7], 0,
           "all steps run, no EOS; the window changes sample 1's tokens; sample 0 is as with valid slots only"),
    "b1-ar": (3400, [[1, 1, 1]], [13], 3, "all steps run, no EOS; the causal tail changes the tokens"),
    "b2-eos": (3500, [[1, 1, 1], [1, 1, 1]], [10, 14], 0,
               "one sample writes EOS, goes on, and the loop stops when both write it at one step"),
}


def make_weights(cfg):
    shapes = fr.expected_tensors(cfg)
    g = torch.Generator().manual_seed(WEIGHT_SEED)
    w = {}
    for name in sorted(shapes):
        mean, std = mf.init_std(name, shapes[name])
        if name == ref.LM + ".norm.weight":
            mean, std = -1.0, 1.0
        w[name] = mean + std * torch.randn(shapes[name], generator=g, dtype=torch.float32)
    w[ref.EMBED][fr.EOS_TOKEN] = EOS_ALPHA * w[ref.EMBED][EOS_TWIN]
    return w


def make_inputs(cfg, case, seed):
    _, cams, nvalid, tail, _ = CASES[case]
    rs = np.random.RandomState(seed)
    R, L, vocab = cfg["vision"]["image_size"], cfg["max_token_len"], cfg["paligemma"]["vocab_size"]
    B = len(cams)
    images = rs.uniform(-1.0, 1.0, (B, 3, R, R, 3)).astype(np.float32)
    masks = np.array(cams, bool)
    if case == "b1-masked":
        images[0, 2] = -1.0                   # an openpi "zero image" (uint8 0 -> -1.0)
    tokens = np.zeros((B, L), np.int32)
    token_mask = np.zeros((B, L), bool)
    ar = np.zeros((B, L), np.int32)
    for b in range(B):
        n = nvalid[b]
        tokens[b, 0] = BOS
        tokens[b, 1:n] = rs.randint(FIRST_ID, vocab, n - 1)
        token_mask[b, :n] = True
        ar[b, n - tail:n] = 1
    return {"images": ("F32", images), "image_masks": ("BOOL", masks), "tokens": ("I32", tokens),
            "token_mask": ("BOOL", token_mask), "token_ar_mask": ("I32", ar)}


def eos_pattern(tokens, steps):
    """(first EOS step per row, stop step) if exactly one row wrote EOS earlier than the step where all rows do,
    that row wrote something else in between, and the loop stopped before the last step; else None."""
    t = tokens.numpy()
    stop = steps - 1
    if steps == t.shape[1] or not (t[:, stop] == fr.EOS_TOKEN).all():
        return None
    first = [int(np.argmax(row == fr.EOS_TOKEN)) for row in t]
    early = [b for b in range(len(first)) if first[b] < stop]
    if len(early) != 1 or (t[early[0], first[early[0]]:stop] == fr.EOS_TOKEN).all():
        return None
    return first, stop


def case_holds(model, case, inputs):
    """Does this case's property (CASES) hold for these inputs? -> (bool, float64 outputs)."""
    out = model.sample_tokens(inputs, STEPS)
    steps = out["steps"]
    if float(out["logit_margin"][:, :steps].min()) < MIN_MARGIN:
        return False, out
    if case == "b2-eos":
        return eos_pattern(out["output_tokens"], steps) is not None, out
    toks = out["output_tokens"]
    if steps != STEPS or bool((toks == fr.EOS_TOKEN).any()):
        return False, out
    if case == "b1-masked":
        return not torch.equal(model.sample_tokens(inputs, STEPS, window="valid")["output_tokens"], toks), out
    if case == "b2":
        alt = model.sample_tokens(inputs, STEPS, window="valid")["output_tokens"]
        return torch.equal(alt[0], toks[0]) and not torch.equal(alt[1], toks[1]), out
    if case == "b1-ar":
        flat = dict(inputs, token_ar_mask=np.zeros_like(inputs["token_ar_mask"]))
        return not torch.equal(model.sample_tokens(flat, STEPS)["output_tokens"], toks), out
    return True, out


def write_all(d):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(json.dumps(CONFIG, indent=2) + "\n")
    cfg = fr.make_fast_config(CONFIG)
    ref.write_safetensors(os.path.join(d, "model.safetensors"),
                          {k: ("BF16", v) for k, v in make_weights(cfg).items()})
    model = fr.Pi0FastReference(d)        # the reference reads the weights back from the written file
    chosen = {}
    for case, (base, *_rest) in CASES.items():
        for seed in range(base, base + MAX_TRIES):
            inputs = make_inputs(cfg, case, seed)
            ok, out = case_holds(model, case, {k: v for k, (_, v) in inputs.items()})
            if ok:
                break
        else:
            sys.exit(f"make_fast_fixtures: no seed in [{base}, {base + MAX_TRIES}) gives case {case}")
        chosen[case] = seed
        ref.write_safetensors(os.path.join(d, f"{case}.in.safetensors"), inputs)
        ref.write_safetensors(os.path.join(d, f"{case}.out.safetensors"), fr.output_tensors(out))
        margin = float(out["logit_margin"][:, :out["steps"]].min())
        print(f"{case:<10} seed {seed}  steps {out['steps']:2d}  min margin {margin:.4f}  tokens "
              + " | ".join(" ".join(str(int(t)) for t in row) for row in out["output_tokens"]))
    return chosen


def main():
    ap = argparse.ArgumentParser()
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "tiny-pi0-fast"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    write_all(a.out)
    total = 0
    for fn in sorted(os.listdir(a.out)):
        if fn == "README.md":
            continue
        with open(os.path.join(a.out, fn), "rb") as f:
            data = f.read()
        total += len(data)
        print(f"{hashlib.sha256(data).hexdigest()}  {len(data):8d}  {fn}")
    print(f"total {total} bytes, torch {torch.__version__}, numpy {np.__version__}")


if __name__ == "__main__":
    main()
