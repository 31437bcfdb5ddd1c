// wprod.cu — products with the weights as the warpgroup MMA's A operand, for many rows (M > 64: the prefix, SigLIP,
// batches). Two kinds share one kernel:
//  - gated (cuda_gateup): out (M, F) = gelu_tanh(X Wg^T) * (X Wu^T), the prefix MLP's first half (spec 3.7), in place
//    of cuBLASLt's product into the fused [M, 2F] buffer followed by the gelu * up pass. CPU twin: cpu_mlp_up.
//  - plain (cuda_wprod): out (M, N) = act(X W^T + b) or out += X W^T + b, the output optionally cut into equal
//    segments (SigLIP's q, k, v from their adjacent weights). CPU twins: cpu_linear, cpu_qkv.
//  - rope (cuda_wprod_rope): Gemma's q, k, v from their adjacent weights with RoPE on q and k (spec 3.7), in place of
//    cuBLASLt's product into the fused buffer and the split + RoPE pass. CPU twin: cpu_qkv.
//
// The operands are swapped against the usual X W^T: the weights are the wgmma A operand (m64: 64 weight rows per
// consumer warpgroup) and the tokens its B operand (n = BN, a multiple of 8 up to 256), so a tile spans BN tokens
// rather than a multiple of 64 rows: M = 788 runs as 4 tiles of 200 tokens (+1.5% padding) where 128-row tiles
// padded it to 896 (+14%, bench/RESULTS.md session 9). BN is chosen per M from the instantiated widths by a cost
// model fitted in the lab (bench/kernels/gateup_lab.cu, RESULTS.md session 20). The last token tile starts at
// M - BN instead of running past M: rows it shares with the tile before are computed twice with the same bits,
// and no tensor copy reads outside X (boxes partly outside a map took ~1.5-2x as long per row in the lab). Where
// the epilogue adds into the output (the residual), the shared rows are the earlier tile's: the last tile stores
// only its own rows, with plain stores.
//
// A block is 3 warpgroups. Warpgroup 0's thread 0 issues the tensor copies into a ring of stages (full / empty
// mbarriers); warpgroups 1 and 2 each run one wgmma m64nBNk16 per 16 k on 64 of the tile's 128 weight rows.
//  - Gated: the weight box is a 4-D view of the adjacent [gate; up] weights, {k, 8 rows, gate / up, 8-row groups},
//    so that every 16-row slab in shared memory is 8 gate rows and then the same 8 features' up rows: a thread's
//    accumulator rows g and g + 8 are gate and up of one feature, and gelu(gate) * up is formed in fp32 registers
//    (the pass it replaces read both rounded to bf16). A tile is 64 output features.
//  - Plain: the weight box is 128 rows of W; a tile is 128 output features, 64 per consumer warpgroup, each with
//    its own staging buffer and store. The residual tile is fetched into the staging buffer by a tensor copy
//    issued when the tile starts, and read back in the accumulator layout (ldmatrix .trans).
//  - Rope: the weight box is a 5-D view {k, 8 rows, first / second half of the head, 8-row groups, head} of the
//    [q; k; v] rows, so that a thread's rows g and g + 8 are the RoPE pair (p, p + hd / 2) of one head: the
//    rotation happens in fp32 registers. A tile is 64 pairs of one head; the two halves go to two staging buffers
//    and two stores. v's heads take the same path without the rotation.
// The [BN tokens][64 features] result is written transposed into shared memory (stmatrix .trans, in the 128-byte
// swizzle) and stored by one tensor copy. Persistent grid over panels of token tiles (~8 MB of X each), token tiles
// fastest within a panel, so that the blocks at work share their weight tiles in L2 and X is read from DRAM about
// once.
#include <cuda.h>
#include <cudaTypedefs.h>

#include "mma.cuh"

enum { WP_FT = 128, GU_FT = 64 };   // weight rows per tile; output features per gated tile
enum { WP_GATED = 0, WP_PLAIN = 1, WP_ROPE = 2 };
template <int BN, int MODE> struct wp_cfg {
    static constexpr unsigned a_bytes = WP_FT * 128, b_bytes = BN * 128;
    // output staging: [BN tokens][64 features], one (gated) or two (plain: one per consumer warpgroup; rope: one per
    // half of the head)
    static constexpr unsigned o_bytes = (MODE == WP_GATED ? 1 : 2) * BN * 128;
    static constexpr int S = 1024 + 4 * (a_bytes + b_bytes) + o_bytes + 12 * 8 <= 232448 ? 4 : 3;   // ring stages
    static constexpr size_t smem = 1024 + (size_t)S * (a_bytes + b_bytes) + o_bytes + (2 * S + 2) * 8;
};

