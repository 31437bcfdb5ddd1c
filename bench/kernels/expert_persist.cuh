// expert_persist.cuh — kernel lab (included by denoise_chain.cu): all layers of the action expert in one
// denoise step at B = 1 as one persistent kernel, the same math as model.c's expert_layers (backend.h
// pi0_expert_step), which the lab checks it against. RESULT (H100, 2026-11-22 session 4): correct, but
// 52.9 us per layer against 35.5 for the production chain of five kernels; not used by libpi0 (see
// bench/RESULTS.md for the phase profile and why).
// Idea: at M = 11 rows a layer is 34.6 MB of weights, 10.5 us of DRAM time, but as five kernels it takes
// 35 us: every launch pays its ramp and its drain, and the next product's weights only start to stream
// when its kernel starts. Here one block per SM streams its share of every product of every layer through
// a ring of shared-memory stages, and the math follows behind in phases separated by grid barriers.
// Layout: 9 warps per block. Warp 8 (the producer) walks the block's weight tiles in consumption order
// and issues one bulk copy (TMA) per 2 KB row into the next free stage (8 rows x 1024 columns, full /
// empty mbarriers per stage). Warps 0-7 (the consumers) run the phases of each layer:
//   1. q|k|v: RMSNorm / adaRMS of s in the prologue (every block holds whole rows: K = 1024), the product
//      on mma.m16n8k16 as in gemv.cu (X rows g, g + 8 in registers, 8 k per lane, the weight rows from
//      the stage), RoPE, q to q, k and v into the cache rows after the prefix.        | grid barrier
//   2. attention, flash-decoding: unit (head, chunk of 64 keys); partial (m, l, O) to global scratch.
//                                                                                    | grid barrier
//   3. merge of the chunks into att (bf16).                                          | grid barrier
//   4. o + residual (π0.5: gated by the norm's gate) into s.                         | grid barrier
//   5. gate|up with the MLP norm in the prologue, gelu(gate) * up into g.            | grid barrier
//   6. down + residual into s.                                                       | grid barrier
// Work split: tiles of 8 output rows (o, down: 128 tiles; q|k|v, gate|up: units of rows n and n + P
// together, P = hd / 2 or F, as gemv.cu's pair epilogues), unit i to block i mod gridDim. Every result is
// reduced in a fixed order (deterministic). Data written inside the kernel is read through L2 only
// (ld.global.cg, cp.async.cg): L1 is not coherent across SMs.
// Grid barrier: one arrival counter for the whole launch, reset by the last block to finish; the launch is
// cooperative, so all blocks are resident.
// Shapes: expert width 1024, head dim 256, one K/V head, heads x 256 and F multiples of 1024, M <= 16
// suffix rows, B = 1 (the suffix keys at the end of the cache: attn.tail == M); anything else returns 0.
#pragma once
#include <math.h>
#include <string.h>

#include "../../src/cuda/common.cuh"
#include "../../src/cuda/mma.cuh"

enum {
    XK = 1024,                 // columns of a stage (= the expert width)
    XLDS = XK * 2 + 64,        // bytes per weight row in shared memory (padding: conflict-free 16-byte reads)
    XSLOT = 8 * XLDS,          // one stage: 8 weight rows
    XNS = 10,                  // stages in the ring
    XCW = 8,                   // consumer warps
    XCT = XCW * 32,            // consumer threads
    XTHREADS = XCT + 32,
    XHD = 256,                 // head dim
    XCH = 64,                  // keys per attention unit
    XVLD = XHD + 8,            // V row stride in shared memory (elements)
    XPLD = XCH + 8,            // P row stride (elements)
    XMAXL = 24,                // most layers per launch
    XMAXU = 256,               // most attention units (heads x key chunks)
    XMAXCH = 16,               // most key chunks per head (1024 keys; the merge holds one per lane in registers)
};
// shared memory: ring | scratch (reduction of the 8 warps' partial sums, or the attention unit's V, P and
// row statistics) | norm partial sums | mbarriers
enum {
    XS_RED = XNS * XSLOT,
    XS_SCR = XCH * XVLD * 2 + 16 * XPLD * 2 + 2 * XCW * 16 * 4,
    XS_NSS = XS_RED + XS_SCR,
    XS_BAR = XS_NSS + XCW * 16 * 4,
    XSMEM = XS_BAR + 2 * XNS * 8,
};
static_assert(XCW * 2 * 4 * 32 * 4 <= XS_SCR, "reduction fits the scratch");
static_assert(XCT == 256, "cbar() names 256 threads");

