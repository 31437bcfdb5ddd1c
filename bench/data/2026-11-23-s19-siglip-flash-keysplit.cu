// ---- short segments (SigLIP: 256 keys per image, head_dim 72): the keys split over two warps per row group ----
// A block owns FS_BM = 64 query rows of one head and holds the segment's whole K and V (nk <= FS_NK) in shared
// memory. Its 8 warps are 4 row groups x 2 key halves: warp w takes rows 16 (w % 4) and keys [128 (w / 4), +128),
// with one softmax pass over its half (S = Q K^T in registers, P = 2^(sl2 S - m) rounded to bf16 straight into P V's
// A operand), and the two halves' (m, l, O) merge through shared memory at the end. HD is padded to HDP with zero
// columns. Why: flash_attn_kernel took 12.6 us per SigLIP layer (3 images, B = 1, ncu), issuing an instruction every
// 3.3 cycles per scheduler from 1.5 warps, each a ~3000-instruction chain over 4 key tiles; one pass over all 256
// keys per warp took as long (12.8 us), being the same chains (RESULTS.md session 19). Two halves give each
// scheduler twice the warps with half the chain.
enum { FS_NK = 256, FS_BM = 64, FS_RG = FS_BM / 16, FS_W = 2 * FS_RG, FS_KH = FS_NK / 2 };
template <int HDP> static size_t fs_smem() { return (size_t)(FS_BM + 2 * FS_NK) * (HDP + 8) * 2; }

