// expert_persist.cuh — kernel lab (included by denoise_chain.cu): all layers of the action expert in one
// denoise step at B = 1 as one persistent kernel, the same math as model.c's expert_layers (backend.h
// pi0_expert_step), which the lab checks it against. Not used by libpi0.
// RESULT (H100, 2026-11-23, bench/RESULTS.md L69): correct (rel L2 1.5e-3 after one layer, 1.2e-2 after 18
// against the production chain), but 35.4-37.5 us per layer against 25.9 for the production chain of five
// kernels. Without any weight traffic (mode 3) its latency chain alone takes 24.7-25.7 us: every block loads
// all of X from L2 after each barrier (down: 90 KB x 128 blocks, 1.9-2.2 us), a grid barrier costs ~1 us like
// a kernel boundary under PDL, and attention 5.7 us + 2.8 us of barrier. So this design cannot beat the chain.
// Idea: at M = 11 rows a layer is 34.6 MB of weights, 11.5 us of DRAM time, but as five kernels it takes
// ~29 us (bench/RESULTS.md L53-L65): every kernel boundary costs ~0.8 us, each kernel's latency chain
// (X load, MMAs, cross-warp and cross-block reductions, epilogue) runs while its weight copies queue, and
// the next product's weights start streaming only when its kernel starts. Here one block per SM streams its
// share of every product of every layer through a ring of shared-memory stages, and the math follows behind
// in phases separated by grid barriers.
// Version 2 (bench/RESULTS.md L69). The first version (L34) (9 warps, a producer warp) was capped at 168 registers by the
// 9th warp and kept 392 bytes per thread on the stack (113 KB per block, more than the L1 left beside the
// ring), and it reduced and synchronised once per unit; it took 53 us per layer. Now:
//   - 8 warps, no producer warp (255 registers, no stack). The ring's slots are refilled by the consumers:
//     the last of the 8 warps to finish reading a stage issues the bulk copies (TMA, one per 2 KB weight row,
//     marked evict-first in L2) of the stage XNS later, so XNS stages are always requested ahead.
//   - one reduction per phase: a block accumulates all its units of a phase in registers, then the 8 warps'
//     partial sums (K split over warps, as gemv.cu) meet once in shared memory.
//   - the pre-norm folded as in gemv.cu: X (1 + a) into the MMAs, the row's rsqrt in the reduction, the
//     adaRMS shift as X row M (so M <= 15 with a shift).
//   - balanced units: q|k|v in units of 8 weight rows (4 rows and their RoPE partners 128 rows on), at most
//     3 per block; o and down one 8-row tile per block; gate|up units of 8 gate + 8 up rows, at most 4.
//   - attention's merge inside the attention phase: the blocks of a head's key chunks wait for each other
//     (a counter per head), then each merges a slice of the head's outputs (no grid barrier for it).
// Phases per layer, each ending in a grid barrier:
//   1. norm + q|k|v + RoPE; q to q, k and v into the cache rows after the prefix;
//   2. attention, flash-decoding: unit (head, chunk of 64 keys); partial (m, l, O); per-head merge into att;
//   3. o + residual (π0.5: gated) into s;
//   4. norm + gate|up + gelu(gate) * up into g;
//   5. down + residual into s.
// Every result is reduced in a fixed order (deterministic). Data written inside the kernel is read through
// L2 only (ld.global.cg, cp.async.cg): L1 is not coherent across SMs. The launch is cooperative (all blocks
// resident); the barrier words are reset by the last block out.
// Shapes: expert width 1024, head dim 256, one K/V head, heads x 256 and F multiples of 1024, M <= 16 suffix
// rows, B = 1 (the suffix keys at the end of the cache: attn.tail == M), >= 128 blocks; else xlab_step
// returns 0.
#pragma once
#include <math.h>
#include <string.h>

#include "../../src/cuda/common.cuh"
#include "../../src/cuda/mma.cuh"
#include "few_rows.cuh"

