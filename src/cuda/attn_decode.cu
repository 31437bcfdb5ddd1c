// attn_decode.cu — attention's decode path (attention.cu dispatches): few query rows against one key range (the
// denoise suffix) as flash-decoding over a thread-block cluster on Hopper, or the portable path's kernel elsewhere.
// CPU twin: cpu_attention. Takes only the shapes it is built for and says so (returns 0): the other paths take the
// rest.
#include "attention.cuh"
#include "lab_hooks.cuh"
#include "mma.cuh"

#ifdef GEMV_PROF   // the lab's phase stamps (lab_hooks.cuh, bench/kernels/denoise_chain's chain_prof)
__device__ unsigned long long *da_prof_buf;
__device__ unsigned da_prof_n, da_prof_cap;
void da_prof_set(unsigned long long *buf, unsigned cap) {
    unsigned z = 0;
    cudaError_t e1 = cudaMemcpyToSymbol(da_prof_buf, &buf, sizeof buf), e2 = cudaMemcpyToSymbol(da_prof_cap, &cap, sizeof cap),
                e3 = cudaMemcpyToSymbol(da_prof_n, &z, sizeof z);
    if (e1 || e2 || e3) printf("da_prof_set: %s\n", cudaGetErrorString(e1 ? e1 : e2 ? e2 : e3));
}
unsigned da_prof_count(void) {
    unsigned n;
    cudaError_t e = cudaMemcpyFromSymbol(&n, da_prof_n, sizeof n);
    if (e) printf("da_prof_count: %s\n", cudaGetErrorString(e));
    return e ? 0 : n;
}
#endif

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
// 16 warps: with 4 (one per scheduler) the kernel was latency-bound, too few warps to hide it (bench/RESULTS.md L21)
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

// One block's part of decode attention (both kernels): rows [r0, r0 + 16 RT) against key chunk x ([x chunk, x chunk +
// chunk)): the K/V chunk and Q rows to shared memory, S, the chunk's row maxima m and sums l (ml[0..NR), ml[NR..2NR)),
// and the unnormalised O = P V in o (warp w: head-dim columns [16 w, 16 w + 16)). Pointers already at the segment.
template <int RT>
__device__ __forceinline__ void da_chunk(float (&o)[RT][2][4], bf16 *Qs, bf16 *Ks, bf16 *Vs, bf16 *Ps, float *wmx,
                                         float *wsum, float *ml, const bf16 *q, const bf16 *kc, const bf16 *vc,
                                         const bf16 *k2, const bf16 *v2, int rows, int H, int n1, int tail, int block0,
                                         int chunk, float scale, int x, int r0 LAB_STAMP_PARAMS) {
    constexpr int NR = 16 * RT;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int t0 = x * chunk, nvis = n1 - tail, early = tail > 0 ? nvis : 0;
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
            LAB_STAMP(1);
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
    LAB_STAMP(2);

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
    LAB_STAMP(3);
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
    LAB_STAMP(4);
    if (tid < NR) {   // the chunk's row sums, in warp order
        float l = 0;
#pragma unroll
        for (int w = 0; w < DA_WARPS; w++) l += wsum[w * NR + tid];
        ml[NR + tid] = l;
    }
    // O = P V: warp w takes head-dim columns [16 w, 16 w + 16) = 2 n-tiles, for every row tile
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
}

