#!/usr/bin/python3
"""8-bit precision (docs/precision.md): `PI0_BINARY infer --precision int8|fp8 [--quant-stages ...]` on the CPU
backend against the independent float64 reference tools/reference/pi0_ref.py (its `quant` and `precision` options,
written from docs/precision.md without reading the engine's code), and rtc_ref.py for real-time chunking.

Usage: /usr/bin/python3 tests/quant_check.py PI0_BINARY

Why the comparison may re-decide a code. The engine holds fp32 activations; the reference rounds its float64 ones
to fp32 just before coding them, so the two differ by a few ulp. Where a row's exact quotient x / s lies that close to
a rounding boundary k + 1/2, they take neighbouring codes, and one such code moves the actions far more than fp32
noise does: in 7 of the 24 runs of the fixtures below one code does, by rel L2 2.6e-4 to 3.9e-3 (a π0 state-token
row, coded afresh at each step, hits every action), while int8 and bf16 differ by 4.4e-4 to 1.3e-2. No plain
tolerance tells the two apart. So when the reference is not within 1e-5 of the engine (the golden tests' fp32 vs
float64 bound), it lists its activation codes whose quotient lies within TAU of a boundary and gives them, one at a
time, the other neighbour: the one that brings it closest to the engine, re-run exactly, until it is within 1e-5
(the codes' effects are measured nearest the boundary first, and no further once one alone brings it within 1e-6).
The run passes only if that happens; its line says how many codes were re-decided and how close to its boundary the
farthest lay. A wrong format (rounding, scales, weights not rounded to bf16, the stages) moves many codes at once,
which no such flips explain; tests/README.md lists the mutations of the reference this check was seen to catch.

FP8 (docs/precision.md 8) is compared the same way. Its boundaries are the midpoints between neighbouring E4M3
values, which lie closer together near zero than int8's; since the fp32 rows differ by a fraction of the row's
largest value, a code is near its boundary when |x / s - midpoint| is within TAU8 of 448 (the row's largest value in
code units), the same fraction of the row as int8's TAU of 127, and the other neighbour is the next E4M3 magnitude up
or down with the quotient's sign.

Checks, on the tiny π0 and π0.5 fixtures, inputs b1, b1-masked and b2:
- every stage, and each stage alone: the engine within rel L2 1e-5 of the reference, as above;
- int8 and bf16 actions differ by rel L2 >= 1e-4 (10x the bound), so an engine that ignored --precision or a stage
  would fail the first check by far;
- `--precision bf16` gives the default run's actions bit for bit;
- real-time chunking: `--rtc exact` is refused (exit 1, with the reason) while the expert is 8-bit (every stage,
  `expert`, `prefix,expert`: docs/precision.md 5); `--quant-stages vision,prefix --rtc exact` and every stage with
  `--rtc lerobot` run and match rtc_ref.py as above;
- option errors: --quant-stages without int8 or fp8, an unknown stage: exit 2;
- fp8: vision, prefix and both against the reference as above; without --quant-stages the same as vision,prefix, bit
  for bit; fp8 and bf16, and fp8 and int8 of the same stages, differ by rel L2 >= 1e-4; fp8 naming the expert (alone
  or with others) is refused with a message naming it; both forms of real-time chunking run with fp8 and match
  rtc_ref.py.
Prints one line per check and `quant: N passed, M failed`.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.dont_write_bytecode = True   # leave no __pycache__ in the source tree
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
import pi0_ref  # noqa: E402
import rtc_ref  # noqa: E402

PI0 = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "pi0")
FIX = os.path.join(ROOT, "tests", "fixtures")
BOUND = 1e-5      # engine vs reference once the codes agree: worst seen 1.7e-7
GAP = 1e-4        # int8 vs bf16 must differ by at least 10 x BOUND: smallest seen 4.4e-4 (π0.5, b1-masked, prefix)
# A code is re-decided only if its exact quotient x / s lies within TAU of k + 1/2. The codes that had to be lay at
# most 4.2e-5 from it, i.e. the engine's fp32 row was off by 3.3e-7 of the row's largest value (3 to 6 ulp); TAU
# allows 5 times that.
TAU = 2e-4
# fp8: near a boundary within this fraction of the row's largest value, int8's TAU / 127 (module docstring)
TAU8 = TAU / 127
STAGE_SETS = ("vision,prefix,expert", "vision", "prefix", "expert")
FP8_STAGE_SETS = ("vision,prefix", "vision", "prefix")
counts = [0, 0]


def check(name, ok, detail=""):
    counts[0 if ok else 1] += 1
    print(f"{'PASS' if ok else 'FAIL'} {name}" + ("" if ok or not detail else f": {detail}"))


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def engine(args):
    """Runs `pi0 infer --threads 1 ARGS --output OUT` -> (actions float64 or None, stderr, exit status)."""
    out = os.path.join(TMP, "engine.out")
    p = subprocess.run([PI0, "infer", "--threads", "1", *args, "--output", out], capture_output=True, text=True,
                       timeout=300)
    acts = pi0_ref.read_safetensors(out)[0]["actions"].astype(np.float64) if p.returncode == 0 else None
    return acts, p.stderr.strip(), p.returncode


QUANTIZE = pi0_ref.quantize_rows
QUANTIZE_FP8 = pi0_ref.quantize_rows_fp8
E4M3 = pi0_ref.E4M3_MAGNITUDES                        # the 127 finite magnitudes, increasing
E4M3_MID = (E4M3[:-1] + E4M3[1:]) / 2                 # the rounding boundaries between them


class Codes:
    """Stands in for pi0_ref.quantize_rows during one reference run (the weights are quantised before, at load):
    lists the activation codes whose exact quotient x / s lies within TAU of a boundary k + 1/2, and gives those in
    `flip` the other neighbour of the quotient. A code is keyed by its fp32 (x, s): the same value quantised
    again is the same decision in the engine too (q, k and v read one input row; in π0 the state token's rows are
    the same at every denoising step), so it is re-decided everywhere at once."""

    def __init__(self, flip):
        self.flip, self.near = set(flip), {}

    def __call__(self, x):
        q, s = QUANTIZE(x)
        with np.errstate(all="ignore"):
            u = x.astype(np.float64) / s.astype(np.float64)[..., None]
            margin = np.abs(np.abs(u - np.trunc(u)) - 0.5)
        rows = np.broadcast_to(s[..., None], x.shape)
        for i in np.flatnonzero(np.isfinite(margin) & (margin < TAU)):
            key = (float(x.flat[i]), float(rows.flat[i]))
            self.near[key] = float(margin.flat[i])
            if key in self.flip:
                q.flat[i] += 1 if u.flat[i] > q.flat[i] else -1
        return q, s


class Codes8(Codes):
    """Codes for pi0_ref.quantize_rows_fp8: near means |x / s| within TAU8 * 448 of a midpoint between neighbouring
    E4M3 magnitudes (the margin recorded is that distance over 448), and the other neighbour is the next magnitude
    code up or down (the codes are ordered by magnitude), with the quotient's sign."""

    def __call__(self, x):
        q, s = QUANTIZE_FP8(x)
        with np.errstate(all="ignore"):
            u = x.astype(np.float64) / s.astype(np.float64)[..., None]
        a = np.where(np.isfinite(u), np.abs(u), np.inf)
        j = np.clip(np.searchsorted(E4M3_MID, a), 1, len(E4M3_MID) - 1)
        margin = np.minimum(np.abs(a - E4M3_MID[j - 1]), np.abs(a - E4M3_MID[j])) / pi0_ref.E4M3_MAX
        rows = np.broadcast_to(s[..., None], x.shape)
        for i in np.flatnonzero(np.isfinite(margin) & (margin < TAU8)):
            key = (float(x.flat[i]), float(rows.flat[i]))
            self.near[key] = float(margin.flat[i])
            if key in self.flip:
                mag = int(q.flat[i]) & 0x7F
                mag += 1 if a.flat[i] > E4M3[mag] else -1
                q.flat[i] = mag | (0x80 if u.flat[i] < 0 else 0)
        return q, s


