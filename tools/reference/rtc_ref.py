#!/usr/bin/python3
"""Independent float64 reference of real-time chunking (RTC) guidance for the Pi0 / Pi0.5 flow-matching sampler.

The model is pi0_ref.py (Pi0Reference: prefix pass, KV cache, expert_forward, openpi's time_schedule), imported,
not copied; only the guided Euler loop and the prefix weights live here. No engine code was read.

Restated from LeRobot (commit 7427f31):
  src/lerobot/policies/rtc/modeling_rtc.py    RTCProcessor.denoise_step (tau = 1 - time; horizon clamped to the
      leftover's length before zero padding; x1 = x_t - time * v_t; err = (Y - x1) * W; guidance weight
      g = min(nan_to_num(nan_to_num(c, posinf=max) * inv_r2, posinf=max), max), c = (1 - tau) / tau,
      inv_r2 = ((1 - tau)^2 + tau^2) / (1 - tau)^2; result v_t - g * correction), get_prefix_weights,
      _linweights, _add_trailing_zeros, _add_leading_ones (schedules ZEROS / ONES / LINEAR / EXP)
  src/lerobot/policies/rtc/configuration_rtc.py  RTCConfig (max_guidance_weight > 0)
  src/lerobot/policies/common/flow_matching.py   euler_integrate (how pi0 / pi05 sample_actions call denoise_step)
and from Black, Galliker, Levine 2025, "Real-Time Execution of Action Chunking Flow Policies" (arXiv 2506.07339),
Algorithm 1 / eq. 5: each Euler step is guided by the vector-Jacobian product (Y - A1)^T diag(W) dA1/dA_tau of the
predicted clean chunk A1 with respect to the current sample (the Kinetix code's jax.vjp through the denoiser).

Conventions (openpi's, followed by the engine): t runs from 1 (noise) to 0 (actions); x <- x + dt * v(x, t),
dt = -1/steps, the t values from pi0_ref.time_schedule (t = 1.0f accumulated in float32); predicted clean actions
x1 = x_t - t * v(x_t, t). Y = previous chunk's leftover (model space, [H, A], rows >= N zero), W = prefix weights
[H] = get_prefix_weights(start=delay, end=min(horizon, N), total=H). tau = 1 - t, g as above (float64).
  --rtc lerobot: what LeRobot computes today: its denoise_step evaluates v_t before x_t.requires_grad_(True),
                 so dx1/dx_t is the identity and the correction is err itself: v <- v - g * err.
  --rtc exact:   the paper's guidance: correction = err^T dx1/dx_t = err - t * (dv/dx_t)^T err, by float64
                 autograd through the whole action expert of this step (prefix K/V cache constant, err detached);
                 v <- v - g * correction.

Usage: /usr/bin/python3 tools/reference/rtc_ref.py --checkpoint DIR --inputs IN.safetensors --output OUT.safetensors
           [--steps 10] --rtc lerobot|exact --rtc-delay D --rtc-horizon S [--rtc-leftover N]
           --rtc-schedule zeros|ones|linear|exp --rtc-max-weight W [--precision bf16|int8|fp8]
           [--quant-stages vision,prefix,expert]   (fp8: vision,prefix only; its default)
       /usr/bin/python3 tools/reference/rtc_ref.py --self-check      (tests/fixtures/tiny-pi0, tiny-pi05; b1, b2)
IN: pi0_ref's inputs (images, image_masks, state, tokens, token_mask, noise) plus rtc_prev F32 [B, H, A].
OUT: actions F32 [B, H, A] (float64 result rounded to float32), rtc_weights F32 [H]. Errors: stderr, exit 1.
--precision int8 and fp8 are pi0_ref's 8-bit options (docs/precision.md); --rtc exact with the expert in 8-bit is an
error, as docs/precision.md 5 says (the vector-Jacobian product needs the expert's bf16 weights). fp8 never puts the
expert in 8-bit (docs/precision.md 8), so both forms run with it.
"""
import argparse
import math
import os
import sys

import numpy as np
import torch

sys.dont_write_bytecode = True   # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pi0_ref import F64, Pi0Reference, quant_stages, read_safetensors, time_schedule, write_safetensors  # noqa: E402

MODES = ("lerobot", "exact")
SCHEDULES = ("zeros", "ones", "linear", "exp")
MODEL_INPUTS = ("images", "image_masks", "state", "tokens", "token_mask", "noise")
FIX = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures"))


# --------------------------------------------------------------------------------------------------
# Prefix weights and guidance weight (modeling_rtc.py get_prefix_weights & helpers, denoise_step)
# --------------------------------------------------------------------------------------------------

