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
REF = os.path.join(ROOT, "tools", "reference", "lerobot_ref.py")
EMBED = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
LM_HEAD = "paligemma_with_expert.paligemma.lm_head.weight"
counts = [0, 0]
SIZES = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "BF16": 2, "U8": 1}
DT = {np.dtype(np.float64): "F64", np.dtype(np.int64): "I64", np.dtype(np.float32): "F32", np.dtype(np.int32): "I32",
      np.dtype(np.uint8): "U8"}


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
    for k in sorted(tensors, key=lambda k: (-SIZES[tensors[k][0]], k)):   # as safetensors orders them
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
                              "observation.images.base_0_rgb": {"type": "VISUAL", "shape": [3, 56, 56]},
                              "observation.images.left_wrist_0_rgb": {"type": "VISUAL", "shape": [3, 56, 56]},
                              "observation.images.right_wrist_0_rgb": {"type": "VISUAL", "shape": [3, 56, 56]}},
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


def widen_actions(d, A):
    """A LeRobot directory's model made A action dims wide (zero weights for the new ones), config to match."""
    path = os.path.join(d, "model.safetensors")
    t, meta = read_st(path)

    def pad(key, axis):
        dt, shape, b = t["model." + key]
        a = np.frombuffer(b, np.uint16).reshape(shape)   # bf16 bits; zero is zero
        width = [(0, 0)] * len(shape)
        width[axis] = (0, A - shape[axis])
        a = np.pad(a, width)
        t["model." + key] = (dt, list(a.shape), a.tobytes())
    for key, axis in (("state_proj.weight", 1), ("action_in_proj.weight", 1), ("action_out_proj.weight", 0),
                      ("action_out_proj.bias", 0)):
        pad(key, axis)
    write_st(path, t, meta)
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg.update(max_action_dim=A, max_state_dim=A)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))