// The plain epilogue: per segment an fp32 bias or NULL; seg = output features per segment (a multiple of WP_FT when
// there are several, else N); GELU (tanh) after the bias; add: out += (one segment; y / ldy: the output itself, for
// the last token tile's plain stores).
struct wp_epi {
    const float *bias[3];
    int seg, gelu, add;
    bf16 *y;
    int ldy;
    const int32_t *pos;   // rope: the tokens' positions; head_dim; q's and k's heads (ty0, ty1; v: ty2)
    int hd, nqh, nkh;
};

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
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %2, 0;\n"                                                      \
                     "wgmma.mma_async.sync.aligned.m64n" #BN "k16.f32.bf16.bf16 {" ACC "}, %0, %1, p, 1, 1, 0, 0; }" \
                     : "+l"(da), "+l"(db), "+r"(acc), __VA_ARGS__);                                                \
    }
GU_MMA(64, GU_A8, WG_D32(d, 0))
GU_MMA(80, GU_A10, WG_D32(d, 0), WG_D8(d, 32))
GU_MMA(96, GU_A12, WG_D32(d, 0), WG_D8(d, 32), WG_D8(d, 40))
GU_MMA(112, GU_A14, WG_D32(d, 0), WG_D8(d, 32), WG_D8(d, 40), WG_D8(d, 48))
GU_MMA(128, GU_A16, WG_D32(d, 0), WG_D32(d, 32))
GU_MMA(144, GU_A18, WG_D32(d, 0), WG_D32(d, 32), WG_D8(d, 64))
GU_MMA(160, GU_A20, WG_D32(d, 0), WG_D32(d, 32), WG_D8(d, 64), WG_D8(d, 72))
GU_MMA(176, GU_A22, WG_D32(d, 0), WG_D32(d, 32), WG_D8(d, 64), WG_D8(d, 72), WG_D8(d, 80))
GU_MMA(192, GU_A24, WG_D32(d, 0), WG_D32(d, 32), WG_D32(d, 64))
GU_MMA(208, GU_A26, WG_D32(d, 0), WG_D32(d, 32), WG_D32(d, 64), WG_D8(d, 96))
GU_MMA(224, GU_A28, WG_D32(d, 0), WG_D32(d, 32), WG_D32(d, 64), WG_D8(d, 96), WG_D8(d, 104))
GU_MMA(240, GU_A30, WG_D32(d, 0), WG_D32(d, 32), WG_D32(d, 64), WG_D8(d, 96), WG_D8(d, 104), WG_D8(d, 112))
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
__device__ __forceinline__ void wg_bar(int cw) { asm volatile("bar.sync %0, 128;" ::"r"(2 + cw) : "memory"); }   // one consumer warpgroup

