#!/usr/bin/env python3
"""memory_model.py — what π0 and π0.5 take in a CUDA device's memory at B = 1, and whether that fits a Jetson
(docs/jetson.md, Memory). Standard library only:

    python3 bench/memory_model.py

Everything it prints is DERIVED, not measured on a Jetson: the weights from the parameter table (src/weights.c) laid out
as the CUDA weight store lays them out (src/cuda/wstore.cu: a bf16 copy of every tensor, int8 values and fp32 row scales
for the products --precision int8 selects, an fp32 copy of vectors, the patch embedding and the action / state / time
projections, each copy rounded up to 256 bytes); a session's buffers from model.c's session create and the CUDA
backend's scratch (backend.cu reserve, linear_i8.cu, the cuBLASLt workspace); the CUDA context from the one measurement
there is (bench/RESULTS.md: pi0-3cam on the H200, 7.32 GB in use with a session in bf16, 4.74 GB with int8 on every
stage, less the weights and session this model gives for that workload). `pi0 info --backend cuda` prints the weights
and the session a device really holds.
"""
from gpu_model import ACTION_DIM as A, EX, LM, VIS

VOCAB = 257152                      # Gemma's token embedding rows (src/config.c)
SLAB = 256 << 20                    # the weight store's slab (src/cuda/wstore.cu)
H200_IN_USE = {"bf16": 7.32e9, "int8": 4.74e9}   # pi0-3cam, B = 1 (bench/RESULTS.md, "8-bit")
MARGIN = 2e9                        # ASSUMED: the OS, the rest of the process and other programs (not measured)
JETSONS = [("Orin Nano 8 GB", 8), ("Orin NX 16 GB", 16), ("AGX Orin 32 GB", 32), ("AGX Orin 64 GB", 64),
           ("AGX Thor 128 GB", 128)]


def up(n):
    return (n + 255) // 256 * 256