enum {
    XK = 1024,                 // columns of a stage (= the expert width)
    XLDS = XK * 2 + 64,        // bytes per weight row in shared memory (padding: conflict-free 16-byte reads)
    XSLOT = 8 * XLDS,          // one stage: 8 weight rows
    XNS = 4,                   // stages in the ring (4, 7, 11 measured: 35.4, 36.8, 37.5 us per layer)
    XW = 8,                    // warps
    XT = XW * 32,              // threads
    XHD = 256,                 // head dim
    XCH = 64,                  // keys per attention unit
    XVLD = XHD + 8,            // V row stride in shared memory (elements)
    XPLD = XCH + 8,            // P row stride (elements)
    XMAXL = 24,                // most layers per launch
    XMAXU = 256,               // most attention units (heads x key chunks)
    XMAXCH = 16,               // most key chunks per head
    XMAXH = 16,                // most heads
    XQU = 3,                   // most q|k|v units (8 weight rows) per block
    XGU = 4,                   // most gate|up units (8 gate + 8 up rows) per block
    XPH = 5,                   // phases per layer
    XST = 6,                   // lab stamps per phase: start, X loaded, MMAs done, reduced, work done, barrier passed
};
// shared memory: ring | scratch (the 8 warps' partial sums [XW][2 XGU][4][32], or the attention unit's V, P
// and row statistics) | norm sums of squares [XW][16] | RoPE inverse frequencies [XHD / 2] | slot counters |
// full mbarriers
enum {
    XS_SCR = XNS * XSLOT,
    XS_SCRB = XCH * XVLD * 2 + 16 * XPLD * 2 + 2 * XW * 16 * 4,
    XS_NSS = XS_SCR + XS_SCRB,
    XS_INV = XS_NSS + XW * 16 * 4,
    XS_CNT = XS_INV + XHD / 2 * 4,
    XS_BAR = XS_CNT + 16 * 4,
    XSMEM = XS_BAR + XNS * 8,
};
static_assert(XW * 2 * XGU * 4 * 32 * 4 <= XS_SCRB, "the reduction fits the scratch");
static_assert(XNS <= 16, "slot counters");

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
    unsigned *bar;                      // [2 + XMAXH]: barrier arrivals, blocks done, per-head unit counts (0 between launches)
    long long *prof;                    // NULL, or clock64() per block, layer, phase: XST stamps (lab)
    int mode;                           // 0: the step; 1: only stream the weights (every block waits for and releases
                                        // its stages, nothing else); 2: the step without grid barriers (wrong results);
                                        // 3: the ring filled once and never waited for or refilled (wrong results: the
                                        // latency chain without weight traffic)
    const int32_t *pos;                 // RoPE positions of the M rows
};

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// All threads of all blocks: everything written before is visible to everything read after. bar[0] counts
// arrivals over the whole launch (barrier k completes at (k + 1) x gridDim.x); the arrival is a release
// reduction (no round trip), the wait one acquire load per poll.
__device__ void grid_sync(unsigned *bar, unsigned k) {
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(bar) : "memory");
        const unsigned target = (k + 1) * gridDim.x;
        while (ld_acquire(bar) < target) {}
    }
    __syncthreads();
}

// After the last barrier: the last block out resets the counters for the next launch (stream-ordered).
__device__ void grid_reset(unsigned *bar) {
    if (threadIdx.x == 0 && atomicAdd(bar + 1, 1u) == gridDim.x - 1) {
        for (int i = 0; i < 2 + XMAXH; i++) bar[i] = 0;
        __threadfence();
    }
}

__device__ __forceinline__ int cdiv_dev(int a, int b) { return a > 0 ? (a + b - 1) / b : 0; }   // items i = b0, b0 + G, ... below a

// This block's stages per layer, in consumption order: nq q|k|v units (1 stage each), no o tiles (heads / 4
// stages each), ngu gate|up units (gate stage, up stage), no down tiles (F / 1024 stages each).
struct xplan {
    int nq, no, ngu, oc, dc, S;
    unsigned total;   // S x depth
};
__device__ __forceinline__ xplan make_plan(const xargs &a, int b, int G) {
    xplan p;
    p.nq = cdiv_dev((a.heads * XHD + 2 * XHD) / 8 - b, G);
    p.no = b < XK / 8 ? 1 : 0;
    p.ngu = cdiv_dev(a.F / 8 - b, G);
    p.oc = a.heads * XHD / XK;
    p.dc = a.F / XK;
    p.S = p.nq + p.no * p.oc + 2 * p.ngu + p.no * p.dc;
    p.total = (unsigned)p.S * a.depth;
    return p;
}

