// gemv.cu — few-row products on the tensor cores: Y[M, N] = X[M, K] . W[N, K]^T for M <= 16 (the denoise steps at
// B = 1: M = 11 suffix rows) and, in gemv_wg_kernel, 17 to 64 rows, with the neighbouring elementwise work fused in
// the epilogue (store, residual add, GELU, gelu(gate) * up, the q|k|v split with RoPE) and, for K = 1024, the
// RMSNorm / adaRMS before the product folded in. CPU twins: cpu_linear, cpu_qkv, cpu_mlp_up (src/cpu/cpu_backend.c).
// A shape it does not take (cuda_gemv returns 0) goes to cuBLASLt through gemm.cu, which decides what comes here.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <math.h>

#include "common.cuh"
#include "lab_hooks.cuh"
#include "mma.cuh"

// The products: Y[M, N] = X[M, K] . W[N, K]^T for M <= 16 (the
// denoise steps at B = 1: M = 11 suffix rows; 17 to 64 rows: gemv_wg_kernel below), with the neighbouring elementwise work fused in the
// epilogue: store / add (the residual) / GELU, plus two that combine output rows n and n + P of the same
// block: gelu(gate) * up (P = F, docs/model.md 3.7 MLP) and the q|k|v split with RoPE (P = hd / 2, the rotated
// pair), which writes k and v straight into the KV cache rows. For K = 1024 (the expert's q|k|v and gate|up)
// the RMSNorm / adaRMS before the product is folded in (the two separate norm kernels were a sizeable share
// of an expert layer, denoise chain lab, bench/RESULTS.md L25): norm(x) . W = r (x * (1 + a)) . W + b . W with
// r = rsqrt(mean(x^2) + eps). X rows go into the product scaled by (1 + a) only, the row's r multiplies its sum in the reduction
// (each block holds whole rows; the warps' sums of squares travel with their partial sums), and the adaRMS
// shift b is one more X row (row M, M <= 15) whose product is added to every row. So the row statistics are
// off the path from X to the MMAs (bench/RESULTS.md L56); the factors a and b are read before the PDL wait.
// Why: at M = 11 cuBLASLt streams the expert weights well below the bandwidth and adds a split-K reduce kernel;
// this is one launch per product (numbers in bench/RESULTS.md L15, L17, lab: bench/kernels/gemv_smallm.cu).
// Layout: a block owns R = 8 NT output rows and 1024 columns of K; the K / 1024 blocks of a row block form
// a thread-block cluster. Block q of the cluster finishes the output rows m with m % ks == q: the others
// push their partial sums of those rows into its shared memory (st.async, counted on its mbarrier), and it
// adds them in rank order (deterministic). No cluster barrier is on the critical path: under a cluster
// barrier the blocks of o and down waited while the next product's weights streamed in (lab profile,
// bench/RESULTS.md L40). The block's weight rows are fetched with one bulk copy (TMA) per row into
// padded shared memory, issued before the programmatic-launch wait (common.cuh): weights are constants,
// so the copy overlaps the previous kernel. The copies mark their lines evict-first in L2, so the 0.6 GB
// stream per step leaves the KV cache and the activations there (bench/RESULTS.md L57). 8 warps split the 1024
// columns; mma.m16n8k16 with A = the 16
// zero-padded X rows (registers, read after the wait), B = 8 weight rows: each lane takes 16 bytes (8
// consecutive k) of a weight row and of X rows g and g + 8, and the 8 k feed two MMAs in the same permuted
// order for A and B, which leaves every dot product unchanged.

enum { GW = 8 };   // warps per block = K slices

// First weight row of n-tile t of block b (see gemv_args.pair).
template <int NT>
__device__ __forceinline__ int tile_row(const gemv_args &a, int b, int t) {
    if (!a.pair) return b * 8 * NT + 8 * t;
    int half = 4 * NT, per = a.pair / half, a0 = (b / per) * 2 * a.pair + (b % per) * half;
    return t < NT / 2 ? a0 + 8 * t : a0 + a.pair + 8 * (t - NT / 2);
}

// Outputs (m, n .. n + V - 1) from their fp32 sums v: the bias, then the epilogue (store, residual add, GELU, gated
// add); yold holds the outputs' old values (read by the caller, for the adds). V = 8: 16-byte accesses.
template <int V>
__device__ __forceinline__ void gemv_put(const gemv_args &a, int m, int n, float (&v)[V], const float (&yold)[V]) {
#pragma unroll
    for (int e = 0; e < V; e++) {
        v[e] += a.bias ? a.bias[n + e] : 0.0f;
        if (a.epi == GEMV_ADD) v[e] += yold[e];
        else if (a.epi == GEMV_GELU) v[e] = gelu_tanh(v[e]);
        else if (a.epi == GEMV_GATED_ADD)   // the product rounded as a stored one, then the gated add (gated_add_kernel)
            v[e] = yold[e] + a.gate[(size_t)(m / a.rows_per_gate) * a.gate_stride + n + e] *
                                 __bfloat162float(__float2bfloat16(v[e]));
    }
    stv<V>(a.y + (size_t)m * a.ldy + n, v);
    if (a.save) stv<V>(a.save + (size_t)m * a.ldy + n, v);   // exact RTC's forward keeps the residual (residual_save)
}

