// phase_lab.cu — kernel lab for issue 41: what one dependent phase of a denoise megakernel costs when its outputs are
// summed by their consumers' producers (split-K folded into the phase) instead of owned by one block each.
// Not used by libpi0.
// RESULT (session 39, H100 and H200, bench/RESULTS.md "the measured floor", bench/data/2026-11-26-s39-phase-lab.txt):
// an owner-write phase costs 2.2 us alone and 3.3-3.7 / 3.7-4.2 / 4.4 us beside a weight stream of 2 / 2.5 / 3 TB/s
// with a shallow queue (16-32 KB in flight per SM); a queue 96 KB deep reads 4% more and makes it 16.0-17.9 us. A
// phase ending in every block's L2 sum costs 5.9 us alone, 8.2 beside 2 TB/s; summing within clusters of 8 first,
// 4.9 alone and 8.0 beside 2.5 TB/s. bench/mk_floor.py turns these into the bound on a layer-step: >= 13.6-14.1 us
// for the most favourable design with bf16 weights, against the issue's 13.
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
//   - each of modes 0-2 with and without the X load, which separates the load from the signal;
//   - modes 0 and 1 again (cooperative launch) while a ninth warp per block streams "weights" from a 2 GiB buffer
//     into shared memory (bulk copies, evict-first, pages of 8-32 KB, 1-3 in flight), flat out or paced by the SM
//     clock to a rate, so that each phase is measured beside the HBM traffic that a megakernel must overlap it with;
//   - a last section (alone: phase_lab cluster), clusters of 8 with that stream warp, which then joins every cluster
//     barrier (it arrives early and waits only once the compute warps have passed, never holding them up): modes
//     0-2 with and without the stream.
// Checked: the final X of modes 0-2 and 5 against its exact value (small integers, so every order of summation agrees).
// Every wait on a counter gives up after 1 s and counts a timeout, so a plan that is not co-resident fails instead
// of hanging. Build: make lab (build/lab/phase_lab); run: build/lab/phase_lab.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>

#include "mk_common.cuh"

enum {
    PR = 11,            // suffix rows
    PC = 1024,          // expert width
    PN = PR * PC,       // one X: 11264 floats (45 KB)
    PT = 256,           // threads per block
    PNB = 4,            // X ring: read r, add r + 1, zero r + 2 (read at r - 2: every block has signalled since)
    PSMEM = 200 << 10,  // dynamic shared memory per block, about what the megakernel's page ring takes
    SPAGE = 32 << 10,   // the background stream's pages (a weight page's size)
    SNP = 3,            // ... in a ring after the partials: 90 + 96 KB
    SOFF = 2 * PN * 4,  // byte offset of the ring
};
static_assert(SOFF + SNP * SPAGE + 64 <= PSMEM, "the stream's ring fits");
static_assert(PN % (16 * 4) == 0, "cluster slices of whole float4s");

struct pl_args {
    float *x;          // [PNB][PN]
    unsigned *cnt;     // [rounds + 1], zero before a launch: blocks done with round r - 1 in cnt[r]
    unsigned *err;     // timed-out waits
    float *sink;       // modes 3-4: what the rounds computed (kept live)
    const char *big;   // the background stream's source: region bytes per block, read cyclically
    unsigned long long *bytes;   // what the stream copied
    size_t region;
    long long pace;    // stream: -1 off, 0 flat out, else SM clock cycles per page per block
    int spage, snp;    // stream: bytes per page (<= SPAGE), pages in flight (<= SNP)
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

// The compute warps' cluster barrier; their thread 0 then counts it for the stream warp (clusters with a stream).
__device__ __forceinline__ void csync(volatile int *passed, int tid) {
    cluster_sync_all();
    if (tid == 0) *passed = *passed + 1;
}
// A cluster barrier's two halves for one thread, not warp-aligned (the stream warp's).
__device__ __forceinline__ void cl_arrive() { asm volatile("barrier.cluster.arrive;" ::: "memory"); }
__device__ __forceinline__ void cl_wait() { asm volatile("barrier.cluster.wait;" ::: "memory"); }
// Whether an mbarrier phase of this parity has completed, without waiting.
__device__ __forceinline__ bool mbar_test(uint64_t *bar, unsigned parity) {
    unsigned ok;
    asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(ok) : "r"(smem_u32(bar)), "r"(parity) : "memory");
    return ok != 0;
}

