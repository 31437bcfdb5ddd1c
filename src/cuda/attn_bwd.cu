// attn_bwd.cu — attention's transpose for exact real-time chunking (backend.h attention_bwd, docs/model.md 3.11): the
// cotangents of the queries and of the suffix keys and values for the cotangent of attention's output, the prefix
// cache held constant. CPU twin: cpu_attention_bwd (double sums). mma.sync only (compute capability 8.0): the Hopper
// and the portable path run the same kernels. Allocates nothing: its logits and softmax statistics live in the
// attention scratch that reserve sized (backend.cu). The forward paths are attention.cu's and attn_*.cu's.
// Layout legend: H heads, Dh (hd) head dim, r query row, h head, t key.
#include <stdio.h>
#include <string.h>

#include "mma.cuh"

// Pairs (query row r, head h) of a segment see its n1 cache keys (source 1, constants) and then the first
// lim = (j < block0 ? block0 : ns) of its ns suffix keys (source 2, or the last ns keys of the source-1 range).
// With P the masked softmax of the logits s = scale q . k, dP = dout . v and dsum = sum_t P dP (= dout . o):
// dS = P (dP - dsum), dq = scale dS . K, dk = scale dS^T . q and dv = P^T . dout over the suffix keys.
// Three kernels per chunk of segments; the logits of every (pair, key) live in the attention scratch (scores: s, later
// P; att32: dP, later dS; row (r - r0) H + h of stride ld), the softmax statistics of each (pair, AB_BK-key chunk) in
// the probabilities' scratch (reserve sized it: half the logits' bytes):
//  1. ab_logits_kernel, block = AB_BP pairs of one segment and kv head (MQA: 8 query rows x 8 heads) x AB_BK keys: the
//     q, dout, k and v tiles through shared memory (cp.async in 64-column groups that the tensor cores take as they
//     land; w columns per pass: all 256 when the blocks fit in one wave, else 128, so that two blocks share an SM),
//     s and dP on mma m16n8k16 from ldmatrix (bf16 in, fp32 sums: the inputs are bf16 already, so the products are
//     exact and only the summation order differs from the CPU twin), both stored (s in base-2 units, s log2(e)),
//     and the chunk's statistics over the keys each pair sees: m_c = max s, l_c = sum 2^(s - m_c),
//     a_c = sum 2^(s - m_c) dP.
//  2. ab_softmax_kernel, a warp per pair: m = max m_c, l = sum l_c 2^(m_c - m), dsum = sum a_c 2^(m_c - m) / l (the
//     chunks over the lanes, fixed shuffle trees), then in place over the whole row (ld keys): dP -> dS and, on the
//     suffix keys, s -> P; 0 for the keys the pair does not see and the row's padding (so the products need no mask).
//  3. ab_grad_kernel: blocks of one 16-row m tile x AB_DC head-dim columns whose 8 warps split the reduction into k
//     steps of 16 (the block's tiles added in shared memory in warp order): dq blocks (16 pairs; k = the keys, dS . K)
//     and dk / dv blocks (16 suffix keys, one product; k = the segment's pairs of the kv head, dS^T . q or P^T . dout),
//     the fp32 operand and the bf16 rows streamed through an AB_ST-stage cp.async ring, the fp32 operand split into
//     bf16 hi + lo parts (hi + lo = x to 2^-17) so that the products keep ~16 more bits than one bf16 rounding.
// Deterministic: no atomics, every sum in a fixed order. A chunk is as many segments as the scratch (reserve's
// one-segment logits: query rows x heads x keys) and the launch's segment table (AB_SEGS, passed by value: a CUDA
// graph bakes it in) hold.
// Measured (H100, tests/test_cuda_ops PI0_TEST_TIME_ATTN_BWD=1; π0: 51 query rows x 8 heads, 1 kv head, head_dim
// 256, 816 cache keys + 51 suffix keys; bench/RESULTS.md L137): faster at B = 1, 8 and 64 than the four kernels
// before (logits fragments straight from global memory, a two-pass softmax kernel, dq and dk / dv kernels of 4-warp
// blocks). ncu (B = 1, serialised): the logits kernel runs one block per SM, its copies then its products then its
// epilogue, bound by shared-memory loads; the grad kernel at first formed P and dS itself and merged every pair's
// statistics in each dk / dv block, which was slower than the separate merge. Tried and slower: 16-warp blocks
// (the logits block's head dimension split over two 8-warp halves, the grad blocks' columns over two halves).
enum {
    AB_SEGS = 64,
    AB_BP = 64, AB_BK = 64, AB_W = 256,   // logits block: pairs x keys (= a statistics chunk); most columns per pass
    AB_DC = 64, AB_KS = 8, AB_GT = 32 * AB_KS,   // grad blocks: head-dim columns, warps (k steps per stage), threads
    AB_KC = 16 * AB_KS,                          // grad blocks: k per stage (keys for dq, pairs for dk / dv)
    AB_ST = 3,                                   // grad blocks: ring stages
    AB_LDA = AB_KC + 8, AB_LDK = AB_DC + 8, AB_LDU = 20,   // shared-memory row strides (elements)
    // one ring stage (bytes): dq: dS [16][AB_LDA] f32 + K [AB_KC][AB_LDK] bf16; dk / dv: P or dS [AB_KC][AB_LDU] f32 (the
    // 16 keys' columns from the 16-byte boundary below them) + q or dout [AB_KC][AB_LDK] bf16
    AB_STQ = 16 * AB_LDA * 4 + AB_KC * AB_LDK * 2, AB_STU = AB_KC * AB_LDU * 4 + AB_KC * AB_LDK * 2,
    AB_STAGE = AB_STQ > AB_STU ? AB_STQ : AB_STU,
    AB_GSMEM = AB_ST * AB_STAGE,   // 84 KB
};
static_assert(AB_BP == 64 && AB_BK == 64 && AB_KS == 8 && AB_DC == 64 && 16 * AB_LDA * 4 % 16 == 0 &&
              AB_KC * AB_LDU * 4 % 16 == 0 && AB_STAGE % 16 == 0 && AB_KS * 16 * AB_DC * 4 <= AB_GSMEM,
              "the kernels' copy and warp layouts assume these sizes");