def traced(run, flip=(), fp8=False):
    codes = (Codes8 if fp8 else Codes)(flip)
    name = "quantize_rows_fp8" if fp8 else "quantize_rows"
    saved = getattr(pi0_ref, name)
    setattr(pi0_ref, name, codes)
    try:
        out = run()
    finally:
        setattr(pi0_ref, name, saved)
    return out.detach().numpy().astype(np.float64), codes.near


def against_reference(name, got, run, fp8=False):
    """The engine's actions `got` against the reference run `run` (a function returning its actions), re-deciding
    near-boundary codes as the module docstring says. Returns the largest margin re-decided (0 if none)."""
    want, near = traced(run, fp8=fp8)
    raw = rel(got, want)
    chosen, err = [], raw
    if raw > BOUND:
        # each code's effect alone, nearest its boundary first; once one alone brings the reference within BOUND / 10
        # the rest need not be run: the choice below is then among those run, and its result is still re-run exactly.
        # The flips that had to be made left it near 1e-7; a code that only gets within BOUND does not stop the
        # search, so that a code of merely similar effect is less likely to be taken for the one the engine decided
        # otherwise (either way the pass criterion is BOUND on the exact re-run).
        delta = {}
        for c in sorted(near, key=near.get):
            delta[c] = traced(run, [c], fp8)[0] - want
            if rel(got, want + delta[c]) <= BOUND / 10:
                break
        while err > BOUND and len(chosen) < len(delta):
            resid = got - want
            c = min((c for c in delta if c not in chosen), key=lambda c: np.linalg.norm(resid - delta[c]))
            if np.linalg.norm(resid - delta[c]) >= 0.99 * np.linalg.norm(resid):
                break
            chosen.append(c)
            want = traced(run, chosen, fp8)[0]
            err = rel(got, want)
    far = max((near[c] for c in chosen), default=0.0)
    where = "of the row's largest value from a midpoint" if fp8 else "from k + 1/2"
    detail = (f"rel L2 {raw:.1e}" if not chosen else
              f"rel L2 {raw:.1e}, {err:.1e} with {len(chosen)} of {len(near)} near codes re-decided "
              f"(farthest {far:.1e} {where})")
    check(f"{name}: {detail} <= {BOUND:g}", err <= BOUND)
    return far


