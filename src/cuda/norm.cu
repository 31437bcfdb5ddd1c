// norm.cu — LayerNorm (SigLIP), Gemma RMSNorm with (1 + w), and adaRMS (π0.5 expert); docs/model.md 3.4/3.7.
// Statistics in fp32 (two passes for LayerNorm: mean, then the mean squared deviation); bf16 in and out;
// weights fp32 (the store's fp32 copies). CPU twins: cpu_layernorm, cpu_rmsnorm, cpu_adarms. Last, norm_bwd: the transpose of rmsnorm /
// adarms for exact real-time chunking (docs/model.md 3.11; CPU twin cpu_norm_bwd). The norms a product reads first
// are folded into the product where it can (gemv.cu), not run here.
#include "common.cuh"

// Widths D % 8 == 0 up to 32 * 8 * NORM_NC (all of π0's: 1152, 2048, 1024) take one warp per row with the
// row held in registers (16-byte loads, shuffles only; 4 rows a block, so that 768 rows make 192 blocks);
// the factors (weights, or the adaRMS modulation row) are read before the programmatic-launch wait (LayerNorm
// was slower under ncu with them read after the statistics: bench/RESULTS.md L33 and its entry): LayerNorm's into the
// block's shared memory, the others' into registers. Others: one block of 256 threads a row.
// Why: the block-per-row kernel (three passes over global memory, three block-wide reductions) was
// slower for SigLIP's 768 x 1152 and for the expert's 11 rows under ncu on the H100 (bench/RESULTS.md L22).

enum { NORM_LN, NORM_RMS, NORM_ADA };   // LayerNorm (w, b); RMSNorm (1 + w); adaRMS (mod rows)
enum { NORM_NC = 8, NORM_ROWS = 4 };    // 16-byte chunks per lane (D <= 2048); rows (warps) per block

// y = normalised x for the row's mode. mod: the row's [scale | shift | gate] (fp32, 3D) for NORM_ADA.
__device__ __forceinline__ float norm_out(int mode, float xn, int i, const float *w, const float *b, const float *mod,
                                          int D) {
    if (mode == NORM_LN) return xn * w[i] + b[i];
    if (mode == NORM_RMS) return xn * (1.0f + w[i]);
    return xn * (1.0f + mod[i]) + mod[D + i];
}

template <int MODE>
__global__ void __launch_bounds__(32 * NORM_ROWS) norm_warp_kernel(bf16 *y, const bf16 *x, const float *w, const float *b,
                                                                   const float *mod, int rows_per_mod, int M, int D,
                                                                   float eps) {
    extern __shared__ float4 norm_sm[];   // LayerNorm: the block's factors [w | b], D each
    int row = blockIdx.x * NORM_ROWS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    float v[NORM_NC][8], wv[NORM_NC][8], bv[NORM_NC][8], s = 0;
    // the row's factors and shifts are constants (weights, or modulations computed at session create): fetched
    // before the programmatic-launch wait (common.cuh). LayerNorm's weights and shifts go to the block's shared
    // memory (in registers: 228 registers, 8 warps per SM, too few to stream SigLIP at B = 64; bench/RESULTS.md L72);
    // RMSNorm (1 + w only: 164 registers) and adaRMS (rows of one block may take different modulation
    // rows) keep them in registers.
    if (MODE == NORM_LN) {   // all loads first (one round trip), then the stores
        constexpr int NF = NORM_NC * 8 / NORM_ROWS / 4;   // float4 per thread and vector at the widest D
        float4 fw[NF], fb[NF];
        float *f = (float *)norm_sm;
#pragma unroll
        for (int u = 0; u < NF; u++) {
            int i = (u * 32 * NORM_ROWS + threadIdx.x) * 4;
            if (i < D) { fw[u] = __ldg((const float4 *)(w + i)); fb[u] = __ldg((const float4 *)(b + i)); }
        }
#pragma unroll
        for (int u = 0; u < NF; u++) {
            int i = (u * 32 * NORM_ROWS + threadIdx.x) * 4;
            if (i < D) { *(float4 *)(f + i) = fw[u]; *(float4 *)(f + D + i) = fb[u]; }
        }
        __syncthreads();
    } else {
        const float *fa = MODE == NORM_ADA ? mod + (size_t)(row < M ? row / rows_per_mod : 0) * 3 * D : w;
        const float *fb = fa + D;
#pragma unroll
        for (int j = 0; j < NORM_NC; j++) {
            int i = (j * 32 + lane) * 8;
            if (i < D) {
                float4 p = __ldg((const float4 *)(fa + i)), q = __ldg((const float4 *)(fa + i) + 1);
                float t[8] = {p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w};
#pragma unroll
                for (int e = 0; e < 8; e++) wv[j][e] = 1.0f + t[e];
                if (MODE == NORM_RMS) continue;
                p = __ldg((const float4 *)(fb + i)); q = __ldg((const float4 *)(fb + i) + 1);
                float u[8] = {p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w};
#pragma unroll
                for (int e = 0; e < 8; e++) bv[j][e] = u[e];
            }
        }
    }
    pdl_wait();
    pdl_trigger();
    if (row >= M) return;
    const bf16 *xr = x + (size_t)row * D;
#pragma unroll
    for (int j = 0; j < NORM_NC; j++) {
        int i = (j * 32 + lane) * 8;
        if (i < D) {
            ldv<8>(v[j], xr + i);
#pragma unroll
            for (int e = 0; e < 8; e++) s += MODE == NORM_LN ? v[j][e] : v[j][e] * v[j][e];
        }
    }
    s = warp_sum(s);
    float mean = 0, inv;
    if (MODE == NORM_LN) {
        mean = s / D;
        float d2 = 0;
#pragma unroll
        for (int j = 0; j < NORM_NC; j++)
            if ((j * 32 + lane) * 8 < D)
#pragma unroll
                for (int e = 0; e < 8; e++) d2 += (v[j][e] - mean) * (v[j][e] - mean);
        inv = rsqrtf(warp_sum(d2) / D + eps);
    } else {
        inv = rsqrtf(s / D + eps);
    }
    bf16 *yr = y + (size_t)row * D;
#pragma unroll
    for (int j = 0; j < NORM_NC; j++) {
        int i = (j * 32 + lane) * 8;
        if (i < D) {
            if (MODE == NORM_LN) {
                const float *f = (const float *)norm_sm + i;
                float4 p = *(const float4 *)f, q = *(const float4 *)(f + 4);
                float t[8] = {p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w};
#pragma unroll
                for (int e = 0; e < 8; e++) wv[j][e] = t[e];
                p = *(const float4 *)(f + D); q = *(const float4 *)(f + D + 4);
                float u[8] = {p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w};
#pragma unroll
                for (int e = 0; e < 8; e++) bv[j][e] = u[e];
            }
            float o[8];
#pragma unroll
            for (int e = 0; e < 8; e++)   // norm_out with the fetched factors
                o[e] = MODE == NORM_RMS ? v[j][e] * inv * wv[j][e] : (v[j][e] - mean) * inv * wv[j][e] + bv[j][e];
            stv<8>(yr + i, o);
        }
    }
}