struct ab_segs {
    int n;                  // segments in the chunk
    int r0;                 // its first query row
    int qo[AB_SEGS + 1];    // query rows [qo[i], qo[i + 1]) of segment i (rows of q)
    int ko[AB_SEGS];        // its first source-1 key row
    int n1[AB_SEGS];        // its cache keys (source-1 keys before the suffix keys)
    int ns[AB_SEGS];        // its suffix keys
    int to[AB_SEGS + 1];    // its first block of ab_logits_kernel
    int go[AB_SEGS + 1];    // its first block of ab_grad_kernel
};

struct ab_args {
    const bf16 *q, *dout, *k1, *v1, *k2, *v2;   // k2 == NULL: the suffix keys are the source-1 range's tail
    bf16 *dq, *dk, *dv;
    float *S, *G;    // scratch rows (stride ld): s, dP; then P (suffix keys), dS
    float *X;        // statistics: X[(3 c + i) npairs + row], i = 0, 1, 2: m_c, l_c, a_c of chunk c
    int H, group, kv_heads, hd, ld, block0, npairs, w, colb;
    int ldq, ldkv;   // the rows of dq; of dk and dv
    float sl2;       // scale log2(e)
    float scale;
};

// The segment s whose range [off[s], off[s + 1]) holds x (off ascending from off[0] <= x; empty segments skipped): a
// binary search (a linear one cost ~200 instructions per warp at B = 64).
__device__ __forceinline__ int ab_find(const int *off, int n, int x) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (off[mid] <= x) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// The pair's rows: query row and head of pair i of (segment s, kv head kvh), as r H + h.
__device__ __forceinline__ int ab_pair_row(int H, int group, const ab_segs *sg, int s, int kvh, int i) {
    if (group == H) return sg->qo[s] * H + i;   // one kv head (MQA): the pairs are consecutive rows
    return (sg->qo[s] + i / group) * H + kvh * group + i % group;
}

// The keys that query j of segment s sees: its n1 cache keys and the first lim of its suffix keys.
__device__ __forceinline__ int ab_seen(const ab_args &a, const ab_segs *sg, int s, int j) {
    int lim = j < a.block0 ? a.block0 : sg->ns[s];
    return sg->n1[s] + (lim < sg->ns[s] ? lim : sg->ns[s]);
}

// Key rows of segment s for kv head kvh: row t is kc + t kvw for t < n1 (the cache), else kx + (t - n1) kvw.
struct ab_keys {
    const bf16 *kc, *kx;
    __device__ __forceinline__ const bf16 *row(int t, int n1, int kvw) const {
        return t < n1 ? kc + (size_t)t * kvw : kx + (size_t)(t - n1) * kvw;
    }
};
__device__ __forceinline__ ab_keys ab_key_rows(const bf16 *src1, const bf16 *src2, const ab_segs *sg, int s, int kvw,
                                               int off) {
    const bf16 *kc = src1 + (size_t)sg->ko[s] * kvw + off;
    return {kc, src2 ? src2 + (size_t)sg->qo[s] * kvw + off : kc + (size_t)sg->n1[s] * kvw};
}

__device__ __forceinline__ void ab_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void ab_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// 8 bf16 of a row from column d into shared memory (16 bytes): V = 8 one cp.async (hd % 8 == 0, aligned rows), V = 1
// scalar loads with zeros past hd; zeros for row == NULL or d >= hd.
template <int V>
__device__ __forceinline__ void ab_stage8(bf16 *dst, const bf16 *row, int d, int hd) {
    if (row && d < hd) {
        if constexpr (V == 8) {
            cp_async16(dst, row + d);
        } else {
            uint32_t w[4];
#pragma unroll
            for (int x = 0; x < 4; x++) {
                uint32_t lo = d + 2 * x < hd ? __bfloat16_as_ushort(row[d + 2 * x]) : 0u;
                uint32_t hi = d + 2 * x + 1 < hd ? __bfloat16_as_ushort(row[d + 2 * x + 1]) : 0u;
                w[x] = lo | hi << 16;
            }
            *(uint4 *)dst = make_uint4(w[0], w[1], w[2], w[3]);
        }
    } else {
        *(uint4 *)dst = make_uint4(0, 0, 0, 0);
    }
}

