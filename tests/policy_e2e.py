#!/usr/bin/python3
"""End-to-end check of the whole served policy: `PI0_BINARY run ... --json --dump-inputs F` against the
independent reference tools/reference/policy_ref.py run on the same arguments (openpi's pipeline restated
in numpy + the float64 PyTorch model reference).

Usage: /usr/bin/python3 tests/policy_e2e.py PI0_BINARY

Setup (all seeded, in a temporary directory): the tiny checkpoints tests/fixtures/tiny-pi0 (pi0, BF16) and
tiny-pi05 (pi0.5, F32) copied with fresh assets/<asset_id>/norm_stats.json for each robot's dimensions
(LIBERO state 8 / actions 7, DROID 8 / 8, ALOHA 14 / 14; mean, std, q01, q99), a tokenizer trained by
tests/make_tokenizer.py, PNG and JPEG images of several sizes, noise files.

Per case: the model inputs dumped by both sides (images, image_masks, state as float32, tokens, token_mask,
noise) must be BIT-EXACT; the action chunks must agree to a relative L2 error <= 1e-5 (the C model computes
in fp32, the reference in float64, so the actions cannot be bit-exact). Error cases: both sides must fail,
the C binary with exit status 1 (not a crash, not > 1) and a message on stderr (naming the prompt or the key
where the case says so).
Prints one line per check and finally `policy_e2e: N passed, M failed`; exit status 1 on any failure.
"""
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
import policy_ref  # noqa: E402
from pi0_ref import read_safetensors, write_safetensors  # noqa: E402

ACTION_TOL = 1e-5
DUMP_NAMES = ("images", "image_masks", "state", "tokens", "token_mask", "noise")
ROBOT_DIMS = {"libero": (8, 7), "droid": (8, 8), "aloha": (14, 14)}
ASSETS = {"physical-intelligence/libero": "libero", "droid": "droid", "trossen": "aloha",
          "lerobot/aloha_sim_transfer_cube_human": "aloha"}


# --------------------------------------------------------------------------------------------------
# Setup
# --------------------------------------------------------------------------------------------------

def norm_stats(rng, ns, na):
    def block(n):
        mean = rng.randn(n) * 0.5
        std = np.abs(rng.randn(n) * 0.3 + 0.5) + 0.05
        q01 = mean - 2.0 * std - np.abs(rng.randn(n)) * 0.1
        q99 = mean + 2.0 * std + np.abs(rng.randn(n)) * 0.1
        return {"mean": mean.tolist(), "std": std.tolist(), "q01": q01.tolist(), "q99": q99.tolist()}
    return {"norm_stats": {"state": block(ns), "actions": block(na)}}


def write_stats(ckpt, asset_id, stats):
    d = os.path.join(ckpt, "assets", asset_id)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "norm_stats.json"), "w") as f:
        json.dump(stats, f, indent=1)


def make_checkpoint(tmp, name, src, assets):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(ROOT, "tests", "fixtures", src, f), d)
    for asset_id, stats in assets.items():
        write_stats(d, asset_id, stats)
    return d


def make_image(rng, h, w, kind):
    y, x = np.mgrid[0:h, 0:w]
    if kind == "noise":
        img = rng.randint(0, 256, size=(h, w, 3))
    else:   # gradients with some texture, so downscaling differences are visible
        img = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)),
                        ((x + y) * 7 + rng.randint(0, 40, size=(h, w))) % 256], axis=-1)
    return img.astype(np.uint8)