// Weight row r (0..7) of stage `it` of block b: q|k|v unit u holds rows 4i .. 4i + 3 of a head and their RoPE
// partners 128 rows on (i = u % 32); o and down tile b holds rows 8b .. 8b + 7, one 1024-column chunk per stage;
// gate|up unit u's stages hold gate rows 8u .. 8u + 7, then the same rows of up.
__device__ __forceinline__ const bf16 *stage_row(const xargs &a, const xplan &p, int b, int G, unsigned it, int r) {
    const int l = (int)(it / (unsigned)p.S);
    int s = (int)(it % (unsigned)p.S);
    const xlayer &L = a.L[l];
    if (s < p.nq) {
        const int u = b + s * G, row = (u / 32) * XHD + 4 * (u % 32) + (r < 4 ? r : XHD / 2 + r - 4);
        return L.wqkv + (size_t)row * XK;
    }
    s -= p.nq;
    if (s < p.no * p.oc) return L.wo + (size_t)(8 * b + r) * (p.oc * XK) + s * XK;
    s -= p.no * p.oc;
    if (s < 2 * p.ngu) return L.wgu + (size_t)((s & 1) * a.F + 8 * (b + (s >> 1) * G) + r) * XK;
    s -= 2 * p.ngu;
    return L.wd + (size_t)(8 * b + r) * a.F + s * XK;
}

// One warp: the bulk copies of stage `it` into its slot (lanes 0..7, one weight row each), counted on full[slot].
__device__ __forceinline__ void issue(const xargs &a, const xplan &p, unsigned it, unsigned char *ring, uint64_t *full,
                                      int lane) {
    if (it >= p.total) return;
    const unsigned slot = it % XNS;
    if (lane == 0) mbar_expect_tx(&full[slot], 8 * XK * 2);
    __syncwarp();
    if (lane < 8)
        bulk_copy_stream(ring + slot * XSLOT + lane * XLDS, stage_row(a, p, blockIdx.x, gridDim.x, it, lane), XK * 2,
                         &full[slot]);
}

// The consumers' view of the ring: stage `it` is in slot it % XNS, filled for the (it / XNS)-th time.
struct xring {
    unsigned char *base;
    uint64_t *full;
    unsigned *cnt;   // per slot: warps done with its current stage
    unsigned it;
    bool nowait;     // mode 3
    __device__ __forceinline__ const unsigned char *wait() {
        if (!nowait) mbar_wait(&full[it % XNS], (it / XNS) & 1);
        return base + (it % XNS) * XSLOT;
    }
    // This warp has read the stage (its values are in registers): the last of the XW warps refills the slot
    // with stage it + XNS.
    __device__ __forceinline__ void release(const xargs &a, const xplan &p, int lane) {
        const unsigned slot = it % XNS;
        if (nowait) { it++; return; }
        unsigned last = 0;
        __syncwarp();
        if (lane == 0) {
            __threadfence_block();
            last = atomicAdd(&cnt[slot], 1u) == XW - 1;
        }
        last = __shfl_sync(0xffffffffu, last, 0);
        if (last) {
            if (lane == 0) cnt[slot] = 0;
            __threadfence_block();
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // the reads above before the copy's writes
            issue(a, p, it + XNS, base, full, lane);
        }
        it++;
    }
};

// A thread's indices: lane (g, c) of warp `warp`, columns kw + 32 u of a 1024-column chunk.
struct xctx {
    int tid, lane, warp, g, c, kw, b, G;
    unsigned char *sm;
    long long *st;   // lab: this layer's stamps ([XPH][XST]) or NULL
    __device__ __forceinline__ void stamp(int ph, int k) const {
        if (st && tid == 0) st[ph * XST + k] = clock64();
    }
};