// tw: the weight map (gated: gu_weight_map; plain: [N][K] in boxes of 128 x 64); tx: X [M][K] in boxes of BN x 64;
// ty0..2: the output segments [M][seg] in boxes of BN x 64 (gated: out [M][F], one). N: output features (gated: F).
template <int BN, int MODE>
__global__ void __launch_bounds__(384, 1) wprod_kernel(const __grid_constant__ CUtensorMap tw, const __grid_constant__ CUtensorMap tx,
                                                       const __grid_constant__ CUtensorMap ty0, const __grid_constant__ CUtensorMap ty1,
                                                       const __grid_constant__ CUtensorMap ty2, int M, int N, int K, int G, const wp_epi e) {
    typedef wp_cfg<BN, MODE> C;
    constexpr int FT = MODE == WP_GATED ? GU_FT : WP_FT;   // output features per tile
    static_assert(MODE == WP_GATED || BN % 16 == 0, "the plain and rope epilogues store pairs of 8-token groups");
    extern __shared__ uint8_t wp_smem[];
    uint8_t *sa = (uint8_t *)(((uintptr_t)wp_smem + 1023) & ~(uintptr_t)1023), *sb = sa + C::S * C::a_bytes;
    uint8_t *so = sb + C::S * C::b_bytes;
    uint64_t *full = (uint64_t *)(so + C::o_bytes), *empty = full + C::S, *rbar = empty + C::S;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128, nk = (K + 63) / 64;
    const int tiles_t = (M + BN - 1) / BN, tiles_f = (N + FT - 1) / FT, tiles = tiles_t * tiles_f;
    // Tile t: panels of G token tiles (the panel's X stays in L2 while the weights stream past it once), token
    // tiles fastest within a panel. The last token tile starts at M - BN (the host checks M >= BN); ov: the rows
    // it shares with the tile before.
    auto tile = [&](int t, int &t0, int &ft, int &ov) {
        const int g0 = t / (G * tiles_f) * G, gsz = min(G, tiles_t - g0), r = t - g0 * tiles_f, tn = (g0 + r % gsz) * BN;
        t0 = min(tn, M - BN);
        ov = tn - t0;
        ft = r / gsz;
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < C::S; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 2);   // one arrival per consumer warpgroup
        }
        mbar_init(&rbar[0], 1);
        mbar_init(&rbar[1], 1);
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
            int t0, ft, ov;
            tile(t, t0, ft, ov);
            for (int kb = 0; kb < nk; kb++) {
                mbar_wait(&empty[s], ph ^ 1);
                mbar_expect_tx(&full[s], C::a_bytes + C::b_bytes);
                if constexpr (MODE == WP_GATED) tma_load_4d(sa + s * C::a_bytes, &tw, kb * 64, 0, 0, ft * (GU_FT / 8), &full[s]);
                else if constexpr (MODE == WP_ROPE)
                    tma_load_5d(sa + s * C::a_bytes, &tw, kb * 64, 0, 0, ft % (e.hd / 128) * 8, ft / (e.hd / 128), &full[s]);
                else tma_load_2d(sa + s * C::a_bytes, &tw, kb * 64, ft * WP_FT, &full[s]);
                tma_load_2d(sb + s * C::b_bytes, &tx, kb * 64, t0, &full[s]);
                if (++s == C::S) { s = 0; ph ^= 1; }
            }
        }
        return;
    }
    regs_inc<232>();
    const int cw = wg - 1, warp = tid / 32, lane = tid % 32;
    float d[BN / 2];
    int s = 0;
    unsigned ph = 0, rph = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int t0, ft, ov;
        tile(t, t0, ft, ov);
        // plain: this warpgroup's 64 output features [fw, fw + 64) are columns [col, col + 64) of segment sg; none
        // are left in the last feature tile when N - 128 ft <= 64 (live = 0)
        const int fw = ft * WP_FT + 64 * cw, sg = MODE == WP_PLAIN ? fw / e.seg : 0, col = fw - sg * e.seg;
        const CUtensorMap *ty = sg == 0 ? &ty0 : sg == 1 ? &ty1 : &ty2;
        const bool live = MODE != WP_PLAIN || fw < N;
        uint8_t *sw = so + (MODE == WP_GATED ? 0 : cw * BN * 128);
        if (MODE == WP_PLAIN && e.add && live && tid == 0) {   // the residual tile, into this warpgroup's staging buffer
            tma_store_wait_read();   // once the previous tile's store has read it
            mbar_expect_tx(&rbar[cw], BN * 128);
            tma_load_2d(sw, ty, col, t0, &rbar[cw]);
        }
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
            if (++s == C::S) { s = 0; ph ^= 1; }
        }
        wg_wait<0>();
        wg_hold(d);
        if (tid == 0) mbar_arrive(&empty[prev]);
        if constexpr (MODE == WP_GATED) {
            if (threadIdx.x == 128) tma_store_wait_read();   // the previous tile's store has read the staging buffer
            consumers_bar();
            // d[4 i + e]: the gate of feature g (of the warp's 8) at tokens 8 i + 2 q + e (q = lane % 4); d[4 i + 2 + e]:
            // its up. Column group i is an 8 x 8 [feature][token] matrix in the mma layout; stmatrix .trans writes it as
            // token rows of 8 features: 16-byte chunk 4 cw + warp of the token's 128-byte row, swizzled as the tensor
            // store reads.
            const int chunk = 4 * cw + warp, r8 = lane % 8, mi = lane / 8;
            auto pk = [&](int i) { return f2_to_bf2(gelu_tanh(d[4 * i]) * d[4 * i + 2], gelu_tanh(d[4 * i + 1]) * d[4 * i + 3]); };
#pragma unroll
            for (int i = 0; i + 4 <= BN / 8; i += 4) stsm_x4_t(so + swz128(8 * (i + mi) + r8, chunk), pk(i), pk(i + 1), pk(i + 2), pk(i + 3));
#pragma unroll
            for (int i = BN / 8 / 4 * 4; i < BN / 8; i++) stsm_x1_t(so + swz128(8 * i + r8, chunk), pk(i));
            fence_proxy_async();
            consumers_bar();
            if (threadIdx.x == 128) tma_store_2d(ty, so, ft * GU_FT, t0);
        } else if constexpr (MODE == WP_ROPE) {
            if (threadIdx.x == 128) tma_store_wait_read();   // the previous tile's stores have read the staging buffers
            consumers_bar();
            // Tile ft: pairs [8 gs, 8 gs + 64) of head h (hd / 128 tiles per head), head hl of segment sr (q, k, v).
            // This thread: pair p = 8 (gs + 4 cw + warp) + g, feature p in d[4 i + j] and p + hd / 2 in d[4 i + 2 + j],
            // at tokens 8 i + 2 q + j (g = lane / 4, q = lane % 4). The rotation as split3_rope_kernel (gemm.cu) does it.
            const int tph = e.hd / 128, h = ft / tph, gs = ft % tph * 8, p = 8 * (gs + 4 * cw + warp) + lane / 4;
            const int sr = h < e.nqh ? 0 : h < e.nqh + e.nkh ? 1 : 2, hl = h - (sr == 0 ? 0 : sr == 1 ? e.nqh : e.nqh + e.nkh);
            const float inv_freq = (float)pow(10000.0, -2.0 * p / e.hd);
            const int chunk = 4 * cw + warp, r8 = lane % 8, mi = lane / 8, q = lane % 4;
            uint8_t *slo = so, *shi = so + BN * 128;   // features [8 gs, + 64) and [hd / 2 + 8 gs, + 64) of the head
            auto rot = [&](int i, uint32_t &lo, uint32_t &hi) {
                float y1[2], y2[2];
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const float x1 = d[4 * i + j], x2 = d[4 * i + 2 + j];
                    if (sr < 2) {
                        const float th = (float)e.pos[t0 + 8 * i + 2 * q + j] * inv_freq, cs = cosf(th), sn = sinf(th);
                        y1[j] = x1 * cs - x2 * sn;
                        y2[j] = x2 * cs + x1 * sn;
                    } else {
                        y1[j] = x1;
                        y2[j] = x2;
                    }
                }
                lo = f2_to_bf2(y1[0], y1[1]);
                hi = f2_to_bf2(y2[0], y2[1]);
            };
            // x4: lanes 8 m .. 8 m + 7 address matrix m's rows: m = 0, 2 the first half at token groups i, i + 1;
            // m = 1, 3 the second half
