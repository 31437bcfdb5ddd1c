#!/usr/bin/env python3
"""mk_floor.py — the floor that issue 41's labs put under one expert layer-step of the denoise (B = 1, 11 rows).

Reads the output of the three labs of one machine (bench/kernels: phase_lab, megakernel, megakernel2) and prints,
for each way of cutting a layer into dependent phases, a lower bound on its time at the weight-stream rate that a
layer time T needs (the expert's 34.6 MB of bf16 weights per layer in T), and the smallest T that bound allows.

    python3 bench/mk_floor.py PHASE_LAB.log MEGAKERNEL.log MEGAKERNEL2.log [--target 13] [--fp8]
    python3 bench/mk_floor.py --data bench/data/2026-11-26-s39-phase-lab.txt CALL   (call6, call7_h100, call8_h200)

(--fp8: one byte per weight, half the stream, as an fp8 expert would need; the MMA work is kept as measured.)

The pieces, all measured:
  c0(r)  one owner-write phase (a counter wait, a load of all of X, this block's columns written, a release signal)
         while a background stream reads r TB/s (phase_lab's cooperative section, any stream depth);
  c1(r)  one phase whose output is a sum over every block (vector reductions into L2), the same way;
  W      the design's MMA work on the critical path with no weight traffic (the labs' stamps: megakernel's
         per-op "MMAs" column for the owner designs, megakernel2's two MMA columns for the reduction design).
A bound at rate r takes for c the cheapest measurement at any rate from r0 up, where r0 is the highest measured
rate at or below 0.9 r: cost grows with the rate in every series measured, and the 10% covers a stream depth that
was not measured between two that were, so the bound errs low. The designs:
  5 owner phases  q|k|v, attention, o, gate|up, down (today's chain's dependency graph);
  4 owner phases  attention fused into q|k|v (per head), the rest as above;
  2 owner + 1 reduction  e.g. (q|k|v with attention per head), (o), (norm, gate|up, gelu, down^T, summed); the MMA
                  work charged is the smaller of the two measured;
  2 reduction     (norm, q|k|v, attention, o^T) and (norm, gate|up, gelu, down^T), each ending in a sum over blocks.
No design has fewer than two: each of the layer's two RMSNorms needs whole rows of a residual that every SM writes.
Every product either needs whole input rows (a phase of owner writes before it) or leaves partial sums (a phase
that sums them), so a phase holds at most one column-split product and the K-split product that follows it.
"""
import re
import sys

LAYER_BYTES = 1056 * 16 * 2048   # q|k|v 2560 + o 1024 x 2048 + gate|up 8192 + down 1024 x 4096 rows of bf16
if "--fp8" in sys.argv:
    LAYER_BYTES //= 2


def series(log, mode):
    """(rate TB/s, us per round) of every cooperative 'X loaded' measurement of mode 0 or 1, rate 0 = no stream."""
    pts, coop = [], False
    for line in log.splitlines():
        if line.startswith("=="):
            coop = "cooperative" in line or "background weight stream" in line
            continue
        if not coop or "X loaded" not in line or not re.search(r"mode %d " % mode, line):
            continue
        us = float(re.search(r"([\d.]+) us per round", line).group(1))
        m = re.search(r"stream read\s+([\d.]+) GB/s", line)
        pts.append((float(m.group(1)) / 1000 if m else 0.0, us))
    if not pts:
        sys.exit("mk_floor: no mode %d measurements in the phase_lab log" % mode)
    return pts


def cost_lb(pts, r):
    below = [p for p in pts if p[0] <= 0.9 * r]
    rb = max(p[0] for p in below)
    return min(c for (q, c) in pts if q >= rb)


def cost_ub(pts, r):
    above = [c for (q, c) in pts if q >= r]
    return min(above) if above else float("inf")


def stamps(log, header, cols):
    """Sum of columns `cols` (0-based after the name) of the rows under the first line starting with header."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(header):
            total = 0.0
            for row in lines[i + 1:]:
                if not row.startswith("  "):
                    break
                nums = [float(x) for x in re.findall(r"-?\d+\.\d+", row.split(" | ")[0])]
                total += sum(nums[c] for c in cols)
            return total
    sys.exit("mk_floor: no '%s' table" % header)


def main():
    argv = sys.argv[1:]
    target = 13.0
    if "--target" in argv:
        i = argv.index("--target")
        target = float(argv[i + 1])
        del argv[i:i + 2]
    args = [a for a in argv if not a.startswith("--")]
    if "--data" in argv and len(args) == 2:   # one call's three sections of an archived raw file
        secs = re.split(r"^######## (\S+): (\S+)\n", open(args[0]).read(), flags=re.M)
        logs = {(secs[i], secs[i + 1]): secs[i + 2] for i in range(1, len(secs) - 2, 3)}
        try:
            pl, mk, mk2 = (logs[(args[1], n + ".log")] for n in ("phase_lab", "megakernel", "megakernel2"))
        except KeyError as e:
            sys.exit("mk_floor: %s has no section %s" % (args[0], e))
    elif len(args) == 3:
        pl, mk, mk2 = (open(p).read() for p in args)
    else:
        sys.exit(__doc__)
    gpu = re.search(r"phase lab: ([^,]+),", pl).group(1)
    c0, c1 = series(pl, 0), series(pl, 1)
    # megakernel: inputs wait, X load, MMAs, reduce + store, signal -> column 2
    w_owner = stamps(mk, "batches without weight traffic", [2])
    # megakernel2: inputs wait, X load + norm, up MMAs + slice, down MMAs, sum, signal -> columns 2, 3
    w_red = stamps(mk2, "phases without weight traffic", [2, 3])
    designs = [("5 owner phases", 5, 0, w_owner), ("4 owner phases", 4, 0, w_owner),
               ("2 owner + 1 reduction", 2, 1, min(w_owner, w_red)), ("2 reduction phases", 0, 2, w_red)]

    def bound(n0, n1, w, r, f):
        return n0 * f(c0, r) + n1 * f(c1, r) + w

    r_t = LAYER_BYTES / (target * 1e-6) / 1e12
    print("%s: %.1f MB of weights per layer; %.1f us per layer-step needs %.2f TB/s" % (gpu, LAYER_BYTES / 1e6, target, r_t))
    print("owner phase c0: %s" % ", ".join("%.2f us at %.2f TB/s" % (c, r) for r, c in sorted(c0)))
    print("reduction phase c1: %s" % ", ".join("%.2f us at %.2f TB/s" % (c, r) for r, c in sorted(c1)))
    print("MMA work on the critical path, no weight traffic: owner designs %.2f us, reduction design %.2f us" % (w_owner, w_red))
    print("%-22s %10s %10s %10s  %s" % ("design", "at target", "(upper)", "zero load", "smallest T its bound allows"))
    for name, n0, n1, w in designs:
        lb, ub, z = bound(n0, n1, w, r_t, cost_lb), bound(n0, n1, w, r_t, cost_ub), bound(n0, n1, w, 0.0, cost_lb)
        # smallest T with T >= bound(rate(T)): the bound falls as T grows (a slower stream), T rises
        t = next((t / 10 for t in range(10, 1000) if t / 10 >= bound(n0, n1, w, LAYER_BYTES / (t / 10 * 1e-6) / 1e12, cost_lb)),
                 float("inf"))
        print("%-22s %7.2f us %7.2f us %7.2f us  %.1f us%s" % (name, lb, ub, z, t, "" if lb > target else "  (target not excluded)"))


if __name__ == "__main__":
    main()