// The pre-norm folded into the product (gemv.cu NORM): the factor a is applied now (x + x a), the row sums of
// x^2 go to nss (the reduction turns them into rsqrt), and the adaRMS shift b becomes X row M.
// The factors a of this lane's columns, loaded with X (one round trip for both).
__device__ __forceinline__ void load_na(float4 (&na4)[4][2], const float *na, const xctx &x) {
#pragma unroll
    for (int u = 0; u < 4; u++)
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) na4[u][h2] = __ldg((const float4 *)(na + x.kw + 32 * u + 4 * h2));
}
__device__ __forceinline__ void prenorm_x(uint4 (&xv)[4][2], const xargs &a, const float4 (&na4)[4][2], const float *nb,
                                          const xctx &x) {
    const int M = a.M, g = x.g;
    float s0, s1;
    quad_sumsq(xv, s0, s1);
    float *nss = (float *)(x.sm + XS_NSS);
    if (x.c == 0) { nss[x.warp * 16 + g] = s0; nss[x.warp * 16 + g + 8] = s1; }
#pragma unroll
    for (int u = 0; u < 4; u++)
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            const int k = x.kw + 32 * u + 4 * h2;
            const float fa[4] = {na4[u][h2].x, na4[u][h2].y, na4[u][h2].z, na4[u][h2].w};
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int h = 2 * h2 + e;
                float2 f0 = bf2_to_f2(u4_get(xv[u][0], h)), f1 = bf2_to_f2(u4_get(xv[u][1], h));
                const float a0 = fa[2 * e], a1 = fa[2 * e + 1];
                if (g < M) u4_set(xv[u][0], h, f2_to_bf2(fmaf(f0.x, a0, f0.x), fmaf(f0.y, a1, f0.y)));
                if (g + 8 < M) u4_set(xv[u][1], h, f2_to_bf2(fmaf(f1.x, a0, f1.x), fmaf(f1.y, a1, f1.y)));
            }
            if (nb && (g == M || g + 8 == M)) {
                const float4 pb = __ldg((const float4 *)(nb + k));
                const uint32_t b0 = f2_to_bf2(pb.x, pb.y), b1 = f2_to_bf2(pb.z, pb.w);
                if (g == M) { u4_set(xv[u][0], 2 * h2, b0); u4_set(xv[u][0], 2 * h2 + 1, b1); }
                else { u4_set(xv[u][1], 2 * h2, b0); u4_set(xv[u][1], 2 * h2 + 1, b1); }
            }
        }
}
// X = s for a normed product (norm 0: attention, 1: MLP), the factors loaded with it.
__device__ __forceinline__ void normed_x(uint4 (&xv)[4][2], const xargs &a, const xlayer &L, int k, const xctx &x) {
    float4 na4[4][2];
    load_na(na4, L.na[k], x);
    load_x(xv, a.s, XK, a.M, x.g, x.kw);
    prenorm_x(xv, a, na4, L.nb[k], x);
}
// rsqrt(mean(x^2) + eps) of row m (after the barrier that follows prenorm_x).
__device__ __forceinline__ float row_r(const xctx &x, int m, float eps) {
    const float *nss = (const float *)(x.sm + XS_NSS);
    float s = 0;
#pragma unroll
    for (int w = 0; w < XW; w++) s += nss[w * 16 + m];
    return rsqrtf(s * (1.0f / XK) + eps);
}

// acc += X . W^T for this warp's 128 columns of the stage (8 weight rows): rows g, g + 8 of the 16.
__device__ __forceinline__ void stage_mma(float (&acc)[4], const unsigned char *W, const uint4 (&xv)[4][2], int g, int kw) {
#pragma unroll
    for (int u = 0; u < 4; u++) {
        uint4 w = *(const uint4 *)(W + g * XLDS + (kw + 32 * u) * 2);
        mma_bf16(acc, xv[u][0].x, xv[u][1].x, xv[u][0].y, xv[u][1].y, w.x, w.y);
        mma_bf16(acc, xv[u][0].z, xv[u][1].z, xv[u][0].w, xv[u][1].w, w.z, w.w);
    }
}

// The warps' fragments of T tiles to red ([XW][T][4][32]), a barrier; frag_sum then adds the 8 warps' values of
// output row m, column j < 8 of tile t in warp order.
template <int T>
__device__ __forceinline__ void put_frags(float *red, const float (&acc)[T][4], const xctx &x) {
#pragma unroll
    for (int t = 0; t < T; t++)
#pragma unroll
        for (int i = 0; i < 4; i++) red[((x.warp * T + t) * 4 + i) * 32 + x.lane] = acc[t][i];
    __syncthreads();
}
template <int T> __device__ __forceinline__ float frag_sum(const float *red, int t, int m, int j) {
    const int i = (m >> 3) * 2 + (j & 1), ln = (m & 7) * 4 + (j >> 1);
    float s = 0;
#pragma unroll
    for (int w = 0; w < XW; w++) s += red[((w * T + t) * 4 + i) * 32 + ln];
    return s;
}
// Output (m, j) of tile t of a normed product: r_m times the row's sum, plus the shift row's (row M) product.
template <int T> __device__ __forceinline__ float normed_sum(const float *red, int t, int m, int j, float r, int srow) {
    const float v = frag_sum<T>(red, t, m, j) * r;
    return srow >= 0 ? v + frag_sum<T>(red, t, srow, j) : v;
}