// One block of 256 threads per row, for any D.
__global__ void norm_block_kernel(bf16 *y, const bf16 *x, const float *w, const float *b, const float *mod,
                                  int rows_per_mod, int mode, int D, float eps) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    const bf16 *xr = x + (size_t)blockIdx.x * D;
    bf16 *yr = y + (size_t)blockIdx.x * D;
    float s = 0, mean = 0;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float v = __bfloat162float(xr[i]);
        s += mode == NORM_LN ? v : v * v;
    }
    s = block_sum(s);
    if (mode == NORM_LN) {
        mean = s / D;
        float d2 = 0;
        for (int i = threadIdx.x; i < D; i += blockDim.x) {
            float d = __bfloat162float(xr[i]) - mean;
            d2 += d * d;
        }
        s = block_sum(d2);
    }
    float inv = rsqrtf(s / D + eps);
    const float *m = mode == NORM_ADA ? mod + (size_t)(blockIdx.x / rows_per_mod) * 3 * D : NULL;
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        yr[i] = __float2bfloat16(norm_out(mode, (__bfloat162float(xr[i]) - mean) * inv, i, w, b, m, D));
}

static void launch_norm(pi0_backend *be, pt out, pt x, const float *w, const float *b, const float *mod,
                        int rows_per_mod, int mode, int M, int D, float eps) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0) return;
    bf16 *y = (bf16 *)out.p;
    const bf16 *xp = (const bf16 *)x.p;
    const float *fa = mode == NORM_ADA ? mod : w, *fb = mode == NORM_ADA ? mod : b;   // 16-byte factor loads
    if (D % 8 == 0 && D <= 32 * 8 * NORM_NC && aligned16(y) && aligned16(xp) && aligned16(fa) && aligned16(fb))
        cuda_launch(c, mode == NORM_LN ? norm_warp_kernel<NORM_LN> : mode == NORM_RMS ? norm_warp_kernel<NORM_RMS>
                                                                                      : norm_warp_kernel<NORM_ADA>,
                    dim3(cdiv(M, NORM_ROWS)), dim3(32 * NORM_ROWS), (size_t)D * (mode == NORM_LN ? 8 : 0),
                    y, xp, w, b, mod, rows_per_mod, M, D, eps);
    else
        cuda_launch(c, norm_block_kernel, dim3(M), dim3(256), 0, y, xp, w, b, mod, rows_per_mod, mode, D, eps);
}

void cuda_layernorm(pi0_backend *be, pt out, pt x, const pi0_wt *w, const pi0_wt *b, int M, int D, float eps) {
    launch_norm(be, out, x, wf32(CTX(be), w), wf32(CTX(be), b), NULL, 1, NORM_LN, M, D, eps);
}

void cuda_rmsnorm(pi0_backend *be, pt out, pt x, const pi0_wt *w, int M, int D, float eps) {
    launch_norm(be, out, x, wf32(CTX(be), w), NULL, NULL, 1, NORM_RMS, M, D, eps);
}

