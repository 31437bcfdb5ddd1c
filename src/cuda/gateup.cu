// gateup.cu — the gated MLP's first half for many rows (the prefix: M = 543-968 at B = 1, and batches):
// out (M, F) = gelu_tanh(X Wg^T) * (X Wu^T) in one kernel on the Hopper warpgroup MMA, in place of cuBLASLt's
// product into the fused [M, 2F] buffer followed by the gelu * up pass (docs/model.md 3.7). CPU twin: cpu_mlp_up.
// Where it does not fit (the shape, the alignment, PI0_CUDA_GATEUP=0: cuda_gateup returns 0) the caller runs cuBLASLt's
// product and the gelu * up pass instead (gemm.cu); the few-row case is gemv.cu's.
#include <cuda.h>
#include <cudaTypedefs.h>

#include "mma.cuh"

// The operands are swapped against the usual X W^T: the weights are the wgmma A operand (m64: 64 weight rows per
// consumer warpgroup) and the tokens its B operand (n = BN, a multiple of 8 up to 256), so a tile spans BN tokens
// rather than a multiple of 64 rows: M = 788 runs as 4 tiles of 200 tokens (+1.5% padding) where 128-row tiles
// padded it to 896 (+14%, bench/RESULTS.md L51). BN is chosen per M from the instantiated widths by a cost
// model fitted in the lab (bench/kernels/gateup_lab.cu, bench/RESULTS.md L92). The last token tile starts at
// M - BN instead of running past M: rows it shares with the tile before are computed twice with the same bits,
// and no tensor copy reads outside X (boxes partly outside a map took longer per row in the lab, bench/RESULTS.md L94).
//
// A block is 3 warpgroups. Warpgroup 0's thread 0 issues the tensor copies into a ring of GU_S stages (full / empty
// mbarriers). The weight box is a 4-D view of the adjacent [gate; up] weights, {k, 8 rows, gate / up, 8-row
// groups}, so that every 16-row slab in shared memory is 8 gate rows and then the same 8 features' up rows: a
// thread's accumulator rows g and g + 8 are gate and up of one feature, and gelu(gate) * up is formed in fp32
// registers (the pass it replaces read both rounded to bf16). Warpgroups 1 and 2 each run one wgmma m64nBNk16 per
// 16 k on 64 weight rows (32 features). The [BN tokens][64 features] result is written transposed into shared
// memory (stmatrix .trans, in the 128-byte swizzle) and stored by one tensor copy. Persistent grid over panels of
// token tiles (~8 MB of X each), token tiles fastest within a panel, so that the blocks at work share their weight
// tiles in L2 and X is read from DRAM about once.

enum { GU_S = 4, GU_FT = 64 };   // ring stages; output features per tile
template <int BN> struct gu_cfg {
    static constexpr unsigned a_bytes = 2 * GU_FT * 128, b_bytes = BN * 128, o_bytes = BN * 128;
    static constexpr size_t smem = 1024 + (size_t)GU_S * (a_bytes + b_bytes) + o_bytes + 2 * GU_S * 8;
};

