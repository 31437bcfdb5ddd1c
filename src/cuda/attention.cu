// attention.cu — softmax attention over segments (backend.h `attention`, CPU twin cpu_attention).
// Three paths, tried in this order: decode attention (few query rows, below), flash attention (below), and the
// generic one for what neither takes (other head sizes, unaligned rows, PI0_CUDA_FLASH=0):
// per segment: logits = scale * Q.K^T by cuBLASLt into fp32 (`scores`), a masked softmax in fp32 that
// writes bf16 probabilities (the PT reference rounds probabilities to bf16 before P.V), then P.V.
//  - MQA (kv_heads == 1, Gemma): the query rows (token, head) form one [nq*H, hd] matrix, since all
//    heads share K and V, so each product is a single GEMM.
//  - MHA (kv_heads == heads, SigLIP): strided-batched GEMMs over the heads, or, for at least `heads`
//    equal images, a loop over the heads with the images as the batch.
//  - A second key source (the suffix's own K/V, docs/model.md 3.10) fills logits columns [n1, n1+n2); P.V then
//    accumulates both parts in fp32 and rounds once.
// The softmax is one warp per logits row.
// Few query rows against one key range (the denoise suffix: 11 queries x 8 heads = 88 rows, ~800 keys, MQA,
// head_dim 256; at B = 1 the suffix keys are the range's tail, at B > 1 a second source) go to decode_attn_kernel
// first: one launch for all equal segments, see below. At B = 8 the GEMM path took ~53 us per expert layer
// (S in two GEMMs, softmax, P V in two GEMMs, a conversion: ncu, bench/RESULTS.md L70). Batches past the decode
// kernel's two waves take flash attention. Flash attention runs the prefix (head_dim 256, MQA, no suffix mask) on
// flash_wg_kernel (wgmma + tensor copies) and the rest on flash_attn_kernel (mma.sync; PI0_CUDA_FLASH=mma sends the
// prefix there too, as it does where a tensor map cannot be made).
#include <cuda.h>
#include <math.h>

#include "common.cuh"
#include "mma.cuh"

// ---- decode attention: flash-decoding over a cluster of DA_SPLIT blocks ----
// Query rows r = j * H + h (row-major (rows, HD) = the q buffer as is; query j = r / H). Block (x, y, z) of
// the grid takes segment z (q, out, kc, vc, k2, v2 advanced by its strides sq, sq, sk, sk, s2), RT row tiles
// from 16 RT y (16 rows each) and key chunk x (DA_SPLIT chunks of `chunk` keys, a
// multiple of 16); the DA_SPLIT chunk blocks of a row group form one thread-block cluster. Per block: Q rows
// and the K/V chunk to shared memory (cp.async; prefix keys before the PDL wait: the cache's prefix rows were
// written before the predecessor started, common.cuh), S = scale Q K^T on the tensor cores (mma m16n8k16
// from ldmatrix), the masked softmax of the chunk with its own max m and sum l (fp32) straight from the S
// registers: per-warp row maxima and sums of the warp's 8 keys meet in shared memory; bf16 probabilities
// exp(s - m), O = P V (fp32). The cluster then merges the partial (m, l, O): block x finishes columns
// [x HD / DA_SPLIT, ...) of the rows, every block pushes its (m, l) and those O columns into block x's shared
// memory (st.async, counted on its mbarrier), and block x writes sum_x e^(m_x - M) O_x / sum_x e^(m_x - M)
// l_x, rounded to bf16 (the CPU twin rounds nothing; the PT reference rounds normalised probabilities: both
// within the op test's bound).
// RT = 2 when one row tile per block would need more than one wave of clusters (the 50-step horizon: 51 x 8
// rows, 26 clusters of 126 KB blocks): the blocks then share each K/V chunk between two row tiles.
// Mask (backend.h `tail`): key t is seen by query j iff t < n1 - tail, or t - (n1 - tail) <
// (j < block0 ? block0 : tail). With k2 != NULL the tail keys are rows t - (n1 - tail) of k2 / v2 (backend.h's
// second source: the same mask with tail = its row count).
// 16 warps: with 4 (one per scheduler) the kernel issued an instruction every 6.4 cycles and took ~12 us
enum { DA_SPLIT = 8, DA_HD = 256, DA_LD = DA_HD + 8, DA_WARPS = 16, DA_THREADS = 32 * DA_WARPS, DA_MAX_CHUNK = 128 };

// Shared memory: Q rows, K chunk, V chunk (bf16, padded rows), P (bf16), the warps' row maxima and sums, m, l,
// then what the cluster's blocks send for the merge: per rank, m and l of the rows and O of this block's
// HD / DA_SPLIT columns.
enum { DA_OC = DA_HD / DA_SPLIT };
static __host__ __device__ constexpr int da_recv(int rt) { return 16 * rt * (2 + DA_OC); }   // floats per rank
static size_t da_smem(int chunk, int rt) {
    return (size_t)(16 * rt + 2 * chunk) * DA_LD * 2 + (size_t)16 * rt * (chunk + 8) * 2 + 2 * DA_WARPS * 16 * rt * 4 +
           32 * rt * 4 + (size_t)DA_SPLIT * da_recv(rt) * 4;
}