struct xlayer {
    const bf16 *wqkv, *wo, *wgu, *wd;   // q|k|v (heads x 256 + 512, 1024), o (1024, heads x 256), gate|up (2F, 1024), down (1024, F)
    const float *na[2], *nb[2];         // norm 0 (attention), 1 (MLP): factor 1 + na[k], shift nb[k] (NULL: none)
    const float *gate[2];               // π0.5: residual gate per column (NULL: plain add)
    bf16 *kc, *vc;                      // cache: rows [0, n1), the last M of them this step's suffix keys
};

struct xargs {
    xlayer L[XMAXL];
    int depth, M, heads, F, n1, block0, nch;
    float scale, eps;
    bf16 *s, *q, *att, *g;              // residual (M, 1024); q (M, heads x 256); att (M, heads x 256); g (M, F)
    float *part;                        // [XMAXU][16][256] partial O, then [XMAXU][32] (m, l)
    unsigned *bar;                      // [2]: barrier arrivals, blocks done (both 0 between launches)
    long long *prof;                    // NULL, or clock64() per block, layer, phase: work done, barrier passed (lab)
    int mode;                           // 0: the step; 1: only stream the weights (consumers wait for and release
                                        // every stage, nothing else); 2: the step without grid barriers (wrong results)
    const int32_t *pos;                 // RoPE positions of the M rows
};

__device__ __forceinline__ void cbar() { asm volatile("bar.sync 1, 256;" ::: "memory"); }   // the XCT consumers only

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// All consumer threads of all blocks: everything written before is visible to everything read after.
// bar[0] counts arrivals over the whole launch (barrier k completes at (k + 1) x gridDim.x); the arrival is a
// release reduction (no round trip), the wait one acquire load per poll.
__device__ void grid_sync(unsigned *bar, unsigned k) {
    cbar();
    if (threadIdx.x == 0) {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(bar) : "memory");
        const unsigned target = (k + 1) * gridDim.x;
        while (ld_acquire(bar) < target) {}
    }
    cbar();
}

// After the last barrier: the last block out resets the counters for the next launch (stream-ordered).
__device__ void grid_reset(unsigned *bar) {
    if (threadIdx.x == 0 && atomicAdd(bar + 1, 1u) == gridDim.x - 1) {
        bar[0] = 0;
        bar[1] = 0;
        __threadfence();
    }
}

__device__ __forceinline__ int cdiv_dev(int a, int b) { return a > 0 ? (a + b - 1) / b : 0; }   // items i = b0, b0 + G, ... below a

__device__ __forceinline__ uint4 ldcg16(const bf16 *p) { return __ldcg((const uint4 *)p); }

// X rows g and g + 8 (zero past M), this lane's 4 x 8 columns at col0 + 32 u.
__device__ __forceinline__ void load_x(uint4 (&xv)[4][2], const bf16 *x, int ldx, int M, int g, int col0) {
    const uint4 z = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 4; u++) {
        xv[u][0] = g < M ? ldcg16(x + (size_t)g * ldx + col0 + 32 * u) : z;
        xv[u][1] = g + 8 < M ? ldcg16(x + (size_t)(g + 8) * ldx + col0 + 32 * u) : z;
    }
}