def main():
    torch.set_num_threads(1)
    farthest, farthest8 = 0.0, 0.0
    for fixture in ("tiny-pi0", "tiny-pi05"):
        ck = os.path.join(FIX, fixture)
        models = {st: pi0_ref.Pi0Reference(ck, quant=st.split(",")) for st in STAGE_SETS}
        models8 = {st: pi0_ref.Pi0Reference(ck, quant=st.split(","), precision="fp8") for st in FP8_STAGE_SETS}
        for case in ("b1", "b1-masked", "b2"):
            path = os.path.join(ck, f"{case}.in.safetensors")
            inputs = pi0_ref.load_inputs(path)
            base = ["--checkpoint", ck, "--inputs", path]
            bf16, err, st = engine(base)
            if st:
                check(f"{fixture}/{case}: bf16 run", False, err[-300:])
                continue
            same, _, _ = engine(base + ["--precision", "bf16"])
            check(f"{fixture}/{case}: --precision bf16 == default, bit for bit",
                  same is not None and np.array_equal(same, bf16))
            int8 = {}
            for stages in STAGE_SETS:
                name = f"{fixture}/{case} int8 {stages}"
                got, err, st = engine(base + ["--precision", "int8", "--quant-stages", stages])
                if st:
                    check(name, False, f"exit {st}: {err[-300:]}")
                    continue
                int8[stages] = got
                m = models[stages]
                farthest = max(farthest, against_reference(name, got, lambda: m.sample_actions(inputs, 10)))
                gap = rel(got, bf16)
                check(f"{name}: int8 vs bf16 rel L2 {gap:.1e} >= {GAP:g}", gap >= GAP)
            farthest8 = max(farthest8, fp8_cases(f"{fixture}/{case}", base, inputs, bf16, int8, models8))
        rtc_cases(fixture, ck)
    bad_options()
    print(f"near-boundary codes re-decided lay at most {farthest:.1e} from k + 1/2 (TAU {TAU:g})")
    print(f"fp8: near-boundary codes re-decided lay at most {farthest8:.1e} of the row's largest value from a midpoint "
          f"(TAU8 {TAU8:.2g})")
    print(f"quant: {counts[0]} passed, {counts[1]} failed")
    return 1 if counts[1] else 0


def fp8_cases(label, base, inputs, bf16, int8, models8):
    """docs/precision.md 8 on one fixture input: each stage set against the reference, the default stages, the gaps to
    bf16 and int8. Returns the largest margin re-decided."""
    farthest = 0.0
    default, err, st = engine(base + ["--precision", "fp8"])
    check(f"{label}: fp8 without --quant-stages runs", st == 0, f"exit {st}: {err[-300:]}")
    for stages in FP8_STAGE_SETS:
        name = f"{label} fp8 {stages}"
        got, err, st = engine(base + ["--precision", "fp8", "--quant-stages", stages])
        if st:
            check(name, False, f"exit {st}: {err[-300:]}")
            continue
        m = models8[stages]
        farthest = max(farthest, against_reference(name, got, lambda: m.sample_actions(inputs, 10), fp8=True))
        gap = rel(got, bf16)
        check(f"{name}: fp8 vs bf16 rel L2 {gap:.1e} >= {GAP:g}", gap >= GAP)
        if stages in int8:
            gap = rel(got, int8[stages])
            check(f"{name}: fp8 vs int8 rel L2 {gap:.1e} >= {GAP:g}", gap >= GAP)
        if stages == "vision,prefix" and default is not None:
            check(f"{label}: fp8 without --quant-stages == vision,prefix, bit for bit", np.array_equal(default, got))
    return farthest


