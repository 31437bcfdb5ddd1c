// phase_lab.cu — kernel lab for issue 41: what one dependent phase of a denoise megakernel costs when its outputs are
// summed by their consumers' producers (split-K folded into the phase) instead of owned by one block each.
// Not used by libpi0.
// RESULT: not yet run (written in session 38, which had no device time); the numbers go to bench/RESULTS.md.
//
// Why: the megakernel lab (megakernel.cu) measured ~4.1 us of communication per dependent phase, and a layer of the
// expert has five phases (q|k|v, attention, o, gate|up, down), so 13 us per layer-step needs fewer phases. Folding
// the split-K products into their producers gives two phases per layer: (norm, q|k|v, attention, o) per head and
// (norm, gate|up, gelu, down) per slice of the MLP, each ending in a sum over its producers of 11 x 1024 fp32
// partial rows. Whether that wins depends on four numbers that this lab measures, each per round of R rounds in one
// persistent launch (the slope between R = 40 and R = 200, so launch costs drop out):
//   - how many clusters of 8 and 16 blocks can be resident with a megakernel's shared memory (one block per SM);
//   - mode 0, owner writes: each block writes its own columns of the next X, signals a counter, every block waits
//     for all, loads all of X (the norm's input) — today's phase, the calibration against megakernel.cu's mode 3;
//   - mode 1, all-reduce by every block: each block adds its whole 11 x 1024 partial into the next X with vector
//     reductions in L2 (G-way contention per element), then as mode 0;
//   - mode 2, cluster first: the blocks of a cluster sum their partials through distributed shared memory (one
//     cluster barrier), each adds its 1/CS of the sum into L2 (G / CS-way), then as mode 0;
//   - mode 3, the cluster part alone (partials, barrier, DSMEM sum; no global memory), and mode 4 a bare cluster
//     barrier;
//   - mode 5, as mode 2 with one signal per cluster (a second cluster barrier, then the cluster's first block), so
//     the counter takes G / CS reductions instead of G;
//   - each of modes 0-2 with and without the X load, which separates the load from the signal.
// Checked: the final X of modes 0-2 and 5 against its exact value (small integers, so every order of summation agrees).
// Every wait on a counter gives up after 1 s and counts a timeout, so a plan that is not co-resident fails instead
// of hanging. Build: make lab (build/lab/phase_lab); run: build/lab/phase_lab.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "mk_common.cuh"

enum {
    PR = 11,            // suffix rows
    PC = 1024,          // expert width
    PN = PR * PC,       // one X: 11264 floats (45 KB)
    PT = 256,           // threads per block
    PNB = 4,            // X ring: read r, add r + 1, zero r + 2 (read at r - 2: every block has signalled since)
    PSMEM = 200 << 10,  // dynamic shared memory per block, about what the megakernel's page ring takes
};
static_assert(PN % (16 * 4) == 0, "cluster slices of whole float4s");

struct pl_args {
    float *x;          // [PNB][PN]
    unsigned *cnt;     // [rounds + 1], zero before a launch: blocks done with round r - 1 in cnt[r]
    unsigned *err;     // timed-out waits
    float *sink;       // modes 3-4: what the rounds computed (kept live)
    int rounds, mode, load;
};

__device__ __forceinline__ float4 pl_ld_dsmem4(const float *p, unsigned rank) {
    unsigned ra;
    float4 v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(smem_u32(p)), "r"(rank));
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(ra)
                 : "memory");
    return v;
}

// Block b's partial of element e in round r: a small integer, so that sums are exact in any order.
__host__ __device__ inline float pl_part(int b, int e, int r) { return (float)((b * 7 + e + r) % 5); }

