// mma.cuh — tensor-core and asynchronous-copy building blocks shared by the hand-written kernels
// (gemv.cu, attention.cu): mma.m16n8k16 (bf16 in, fp32 accumulate), ldmatrix, cp.async, the bulk copy (TMA)
// with its mbarrier, bf16 pair packing, cluster barriers and st.async; the warpgroup MMA (wgmma) and the
// tensor copies that feed it. PTX ISA names in the comments.
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
    PI0_SM90(asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory"));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t *b, unsigned bytes) {   // arrive + expect `bytes`
    PI0_SM90(asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes) : "memory"));
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
    PI0_SM90(asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory"));
}
__device__ __forceinline__ void mbar_wait(uint64_t *b, unsigned parity) {
    for (unsigned done = 0; !done;)
        PI0_SM90(asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(smem_u32(b)), "r"(parity) : "memory"));
}
// `bytes` (a multiple of 16) from global to shared memory, counted on mbarrier b.
__device__ __forceinline__ void bulk_copy(void *smem, const void *gmem, unsigned bytes, uint64_t *b) {
    PI0_SM90(asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_u32(smem)), "l"(gmem), "r"(bytes), "r"(smem_u32(b)) : "memory"));
}
// The same for data read once per pass (the denoise's weight stream): the lines are marked evict-first in L2,
// so the stream replaces its own earlier lines rather than what is reused (the KV cache, activations).
__device__ __forceinline__ void bulk_copy_stream(void *smem, const void *gmem, unsigned bytes, uint64_t *b) {
    PI0_SM90(asm volatile("{ .reg .b64 pol; createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n"
                 "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], pol; }"
                 ::"r"(smem_u32(smem)), "l"(gmem), "r"(bytes), "r"(smem_u32(b)) : "memory"));
}

// ---- thread-block clusters ----
// Arrive without ordering (a fence such as fence.mbarrier_init orders what must be seen) / wait (acquire).
__device__ __forceinline__ void cluster_arrive_relaxed() { PI0_SM90(asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory")); }
__device__ __forceinline__ void cluster_wait() { PI0_SM90(asm volatile("barrier.cluster.wait.aligned;" ::: "memory")); }
// v into block `rank` of the cluster, at the address that p has in this block, counted (complete_tx, 4 bytes)
// on that block's mbarrier at the address of b (st.async).
__device__ __forceinline__ void st_async_f32(float *p, unsigned rank, float v, uint64_t *b) {
    PI0_SM90({
        unsigned ra, rb;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(smem_u32(p)), "r"(rank));
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rb) : "r"(smem_u32(b)), "r"(rank));
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];" ::"r"(ra), "f"(v), "r"(rb)
                     : "memory");
    });
}
__device__ __forceinline__ void st_async_f32x2(float *p, unsigned rank, float v0, float v1, uint64_t *b) {   // 8 bytes
    PI0_SM90({
        unsigned ra, rb;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(smem_u32(p)), "r"(rank));
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rb) : "r"(smem_u32(b)), "r"(rank));
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(ra),
                     "f"(v0), "f"(v1), "r"(rb) : "memory");
    });
}
__device__ __forceinline__ void st_async_f32x4(float *p, unsigned rank, float4 v, uint64_t *b) {   // 16 bytes
    PI0_SM90({
        unsigned ra, rb;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(smem_u32(p)), "r"(rank));
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rb) : "r"(smem_u32(b)), "r"(rank));
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(ra),
                     "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(rb) : "memory");
    });
}