// RMSNorm / adaRMS of the rows in xv (each block holds whole rows of 1024): x rsqrt(mean(x^2) + eps) (1 + a) + b.
__device__ void norm_x(uint4 (&xv)[4][2], const float *na, const float *nb, int M, float eps, float *nss, int g, int c,
                       int warp, int kw) {
#pragma unroll
    for (int u = 0; u < 4; u++) {   // the factors (constants) to L1 now, read after the row sums
        asm volatile("prefetch.global.L1 [%0];" ::"l"(na + kw + 32 * u));
        if (nb) asm volatile("prefetch.global.L1 [%0];" ::"l"(nb + kw + 32 * u));
    }
    float s0, s1;
    quad_sumsq(xv, s0, s1);
    if (c == 0) { nss[warp * 16 + g] = s0; nss[warp * 16 + g + 8] = s1; }
    cbar();
    s0 = s1 = 0;
#pragma unroll
    for (int w = 0; w < XCW; w++) { s0 += nss[w * 16 + g]; s1 += nss[w * 16 + g + 8]; }
    cbar();   // nss may be rewritten by the next norm
    const bool ok0 = g < M, ok1 = g + 8 < M;
    const float r0 = ok0 ? rsqrtf(s0 / XK + eps) : 0.0f, r1 = ok1 ? rsqrtf(s1 / XK + eps) : 0.0f;
#pragma unroll
    for (int u = 0; u < 4; u++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int k = kw + 32 * u + 4 * h;
            float4 pa = __ldg((const float4 *)(na + k));
            float4 pb = nb ? __ldg((const float4 *)(nb + k)) : make_float4(0, 0, 0, 0);
            float fa[4] = {1.0f + pa.x, 1.0f + pa.y, 1.0f + pa.z, 1.0f + pa.w}, fb[4] = {pb.x, pb.y, pb.z, pb.w};
#pragma unroll
            for (int e = 0; e < 2; e++) {   // bf16 pair 2h + e of the uint4 = columns k + 2e, k + 2e + 1
                const int hh = 2 * h + e;
                float2 f0 = bf2_to_f2(u4_get(xv[u][0], hh)), f1 = bf2_to_f2(u4_get(xv[u][1], hh));
                float a0 = fa[2 * e], a1 = fa[2 * e + 1], b0 = fb[2 * e], b1 = fb[2 * e + 1];
                u4_set(xv[u][0], hh, f2_to_bf2(f0.x * r0 * a0 + (ok0 ? b0 : 0.0f), f0.y * r0 * a1 + (ok0 ? b1 : 0.0f)));
                u4_set(xv[u][1], hh, f2_to_bf2(f1.x * r1 * a0 + (ok1 ? b0 : 0.0f), f1.y * r1 * a1 + (ok1 ? b1 : 0.0f)));
            }
        }
}

// The consumers' view of the ring: stage `it` is in slot it % XNS, filled for the (it / XNS)-th time.
struct ring {
    unsigned char *base;
    uint64_t *full, *empty;
    unsigned it;
    __device__ const unsigned char *wait() {
        mbar_wait(&full[it % XNS], (it / XNS) & 1);
        return base + (it % XNS) * XSLOT;
    }
    __device__ void release(int lane) {   // this warp is done reading the stage
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[it % XNS]);
        it++;
    }
};

// acc += X . W^T for this warp's 128 columns of the stage (8 weight rows): rows g, g + 8 of the 16.
__device__ __forceinline__ void stage_mma(float (&acc)[4], const unsigned char *W, const uint4 (&xv)[4][2], int g, int kw) {
#pragma unroll
    for (int u = 0; u < 4; u++) {
        uint4 w = *(const uint4 *)(W + g * XLDS + (kw + 32 * u) * 2);
        mma_bf16(acc, xv[u][0].x, xv[u][1].x, xv[u][0].y, xv[u][1].y, w.x, w.y);
        mma_bf16(acc, xv[u][0].z, xv[u][1].z, xv[u][0].w, xv[u][1].w, w.z, w.w);
    }
}

// Sum of the 8 warps' fragments: value (t, m, j) of output row m, column j < 8 of tile t. red is [XCW][2][4][32].
__device__ __forceinline__ void put_frags(float *red, const float (&acc)[2][4], int T, int warp, int lane) {
    for (int t = 0; t < T; t++)
#pragma unroll
        for (int i = 0; i < 4; i++) red[((warp * 2 + t) * 4 + i) * 32 + lane] = acc[t][i];
}
__device__ __forceinline__ float frag_sum(const float *red, int t, int m, int j) {
    const int i = (m >> 3) * 2 + (j & 1), ln = (m & 7) * 4 + (j >> 1);
    float s = 0;
#pragma unroll
    for (int w = 0; w < XCW; w++) s += red[((w * 2 + t) * 4 + i) * 32 + ln];
    return s;
}

// s[m][n] = old + v (π0), or old + gate[n] * bf16(v) (π0.5: the product rounded as the unfused path stores it);
// old was read before the product (off the critical path).
__device__ __forceinline__ void residual(bf16 *s, int m, int n, float old, float v, const float *gate) {
    s[(size_t)m * XK + n] = __float2bfloat16(gate ? old + gate[n] * __bfloat162float(__float2bfloat16(v)) : old + v);
}
__device__ __forceinline__ float residual_old(const bf16 *s, int t, int M) {   // this thread's (m, n) of tile t
    const int tid = threadIdx.x;
    return tid < M * 8 ? __bfloat162float(__ldcg(s + (size_t)(tid >> 3) * XK + 8 * t + (tid & 7))) : 0.0f;
}