template <int RT>
__global__ void __cluster_dims__(DA_SPLIT, 1, 1) __launch_bounds__(DA_THREADS)
decode_attn_kernel(bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc, const bf16 *k2, const bf16 *v2,
                   long long sq, long long sk, long long s2, int rows, int H, int n1, int tail, int block0, int chunk,
                   float scale) {
    constexpr int NR = 16 * RT, RECV = da_recv(RT);
    extern __shared__ __align__(16) unsigned char da_sm[];
    bf16 *Qs = (bf16 *)da_sm, *Ks = Qs + NR * DA_LD, *Vs = Ks + (size_t)chunk * DA_LD;
    bf16 *Ps = Vs + (size_t)chunk * DA_LD;
    float *wmx = (float *)(Ps + NR * (chunk + 8)), *wsum = wmx + DA_WARPS * NR;   // [warp][row]
    float *ml = wsum + DA_WARPS * NR;                 // m[NR], l[NR]
    float *recv = ml + 2 * NR;                        // [DA_SPLIT][m NR | l NR | O NR x DA_OC]
    __shared__ __align__(8) uint64_t rbar;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    q += blockIdx.z * sq;   // segment z of a batch of equal segments
    out += blockIdx.z * sq;
    kc += blockIdx.z * sk;
    vc += blockIdx.z * sk;
    if (k2) { k2 += blockIdx.z * s2; v2 += blockIdx.z * s2; }
    if (tid == 0) {   // the other DA_SPLIT - 1 blocks' parts arrive on rbar (st.async)
        mbar_init(&rbar, 1);
        fence_barrier_init();
        mbar_expect_tx(&rbar, (DA_SPLIT - 1) * RECV * 4);
    }
    __syncthreads();
    cluster_arrive_relaxed();   // every rbar is initialised when the cluster wait below returns
    const int x = blockIdx.x, r0 = blockIdx.y * NR, t0 = x * chunk, nvis = n1 - tail, early = tail > 0 ? nvis : 0;
    const int ldP = chunk + 8, ntiles = chunk / 8;
    // K/V chunk rows: with a tail, the cached prefix rows before the wait, the rest after; rows past n1 are zeros
    for (int pass = 0; pass < 2; pass++) {
        for (int i = tid; i < chunk * (DA_HD / 8); i += DA_THREADS) {
            int row = i / (DA_HD / 8), col = (i % (DA_HD / 8)) * 8, t = t0 + row;
            bf16 *kd = Ks + row * DA_LD + col, *vd = Vs + row * DA_LD + col;
            if (t >= n1) {
                if (pass == 0) { *(uint4 *)kd = make_uint4(0, 0, 0, 0); *(uint4 *)vd = make_uint4(0, 0, 0, 0); }
            } else if ((t < early) == (pass == 0)) {   // tail keys from the second source when there is one
                const bool second = k2 && t >= nvis;
                const size_t off = (size_t)(second ? t - nvis : t) * DA_HD + col;
                cp_async16(kd, (second ? k2 : kc) + off);
                cp_async16(vd, (second ? v2 : vc) + off);
            }
        }
        if (pass == 0) {
            pdl_wait();
            pdl_trigger();
        }
    }
    for (int i = tid; i < NR * (DA_HD / 8); i += DA_THREADS) {
        int row = i / (DA_HD / 8), col = (i % (DA_HD / 8)) * 8;
        bf16 *qd = Qs + row * DA_LD + col;
        if (r0 + row < rows) cp_async16(qd, q + (size_t)(r0 + row) * DA_HD + col);
        else *(uint4 *)qd = make_uint4(0, 0, 0, 0);
    }
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
    __syncthreads();

    // S = scale Q K^T: warp w takes key tile w (8 keys; chunk <= 128 = 16 tiles) for every row tile; even and odd
    // k steps in two accumulators (two dependency chains), added at the end
    const int nt = warp, kt = t0 + nt * 8 + 2 * c;   // this lane's keys kt, kt + 1
    float s[RT][4];
    if (nt < ntiles) {
        float s2[RT][4] = {};
#pragma unroll
        for (int r = 0; r < RT; r++) s[r][0] = s[r][1] = s[r][2] = s[r][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < DA_HD / 16; kk += 2) {
            uint32_t kb[4];   // K rows nt*8 .. +7 for k steps kk, kk + 1
            ldsm_x4(kb, Ks + (nt * 8 + (lane & 7)) * DA_LD + kk * 16 + (lane >> 3) * 8);
#pragma unroll
            for (int r = 0; r < RT; r++) {
                uint32_t qa0[4], qa1[4];
                ldsm_x4(qa0, Qs + (16 * r + (lane & 15)) * DA_LD + kk * 16 + (lane >> 4) * 8);
                ldsm_x4(qa1, Qs + (16 * r + (lane & 15)) * DA_LD + (kk + 1) * 16 + (lane >> 4) * 8);
                mma16816(s[r], qa0, kb[0], kb[1]);
                mma16816(s2[r], qa1, kb[2], kb[3]);
            }
        }
        // scale and mask; the warp's row maxima over its 8 keys (quad lanes hold the row's 8 keys)
#pragma unroll
        for (int r = 0; r < RT; r++)
#pragma unroll
            for (int h = 0; h < 2; h++) {   // rows 16 r + g + 8 h: elements 2h, 2h + 1
                int j = (r0 + 16 * r + g + 8 * h) / H, lim = j < block0 ? block0 : tail;
                float mx = -INFINITY;
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    int t = kt + e;
                    bool seen = t < n1 && (t < nvis || t - nvis < lim);
                    float v = seen ? (s[r][2 * h + e] + s2[r][2 * h + e]) * scale : -INFINITY;
                    s[r][2 * h + e] = v;
                    mx = fmaxf(mx, v);
                }
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                if (c == 0) wmx[warp * NR + 16 * r + g + 8 * h] = mx;
            }
    } else if (c == 0) {   // a warp without keys: the neutral maximum and sum, so the loops below have fixed bounds
#pragma unroll
        for (int r = 0; r < 2 * RT; r++) { wmx[warp * NR + 8 * r + g] = -INFINITY; wsum[warp * NR + 8 * r + g] = 0.0f; }
    }
    __syncthreads();
    if (nt < ntiles) {   // P = exp(s - m) with m the chunk's row maximum; the warp's row sums of the fp32 values
#pragma unroll
        for (int r = 0; r < RT; r++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = 16 * r + g + 8 * h;
                float m = -INFINITY;   // (all DA_WARPS, unrolled: the loads go out together, not as a chain)
#pragma unroll
                for (int w = 0; w < DA_WARPS; w++) m = fmaxf(m, wmx[w * NR + row]);
                float e0 = m == -INFINITY ? 0.0f : expf(s[r][2 * h] - m);
                float e1 = m == -INFINITY ? 0.0f : expf(s[r][2 * h + 1] - m);
                *(__nv_bfloat162 *)(Ps + row * ldP + nt * 8 + 2 * c) = __floats2bfloat162_rn(e0, e1);
                float sum = e0 + e1;
                sum += __shfl_xor_sync(0xffffffffu, sum, 1);
                sum += __shfl_xor_sync(0xffffffffu, sum, 2);
                if (c == 0) {
                    wsum[warp * NR + row] = sum;
                    if (warp == 0) ml[row] = m;
                }
            }
    }
    __syncthreads();
    if (tid < NR) {   // the chunk's row sums, in warp order
        float l = 0;
#pragma unroll
        for (int w = 0; w < DA_WARPS; w++) l += wsum[w * NR + tid];
        ml[NR + tid] = l;
    }
    // O = P V: warp w takes head-dim columns [16 w, 16 w + 16) = 2 n-tiles, for every row tile
    float o[RT][2][4] = {};
#pragma unroll
    for (int kk = 0; kk < DA_MAX_CHUNK / 16; kk++) {
        if (kk >= chunk / 16) break;
        uint32_t vb[4];   // vb: (keys kk*16 .. +15) x (the 2 n-tiles), transposed
        int mi = lane >> 3;
        ldsm_x4_t(vb, Vs + (kk * 16 + (mi & 1) * 8 + (lane & 7)) * DA_LD + warp * 16 + (mi >> 1) * 8);
#pragma unroll
        for (int r = 0; r < RT; r++) {
            uint32_t pa[4];
            ldsm_x4(pa, Ps + (16 * r + (lane & 15)) * ldP + kk * 16 + (lane >> 4) * 8);
            mma16816(o[r][0], pa, vb[0], vb[1]);
            mma16816(o[r][1], pa, vb[2], vb[3]);
        }
    }
    // merge: block r finishes columns [r DA_OC, r DA_OC + DA_OC) of the rows; every block pushes its (m, l) and
    // its O columns there (st.async: no cluster barrier, whose wait grew under the next product's weight stream)
    cluster_wait();
    const int me = x;   // the cluster rank (cluster dims DA_SPLIT x 1)
#pragma unroll
    for (int r = 0; r < RT; r++)
