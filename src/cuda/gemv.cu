// gemv.cu — few-row products on the tensor cores: Y[M, N] = X[M, K] . W[N, K]^T for M <= 16 (the
// denoise steps at B = 1: M = 11 suffix rows), with the neighbouring elementwise work fused in the
// epilogue: store / add (the residual) / GELU, plus two that combine output rows n and n + P of the same
// block: gelu(gate) * up (P = F, spec 3.7 MLP) and the q|k|v split with RoPE (P = hd / 2, the rotated
// pair), which writes k and v straight into the KV cache rows. For K = 1024 (the expert's q|k|v and gate|up)
// the RMSNorm / adaRMS before the product is folded in (the two separate norm kernels cost 5.6 of 38.7 us
// per expert layer, denoise chain lab): norm(x) . W = r (x * (1 + a)) . W + b . W with r = rsqrt(mean(x^2) +
// eps). X rows go into the product scaled by (1 + a) only, the row's r multiplies its sum in the reduction
// (each block holds whole rows; the warps' sums of squares travel with their partial sums), and the adaRMS
// shift b is one more X row (row M, M <= 15) whose product is added to every row. So the row statistics are
// off the path from X to the MMAs (RESULTS.md session 11); the factors a and b are read before the PDL wait.
// Why: at M = 11 cuBLASLt streams the expert weights at ~1 TB/s and adds a split-K reduce kernel;
// this is one launch per product (numbers in bench/RESULTS.md, lab: bench/kernels/gemv_smallm.cu).
// Layout: a block owns R = 8 NT output rows and 1024 columns of K; the K / 1024 blocks of a row block form
// a thread-block cluster. Block q of the cluster finishes the output rows m with m % ks == q: the others
// push their partial sums of those rows into its shared memory (st.async, counted on its mbarrier), and it
// adds them in rank order (deterministic). No cluster barrier is on the critical path: under a cluster
// barrier the blocks of o and down waited 1-4 us while the next product's weights streamed in (lab profile,
// bench/RESULTS.md session 7). The block's weight rows are fetched with one bulk copy (TMA) per row into
// padded shared memory, issued before the programmatic-launch wait (common.cuh): weights are constants,
// so the copy overlaps the previous kernel. The copies mark their lines evict-first in L2, so the 0.6 GB
// stream per step leaves the KV cache and the activations there (session 11: 29.8 -> 28.8 us per layer). 8 warps split the 1024 columns; mma.m16n8k16 with A = the 16
// zero-padded X rows (registers, read after the wait), B = 8 weight rows: each lane takes 16 bytes (8
// consecutive k) of a weight row and of X rows g and g + 8, and the 8 k feed two MMAs in the same permuted
// order for A and B, which leaves every dot product unchanged.
// CPU twins: cpu_linear, cpu_qkv, cpu_mlp_up (src/cpu/cpu_backend.c).
#include <math.h>

#include "common.cuh"
#include "mma.cuh"

enum { GW = 8 };   // warps per block = K slices

// First weight row of n-tile t of block b (see gemv_args.pair).
template <int NT>
__device__ __forceinline__ int tile_row(const gemv_args &a, int b, int t) {
    if (!a.pair) return b * 8 * NT + 8 * t;
    int half = 4 * NT, per = a.pair / half, a0 = (b / per) * 2 * a.pair + (b % per) * half;
    return t < NT / 2 ? a0 + 8 * t : a0 + a.pair + 8 * (t - NT / 2);
}

// Block (x, y): output rows of row block x (tile_row), K columns [1024 y, 1024 y + 1024).
// Shared memory: W rows (R x 1024 bf16, row stride GEMV_LDS bytes: 64 bytes of padding put rows g and
// g + 1 in different bank halves, so the 16-byte reads of a warp are conflict-free), later reused for
// the 8 warps' partial sums; recv, the cluster's partial sums of the rows this block finishes.
enum { GEMV_KC = 1024, GEMV_LDS = GEMV_KC * 2 + 64 };