def prefix_weights(schedule, start, end, total):
    """LeRobot's get_prefix_weights(start, end, total) in numpy float64 (LeRobot: torch float32)."""
    start = min(start, end)
    if schedule == "zeros":
        w = np.zeros(total)
        w[:start] = 1.0
        return w
    if schedule == "ones":
        w = np.ones(total)
        w[end:] = 0.0
        return w
    if schedule not in ("linear", "exp"):
        raise ValueError(f"unknown schedule {schedule!r} (known: {', '.join(SCHEDULES)})")
    n = total - max(total - end, 0) - start                      # _linweights
    lin = np.linspace(1.0, 0.0, n + 2)[1:-1] if (end > start and n > 0) else np.zeros(0)
    if schedule == "exp":
        lin = lin * np.expm1(lin) / (math.e - 1.0)
    parts = [np.ones(min(start, total))] if min(start, total) > 0 else []   # _add_leading_ones
    parts.append(lin)
    if total - end > 0:                                           # _add_trailing_zeros
        parts.append(np.zeros(total - end))
    w = np.concatenate(parts)
    if w.shape != (total,):
        raise ValueError(f"prefix weights: got {w.shape[0]} values for total {total} (start {start}, end {end})")
    return w


def rtc_weights(schedule, delay, horizon, leftover, total):
    """W as denoise_step builds it: the execution horizon is clamped to the leftover's real length."""
    return prefix_weights(schedule, delay, min(horizon, leftover), total)


def guidance_weight(t, max_weight):
    """g(tau = 1 - t) with LeRobot's nan_to_num (posinf -> max; a NaN, only possible at t = 0, -> 0)."""
    tau = np.float64(1.0) - np.float64(t)
    with np.errstate(divide="ignore", invalid="ignore"):
        one_m = np.float64(1.0) - tau
        inv_r2 = (one_m ** 2 + tau ** 2) / one_m ** 2
        c = np.nan_to_num(one_m / tau, posinf=max_weight)
        g = np.nan_to_num(c * inv_r2, posinf=max_weight)
    return float(min(g, np.float64(max_weight)))


# --------------------------------------------------------------------------------------------------
# Guided Euler loop (pi0_ref.sample_actions plus denoise_step's correction)
# --------------------------------------------------------------------------------------------------

class Context:
    """The constant part of one inference: prefix K/V cache, prefix validity, state, noise (as sample_actions)."""

    def __init__(self, model, inputs):
        g = {k: torch.as_tensor(np.asarray(inputs[k])) for k in MODEL_INPUTS}
        self.model = model
        self.state = g["state"].to(F64)
        self.noise = g["noise"].to(F64)
        emb, self.valid, _ = model.embed_prefix(g["images"].to(F64), g["image_masks"], g["tokens"], g["token_mask"])
        self.cache = model.prefix_pass(emb, self.valid)

    def velocity(self, x, t):
        tt = torch.full((x.shape[0],), float(t), dtype=F64)
        return self.model.expert_forward(self.cache, self.valid, self.state, x, tt)

    def x1_vjp(self, x, t, make_cot):
        """(v, x1, cot, cot^T dx1/dx) at (x, t); make_cot(x1) gives the (detached) cotangent."""
        xg = x.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            v = self.velocity(xg, t)
            x1 = xg - float(t) * v
            cot = make_cot(x1.detach()).detach()
            (corr,) = torch.autograd.grad(x1, xg, cot)
        return v.detach(), x1.detach(), cot, corr


def guided_velocity(ctx, x, t, Y, W, max_weight, mode):
    """One RTC denoise_step: v - g * correction, W [H] broadcast over batch and action dims."""
    Wb = torch.as_tensor(W, dtype=F64)[None, :, None]
    if mode == "lerobot":
        v = ctx.velocity(x, t)
        corr = (Y - (x - float(t) * v)) * Wb
    elif mode == "exact":
        v, _, _, corr = ctx.x1_vjp(x, t, lambda x1: (Y - x1) * Wb)
    else:
        raise ValueError(f"unknown RTC mode {mode!r} (known: {', '.join(MODES)})")
    return v - guidance_weight(t, max_weight) * corr


def sample_rtc(ctx, steps, Y, W, max_weight, mode, trace=None):
    dt, ts = time_schedule(steps)
    x = ctx.noise
    for t in ts:
        if trace is not None:
            trace.append((t, x))
        x = x + float(dt) * guided_velocity(ctx, x, t, Y, W, max_weight, mode)
    return x


def leftover_tensor(rtc_prev, n):
    """F32 [B, H, A] -> float64, rows >= n zeroed (LeRobot pads the real rows with zeros)."""
    Y = torch.as_tensor(np.asarray(rtc_prev, dtype=np.float64)).clone()
    Y[:, n:] = 0.0
    return Y


# --------------------------------------------------------------------------------------------------
# Self-check
# --------------------------------------------------------------------------------------------------