void cuda_adarms(pi0_backend *be, pt out, pt x, pt mod, int rows_per_mod, int M, int D, float eps) {
    launch_norm(be, out, x, NULL, NULL, (const float *)mod.p, rows_per_mod, NORM_ADA, M, D, eps);
}

// ---- norm_bwd: one warp per row where D <= 1024 and D % 8 == 0 (the row in registers, 16-byte accesses, the factors
// (constants) fetched before the programmatic-launch wait), else one block of 256 threads per row; both row sums in
// fp32, then the row. The block form was slower per call at 51 rows x 1024 under ncu (bench/RESULTS.md L139). ----

enum { NB_ROWS = 4, NB_NC = 4 };   // rows (warps) per block; 8-element chunks per lane: D <= 32 * 8 * NB_NC
__global__ void __launch_bounds__(32 * NB_ROWS) norm_bwd_warp_kernel(bf16 *dx, const bf16 *dy, const bf16 *x,
                                                                     const float *w, const float *mod, int rows_per_mod,
                                                                     int M, int D, float eps, int add) {
    int row = blockIdx.x * NB_ROWS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    const float *a = w ? w : mod + (size_t)(row < M ? row / rows_per_mod : 0) * 3 * D;   // the scale part: 1 + a[i]
    float av[NB_NC][8], xv[NB_NC][8], gv[NB_NC][8], ov[NB_NC][8];
#pragma unroll
    for (int j = 0; j < NB_NC; j++) {
        int i = (j * 32 + lane) * 8;
        if (i >= D) continue;
        float4 p = __ldg((const float4 *)(a + i)), q = __ldg((const float4 *)(a + i) + 1);
        float t[8] = {p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w};
#pragma unroll
        for (int e = 0; e < 8; e++) av[j][e] = t[e];
    }
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    if (row >= M) return;
    size_t off = (size_t)row * D;
    float ss = 0, dot = 0;
#pragma unroll
    for (int j = 0; j < NB_NC; j++) {
        int i = (j * 32 + lane) * 8;
        if (i >= D) continue;
        ldv<8>(xv[j], x + off + i);
        ldv<8>(gv[j], dy + off + i);
        if (add) ldv<8>(ov[j], dx + off + i);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            ss += xv[j][e] * xv[j][e];
            dot += (1.0f + av[j][e]) * gv[j][e] * xv[j][e];
        }
    }
    ss = warp_sum(ss);
    dot = warp_sum(dot);
    float r = 1.0f / sqrtf(ss / D + eps), cf = r * r * r / D * dot;
#pragma unroll
    for (int j = 0; j < NB_NC; j++) {
        int i = (j * 32 + lane) * 8;
        if (i >= D) continue;
        float v[8];
#pragma unroll
        for (int e = 0; e < 8; e++) {
            v[e] = r * (1.0f + av[j][e]) * gv[j][e] - xv[j][e] * cf;
            if (add) v[e] += ov[j][e];
        }
        stv<8>(dx + off + i, v);
    }
}


__global__ void __launch_bounds__(256) norm_bwd_kernel(bf16 *dx, const bf16 *dy, const bf16 *x, const float *w,
                                                       const float *mod, int rows_per_mod, int D, float eps, int add) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    size_t off = (size_t)blockIdx.x * D;
    const float *a = w ? w : mod + (size_t)(blockIdx.x / rows_per_mod) * 3 * D;   // the scale part: a = 1 + a[i]
    float ss = 0, dot = 0;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float xv = __bfloat162float(x[off + i]);
        ss += xv * xv;
        dot += (1.0f + a[i]) * __bfloat162float(dy[off + i]) * xv;
    }
    ss = block_sum(ss);
    dot = block_sum(dot);
    float r = 1.0f / sqrtf(ss / D + eps), cf = r * r * r / D * dot;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float v = r * (1.0f + a[i]) * __bfloat162float(dy[off + i]) - __bfloat162float(x[off + i]) * cf;
        dx[off + i] = __float2bfloat16(add ? __bfloat162float(dx[off + i]) + v : v);
    }
}

void cuda_norm_bwd(pi0_backend *be, pt dx, pt dy, pt x, const pi0_wt *w, pt mod, int rows_per_mod, int M, int D,
                   float eps, enum pi0_epi epi) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0) return;
    const float *wp = wf32(c, w), *mp = (const float *)mod.p;
    if (D % 8 == 0 && D <= 32 * 8 * NB_NC && aligned16(dx.p) && aligned16(dy.p) && aligned16(x.p) &&
        aligned16(w ? (const void *)wp : (const void *)mp))
        cuda_launch(c, norm_bwd_warp_kernel, dim3(cdiv(M, NB_ROWS)), dim3(32 * NB_ROWS), 0, (bf16 *)dx.p,
                    (const bf16 *)dy.p, (const bf16 *)x.p, wp, mp, rows_per_mod, M, D, eps, (int)(epi == EPI_ADD));
    else
        cuda_launch(c, norm_bwd_kernel, dim3(M), dim3(256), 0, (bf16 *)dx.p, (const bf16 *)dy.p, (const bf16 *)x.p, wp, mp,
                    rows_per_mod, D, eps, (int)(epi == EPI_ADD));
}