// Outputs (m, col ..) and (m, col + pair ..) from their sums x1, x2 (pair layouts): gelu(gate) * up, or the q|k|v
// split with RoPE at angles p * inv_freq, p = pos[m] (col is in the first half of a head; its partner is col + hd / 2).
template <int V>
__device__ __forceinline__ void gemv_put_pair(const gemv_args &a, int m, int col, float (&x1)[V], float (&x2)[V], float p,
                                              const float (&inv_freq)[V]) {
    if (a.epi == GEMV_GELU_MUL) {
        if (a.gs) {   // exact RTC's forward keeps the products (backend.h mlp_up_save)
            stv<V>(a.gs + (size_t)m * a.pair + col, x1);
            stv<V>(a.us + (size_t)m * a.pair + col, x2);
        }
#pragma unroll
        for (int e = 0; e < V; e++) x1[e] = gelu_tanh(x1[e]) * x2[e];
        stv<V>(a.y + (size_t)m * a.ldy + col, x1);
        return;
    }
    int nv = a.N - a.nq - a.nk, hh = a.pair;
    bf16 *dst;
    if (col < a.nq) dst = a.q + (size_t)m * a.nq + col;
    else if (col < a.nq + a.nk) dst = a.k + (size_t)m * a.nk + col - a.nq;
    else {
        dst = a.v + (size_t)m * nv + col - a.nq - a.nk;
        stv<V>(dst, x1);
        stv<V>(dst + hh, x2);
        return;
    }
#pragma unroll
    for (int e = 0; e < V; e++) {
        float cs, sn, y1 = x1[e];
        sincosf(p * inv_freq[e], &sn, &cs);
        x1[e] = y1 * cs - x2[e] * sn;
        x2[e] = x2[e] * cs + y1 * sn;
    }
    stv<V>(dst, x1);
    stv<V>(dst + hh, x2);
}

// RoPE's inverse frequency of output column col (same formula as rope_kernel / cpu rope1, docs/model.md 3.7)
__device__ __forceinline__ float rope_inv_freq(const gemv_args &a, int col) {
    return a.epi == GEMV_QKV_ROPE ? (float)pow(10000.0, -2.0 * (col % a.hd) / a.hd) : 0.0f;
}

// Block (x, y): output rows of row block x (tile_row), K columns [1024 y, 1024 y + 1024).
// Shared memory: W rows (R x 1024 bf16, row stride GEMV_LDS bytes: 64 bytes of padding put rows g and
// g + 1 in different bank halves, so the 16-byte reads of a warp are conflict-free), later reused for
// the 8 warps' partial sums; recv, the cluster's partial sums of the rows this block finishes.
enum { GEMV_KC = 1024, GEMV_LDS = GEMV_KC * 2 + 64 };

#ifdef GEMV_PROF   // the lab's phase stamps (lab_hooks.cuh); the host side sets the buffer and the weight switch
__device__ unsigned long long *gemv_prof_buf;
__device__ unsigned gemv_prof_n, gemv_prof_cap;
__device__ int gemv_prof_nowt;   // 1: no weight copies (wrong results): the chain without its weight stream
void gemv_prof_nowt_set(int v) { cudaMemcpyToSymbol(gemv_prof_nowt, &v, sizeof v); }
void gemv_prof_set(unsigned long long *buf, unsigned cap) {
    unsigned z = 0;
    cudaMemcpyToSymbol(gemv_prof_buf, &buf, sizeof buf);
    cudaMemcpyToSymbol(gemv_prof_cap, &cap, sizeof cap);
    cudaMemcpyToSymbol(gemv_prof_n, &z, sizeof z);
}
unsigned gemv_prof_count(void) {
    unsigned n;
    cudaMemcpyFromSymbol(&n, gemv_prof_n, sizeof n);
    return n;
}
#define LAB_WT(x) (gemv_prof_nowt ? 0 : (x))
// the X loads land before stamp 2 (the stamps' order is the phases')
#define LAB_PIN_X(xv) if (threadIdx.x == 0) asm volatile("" ::"r"(xv[0][0].x), "r"(xv[1][0].x), "r"(xv[2][0].x), \
                                                         "r"(xv[3][0].x), "r"(xv[0][1].x), "r"(xv[1][1].x), \
                                                         "r"(xv[2][1].x), "r"(xv[3][1].x))
#else
#define LAB_WT(x) (x)
#define LAB_PIN_X(xv) do { } while (0)
#endif