// Phase 1: norm + q|k|v + RoPE. Units u = b, b + G, ... (at most XQU): output pairs (col, col + 128) of a head.
__device__ __forceinline__ void ph_qkv(const xargs &a, const xlayer &L, xring &R, const xplan &p, const xctx &x) {
    const int M = a.M, QW = a.heads * XHD, nvis = a.n1 - M, srow = L.nb[0] ? M : -1;
    uint4 xv[4][2];
    normed_x(xv, a, L, 0, x);
    x.stamp(0, 1);
    float acc[XQU][4] = {};
#pragma unroll
    for (int i = 0; i < XQU; i++)
        if (i < p.nq) {
            stage_mma(acc[i], R.wait(), xv, x.g, x.kw);
            R.release(a, p, x.lane);
        }
    x.stamp(0, 2);
    float *red = (float *)(x.sm + XS_SCR);
    put_frags<XQU>(red, acc, x);
    x.stamp(0, 3);
    const int i = x.tid >> 6, m = (x.tid >> 2) & 15, j = x.tid & 3;   // unit i, row m, pair j (columns j, j + 4)
    if (i < p.nq && m < M) {
        const float r = row_r(x, m, a.eps);
        float x1 = normed_sum<XQU>(red, i, m, j, r, srow), x2 = normed_sum<XQU>(red, i, m, j + 4, r, srow);
        const int u = x.b + i * x.G, ip = 4 * (u % 32) + j, col = (u / 32) * XHD + ip;   // ip: the pair within the head
        bf16 *dst;
        if (col < QW + XHD) {
            dst = col < QW ? a.q + (size_t)m * QW + col : L.kc + (size_t)(nvis + m) * XHD + col - QW;
            const float inv = ((const float *)(x.sm + XS_INV))[ip];   // same angle as gemv.cu / rope_kernel (docs/model.md 3.7)
            float th = (float)a.pos[m] * inv, cs, sn;
            sincosf(th, &sn, &cs);
            const float y1 = x1 * cs - x2 * sn, y2 = x2 * cs + x1 * sn;
            x1 = y1;
            x2 = y2;
        } else {
            dst = L.vc + (size_t)(nvis + m) * XHD + col - QW - XHD;
        }
        dst[0] = __float2bfloat16(x1);
        dst[XHD / 2] = __float2bfloat16(x2);
    }
}

// Phases 3 and 5: s += X . W^T (X = att, KC = heads / 4 chunks of 1024, or g, KC = F / 1024), tile b of 8
// output columns; all of X in registers first. π0.5: the product rounded as stored, times the gate.
template <int KC>
__device__ __forceinline__ void ph_rows(const xargs &a, xring &R, const xplan &p, const xctx &x, const bf16 *X,
                                        const float *gate, int ph) {
    if (!p.no) return;
    const int M = a.M, n = 8 * x.b + (x.tid & 7), m = x.tid >> 3;
    uint4 xv[KC][4][2];
#pragma unroll
    for (int kc = 0; kc < KC; kc++) load_x(xv[kc], X, KC * XK, M, x.g, kc * XK + x.kw);
    const float old = m < M ? __bfloat162float(__ldcg(a.s + (size_t)m * XK + n)) : 0.0f;
    if (x.st) {   // lab: wait for the loads to stamp "X loaded"
        uint32_t t = 0;
#pragma unroll
        for (int kc = 0; kc < KC; kc++) t ^= xv[kc][0][0].x;
        asm volatile("" ::"r"(t));
        x.stamp(ph, 1);
    }
    float acc[1][4] = {};
#pragma unroll
    for (int kc = 0; kc < KC; kc++) {
        stage_mma(acc[0], R.wait(), xv[kc], x.g, x.kw);
        R.release(a, p, x.lane);
    }
    x.stamp(ph, 2);
    float *red = (float *)(x.sm + XS_SCR);
    put_frags<1>(red, acc, x);
    x.stamp(ph, 3);
    if (m < M) {
        const float v = frag_sum<1>(red, 0, m, x.tid & 7);
        a.s[(size_t)m * XK + n] = __float2bfloat16(gate ? old + gate[n] * __bfloat162float(__float2bfloat16(v)) : old + v);
    }
}