#pragma unroll
        for (int n = 0; n < 2; n++) {
            int col = warp * 16 + n * 8 + 2 * c, dr = col / DA_OC, k = col % DA_OC;
            float *d0 = recv + me * RECV + 2 * NR + (16 * r + g) * DA_OC + k, *d1 = d0 + 8 * DA_OC;
            if (dr == me) {
                d0[0] = o[r][n][0]; d0[1] = o[r][n][1]; d1[0] = o[r][n][2]; d1[1] = o[r][n][3];
            } else {
                st_async_f32x2(d0, dr, o[r][n][0], o[r][n][1], &rbar);
                st_async_f32x2(d1, dr, o[r][n][2], o[r][n][3], &rbar);
            }
        }
    __syncthreads();   // ml complete
    for (int i = tid; i < DA_SPLIT * 2 * NR; i += DA_THREADS) {
        int dr = i / (2 * NR), j = i % (2 * NR);
        float *d = recv + me * RECV + j;
        if (dr == me) *d = ml[j];
        else st_async_f32(d, dr, ml[j], &rbar);
    }
    __syncthreads();
    mbar_wait(&rbar, 0);
    for (int i = tid; i < NR * DA_OC; i += DA_THREADS) {   // thread: one row, one of this block's DA_OC columns
        const int row = i / DA_OC, k = i % DA_OC, col = x * DA_OC + k;
        float M = -INFINITY, L = 0, acc = 0;
#pragma unroll
        for (int r = 0; r < DA_SPLIT; r++) M = fmaxf(M, recv[r * RECV + row]);
#pragma unroll
        for (int r = 0; r < DA_SPLIT; r++) {   // a chunk with no visible key has m = -inf and O = 0
            float mr = recv[r * RECV + row], e = mr == -INFINITY ? 0.0f : expf(mr - M);
            L += e * recv[r * RECV + NR + row];
            acc += e * recv[r * RECV + 2 * NR + row * DA_OC + k];
        }
        if (r0 + row < rows) out[(size_t)(r0 + row) * DA_HD + col] = __float2bfloat16(L > 0 ? acc / L : 0.0f);
    }
}

// Launches decode attention for g equal segments when it applies (returns 1), else returns 0: nq queries and n1
// source-1 keys each, packed one after the other (q, out: nq rows apart; k, v: n1 rows; k2, v2: nq rows). With a
// second source its nq keys count as the tail of an n1 + nq key range (the same mask, backend.h); its rows are
// read after the PDL wait like the tail's, the first n1 - tail cached keys before it.
static int decode_attention(cuda_ctx *c, bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *k2,
                            const bf16 *v2, int g, int nq, const pi0_attn *a, int n1) {
    int rows = nq * a->heads, nk = n1 + (k2 ? nq : 0), tail = k2 ? nq : a->tail;
    int chunk = (cdiv(nk, DA_SPLIT) + 15) / 16 * 16;
    if (!c->fused_small || a->kv_heads != 1 || a->head_dim != DA_HD || (k2 && a->tail) || rows > 16 * 64 || nk < 1 ||
        chunk > DA_MAX_CHUNK || g < 1 || g > 65535 ||
        ((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)k2 | (uintptr_t)v2 | (uintptr_t)out) & 15)
        return 0;
    // Two row tiles per block when one would need more than a wave; batches only while they fit in two waves: the
    // blocks (~145 KB of shared memory, one per SM) are latency-bound: at B = 64 (1536 blocks) even the GEMM path
    // was faster (denoise 41 against 50-53 ms; B = 8, 192 blocks: 19.9 -> 14.8 ms; bench/RESULTS.md L70), and
    // flash attention takes such batches
    const int rt = (long long)g * cdiv(rows, 16) * DA_SPLIT > c->sms ? 2 : 1;
    if (g > 1 && (long long)g * cdiv(rows, 16 * rt) * DA_SPLIT > 2 * c->sms) return 0;
    long long sq = (long long)rows * DA_HD, sk = (long long)n1 * DA_HD, s2 = (long long)nq * DA_HD;
    if (rt == 2)
        cuda_launch(c, decode_attn_kernel<2>, dim3(DA_SPLIT, cdiv(rows, 32), g), dim3(DA_THREADS), da_smem(chunk, 2), out,
                    q, k, v, k2, v2, sq, sk, s2, rows, a->heads, nk, tail, a->block0, chunk, a->scale);
    else
        cuda_launch(c, decode_attn_kernel<1>, dim3(DA_SPLIT, cdiv(rows, 16), g), dim3(DA_THREADS), da_smem(chunk, 1), out,
                    q, k, v, k2, v2, sq, sk, s2, rows, a->heads, nk, tail, a->block0, chunk, a->scale);
    return 1;
}

// ---- flash attention: prefix (MQA, head_dim 256) and SigLIP (MHA, head_dim 72) segments ----
// For segments whose queries see every key of their own range (the compacted prefix, docs/model.md 3.6, and SigLIP's
// images, 3.4), and for MQA suffix segments that decode attention does not take (batches past its two waves:
// at B = 64 the GEMM path took ~92 us per expert layer under ncu, bench/RESULTS.md L71).
// FlashAttention-2 order: a block owns FA_BM = 64 query rows
// (4 warps x 16), walks the segment's keys in tiles of FA_BN = 64 or 32 (K/V double-buffered through cp.async),
// S = Q K^T on mma m16n8k16 (ldmatrix from shared memory), an online softmax in fp32 (running row max m
// and sum l, base-2 exponentials of scale * log2(e) * S), P rounded to bf16 straight from the S registers
// into the A operand of O += P V, and O / l rounded to bf16 at the end. The logits never reach memory:
// the GEMM path (QK^T to fp32 logits, softmax kernel, PV) took 72 us per prefix layer (pi0-3cam) and
// 53 us per SigLIP layer (3 images) under ncu on the H100.
//  - Limits (ncu, H100, head_dim 256): one block of 4 warps per SM (225 registers, 169 KB of shared
//    memory), 3.3 cycles between a warp's instructions, shared-memory (ldmatrix) traffic at 55% of its
//    peak: 42 us per prefix layer. With more blocks than SMs (batches) the 32-key tiles (101 KB) let two
//    blocks share an SM (bench/RESULTS.md L74). Splitting each key tile over 8 warps (two (m, l, O) merged at the end)
//    measured 45 us: the Q and K/V fragments' shared-memory traffic, not the issue rate, is the next bound.
//  - Lazy rescaling: the running max moves (and O, l are rescaled) only when a row's tile max exceeds it
//    by more than FA_SLACK (base-2 units), decided per warp; otherwise P = 2^(s - m) <= 2^FA_SLACK, which
//    bf16 and the fp32 sums hold exactly as well. Keys past the segment are masked in the last tile only.
// Query rows: MQA stacks (token, head) as rows of HD (all heads share K/V), MHA takes one head per block
// (grid y) with rows = tokens. Grid z: equal-length consecutive segments. Suffix mask (backend.h, MQA only): the
// last `tail` of the nk keys are suffix keys, seen by query j = row / H iff their index in the tail is below
// (j < block0 ? block0 : tail); with a second source (k2, v2: rows aligned with the queries) they are its rows,
// otherwise the range's. Tiles that reach past the nk - tail keys seen by every row are masked per row (every
// row sees key 0, so the first tile's maxima are finite). SFX: the mask and the second source are compiled in,
// for suffixes only (without them the prefix kernel keeps 235 registers instead of 242 and took 5% less time at
// B = 64, and the head_dim-72 kernel 127 registers: 4 blocks per SM). HD is padded to HDP (a multiple
// of 16) with zero columns in shared memory for the k-dimension of Q K^T; P V computes HDP columns and
// stores HD. Rounding differs from the PT reference (unnormalised probabilities in bf16 instead of
// normalised ones): within the attention op test's bound.
enum { FA_BM = 64 };
#define FA_SLACK 8.0f

template <int HD, int HDP, int BN> static size_t fa_smem() { return (size_t)(FA_BM + 4 * BN) * (HDP + 8) * 2; }