template <int RT>
__global__ void PI0_CLUSTER_DIMS(DA_SPLIT, 1, 1) __launch_bounds__(DA_THREADS)
decode_attn_kernel(bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc, const bf16 *k2, const bf16 *v2,
                   long long sq, long long sk, long long s2, int rows, int H, int n1, int tail, int block0, int chunk,
                   float scale, const int *nkd) {
    constexpr int NR = 16 * RT, RECV = da_recv(RT);
    if (nkd) n1 = min(n1, nkd[blockIdx.z]);   // backend.h k_len: the segment's key count, read on the device
    extern __shared__ __align__(16) unsigned char da_sm[];
    bf16 *Qs = (bf16 *)da_sm, *Ks = Qs + NR * DA_LD, *Vs = Ks + (size_t)chunk * DA_LD;
    bf16 *Ps = Vs + (size_t)chunk * DA_LD;
    float *wmx = (float *)(Ps + NR * (chunk + 8)), *wsum = wmx + DA_WARPS * NR;   // [warp][row]
    float *ml = wsum + DA_WARPS * NR;                 // m[NR], l[NR]
    float *recv = ml + 2 * NR;                        // [DA_SPLIT][m NR | l NR | O NR x DA_OC]
    __shared__ __align__(8) uint64_t rbar;
    LAB_STAMPS
    LAB_STAMP(0);
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
    const int x = blockIdx.x, r0 = blockIdx.y * NR;
    float o[RT][2][4] = {};
    da_chunk<RT>(o, Qs, Ks, Vs, Ps, wmx, wsum, ml, q, kc, vc, k2, v2, rows, H, n1, tail, block0, chunk, scale, x,
                 r0 LAB_STAMP_ARGS);
    // merge: block r finishes columns [r DA_OC, r DA_OC + DA_OC) of the rows; every block pushes its (m, l) and
    // its O columns there (st.async: no cluster barrier, whose wait grew under the next product's weight stream)
    LAB_STAMP(5);
    cluster_wait();
    LAB_STAMP(6);
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
    LAB_STAMP(7);
    mbar_wait(&rbar, 0);
    LAB_STAMP(8);
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
    LAB_STAMP(9);
    LAB_WRITE(da_prof_buf, da_prof_n, da_prof_cap, 0);
}

// ---- the portable kernel (compute capability 8.0 on: docs/gpu.md): no cluster ----
// The same blocks (RT = 1) with key chunks of at most DAP_CHUNK keys, so that a block's shared memory (~80 KB) fits
// every GPU from Ampere on (Ada and consumer Blackwell: 99 KB); gridDim.x chunks. Each block stores its rows' m, l
// and unnormalised O (fp32) in the portable path's scratch; the last block of a row tile to arrive (a counter per row
// tile and segment, which it resets) merges the chunks in chunk order, as the cluster's merge does.
enum { DAP_CHUNK = 64, DAP_MAXS = 16 };   // keys per chunk, chunks (up to 1024 keys)
static size_t dap_smem(void) { return (size_t)(16 + 2 * DAP_CHUNK) * DA_LD * 2 + (size_t)16 * (DAP_CHUNK + 8) * 2 + 2 * DA_WARPS * 16 * 4 + 32 * 4; }