// Phase 4: norm + gate|up + gelu(gate) * up. Units u = b, b + G, ... (at most XGU): 8 columns of g.
__device__ __forceinline__ void ph_gateup(const xargs &a, const xlayer &L, xring &R, const xplan &p, const xctx &x) {
    const int M = a.M, srow = L.nb[1] ? M : -1;
    uint4 xv[4][2];
    normed_x(xv, a, L, 1, x);
    x.stamp(3, 1);
    float acc[2 * XGU][4] = {};
#pragma unroll
    for (int i = 0; i < XGU; i++)
        if (i < p.ngu) {
            stage_mma(acc[2 * i], R.wait(), xv, x.g, x.kw);
            R.release(a, p, x.lane);
            stage_mma(acc[2 * i + 1], R.wait(), xv, x.g, x.kw);
            R.release(a, p, x.lane);
        }
    x.stamp(3, 2);
    float *red = (float *)(x.sm + XS_SCR);
    put_frags<2 * XGU>(red, acc, x);
    x.stamp(3, 3);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int o = x.tid + h * XT, i = o >> 7, m = (o >> 3) & 15, j = o & 7;   // unit i, row m, column j
        if (i < p.ngu && m < M) {
            const float r = row_r(x, m, a.eps);
            const float x1 = normed_sum<2 * XGU>(red, 2 * i, m, j, r, srow), x2 = normed_sum<2 * XGU>(red, 2 * i + 1, m, j, r, srow);
            a.g[(size_t)m * a.F + 8 * (x.b + i * x.G) + j] = __float2bfloat16(gelu_tanh(x1) * x2);
        }
    }
}

// Phase 2: attention unit u = (head h, key chunk) against keys [64 chunk, 64 chunk + 64): partial O, m, l to
// global scratch; then the head's blocks wait for each other and each merges a slice of the head's M x 256
// outputs: att[j][h 256 + d] = sum_x e^(m_x - m) O_x / sum_x e^(m_x - m) l_x.
__device__ __forceinline__ void ph_attention(const xargs &a, const xlayer &L, const xctx &x, int layer) {
    const int M = a.M, QW = a.heads * XHD, nvis = a.n1 - M, lane = x.lane, warp = x.warp, g = x.g, c = x.c;
    const int u = x.b;
    if (u >= a.heads * a.nch) return;
    float *ml = a.part + (size_t)XMAXU * 16 * XHD;
    bf16 *Vs = (bf16 *)(x.sm + XS_SCR), *Ps = Vs + XCH * XVLD;
    float *rmax = (float *)(Ps + 16 * XPLD), *rsum = rmax + XW * 16;
    const int h = u / a.nch, t0 = (u % a.nch) * XCH;
    for (int i = x.tid; i < XCH * (XHD / 8); i += XT) {
        const int row = i / (XHD / 8), col = (i % (XHD / 8)) * 8, t = t0 + row;
        bf16 *d = Vs + row * XVLD + col;
        if (t < a.n1) cp_async16(d, L.vc + (size_t)t * XHD + col);
        else *(uint4 *)d = make_uint4(0, 0, 0, 0);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    // S = Q K^T: warp w takes keys t0 + 8w .. + 7 (the 16-byte-per-lane order of gemv.cu, over 256 dims)
    const int key = t0 + 8 * warp + g;
    float sc[4] = {0, 0, 0, 0}, sd[4] = {0, 0, 0, 0};   // two chains of MMAs
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
            float(&acc)[4] = (u2 & 1) ? sd : sc;
            mma_bf16(acc, q0[u2].x, q1[u2].x, q0[u2].y, q1[u2].y, kf[u2].x, kf[u2].y);
            mma_bf16(acc, q0[u2].z, q1[u2].z, q0[u2].w, q1[u2].w, kf[u2].z, kf[u2].w);
        }
    }
    // mask (backend.h tail rule), scale; fragment i: row g (+8 for i >= 2), key 8w + 2c + (i & 1)
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int j = g + (i >= 2 ? 8 : 0), t = t0 + 8 * warp + 2 * c + (i & 1);
        const bool seen = j < M && t < a.n1 && (t < nvis || t - nvis < (j < a.block0 ? a.block0 : M));
        sc[i] = seen ? (sc[i] + sd[i]) * a.scale : -INFINITY;
        mx[i >> 1] = fmaxf(mx[i >> 1], sc[i]);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    }
    if (c == 0) { rmax[warp * 16 + g] = mx[0]; rmax[warp * 16 + g + 8] = mx[1]; }
    __syncthreads();
    x.stamp(1, 1);
    float rm[2] = {-INFINITY, -INFINITY}, sm[2] = {0, 0};
