// megakernel2.cu — kernel lab for issue 41: the expert layer as two dependent phases instead of four, each an
// up-projection on a slice of columns, a local non-linearity and the matching slice of the down-projection's K,
// summed over all blocks into the next residual rows. Not used by libpi0.
// RESULT (session 39, bench/RESULTS.md L149, bench/data/2026-11-26-s39-phase-lab.txt): correct (the CPU model,
// 4.8e-5) and slower than the four phases: 30.4-30.6 us per layer on the H100 (H200 26.4) against megakernel.cu's
// 25.1-25.5 in the same calls. The sums are the cost: 5.0 us (phase A) and 6.5-6.6 us (phase B) of each phase, 4.2
// with no weight traffic; 25.8 us per layer without weights. Clusters of 8 or 16 do not fit 128 blocks beside 165 KB
// of shared memory (15 x 8, 7 x 16 resident), so only the cooperative variant ran. Fewer phases do not pay when each
// ends in a sum over every block; bench/mk_floor.py bounds every design.
//
// Why: megakernel.cu (four phases: q|k|v, o, gate|up, down, each owned by its output tiles) measured ~4.1 us of
// communication per dependent phase and matched the production chain (23.5 us per layer) without beating it; the
// issue's 13 us per layer-step needs fewer phases. Here a block owns 16 q dimensions in phase A and 32 MLP columns
// in phase B, computes them from the normed residual (whole K), and multiplies them at once by the matching rows of
// o^T or down^T (transposed copies: a page is 16 rows of W^T, all 1024 outputs). Its 11 x 1024 fp32 partial is then
// summed with every other block's into the next residual rows: by vector reductions in L2 from every block (CS = 1),
// or first inside a cluster of CS blocks, each block pushing every other block its slice with st.async (the data's
// arrival is the signal: one mbarrier per block, no cluster barrier), then one L2 reduction per element per cluster.
// A counter per phase (release reductions, as megakernel.cu) tells the next phase's blocks that all sums are in.
// The residual itself is added by the reduction too (block b's 8 columns, or the first cluster's slices).
//   Layer = phase A (norm, q slice, o^T partial) + phase B (norm, gate|up slice, gelu, down^T partial): 8 pages of 32 KB
//   per block per layer at 128 blocks (k|v and attention are not here: phase A's q goes straight into o, so the
//   weights are 32 of the real layer's 33.5 MB; attention would sit inside phase A, within each head's cluster).
// Not bit-reproducible: the L2 reductions add in arrival order (fp32); checked against a CPU model to 1e-2 of each
// phase's update. The residual rows stay fp32 in memory. Waits on counters and on pushed slices give up after 1 s
// (mk_common.cuh), so a plan that is not co-resident fails instead of hanging.
// Modes as megakernel.cu: 0 the layer; 1 the weight stream alone; 2 no weight traffic (wrong results); 3 as 2 without
// the MMAs (communication alone). Build: make lab (build/lab/megakernel2); run: build/lab/megakernel2 [layers].
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "mk_common.cuh"

enum {
    M2M = 11,              // suffix rows
    M2N = M2M * MD,        // one residual: 11264 floats
    M2Q = 2048,            // q dimensions (8 heads x 256)
    M2F = 4096,            // MLP width
    M2B = 128,             // working blocks: 16 q dims and 32 MLP columns each
    M2NP = 4,              // ring pages (megakernel.cu: 4 to 6 measured the same)
    M2MAXL = 18,
    M2PPL = 8,             // pages per block per layer: q, o^T, 4 gate|up, 2 down^T
    M2HS = 40,             // hs row stride (bf16): 80 bytes, conflict-free ldmatrix rows
    M2ST = 7,              // stamps per phase: start, inputs ready, X normed, up done, down done, summed, signalled
};

struct m2_layer {
    const bf16 *wq, *woT, *wgu, *wdT;   // [2048][1024], o^T [2048][1024], [gate 4096; up 4096][1024], down^T [4096][1024]
    const float *n_attn, *n_mlp;
};
struct m2_args {
    m2_layer L[M2MAXL];
    int depth, mode;
    float eps;
    float *x;          // residual rows after each phase: [2 depth + 1][M2N] fp32 (x[0] the input; the rest zero at launch)
    unsigned *cnt;     // [2 depth]: blocks done with phase q (zero at launch)
    unsigned *err;     // waits that timed out (lab_wait_count, lab_wait_bar): the run is wrong
    long long *prof;   // NULL, or clock64 stamps [block][2 depth][M2ST]
};

