// megakernel.cu — kernel lab for issue 41: the first piece of a denoise megakernel, a dataflow interpreter over
// the action expert's four weight products (B = 1, M = 11 suffix rows, 18 layers), in which the weights never wait
// for the activations. Not used by libpi0.
// RESULT (H100 and H200, bench/RESULTS.md L140-L144, bench/data/2026-11-26-s37-megakernel-lab.txt): correct (CPU
// model of the same rounding, 5.9e-4) and deterministic; 23.5 us per layer for the four products against 23.4 for
// the production chain without attention in its own lab (H100). The weights alone stream at 2.84 TB/s (12.2 us per
// layer), so the loader does what it should; the latency chain alone (no weight traffic) takes 16.8 us, and without
// the MMAs too 16.2 (H200): per dependent phase an X load from L2 (1.3 us, down's 90 KB 2.5), the reduction and
// stores (0.4-0.8 us) and the counter's way to the waiting blocks (~1.3 us; ~2.4 with the weight stream running).
// With attention still to come, the issue's 13 us per layer needs fewer dependent phases, not faster ones.
// The flagged variant (LL = true: activations carry the launch's epoch, consumers poll the data, no counters) was
// slower: 23.0 -> 27.5 us per layer (L143); it stays selectable here as the measured alternative.
// Session 39 (L147-L148): capping the loader's pages in flight (argument 3) changes nothing (25.07-25.22 us); pacing
// it (argument 4, ns a page, an absolute schedule) never held it back below 3000 ns, since the kernel uses a page
// every ~3.1 us. The 6.4 us that the stream costs the phases is their latency beside the bytes streaming into the
// SMs (phase_lab), and bench/mk_floor.py bounds what any version of this design can reach.
//
// Design (HazyResearch/Megakernels' low-latency idea, our shapes):
//   - one persistent block per SM (cooperative launch), 8 compute warps and 1 loader warp;
//   - the work is a list of instructions per block (build_plan), layer by layer in op order: q|k|v (160 tiles of 16
//     weight rows x 1024), o (128 tiles of 8 rows over all 2048 columns: one page of two K chunks), gate|up (512
//     tiles of 8 gate + 8 up rows), down (128 tiles of 8 rows over all 4096 columns: 2 pages): 1056 pages of 32 KB
//     per layer, 8 per block; a block runs its consecutive instructions of one op as a batch (one wait, one X, one
//     reduction barrier, one signal);
//   - the loader warp walks the block's instructions and copies each page's 16 rows (bulk copies, evict-first in L2)
//     into a ring of NP shared-memory pages, limited only by free pages: it runs ahead across products and layers
//     while the compute warps wait for activations;
//   - dependencies are counters in global memory: o waits for the 128 q tiles, gate|up for the 128 o tiles, down for
//     the 512 gate|up tiles, the next q|k|v for the 128 down tiles; warp 7 signals with a release reduction while
//     thread 0 goes on to the next wait. No grid barrier; every sum in a fixed order;
//   - every activation buffer is per layer (no write-after-read hazard inside a launch); the last block out resets
//     the counters for the next launch.
// Not here (issue 41 was resolved with the measured floor instead: bench/mk_floor.py, session 39): attention (o reads q's first 2048 columns as its input, so the chain
// keeps attention's place in the dependency graph with zero cost), RoPE and the KV-cache writes, π0.5's adaRMS and
// gates, the time / action projections, the ten steps.
// Modes: 0 the chain; 1 the weight stream alone (pages filled and released, no math, no waits); 2 no weight traffic
// (the loader copies nothing, the math reads stale pages: wrong results, the latency chain alone); 3 as 2 without the
// MMAs (the dependency chain's communication: waits, X loads, reductions, stores, signals). With stamps:
// where each op's batches spend their time, and the slowest block's work per op.
// Checked against a CPU model of the same math and rounding (two layers), then timed as one CUDA graph per step.
// Build: make lab (build/lab/megakernel); run: build/lab/megakernel [layers] [pages].
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "../../src/cuda/common.cuh"
#include "../../src/cuda/mma.cuh"
#include "lab.cuh"
#include "mk_common.cuh"

enum {
    MQKV = 2560,          // q | k | v outputs (8 heads x 256 + 256 + 256)
    MQ = 2048,            // o's inputs (8 heads x 256)
    MF = 4096,            // MLP width
    MNP = 5,              // most pages (4 and 6 measured the same with one page per MMA step)
    MMAXL = 18,           // most layers
    MMAXB = 5,            // most tiles in a batch (gate|up: 3-5 per block)
    NQKV = MQKV / 16, NQT = MQ / 16, NO = MD / 8, NGU = MF / 8, NDN = MD / 8,
    MST = 6,              // lab stamps per batch: start, inputs ready, X loaded, MMAs done, reduced, signalled
};
enum { OP_QKV, OP_O, OP_GU, OP_DN };