template <int CS>   // blocks per cluster (1: no clusters)
__global__ void __launch_bounds__(PT, 1) pl_kernel(const __grid_constant__ pl_args a) {
    extern __shared__ __align__(16) float sp[];   // [2][PN]: this block's partials, alternating rounds
    const int tid = threadIdx.x, G = gridDim.x, b = blockIdx.x;
    const unsigned rank = CS > 1 ? cluster_rank() : 0;
    float dep = 0, keep = 0;
    for (int r = 0; r < a.rounds; r++) {
        const float *xin = a.x + (size_t)(r % PNB) * PN;
        float *xout = a.x + (size_t)((r + 1) % PNB) * PN;
        const bool global = a.mode <= 2 || a.mode == 5;
        if (global) {
            if (r > 0 && tid == 0) lab_wait_count(a.cnt + r, (unsigned)(a.mode == 5 ? G / CS : G), a.err);
            __syncthreads();
            if (a.load) {   // the next phase's start: every block reads all of X (its norm)
                float s = 0;
                for (int e = tid * 4; e < PN; e += PT * 4) {
                    const float4 v = __ldcg((const float4 *)(xin + e));
                    s += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
                }
                dep += s;
            }
            if (a.mode >= 1) {   // zero this block's share of the buffer that round r + 1 adds into
                float *xz = a.x + (size_t)((r + 2) % PNB) * PN;
                const int e0 = (int)((long long)PN * b / G), e1 = (int)((long long)PN * (b + 1) / G);
                for (int e = e0 + tid; e < e1; e += PT) __stcg(xz + e, 0.0f);
            }
        }
        // a data dependence on the X load that never changes a value
        const float bump = dep == 1234567.0f ? 1.0f : 0.0f;
        if (a.mode == 0) {   // owner writes: this block's columns of every row
            const int c0 = PC * b / G, c1 = PC * (b + 1) / G, w = c1 - c0;
            for (int i = tid; i < PR * w; i += PT) {
                const int e = (i / w) * PC + c0 + i % w;
                __stcg(xout + e, (float)((e + r) % 5) + bump);
            }
        } else if (a.mode == 1) {   // every block adds its whole partial
            for (int e = tid * 4; e < PN; e += PT * 4)
                red_v4(xout + e, make_float4(pl_part(b, e, r) + bump, pl_part(b, e + 1, r), pl_part(b, e + 2, r),
                                                pl_part(b, e + 3, r)));
        } else if (a.mode != 4) {   // the cluster sums first, through distributed shared memory
            float *mine = sp + (r & 1) * PN;
            for (int e = tid * 4; e < PN; e += PT * 4)
                *(float4 *)(mine + e) = make_float4(pl_part(b, e, r) + bump, pl_part(b, e + 1, r), pl_part(b, e + 2, r),
                                                    pl_part(b, e + 3, r));
            cluster_sync_all();   // (a peer still reading the other half reads last round's: it passed this barrier)
            const int s0 = PN / CS * (int)rank, s1 = s0 + PN / CS;
            for (int e = s0 + tid * 4; e < s1; e += PT * 4) {
                float4 s = make_float4(0, 0, 0, 0);
                for (int k = 0; k < CS; k++) {   // rank order: the same sum on every run
                    const float4 v = pl_ld_dsmem4(mine + e, (unsigned)k);
                    s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
                }
                if (a.mode != 3) red_v4(xout + e, s);
                else keep += s.x + s.y + s.z + s.w;
            }
        } else {   // a bare cluster barrier
            cluster_sync_all();
            keep += 1;
        }
        if (global) {
            __syncthreads();   // the block's stores and reductions, then one release: cumulative over them
            if (a.mode == 5) cluster_sync_all();   // ... over the whole cluster's, for its first block's signal
            if (tid == 0 && (a.mode != 5 || rank == 0)) red_release_add(a.cnt + r + 1, 1u);
        }
    }
    if (CS > 1) cluster_sync_all();   // no block leaves while a peer may still read its shared memory
    if ((a.mode == 3 || a.mode == 4) && keep == -1.0f) a.sink[b * PT + tid] = keep + dep;   // never true; keeps the work live
    if (tid == 0 && dep == 1234567.0f) a.sink[b] = dep;
}

