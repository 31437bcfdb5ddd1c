// sm_stream.cu — how many bytes per second G SMs can pull into shared memory with bulk copies (TMA), from DRAM
// (512 MB streamed once) and from L2 (16 MB read 20 times), for G = 4 .. 132 blocks of one copying thread and
// R stages of CH bytes in flight; and the latency of a cluster barrier (clusters of 8 and 16 blocks). The
// question behind it (docs/journal/2026-11-23-s16-cluster-stream-pdl-edges.md): could one cluster of 16 SMs run an expert layer of the denoise
// (34.6 MB of weights) with cluster barriers between its phases instead of kernel boundaries?
// Build and run: sh bench/kernels/run_lab.sh build / run OUTDIR.
#include <stdint.h>
#include <stdio.h>

#include <cooperative_groups.h>

#include "../../src/cuda/common.cuh"
#include "../../src/cuda/mma.cuh"
#include "lab.cuh"

namespace cg = cooperative_groups;

// Block b streams bytes [b per_block, (b + 1) per_block) of buf `passes` times through R stages of CH bytes.
template <int R, int CH>
__global__ void __launch_bounds__(32, 1) stream_kernel(const uint8_t *buf, size_t per_block, int passes, unsigned *sink) {
    extern __shared__ __align__(1024) uint8_t sm[];
    __shared__ uint64_t full[R];
    if (threadIdx.x != 0) return;
    for (int s = 0; s < R; s++) mbar_init(&full[s], 1);
    fence_barrier_init();
    const uint8_t *base = buf + blockIdx.x * per_block;
    const size_t n = per_block / CH;
    unsigned acc = 0, ph[R] = {0};   // phases carry over between passes (n need not be a multiple of R)
    for (int p = 0; p < passes; p++) {
        size_t issued = 0, done = 0;
        for (; issued < n && issued < R; issued++) {
            mbar_expect_tx(&full[issued], CH);
            bulk_copy(sm + issued * CH, base + issued * CH, CH, &full[issued]);
        }
        for (; done < n; done++) {
            const int s = done % R;
            mbar_wait(&full[s], ph[s]);
            ph[s] ^= 1;
            acc += sm[s * CH + (done & 63)];
            if (issued < n) {
                mbar_expect_tx(&full[s], CH);
                bulk_copy(sm + s * CH, base + issued * CH, CH, &full[s]);
                issued++;
            }
        }
    }
    if (acc == 12345) *sink = acc;   // keeps the reads
}

template <int CL> __global__ void __launch_bounds__(128) cluster_sync_kernel(int n) {
    cg::cluster_group cl = cg::this_cluster();
    for (int i = 0; i < n; i++) cl.sync();
}

template <int R, int CH> static void stream(const uint8_t *buf, size_t bytes, int passes, unsigned *sink, const char *what) {
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    const size_t smem = (size_t)R * CH;
    CK(cudaFuncSetAttribute(stream_kernel<R, CH>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int cap = 0;
    const int gs[] = {4, 8, 16, 32, 66, 132};
    for (int G : gs) {
        const size_t per = bytes / G / CH * CH;
        float ms = lab_graph_median_ms(s, &cap, [&] { stream_kernel<R, CH><<<G, 32, smem, s>>>(buf, per, passes, sink); });
        double gbs = (double)per * G * passes / (ms * 1e-3) / 1e9;
        printf("%s %2d x %5d B in flight per SM, G = %3d: %8.3f ms, %5.0f GB/s, %5.1f GB/s per SM\n", what, R, CH, G, ms, gbs,
               gbs / G);
    }
    CK(cudaStreamDestroy(s));
}

template <int CL> static void cluster_sync(cudaStream_t s, int clusters) {
    CK(cudaFuncSetAttribute(cluster_sync_kernel<CL>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim = {CL, 1, 1};
    cfg.gridDim = dim3(CL * clusters);
    cfg.blockDim = dim3(128);
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    const int n = 10000;
    int cap = 0;
    float ms = lab_graph_median_ms(s, &cap, [&] { CK(cudaLaunchKernelEx(&cfg, cluster_sync_kernel<CL>, n)); });
    printf("cluster barrier, %d clusters of %2d blocks: %.0f ns\n", clusters, CL, ms * 1e6 / n);
}

int main() {
    setvbuf(stdout, NULL, _IOLBF, 0);
    uint8_t *buf;
    unsigned *sink;
    const size_t big = (size_t)512 << 20;
    CK(cudaMalloc(&buf, big));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(buf, 1, big));
    stream<4, 8192>(buf, big, 1, sink, "DRAM");
    stream<8, 16384>(buf, big, 1, sink, "DRAM");
    stream<12, 16384>(buf, big, 1, sink, "DRAM");
    stream<6, 32768>(buf, big, 1, sink, "DRAM");
    stream<8, 16384>(buf, (size_t)16 << 20, 20, sink, "L2  ");
    stream<12, 16384>(buf, (size_t)16 << 20, 20, sink, "L2  ");
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    for (int c = 1; c <= 8; c *= 8) {
        cluster_sync<8>(s, c);
        cluster_sync<16>(s, c);
    }
    return 0;
}