template <int HD, int HDP, bool SFX, int FA_BN>
__global__ void __launch_bounds__(128, 1)
flash_attn_kernel(bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *k2, const bf16 *v2, int rows,
                  int nk, int tail, int block0, int H, int q_rs, int kv_rs, long long q_seg, long long kv_seg,
                  long long k2_seg, int kv_hs, float sl2) {
    constexpr int LD = HDP + 8, CH = HD / 8, CHP = HDP / 8, NT = HDP / 8, THREADS = 128;
    extern __shared__ __align__(16) unsigned char fa_sm[];
    bf16 *Qs = (bf16 *)fa_sm, *Ks = Qs + FA_BM * LD, *Vs = Ks + 2 * FA_BN * LD;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int r0 = blockIdx.x * FA_BM;
    const size_t qo = (size_t)blockIdx.z * q_seg + (size_t)blockIdx.y * HD;
    const size_t ko = (size_t)blockIdx.z * kv_seg + (size_t)blockIdx.y * kv_hs;
    q += qo; out += qo; k += ko; v += ko;
    if (SFX && k2) { k2 += (size_t)blockIdx.z * k2_seg; v2 += (size_t)blockIdx.z * k2_seg; }
    const int nvis = SFX ? nk - tail : nk;
    if constexpr (CHP > CH)   // zero pad columns of Q and of both K/V buffers (never written by the copies)
        for (int i = tid; i < (FA_BM + 4 * FA_BN) * (CHP - CH); i += THREADS)
            *(uint4 *)(Qs + (i / (CHP - CH)) * LD + (CH + i % (CHP - CH)) * 8) = make_uint4(0, 0, 0, 0);
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    for (int i = tid; i < FA_BM * CH; i += THREADS) {
        int row = i / CH, col = (i % CH) * 8;
        bf16 *d = Qs + row * LD + col;
        if (r0 + row < rows) cp_async16(d, q + (size_t)(r0 + row) * q_rs + col);
        else *(uint4 *)d = make_uint4(0, 0, 0, 0);
    }
    auto load_kv = [&](int j, int buf) {   // key tile j into buffer buf; rows past nk are zeros
        bf16 *kd = Ks + buf * FA_BN * LD, *vd = Vs + buf * FA_BN * LD;
        for (int i = tid; i < FA_BN * CH; i += THREADS) {
            int row = i / CH, col = (i % CH) * 8, t = j * FA_BN + row;
            if (t < nk) {
                const bool second = SFX && k2 && t >= nvis;
                const size_t off = (size_t)(second ? t - nvis : t) * kv_rs + col;
                cp_async16(kd + row * LD + col, (second ? k2 : k) + off);
                cp_async16(vd + row * LD + col, (second ? v2 : v) + off);
            } else {
                *(uint4 *)(kd + row * LD + col) = make_uint4(0, 0, 0, 0);
                *(uint4 *)(vd + row * LD + col) = make_uint4(0, 0, 0, 0);
            }
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    load_kv(0, 0);
    float o[NT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
#pragma unroll
    for (int n = 0; n < NT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0;
    const int ntiles = (nk + FA_BN - 1) / FA_BN;
    int lim[2];   // tail keys seen by this thread's rows g, g + 8
#pragma unroll
    for (int r = 0; r < 2; r++) lim[r] = SFX && (r0 + warp * 16 + g + 8 * r) / H < block0 ? block0 : tail;
    for (int j = 0; j < ntiles; j++) {
        if (j + 1 < ntiles) {
            load_kv(j + 1, (j + 1) & 1);
            asm volatile("cp.async.wait_group 1;" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;" ::: "memory");
        }
        __syncthreads();
        const bf16 *Kb = Ks + (j & 1) * FA_BN * LD, *Vb = Vs + (j & 1) * FA_BN * LD;
        float s[FA_BN / 8][4];
#pragma unroll
        for (int n = 0; n < FA_BN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0;
#pragma unroll
        for (int kk = 0; kk < HDP / 16; kk++) {
            uint32_t qa[4];
            ldsm_x4(qa, Qs + (warp * 16 + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int np = 0; np < FA_BN / 16; np++) {   // key n-tiles 2 np, 2 np + 1
                uint32_t kb[4];
                ldsm_x4(kb, Kb + (np * 16 + (lane & 7) + (lane >> 4) * 8) * LD + kk * 16 + ((lane >> 3) & 1) * 8);
                mma16816(s[2 * np], qa, kb[0], kb[1]);
                mma16816(s[2 * np + 1], qa, kb[2], kb[3]);
            }
        }
        // online softmax: this thread holds rows g (e = 0, 1) and g + 8 (e = 2, 3) of the warp's 16
        const bool edge = (j + 1) * FA_BN > nvis;   // block-uniform: keys past those every row sees
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < FA_BN / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[n][e] *= sl2;
                const int t = j * FA_BN + n * 8 + 2 * c + (e & 1);
                if (edge && t >= nvis && (t >= nk || (SFX && t - nvis >= lim[e >> 1]))) s[n][e] = -INFINITY;
                mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
            }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        }
        if (__any_sync(0xffffffffu, mx[0] > m[0] + FA_SLACK || mx[1] > m[1] + FA_SLACK)) {
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float mn = fmaxf(m[r], mx[r]), alpha = exp2f(m[r] - mn);   // tile 0 has key 0: mn is finite
                l[r] *= alpha;
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    o[n][2 * r] *= alpha;
                    o[n][2 * r + 1] *= alpha;
                }
                m[r] = mn;
            }
        }
        uint32_t pa[FA_BN / 16][4];
#pragma unroll
        for (int n = 0; n < FA_BN / 8; n++) {
            float p0 = exp2f(s[n][0] - m[0]), p1 = exp2f(s[n][1] - m[0]);
            float p2 = exp2f(s[n][2] - m[1]), p3 = exp2f(s[n][3] - m[1]);
            l[0] += p0 + p1;
            l[1] += p2 + p3;
            __nv_bfloat162 lo = __floats2bfloat162_rn(p0, p1), hi = __floats2bfloat162_rn(p2, p3);
            pa[n >> 1][(n & 1) * 2] = *(uint32_t *)&lo;
            pa[n >> 1][(n & 1) * 2 + 1] = *(uint32_t *)&hi;
        }
#pragma unroll
        for (int kk = 0; kk < FA_BN / 16; kk++)
#pragma unroll
            for (int np = 0; np < HDP / 16; np++) {   // output n-tiles 2 np, 2 np + 1
                uint32_t vb[4];
                ldsm_x4_t(vb, Vb + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + np * 16 + (lane >> 4) * 8);
                mma16816(o[2 * np], pa[kk], vb[0], vb[1]);
                mma16816(o[2 * np + 1], pa[kk], vb[2], vb[3]);
            }
        __syncthreads();   // the next iteration's copies overwrite this buffer
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    l[0] = 1.0f / l[0];
    l[1] = 1.0f / l[1];
#pragma unroll
    for (int n = 0; n < NT; n++) {
        int col = n * 8 + 2 * c;
        if (col >= HD) continue;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int row = r0 + warp * 16 + g + 8 * r;
            if (row < rows)
                *(__nv_bfloat162 *)(out + (size_t)row * q_rs + col) =
                    __floats2bfloat162_rn(o[n][2 * r] * l[r], o[n][2 * r + 1] * l[r]);
        }
    }
}

// ---- flash attention for the prefix on the warpgroup MMA (head_dim 256, MQA, no suffix mask) ----
// flash_attn_kernel's algorithm and roundings with the products on wgmma (mma.cuh) and the operands brought by tensor
// copies (TMA). A block owns FW_BM = 64 stacked query rows; its FW_WG = 2 warpgroups split the segment's key tiles of
// FW_BN = 64 (warpgroup w takes tiles 2 j + w) and merge (m, l, O) through shared memory at the end. Q (64 x 256)
// and each warpgroup's K tile (FW_KB = 1 buffer) and V tiles (FW_VB = 2) sit in shared memory as four 64-column
// slabs in the 128-byte swizzle, each tile filled by 4 tensor copies that complete on its buffer's mbarrier.
//  - S = Q K^T: 16 wgmma m64n64k16, both operands from shared memory. O += P V: 4 wgmma m64n256k16 (one per 16
//    keys) with P from registers (S's accumulator layout is the A fragment layout) and V read MN-major across its
//    four slabs. The softmax's row maxima and sums are trees (short dependent chains); O leaves through shared
//    memory in 16-byte stores.
//  - Step i issues S of tile i and P V of tile i - 1, waits for S only and runs the softmax of tile i while P V is
//    in the tensor cores (FlashAttention-3's overlap inside a warpgroup); a move of the running max (lazy, rare)
//    rescales O once P V has landed. P alternates between two register sets, and the steps are written out (first /
//    pairs / last) so that every wgmma wait is unconditional where ptxas sees it (bench/RESULTS.md L67: waits under
//    conditions serialise the products).
//  - Thread 0 of a warpgroup refills its K buffer once S has landed and a V buffer once P V has, each after a
//    barrier of the warpgroup (each warp's wait covers its own share of a product).
//  - Keys past the segment (the last tile only) read the next segment's rows or zeros (past the map, whose rows end
//    with the last segment): finite values, masked to -inf, so that their P is 0.
// ncu, one prefix layer of pi0-3cam (99 blocks): 18.4 us against 41.2 for the mma.sync kernel, which reads every
// K / V fragment once per warp through ldmatrix; one warpgroup per block walking all tiles took 21.1
// (bench/RESULTS.md L84-L88, with the variants that did not pay). The products alone would run at the tensor peak (lab
// wgmma_rate.cu): the time goes to each step's chain of S, softmax and refill.
enum { FW_BM = 64, FW_BN = 64, FW_HD = 256, FW_SLAB = FW_BN * 128, FW_TILE = 4 * FW_SLAB, FW_WG = 2, FW_KB = 1, FW_VB = 2,
       FW_BUFS = 1 + FW_WG * (FW_KB + FW_VB) };   // tiles in shared memory: Q, then each warpgroup's K and V
static size_t fw_smem() { return (size_t)FW_BUFS * FW_TILE + 1024 + 8 * FW_BUFS; }

// ex2_ftz (common.cuh): bf16 P and the fp32 row sums need no results below 2^-126.

// v[0] = op over v[0 .. N) (N a power of two) in log2(N) dependent steps instead of N - 1.
template <int N, typename F> __device__ __forceinline__ void tree_reduce(float *v, F op) {
    if constexpr (N > 1) {
#pragma unroll
        for (int j = 0; j < N / 2; j++) v[j] = op(v[j], v[j + N / 2]);
        tree_reduce<N / 2>(v, op);
    }
}

__device__ __forceinline__ void wg_bar(int id) { asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory"); }

__global__ void __launch_bounds__(128 * FW_WG, 1)
flash_wg_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                const __grid_constant__ CUtensorMap tv, bf16 *out, int rows, int nk, float sl2) {
    extern __shared__ unsigned char fw_raw[];
    unsigned char *Qs = fw_raw + ((1024 - (smem_u32(fw_raw) & 1023)) & 1023);   // swizzle atoms: 1024-byte aligned
    const int wg = threadIdx.x >> 7, t = threadIdx.x & 127, warp = t >> 5, g = (t & 31) >> 2, c = t & 3;
    unsigned char *Ks = Qs + (1 + wg * (FW_KB + FW_VB)) * FW_TILE, *Vs = Ks + FW_KB * FW_TILE;
    uint64_t *bar = (uint64_t *)(Qs + FW_BUFS * FW_TILE);   // bar[0]: Q, then each warpgroup's K and V buffers
    uint64_t *kbar = bar + 1 + wg * (FW_KB + FW_VB), *vbar = kbar + FW_KB;
    const int r0 = blockIdx.x * FW_BM, krow = blockIdx.z * nk, nt = (nk + FW_BN - 1) / FW_BN;
    const int mine = (nt - wg + 1) / FW_WG;   // this warpgroup's key tiles: FW_WG j + wg
    if (threadIdx.x == 0) {
        for (int i = 0; i < FW_BUFS; i++) mbar_init(&bar[i], 1);
        fence_barrier_init();
    }
    __syncthreads();
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    auto load = [&](unsigned char *dst, const CUtensorMap *m, int row, uint64_t *b) {
        mbar_expect_tx(b, FW_TILE);
#pragma unroll
        for (int sl = 0; sl < 4; sl++) tma_load_2d(dst + sl * FW_SLAB, m, 64 * sl, row, b);
    };
    auto load_k = [&](int i) { load(Ks + i % FW_KB * FW_TILE, &tk, krow + (FW_WG * i + wg) * FW_BN, &kbar[i % FW_KB]); };
    auto load_v = [&](int i) { load(Vs + i % FW_VB * FW_TILE, &tv, krow + (FW_WG * i + wg) * FW_BN, &vbar[i % FW_VB]); };
    if (t == 0) {
        if (wg == 0) load(Qs, &tq, blockIdx.z * rows + r0, &bar[0]);
        for (int i = 0; i < FW_KB && i < mine; i++) load_k(i);
        for (int i = 0; i < FW_VB && i < mine; i++) load_v(i);
    }
    float o[FW_HD / 8][4], s[FW_BN / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}, alpha[2];
#pragma unroll
    for (int n = 0; n < FW_HD / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0;
    float(*oa)[128] = (float(*)[128])o;   // oa[0]: the m64n256 accumulators
    float(*sc)[32] = (float(*)[32])s;
    uint32_t pa[2][FW_BN / 16][4];   // P of the even / odd tiles (read by the tensor cores until waited for)
    bool resc = false;               // the running max moved: O is multiplied by alpha once P V has landed
    // descriptors (mma.cuh): a byte offset within shared memory moves the start address field by offset / 16
    const uint64_t dq = wg_desc(Qs), dk0 = wg_desc(Ks), dv0 = wg_desc_mn(Vs, FW_SLAB);
    auto issue_s = [&](int i) {
        mbar_wait(&kbar[i % FW_KB], (i / FW_KB) & 1);
        const uint64_t dk = dk0 + (i % FW_KB) * (FW_TILE >> 4);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < FW_HD / 16; kk++) {   // slab kk / 4; 32 bytes per 16 columns within a slab
            const int off = ((kk >> 2) * FW_SLAB + (kk & 3) * 32) >> 4;
            wg_ss_64x64(sc[0], dq + off, dk + off, kk);
        }
        wg_commit();
    };
    auto issue_pv = [&](int i, const uint32_t(&pp)[FW_BN / 16][4]) {
        mbar_wait(&vbar[i % FW_VB], (i / FW_VB) & 1);
        const uint64_t dv = dv0 + (i % FW_VB) * (FW_TILE >> 4);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < FW_BN / 16; kk++) wg_rs_64x256_t(oa[0], pp[kk], dv + (kk * 2048 >> 4));   // keys 16 kk ..
        wg_commit();
    };
    auto rescale_o = [&]() {   // P V of the last tile issued has landed: O is readable
        wg_hold(oa[0]);
        if (resc)
#pragma unroll
            for (int n = 0; n < FW_HD / 8; n++) {
                o[n][0] *= alpha[0];
                o[n][1] *= alpha[0];
                o[n][2] *= alpha[1];
                o[n][3] *= alpha[1];
            }
        resc = false;
    };
    // online softmax of tile i into pn (flash_attn_kernel's, with the scale sl2 > 0 applied to the row maxima and
    // inside the exponent): this thread holds rows g and g + 8 of its warp's 16
    auto softmax = [&](int i, uint32_t(&pn)[FW_BN / 16][4]) {
        wg_hold(sc[0]);
        const int k0 = (FW_WG * i + wg) * FW_BN;
        if (k0 + FW_BN > nk)
#pragma unroll
            for (int n = 0; n < FW_BN / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (k0 + n * 8 + 2 * c + (e & 1) >= nk) s[n][e] = -INFINITY;
        float mx[2], v[2][FW_BN / 4];   // row r's 16 logits of this thread, reduced as a tree (short chains)
#pragma unroll
        for (int n = 0; n < FW_BN / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) v[e >> 1][2 * n + (e & 1)] = s[n][e];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            tree_reduce<FW_BN / 4>(v[r], [](float a, float b) { return fmaxf(a, b); });
            mx[r] = v[r][0];
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            mx[r] *= sl2;
        }
        resc = __any_sync(0xffffffffu, mx[0] > m[0] + FA_SLACK || mx[1] > m[1] + FA_SLACK);
        if (resc)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const float mn = fmaxf(m[r], mx[r]);   // a warpgroup's first tile has a key: mn is finite
                alpha[r] = exp2f(m[r] - mn);
                l[r] *= alpha[r];
                m[r] = mn;
            }
#pragma unroll
        for (int n = 0; n < FW_BN / 8; n++) {
            const float p0 = ex2_ftz(fmaf(s[n][0], sl2, -m[0])), p1 = ex2_ftz(fmaf(s[n][1], sl2, -m[0]));
            const float p2 = ex2_ftz(fmaf(s[n][2], sl2, -m[1])), p3 = ex2_ftz(fmaf(s[n][3], sl2, -m[1]));
            v[0][n] = p0 + p1;
            v[1][n] = p2 + p3;
            pn[n >> 1][(n & 1) * 2] = f2_to_bf2(p0, p1);
            pn[n >> 1][(n & 1) * 2 + 1] = f2_to_bf2(p2, p3);
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            tree_reduce<FW_BN / 8>(v[r], [](float a, float b) { return a + b; });
            l[r] += v[r][0];
        }
    };
    // thread 0 of the warpgroup refills a buffer once all its warps are past the wait for the product that read it
    auto refill_k = [&](int i) {   // S of tile i has landed
        wg_bar(1 + wg);
        if (t == 0 && i + FW_KB < mine) load_k(i + FW_KB);
    };
    auto refill_v = [&](int i) {   // P V of tile i - 1 has landed
        wg_bar(1 + wg);
        if (t == 0 && i >= 1 && i - 1 + FW_VB < mine) load_v(i - 1 + FW_VB);
    };
    auto free_p = [&](uint32_t(&pp)[FW_BN / 16][4]) {   // P of tile i - 1 stays in its registers until P V landed
#pragma unroll
        for (int kk = 0; kk < FW_BN / 16; kk++)
#pragma unroll
            for (int e = 0; e < 4; e++) asm volatile("" : "+r"(pp[kk][e])::"memory");
    };
    auto step = [&](int i, uint32_t(&pn)[FW_BN / 16][4], uint32_t(&pp)[FW_BN / 16][4]) {
        issue_s(i);
        issue_pv(i - 1, pp);
        wg_wait<1>();   // S (committed first) is done; P V of tile i - 1 runs on beside the softmax
        refill_k(i);
        softmax(i, pn);
        wg_wait<0>();
        rescale_o();
        free_p(pp);
        refill_v(i);
    };
    if (mine > 0) {
        mbar_wait(&bar[0], 0);
        issue_s(0);
        wg_wait<0>();
        refill_k(0);
        softmax(0, pa[0]);
        resc = false;   // O is zero
        int i = 1;
        for (; i + 1 < mine; i += 2) {   // two steps per pass: the P registers alternate statically
            step(i, pa[1], pa[0]);
            step(i + 1, pa[0], pa[1]);
        }
        if (i < mine) {   // one more S step, then P V of the last tile
            step(i, pa[1], pa[0]);
            issue_pv(mine - 1, pa[1]);
        } else {
            issue_pv(mine - 1, pa[0]);
        }
        wg_wait<0>();
        wg_hold(oa[0]);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    // merge: warpgroup 1 leaves (m, l, O) in its own buffers, thread by thread, once all its warps are past their
    // last P V (each warp's wait covers its own share); warpgroup 0 combines (a warpgroup without keys has m = -inf,
    // l = 0, O = 0)
    float *xo = (float *)(Qs + (1 + FW_KB + FW_VB) * FW_TILE), *xm = xo + FW_HD / 2 * 128;
    if (wg == 1) {
        wg_bar(2);
#pragma unroll
        for (int n = 0; n < FW_HD / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) xo[(n * 4 + e) * 128 + t] = o[n][e];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            xm[r * 128 + t] = m[r];
            xm[(2 + r) * 128 + t] = l[r];
        }
    }
    __syncthreads();
    if (wg == 1) return;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float m1 = xm[r * 128 + t], mn = fmaxf(m[r], m1);
        const float a0 = exp2f(m[r] - mn), a1 = m1 == -INFINITY ? 0.0f : exp2f(m1 - mn);
        const float inv = 1.0f / (a0 * l[r] + a1 * xm[(2 + r) * 128 + t]);
#pragma unroll
        for (int n = 0; n < FW_HD / 8; n++) {
            o[n][2 * r] = (a0 * o[n][2 * r] + a1 * xo[(n * 4 + 2 * r) * 128 + t]) * inv;
            o[n][2 * r + 1] = (a0 * o[n][2 * r + 1] + a1 * xo[(n * 4 + 2 * r + 1) * 128 + t]) * inv;
        }
    }
    // O into Q's buffer (free: every S has landed) in its swizzled slab layout (no bank conflicts), then out in
    // 16-byte pieces, a row's 32 pieces from consecutive threads
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = warp * 16 + g + 8 * r;
#pragma unroll
        for (int n = 0; n < FW_HD / 8; n++)
            *(uint32_t *)(Qs + (n >> 3) * FW_SLAB + swz128(row, n & 7) + 4 * c) = f2_to_bf2(o[n][2 * r], o[n][2 * r + 1]);
    }
    wg_bar(1);
    out += ((size_t)blockIdx.z * rows + r0) * FW_HD;