def tensors(pi05):
    """(rows, cols, kind) of every bound weight: kind 'v' a vector (fp32 copy too), 'f' an fp32 product (fp32 copy
    too), 'q' a product an 8-bit precision quantises, '' the rest (bf16 only)."""
    Dv, Fv, D, F, De, Fe = VIS["D"], VIS["F"], LM["D"], LM["F"], EX["D"], EX["F"]
    q, kv, qe, kve = LM["heads"] * LM["dh"], LM["kv"] * LM["dh"], EX["heads"] * EX["dh"], EX["kv"] * EX["dh"]
    T = (VIS["img"] // VIS["patch"]) ** 2
    t = [(Dv, 3 * VIS["patch"] ** 2, "f"), (Dv, 1, "v"), (T, Dv, "")]
    for _ in range(VIS["layers"]):
        t += [(Dv, 1, "v")] * 2 + [(Dv, Dv, "q"), (Dv, 1, "v")] * 4 + [(Dv, 1, "v")] * 2
        t += [(Fv, Dv, "q"), (Fv, 1, "v"), (Dv, Fv, "q"), (Dv, 1, "v")]
    t += [(Dv, 1, "v")] * 2 + [(D, Dv, ""), (D, 1, "v"), (VOCAB, D, "")]
    for _ in range(LM["layers"]):
        t += [(D, 1, "v"), (q, D, "q"), (kv, D, "q"), (kv, D, "q"), (D, q, "q"), (D, 1, "v")]
        t += [(F, D, "q"), (F, D, "q"), (D, F, "q")]
    t.append((D, 1, "v"))
    norm = [(3 * De, De, ""), (3 * De, 1, "v")] if pi05 else [(De, 1, "v")]   # adaRMS dense, or RMSNorm scale
    for _ in range(EX["layers"]):
        t += norm + [(qe, De, "q"), (kve, De, "q"), (kve, De, "q"), (De, qe, "q")] + norm
        t += [(Fe, De, "q"), (Fe, De, "q"), (De, Fe, "q")]
    t += norm + [(De, A, "f"), (De, 1, "v"), (A, De, "f"), (A, 1, "v")]
    if pi05:
        t += [(De, De, "f"), (De, 1, "v")] * 2                                # time MLP
    else:
        t += [(De, A, "f"), (De, 1, "v"), (De, 2 * De, "f"), (De, 1, "v"), (De, De, "f"), (De, 1, "v")]
        t += [(De, A, "f"), (De, 1, "v")]   # derived at bind: the action path composed (not a parameter)
    return t


def params(pi05):
    return sum(r * c for r, c, _ in tensors(pi05)) - (0 if pi05 else EX["D"] * (A + 1))


def weights(pi05, int8):
    """Bytes of the store: bf16, fp32 copies, 8-bit."""
    bf = f32 = q8 = 0
    for r, c, k in tensors(pi05):
        if int8 and k == "q":
            q8 += up(r * c) + up(4 * r)
        else:
            bf += up(2 * r * c)
        if k in ("v", "f"):
            f32 += up(4 * r * c)
    return bf, f32, q8


def session(pi05, int8, H, L, N=3, steps=10, portable=True):
    """Bytes of a B = 1 session: model.c's buffers and the CUDA backend's scratch. portable: the path every GPU but
    Hopper runs (a Jetson): the decode attention's scratch, and cuBLASLt's products, whose timing takes a buffer of the
    largest output (the prefix's gate|up) at the first inference."""
    T, R, Dv, Fv, D, F, De, Fe = (VIS["img"] // VIS["patch"]) ** 2, VIS["img"], VIS["D"], VIS["F"], LM["D"], LM["F"], \
        EX["D"], EX["F"]
    qw, kvw, depth = LM["heads"] * LM["dh"], LM["kv"] * LM["dh"], LM["layers"]
    P, S = N * T + L, H + (0 if pi05 else 1)
    vrows, a, f, i = N * T, 2, 4, 4   # bf16 activations, fp32, int32
    n = 3 * steps * De * f + De * f                                            # the time terms' scratch
    n += N * R * R * 3 * f + N * i + vrows * (6 * Dv + Fv + D) * a + (2 * L + vrows + P) * i
    n += P * (2 * D + 2 * qw + 2 * F) * a + depth * 2 * (P + S) * kvw * a     # prefill, the KV cache
    n += S * (3 * De + 2 * qw + 2 * kvw + 2 * Fe) * a + (S + 2 * H + 1) * i
    n += (4 * H * A + H + steps + A + De + 4 * H * De) * f
    n += (2 * depth + 1) * steps * 3 * De * f if pi05 else steps * De * f
    scores = max(P * LM["heads"] * (P + S + 8), T * VIS["heads"] * (T + 8))
    n += scores * (4 + 2 + 4) + P * max(qw + 2 * kvw, 2 * F) * 2 + (32 << 20)   # attention, fused products, cuBLASLt
    if int8:                                                                    # the 8-bit products' rows
        rows = min(max(P, vrows), max(64, (64 << 20) // 4 // F // 64 * 64))
        n += rows * (F + 4 + 4 * F)
    if portable:
        n += (8 << 20) + 4096 * 4 + P * 2 * F * 2
    return n


def gb(x):
    return f"{x / 1e9:.2f}"


def main():
    # the CUDA context and what the process holds beside the weights and the session, from the H200 measurement
    ctx = {p: H200_IN_USE[p] - sum(weights(0, p == "int8")) - session(0, p == "int8", H=10, L=20, portable=False)
           for p in ("bf16", "int8")}   # (the H200 ran the Hopper path)
    print("DERIVED from the parameter table and the engine's allocations (not measured on a Jetson)\n")
    print("| model | parameters | precision | weights on the device GB (bf16 + fp32 copies + 8-bit) | session B = 1 GB |")
    print("|---|---|---|---|---|")
    rows = []
    for pi05, name, L in ((0, "π0", 48), (1, "π0.5", 200)):
        for p in ("bf16", "int8"):
            w, s = weights(pi05, p == "int8"), session(pi05, p == "int8", H=50, L=L)
            rows.append((name, p, sum(w) + s))
            print(f"| {name} | {params(pi05) / 1e9:.3f} B | {p} | {gb(sum(w))} ({gb(w[0])} + {gb(w[1])} + {gb(w[2])}) | "
                  f"{gb(s)} |")
    print(f"\nCUDA context and the rest of the process (H200 measurement less the derived weights and session): bf16 run "
          f"{gb(ctx['bf16'])} GB, int8 run {gb(ctx['int8'])} GB; taken as {gb(max(ctx.values()))} GB below")
    print(f"Margin for the OS and other programs (ASSUMED): {gb(MARGIN)} GB\n")
    c = max(ctx.values())
    print("| module | " + " | ".join(f"{n} {p} ({gb(t + c + MARGIN)} GB)" for n, p, t in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for name, ram in JETSONS:
        print(f"| {name} | " + " | ".join("fits" if t + c + MARGIN <= ram * 1e9 else "does not fit" for _, _, t in rows)
              + " |")
    big = max(2 * r * c for r, c, _ in tensors(0))
    print(f"\nLoading an Orbax checkpoint stored in bf16: at most the decoded tensors ({gb(2 * params(0))} GB for π0, "
          f"{gb(2 * params(1))} GB for π0.5) plus one slab of the store ({gb(max(SLAB, big))} GB: the token embedding) "
          "at once, beside the context, before the decoded pages are released")


if __name__ == "__main__":
    main()
