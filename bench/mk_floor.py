#!/usr/bin/env python3
"""mk_floor.py — the floor that issue 41's labs put under one expert layer-step of the denoise (B = 1, 11 rows).

Reads the output of the kernel labs of one machine (bench/kernels: phase_lab, megakernel) and prints, for each way
of cutting a layer into dependent phases, a lower bound on its time at the weight-stream rate that a layer time T
needs (the expert's 34.6 MB of bf16 weights per layer in T), and the smallest T that the bound allows.

    python3 bench/mk_floor.py PHASE_LAB.log [PHASE_LAB.log ...] MEGAKERNEL.log [--target 13] [--fp8] [--lab-mma]
    python3 bench/mk_floor.py --data bench/data/2026-11-26-s39-phase-lab.txt CALL[+CALL...] [options]
      (H100: call6, call7_h100 or call14_h100, each +call12_h100; H200: call8_h200+call13_h200)

The pieces:
  c0(r)  one owner-write phase (a counter wait, a load of all of X, this block's columns written, a release signal)
         measured by phase_lab beside a background stream of r TB/s into the same SMs, any stream depth, 120 or 132
         blocks (mode 0, "X loaded");
  cR(r)  one phase that ends in a sum over the blocks: every block adding its partial into L2 (mode 1), or each
         cluster of 8 summing through DSMEM first (modes 2 and 5), whichever is cheaper at that rate;
  W      the MMA work on a block's critical path. By default its physical floor: the block's share of the layer's
         weights read once from shared memory (128 bytes a clock per SM) or the tensor cores' dense rate (4096 bf16
         FLOP a clock per SM, 16 padded rows), whichever takes longer, at the SM clock the megakernel log names. With
         --lab-mma, what the megakernel lab's code takes (its per-op "MMAs" column, no weight traffic).
A bound at rate r takes for c the cheapest measurement at any rate from r0 up, where r0 is the highest measured
rate at or below 0.9 r. Cost grows with the rate in every series measured, and the 10% covers stream depths between
those measured. What the bound assumes: no stream shape beats the cheapest measured at that rate, no dependent
phase is cheaper than phase_lab's (a counter round trip and a load of X, nothing else), and W as above. The designs:
  5 owner phases  q|k|v, attention, o, gate|up, down (today's chain's dependency graph);
  4 owner phases  attention fused into q|k|v (per head), the rest as above;
  2 owner + 1 reduction  e.g. (q|k|v with attention per head), (o), (norm, gate|up, gelu, down^T, summed);
  2 reductions    (norm, q|k|v, attention, o^T) and (norm, gate|up, gelu, down^T), each ending in a sum over blocks.
No design has fewer than two phases: each of the layer's two RMSNorms needs whole rows of a residual that every SM
writes. Every product either needs whole input rows (a phase of owner writes before it) or leaves partial sums (a
phase that sums them), so a phase holds at most one column-split product and the K-split product that follows it.
--fp8: one byte per weight (half the stream and half W's floor).
"""
import re
import sys

LAYER_PARAMS = 1056 * 16 * 1024   # q|k|v 2560 + o 1024 x 2048 + gate|up 8192 + down 1024 x 4096 rows


def series(logs, modes):
    """(rate TB/s, us per round) of every 'X loaded' measurement of these modes; rate 0 = no stream."""
    pts = []
    for log in logs:
        for line in log.splitlines():
            m = re.search(r"mode (\d) .*X loaded\s+([\d.]+) us per round", line)
            if not m or int(m.group(1)) not in modes:
                continue
            r = re.search(r"stream read\s+([\d.]+) GB/s", line)
            pts.append((float(r.group(1)) / 1000 if r else 0.0, float(m.group(2))))
    if not pts:
        sys.exit("mk_floor: no mode %s measurements in the phase_lab output" % list(modes))
    return pts


def cost_lb(pts, r):
    rb = max(p[0] for p in pts if p[0] <= 0.9 * r)
    return min(c for (q, c) in pts if q >= rb)


def cost_at_least(pts, r):
    """The cheapest measurement at a rate of r or more (what was reached; not a bound)."""
    above = [c for (q, c) in pts if q >= r]
    return min(above) if above else float("inf")