#pragma unroll
    for (int w = 0; w < XW; w++) { rm[0] = fmaxf(rm[0], rmax[w * 16 + g]); rm[1] = fmaxf(rm[1], rmax[w * 16 + g + 8]); }
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
    __syncthreads();
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
        if (g < M) __stcg((float2 *)(po + g * XHD + col), make_float2(o[n][0], o[n][1]));
        if (g + 8 < M) __stcg((float2 *)(po + (g + 8) * XHD + col), make_float2(o[n][2], o[n][3]));
    }
    if (x.tid < 16) {
        float l = 0, m = -INFINITY;
        for (int w = 0; w < XW; w++) { l += rsum[w * 16 + x.tid]; m = fmaxf(m, rmax[w * 16 + x.tid]); }
        __stcg(ml + u * 32 + x.tid, m);
        __stcg(ml + u * 32 + 16 + x.tid, l);
    }
    x.stamp(1, 2);
    // the head's units: all done (counter bar[2 + h], monotonic over the launch's layers)
    __threadfence();
    __syncthreads();
    unsigned *hc = a.bar + 2 + h;
    if (x.tid == 0) {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(hc) : "memory");
        const unsigned target = (unsigned)(layer + 1) * a.nch;
        while (ld_acquire(hc) < target) {}
    }
    __syncthreads();
    x.stamp(1, 3);
    // this unit's slice of the head's M x 64 float4 outputs
    const int items = M * (XHD / 4), per = cdiv_dev(items, a.nch), i0 = (u % a.nch) * per, i1 = min(items, i0 + per);
    for (int it = i0 + x.tid; it < i1; it += XT) {
        const int j = it / (XHD / 4), d4 = it % (XHD / 4);
        float mxs[XMAXCH], lxs[XMAXCH];
        float4 px[XMAXCH];
#pragma unroll
        for (int xc = 0; xc < XMAXCH; xc++)
            if (xc < a.nch) {
                const int ux = h * a.nch + xc;
                mxs[xc] = __ldcg(ml + ux * 32 + j);
                lxs[xc] = __ldcg(ml + ux * 32 + 16 + j);
                px[xc] = __ldcg((const float4 *)(a.part + ((size_t)ux * 16 + j) * XHD) + d4);
            }
        float mm = -INFINITY;
#pragma unroll
        for (int xc = 0; xc < XMAXCH; xc++)
            if (xc < a.nch) mm = fmaxf(mm, mxs[xc]);
        float den = 0;
        float4 acc = make_float4(0, 0, 0, 0);
#pragma unroll
        for (int xc = 0; xc < XMAXCH; xc++)
            if (xc < a.nch) {
                const float e = mxs[xc] == -INFINITY ? 0.0f : expf(mxs[xc] - mm);
                den += e * lxs[xc];
                acc.x += e * px[xc].x; acc.y += e * px[xc].y; acc.z += e * px[xc].z; acc.w += e * px[xc].w;
            }
        const float inv = 1.0f / den;
        *(uint2 *)(a.att + (size_t)j * QW + h * XHD + 4 * d4) =
            make_uint2(f2_to_bf2(acc.x * inv, acc.y * inv), f2_to_bf2(acc.z * inv, acc.w * inv));
    }
}

