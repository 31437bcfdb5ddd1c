#!/usr/bin/python3
"""LeRobot policy directories against build/pi0: lerobot_check.py PI0_BINARY

Writes tiny π0 / π0.5 directories the way LeRobot's PI0Policy / PI05Policy.save_pretrained writes them, from the
tiny fixtures (written here from LeRobot's save code, not by LeRobot itself, which needs the gated PaliGemma
tokenizer and a full transformers stack): model.safetensors with every key under "model." (header metadata
{"format": "pt"}), the text embedding stored twice (embed_tokens, and the untied lm_head LeRobot also saves), the
orphan expert lm_head, and config.json with LeRobot's fields ("type", "chunk_size", "tokenizer_max_length",
"max_state_dim", "max_action_dim", "image_resolution", "n_action_steps", "input_features", ...) plus the engine's
explicit-dimension blocks (LeRobot's configs name only full-size variants). Checks:
- `pi0 info` says "lerobot" and takes horizon and prompt length from chunk_size / tokenizer_max_length;
- `pi0 convert` gives exactly the fixture's tensors (names, dtypes, bytes);
- `pi0 infer` gives the fixture's actions bit for bit; unprefixed hub-style keys (lm_head only) load the same;
- bad input: unknown type, options the engine does not implement, a key stored with and without the prefix, a
  type that contradicts the tensors; each a clear error naming the field or tensor.
Prints one line per check and "lerobot: N passed, M failed".
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")
PI0 = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "pi0")
EMBED = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
LM_HEAD = "paligemma_with_expert.paligemma.lm_head.weight"
counts = [0, 0]


def check(name, ok, detail=""):
    counts[0 if ok else 1] += 1
    print(f"{'PASS' if ok else 'FAIL'} {name}" + ("" if ok or not detail else f": {detail}"))


def read_st(path):
    """{name: (dtype string, shape, raw bytes)} and the __metadata__."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    h = json.loads(raw[8:8 + n])
    meta = h.pop("__metadata__", {})
    return {k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items()}, meta


def write_st(path, tensors, meta):
    header, off, blobs = {}, 0, []
    for k in sorted(tensors, key=lambda k: (-{"F32": 4, "BF16": 2}[tensors[k][0]], k)):   # as safetensors orders them
        dt, shape, b = tensors[k]
        header[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    header["__metadata__"] = meta
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))


def lerobot_dir(fixture, out, prefix=True, both_embeddings=True, **cfg_over):
    """A LeRobot save of the fixture's weights."""
    t, _ = read_st(os.path.join(FIX, fixture, "model.safetensors"))
    if EMBED not in t:
        t[EMBED] = t.pop(LM_HEAD)     # the fixture stores the tied embedding under lm_head
    if both_embeddings:
        t[LM_HEAD] = t[EMBED]         # LeRobot's lm_head is untied and saved beside embed_tokens
    else:
        t[LM_HEAD] = t.pop(EMBED)     # hub checkpoints converted from openpi: lm_head only
    t = {("model." + k if prefix else k): v for k, v in t.items()}
    os.makedirs(out)
    write_st(os.path.join(out, "model.safetensors"), t, {"format": "pt"})
    with open(os.path.join(FIX, fixture, "config.json")) as f:
        ours = json.load(f)
    pi05 = fixture.endswith("05")
    cfg = {"type": "pi05" if pi05 else "pi0", "n_obs_steps": 1,
           "input_features": {"observation.state": {"type": "STATE", "shape": [8]},
                              "observation.images.base_0_rgb": {"type": "VISUAL", "shape": [3, 56, 56]}},
           "output_features": {"action": {"type": "ACTION", "shape": [7]}},
           "device": "cpu", "use_amp": False, "use_peft": False, "paligemma_variant": "gemma_2b",
           "action_expert_variant": "gemma_300m", "dtype": "float32", "chunk_size": ours["action_horizon"],
           "n_action_steps": ours["action_horizon"], "max_state_dim": 32, "max_action_dim": 32,
           "num_inference_steps": 10, "use_relative_actions": False, "rtc_config": None,
           "image_resolution": [56, 56], "empty_cameras": 0, "tokenizer_max_length": ours["max_token_len"],
           "normalization_mapping": {"VISUAL": "IDENTITY", "STATE": "QUANTILES" if pi05 else "MEAN_STD",
                                     "ACTION": "QUANTILES" if pi05 else "MEAN_STD"}}
    for k in ("vision", "paligemma", "action_expert"):   # the engine's explicit dimensions (tiny models)
        cfg[k] = ours[k]
    cfg.update(cfg_over)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=4)
    return out