template <int NT, bool NORM>
__global__ void __launch_bounds__(GW * 32) gemv_kernel(gemv_args a) {
    constexpr int R = 8 * NT;
    extern __shared__ __align__(16) unsigned char gsm[];
    unsigned char *Ws = gsm;
    float *red = (float *)gsm;                                  // [GW][NT][4][32] after the products
    float *recv = (float *)(gsm + R * GEMV_LDS);                // [ks][rr][R]: partial sums by K slice
    __shared__ __align__(8) uint64_t bar, rbar;
    __shared__ float nss[GW][16];                                // NORM: the warps' sums of x^2 by row
    LAB_STAMPS
    LAB_STAMP(0);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3, b = blockIdx.x;
    const int kb = blockIdx.y * GEMV_KC, kw = warp * (GEMV_KC / GW) + 8 * c;   // k of this lane within the slice
    // ---- before the PDL wait: only constants (weights) ----
    int nrow = tile_row<NT>(a, b, threadIdx.x >> 3) + (threadIdx.x & 7);   // the row thread t < R copies
    // K slices: the block of rank q of the cluster finishes output rows m with m % ks == q; the others send it
    // their partial sums of those rows (st.async, counted on its mbarrier rbar)
    // (rr = ceil(16 / ks) slots per rank: ks = 3 gives rank 0 six of 16 rows)
    const int ks = gridDim.y, rank = blockIdx.y, own = rank < a.M ? (a.M - rank + ks - 1) / ks : 0, rr = (16 + ks - 1) / ks;
    // NORM: a of this lane's k (K = 1024: one slice, kb = 0), loaded before this block's weight copies are queued
    // and used only after the wait (x + x a), so nothing before the wait waits on a load (bench/RESULTS.md
    // L61; q|k|v's kernel also went from 162 to 158 registers, which lets decode attention's blocks share its SMs)
    float na[4][8];
#pragma unroll
    for (int u = 0; u < 4; u++)
#pragma unroll
        for (int h = 0; NORM && h < 2; h++) {
            float4 p = __ldg((const float4 *)(a.norm_a + kw + 32 * u + 4 * h));
            na[u][4 * h] = p.x; na[u][4 * h + 1] = p.y; na[u][4 * h + 2] = p.z; na[u][4 * h + 3] = p.w;
        }
    if (threadIdx.x == 0) {   // rows past N only in the last row block (pair layouts need N % 2P == 0)
        int valid = a.pair ? R : min(R, a.N - b * R);
        mbar_init(&bar, 1);
        mbar_init(&rbar, 1);
        fence_barrier_init();
        mbar_expect_tx(&bar, LAB_WT(valid * GEMV_KC * 2));
        mbar_expect_tx(&rbar, (ks - 1) * own * R * 4);
    }
    __syncthreads();
    if (ks > 1) cluster_arrive_relaxed();   // every rbar is initialised when the cluster wait below returns
    if (threadIdx.x < R && nrow < a.N && LAB_WT(1))   // one bulk copy (TMA) per weight row
        bulk_copy_stream(Ws + threadIdx.x * GEMV_LDS, a.w + (size_t)nrow * a.ldw + kb, GEMV_KC * 2, &bar);
    const float inv_freq = rope_inv_freq(a, tile_row<NT>(a, b, 0) + threadIdx.x % (R / 2));   // this thread's column
    // X rows g and g + 8, this lane's 4 x 8 k; padded rows stay zero, except the adaRMS shift's row M (NORM)
    const bool x0ok = g < a.M, x1ok = g + 8 < a.M;
    const int srow = NORM && a.norm_b ? a.M : -1;
    uint4 xv[4][2];
#pragma unroll
    for (int u = 0; u < 4; u++) {
        xv[u][0] = xv[u][1] = make_uint4(0, 0, 0, 0);
        if (NORM && (srow == g || srow == g + 8)) {
            const float4 *bp = (const float4 *)(a.norm_b + kw + 32 * u);
            float4 p0 = __ldg(bp), p1 = __ldg(bp + 1);
            uint4 b = make_uint4(f2_to_bf2(p0.x, p0.y), f2_to_bf2(p0.z, p0.w), f2_to_bf2(p1.x, p1.y), f2_to_bf2(p1.z, p1.w));
            if (srow == g) xv[u][0] = b;
            else xv[u][1] = b;
        }
    }
    if (a.early) pdl_trigger();
    pdl_wait();
    LAB_STAMP(1);
    if (!a.early) pdl_trigger();
    // ---- activations ----
    const bf16 *xp0 = a.x + (size_t)(x0ok ? g : 0) * a.ldx + kb + kw;
    const bf16 *xp1 = a.x + (size_t)(x1ok ? g + 8 : 0) * a.ldx + kb + kw;
#pragma unroll
    for (int u = 0; u < 4; u++) {
        if (x0ok) xv[u][0] = __ldcg((const uint4 *)(xp0 + 32 * u));
        if (x1ok) xv[u][1] = __ldcg((const uint4 *)(xp1 + 32 * u));
    }
    if (NORM) {   // sums of x^2 of rows g, g + 8 over this warp's slice (read after the MMAs); x * (1 + a)
        float s0, s1;
        quad_sumsq(xv, s0, s1);
        if (c == 0) { nss[warp][g] = s0; nss[warp][g + 8] = s1; }
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
            for (int h = 0; h < 4; h++) {
                float2 f0 = bf2_to_f2(u4_get(xv[u][0], h)), f1 = bf2_to_f2(u4_get(xv[u][1], h));
                float a0 = na[u][2 * h], a1 = na[u][2 * h + 1];
                if (x0ok) u4_set(xv[u][0], h, f2_to_bf2(fmaf(f0.x, a0, f0.x), fmaf(f0.y, a1, f0.y)));
                if (x1ok) u4_set(xv[u][1], h, f2_to_bf2(fmaf(f1.x, a0, f1.x), fmaf(f1.y, a1, f1.y)));
            }
    }
    float yold[4] = {0, 0, 0, 0};   // the residual that GEMV_ADD adds, read now rather than after the product
    if (a.epi == GEMV_ADD || a.epi == GEMV_GATED_ADD)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int o = threadIdx.x + i * GW * 32, m = rank + ks * (o / R), n = b * R + o % R;
            if (o < own * R && n < a.N) yold[i] = __bfloat162float(__ldcg(a.y + (size_t)m * a.ldy + n));
        }
    LAB_PIN_X(xv);
    LAB_STAMP(2);
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    mbar_wait(&bar, 0);
    LAB_STAMP(3);
