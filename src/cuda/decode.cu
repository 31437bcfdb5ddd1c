// decode.cu — backend.h next_token (CPU twin: cpu_decode.c): π0-FAST's next token over the whole vocabulary, the logits
// never stored. Pass 1: each block takes NT_VPB vocabulary rows, each warp one row at a time, and every row of x (up to
// NT_ROWS per pass, held in shared memory as fp32) against it; the block keeps per row its best (score, token) and its
// two largest logits (one row alone: next_token_row, x in registers). Pass 2: one block per row merges the blocks'
// picks. Ties go to the lower token, as the CPU's first-index rule. The table is read once per NT_ROWS rows: one
// 16-byte load per lane where the rows allow it.
#include <math.h>

#include "common.cuh"

enum { NT_ROWS = 8, NT_VPB = 64, NT_THREADS = 256 };

struct tok_pick {
    float score, best, second;
    int id;
};

__device__ __forceinline__ bool better(float s, int id, const tok_pick &p) {
    return p.id < 0 || s > p.score || (s == p.score && id < p.id);
}

__device__ __forceinline__ void merge(tok_pick &a, const tok_pick &b) {
    if (b.id >= 0 && better(b.score, b.id, a)) { a.score = b.score; a.id = b.id; }
    float lo = fminf(a.best, b.best);
    a.second = fmaxf(lo, fmaxf(a.second, b.second));
    a.best = fmaxf(a.best, b.best);
}

// KC > 0: K = 256 KC (K <= 2048) and 16-byte aligned rows: a row's KC loads are issued together before its products
// (the runtime loop over K kept one load in flight per lane, which left the table's pass latency-bound at 8 rows as
// it was at one, next_token_row).
template <int KC>
__global__ void next_token_part(tok_pick *part, const bf16 *x, const bf16 *W, int m, int V, int K, float temperature,
                                unsigned long long seed, int r0, int vec) {
    extern __shared__ float xs[];   // [m][K]
    __shared__ tok_pick red[NT_THREADS / 32][NT_ROWS];
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    for (int i = threadIdx.x; i < m * K; i += blockDim.x) xs[i] = __bfloat162float(x[i]);
    __syncthreads();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    tok_pick p[NT_ROWS];
#pragma unroll
    for (int i = 0; i < NT_ROWS; i++) p[i] = {-INFINITY, -INFINITY, -INFINITY, -1};
    int j1 = min(V, (blockIdx.x + 1) * NT_VPB);
    for (int j = blockIdx.x * NT_VPB + warp; j < j1; j += nw) {
        const bf16 *w = W + (size_t)j * K;
        float acc[NT_ROWS] = {0};
        if constexpr (KC > 0) {
            uint4 raw[KC];
#pragma unroll
            for (int c = 0; c < KC; c++) raw[c] = *(const uint4 *)(w + c * 256 + lane * 8);
#pragma unroll
            for (int c = 0; c < KC; c++) {
                const bf16 *b = (const bf16 *)&raw[c];
                float wv[8];
#pragma unroll
                for (int e = 0; e < 8; e++) wv[e] = __bfloat162float(b[e]);
#pragma unroll
                for (int i = 0; i < NT_ROWS; i++)
                    if (i < m) {
                        const float4 *xp = (const float4 *)(xs + i * K + c * 256 + lane * 8);
                        const float4 a0 = xp[0], a1 = xp[1];
                        acc[i] = fmaf(wv[0], a0.x, acc[i]); acc[i] = fmaf(wv[1], a0.y, acc[i]);
                        acc[i] = fmaf(wv[2], a0.z, acc[i]); acc[i] = fmaf(wv[3], a0.w, acc[i]);
                        acc[i] = fmaf(wv[4], a1.x, acc[i]); acc[i] = fmaf(wv[5], a1.y, acc[i]);
                        acc[i] = fmaf(wv[6], a1.z, acc[i]); acc[i] = fmaf(wv[7], a1.w, acc[i]);
                    }
            }
        } else if (vec) {
            for (int k = lane * 8; k < K; k += 256) {
                float wv[8];
                ldv<8>(wv, w + k);
#pragma unroll
                for (int i = 0; i < NT_ROWS; i++)
                    if (i < m)
#pragma unroll
                        for (int e = 0; e < 8; e++) acc[i] = fmaf(wv[e], xs[i * K + k + e], acc[i]);
            }
        } else {
            for (int k = lane; k < K; k += 32) {
                float wk = __bfloat162float(w[k]);
#pragma unroll
                for (int i = 0; i < NT_ROWS; i++)
                    if (i < m) acc[i] = fmaf(wk, xs[i * K + k], acc[i]);
            }
        }
#pragma unroll
        for (int i = 0; i < NT_ROWS; i++) {
            if (i >= m) break;
            float l = warp_sum(acc[i]);
            float s = temperature > 0.0f ? l / temperature + pi0_gumbel(seed, (uint32_t)(r0 + i), (uint32_t)j) : l;
            if (better(s, j, p[i])) { p[i].score = s; p[i].id = j; }
            if (l > p[i].best) { p[i].second = p[i].best; p[i].best = l; }
            else if (l > p[i].second) p[i].second = l;
        }
    }
    if (lane == 0)
        for (int i = 0; i < m; i++) red[warp][i] = p[i];
    __syncthreads();
    if (threadIdx.x < m) {
        tok_pick q = red[0][threadIdx.x];
        for (int w2 = 1; w2 < nw; w2++) merge(q, red[w2][threadIdx.x]);
        part[(size_t)threadIdx.x * gridDim.x + blockIdx.x] = q;
    }
}

