#pragma once
// wgemm.cuh — (kernel lab; measured slower than cuBLASLt in the pipeline, bench/RESULTS.md L51) Y = X W^T for many rows (prefill, SigLIP: M = 768-788, and batches) on the Hopper warpgroup MMA
// (wgmma) with tensor copies (TMA), and the epilogues cuBLASLt lacks: gelu(gate) * up from the fused gate|up
// weights and q|k|v + RoPE into three outputs. Checked against cuBLASLt by wgemm_lab.cu.
//
// Tiles of WG_BM = 128 rows x BN columns, k in blocks of 64. A block is 3 warpgroups: warpgroup 0 is the
// producer (one thread issues the tensor copies of A = X [128][64] and B = W [BN][64] into a ring of stages,
// full / empty mbarriers), warpgroups 1 and 2 each multiply 64 of the rows with one wgmma m64nBNk16 per 16 k,
// release the stage and run the epilogue from the accumulator registers. The grid is persistent (at most one
// block per SM, tiles in turn, row tiles fastest so that the blocks at work share the weight tiles in L2): the
// producer fills the next tile's stages while the consumers finish the last one.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <string.h>

#include "../../src/cuda/mma.cuh"

enum { WG_BM = 128, WG_BK = 64 };

// wgmma and tensor-copy helpers: src/cuda/mma.cuh.
// Warp-group register reallocation (setmaxnreg: regs_dec / regs_inc): src/cuda/mma.cuh.

#define WG_D64(d) WG_D32(d, 0), WG_D32(d, 32)
__device__ __forceinline__ void wg_ss_64x128(float (&d)[64], uint64_t da, uint64_t db, int acc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,"
                 "%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,"
                 "%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
                 "}, %64, %65, p, 1, 1, 0, 0; }"
                 : WG_D64(d)
                 : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wg_ss_64x256(float (&d)[128], uint64_t da, uint64_t db, int acc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" WG_R128 "}, %128, %129, p, 1, 1, 0, 0; }"
                 : WG_D128(d)
                 : "l"(da), "l"(db), "r"(acc));
}

// Y = X W^T on wgmma for many rows. The halves of a B tile (BN / 2 weight rows each) are adjacent or, with
// pair = P (WG_GELU_MUL), rows n and n + P, so that a thread holds columns j and j + BN / 2 together (gate and up;
// for WG_ROPE with BN = hd the two halves of a head). Output column n of group n / group goes to y + (n / group) gy.
enum wg_epi { WG_STORE, WG_ADD, WG_GELU, WG_GELU_MUL, WG_ROPE };
struct wg_args {
    bf16 *y, *yk, *yv;          // output (M, ldy); WG_ROPE: q (M, nq), k (M, nk), v (M, N - nq - nk)
    const bf16 *bias;           // per output column (+ (n / group) gb), or NULL
    const int32_t *pos;         // WG_ROPE: positions per row
    int M, N, K, ldy;           // N: output columns (WG_GELU_MUL: F = the pair distance)
    int epi, group;             // wg_epi; columns per output group (N: one group)
    long long gy, gb;           // group strides of y and bias, in elements
    int pair, nq, nk, hd;
    int tiles_m, tiles_n;       // set by cuda_wgemm
};

template <int BN> struct wg_cfg {
    static constexpr int stages = BN == 256 ? 4 : 6;
    static constexpr unsigned a_bytes = WG_BM * WG_BK * 2, b_bytes = BN * WG_BK * 2;
    static constexpr size_t smem = (size_t)stages * (a_bytes + b_bytes) + 1024 + 2 * stages * 8 + BN / 2 * 4;
};

template <int BN> __device__ __forceinline__ void wg_mma(float (&d)[BN / 2], uint64_t da, uint64_t db, int acc) {
    if constexpr (BN == 256) wg_ss_64x256(d, da, db, acc);
    else wg_ss_64x128(d, da, db, acc);
}