#pragma unroll
    for (int u = 0; u < 4; u++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            uint4 w = *(const uint4 *)(Ws + (8 * t + g) * GEMV_LDS + (kw + 32 * u) * 2);
            mma_bf16(acc[t], xv[u][0].x, xv[u][1].x, xv[u][0].y, xv[u][1].y, w.x, w.y);
            mma_bf16(acc[t], xv[u][0].z, xv[u][1].z, xv[u][0].w, xv[u][1].w, w.z, w.w);
        }
    __syncthreads();   // every warp is done with Ws: its space now holds the partial sums
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int i = 0; i < 4; i++) red[((warp * NT + t) * 4 + i) * 32 + lane] = acc[t][i];
    __syncthreads();
    // the 8 warps in a fixed order; fragment (t, i, lane) is row g (+8 for i >= 2), column 8t + 2c + (i & 1);
    // the sum goes to slot (m / ks, j) of recv[rank] in the owner of row m (NORM: ks = 1), times the row's r
    LAB_STAMP(4);
    if (ks > 1) cluster_wait();
    LAB_STAMP(5);
    float r0 = 1.0f, r1 = 1.0f;   // NORM: r of rows g and g + 8, the only rows this thread's fragments hold
    if (NORM) {
        float s0 = 0, s1 = 0;
#pragma unroll
        for (int w = 0; w < GW; w++) { s0 += nss[w][g]; s1 += nss[w][g + 8]; }
        r0 = rsqrtf(s0 * (1.0f / GEMV_KC) + a.eps);
        r1 = rsqrtf(s1 * (1.0f / GEMV_KC) + a.eps);
    }
    for (int o = threadIdx.x; o < NT * 128; o += GW * 32) {
        int t = o >> 7, i = (o >> 5) & 3, l = o & 31, m = (l >> 2) + (i >= 2 ? 8 : 0), j = 8 * t + 2 * (l & 3) + (i & 1);
        if (m >= a.M && m != srow) continue;
        float s = 0;
#pragma unroll
        for (int w = 0; w < GW; w++) s += red[((w * NT + t) * 4 + i) * 32 + l];
        if (NORM && m < a.M) s *= i >= 2 ? r1 : r0;   // (o % 32 is this thread's lane)
        float *dst = recv + (rank * rr + m / ks) * R + j;
        if (m % ks == rank) *dst = s;
        else st_async_f32(dst, m % ks, s, &rbar);
    }
    LAB_STAMP(6);
    __syncthreads();
    mbar_wait(&rbar, 0);
    LAB_STAMP(7);
    // output (k, j) of this block: row m = rank + ks k, the K slices' partial sums added in rank order (+ the
    // shift's product, NORM)
    auto total = [&](int k, int j) {
        float s = 0;
        for (int r = 0; r < ks; r++) s += recv[(r * rr + k) * R + j];
        return srow >= 0 ? s + recv[srow * R + j] : s;
    };
    if (!a.pair) {
        for (int o = threadIdx.x; o < own * R; o += GW * 32) {
            int m = rank + ks * (o / R), j = o % R, n = b * R + j;
            float v[1] = {total(o / R, j)}, y1[1] = {yold[o / (GW * 32)]};
            if (n < a.N) gemv_put<1>(a, m, n, v, y1);
        }
    } else {
        const int half = R / 2, n0 = tile_row<NT>(a, b, 0);
        for (int o = threadIdx.x; o < own * half; o += GW * 32) {   // (GW * 32) % half == 0: one column per thread
            int m = rank + ks * (o / half), j = o % half;
            const float p = a.epi == GEMV_QKV_ROPE ? (float)a.pos[m] : 0.0f, fr[1] = {inv_freq};
            float x1[1] = {total(o / half, j)}, x2[1] = {total(o / half, half + j)};
            gemv_put_pair<1>(a, m, n0 + j, x1, x2, p, fr);
        }
    }
    LAB_STAMP(8);
    LAB_STAMP(9);
    LAB_WRITE(gemv_prof_buf, gemv_prof_n, gemv_prof_cap, a.N);
}