// The accumulator operand lists of wgmma m64nBNk16 (BN / 2 registers, %3 on: the descriptors and the scale flag are
// %0 .. %2), built 4 registers at a time: GU_An lists 4 n of them.
#define GU_A1 "%3,%4,%5,%6"
#define GU_A2 GU_A1 ",%7,%8,%9,%10"
#define GU_A3 GU_A2 ",%11,%12,%13,%14"
#define GU_A4 GU_A3 ",%15,%16,%17,%18"
#define GU_A5 GU_A4 ",%19,%20,%21,%22"
#define GU_A6 GU_A5 ",%23,%24,%25,%26"
#define GU_A7 GU_A6 ",%27,%28,%29,%30"
#define GU_A8 GU_A7 ",%31,%32,%33,%34"
#define GU_A9 GU_A8 ",%35,%36,%37,%38"
#define GU_A10 GU_A9 ",%39,%40,%41,%42"
#define GU_A11 GU_A10 ",%43,%44,%45,%46"
#define GU_A12 GU_A11 ",%47,%48,%49,%50"
#define GU_A13 GU_A12 ",%51,%52,%53,%54"
#define GU_A14 GU_A13 ",%55,%56,%57,%58"
#define GU_A15 GU_A14 ",%59,%60,%61,%62"
#define GU_A16 GU_A15 ",%63,%64,%65,%66"
#define GU_A17 GU_A16 ",%67,%68,%69,%70"
#define GU_A18 GU_A17 ",%71,%72,%73,%74"
#define GU_A19 GU_A18 ",%75,%76,%77,%78"
#define GU_A20 GU_A19 ",%79,%80,%81,%82"
#define GU_A21 GU_A20 ",%83,%84,%85,%86"
#define GU_A22 GU_A21 ",%87,%88,%89,%90"
#define GU_A23 GU_A22 ",%91,%92,%93,%94"
#define GU_A24 GU_A23 ",%95,%96,%97,%98"
#define GU_A25 GU_A24 ",%99,%100,%101,%102"
#define GU_A26 GU_A25 ",%103,%104,%105,%106"
#define GU_A27 GU_A26 ",%107,%108,%109,%110"
#define GU_A28 GU_A27 ",%111,%112,%113,%114"
#define GU_A29 GU_A28 ",%115,%116,%117,%118"
#define GU_A30 GU_A29 ",%119,%120,%121,%122"
#define GU_A31 GU_A30 ",%123,%124,%125,%126"
#define GU_A32 GU_A31 ",%127,%128,%129,%130"
#define GU_D4(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
template <int BN> __device__ __forceinline__ void gu_mma(float (&d)[BN / 2], uint64_t da, uint64_t db, int acc);
#define GU_MMA(BN, ACC, ...)                                                                                     \
    template <> __device__ __forceinline__ void gu_mma<BN>(float (&d)[BN / 2], uint64_t da, uint64_t db, int acc) { \
        PI0_SM90A(asm volatile("{ .reg .pred p; setp.ne.b32 p, %2, 0;\n"                                                      \
                     "wgmma.mma_async.sync.aligned.m64n" #BN "k16.f32.bf16.bf16 {" ACC "}, %0, %1, p, 1, 1, 0, 0; }" \
                     : "+l"(da), "+l"(db), "+r"(acc), __VA_ARGS__));                                                \
    }
GU_MMA(136, GU_A17, WG_D32(d, 0), WG_D32(d, 32), GU_D4(d, 64))
GU_MMA(152, GU_A19, WG_D32(d, 0), WG_D32(d, 32), WG_D8(d, 64), GU_D4(d, 72))
GU_MMA(168, GU_A21, WG_D32(d, 0), WG_D32(d, 32), WG_D8(d, 64), WG_D8(d, 72), GU_D4(d, 80))
GU_MMA(184, GU_A23, WG_D32(d, 0), WG_D32(d, 32), WG_D8(d, 64), WG_D8(d, 72), WG_D8(d, 80), GU_D4(d, 88))
GU_MMA(200, GU_A25, WG_D32(d, 0), WG_D32(d, 32), WG_D32(d, 64), GU_D4(d, 96))
GU_MMA(216, GU_A27, WG_D32(d, 0), WG_D32(d, 32), WG_D32(d, 64), WG_D8(d, 96), GU_D4(d, 104))
GU_MMA(232, GU_A29, WG_D32(d, 0), WG_D32(d, 32), WG_D32(d, 64), WG_D8(d, 96), WG_D8(d, 104), GU_D4(d, 112))
GU_MMA(248, GU_A31, WG_D32(d, 0), WG_D32(d, 32), WG_D32(d, 64), WG_D8(d, 96), WG_D8(d, 104), WG_D8(d, 112), GU_D4(d, 120))
GU_MMA(256, GU_A32, WG_D32(d, 0), WG_D32(d, 32), WG_D32(d, 64), WG_D32(d, 96))

__device__ __forceinline__ void consumers_bar() { asm volatile("bar.sync 1, 256;" ::: "memory"); }