__global__ void __launch_bounds__(XT, 1) expert_kernel(const __grid_constant__ xargs a) {
    extern __shared__ __align__(128) unsigned char xsm[];
    uint64_t *full = (uint64_t *)(xsm + XS_BAR);
    unsigned *cnt = (unsigned *)(xsm + XS_CNT);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, G = gridDim.x, b = blockIdx.x;
    const xplan p = make_plan(a, b, G);
    if (tid < XNS) {
        mbar_init(&full[tid], 1);
        cnt[tid] = 0;
        fence_barrier_init();
    }
    if (tid < XHD / 2) ((float *)(xsm + XS_INV))[tid] = (float)pow(10000.0, -2.0 * tid / XHD);
    __syncthreads();
    if (warp == 0)
        for (unsigned i = 0; i < XNS; i++) issue(a, p, i, xsm, full, lane);

    xctx x = {tid, lane, warp, lane >> 2, lane & 3, warp * (XK / XW) + 8 * (lane & 3), b, G, xsm, NULL};
    xring R = {xsm, full, cnt, 0, a.mode == 3};
    if (a.mode == 3)   // the first XNS stages land, then nothing more is copied
        for (unsigned i = 0; i < XNS && i < p.total; i++) mbar_wait(&full[i], 0);
    if (a.mode == 1) {   // the stream alone
        for (unsigned i = 0; i < p.total; i++) {
            R.wait();
            R.release(a, p, lane);
        }
        return;
    }
    for (int l = 0; l < a.depth; l++) {
        x.st = a.prof ? a.prof + ((size_t)b * a.depth + l) * XPH * XST : NULL;
        auto sync = [&](int phase) {   // end of a phase: the grid barrier (timestamps for the lab)
            x.stamp(phase, 4);
            if (a.mode != 2) grid_sync(a.bar, (unsigned)(l * XPH + phase));
            x.stamp(phase, 5);
            if (phase + 1 < XPH) x.stamp(phase + 1, 0);
        };
        if (l == 0) x.stamp(0, 0);
        else if (x.st && tid == 0) x.st[0] = x.st[-1];
        const xlayer &L = a.L[l];
        ph_qkv(a, L, R, p, x);
        sync(0);
        ph_attention(a, L, x, l);
        sync(1);
        ph_rows<2>(a, R, p, x, a.att, L.gate[0], 2);
        sync(2);
        ph_gateup(a, L, R, p, x);
        sync(3);
        ph_rows<4>(a, R, p, x, a.g, L.gate[1], 4);
        sync(4);
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
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, expert_kernel, XT, XSMEM) != cudaSuccess ||
        !coop || per_sm < 1 || nsm < XK / 8 || cudaMalloc(&x->scratch, xlab_scratch_bytes()) != cudaSuccess ||
        cudaMemset(x->scratch, 0, xlab_scratch_bytes()) != cudaSuccess)
        return 0;
    x->blocks = nsm;
    return 1;
}

static const float *f32(const pi0_wt *w) { return w->dev32 ? (const float *)w->dev32 : NULL; }

// Launches the kernel for e on stream st; 0 (nothing launched) for shapes it does not cover.
static int xlab_step(const xlab *xl, cudaStream_t st, const pi0_expert_step *e) {
    const pi0_attn *at = &e->attn;
    int n1 = at->nseg == 1 ? at->k_off[1] - at->k_off[0] : 0, nch = cdiv(n1, XCH), G = xl->blocks;
    if (!G || at->nseg != 1 || at->tail != e->M || at->k_off[0] != 0 || at->q_off[0] != 0 || at->q_off[1] != e->M ||
        at->kv_heads != 1 || at->head_dim != XHD || at->k2.p || e->D != XK || e->M < 1 || e->M > 16 ||
        (at->heads * XHD) % XK || at->heads > XMAXH || e->F % XK || e->depth < 1 || e->depth > XMAXL ||
        n1 <= e->M || at->heads * nch > XMAXU || at->heads * nch > G || nch > XMAXCH ||
        cdiv(at->heads * XHD + 2 * XHD, 8) > XQU * G || e->F / 8 > XGU * G || at->heads * XHD / XK != 2 ||
        e->F / XK != 4 || e->kv_tail != (size_t)(n1 - e->M) * XHD || at->block0 < 0 || !e->pos.p)
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
                if (!mod || e->M > 15) return 0;   // (the shift takes X row M)
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
    cfg.gridDim = dim3(G);
    cfg.blockDim = dim3(XT);
    cfg.dynamicSmemBytes = XSMEM;
    cfg.stream = st;
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, expert_kernel, a) == cudaSuccess;
}
