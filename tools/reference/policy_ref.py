#!/usr/bin/python3
"""Independent reference of openpi's served-policy pipeline (Policy.infer on the PyTorch path), for checking
the C engine's `pi0 run`. Same arguments as `pi0 run`:

  policy_ref.py --checkpoint DIR (--config NAME | --robot libero|droid|aloha) --tokenizer FILE.model
     [--asset-id ID] [--default-prompt TEXT] [--delta-actions on|off] [--max-token-len N] [--steps N]
     [--image KEY=FILE ...] [--obs FILE.safetensors] [--state v1,v2,...] [--prompt TEXT]
     --noise FILE.safetensors --out OUT.json [--dump-inputs FILE.safetensors]

Written from the specification now restated in docs/model.md section 4 and openpi's own code (transforms.py, normalize.py,
policies/{libero,droid,aloha}_policy.py, policies/policy.py, policy_config.py, training/config.py,
models/tokenizer.py, models/model.py, openpi_client/image_tools.py), restated here with numpy in the same
order and with the same dtypes; no engine code was read. The model itself is tools/reference/pi0_ref.py
(float64); its actions are rounded to float32 because openpi's PyTorch model returns float32.

Pipeline (openpi's order, policy_config.create_trained_policy):
  request dict -> InjectDefaultPrompt(CLI) -> robot inputs (+ DeltaActions: a no-op at inference)
  -> Normalize(state) -> InjectDefaultPrompt(config) -> ResizeImages(R) -> TokenizePrompt -> PadStatesAndActions(32)
  -> Observation.from_dict (uint8 -> float32 (u/255)*2-1) -> sample_actions(noise, steps)
  -> {"state": padded normalised float64 state, "actions": float32 [H,32]} -> Unnormalize(state, actions)
  -> AbsoluteActions(mask) -> robot outputs.
Errors: message on stderr, exit status 1.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pi0_ref import Pi0Reference, read_safetensors, write_safetensors  # noqa: E402


class PolicyError(Exception):
    pass


def make_bool_mask(*dims):
    """openpi transforms.make_bool_mask: positive n -> n x True, negative n -> |n| x False."""
    out = []
    for d in dims:
        out.extend([d > 0] * abs(d))
    return tuple(out)


# Delta-action masks of openpi's data configs.
ALOHA_MASK = make_bool_mask(6, -1, 6, -1)     # LeRobotAlohaDataConfig(use_delta_joint_actions=True)
LIBERO_MASK = make_bool_mask(6, -1)           # LeRobotLiberoDataConfig(extra_delta_transform=True)
DROID_MASK = make_bool_mask(7, -1)            # RLDSDroidDataConfig(JOINT_POSITION); not in pi0_droid/pi05_droid
ROBOT_MASK = {"aloha": ALOHA_MASK, "libero": LIBERO_MASK, "droid": DROID_MASK}

# training/config.py _CONFIGS (inference-relevant fields). discrete: None = Pi0Config default (= model is pi05).
CONFIGS = {
    "pi0_aloha": dict(robot="aloha", mask=ALOHA_MASK, prompt=None, asset="trossen", discrete=None),
    "pi05_aloha": dict(robot="aloha", mask=ALOHA_MASK, prompt=None, asset="trossen", discrete=None),
    "pi0_aloha_towel": dict(robot="aloha", mask=ALOHA_MASK, prompt="fold the towel", asset="trossen", discrete=None),
    "pi0_aloha_sim": dict(robot="aloha", mask=None, prompt="Transfer cube",
                          asset="lerobot/aloha_sim_transfer_cube_human", discrete=None),
    "pi0_libero": dict(robot="libero", mask=LIBERO_MASK, prompt=None, asset="physical-intelligence/libero",
                       discrete=None),
    "pi05_libero": dict(robot="libero", mask=None, prompt=None, asset="physical-intelligence/libero", discrete=False),
    "pi0_droid": dict(robot="droid", mask=None, prompt=None, asset="droid", discrete=None),
    "pi05_droid": dict(robot="droid", mask=None, prompt=None, asset="droid", discrete=None),
}

IMAGE_KEYS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")   # model.IMAGE_KEYS, in this order
ROBOT_KEYS = {
    "libero": ("observation/image", "observation/wrist_image", "observation/state"),
    "droid": ("observation/exterior_image_1_left", "observation/wrist_image_left", "observation/joint_position",
              "observation/gripper_position"),
    "aloha": ("state", "images/cam_high", "images/cam_low", "images/cam_left_wrist", "images/cam_right_wrist"),
}
ROBOT_IMAGE_KEYS = {
    "libero": ("observation/image", "observation/wrist_image"),
    "droid": ("observation/exterior_image_1_left", "observation/wrist_image_left"),
    "aloha": ("images/cam_high", "images/cam_low", "images/cam_left_wrist", "images/cam_right_wrist"),
}
ALOHA_CAMERAS = ("cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist")   # AlohaInputs.EXPECTED_CAMERAS


# --------------------------------------------------------------------------------------------------
# Request construction (what a client would send)
# --------------------------------------------------------------------------------------------------

def load_image_file(key, path, robot):
    """PNG/JPEG -> uint8 HWC RGB (Pillow, convert('RGB') when the mode is not RGB); ALOHA clients send CHW."""
    from PIL import Image
    try:
        with Image.open(path) as im:
            im.load()
            if im.mode != "RGB":
                im = im.convert("RGB")
            arr = np.asarray(im, dtype=np.uint8)
    except OSError as e:
        raise PolicyError(f"--image {key}: cannot decode {path}: {e}") from None
    if arr.ndim != 3 or arr.shape[2] != 3:
        raise PolicyError(f"--image {key}: expected 3 channels, got shape {arr.shape}")
    if robot == "aloha":
        arr = np.ascontiguousarray(arr.transpose(2, 0, 1))
    return arr


def build_request(args, robot):
    flat = {}
    if args.obs:
        arrays, _ = read_safetensors(args.obs)
        for k, v in arrays.items():
            if v.dtype not in (np.uint8, np.float32, np.float64, np.int32, np.int64):
                raise PolicyError(f"--obs {k}: unsupported dtype {v.dtype} (U8/F32/F64/I32/I64)")
            flat[k] = v
    for spec in args.image or []:
        if "=" not in spec:
            raise PolicyError(f"--image {spec!r}: expected KEY=FILE")
        k, path = spec.split("=", 1)
        if k not in ROBOT_IMAGE_KEYS[robot] and not (robot == "aloha" and k.startswith("images/")):
            raise PolicyError(f"--image {k}: not an image key of robot {robot} (known: {', '.join(ROBOT_IMAGE_KEYS[robot])})")
        flat[k] = load_image_file(k, path, robot)
    if args.state is not None:
        try:
            vals = np.array([float(s) for s in args.state.split(",")], dtype=np.float64)
        except ValueError:
            raise PolicyError(f"--state {args.state!r}: expected comma-separated numbers") from None
        if robot == "droid":
            if vals.shape[0] != 8:
                raise PolicyError(f"--state: DROID takes 8 values (7 joint positions + gripper), got {vals.shape[0]}")
            flat["observation/joint_position"] = vals[:7].copy()
            flat["observation/gripper_position"] = vals[7:].copy()
        else:
            flat["observation/state" if robot == "libero" else "state"] = vals
    # Non-finite state values are refused (the C engine's contract; openpi itself would run on).
    state_keys = {"libero": ["observation/state"], "aloha": ["state"],
                  "droid": ["observation/joint_position", "observation/gripper_position"]}[robot]
    for k in state_keys:
        if k in flat and np.issubdtype(flat[k].dtype, np.floating) and not np.all(np.isfinite(flat[k])):
            raise PolicyError(f"{k}: state values must be finite, got {flat[k].tolist()}")
    # Nesting: ALOHA's request holds an "images" dict; LIBERO/DROID requests are flat with '/' in the keys.
    req = {}
    for k, v in flat.items():
        if robot == "aloha" and k.startswith("images/"):
            req.setdefault("images", {})[k[len("images/"):]] = v
        else:
            if k not in ROBOT_KEYS[robot]:
                print(f"policy_ref: ignoring unknown key {k!r} (robot {robot})", file=sys.stderr)
            req[k] = v
    if args.prompt is not None:
        req["prompt"] = args.prompt
    return req


# --------------------------------------------------------------------------------------------------
# Robot transforms (policies/*_policy.py)
# --------------------------------------------------------------------------------------------------

def require(data, key):
    if key not in data:
        raise PolicyError(f"missing observation key '{key}'")
    return data[key]


def parse_image(image):
    """libero/droid _parse_image: float -> uint8 via (255 * x).astype(uint8); CHW -> HWC when shape[0] == 3."""
    image = np.asarray(image)
    if np.issubdtype(image.dtype, np.floating):
        image = (255 * image).astype(np.uint8)
    if image.ndim >= 1 and image.shape[0] == 3:
        if image.ndim != 3:
            raise PolicyError(f"image with shape {image.shape}: expected [h,w,3] or [3,h,w]")
        image = np.transpose(image, (1, 2, 0))
    return image


def libero_inputs(data):
    base = parse_image(require(data, "observation/image"))
    wrist = parse_image(require(data, "observation/wrist_image"))
    out = {"state": require(data, "observation/state"),
           "image": {"base_0_rgb": base, "left_wrist_0_rgb": wrist, "right_wrist_0_rgb": np.zeros_like(base)},
           "image_mask": {"base_0_rgb": True, "left_wrist_0_rgb": True, "right_wrist_0_rgb": False}}
    if "prompt" in data:
        out["prompt"] = data["prompt"]
    return out


def droid_inputs(data):
    gripper = np.asarray(require(data, "observation/gripper_position"))
    if gripper.ndim == 0:          # newer openpi promotes a scalar gripper position to 1-D
        gripper = gripper[np.newaxis]
    joints = np.asarray(require(data, "observation/joint_position"))
    if joints.ndim != 1 or gripper.ndim != 1:
        raise PolicyError(f"DROID state: joint_position {joints.shape} and gripper_position {gripper.shape} must be 1-D")
    state = np.concatenate([joints, gripper])
    base = parse_image(require(data, "observation/exterior_image_1_left"))
    wrist = parse_image(require(data, "observation/wrist_image_left"))
    out = {"state": state,
           "image": {"base_0_rgb": base, "left_wrist_0_rgb": wrist, "right_wrist_0_rgb": np.zeros_like(base)},
           "image_mask": {"base_0_rgb": True, "left_wrist_0_rgb": True, "right_wrist_0_rgb": False}}
    if "prompt" in data:
        out["prompt"] = data["prompt"]
    return out


def aloha_flip_mask():
    return np.array([1, -1, -1, 1, 1, 1, 1, 1, -1, -1, 1, 1, 1, 1])    # int64, as in aloha_policy.py


def aloha_gripper_to_angular(value):
    value = value * (0.05800 - 0.01844) + 0.01844                          # _unnormalize(open, closed)
    arm_length, horn_radius = 0.036, 0.022
    value = (horn_radius**2 + value**2 - arm_length**2) / (2 * horn_radius * value)
    value = np.arcsin(np.clip(value, -1.0, 1.0))
    return (value - 0.5476) / (1.6296 - 0.5476)                            # _normalize


def aloha_gripper_from_angular(value):
    value = value + 0.5476
    return (value - -0.6213) / (1.4910 - -0.6213)                          # _normalize(-0.6213, 1.4910)


def aloha_inputs(data):
    state = np.asarray(require(data, "state"))
    if state.shape != (14,):
        raise PolicyError(f"ALOHA state: expected 14 values, got shape {state.shape}")
    state = aloha_flip_mask() * state                                      # _decode_state(adapt_to_pi=True)
    state[[6, 13]] = aloha_gripper_to_angular(state[[6, 13]])
    images_in = require(data, "images")

    def convert(name, img):
        img = np.asarray(img)
        if np.issubdtype(img.dtype, np.floating):
            img = (255 * img).astype(np.uint8)
        if img.ndim != 3:
            raise PolicyError(f"images/{name}: expected a [3,h,w] image, got shape {img.shape}")
        return np.transpose(img, (1, 2, 0))                                # "c h w -> h w c"

    images_in = {k: convert(k, v) for k, v in images_in.items()}
    if set(images_in) - set(ALOHA_CAMERAS):
        raise PolicyError(f"Expected images to contain {ALOHA_CAMERAS}, got {tuple(images_in)} "
                          f"(unknown camera {sorted(set(images_in) - set(ALOHA_CAMERAS))[0]!r})")
    if "cam_high" not in images_in:
        raise PolicyError("missing observation key 'images/cam_high'")
    base = images_in["cam_high"]
    images, masks = {"base_0_rgb": base}, {"base_0_rgb": True}
    for dest, src in (("left_wrist_0_rgb", "cam_left_wrist"), ("right_wrist_0_rgb", "cam_right_wrist")):
        if src in images_in:
            images[dest], masks[dest] = images_in[src], True
        else:
            images[dest], masks[dest] = np.zeros_like(base), False
    out = {"image": images, "image_mask": masks, "state": state}
    if "prompt" in data:
        out["prompt"] = data["prompt"]
    return out


def libero_outputs(actions):
    return np.asarray(actions[:, :7])


def droid_outputs(actions):
    return np.asarray(actions[:, :8])


def aloha_outputs(actions):
    actions = np.asarray(actions[:, :14])
    actions = aloha_flip_mask() * actions                                  # _encode_actions(adapt_to_pi=True)
    actions[:, [6, 13]] = aloha_gripper_from_angular(actions[:, [6, 13]])
    return actions


ROBOT_IN = {"libero": libero_inputs, "droid": droid_inputs, "aloha": aloha_inputs}
ROBOT_OUT = {"libero": libero_outputs, "droid": droid_outputs, "aloha": aloha_outputs}


# --------------------------------------------------------------------------------------------------
# Norm stats (shared/normalize.py, transforms.Normalize / Unnormalize)
# --------------------------------------------------------------------------------------------------

def find_norm_stats(ckpt, asset_id):
    assets = os.path.join(ckpt, "assets")
    if asset_id is not None:
        path = os.path.join(assets, asset_id, "norm_stats.json")
        if not os.path.isfile(path):
            raise PolicyError(f"norm stats not found: {path}")
        return path
    found = []
    for root, _, files in os.walk(assets):
        if "norm_stats.json" in files:
            found.append(os.path.join(root, "norm_stats.json"))
    if len(found) != 1:
        raise PolicyError(f"{assets}: expected exactly one */norm_stats.json without --asset-id, found "
                          f"{len(found)}" + (f" ({', '.join(sorted(found))})" if found else ""))
    return found[0]


def load_norm_stats(path, quantile):
    try:
        with open(path) as f:
            raw = json.load(f)
    except (OSError, ValueError) as e:
        raise PolicyError(f"{path}: {e}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("norm_stats"), dict):
        raise PolicyError(f"{path}: expected an object with a 'norm_stats' object")
    stats = {}
    for key, s in raw["norm_stats"].items():
        if key not in ("state", "actions"):
            # Unnormalize is strict: every stats key must exist in the outputs {state, actions}.
            raise PolicyError(f"{path}: norm stats key '{key}' has no counterpart in the policy outputs")
        if not isinstance(s, dict):
            raise PolicyError(f"{path}: norm_stats.{key} must be an object")
        entry = {}
        for f in ("mean", "std", "q01", "q99"):
            v = s.get(f)
            if v is None:
                if f in ("mean", "std"):
                    raise PolicyError(f"{path}: norm_stats.{key}.{f} missing")
                entry[f] = None
                continue
            arr = np.asarray(v, dtype=np.float64)
            if arr.ndim != 1 or arr.shape[0] == 0:
                raise PolicyError(f"{path}: norm_stats.{key}.{f} must be a non-empty list of numbers")
            entry[f] = arr
        if quantile and (entry["q01"] is None or entry["q99"] is None):
            raise PolicyError(f"quantile stats must be provided if use_quantile_norm is True. "
                              f"Key {key} is missing q01 or q99.")
        stats[key] = entry
    return stats


def normalize(x, s, quantile):
    d = x.shape[-1]
    if quantile:
        q01, q99 = s["q01"][..., :d], s["q99"][..., :d]
        if q01.shape[-1] != d or q99.shape[-1] != d:
            raise PolicyError(f"state has {d} values but the norm stats have {s['q01'].shape[-1]}")
        return (x - q01) / (q99 - q01 + 1e-6) * 2.0 - 1.0
    mean, std = s["mean"][..., :d], s["std"][..., :d]
    if mean.shape[-1] != d or std.shape[-1] != d:
        raise PolicyError(f"state has {d} values but the norm stats have {s['mean'].shape[-1]}")
    return (x - mean) / (std + 1e-6)


def pad_to_dim(x, n, value=0.0):
    if x.shape[-1] < n:
        width = [(0, 0)] * (x.ndim - 1) + [(0, n - x.shape[-1])]
        return np.pad(x, width, constant_values=value)
    return x


def unnormalize(x, s, quantile, what):
    n = x.shape[-1]
    if quantile:
        q01, q99 = s["q01"], s["q99"]
        dim = q01.shape[-1]
        if dim > n or q99.shape[-1] != dim:
            raise PolicyError(f"{what} norm stats have {dim} (q01) / {q99.shape[-1]} (q99) values, output has {n}")
        if dim < n:
            return np.concatenate([(x[..., :dim] + 1.0) / 2.0 * (q99 - q01 + 1e-6) + q01, x[..., dim:]], axis=-1)
        return (x + 1.0) / 2.0 * (q99 - q01 + 1e-6) + q01
    mean, std = pad_to_dim(s["mean"], n, 0.0), pad_to_dim(s["std"], n, 1.0)
    if mean.shape[-1] != n or std.shape[-1] != n:
        raise PolicyError(f"{what} norm stats have {s['mean'].shape[-1]} values, output has {n}")
    return x * (std + 1e-6) + mean


# --------------------------------------------------------------------------------------------------
# Model transforms: resize, tokenize, pad
# --------------------------------------------------------------------------------------------------

def resize_with_pad(img, size):
    """openpi_client.image_tools.resize_with_pad for one uint8 HWC RGB image, square target."""
    from PIL import Image
    if img.shape[0] == size and img.shape[1] == size:
        return img
    im = Image.fromarray(np.ascontiguousarray(img))
    w, h = im.size
    ratio = max(w / size, h / size)
    rh, rw = int(h / ratio), int(w / ratio)
    resized = im.resize((rw, rh), resample=Image.BILINEAR)
    canvas = Image.new(resized.mode, (size, size), 0)
    canvas.paste(resized, (max(0, int((size - rw) / 2)), max(0, int((size - rh) / 2))))
    return np.asarray(canvas)


def check_image(name, img):
    if img.dtype != np.uint8:
        raise PolicyError(f"image {name}: expected uint8 or float pixels, got {img.dtype}")
    if img.ndim != 3 or img.shape[2] != 3:
        raise PolicyError(f"image {name}: expected 3 channels (HWC RGB), got shape {img.shape}")
    if img.shape[0] == 0 or img.shape[1] == 0:
        raise PolicyError(f"image {name}: empty image {img.shape}")


def tokenize(sp, prompt, state, max_len):
    """models/tokenizer.py PaligemmaTokenizer.tokenize."""
    cleaned = prompt.strip().replace("_", " ").replace("\n", " ")
    if state is not None:
        disc = np.digitize(state, bins=np.linspace(-1, 1, 256 + 1)[:-1]) - 1
        state_str = " ".join(map(str, disc))
        tokens = sp.encode(f"Task: {cleaned}, State: {state_str};\nAction: ", add_bos=True)
    else:
        tokens = sp.encode(cleaned, add_bos=True) + sp.encode("\n")
    n = len(tokens)
    if n < max_len:
        mask = [True] * n + [False] * (max_len - n)
        tokens = tokens + [0] * (max_len - n)
    else:
        if n > max_len:
            print(f"policy_ref: token length ({n}) exceeds max length ({max_len}), truncating", file=sys.stderr)
        tokens, mask = tokens[:max_len], [True] * max_len
    return np.asarray(tokens, dtype=np.int64), np.asarray(mask, dtype=bool)


# --------------------------------------------------------------------------------------------------
# The policy
# --------------------------------------------------------------------------------------------------

class _ArgParser(argparse.ArgumentParser):
    def error(self, message):           # usage errors exit 1 like every other error (argparse uses 2)
        raise PolicyError(message)


def parse_args(argv):
    ap = _ArgParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--config", choices=sorted(CONFIGS))
    g.add_argument("--robot", choices=("libero", "droid", "aloha"))
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--asset-id")
    ap.add_argument("--default-prompt")
    ap.add_argument("--delta-actions", choices=("on", "off"))
    ap.add_argument("--max-token-len", type=int)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--image", action="append")
    ap.add_argument("--obs")
    ap.add_argument("--state")
    ap.add_argument("--prompt")
    ap.add_argument("--noise", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dump-inputs")
    # Like the C CLI, an option's value is the next argument even when it starts with '-' (--state -0.5,...).
    argv = list(sys.argv[1:] if argv is None else argv)
    valued = {o for act in ap._actions for o in act.option_strings if act.nargs is None and act.type is not bool
              and not isinstance(act, argparse._HelpAction)}
    merged, i = [], 0
    while i < len(argv):
        if argv[i] in valued and i + 1 < len(argv):
            merged.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            merged.append(argv[i])
            i += 1
    a = ap.parse_args(merged)
    if a.steps < 1:
        raise PolicyError("--steps must be >= 1")
    if a.max_token_len is not None and a.max_token_len < 1:
        raise PolicyError("--max-token-len must be >= 1")
    return a


def run(a):
    import sentencepiece
    model = Pi0Reference(a.checkpoint)
    cfg = model.cfg
    pi05 = cfg["pi05"]
    H, A = cfg["action_horizon"], cfg["action_dim"]
    R = cfg["vision"]["image_size"]
    max_len = a.max_token_len if a.max_token_len is not None else cfg["max_token_len"]

    if a.config:
        c = CONFIGS[a.config]
        robot, mask, config_prompt, asset = c["robot"], c["mask"], c["prompt"], c["asset"]
        discrete = pi05 if c["discrete"] is None else c["discrete"]
        # openpi builds the model from the config (Pi0Config(pi05=...)) and load_model refuses the other
        # model's weights, so a config of the other model type cannot serve this checkpoint.
        if a.config.startswith("pi05_") != pi05:
            raise PolicyError(f"config {a.config} is for a {'pi0.5' if a.config.startswith('pi05_') else 'pi0'} "
                              f"model, {a.checkpoint} holds a {'pi0.5' if pi05 else 'pi0'} model")
    else:
        robot, config_prompt, asset, discrete = a.robot, None, None, pi05
        mask = {"aloha": ALOHA_MASK, "libero": None if pi05 else LIBERO_MASK, "droid": None}[robot]
    if a.delta_actions == "on":
        mask = ROBOT_MASK[robot]
    elif a.delta_actions == "off":
        mask = None
    if a.asset_id is not None:
        asset = a.asset_id
    quantile = pi05                      # use_quantile_norm = model_type != PI0
    stats = load_norm_stats(find_norm_stats(a.checkpoint, asset), quantile)

    noise_t, _ = read_safetensors(a.noise)
    if "noise" not in noise_t:
        raise PolicyError(f"{a.noise}: no tensor 'noise'")
    noise = noise_t["noise"]
    if noise.dtype != np.float32 or noise.shape not in ((H, A), (1, H, A)):
        raise PolicyError(f"{a.noise}: noise must be F32 [{H},{A}] or [1,{H},{A}], got {noise.dtype} {list(noise.shape)}")
    noise = noise.reshape(1, H, A)

    sp = sentencepiece.SentencePieceProcessor()
    try:
        sp.Load(a.tokenizer)
    except (OSError, RuntimeError) as e:
        raise PolicyError(f"{a.tokenizer}: cannot load the SentencePiece model: {e}") from None

    # ---- input transforms ----
    data = build_request(a, robot)
    if a.default_prompt is not None and "prompt" not in data:          # InjectDefaultPrompt(CLI)
        data["prompt"] = a.default_prompt
    data = ROBOT_IN[robot](data)
    for k in IMAGE_KEYS:
        check_image(k, data["image"][k])
    state = np.asarray(data["state"])
    if state.ndim != 1:
        raise PolicyError(f"state: expected a 1-D vector, got shape {state.shape}")
    if "state" in stats:                                                # Normalize (strict=False)
        state = normalize(state, stats["state"], quantile)
    if config_prompt is not None and "prompt" not in data:              # InjectDefaultPrompt(config)
        data["prompt"] = config_prompt
    images = {k: resize_with_pad(data["image"][k], R) for k in IMAGE_KEYS}   # ResizeImages
    if data.get("prompt") is None:                                      # TokenizePrompt
        raise PolicyError("Prompt is required")
    tokens, token_mask = tokenize(sp, str(data["prompt"]), state if discrete else None, max_len)
    state = pad_to_dim(state, A)                                        # PadStatesAndActions
    if state.shape[-1] != A:
        raise PolicyError(f"state has {state.shape[-1]} values, more than the model's {A}")

    # ---- Observation.from_dict + model ----
    img = np.stack([images[k].astype(np.float32) / 255.0 * 2.0 - 1.0 for k in IMAGE_KEYS])[None]
    inputs = {
        "images": img.astype(np.float32),
        "image_masks": np.array([[bool(data["image_mask"][k]) for k in IMAGE_KEYS]]),
        "state": state.astype(np.float32)[None],
        "tokens": tokens.astype(np.int32)[None],
        "token_mask": token_mask[None],
        "noise": noise,
    }
    if a.dump_inputs:
        write_safetensors(a.dump_inputs, {
            "images": ("F32", inputs["images"]), "image_masks": ("U8", inputs["image_masks"].astype(np.uint8)),
            "state": ("F32", inputs["state"]), "tokens": ("I32", inputs["tokens"]),
            "token_mask": ("U8", inputs["token_mask"].astype(np.uint8)), "noise": ("F32", inputs["noise"])})
    actions = model.sample_actions(inputs, a.steps).numpy().astype(np.float32)[0]   # [H,32] float32

    # ---- output transforms ----
    out = {"state": state, "actions": actions}
    for k in stats:                                                     # Unnormalize (strict=True)
        out[k] = unnormalize(out[k], stats[k], quantile, k)
    if mask is not None:                                                # AbsoluteActions
        acts, st = out["actions"], out["state"]
        m = np.asarray(mask)
        d = m.shape[-1]
        acts[..., :d] += np.expand_dims(np.where(m, st[..., :d], 0), axis=-2)
    return ROBOT_OUT[robot](out["actions"])


def main(argv=None):
    try:
        a = parse_args(argv)
        actions = run(a)
        with open(a.out, "w") as f:
            json.dump({"actions": [[float(v) for v in row] for row in actions]}, f)
            f.write("\n")
    except PolicyError as e:
        print(f"policy_ref: error: {e}", file=sys.stderr)
        return 1
    except (ValueError, KeyError, OSError, TypeError, IndexError) as e:
        print(f"policy_ref: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