// Thread q of a quad holds f[k] = columns (2 q, 2 q + 1) of 8-column block k (k < 4) of one row, the accumulator
// layout; afterwards f[k] = columns (2 k, 2 k + 1) of block q: 8 consecutive columns per thread for 16-byte
// stores (4-byte stores of the accumulator layout fill half of each 32-byte sector: the products with M = 788
// spent more time in their epilogue than in their MMAs). A 4 x 4 transpose in two rounds of xor shuffles.
__device__ __forceinline__ void quad_transpose(float2 (&f)[4], int q) {
#pragma unroll
    for (int b = 1; b <= 2; b <<= 1) {
        const bool hi = q & b;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (k & b) continue;
            float2 x = hi ? f[k] : f[k | b], y;
            y.x = __shfl_xor_sync(0xffffffffu, x.x, b);
            y.y = __shfl_xor_sync(0xffffffffu, x.y, b);
            if (hi) f[k] = y;
            else f[k | b] = y;
        }
    }
}

// Output columns n .. n + 7 of row r (n % 8 == 0) with bias, residual or GELU per the epilogue.
__device__ __forceinline__ void wg_store8(const wg_args &a, int r, int n, const float2 (&f)[4]) {
    if (r >= a.M || n >= a.N) return;
    const int gi = a.group < a.N ? n / a.group : 0, nn = n - gi * a.group;
    bf16 *dst = a.y + gi * a.gy + (size_t)r * a.ldy + nn;
    float v[8] = {f[0].x, f[0].y, f[1].x, f[1].y, f[2].x, f[2].y, f[3].x, f[3].y}, o[8];
    if (a.bias) {
        ldv<8>(o, a.bias + gi * a.gb + nn);
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] += o[e];
    }
    if (a.epi == WG_ADD) {
        ldv<8>(o, dst);
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] += o[e];
    } else if (a.epi == WG_GELU) {
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = gelu_tanh(v[e]);
    }
    stv<8>(dst, v);
}

// The 8 columns from f (quad_transpose's layout) at dst.
__device__ __forceinline__ void st8(bf16 *dst, const float2 (&f)[4]) {
    const float v[8] = {f[0].x, f[0].y, f[1].x, f[1].y, f[2].x, f[2].y, f[3].x, f[3].y};
    stv<8>(dst, v);
}