// 4 floats of a scratch row from column u into shared memory, zeros past the row's ld columns or without a row.
__device__ __forceinline__ void ab_stage4(float *dst, const float *row, int u, int ld) {
    if (row && u < ld) cp_async16(dst, row + u);   // (ld % 4 == 0: all 4 or none)
    else *(float4 *)dst = make_float4(0, 0, 0, 0);
}

// Block (segment, kv head, AB_BP pairs i0 .., AB_BK keys t0 ..) with 8 warps: warp w takes pairs 16 (w & 3) .. + 15 and
// keys 32 (w >> 2) .. + 31 (4 n tiles). Shared memory: the q, dout, k, v tiles [4][64][w + 8] (bf16; rows past the pairs
// or keys and columns past hd are zeros); a pass stages w columns in 64-column copy groups, each taken by the tensor
// cores as soon as it lands.
template <int V>
__global__ void __launch_bounds__(256) ab_logits_kernel(ab_args a, const __grid_constant__ ab_segs sg) {
    extern __shared__ __align__(16) unsigned char ab_sm[];
    __shared__ float red[3][2][AB_BP];   // per key half: the rows' max, sum 2^(s - m), sum 2^(s - m) dP
    bf16 *tile = (bf16 *)ab_sm;
    const int LD = a.w + 8;
    int s = ab_find(sg.to, sg.n, blockIdx.x);
    int np = (sg.qo[s + 1] - sg.qo[s]) * a.group, per_kv = (np + AB_BP - 1) / AB_BP;
    int local = blockIdx.x - sg.to[s], kvh = local / per_kv, i0 = (local % per_kv) * AB_BP;
    int n1 = sg.n1[s], nk = n1 + sg.ns[s], t0 = blockIdx.y * AB_BK, kvw = a.kv_heads * a.hd;
    if (t0 >= nk) return;   // (the segment has fewer key chunks than the launch's longest)
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3, mt = warp & 3, kh = warp >> 2;
    // this thread copies 16-byte piece tid & 7 of each 64-column group of rows tid / 8 and tid / 8 + 32 of each tile
    const bf16 *src[4][2];
    ab_keys K = ab_key_rows(a.k1, a.k2, &sg, s, kvw, kvh * a.hd), W = ab_key_rows(a.v1, a.v2, &sg, s, kvw, kvh * a.hd);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int i = (tid >> 3) + 32 * h, t = t0 + i;
        size_t pr = i0 + i < np ? (size_t)ab_pair_row(a.H, a.group, &sg, s, kvh, i0 + i) * a.hd : 0;
        src[0][h] = i0 + i < np ? a.q + pr : NULL;
        src[1][h] = i0 + i < np ? a.dout + pr : NULL;
        src[2][h] = t < nk ? K.row(t, n1, kvw) : NULL;
        src[3][h] = t < nk ? W.row(t, n1, kvw) : NULL;
    }
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    float sc[4][4] = {}, dp[4][4] = {};
    for (int c0 = 0; c0 < a.hd; c0 += a.w) {
        int ng = (a.hd - c0 + 63) / 64;
        ng = ng < a.w / 64 ? ng : a.w / 64;
        if (c0) __syncthreads();   // the previous pass's reads are done
        for (int gi = 0; gi < ng; gi++) {
            int col = gi * 64 + (tid & 7) * 8;
#pragma unroll
            for (int x = 0; x < 4; x++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    ab_stage8<V>(tile + (x * AB_BP + (tid >> 3) + 32 * h) * LD + col, src[x][h], c0 + col, a.hd);
            ab_commit();
        }
        for (int gi = 0; gi < ng; gi++) {
            int left = ng - 1 - gi;   // copy groups that may still be in flight
            if (left >= 3) ab_wait<3>();
            else if (left == 2) ab_wait<2>();
            else if (left == 1) ab_wait<1>();
            else ab_wait<0>();
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                int col = gi * 64 + kk * 16;
                uint32_t qa[4], ga[4];
                ldsm_x4(qa, tile + (mt * 16 + (lane & 15)) * LD + col + (lane >> 4) * 8);
                ldsm_x4(ga, tile + (AB_BP + mt * 16 + (lane & 15)) * LD + col + (lane >> 4) * 8);
#pragma unroll
                for (int nb = 0; nb < 2; nb++) {   // key n tiles 2 nb, 2 nb + 1
                    int kr = kh * 32 + nb * 16 + (lane & 7) + (lane >> 4) * 8;
                    uint32_t kb[4], vb[4];
                    ldsm_x4(kb, tile + (2 * AB_BP + kr) * LD + col + ((lane >> 3) & 1) * 8);
                    ldsm_x4(vb, tile + (3 * AB_BP + kr) * LD + col + ((lane >> 3) & 1) * 8);
                    mma16816(sc[2 * nb], qa, kb[0], kb[1]);
                    mma16816(sc[2 * nb + 1], qa, kb[2], kb[3]);
                    mma16816(dp[2 * nb], ga, vb[0], vb[1]);
                    mma16816(dp[2 * nb + 1], ga, vb[2], vb[3]);
                }
            }
        }
    }
    // accumulator fragment: row g holds keys 2c, 2c + 1 of n tile n in [0], [1]; row g + 8 in [2], [3]
    int prow[2], vis[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int i = i0 + mt * 16 + g + 8 * h;
        prow[h] = i < np ? ab_pair_row(a.H, a.group, &sg, s, kvh, i) - sg.r0 * a.H : -1;
        vis[h] = i < np ? ab_seen(a, &sg, s, i / a.group) : 0;
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 4; n++) {
        int t = t0 + kh * 32 + n * 8 + 2 * c;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            sc[n][e] *= a.sl2;
            if (t + (e & 1) < vis[e >> 1]) mx[e >> 1] = fmaxf(mx[e >> 1], sc[n][e]);
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (prow[h] < 0) continue;
            float *so = a.S + (size_t)prow[h] * a.ld + t, *go = a.G + (size_t)prow[h] * a.ld + t;
            if (t + 1 < nk) {   // (ld and t even: 8-byte aligned)
                *(float2 *)so = make_float2(sc[n][2 * h], sc[n][2 * h + 1]);
                *(float2 *)go = make_float2(dp[n][2 * h], dp[n][2 * h + 1]);
            } else if (t < nk) {
                so[0] = sc[n][2 * h];
                go[0] = dp[n][2 * h];
            }
        }
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        if (c == 0) red[0][kh][mt * 16 + g + 8 * h] = mx[h];
    }
    __syncthreads();
    float l[2] = {0, 0}, sa[2] = {0, 0};