static size_t gemv_smem(int nt) {   // recv: ks x ceil(16 / ks) <= 24 rows
    return (size_t)8 * nt * GEMV_LDS + 24 * 8 * nt * 4;
}

// A launch whose grid.y blocks of a column form a cluster (the K slices), as a programmatic dependent (common.cuh).
template <typename... P>
static void launch_ks(cuda_ctx *c, void (*kernel)(P...), dim3 grid, int threads, size_t smem, const char *name,
                      typename launch_arg<P>::type... args) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[2];
    cfg.gridDim = grid;
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 1;
    at[0].val.clusterDim.y = grid.y;
    at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = c->pdl ? 2 : 1;
    cuda_prefer_smem(c, (const void *)kernel);
    cuda_note(c, cudaLaunchKernelEx(&cfg, kernel, args...), name, __FILE__, __LINE__);
}

template <int NT, bool NORM>
static void launch(cuda_ctx *c, const gemv_args &a) {
    launch_ks(c, gemv_kernel<NT, NORM>, dim3(cdiv(a.N, 8 * NT), a.K / GEMV_KC), GW * 32, gemv_smem(NT), "gemv_kernel", a);
}
template <int NT> static void launch(cuda_ctx *c, const gemv_args &a) {
    if (a.norm_a) launch<NT, true>(c, a);
    else launch<NT, false>(c, a);
}


// ---- 17 to 64 rows (the 50-step horizon: M = 51; B = 2 at 10-11) on the warpgroup MMA ----
// At 51 rows the kernel above would hold 4 row tiles of X in registers and run them after the whole weight slice
// has landed (bench/RESULTS.md L48: slower than cuBLASLt), while cuBLASLt streams these weights below the bandwidth
// and needs the
// split / gelu * up passes after it. Here the weights are the wgmma A operand (m64: 64 output rows per block) and
// the X rows its B operand (n64: the M rows, zero-filled past M by the tensor copy), both fed by tensor copies
// (TMA, 128-byte swizzle) into a ring of WGV_S stages of 64 k; the first stages' weights are requested before the
// PDL wait, and 5 stages (~100 KB) leave room for a second block, so the next product's blocks prefetch beside
// this one (10 stages, one block per SM: slower in a chain). Output rows: [r0, r0 + 32) and [r1, r1 + 32)
// (r1 = r0 + 32, or r0 + pair for the pair epilogues). Block (x, y) takes k blocks of a cluster's K slice y; the
// partial sums of X row m go to the block of rank m / tpr of the cluster (st.async into its recv, counted on its
// mbarrier), which adds its own and then the others' in rank order (deterministic for a given number of slices,
// which follows the SM count) and runs the epilogue on items of 8 columns
// (16-byte accesses). Per-block phase stamps (bench/RESULTS.md L81) set the shape: four accumulators (one wgmma
// chain per stage was latency-bound), the partial sums staged in shared memory and sent in 16-byte pieces, and
// the epilogue's global inputs read before the main loop. The pre-norm runs as its own kernel here.
enum { WGV_NP = 64, WGV_S = 5, WGV_STAGE = 2 * 64 * 128, WGV_LDR = 68, WGV_PF = WGV_NP * 8 / 128 };