__global__ void __launch_bounds__(DA_THREADS)
decode_attn_p_kernel(bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc, const bf16 *k2, const bf16 *v2,
                     long long sq, long long sk, long long s2, int rows, int H, int n1, int tail, int block0, int chunk,
                     float scale, float *ws, unsigned *counters, const int *nkd) {
    constexpr int NR = 16, PART = 2 * NR + NR * DA_HD;   // a block's part: m, l, O (floats)
    if (nkd) n1 = min(n1, nkd[blockIdx.z]);   // backend.h k_len
    extern __shared__ __align__(16) unsigned char da_sm[];
    bf16 *Qs = (bf16 *)da_sm, *Ks = Qs + NR * DA_LD, *Vs = Ks + (size_t)chunk * DA_LD;
    bf16 *Ps = Vs + (size_t)chunk * DA_LD;
    float *wmx = (float *)(Ps + NR * (chunk + 8)), *wsum = wmx + DA_WARPS * NR, *ml = wsum + DA_WARPS * NR;
    __shared__ int last;
    LAB_STAMPS
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    q += blockIdx.z * sq;
    out += blockIdx.z * sq;
    kc += blockIdx.z * sk;
    vc += blockIdx.z * sk;
    if (k2) { k2 += blockIdx.z * s2; v2 += blockIdx.z * s2; }
    const int x = blockIdx.x, r0 = blockIdx.y * NR, S = gridDim.x, tile = blockIdx.z * gridDim.y + blockIdx.y;
    float o[1][2][4] = {};
    da_chunk<1>(o, Qs, Ks, Vs, Ps, wmx, wsum, ml, q, kc, vc, k2, v2, rows, H, n1, tail, block0, chunk, scale, x,
                r0 LAB_STAMP_ARGS);
    float *part = ws + ((size_t)tile * S + x) * PART;
#pragma unroll
    for (int n = 0; n < 2; n++) {
        const int col = warp * 16 + n * 8 + 2 * c;
        __stcg((float2 *)(part + 2 * NR + g * DA_HD + col), make_float2(o[0][n][0], o[0][n][1]));
        __stcg((float2 *)(part + 2 * NR + (g + 8) * DA_HD + col), make_float2(o[0][n][2], o[0][n][3]));
    }
    __syncthreads();   // ml complete
    if (tid < 2 * NR) __stcg(part + tid, ml[tid]);
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(&counters[tile], 1u) == (unsigned)S - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    // the merge: per row the chunks' weights e_r = exp(m_r - M) and L = sum e_r l_r (S <= DAP_MAXS, unrolled, so the
    // loads go out together), then every output sum_r e_r O_r / L, four columns per item
    const float *all = ws + (size_t)tile * S * PART;
    float *we = wmx;   // [NR][DAP_MAXS] weights, then [NR] L (the softmax scratch is free now)
    if (tid < NR) {
        float m[DAP_MAXS], M = -INFINITY, L = 0;
#pragma unroll
        for (int r = 0; r < DAP_MAXS; r++) {
            m[r] = r < S ? __ldcg(all + (size_t)r * PART + tid) : -INFINITY;
            M = fmaxf(M, m[r]);
        }
#pragma unroll
        for (int r = 0; r < DAP_MAXS; r++) {   // a chunk with no visible key has m = -inf and O = 0
            float e = m[r] == -INFINITY ? 0.0f : expf(m[r] - M);
            L += r < S ? e * __ldcg(all + (size_t)r * PART + NR + tid) : 0.0f;
            we[tid * DAP_MAXS + r] = e;
        }
        we[NR * DAP_MAXS + tid] = L;
    }
    __syncthreads();
    for (int i = tid; i < NR * DA_HD / 4; i += DA_THREADS) {
        const int row = i / (DA_HD / 4), col = (i % (DA_HD / 4)) * 4;
        if (r0 + row >= rows) continue;
        float4 acc = make_float4(0, 0, 0, 0);
#pragma unroll
        for (int r = 0; r < DAP_MAXS; r++)
            if (r < S) {
                const float e = we[row * DAP_MAXS + r];
                const float4 v = __ldcg((const float4 *)(all + (size_t)r * PART + 2 * NR + row * DA_HD + col));
                acc.x += e * v.x; acc.y += e * v.y; acc.z += e * v.z; acc.w += e * v.w;
            }
        const float L = we[NR * DAP_MAXS + row];
        bf16 *o4 = out + (size_t)(r0 + row) * DA_HD + col;
        *(__nv_bfloat162 *)o4 = __floats2bfloat162_rn(L > 0 ? acc.x / L : 0.0f, L > 0 ? acc.y / L : 0.0f);
        *(__nv_bfloat162 *)(o4 + 2) = __floats2bfloat162_rn(L > 0 ? acc.z / L : 0.0f, L > 0 ? acc.w / L : 0.0f);
    }
    if (tid == 0) counters[tile] = 0;
}

#ifdef PI0_CUDA_TESTING
static long da_launches;   // either kernel (atomic: contexts may run on several threads)
extern "C" long cuda_decode_attention_launches(void) { return __atomic_load_n(&da_launches, __ATOMIC_RELAXED); }
#endif

// (cuda_decode_attention's checks passed; rows, nk, tail and the segment strides as it computes them)
static int decode_attention_p(cuda_ctx *c, bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *k2,
                              const bf16 *v2, int g, const pi0_attn *a, int rows, int nk, int tail, long long sq,
                              long long sk, long long s2, const int *nkd) {
    int tiles = cdiv(rows, 16), S = cdiv(nk, DAP_CHUNK), chunk = (cdiv(nk, S) + 15) / 16 * 16;
    if (S > DAP_MAXS || (long long)g * tiles > CUDA_P_COUNTERS ||
        (size_t)g * tiles * S * (2 * 16 + 16 * DA_HD) * 4 > CUDA_P_SCRATCH)
        return 0;
    if (g > 1 && (long long)g * tiles * S > 2 * c->sms) return 0;   // batches: flash or GEMM attention (as on Hopper)
    cuda_launch(c, decode_attn_p_kernel, dim3(S, tiles, g), dim3(DA_THREADS), dap_smem(), out, q, k, v, k2, v2, sq, sk, s2,
                rows, a->heads, nk, tail, a->block0, chunk, a->scale, c->pscratch, c->pcounters, nkd);
    PI0_TEST_HOOK(__atomic_add_fetch(&da_launches, 1, __ATOMIC_RELAXED));
    return 1;
}

