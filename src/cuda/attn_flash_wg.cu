// attn_flash_wg.cu — attention's flash path for the prefix on the warpgroup MMA (attention.cu dispatches): head_dim
// 256, MQA, no suffix mask, wgmma with tensor-map copies; Hopper (sm_90a) only. CPU twin: cpu_attention. Returns 0
// where a tensor map cannot be made, and the mma.sync path (attn_flash.cu) runs the segments instead.
#include <cuda.h>

#include "attention.cuh"
#include "lab_hooks.cuh"
#include "mma.cuh"

#ifdef FW_PROF   // the lab's stamps (lab_hooks.cuh, bench/kernels/fw_prof.cu): block, warpgroup, slot, stamp
__device__ unsigned long long fw_prof[128][2][8][10];
extern "C" void fw_prof_read(unsigned long long *dst) { cudaMemcpyFromSymbol(dst, fw_prof, sizeof fw_prof); }
#endif

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
// ncu, one prefix layer of pi0-3cam (99 blocks): faster than the mma.sync kernel, which reads every K / V fragment
// once per warp through ldmatrix, and than one warpgroup per block walking all tiles
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
    LAB_FW_STAMP(0, 0);
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
        LAB_FW_STAMP(i, 0);
        issue_s(i);
        LAB_FW_STAMP(i, 1);
        issue_pv(i - 1, pp);
        LAB_FW_STAMP(i, 2);
        wg_wait<1>();   // S (committed first) is done; P V of tile i - 1 runs on beside the softmax
        LAB_FW_STAMP(i, 3);
        refill_k(i);
        LAB_FW_STAMP(i, 4);
        softmax(i, pn);
        LAB_FW_STAMP(i, 5);
        wg_wait<0>();
        LAB_FW_STAMP(i, 6);
        rescale_o();
        free_p(pp);
        LAB_FW_STAMP(i, 7);
        refill_v(i);
        LAB_FW_STAMP(i, 8);
    };
    if (mine > 0) {
        LAB_FW_STAMP(0, 1);
        mbar_wait(&bar[0], 0);
        LAB_FW_STAMP(0, 2);
        issue_s(0);
        LAB_FW_STAMP(0, 3);
        wg_wait<0>();
        LAB_FW_STAMP(0, 4);
        refill_k(0);
        softmax(0, pa[0]);
        LAB_FW_STAMP(0, 5);
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
        LAB_FW_STAMP(7, 0);
        wg_wait<0>();
        wg_hold(oa[0]);
        LAB_FW_STAMP(7, 1);
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
    LAB_FW_STAMP(7, 2);
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
    LAB_FW_STAMP(7, 3);
}

#ifdef PI0_CUDA_TESTING
static long fw_launches;   // (atomic: contexts may run on several threads)
extern "C" long cuda_flash_wg_launches(void) { return __atomic_load_n(&fw_launches, __ATOMIC_RELAXED); }
#endif

// The prefix segments on flash_wg_kernel (returns 0 when the tensor maps cannot be made).
int cuda_flash_wg(cuda_ctx *c, bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v, int g, int rows, int nk,
                    float sl2) {
    CUtensorMap tq, tk, tv;
    if (!cuda_tensor_map(&tq, q, g * rows, FW_HD, FW_HD, FW_BM) || !cuda_tensor_map(&tk, k, g * nk, FW_HD, FW_HD, FW_BN) ||
        !cuda_tensor_map(&tv, v, g * nk, FW_HD, FW_HD, FW_BN))
        return 0;
    cuda_launch(c, flash_wg_kernel, dim3(cdiv(rows, FW_BM), 1, g), dim3(128 * FW_WG), fw_smem(), tq, tk, tv, out, rows, nk, sl2);
    PI0_TEST_HOOK(__atomic_add_fetch(&fw_launches, 1, __ATOMIC_RELAXED));
    return 1;
}

void cuda_flash_wg_setup(cuda_ctx *c) {   // the opt-in for more than 48 KB of shared memory (per device)
    CUDA_NOTE(c, cudaFuncSetAttribute(flash_wg_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fw_smem()));
}