#pragma unroll 4
    for (int j = t; j < FW_BM * FW_HD / 8; j += 128) {
        const int row = j / (FW_HD / 8), ch = j % (FW_HD / 8);
        if (r0 + row < rows)
            *(uint4 *)(out + (size_t)row * FW_HD + ch * 8) = *(const uint4 *)(Qs + (ch >> 3) * FW_SLAB + swz128(row, ch & 7));
    }
}

static long fw_launches;   // (atomic: contexts may run on several threads)
extern "C" long cuda_flash_wg_launches(void) { return __atomic_load_n(&fw_launches, __ATOMIC_RELAXED); }

// The prefix segments on flash_wg_kernel (returns 0 when the tensor maps cannot be made).
static int flash_wg(cuda_ctx *c, bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v, int g, int rows, int nk,
                    float sl2) {
    CUtensorMap tq, tk, tv;
    if (!cuda_tensor_map(&tq, q, g * rows, FW_HD, FW_HD, FW_BM) || !cuda_tensor_map(&tk, k, g * nk, FW_HD, FW_HD, FW_BN) ||
        !cuda_tensor_map(&tv, v, g * nk, FW_HD, FW_HD, FW_BN))
        return 0;
    cuda_launch(c, flash_wg_kernel, dim3(cdiv(rows, FW_BM), 1, g), dim3(128 * FW_WG), fw_smem(), tq, tk, tv, out, rows, nk, sl2);
    __atomic_add_fetch(&fw_launches, 1, __ATOMIC_RELAXED);
    return 1;
}