// Makes mbarrier initialisation visible to the asynchronous proxy (the tensor copies that complete on them).
__device__ __forceinline__ void fence_barrier_init() { PI0_SM90(asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory")); }

// ---- wgmma (sm_90a): warpgroup (4 warps, 128 threads) matrix products, both operands in shared memory ----
// Operand tiles are K-major (k contiguous: A as [m][k], B as [n][k]) rows of 64 bf16 (128 bytes) in the 128-byte
// swizzle that the tensor copies below write (16-byte chunk q of row r at chunk q ^ (r % 8)), 1024-byte aligned.
// One m64nNk16 step starts at the tile's row 0 plus 32 bytes per 16 k (+ 2 on the descriptor); 8-row groups are
// 1024 bytes apart. Matrix descriptor (PTX "matrix descriptor"): start address, leading / stride byte offsets
// (>> 4), 128B swizzle.
// Byte offset of 16-byte chunk q of row r in such a swizzled tile (for threads that read or write one).
__device__ __forceinline__ uint32_t swz128(int r, int q) { return (uint32_t)(r * 128 + ((q ^ (r & 7)) << 4)); }
__device__ __forceinline__ uint64_t wg_desc(const void *smem) {
    return (uint64_t)((smem_u32(smem) & 0x3FFFF) >> 4) | ((uint64_t)(1024 >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
           (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { PI0_SM90A(asm volatile("wgmma.fence.sync.aligned;" ::: "memory")); }
__device__ __forceinline__ void wg_commit() { PI0_SM90A(asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory")); }
template <int N> __device__ __forceinline__ void wg_wait() { PI0_SM90A(asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory")); }
// Keeps the compiler from moving reads of accumulator registers above wg_wait (they change asynchronously).
template <int N> __device__ __forceinline__ void wg_hold(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
// D (64 x N, fp32) (+)= A . B^T for A [64][16] and B [N][16] (K-major descriptors); acc = 0: D = A B^T. Thread t of
// the warpgroup holds rows 16 (t / 32) + (t % 32) / 4 (and + 8) at columns 8 i + 2 (t % 4) (and + 1): d[4 i], d[4 i + 1]
// (and d[4 i + 2], d[4 i + 3] for the row + 8), the mma.sync C layout per 8 columns.
#define WG_D8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                    "+f"(d[i + 6]), "+f"(d[i + 7])
#define WG_D32(d, i) WG_D8(d, i), WG_D8(d, i + 8), WG_D8(d, i + 16), WG_D8(d, i + 24)
__device__ __forceinline__ void wg_ss_64x64(float (&d)[32], uint64_t da, uint64_t db, int acc) {
    PI0_SM90A(asm volatile("{ .reg .pred p; setp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,"
                 "%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0; }"
                 : WG_D32(d, 0)
                 : "l"(da), "l"(db), "r"(acc)));
}

// D (64 x 256) += A . B with A from registers (per warp the mma.sync A fragment of its 16 rows: the accumulator
// layout above, rounded to bf16 pairs) and B [16 k][256 n] MN-major (n contiguous) in shared memory: four 128-byte
// swizzled slabs of 64 columns `slab` bytes apart (the descriptor's leading byte offset), whose step of 16 k starts
// 16 rows (2048 bytes) further.
#define WG_D128(d) WG_D32(d, 0), WG_D32(d, 32), WG_D32(d, 64), WG_D32(d, 96)
// The operand list of 128 accumulator registers (%0 .. %127) in the instruction text.
#define WG_R128                                                                                                    \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29," \
    "%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,"   \
    "%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,"   \
    "%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,"  \
    "%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
__device__ __forceinline__ uint64_t wg_desc_mn(const void *smem, unsigned slab) {
    return (wg_desc(smem) & ~(0x3FFFull << 16)) | ((uint64_t)(slab >> 4) << 16);
}
__device__ __forceinline__ void wg_rs_64x256_t(float (&d)[128], const uint32_t (&a)[4], uint64_t db) {
    PI0_SM90A(asm volatile("{ .reg .pred p; setp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" WG_R128 "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1; }"
                 : WG_D128(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)));
}

// ---- tensor copies (TMA, cp.async.bulk.tensor): a box of a 2-D tensor map into shared memory ----
// Box at (x, y) = (inner coordinate, row) of the map, counted (complete_tx) on mbarrier b; out-of-range elements
// arrive as zeros and count.
__device__ __forceinline__ void tma_load_2d(void *smem, const void *map, int x, int y, uint64_t *b) {
    PI0_SM90(asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                 "[%4];" ::"r"(smem_u32(smem)), "l"(map), "r"(x), "r"(y), "r"(smem_u32(b)) : "memory"));
}
// The same for the weight stream, its lines marked evict-first in L2 (as bulk_copy_stream).
__device__ __forceinline__ void tma_load_2d_stream(void *smem, const void *map, int x, int y, uint64_t *b) {
    PI0_SM90(asm volatile("{ .reg .b64 pol; createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n"
                 "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint "
                 "[%0], [%1, {%2, %3}], [%4], pol; }" ::"r"(smem_u32(smem)), "l"(map), "r"(x), "r"(y),
                 "r"(smem_u32(b)) : "memory"));
}
// A box of a 4-D tensor map (coordinates innermost first), counted on mbarrier b like tma_load_2d.
__device__ __forceinline__ void tma_load_4d(void *smem, const void *map, int c0, int c1, int c2, int c3, uint64_t *b) {
    PI0_SM90(asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
                 "[%6];" ::"r"(smem_u32(smem)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_u32(b)) : "memory"));
}
// Shared memory to the box at (x, y) of a 2-D tensor map (elements outside the map are not written), as one bulk
// group; the writes to shared memory before it need fence_proxy_async first.
__device__ __forceinline__ void tma_store_2d(const void *map, const void *smem, int x, int y) {
    PI0_SM90(asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(map), "r"(x), "r"(y),
                 "r"(smem_u32(smem)) : "memory"));
    PI0_SM90(asm volatile("cp.async.bulk.commit_group;" ::: "memory"));
}
// This thread's stores have read their shared memory (it may be rewritten) / have completed.
__device__ __forceinline__ void tma_store_wait_read() { PI0_SM90(asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory")); }
__device__ __forceinline__ void tma_store_wait() { PI0_SM90(asm volatile("cp.async.bulk.wait_group 0;" ::: "memory")); }
__device__ __forceinline__ void fence_proxy_async() { PI0_SM90(asm volatile("fence.proxy.async.shared::cta;" ::: "memory")); }
// Warp-group register reallocation (setmaxnreg): a producer warpgroup gives registers to the consumers.
template <int R> __device__ __forceinline__ void regs_dec() { PI0_SM90A(asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R))); }
template <int R> __device__ __forceinline__ void regs_inc() { PI0_SM90A(asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R))); }
// Four (x4) or one (x1) 8 x 8 b16 matrices in the mma accumulator layout (lane l: row l / 4, columns 2 (l % 4), + 1
// as a bf16 pair), written transposed: lane 8 i + r gives the shared-memory address of row r of matrix i.
__device__ __forceinline__ void stsm_x4_t(const void *p, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    PI0_SM90(asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem_u32(p)), "r"(r0),
                 "r"(r1), "r"(r2), "r"(r3) : "memory"));
}
__device__ __forceinline__ void stsm_x1_t(const void *p, uint32_t r0) {
    PI0_SM90(asm volatile("stmatrix.sync.aligned.m8n8.x1.trans.shared.b16 [%0], {%1};" ::"r"(smem_u32(p)), "r"(r0) : "memory"));
}