def setup(tmp):
    rng = np.random.RandomState(1234)
    files = {}
    files["tok"] = os.path.join(tmp, "tok.model")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "make_tokenizer.py"), files["tok"]], check=True)
    stats = {a: norm_stats(rng, *ROBOT_DIMS[r]) for a, r in ASSETS.items()}
    files["pi0"] = make_checkpoint(tmp, "pi0", "tiny-pi0", stats)
    files["pi05"] = make_checkpoint(tmp, "pi05", "tiny-pi05", stats)
    # one asset only, id with a '/', for --robot without --asset-id
    files["pi0_single"] = make_checkpoint(tmp, "pi0_single", "tiny-pi0", {"my-lab/libero_v2": stats["physical-intelligence/libero"]})
    # 32-dim stats (openpi stores some padded to the model's action dim): Normalize slices them to the state
    files["pi05_stats32"] = make_checkpoint(tmp, "pi05_stats32", "tiny-pi05", {"droid": norm_stats(rng, 32, 32)})
    files["pi0_stats32"] = make_checkpoint(tmp, "pi0_stats32", "tiny-pi0",
                                           {"physical-intelligence/libero": norm_stats(rng, 32, 32)})
    files["pi05_single"] = make_checkpoint(tmp, "pi05_single", "tiny-pi05", {"my-lab/droid": stats["droid"]})
    # images
    specs = {"png224": (224, 224, "grad", "png"), "jpg480x640": (480, 640, "grad", "jpg"),
             "jpg256": (256, 256, "noise", "jpg"), "png37x53": (37, 53, "noise", "png"),
             "png640x480": (640, 480, "grad", "png"), "jpg101x67": (101, 67, "grad", "jpg"),
             "png56": (56, 56, "noise", "png"), "jpg224": (224, 224, "grad", "jpg"),
             "png300x200": (300, 200, "noise", "png")}
    for name, (h, w, kind, fmt) in specs.items():
        p = os.path.join(tmp, f"{name}.{fmt}")
        img = Image.fromarray(make_image(rng, h, w, kind))
        if fmt == "jpg":   # one progressive (the decoder limits its scans to 500; this one has ten)
            img.save(p, quality=90, progressive=name == "jpg101x67")
        else:
            img.save(p)
        files[name] = p
    g = Image.fromarray(make_image(rng, 120, 90, "grad")[:, :, 0])          # grayscale PNG (mode L)
    files["png_gray"] = os.path.join(tmp, "gray.png")
    g.save(files["png_gray"])
    rgba = np.concatenate([make_image(rng, 64, 80, "noise"), rng.randint(0, 256, (64, 80, 1)).astype(np.uint8)], -1)
    files["png_rgba"] = os.path.join(tmp, "rgba.png")
    Image.fromarray(rgba, "RGBA").save(files["png_rgba"])
    pal = Image.fromarray(make_image(rng, 70, 110, "grad")).convert("P", palette=Image.ADAPTIVE, colors=40)
    files["png_palette"] = os.path.join(tmp, "palette.png")
    pal.save(files["png_palette"])
    files["jpg_gray"] = os.path.join(tmp, "gray.jpg")
    Image.fromarray(make_image(rng, 80, 100, "grad")[:, :, 1]).save(files["jpg_gray"], quality=85)
    # noise (horizon 5 in both tiny models)
    nz = np.random.RandomState(99).randn(5, 32).astype(np.float32)
    files["noise"] = os.path.join(tmp, "noise.safetensors")
    write_safetensors(files["noise"], {"noise": ("F32", nz)})
    files["noise_bad"] = os.path.join(tmp, "noise_bad.safetensors")
    write_safetensors(files["noise_bad"], {"noise": ("F32", nz[:4])})
    files["noise3"] = os.path.join(tmp, "noise3.safetensors")
    write_safetensors(files["noise3"], {"noise": ("F32", nz[None] * 0.5)})
    # observation files (--obs)
    def obs(name, tensors):
        p = os.path.join(tmp, f"obs_{name}.safetensors")
        write_safetensors(p, tensors)
        files["obs_" + name] = p
    k = np.arange(256, dtype=np.float64) / 255.0            # exact k/255 values: truncation edge cases
    f32_img = np.resize(k, 48 * 64 * 3).reshape(48, 64, 3).astype(np.float32)
    f64_chw = np.resize(k[::-1], 3 * 70 * 50).reshape(3, 70, 50)
    obs("libero_float", {"observation/image": ("F32", f32_img), "observation/wrist_image": ("F64", f64_chw),
                         "observation/state": ("F32", (rng.randn(8) * 0.7).astype(np.float32))})
    obs("libero_chw", {"observation/image": ("U8", make_image(rng, 90, 120, "grad").transpose(2, 0, 1).copy()),
                       "observation/wrist_image": ("U8", make_image(rng, 56, 56, "noise").transpose(2, 0, 1).copy())})
    obs("droid_0d", {"observation/joint_position": ("F32", (rng.randn(7) * 0.5).astype(np.float32)),
                     "observation/gripper_position": ("F64", np.array(0.3125))})
    obs("droid_gripper_only", {"observation/gripper_position": ("F64", np.array([0.5]))})
    obs("aloha_float", {"images/cam_high": ("F32", (rng.rand(3, 60, 80)).astype(np.float32)),
                        "images/cam_left_wrist": ("F64", rng.rand(3, 56, 56)),
                        "state": ("F32", np.concatenate([rng.randn(6) * 0.3, [0.6], rng.randn(6) * 0.3, [0.2]]).astype(np.float32))})
    obs("libero_i64_state", {"observation/state": ("I64", np.arange(8, dtype=np.int64) - 3)})
    obs("libero_thin", {"observation/image": ("U8", make_image(rng, 4, 300, "noise"))})
    obs("aloha_badcam", {"images/cam_top": ("U8", make_image(rng, 56, 56, "noise").transpose(2, 0, 1).copy())})
    obs("libero_rgba", {"observation/image": ("U8", rgba)})
    obs("libero_nowrist", {"observation/image": ("U8", make_image(rng, 64, 64, "noise"))})
    return files, rng