def _kinetix_weights(schedule, start, end, total):
    """Second formulation (the paper's / Kinetix get_prefix_weights, clip form), valid for end <= total."""
    start = min(start, end)
    i = np.arange(total, dtype=np.float64)
    if schedule == "ones":
        w = np.ones(total)
    elif schedule == "zeros":
        w = (i < start).astype(np.float64)
    else:
        w = np.clip((start - 1 - i) / (end - start + 1) + 1, 0.0, 1.0)
        if schedule == "exp":
            w = w * np.expm1(w) / (math.e - 1.0)
    return np.where(i >= end, 0.0, w)


def self_check():
    failures = []

    def report(name, ok, detail=""):   # ok None: information only
        print(f"{name:<62} {detail:<40} {'info' if ok is None else 'OK' if ok else 'FAIL'}")
        if ok is False:
            failures.append(name)

    worst = 0.0
    for s in SCHEDULES:
        for total in range(1, 9):
            for end in range(total + 1):
                for start in range(total + 2):
                    worst = max(worst, float(np.abs(prefix_weights(s, start, end, total) -
                                                    _kinetix_weights(s, start, end, total)).max()))
    report("prefix weights vs Kinetix clip formula (4 x 440)", worst < 1e-15, f"max |diff| {worst:.1e}")
    ex = prefix_weights("linear", 2, 6, 10)
    report("linear(2, 6, 10) = 1 1 .8 .6 .4 .2 0 0 0 0", np.allclose(ex, [1, 1, .8, .6, .4, .2, 0, 0, 0, 0],
                                                                         rtol=0, atol=1e-15))
    ts = [float(t) for t in time_schedule(10)[1]][1:] + [0.5, 0.25, 0.01]
    closed = [min((t * t + (1 - t) ** 2) / (t * (1 - t)), 10.0) for t in ts]   # g symmetric in t <-> 1 - t
    err = max(abs(guidance_weight(t, 10.0) - c) / c for t, c in zip(ts, closed))
    report("guidance weight vs (t^2+(1-t)^2)/(t(1-t)); t=1 -> max, t=0 -> 0",
           err < 1e-14 and guidance_weight(1.0, 10.0) == 10.0 and guidance_weight(0.0, 10.0) == 0.0,
           f"max rel diff {err:.1e}")

    rng = np.random.RandomState(1234)
    for name in ("tiny-pi0", "tiny-pi05"):
        model = Pi0Reference(os.path.join(FIX, name))
        for case in ("b1", "b2"):
            tag = f"{name}/{case}"
            inputs, _ = read_safetensors(os.path.join(FIX, name, f"{case}.in.safetensors"))
            ctx = Context(model, inputs)
            B, H, A = ctx.noise.shape
            trace = []
            plain = model.sample_actions(inputs, 10)
            zeroW = np.zeros(H)
            mine = sample_rtc(ctx, 10, torch.zeros(B, H, A, dtype=F64), zeroW, 10.0, "lerobot", trace)
            report(f"{tag} unguided loop == pi0_ref.sample_actions", torch.equal(mine, plain))

            # finite-difference check of the VJP (float64, central differences, random directions)
            h, rel_x1, rel_v = 1e-5, 0.0, 0.0
            for k in (0, 4, 9):
                t, x = trace[k]
                for _ in range(3):
                    u = torch.as_tensor(rng.standard_normal((B, H, A)))
                    d = torch.as_tensor(rng.standard_normal((B, H, A)))
                    _, _, _, corr = ctx.x1_vjp(x, t, lambda x1: u)
                    vp, vm = ctx.velocity(x + h * d, t), ctx.velocity(x - h * d, t)
                    fd_v = float((u * (vp - vm)).sum()) / (2 * h)
                    fd_x1 = float((u * d).sum()) - float(t) * fd_v
                    an_x1 = float((corr * d).sum())
                    an_v = (float((u * d).sum()) - an_x1) / float(t)
                    rel_x1 = max(rel_x1, abs(an_x1 - fd_x1) / abs(fd_x1))
                    rel_v = max(rel_v, abs(an_v - fd_v) / abs(fd_v))
            report(f"{tag} VJP vs central differences (x1, network part)", max(rel_x1, rel_v) <= 1e-6,
                   f"rel err x1 {rel_x1:.1e}, v-part {rel_v:.1e}")

            # W = 0 (schedule zeros with delay 0; leftover of 0 rows): bit for bit the plain chunk
            Y = torch.as_tensor(rng.standard_normal((B, H, A)))
            for mode in MODES:
                same = all(torch.equal(sample_rtc(ctx, 10, leftover_tensor(Y, n), rtc_weights(s, d_, S, n, H),
                                                  10.0, mode), plain)
                           for s, d_, S, n in (("zeros", 0, H, H), ("ones", 2, H, 0), ("linear", 1, 3, 0)))
                report(f"{tag} {mode}: W = 0 gives the plain chunk bit for bit", same)

            # leftover = the plain chunk itself
            W = rtc_weights("ones", 2, H, H, H)
            for mode in MODES:
                out = sample_rtc(ctx, 10, plain, W, 10.0, mode)
                rnd = sample_rtc(ctx, 10, Y, W, 10.0, mode)
                dself = float((out - plain).abs().max())
                drnd = float((rnd - plain).abs().max())
                report(f"{tag} {mode}: Y = own 10-step chunk, max|change|", None,
                       f"{dself:.2e} (random Y: {drnd:.2e})")
            one = model.sample_actions(inputs, 1)
            for mode in MODES:
                out = sample_rtc(ctx, 1, one, W, 10.0, mode)
                d1 = float((out - one).abs().max())
                report(f"{tag} {mode}: steps=1, Y = own chunk -> unchanged", d1 <= 1e-15, f"max|change| {d1:.1e}")
    print("self-check:", "FAILED: " + ", ".join(failures) if failures else "all OK")
    return 1 if failures else 0


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------