def rtc_cases(fixture, ck):
    """docs/precision.md 5: exact RTC needs the expert in bf16; with vision and prefix in 8-bit it runs."""
    path = os.path.join(ck, "b2.in.safetensors")
    arrays = pi0_ref.load_inputs(path)
    plain, err, st = engine(["--checkpoint", ck, "--inputs", path])
    if st:
        check(f"{fixture}/b2 rtc: plain run", False, err[-300:])
        return
    B, H, A = plain.shape
    shift, delay, horizon, maxw = 2, 2, 4, 10.0
    prev = np.zeros((B, H, A), np.float32)
    prev[:, :H - shift] = plain[:, shift:]            # the rows the robot has not executed yet
    dtypes = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32", np.dtype(bool): "BOOL"}
    tensors = {k: (dtypes[v.dtype], v) for k, v in arrays.items()}
    tensors["rtc_prev"] = ("F32", prev)
    rin = os.path.join(TMP, "rtc.in.safetensors")
    pi0_ref.write_safetensors(rin, tensors)
    rtc_opts = ["--rtc-delay", str(delay), "--rtc-horizon", str(horizon), "--rtc-leftover", str(H - shift),
                "--rtc-schedule", "linear", "--rtc-max-weight", str(maxw)]
    base = ["--checkpoint", ck, "--inputs", rin]
    for stages in (None, "expert", "prefix,expert"):
        q = ["--precision", "int8"] + ([] if stages is None else ["--quant-stages", stages])
        _, err, st = engine(base + q + ["--rtc", "exact"] + rtc_opts)
        check(f"{fixture}/b2 --rtc exact with {stages or 'every stage'} in int8 is refused",
              st == 1 and "exact real-time chunking" in err and "8-bit" in err, f"exit {st}: {err[-300:]}")
    W = rtc_ref.rtc_weights("linear", delay, horizon, H - shift, H)
    Y = rtc_ref.leftover_tensor(prev, H - shift)
    for mode, stages in (("exact", "vision,prefix"), ("lerobot", "vision,prefix,expert")):
        name = f"{fixture}/b2 --rtc {mode}, int8 {stages}"
        got, err, st = engine(base + ["--precision", "int8", "--quant-stages", stages, "--rtc", mode] + rtc_opts)
        if st:
            check(name, False, f"exit {st}: {err[-300:]}")
            continue
        model = pi0_ref.Pi0Reference(ck, quant=stages.split(","))

        def run():
            return rtc_ref.sample_rtc(rtc_ref.Context(model, arrays), 10, Y, W, maxw, mode)
        against_reference(name, got, run)
        unguided, _, _ = engine(["--checkpoint", ck, "--inputs", path, "--precision", "int8", "--quant-stages", stages])
        moved = rel(got[:, :delay], unguided[:, :delay]) if unguided is not None else 0.0
        check(f"{name}: guidance moves the first {delay} rows by rel L2 {moved:.1e} (>= 1e-2)", moved >= 1e-2)
    # fp8 leaves the expert in bf16 (docs/precision.md 8), so exact RTC runs with it, as LeRobot's form does
    model8 = pi0_ref.Pi0Reference(ck, quant=pi0_ref.FP8_STAGES, precision="fp8")
    for mode in ("exact", "lerobot"):
        name = f"{fixture}/b2 --rtc {mode}, fp8"
        got, err, st = engine(base + ["--precision", "fp8", "--rtc", mode] + rtc_opts)
        if st:
            check(name, False, f"exit {st}: {err[-300:]}")
            continue

        def run8():
            return rtc_ref.sample_rtc(rtc_ref.Context(model8, arrays), 10, Y, W, maxw, mode)
        against_reference(name, got, run8, fp8=True)


def bad_options():
    ck = os.path.join(FIX, "tiny-pi0")
    base = ["--checkpoint", ck, "--inputs", os.path.join(ck, "b1.in.safetensors")]
    for label, args, needle in (("--quant-stages without --precision int8 or fp8", ["--quant-stages", "vision"],
                                 "--quant-stages needs --precision"),
                                ("an unknown stage", ["--precision", "int8", "--quant-stages", "vision,text"],
                                 "--quant-stages"),
                                ("an unknown stage with fp8", ["--precision", "fp8", "--quant-stages", "vision,text"],
                                 "--quant-stages"),
                                ("an unknown precision", ["--precision", "int4"], "--precision")):
        _, err, st = engine(base + args)
        check(f"bad option: {label} -> exit 2", st == 2 and needle in err, f"exit {st}: {err[-300:]}")
    # docs/precision.md 8: fp8 has no expert stage; naming it is refused (as an option error or at load), and no
    # actions are written
    for stages in ("expert", "vision,expert", "vision,prefix,expert"):
        out = os.path.join(TMP, "engine.out")
        if os.path.exists(out):
            os.remove(out)
        _, err, st = engine(base + ["--precision", "fp8", "--quant-stages", stages])
        check(f"fp8 --quant-stages {stages} is refused, naming the expert",
              st in (1, 2) and "expert" in err and not os.path.exists(out), f"exit {st}: {err[-300:]}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="pi0-quant-") as TMP:
        sys.exit(main())