int main() {
    int sms = 0, dev = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("phase lab: %s, %d SMs; X = %d x %d fp32 (%d KB); %d threads and %d KB shared memory per block\n", prop.name,
           sms, PR, PC, PN * 4 / 1024, PT, PSMEM >> 10);
    auto *k1 = pl_kernel<1>;
    auto *k8 = pl_kernel<8>;
    auto *k16 = pl_kernel<16>;
    CK(cudaFuncSetAttribute(k1, cudaFuncAttributeMaxDynamicSharedMemorySize, PSMEM));
    CK(cudaFuncSetAttribute(k8, cudaFuncAttributeMaxDynamicSharedMemorySize, PSMEM));
    CK(cudaFuncSetAttribute(k16, cudaFuncAttributeMaxDynamicSharedMemorySize, PSMEM));
    CK(cudaFuncSetAttribute(k16, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));

    pl_args a = {};
    const int RMAX = 200, RMIN = 40;
    CK(cudaMalloc(&a.x, (size_t)PNB * PN * 4));
    CK(cudaMalloc(&a.cnt, (RMAX + 1) * 4));
    CK(cudaMalloc(&a.err, 4));
    CK(cudaMalloc(&a.sink, (size_t)sms * PT * 4));
    CK(cudaMemset(a.err, 0, 4));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    // how many clusters fit, one block per SM
    int fit[17] = {0};
    for (int cs : {2, 4, 8, 16}) {
        cudaLaunchConfig_t c = {};
        cudaLaunchAttribute at[1];
        lab_persistent_attr(at[0], cs);
        c.gridDim = dim3(cs * 8);
        c.blockDim = dim3(PT);
        c.dynamicSmemBytes = PSMEM;
        c.attrs = at;
        c.numAttrs = 1;
        cudaError_t e = cs <= 8 ? cudaOccupancyMaxActiveClusters(&fit[cs], (void *)k8, &c)
                                : cudaOccupancyMaxActiveClusters(&fit[cs], (void *)k16, &c);
        if (e != cudaSuccess) { printf("clusters of %d: %s\n", cs, cudaGetErrorString(e)); fit[cs] = 0; cudaGetLastError(); }
        printf("clusters of %2d blocks: %2d resident (%3d of %d SMs)\n", cs, fit[cs], fit[cs] * cs, sms);
    }

    const char *mname[6] = {"owner writes, counter", "all-reduce: every block adds all", "cluster sum, then adds",
                            "cluster sum alone (no global)", "cluster barrier alone", "cluster sum, adds, 1 signal"};
    bool ok = true;
    for (int cs : {1, 8, 16}) {
        const int G = cs == 1 ? sms : fit[cs] * cs;
        if (G == 0) { printf("== clusters of %d: none resident, skipped\n", cs); continue; }
        printf("== %s: %d blocks\n", cs == 1 ? "no clusters (cooperative launch)" : cs == 8 ? "clusters of 8" : "clusters of 16", G);
        cudaLaunchAttribute at[1];
        cudaLaunchConfig_t c = {};
        lab_persistent_attr(at[0], cs);
        c.gridDim = dim3(G);
        c.blockDim = dim3(PT);
        c.dynamicSmemBytes = PSMEM;
        c.stream = st;
        c.attrs = at;
        c.numAttrs = 1;
        auto launch = [&](int mode, int load, int rounds) {
            CK(cudaMemsetAsync(a.x, 0, (size_t)PNB * PN * 4, st));
            CK(cudaMemsetAsync(a.cnt, 0, (RMAX + 1) * 4, st));
            pl_args x = a;
            x.mode = mode;
            x.load = load;
            x.rounds = rounds;
            if (cs == 1) CK(cudaLaunchKernelEx(&c, k1, x));
            else if (cs == 8) CK(cudaLaunchKernelEx(&c, k8, x));
            else CK(cudaLaunchKernelEx(&c, k16, x));
        };
        for (int mode = 0; mode < 6; mode++) {
            if (cs == 1 && mode >= 2) break;
            const bool global = mode <= 2 || mode == 5;
            for (int load = 1; load >= 0; load--) {
                if (!global && load == 0) break;
                // correctness first: the final X of a short run against its exact value
                CK(cudaMemsetAsync(a.err, 0, 4, st));
                const int R = 7;
                launch(mode, load, R);
                CK(cudaStreamSynchronize(st));
                unsigned err = 0;
                CK(cudaMemcpy(&err, a.err, 4, cudaMemcpyDeviceToHost));
                const char *verdict = err ? "TIMEOUT (FAIL)" : "";
                if (!err && global) {
                    std::vector<float> h(PN);
                    CK(cudaMemcpy(h.data(), a.x + (size_t)(R % PNB) * PN, PN * 4, cudaMemcpyDeviceToHost));
                    int bad = 0;
                    for (int e = 0; e < PN; e++) {
                        float want = 0;
                        if (mode == 0) want = (float)((e + R - 1) % 5);
                        else for (int bb = 0; bb < G; bb++) want += pl_part(bb, e, R - 1);
                        bad += h[e] != want;
                    }
                    verdict = bad ? "WRONG (FAIL)" : "exact";
                }
                if (verdict[0] != 'e' && verdict[0]) {
                    ok = false;
                    printf("  mode %d %-34s %-11s %s, not timed\n", mode, mname[mode], load ? "X loaded" : "no X load", verdict);
                    continue;
                }
                int capturing = 0;
                const float t1 = lab_graph_median_ms(st, &capturing, [&] { launch(mode, load, RMAX); });
                const float t0 = lab_graph_median_ms(st, &capturing, [&] { launch(mode, load, RMIN); });
                CK(cudaMemcpy(&err, a.err, 4, cudaMemcpyDeviceToHost));
                if (err) { verdict = "TIMEOUT while timed (FAIL)"; ok = false; }
                printf("  mode %d %-34s %-11s %6.2f us per round  (%s)\n", mode, mname[mode],
                       global ? (load ? "X loaded" : "no X load") : "", (t1 - t0) * 1e3f / (RMAX - RMIN),
                       verdict[0] ? verdict : "not checked");
            }
        }
    }
    CK(cudaGetLastError());
    printf("%s\n", ok ? "all checks passed" : "FAILED");
    return ok ? 0 : 1;
}