#pragma unroll
    for (int h = 0; h < 2; h++) mx[h] = fmaxf(red[0][0][mt * 16 + g + 8 * h], red[0][1][mt * 16 + g + 8 * h]);
#pragma unroll
    for (int n = 0; n < 4; n++) {
        int t = t0 + kh * 32 + n * 8 + 2 * c;
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (t + (e & 1) < vis[e >> 1]) {   // (then the row's max is finite)
                float p = ex2_ftz(sc[n][e] - mx[e >> 1]);
                l[e >> 1] += p;
                sa[e >> 1] += p * dp[n][e];
            }
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        sa[h] += __shfl_xor_sync(0xffffffffu, sa[h], 1);
        sa[h] += __shfl_xor_sync(0xffffffffu, sa[h], 2);
        if (c == 0) {
            red[1][kh][mt * 16 + g + 8 * h] = l[h];
            red[2][kh][mt * 16 + g + 8 * h] = sa[h];
        }
    }
    __syncthreads();
    if (tid < AB_BP && i0 + tid < np) {
        float *X = a.X + (size_t)blockIdx.y * 3 * a.npairs + (ab_pair_row(a.H, a.group, &sg, s, kvh, i0 + tid) - sg.r0 * a.H);
        X[0] = fmaxf(red[0][0][tid], red[0][1][tid]);
        X[a.npairs] = red[1][0][tid] + red[1][1][tid];
        X[2 * (size_t)a.npairs] = red[2][0][tid] + red[2][1][tid];
    }
}

// A warp per scratch row (pair): its statistics from the chunk partials (lane takes chunks lane, lane + 32, ...), then
// the row in float4 pieces, in place: G = dS everywhere, S = P on the suffix keys (t >= n1); 0 past the keys it sees.
__global__ void __launch_bounds__(256) ab_softmax_kernel(ab_args a, const __grid_constant__ ab_segs sg) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    int pr = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (pr >= a.npairs) return;
    int r = sg.r0 + pr / a.H, s = ab_find(sg.qo, sg.n, r), n1 = sg.n1[s];
    int nch = (n1 + sg.ns[s] + AB_BK - 1) / AB_BK, vis = ab_seen(a, &sg, s, r - sg.qo[s]);
    const float *X = a.X + pr;
    size_t st = a.npairs;
    float m = -INFINITY, l = 0, sa = 0;
    for (int ch = lane; ch < nch; ch += 32) m = fmaxf(m, X[3 * ch * st]);
    m = warp_max(m);
    if (m > -INFINITY)
        for (int ch = lane; ch < nch; ch += 32) {
            float f = ex2_ftz(X[3 * ch * st] - m);   // (0 for a chunk with no key seen: l_c = a_c = 0)
            l += X[(3 * ch + 1) * st] * f;
            sa += X[(3 * ch + 2) * st] * f;
        }
    l = warp_sum(l);
    sa = warp_sum(sa);
    float inv = l > 0 ? 1.0f / l : 0.0f, dsum = sa * inv;
    float *Sr = a.S + (size_t)pr * a.ld, *Gr = a.G + (size_t)pr * a.ld;
    for (int t0 = 4 * lane; t0 < a.ld; t0 += 4 * 128) {   // 4 pieces of the lane's in flight at once
        float4 sv[4], gv[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int t = t0 + 128 * k;
            sv[k] = t < a.ld ? *(const float4 *)(Sr + t) : make_float4(0, 0, 0, 0);
            gv[k] = t < a.ld ? *(const float4 *)(Gr + t) : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int t = t0 + 128 * k;
            if (t >= a.ld) break;
            float p[4] = {sv[k].x, sv[k].y, sv[k].z, sv[k].w}, d[4] = {gv[k].x, gv[k].y, gv[k].z, gv[k].w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float pe = ex2_ftz(p[e] - m) * inv;
                p[e] = t + e < vis ? pe : 0.0f;   // (selects: the unseen keys' and the padding's values never mix in)
                d[e] = t + e < vis ? pe * (d[e] - dsum) : 0.0f;
            }
            *(float4 *)(Gr + t) = make_float4(d[0], d[1], d[2], d[3]);
            if (t >= n1) {
                *(float4 *)(Sr + t) = make_float4(p[0], p[1], p[2], p[3]);
            } else if (t + 3 >= n1) {
#pragma unroll
                for (int e = 1; e < 4; e++)
                    if (t + e >= n1) Sr[t + e] = p[e];
            }
        }
    }
}