#pragma unroll
            for (int i = 0; i < BN / 8; i += 2) {
                uint32_t a0, a1, b0, b1;
                rot(i, a0, a1);
                rot(i + 1, b0, b1);
                stsm_x4_t((mi & 1 ? shi : slo) + swz128(8 * (i + mi / 2) + r8, chunk), a0, a1, b0, b1);
            }
            fence_proxy_async();
            consumers_bar();
            if (threadIdx.x == 128) {
                const CUtensorMap *tr = sr == 0 ? &ty0 : sr == 1 ? &ty1 : &ty2;
                tma_store_2d(tr, slo, hl * e.hd + 8 * gs, t0);
                tma_store_2d(tr, shi, hl * e.hd + e.hd / 2 + 8 * gs, t0);
            }
        } else {
            if (!live) continue;
            if (e.add) {   // the residual has arrived (its copy waited for the previous store's reads)
                mbar_wait(&rbar[cw], rph);
                rph ^= 1;
            } else {
                if (tid == 0) tma_store_wait_read();
                wg_bar(cw);
            }
            // d[4 i + e]: feature fw + 16 warp + g (g = lane / 4) at tokens 8 i + 2 q + e (q = lane % 4); d[4 i + 2 + e]:
            // feature + 8. Each 8 x 8 [feature][token] block goes (stmatrix .trans) to 16-byte chunk 2 warp (+ 1 for the
            // features + 8) of its tokens' 128-byte rows; x4: token groups i and i + 1, lanes 8 m .. 8 m + 7 address
            // matrix m's rows. The residual comes back through the same addresses (ldmatrix .trans) in the same layout.
            const float *bp = sg == 0 ? e.bias[0] : sg == 1 ? e.bias[1] : e.bias[2];
            const int fr = 16 * warp + lane / 4, mi = lane / 8, r8 = lane % 8;
            const float b0 = bp && fw + fr < N ? bp[col + fr] : 0.0f, b1 = bp && fw + fr + 8 < N ? bp[col + fr + 8] : 0.0f;
            auto ep = [&](float x0, float x1, float b, uint32_t r) {
                x0 += b;
                x1 += b;
                if (e.gelu) { x0 = gelu_tanh(x0); x1 = gelu_tanh(x1); }
                if (e.add) { const float2 v = bf2_to_f2(r); x0 += v.x; x1 += v.y; }
                return f2_to_bf2(x0, x1);
            };
#pragma unroll
            for (int i = 0; i < BN / 8; i += 2) {
                uint8_t *p = sw + swz128(8 * (i + mi / 2) + r8, 2 * warp + (mi & 1));
                uint32_t r[4] = {0, 0, 0, 0};
                if (e.add) ldsm_x4_t(r, p);
                stsm_x4_t(p, ep(d[4 * i], d[4 * i + 1], b0, r[0]), ep(d[4 * i + 2], d[4 * i + 3], b1, r[1]),
                          ep(d[4 * i + 4], d[4 * i + 5], b0, r[2]), ep(d[4 * i + 6], d[4 * i + 7], b1, r[3]));
            }
            if (e.add && ov) {   // the last token tile: its first ov rows are the previous tile's (which adds to them)
                wg_bar(cw);
                const int nc = min(8, (N - fw) / 8);   // 16-byte chunks of this warpgroup's features inside N
                for (int i = tid; i < (BN - ov) * 8; i += 128) {
                    const int r = ov + i / 8, q = i % 8;
                    if (q < nc) *(uint4 *)(e.y + (size_t)(t0 + r) * e.ldy + fw + 8 * q) = *(const uint4 *)(sw + swz128(r, q));
                }
                fence_proxy_async();   // these reads before the next residual copy's writes
                wg_bar(cw);
            } else {
                fence_proxy_async();
                wg_bar(cw);
                if (tid == 0) tma_store_2d(ty, sw, col, t0);
            }
        }
    }
    if (MODE != WP_PLAIN ? threadIdx.x == 128 : tid == 0) tma_store_wait();
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