// Launches flash attention for segments [s, s + g) of equal lengths when it applies (returns 1): nq queries and
// n1 source-1 keys each; with a second source (k2, v2: nq rows per segment) its keys are the tail of n1 + nq.
static int flash_attention(cuda_ctx *c, bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *k2,
                           const bf16 *v2, const pi0_attn *a, int g, int nq, int n1) {
    int H = a->heads, hd = a->head_dim, mqa = a->kv_heads == 1, kvw = a->kv_heads * hd;
    int nk = n1 + (k2 ? nq : 0), tail = k2 ? nq : a->tail;
    // a tail or second source only for MQA at head_dim 256 (the suffix kernel reads query j as row / H)
    if (!c->flash || (hd != 72 && hd != 256) || (!mqa && a->kv_heads != H) || (tail && (!mqa || hd != 256)) ||
        (k2 && a->tail) || nq < 1 || n1 < 1 || tail > nk ||
        ((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)k2 | (uintptr_t)v2 | (uintptr_t)out) & 15)
        return 0;
    int rows = mqa ? nq * H : nq, q_rs = mqa ? hd : H * hd;
    dim3 grid(cdiv(rows, FA_BM), mqa ? 1 : H, g);
    float sl2 = a->scale * 1.4426950408889634f;
    long long q_seg = (long long)nq * H * hd, kv_seg = (long long)n1 * kvw, k2_seg = (long long)nq * kvw;
    // head_dim 256: 64-key tiles (169 KB: one block per SM) for one wave of blocks, 32-key tiles (101 KB: two
    // blocks per SM hide each other's latency) for more (batches)
    const int many = (long long)grid.x * grid.y * grid.z > c->sms;
    if (hd == 256 && mqa && !tail && c->flash == 1 && flash_wg(c, out, q, k, v, g, rows, nk, sl2)) return 1;
    if (hd == 256)
        cuda_launch(c, tail ? (many ? flash_attn_kernel<256, 256, true, 32> : flash_attn_kernel<256, 256, true, 64>)
                            : (many ? flash_attn_kernel<256, 256, false, 32> : flash_attn_kernel<256, 256, false, 64>),
                    grid, dim3(128), many ? fa_smem<256, 256, 32>() : fa_smem<256, 256, 64>(), out, q, k, v, k2, v2, rows,
                    nk, tail, a->block0, H, q_rs, kvw, q_seg, kv_seg, k2_seg, mqa ? 0 : hd, sl2);
    else
        cuda_launch(c, flash_attn_kernel<72, 80, false, 64>, grid, dim3(128), fa_smem<72, 80, 64>(), out, q, k, v, k2, v2,
                    rows, nk, tail, a->block0, H, q_rs, kvw, q_seg, kv_seg, k2_seg, mqa ? 0 : hd, sl2);
    return 1;
}

