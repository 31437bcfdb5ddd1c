// attention.cu — softmax attention over segments (backend.h `attention`, CPU twin cpu_attention).
// Per segment: logits = scale * Q.K^T by cuBLASLt into fp32 (`scores`), a masked softmax in fp32 that
// writes bf16 probabilities (the PT reference rounds probabilities to bf16 before P.V), then P.V.
//  - MQA (kv_heads == 1, Gemma): the query rows (token, head) form one [nq*H, hd] matrix, since all
//    heads share K and V, so each product is a single GEMM.
//  - MHA (kv_heads == heads, SigLIP): strided-batched GEMMs over the heads.
//  - A second key source (the suffix's own K/V, spec 3.10) fills logits columns [n1, n1+n2); P.V then
//    accumulates both parts in fp32 and rounds once.
// The softmax is one warp per logits row. The denoise steps' attention (few queries, suffix keys)
// takes the two-kernel decode path below instead.
#include <math.h>

#include "common.cuh"

// Row r of a segment: query j = r / row_div sees source-1 keys [0, n1) and source-2 keys
// [0, j < block0 ? block0 : n2). Probabilities of unseen keys are written as 0.
__global__ void softmax_kernel(bf16 *p, const float *s, int ld, int rows, int n1, int n2, int block0, int row_div) {
    int r = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (r >= rows) return;
    int nk = n1 + n2, j = r / row_div, lim = n1 + (n2 ? (j < block0 ? block0 : n2) : 0);
    const float *sr = s + (size_t)r * ld;
    bf16 *pr = p + (size_t)r * ld;
    float mx = -INFINITY;
    for (int t = lane; t < lim; t += 32) mx = fmaxf(mx, sr[t]);
    mx = warp_max(mx);
    float sum = 0;
    for (int t = lane; t < lim; t += 32) sum += expf(sr[t] - mx);
    sum = warp_sum(sum);
    float inv = 1.0f / sum;
    for (int t = lane; t < nk; t += 32) pr[t] = __float2bfloat16(t < lim ? expf(sr[t] - mx) * inv : 0.0f);
}

// ---- decode attention: the denoise steps' few queries (nq <= 16 per segment, MQA) against the prefix
// cache plus the suffix keys, split over key chunks (flash-decoding): attn_chunk_kernel gives each
// (chunk, head, segment) block 64 keys, computes its logits, a chunk-local softmax (max m, sum l) and
// the partial P.V in fp32; attn_combine_kernel rescales and sums the chunks. Two launches instead of
// the GEMM path's six. Probabilities stay fp32 (closer to the fp32 reference than the bf16 rounding).
enum { DEC_Q = 16, DEC_KC = 64, DEC_SEGS = 64 };

// Segment table passed by value (a kernel parameter, so a captured graph keeps it): per segment the
// first query row, the query count, the first source-1 key row and the source-1 key count.
struct dec_segs {
    int v[4 * DEC_SEGS];
};