template <int NT, bool NORM>
__global__ void __launch_bounds__(GW * 32) gemv_kernel(gemv_args a) {
    constexpr int R = 8 * NT;
    extern __shared__ __align__(16) unsigned char gsm[];
    unsigned char *Ws = gsm;
    float *red = (float *)gsm;                                  // [GW][NT][4][32] after the products
    float *recv = (float *)(gsm + R * GEMV_LDS);                // [ks][rr][R]: partial sums by K slice
    __shared__ __align__(8) uint64_t bar, rbar;
    __shared__ float nss[GW][16];                                // NORM: the warps' sums of x^2 by row
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3, b = blockIdx.x;
    const int kb = blockIdx.y * GEMV_KC, kw = warp * (GEMV_KC / GW) + 8 * c;   // k of this lane within the slice
    // ---- before the PDL wait: only constants (weights) ----
    int nrow = tile_row<NT>(a, b, threadIdx.x >> 3) + (threadIdx.x & 7);   // the row thread t < R copies
    // K slices: the block of rank q of the cluster finishes output rows m with m % ks == q; the others send it
    // their partial sums of those rows (st.async, counted on its mbarrier rbar)
    // (rr = ceil(16 / ks) slots per rank: ks = 3 gives rank 0 six of 16 rows)
    const int ks = gridDim.y, rank = blockIdx.y, own = rank < a.M ? (a.M - rank + ks - 1) / ks : 0, rr = (16 + ks - 1) / ks;
    // NORM: a of this lane's k (K = 1024: one slice, kb = 0), loaded before this block's weight copies are queued
    // and used only after the wait (x + x a), so nothing before the wait waits on a load. Session 12, same call:
    // pi0-libero 11.7 -> 11.3 ms, the other workloads unchanged (q|k|v's kernel also went from 162 to 158
    // registers, which lets decode attention's blocks share its SMs)
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
        mbar_expect_tx(&bar, valid * GEMV_KC * 2);
        mbar_expect_tx(&rbar, (ks - 1) * own * R * 4);
    }
    __syncthreads();
    if (ks > 1) cluster_arrive_relaxed();   // every rbar is initialised when the cluster wait below returns
    if (threadIdx.x < R && nrow < a.N)   // one bulk copy (TMA) per weight row
        bulk_copy_stream(Ws + threadIdx.x * GEMV_LDS, a.w + (size_t)nrow * a.ldw + kb, GEMV_KC * 2, &bar);
    // RoPE angle of this thread's epilogue column (same formula as rope_kernel / cpu rope1, spec 3.7)
    const int rope_i = a.epi == GEMV_QKV_ROPE ? (tile_row<NT>(a, b, 0) + threadIdx.x % (R / 2)) % a.hd : 0;
    const float inv_freq = a.epi == GEMV_QKV_ROPE ? (float)pow(10000.0, -2.0 * rope_i / a.hd) : 0.0f;
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
    pdl_wait();
    pdl_trigger();
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
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    mbar_wait(&bar, 0);
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
    if (ks > 1) cluster_wait();
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
    __syncthreads();
    mbar_wait(&rbar, 0);
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
            if (n >= a.N) continue;
            float v = total(o / R, j) + (a.bias ? a.bias[n] : 0.0f);
            if (a.epi == GEMV_ADD) v += yold[o / (GW * 32)];
            else if (a.epi == GEMV_GELU) v = gelu_tanh(v);
            else if (a.epi == GEMV_GATED_ADD)   // the product rounded as a stored one, then the gated add (gated_add_kernel)
                v = yold[o / (GW * 32)] + a.gate[(size_t)(m / a.rows_per_gate) * a.gate_stride + n] *
                                              __bfloat162float(__float2bfloat16(v));
            a.y[(size_t)m * a.ldy + n] = __float2bfloat16(v);
        }
    } else {
        const int half = R / 2, n0 = tile_row<NT>(a, b, 0);
        for (int o = threadIdx.x; o < own * half; o += GW * 32) {   // (GW * 32) % half == 0: one column per thread
            int m = rank + ks * (o / half), j = o % half, col = n0 + j;
            float x1 = total(o / half, j), x2 = total(o / half, half + j);
            if (a.epi == GEMV_GELU_MUL) {
                a.y[(size_t)m * a.ldy + col] = __float2bfloat16(gelu_tanh(x1) * x2);
                continue;
            }
            // GEMV_QKV_ROPE: col is in the first half of a head; its partner is col + hd / 2
            int nv = a.N - a.nq - a.nk, hh = a.pair;
            bf16 *dst;
            if (col < a.nq) dst = a.q + (size_t)m * a.nq + col;
            else if (col < a.nq + a.nk) dst = a.k + (size_t)m * a.nk + col - a.nq;
            else {
                dst = a.v + (size_t)m * nv + col - a.nq - a.nk;
                dst[0] = __float2bfloat16(x1);
                dst[hh] = __float2bfloat16(x2);
                continue;
            }
            float th = (float)a.pos[m] * inv_freq, cs, sn;
            sincosf(th, &sn, &cs);
            dst[0] = __float2bfloat16(x1 * cs - x2 * sn);
            dst[hh] = __float2bfloat16(x2 * cs + x1 * sn);
        }
    }
}

static size_t gemv_smem(int nt) {   // recv: ks x ceil(16 / ks) <= 24 rows
    return (size_t)8 * nt * GEMV_LDS + 24 * 8 * nt * 4;
}

template <int NT, bool NORM>
static void launch(cuda_ctx *c, const gemv_args &a) {
    int ks = a.K / GEMV_KC;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[2];
    cfg.gridDim = dim3(cdiv(a.N, 8 * NT), ks);
    cfg.blockDim = dim3(GW * 32);
    cfg.dynamicSmemBytes = gemv_smem(NT);
    cfg.stream = c->stream;
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 1;
    at[0].val.clusterDim.y = ks;
    at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = c->pdl ? 2 : 1;
    cuda_prefer_smem(c, (const void *)gemv_kernel<NT, NORM>);
    cuda_note(c, cudaLaunchKernelEx(&cfg, gemv_kernel<NT, NORM>, a), "gemv_kernel", __FILE__, __LINE__);
}
template <int NT> static void launch(cuda_ctx *c, const gemv_args &a) {
    if (a.norm_a) launch<NT, true>(c, a);
    else launch<NT, false>(c, a);
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
// the down product's blocks, so its weights stream in during gate|up; RESULTS.md session 7), else the most,
// up to 32, that leaves >= 64 blocks (session 2: within 5% of the best block shape at the four products).
static int pick_nt(const gemv_args *a) {
    int ks = a->K / GEMV_KC;
    if ((long)a->N / 64 * ks >= 128 && cuda_gemv_ok(a, 8)) return 8;
    for (int nt = 4; nt >= 1; nt /= 2)
        if ((long)a->N / (8 * nt) * ks >= 64 && cuda_gemv_ok(a, nt)) return nt;
    return cuda_gemv_ok(a, 1) ? 1 : cuda_gemv_ok(a, 2) ? 2 : 0;
}

int cuda_gemv(cuda_ctx *c, const gemv_args *a, int nt) {
    if (c->err) return 1;
    if (!nt) nt = pick_nt(a);
    if (!nt || !cuda_gemv_ok(a, nt)) return 0;
    if (nt == 1) launch<1>(c, *a);
    else if (nt == 2) launch<2>(c, *a);
    else if (nt == 4) launch<4>(c, *a);
    else if (nt == 8) launch<8>(c, *a);
    else return 0;
    return 1;
}