class _ArgParser(argparse.ArgumentParser):
    def error(self, message):
        print(f"rtc_ref: error: {message}", file=sys.stderr)
        sys.exit(1)


def run(a):
    for opt in ("checkpoint", "inputs", "output", "rtc", "rtc_delay", "rtc_horizon", "rtc_schedule",
                "rtc_max_weight"):
        if getattr(a, opt) is None:
            raise ValueError(f"--{opt.replace('_', '-')} is required (unless --self-check)")
    if a.steps < 1:
        raise ValueError(f"--steps must be >= 1, got {a.steps}")
    if a.rtc_delay < 0 or a.rtc_horizon < 0:
        raise ValueError("--rtc-delay and --rtc-horizon must be >= 0")
    if not (math.isfinite(a.rtc_max_weight) and a.rtc_max_weight > 0):
        raise ValueError(f"--rtc-max-weight must be finite and > 0, got {a.rtc_max_weight}")
    stages, err = quant_stages(a.precision, a.quant_stages)
    if err:
        raise ValueError(err)
    if a.rtc == "exact" and "expert" in stages:
        raise ValueError("--rtc exact needs the expert in bf16: quantise vision,prefix only (docs/precision.md 5)")
    model = Pi0Reference(a.checkpoint, quant=stages, precision=a.precision if stages else "int8")
    inputs, _ = read_safetensors(a.inputs)
    missing = [k for k in MODEL_INPUTS + ("rtc_prev",) if k not in inputs]
    if missing:
        raise ValueError(f"{a.inputs}: missing tensor(s) {', '.join(missing)}")
    H, A = model.cfg["action_horizon"], model.cfg["action_dim"]
    B = inputs["noise"].shape[0]
    for k in ("noise", "rtc_prev"):
        if list(inputs[k].shape) != [B, H, A]:
            raise ValueError(f"{a.inputs}: {k} has shape {list(inputs[k].shape)}, expected [{B}, {H}, {A}]")
    if not np.isfinite(inputs["rtc_prev"]).all():
        raise ValueError(f"{a.inputs}: rtc_prev contains NaN or Inf")
    n = H if a.rtc_leftover is None else a.rtc_leftover
    if not 0 <= n <= H:
        raise ValueError(f"--rtc-leftover must be in [0, {H}], got {n}")
    W = rtc_weights(a.rtc_schedule, a.rtc_delay, a.rtc_horizon, n, H)
    ctx = Context(model, inputs)
    x = sample_rtc(ctx, a.steps, leftover_tensor(inputs["rtc_prev"], n), W, a.rtc_max_weight, a.rtc)
    write_safetensors(a.output, {"actions": ("F32", x.to(torch.float32)),
                                 "rtc_weights": ("F32", torch.as_tensor(W).to(torch.float32))})
    return 0


def main():
    ap = _ArgParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint")
    ap.add_argument("--inputs")
    ap.add_argument("--output")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rtc", choices=MODES)
    ap.add_argument("--rtc-delay", type=int)
    ap.add_argument("--rtc-horizon", type=int)
    ap.add_argument("--rtc-leftover", type=int, help="real rows of rtc_prev (default H)")
    ap.add_argument("--rtc-schedule", choices=SCHEDULES)
    ap.add_argument("--rtc-max-weight", type=float)
    ap.add_argument("--precision", choices=("bf16", "int8", "fp8"), default="bf16")
    ap.add_argument("--quant-stages")
    ap.add_argument("--self-check", action="store_true")
    a = ap.parse_args()
    try:
        return self_check() if a.self_check else run(a)
    except (ValueError, OSError, KeyError) as e:
        print(f"rtc_ref: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