__global__ void __launch_bounds__(256) attn_chunk_kernel(float *part, const bf16 *Q, const bf16 *K1, const bf16 *V1,
                                                         const bf16 *K2, const bf16 *V2, const dec_segs sg, int heads,
                                                         int hd, float scale, int block0, int nchunks) {
    const int *seg = sg.v;
    extern __shared__ float sm[];
    int c = blockIdx.x, h = blockIdx.y, s = blockIdx.z, tid = threadIdx.x;
    int q0 = seg[4 * s], nq = seg[4 * s + 1], k0 = seg[4 * s + 2], n1 = seg[4 * s + 3];
    int n2 = K2 ? nq : 0, nk = n1 + n2, t0 = c * DEC_KC, nt = nk - t0 < DEC_KC ? nk - t0 : DEC_KC;
    int ld = hd + 1, qw = heads * hd;
    float *ks = sm, *vs = ks + DEC_KC * ld, *qs = vs + DEC_KC * ld, *ps = qs + DEC_Q * hd;
    float *ob = part + (((size_t)s * heads + h) * nchunks + c) * DEC_Q * (hd + 2);   // [j][hd] then m[j], l[j]
    if (nt <= 0) {   // this segment has fewer chunks: an empty partial
        for (int j = tid; j < DEC_Q; j += blockDim.x) { ob[DEC_Q * hd + j] = -INFINITY; ob[DEC_Q * hd + DEC_Q + j] = 0; }
        return;
    }
    for (int i = tid; i < nt * hd; i += blockDim.x) {
        int t = i / hd, e = i % hd, g = t0 + t;
        const bf16 *kr = g < n1 ? K1 + (size_t)(k0 + g) * hd : K2 + (size_t)(q0 + g - n1) * hd;
        const bf16 *vr = g < n1 ? V1 + (size_t)(k0 + g) * hd : V2 + (size_t)(q0 + g - n1) * hd;
        ks[t * ld + e] = __bfloat162float(kr[e]);
        vs[t * ld + e] = __bfloat162float(vr[e]);
    }
    for (int i = tid; i < DEC_Q * hd; i += blockDim.x) {
        int j = i / hd, e = i % hd;
        qs[i] = j < nq ? __bfloat162float(Q[(size_t)(q0 + j) * qw + h * hd + e]) * scale : 0.0f;
    }
    __syncthreads();
    // logits: thread (j, tt) for keys tt, tt + 16, ... of the chunk
    {
        int j = tid / 16, tt = tid % 16;
        int lim = n1 + (j < block0 ? block0 : n2);   // keys [0, lim) visible to query j
        for (int t = tt; t < DEC_KC; t += 16) {
            float acc = -INFINITY;
            if (t < nt && j < nq && t0 + t < lim) {
                acc = 0;
                const float *kr = ks + t * ld, *qr = qs + j * hd;
                for (int e = 0; e < hd; e++) acc += qr[e] * kr[e];
            }
            ps[j * DEC_KC + t] = acc;
        }
    }
    __syncthreads();
    // chunk-local softmax statistics: one warp per query row
    int lane = tid & 31, warp = tid >> 5;
    for (int j = warp; j < DEC_Q; j += blockDim.x >> 5) {
        float mx = -INFINITY;
        for (int t = lane; t < DEC_KC; t += 32) mx = fmaxf(mx, ps[j * DEC_KC + t]);
        mx = warp_max(mx);
        float sum = 0;
        for (int t = lane; t < DEC_KC; t += 32) {
            float v = ps[j * DEC_KC + t];
            float p = v == -INFINITY ? 0.0f : expf(v - mx);
            ps[j * DEC_KC + t] = p;
            sum += p;
        }
        sum = warp_sum(sum);
        if (lane == 0) { ob[DEC_Q * hd + j] = mx; ob[DEC_Q * hd + DEC_Q + j] = sum; }
    }
    __syncthreads();
    for (int e = tid; e < hd; e += blockDim.x) {
        float acc[DEC_Q];
#pragma unroll
        for (int j = 0; j < DEC_Q; j++) acc[j] = 0;
        for (int t = 0; t < nt; t++) {
            float v = vs[t * ld + e];
#pragma unroll
            for (int j = 0; j < DEC_Q; j++) acc[j] += ps[j * DEC_KC + t] * v;
        }
#pragma unroll
        for (int j = 0; j < DEC_Q; j++) ob[j * hd + e] = acc[j];
    }
}

