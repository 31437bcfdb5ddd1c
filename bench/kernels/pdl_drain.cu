// pdl_drain.cu — does a kernel's completion, as its programmatic dependent sees it (griddepcontrol.wait),
// wait for the memory traffic that the dependent itself started before its wait? Kernel A (one block per
// SM) spins for T us; kernel B, launched with programmatic stream serialization, starts while A runs and
// before its wait issues bulk copies (TMA) of X MB of weights into shared memory, or L2 prefetches of them.
// Printed: B's first wait release after A's last block ended (us), for X = 0 .. 24 MB and T = 2, 10 us.
// Build and run: sh bench/kernels/run_lab.sh build / run OUTDIR.
#include <stdio.h>

#include "../../src/cuda/common.cuh"
#include "../../src/cuda/mma.cuh"
#include "lab.cuh"

__device__ unsigned long long gt() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void spin_kernel(unsigned long long ns, unsigned long long *end) {
    pdl_wait();
    pdl_trigger();
    unsigned long long t0 = gt();
    while (gt() - t0 < ns) { }
    __syncthreads();
    if (threadIdx.x == 0) atomicMax(end, gt());
}

// Block b copies `per` bytes at w + b * per (mode 0: bulk copies into shared memory, 1: L2 prefetch, 2: nothing).
__global__ void pre_kernel(const char *w, unsigned per, int mode, unsigned long long *rel) {
    extern __shared__ __align__(16) unsigned char sm[];
    __shared__ __align__(8) uint64_t bar;
    pdl_trigger();
    if (threadIdx.x == 0 && mode == 0) {
        mbar_init(&bar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        mbar_expect_tx(&bar, per);
    }
    __syncthreads();
    const char *src = w + (size_t)blockIdx.x * per;
    if (mode == 0 && threadIdx.x < per / 4096) bulk_copy(sm + threadIdx.x * 4096, src + threadIdx.x * 4096, 4096, &bar);
    if (mode == 1 && threadIdx.x < per / 4096)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], 4096;" ::"l"(src + threadIdx.x * 4096) : "memory");
    pdl_wait();
    if (threadIdx.x == 0) atomicMin(rel, gt());
    if (mode == 0) mbar_wait(&bar, 0);
}

int main(void) {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const unsigned maxper = 192 * 1024;
    char *w;
    CK(cudaMalloc(&w, (size_t)sms * maxper * 4));
    CK(cudaMemset(w, 1, (size_t)sms * maxper * 4));
    unsigned long long *d;
    CK(cudaMalloc(&d, 16));
    CK(cudaFuncSetAttribute(pre_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, maxper));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    const char *mname[3] = {"bulk copies into smem", "L2 prefetch", "no traffic"};
    printf("B's first wait release after A's end, us (median of 9); A: %d blocks spinning T us, B: %d blocks\n", sms, sms);
    for (int mode = 0; mode < 3; mode++)
        for (int T = 2; T <= 10; T += 8) {
            printf("%-22s T = %2d us:", mname[mode], T);
            for (unsigned mb = 0; mb <= 24; mb += 4) {
                unsigned per = (unsigned)(((size_t)mb << 20) / sms / 4096 * 4096);
                if (per > maxper) per = maxper;
                double g[9];
                for (int it = 0; it < 9; it++) {
                    // a different slice of w each time, so that nothing is in L2 already
                    const char *src = w + (size_t)(it % 4) * sms * maxper;
                    unsigned long long init[2] = {0, ~0ull}, h[2];
                    CK(cudaMemcpyAsync(d, init, 16, cudaMemcpyHostToDevice, st));
                    cudaLaunchConfig_t cfg = {};
                    cudaLaunchAttribute at[1];
                    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
                    at[0].val.programmaticStreamSerializationAllowed = 1;
                    cfg.attrs = at;
                    cfg.numAttrs = 1;
                    cfg.stream = st;
                    cfg.gridDim = dim3(sms);
                    cfg.blockDim = dim3(128);
                    CK(cudaLaunchKernelEx(&cfg, spin_kernel, (unsigned long long)T * 1000, d));
                    cfg.blockDim = dim3(64);
                    cfg.dynamicSmemBytes = mode == 0 ? (per ? per : 16) : 16;
                    CK(cudaLaunchKernelEx(&cfg, pre_kernel, src, per, mode, d + 1));
                    CK(cudaMemcpyAsync(h, d, 16, cudaMemcpyDeviceToHost, st));
                    CK(cudaStreamSynchronize(st));
                    g[it] = ((double)h[1] - (double)h[0]) * 1e-3;
                }
                for (int i = 0; i < 9; i++)
                    for (int j = i + 1; j < 9; j++)
                        if (g[j] < g[i]) { double x = g[i]; g[i] = g[j]; g[j] = x; }
                printf("  %2u MB %5.2f", mb, g[4]);
            }
            printf("\n");
        }
    return 0;
}