// An instruction: one tile of an op of a layer; its pages (16 rows of 1024 weight columns each): q|k|v 16 weight
// rows, 1 page; gate|up 8 gate + 8 up rows, 1 page; o 8 rows over its K = 2048 (rows 8..15 of the page: the same
// weight rows' second 1024 columns), 1 page; down 8 rows over K = 4096, 2 pages.
struct mk_ins { short l, op, t, np; };
__host__ __device__ inline int op_pages(int op) { return op == OP_DN ? 2 : 1; }

struct mk_layer {
    const bf16 *wqkv, *wo, *wgu, *wd;   // [2560][1024], [1024][2048], [gate 4096; up 4096][1024], [1024][4096]
    const float *n_attn, *n_mlp;         // RMSNorm factors: 1 + n[i]
};
struct mk_args {
    mk_layer L[MMAXL];
    int depth, M, np, mode;
    int inflight;        // most pages the loader has in flight (np: as many as the ring frees)
    long long pace;      // 0, or SM clock cycles per page: the loader issues page k no earlier than k * pace after its start
    float eps;
    const mk_ins *ins;   // every block's instructions in its order; block b's are ins[io[b] .. io[b + 1])
    const int *io;
    bf16 *xs;            // residual rows per layer and half: [2 depth + 1][16][1024] (xs[0] the input)
    bf16 *qkv;           // [depth][16][2560]
    bf16 *h;             // [depth][16][4096]: gelu(gate) * up
    unsigned *cnt;       // per layer: q tiles done, k|v tiles done, o tiles, gate|up tiles, down tiles; then blocks
                         // done (zero between launches); then the epoch of the last launch (flagged variant)
    // the flagged variant (LL): the same activations as units of 8 bytes, two bf16 and the launch's epoch, written
    // by one 8-byte store each, so a consumer polls the data itself (NCCL's LL protocol): [rows 16][pairs]
    unsigned long long *xs_ll, *qkv_ll, *h_ll;
    long long *prof;     // NULL, or clock64 stamps [block][layer][op][MST]
};
__host__ __device__ inline unsigned *cnt_at(unsigned *c, int l, int k) { return c + l * 5 + k; }
static const size_t MK_CNT = MMAXL * 5 + 1;   // (the epoch after them is kept)
static const size_t MK_EPOCH = MK_CNT;

// Weight row r (0..15) of page p of instruction s: 2 KB (1024 columns).
__device__ __forceinline__ const bf16 *wrow(const mk_args &a, const mk_ins &s, int p, int r) {
    const mk_layer &L = a.L[s.l];
    switch (s.op) {
    case OP_QKV: return L.wqkv + (size_t)(16 * s.t + r) * MD;
    case OP_O: return L.wo + (size_t)(8 * s.t + (r & 7)) * MQ + (r >> 3) * MD;
    case OP_GU: return L.wgu + (size_t)((r < 8 ? 0 : MF) + 8 * s.t + (r & 7)) * MD;
    default: return L.wd + (size_t)(8 * s.t + (r & 7)) * MF + (2 * p + (r >> 3)) * MD;
    }
}