template <int HD, int HDP, bool SFX, int BN> static void fa_opt_in(cuda_ctx *c) {
    CUDA_NOTE(c, cudaFuncSetAttribute(flash_attn_kernel<HD, HDP, SFX, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)fa_smem<HD, HDP, BN>()));
}

// The opt-in for more than 48 KB of shared memory (per device: called at backend create).
void cuda_attention_setup(cuda_ctx *c) {
    CUDA_NOTE(c, cudaFuncSetAttribute(decode_attn_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)da_smem(DA_MAX_CHUNK, 1)));
    CUDA_NOTE(c, cudaFuncSetAttribute(decode_attn_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)da_smem(DA_MAX_CHUNK, 2)));
    CUDA_NOTE(c, cudaFuncSetAttribute(flash_wg_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fw_smem()));
    fa_opt_in<256, 256, true, 64>(c);
    fa_opt_in<256, 256, true, 32>(c);
    fa_opt_in<256, 256, false, 64>(c);
    fa_opt_in<256, 256, false, 32>(c);
    fa_opt_in<72, 80, false, 64>(c);
}

// Row r (of seg_rows per segment; several equal segments may be batched): query j = (r % seg_rows) /
// row_div sees source-1 keys [0, n1) and source-2 keys
// [0, j < block0 ? block0 : n2). Probabilities of unseen keys are written as 0.
__global__ void softmax_kernel(bf16 *p, const float *s, int ld, int rows, int seg_rows, int n1, int n2, int block0,
                               int row_div) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    int r = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (r >= rows) return;
    int nk = n1 + n2, j = (r % seg_rows) / row_div, lim = n1 + (n2 ? (j < block0 ? block0 : n2) : 0);
    const float *sr = s + (size_t)r * ld;
    bf16 *pr = p + (size_t)r * ld;
    float mx = -INFINITY;
    for (int t = lane; t < lim; t += 32) mx = fmaxf(mx, sr[t]);
    mx = warp_max(mx);
    float sum = 0;
    for (int t = lane; t < lim; t += 32) sum += expf(sr[t] - mx);
    sum = warp_sum(sum);
    float inv = 1.0f / sum;
    for (int t = lane; t < nk; t += 32) pr[t] = __float2bfloat16(t < lim ? expf(sr[t] - mx) * inv : 0.0f);
}