// tw: the 4-D weight map (gu_weight_map); tx: X [M][K] in boxes of BN x 64; ty: out [M][F] in boxes of BN x 64.
template <int BN>
__global__ void __launch_bounds__(384, 1) gateup_kernel(const __grid_constant__ CUtensorMap tw, const __grid_constant__ CUtensorMap tx,
                                                        const __grid_constant__ CUtensorMap ty, int M, int F, int K, int G) {
    typedef gu_cfg<BN> C;
    extern __shared__ uint8_t gu_smem[];
    uint8_t *sa = (uint8_t *)(((uintptr_t)gu_smem + 1023) & ~(uintptr_t)1023), *sb = sa + GU_S * C::a_bytes;
    uint8_t *so = sb + GU_S * C::b_bytes;
    uint64_t *full = (uint64_t *)(so + C::o_bytes), *empty = full + GU_S;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128, nk = (K + 63) / 64;
    const int tiles_t = (M + BN - 1) / BN, tiles_f = F / GU_FT, tiles = tiles_t * tiles_f;
    // Tile t: panels of G token tiles (the panel's X stays in L2 while the weights stream past it once), token
    // tiles fastest within a panel. The last token tile starts at M - BN (the host checks M >= BN).
    auto tile = [&](int t, int &t0, int &ft) {
        const int g0 = t / (G * tiles_f) * G, gsz = min(G, tiles_t - g0), r = t - g0 * tiles_f;
        t0 = min((g0 + r % gsz) * BN, M - BN);
        ft = r / gsz;
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < GU_S; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 2);   // one arrival per consumer warpgroup
        }
        fence_barrier_init();
    }
    __syncthreads();
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    if (wg == 0) {   // producer
        regs_dec<40>();
        if (tid != 0) return;
        int s = 0;
        unsigned ph = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            int t0, ft;
            tile(t, t0, ft);
            const int grp = ft * (GU_FT / 8);
            for (int kb = 0; kb < nk; kb++) {
                mbar_wait(&empty[s], ph ^ 1);
                mbar_expect_tx(&full[s], C::a_bytes + C::b_bytes);
                tma_load_4d(sa + s * C::a_bytes, &tw, kb * 64, 0, 0, grp, &full[s]);
                tma_load_2d(sb + s * C::b_bytes, &tx, kb * 64, t0, &full[s]);
                if (++s == GU_S) { s = 0; ph ^= 1; }
            }
        }
        return;
    }
    regs_inc<232>();
    const int cw = wg - 1, warp = tid / 32, lane = tid % 32;
    float d[BN / 2];
    int s = 0;
    unsigned ph = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int t0, ft;
        tile(t, t0, ft);
        const int f0 = ft * GU_FT;
        int prev = -1;
        for (int kb = 0; kb < nk; kb++) {
            mbar_wait(&full[s], ph);
            wg_fence();
            const uint64_t da = wg_desc(sa + s * C::a_bytes + cw * 64 * 128), db = wg_desc(sb + s * C::b_bytes);
#pragma unroll
            for (int kk = 0; kk < 4; kk++) gu_mma<BN>(d, da + 2 * kk, db + 2 * kk, kb | kk);
            wg_commit();
            wg_wait<1>();   // the previous stage's products are done: it goes back to the producer
            if (prev >= 0 && tid == 0) mbar_arrive(&empty[prev]);
            prev = s;
            if (++s == GU_S) { s = 0; ph ^= 1; }
        }
        wg_wait<0>();
        wg_hold(d);
        if (tid == 0) mbar_arrive(&empty[prev]);
        if (threadIdx.x == 128) tma_store_wait_read();   // the previous tile's store has read the staging buffer
        consumers_bar();
        // d[4 i + e]: the gate of feature g (of the warp's 8) at tokens 8 i + 2 q + e (q = lane % 4); d[4 i + 2 + e]: its
        // up. Column group i is an 8 x 8 [feature][token] matrix in the mma layout; stmatrix .trans writes it as token
        // rows of 8 features: 16-byte chunk 4 cw + warp of the token's 128-byte row, swizzled as the tensor store reads.
        const int chunk = 4 * cw + warp, r8 = lane % 8, mi = lane / 8;
        auto pk = [&](int i) { return f2_to_bf2(gelu_tanh(d[4 * i]) * d[4 * i + 2], gelu_tanh(d[4 * i + 1]) * d[4 * i + 3]); };
#pragma unroll
        for (int i = 0; i + 4 <= BN / 8; i += 4) stsm_x4_t(so + swz128(8 * (i + mi) + r8, chunk), pk(i), pk(i + 1), pk(i + 2), pk(i + 3));
#pragma unroll
        for (int i = BN / 8 / 4 * 4; i < BN / 8; i++) stsm_x1_t(so + swz128(8 * i + r8, chunk), pk(i));
        fence_proxy_async();
        consumers_bar();
        if (threadIdx.x == 128) tma_store_2d(&ty, so, f0, t0);
    }
    if (threadIdx.x == 128) tma_store_wait();
}

// ---- host side ----