def pi0(*args):
    p = subprocess.run([PI0, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def actions(ckpt, fixture, out):
    rc, _, err = pi0("infer", "--checkpoint", ckpt, "--inputs", os.path.join(FIX, fixture, "b2.in.safetensors"),
                     "--output", out)
    return rc == 0 and read_st(out)[0]["actions"], err.strip()[-300:]


def np_st(path, arrays, meta=None):
    """numpy arrays -> safetensors"""
    write_st(path, {k: (DT[np.asarray(v).dtype], list(np.shape(v)), np.ascontiguousarray(v).tobytes())
                    for k, v in arrays.items()}, meta or {})


def stats_for(dim, rng, scale=1.0):
    """LeRobot's dataset stats of one feature (compute_stats keys), float32 as its normaliser saves them"""
    mean = rng.randn(dim) * scale
    std = np.abs(rng.randn(dim)) * scale + 0.2
    q = {f"q{p:02d}": mean + z * std for p, z in ((1, -2.3), (10, -1.3), (50, 0.0), (90, 1.3), (99, 2.3))}
    out = {"mean": mean, "std": std, "min": mean - 3 * std, "max": mean + 3 * std, **q}
    out = {k: v.astype(np.float32) for k, v in out.items()}
    out["count"] = np.array([1000], dtype=np.int64)
    return out


def write_processors(d, pi05, features, norm_map, stats, rename=None, L=12, drop=None):
    """policy_preprocessor.json / policy_postprocessor.json and the normaliser stats, as LeRobot's
    PolicyProcessorPipeline.save_pretrained writes them (processor_pi0.py / processor_pi05.py step orders, each step's
    get_config, state files named <pipeline>_step_<i>_<registry_name>.safetensors)."""
    norm_cfg = {"eps": 1e-08, "features": features, "norm_map": norm_map}
    tok = {"registry_name": "tokenizer_processor",
           "config": {"max_length": L, "task_key": "task", "padding_side": "right", "padding": "max_length",
                      "truncation": True, "tokenizer_name": "google/paligemma-3b-pt-224"}}
    rel = {"registry_name": "relative_actions_processor",
           "config": {"enabled": False, "exclude_joints": ["gripper"], "action_names": None}}
    dev = {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}}
    norm = {"registry_name": "normalizer_processor", "config": norm_cfg}
    steps = [{"registry_name": "rename_observations_processor", "config": {"rename_map": rename or {}}},
             {"registry_name": "to_batch_processor", "config": {}}]
    if pi05:
        steps += [rel, norm, {"registry_name": "pi05_prepare_state_tokenizer_processor_step", "config": {}}, tok, dev]
    else:
        steps += [{"registry_name": "pi0_new_line_processor", "config": {}}, tok, dev, rel, norm]
    flat = {f"{k}.{st}": v for k, sd in stats.items() for st, v in sd.items()}
    i = steps.index(norm)
    norm["state_file"] = f"policy_preprocessor_step_{i}_normalizer_processor.safetensors"
    np_st(os.path.join(d, norm["state_file"]), flat)
    json.dump({"name": "policy_preprocessor", "steps": steps}, open(os.path.join(d, "policy_preprocessor.json"), "w"), indent=2)
    post = [{"registry_name": "unnormalizer_processor", "config": dict(norm_cfg),
             "state_file": "policy_postprocessor_step_0_unnormalizer_processor.safetensors"},
            {"registry_name": "absolute_actions_processor", "config": {"enabled": False}}, dev]
    np_st(os.path.join(d, post[0]["state_file"]), flat)
    json.dump({"name": "policy_postprocessor", "steps": post}, open(os.path.join(d, "policy_postprocessor.json"), "w"), indent=2)


CAMS3 = ["observation.images.base_0_rgb", "observation.images.left_wrist_0_rgb", "observation.images.right_wrist_0_rgb"]


def policy_dir(tmp, name, fixture, cams, state_dim, action_dim, modes, rng, rename=None,
               n_action_steps=None, empty_cameras=0, no_stats=()):
    """A whole LeRobot policy directory: weights, config.json with these features, processor files and stats."""
    pi05 = fixture.endswith("05")
    feats = {k: {"type": "VISUAL", "shape": [3, 56, 56]} for k in cams}
    feats["observation.state"] = {"type": "STATE", "shape": [state_dim]}
    outf = {"action": {"type": "ACTION", "shape": [action_dim]}}
    over = {"input_features": feats, "output_features": outf, "empty_cameras": empty_cameras,
            "normalization_mapping": modes}
    if n_action_steps:
        over["n_action_steps"] = n_action_steps
    if pi05:
        over["tokenizer_max_length"] = 64   # room for "Task: ..., State: <bins>;\nAction: " (the tiny model's 16 is not)
    d = lerobot_dir(fixture, os.path.join(tmp, name), **over)
    stats = {"observation.state": stats_for(state_dim, rng), "action": stats_for(action_dim, rng, 0.7)}
    for k in cams:
        stats[k] = {s: v.reshape(3, 1, 1) if v.size == 3 else v for s, v in stats_for(3, rng, 0.1).items()}
    for k in no_stats:
        stats.pop(k)
    cfg = json.load(open(os.path.join(d, "config.json")))
    write_processors(d, pi05, {**feats, **outf}, modes, stats, rename, L=cfg["tokenizer_max_length"])
    return d


def image(rng, h, w, kind):
    """uint8 HWC / CHW, float32 CHW / HWC in [0, 1], float64 HWC"""
    u = rng.randint(0, 256, size=(h, w, 3)).astype(np.uint8)
    return {"u8": u, "u8chw": np.ascontiguousarray(u.transpose(2, 0, 1)),
            "f32chw": np.ascontiguousarray((u.transpose(2, 0, 1) / 255.0).astype(np.float32) * 0.9 + 0.05),
            "f32": (u / 255.0).astype(np.float32), "f64": u / 255.0}[kind]


def run_pair(tmp, name, d, tok, obs, task, noise, extra=()):
    """pi0 run and the reference on the same directory and observation: (rc_c, json_c, dump_c, err_c, rc_r, ...)"""
    op = os.path.join(tmp, name + ".obs.safetensors")
    np_st(op, obs)
    common = ["--checkpoint", d, "--tokenizer", tok, "--obs", op, "--noise", noise, *extra]
    oc, dc = os.path.join(tmp, name + ".c.json"), os.path.join(tmp, name + ".c.in")
    p = subprocess.run([PI0, "run", *common, *(["--prompt", task] if task is not None else []), "--json",
                        "--dump-inputs", dc], capture_output=True, text=True, timeout=300)
    if p.returncode == 0:
        open(oc, "w").write(p.stdout)
    orf, dr = os.path.join(tmp, name + ".r.json"), os.path.join(tmp, name + ".r.in")
    r = subprocess.run([sys.executable, REF, *common, *(["--task", task] if task is not None else []), "--out", orf,
                        "--dump-inputs", dr], capture_output=True, text=True, timeout=600)
    return p, r, (oc, dc), (orf, dr)


def compare(name, p, r, c_files, r_files):
    if p.returncode or r.returncode:
        check(f"{name}: both sides run", False, f"C rc {p.returncode} {p.stderr.strip()[-300:]} | ref rc {r.returncode} "
              f"{r.stderr.strip()[-300:]}")
        return
    ci, _ = read_st(c_files[1])
    ri, _ = read_st(r_files[1])
    keys = ("images", "image_masks", "state", "tokens", "token_mask", "noise")
    diff = [k for k in keys if ci.get(k) != ri.get(k)]
    check(f"{name}: model inputs bit-exact ({', '.join(keys)})", not diff, f"differ: {diff}")
    a = np.array(json.load(open(c_files[0]))["actions"])
    b = np.array(json.load(open(r_files[0]))["actions"])
    rel = float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)) if a.shape == b.shape else float("inf")
    check(f"{name}: actions {list(b.shape)} rel L2 {rel:.1e} <= 1e-5", rel <= 1e-5, f"shapes {a.shape} {b.shape}")


