"""The engine's LeRobot camera inputs against LeRobot's own code path run by PyTorch (the GPU machine has torch 2.11;
LeRobot needs 2.7-2.11): prepare_observation_for_inference (uint8 -> .to(device) -> float32 / 255 -> CHW),
_preprocess_images and resize_with_pad_torch (policies/common/vla_utils.py), restated line by line, on CPU and CUDA.
Writes a tiny LeRobot directory (tests/lerobot_check.py), runs `pi0 run --dump-inputs` on uint8 HWC cameras of six
sizes (resized and not) and counts the pixels that differ. Usage: python3 bench/lerobot_torch.py [PI0_BINARY]
(default build/pi0). Expected: 0 on CUDA; on CPU PyTorch divides by 255 where CUDA multiplies by 1/255 (the engine
takes the GPU's values), so values differ there by an ulp or two."""
import json, os, subprocess, sys
import numpy as np, torch, torch.nn.functional as F
sys.path.insert(0, "tests")
PI0 = sys.argv[1] if len(sys.argv) > 1 else "build/pi0"
sys.argv = ["x", PI0]
import lerobot_check as L
tmp = "/tmp/pi0-lerobot-torch"; os.makedirs(tmp, exist_ok=True)
rng = np.random.RandomState(7)
tok = os.path.join(tmp, "tok.model")
subprocess.run([sys.executable, "tests/make_tokenizer.py", tok], check=True, capture_output=True)
noise = os.path.join(tmp, "noise.safetensors"); L.np_st(noise, {"noise": rng.randn(5, 32).astype(np.float32)})
MS = {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
d = L.policy_dir(tmp, "p0", "tiny-pi0", L.CAMS3, 8, 7, MS, rng)
def resize_with_pad_torch(images, height, width):  # LeRobot vla_utils (channels-last input path)
    images = images.permute(0, 3, 1, 2)
    _, _, ch, cw = images.shape
    ratio = max(cw / width, ch / height); rh, rw = int(ch / ratio), int(cw / ratio)
    r = F.interpolate(images, size=(rh, rw), mode="bilinear", align_corners=False).clamp(0.0, 1.0)
    ph0, rem_h = divmod(height - rh, 2); pw0, rem_w = divmod(width - rw, 2)
    r = F.pad(r, (pw0, pw0 + rem_w, ph0, ph0 + rem_h), mode="constant", value=0.0)
    return r.permute(0, 2, 3, 1)
def lerobot_image(u8, device):
    t = torch.from_numpy(u8).to(device)
    t = (t.type(torch.float32) / 255).permute(2, 0, 1).contiguous().unsqueeze(0)   # prepare_observation_for_inference
    img = t.permute(0, 2, 3, 1)                                                   # _preprocess_images: channels first
    if img.shape[1:3] != (56, 56):
        img = resize_with_pad_torch(img, 56, 56)
    return (img * 2.0 - 1.0)[0].cpu().numpy()                                    # [R, R, 3]
for sizes in [((480, 640), (56, 56), (100, 37)), ((720, 1280), (60, 80), (57, 57))]:
    obs = {k: rng.randint(0, 256, size=(h, w, 3)).astype(np.uint8) for k, (h, w) in zip(L.CAMS3, sizes)}
    obs["observation.state"] = rng.randn(8).astype(np.float32)
    op = os.path.join(tmp, "obs.st"); L.np_st(op, obs)
    dump = os.path.join(tmp, "in.st")
    p = subprocess.run([PI0, "run", "--checkpoint", d, "--tokenizer", tok, "--obs", op, "--noise", noise,
                        "--prompt", "pick", "--json", "--dump-inputs", dump], capture_output=True, text=True)
    if p.returncode: print("FAILED", p.stderr[-500:]); continue
    t, _ = L.read_st(dump)
    ours = np.frombuffer(t["images"][2], np.float32).reshape(3, 56, 56, 3)
    for dev in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        diffs = []
        for i, k in enumerate(L.CAMS3):
            ref = lerobot_image(obs[k], dev)
            diffs.append(f"{sizes[i][0]}x{sizes[i][1]}: {int((ref != ours[i]).sum())} differ (max {np.abs(ref - ours[i]).max():.1e})")
        print(f"torch {torch.__version__} {dev}: engine images vs LeRobot's torch path: " + ", ".join(diffs))
