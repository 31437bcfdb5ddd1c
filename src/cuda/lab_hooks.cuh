// lab_hooks.cuh — instrumentation points of the production kernels for the kernel lab (bench/kernels, `make lab`),
// compiled out: every LAB_* macro is empty unless the lab builds the kernel's file with the switch, so the library's
// kernels are the same instructions with or without these lines (checked with cuobjdump).
//   GEMV_PROF  gemv_kernel (few-row products) and decode attention: per-block %globaltimer and clock64 stamps at
//              10 phase boundaries each, written to a buffer the lab sets (denoise_chain's chain_prof), and a switch
//              that drops the products' weight copies (wrong results: the chain without its weight stream);
//   WG_PROF    gemv_wg_kernel (17-64 rows): thread 0's clock64 at 8 phase boundaries (wg_prof);
//   FW_PROF    flash_wg_kernel (the prefix): per-block, per-warpgroup clock64 at each step (fw_prof).
#pragma once

#ifdef GEMV_PROF
__device__ __forceinline__ unsigned long long lab_gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
enum { LAB_NS = 10 };   // stamps per block; a record: 4 words (block, grid size, SM, N) + the timer and clock stamps
// the kernel's stamps: thread 0 notes both clocks
#define LAB_STAMPS unsigned long long lab_pg[LAB_NS], lab_pc[LAB_NS];
#define LAB_STAMP(i) do { if (threadIdx.x == 0) { lab_pg[i] = lab_gtimer(); lab_pc[i] = clock64(); } } while (0)
// a device function that stamps for its kernel: its parameters, and the kernel's arguments to it
#define LAB_STAMP_PARAMS , unsigned long long *lab_pg, unsigned long long *lab_pc
#define LAB_STAMP_ARGS , lab_pg, lab_pc
// thread 0 appends the block's record to buf (count n, capacity cap)
#define LAB_WRITE(buf, n, cap, nval)                                                                              \
    do {                                                                                                          \
        if (threadIdx.x == 0 && buf) {                                                                            \
            unsigned i_ = atomicAdd(&n, 1);                                                                       \
            if (i_ < cap) {                                                                                       \
                unsigned long long *r_ = buf + (size_t)i_ * (4 + 2 * LAB_NS);                                     \
                unsigned sm_;                                                                                     \
                asm volatile("mov.u32 %0, %%smid;" : "=r"(sm_));                                                  \
                r_[0] = blockIdx.x + 1000 * blockIdx.y; r_[1] = gridDim.x * gridDim.y; r_[2] = sm_; r_[3] = nval; \
                for (int j_ = 0; j_ < LAB_NS; j_++) { r_[4 + j_] = lab_pg[j_]; r_[4 + LAB_NS + j_] = lab_pc[j_]; } \
            }                                                                                                     \
        }                                                                                                         \
    } while (0)
#else
#define LAB_STAMPS
#define LAB_STAMP(i) do { } while (0)
#define LAB_STAMP_PARAMS
#define LAB_STAMP_ARGS
#define LAB_WRITE(buf, n, cap, nval) do { } while (0)
#endif

#ifdef WG_PROF
#define LAB_WG_STAMP(k) do { if (tid == 0) wgv_st[blockIdx.x * gridDim.y + blockIdx.y][k] = (unsigned long long)clock64(); } while (0)
#define LAB_WG_END do { __syncthreads(); LAB_WG_STAMP(7); } while (0)   // every thread's stores issued
#else
#define LAB_WG_STAMP(k) do { } while (0)
#define LAB_WG_END do { } while (0)
#endif

#ifdef FW_PROF
#define LAB_FW_STAMP(i, k) do { if (t == 0 && blockIdx.x < 128 && (i) < 8) fw_prof[blockIdx.x][wg][i][k] = clock64(); } while (0)
#else
#define LAB_FW_STAMP(i, k) do { } while (0)
#endif
