#!/usr/bin/env python3
"""What FP8 products would give the vision and prefill stages (issue 5's FP8 lead; bench/RESULTS.md L123).

Times the matrix products of pi0-3cam's vision and prefill stages (shapes from docs/model.md: SigLIP So400m
27 layers at 256 tokens per camera, the projector, Gemma 2B 18 layers at prefix 788; gate|up fused) through
cuBLAS(Lt) as torch calls them: bf16 `torch.mm` against FP8 e4m3 `torch._scaled_mm` with a scale per row of X and
per weight row, bf16 out. Each stage's products run as one CUDA graph over separate weights per layer (so the
weight reads are real DRAM reads), random normal data; the graph is replayed R times, alternating bf16 and FP8,
and the median is printed. Only the products: norms, attention, epilogues and the activation quantisation an FP8
pipeline needs are not in these times. Also prints each shape's error against an fp32 product of the same
operands (rel L2), to show the size of FP8's rounding next to bf16's on random data (real checkpoints differ).

usage: python3 bench/fp8_probe.py [B ...]   (default: 1 64; 0: the errors only)
"""
import statistics
import sys

import torch

VISION = [("siglip qkv", 3456, 1152), ("siglip o", 1152, 1152), ("siglip fc1", 4304, 1152), ("siglip fc2", 1152, 4304)]
PREFILL = [("prefix qkv", 2560, 2048), ("prefix o", 2048, 2048), ("prefix gate|up", 32768, 2048),
           ("prefix down", 2048, 16384)]
E4M3_MAX = 448.0


def quant_rows(t):
    """e4m3 rows of t with one fp32 scale per row (amax / 448)."""
    s = t.float().abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / E4M3_MAX
    return (t.float() / s).to(torch.float8_e4m3fn), s


def stage(B, layers, shapes, rows, extra=()):
    """[(name, M, N, K)] of one stage in launch order."""
    seq = []
    for l in range(layers):
        for name, n, k in shapes:
            if name.endswith(("o", "gate|up", "down")) and name.startswith("prefix") and l == layers - 1:
                continue   # the last prefix layer stops after K/V (docs/model.md 3.3)
            seq.append((name, B * rows, n, k))
    return seq + [(n, B * rows, nn, k) for n, nn, k in extra]


def build(seq, mode):
    """A CUDA graph running seq's products on separate weights; returns (graph, keepalive)."""
    keep, xs, ys = [], {}, {}
    for name, m, n, k in seq:
        if (m, k) not in xs:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            xs[(m, k)] = quant_rows(x) if mode != "bf16" else x
    ops = []
    for name, m, n, k in seq:
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        y = ys.setdefault((m, n), torch.empty(m, n, device="cuda", dtype=torch.bfloat16))   # outputs shared
        if mode != "bf16":
            wq, ws = quant_rows(w)
            ws = ws.t().contiguous()
            xq, xs_ = xs[(m, k)]
            ops.append(lambda xq=xq, xs_=xs_, wq=wq, ws=ws, f=mode == "fp8fast": torch._scaled_mm(
                xq, wq.t(), scale_a=xs_, scale_b=ws, out_dtype=torch.bfloat16, use_fast_accum=f))
            keep += [wq, ws]
        else:
            x = xs[(m, k)]
            ops.append(lambda x=x, w=w, y=y: torch.mm(x, w.t(), out=y))
            keep.append(w)
        del w
    keep += [xs, ys]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for op in ops:   # warm-up: cuBLAS picks its kernels and workspaces outside the capture
            op()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for op in ops:
            op()
    return g, keep


def time_graph(g):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    g.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b)


def errors(m, n, k, outliers):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    if outliers:   # 1% of the columns 30x larger, as activations' outlier channels are
        x[:, torch.randperm(k, device="cuda")[: k // 100]] *= 30
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    ref = x.float() @ w.float().t()
    xq, xs = quant_rows(x)
    wq, ws = quant_rows(w)
    f8 = torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws.t().contiguous(), out_dtype=torch.bfloat16).float()
    f8f = torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws.t().contiguous(), out_dtype=torch.bfloat16,
                           use_fast_accum=True).float()
    w8a16 = x.float() @ (wq.float() * ws).bfloat16().float().t()   # FP8 weights, bf16 activations
    bf = (x @ w.t()).float()
    rel = lambda y: ((y - ref).norm() / ref.norm()).item()
    q8 = ((xq.float() * xs) @ (wq.float() * ws).t())   # the same fp8 operands in fp32: the accumulation's share
    return rel(bf), rel(f8), rel(f8f), rel(q8), rel(w8a16)


def main():
    batches = [b for b in (int(a) for a in sys.argv[1:]) if b > 0] if sys.argv[1:] else [1, 64]
    torch.manual_seed(0)
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    for B in batches:
        reps = 15 if B == 1 else 3
        stages = {"vision": stage(B, 27, VISION, 768, extra=[("projector", 2048, 1152)]),
                  "prefill": stage(B, 18, PREFILL, 788)}
        for sname, seq in stages.items():
            flops = sum(2.0 * m * n * k for _, m, n, k in seq)
            modes, times = ("bf16", "fp8", "fp8fast"), {}
            for mode in modes:
                g, keep = build(seq, mode)
                time_graph(g)
                times[mode] = (g, keep, [])
            for r in range(reps):
                for mode in (modes if r % 2 == 0 else modes[::-1]):
                    times[mode][2].append(time_graph(times[mode][0]))
            med = {mode: statistics.median(times[mode][2]) for mode in modes}
            print(f"B={B} {sname}: {len(seq)} products, {flops / 1e12:.3f} TFLOP; " + "; ".join(
                f"{mode} {med[mode]:.3f} ms ({flops / med[mode] / 1e9:.0f} TFLOP/s, x{med[mode] / med['bf16']:.3f}, "
                f"runs {[round(t, 3) for t in times[mode][2]]})" for mode in modes), flush=True)
            del times
            torch.cuda.empty_cache()
    print("rel L2 against fp32 (random normal X, W / sqrt(K)): bf16 product | fp8 x fp8 (row scales) | the same, fast "
          "accumulation | the fp8 operands multiplied in fp32 | fp8 W, bf16 X")
    for outliers in (False, True):
        print("X with 1% of its columns x 30:" if outliers else "X plain normal:")
        for name, n, k in VISION + PREFILL:
            m = 788 if name.startswith("prefix") else 768
            print(f"  {name} {m}x{n}x{k}: " + " | ".join(f"{e:.2e}" for e in errors(m, n, k, outliers)))


if __name__ == "__main__":
    main()
