#!/usr/bin/env python3
"""gpu_model.py — the FLOP and byte counts of pi0-3cam per stage, and a roofline prediction per GPU (docs/gpus.md).

Counts the large products (2*M*N*K summed) and attention (QK^T and PV) of vision, prefill and denoise from the model's
dimensions (src/config.c, docs/model.md), the weight bytes each stage reads in bf16, int8 and fp8, and predicts
time >= max(FLOPs / dense tensor rate, bytes / memory bandwidth) per stage from vendor spec figures (docs/gpus.md
cites each). A "calibrated" prediction divides that bound by the H200's measured efficiency per stage. Everything it
prints except the H200 rows of the measured table is a PREDICTION, not a measurement. Standard library only:

    python3 bench/gpu_model.py            # markdown tables, B = 1 and B = 64
    python3 bench/gpu_model.py --batch 8  # another batch
"""
import argparse

# --- model (src/config.c: so400m, gemma_2b, gemma_300m; docs/model.md 1.1-1.4) -------------------------------------
VIS = dict(D=1152, F=4304, layers=27, heads=16, patch=14, img=224)           # SigLIP So400m/14
LM = dict(D=2048, F=16384, layers=18, heads=8, kv=1, dh=256)                  # Gemma 2B (the prefix)
EX = dict(D=1024, F=4096, layers=18, heads=8, kv=1, dh=256)                   # Gemma 300M (the action expert)
ACTION_DIM = 32