// x0, x1 as bf16 pairs hi + lo with hi + lo = x to ~2^-17.
__device__ __forceinline__ void ab_split(float x0, float x1, uint32_t &hi, uint32_t &lo) {
    hi = f2_to_bf2(x0, x1);
    float2 h = bf2_to_f2(hi);
    lo = f2_to_bf2(x0 - h.x, x1 - h.y);
}

// acc (8 n tiles: columns 8t .. 8t + 7 of the block's AB_DC) += A . B for one k step of 16: av[r][x] = A[row g + 8r]
// [k slot 2c + (x & 1) + 8 (x >> 1)] (fp32, split into hi + lo), B rows k (16) x AB_DC columns, bf16, row-major in
// shared memory at b (stride AB_LDK), taken with ldmatrix.trans.
__device__ __forceinline__ void ab_mma_step(float (&acc)[8][4], const float (&av)[2][4], const bf16 *b, int lane) {
    uint32_t ah[4], al[4];
    ab_split(av[0][0], av[0][1], ah[0], al[0]);
    ab_split(av[1][0], av[1][1], ah[1], al[1]);
    ab_split(av[0][2], av[0][3], ah[2], al[2]);
    ab_split(av[1][2], av[1][3], ah[3], al[3]);
#pragma unroll
    for (int np = 0; np < 4; np++) {   // n tiles 2 np, 2 np + 1
        uint32_t vb[4];
        ldsm_x4_t(vb, b + ((lane & 7) + ((lane >> 3) & 1) * 8) * AB_LDK + np * 16 + (lane >> 4) * 8);
        mma16816(acc[2 * np], ah, vb[0], vb[1]);
        mma16816(acc[2 * np], al, vb[0], vb[1]);
        mma16816(acc[2 * np + 1], ah, vb[2], vb[3]);
        mma16816(acc[2 * np + 1], al, vb[2], vb[3]);
    }
}

// The 8 warps' tiles (16 rows x AB_DC) summed in warp order into red[0 .. 16 AB_DC) (red: the ring's memory once its
// copies are done); the caller reads them after this returns.
__device__ __forceinline__ void ab_reduce(float *red, const float (&acc)[8][4], int warp, int lane) {
    int g = lane >> 2, c = lane & 3;
    float *r = red + warp * 16 * AB_DC;
    ab_wait<0>();
    __syncthreads();   // (the ring's last reads are done)
#pragma unroll
    for (int t = 0; t < 8; t++) {
        *(float2 *)(r + g * AB_DC + 8 * t + 2 * c) = make_float2(acc[t][0], acc[t][1]);
        *(float2 *)(r + (g + 8) * AB_DC + 8 * t + 2 * c) = make_float2(acc[t][2], acc[t][3]);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < 16 * AB_DC; e += AB_GT) {
        float v = red[e];
        for (int w = 1; w < AB_KS; w++) v += red[w * 16 * AB_DC + e];
        red[e] = v;   // (only this thread reads element e of the tiles)
    }
    __syncthreads();
}