// One row (B = 1, the common case), K a multiple of 256 up to 2048 (Gemma 2B: 2048): each lane meets the same
// KC = K / 256 groups of 8 columns in every vocabulary row, so x stays in its registers, and a row's KC loads are all
// issued before its products (the generic kernel's loop over K left one load in flight per lane and its shared x
// limited the blocks per SM: the head streamed well below the memory's rate).
template <int KC>
__global__ void next_token_row(tok_pick *part, const bf16 *x, const bf16 *W, int V, int K, float temperature,
                               unsigned long long seed) {
    __shared__ tok_pick red[NT_THREADS / 32];
    pdl_wait();
    pdl_trigger();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    float xr[KC][8];
#pragma unroll
    for (int c = 0; c < KC; c++) ldv<8>(xr[c], x + c * 256 + lane * 8);
    tok_pick p = {-INFINITY, -INFINITY, -INFINITY, -1};
    int j1 = min(V, (blockIdx.x + 1) * NT_VPB);
    for (int j = blockIdx.x * NT_VPB + warp; j < j1; j += nw) {
        const bf16 *w = W + (size_t)j * K + lane * 8;
        float wv[KC][8];
#pragma unroll
        for (int c = 0; c < KC; c++) ldv<8>(wv[c], w + c * 256);
        float acc = 0.0f;
#pragma unroll
        for (int c = 0; c < KC; c++)
#pragma unroll
            for (int e = 0; e < 8; e++) acc = fmaf(wv[c][e], xr[c][e], acc);
        float l = warp_sum(acc);
        float sc = temperature > 0.0f ? l / temperature + pi0_gumbel(seed, 0u, (uint32_t)j) : l;
        if (better(sc, j, p)) { p.score = sc; p.id = j; }
        if (l > p.best) { p.second = p.best; p.best = l; }
        else if (l > p.second) p.second = l;
    }
    if (lane == 0) red[warp] = p;
    __syncthreads();
    if (threadIdx.x == 0) {
        tok_pick q = red[0];
        for (int w2 = 1; w2 < nw; w2++) merge(q, red[w2]);
        part[blockIdx.x] = q;
    }
}

__global__ void next_token_final(int32_t *ids, float *top2, const tok_pick *part, int nblk, int r0) {
    __shared__ tok_pick red[NT_THREADS];
    pdl_wait();
    pdl_trigger();
    int r = blockIdx.x;
    tok_pick q = {-INFINITY, -INFINITY, -INFINITY, -1};
    for (int b = threadIdx.x; b < nblk; b += blockDim.x) merge(q, part[(size_t)r * nblk + b]);
    red[threadIdx.x] = q;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) merge(red[threadIdx.x], red[threadIdx.x + h]);
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        ids[r0 + r] = red[0].id;
        if (top2) { top2[2 * (r0 + r)] = red[0].best; top2[2 * (r0 + r) + 1] = red[0].second; }
    }
}