void cuda_attention(pi0_backend *be, pt out, pt q, const pi0_attn *a) {
    cuda_ctx *c = CTX(be);
    if (c->err) return;
    int H = a->heads, hd = a->head_dim, kvw = a->kv_heads * hd, qw = H * hd;
    PI0_ASSERT(a->kv_heads == 1 || a->kv_heads == H);
    PI0_ASSERT(a->kv_heads == 1 || !a->k2.p);
    const bf16 *Q = (const bf16 *)q.p, *K1 = (const bf16 *)a->k1.p, *V1 = (const bf16 *)a->v1.p;
    const bf16 *K2 = (const bf16 *)a->k2.p, *V2 = (const bf16 *)a->v2.p;
    bf16 *O = (bf16 *)out.p;
    for (int s = 0; s < a->nseg;) {
        int q0 = a->q_off[s], nq = a->q_off[s + 1] - q0, k0 = a->k_off[s], n1 = a->k_off[s + 1] - k0;
        int n2 = K2 ? nq : 0, nk = n1 + n2, ld = (nk + 7) & ~7;   // rows padded to 16-byte multiples
        int rows = nq * H;
        if (nq) {   // decode attention over this and the following equal, consecutively packed segments
            int g = 1;
            while (s + g < a->nseg && g < 65535 && a->q_off[s + g + 1] - a->q_off[s + g] == nq &&
                   a->k_off[s + g + 1] - a->k_off[s + g] == n1 && a->k_off[s + g] == k0 + g * n1)
                g++;
            if (decode_attention(c, O + (size_t)q0 * qw, Q + (size_t)q0 * qw, K1 + (size_t)k0 * kvw, V1 + (size_t)k0 * kvw,
                                 K2 ? K2 + (size_t)q0 * kvw : NULL, V2 ? V2 + (size_t)q0 * kvw : NULL, g, nq, a, n1)) {
                s += g;
                continue;
            }
        }
        if (nq) {   // flash attention over this and the following equal segments
            int g = 1;
            while (s + g < a->nseg && g < 65535 && a->q_off[s + g + 1] - a->q_off[s + g] == nq &&
                   a->k_off[s + g + 1] - a->k_off[s + g] == n1)   // grid.z <= 65535
                g++;
            if (flash_attention(c, O + (size_t)q0 * qw, Q + (size_t)q0 * qw, K1 + (size_t)k0 * kvw, V1 + (size_t)k0 * kvw,
                                K2 ? K2 + (size_t)q0 * kvw : NULL, V2 ? V2 + (size_t)q0 * kvw : NULL, a, g, nq, n1)) {
                s += g;
                continue;
            }
        }
        if ((size_t)rows * ld > c->scores_cap || (size_t)rows * hd > c->att_cap) {
            if (!c->err) {
                c->err = PI0_ERR_ARG;
                snprintf(c->errmsg, sizeof c->errmsg, "attention segment of %d queries x %d keys exceeds the reserved "
                         "scratch", nq, nk);
            }
            return;
        }
        // MQA: the following segments of the same lengths (equal-length samples of a batch) form one
        // strided batch, as far as the scratch holds their logits
        int g = 1;
        if (a->kv_heads == 1)
            while (s + g < a->nseg && a->q_off[s + g + 1] - a->q_off[s + g] == nq &&
                   a->k_off[s + g + 1] - a->k_off[s + g] == n1 && (size_t)(g + 1) * rows * ld <= c->scores_cap &&
                   (size_t)(g + 1) * rows * hd <= c->att_cap)
                g++;
        if (nq == 0) { s += g; continue; }
        const bf16 *qs = Q + (size_t)q0 * qw;
        bf16 *os = O + (size_t)q0 * qw;
        long long sq = (long long)rows * hd, sk1 = (long long)n1 * kvw, sk2 = (long long)nq * kvw, ss = (long long)rows * ld;
        if (a->kv_heads == 1) {
            cuda_gemm(c, 1, rows, n1, hd, a->scale, qs, hd, CUDA_R_16BF, K1 + (size_t)k0 * kvw, kvw, CUDA_R_16BF, 0.0f,
                      c->scores, ld, CUDA_R_32F, NULL, g, sq, sk1, ss);
            if (n2)
                cuda_gemm(c, 1, rows, n2, hd, a->scale, qs, hd, CUDA_R_16BF, K2 + (size_t)q0 * kvw, kvw, CUDA_R_16BF,
                          0.0f, c->scores + n1, ld, CUDA_R_32F, NULL, g, sq, sk2, ss);
            // tail: the last `tail` keys of the range are suffix keys (mask of the second source)
            int m1 = n2 ? n1 : n1 - a->tail, m2 = n2 ? n2 : a->tail;
            cuda_launch(c, softmax_kernel, dim3(cdiv((long long)g * rows * 32, 256)), dim3(256), 0, c->probs, c->scores,
                        ld, g * rows, rows, m1, m2, a->block0, H);
            if (!n2) {
                cuda_gemm(c, 0, rows, hd, n1, 1.0f, c->probs, ld, CUDA_R_16BF, V1 + (size_t)k0 * kvw, kvw, CUDA_R_16BF,
                          0.0f, os, hd, CUDA_R_16BF, NULL, g, ss, sk1, sq);
            } else {
                cuda_gemm(c, 0, rows, hd, n1, 1.0f, c->probs, ld, CUDA_R_16BF, V1 + (size_t)k0 * kvw, kvw, CUDA_R_16BF,
                          0.0f, c->att32, hd, CUDA_R_32F, NULL, g, ss, sk1, sq);
                cuda_gemm(c, 0, rows, hd, n2, 1.0f, c->probs + n1, ld, CUDA_R_16BF, V2 + (size_t)q0 * kvw, kvw,
                          CUDA_R_16BF, 1.0f, c->att32, hd, CUDA_R_32F, NULL, g, ss, sk2, sq);
                cuda_f32_to_bf16(c, os, c->att32, (size_t)g * rows * hd);
            }
        } else if (a->nseg - s >= H && nq == n1 && (size_t)nq * ld * 2 <= c->scores_cap) {
            // many equal segments (SigLIP over a batch of images): loop over heads, batch over segments
            int gi = 1;
            while (s + gi < a->nseg && a->q_off[s + gi + 1] - a->q_off[s + gi] == nq &&
                   a->k_off[s + gi + 1] - a->k_off[s + gi] == n1 && (size_t)(gi + 1) * nq * ld <= c->scores_cap)
                gi++;
            long long sx = (long long)nq * qw, sw = (long long)n1 * kvw, sl = (long long)nq * ld;
            for (int h = 0; h < H; h++) {
                cuda_gemm(c, 1, nq, n1, hd, a->scale, qs + h * hd, qw, CUDA_R_16BF, K1 + (size_t)k0 * kvw + h * hd, kvw,
                          CUDA_R_16BF, 0.0f, c->scores, ld, CUDA_R_32F, NULL, gi, sx, sw, sl);
                cuda_launch(c, softmax_kernel, dim3(cdiv((long long)gi * nq * 32, 256)), dim3(256), 0, c->probs,
                            c->scores, ld, gi * nq, nq, n1, 0, 0, 1);
                cuda_gemm(c, 0, nq, hd, n1, 1.0f, c->probs, ld, CUDA_R_16BF, V1 + (size_t)k0 * kvw + h * hd, kvw,
                          CUDA_R_16BF, 0.0f, os + h * hd, qw, CUDA_R_16BF, NULL, gi, sl, sw, sx);
            }
            g = gi;
        } else {
            // head h: logits_h [nq, n1] = Q_h . K_h^T, Q_h = columns [h*hd, (h+1)*hd) of the [nq, qw] rows
            cuda_gemm(c, 1, nq, n1, hd, a->scale, qs, qw, CUDA_R_16BF, K1 + (size_t)k0 * kvw, kvw, CUDA_R_16BF, 0.0f,
                      c->scores, ld, CUDA_R_32F, NULL, H, hd, hd, (long long)nq * ld);
            cuda_launch(c, softmax_kernel, dim3(cdiv((long long)rows * 32, 256)), dim3(256), 0, c->probs, c->scores, ld,
                        rows, rows, n1, 0, 0, 1);
            cuda_gemm(c, 0, nq, hd, n1, 1.0f, c->probs, ld, CUDA_R_16BF, V1 + (size_t)k0 * kvw, kvw, CUDA_R_16BF, 0.0f,
                      os, qw, CUDA_R_16BF, NULL, H, (long long)nq * ld, hd, hd);
        }
        s += g;
    }
}