// dq block: pairs i0 .. i0 + 15 of (segment s, kv head kvh) x columns c0 .. c0 + 63; k = the keys, AB_KC per stage.
template <int V>
__device__ __forceinline__ void ab_dq(const ab_args &a, const ab_segs &sg, int s, int local, unsigned char *sm) {
    int np = (sg.qo[s + 1] - sg.qo[s]) * a.group, ntile = (np + 15) / 16;
    int c0 = (local % a.colb) * AB_DC, rest = local / a.colb, i0 = (rest % ntile) * 16, kvh = rest / ntile;
    int n1 = sg.n1[s], nk = n1 + sg.ns[s], kvw = a.kv_heads * a.hd, nkc = (nk + AB_KC - 1) / AB_KC;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
    ab_keys K = ab_key_rows(a.k1, a.k2, &sg, s, kvw, kvh * a.hd);
    // copies: 16-byte piece tid % (AB_KC / 4) of dS rows tid / (AB_KC / 4) + 8 x; piece tid & 7 of K rows tid / 8 + 32 x
    constexpr int QPR = AB_KC / 4, QROWS = AB_GT / QPR;   // pieces per dS row, dS rows per pass
    const float *grow[16 / QROWS];
#pragma unroll
    for (int x = 0; x < 16 / QROWS; x++) {
        int i = i0 + tid / QPR + QROWS * x;
        grow[x] = i < np ? a.G + (size_t)(ab_pair_row(a.H, a.group, &sg, s, kvh, i) - sg.r0 * a.H) * a.ld : NULL;
    }
    auto load = [&](int kc) {   // key stage kc into ring slot kc % AB_ST
        float *As = (float *)(sm + (kc % AB_ST) * AB_STAGE);
        bf16 *Ks = (bf16 *)(As + 16 * AB_LDA);
        int t0 = kc * AB_KC;
#pragma unroll
        for (int x = 0; x < 16 / QROWS; x++)
            ab_stage4(As + (tid / QPR + QROWS * x) * AB_LDA + 4 * (tid % QPR), grow[x], t0 + 4 * (tid % QPR), a.ld);
#pragma unroll
        for (int x = 0; x < AB_KC / 32; x++) {
            int r = (tid >> 3) + 32 * x, t = t0 + r;
            ab_stage8<V>(Ks + r * AB_LDK + (tid & 7) * 8, t < nk ? K.row(t, n1, kvw) : NULL, c0 + (tid & 7) * 8, a.hd);
        }
        ab_commit();
    };
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
#pragma unroll
    for (int kc = 0; kc < AB_ST - 1; kc++) {
        if (kc < nkc) load(kc);
        else ab_commit();   // (empty groups keep the ring's count)
    }
    float acc[8][4] = {};
    for (int kc = 0; kc < nkc; kc++) {
        ab_wait<AB_ST - 2>();
        __syncthreads();
        if (kc + AB_ST - 1 < nkc) load(kc + AB_ST - 1);
        else ab_commit();
        const float *As = (const float *)(sm + (kc % AB_ST) * AB_STAGE);
        const bf16 *Ks = (const bf16 *)(As + 16 * AB_LDA);
        int kb = 16 * warp;
        float av[2][4];
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int x = 0; x < 2; x++) {
                float2 v = *(const float2 *)(As + (g + 8 * h) * AB_LDA + kb + 2 * c + 8 * x);
                av[h][2 * x] = v.x;
                av[h][2 * x + 1] = v.y;
            }
        ab_mma_step(acc, av, Ks + kb * AB_LDK, lane);
    }
    float *red = (float *)sm;
    ab_reduce(red, acc, warp, lane);
    for (int e = tid; e < 16 * AB_DC; e += AB_GT) {
        int i = i0 + e / AB_DC, d = c0 + e % AB_DC;
        if (i < np && d < a.hd)
        {
            int pr = ab_pair_row(a.H, a.group, &sg, s, kvh, i);   // r H + h
            a.dq[(size_t)(pr / a.H) * a.ldq + (size_t)(pr % a.H) * a.hd + d] = __float2bfloat16(red[e] * a.scale);
        }
    }
}