// 8 fp32 values from shared memory (16-byte aligned)
__device__ __forceinline__ void ldf8(float (&v)[8], const float *p) {
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

struct wgv_split { int ks, tpr; };   // K slices (cluster size), X rows finished per rank (even)
static wgv_split wgv_shape(const gemv_args *a, int sms) {
    int tiles = cdiv(a->N, 64), nkb = cdiv(a->K, 64), ks = (sms + tiles / 2) / tiles;
    ks = ks < 1 ? 1 : ks > 8 ? 8 : ks > nkb ? nkb : ks;
    int m2 = (a->M + 1) & ~1;
    return {ks, (cdiv(m2, ks) + 1) & ~1};
}
static size_t wgv_smem(wgv_split s) { return 1024 + (size_t)WGV_S * WGV_STAGE + (size_t)s.ks * s.tpr * WGV_LDR * 4; }

#ifdef WG_PROF   // the lab's phase stamps (lab_hooks.cuh, bench/kernels/wg_prof.cu): thread 0's clock64 per block
__device__ unsigned long long wgv_st[256][8];
extern "C" void wgv_prof_read(unsigned long long *dst) { cudaMemcpyFromSymbol(dst, wgv_st, sizeof wgv_st); }
#endif

__global__ void __launch_bounds__(128) gemv_wg_kernel(const __grid_constant__ CUtensorMap tw,
                                                      const __grid_constant__ CUtensorMap tx, gemv_args a, int tpr) {
    extern __shared__ unsigned char wsm[];
    unsigned char *ring = (unsigned char *)(((uintptr_t)wsm + 1023) & ~(uintptr_t)1023);
    float *recv = (float *)(ring + WGV_S * WGV_STAGE);   // [ks][tpr X rows][WGV_LDR: 64 output rows]
    __shared__ __align__(8) uint64_t full[WGV_S], rbar;
    const int tid = threadIdx.x, warp = tid >> 5, g = (tid & 31) >> 2, c = tid & 3, t = blockIdx.x;
    const int ks = gridDim.y, rank = blockIdx.y, nkb = (a.K + 63) / 64, per = nkb / ks, rem = nkb % ks;
    const int kb0 = rank * per + min(rank, rem), n = per + (rank < rem);
    const int r0 = a.pair ? (t / (a.pair / 32)) * 2 * a.pair + (t % (a.pair / 32)) * 32 : 64 * t;
    const int r1 = r0 + (a.pair ? a.pair : 32);
    const int m2 = (a.M + 1) & ~1, lo = rank * tpr, own = max(0, min(m2, lo + tpr) - lo);   // X rows finished here
    LAB_WG_STAMP(0);
    if (tid == 0) {   // before the PDL wait: only the weights (constants)
        for (int s = 0; s < WGV_S; s++) mbar_init(&full[s], 1);
        mbar_init(&rbar, 1);
        fence_barrier_init();
        mbar_expect_tx(&rbar, (ks - 1) * own * 64 * 4);
        for (int s = 0; s < WGV_S && s < n; s++) {
            mbar_expect_tx(&full[s], WGV_STAGE);
            tma_load_2d_stream(ring + s * WGV_STAGE, &tw, (kb0 + s) * 64, r0, &full[s]);
            tma_load_2d_stream(ring + s * WGV_STAGE + 32 * 128, &tw, (kb0 + s) * 64, r1, &full[s]);
        }
    }
    __shared__ float freq[32];   // RoPE: inverse frequencies of the tile's columns r0 .. r0 + 31
    if (tid < 32) freq[tid] = rope_inv_freq(a, r0 + tid);
    __syncthreads();
    if (ks > 1) cluster_arrive_relaxed();   // every rbar is initialised when the cluster wait below returns
    LAB_WG_STAMP(1);
    if (a.early) pdl_trigger();
    pdl_wait();
    LAB_WG_STAMP(2);
    if (!a.early) pdl_trigger();
    if (tid == 0)
        for (int s = 0; s < WGV_S && s < n; s++) tma_load_2d(ring + s * WGV_STAGE + 64 * 128, &tx, (kb0 + s) * 64, 0, &full[s]);
    // the epilogue's inputs (the old outputs of the adds, or the rows' positions), read now: read in the epilogue,
    // each was a dependent L2 round trip on the block's path (stamps). An item is 8 output columns of a
    // row: 8 per row (pairs: 4, 8 columns and their partners), at most WGV_PF per thread.
    const int cg = a.pair ? 4 : 8, items = own * cg;
    const bool adds = a.epi == GEMV_ADD || a.epi == GEMV_GATED_ADD;
    uint4 yin[WGV_PF];
    float pin[WGV_PF];
#pragma unroll
    for (int u = 0; u < WGV_PF; u++) {
        const int o = tid + 128 * u, m = lo + o / cg, n = r0 + (o % cg) * 8;
        yin[u] = make_uint4(0, 0, 0, 0);
        pin[u] = 0.0f;
        if (o >= items || m >= a.M) continue;
        if (adds && n < a.N) yin[u] = __ldcg((const uint4 *)(a.y + (size_t)m * a.ldy + n));
        if (a.epi == GEMV_QKV_ROPE) pin[u] = (float)a.pos[m];
    }
    // four accumulators, one per 16 k of a stage: a chain of dependent wgmmas was latency-bound (stamps)
    float d[4][32];
#pragma unroll
    for (int u = 0; u < 4; u++)
#pragma unroll
        for (int i = 0; i < 32; i++) d[u][i] = 0.0f;
    for (int i = 0; i < n; i++) {
        const int s = i % WGV_S;
        unsigned char *st = ring + s * WGV_STAGE;
        mbar_wait(&full[s], (i / WGV_S) & 1);
        if (i == 0) LAB_WG_STAMP(3);
        wg_fence();
        const uint64_t da = wg_desc(st), db = wg_desc(st + 64 * 128);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wg_ss_64x64(d[kk], da + 2 * kk, db + 2 * kk, 1);
        wg_commit();
        wg_wait<1>();   // stage i - 1 has been read: refill it with k block i - 1 + WGV_S
        if (tid == 0 && i >= 1 && i - 1 + WGV_S < n) {
            const int sp = (i - 1) % WGV_S, kx = (kb0 + i - 1 + WGV_S) * 64;
            unsigned char *sq = ring + sp * WGV_STAGE;
            mbar_expect_tx(&full[sp], WGV_STAGE);
            tma_load_2d_stream(sq, &tw, kx, r0, &full[sp]);
            tma_load_2d_stream(sq + 32 * 128, &tw, kx, r1, &full[sp]);
            tma_load_2d(sq + 64 * 128, &tx, kx, 0, &full[sp]);
        }
    }
    wg_wait<0>();
#pragma unroll
    for (int u = 0; u < 4; u++) wg_hold(d[u]);
    LAB_WG_STAMP(4);
    __syncthreads();   // every warp's products are done before the ring is reused for the staged sums
    // d[u][4 i + 2 h + e]: output row 16 warp + g + 8 h of the tile, X row 8 i + 2 c + e, into stg (the free ring) as
    // [X row][WGV_LDR] (a warp's 8 g and 4 c land in 32 banks); then the rows that other blocks finish go to their
    // recv in 16-byte pieces (st.async: no per-element owner arithmetic, which was costly per block)
    float *stg = (float *)ring;
#pragma unroll
    for (int i = 0; i < WGV_NP / 8; i++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int k = 4 * i + 2 * h + e;
                stg[(8 * i + 2 * c + e) * WGV_LDR + 16 * warp + g + 8 * h] = d[0][k] + d[1][k] + d[2][k] + d[3][k];
            }
    __syncthreads();
    LAB_WG_STAMP(5);
    if (ks > 1) {
        cluster_wait();
        for (int o = tid; o < m2 * 16; o += 128) {
            const int m = o >> 4, f = (o & 15) * 4, q = m / tpr;
            if (q == rank) continue;
            const float4 v = *(const float4 *)&stg[m * WGV_LDR + f];
            st_async_f32x4(recv + (rank * tpr + m - q * tpr) * WGV_LDR + f, q, v, &rbar);
        }
        mbar_wait(&rbar, 0);
    }
    LAB_WG_STAMP(6);
    auto total = [&](float (&v)[8], int f, int tl) {   // output rows f .. f + 7 of X row lo + tl
        ldf8(v, stg + (lo + tl) * WGV_LDR + f);
        for (int r = 0; r < ks; r++)
            if (r != rank) {
                float w[8];
                ldf8(w, recv + (r * tpr + tl) * WGV_LDR + f);
#pragma unroll
                for (int e = 0; e < 8; e++) v[e] += w[e];
            }
    };
#pragma unroll
    for (int u = 0; u < WGV_PF; u++) {
        const int o = tid + 128 * u, tl = o / cg, j = (o % cg) * 8, m = lo + tl;
        if (o >= items || m >= a.M) continue;
        float x1[8], x2[8];
        total(x1, j, tl);
        if (!a.pair) {
            if (r0 + j >= a.N) continue;
            float y8[8];
#pragma unroll
            for (int h = 0; h < 4; h++) {
                const float2 f = bf2_to_f2(u4_get(yin[u], h));
                y8[2 * h] = f.x;
                y8[2 * h + 1] = f.y;
            }
            gemv_put<8>(a, m, r0 + j, x1, y8);
        } else {
            float fr[8];
#pragma unroll
            for (int e = 0; e < 8; e++) fr[e] = freq[j + e];
            total(x2, 32 + j, tl);
            gemv_put_pair<8>(a, m, r0 + j, x1, x2, pin[u], fr);
        }
    }
    LAB_WG_END;
}

// cuTensorMapEncodeTiled from the driver (no link to libcuda), looked up once
PFN_cuTensorMapEncodeTiled_v12000 cuda_tensor_map_encoder(void) {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void *f = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            f = NULL;
        cudaGetLastError();
        return (PFN_cuTensorMapEncodeTiled_v12000)f;
    }();
    return fn;
}