// A consumer thread's indices: lane (g, c) of warp `warp`, columns kw + 32 u of a 1024-column chunk.
struct xctx {
    int tid, lane, warp, g, c, kw, b, G;
    unsigned char *sm;
};

// Phases 1 and 5: the norm of s in the prologue, then units of 16 weight rows (rows n and n + P of a pair) with
// the pair epilogue: q|k|v (P = 128, RoPE; k, v into the cache rows after the prefix) or gelu(gate) * up (P = F).
template <bool QKV>
__device__ __noinline__ void ph_pairs(const xargs &a, const xlayer &L, ring &R, const xctx &x) {
    const int M = a.M, QW = a.heads * XHD, units = QKV ? (QW + 2 * XHD) / 16 : a.F / 8;
    if (x.b >= units) return;
    float *red = (float *)(x.sm + XS_RED);
    uint4 xv[4][2];
    load_x(xv, a.s, XK, M, x.g, x.kw);
    norm_x(xv, L.na[QKV ? 0 : 1], L.nb[QKV ? 0 : 1], M, a.eps, (float *)(x.sm + XS_NSS), x.g, x.c, x.warp, x.kw);
    for (int u = x.b; u < units; u += x.G) {
        float acc[2][4] = {};
        for (int t = 0; t < 2; t++) {
            stage_mma(acc[t], R.wait(), xv, x.g, x.kw);
            R.release(x.lane);
        }
        put_frags(red, acc, 2, x.warp, x.lane);
        cbar();
        if (x.tid < M * 8) {
            const int m = x.tid >> 3, j = x.tid & 7;
            float x1 = frag_sum(red, 0, m, j), x2 = frag_sum(red, 1, m, j);
            if (!QKV) {
                a.g[(size_t)m * a.F + 8 * u + j] = __float2bfloat16(gelu_tanh(x1) * x2);
            } else {
                const int col = (u / 16) * XHD + 8 * (u % 16) + j, nvis = a.n1 - M;   // first half of a head
                bf16 *dst;
                if (col < QW + XHD) {
                    dst = col < QW ? a.q + (size_t)m * QW + col : L.kc + (size_t)(nvis + m) * XHD + col - QW;
                    const int i = col % XHD;   // same angle as gemv.cu / rope_kernel (spec 3.7)
                    float inv = (float)pow(10000.0, -2.0 * i / XHD), th = (float)a.pos[m] * inv, cs, sn;
                    sincosf(th, &sn, &cs);
                    float y1 = x1 * cs - x2 * sn, y2 = x2 * cs + x1 * sn;
                    x1 = y1;
                    x2 = y2;
                } else {
                    dst = L.vc + (size_t)(nvis + m) * XHD + col - QW - XHD;
                }
                dst[0] = __float2bfloat16(x1);
                dst[XHD / 2] = __float2bfloat16(x2);
            }
        }
        cbar();
    }
}

// Phases 4 and 6: s += X . W^T (X = att, K = heads x 256, or g, K = F), tiles of 8 output columns, the next
// chunk of X loaded while the current one multiplies.
__device__ __noinline__ void ph_rows(const xargs &a, ring &R, const xctx &x, const bf16 *X, int K, const float *gate) {
    const int M = a.M;
    float *red = (float *)(x.sm + XS_RED);
    for (int t = x.b; t < XK / 8; t += x.G) {
        float acc[2][4] = {};
        uint4 xv[4][2], xn[4][2];
        load_x(xv, X, K, M, x.g, x.kw);
        const float old = residual_old(a.s, t, M);
        for (int kc = 0; kc < K; kc += XK) {
            if (kc + XK < K) load_x(xn, X, K, M, x.g, kc + XK + x.kw);
            stage_mma(acc[0], R.wait(), xv, x.g, x.kw);
            R.release(x.lane);
            if (kc + XK < K)
#pragma unroll
                for (int u = 0; u < 4; u++) { xv[u][0] = xn[u][0]; xv[u][1] = xn[u][1]; }
        }
        put_frags(red, acc, 1, x.warp, x.lane);
        cbar();
        if (x.tid < M * 8) residual(a.s, x.tid >> 3, 8 * t + (x.tid & 7), old, frag_sum(red, 0, x.tid >> 3, x.tid & 7), gate);
        cbar();
    }
}

