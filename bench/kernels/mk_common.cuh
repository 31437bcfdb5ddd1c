// mk_common.cuh — what the megakernel labs of issue 41 (megakernel.cu, megakernel2.cu) share: the page geometry
// (16 weight rows x 1024 columns per shared-memory page, 8 compute warps and a loader warp), the counters' acquire
// loads and release reductions, the few-row X layout of gemv.cu with the RMSNorm folded in, the page MMAs and the
// compute side's page ring; on the host, the CPU model's pieces (bf16 rounding, a double-precision product, the
// norm, GELU) and device-to-host copies.
#pragma once
#include <math.h>
#include <string.h>
#include <vector>

#include "../../src/cuda/common.cuh"
#include "../../src/cuda/mma.cuh"
#include "few_rows.cuh"
#include "lab.cuh"

enum {
    MD = 1024,            // expert width
    MLDS = MD * 2 + 64,   // bytes per weight row in a page (padding: conflict-free 16-byte reads)
    MPAGE = 16 * MLDS,    // one page: 16 weight rows x 1024 columns
    MW = 8,               // compute warps
    MCT = MW * 32,        // compute threads
    MT = MCT + 32,        // + the loader warp
};
static_assert(MCT == 256, "cbar() names 256 threads");

__device__ __forceinline__ unsigned ld_acquire_u32(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void red_release_add(unsigned *p, unsigned v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// Two / four fp32 adds in L2, one instruction (sm_90): the labs' split-K sums.
__device__ __forceinline__ void red_v2(float *p, float a, float b) {
    asm volatile("red.relaxed.gpu.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(a), "f"(b) : "memory");
}
__device__ __forceinline__ void red_v4(float *p, float4 v) {
    asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z),
                 "f"(v.w) : "memory");
}
// This block's rank in its cluster; a barrier of every thread of every block of the cluster (arrive releases, wait
// acquires: the cluster's shared-memory writes before it are visible to all after it).
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_sync_all() {
    asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
}
// Waits that give up: after 1 s they count a timeout in *err and return (every later wait returns at once), so a plan
// that is not co-resident, or a lost signal, fails the lab instead of hanging it. lab_wait_count: until *p >= need;
// lab_wait_bar: an mbarrier phase that cluster peers complete (acquire at cluster scope, as their st.async release).
__device__ __forceinline__ unsigned long long lab_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void lab_wait_count(const unsigned *p, unsigned need, unsigned *err) {
    if (*(volatile unsigned *)err) return;
    const unsigned long long t0 = lab_ns();
    while (ld_acquire_u32(p) < need)
        if (lab_ns() - t0 > 1000000000ull) { atomicAdd(err, 1u); return; }
}
__device__ __forceinline__ void lab_wait_bar(uint64_t *b, unsigned parity, unsigned *err) {
    const unsigned long long t0 = lab_ns();
    for (unsigned done = 0; !done;) {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(smem_u32(b)), "r"(parity) : "memory");
        if (!done && (*(volatile unsigned *)err || lab_ns() - t0 > 1000000000ull)) { atomicAdd(err, 1u); return; }
    }
}
__device__ __forceinline__ void cbar() { asm volatile("bar.sync 1, 256;" ::: "memory"); }   // the MCT compute threads only
// RMSNorm folded in: X (1 + n) into the MMAs; the rows' sums of squares of this warp's columns to nss[warp][16].
__device__ __forceinline__ void norm_x(uint4 (&xv)[4][2], const float *n, float *nss, int warp, int g, int c, int kw) {
    float s0, s1;
    quad_sumsq(xv, s0, s1);
    if (c == 0) { nss[warp * 16 + g] = s0; nss[warp * 16 + g + 8] = s1; }
#pragma unroll
    for (int u = 0; u < 4; u++)
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            const float4 f = __ldg((const float4 *)(n + kw + 32 * u + 4 * h2));
            const float fa[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int h = 2 * h2 + e;
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    float2 v = bf2_to_f2(u4_get(xv[u][r], h));
                    u4_set(xv[u][r], h, f2_to_bf2(fmaf(v.x, fa[2 * e], v.x), fmaf(v.y, fa[2 * e + 1], v.y)));
                }
            }
        }
}
// acc[t] += X . W^T over this warp's 128 columns for weight rows 8t + g of the page.
__device__ __forceinline__ void page_mma(float (&acc)[2][4], const unsigned char *W, const uint4 (&xv)[4][2], int g, int kw) {
#pragma unroll
    for (int t = 0; t < 2; t++)
#pragma unroll
        for (int u = 0; u < 4; u++) {
            uint4 w = *(const uint4 *)(W + (8 * t + g) * MLDS + (kw + 32 * u) * 2);
            mma_bf16(acc[t], xv[u][0].x, xv[u][1].x, xv[u][0].y, xv[u][1].y, w.x, w.y);
            mma_bf16(acc[t], xv[u][0].z, xv[u][1].z, xv[u][0].w, xv[u][1].w, w.z, w.w);
        }
}
// The same for a page whose two halves hold the same 8 weight rows at two K chunks: acc[t] += X_t . W_t^T.
__device__ __forceinline__ void page_mma_k2(float (&acc)[2][4], const unsigned char *W, const uint4 (&x0)[4][2],
                                            const uint4 (&x1)[4][2], int g, int kw) {
#pragma unroll
    for (int t = 0; t < 2; t++)
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const uint4(&xv)[4][2] = t ? x1 : x0;
            uint4 w = *(const uint4 *)(W + (8 * t + g) * MLDS + (kw + 32 * u) * 2);
            mma_bf16(acc[t], xv[u][0].x, xv[u][1].x, xv[u][0].y, xv[u][1].y, w.x, w.y);
            mma_bf16(acc[t], xv[u][0].z, xv[u][1].z, xv[u][0].w, xv[u][1].w, w.z, w.w);
        }
}
// Output (row m, weight row 8t + j) summed over the 8 warps in warp order.
__device__ __forceinline__ float frag_sum(const float *red, int t, int m, int j) {
    const int i = (m >> 3) * 2 + (j & 1), ln = (m & 7) * 4 + (j >> 1);
    float s = 0;
#pragma unroll
    for (int w = 0; w < MW; w++) s += red[((w * 2 + t) * 4 + i) * 32 + ln];
    return s;
}