__global__ void attn_combine_kernel(bf16 *O, const float *part, const dec_segs sg, int heads, int hd, int nchunks) {
    const int *seg = sg.v;
    int j = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
    int q0 = seg[4 * s], nq = seg[4 * s + 1];
    if (j >= nq) return;
    const float *base = part + ((size_t)s * heads + h) * nchunks * DEC_Q * (hd + 2);
    float M = -INFINITY;
    for (int c = 0; c < nchunks; c++) M = fmaxf(M, base[(size_t)c * DEC_Q * (hd + 2) + DEC_Q * hd + j]);
    float L = 0;
    for (int c = 0; c < nchunks; c++) {
        const float *ob = base + (size_t)c * DEC_Q * (hd + 2);
        float m = ob[DEC_Q * hd + j];
        if (m != -INFINITY) L += ob[DEC_Q * hd + DEC_Q + j] * expf(m - M);
    }
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        float acc = 0;
        for (int c = 0; c < nchunks; c++) {
            const float *ob = base + (size_t)c * DEC_Q * (hd + 2);
            float m = ob[DEC_Q * hd + j];
            if (m != -INFINITY) acc += ob[j * hd + e] * expf(m - M);
        }
        O[((size_t)(q0 + j) * heads + h) * hd + e] = __float2bfloat16(acc / L);
    }
}

static size_t dec_smem(int hd) { return (size_t)(2 * DEC_KC * (hd + 1) + DEC_Q * hd + DEC_Q * DEC_KC) * sizeof(float); }

void cuda_attention_init(void) {
    cudaFuncSetAttribute(attn_chunk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dec_smem(256));
}

// Returns 0 when the decode path does not apply (the caller uses the GEMM path).
static int decode_attention(cuda_ctx *c, bf16 *O, const bf16 *Q, const pi0_attn *a) {
    int H = a->heads, hd = a->head_dim, maxq = 0, maxk = 0;
    if (a->kv_heads != 1 || hd > 256 || a->nseg > DEC_SEGS || !a->k2.p) return 0;
    for (int s = 0; s < a->nseg; s++) {
        int nq = a->q_off[s + 1] - a->q_off[s], nk = a->k_off[s + 1] - a->k_off[s] + (a->k2.p ? nq : 0);
        if (nq > maxq) maxq = nq;
        if (nk > maxk) maxk = nk;
    }
    int nchunks = cdiv(maxk, DEC_KC);
    if (maxq > DEC_Q || maxq == 0 || (size_t)a->nseg * H * nchunks * DEC_Q * (hd + 2) > c->scores_cap) return 0;
    dec_segs sg;
    for (int s = 0; s < a->nseg; s++) {
        sg.v[4 * s] = a->q_off[s];
        sg.v[4 * s + 1] = a->q_off[s + 1] - a->q_off[s];
        sg.v[4 * s + 2] = a->k_off[s];
        sg.v[4 * s + 3] = a->k_off[s + 1] - a->k_off[s];
    }
    dim3 g1(nchunks, H, a->nseg), g2(maxq, H, a->nseg);
    attn_chunk_kernel<<<g1, 256, dec_smem(hd), c->stream>>>(c->scores, Q, (const bf16 *)a->k1.p, (const bf16 *)a->v1.p,
                                                          (const bf16 *)a->k2.p, (const bf16 *)a->v2.p, sg, H, hd,
                                                          a->scale, a->block0, nchunks);
    LAUNCH_NOTE(c, "attn_chunk_kernel");
    attn_combine_kernel<<<g2, hd < 256 ? hd : 256, 0, c->stream>>>(O, c->scores, sg, H, hd, nchunks);
    LAUNCH_NOTE(c, "attn_combine_kernel");
    return 1;
}