// The 4-D view of the [gate; up] weights (gate row n at w + n ldw, up row n at w + (F + n) ldw): dims {k, row of an
// 8-row group, gate / up, group}, boxes {64, 8, 2, GU_FT / 8} = 128 rows of 128 bytes in the 128-byte swizzle.
static int gu_weight_map(CUtensorMap *m, const void *w, int F, int K, int ldw) {
    PFN_cuTensorMapEncodeTiled_v12000 enc = cuda_tensor_map_encoder();
    cuuint64_t dims[4] = {(cuuint64_t)K, 8, 2, (cuuint64_t)F / 8};
    cuuint64_t strides[3] = {(cuuint64_t)ldw * 2, (cuuint64_t)F * ldw * 2, (cuuint64_t)8 * ldw * 2};
    cuuint32_t box[4] = {64, 8, 2, GU_FT / 8}, es[4] = {1, 1, 1, 1};
    return enc && enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, (void *)w, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

static const int gu_widths[] = {136, 152, 168, 184, 200, 216, 232, 248, 256};

// The token tile width for M rows: fewest rounds of tiles over the SMs times the width, with narrow tiles costing up
// to 40% more per token (the lab's fit, bench/RESULTS.md L92); when
// every width fits in one round the narrowest wins. 0 if M is below every width.
static int gu_pick(int M, int F, int sms) {
    int best = 0;
    double bc = 0;
    for (int bn : gu_widths) {
        if (bn > M) break;
        const long long tiles = (long long)(M + bn - 1) / bn * (F / GU_FT), rounds = (tiles + sms - 1) / sms;
        const double cost = (double)rounds * bn * (1.0 + 0.4 * (256 - bn) / 256);
        if (!best || cost <= bc) { best = bn; bc = cost; }
    }
    return best;
}

template <int BN> static void gu_launch(cuda_ctx *c, const CUtensorMap &tw, const CUtensorMap &tx, const CUtensorMap &ty, int M,
                                        int F, int K) {
    const int tiles = (M + BN - 1) / BN * (F / GU_FT);
    // panels of ~8 MB of X: at B = 64 (M = 50432) one sweep of the weights per token tile read X (206 MB) from DRAM
    // for every weight tile, slower end to end than cuBLASLt + the pass (bench/RESULTS.md L93)
    const int tiles_t = (M + BN - 1) / BN, g8 = (int)((8u << 20) / ((size_t)BN * K * 2)) + 1, G = g8 < tiles_t ? g8 : tiles_t;
    cuda_launch(c, gateup_kernel<BN>, dim3(tiles < c->sms ? tiles : c->sms), dim3(384), gu_cfg<BN>::smem, tw, tx, ty, M, F, K, G);
}

#ifdef PI0_CUDA_TESTING
static long gu_launches;   // (atomic: contexts may run on several threads)
extern "C" long cuda_gateup_launches(void) { return __atomic_load_n(&gu_launches, __ATOMIC_RELAXED); }
static int gu_forced;      // the op tests' width (cuda_gateup_force), 0: picked per M
extern "C" void cuda_gateup_force(int bn) { __atomic_store_n(&gu_forced, bn, __ATOMIC_RELAXED); }
#endif

int cuda_gateup(cuda_ctx *c, bf16 *out, const bf16 *x, int ldx, const bf16 *w, int M, int F, int K, int bn) {
    if (!c->gateup || M <= 0 || F % GU_FT || K % 8 || ldx % 8 || K > ldx || ((uintptr_t)out | (uintptr_t)x | (uintptr_t)w) % 16)
        return 0;
    PI0_TEST_HOOK(if (!bn) bn = __atomic_load_n(&gu_forced, __ATOMIC_RELAXED));
    if (!bn) bn = gu_pick(M, F, c->sms);
    if (bn <= 0 || bn > M) return 0;
    CUtensorMap tw, tx, ty;
    if (!gu_weight_map(&tw, w, F, K, K) || !cuda_tensor_map(&tx, x, M, K, ldx, bn) || !cuda_tensor_map(&ty, out, M, F, F, bn))
        return 0;
    switch (bn) {
    case 136: gu_launch<136>(c, tw, tx, ty, M, F, K); break;
    case 152: gu_launch<152>(c, tw, tx, ty, M, F, K); break;
    case 168: gu_launch<168>(c, tw, tx, ty, M, F, K); break;
    case 184: gu_launch<184>(c, tw, tx, ty, M, F, K); break;
    case 200: gu_launch<200>(c, tw, tx, ty, M, F, K); break;
    case 216: gu_launch<216>(c, tw, tx, ty, M, F, K); break;
    case 232: gu_launch<232>(c, tw, tx, ty, M, F, K); break;
    case 248: gu_launch<248>(c, tw, tx, ty, M, F, K); break;
    case 256: gu_launch<256>(c, tw, tx, ty, M, F, K); break;
    default: return 0;
    }
    PI0_TEST_HOOK(__atomic_add_fetch(&gu_launches, 1, __ATOMIC_RELAXED));
    return 1;
}

template <int BN> static void gu_setup(cuda_ctx *c) {
    CUDA_NOTE(c, cudaFuncSetAttribute(gateup_kernel<BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)gu_cfg<BN>::smem));
}
void cuda_gateup_setup(cuda_ctx *c) {   // the opt-in for more than 48 KB of shared memory (per device)
    gu_setup<136>(c); gu_setup<152>(c); gu_setup<168>(c); gu_setup<184>(c); gu_setup<200>(c);
    gu_setup<216>(c); gu_setup<232>(c); gu_setup<248>(c); gu_setup<256>(c);
}