def pi0(*args):
    p = subprocess.run([PI0, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def actions(ckpt, fixture, out):
    rc, _, err = pi0("infer", "--checkpoint", ckpt, "--inputs", os.path.join(FIX, fixture, "b2.in.safetensors"),
                     "--output", out)
    return rc == 0 and read_st(out)[0]["actions"], err.strip()[-300:]


def main():
    tmp = tempfile.mkdtemp(prefix="pi0-lerobot-")
    try:
        for fixture in ("tiny-pi0", "tiny-pi05"):
            d = lerobot_dir(fixture, os.path.join(tmp, fixture))
            rc, out, err = pi0("info", "--checkpoint", d)
            L = "16" if fixture.endswith("05") else "12"
            check(f"{fixture}: info says lerobot, horizon 5 (chunk_size), prompt length {L} (tokenizer_max_length)",
                  rc == 0 and "format: lerobot" in out and "action_horizon: 5" in out and f"max_token_len: {L}" in out,
                  f"rc {rc} {out} {err}")
            conv = os.path.join(tmp, fixture + ".conv")
            rc, _, err = pi0("convert", "--checkpoint", d, "--out", conv)
            got = rc == 0 and read_st(os.path.join(conv, "model.safetensors"))[0]
            want, _ = read_st(os.path.join(FIX, fixture, "model.safetensors"))
            if EMBED not in want:
                want[EMBED] = want.pop(LM_HEAD)
            want.pop("paligemma_with_expert.gemma_expert.lm_head.weight", None)   # ignored by the engine
            got = {k: v for k, v in (got or {}).items() if k != "paligemma_with_expert.gemma_expert.lm_head.weight"}
            bad = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
            check(f"{fixture}: weights from the LeRobot dir == the fixture's (bit for bit)", rc == 0 and not bad,
                  f"rc {rc} {err[-200:]} differing {bad[:4]}")
            a, e1 = actions(d, fixture, os.path.join(tmp, fixture + ".a"))
            b, e2 = actions(os.path.join(FIX, fixture), fixture, os.path.join(tmp, fixture + ".b"))
            check(f"{fixture}: actions == the fixture's (bit for bit)", a and a == b, e1 + e2)
            hub = lerobot_dir(fixture, os.path.join(tmp, fixture + ".hub"), prefix=False, both_embeddings=False)
            c, e3 = actions(hub, fixture, os.path.join(tmp, fixture + ".c"))
            check(f"{fixture}: unprefixed keys, lm_head only (hub checkpoints) load the same", c and c == b, e3)
        base = lerobot_dir("tiny-pi0", os.path.join(tmp, "bad"))

        def bad(label, needles, **over):
            d = os.path.join(tmp, "bad-" + label.replace(" ", "-"))
            shutil.copytree(base, d)
            cfg = json.load(open(os.path.join(d, "config.json")))
            cfg.update(over)
            json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
            rc, _, err = pi0("info", "--checkpoint", d)
            check(f"bad input: {label}", rc == 1 and all(n in err for n in needles), f"rc {rc}: {err.strip()[-300:]}")
            return d

        bad("unknown type", ["type 'act'", "pi0 and pi05"], type="act")
        bad("relative actions", ["use_relative_actions: true is not supported"], use_relative_actions=True)
        bad("proprioceptive memory", ["use_proprioceptive_memory: true"], use_proprioceptive_memory=True)
        bad("PEFT adapters", ["use_peft: true"], use_peft=True)
        bad("real-time chunking", ["rtc_config"], rtc_config={"enabled": True, "execution_horizon": 10})
        bad("non-square images", ["image_resolution: expected [R, R]"], image_resolution=[56, 64])
        bad("state and action widths differ", ["max_state_dim 16 differs from max_action_dim 32"], max_state_dim=16)
        bad("pi05 type on pi0 weights", ['"type": "pi05"', "lacks the adaRMS tensor"], type="pi05")
        d = os.path.join(tmp, "bad-twice")
        shutil.copytree(base, d)
        t, meta = read_st(os.path.join(d, "model.safetensors"))
        t["action_in_proj.bias"] = t["model.action_in_proj.bias"]
        write_st(os.path.join(d, "model.safetensors"), t, meta)
        rc, _, err = pi0("info", "--checkpoint", d)
        check("bad input: a key with and without the model. prefix", rc == 1 and "'action_in_proj.bias' is stored twice" in err,
              f"rc {rc}: {err.strip()[-300:]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"lerobot: {counts[0]} passed, {counts[1]} failed")
    return 1 if counts[1] else 0


if __name__ == "__main__":
    sys.exit(main())
