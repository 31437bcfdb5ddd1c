// wgmma_rate.cu — how fast one SM runs back-to-back warpgroup MMAs of the shapes the prefix flash kernel uses
// (attn_flash_wg.cu flash_wg_kernel: S on m64n64k16 with both operands in shared memory, P V on m64n256k16 with A from
// registers), against the wide shapes of a GEMM main loop. Each block (one per SM) runs `iters` groups of 4 k16
// products on one accumulator set, one group in flight (commit, wait<1>), with 1 or 2 warpgroups; the result is
// tensor cycles per product (clock64 of thread 0) and the share of the SM's dense bf16 peak (2048 FMA per cycle).
// Operands are zeros: the rate does not depend on the values. Built by make lab; run: build/lab/wgmma_rate.
#include <stdio.h>

#include "../../src/cuda/mma.cuh"
#include "lab.cuh"

// The wide shapes of a GEMM main loop (both operands in shared memory); the flash kernel's own are in mma.cuh.
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

__device__ __forceinline__ void rs_64x64_t(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,"
                 "%26,%27,%28,%29,%30,%31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1; }"
                 : WG_D32(d, 0)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

enum shape { SS64, SS128, SS256, RS64T, RS256T };
static const char *names[] = {"SS m64n64k16 (flash S)", "SS m64n128k16", "SS m64n256k16 (GEMM)", "RS m64n64k16, B MN-major",
                              "RS m64n256k16, B MN-major (flash P V)"};
static const int ncols[] = {64, 128, 256, 64, 256};

template <int SH> __global__ void __launch_bounds__(256, 1) rate_kernel(long long *cycles, int iters) {
    extern __shared__ uint8_t raw[];
    uint8_t *sm = raw + ((1024 - (smem_u32(raw) & 1023)) & 1023);   // A: 64 x 64, B: 256 x 64 (or [64 k][256 n])
    for (int i = threadIdx.x; i < (8192 + 32768) / 16; i += blockDim.x) ((uint4 *)sm)[i] = make_uint4(0, 0, 0, 0);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const uint64_t da = wg_desc(sm), db = SH == RS256T ? wg_desc_mn(sm + 8192, 8192) : wg_desc(sm + 8192);
    float d[128] = {};
    const uint32_t a[4] = {0, 0, 0, 0};
    long long t0 = clock64();
    for (int it = 0; it < iters; it++) {
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            if constexpr (SH == SS64) wg_ss_64x64(*(float(*)[32])d, da + 2 * kk, db + 2 * kk, 1);
            else if constexpr (SH == SS128) wg_ss_64x128(*(float(*)[64])d, da + 2 * kk, db + 2 * kk, 1);
            else if constexpr (SH == SS256) wg_ss_64x256(*(float(*)[128])d, da + 2 * kk, db + 2 * kk, 1);
            else if constexpr (SH == RS64T) rs_64x64_t(*(float(*)[32])d, a, db + (kk * 2048 >> 4));
            else wg_rs_64x256_t(*(float(*)[128])d, a, db + (kk * 2048 >> 4));
        }
        wg_commit();
        wg_wait<1>();
    }
    wg_wait<0>();
    wg_hold(*(float(*)[128])d);
    long long t1 = clock64();
    float s = 0;
    for (int i = 0; i < 128; i++) s += d[i];
    if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0 + (s != 0);
}

template <int SH> static void run(int wgs, long long *dc, int sms) {
    const int iters = 2048;
    const size_t smem = 1024 + 8192 + 32768;
    CK(cudaFuncSetAttribute(rate_kernel<SH>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    rate_kernel<SH><<<sms, 128 * wgs, smem>>>(dc, iters);   // warm-up
    rate_kernel<SH><<<sms, 128 * wgs, smem>>>(dc, iters);
    CK(cudaDeviceSynchronize());
    long long *h = (long long *)malloc(sms * sizeof(long long)), mx = 0;
    CK(cudaMemcpy(h, dc, sms * sizeof(long long), cudaMemcpyDeviceToHost));
    for (int i = 0; i < sms; i++) mx = h[i] > mx ? h[i] : mx;
    const double per = (double)mx / (iters * 4.0) / wgs, ideal = 64.0 * ncols[SH] * 16 / 2048;
    printf("%-40s %d warpgroup(s): %6.1f cycles per product (ideal %5.1f): %3.0f%% of peak\n", names[SH], wgs, per, ideal,
           100 * ideal / per);
    free(h);
}

int main() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    long long *dc;
    CK(cudaMalloc(&dc, sms * sizeof(long long)));
    for (int wgs = 1; wgs <= 2; wgs++) {
        run<SS64>(wgs, dc, sms);
        run<SS128>(wgs, dc, sms);
        run<SS256>(wgs, dc, sms);
        run<RS64T>(wgs, dc, sms);
        run<RS256T>(wgs, dc, sms);
    }
    return 0;
}