// Phase 2: attention unit u = (head h, key chunk) against keys [64 chunk, 64 chunk + 64): partial O, m, l.
__device__ __noinline__ void ph_attention(const xargs &a, const xlayer &L, const xctx &x) {
    const int M = a.M, QW = a.heads * XHD, nvis = a.n1 - M, lane = x.lane, warp = x.warp, g = x.g, c = x.c;
    float *ml = a.part + (size_t)XMAXU * 16 * XHD;
    bf16 *Vs = (bf16 *)(x.sm + XS_RED), *Ps = Vs + XCH * XVLD;
    float *rmax = (float *)(Ps + 16 * XPLD), *rsum = rmax + XCW * 16;
    for (int u = x.b; u < a.heads * a.nch; u += x.G) {
        const int h = u / a.nch, t0 = (u % a.nch) * XCH;
        for (int i = x.tid; i < XCH * (XHD / 8); i += XCT) {
            const int row = i / (XHD / 8), col = (i % (XHD / 8)) * 8, t = t0 + row;
            bf16 *d = Vs + row * XVLD + col;
            if (t < a.n1) cp_async16(d, L.vc + (size_t)t * XHD + col);
            else *(uint4 *)d = make_uint4(0, 0, 0, 0);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
        // S = Q K^T: warp w takes keys t0 + 8w .. + 7 (the 16-byte-per-lane order of gemv.cu, over 256 dims)
        const int key = t0 + 8 * warp + g;
        float sc[4] = {0, 0, 0, 0};
        {
            uint4 kf[8], q0[8], q1[8];   // all loads first: one L2 round trip
            const uint4 z = make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int u2 = 0; u2 < 8; u2++) {
                const int d = 8 * c + 32 * u2;
                kf[u2] = key < a.n1 ? ldcg16(L.kc + (size_t)key * XHD + d) : z;
                q0[u2] = g < M ? ldcg16(a.q + (size_t)g * QW + h * XHD + d) : z;
                q1[u2] = g + 8 < M ? ldcg16(a.q + (size_t)(g + 8) * QW + h * XHD + d) : z;
            }
#pragma unroll
            for (int u2 = 0; u2 < 8; u2++) {
                mma_bf16(sc, q0[u2].x, q1[u2].x, q0[u2].y, q1[u2].y, kf[u2].x, kf[u2].y);
                mma_bf16(sc, q0[u2].z, q1[u2].z, q0[u2].w, q1[u2].w, kf[u2].z, kf[u2].w);
            }
        }
        // mask (backend.h tail rule), scale; fragment i: row g (+8 for i >= 2), key 8w + 2c + (i & 1)
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int j = g + (i >= 2 ? 8 : 0), t = t0 + 8 * warp + 2 * c + (i & 1);
            const bool seen = j < M && t < a.n1 && (t < nvis || t - nvis < (j < a.block0 ? a.block0 : M));
            sc[i] = seen ? sc[i] * a.scale : -INFINITY;
            mx[i >> 1] = fmaxf(mx[i >> 1], sc[i]);
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        }
        if (c == 0) { rmax[warp * 16 + g] = mx[0]; rmax[warp * 16 + g + 8] = mx[1]; }
        cbar();
        float rm[2] = {-INFINITY, -INFINITY}, sm[2] = {0, 0};
#pragma unroll
        for (int w = 0; w < XCW; w++) { rm[0] = fmaxf(rm[0], rmax[w * 16 + g]); rm[1] = fmaxf(rm[1], rmax[w * 16 + g + 8]); }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int r = i >> 1, col = 8 * warp + 2 * c + (i & 1);
            float e = rm[r] == -INFINITY ? 0.0f : expf(sc[i] - rm[r]);
            sm[r] += e;
            Ps[(g + 8 * r) * XPLD + col] = __float2bfloat16(e);
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            sm[r] += __shfl_xor_sync(0xffffffffu, sm[r], 1);
            sm[r] += __shfl_xor_sync(0xffffffffu, sm[r], 2);
        }
        if (c == 0) { rsum[warp * 16 + g] = sm[0]; rsum[warp * 16 + g + 8] = sm[1]; }
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        cbar();
        // O = P V: warp w takes dims [32 w, 32 w + 32)
        float o[4][4] = {};