template <int HD, int HDP>
__global__ void __launch_bounds__(32 * FS_W, 2)
flash_short_kernel(bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v, int rows, int nk, int q_rs, int kv_rs,
                   long long q_seg, long long kv_seg, int kv_hs, float sl2) {
    constexpr int LD = HDP + 8, CH = HD / 8, CHP = HDP / 8, NT = HDP / 8, T = 32 * FS_W;
    extern __shared__ __align__(16) unsigned char fs_sm[];
    bf16 *Qs = (bf16 *)fs_sm, *Ks = Qs + FS_BM * LD, *Vs = Ks + FS_NK * LD;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int rg = warp % FS_RG, kh = warp / FS_RG, k0 = kh * FS_KH, r0 = blockIdx.x * FS_BM;
    const size_t qo = (size_t)blockIdx.z * q_seg + (size_t)blockIdx.y * HD;
    const size_t ko = (size_t)blockIdx.z * kv_seg + (size_t)blockIdx.y * kv_hs;
    q += qo; out += qo; k += ko; v += ko;
    // zeros: the pad columns of every row, and K / V rows past nk (finite: their S is masked, their P is 0)
    if constexpr (CHP > CH)
        for (int i = tid; i < (FS_BM + 2 * FS_NK) * (CHP - CH); i += T)
            *(uint4 *)(Qs + (i / (CHP - CH)) * LD + (CH + i % (CHP - CH)) * 8) = make_uint4(0, 0, 0, 0);
    for (int i = nk * CH + tid; i < FS_NK * CH; i += T) {
        int row = i / CH, col = (i % CH) * 8;
        *(uint4 *)(Ks + row * LD + col) = make_uint4(0, 0, 0, 0);
        *(uint4 *)(Vs + row * LD + col) = make_uint4(0, 0, 0, 0);
    }
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    for (int i = tid; i < FS_BM * CH; i += T) {
        int row = i / CH, col = (i % CH) * 8;
        bf16 *d = Qs + row * LD + col;
        if (r0 + row < rows) cp_async16(d, q + (size_t)(r0 + row) * q_rs + col);
        else *(uint4 *)d = make_uint4(0, 0, 0, 0);
    }
    for (int i = tid; i < nk * CH; i += T) {   // group 0: Q and K
        int row = i / CH, col = (i % CH) * 8;
        cp_async16(Ks + row * LD + col, k + (size_t)row * kv_rs + col);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    for (int i = tid; i < nk * CH; i += T) {   // group 1: V
        int row = i / CH, col = (i % CH) * 8;
        cp_async16(Vs + row * LD + col, v + (size_t)row * kv_rs + col);
    }
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 1;" ::: "memory");
    __syncthreads();
    const bool work = k0 < nk;   // warp-uniform: a half past the keys keeps m = -inf, l = 0, O = 0
    float o[NT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
#pragma unroll
    for (int n = 0; n < NT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0;
    uint32_t pa[FS_KH / 16][4];
    if (work) {
        float s[FS_KH / 8][4];
#pragma unroll
        for (int n = 0; n < FS_KH / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0;
#pragma unroll
        for (int kk = 0; kk < HDP / 16; kk++) {
            uint32_t qa[4];
            ldsm_x4(qa, Qs + (rg * 16 + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int np = 0; np < FS_KH / 16; np++) {   // key n-tiles 2 np, 2 np + 1 of the half
                uint32_t kb[4];
                ldsm_x4(kb, Ks + (k0 + np * 16 + (lane & 7) + (lane >> 4) * 8) * LD + kk * 16 + ((lane >> 3) & 1) * 8);
                mma16816(s[2 * np], qa, kb[0], kb[1]);
                mma16816(s[2 * np + 1], qa, kb[2], kb[3]);
            }
        }
        // this thread holds rows g (e = 0, 1) and g + 8 (e = 2, 3) of the row group
#pragma unroll
        for (int n = 0; n < FS_KH / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[n][e] = k0 + n * 8 + 2 * c + (e & 1) < nk ? s[n][e] * sl2 : -INFINITY;
                m[e >> 1] = fmaxf(m[e >> 1], s[n][e]);
            }
#pragma unroll
        for (int r = 0; r < 2; r++) {   // the half's key 0 is seen: m is finite
            m[r] = fmaxf(m[r], __shfl_xor_sync(0xffffffffu, m[r], 1));
            m[r] = fmaxf(m[r], __shfl_xor_sync(0xffffffffu, m[r], 2));
        }
#pragma unroll
        for (int n = 0; n < FS_KH / 8; n++) {
            float p0 = exp2f(s[n][0] - m[0]), p1 = exp2f(s[n][1] - m[0]);
            float p2 = exp2f(s[n][2] - m[1]), p3 = exp2f(s[n][3] - m[1]);
            l[0] += p0 + p1;
            l[1] += p2 + p3;
            pa[n >> 1][(n & 1) * 2] = f2_to_bf2(p0, p1);
            pa[n >> 1][(n & 1) * 2 + 1] = f2_to_bf2(p2, p3);
        }
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");   // V
    __syncthreads();
    if (work)
#pragma unroll
        for (int kk = 0; kk < FS_KH / 16; kk++) {
            if (k0 + kk * 16 >= nk) break;   // warp-uniform
#pragma unroll
            for (int np = 0; np < HDP / 16; np++) {   // output n-tiles 2 np, 2 np + 1
                uint32_t vb[4];
                ldsm_x4_t(vb, Vs + (k0 + kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + np * 16 + (lane >> 4) * 8);
                mma16816(o[2 * np], pa[kk], vb[0], vb[1]);
                mma16816(o[2 * np + 1], pa[kk], vb[2], vb[3]);
            }
        }
    // merge: the second half's warps leave (m, l, O) in the K region (free since the barrier above), element i of
    // lane x of row group rg at [i][rg][x] (conflict-free), and the first half's warps combine and store
    constexpr int NE = 4 * NT + 4;
    float *mg = (float *)Ks + rg * 32 + lane;
    static_assert(NE * FS_RG * 32 * 4 <= FS_NK * LD * 2, "merge scratch fits in the K region");
    if (kh == 1) {
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) mg[(4 * n + e) * FS_RG * 32] = o[n][e];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mg[(4 * NT + r) * FS_RG * 32] = m[r];
            mg[(4 * NT + 2 + r) * FS_RG * 32] = l[r];
        }
    }
    __syncthreads();
    if (kh == 1) return;
    float a0[2], a1[2];   // the two halves' weights relative to the merged maximum
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float m1 = mg[(4 * NT + r) * FS_RG * 32], mm = fmaxf(m[r], m1);
        a0[r] = exp2f(m[r] - mm);
        a1[r] = m1 == -INFINITY ? 0.0f : exp2f(m1 - mm);
        l[r] = l[r] * a0[r] + mg[(4 * NT + 2 + r) * FS_RG * 32] * a1[r];
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        l[r] = 1.0f / l[r];
    }
#pragma unroll
    for (int n = 0; n < NT; n++) {
        int col = n * 8 + 2 * c;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int row = r0 + rg * 16 + g + 8 * r;
            float v0 = (o[n][2 * r] * a0[r] + mg[(4 * n + 2 * r) * FS_RG * 32] * a1[r]) * l[r];
            float v1 = (o[n][2 * r + 1] * a0[r] + mg[(4 * n + 2 * r + 1) * FS_RG * 32] * a1[r]) * l[r];
            if (row < rows && col < HD) *(__nv_bfloat162 *)(out + (size_t)row * q_rs + col) = __floats2bfloat162_rn(v0, v1);
        }
    }
}

