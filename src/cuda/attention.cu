// attention.cu — softmax attention over segments (backend.h `attention`, CPU twin cpu_attention): the dispatcher
// and the generic path; the decode path is attn_decode.cu, flash attention attn_flash.cu (mma.sync) and
// attn_flash_wg.cu (wgmma).
// Its scratch is the one reserve sizes (backend.cu); attention's transpose for exact real-time chunking is
// attn_bwd.cu's.
#include <math.h>

#include "attention.cuh"

// Segments batched into one launch have equal lengths and evenly spaced keys (segment s + i's at k_off[s] + i x ks,
// ks >= n1: packed without k_end, checked with it). With k_len each segment's key count is read on the device: the
// decode and the flash (mma.sync) kernels and the generic MQA path's softmax take it, the wgmma flash kernel not.
// Three paths, tried in this order: decode attention (few query rows, below), flash attention (below), and the
// generic one for what neither takes (other head sizes, unaligned rows, PI0_CUDA_FLASH=0):
// per segment: logits = scale * Q.K^T by cuBLASLt into fp32 (`scores`), a masked softmax in fp32 that
// writes bf16 probabilities (the PT reference rounds probabilities to bf16 before P.V), then P.V.
//  - MQA (kv_heads == 1, Gemma): the query rows (token, head) form one [nq*H, hd] matrix, since all
//    heads share K and V, so each product is a single GEMM.
//  - MHA (kv_heads == heads, SigLIP): strided-batched GEMMs over the heads, or, for at least `heads`
//    equal images, a loop over the heads with the images as the batch.
//  - A second key source (the suffix's own K/V, docs/model.md 3.10) fills logits columns [n1, n1+n2); P.V then
//    accumulates both parts in fp32 and rounds once.
// The softmax is one warp per logits row.
// Few query rows against one key range (the denoise suffix: 11 queries x 8 heads = 88 rows, ~800 keys, MQA,
// head_dim 256; at B = 1 the suffix keys are the range's tail, at B > 1 a second source) go to decode_attn_kernel
// first: one launch for all equal segments (attn_decode.cu). At B = 8 the GEMM path was slower per expert layer
// (S in two GEMMs, softmax, P V in two GEMMs, a conversion: ncu, bench/RESULTS.md L70). Batches past the decode
// kernel's two waves take flash attention. Flash attention runs the prefix (head_dim 256, MQA, no suffix mask) on
// flash_wg_kernel (wgmma + tensor copies) and the rest on flash_attn_kernel (mma.sync; PI0_CUDA_FLASH=mma sends the
// prefix there too, as it does where a tensor map cannot be made).

// Launches flash attention for segments [s, s + g) of equal lengths when it applies (returns 1): nq queries and
// n1 source-1 keys each; with a second source (k2, v2: nq rows per segment) its keys are the tail of n1 + nq.
static int flash_attention(cuda_ctx *c, bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *k2,
                           const bf16 *v2, const pi0_attn *a, int g, int nq, int n1, int ks, const int *kl) {
    int H = a->heads, hd = a->head_dim, mqa = a->kv_heads == 1, kvw = a->kv_heads * hd;
    int nk = n1 + (k2 ? nq : 0), tail = k2 ? nq : a->tail;
    // a tail or second source only for MQA at head_dim 256 (the suffix kernel reads query j as row / H); device key
    // counts (kl) with neither
    if (!c->flash || (kl && (k2 || tail)) || (hd != 72 && hd != 256) || (!mqa && a->kv_heads != H) || (tail && (!mqa || hd != 256)) ||
        (k2 && a->tail) || nq < 1 || n1 < 1 || tail > nk ||
        ((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)k2 | (uintptr_t)v2 | (uintptr_t)out) & 15)
        return 0;
    int rows = mqa ? nq * H : nq, q_rs = mqa ? hd : H * hd;
    dim3 grid(cdiv(rows, FA_BM), mqa ? 1 : H, g);
    float sl2 = a->scale * 1.4426950408889634f;
    long long q_seg = (long long)nq * H * hd, kv_seg = (long long)ks * kvw, k2_seg = (long long)nq * kvw;
    // head_dim 256: 64-key tiles (169 KB: one block per SM) for one wave of blocks, 32-key tiles (101 KB: two
    // blocks per SM hide each other's latency) for more (batches)
    const int many = (long long)grid.x * grid.y * grid.z > c->sms;
    // the wgmma kernel's tensor maps take packed segments and host key counts; it scales the logits inside the
    // exponent after masking the keys past nk (-inf), which scale 0 (π0-FAST's all-masked rows: a uniform softmax)
    // would turn into NaN, so those go to the mma kernel, which scales first
    if (hd == 256 && mqa && !tail && c->flash == 1 && ks == n1 && !kl && a->scale > 0.0f &&
        cuda_flash_wg(c, out, q, k, v, g, rows, nk, sl2))
        return 1;
    cuda_flash_mma(c, grid, many, tail, out, q, k, v, k2, v2, rows, nk, a->block0, H, hd, q_rs, kvw, q_seg, kv_seg, k2_seg,
                   mqa ? 0 : hd, sl2, kl);
    return 1;
}