// The 5-D view of the adjacent [q; k; v] rows (row r of head h at w + (h hd + r) ldw) for the rope mode: dims {k, row of
// an 8-row group, half of the head (hd / 2 rows apart), group, head}, boxes {64, 8, 2, 8, 1} = 64 RoPE pairs.
static int wp_rope_map(CUtensorMap *m, const void *w, int N, int K, int ldw, int hd) {
    PFN_cuTensorMapEncodeTiled_v12000 enc = cuda_tensor_map_encoder();
    const cuuint64_t row = (cuuint64_t)ldw * 2;
    cuuint64_t dims[5] = {(cuuint64_t)K, 8, 2, (cuuint64_t)hd / 16, (cuuint64_t)N / hd};
    cuuint64_t strides[4] = {row, row * (hd / 2), row * 8, row * hd};
    cuuint32_t box[5] = {64, 8, 2, 8, 1}, es[5] = {1, 1, 1, 1, 1};
    return enc && enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 5, (void *)w, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The instantiated token tile widths: X(BN) for each.
#define WP_GATED_WIDTHS(X) X(136) X(152) X(168) X(184) X(200) X(216) X(232) X(248) X(256)
#define WP_PLAIN_WIDTHS(X) X(64) X(80) X(96) X(112) X(128) X(144) X(160) X(176) X(192) X(208) X(224) X(240) X(256)
#define WP_LIST(BN) BN,
static const int gu_widths[] = {WP_GATED_WIDTHS(WP_LIST)}, wp_widths[] = {WP_PLAIN_WIDTHS(WP_LIST)};

// The token tile width for M rows and tiles_f feature tiles: fewest rounds of tiles over the SMs times the width,
// with narrow tiles costing up to 40% more per token (200-wide gated tiles took 8% longer per token than 256-wide
// ones at M = 6304 in the lab); when every width fits in one round the narrowest wins. 0 if M is below every width.
static int wp_pick(const int *widths, int n, int M, int tiles_f, int sms) {
    int best = 0;
    double bc = 0;
    for (int i = 0; i < n && widths[i] <= M; i++) {
        const int bn = widths[i];
        const long long tiles = (long long)(M + bn - 1) / bn * tiles_f, rounds = (tiles + sms - 1) / sms;
        const double cost = (double)rounds * bn * (1.0 + 0.4 * (256 - bn) / 256);
        if (!best || cost <= bc) { best = bn; bc = cost; }
    }
    return best;
}

template <int BN, int MODE>
static void wp_launch(cuda_ctx *c, const CUtensorMap &tw, const CUtensorMap &tx, const CUtensorMap *ty, int M, int N, int K,
                      const wp_epi &e) {
    const int tiles_t = (M + BN - 1) / BN, tiles = tiles_t * ((N + (MODE == WP_GATED ? GU_FT : WP_FT) - 1) / (MODE == WP_GATED ? GU_FT : WP_FT));
    // panels of ~8 MB of X: at B = 64 (M = 50432) one sweep of the weights per token tile read X (206 MB) from DRAM
    // for every weight tile, 9% slower end to end than cuBLASLt + the pass (session 20)
    const int g8 = (int)((8u << 20) / ((size_t)BN * K * 2)) + 1, G = g8 < tiles_t ? g8 : tiles_t;
    cuda_launch(c, wprod_kernel<BN, MODE>, dim3(tiles < c->sms ? tiles : c->sms), dim3(384), wp_cfg<BN, MODE>::smem, tw, tx,
                ty[0], ty[1], ty[2], M, N, K, G, e);
}

static long gu_launches, wp_launches;   // (atomic: contexts may run on several threads)
extern "C" long cuda_gateup_launches(void) { return __atomic_load_n(&gu_launches, __ATOMIC_RELAXED); }
extern "C" long cuda_wprod_launches(void) { return __atomic_load_n(&wp_launches, __ATOMIC_RELAXED); }
static int gu_forced, wp_forced;   // the op tests' widths (cuda_gateup_force, cuda_wprod_force)
extern "C" void cuda_gateup_force(int bn) { __atomic_store_n(&gu_forced, bn, __ATOMIC_RELAXED); }
extern "C" void cuda_wprod_force(int bn) { __atomic_store_n(&wp_forced, bn, __ATOMIC_RELAXED); }
int cuda_wprod_on(cuda_ctx *c, int what) { return __atomic_load_n(&wp_forced, __ATOMIC_RELAXED) || (c->wprod & what); }

// The width: the caller's, else the op tests' forced one, else picked for M (0: none fits).
static int wp_width(const cuda_ctx *c, int bn, int M, int N) {
    const int forced = __atomic_load_n(&wp_forced, __ATOMIC_RELAXED);
    if (!bn && forced > 0) bn = forced;
    return bn ? bn : wp_pick(wp_widths, (int)(sizeof wp_widths / sizeof *wp_widths), M, (N + WP_FT - 1) / WP_FT, c->sms);
}

int cuda_gateup(cuda_ctx *c, bf16 *out, const bf16 *x, int ldx, const bf16 *w, int M, int F, int K, int bn) {
    if (!c->gateup || M <= 0 || F % GU_FT || K % 8 || ldx % 8 || K > ldx || ((uintptr_t)out | (uintptr_t)x | (uintptr_t)w) % 16)
        return 0;
    if (!bn) bn = __atomic_load_n(&gu_forced, __ATOMIC_RELAXED);
    if (!bn) bn = wp_pick(gu_widths, (int)(sizeof gu_widths / sizeof *gu_widths), M, F / GU_FT, c->sms);
    if (bn <= 0 || bn > M) return 0;
    CUtensorMap tw, tx, ty[3];
    if (!gu_weight_map(&tw, w, F, K, K) || !cuda_tensor_map(&tx, x, M, K, ldx, bn) || !cuda_tensor_map(&ty[0], out, M, F, F, bn))
        return 0;
    ty[1] = ty[2] = ty[0];
    const wp_epi e = {};
    switch (bn) {
#define WP_CASE(BN) case BN: wp_launch<BN, WP_GATED>(c, tw, tx, ty, M, F, K, e); break;
    WP_GATED_WIDTHS(WP_CASE)
    default: return 0;
    }
    __atomic_add_fetch(&gu_launches, 1, __ATOMIC_RELAXED);
    return 1;
}

int cuda_wprod(cuda_ctx *c, const wprod_out *o, const bf16 *x, int ldx, const bf16 *w, int ldw, int M, int N, int K, int gelu,
               int add, int bn) {
    if (M <= 0 || N <= 0 || N % 8 || K < 1 || K % 8 || ldx % 8 || ldw % 8 || K > ldx || K > ldw ||
        ((uintptr_t)x | (uintptr_t)w) % 16 || o->nseg < 1 || o->nseg > 3 || (add && (gelu || o->nseg != 1)))
        return 0;
    if (o->nseg == 1 ? o->seg != N : o->seg % WP_FT || o->seg * o->nseg != N) return 0;
    for (int i = 0; i < o->nseg; i++)
        if ((uintptr_t)o->y[i] % 16) return 0;
    bn = wp_width(c, bn, M, N);
    if (bn <= 0 || bn > M) return 0;
    CUtensorMap tw, tx, ty[3];
    if (!cuda_tensor_map(&tw, w, N, K, ldw, WP_FT) || !cuda_tensor_map(&tx, x, M, K, ldx, bn)) return 0;
    for (int i = 0; i < 3; i++)
        if (!cuda_tensor_map(&ty[i], o->y[i < o->nseg ? i : 0], M, o->seg, o->seg, bn)) return 0;
    wp_epi e = {};
    for (int i = 0; i < o->nseg; i++) e.bias[i] = o->bias[i];
    e.seg = o->seg; e.gelu = gelu; e.add = add; e.y = o->y[0]; e.ldy = o->seg;
    switch (bn) {
#define WP_CASE_PLAIN(BN) case BN: wp_launch<BN, WP_PLAIN>(c, tw, tx, ty, M, N, K, e); break;
    WP_PLAIN_WIDTHS(WP_CASE_PLAIN)
    default: return 0;
    }
    __atomic_add_fetch(&wp_launches, 1, __ATOMIC_RELAXED);
    return 1;
}

int cuda_wprod_rope(cuda_ctx *c, bf16 *q, bf16 *k, bf16 *v, const bf16 *x, int ldx, const bf16 *w, int M, int nq, int nk, int nv,
                    int K, int hd, const int32_t *pos, int bn) {
    const int N = nq + nk + nv;
    if (M <= 0 || hd <= 0 || hd % 128 || nq <= 0 || nk <= 0 || nv <= 0 || nq % hd || nk % hd || nv % hd || K < 1 || K % 8 || ldx % 8 ||
        K > ldx || ((uintptr_t)x | (uintptr_t)w | (uintptr_t)q | (uintptr_t)k | (uintptr_t)v) % 16 || !pos)
        return 0;
    bn = wp_width(c, bn, M, N);
    if (bn <= 0 || bn > M) return 0;
    CUtensorMap tw, tx, ty[3];
    if (!wp_rope_map(&tw, w, N, K, K, hd) || !cuda_tensor_map(&tx, x, M, K, ldx, bn) || !cuda_tensor_map(&ty[0], q, M, nq, nq, bn) ||
        !cuda_tensor_map(&ty[1], k, M, nk, nk, bn) || !cuda_tensor_map(&ty[2], v, M, nv, nv, bn))
        return 0;
    wp_epi e = {};
    e.pos = pos; e.hd = hd; e.nqh = nq / hd; e.nkh = nk / hd;
    switch (bn) {
#define WP_CASE_ROPE(BN) case BN: wp_launch<BN, WP_ROPE>(c, tw, tx, ty, M, N, K, e); break;
    WP_PLAIN_WIDTHS(WP_CASE_ROPE)
    default: return 0;
    }
    __atomic_add_fetch(&wp_launches, 1, __ATOMIC_RELAXED);
    return 1;
}

template <int BN, int MODE> static void wp_setup(cuda_ctx *c) {
    CUDA_NOTE(c, cudaFuncSetAttribute(wprod_kernel<BN, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)wp_cfg<BN, MODE>::smem));
}
void cuda_wprod_setup(cuda_ctx *c) {   // the opt-in for more than 48 KB of shared memory (per device)
#define WP_SETUP_GATED(BN) wp_setup<BN, WP_GATED>(c);
#define WP_SETUP_PLAIN(BN) wp_setup<BN, WP_PLAIN>(c);
    WP_GATED_WIDTHS(WP_SETUP_GATED)
#define WP_SETUP_ROPE(BN) wp_setup<BN, WP_ROPE>(c);
    WP_PLAIN_WIDTHS(WP_SETUP_PLAIN)
    WP_PLAIN_WIDTHS(WP_SETUP_ROPE)
}