#pragma unroll
        for (int kk = 0; kk < XCH / 16; kk++) {
            uint32_t pa[4], vb[4];
            ldsm_x4(pa, Ps + (lane & 15) * XPLD + kk * 16 + (lane >> 4) * 8);
            const int mi = lane >> 3;
#pragma unroll
            for (int d16 = 0; d16 < 2; d16++) {
                ldsm_x4_t(vb, Vs + (kk * 16 + (mi & 1) * 8 + (lane & 7)) * XVLD + warp * 32 + d16 * 16 + (mi >> 1) * 8);
                mma16816(o[2 * d16], pa, vb[0], vb[1]);
                mma16816(o[2 * d16 + 1], pa, vb[2], vb[3]);
            }
        }
        float *po = a.part + (size_t)u * 16 * XHD;
#pragma unroll
        for (int n = 0; n < 4; n++) {
            const int col = warp * 32 + n * 8 + 2 * c;
            if (g < M) *(float2 *)(po + g * XHD + col) = make_float2(o[n][0], o[n][1]);
            if (g + 8 < M) *(float2 *)(po + (g + 8) * XHD + col) = make_float2(o[n][2], o[n][3]);
        }
        if (x.tid < 16) {
            float l = 0, m = -INFINITY;
            for (int w = 0; w < XCW; w++) { l += rsum[w * 16 + x.tid]; m = fmaxf(m, rmax[w * 16 + x.tid]); }
            ml[u * 32 + x.tid] = m;
            ml[u * 32 + 16 + x.tid] = l;
        }
        cbar();   // Vs, Ps, rmax, rsum are reused by the next unit
    }
}