// The opt-in for more than 48 KB of shared memory (per device: called at backend create).
void cuda_attention_setup(cuda_ctx *c) {
    cuda_decode_attention_setup(c);
    cuda_flash_wg_setup(c);
    cuda_flash_mma_setup(c);
}

// Row r (of seg_rows per segment; several equal segments may be batched): query j = (r % seg_rows) /
// row_div sees source-1 keys [0, n1) and source-2 keys
// [0, j < block0 ? block0 : n2), or with nkd (k_len) keys [0, nkd[segment]). Probabilities of unseen keys are
// written as 0.
__global__ void softmax_kernel(bf16 *p, const float *s, int ld, int rows, int seg_rows, int n1, int n2, int block0,
                               int row_div, const int *nkd) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    int r = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (r >= rows) return;
    int nk = n1 + n2, j = (r % seg_rows) / row_div, lim = n1 + (n2 ? (j < block0 ? block0 : n2) : 0);
    if (nkd) lim = min(lim, nkd[r / seg_rows]);   // backend.h k_len (no second source then)
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

void cuda_attention(pi0_backend *be, pt out, pt q, const pi0_attn *a) {
    cuda_ctx *c = CTX(be);
    if (c->err) return;
    int H = a->heads, hd = a->head_dim, kvw = a->kv_heads * hd, qw = H * hd;
    PI0_ASSERT(a->kv_heads == 1 || a->kv_heads == H);
    PI0_ASSERT(a->kv_heads == 1 || !a->k2.p);
    const bf16 *Q = (const bf16 *)q.p, *K1 = (const bf16 *)a->k1.p, *V1 = (const bf16 *)a->v1.p;
    const bf16 *K2 = (const bf16 *)a->k2.p, *V2 = (const bf16 *)a->v2.p;
    bf16 *O = (bf16 *)out.p;
    for (int s = 0; s < a->nseg;) {
        int q0 = a->q_off[s], nq = a->q_off[s + 1] - q0, k0 = a->k_off[s], n1 = attn_k1_end(a, s) - k0;
        int n2 = K2 ? nq : 0, nk = n1 + n2, ld = (nk + 7) & ~7;   // rows padded to 16-byte multiples
        int rows = nq * H;
        const int *kl = a->k_len.p ? (const int *)a->k_len.p + s : NULL;
        // segments of equal lengths whose keys lie ks apart (ks >= n1: packed without k_end, a cache per sample
        // with it) go to one launch
        int ks = s + 1 < a->nseg && a->k_off[s + 1] - k0 > n1 ? a->k_off[s + 1] - k0 : n1, g = 1;
        while (s + g < a->nseg && g < 65535 && a->q_off[s + g + 1] - a->q_off[s + g] == nq &&   // grid.z <= 65535
               attn_k1_end(a, s + g) - a->k_off[s + g] == n1 && a->k_off[s + g] == k0 + g * ks)
            g++;
        if (nq && cuda_decode_attention(c, O + (size_t)q0 * qw, Q + (size_t)q0 * qw, K1 + (size_t)k0 * kvw,
                                        V1 + (size_t)k0 * kvw, K2 ? K2 + (size_t)q0 * kvw : NULL,
                                        V2 ? V2 + (size_t)q0 * kvw : NULL, g, nq, a, n1, ks, kl)) {
            s += g;
            continue;
        }
        if (nq && flash_attention(c, O + (size_t)q0 * qw, Q + (size_t)q0 * qw, K1 + (size_t)k0 * kvw, V1 + (size_t)k0 * kvw,
                                  K2 ? K2 + (size_t)q0 * kvw : NULL, V2 ? V2 + (size_t)q0 * kvw : NULL, a, g, nq, n1, ks,
                                  kl)) {
            s += g;
            continue;
        }
        if (kl && a->kv_heads != 1) {   // the generic MHA paths take host key counts only
            if (!c->err) {
                c->err = PI0_ERR_UNSUPPORTED;
                snprintf(c->errmsg, sizeof c->errmsg, "attention: key counts read on the device (k_len) with %d kv heads "
                         "(%d queries x %d keys, head_dim %d): only multi-query attention takes them", a->kv_heads, nq,
                         n1, hd);
            }
            return;
        }
        if ((size_t)rows * ld > c->scores_cap || (size_t)rows * hd > c->att_cap) {
            if (!c->err) {
                c->err = PI0_ERR_ARG;
                snprintf(c->errmsg, sizeof c->errmsg, "attention segment of %d queries x %d keys exceeds the reserved "
                         "scratch", nq, nk);
            }
            return;
        }
        // MQA: the following segments of the same lengths (equal-length samples of a batch) form one
        // strided batch, as far as the scratch holds their logits
        g = 1;
        if (a->kv_heads == 1)
            while (s + g < a->nseg && a->q_off[s + g + 1] - a->q_off[s + g] == nq &&
                   attn_k1_end(a, s + g) - a->k_off[s + g] == n1 && a->k_off[s + g] == k0 + g * ks &&
                   (size_t)(g + 1) * rows * ld <= c->scores_cap &&
                   (size_t)(g + 1) * rows * hd <= c->att_cap)
                g++;
        if (nq == 0) { s += g; continue; }
        const bf16 *qs = Q + (size_t)q0 * qw;
        bf16 *os = O + (size_t)q0 * qw;
        long long sq = (long long)rows * hd, sk1 = (long long)ks * kvw, sk2 = (long long)nq * kvw, ss = (long long)rows * ld;
        if (a->kv_heads == 1) {
            cuda_gemm(c, 1, rows, n1, hd, a->scale, qs, hd, CUDA_R_16BF, K1 + (size_t)k0 * kvw, kvw, CUDA_R_16BF, 0.0f,
                      c->scores, ld, CUDA_R_32F, NULL, g, sq, sk1, ss);
            if (n2)
                cuda_gemm(c, 1, rows, n2, hd, a->scale, qs, hd, CUDA_R_16BF, K2 + (size_t)q0 * kvw, kvw, CUDA_R_16BF,
                          0.0f, c->scores + n1, ld, CUDA_R_32F, NULL, g, sq, sk2, ss);
            // tail: the last `tail` keys of the range are suffix keys (mask of the second source)
            int m1 = n2 ? n1 : n1 - a->tail, m2 = n2 ? n2 : a->tail;
            cuda_launch(c, softmax_kernel, dim3(cdiv((long long)g * rows * 32, 256)), dim3(256), 0, c->probs, c->scores,
                        ld, g * rows, rows, m1, m2, a->block0, H, kl);
            if (!n2) {
                cuda_gemm(c, 0, rows, hd, n1, 1.0f, c->probs, ld, CUDA_R_16BF, V1 + (size_t)k0 * kvw, kvw, CUDA_R_16BF,
                          0.0f, os, hd, CUDA_R_16BF, NULL, g, ss, sk1, sq);
            } else {
                cuda_gemm(c, 0, rows, hd, n1, 1.0f, c->probs, ld, CUDA_R_16BF, V1 + (size_t)k0 * kvw, kvw, CUDA_R_16BF,
                          0.0f, c->att32, hd, CUDA_R_32F, NULL, g, ss, sk1, sq);
                cuda_gemm(c, 0, rows, hd, n2, 1.0f, c->probs + n1, ld, CUDA_R_16BF, V2 + (size_t)q0 * kvw, kvw,
                          CUDA_R_16BF, 1.0f, c->att32, hd, CUDA_R_32F, NULL, g, ss, sk2, sq);
                cuda_f32_to_bf16(c, os, c->att32, (size_t)g * rows * hd);
            }
        } else if (a->nseg - s >= H && nq == n1 && (size_t)nq * ld * 2 <= c->scores_cap) {
            // many equal segments (SigLIP over a batch of images): loop over heads, batch over segments
            int gi = 1;
            while (s + gi < a->nseg && a->q_off[s + gi + 1] - a->q_off[s + gi] == nq &&
                   attn_k1_end(a, s + gi) - a->k_off[s + gi] == n1 && a->k_off[s + gi] == k0 + gi * n1 &&
                   (size_t)(gi + 1) * nq * ld <= c->scores_cap)
                gi++;
            long long sx = (long long)nq * qw, sw = (long long)n1 * kvw, sl = (long long)nq * ld;
            for (int h = 0; h < H; h++) {
                cuda_gemm(c, 1, nq, n1, hd, a->scale, qs + h * hd, qw, CUDA_R_16BF, K1 + (size_t)k0 * kvw + h * hd, kvw,
                          CUDA_R_16BF, 0.0f, c->scores, ld, CUDA_R_32F, NULL, gi, sx, sw, sl);
                cuda_launch(c, softmax_kernel, dim3(cdiv((long long)gi * nq * 32, 256)), dim3(256), 0, c->probs,
                            c->scores, ld, gi * nq, nq, n1, 0, 0, 1, (const int *)NULL);
                cuda_gemm(c, 0, nq, hd, n1, 1.0f, c->probs, ld, CUDA_R_16BF, V1 + (size_t)k0 * kvw + h * hd, kvw,
                          CUDA_R_16BF, 0.0f, os + h * hd, qw, CUDA_R_16BF, NULL, gi, sl, sw, sx);
            }
            g = gi;
        } else {
            // head h: logits_h [nq, n1] = Q_h . K_h^T, Q_h = columns [h*hd, (h+1)*hd) of the [nq, qw] rows
            cuda_gemm(c, 1, nq, n1, hd, a->scale, qs, qw, CUDA_R_16BF, K1 + (size_t)k0 * kvw, kvw, CUDA_R_16BF, 0.0f,
                      c->scores, ld, CUDA_R_32F, NULL, H, hd, hd, (long long)nq * ld);
            cuda_launch(c, softmax_kernel, dim3(cdiv((long long)rows * 32, 256)), dim3(256), 0, c->probs, c->scores, ld,
                        rows, rows, n1, 0, 0, 1, (const int *)NULL);
            cuda_gemm(c, 0, nq, hd, n1, 1.0f, c->probs, ld, CUDA_R_16BF, V1 + (size_t)k0 * kvw, kvw, CUDA_R_16BF, 0.0f,
                      os, qw, CUDA_R_16BF, NULL, H, (long long)nq * ld, hd, hd);
        }
        s += g;
    }
}