template <int BN>
__global__ void __launch_bounds__(384, 1) wg_gemm_kernel(const __grid_constant__ CUtensorMap tx,
                                                         const __grid_constant__ CUtensorMap tw, wg_args a) {
    typedef wg_cfg<BN> C;
    constexpr int S = C::stages;
    extern __shared__ uint8_t smem_raw[];
    uint8_t *sa = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023), *sb = sa + S * C::a_bytes;
    uint64_t *full = (uint64_t *)(sb + S * C::b_bytes), *empty = full + S;
    float *freq = (float *)(empty + S);   // WG_ROPE: inverse frequencies of the hd / 2 = BN / 2 pairs
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128, nk = (a.K + WG_BK - 1) / WG_BK;
    const int tiles = a.tiles_m * a.tiles_n;
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 2);   // one arrival per consumer warpgroup
        }
        fence_barrier_init();
    }
    if (a.epi == WG_ROPE && threadIdx.x < BN / 2) freq[threadIdx.x] = (float)pow(10000.0, -2.0 * threadIdx.x / a.hd);
    __syncthreads();
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    if (wg == 0) {   // producer
        regs_dec<40>();
        if (tid != 0) return;
        int s = 0;
        unsigned ph = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            const int m0 = (t % a.tiles_m) * WG_BM, nt = t / a.tiles_m;
            const int r0 = a.pair ? nt * (BN / 2) : nt * BN, r1 = r0 + (a.pair ? a.pair : BN / 2);
            for (int kb = 0; kb < nk; kb++) {
                mbar_wait(&empty[s], ph ^ 1);
                mbar_expect_tx(&full[s], C::a_bytes + C::b_bytes);
                tma_load_2d(sa + s * C::a_bytes, &tx, kb * WG_BK, m0, &full[s]);
                tma_load_2d(sb + s * C::b_bytes, &tw, kb * WG_BK, r0, &full[s]);
                tma_load_2d(sb + s * C::b_bytes + C::b_bytes / 2, &tw, kb * WG_BK, r1, &full[s]);
                if (++s == S) { s = 0; ph ^= 1; }
            }
        }
        return;
    }
    regs_inc<232>();
    const int cw = wg - 1, warp = tid / 32, g = (tid % 32) / 4, q = tid % 4;
    float d[BN / 2];
    int s = 0;
    unsigned ph = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int m0 = (t % a.tiles_m) * WG_BM, nt = t / a.tiles_m;
        int prev = -1;
        for (int kb = 0; kb < nk; kb++) {
            mbar_wait(&full[s], ph);
            wg_fence();
            const uint64_t da = wg_desc(sa + s * C::a_bytes + cw * 64 * 128), db = wg_desc(sb + s * C::b_bytes);
#pragma unroll
            for (int kk = 0; kk < WG_BK / 16; kk++) wg_mma<BN>(d, da + 2 * kk, db + 2 * kk, kb | kk);
            wg_commit();
            wg_wait<1>();   // the previous block's products are done: its stage goes back to the producer
            if (prev >= 0 && tid == 0) mbar_arrive(&empty[prev]);
            prev = s;
            if (++s == S) { s = 0; ph ^= 1; }
        }
        wg_wait<0>();
        wg_hold(d);
        if (tid == 0) mbar_arrive(&empty[prev]);
        const int r = m0 + cw * 64 + warp * 16 + g;
        // per group of 4 column blocks (32 columns) and row (g, g + 8): thread q gets block 4 j + q (quad_transpose)
        if (a.epi == WG_GELU_MUL) {   // gate at column j (d[4 i ..]), up at j + BN / 2 (d[4 (i + BN / 16) ..])
#pragma unroll
            for (int j = 0; j < BN / 64; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float2 f[4];
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        const int i = 4 * j + k;
                        f[k] = make_float2(gelu_tanh(d[4 * i + 2 * h]) * d[4 * (i + BN / 16) + 2 * h],
                                           gelu_tanh(d[4 * i + 2 * h + 1]) * d[4 * (i + BN / 16) + 2 * h + 1]);
                    }
                    quad_transpose(f, q);
                    const int n = nt * (BN / 2) + 32 * j + 8 * q;
                    if (r + 8 * h < a.M && n < a.N) st8(a.y + (size_t)(r + 8 * h) * a.ldy + n, f);
                }
        } else if (a.epi == WG_ROPE) {   // tile = head nt (BN = hd): the pairs (j, j + hd / 2) in one thread
            const int col = nt * BN, rope = col < a.nq + a.nk;
            bf16 *base = col < a.nq ? a.y + col : col < a.nq + a.nk ? a.yk + col - a.nq : a.yv + col - a.nq - a.nk;
            const int ld = col < a.nq ? a.nq : col < a.nq + a.nk ? a.nk : a.N - a.nq - a.nk;
#pragma unroll
            for (int j = 0; j < BN / 64; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int rr = r + 8 * h;
                    const float p = rr < a.M && rope ? (float)a.pos[rr] : 0.0f;
                    float2 f1[4], f2[4];
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        const int i = 4 * j + k, e0 = 8 * i + 2 * q;
                        float x1[2] = {d[4 * i + 2 * h], d[4 * i + 2 * h + 1]};
                        float x2[2] = {d[4 * (i + BN / 16) + 2 * h], d[4 * (i + BN / 16) + 2 * h + 1]};
                        if (rope)
#pragma unroll
                            for (int e = 0; e < 2; e++) {
                                const float th = p * freq[e0 + e], cs = cosf(th), sn = sinf(th), y1 = x1[e] * cs - x2[e] * sn;
                                x2[e] = x2[e] * cs + x1[e] * sn;
                                x1[e] = y1;
                            }
                        f1[k] = make_float2(x1[0], x1[1]);
                        f2[k] = make_float2(x2[0], x2[1]);
                    }
                    quad_transpose(f1, q);
                    quad_transpose(f2, q);
                    if (rr < a.M) {
                        st8(base + (size_t)rr * ld + 32 * j + 8 * q, f1);
                        st8(base + (size_t)rr * ld + BN / 2 + 32 * j + 8 * q, f2);
                    }
                }
        } else {
#pragma unroll
            for (int j = 0; j < BN / 32; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float2 f[4];
#pragma unroll
                    for (int k = 0; k < 4; k++) f[k] = make_float2(d[4 * (4 * j + k) + 2 * h], d[4 * (4 * j + k) + 2 * h + 1]);
                    quad_transpose(f, q);
                    wg_store8(a, r + 8 * h, nt * BN + 32 * j + 8 * q, f);
                }
        }
    }
}