def e2e(tmp):
    rng = np.random.RandomState(5)
    tok = os.path.join(tmp, "tok.model")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "make_tokenizer.py"), tok], check=True,
                   capture_output=True)
    noise = os.path.join(tmp, "noise.safetensors")
    np_st(noise, {"noise": rng.randn(5, 32).astype(np.float32)})
    MS = {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
    Q = {"VISUAL": "IDENTITY", "STATE": "QUANTILES", "ACTION": "QUANTILES"}
    cases = []
    # π0, LeRobot's defaults: MEAN_STD, three cameras, uint8 HWC at the model size and one resized, one camera absent
    d = policy_dir(tmp, "p0-meanstd", "tiny-pi0", CAMS3, 8, 7, MS, rng)
    cases.append(("pi0 MEAN_STD, uint8 HWC, a camera resized (80x60), one absent", d,
                  {CAMS3[0]: image(rng, 56, 56, "u8"), CAMS3[2]: image(rng, 60, 80, "u8"),
                   "observation.state": rng.randn(8).astype(np.float32)}, "pick up the red block"))
    # π0 MIN_MAX with a float64 state, float CHW images, nested keys ('/'), a renamed camera, a shorter n_action_steps
    d = policy_dir(tmp, "p0-minmax", "tiny-pi0", CAMS3, 6, 6, {"VISUAL": "IDENTITY", "STATE": "MIN_MAX", "ACTION": "MIN_MAX"},
                   rng, rename={"observation.images.top": CAMS3[0]}, n_action_steps=3)
    cases.append(("pi0 MIN_MAX, float64 state, float32 CHW, renamed + nested keys, n_action_steps 3", d,
                  {"observation.images.top": image(rng, 37, 51, "f32chw"), "observation/images/left_wrist_0_rgb":
                   image(rng, 56, 56, "f32chw"), CAMS3[2]: image(rng, 90, 31, "u8chw"),
                   "observation/state": rng.randn(6) * 2}, "open the drawer\n"))
    # π0.5 QUANTILES (state in the prompt), two cameras + an empty camera, odd sizes, float HWC
    d = policy_dir(tmp, "p05-q", "tiny-pi05", CAMS3[:2], 8, 7, Q, rng, empty_cameras=1)
    cases.append(("pi05 QUANTILES, 2 cameras + empty_cameras 1, float32 / float64 HWC resized", d,
                  {CAMS3[0]: image(rng, 41, 57, "f32"), CAMS3[1]: image(rng, 77, 29, "f64"),
                   "observation.state": (rng.randn(8) * 0.8).astype(np.float32)}, " Put_the cup\non the plate "))
    # π0.5 QUANTILE10, VISUAL MEAN_STD with stats, action IDENTITY, a state feature without stats
    d = policy_dir(tmp, "p05-q10", "tiny-pi05", CAMS3, 5, 4, {"VISUAL": "IDENTITY", "STATE": "QUANTILE10",
                                                                "ACTION": "IDENTITY"}, rng)
    cases.append(("pi05 QUANTILE10 state, IDENTITY actions, float64 state, uint8 resized", d,
                  {CAMS3[0]: image(rng, 56, 56, "u8"), CAMS3[1]: image(rng, 64, 64, "u8"), CAMS3[2]: image(rng, 20, 56, "u8"),
                   "observation.state": rng.randn(5)}, "stack blocks"))
    d = policy_dir(tmp, "p0-nostats", "tiny-pi0", CAMS3[:1], 8, 7, MS, rng, no_stats=("observation.state",))
    cases.append(("pi0 a state without stats (passed through), one camera, int32 state", d,
                  {CAMS3[0]: image(rng, 56, 56, "u8"), "observation.state": np.arange(8, dtype=np.int32) - 3},
                  "wipe table"))
    for i, (name, d, obs, task) in enumerate(cases):
        p, r, cf, rf = run_pair(tmp, f"case{i}", d, tok, obs, task, noise)
        compare(name, p, r, cf, rf)
    # a guided rtc_config: accepted, its values become the real-time chunking defaults
    cfgp = os.path.join(tmp, "p05-q", "config.json")
    cfg = json.load(open(cfgp))
    cfg["rtc_config"] = {"enabled": True, "mode": "guided", "prefix_attention_schedule": "EXP", "max_guidance_weight": 5.0,
                         "execution_horizon": 4, "debug": False, "debug_maxlen": 100}
    json.dump(cfg, open(cfgp, "w"))
    rc, out, err = pi0("info", "--checkpoint", os.path.join(tmp, "p05-q"))
    check("info: a guided rtc_config is accepted and gives the RTC defaults",
          rc == 0 and "execution_horizon 4, EXP, max_guidance_weight 5" in out, out[-400:] + err)
    # info names the features, modes and prompt
    rc, out, err = pi0("info", "--checkpoint", os.path.join(tmp, "p05-q"))
    check("info: cameras, empty camera, state QUANTILES in the prompt, action",
          rc == 0 and "observation.images.empty_camera_0" in out and "QUANTILES (q01, q99)" in out and
          "discretised into the prompt" in out and "action [7]" in out, out[-600:] + err)
    return tok, noise, cases


def errors(tmp, tok, noise, cases):
    base = cases[0][1]
    good = cases[0][2]
    rng = np.random.RandomState(9)

    def both_fail(label, d, obs, needles, task="pick", ref_too=True):
        p, r, _, _ = run_pair(tmp, "err", d, tok, obs, task, noise)
        ok = p.returncode == 1 and all(n in p.stderr for n in needles) and (r.returncode == 1 or not ref_too)
        check(f"bad input: {label}", ok, f"C rc {p.returncode} {p.stderr.strip()[-300:]} | ref rc {r.returncode} "
              f"{r.stderr.strip()[-200:]}")

    def variant(label, edit):
        d = os.path.join(tmp, "bad-" + label.replace(" ", "-").replace("/", ""))
        shutil.copytree(base, d)
        edit(d)
        return d

    d = variant("no preprocessor", lambda d: os.remove(os.path.join(d, "policy_preprocessor.json")))
    both_fail("no policy_preprocessor.json", d, good, ["policy_preprocessor.json"])
    stats = "policy_preprocessor_step_6_normalizer_processor.safetensors"
    d = variant("no stats file", lambda d: os.remove(os.path.join(d, stats)))
    both_fail("a missing stats file", d, good, [stats, "does not exist"])

    def drop_std(d):
        t, m = read_st(os.path.join(d, stats))
        t.pop("observation.state.std")
        write_st(os.path.join(d, stats), t, m)
    both_fail("a missing stat (std for MEAN_STD)", variant("no std", drop_std), good, ["observation.state.std", stats])

    def wide_mean(d):
        t, m = read_st(os.path.join(d, stats))
        t["observation.state.mean"] = ("F32", [9], np.zeros(9, np.float32).tobytes())
        write_st(os.path.join(d, stats), t, m)
    both_fail("stats shape contradicting the feature (9 vs 8)", variant("wide mean", wide_mean), good,
              ["observation.state.mean", "(9,) F32", "8 values"])

    def unknown_step(d):
        j = json.load(open(os.path.join(d, "policy_preprocessor.json")))
        j["steps"].insert(2, {"registry_name": "image_crop_resize_processor", "config": {}})
        json.dump(j, open(os.path.join(d, "policy_preprocessor.json"), "w"))
    both_fail("an unsupported processor step", variant("step", unknown_step), good, ["image_crop_resize_processor"])
    both_fail("no observation.state", base, {k: v for k, v in good.items() if k != "observation.state"},
              ["observation.state"])
    both_fail("no camera at all", base, {"observation.state": good["observation.state"]}, ["at least one"])
    both_fail("an observation key the checkpoint does not know", base,
              {**good, "observation.images.wrist": image(rng, 56, 56, "u8")}, ["'observation.images.wrist'"])
    d = policy_dir(tmp, "bad-visual", "tiny-pi0", CAMS3, 8, 7, {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD",
                                                                 "ACTION": "MEAN_STD"}, rng)
    # the engine's decision (the reference restates LeRobot, which would run it): SigLIP's input range is [-1, 1]
    both_fail("normalised camera images (VISUAL MEAN_STD with stats) refused", d, good,
              ["norm_map.VISUAL MEAN_STD", CAMS3[0]], ref_too=False)
    both_fail("a state of the wrong length", base, {**good, "observation.state": np.zeros(9, np.float32)},
              ["expected 8 state values, found 9"])
    # a state of three dimensions is refused by its shape, before its sizes are multiplied (the server's decoder
    # passes an empty array of any sizes; its test has 2^31 x 2^32 x 0)
    both_fail("a state of shape (1, 1, 8)", base, {**good, "observation.state": np.zeros((1, 1, 8), np.float32)},
              ["expected 8 state values as (8) or (1, 8), found a 3-dimensional array"], ref_too=False)
    op = os.path.join(tmp, "wide.obs.safetensors")
    np_st(op, good)
    # more action dims than the policy's buffers (the model itself would take them): refused when the policy loads
    d = variant("wide actions", lambda d: widen_actions(d, 40))
    p = subprocess.run([PI0, "run", "--checkpoint", d, "--tokenizer", tok, "--obs", op, "--noise", noise, "--prompt",
                        "pick"], capture_output=True, text=True, timeout=120)
    check("bad input: max_action_dim 40 (the policy takes 32)", p.returncode == 1 and
          "max_action_dim 40: the policy supports at most 32" in p.stderr, p.stderr.strip()[-300:])
    p = subprocess.run([PI0, "run", "--checkpoint", base, "--tokenizer", tok, "--robot", "libero", "--state", "1"],
                       capture_output=True, text=True, timeout=120)
    check("bad input: --robot on a LeRobot directory", p.returncode == 1 and "LeRobot policy" in p.stderr,
          p.stderr.strip()[-300:])

    # a normaliser config of the wrong type was once read as IDENTITY: exit 0 with actions in model space
    def edit_json(name, fn):
        def edit(d):
            path = os.path.join(d, name)
            j = json.load(open(path))
            fn(next(st for st in j["steps"] if st["registry_name"] in ("normalizer_processor", "unnormalizer_processor")))
            json.dump(j, open(path, "w"))
        return edit
    pre, post = "policy_preprocessor.json", "policy_postprocessor.json"
    d = variant("norm_map a string", edit_json(pre, lambda st: st["config"].__setitem__("norm_map", "MEAN_STD")))
    both_fail("norm_map a string", d, good, [pre, "step 6: config.norm_map: expected an object", "found a string"],
              ref_too=False)
    rc, out, err = pi0("info", "--checkpoint", d)
    check("bad input: pi0 info exits 1 when the pipeline cannot be used, and says the model alone can run",
          rc == 1 and "config.norm_map" in err and "the model alone runs" in out, f"rc {rc}: {err.strip()[-300:]}")
    both_fail("an unnormalizer config that is a number", variant("config a number", edit_json(
        post, lambda st: st.__setitem__("config", 5))), good, [post, 'step 0: "config": expected an object, found a number'],
        ref_too=False)
    both_fail("eps a string", variant("eps a string", edit_json(pre, lambda st: st["config"].__setitem__("eps", "1e-8"))),
              good, [pre, "config.eps: expected a finite number"], ref_too=False)
    # a processor file that is there but malformed: its own parse error, not "needs policy_preprocessor.json"
    for label, text, needle in (("invalid JSON", '{"steps": [', "line 1, column"), ("a list", "[1, 2]", "expected a JSON object"),
                                ("a NUL escape", '{"name": "a\\u0000b", "steps": []}', "\\u0000 is not allowed"),
                                ("over 16 MiB", "{" + " " * (16 << 20) + "}", "larger than")):
        d = variant("pre " + label, lambda d, t=text: open(os.path.join(d, pre), "w").write(t))
        p = subprocess.run([PI0, "info", "--checkpoint", d], capture_output=True, text=True, timeout=120)
        check(f"bad input: policy_preprocessor.json {label} is reported as such", p.returncode == 1 and needle in p.stderr
              and pre in p.stderr and "needs policy_preprocessor.json" not in p.stderr, p.stderr.strip()[-300:])
    # finite stats whose unnormalised actions overflow float32: an error naming the stats file, never inf in the JSON
    def huge_actions(d):
        f = os.path.join(d, "policy_postprocessor_step_0_unnormalizer_processor.safetensors")
        t, m = read_st(f)
        for k in ("action.mean", "action.std"):
            t[k] = ("F32", t[k][1], np.full(t[k][1], 3e38, np.float32).tobytes())
        write_st(f, t, m)
    both_fail("action stats that overflow float32 (mean and std 3e38)", variant("huge action stats", huge_actions), good,
              ["policy_postprocessor_step_0_unnormalizer_processor.safetensors", "too large for float32"], ref_too=False)
    # camera keys holding '"', '\\' and a newline: the metadata the server sends is still JSON, with the keys intact
    cams = ['observation.images.a"b', 'observation.images.c\\d', "observation.images.e\nf"]
    d = policy_dir(tmp, "odd-cams", "tiny-pi0", cams, 8, 7, {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}, rng)
    rc, out, err = pi0("info", "--checkpoint", d)
    line = next((ln for ln in out.splitlines() if ln.startswith("  metadata sent to clients: ")), "")
    try:
        meta = json.loads(line.split(": ", 1)[1])
    except (ValueError, IndexError):
        meta = None
    check("camera keys with a quote, a backslash and a newline: the metadata is JSON with the keys intact",
          rc == 0 and meta is not None and meta["lerobot"]["cameras"] == cams and set(meta) == {"lerobot"},
          f"rc {rc}: {line[:300]} {err.strip()[-200:]}")


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
            a, e1 = actions(conv, fixture, os.path.join(tmp, fixture + ".a"))
            b, e2 = actions(os.path.join(FIX, fixture), fixture, os.path.join(tmp, fixture + ".b"))
            check(f"{fixture}: actions of the converted dir == the fixture's (bit for bit)", a and a == b, e1 + e2)
            # the LeRobot directory itself denoises at LeRobot's times (1 - k/10 in double): close, not equal
            c, e3 = actions(d, fixture, os.path.join(tmp, fixture + ".c"))
            rel = c and np.linalg.norm(np.frombuffer(c[2], np.float32) - np.frombuffer(b[2], np.float32)) / \
                np.linalg.norm(np.frombuffer(b[2], np.float32))
            check(f"{fixture}: the LeRobot dir's actions (LeRobot's time schedule) within 1e-3 of openpi's, not equal "
                  f"(rel L2 {rel or 0:.1e})", c and 0 < rel < 1e-3, e3)
            hub = lerobot_dir(fixture, os.path.join(tmp, fixture + ".hub"), prefix=False, both_embeddings=False)
            h, e4 = actions(hub, fixture, os.path.join(tmp, fixture + ".h"))
            check(f"{fixture}: unprefixed keys, lm_head only (hub checkpoints) load the same", h and h == c, e4)
        base = lerobot_dir("tiny-pi0", os.path.join(tmp, "bad"))

        def bad(label, needles, drop=(), **over):
            d = os.path.join(tmp, "bad-" + label.replace(" ", "-"))
            shutil.copytree(base, d)
            cfg = json.load(open(os.path.join(d, "config.json")))
            cfg.update(over)
            for k in drop:
                cfg.pop(k)
            json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
            rc, _, err = pi0("info", "--checkpoint", d)
            check(f"bad input: {label}", rc == 1 and all(n in err for n in needles), f"rc {rc}: {err.strip()[-300:]}")
            return d

        bad("unknown type", ["type 'act'", "pi0 and pi05"], type="act")
        bad("relative actions", ["use_relative_actions: true is not supported"], use_relative_actions=True)
        bad("proprioceptive memory", ["use_proprioceptive_memory: true"], use_proprioceptive_memory=True)
        bad("PEFT adapters", ["use_peft: true"], use_peft=True)
        bad("RTC-trained checkpoint", ["rtc_config.mode 'trained'"], rtc_config={"enabled": True, "mode": "trained"})
        bad("non-square images", ["image_resolution: expected [R, R]"], image_resolution=[56, 64])
        bad("state and action widths differ", ["max_state_dim 16 differs from max_action_dim 32"], max_state_dim=16)
        bad("pi05 type on pi0 weights", ['"type": "pi05"', "lacks the adaRMS tensor"], type="pi05")
        # no VISUAL feature named and no empty cameras: no cameras (once an internal assertion, an abort)
        bad("no input_features", ["0 cameras", "1 to 16 are supported"], drop=("input_features",))
        d = os.path.join(tmp, "bad-twice")
        shutil.copytree(base, d)
        t, meta = read_st(os.path.join(d, "model.safetensors"))
        t["action_in_proj.bias"] = t["model.action_in_proj.bias"]
        write_st(os.path.join(d, "model.safetensors"), t, meta)
        rc, _, err = pi0("info", "--checkpoint", d)
        check("bad input: a key with and without the model. prefix", rc == 1 and "'action_in_proj.bias' is stored twice" in err,
              f"rc {rc}: {err.strip()[-300:]}")
        errors(tmp, *e2e(tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"lerobot: {counts[0]} passed, {counts[1]} failed")
    return 1 if counts[1] else 0


if __name__ == "__main__":
    sys.exit(main())