// A 2-D bf16 tensor map of rows x cols (row stride ld elements) read in boxes of box_rows x 64 with the 128-byte
// swizzle; 0 if the driver refuses it.
int cuda_tensor_map(CUtensorMap *m, const void *p, int rows, int cols, int ld, int box_rows) {
    PFN_cuTensorMapEncodeTiled_v12000 enc = cuda_tensor_map_encoder();
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)ld * 2};
    cuuint32_t box[2] = {64, (cuuint32_t)box_rows}, es[2] = {1, 1};
    return enc && enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)p, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

static int gemv_wg_ok(const gemv_args *a) {
    uintptr_t al = (uintptr_t)a->x | (uintptr_t)a->w;
    uintptr_t ao = (uintptr_t)a->y | (uintptr_t)a->q | (uintptr_t)a->k | (uintptr_t)a->v;   // 16-byte epilogue accesses
    if (a->M <= 16 || a->M > WGV_NP || a->K < 1 || a->K % 8 || a->ldx % 8 || a->ldw % 8 || (al & 15) || a->norm_a ||
        a->N % 8 || a->ldy % 8 || (ao & 15) || a->nq % 8 || a->nk % 8)
        return 0;
    if (a->pair && (a->bias || a->N % (2 * a->pair) || a->pair % 32)) return 0;
    if (a->epi == GEMV_QKV_ROPE && (a->hd != 2 * a->pair || a->nq % a->hd || a->nk % a->hd)) return 0;
    return 1;
}