// dk or dv block: suffix keys u0 .. u0 + 15 of (segment s, kv head kvh) x columns c0 .. c0 + 63, product dv (0: dk =
// scale dS^T q, 1: dv = P^T dout); k = the segment's pairs of the kv head, AB_KC per stage. The 16 keys' columns of
// dS or P are staged from the 16-byte boundary cb below them (shift sh; AB_LDU = 20 columns).
template <int V>
__device__ __forceinline__ void ab_dkv(const ab_args &a, const ab_segs &sg, int s, int local, unsigned char *sm) {
    int nq = sg.qo[s + 1] - sg.qo[s], np = nq * a.group, nut = (nq + 15) / 16;
    int c0 = (local % a.colb) * AB_DC, rest = local / a.colb, u0 = (rest % nut) * 16;
    int dv = (rest / nut) & 1, kvh = (rest / nut) >> 1, npc = (np + AB_KC - 1) / AB_KC;
    int cb = (sg.n1[s] + u0) & ~3, sh = sg.n1[s] + u0 - cb, ns = sg.ns[s];
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
    const float *A = dv ? a.S : a.G;
    const bf16 *B = dv ? a.dout : a.q;
    auto load = [&](int pc) {   // pair stage pc into ring slot pc % AB_ST
        float *As = (float *)(sm + (pc % AB_ST) * AB_STAGE);
        bf16 *Bs = (bf16 *)(As + AB_KC * AB_LDU);
        int p0 = pc * AB_KC;
        for (int e = tid; e < AB_KC * (AB_LDU / 4); e += AB_GT) {
            int r = e / (AB_LDU / 4), q = e % (AB_LDU / 4), i = p0 + r;
            ab_stage4(As + r * AB_LDU + 4 * q,
                      i < np ? A + (size_t)(ab_pair_row(a.H, a.group, &sg, s, kvh, i) - sg.r0 * a.H) * a.ld : NULL,
                      cb + 4 * q, a.ld);
        }
#pragma unroll
        for (int x = 0; x < AB_KC / 32; x++) {
            int r = (tid >> 3) + 32 * x, i = p0 + r;
            ab_stage8<V>(Bs + r * AB_LDK + (tid & 7) * 8,
                         i < np ? B + (size_t)ab_pair_row(a.H, a.group, &sg, s, kvh, i) * a.hd : NULL, c0 + (tid & 7) * 8,
                         a.hd);
        }
        ab_commit();
    };
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
#pragma unroll
    for (int pc = 0; pc < AB_ST - 1; pc++) {
        if (pc < npc) load(pc);
        else ab_commit();
    }
    float acc[8][4] = {};
    bool uok[2] = {u0 + g < ns, u0 + g + 8 < ns};   // (columns past the suffix keys: the next row's or the padding)
    for (int pc = 0; pc < npc; pc++) {
        ab_wait<AB_ST - 2>();
        __syncthreads();
        if (pc + AB_ST - 1 < npc) load(pc + AB_ST - 1);
        else ab_commit();
        const float *As = (const float *)(sm + (pc % AB_ST) * AB_STAGE);
        const bf16 *Bs = (const bf16 *)(As + AB_KC * AB_LDU);
        int kb = 16 * warp;
        float av[2][4];
#pragma unroll
        for (int x = 0; x < 4; x++) {   // k slot 2c + (x & 1) + 8 (x >> 1): pair kb + that of the stage
            const float *col = As + (kb + 2 * c + (x & 1) + 8 * (x >> 1)) * AB_LDU + sh + g;
            av[0][x] = uok[0] ? col[0] : 0.0f;
            av[1][x] = uok[1] ? col[8] : 0.0f;
        }
        ab_mma_step(acc, av, Bs + kb * AB_LDK, lane);
    }
    float *red = (float *)sm;
    ab_reduce(red, acc, warp, lane);
    bf16 *out = dv ? a.dv : a.dk;
    float f = dv ? 1.0f : a.scale;
    for (int e = tid; e < 16 * AB_DC; e += AB_GT) {
        int u = u0 + e / AB_DC, d = c0 + e % AB_DC;
        if (u < nq && d < a.hd)   // rows past the segment's queries belong to the next segment
            out[(size_t)(sg.qo[s] + u) * a.ldkv + (size_t)kvh * a.hd + d] = __float2bfloat16(red[e] * f);
    }
}

// Blocks [go[s], go[s + 1]) of segment s: first its dk / dv blocks, then its dq blocks; the column block varies
// fastest (blocks that read the same dS rows run together).
template <int V>
__global__ void __launch_bounds__(AB_GT) ab_grad_kernel(ab_args a, const __grid_constant__ ab_segs sg) {
    extern __shared__ __align__(16) unsigned char ab_sm[];
    int s = ab_find(sg.go, sg.n, blockIdx.x), local = blockIdx.x - sg.go[s];
    int nq = sg.qo[s + 1] - sg.qo[s], ndkv = a.kv_heads * 2 * ((nq + 15) / 16) * a.colb;
    if (local < ndkv) ab_dkv<V>(a, sg, s, local, ab_sm);
    else ab_dq<V>(a, sg, s, local - ndkv, ab_sm);
}

// The logits block's dynamic shared memory at w columns per pass (its static part: 1.5 KB).
static inline int ab_k1_smem(int w) { return 4 * AB_BP * (w + 8) * 2; }

// Shared memory opt-in past 48 KB, the logits kernel's for up to wmax columns per pass (set outside a capture: the
// first run of a graph key is never captured).
static void ab_opt_in(cuda_ctx *c, int wmax) {
    const void *k1[2] = {(const void *)ab_logits_kernel<8>, (const void *)ab_logits_kernel<1>};
    const void *k2[2] = {(const void *)ab_grad_kernel<8>, (const void *)ab_grad_kernel<1>};
    for (int i = 0; i < 2; i++) {
        CUDA_NOTE(c, cudaFuncSetAttribute(k1[i], cudaFuncAttributeMaxDynamicSharedMemorySize, ab_k1_smem(wmax)));
        CUDA_NOTE(c, cudaFuncSetAttribute(k2[i], cudaFuncAttributeMaxDynamicSharedMemorySize, AB_GSMEM));
    }
}