// Weight row r (0..15) of page p (0..7) of block b in layer l.
__device__ __forceinline__ const bf16 *m2_row(const m2_layer &L, int b, int p, int r) {
    if (p == 0) return L.wq + (size_t)(16 * b + r) * MD;
    if (p == 1) return L.woT + (size_t)(16 * b + r) * MD;
    if (p < 6) return L.wgu + (size_t)((r < 8 ? 0 : M2F) + 32 * b + 8 * (p - 2) + (r & 7)) * MD;
    return L.wdT + (size_t)(32 * b + 16 * (p - 6) + r) * MD;
}

// X rows g, g + 8 at this lane's columns (megakernel.cu's layout) from fp32 rows, rounded to bf16.
__device__ __forceinline__ void load_x_f32(uint4 (&xv)[4][2], const float *x, int g, int kw) {
#pragma unroll
    for (int u = 0; u < 4; u++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = g + 8 * r;
            if (row >= M2M) { xv[u][r] = make_uint4(0, 0, 0, 0); continue; }
            const float4 a = __ldcg((const float4 *)(x + (size_t)row * MD + kw + 32 * u));
            const float4 b = __ldcg((const float4 *)(x + (size_t)row * MD + kw + 32 * u + 4));
            xv[u][r] = make_uint4(f2_to_bf2(a.x, a.y), f2_to_bf2(a.z, a.w), f2_to_bf2(b.x, b.y), f2_to_bf2(b.z, b.w));
        }
}
template <int CS>   // 1: every block adds its whole partial in L2; else clusters of CS sum first (st.async pushes)
__global__ void __launch_bounds__(MT, 1) m2_kernel(const __grid_constant__ m2_args a) {
    extern __shared__ __align__(128) unsigned char sm[];
    unsigned char *pages = sm;
    float *red2 = (float *)(sm + M2NP * MPAGE);     // [4 pages][8 warps][2 n tiles][4][32]
    float *nss = red2 + 4 * MW * 2 * 4 * 32;        // [8 warps][16 rows]
    bf16 *hs = (bf16 *)(nss + MW * 16);             // [16 rows][M2HS]: the phase's slice (q or gelu(gate) * up), bf16
    float *rcv = (float *)(hs + 16 * M2HS);         // [CS][M2N / CS]: the cluster's partials of this block's slice
    uint64_t *full = (uint64_t *)(rcv + (CS > 1 ? M2N : 0)), *empty = full + M2NP, *rbar = empty + M2NP;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, b = blockIdx.x;
    constexpr int SL = M2N / CS;                    // a block's slice of the sum
    static_assert(M2N % (4 * CS) == 0, "slices of whole float4s");
    const unsigned rank = CS > 1 ? cluster_rank() : 0;
    if (tid == 0) {
        for (int p = 0; p < M2NP; p++) { mbar_init(&full[p], 1); mbar_init(&empty[p], MW); }
        mbar_init(rbar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if (CS > 1) cluster_sync_all();   // every block's barriers exist before any peer pushes to them
    else __syncthreads();
    const int NPH = 2 * a.depth;
    if (warp == MW) {   // the loader: every page of every layer, as far ahead as the ring allows
        if (a.mode < 2)
            for (int l = 0, k = 0; l < a.depth; l++)
                for (int p = 0; p < M2PPL; p++, k++) {
                    const int slot = k % M2NP;
                    if (k >= M2NP) mbar_wait(&empty[slot], ((k / M2NP) - 1) & 1);
                    if (lane == 0) mbar_expect_tx(&full[slot], 16 * MD * 2);
                    __syncwarp();
                    if (lane < 16) bulk_copy_stream(pages + slot * MPAGE + lane * MLDS, m2_row(a.L[l], b, p, lane), MD * 2, &full[slot]);
                }
    } else {
        const int g = lane >> 2, c = lane & 3, kw = warp * 128 + c * 8;
        mk_ring R = {pages, full, empty, M2NP, 0, a.mode < 2};
        for (int q = 0; q < NPH; q++) {
            const int l = q >> 1, ph = q & 1, nup = ph ? 4 : 1, ndn = ph ? 2 : 1;
            long long *st = a.prof && tid == 0 ? a.prof + ((size_t)b * NPH + q) * M2ST : NULL;
            long long *sig = a.prof && tid == MCT - 32 ? a.prof + ((size_t)b * NPH + q) * M2ST : NULL;   // the signaller's
            if (st) st[0] = clock64();
            if (a.mode == 1) {   // the weight stream alone
                for (int p = 0; p < nup + ndn; p++) { R.get(); R.put(lane); }
                continue;
            }
            const float *X = a.x + (size_t)q * M2N;
            float *Xn = a.x + (size_t)(q + 1) * M2N;
            const float *nf = ph ? a.L[l].n_mlp : a.L[l].n_attn;
            if (tid < MD / 32) asm volatile("prefetch.global.L1 [%0];" ::"l"(nf + 32 * tid));
            if (tid == 0) {
                if (CS > 1) mbar_expect_tx(rbar, M2N * 4);   // this round's pushes: CS slices of SL floats
                if (q > 0) lab_wait_count(a.cnt + q - 1, (unsigned)M2B, a.err);
            }
            cbar();
            if (st) st[1] = clock64();
            uint4 xv[4][2];
            load_x_f32(xv, X, g, kw);
            norm_x(xv, nf, nss, warp, g, c, kw);
            if (st) { asm volatile("" ::"r"(xv[0][0].x)); st[2] = clock64(); }
            // the up-projection: 1 (q) or 4 (gate|up) pages, whole K
            float acc[4][2][4] = {};
#pragma unroll
            for (int u = 0; u < 4; u++)
                if (u < nup) {
                    const unsigned char *pg = R.get();
                    if (a.mode != 3) page_mma(acc[u], pg, xv, g, kw);
                    R.put(lane);
                }
#pragma unroll
            for (int u = 0; u < 4; u++)
                if (u < nup)
#pragma unroll
                    for (int t = 0; t < 2; t++)
#pragma unroll
                        for (int e = 0; e < 4; e++) red2[(((u * MW + warp) * 2 + t) * 4 + e) * 32 + lane] = acc[u][t][e];
            cbar();
            // the slice in bf16: q (16 columns) or gelu(gate) * up (32 columns), rows past M zero
            const int hw = ph ? 32 : 16;
            for (int e = tid; e < 16 * hw; e += MCT) {
                const int m = e / hw, j = e % hw;
                float v = 0;
                if (m < M2M) {
                    float ss = 0;
#pragma unroll
                    for (int w = 0; w < MW; w++) ss += nss[w * 16 + m];
                    const float r = rsqrtf(ss * (1.0f / MD) + a.eps);
                    if (ph) {
                        const float *rd = red2 + (j >> 3) * (MW * 2 * 4 * 32);
                        v = gelu_tanh(frag_sum(rd, 0, m, j & 7) * r) * (frag_sum(rd, 1, m, j & 7) * r);
                    } else {
                        v = frag_sum(red2, j >> 3, m, j & 7) * r;
                    }
                }
                hs[m * M2HS + j] = __float2bfloat16(v);
            }
            cbar();
            if (st) st[3] = clock64();
            // the down-projection's K slice: partial[m][n] = sum_k hs[m][k] W^T[k][n], this warp's 128 outputs
            float acc2[16][4] = {};
            for (int p = 0; p < ndn; p++) {
                const unsigned char *pg = R.get();
                if (a.mode != 3) {
                    uint32_t af[4];
                    ldsm_x4(af, hs + (lane & 15) * M2HS + 16 * p + (lane >> 4) * 8);
#pragma unroll
                    for (int pp = 0; pp < 8; pp++) {
                        uint32_t bq[4];
                        ldsm_x4_t(bq, pg + ((lane & 7) + ((lane >> 3) & 1) * 8) * MLDS + (warp * 128 + pp * 16 + (lane >> 4) * 8) * 2);
                        mma16816(acc2[2 * pp], af, bq[0], bq[1]);
                        mma16816(acc2[2 * pp + 1], af, bq[2], bq[3]);
                    }
                }
                R.put(lane);
            }
            if (st) st[4] = clock64();
            // the sum into the next residual rows (which start at zero; the residual is added once, below)
            // CS = 1: straight into L2 (block b also adds the residual's columns 8b .. 8b + 7); else pushed: element e
            // of the partial goes to the block that owns slice e / SL of the cluster's sum, at [rank][e % SL]
#pragma unroll
            for (int nt = 0; nt < 16; nt++) {
                const int n = warp * 128 + nt * 8 + 2 * c;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int m = g + 8 * h, e = m * MD + n;
                    if (m >= M2M) continue;
                    float v0 = acc2[nt][2 * h], v1 = acc2[nt][2 * h + 1];
                    if (CS == 1) {
                        if ((n >> 3) == b) {
                            const float2 x0 = __ldcg((const float2 *)(X + e));
                            v0 += x0.x;
                            v1 += x0.y;
                        }
                        red_v2(Xn + e, v0, v1);
                    } else {
                        const int owner = e / SL;
                        st_async_f32x2(rcv + rank * SL + (e - owner * SL), (unsigned)owner, v0, v1, rbar);
                    }
                }
            }
            if (CS > 1) {
                lab_wait_bar(rbar, q & 1, a.err);   // all CS slices of this round are in
                const bool first = b < CS;   // the first cluster adds the residual
                for (int e = tid * 4; e < SL; e += MCT * 4) {
                    float4 s = make_float4(0, 0, 0, 0);
                    for (int k = 0; k < CS; k++) {   // in rank order
                        const float4 v = *(const float4 *)(rcv + k * SL + e);
                        s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
                    }
                    const size_t o = (size_t)rank * SL + e;
                    if (first) {
                        const float4 x0 = __ldcg((const float4 *)(X + o));
                        s.x += x0.x; s.y += x0.y; s.z += x0.z; s.w += x0.w;
                    }
                    red_v4(Xn + o, s);
                }
            }
            cbar();   // the block's reductions (and reads of rcv), then one release: cumulative over them
            if (st) st[5] = clock64();
            if (tid == MCT - 32) red_release_add(a.cnt + q, 1u);
            if (sig) sig[6] = clock64();
        }
    }
    __syncthreads();
    if (CS > 1) cluster_sync_all();   // no block leaves while a peer may still push to it
}

// ---- host ----
int main(int argc, char **argv) {
    const int depth = argc > 1 ? atoi(argv[1]) : 18;
    if (depth < 1 || depth > M2MAXL) { printf("usage: megakernel2 [layers 1..%d]\n", M2MAXL); return 1; }
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    if (sms < M2B) { printf("megakernel2 needs %d SMs, this GPU has %d\n", M2B, sms); return 1; }
    const size_t smem_base = (size_t)M2NP * MPAGE + 4 * MW * 2 * 4 * 32 * 4 + MW * 16 * 4 + 16 * M2HS * 2;
    const size_t smem1 = smem_base + (2 * M2NP + 1) * 8, smemc = smem_base + (size_t)M2N * 4 + (2 * M2NP + 1) * 8;
    auto *k1 = m2_kernel<1>;
    auto *k8 = m2_kernel<8>;
    auto *k16 = m2_kernel<16>;
    CK(cudaFuncSetAttribute(k1, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem1));
    CK(cudaFuncSetAttribute(k8, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smemc));
    CK(cudaFuncSetAttribute(k16, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smemc));
    CK(cudaFuncSetAttribute(k16, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));

    m2_args a = {};
    a.depth = depth;
    a.eps = 1e-6f;
    const size_t wl = (size_t)M2Q * MD * 2 + (size_t)2 * M2F * MD + (size_t)M2F * MD;   // per layer: q, o^T, gate|up, down^T
    bf16 *w;
    float *nf;
    lab_expert(depth, wl, &w, &nf);
    for (int l = 0; l < depth; l++) {
        bf16 *p = w + wl * l;
        a.L[l].wq = p; p += (size_t)M2Q * MD;
        a.L[l].woT = p; p += (size_t)M2Q * MD;
        a.L[l].wgu = p; p += (size_t)2 * M2F * MD;
        a.L[l].wdT = p;
        a.L[l].n_attn = nf + (size_t)(2 * l) * MD;
        a.L[l].n_mlp = nf + (size_t)(2 * l + 1) * MD;
    }
    const size_t nx = (size_t)(2 * depth + 1) * M2N;
    CK(cudaMalloc(&a.x, nx * 4));
    CK(cudaMalloc(&a.cnt, (size_t)2 * depth * 4));
    CK(cudaMalloc(&a.err, 4));
    CK(cudaMemset(a.err, 0, 4));
    {   // the input rows: bf16-representable values in [-1, 1)
        bf16 *xb;
        CK(cudaMalloc(&xb, (size_t)M2N * 2));
        fill_kernel<<<64, 256>>>(xb, M2N, 11, 1.0f);
        std::vector<float> h = dl(xb, M2N);
        CK(cudaMemcpy(a.x, h.data(), (size_t)M2N * 4, cudaMemcpyHostToDevice));
        CK(cudaFree(xb));
    }
    CK(cudaDeviceSynchronize());
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<float> wh = dl(w, wl * (depth < 2 ? depth : 2)), nh = dlf(nf, (size_t)2 * MD * (depth < 2 ? depth : 2));
    bool ok = true;
    for (int cs : {1, 8, 16}) {
        int clusters = 0;
        cudaLaunchAttribute at[1];
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(M2B);
        cfg.blockDim = dim3(MT);
        cfg.dynamicSmemBytes = cs == 1 ? smem1 : smemc;
        cfg.stream = s;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        lab_persistent_attr(at[0], cs);
        if (cs > 1) {
            cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, cs == 8 ? (void *)k8 : (void *)k16, &cfg);
            if (e != cudaSuccess || clusters * cs < M2B) {
                printf("== clusters of %d: %d resident (%s), %d blocks needed: skipped\n", cs, clusters,
                       e == cudaSuccess ? "ok" : cudaGetErrorString(e), M2B);
                cudaGetLastError();
                continue;
            }
        }
        printf("== %s: %d blocks x %d threads, %zu KB shared memory, %d pages of %d KB in the ring\n",
               cs == 1 ? "every block adds its partial in L2 (cooperative launch)"
                       : cs == 8 ? "clusters of 8 sum first (st.async pushes)" : "clusters of 16 sum first (st.async pushes)",
               M2B, MT, (cs == 1 ? smem1 : smemc) >> 10, M2NP, MPAGE >> 10);
        auto launch = [&](int mode) {
            CK(cudaMemsetAsync(a.x + M2N, 0, (nx - M2N) * 4, s));
            CK(cudaMemsetAsync(a.cnt, 0, (size_t)2 * depth * 4, s));
            m2_args x = a;
            x.mode = mode;
            if (cs == 1) CK(cudaLaunchKernelEx(&cfg, k1, x));
            else if (cs == 8) CK(cudaLaunchKernelEx(&cfg, k8, x));
            else CK(cudaLaunchKernelEx(&cfg, k16, x));
        };
        // correctness: each phase of the first two layers from the GPU's own input rows, against the CPU model
        unsigned err = 0;
        CK(cudaMemsetAsync(a.err, 0, 4, s));
        launch(0);
        CK(cudaStreamSynchronize(s));
        CK(cudaMemcpy(&err, a.err, 4, cudaMemcpyDeviceToHost));
        if (err) { printf("TIMEOUT: %u waits gave up (FAIL), not timed\n", err); ok = false; continue; }
        {
            const int cl = depth < 2 ? depth : 2;
            std::vector<float> xs = dlf(a.x, (size_t)(2 * cl + 1) * M2N), xb(M2N), xn, r;
            std::vector<double> y((size_t)M2M * 2 * M2F);
            double worst = 0;
            for (int q = 0; q < 2 * cl; q++) {
                const int l = q >> 1, ph = q & 1;
                const float *W = wh.data() + wl * l, *Wq = W, *WoT = W + (size_t)M2Q * MD, *Wgu = WoT + (size_t)M2Q * MD,
                            *WdT = Wgu + (size_t)2 * M2F * MD;
                const float *x = xs.data() + (size_t)q * M2N, *got = x + M2N;
                for (int i = 0; i < M2N; i++) xb[i] = bf(x[i]);
                normed(xb.data(), nh.data() + (size_t)q * MD, M2M, a.eps, xn, r);
                const int hw = ph ? M2F : M2Q;
                std::vector<float> hh((size_t)M2M * hw);
                if (ph) {
                    mm(xn.data(), MD, Wgu, MD, M2M, 2 * M2F, MD, y.data());
                    for (int m = 0; m < M2M; m++)
                        for (int j = 0; j < M2F; j++)
                            hh[(size_t)m * M2F + j] = bf(gelu_ref((float)y[(size_t)m * 2 * M2F + j] * r[m]) *
                                                         ((float)y[(size_t)m * 2 * M2F + M2F + j] * r[m]));
                } else {
                    mm(xn.data(), MD, Wq, MD, M2M, M2Q, MD, y.data());
                    for (int m = 0; m < M2M; m++)
                        for (int j = 0; j < M2Q; j++) hh[(size_t)m * M2Q + j] = bf((float)y[(size_t)m * M2Q + j] * r[m]);
                }
                const float *WT = ph ? WdT : WoT;   // [hw][MD]: upd[m][n] = sum_j hh[m][j] WT[j][n]
                std::vector<double> upd((size_t)M2M * MD, 0.0);
                for (int m = 0; m < M2M; m++)
                    for (int j = 0; j < hw; j++) {
                        const double hv = hh[(size_t)m * hw + j];
                        const float *wr = WT + (size_t)j * MD;
                        for (int n = 0; n < MD; n++) upd[(size_t)m * MD + n] += hv * wr[n];
                    }
                double num = 0, den = 0;
                for (int i = 0; i < M2N; i++) {
                    const double d = (double)got[i] - x[i] - upd[i];
                    num += d * d;
                    den += upd[i] * upd[i];
                }
                const double e = sqrt(num / den);
                printf("layer %d phase %c: the update against the CPU model, rel L2 %.2e\n", l, ph ? 'B' : 'A', e);
                worst = e > worst ? e : worst;
            }
            printf("correctness: worst rel L2 %.2e (bound 1e-2) %s\n", worst, worst < 1e-2 ? "OK" : "FAIL");
            if (!(worst < 1e-2)) { ok = false; continue; }
        }
        const double bytes = (double)wl * 2 * depth;
        const char *names[4] = {"the layer (two phases)", "weight stream only", "no weight traffic (wrong results)",
                                "no weights, no MMAs (wrong results)"};
        for (int mode = 0; mode < 4; mode++) {
            int cap = 0;
            const float ms = lab_graph_median_ms(s, &cap, [&] { launch(mode); });
            CK(cudaMemcpy(&err, a.err, 4, cudaMemcpyDeviceToHost));
            if (err) { printf("TIMEOUT in mode %d: %u waits gave up (FAIL)\n", mode, err); ok = false; break; }
            printf("%-36s %8.2f us per layer  %7.1f GB/s of weights  (%d layers: %.1f us, with the memsets)\n", names[mode],
                   ms * 1e3 / depth, bytes / (ms * 1e-3) / 1e9, depth, ms * 1e3);
        }
        if (err) continue;
        // where a phase's time goes (means over blocks and layers 1..depth-1), modes 0 and 2
        for (int mode : {0, 2}) {
            int khz = 0;
            const std::vector<long long> h = lab_stamps((size_t)M2B * 2 * depth * M2ST, &a.prof, s, &khz, [&] { launch(mode); });
            printf("phases%s (us at %d MHz): inputs wait, X load + norm, up MMAs + slice, down MMAs, sum, signal | slowest block's "
                   "ready -> summed\n", mode ? " without weight traffic" : "", khz / 1000);
            for (int ph = 0; ph < 2; ph++) {
                double d[M2ST] = {0}, wmax = 0;
                int cnt = 0;
                for (int l = 1; l < depth; l++) {
                    double lmax = 0;
                    for (int bb = 0; bb < M2B; bb++) {
                        const long long *r = &h[((size_t)bb * 2 * depth + 2 * l + ph) * M2ST];
                        cnt++;
                        for (int k = 1; k < M2ST; k++) d[k] += (double)(r[k] - r[k - 1]) / khz * 1e3;
                        const double wk = (double)(r[5] - r[1]) / khz * 1e3;
                        lmax = wk > lmax ? wk : lmax;
                    }
                    wmax += lmax;
                }
                printf("  phase %c", ph ? 'B' : 'A');
                for (int k = 1; k < M2ST; k++) printf(" %7.2f", cnt ? d[k] / cnt : 0.0);
                printf(" | %.2f\n", depth > 1 ? wmax / (depth - 1) : 0.0);
            }
        }
    }
    CK(cudaGetLastError());
    printf("%s\n", ok ? "all checks passed" : "FAILED");
    return ok ? 0 : 1;
}
