#!/usr/bin/python3
"""Real-time chunking (RTC) at the model level: `PI0_BINARY infer --rtc exact|lerobot ...` against the independent float64
reference tools/reference/rtc_ref.py (written from LeRobot's policies/rtc/modeling_rtc.py without reading the C code).

Usage: /usr/bin/python3 tests/rtc_check.py PI0_BINARY

Cases on the tiny fixtures (π0 and π0.5, batch 1 and 2): the leftover is a chunk the same model made from other
noise, shifted by the rows "executed"; delays, horizons, leftover lengths and all four prefix-weight schedules.
Checks, for both forms (exact: the reference's float64 autograd through the expert; lerobot: LeRobot's):
- actions within rel L2 1e-5 of the reference (fp32 engine vs float64 reference);
- the two forms' actions differ by rel L2 >= 1e-3 where the guidance acts (so the first check can tell them apart);
- RTC does what it is for: the first `delay` rows of the guided chunk are closer to the leftover than the unguided
  chunk's, by the factor stated below (mean absolute distance, guided <= 0.2 x unguided);
- with zero weights (delay 0, zeros schedule) the actions equal the unguided run bit for bit;
- bad input: rtc_prev without --rtc, --rtc without rtc_prev, an unknown schedule, a max weight <= 0, an rtc_prev of
  the wrong shape: exit 1 (2 for option errors) with the reason.
Prints one line per check and `rtc: N passed, M failed`.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PI0 = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "pi0")
REF = os.path.join(ROOT, "tools", "reference", "rtc_ref.py")
FIX = os.path.join(ROOT, "tests", "fixtures")
DT = {"F32": np.float32, "U8": np.uint8, "I32": np.int32, "I64": np.int64, "BOOL": np.uint8}
counts = [0, 0]


def check(name, ok, detail=""):
    counts[0 if ok else 1] += 1
    print(f"{'PASS' if ok else 'FAIL'} {name}" + ("" if ok or not detail else f": {detail}"))


def read_st(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    h = json.loads(raw[8:8 + n])
    h.pop("__metadata__", None)
    return {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], DT[v["dtype"]])
            .reshape(v["shape"]) for k, v in h.items()}, h


def write_st(path, arrays, dtypes):
    header, blobs, off = {}, [], 0
    for k, a in arrays.items():
        b = np.ascontiguousarray(a).tobytes()
        header[k] = {"dtype": dtypes[k], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    open(path, "wb").write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))


def run(args):
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


def main():
    tmp = tempfile.mkdtemp(prefix="pi0-rtc-")
    rng = np.random.default_rng(3)
    schedules = ("zeros", "ones", "linear", "exp")
    for fixture, inputs in (("tiny-pi0", "b1"), ("tiny-pi0", "b2"), ("tiny-pi05", "b1"), ("tiny-pi05", "b2")):
        ck = os.path.join(FIX, fixture)
        arrays, header = read_st(os.path.join(ck, inputs + ".in.safetensors"))
        dtypes = {k: v["dtype"] for k, v in header.items()}
        plain_out = os.path.join(tmp, "plain.st")
        p = run([PI0, "infer", "--checkpoint", ck, "--inputs", os.path.join(ck, inputs + ".in.safetensors"),
                 "--output", plain_out])
        if p.returncode:
            check(f"{fixture}/{inputs}: plain run", False, p.stderr[-300:])
            continue
        plain = read_st(plain_out)[0]["actions"]
        B, H, A = plain.shape
        # the previous chunk: the same model with other noise; the robot executed `shift` rows of it
        other = dict(arrays)
        other["noise"] = rng.standard_normal(arrays["noise"].shape).astype(np.float32)
        write_st(os.path.join(tmp, "other.in"), other, dtypes)
        run([PI0, "infer", "--checkpoint", ck, "--inputs", os.path.join(tmp, "other.in"), "--output",
             os.path.join(tmp, "other.out")])
        prev_chunk = read_st(os.path.join(tmp, "other.out"))[0]["actions"]
        for case, (shift, delay, horizon, sched, maxw) in enumerate(((2, 1, 3, "linear", 10), (1, 2, 4, "exp", 10),
                                                                     (0, 2, 5, "ones", 5), (2, 2, 3, "zeros", 10))):
            leftover = H - shift
            prev = np.zeros_like(prev_chunk)
            prev[:, :leftover] = prev_chunk[:, shift:]
            rin = dict(arrays)
            rin["rtc_prev"] = prev
            write_st(os.path.join(tmp, "rtc.in"), rin, {**dtypes, "rtc_prev": "F32"})
            results = {}
            for mode in ("lerobot", "exact"):
                opts = ["--rtc", mode, "--rtc-delay", str(delay), "--rtc-horizon", str(horizon), "--rtc-leftover",
                        str(leftover), "--rtc-schedule", sched, "--rtc-max-weight", str(maxw)]
                name = f"{fixture}/{inputs} {mode} shift {shift} delay {delay} horizon {horizon} {sched} max {maxw}"
                p = run([PI0, "infer", "--checkpoint", ck, "--inputs", os.path.join(tmp, "rtc.in"), "--output",
                         os.path.join(tmp, "rtc.c"), *opts])
                r = run([sys.executable, REF, "--checkpoint", ck, "--inputs", os.path.join(tmp, "rtc.in"), "--output",
                         os.path.join(tmp, "rtc.r"), *opts])
                if p.returncode or r.returncode:
                    check(name, False, f"C {p.returncode} {p.stderr[-200:]} | ref {r.returncode} {r.stderr[-200:]}")
                    continue
                got = read_st(os.path.join(tmp, "rtc.c"))[0]["actions"].astype(np.float64)
                want = read_st(os.path.join(tmp, "rtc.r"))[0]["actions"].astype(np.float64)
                results[mode] = got
                rel = np.linalg.norm(got - want) / np.linalg.norm(want)
                check(f"{name}: rel L2 {rel:.1e} <= 1e-5 against the reference", rel <= 1e-5)
                d = min(delay, leftover)
                if d:
                    before = np.abs(plain[:, :d] - prev[:, :d]).mean()
                    after = np.abs(got[:, :d] - prev[:, :d]).mean()
                    check(f"{name}: first {d} rows' distance to the leftover {before:.3f} -> {after:.4f} (<= 0.2x)",
                          after <= 0.2 * before)
            if len(results) == 2 and delay:
                # the two forms must differ by far more than the 1e-5 above, or the exact check tells them apart by luck
                diff = np.linalg.norm(results["exact"] - results["lerobot"]) / np.linalg.norm(results["lerobot"])
                check(f"{fixture}/{inputs} case {case}: exact vs LeRobot's form differ by rel L2 {diff:.1e} (>= 1e-3)",
                      diff >= 1e-3)
        # zero weights: the unguided run bit for bit
        rin = dict(arrays)
        rin["rtc_prev"] = prev_chunk
        write_st(os.path.join(tmp, "zero.in"), rin, {**dtypes, "rtc_prev": "F32"})
        for mode in ("lerobot", "exact"):
            p = run([PI0, "infer", "--checkpoint", ck, "--inputs", os.path.join(tmp, "zero.in"), "--output",
                     os.path.join(tmp, "zero.out"), "--rtc", mode, "--rtc-delay", "0", "--rtc-schedule", "zeros"])
            same = p.returncode == 0 and np.array_equal(read_st(os.path.join(tmp, "zero.out"))[0]["actions"], plain)
            check(f"{fixture}/{inputs} {mode}: zero prefix weights == unguided, bit for bit", same, p.stderr[-200:])
    # bad input
    ck = os.path.join(FIX, "tiny-pi0")
    base = os.path.join(ck, "b1.in.safetensors")
    out = os.path.join(tmp, "bad.out")
    arrays, header = read_st(base)
    dtypes = {k: v["dtype"] for k, v in header.items()}
    with_prev = dict(arrays)
    with_prev["rtc_prev"] = np.zeros(arrays["noise"].shape, np.float32)
    write_st(os.path.join(tmp, "withprev.in"), with_prev, {**dtypes, "rtc_prev": "F32"})
    for label, args, code, needle in (
            ("rtc_prev without --rtc", ["--inputs", os.path.join(tmp, "withprev.in")], 1, "rtc off"),
            ("--rtc without rtc_prev", ["--inputs", base, "--rtc", "lerobot"], 1, "needs an rtc_prev"),
            ("unknown schedule", ["--inputs", base, "--rtc", "lerobot", "--rtc-schedule", "cosine"], 2, "--rtc-schedule"),
            ("max weight 0", ["--inputs", base, "--rtc", "lerobot", "--rtc-max-weight", "0"], 2, "--rtc-max-weight"),
            ("unknown form", ["--inputs", base, "--rtc", "vjp"], 2, "--rtc exact|lerobot")):
        p = run([PI0, "infer", "--checkpoint", ck, "--output", out, *args])
        check(f"bad input: {label}", p.returncode == code and needle in p.stderr, f"rc {p.returncode}: {p.stderr[-300:]}")
    bad = dict(arrays)
    bad["rtc_prev"] = np.zeros((1, 3, 32), np.float32)
    write_st(os.path.join(tmp, "badshape.in"), bad, {**dtypes, "rtc_prev": "F32"})
    p = run([PI0, "infer", "--checkpoint", ck, "--output", out, "--inputs", os.path.join(tmp, "badshape.in"), "--rtc",
             "lerobot"])
    check("bad input: rtc_prev of the wrong shape", p.returncode == 1 and "rtc_prev" in p.stderr, p.stderr[-300:])
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"rtc: {counts[0]} passed, {counts[1]} failed")
    return 1 if counts[1] else 0


if __name__ == "__main__":
    sys.exit(main())