void cuda_next_token(pi0_backend *be, pt ids, pt top2, pt x, const pi0_wt *W, int M, int V, int K, float temperature,
                     uint64_t seed) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0) return;
    int nblk = cdiv(V, NT_VPB);
    size_t need = (size_t)NT_ROWS * nblk * sizeof(tok_pick), smem = (size_t)NT_ROWS * K * sizeof(float);
    if (smem > (size_t)c->smem_optin) {
        c->err = PI0_ERR_UNSUPPORTED;
        snprintf(c->errmsg, sizeof c->errmsg, "next_token: width %d needs %zu bytes of shared memory, the GPU allows %d", K,
                 smem, c->smem_optin);
        return;
    }
    if (need > c->tok_cap) {   // grown outside graph capture only: π0-FAST's decoding runs no graph
        if (c->capturing) {
            c->err = PI0_ERR_ARG;
            snprintf(c->errmsg, sizeof c->errmsg, "next_token: first call inside a graph capture");
            return;
        }
        cudaFree(c->tok_part);
        c->tok_part = NULL;
        c->tok_cap = 0;
        if (CUDA_NOTE(c, cudaMalloc(&c->tok_part, need))) return;
        c->tok_cap = need;
    }
    if (smem > 48 * 1024 && smem > c->tok_smem) {   // the opt-in once per context and size, not per token
        void (*parts[])(tok_pick *, const bf16 *, const bf16 *, int, int, int, float, unsigned long long, int, int) = {
            next_token_part<0>, next_token_part<1>, next_token_part<2>, next_token_part<4>, next_token_part<6>,
            next_token_part<8>};
        for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
            if (CUDA_NOTE(c, cudaFuncSetAttribute(parts[i], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem))) return;
        c->tok_smem = smem;
    }
    const bf16 *w = wbf(c, W), *xp = (const bf16 *)x.p;
    int vec = K % 8 == 0 && aligned16(w);
    if (M == 1 && vec && K % 256 == 0 && K <= 2048 && aligned16(xp)) {
        void (*row)(tok_pick *, const bf16 *, const bf16 *, int, int, float, unsigned long long) =
            K == 2048 ? next_token_row<8> : K == 1024 ? next_token_row<4> : K == 512 ? next_token_row<2>
            : K == 256 ? next_token_row<1> : K == 1536 ? next_token_row<6> : NULL;
        if (row) {
            cuda_launch(c, row, dim3(nblk), dim3(NT_THREADS), 0, (tok_pick *)c->tok_part, xp, w, V, K, temperature,
                        (unsigned long long)seed);
            cuda_launch(c, next_token_final, dim3(1), dim3(NT_THREADS), 0, (int32_t *)ids.p, (float *)top2.p,
                        (const tok_pick *)c->tok_part, nblk, 0);
            return;
        }
    }
    void (*part)(tok_pick *, const bf16 *, const bf16 *, int, int, int, float, unsigned long long, int, int) =
        !vec || K % 256 || !aligned16(xp) ? next_token_part<0>
        : K == 2048 ? next_token_part<8> : K == 1024 ? next_token_part<4> : K == 512 ? next_token_part<2>
        : K == 256 ? next_token_part<1> : K == 1536 ? next_token_part<6> : next_token_part<0>;
    for (int r0 = 0; r0 < M; r0 += NT_ROWS) {
        int m = M - r0 < NT_ROWS ? M - r0 : NT_ROWS;
        cuda_launch(c, part, dim3(nblk), dim3(NT_THREADS), (size_t)m * K * sizeof(float),
                    (tok_pick *)c->tok_part, xp + (size_t)r0 * K, w, m, V, K, temperature, (unsigned long long)seed, r0,
                    vec);
        cuda_launch(c, next_token_final, dim3(m), dim3(NT_THREADS), 0, (int32_t *)ids.p, (float *)top2.p,
                    (const tok_pick *)c->tok_part, nblk, r0);
    }
}