// The compute side's ring position: page k of the block's pages is in slot k % NP, filled for the (k / NP)-th time.
struct mk_ring {
    unsigned char *pages;
    uint64_t *full, *empty;
    int np, k;
    bool wait_full;
    __device__ __forceinline__ const unsigned char *get() {
        if (wait_full) mbar_wait(&full[k % np], (k / np) & 1);
        return pages + (k % np) * MPAGE;
    }
    __device__ __forceinline__ void put(int lane) {
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[k % np]);
        k++;
    }
};

// A persistent launch's one attribute: cooperative (cs = 1) or clusters of cs blocks.
static void lab_persistent_attr(cudaLaunchAttribute &at, int cs) {
    if (cs == 1) {
        at.id = cudaLaunchAttributeCooperative;
        at.val.cooperative = 1;
    } else {
        at.id = cudaLaunchAttributeClusterDimension;
        at.val.clusterDim.x = cs;
        at.val.clusterDim.y = at.val.clusterDim.z = 1;
    }
}

// The labs' expert: depth layers of wl pseudo-random bf16 weights each (in [-0.03, 0.03)), and two RMSNorm factor
// rows per layer (attention, then MLP) of 0.2 sin(0.37 i).
static void lab_expert(int depth, size_t wl, bf16 **w, float **nf) {
    CK(cudaMalloc(w, wl * depth * 2));
    CK(cudaMalloc(nf, (size_t)depth * 2 * MD * 4));
    fill_kernel<<<1024, 256>>>(*w, wl * depth, 7, 0.03f);
    std::vector<float> h((size_t)depth * 2 * MD);
    for (size_t i = 0; i < h.size(); i++) h[i] = 0.2f * sinf(0.37f * (float)i);
    CK(cudaMemcpy(*nf, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
}

// One launch with clock64 stamps: n zeroed stamps in device memory at *slot during launch(), copied back; khz: the
// SM clock rate that converts them.
template <class F> static std::vector<long long> lab_stamps(size_t n, long long **slot, cudaStream_t s, int *khz, F launch) {
    long long *prof;
    CK(cudaMalloc(&prof, n * 8));
    CK(cudaMemsetAsync(prof, 0, n * 8, s));   // on the launch's stream (a non-blocking one does not wait for cudaMemset)
    *slot = prof;
    launch();
    CK(cudaStreamSynchronize(s));
    *slot = NULL;
    std::vector<long long> h(n);
    CK(cudaMemcpy(h.data(), prof, n * 8, cudaMemcpyDeviceToHost));
    CK(cudaFree(prof));
    CK(cudaDeviceGetAttribute(khz, cudaDevAttrClockRate, 0));
    return h;
}

static float bf(float x) { return __bfloat162float(__float2bfloat16(x)); }
static std::vector<float> dl(const bf16 *p, size_t n) {
    std::vector<uint16_t> raw(n);
    CK(cudaMemcpy(raw.data(), p, n * 2, cudaMemcpyDeviceToHost));
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) { uint32_t u = (uint32_t)raw[i] << 16; memcpy(&v[i], &u, 4); }
    return v;
}
static std::vector<float> dlf(const float *p, size_t n) {
    std::vector<float> v(n);
    CK(cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost));
    return v;
}
// y[m][n] = sum_k x[m][k] w[n][k] in double
static void mm(const float *x, int ldx, const float *w, int ldw, int M, int N, int K, double *y) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)x[(size_t)m * ldx + k] * w[(size_t)n * ldw + k];
            y[(size_t)m * N + n] = s;
        }
}
static void normed(const float *x, const float *nf, int M, float eps, std::vector<float> &xn, std::vector<float> &r) {
    xn.assign((size_t)M * MD, 0);
    r.assign(M, 0);
    for (int m = 0; m < M; m++) {
        double ss = 0;
        for (int k = 0; k < MD; k++) ss += (double)x[(size_t)m * MD + k] * x[(size_t)m * MD + k];
        r[m] = (float)(1.0 / sqrt(ss / MD + eps));
        for (int k = 0; k < MD; k++) xn[(size_t)m * MD + k] = bf(x[(size_t)m * MD + k] * (1 + nf[k]));
    }
}
static float gelu_ref(float x) { return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x))); }