# --- workload pi0-3cam (tools/bench.c; bench/RESULTS.md "Method") -----------------------------------------------------
CAMS, PROMPT, HORIZON, STEPS = 3, 20, 10, 10
TOK_PER_CAM = (VIS["img"] // VIS["patch"]) ** 2                               # 256
PREFIX = CAMS * TOK_PER_CAM + PROMPT                                          # 788 rows per sample
SUFFIX = HORIZON + 1                                                          # π0: the state token + H actions


def products(B):
    """Per stage: list of (M, N, K, quantised) for every product of one inference at batch B."""
    st = {"vision": [], "prefill": [], "denoise": []}
    Mv = B * CAMS * TOK_PER_CAM
    D, F = VIS["D"], VIS["F"]
    st["vision"].append((Mv, D, 3 * VIS["patch"] ** 2, False))                # patch embedding (bf16 always)
    for _ in range(VIS["layers"]):
        st["vision"] += [(Mv, D, D, True)] * 4 + [(Mv, F, D, True), (Mv, D, F, True)]   # q k v out, fc1, fc2
    st["vision"].append((Mv, LM["D"], D, False))                              # multi-modal projector
    Mp, D, F = B * PREFIX, LM["D"], LM["F"]
    qw, kvw = LM["heads"] * LM["dh"], LM["kv"] * LM["dh"]
    for l in range(LM["layers"]):
        st["prefill"] += [(Mp, qw, D, True), (Mp, kvw, D, True), (Mp, kvw, D, True)]   # q k v
        if l == LM["layers"] - 1:
            break                                                             # last layer: K/V only (docs/model.md 3.13)
        st["prefill"] += [(Mp, D, qw, True), (Mp, F, D, True), (Mp, F, D, True), (Mp, D, F, True)]  # o gate up down
    Ms, Mh, D, F = B * SUFFIX, B * HORIZON, EX["D"], EX["F"]
    qw, kvw = EX["heads"] * EX["dh"], EX["kv"] * EX["dh"]
    st["denoise"].append((B, D, ACTION_DIM, False))                           # state token, once
    for _ in range(STEPS):
        st["denoise"] += [(Mh, D, ACTION_DIM, False), (Mh, D, D, False)]      # action/time MLP
        for _ in range(EX["layers"]):
            st["denoise"] += [(Ms, qw, D, True), (Ms, kvw, D, True), (Ms, kvw, D, True), (Ms, D, qw, True),
                              (Ms, F, D, True), (Ms, F, D, True), (Ms, D, F, True)]
        st["denoise"].append((Mh, ACTION_DIM, D, False))                      # action_out
    return st


def attention_flops(B):
    """QK^T and PV: 4 * rows * keys * (heads * head dim) per layer."""
    v = 4 * TOK_PER_CAM * TOK_PER_CAM * VIS["D"] * VIS["layers"] * B * CAMS       # each camera attends to itself
    p = 4 * PREFIX * PREFIX * LM["heads"] * LM["dh"] * (LM["layers"] - 1) * B    # full prefix (images + prompt)
    d = 4 * SUFFIX * (PREFIX + SUFFIX) * EX["heads"] * EX["dh"] * EX["layers"] * STEPS * B
    return {"vision": v, "prefill": p, "denoise": d}


def kv_bytes(B):
    """Denoise reads the prefix KV cache (bf16, one kv head) once per layer per step; other activations ignored."""
    return {"vision": 0, "prefill": 0, "denoise": 2 * 2 * PREFIX * LM["kv"] * LM["dh"] * EX["layers"] * STEPS * B}


def stage_counts(B):
    """{stage: dict(flops, attn, bytes_bf16, bytes_8bit)}; weights read once per use (once per step in denoise)."""
    out, st, att, kv = {}, products(B), attention_flops(B), kv_bytes(B)
    for s, prods in st.items():
        flops = sum(2 * M * N * K for M, N, K, _ in prods)
        qflops = sum(2 * M * N * K for M, N, K, q in prods if q)
        b16 = sum(2 * N * K for _, N, K, _ in prods)
        b8 = sum((N * K + 4 * N) if q else 2 * N * K for _, N, K, q in prods)   # int8 / fp8: 1 B + an fp32 row scale
        out[s] = dict(flops=flops, qflops=qflops, attn=att[s], bytes_bf16=b16 + kv[s], bytes_8bit=b8 + kv[s])
    return out


# --- GPUs: dense tensor rates (TFLOPS / TOPS, no sparsity) and memory bandwidth (GB/s). docs/gpus.md cites each. ----
# bf16: with fp32 accumulation (what the engine does); fp8 likewise; None: no such tensor-core format.
GPUS = [
    # name,            bf16,   int8,   fp8,    GB/s
    ("H200 SXM",       989.5,  1979,   1979,   4800),
    ("RTX 3090",       71,     284,    None,   936),
    ("RTX 4090",       165.2,  660.6,  330.3,  1008),
    ("RTX 5090",       209.5,  838,    419,    1792),
    ("L40S",           362.05, 733,    733,    864),
    ("A100 SXM 80GB",  312,    624,    None,   2039),
    ("AGX Orin 64GB",  42.5,   85,     None,   204.8),
    ("AGX Thor",       258.75, 517.5,  517.5,  273),
]

# --- measured on the H200 (bench/RESULTS.md "Current numbers", H200 rows, e9db08a; bench/evidence/h200-e2e.txt) -----
H200_BF16_MS = {1: {"vision": 2.26, "prefill": 4.87, "denoise": 4.84},
                64: {"vision": 82.59, "prefill": 299.98, "denoise": 25.32}}
# int8 on every stage, B = 1, 5b3bbef (bench/RESULTS.md "8-bit"; bench/evidence/h200-int8.txt; bf16 in that call:
# 2.16 / 4.77 / 4.78). No B = 64 int8 run is recorded.
H200_INT8_MS = {1: {"vision": 4.43, "prefill": 8.65, "denoise": 18.75}}
STAGES = ("vision", "prefill", "denoise")


def roofline_ms(c, gpu, prec):
    """max(compute, memory) in ms; attention stays bf16 in every precision (docs/precision.md 1)."""
    _, bf16, int8, fp8, bw = gpu
    rate = {"bf16": bf16, "int8": int8, "fp8": fp8}[prec]
    if rate is None:
        return None
    prod = (c["flops"] - c["qflops"]) / bf16 + (c["qflops"] / rate if prec != "bf16" else c["qflops"] / bf16)
    compute = (prod + c["attn"] / bf16) / 1e12
    mem = (c["bytes_bf16"] if prec == "bf16" else c["bytes_8bit"]) / (bw * 1e9)
    return 1e3 * max(compute, mem), ("compute" if compute >= mem else "memory")


def efficiency(B):
    """Per stage: H200 bf16 roofline / H200 measured bf16 time (None without a measurement at this B)."""
    if B not in H200_BF16_MS:
        return None
    c = stage_counts(B)
    return {s: roofline_ms(c[s], GPUS[0], "bf16")[0] / H200_BF16_MS[B][s] for s in STAGES}


def fmt(x, nd=2):
    return "n/a" if x is None else f"{x:.{nd}f}"


def print_counts(B):
    c = stage_counts(B)
    print(f"\n### Counts, pi0-3cam, B = {B}\n")
    print("| stage | products GFLOP | of which int8-able | attention GFLOP | weights+KV read, bf16 MB | int8 / fp8 MB |")
    print("|---|---|---|---|---|---|")
    for s in STAGES:
        x = c[s]
        print(f"| {s} | {x['flops'] / 1e9:,.1f} | {x['qflops'] / 1e9:,.1f} | {x['attn'] / 1e9:,.1f} | "
              f"{x['bytes_bf16'] / 1e6:,.0f} | {x['bytes_8bit'] / 1e6:,.0f} |")
    tot = {k: sum(c[s][k] for s in STAGES) for k in c["vision"]}
    print(f"| total | {tot['flops'] / 1e9:,.1f} | {tot['qflops'] / 1e9:,.1f} | {tot['attn'] / 1e9:,.1f} | "
          f"{tot['bytes_bf16'] / 1e6:,.0f} | {tot['bytes_8bit'] / 1e6:,.0f} |")
    if B in H200_BF16_MS:
        eff = efficiency(B)
        print(f"\nH200 measured, B = {B} (ms): " + ", ".join(
            f"{s} bf16 {H200_BF16_MS[B][s]:.2f}" + (f" / int8 {H200_INT8_MS[B][s]:.2f}" if B in H200_INT8_MS else "")
            + f" (bf16 at {100 * eff[s]:.0f}% of its roofline)" for s in STAGES))


def print_predictions(B):
    c, eff = stage_counts(B), efficiency(B)
    print(f"\n### PREDICTED ms per stage, pi0-3cam, B = {B}: roofline (bound) and calibrated (bound / H200 efficiency)\n")
    print("| GPU | precision | vision | prefill | denoise | total (roofline) | total (calibrated) |")
    print("|---|---|---|---|---|---|---|")
    for g in GPUS:
        for prec in ("bf16", "int8", "fp8"):
            r = {s: roofline_ms(c[s], g, prec) for s in STAGES}
            if r["vision"] is None:
                print(f"| {g[0]} | {prec} | no tensor-core fp8 | | | | |")
                continue
            cells = []
            for s in STAGES:
                t, bound = r[s]
                cal = t / eff[s] if eff else None
                cells.append(f"{fmt(t)} {bound[0]}" + (f" / {fmt(cal)}" if eff else ""))
            tot = sum(r[s][0] for s in STAGES)
            cal_tot = sum(r[s][0] / eff[s] for s in STAGES) if eff else None
            print(f"| {g[0]} | {prec} | " + " | ".join(cells) + f" | {fmt(tot)} | {fmt(cal_tot)} |")
    print("\n(c: compute-bound, m: memory-bound; 'a / b': roofline a, calibrated b)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, action="append", help="batch size (repeatable); default 1 and 64")
    a = ap.parse_args()
    print(f"pi0-3cam: {CAMS} cameras x {TOK_PER_CAM} tokens, prompt {PROMPT}, prefix {PREFIX} rows, "
          f"suffix {SUFFIX} rows, {STEPS} denoise steps")
    print("\n### GPUs (dense tensor rates, TFLOPS or TOPS; memory GB/s)\n")
    print("| GPU | bf16 (fp32 acc.) | int8 | fp8 (fp32 acc.) | GB/s |")
    print("|---|---|---|---|---|")
    for g in GPUS:
        print(f"| {g[0]} | {g[1]} | {g[2]} | {fmt(g[3], 1) if g[3] else 'none'} | {g[4]} |")
    for B in a.batch or [1, 64]:
        print_counts(B)
        print_predictions(B)


if __name__ == "__main__":
    main()