def mma_column(log):
    """Sum of the megakernel's per-op 'MMAs' column (the third number) with no weight traffic."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("batches without weight traffic"):
            total = 0.0
            for row in lines[i + 1:]:
                if not row.startswith("  "):
                    break
                total += [float(x) for x in re.findall(r"-?\d+\.\d+", row.split(" | ")[0])][2]
            return total
    sys.exit("mk_floor: no 'batches without weight traffic' table in the megakernel output")


def main():
    argv = sys.argv[1:]
    opts = {}
    for flag in ("--target",):
        if flag in argv:
            i = argv.index(flag)
            opts[flag] = float(argv[i + 1])
            del argv[i:i + 2]
    target = opts.get("--target", 13.0)
    fp8, lab_mma = "--fp8" in argv, "--lab-mma" in argv
    args = [a for a in argv if not a.startswith("--")]
    if "--data" in argv and len(args) == 2:   # sections of an archived raw file
        secs = re.split(r"^######## (\S+): (\S+)\n", open(args[0]).read(), flags=re.M)
        logs = {(secs[i], secs[i + 1]): secs[i + 2] for i in range(1, len(secs) - 2, 3)}
        calls = args[1].split("+")
        pl = [v for (c, n), v in logs.items() if c in calls and n.startswith("phase_lab")]
        mk = [v for (c, n), v in logs.items() if c in calls and n == "megakernel.log"]
        if not pl or not mk:
            sys.exit("mk_floor: %s has no phase_lab or megakernel section for %s" % (args[0], args[1]))
        mk = mk[0]
    elif len(args) >= 2:
        pl, mk = [open(p).read() for p in args[:-1]], open(args[-1]).read()
    else:
        sys.exit(__doc__)
    gpu = re.search(r"phase lab: ([^,]+), (\d+) SMs", pl[0])
    sms = int(gpu.group(2))
    mhz = float(re.search(r"us at (\d+) MHz", mk).group(1))
    c0, cr = series(pl, {0}), series(pl, {1, 2, 5})
    wbytes = LAYER_PARAMS * (1 if fp8 else 2)
    if lab_mma:
        w = mma_column(mk)
        wsrc = "the megakernel lab's MMA code"
    else:
        smem = wbytes / sms / 128 / mhz          # us: the block's weights read once from shared memory
        tc = 2 * 16 * LAYER_PARAMS / sms / (4096 * (2 if fp8 else 1)) / mhz
        w = max(smem, tc)
        wsrc = "floor: shared-memory read %.2f us, tensor cores %.2f us" % (smem, tc)
    designs = [("5 owner phases", 5, 0), ("4 owner phases", 4, 0), ("2 owner + 1 reduction", 2, 1), ("2 reductions", 0, 2)]

    def bound(n0, n1, r, f):
        return n0 * f(c0, r) + n1 * f(cr, r) + w

    rate = lambda t: wbytes / (t * 1e-6) / 1e12  # noqa: E731
    print("%s, %d SMs, %.0f MHz: %.1f MB of %s weights per layer; %.1f us per layer-step needs %.2f TB/s" %
          (gpu.group(1), sms, mhz, wbytes / 1e6, "fp8" if fp8 else "bf16", target, rate(target)))
    print("owner phase: %s" % ", ".join("%.2f us at %.2f TB/s" % (c, r) for r, c in sorted(c0)))
    print("reduction phase: %s" % ", ".join("%.2f us at %.2f TB/s" % (c, r) for r, c in sorted(cr)))
    print("MMA work on the critical path W = %.2f us (%s)" % (w, wsrc))
    print("%-22s %12s %16s %10s  %s" % ("design", "bound at T", "cheapest at >=", "zero load", "smallest T the bound allows"))
    for name, n0, n1 in designs:
        lb, hi, z = bound(n0, n1, rate(target), cost_lb), bound(n0, n1, rate(target), cost_at_least), bound(n0, n1, 0.0, cost_lb)
        t = next((t / 10 for t in range(10, 1000) if t / 10 >= bound(n0, n1, rate(t / 10), cost_lb)), float("inf"))
        print("%-22s %9.2f us %13.2f us %7.2f us  %.1f us%s" % (name, lb, hi, z, t, "" if lb > target else "  (T not excluded)"))


if __name__ == "__main__":
    main()