// Phase 3: att[j][h 256 + d] = sum_x e^(m_x - m) O_x / sum_x e^(m_x - m) l_x; one warp per (j, h), lane x
// holds chunk x's (m, l), 8 dims per lane, half of the chunks' loads in flight at a time.
__device__ __noinline__ void ph_merge(const xargs &a, const xctx &x) {
    const int QW = a.heads * XHD, lane = x.lane;
    const float *ml = a.part + (size_t)XMAXU * 16 * XHD;
    for (int r = x.b * XCW + x.warp; r < a.M * a.heads; r += x.G * XCW) {
        const int j = r / a.heads, h = r % a.heads;
        const float mx = lane < a.nch ? __ldcg(ml + (h * a.nch + lane) * 32 + j) : -INFINITY;
        const float lx = lane < a.nch ? __ldcg(ml + (h * a.nch + lane) * 32 + 16 + j) : 0.0f;
        const float m = warp_max(mx), ex = mx == -INFINITY ? 0.0f : expf(mx - m), inv = 1.0f / warp_sum(ex * lx);
        float o[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
        for (int x0 = 0; x0 < XMAXCH; x0 += XMAXCH / 2) {
            float4 p[XMAXCH / 2][2];
#pragma unroll
            for (int i = 0; i < XMAXCH / 2; i++)
                if (x0 + i < a.nch) {
                    const float4 *src = (const float4 *)(a.part + ((size_t)(h * a.nch + x0 + i) * 16 + j) * XHD + 8 * lane);
                    p[i][0] = __ldcg(src);
                    p[i][1] = __ldcg(src + 1);
                }
#pragma unroll
            for (int i = 0; i < XMAXCH / 2; i++)
                if (x0 + i < a.nch) {
                    const float e = __shfl_sync(0xffffffffu, ex, x0 + i);
                    o[0] += e * p[i][0].x; o[1] += e * p[i][0].y; o[2] += e * p[i][0].z; o[3] += e * p[i][0].w;
                    o[4] += e * p[i][1].x; o[5] += e * p[i][1].y; o[6] += e * p[i][1].z; o[7] += e * p[i][1].w;
                }
        }
        *(uint4 *)(a.att + (size_t)j * QW + h * XHD + 8 * lane) =
            make_uint4(f2_to_bf2(o[0] * inv, o[1] * inv), f2_to_bf2(o[2] * inv, o[3] * inv),
                       f2_to_bf2(o[4] * inv, o[5] * inv), f2_to_bf2(o[6] * inv, o[7] * inv));
    }
}

__global__ void __launch_bounds__(XTHREADS, 1) expert_kernel(const __grid_constant__ xargs a) {
    extern __shared__ __align__(128) unsigned char xsm[];
    uint64_t *full = (uint64_t *)(xsm + XS_BAR), *empty = full + XNS;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, G = gridDim.x, b = blockIdx.x;
    const int QW = a.heads * XHD, F = a.F;
    if (tid == 0) {
        for (int i = 0; i < XNS; i++) { mbar_init(&full[i], 1); mbar_init(&empty[i], XCW); }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();   // the last barrier of all 9 warps: from here on the consumers sync with cbar()

    if (warp == XCW) {   // ---- producer: the block's weight tiles in consumption order ----
        unsigned it = 0;
        auto put = [&](const bf16 *w, int ldw) {   // 8 rows of w (row stride ldw), 1024 columns
            const unsigned slot = it % XNS;
            if (lane == 0) {
                if (it >= XNS) mbar_wait(&empty[slot], (it / XNS - 1) & 1);
                mbar_expect_tx(&full[slot], 8 * XK * 2);
            }
            __syncwarp();
            if (lane < 8) bulk_copy(xsm + slot * XSLOT + lane * XLDS, w + (size_t)lane * ldw, XK * 2, &full[slot]);
            it++;
        };
        for (int l = 0; l < a.depth; l++) {
            const xlayer &L = a.L[l];
            for (int u = b; u < (QW + 2 * XHD) / 16; u += G) {
                const int r0 = (u / 16) * XHD + 8 * (u % 16);
                put(L.wqkv + (size_t)r0 * XK, XK);
                put(L.wqkv + (size_t)(r0 + XHD / 2) * XK, XK);
            }
            for (int t = b; t < XK / 8; t += G)
                for (int kc = 0; kc < QW; kc += XK) put(L.wo + (size_t)8 * t * QW + kc, QW);
            for (int u = b; u < F / 8; u += G) {
                put(L.wgu + (size_t)8 * u * XK, XK);
                put(L.wgu + (size_t)(F + 8 * u) * XK, XK);
            }
            for (int t = b; t < XK / 8; t += G)
                for (int kc = 0; kc < F; kc += XK) put(L.wd + (size_t)8 * t * F + kc, F);
        }
        return;
    }

    // ---- consumers ----
    const xctx x = {tid, lane, warp, lane >> 2, lane & 3, warp * (XK / XCW) + 8 * (lane & 3), b, G, xsm};
    ring R = {xsm, full, empty, 0};
    if (a.mode == 1) {   // the stream alone: this block's stage count per layer, as the producer walks them
        const int n = 2 * cdiv_dev((QW + 2 * XHD) / 16 - b, G) + (QW / XK) * cdiv_dev(XK / 8 - b, G) +
                      2 * cdiv_dev(F / 8 - b, G) + (F / XK) * cdiv_dev(XK / 8 - b, G);
        for (int i = 0; i < n * a.depth; i++) {
            R.wait();
            R.release(lane);
        }
        return;
    }
    for (int l = 0; l < a.depth; l++) {
        auto sync = [&](int phase) {   // end of a phase: the grid barrier (timestamps for the lab)
            long long *pr = a.prof ? a.prof + (((size_t)b * a.depth + l) * 6 + phase) * 2 : NULL;
            if (pr && tid == 0) pr[0] = clock64();
            if (a.mode != 2) grid_sync(a.bar, (unsigned)(l * 6 + phase));
            if (pr && tid == 0) pr[1] = clock64();
        };
        const xlayer &L = a.L[l];
        ph_pairs<true>(a, L, R, x);
        sync(0);
        ph_attention(a, L, x);
        sync(1);
        ph_merge(a, x);
        sync(2);
        ph_rows(a, R, x, a.att, QW, L.gate[0]);
        sync(3);
        ph_pairs<false>(a, L, R, x);
        sync(4);
        ph_rows(a, R, x, a.g, F, L.gate[1]);
        sync(5);
    }
    grid_reset(a.bar);
}

// ---- host side (the lab's; nothing in libpi0 launches this kernel) ----
struct xlab {
    int blocks;          // one per SM; 0 = the device cannot run it
    char *scratch;       // partial attention outputs, then the barrier words (zeroed)
    long long *prof;     // NULL, or timestamps (xargs.prof)
    int mode;            // xargs.mode
};

static size_t xlab_scratch_bytes(void) { return (size_t)XMAXU * (16 * XHD + 32) * 4 + 256; }

static int xlab_init(xlab *x) {
    int dev = 0, coop = 0, nsm = 0, per_sm = 0;
    memset(x, 0, sizeof *x);
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaFuncSetAttribute(expert_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, XSMEM) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, expert_kernel, XTHREADS, XSMEM) != cudaSuccess ||
        !coop || per_sm < 1 || cudaMalloc(&x->scratch, xlab_scratch_bytes()) != cudaSuccess ||
        cudaMemset(x->scratch, 0, xlab_scratch_bytes()) != cudaSuccess)
        return 0;
    x->blocks = nsm;
    return 1;
}