def state_str(vals):
    return ",".join(repr(float(v)) for v in vals)


def cases(f, rng):
    """[(name, argv, expect)] with expect None (success) or ("fail", substring or None)."""
    libero_state = state_str(rng.randn(8) * 0.8)
    libero_state_far = state_str(rng.randn(8) * 3.0)            # quantile-normalised well outside [-1, 1]
    droid_state = state_str(np.concatenate([rng.randn(7) * 0.6, [0.7]]))
    aloha_state = state_str(np.concatenate([rng.randn(6) * 0.4, [0.35], rng.randn(6) * 0.4, [0.9]]))
    tok, nz = f["tok"], f["noise"]

    def base(ckpt, *rest, noise=nz, max_len=None):
        ml = max_len if max_len is not None else ("96" if "pi05" in os.path.basename(ckpt) else "48")
        return ["--checkpoint", ckpt, "--tokenizer", tok, "--noise", noise, "--max-token-len", ml, *rest]

    lib_imgs = ["--image", "observation/image=" + f["png224"], "--image", "observation/wrist_image=" + f["jpg480x640"]]
    lib_imgs2 = ["--image", "observation/image=" + f["jpg256"], "--image", "observation/wrist_image=" + f["png37x53"]]
    droid_imgs = ["--image", "observation/exterior_image_1_left=" + f["png640x480"],
                  "--image", "observation/wrist_image_left=" + f["jpg101x67"]]
    aloha_all = ["--image", "images/cam_high=" + f["jpg480x640"], "--image", "images/cam_low=" + f["png224"],
                 "--image", "images/cam_left_wrist=" + f["png56"], "--image", "images/cam_right_wrist=" + f["jpg256"]]
    aloha_no_right = ["--image", "images/cam_high=" + f["png300x200"], "--image", "images/cam_left_wrist=" + f["jpg224"]]
    p0, p5 = f["pi0"], f["pi05"]
    ok = None
    C = [
        # ---- LIBERO ----
        ("libero pi0_libero (delta on) png224 + jpg480x640", base(p0, "--config", "pi0_libero", *lib_imgs,
         "--state", libero_state, "--prompt", "pick up the red block and place it in the top drawer"), ok),
        ("libero pi05_libero (no delta, no discrete state)", base(p5, "--config", "pi05_libero", *lib_imgs2,
         "--state", libero_state, "--prompt", "open the top drawer"), ok),
        ("libero --robot pi0 (delta on by default)", base(p0, "--robot", "libero", "--asset-id",
         "physical-intelligence/libero", *lib_imgs2, "--state", libero_state, "--prompt", "put the cube on the plate"), ok),
        ("libero --robot pi0 --delta-actions off", base(p0, "--robot", "libero", "--asset-id",
         "physical-intelligence/libero", *lib_imgs2, "--state", libero_state, "--prompt", "put the cube on the plate",
         "--delta-actions", "off"), ok),
        ("libero --robot pi05 (discrete state, delta off)", base(p5, "--robot", "libero", "--asset-id",
         "physical-intelligence/libero", *lib_imgs, "--state", libero_state_far, "--prompt", "stack blocks"), ok),
        ("libero --robot pi05 --delta-actions on", base(p5, "--robot", "libero", "--asset-id",
         "physical-intelligence/libero", *lib_imgs, "--state", libero_state, "--prompt", "stack blocks",
         "--delta-actions", "on"), ok),
        ("libero float F32 HWC + F64 CHW images, F32 state (--obs)", base(p0, "--config", "pi0_libero", "--obs",
         f["obs_libero_float"], "--prompt", "wipe the table"), ok),
        ("libero float images pi05 (--obs)", base(p5, "--config", "pi05_libero", "--obs",
         f["obs_libero_float"], "--prompt", "wipe the table"), ok),
        ("libero uint8 CHW images (--obs) + --state", base(p0, "--config", "pi0_libero", "--obs", f["obs_libero_chw"],
         "--state", libero_state, "--prompt", "turn the handle"), ok),
        ("libero --default-prompt, no --prompt", base(p0, "--config", "pi0_libero", *lib_imgs, "--state", libero_state,
         "--default-prompt", "close the bowl"), ok),
        ("libero --prompt wins over --default-prompt", base(p0, "--config", "pi0_libero", *lib_imgs, "--state",
         libero_state, "--default-prompt", "close the bowl", "--prompt", "  grasp_the\nfork  "), ok),
        ("libero pi0 prompt truncated (--max-token-len 6)", base(p0, "--config", "pi0_libero", *lib_imgs, "--state",
         libero_state, "--prompt", "pick up the red block and place it in the top drawer", max_len="6"), ok),
        ("libero pi05 discrete state truncated (--max-token-len 20)", base(p5, "--robot", "libero", "--asset-id",
         "physical-intelligence/libero", *lib_imgs, "--state", libero_state, "--prompt", "pick up the cup",
         max_len="20"), ok),
        ("libero pi0 config.json max_token_len (12)", ["--checkpoint", p0, "--tokenizer", tok, "--noise", nz,
         "--config", "pi0_libero", *lib_imgs, "--state", libero_state, "--prompt", "move left"], ok),
        ("libero grayscale + RGBA PNG (converted to RGB)", base(p0, "--config", "pi0_libero", "--image",
         "observation/image=" + f["png_gray"], "--image", "observation/wrist_image=" + f["png_rgba"],
         "--state", libero_state, "--prompt", "pull the cup"), ok),
        ("libero --robot, single asset with '/' in its id", base(f["pi0_single"], "--robot", "libero", *lib_imgs,
         "--state", libero_state, "--prompt", "open the drawer"), ok),
        ("libero noise [1,H,32], --steps 3", base(p0, "--config", "pi0_libero", *lib_imgs, "--state", libero_state,
         "--prompt", "fold", "--steps", "3", noise=f["noise3"]), ok),
        ("libero I64 state (--obs)", base(p0, "--config", "pi0_libero", *lib_imgs, "--obs", f["obs_libero_i64_state"],
         "--prompt", "pick up the bowl"), ok),
        ("libero UTF-8 prompt (byte fallback)", base(p5, "--config", "pi05_libero", *lib_imgs, "--state", libero_state,
         "--prompt", "pick up the caf\u00e9 cup \u00fc \u2192 \u65e5\u672c"), ok),
        ("libero empty prompt (present, not missing)", base(p0, "--config", "pi0_libero", *lib_imgs, "--state",
         libero_state, "--prompt", ""), ok),
        ("libero 32-dim norm stats (sliced to the state)", base(f["pi0_stats32"], "--config", "pi0_libero", *lib_imgs,
         "--state", libero_state, "--prompt", "open the drawer"), ok),
        # ---- DROID ----
        ("droid pi0_droid png640x480 + jpg101x67", base(p0, "--config", "pi0_droid", *droid_imgs, "--state",
         droid_state, "--prompt", "pick up the fork"), ok),
        ("droid pi05_droid (discrete state)", base(p5, "--config", "pi05_droid", *droid_imgs, "--state", droid_state,
         "--prompt", "pick up the fork"), ok),
        ("droid 0-d gripper F64 + F32 joints (--obs)", base(p5, "--config", "pi05_droid", "--obs", f["obs_droid_0d"],
         "--image", "observation/exterior_image_1_left=" + f["png224"], "--image",
         "observation/wrist_image_left=" + f["jpg256"], "--prompt", "uncap the pen"), ok),
        ("droid 0-d gripper pi0 (--obs)", base(p0, "--config", "pi0_droid", "--obs", f["obs_droid_0d"],
         "--image", "observation/exterior_image_1_left=" + f["png224"], "--image",
         "observation/wrist_image_left=" + f["jpg256"], "--prompt", "uncap the pen"), ok),
        ("droid --robot pi0 --delta-actions on (7 joints)", base(p0, "--robot", "droid", "--asset-id", "droid",
         *droid_imgs, "--state", droid_state, "--prompt", "turn the handle", "--delta-actions", "on"), ok),
        ("droid palette PNG + grayscale JPEG (converted to RGB)", base(p0, "--config", "pi0_droid", "--image",
         "observation/exterior_image_1_left=" + f["png_palette"], "--image", "observation/wrist_image_left=" +
         f["jpg_gray"], "--state", droid_state, "--prompt", "pick up the fork"), ok),
        ("droid pi05 32-dim norm stats (quantile, no pass-through dims)", base(f["pi05_stats32"], "--config",
         "pi05_droid", *droid_imgs, "--state", droid_state, "--prompt", "pick up the fork"), ok),
        ("droid --robot pi05, single asset, no --asset-id", base(f["pi05_single"], "--robot", "droid", *droid_imgs,
         "--state", droid_state, "--prompt", "turn the handle"), ok),
        # ---- ALOHA ----
        ("aloha pi0_aloha 4 cameras (cam_low ignored)", base(p0, "--config", "pi0_aloha", *aloha_all, "--state",
         aloha_state, "--prompt", "transfer the cube"), ok),
        ("aloha pi05_aloha, no right wrist camera (masked)", base(p5, "--config", "pi05_aloha", *aloha_no_right,
         "--state", aloha_state, "--prompt", "transfer the cube"), ok),
        ("aloha pi0_aloha_towel default prompt", base(p0, "--config", "pi0_aloha_towel", *aloha_no_right, "--state",
         aloha_state), ok),
        ("aloha pi0_aloha_towel --default-prompt wins over config", base(p0, "--config", "pi0_aloha_towel",
         *aloha_no_right, "--state", aloha_state, "--default-prompt", "uncap the pen"), ok),
        ("aloha pi0_aloha_sim (no delta, Transfer cube)", base(p0, "--config", "pi0_aloha_sim", *aloha_all, "--state",
         aloha_state), ok),
        ("aloha --robot pi05 --delta-actions off", base(p5, "--robot", "aloha", "--asset-id", "trossen", *aloha_all,
         "--state", aloha_state, "--prompt", "fold the towel", "--delta-actions", "off"), ok),
        ("aloha --robot pi0 float CHW images + F32 state (--obs)", base(p0, "--robot", "aloha", "--asset-id", "trossen",
         "--obs", f["obs_aloha_float"], "--prompt", "grasp handle"), ok),
        # ---- errors ----
        ("error: missing prompt, no default", base(p0, "--robot", "libero", "--asset-id", "physical-intelligence/libero",
         *lib_imgs, "--state", libero_state), ("fail", "Prompt is required")),
        ("error: unknown ALOHA camera", base(p0, "--config", "pi0_aloha", *aloha_all, "--obs", f["obs_aloha_badcam"],
         "--state", aloha_state, "--prompt", "x"), ("fail", None)),
        ("error: 4-channel image", base(p0, "--config", "pi0_libero", "--obs", f["obs_libero_rgba"], "--image",
         "observation/wrist_image=" + f["png224"], "--state", libero_state, "--prompt", "x"), ("fail", None)),
        ("error: state length 9 vs norm stats 8", base(p0, "--config", "pi0_libero", *lib_imgs, "--state",
         libero_state + ",0.5", "--prompt", "x"), ("fail", None)),
        ("error: ALOHA state of 13 values", base(p0, "--config", "pi0_aloha", *aloha_all, "--state",
         ",".join(aloha_state.split(",")[:13]), "--prompt", "x"), ("fail", None)),
        ("error: NaN state", base(p0, "--config", "pi0_libero", *lib_imgs, "--state",
         libero_state.replace(libero_state.split(",")[2], "nan", 1), "--prompt", "x"), ("fail", None)),
        ("error: missing observation/wrist_image", base(p0, "--config", "pi0_libero", "--obs", f["obs_libero_nowrist"],
         "--state", libero_state, "--prompt", "x"), ("fail", "observation/wrist_image")),
        ("error: missing images/cam_high", base(p0, "--config", "pi0_aloha", "--image", "images/cam_left_wrist=" +
         f["png224"], "--state", aloha_state, "--prompt", "x"), ("fail", "cam_high")),
        ("error: missing observation/exterior_image_1_left", base(p0, "--config", "pi0_droid", "--image",
         "observation/wrist_image_left=" + f["png224"], "--state", droid_state, "--prompt", "x"),
         ("fail", "observation/exterior_image_1_left")),
        ("error: missing observation/joint_position", base(p0, "--config", "pi0_droid", *droid_imgs, "--obs",
         f["obs_droid_gripper_only"], "--prompt", "x"),
         ("fail", "observation/joint_position")),
        ("error: several norm stats and no --asset-id", base(p0, "--robot", "libero", *lib_imgs, "--state",
         libero_state, "--prompt", "x"), ("fail", None)),
        ("error: DROID --state of 7 values", base(p0, "--config", "pi0_droid", *droid_imgs, "--state",
         ",".join(droid_state.split(",")[:7]), "--prompt", "x"), ("fail", None)),
        ("error: image 4 x 300 (resized height 0)", base(p0, "--config", "pi0_libero", "--obs", f["obs_libero_thin"],
         "--image", "observation/wrist_image=" + f["png224"], "--state", libero_state, "--prompt", "x"), ("fail", None)),
        ("error: pi05 config on a pi0 checkpoint", base(p0, "--config", "pi05_droid", *droid_imgs, "--state",
         droid_state, "--prompt", "x"), ("fail", None)),
        ("error: noise of the wrong horizon", base(p0, "--config", "pi0_libero", *lib_imgs, "--state", libero_state,
         "--prompt", "x", noise=f["noise_bad"]), ("fail", None)),
    ]
    return C