// ---- host side ----

// A tensor map of boxes of box_rows x 64 with the 128-byte swizzle (gemv.cu's cuda_tensor_map).
static int wg_map(CUtensorMap *m, const void *p, int rows, int cols, int ld, int box_rows) {
    return cuda_tensor_map(m, p, rows, cols, ld, box_rows);
}

static int wg_ready;
static int cuda_wgemm_setup(cuda_ctx *c) {
    CUDA_NOTE(c, cudaFuncSetAttribute(wg_gemm_kernel<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)wg_cfg<128>::smem));
    CUDA_NOTE(c, cudaFuncSetAttribute(wg_gemm_kernel<256>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)wg_cfg<256>::smem));
    return wg_ready = !c->err;
}

// Y = X W^T (+ epilogue) on the wgmma kernel with bn = 128 or 256 column tiles: X [M][K] (row stride ldx),
// W [wrows][K] (row stride ldw). Returns 0 (nothing launched) when the operands do not meet the tensor copies' and
// the 16-byte stores' rules: 16-byte aligned bases, row strides and widths multiples of 8.
static int cuda_wgemm(cuda_ctx *c, int bn, const void *X, int ldx, const void *W, int wrows, int ldw, wg_args *a) {
    const uintptr_t al = (uintptr_t)X | (uintptr_t)W | (uintptr_t)a->y | (uintptr_t)a->yk | (uintptr_t)a->yv |
                         (uintptr_t)a->bias;
    if ((!wg_ready && !cuda_wgemm_setup(c)) || a->M <= 0 || a->N <= 0 || a->K <= 0 ||
        (ldx | ldw | a->N | a->ldy | a->group) % 8 || a->gy % 8 || a->gb % 8 || al % 16 ||
        (a->epi == WG_ROPE && (a->hd != bn || a->nq % bn || a->nk % bn || a->N % bn)))
        return 0;
    CUtensorMap tx, tw;
    if (!wg_map(&tx, X, a->M, a->K, ldx, WG_BM) || !wg_map(&tw, W, wrows, a->K, ldw, bn / 2)) return 0;
    a->tiles_n = cdiv(a->N, a->pair ? bn / 2 : bn);
    a->tiles_m = cdiv(a->M, WG_BM);
    const int tiles = a->tiles_m * a->tiles_n;
    dim3 grid(tiles < c->sms ? tiles : c->sms);
    if (bn == 256) cuda_launch(c, wg_gemm_kernel<256>, grid, dim3(384), wg_cfg<256>::smem, tx, tw, *a);
    else cuda_launch(c, wg_gemm_kernel<128>, grid, dim3(384), wg_cfg<128>::smem, tx, tw, *a);
    return 1;
}