#ifdef PI0_CUDA_TESTING
static long wg_launches, few_launches;   // (atomic: contexts may run on several threads)
extern "C" long cuda_gemv_wg_launches(void) { return __atomic_load_n(&wg_launches, __ATOMIC_RELAXED); }
extern "C" long cuda_gemv_launches(void) { return __atomic_load_n(&few_launches, __ATOMIC_RELAXED); }
#endif

static int gemv_wg(cuda_ctx *c, const gemv_args *a) {
    wgv_split s = wgv_shape(a, c->sms);
    CUtensorMap tw, tx;
    if (!cuda_tensor_map(&tw, a->w, a->N, a->K, a->ldw, 32) || !cuda_tensor_map(&tx, a->x, a->M, a->K, a->ldx, WGV_NP))
        return 0;
    launch_ks(c, gemv_wg_kernel, dim3(cdiv(a->N, 64), s.ks), 128, wgv_smem(s), "gemv_wg_kernel", tw, tx, *a, s.tpr);
    PI0_TEST_HOOK(__atomic_add_fetch(&wg_launches, 1, __ATOMIC_RELAXED));
    return 1;
}

template <int NT> static void setup(cuda_ctx *c) {
    CUDA_NOTE(c, cudaFuncSetAttribute(gemv_kernel<NT, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)gemv_smem(NT)));
    CUDA_NOTE(c, cudaFuncSetAttribute(gemv_kernel<NT, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)gemv_smem(NT)));
}
void cuda_gemv_setup(cuda_ctx *c) {   // the opt-in for more than 48 KB of shared memory (per device)
    setup<1>(c);
    setup<2>(c);
    setup<4>(c);
    setup<8>(c);
    size_t most = 0;   // the largest ring + recv of gemv_wg_kernel (any K slices)
    for (int ks = 1; ks <= 8; ks++) {
        size_t sz = wgv_smem({ks, (cdiv(WGV_NP, ks) + 1) & ~1});
        most = sz > most ? sz : most;
    }
    CUDA_NOTE(c, cudaFuncSetAttribute(gemv_wg_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)most));
}

int cuda_gemv_ok(const gemv_args *a, int nt) {
    uintptr_t al = (uintptr_t)a->x | (uintptr_t)a->w;
    if (a->M < 1 || a->M > 16 || a->K % GEMV_KC || a->K > 8 * GEMV_KC || a->N % 8 || a->ldx % 8 || a->ldw % 8 ||
        (al & 15))
        return 0;
    if (a->pair && (nt < 2 || a->bias || a->N % (2 * a->pair) || a->pair % (4 * nt))) return 0;
    if (a->epi == GEMV_QKV_ROPE && (a->hd != 2 * a->pair || a->nq % a->hd || a->nk % a->hd)) return 0;
    if (a->norm_a && (a->K != GEMV_KC || (a->norm_b && a->M > 15) || ((uintptr_t)a->norm_a | (uintptr_t)a->norm_b) & 15))
        return 0;   // (the adaRMS shift takes X row M)
    return 1;
}

// Output rows per block: 64 where that still leaves >= 128 blocks (gate|up: one block per SM leaves room for
// the down product's blocks, so its weights stream in during gate|up; bench/RESULTS.md L41), else the most,
// up to 32, that leaves >= 64 blocks (bench/RESULTS.md L15: within 5% of the best block shape at the four products).
static int pick_nt(const gemv_args *a) {
    int ks = a->K / GEMV_KC;
    if ((long)a->N / 64 * ks >= 128 && cuda_gemv_ok(a, 8)) return 8;
    for (int nt = 4; nt >= 1; nt /= 2)
        if ((long)a->N / (8 * nt) * ks >= 64 && cuda_gemv_ok(a, nt)) return nt;
    return cuda_gemv_ok(a, 1) ? 1 : cuda_gemv_ok(a, 2) ? 2 : 0;
}

int cuda_gemv(cuda_ctx *c, const gemv_args *args, int nt) {
    if (c->err) return 1;
    gemv_args e = *args;
    e.early = c->early_next;
    const gemv_args *a = &e;
    if (a->M > 16) return gemv_wg_ok(a) && gemv_wg(c, a);
    if (!nt) nt = pick_nt(a);
    if (!nt || !cuda_gemv_ok(a, nt)) return 0;
    if (nt == 1) launch<1>(c, *a);
    else if (nt == 2) launch<2>(c, *a);
    else if (nt == 4) launch<4>(c, *a);
    else if (nt == 8) launch<8>(c, *a);
    else return 0;
    PI0_TEST_HOOK(__atomic_add_fetch(&few_launches, 1, __ATOMIC_RELAXED));
    return 1;
}