# --------------------------------------------------------------------------------------------------
# Running and comparing
# --------------------------------------------------------------------------------------------------

def run_ref(argv, out_json, dump):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = policy_ref.main(argv + ["--out", out_json, "--dump-inputs", dump])
    return rc, err.getvalue()


def run_c(binary, argv, dump):
    try:
        # OMP_WAIT_POLICY=PASSIVE: on a busy 2-core machine libgomp's spinning threads made each tiny run take
        # 3-7 s instead of 0.2 s (measured); the results do not depend on it.
        p = subprocess.run([binary, "run", *argv, "--json", "--dump-inputs", dump], capture_output=True, timeout=120,
                           env={**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")})
    except subprocess.TimeoutExpired:
        return -999, b"", b"timeout after 120 s"
    return p.returncode, p.stdout, p.stderr


def first_diff(a, b):
    fa, fb = a.reshape(-1), b.reshape(-1)
    if a.dtype.kind == "f":
        neq = ~((fa == fb) & (np.signbit(fa) == np.signbit(fb)) | (np.isnan(fa) & np.isnan(fb)))
    else:
        neq = fa != fb
    idx = int(np.flatnonzero(neq)[0])
    return np.unravel_index(idx, a.shape), fa[idx], fb[idx], int(neq.sum())


def compare_dumps(c_path, r_path):
    """-> list of problems (empty = bit-exact)."""
    problems = []
    try:
        c, _ = read_safetensors(c_path)
    except (OSError, ValueError) as e:
        return [f"C dump unreadable: {e}"]
    r, _ = read_safetensors(r_path)
    for name in DUMP_NAMES:
        if name not in c:
            problems.append(f"{name}: missing in C dump")
            continue
        a, b = c[name], r[name]
        if a.dtype != b.dtype or a.shape != b.shape:
            problems.append(f"{name}: C {a.dtype} {list(a.shape)} vs ref {b.dtype} {list(b.shape)}")
            continue
        if a.tobytes() != b.tobytes():
            idx, va, vb, n = first_diff(a, b)
            problems.append(f"{name}: {n} elements differ, first at {tuple(int(i) for i in idx)}: C {va!r} ref {vb!r}")
    return problems


def main():
    if len(sys.argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    binary = os.path.abspath(sys.argv[1])
    passed = failed = 0

    def report(ok, name, detail=""):
        nonlocal passed, failed
        passed, failed = passed + ok, failed + (not ok)
        print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else ""))

    tmp = tempfile.mkdtemp(prefix="policy_e2e.")
    try:
        files, rng = setup(tmp)
        all_cases = cases(files, rng)
        # Does the binary have `run`?
        missing = None
        if not os.access(binary, os.X_OK):
            missing = f"{binary} is not an executable"
        else:
            h = subprocess.run([binary, "run", "--help"], capture_output=True)
            text = (h.stdout + h.stderr).decode(errors="replace")
            if "unknown command" in text or ("--checkpoint" not in text and h.returncode != 0):
                missing = f"{binary} has no `run` command ({text.strip().splitlines()[0] if text.strip() else 'rc %d' % h.returncode})"
        if missing:
            print(f"policy_e2e: {missing}; every case fails")
            for name, _, _ in all_cases:
                report(False, name, "no `run` command in the binary")
            print(f"policy_e2e: {passed} passed, {failed} failed")
            return 1
        # Sequential on purpose: the C binary's OpenMP threads and torch's threads in this process spin
        # against each other when run side by side (45 s instead of 5 s on 2 cores).
        for i, (name, argv, expect) in enumerate(all_cases):
            r_json, r_dump = os.path.join(tmp, f"r{i}.json"), os.path.join(tmp, f"r{i}.safetensors")
            r_rc, r_err = run_ref(argv, r_json, r_dump)
            c_rc, c_out, c_err = run_c(binary, argv, os.path.join(tmp, f"c{i}.safetensors"))
            c_err = c_err.decode(errors="replace").strip()
            if expect is not None:
                sub = expect[1]
                msgs = []
                if r_rc != 1:
                    msgs.append(f"reference did not fail (rc {r_rc})")
                if c_rc != 1:
                    msgs.append(f"C exit status {c_rc} (want 1)")
                if not c_err:
                    msgs.append("C printed no message on stderr")
                elif sub is not None and sub not in c_err:
                    msgs.append(f"C message lacks {sub!r}: {c_err.splitlines()[-1]!r}")
                report(not msgs, name, "; ".join(msgs) if msgs else c_err.splitlines()[-1][:100])
                continue
            if r_rc != 0:
                report(False, name, f"reference failed: {r_err.strip().splitlines()[-1] if r_err.strip() else r_rc}")
                continue
            if c_rc != 0:
                report(False, name, f"C exit status {c_rc}: {c_err.splitlines()[-1] if c_err else ''}")
                continue
            problems = compare_dumps(os.path.join(tmp, f"c{i}.safetensors"), r_dump)
            report(not problems, name + " [model inputs bit-exact]", "; ".join(problems))
            if "truncated (--max-token-len" in name:   # openpi warns when it truncates a prompt; so does pi0 run
                report("exceeds max_token_len" in c_err and "truncated" in c_err, name + " [warned on stderr]",
                       c_err.splitlines()[-1][:100] if c_err else "no warning on stderr")
            with open(r_json) as fh:
                ref = np.array(json.load(fh)["actions"], dtype=np.float64)
            try:
                got = np.array(json.loads(c_out.decode())["actions"], dtype=np.float64)
            except (ValueError, KeyError, TypeError) as e:
                report(False, name + " [actions]", f"C stdout is not {{\"actions\": [[...]]}}: {e}")
                continue
            if got.shape != ref.shape:
                report(False, name + " [actions]", f"shape C {list(got.shape)} vs ref {list(ref.shape)}")
                continue
            rel = float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))
            detail = f"shape {list(ref.shape)} rel L2 {rel:.2e}"
            if not rel <= ACTION_TOL:
                idx = np.unravel_index(int(np.argmax(np.abs(got - ref))), ref.shape)
                detail += f" > {ACTION_TOL:g}; worst at {tuple(int(i) for i in idx)}: C {got[idx]!r} ref {ref[idx]!r}"
            report(rel <= ACTION_TOL, name + " [actions]", detail)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"policy_e2e: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