void cuda_attention_bwd(pi0_backend *be, pt dq, pt dk, pt dv, pt dout, pt q, const pi0_attn *a, int ld) {
    cuda_ctx *c = CTX(be);
    if (c->err) return;
    PI0_ASSERT(a->kv_heads >= 1 && a->heads % a->kv_heads == 0);
    ab_args x = {};
    x.q = (const bf16 *)q.p; x.dout = (const bf16 *)dout.p;
    x.k1 = (const bf16 *)a->k1.p; x.v1 = (const bf16 *)a->v1.p;
    x.k2 = a->tail ? NULL : (const bf16 *)a->k2.p; x.v2 = a->tail ? NULL : (const bf16 *)a->v2.p;
    x.dq = (bf16 *)dq.p; x.dk = (bf16 *)dk.p; x.dv = (bf16 *)dv.p;
    x.S = c->scores; x.G = c->att32; x.X = (float *)c->probs;
    x.H = a->heads; x.group = a->heads / a->kv_heads; x.kv_heads = a->kv_heads; x.hd = a->head_dim;
    x.block0 = a->block0; x.scale = a->scale; x.sl2 = a->scale * 1.4426950408889634f;
    x.colb = cdiv(a->head_dim, AB_DC);
    x.ldq = ld ? ld : a->heads * a->head_dim;
    x.ldkv = ld ? ld : a->kv_heads * a->head_dim;
    // the logits blocks' most columns per pass: all of head_dim 256 (135 KB) where the device has the shared memory
    // (compute capability 8.0 / 9.0), else fewer (8.6 / 8.9 / 12.x: 99 KB); the grad blocks' 84 KB fit all of them
    int most = 0, wmax = a->head_dim < AB_W ? (a->head_dim + 63) / 64 * 64 : AB_W;
    CUDA_NOTE(c, cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device));
    while (wmax > 64 && ab_k1_smem(wmax) + 1536 > most) wmax -= 64;
    if (!c->capturing) ab_opt_in(c, wmax);
    int vec = a->head_dim % 8 == 0 && aligned16(x.q) && aligned16(x.dout) && aligned16(x.k1) && aligned16(x.v1) &&
              aligned16(x.k2) && aligned16(x.v2);
    // the logits' scratch (cap floats each) and the statistics' (the probabilities' scratch: cap bf16 = cap / 2 floats)
    size_t cap = c->scores_cap < c->att_cap ? c->scores_cap : c->att_cap;
    for (int s = 0; s < a->nseg;) {
        ab_segs sg;
        memset(&sg, 0, sizeof sg);
        sg.r0 = a->q_off[s];
        int lds = 0, maxk = 0, tiles = 0, blocks = 0;   // lds: the scratch rows' stride
        while (s + sg.n < a->nseg && sg.n < AB_SEGS) {
            int i = s + sg.n, nq = a->q_off[i + 1] - a->q_off[i], n1 = a->k_off[i + 1] - a->k_off[i];
            // suffix keys: the range's tail, or source 2's rows aligned with the queries, or none (then dk, dv = 0)
            int ns = a->tail ? a->tail : a->k2.p ? nq : 0, nc = a->tail ? n1 - a->tail : n1, nk = nc + ns;
            int ld2 = lds > ((nk + 3) & ~3) ? lds : (nk + 3) & ~3;   // rows of 16-byte multiples
            int maxk2 = nk > maxk ? nk : maxk;
            size_t pairs = (size_t)(a->q_off[i + 1] - sg.r0) * a->heads;
            if (pairs * ld2 > cap || pairs * 3 * cdiv(maxk2, AB_BK) > cap / 2) {
                if (sg.n) break;
                if (!c->err) {
                    c->err = PI0_ERR_ARG;
                    snprintf(c->errmsg, sizeof c->errmsg, "attention_bwd: a segment of %d queries x %d keys exceeds the "
                             "reserved scratch (%zu floats)", nq, nk, cap);
                }
                return;
            }
            int np = nq * x.group;
            sg.qo[sg.n] = a->q_off[i]; sg.ko[sg.n] = a->k_off[i]; sg.n1[sg.n] = nc; sg.ns[sg.n] = ns;
            sg.to[sg.n] = tiles;
            sg.go[sg.n] = blocks;
            tiles += a->kv_heads * cdiv(np, AB_BP);
            blocks += a->kv_heads * (2 * cdiv(nq, 16) + cdiv(np, 16)) * x.colb;
            lds = ld2;
            maxk = maxk2;
            sg.n++;
        }
        sg.qo[sg.n] = a->q_off[s + sg.n];
        sg.to[sg.n] = tiles;
        sg.go[sg.n] = blocks;
        s += sg.n;
        int rows = sg.qo[sg.n] - sg.r0;
        if (!rows) continue;
        x.ld = lds;
        x.npairs = rows * a->heads;
        int chunks = cdiv(maxk > 0 ? maxk : 1, AB_BK);
        // all head-dim columns at once while the logits blocks fit in one wave (B = 1: one block per SM, no pass
        // waits for another), else 128 per pass: 70 KB, two blocks per SM overlap their copies and products
        x.w = (long long)tiles * chunks <= c->sms || wmax < 128 ? wmax : 128;
        cuda_launch(c, vec ? ab_logits_kernel<8> : ab_logits_kernel<1>, dim3(tiles, chunks), dim3(256),
                    (size_t)ab_k1_smem(x.w), x, sg);
        cuda_launch(c, ab_softmax_kernel, dim3(cdiv(x.npairs, 8)), dim3(256), 0, x, sg);
        cuda_launch(c, vec ? ab_grad_kernel<8> : ab_grad_kernel<1>, dim3(blocks), dim3(AB_GT), (size_t)AB_GSMEM, x, sg);
    }
}