// Launches decode attention for g equal segments when it applies (returns 1), else returns 0: nq queries and n1
// source-1 keys each, one after the other (q, out: nq rows apart; k, v: ks >= n1 rows; k2, v2: nq rows). With a
// second source its nq keys count as the tail of an n1 + nq key range (the same mask, backend.h); its rows are
// read after the PDL wait like the tail's, the first n1 - tail cached keys before it. nkd (backend.h k_len, device
// [g]): each segment's key count, at most n1, which sizes the launch; only without a tail or second source.
int cuda_decode_attention(cuda_ctx *c, bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *k2,
                          const bf16 *v2, int g, int nq, const pi0_attn *a, int n1, int ks, const int *nkd) {
    int rows = nq * a->heads, nk = n1 + (k2 ? nq : 0), tail = k2 ? nq : a->tail;
    int chunk = (cdiv(nk, DA_SPLIT) + 15) / 16 * 16;
    if (nkd && (k2 || a->tail)) return 0;
    if ((c->hopper ? !c->fused_small : !c->dap_ok) || a->kv_heads != 1 || a->head_dim != DA_HD || (k2 && a->tail) || rows > 16 * 64 || nk < 1 ||
        (c->hopper && chunk > DA_MAX_CHUNK) || g < 1 || g > 65535 ||
        ((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)k2 | (uintptr_t)v2 | (uintptr_t)out) & 15)
        return 0;
    long long sq = (long long)rows * DA_HD, sk = (long long)ks * DA_HD, s2 = (long long)nq * DA_HD;
    if (!c->hopper) return decode_attention_p(c, out, q, k, v, k2, v2, g, a, rows, nk, tail, sq, sk, s2, nkd);
    // Two row tiles per block when one would need more than a wave; batches only while they fit in two waves: the
    // blocks (~145 KB of shared memory, one per SM) are latency-bound: at B = 64 (1536 blocks) even the GEMM path
    // was faster, while B = 8 (192 blocks) gained from this kernel (bench/RESULTS.md L70), and
    // flash attention takes such batches
    const int rt = (long long)g * cdiv(rows, 16) * DA_SPLIT > c->sms ? 2 : 1;
    if (g > 1 && (long long)g * cdiv(rows, 16 * rt) * DA_SPLIT > 2 * c->sms) return 0;
    if (rt == 2)
        cuda_launch(c, decode_attn_kernel<2>, dim3(DA_SPLIT, cdiv(rows, 32), g), dim3(DA_THREADS), da_smem(chunk, 2), out,
                    q, k, v, k2, v2, sq, sk, s2, rows, a->heads, nk, tail, a->block0, chunk, a->scale, nkd);
    else
        cuda_launch(c, decode_attn_kernel<1>, dim3(DA_SPLIT, cdiv(rows, 16), g), dim3(DA_THREADS), da_smem(chunk, 1), out,
                    q, k, v, k2, v2, sq, sk, s2, rows, a->heads, nk, tail, a->block0, chunk, a->scale, nkd);
    PI0_TEST_HOOK(__atomic_add_fetch(&da_launches, 1, __ATOMIC_RELAXED));
    return 1;
}

// The portable kernel's scratch (counters zeroed once; each last block resets its own) and shared memory opt-in, where
// the device has that much (c->dap_ok). Where it has not, or a step fails (the error is cleared), attention takes
// the GEMM path instead.
void cuda_decode_attention_p_setup(cuda_ctx *c, int device) {
    int most = 0;
    cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if ((size_t)most < dap_smem()) return;
    if (cudaMalloc(&c->pscratch, CUDA_P_SCRATCH) != cudaSuccess ||
        cudaMalloc(&c->pcounters, CUDA_P_COUNTERS * sizeof(unsigned)) != cudaSuccess ||
        cudaMemset(c->pcounters, 0, CUDA_P_COUNTERS * sizeof(unsigned)) != cudaSuccess ||
        cudaFuncSetAttribute(decode_attn_p_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dap_smem()) !=
            cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {   // (the zeroed counters before any kernel of the non-blocking stream)
        cudaGetLastError();
        cudaFree(c->pscratch);
        cudaFree(c->pcounters);
        c->pscratch = NULL;
        c->pcounters = NULL;
        return;
    }
    c->dap_ok = 1;
}

void cuda_decode_attention_setup(cuda_ctx *c) {   // the opt-in for more than 48 KB of shared memory (per device)
    CUDA_NOTE(c, cudaFuncSetAttribute(decode_attn_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)da_smem(DA_MAX_CHUNK, 1)));
    CUDA_NOTE(c, cudaFuncSetAttribute(decode_attn_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)da_smem(DA_MAX_CHUNK, 2)));
}
