// mma.cuh — tensor-core and asynchronous-copy building blocks shared by the hand-written kernels
// (gemv.cu, attention.cu, expert.cu): mma.m16n8k16 (bf16 in, fp32 accumulate), ldmatrix, cp.async, the
// bulk copy (TMA) with its mbarrier, and bf16 pair packing. PTX ISA names in the comments.
#pragma once

#include "common.cuh"

__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

// D += A . B for one 16x8x16 tile; A row-major (a0: rows g, k 2c..; a1: g + 8; a2, a3: k + 8), B column-major.
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma_bf16(d, a[0], a[1], a[2], a[3], b0, b1);
}

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {   // cp.async.cg: L2 only, never L1
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(smem)), "l"(gmem) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}

// Component h of a uint4 (a pair of bf16) and its fp32 values, without taking addresses (registers stay registers).
__device__ __forceinline__ uint32_t u4_get(const uint4 &v, int h) { return h == 0 ? v.x : h == 1 ? v.y : h == 2 ? v.z : v.w; }
__device__ __forceinline__ void u4_set(uint4 &v, int h, uint32_t x) {
    if (h == 0) v.x = x; else if (h == 1) v.y = x; else if (h == 2) v.z = x; else v.w = x;
}
__device__ __forceinline__ float2 bf2_to_f2(uint32_t x) { return make_float2(__uint_as_float(x << 16), __uint_as_float(x & 0xffff0000u)); }
__device__ __forceinline__ uint32_t f2_to_bf2(float lo, float hi) {
    __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
    return (uint32_t)__bfloat16_as_ushort(b.x) | ((uint32_t)__bfloat16_as_ushort(b.y) << 16);
}

// Sums of squares of X rows g and g + 8 over the 32 columns that the 4 lanes of a quad (lanes 4g .. 4g + 3) hold
// in the few-row layout of gemv.cu (xv[u][0]: row g, xv[u][1]: row g + 8, 8 bf16 each): every lane of the quad
// gets the quad's totals.
__device__ __forceinline__ void quad_sumsq(const uint4 (&xv)[4][2], float &s0, float &s1) {
    s0 = s1 = 0;
#pragma unroll
    for (int u = 0; u < 4; u++)
#pragma unroll
        for (int h = 0; h < 4; h++) {
            float2 f0 = bf2_to_f2(u4_get(xv[u][0], h)), f1 = bf2_to_f2(u4_get(xv[u][1], h));
            s0 += f0.x * f0.x + f0.y * f0.y;
            s1 += f1.x * f1.x + f1.y * f1.y;
        }
    s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
    s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
}

// ---- mbarrier (shared memory) and the bulk copy that completes on one ----
__device__ __forceinline__ void mbar_init(uint64_t *b, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t *b, unsigned bytes) {   // arrive + expect `bytes`
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *b, unsigned parity) {
    for (unsigned done = 0; !done;)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(smem_u32(b)), "r"(parity) : "memory");
}
// `bytes` (a multiple of 16) from global to shared memory, counted on mbarrier b.
__device__ __forceinline__ void bulk_copy(void *smem, const void *gmem, unsigned bytes, uint64_t *b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_u32(smem)), "l"(gmem), "r"(bytes), "r"(smem_u32(b)) : "memory");
}

// ---- wgmma (sm_90a): warpgroup (4 warps, 128 threads) matrix products, operands in shared memory ----
// Shared-memory operand tiles use the 128-byte swizzle: a tile of R rows x 64 bf16 (one 128-byte row each), 1024-byte
// aligned, 16-byte chunk q of row r stored at chunk q ^ (r % 8) (`swz128`). A K-major operand (k contiguous: A, or
// B as [n][k]) of one m64nNk16 step starts at the tile's row 0 plus 32 bytes per 16 k; an MN-major B ([k][n], n
// contiguous, the `trans` flag) starts at row 16 k. Both step 8-row groups by 1024 bytes (stride byte offset).
__device__ __forceinline__ uint32_t swz128(int r, int q) { return (uint32_t)(r * 128 + ((q ^ (r & 7)) << 4)); }
// Matrix descriptor (PTX "matrix descriptor"): start address, leading / stride byte offsets (>> 4), 128B swizzle.
__device__ __forceinline__ uint64_t wg_desc(const void *smem) {
    return (uint64_t)((smem_u32(smem) & 0x3FFFF) >> 4) | ((uint64_t)(1024 >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
           (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
// Keeps the compiler from moving accesses of accumulator registers across wg_wait0 (they change asynchronously).
template <int N> __device__ __forceinline__ void wg_hold(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
// D (64 x 64, fp32; thread: rows 16 warp + g and + 8, columns 8 i + 2 c, + 1 in d[4 i .. 4 i + 3], the mma.sync
// C layout per 8 columns) (+)= A . B^T, A [64][16] and B [64 n][16 k] K-major in shared memory; acc = 0: D = A B^T.
__device__ __forceinline__ void wg_ss_64x64(float (&d)[32], uint64_t da, uint64_t db, int acc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,"
                 "%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,"
                 "%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0; }"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(acc));
}
// The same for N = 32 (B: 32 rows).
__device__ __forceinline__ void wg_ss_64x32(float (&d)[16], uint64_t da, uint64_t db, int acc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,"
                 "%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0; }"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(da), "l"(db), "r"(acc));
}
// D (64 x 64) += A . B, A from registers (per warp the mma.sync A fragment of its 16 rows), B [16 k][64 n] MN-major.
__device__ __forceinline__ void wg_rs_64x64_t(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,"
                 "%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,"
                 "%24,%25,%26,%27,%28,%29,%30,%31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1; }"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