static const float *f32(const pi0_wt *w) { return w->dev32 ? (const float *)w->dev32 : NULL; }

// Launches the kernel for e on stream st; 0 (nothing launched) for shapes it does not cover.
static int xlab_step(const xlab *xl, cudaStream_t st, const pi0_expert_step *e) {
    const pi0_attn *at = &e->attn;
    int n1 = at->nseg == 1 ? at->k_off[1] - at->k_off[0] : 0, nch = cdiv(n1, XCH);
    if (!xl->blocks || at->nseg != 1 || at->tail != e->M || at->k_off[0] != 0 || at->q_off[0] != 0 || at->q_off[1] != e->M ||
        at->kv_heads != 1 || at->head_dim != XHD || at->k2.p || e->D != XK || e->M < 1 || e->M > 16 ||
        (at->heads * XHD) % XK || e->F % XK || e->F < 8 || e->depth < 1 || e->depth > XMAXL || n1 <= e->M ||
        at->heads * nch > XMAXU || nch > XMAXCH || e->kv_tail != (size_t)(n1 - e->M) * XHD || at->block0 < 0 || !e->pos.p)
        return 0;
    xargs a;
    memset(&a, 0, sizeof a);
    for (int l = 0; l < e->depth; l++) {
        const pi0_gemma_layer *L = &e->layers[l];
        const pi0_wt *qkv[3] = {&L->q, &L->k, &L->v}, *gu[2] = {&L->gate, &L->up};
        if (!cuda_adjacent(qkv, 3) || !cuda_adjacent(gu, 2) || L->q.rows != at->heads * XHD || L->k.rows != XHD ||
            L->v.rows != XHD || L->q.cols != XK || L->gate.rows != e->F || L->gate.cols != XK || !L->o.dev ||
            L->o.rows != XK || L->o.cols != at->heads * XHD || !L->down.dev || L->down.rows != XK || L->down.cols != e->F)
            return 0;
        xlayer &x = a.L[l];
        x.wqkv = (const bf16 *)L->q.dev; x.wo = (const bf16 *)L->o.dev; x.wgu = (const bf16 *)L->gate.dev;
        x.wd = (const bf16 *)L->down.dev;
        for (int n = 0; n < 2; n++) {
            if (e->mods) {
                const float *mod = (const float *)e->mods[2 * l + n].p;   // [scale | shift | gate] rows of D
                if (!mod) return 0;
                x.na[n] = mod; x.nb[n] = mod + XK; x.gate[n] = mod + 2 * XK;
            } else {
                x.na[n] = f32(n ? &L->mlp_norm : &L->attn_norm);
                if (!x.na[n]) return 0;
            }
        }
        x.kc = (bf16 *)e->kc[l].p; x.vc = (bf16 *)e->vc[l].p;
        uintptr_t al = (uintptr_t)x.wqkv | (uintptr_t)x.wo | (uintptr_t)x.wgu | (uintptr_t)x.wd | (uintptr_t)x.kc |
                       (uintptr_t)x.vc | (uintptr_t)x.na[0] | (uintptr_t)x.na[1] | (uintptr_t)x.nb[0] | (uintptr_t)x.nb[1];
        if (al & 15) return 0;
    }
    a.depth = e->depth; a.M = e->M; a.heads = at->heads; a.F = e->F; a.n1 = n1; a.block0 = at->block0; a.nch = nch;
    a.scale = at->scale; a.eps = e->eps;
    a.s = (bf16 *)e->s.p; a.q = (bf16 *)e->q.p; a.att = (bf16 *)e->att.p; a.g = (bf16 *)e->g.p;
    a.part = (float *)xl->scratch;
    a.bar = (unsigned *)(xl->scratch + xlab_scratch_bytes() - 256);
    a.pos = (const int32_t *)e->pos.p;
    a.prof = xl->prof;
    a.mode = xl->mode;
    if (((uintptr_t)a.s | (uintptr_t)a.q | (uintptr_t)a.att | (uintptr_t)a.g) & 15) return 0;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    cfg.gridDim = dim3(xl->blocks);
    cfg.blockDim = dim3(XTHREADS);
    cfg.dynamicSmemBytes = XSMEM;
    cfg.stream = st;
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, expert_kernel, a) == cudaSuccess;
}
