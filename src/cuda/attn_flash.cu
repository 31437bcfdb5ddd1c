// attn_flash.cu — attention's flash path on mma.sync (attention.cu dispatches): SigLIP's segments, MQA suffixes past
// the decode kernel's two waves, and the prefix where the wgmma kernel (attn_flash_wg.cu) does not run. CPU twin:
// cpu_attention. attention.cu decides which segments come here; this file only launches them.
#include "attention.cuh"
#include "mma.cuh"

// ---- flash attention: prefix (MQA, head_dim 256) and SigLIP (MHA, head_dim 72) segments ----
// For segments whose queries see every key of their own range (the compacted prefix, docs/model.md 3.6, and SigLIP's
// images, 3.4), and for MQA suffix segments that decode attention does not take (batches past its two waves:
// at B = 64 the GEMM path was slower per expert layer under ncu, bench/RESULTS.md L71).
// FlashAttention-2 order: a block owns FA_BM = 64 query rows
// (4 warps x 16), walks the segment's keys in tiles of FA_BN = 64 or 32 (K/V double-buffered through cp.async),
// S = Q K^T on mma m16n8k16 (ldmatrix from shared memory), an online softmax in fp32 (running row max m
// and sum l, base-2 exponentials of scale * log2(e) * S), P rounded to bf16 straight from the S registers
// into the A operand of O += P V, and O / l rounded to bf16 at the end. The logits never reach memory:
// the GEMM path (QK^T to fp32 logits, softmax kernel, PV) was slower per prefix layer (pi0-3cam) and per
// SigLIP layer (3 images) under ncu on the H100 (bench/RESULTS.md L22).
//  - Limits (ncu, H100, head_dim 256): one block of 4 warps per SM (225 registers, 169 KB of shared
//    memory); a warp's instruction issue and the shared-memory (ldmatrix) traffic set its time per prefix
//    layer. With more blocks than SMs (batches) the 32-key tiles (101 KB) let two
//    blocks share an SM (bench/RESULTS.md L74). Splitting each key tile over 8 warps (two (m, l, O) merged at the end)
//    was slower (bench/RESULTS.md L30): the Q and K/V fragments' shared-memory traffic, not the issue rate, is the
//    next bound.
//  - Lazy rescaling: the running max moves (and O, l are rescaled) only when a row's tile max exceeds it
//    by more than FA_SLACK (base-2 units), decided per warp; otherwise P = 2^(s - m) <= 2^FA_SLACK, which
//    bf16 and the fp32 sums hold exactly as well. Keys past the segment are masked in the last tile only.
// Query rows: MQA stacks (token, head) as rows of HD (all heads share K/V), MHA takes one head per block
// (grid y) with rows = tokens. Grid z: equal-length consecutive segments. Suffix mask (backend.h, MQA only): the
// last `tail` of the nk keys are suffix keys, seen by query j = row / H iff their index in the tail is below
// (j < block0 ? block0 : tail); with a second source (k2, v2: rows aligned with the queries) they are its rows,
// otherwise the range's. Tiles that reach past the nk - tail keys seen by every row are masked per row (every
// row sees key 0, so the first tile's maxima are finite). SFX: the mask and the second source are compiled in,
// for suffixes only (without them the prefix kernel keeps 235 registers instead of 242 and ran faster at
// B = 64, and the head_dim-72 kernel 127 registers: 4 blocks per SM). HD is padded to HDP (a multiple
// of 16) with zero columns in shared memory for the k-dimension of Q K^T; P V computes HDP columns and
// stores HD. Rounding differs from the PT reference (unnormalised probabilities in bf16 instead of
// normalised ones): within the attention op test's bound.

template <int HD, int HDP, int BN> static size_t fa_smem() { return (size_t)(FA_BM + 4 * BN) * (HDP + 8) * 2; }

template <int HD, int HDP, bool SFX, int FA_BN>
__global__ void __launch_bounds__(128, 1)
flash_attn_kernel(bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *k2, const bf16 *v2, int rows,
                  int nk, int tail, int block0, int H, int q_rs, int kv_rs, long long q_seg, long long kv_seg,
                  long long k2_seg, int kv_hs, float sl2, const int *nkd) {
    constexpr int LD = HDP + 8, CH = HD / 8, CHP = HDP / 8, NT = HDP / 8, THREADS = 128;
    extern __shared__ __align__(16) unsigned char fa_sm[];
    bf16 *Qs = (bf16 *)fa_sm, *Ks = Qs + FA_BM * LD, *Vs = Ks + 2 * FA_BN * LD;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int r0 = blockIdx.x * FA_BM;
    const size_t qo = (size_t)blockIdx.z * q_seg + (size_t)blockIdx.y * HD;
    const size_t ko = (size_t)blockIdx.z * kv_seg + (size_t)blockIdx.y * kv_hs;
    q += qo; out += qo; k += ko; v += ko;
    if (SFX && k2) { k2 += (size_t)blockIdx.z * k2_seg; v2 += (size_t)blockIdx.z * k2_seg; }
    if (nkd) nk = min(nk, nkd[blockIdx.z]);   // backend.h k_len: the segment's key count, read on the device
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

// Launches flash_attn_kernel on g equal segments (the arguments as flash_attention in attention.cu computes them).
void cuda_flash_mma(cuda_ctx *c, dim3 grid, int many, int tail, bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v,
                    const bf16 *k2, const bf16 *v2, int rows, int nk, int block0, int H, int hd, int q_rs, int kvw,
                    long long q_seg, long long kv_seg, long long k2_seg, int mha_hd, float sl2, const int *nkd) {
    if (hd == 256)
        cuda_launch(c, tail ? (many ? flash_attn_kernel<256, 256, true, 32> : flash_attn_kernel<256, 256, true, 64>)
                            : (many ? flash_attn_kernel<256, 256, false, 32> : flash_attn_kernel<256, 256, false, 64>),
                    grid, dim3(128), many ? fa_smem<256, 256, 32>() : fa_smem<256, 256, 64>(), out, q, k, v, k2, v2, rows,
                    nk, tail, block0, H, q_rs, kvw, q_seg, kv_seg, k2_seg, mha_hd, sl2, nkd);
    else
        cuda_launch(c, flash_attn_kernel<72, 80, false, 64>, grid, dim3(128), fa_smem<72, 80, 64>(), out, q, k, v, k2, v2,
                    rows, nk, tail, block0, H, q_rs, kvw, q_seg, kv_seg, k2_seg, mha_hd, sl2, nkd);
}

template <int HD, int HDP, bool SFX, int BN> static void fa_opt_in(cuda_ctx *c) {
    CUDA_NOTE(c, cudaFuncSetAttribute(flash_attn_kernel<HD, HDP, SFX, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)fa_smem<HD, HDP, BN>()));
}

void cuda_flash_mma_setup(cuda_ctx *c) {   // the opt-in for more than 48 KB of shared memory (per device)
    fa_opt_in<256, 256, true, 64>(c);
    fa_opt_in<256, 256, true, 32>(c);
    fa_opt_in<256, 256, false, 64>(c);
    fa_opt_in<256, 256, false, 32>(c);
    fa_opt_in<72, 80, false, 64>(c);
}