void cuda_attention(pi0_backend *be, pt out, pt q, const pi0_attn *a) {
    cuda_ctx *c = CTX(be);
    if (c->err) return;
    int H = a->heads, hd = a->head_dim, kvw = a->kv_heads * hd, qw = H * hd;
    PI0_ASSERT(a->kv_heads == 1 || a->kv_heads == H);
    PI0_ASSERT(a->kv_heads == 1 || !a->k2.p);
    const bf16 *Q = (const bf16 *)q.p, *K1 = (const bf16 *)a->k1.p, *V1 = (const bf16 *)a->v1.p;
    const bf16 *K2 = (const bf16 *)a->k2.p, *V2 = (const bf16 *)a->v2.p;
    bf16 *O = (bf16 *)out.p;
    if (decode_attention(c, O, Q, a)) return;
    for (int s = 0; s < a->nseg; s++) {
        int q0 = a->q_off[s], nq = a->q_off[s + 1] - q0, k0 = a->k_off[s], n1 = a->k_off[s + 1] - k0;
        int n2 = K2 ? nq : 0, nk = n1 + n2, ld = (nk + 7) & ~7;   // rows padded to 16-byte multiples
        if (nq == 0) continue;
        const bf16 *qs = Q + (size_t)q0 * qw;
        bf16 *os = O + (size_t)q0 * qw;
        if ((size_t)nq * H * ld > c->scores_cap || (size_t)nq * H * hd > c->att_cap) {
            if (!c->err) {
                c->err = PI0_ERR_ARG;
                snprintf(c->errmsg, sizeof c->errmsg, "attention segment of %d queries x %d keys exceeds the reserved "
                         "scratch", nq, nk);
            }
            return;
        }
        int rows = nq * H;
        if (a->kv_heads == 1) {
            cuda_gemm(c, 1, rows, n1, hd, a->scale, qs, hd, CUDA_R_16BF, K1 + (size_t)k0 * kvw, kvw, CUDA_R_16BF, 0.0f,
                      c->scores, ld, CUDA_R_32F, NULL, 1, 0, 0, 0);
            if (n2)
                cuda_gemm(c, 1, rows, n2, hd, a->scale, qs, hd, CUDA_R_16BF, K2 + (size_t)q0 * kvw, kvw, CUDA_R_16BF,
                          0.0f, c->scores + n1, ld, CUDA_R_32F, NULL, 1, 0, 0, 0);
            softmax_kernel<<<cdiv((long long)rows * 32, 256), 256, 0, c->stream>>>(c->probs, c->scores, ld, rows, n1,
                                                                                 n2, a->block0, H);
            LAUNCH_NOTE(c, "softmax_kernel");
            if (!n2) {
                cuda_gemm(c, 0, rows, hd, n1, 1.0f, c->probs, ld, CUDA_R_16BF, V1 + (size_t)k0 * kvw, kvw, CUDA_R_16BF,
                          0.0f, os, hd, CUDA_R_16BF, NULL, 1, 0, 0, 0);
            } else {
                cuda_gemm(c, 0, rows, hd, n1, 1.0f, c->probs, ld, CUDA_R_16BF, V1 + (size_t)k0 * kvw, kvw, CUDA_R_16BF,
                          0.0f, c->att32, hd, CUDA_R_32F, NULL, 1, 0, 0, 0);
                cuda_gemm(c, 0, rows, hd, n2, 1.0f, c->probs + n1, ld, CUDA_R_16BF, V2 + (size_t)q0 * kvw, kvw,
                          CUDA_R_16BF, 1.0f, c->att32, hd, CUDA_R_32F, NULL, 1, 0, 0, 0);
                cuda_f32_to_bf16(c, os, c->att32, (size_t)rows * hd);
            }
        } else {
            // head h: logits_h [nq, n1] = Q_h . K_h^T, Q_h = columns [h*hd, (h+1)*hd) of the [nq, qw] rows
            cuda_gemm(c, 1, nq, n1, hd, a->scale, qs, qw, CUDA_R_16BF, K1 + (size_t)k0 * kvw, kvw, CUDA_R_16BF, 0.0f,
                      c->scores, ld, CUDA_R_32F, NULL, H, hd, hd, (long long)nq * ld);
            softmax_kernel<<<cdiv((long long)rows * 32, 256), 256, 0, c->stream>>>(c->probs, c->scores, ld, rows, n1,
                                                                                 0, 0, 1);
            LAUNCH_NOTE(c, "softmax_kernel");
            cuda_gemm(c, 0, nq, hd, n1, 1.0f, c->probs, ld, CUDA_R_16BF, V1 + (size_t)k0 * kvw, kvw, CUDA_R_16BF, 0.0f,
                      os, qw, CUDA_R_16BF, NULL, H, (long long)nq * ld, hd, hd);
        }
    }
}