// Block b's partial of element e in round r: a small integer, so that sums are exact in any order.
__host__ __device__ inline float pl_part(int b, int e, int r) { return (float)((b * 7 + e + r) % 5); }

template <int CS>   // blocks per cluster (1: no clusters)
__global__ void __launch_bounds__(PT + 32, 1) pl_kernel(const __grid_constant__ pl_args a) {
    extern __shared__ __align__(16) float sp[];   // [2][PN]: this block's partials, alternating rounds
    const int tid = threadIdx.x, G = gridDim.x, b = blockIdx.x;
    const unsigned rank = CS > 1 ? cluster_rank() : 0;
    // with PT + 32 threads (cooperative launches, and the cluster section with the stream) a ninth warp streams weights
    // in the background (bulk copies of spage bytes from memory that L2 cannot hold into a ring of snp pages,
    // evict-first, as the megakernel's loader), so that the phases are measured beside the traffic they would share
    // the memory system with
    unsigned char *ring = (unsigned char *)sp + SOFF;
    uint64_t *full = (uint64_t *)(ring + SNP * SPAGE);
    volatile int *done = (volatile int *)(full + SNP);
    volatile int *passed = done + 1;   // cluster barriers the compute warps have passed (their thread 0 counts)
    if (tid == 0) {
        for (int p = 0; p < SNP; p++) mbar_init(&full[p], 1);
        *done = 0;
        *passed = 0;
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (tid >= PT) {
        // The stream never blocks: a page is issued when its slot is free and the pace allows, else the warp polls on.
        // In cluster launches it must also take part in every cluster barrier of its block, so it arrives early for
        // the next one and waits only once the compute warps have passed it (it never holds them up).
        const int lane = tid - PT, per = CS == 1 ? 0 : (a.mode >= 2 && a.mode <= 4) ? 1 : a.mode == 5 ? 2 : 0;
        const int nb = CS == 1 ? 0 : a.rounds * per + 1;   // + the last one, after the rounds
        const unsigned char *src = (const unsigned char *)a.big + a.region * b;
        const unsigned long long npg = a.region / a.spage, np = (unsigned)a.snp;
        const long long t0 = clock64();
        unsigned long long k = 0;
        int kb = 0;
        if (nb) cl_arrive();
        for (;;) {
            const int d = __shfl_sync(0xffffffffu, lane == 0 ? *done : 0, 0);
            if (!d && lane == 0 && a.pace >= 0) {
                const int slot = (int)(k % np);
                if ((k < np || mbar_test(&full[slot], (unsigned)((k / np) - 1) & 1)) &&
                    (a.pace == 0 || clock64() - t0 >= (long long)k * a.pace)) {
                    mbar_expect_tx(&full[slot], (unsigned)a.spage);
                    bulk_copy_stream(ring + slot * SPAGE, src + (k % npg) * a.spage, (unsigned)a.spage, &full[slot]);
                    k++;
                }
            }
            const int ps = __shfl_sync(0xffffffffu, lane == 0 ? *passed : 0, 0);
            for (; kb < nb && ps > kb; kb++) {
                cl_wait();
                if (kb + 1 < nb) cl_arrive();
            }
            if (d) break;
        }
        if (lane == 0 && a.pace >= 0) {
            for (unsigned long long j = k > np ? k - np : 0; j < k; j++) mbar_wait(&full[j % np], (unsigned)(j / np) & 1);
            atomicAdd(a.bytes, k * (unsigned long long)a.spage);
        }
        for (; kb < nb; kb++) {   // the compute warps' last barrier comes after they set done
            cl_wait();
            if (kb + 1 < nb) cl_arrive();
        }
        return;
    }
    float dep = 0, keep = 0;
    for (int r = 0; r < a.rounds; r++) {
        const float *xin = a.x + (size_t)(r % PNB) * PN;
        float *xout = a.x + (size_t)((r + 1) % PNB) * PN;
        const bool global = a.mode <= 2 || a.mode == 5;
        if (global) {
            if (r > 0 && tid == 0) lab_wait_count(a.cnt + r, (unsigned)(a.mode == 5 ? G / CS : G), a.err);
            cbar();
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
            csync(passed, tid);   // (a peer still reading the other half reads last round's: it passed this barrier)
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
            csync(passed, tid);
            keep += 1;
        }
        if (global) {
            cbar();   // the block's stores and reductions, then one release: cumulative over them
            if (a.mode == 5) csync(passed, tid);   // ... over the whole cluster's, for its first block's signal
            if (tid == 0 && (a.mode != 5 || rank == 0)) red_release_add(a.cnt + r + 1, 1u);
        }
    }
    cbar();
    if (tid == 0) *done = 1;   // the stream stops and drains
    if (CS > 1) csync(passed, tid);   // no block leaves while a peer may still read its shared memory
    if ((a.mode == 3 || a.mode == 4) && keep == -1.0f) a.sink[b * PT + tid] = keep + dep;   // never true; keeps the work live
    if (tid == 0 && dep == 1234567.0f) a.sink[b] = dep;
}

int main(int argc, char **argv) {
    const bool only_cluster_stream = argc > 1 && !strcmp(argv[1], "cluster");   // the last section alone
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
    const int RMAX = 200, RMIN = 40, RLONG = 5 * RMAX;
    CK(cudaMalloc(&a.x, (size_t)PNB * PN * 4));
    CK(cudaMalloc(&a.cnt, (RLONG + 1) * 4));
    CK(cudaMalloc(&a.err, 4));
    CK(cudaMalloc(&a.sink, (size_t)sms * PT * 4));
    CK(cudaMemset(a.err, 0, 4));
    const size_t BIG = (size_t)2 << 30;   // the stream's source: 40x L2
    CK(cudaMalloc((void **)&a.big, BIG));
    CK(cudaMemset((void *)a.big, 1, BIG));
    CK(cudaMalloc(&a.bytes, 8));
    a.region = BIG / sms / SPAGE * SPAGE;
    a.pace = -1;
    a.spage = SPAGE;
    a.snp = SNP;
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
    // sections: cooperative, clusters of 8, of 16, and clusters of 8 with the stream warp (which joins every cluster
    // barrier; its plain rows, no stream, show what that costs against the second section)
    for (int sec = only_cluster_stream ? 3 : 0; sec < 4; sec++) {
        const int cs = sec == 0 ? 1 : sec == 2 ? 16 : 8;
        const bool cstream = sec == 3;
        const int G = cs == 1 ? sms : fit[cs] * cs;
        if (G == 0) { printf("== clusters of %d: none resident, skipped\n", cs); continue; }
        printf("== %s: %d blocks\n", cs == 1 ? "no clusters (cooperative launch)" : cstream ? "clusters of 8, with the stream warp"
               : cs == 8 ? "clusters of 8" : "clusters of 16", G);
        cudaLaunchAttribute at[1];
        cudaLaunchConfig_t c = {};
        lab_persistent_attr(at[0], cs);
        c.gridDim = dim3(G);
        c.blockDim = dim3(cs == 1 || cstream ? PT + 32 : PT);
        c.dynamicSmemBytes = PSMEM;
        c.stream = st;
        c.attrs = at;
        c.numAttrs = 1;
        long long pace = -1;
        auto launch = [&](int mode, int load, int rounds) {
            CK(cudaMemsetAsync(a.x, 0, (size_t)PNB * PN * 4, st));
            CK(cudaMemsetAsync(a.cnt, 0, (RLONG + 1) * 4, st));
            pl_args x = a;
            x.pace = pace;
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
        if (cs != 1 && !cstream) continue;
        // the same phases while a ninth warp per block streams weights from HBM: flat out, then paced to a rate
        int khz = 0;
        CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
        printf("== the same, with a background weight stream (bulk copies; page size x pages in flight per SM on each line)\n");
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        struct scfg { double tbs; int spage, snp, modes; };   // modes: bit 0 mode 0 with X, 1 without, 2 mode 1, 3 mode 2
        const scfg ccfgs[] = {{1.0, 16 << 10, 2, 13}, {1.5, 16 << 10, 2, 13}, {2.0, 16 << 10, 2, 13}, {2.5, 16 << 10, 2, 13},
                              {0.0, 32 << 10, 1, 13}, {0.0, SPAGE, SNP, 9}};
        const scfg cfgs[] = {{0.0, SPAGE, SNP, 7}, {2.5, SPAGE, SNP, 7}, {2.0, SPAGE, SNP, 7}, {1.5, SPAGE, SNP, 7},
                             {1.0, SPAGE, SNP, 7},
                             // bytes in flight per SM, flat out: does a shallower queue keep the rate and the latency?
                             {0.0, 8 << 10, 1, 1}, {0.0, 16 << 10, 1, 1}, {0.0, 32 << 10, 1, 1}, {0.0, 16 << 10, 2, 1},
                             {0.0, 32 << 10, 2, 1}, {0.0, 24 << 10, 3, 1},
                             // paced with a shallow queue (3.0 and 3.5 TB/s: for the H200's HBM3e)
                             {2.5, 16 << 10, 2, 5}, {2.0, 16 << 10, 2, 5}, {2.5, 32 << 10, 1, 1}, {2.0, 32 << 10, 1, 1},
                             {1.5, 16 << 10, 2, 5}, {1.0, 16 << 10, 2, 5}, {3.0, 16 << 10, 2, 5}, {3.5, 16 << 10, 2, 5},
                             {3.0, SPAGE, SNP, 5}, {3.5, SPAGE, SNP, 5}};
        for (const scfg &sc : cstream ? std::vector<scfg>(ccfgs, ccfgs + 6) : std::vector<scfg>(cfgs, cfgs + sizeof cfgs / sizeof *cfgs)) {
            const double tbs = sc.tbs;
            a.spage = sc.spage;
            a.snp = sc.snp;
            // cycles per page per block for the whole grid to read tbs TB/s
            pace = tbs == 0 ? 0 : (long long)((double)G * sc.spage / (tbs * 1e12) * khz * 1e3);
            for (int ml = 0; ml < 4; ml++) {
                if (!(sc.modes >> ml & 1)) continue;
                const int mode = ml >= 2 ? ml - 1 : 0, load = ml != 1;
                CK(cudaMemsetAsync(a.err, 0, 4, st));
                CK(cudaMemsetAsync(a.bytes, 0, 8, st));
                CK(cudaEventRecord(e0, st));
                launch(mode, load, RLONG);   // long enough to read the stream's rate
                CK(cudaEventRecord(e1, st));
                CK(cudaStreamSynchronize(st));
                float ms = 0;
                unsigned long long by = 0;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                CK(cudaMemcpy(&by, a.bytes, 8, cudaMemcpyDeviceToHost));
                int bad = 0;   // the long run's final X, exactly
                {
                    const int R = RLONG;
                    std::vector<float> h(PN);
                    CK(cudaMemcpy(h.data(), a.x + (size_t)(R % PNB) * PN, PN * 4, cudaMemcpyDeviceToHost));
                    for (int e = 0; e < PN; e++) {
                        float want = 0;
                        if (mode == 0) want = (float)((e + R - 1) % 5);
                        else for (int bb = 0; bb < G; bb++) want += pl_part(bb, e, R - 1);
                        bad += h[e] != want;
                    }
                }
                if (bad) ok = false;
                int capturing = 0;
                const float t1 = lab_graph_median_ms(st, &capturing, [&] { launch(mode, load, RMAX); });
                const float t0 = lab_graph_median_ms(st, &capturing, [&] { launch(mode, load, RMIN); });
                unsigned err = 0;
                CK(cudaMemcpy(&err, a.err, 4, cudaMemcpyDeviceToHost));
                if (err) ok = false;
                printf("  stream %-9s %2d KB x %d  mode %d %-34s %-11s %6.2f us per round, stream read %6.0f GB/s%s\n",
                       tbs == 0 ? "flat out" : (std::to_string(tbs).substr(0, 3) + " TB/s").c_str(), sc.spage >> 10, sc.snp,
                       mode, mname[mode],
                       load ? "X loaded" : "no X load", (t1 - t0) * 1e3f / (RMAX - RMIN), by / (ms * 1e-3) / 1e9,
                       err ? "  TIMEOUT (FAIL)" : bad ? "  WRONG (FAIL)" : "  (exact)");
            }
        }
        pace = -1;
        a.spage = SPAGE;
        a.snp = SNP;
    }
    CK(cudaGetLastError());
    printf("%s\n", ok ? "all checks passed" : "FAILED");
    return ok ? 0 : 1;
}