__device__ __forceinline__ void ld_ll2(const unsigned long long *p, unsigned long long &a, unsigned long long &b) {
    asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
__device__ __forceinline__ void st_ll(unsigned long long *p, float lo, float hi, unsigned ep) {
    const unsigned long long v = (unsigned long long)ep << 32 | f2_to_bf2(lo, hi);
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
// One unit (two values), waited for.
__device__ __forceinline__ float2 ld_ll1(const unsigned long long *p, unsigned ep) {
    unsigned long long v;
    for (;;) {
        asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
        if ((unsigned)(v >> 32) == ep) break;
        __nanosleep(32);
    }
    return bf2_to_f2((uint32_t)v);
}
// load_x from flagged rows (ldp units per row), polling until every unit carries this launch's epoch. The warp loops
// together (the quad shuffles of the norm follow).
__device__ __forceinline__ void load_x_ll(uint4 (&xv)[4][2], const unsigned long long *x, int ldp, int M, int g, int kw,
                                          unsigned ep) {
    for (;;) {
        bool ok = true;
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int row = g + 8 * r;
                if (row >= M) { xv[u][r] = make_uint4(0, 0, 0, 0); continue; }
                const unsigned long long *p = x + (size_t)row * ldp + (kw + 32 * u) / 2;
                unsigned long long a0, a1, b0, b1;
                ld_ll2(p, a0, a1);
                ld_ll2(p + 2, b0, b1);
                ok &= (unsigned)(a0 >> 32) == ep && (unsigned)(a1 >> 32) == ep && (unsigned)(b0 >> 32) == ep &&
                      (unsigned)(b1 >> 32) == ep;
                xv[u][r] = make_uint4((uint32_t)a0, (uint32_t)a1, (uint32_t)b0, (uint32_t)b1);
            }
        if (__all_sync(0xffffffffu, ok)) break;
        __nanosleep(32);
    }
}

// LL = false: counters order the work; true: the activations carry the launch's epoch and are polled (no counters).
template <bool LL>
__global__ void __launch_bounds__(MT, 1) mk_kernel(const __grid_constant__ mk_args a) {
    extern __shared__ __align__(128) unsigned char sm[];
    unsigned char *pages = sm;
    float *red2 = (float *)(sm + MNP * MPAGE);          // MMAXB x [8 warps][2 n tiles][4][32]: a batch's partial sums
    float *nss = red2 + MMAXB * MW * 2 * 4 * 32;        // [8 warps][16 rows]
    uint64_t *full = (uint64_t *)(nss + MW * 16), *empty = full + MNP;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, G = gridDim.x, b = blockIdx.x, NP = a.np;
    const mk_ins *ins = a.ins + a.io[b];
    const int nins = a.io[b + 1] - a.io[b];
    if (tid == 0) {
        for (int p = 0; p < NP; p++) { mbar_init(&full[p], 1); mbar_init(&empty[p], MW); }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    // the launch's epoch (flagged variant): one more than the last launch's; the input rows go out flagged with it
    const unsigned ep = LL ? *(volatile unsigned *)(a.cnt + MK_EPOCH) + 1 : 0;
    if (LL && a.mode != 1)
        for (int e = b * MT + tid; e < a.M * (MD / 2); e += G * MT) {
            const float2 v = bf2_to_f2(*(const uint32_t *)(a.xs + 2 * (size_t)e));
            st_ll(a.xs_ll + e, v.x, v.y, ep);
        }
    __syncthreads();
    if (warp == MW) {   // the loader: every instruction's weights, as far ahead as the pages allow
        const long long t0 = clock64();
        if (a.mode < 2)
            for (int i = 0, k = 0; i < nins; i++) {
                const mk_ins s = ins[i];
                for (int p = 0; p < s.np; p++, k++) {
                    const int slot = k % NP;
                    if (k >= NP) mbar_wait(&empty[slot], ((k / NP) - 1) & 1);
                    // a shallow queue: the memory system's latency grows with the bytes in flight (phase_lab)
                    if (k >= a.inflight) mbar_wait(&full[(k - a.inflight) % NP], ((k - a.inflight) / NP) & 1);
                    if (a.pace) while (clock64() - t0 < k * a.pace) {}   // a paced stream: the average rate it needs
                    if (lane == 0) mbar_expect_tx(&full[slot], 16 * MD * 2);
                    __syncwarp();
                    if (lane < 16) bulk_copy_stream(pages + slot * MPAGE + lane * MLDS, wrow(a, s, p, lane), MD * 2, &full[slot]);
                }
            }
    } else {
        const int g = lane >> 2, c = lane & 3, kw = warp * 128 + c * 8, M = a.M;
        mk_ring R = {pages, full, empty, NP, 0, a.mode < 2};
        for (int i = 0; i < nins;) {
            // a batch: this block's consecutive instructions of one op of one layer
            const int l = ins[i].l, op = ins[i].op;
            int n = 1;
            while (i + n < nins && ins[i + n].l == l && ins[i + n].op == op && n < MMAXB) n++;
            long long *st = a.prof && tid == 0 ? a.prof + (((size_t)b * a.depth + l) * 4 + op) * MST : NULL;
            if (st) st[0] = clock64();
            if (a.mode == 1) {   // the weight stream alone
                for (int q = 0; q < n; q++)
                    for (int p = 0; p < ins[i + q].np; p++) { R.get(); R.put(lane); }
                i += n;
                continue;
            }
            unsigned *dep = NULL, need = 0;
            if (op == OP_QKV && l > 0) { dep = cnt_at(a.cnt, l - 1, 4); need = NDN; }
            else if (op == OP_O) { dep = cnt_at(a.cnt, l, 0); need = NQT; }
            else if (op == OP_GU) { dep = cnt_at(a.cnt, l, 2); need = NO; }
            else if (op == OP_DN) { dep = cnt_at(a.cnt, l, 3); need = NGU; }
            // the norm factors are constants: into L1 while the inputs are awaited (their first read in a step
            // missed L2 and sat inside the X load)
            if ((op == OP_QKV || op == OP_GU) && tid < MD / 32)
                asm volatile("prefetch.global.L1 [%0];" ::"l"((op == OP_QKV ? a.L[l].n_attn : a.L[l].n_mlp) + 32 * tid));
            if (!LL && dep && tid == 0) while (ld_acquire_u32(dep) < need) {}
            if (!LL) cbar();
            if (st) st[1] = clock64();
            const mk_layer &L = a.L[l];
            float r = 0;
            if (op == OP_QKV || op == OP_GU) {   // one X for the whole batch: the normed residual
                uint4 xv[4][2];
                if (LL) load_x_ll(xv, a.xs_ll + (size_t)(2 * l + (op == OP_GU)) * 16 * (MD / 2), MD / 2, M, g, kw, ep);
                else load_x(xv, a.xs + (size_t)(2 * l + (op == OP_GU)) * 16 * MD, MD, M, g, kw);
                norm_x(xv, op == OP_QKV ? L.n_attn : L.n_mlp, nss, warp, g, c, kw);
                if (st) { asm volatile("" ::"r"(xv[0][0].x)); st[2] = clock64(); }
                // page by page (each released at once: a tile-interleaved loop over all the batch's pages measured
                // slower, 24.0 -> 25.5 us per layer), then one barrier for all the partial sums
                float acc[MMAXB][2][4] = {};
#pragma unroll
                for (int q = 0; q < MMAXB; q++)
                    if (q < n) {
                        const unsigned char *pg = R.get();
                        if (a.mode != 3) page_mma(acc[q], pg, xv, g, kw);
                        R.put(lane);
                    }
                if (st) st[3] = clock64();
#pragma unroll
                for (int q = 0; q < MMAXB; q++)
                    if (q < n)
#pragma unroll
                        for (int t = 0; t < 2; t++)
#pragma unroll
                            for (int e = 0; e < 4; e++) red2[(((q * MW + warp) * 2 + t) * 4 + e) * 32 + lane] = acc[q][t][e];
                cbar();
                // outputs in pairs of columns (the flagged variant's unit): q|k|v 8 pairs per tile, gate|up 4
                const int per = op == OP_QKV ? 8 : 4;
                for (int e = tid; e < n * 16 * per; e += MCT) {
                    const int q = e / (16 * per), mm = (e / per) & 15, jp = e % per;
                    if (mm >= M) continue;
                    float ss = 0;
#pragma unroll
                    for (int w = 0; w < MW; w++) ss += nss[w * 16 + mm];
                    r = rsqrtf(ss * (1.0f / MD) + a.eps);
                    const float *red = red2 + q * (MW * 2 * 4 * 32);
                    const int t = ins[i + q].t;
                    float v0, v1;
                    size_t o;
                    if (op == OP_QKV) {
                        v0 = frag_sum(red, jp >> 2, mm, (2 * jp) & 7) * r;
                        v1 = frag_sum(red, jp >> 2, mm, (2 * jp + 1) & 7) * r;
                        o = ((size_t)l * 16 + mm) * MQKV + 16 * t + 2 * jp;
                    } else {
                        v0 = gelu_tanh(frag_sum(red, 0, mm, 2 * jp) * r) * (frag_sum(red, 1, mm, 2 * jp) * r);
                        v1 = gelu_tanh(frag_sum(red, 0, mm, 2 * jp + 1) * r) * (frag_sum(red, 1, mm, 2 * jp + 1) * r);
                        o = ((size_t)l * 16 + mm) * MF + 8 * t + 2 * jp;
                    }
                    if (LL) st_ll((op == OP_QKV ? a.qkv_ll : a.h_ll) + o / 2, v0, v1, ep);
                    else *(uint32_t *)((op == OP_QKV ? a.qkv : a.h) + o) = f2_to_bf2(v0, v1);
                }
            } else {   // o / down: 8 weight rows over all of K (1 or 2 pages of two K chunks each), then the residual
                const int dn = op == OP_DN, KC = dn ? MF / MD : MQ / MD, ldx = dn ? MF : MQKV;
                const bf16 *X = dn ? a.h + (size_t)l * 16 * MF : a.qkv + (size_t)l * 16 * MQKV;
                const unsigned long long *Xl = dn ? a.h_ll + (size_t)l * 16 * (MF / 2) : a.qkv_ll + (size_t)l * 16 * (MQKV / 2);
                for (int q = 0; q < n; q++) {
                    // counters: all of X at once (one round trip); flagged: a page's two chunks at a time (all four
                    // polled at once spilled 1.3 KB per thread)
                    uint4 xv[4][4][2];
#pragma unroll
                    for (int kc = 0; kc < 4; kc++)
                        if (!LL && kc < KC) load_x(xv[kc], X + kc * MD, ldx, M, g, kw);
                    const int t = ins[i + q].t, mm = tid >> 2, jp = tid & 3;   // output pair jp of row mm (tid < 64)
                    const size_t o = (size_t)mm * MD + 8 * t + 2 * jp;
                    float2 old = make_float2(0, 0);
                    if (tid < 64 && mm < M) {
                        if (LL) old = ld_ll1(a.xs_ll + (size_t)(2 * l + dn) * 16 * (MD / 2) + o / 2, ep);
                        else old = bf2_to_f2(__ldcg((const unsigned *)(a.xs + (size_t)(2 * l + dn) * 16 * MD + o)));
                    }
                    if (st) { asm volatile("" ::"r"(xv[0][0][0].x)); st[2] = clock64(); }
                    float acc[2][4] = {};
#pragma unroll
                    for (int kc = 0; kc < 4; kc += 2)
                        if (kc < KC) {
                            if (LL) {
                                load_x_ll(xv[0], Xl + kc * (MD / 2), ldx / 2, M, g, kw, ep);
                                load_x_ll(xv[1], Xl + (kc + 1) * (MD / 2), ldx / 2, M, g, kw, ep);
                                const unsigned char *pg = R.get();
                                if (a.mode != 3) page_mma_k2(acc, pg, xv[0], xv[1], g, kw);
                            } else {
                                const unsigned char *pg = R.get();
                                if (a.mode != 3) page_mma_k2(acc, pg, xv[kc], xv[kc + 1], g, kw);
                            }
                            R.put(lane);
                        }
                    if (st) st[3] = clock64();
                    float *red = red2 + (q & 1) * (MW * 2 * 4 * 32);   // alternating: one barrier per tile
#pragma unroll
                    for (int tt = 0; tt < 2; tt++)
#pragma unroll
                        for (int e = 0; e < 4; e++) red[((warp * 2 + tt) * 4 + e) * 32 + lane] = acc[tt][e];
                    cbar();
                    if (tid < 64 && mm < M) {   // the K chunks' sums in order (even chunks in half 0, odd in half 1)
                        const float v0 = old.x + (frag_sum(red, 0, mm, 2 * jp) + frag_sum(red, 1, mm, 2 * jp));
                        const float v1 = old.y + (frag_sum(red, 0, mm, 2 * jp + 1) + frag_sum(red, 1, mm, 2 * jp + 1));
                        if (LL) st_ll(a.xs_ll + (size_t)(2 * l + dn + 1) * 16 * (MD / 2) + o / 2, v0, v1, ep);
                        else *(uint32_t *)(a.xs + (size_t)(2 * l + dn + 1) * 16 * MD + o) = f2_to_bf2(v0, v1);
                    }
                }
            }
            cbar();   // the batch's outputs are written (and red2's half and nss are free again)
            if (st) st[4] = clock64();
            // the counters, by warp 7 while thread 0 goes on to the next batch's wait: a release reduction, cumulative
            // over the block's writes ordered before it by the barrier (a release is fence.acq_rel + the reduction)
            if (!LL && tid == MCT - 32) {
                if (op == OP_QKV) {
                    int nq = 0;
                    for (int q = 0; q < n; q++) nq += ins[i + q].t < NQT;
                    if (nq) red_release_add(cnt_at(a.cnt, l, 0), nq);
                    if (n - nq) red_release_add(cnt_at(a.cnt, l, 1), n - nq);
                } else {
                    red_release_add(cnt_at(a.cnt, l, op == OP_O ? 2 : op == OP_GU ? 3 : 4), n);
                }
            }
            if (st) st[5] = clock64();
            i += n;
        }
    }
    __syncthreads();
    if (tid == 0) __threadfence();   // the block's reductions (warp 7's) are performed before it counts itself out
    if (tid == 0 && atomicAdd(cnt_at(a.cnt, MMAXL, 0), 1u) == (unsigned)G - 1) {   // the last block out resets
        __threadfence();
        for (size_t q = 0; q < MK_CNT; q++) a.cnt[q] = 0;
        if (LL) a.cnt[MK_EPOCH] = ep;
        __threadfence();
    }
}

// Every block's instructions, layer by layer: o tile t and down tile t on block t % G, then the q|k|v and gate|up
// tiles each to the block with the fewest pages so far (8 per block per layer at 132 blocks). Within a block the
// order is the global one (layer, then op), which every dependency follows: no block waits for work queued behind it.
static void build_plan(int depth, int G, std::vector<mk_ins> &ins, std::vector<int> &io) {
    std::vector<std::vector<mk_ins>> per(G);
    for (int l = 0; l < depth; l++) {
        std::vector<std::vector<mk_ins>> lay(4 * G);   // [op][block]
        std::vector<int> load(G);
        for (int t = 0; t < NO; t++) { lay[OP_O * G + t % G].push_back({(short)l, OP_O, (short)t, 1}); load[t % G] += 1; }
        for (int t = 0; t < NDN; t++) { lay[OP_DN * G + t % G].push_back({(short)l, OP_DN, (short)t, 2}); load[t % G] += 2; }
        auto spread = [&](int op, int n) {
            for (int t = 0; t < n; t++) {
                int best = 0;
                for (int b = 1; b < G; b++) if (load[b] < load[best]) best = b;
                lay[op * G + best].push_back({(short)l, (short)op, (short)t, 1});
                load[best]++;
            }
        };
        spread(OP_QKV, NQKV);
        spread(OP_GU, NGU);
        for (int b = 0; b < G; b++)
            for (int op = 0; op < 4; op++) per[b].insert(per[b].end(), lay[op * G + b].begin(), lay[op * G + b].end());
    }
    io.assign(G + 1, 0);
    ins.clear();
    for (int b = 0; b < G; b++) {
        io[b] = (int)ins.size();
        ins.insert(ins.end(), per[b].begin(), per[b].end());
    }
    io[G] = (int)ins.size();
}

// ---- host: the CPU model (same math and rounding points), set-up, timing ----
int main(int argc, char **argv) {
    const int depth = argc > 1 ? atoi(argv[1]) : 18, M = 11;
    int np = argc > 2 ? atoi(argv[2]) : MNP;
    if (depth < 1 || depth > MMAXL || np < 2 || np > MNP) { printf("usage: megakernel [layers 1..%d] [pages 2..%d] [pages in flight]\n", MMAXL, MNP); return 1; }
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const size_t smem = (size_t)MNP * MPAGE + MMAXB * MW * 2 * 4 * 32 * 4 + MW * 16 * 4 + 2 * MNP * 8;
    CK(cudaFuncSetAttribute(mk_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CK(cudaFuncSetAttribute(mk_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    mk_args a = {};
    a.depth = depth; a.M = M; a.np = np; a.eps = 1e-6f;
    a.inflight = argc > 3 ? atoi(argv[3]) : np;
    int khz = 0;
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    const double pace_ns = argc > 4 ? atof(argv[4]) : 0;   // ns per page per block
    a.pace = (long long)(pace_ns * khz * 1e-6);
    if (a.inflight < 1 || a.inflight > np) { printf("usage: megakernel [layers] [pages] [pages in flight 1..pages] [ns per page]\n"); return 1; }
    const size_t wl = (size_t)MQKV * MD + (size_t)MD * MQ + 2 * (size_t)MF * MD + (size_t)MD * MF;   // per layer
    bf16 *w;
    float *nf;
    lab_expert(depth, wl, &w, &nf);
    for (int l = 0; l < depth; l++) {
        bf16 *p = w + wl * l;
        a.L[l].wqkv = p; p += (size_t)MQKV * MD;
        a.L[l].wo = p; p += (size_t)MD * MQ;
        a.L[l].wgu = p; p += 2 * (size_t)MF * MD;
        a.L[l].wd = p;
        a.L[l].n_attn = nf + (size_t)(2 * l) * MD;
        a.L[l].n_mlp = nf + (size_t)(2 * l + 1) * MD;
    }
    CK(cudaMalloc(&a.xs, (size_t)(2 * depth + 1) * 16 * MD * 2));
    CK(cudaMalloc(&a.qkv, (size_t)depth * 16 * MQKV * 2));
    CK(cudaMalloc(&a.h, (size_t)depth * 16 * MF * 2));
    std::vector<mk_ins> ins;
    std::vector<int> io;
    build_plan(depth, sms, ins, io);
    {
        mk_ins *di;
        int *dio;
        CK(cudaMalloc(&di, ins.size() * sizeof(mk_ins)));
        CK(cudaMalloc(&dio, io.size() * sizeof(int)));
        CK(cudaMemcpy(di, ins.data(), ins.size() * sizeof(mk_ins), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dio, io.data(), io.size() * sizeof(int), cudaMemcpyHostToDevice));
        a.ins = di;
        a.io = dio;
        int most = 0, least = 1 << 30;
        for (int b = 0; b < sms; b++) {
            int p = 0;
            for (int i = io[b]; i < io[b + 1]; i++) p += ins[i].np;
            most = p > most ? p : most;
            least = p < least ? p : least;
        }
        int run = 0, longest = 0;
        for (int b = 0; b < sms; b++)
            for (int i = io[b]; i < io[b + 1]; i++) {
                run = i > io[b] && ins[i].l == ins[i - 1].l && ins[i].op == ins[i - 1].op ? run + 1 : 1;
                longest = run > longest ? run : longest;
            }
        printf("plan: %zu instructions, pages per block %d..%d (%d layers), longest run of one op %d\n", ins.size(), least,
               most, depth, longest);
    }
    CK(cudaMalloc(&a.cnt, (MK_CNT + 1) * 4));
    CK(cudaMemset(a.xs, 0, (size_t)(2 * depth + 1) * 16 * MD * 2));
    CK(cudaMemset(a.cnt, 0, (MK_CNT + 1) * 4));
    const size_t nxl = (size_t)(2 * depth + 1) * 16 * (MD / 2), nql = (size_t)depth * 16 * (MQKV / 2), nhl = (size_t)depth * 16 * (MF / 2);
    CK(cudaMalloc(&a.xs_ll, nxl * 8));
    CK(cudaMalloc(&a.qkv_ll, nql * 8));
    CK(cudaMalloc(&a.h_ll, nhl * 8));
    CK(cudaMemset(a.xs_ll, 0, nxl * 8));   // epoch 0: never a launch's
    CK(cudaMemset(a.qkv_ll, 0, nql * 8));
    CK(cudaMemset(a.h_ll, 0, nhl * 8));
    fill_kernel<<<64, 256>>>(a.xs, (size_t)M * MD, 11, 1.0f);
    CK(cudaDeviceSynchronize());
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(sms);
    cfg.blockDim = dim3(MT);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    printf("megakernel lab: %d layers, M = %d, %d blocks x %d threads, %d pages of %d KB (%d in flight, paced at %.0f ns a page), %zu KB shared memory\n",
           depth, M, sms, MT, np, MPAGE / 1024, a.inflight, pace_ns, smem / 1024);
    for (int ll = 0; ll < 2; ll++) {
    printf("== %s\n", ll ? "flagged activations (each 8-byte unit carries the launch's epoch; consumers poll the data)"
                         : "counters (release reductions; consumers poll a counter, then load)");
    auto launch = [&](int mode) {
        mk_args x = a;
        x.mode = mode;
        if (ll) CK(cudaLaunchKernelEx(&cfg, mk_kernel<true>, x));
        else CK(cudaLaunchKernelEx(&cfg, mk_kernel<false>, x));
    };
    // the residual rows after half-layer k, from whichever variant ran
    auto rows = [&](int k) {
        if (!ll) return dl(a.xs + (size_t)k * 16 * MD, (size_t)M * MD);
        std::vector<unsigned long long> u((size_t)M * (MD / 2));
        CK(cudaMemcpy(u.data(), a.xs_ll + (size_t)k * 16 * (MD / 2), u.size() * 8, cudaMemcpyDeviceToHost));
        std::vector<float> v((size_t)M * MD);
        for (size_t i = 0; i < u.size(); i++) {
            uint32_t lo = (uint32_t)(u[i] & 0xffff) << 16, hi = (uint32_t)u[i] & 0xffff0000u;
            memcpy(&v[2 * i], &lo, 4);
            memcpy(&v[2 * i + 1], &hi, 4);
        }
        return v;
    };

    // correctness: the first two layers against the CPU model of the same math and rounding points
    launch(0);
    CK(cudaStreamSynchronize(st));
    launch(0);   // a second launch: the counters were reset by the first
    CK(cudaStreamSynchronize(st));
    {
        const int cl = depth < 2 ? depth : 2;
        std::vector<float> x = dl(a.xs, (size_t)M * MD), wh = dl(w, wl * cl), nh = dlf(nf, (size_t)cl * 2 * MD);
        std::vector<float> xn, r, got;
        std::vector<double> y((size_t)M * 2 * MF);
        double worst = 0;
        for (int l = 0; l < cl; l++) {
            const float *W = wh.data() + wl * l, *Wqkv = W, *Wo = W + (size_t)MQKV * MD, *Wgu = Wo + (size_t)MD * MQ,
                        *Wd = Wgu + 2 * (size_t)MF * MD;
            normed(x.data(), nh.data() + (size_t)2 * l * MD, M, a.eps, xn, r);
            mm(xn.data(), MD, Wqkv, MD, M, MQKV, MD, y.data());
            std::vector<float> q((size_t)M * MQKV);
            for (int m = 0; m < M; m++) for (int n = 0; n < MQKV; n++) q[(size_t)m * MQKV + n] = bf((float)y[(size_t)m * MQKV + n] * r[m]);
            mm(q.data(), MQKV, Wo, MQ, M, MD, MQ, y.data());
            for (int i = 0; i < M * MD; i++) x[i] = bf(x[i] + (float)y[i]);
            normed(x.data(), nh.data() + (size_t)(2 * l + 1) * MD, M, a.eps, xn, r);
            mm(xn.data(), MD, Wgu, MD, M, 2 * MF, MD, y.data());
            std::vector<float> hh((size_t)M * MF);
            for (int m = 0; m < M; m++)
                for (int n = 0; n < MF; n++)
                    hh[(size_t)m * MF + n] = bf(gelu_ref((float)y[(size_t)m * 2 * MF + n] * r[m]) * ((float)y[(size_t)m * 2 * MF + MF + n] * r[m]));
            mm(hh.data(), MF, Wd, MF, M, MD, MF, y.data());
            for (int i = 0; i < M * MD; i++) x[i] = bf(x[i] + (float)y[i]);
            got = rows(2 * l + 2);
            double num = 0, den = 0;
            for (int i = 0; i < M * MD; i++) { num += (got[i] - x[i]) * (double)(got[i] - x[i]); den += (double)x[i] * x[i]; }
            const double e = sqrt(num / den);
            printf("layer %d: residual rows against the CPU model, rel L2 %.2e\n", l, e);
            if (e > worst) worst = e;
            x = got;   // the next layer from the GPU's rows (each layer checked on its own)
        }
        printf("correctness: worst rel L2 %.2e (bound 1e-2) %s\n", worst, worst < 1e-2 ? "OK" : "FAIL");
        if (!(worst < 1e-2)) return 1;
    }
    // determinism: two launches give the same bits
    {
        std::vector<float> x1 = rows(2 * depth);
        launch(0);
        CK(cudaStreamSynchronize(st));
        std::vector<float> x2 = rows(2 * depth);
        printf("determinism: a third launch %s\n", memcmp(x1.data(), x2.data(), x1.size() * 4) ? "DIFFERS (FAIL)" : "gives the same bits");
    }
    const double bytes = (double)wl * 2 * depth;
    const char *names[4] = {"the chain", "weight stream only", "no weight traffic (wrong results)",
                            "no weights, no MMAs (wrong results)"};
    for (int mode = 0; mode < 4; mode++) {
        int cap = 0;
        float ms = lab_graph_median_ms(st, &cap, [&] { launch(mode); });
        printf("%-36s %8.2f us per layer  %7.1f GB/s of weights  (%d layers: %.1f us)\n", names[mode], ms * 1e3 / depth,
               bytes / (ms * 1e-3) / 1e9, depth, ms * 1e3);
    }
    // where a batch's time goes (clock64 at the SM clock; means over blocks and layers 1..depth-1), modes 0, 2 and 3
    for (int mode : {0, 2, 3}) {
        int khz = 0;
        const std::vector<long long> h = lab_stamps((size_t)sms * depth * 4 * MST, &a.prof, st, &khz, [&] { launch(mode); });
        const char *ops[4] = {"q|k|v", "o", "gate|up", "down"};
        printf("batches%s (us at %d MHz): inputs wait, X load (flagged: + its wait), MMAs (+ page waits), reduce + store, (signal) | batches\n",
               mode == 3 ? " without weights or MMAs" : mode ? " without weight traffic" : "", khz / 1000);
        for (int op = 0; op < 4; op++) {
            double d[MST] = {0}, work = 0, wmax = 0;
            int cntb = 0;
            for (int l = 1; l < depth; l++) {
                double lmax = 0;
                for (int b = 0; b < sms; b++) {
                    const long long *r = &h[(((size_t)b * depth + l) * 4 + op) * MST];
                    if (!r[0]) continue;
                    cntb++;
                    for (int k = 1; k < MST; k++) d[k] += (double)(r[k] - r[k - 1]) / khz * 1e3;
                    const double w = (double)(r[4] - r[1]) / khz * 1e3;   // inputs ready -> outputs written
                    work += w;
                    lmax = w > lmax ? w : lmax;
                }
                wmax += lmax;
            }
            printf("  %-8s", ops[op]);
            for (int k = 1; k < MST; k++) printf(" %7.2f", cntb ? d[k] / cntb : 0.0);
            printf(" | %d | work mean %.2f, slowest block %.2f\n", cntb, cntb ? work / cntb : 0.0, wmax / (depth - 1));
        }
    }
    }
    CK(cudaGetLastError());
    return 0;
}
