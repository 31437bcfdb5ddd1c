/* cpu_backend.c — the plain-C fp32 reference backend: the numerical oracle for every other backend.
 * Each op is the definition of its contract in backend.h, written to read like docs/model.md's formulas.
 * Weights stay in the checkpoint mapping (BF16/F16/F32) and are widened to fp32 tile by tile inside
 * the GEMM; all math is fp32. OpenMP splits rows or output features across cores; every output
 * element is computed by one thread in a fixed order, so results do not depend on the thread count. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backend.h"
#include "../util.h"
#include "cpu_decode.h"
#include "cpu_weights.h"

typedef struct {
    int n_threads;
    float *scratch;        /* per-thread attention scores / weight tiles */
    size_t scratch_per_thread;
    const cpu_wstore *ws;  /* NULL: no 8-bit weights */
    int8_t *xq;            /* an 8-bit product's input rows (reserve: max_rows x the store's max_k, int8 or int32) */
    float *xs;             /* and their scales */
    size_t xq_rows;
    int64_t xq_k;          /* the columns xq was sized for */
    int xq_f8;             /* and 4 bytes per value (E4M3's integers, cpu_f8_ints) */
} cpu_ctx;

#define CTX(be) ((cpu_ctx *)(be)->ctx)
/* Every parallel region runs the session's own thread count, whichever thread calls it: the per-thread scratch is
 * sized for it, and OpenMP's default belongs to the calling thread (a server worker or a Python thread does not
 * share the creating thread's setting; a larger default once wrote past the scratch). */
#define NT (CTX(be)->n_threads)
#define F(t) ((float *)(t).p)
#define I(t) ((int32_t *)(t).p)

enum { NB = 32, KB = 256 };   /* GEMM tile: 32 weight rows x 256 columns (32 KB fp32: L1/L2 resident) */

static size_t cpu_elem_size(int kind) { (void)kind; return 4; }

static pt cpu_alloc(pi0_backend *be, size_t n, int kind) {
    (void)be;
    pt t = {calloc(n ? n : 1, 4), kind};
    if (!t.p) pi0_fail(PI0_ERR_NOMEM, "out of memory allocating %zu floats", n);
    return t;
}

static void cpu_release(pi0_backend *be, pt t) { (void)be; free(t.p); }
static pi0_status cpu_sync(pi0_backend *be) { (void)be; return PI0_OK; }

static void cpu_destroy(pi0_backend *be) {
    if (!be) return;
    free(CTX(be)->scratch);
    free(CTX(be)->xq);
    free(CTX(be)->xs);
    free(be->ctx);
    free(be);
}

static pi0_status cpu_upload(pi0_backend *be, pt dst, const void *src, size_t n) {
    (void)be;
    memcpy(dst.p, src, n * 4);
    return PI0_OK;
}

static pi0_status cpu_download(pi0_backend *be, float *dst, pt src, size_t n) {
    (void)be;
    memcpy(dst, src.p, n * 4);
    return PI0_OK;
}

/* Element i of a weight as fp32. */
static inline float wv(const pi0_wt *w, int64_t i) {
    switch (w->dtype) {
    case PI0_DT_BF16: return pi0_bf16_to_f32(((const uint16_t *)w->data)[i]);
    case PI0_DT_F16: return pi0_f16_to_f32(((const uint16_t *)w->data)[i]);
    default: return ((const float *)w->data)[i];
    }
}

/* Widens n consecutive weight elements starting at i into dst. */
static void wrow(float *dst, const pi0_wt *w, int64_t i, int n) {
    const char *p = (const char *)w->data + (size_t)i * pi0_dtype_size(w->dtype);
    pi0_to_f32(dst, p, w->dtype, (size_t)n);
}

static void cpu_patch_embed(pi0_backend *be, pt out, pt img, pt sel, int n, const pi0_wt *w, const pi0_wt *b,
                            const pi0_wt *pos, int R, int P) {
    int G = R / P, T = G * G, Dv = (int)w->rows, CK = 3 * P * P;
    #pragma omp parallel num_threads(NT)
    {
        float *patch = malloc((size_t)CK * sizeof(float)), *wr = malloc((size_t)CK * sizeof(float));
        #pragma omp for collapse(2) schedule(static)
        for (int i = 0; i < n; i++)
            for (int t = 0; t < T; t++) {
                if (!patch || !wr) continue;
                const float *im = F(img) + (size_t)I(sel)[i] * R * R * 3;
                int py = t / G, px = t % G;
                /* gather the patch in the weight's (c, y, x) order from HWC pixels */
                for (int c = 0; c < 3; c++)
                    for (int y = 0; y < P; y++)
                        for (int x = 0; x < P; x++)
                            patch[(c * P + y) * P + x] = im[((size_t)(py * P + y) * R + (px * P + x)) * 3 + c];
                float *o = F(out) + ((size_t)i * T + t) * Dv;
                for (int d = 0; d < Dv; d++) {
                    wrow(wr, w, (int64_t)d * CK, CK);
                    float acc = 0;
                    for (int k = 0; k < CK; k++) acc += wr[k] * patch[k];
                    o[d] = acc + wv(b, d) + wv(pos, (int64_t)t * Dv + d);
                }
            }
        free(patch);
        free(wr);
    }
}

static void cpu_layernorm(pi0_backend *be, pt out, pt x, const pi0_wt *w, const pi0_wt *b, int M, int D, float eps) {
    #pragma omp parallel for num_threads(NT) schedule(static)
    for (int r = 0; r < M; r++) {
        const float *xr = F(x) + (size_t)r * D;
        float *o = F(out) + (size_t)r * D;
        double mean = 0, var = 0;
        for (int i = 0; i < D; i++) mean += xr[i];
        mean /= D;
        for (int i = 0; i < D; i++) var += (xr[i] - mean) * (xr[i] - mean);
        var /= D;
        float inv = (float)(1.0 / sqrt(var + eps));
        for (int i = 0; i < D; i++) o[i] = (float)(xr[i] - mean) * inv * wv(w, i) + wv(b, i);
    }
}

static float rms_inv(const float *x, int D, float eps) {
    double ss = 0;
    for (int i = 0; i < D; i++) ss += (double)x[i] * x[i];
    return (float)(1.0 / sqrt(ss / D + eps));
}

static void cpu_rmsnorm(pi0_backend *be, pt out, pt x, const pi0_wt *w, int M, int D, float eps) {
    #pragma omp parallel for num_threads(NT) schedule(static)
    for (int r = 0; r < M; r++) {
        const float *xr = F(x) + (size_t)r * D;
        float *o = F(out) + (size_t)r * D, inv = rms_inv(xr, D, eps);
        for (int i = 0; i < D; i++) o[i] = xr[i] * inv * (1.0f + wv(w, i));
    }
}

static void cpu_adarms(pi0_backend *be, pt out, pt x, pt mod, int rows_per_mod, int M, int D, float eps) {
    #pragma omp parallel for num_threads(NT) schedule(static)
    for (int r = 0; r < M; r++) {
        const float *xr = F(x) + (size_t)r * D, *m = F(mod) + (size_t)(r / rows_per_mod) * 3 * D;
        float *o = F(out) + (size_t)r * D, inv = rms_inv(xr, D, eps);
        for (int i = 0; i < D; i++) o[i] = xr[i] * inv * (1.0f + m[i]) + m[D + i];
    }
}

static float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}


/* GEMM micro-kernel: 8-lane vectors (GCC/clang vector extension), RB x rows times 2 weight rows per
 * pass, so each loaded vector feeds several multiply-adds. Every output element sees the same
 * operations in the same order whatever RB is, so results do not depend on batch size or threads. */
typedef float v8 __attribute__((vector_size(32)));

static inline v8 ld8(const float *p) {
    v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline float hsum8(v8 v) {
    return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

/* Dot product in a fixed order (8 lanes, then lanes summed pairwise, then the scalar tail): the same
 * result whatever the operands' alignment, so a row gives identical bits in any buffer or batch. */
static float dot(const float *a, const float *b, int n) {
    v8 acc = {0};
    int k = 0;
    for (; k + 8 <= n; k += 8) acc += ld8(a + k) * ld8(b + k);
    float s = hsum8(acc);
    for (; k < n; k++) s += a[k] * b[k];
    return s;
}

/* part[r * NB + j] += x_r[0:kk] . w_j[0:kk] for r < rb (rb <= 4), j < nn; kk is a multiple of 8. */
static void kernel_rows(float *part, const float *x, size_t ldx, int rb, const float *w, int nn, int kk) {
    for (int j = 0; j < nn; j += 2) {
        const float *w0 = w + (size_t)j * KB, *w1 = w + (size_t)(j + 1 < nn ? j + 1 : j) * KB;
        v8 a[4][2] = {{{0}}};
        for (int k = 0; k < kk; k += 8) {
            v8 b0 = ld8(w0 + k), b1 = ld8(w1 + k);
            for (int r = 0; r < rb; r++) {
                v8 xv = ld8(x + (size_t)r * ldx + k);
                a[r][0] += xv * b0;
                a[r][1] += xv * b1;
            }
        }
        for (int r = 0; r < rb; r++) {
            part[(size_t)r * NB + j] += hsum8(a[r][0]);
            if (j + 1 < nn) part[(size_t)r * NB + j + 1] += hsum8(a[r][1]);
        }
    }
}

static const cpu_q8 *q8_of(const cpu_ctx *c, const pi0_wt *W) {
    return c->ws && W->id >= 1 && W->id <= c->ws->n && c->ws->e[W->id].q ? &c->ws->e[W->id] : NULL;
}

static int32_t dot_i8(const int8_t *a, const int8_t *b, int n) {
    int32_t s = 0;
    for (int k = 0; k < n; k++) s += (int32_t)a[k] * b[k];
    return s;
}

/* linear with W in 8 bits (backend.h): each row of x quantised (quant_row_i8 / quant_row_f8), the exact products (int32;
 * E4M3: float64, rounded once to fp32), then quant_dequant and the epilogue. */
static void linear_8(pi0_backend *be, pt out, pt x, const cpu_q8 *w, const pi0_wt *b, int M, int N, int K,
                     enum pi0_epi epi) {
    cpu_ctx *c = CTX(be);
    PI0_ASSERT((size_t)M <= c->xq_rows && K <= c->xq_k && (!w->fp8 || c->xq_f8));
    int32_t *xi = (int32_t *)c->xq;   /* E4M3: each row's codes, then their integers in place (cpu_f8_ints) */
    #pragma omp parallel for num_threads(NT) schedule(static)
    for (int m = 0; m < M; m++) {
        if (!w->fp8) { c->xs[m] = quant_row_i8(F(x) + (size_t)m * K, K, c->xq + (size_t)m * K); continue; }
        uint8_t *codes = (uint8_t *)(xi + (size_t)m * K);
        c->xs[m] = quant_row_f8(F(x) + (size_t)m * K, K, codes);
        cpu_f8_ints(codes, xi + (size_t)m * K, K);
    }
    #pragma omp parallel for num_threads(NT) schedule(static)
    for (int n = 0; n < N; n++) {
        float bn = b ? wv(b, n) : 0.0f;
        int32_t *wi = (int32_t *)c->scratch + (size_t)omp_get_thread_num() * c->scratch_per_thread;
        if (w->fp8) {
            PI0_ASSERT(c->scratch_per_thread >= (size_t)K);   /* reserve sized it for the store's widest weight */
            cpu_f8_ints((const uint8_t *)w->q + (size_t)n * K, wi, K);
        }
        for (int m = 0; m < M; m++) {
            float acc = w->fp8 ? cpu_dot_f8(xi + (size_t)m * K, wi, K)
                               : (float)dot_i8(c->xq + (size_t)m * K, w->q + (size_t)n * K, K);
            float v = quant_dequant(acc, c->xs[m], w->s[n], bn);
            float *o = F(out) + (size_t)m * N + n;
            *o = epi == EPI_ADD ? *o + v : epi == EPI_GELU ? gelu_tanh(v) : v;
        }
    }
}

/* out (M, N) = x (M, K) . W[:, k0:k0+K]^T (+ b). Parallel over blocks of NB output features; each
 * thread widens an (NB, KB) weight tile to fp32 once per K block and streams all M rows past it,
 * 4 at a time. Partial sums per K block go to per-thread scratch (M, NB). */
static void cpu_linear(pi0_backend *be, pt out, pt x, const pi0_wt *W, const pi0_wt *b, int M, int N, int K, int k0,
                       enum pi0_epi epi) {
    cpu_ctx *c = CTX(be);
    const cpu_q8 *q8 = q8_of(c, W);
    if (q8) {
        PI0_ASSERT(k0 == 0 && K == W->cols);
        linear_8(be, out, x, q8, b, M, N, K, epi);
        return;
    }
    int nblocks = (N + NB - 1) / NB;
    float *y = F(out);
    const float *xs = F(x);
    #pragma omp parallel for num_threads(NT) schedule(dynamic, 1)
    for (int nb = 0; nb < nblocks; nb++) {
        float *tile = c->scratch + (size_t)omp_get_thread_num() * c->scratch_per_thread;
        float *part = tile + (size_t)NB * KB;
        int n0 = nb * NB, nn = N - n0 < NB ? N - n0 : NB;
        memset(part, 0, (size_t)M * NB * sizeof(float));
        for (int kb = 0; kb < K; kb += KB) {
            int kk = K - kb < KB ? K - kb : KB, kv = kk & ~7;
            for (int j = 0; j < nn; j++) wrow(tile + (size_t)j * KB, W, (int64_t)(n0 + j) * W->cols + k0 + kb, kk);
            for (int m = 0; m < M; m += 4)
                kernel_rows(part + (size_t)m * NB, xs + (size_t)m * K + kb, (size_t)K, M - m < 4 ? M - m : 4, tile, nn, kv);
            if (kv < kk)   /* K not a multiple of 8: scalar tail */
                for (int m = 0; m < M; m++)
                    for (int j = 0; j < nn; j++)
                        part[(size_t)m * NB + j] += dot(xs + (size_t)m * K + kb + kv, tile + (size_t)j * KB + kv, kk - kv);
        }
        for (int m = 0; m < M; m++)
            for (int j = 0; j < nn; j++) {
                float v = part[(size_t)m * NB + j] + (b ? wv(b, n0 + j) : 0.0f);
                float *o = y + (size_t)m * N + n0 + j;
                *o = epi == EPI_ADD ? *o + v : epi == EPI_GELU ? gelu_tanh(v) : v;
            }
    }
}

/* RoPE on M rows of `heads` heads (row stride ld, 0: heads * hd), in place; transpose: the rotation by minus the same
 * angles (rope_bwd). */
static void rope1(pi0_backend *be, pt x, pt pos, int M, int heads, int hd, int ld, int transpose) {
    size_t rs = ld ? (size_t)ld : (size_t)heads * hd;
    int half = hd / 2;
    #pragma omp parallel for num_threads(NT) schedule(static)
    for (int r = 0; r < M; r++) {
        float p = (float)I(pos)[r];
        for (int h = 0; h < heads; h++) {
            float *v = F(x) + (size_t)r * rs + (size_t)h * hd;
            for (int i = 0; i < half; i++) {
                /* docs/model.md 3.7: inv_freq_i = 10000^(-2i/hd), angle in fp32 */
                float inv_freq = (float)pow(10000.0, -2.0 * i / hd), th = p * inv_freq;
                float cs = cosf(th), sn = sinf(th), x1 = v[i], x2 = v[half + i];
                if (transpose) {
                    v[i] = x1 * cs + x2 * sn;
                    v[half + i] = x2 * cs - x1 * sn;
                } else {
                    v[i] = x1 * cs - x2 * sn;
                    v[half + i] = x2 * cs + x1 * sn;
                }
            }
        }
    }
}

static void cpu_attention(pi0_backend *be, pt out, pt q, const pi0_attn *a) {
    cpu_ctx *c = CTX(be);
    int H = a->heads, hd = a->head_dim, group = a->heads / a->kv_heads, kvw = a->kv_heads * hd;
    const int32_t *qo = a->q_off, *ko = a->k_off;
    int q_end = qo[a->nseg];
    #pragma omp parallel for num_threads(NT) collapse(2) schedule(dynamic, 8)
    for (int r = qo[0]; r < q_end; r++)   /* rows before q_off[0] are not this call's */
        for (int h = 0; h < H; h++) {
            float *sc = c->scratch + (size_t)omp_get_thread_num() * c->scratch_per_thread;
            int s = 0;
            while (qo[s + 1] <= r) s++;
            int j = r - qo[s], nq = qo[s + 1] - qo[s], n1 = attn_k1_end(a, s) - ko[s];
            if (a->k_len.p && ((const int32_t *)(void *)a->k_len.p)[s] < n1) n1 = ((const int32_t *)(void *)a->k_len.p)[s];
            int n2 = a->k2.p ? (j < a->block0 ? a->block0 : nq) : 0;
            if (a->tail) n1 -= a->tail - (j < a->block0 ? a->block0 : a->tail);   /* hide the unseen tail keys */
            int kvh = h / group;
            const float *qr = F(q) + ((size_t)r * H + h) * hd;
            float mx = -INFINITY;
            for (int t = 0; t < n1 + n2; t++) {
                const float *kr = t < n1 ? F(a->k1) + (size_t)(ko[s] + t) * kvw + kvh * hd
                                         : F(a->k2) + (size_t)(qo[s] + t - n1) * kvw + kvh * hd;
                sc[t] = dot(qr, kr, hd) * a->scale;
                if (sc[t] > mx) mx = sc[t];
            }
            float sum = 0;
            for (int t = 0; t < n1 + n2; t++) { sc[t] = expf(sc[t] - mx); sum += sc[t]; }
            float *o = F(out) + ((size_t)r * H + h) * hd;
            memset(o, 0, (size_t)hd * sizeof(float));
            for (int t = 0; t < n1 + n2; t++) {
                const float *vr = t < n1 ? F(a->v1) + (size_t)(ko[s] + t) * kvw + kvh * hd
                                         : F(a->v2) + (size_t)(qo[s] + t - n1) * kvw + kvh * hd;
                float p = sc[t] / sum;
                for (int e = 0; e < hd; e++) o[e] += p * vr[e];
            }
        }
}

static void cpu_rope(pi0_backend *be, pt q, int qh, pt k, int kh, pt pos, int M, int hd) {
    rope1(be, q, pos, M, qh, hd, 0, 0);
    if (k.p) rope1(be, k, pos, M, kh, hd, 0, 0);
}

static void cpu_gelu_mul(pi0_backend *be, pt out, pt g, pt u, int M, int Fd) {
    size_t n = (size_t)M * Fd;
    #pragma omp parallel for num_threads(NT) schedule(static)
    for (size_t i = 0; i < n; i++) F(out)[i] = gelu_tanh(F(g)[i]) * F(u)[i];
}

static void cpu_qkv(pi0_backend *be, pt q, pt k, pt v, pt y, const pi0_proj3 *p, int M, int K, pt pos, int hd,
                    const pi0_prenorm *pre) {
    pt out[3] = {q, k, v};
    y = prenorm_rows(be, y, pre, M, K);
    for (int i = 0; i < 3; i++) cpu_linear(be, out[i], y, p->w[i], p->b[i], M, (int)p->w[i]->rows, K, 0, EPI_STORE);
    if (pos.p) cpu_rope(be, q, (int)p->w[0]->rows / hd, k, (int)p->w[1]->rows / hd, pos, M, hd);
}

static void cpu_mlp_up_save(pi0_backend *be, pt out, pt g, pt u, pt y, const pi0_gemma_layer *L, int M, int Fd, int K,
                            const pi0_prenorm *pre) {
    y = prenorm_rows(be, y, pre, M, K);
    cpu_linear(be, g, y, &L->gate, NULL, M, Fd, K, 0, EPI_STORE);
    cpu_linear(be, u, y, &L->up, NULL, M, Fd, K, 0, EPI_STORE);
    cpu_gelu_mul(be, out, g, u, M, Fd);
}

/* the gate product in out, the up product in tmp */
static void cpu_mlp_up(pi0_backend *be, pt out, pt tmp, pt y, const pi0_gemma_layer *L, int M, int Fd, int K,
                       const pi0_prenorm *pre) {
    cpu_mlp_up_save(be, out, out, tmp, y, L, M, Fd, K, pre);
}

static void cpu_embed(pi0_backend *be, pt out, pt rows, pt ids, int n, const pi0_wt *table, float scale) {
    int D = (int)table->cols;
    #pragma omp parallel for num_threads(NT) schedule(static)
    for (int i = 0; i < n; i++) {
        float *o = F(out) + (size_t)I(rows)[i] * D;
        wrow(o, table, (int64_t)I(ids)[i] * D, D);
        for (int d = 0; d < D; d++) o[d] *= scale;
    }
}

static void cpu_next_token(pi0_backend *be, pt ids, pt top2, pt x, const pi0_wt *W, int M, int V, int K, float temperature,
                           uint64_t seed) {
    cpu_next_token_rows(I(ids), top2.p ? F(top2) : NULL, F(x), W, M, V, K, temperature, seed, NT);
}

static void cpu_copy_rows(pi0_backend *be, pt dst, pt di, pt src, pt si, int n, int D) {
    (void)be;
    for (int i = 0; i < n; i++) {
        size_t d = di.p ? (size_t)I(di)[i] : (size_t)i, s = si.p ? (size_t)I(si)[i] : (size_t)i;
        memcpy(F(dst) + d * D, F(src) + s * D, (size_t)D * sizeof(float));
    }
}

static void cpu_linear_gated(pi0_backend *be, pt x, pt tmp, pt y, const pi0_wt *W, int M, int D, int K, pt gate,
                             int gate_stride, int rows_per_gate) {
    cpu_linear(be, tmp, y, W, NULL, M, D, K, 0, EPI_STORE);
    #pragma omp parallel for num_threads(NT) schedule(static)
    for (int r = 0; r < M; r++) {
        const float *g = F(gate) + (size_t)(r / rows_per_gate) * gate_stride;
        for (int i = 0; i < D; i++) F(x)[(size_t)r * D + i] += g[i] * F(tmp)[(size_t)r * D + i];
    }
}

static void cpu_residual_save(pi0_backend *be, pt x, pt save, pt tmp, pt y, const pi0_wt *W, int M, int N, int K,
                              pt gate, int gate_stride, int rows_per_gate) {
    if (gate.p) cpu_linear_gated(be, x, tmp, y, W, M, N, K, gate, gate_stride, rows_per_gate);
    else cpu_linear(be, x, y, W, NULL, M, N, K, 0, EPI_ADD);
    if (save.p) cpu_copy_rows(be, save, (pt){0}, x, (pt){0}, M, N);
}

static void cpu_add_rows(pi0_backend *be, pt x, pt v, int rows_per_vec, int M, int D, enum pi0_act act) {
    #pragma omp parallel for num_threads(NT) schedule(static)
    for (int r = 0; r < M; r++) {
        const float *vr = F(v) + (size_t)(r / rows_per_vec) * D;
        for (int i = 0; i < D; i++) {
            float z = F(x)[(size_t)r * D + i] + vr[i];
            F(x)[(size_t)r * D + i] = act == ACT_SWISH ? z / (1.0f + expf(-z)) : z;
        }
    }
}

static void cpu_axpy(pi0_backend *be, pt x, pt y, float alpha, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) F(x)[i] += alpha * F(y)[i];
}

/* LeRobot's guidance of one value in two halves (rtc_guide; rtc_error / rtc_correct for a sample of jac 0 call the
 * same two, so that its answer is the guide's bit for bit in any batch). volatile: no contraction, each operation
 * rounds to fp32 as PyTorch's elementwise ops do. */
static float guide_err(float v, float x, float y, float w, float t) {
    volatile float tv = t * v;
    volatile float x1 = x - tv;
    volatile float err = (y - x1) * w;
    return err;
}

static float guide_step(float v, float g, float err) {
    volatile float ge = g * err;
    return v - ge;
}

static void cpu_rtc_guide(pi0_backend *be, pt v, pt x, pt y, pt w, pt g, int steps, int k, float t, int rows, int H,
                          int A) {
    (void)be;
    for (int r = 0; r < rows; r++) {
        const float gk = F(g)[(size_t)(r / H) * steps + k];
        for (int a = 0; a < A; a++) {
            size_t i = (size_t)r * A + a;
            F(v)[i] = guide_step(F(v)[i], gk, guide_err(F(v)[i], F(x)[i], F(y)[i], F(w)[r], t));
        }
    }
}

/* ---- exact real-time chunking: the transposes of the expert's ops (backend.h); all math in double where a sum
 * runs over a row, each output element computed by one thread in a fixed order ---- */

/* out[m][j] = sum_i sum_n dy[m][c_i + n] W_i[n][k0 + j] (c_i: the rows of the weights before W_i): parallel over
 * blocks of output columns, the weights streamed row by row, one double sum per output over all of them */
static void linear_t_rows(pi0_backend *be, pt out, pt dy, int ld, const pi0_wt *const *Ws, int nw, int M, int K, int k0,
                          enum pi0_epi epi) {
    int nblocks = (K + KB - 1) / KB;
    #pragma omp parallel for num_threads(NT) schedule(dynamic, 1)
    for (int jb = 0; jb < nblocks; jb++) {
        int j0 = jb * KB, jj = K - j0 < KB ? K - j0 : KB;
        double *acc = calloc((size_t)M * jj, sizeof(double));
        float *wr = malloc((size_t)jj * sizeof(float));
        for (int i = 0, c = 0; acc && wr && i < nw; c += (int)Ws[i]->rows, i++)
            for (int n = 0; n < (int)Ws[i]->rows; n++) {
                wrow(wr, Ws[i], (int64_t)n * Ws[i]->cols + k0 + j0, jj);
                for (int m = 0; m < M; m++) {
                    double d = F(dy)[(size_t)m * ld + c + n];
                    if (d == 0) continue;
                    double *a = acc + (size_t)m * jj;
                    for (int j = 0; j < jj; j++) a[j] += d * wr[j];
                }
            }
        if (acc && wr) {
            for (int m = 0; m < M; m++)
                for (int j = 0; j < jj; j++) {
                    float *o = F(out) + (size_t)m * K + j0 + j;
                    *o = epi == EPI_ADD ? *o + (float)acc[(size_t)m * jj + j] : (float)acc[(size_t)m * jj + j];
                }
        }
        free(acc);
        free(wr);
    }
}

static void cpu_linear_t(pi0_backend *be, pt out, pt dy, const pi0_wt *W, int M, int N, int K, int k0, enum pi0_epi epi) {
    pi0_wt w = *W;
    w.rows = N;
    const pi0_wt *ws = &w;
    linear_t_rows(be, out, dy, N, &ws, 1, M, K, k0, epi);
}

static void cpu_linear_t_cat(pi0_backend *be, pt out, pt dy, int ld, const pi0_wt *const *W, int nw, int M, int K,
                             enum pi0_epi epi) {
    linear_t_rows(be, out, dy, ld, W, nw, M, K, 0, epi);
}

static void cpu_norm_bwd(pi0_backend *be, pt dx, pt dy, pt x, const pi0_wt *w, pt mod, int rows_per_mod, int M, int D,
                         float eps, enum pi0_epi epi) {
    #pragma omp parallel for num_threads(NT) schedule(static)
    for (int r = 0; r < M; r++) {
        const float *xr = F(x) + (size_t)r * D, *g = F(dy) + (size_t)r * D;
        const float *m = w ? NULL : F(mod) + (size_t)(r / rows_per_mod) * 3 * D;
        double ss = 0, dot_ = 0;
        for (int i = 0; i < D; i++) ss += (double)xr[i] * xr[i];
        double rr = 1.0 / sqrt(ss / D + eps);
        for (int i = 0; i < D; i++) dot_ += (1.0 + (w ? wv(w, i) : m[i])) * g[i] * xr[i];
        double c = rr * rr * rr / D * dot_;
        float *o = F(dx) + (size_t)r * D;
        for (int i = 0; i < D; i++) {
            float v = (float)(rr * (1.0 + (w ? wv(w, i) : m[i])) * g[i] - xr[i] * c);
            o[i] = epi == EPI_ADD ? o[i] + v : v;
        }
    }
}

static void cpu_gelu_mul_bwd(pi0_backend *be, pt dg, pt du, pt dy, pt g, pt u, int M, int Fd, int ld) {
    size_t n = (size_t)M * Fd;
    #pragma omp parallel for num_threads(NT) schedule(static)
    for (size_t i = 0; i < n; i++) {
        size_t o = ld ? i / Fd * ld + i % Fd : i;   /* dg, du rows of stride ld */
        double x = F(g)[i], c = 0.7978845608028654, th = tanh(c * (x + 0.044715 * x * x * x));
        double gelu = 0.5 * x * (1.0 + th), d = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * c * (1.0 + 3 * 0.044715 * x * x);
        double t = F(dy)[i];
        F(dg)[o] = (float)(t * F(u)[i] * d);
        F(du)[o] = (float)(t * gelu);
    }
}

static void cpu_swish_bwd(pi0_backend *be, pt dz, pt dy, pt z, int M, int D) {
    size_t n = (size_t)M * D;
    #pragma omp parallel for num_threads(NT) schedule(static)
    for (size_t i = 0; i < n; i++) {
        double x = F(z)[i], sg = 1.0 / (1.0 + exp(-x));
        F(dz)[i] = (float)(F(dy)[i] * sg * (1.0 + x * (1.0 - sg)));
    }
}

static void cpu_rope_bwd(pi0_backend *be, pt q, int qh, pt k, int kh, pt pos, int M, int hd, int ld) {
    rope1(be, q, pos, M, qh, hd, ld, 1);
    if (k.p) rope1(be, k, pos, M, kh, hd, ld, 1);
}

/* Two passes: (1) per query row and head, the softmax P over its visible keys, dP = dout . v, dS = P (dP - dout . o),
 * dq = scale dS . K, keeping P and dS of the segment's suffix keys; (2) per suffix key row, dk = scale sum dS q and
 * dv = sum P dout over the segment's query rows and the heads of its kv head, in a fixed order. */
static void cpu_attention_bwd(pi0_backend *be, pt dq, pt dk, pt dv, pt dout, pt q, const pi0_attn *a, int ld) {
    int H = a->heads, hd = a->head_dim, group = a->heads / a->kv_heads, kvw = a->kv_heads * hd;
    size_t ldq = ld ? (size_t)ld : (size_t)H * hd, ldkv = ld ? (size_t)ld : (size_t)kvw;   /* the outputs' rows */
    const int32_t *qo = a->q_off, *ko = a->k_off;
    int total_q = qo[a->nseg], smax = 0;
    for (int s = 0; s < a->nseg; s++) if (qo[s + 1] - qo[s] > smax) smax = qo[s + 1] - qo[s];
    int kmax = 0;
    for (int s = 0; s < a->nseg; s++) if (ko[s + 1] - ko[s] + smax > kmax) kmax = ko[s + 1] - ko[s] + smax;
    /* ps / ds: [row][head][suffix key] */
    double *ps = calloc((size_t)total_q * H * smax, sizeof(double)), *dss = calloc((size_t)total_q * H * smax, sizeof(double));
    if (!ps || !dss) { free(ps); free(dss); pi0_fail(PI0_ERR_NOMEM, "attention_bwd: out of memory"); return; }
    #pragma omp parallel num_threads(NT)
    {
        double *p = malloc((size_t)kmax * sizeof(double)), *o = malloc((size_t)hd * sizeof(double));
        #pragma omp for collapse(2) schedule(dynamic, 8)
        for (int r = 0; r < total_q; r++)
            for (int h = 0; h < H; h++) {
                if (!p || !o) continue;
                int s = 0;
                while (qo[s + 1] <= r) s++;
                int j = r - qo[s], nq = qo[s + 1] - qo[s], n1 = ko[s + 1] - ko[s], nsuf;
                int n2 = a->k2.p ? (j < a->block0 ? a->block0 : nq) : 0;
                if (a->tail) { nsuf = j < a->block0 ? a->block0 : a->tail; n1 -= a->tail; }   /* cache keys, then the suffix */
                else nsuf = n2;
                int kvh = h / group, nk = n1 + nsuf;
                const float *qr = F(q) + ((size_t)r * H + h) * hd, *g = F(dout) + ((size_t)r * H + h) * hd;
/* key t: source 1 for the cache keys and, in the tail layout, for the suffix keys that follow them; else source 2 */
#define KROW(T, t) ((t) < n1 || a->tail ? F(a->T##1) + (size_t)(ko[s] + (t)) * kvw + kvh * hd \
                                        : F(a->T##2) + (size_t)(qo[s] + (t) - n1) * kvw + kvh * hd)
                double mx = -INFINITY, sum = 0;
                for (int t = 0; t < nk; t++) {
                    const float *kr = KROW(k, t);
                    double d = 0;
                    for (int e = 0; e < hd; e++) d += (double)qr[e] * kr[e];
                    p[t] = d * a->scale;
                    if (p[t] > mx) mx = p[t];
                }
                for (int t = 0; t < nk; t++) { p[t] = exp(p[t] - mx); sum += p[t]; }
                for (int e = 0; e < hd; e++) o[e] = 0;
                for (int t = 0; t < nk; t++) {
                    const float *vr = KROW(v, t);
                    p[t] /= sum;
                    for (int e = 0; e < hd; e++) o[e] += p[t] * vr[e];
                }
                double dsum = 0;
                for (int e = 0; e < hd; e++) dsum += (double)g[e] * o[e];
                double *dqa = o;   /* o is no longer needed: reuse it for dq */
                for (int e = 0; e < hd; e++) dqa[e] = 0;
                for (int t = 0; t < nk; t++) {
                    const float *vr = KROW(v, t), *kr = KROW(k, t);
                    double dp = 0;
                    for (int e = 0; e < hd; e++) dp += (double)g[e] * vr[e];
                    double dsc = p[t] * (dp - dsum);
                    for (int e = 0; e < hd; e++) dqa[e] += dsc * kr[e];
                    if (t >= n1) {
                        size_t i = ((size_t)r * H + h) * smax + (t - n1);
                        ps[i] = p[t];
                        dss[i] = dsc;
                    }
                }
#undef KROW
                float *dqr = F(dq) + (size_t)r * ldq + (size_t)h * hd;
                for (int e = 0; e < hd; e++) dqr[e] = (float)(dqa[e] * a->scale);
            }
        free(p);
        free(o);
    }
    #pragma omp parallel num_threads(NT)
    {
        double *ak = malloc((size_t)hd * sizeof(double)), *av = malloc((size_t)hd * sizeof(double));
        #pragma omp for collapse(2) schedule(static)
        for (int kr = 0; kr < total_q; kr++)      /* suffix key row kr (aligned with query row kr) */
            for (int kvh = 0; kvh < a->kv_heads; kvh++) {
                if (!ak || !av) continue;
                int s = 0;
                while (qo[s + 1] <= kr) s++;
                int t = kr - qo[s];
                for (int e = 0; e < hd; e++) ak[e] = av[e] = 0;
                for (int r = qo[s]; r < qo[s + 1]; r++)
                    for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                        size_t i = ((size_t)r * H + h) * smax + t;
                        const float *qr = F(q) + ((size_t)r * H + h) * hd, *g = F(dout) + ((size_t)r * H + h) * hd;
                        if (dss[i] != 0) for (int e = 0; e < hd; e++) ak[e] += dss[i] * qr[e];
                        if (ps[i] != 0) for (int e = 0; e < hd; e++) av[e] += ps[i] * g[e];
                    }
                float *dkr = F(dk) + (size_t)kr * ldkv + kvh * hd, *dvr = F(dv) + (size_t)kr * ldkv + kvh * hd;
                for (int e = 0; e < hd; e++) { dkr[e] = (float)(ak[e] * a->scale); dvr[e] = (float)av[e]; }
            }
        free(ak);
        free(av);
    }
    free(ps);
    free(dss);
}

static void cpu_scale_rows(pi0_backend *be, pt out, pt x, pt v, int stride, int rows_per_vec, int M, int D) {
    #pragma omp parallel for num_threads(NT) schedule(static)
    for (int r = 0; r < M; r++) {
        const float *g = F(v) + (size_t)(r / rows_per_vec) * stride;
        for (int i = 0; i < D; i++) F(out)[(size_t)r * D + i] = F(x)[(size_t)r * D + i] * g[i];
    }
}

/* A sample of jac 0 (LeRobot's form) takes rtc_guide's fp32 steps; one of jac != 0 the exact form in double, rounded
 * once (backend.h). */
static void cpu_rtc_error(pi0_backend *be, pt err, pt v, pt x, pt y, pt w, pt jac, float t, int rows, int H, int A) {
    (void)be;
    for (int r = 0; r < rows; r++) {
        int exact = F(jac)[r / H] != 0.0f;
        for (int a = 0; a < A; a++) {
            size_t i = (size_t)r * A + a;
            F(err)[i] = exact ? (float)(((double)F(y)[i] - ((double)F(x)[i] - (double)t * F(v)[i])) * F(w)[r])
                              : guide_err(F(v)[i], F(x)[i], F(y)[i], F(w)[r], t);
        }
    }
}

static void cpu_rtc_correct(pi0_backend *be, pt v, pt err, pt dx, pt g, pt jac, int steps, int k, float t, int rows,
                            int H, int A) {
    (void)be;
    for (int r = 0; r < rows; r++) {
        const float gk = F(g)[(size_t)(r / H) * steps + k], j = F(jac)[r / H];
        for (int a = 0; a < A; a++) {
            size_t i = (size_t)r * A + a;
            F(v)[i] = j != 0.0f ? (float)(F(v)[i] - (double)gk * (F(err)[i] - (double)j * t * F(dx)[i]))
                                : guide_step(F(v)[i], gk, F(err)[i]);
        }
    }
}

/* Scratch per thread: a GEMM weight tile (NB x KB) plus (M_max x NB) partial sums, or attention scores. */
static pi0_status cpu_reserve(pi0_backend *be, size_t max_rows, size_t max_keys, size_t max_scores, size_t max_fused) {
    cpu_ctx *c = CTX(be);
    (void)max_scores;   /* logits live in the per-thread row buffer */
    (void)max_fused;    /* projections are computed separately */
    size_t need = (size_t)NB * KB + max_rows * NB;
    if (max_keys > need) need = max_keys;
    if (c->ws && c->ws->fp8 && (size_t)c->ws->max_k > need) need = (size_t)c->ws->max_k;   /* a weight row's integers */
    if (c->ws && (max_rows > c->xq_rows || c->ws->max_k > c->xq_k || (c->ws->fp8 && !c->xq_f8))) {
        int8_t *q = realloc(c->xq, max_rows * (size_t)c->ws->max_k * (c->ws->fp8 ? 4 : 1));
        if (q) c->xq = q;
        float *xs = realloc(c->xs, max_rows * sizeof(float));
        if (xs) c->xs = xs;
        if (!q || !xs) return pi0_fail(PI0_ERR_NOMEM, "out of memory for the 8-bit products' input rows");
        c->xq_rows = max_rows;
        c->xq_k = c->ws->max_k;
        c->xq_f8 = c->ws->fp8;
    }
    if (need <= c->scratch_per_thread) return PI0_OK;
    float *s = realloc(c->scratch, need * (size_t)c->n_threads * sizeof(float));
    if (!s) return pi0_fail(PI0_ERR_NOMEM, "out of memory for CPU scratch (%zu floats per thread)", need);
    c->scratch = s;
    c->scratch_per_thread = need;
    return PI0_OK;
}

/* "AMD EPYC 9B14 (2 threads)" from /proc/cpuinfo. */
static void cpu_describe(char *buf, size_t n, int threads) {
    snprintf(buf, n, "cpu (%d threads)", threads);
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *p = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !p) continue;
        p += 2;
        p[strcspn(p, "\n")] = 0;
        for (char *q = p; *q; q++) if (*q == ',') *q = ';';   /* CSV-safe */
        snprintf(buf, n, "%.100s (%d threads)", p, threads);
        break;
    }
    fclose(f);
}

void cpu_use_weights(pi0_backend *be, const void *store) { CTX(be)->ws = store; }

pi0_status cpu_backend_create(pi0_backend **out, int n_threads, const void *weights) {
    *out = NULL;
    pi0_backend *be = calloc(1, sizeof *be);
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) { free(be); free(c); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    c->n_threads = n_threads > 0 ? n_threads : omp_get_max_threads();   /* not omp_set_num_threads: the caller's */
    c->ws = weights;
    be->name = "cpu";
    cpu_describe(be->device, sizeof be->device, c->n_threads);
    snprintf(be->driver, sizeof be->driver, "-");
    be->ctx = c;
    be->alloc = cpu_alloc;
    be->release = cpu_release;
    be->reserve = cpu_reserve;
    be->sync = cpu_sync;
    be->destroy = cpu_destroy;
    be->upload = cpu_upload;
    be->download = cpu_download;
    be->elem_size = cpu_elem_size;
    be->patch_embed = cpu_patch_embed;
    be->layernorm = cpu_layernorm;
    be->rmsnorm = cpu_rmsnorm;
    be->adarms = cpu_adarms;
    be->linear = cpu_linear;
    be->rope = cpu_rope;
    be->attention = cpu_attention;
    be->gelu_mul = cpu_gelu_mul;
    be->qkv = cpu_qkv;
    be->mlp_up = cpu_mlp_up;
    be->embed = cpu_embed;
    be->copy_rows = cpu_copy_rows;
    be->next_token = cpu_next_token;
    be->linear_gated = cpu_linear_gated;
    be->add_rows = cpu_add_rows;
    be->axpy = cpu_axpy;
    be->rtc_guide = cpu_rtc_guide;
    be->linear_t = cpu_linear_t;
    be->mlp_up_save = cpu_mlp_up_save;
    be->residual_save = cpu_residual_save;
    be->linear_t_cat = cpu_linear_t_cat;
    be->norm_bwd = cpu_norm_bwd;
    be->gelu_mul_bwd = cpu_gelu_mul_bwd;
    be->swish_bwd = cpu_swish_bwd;
    be->rope_bwd = cpu_rope_bwd;
    be->attention_bwd = cpu_attention_bwd;
    be->scale_rows = cpu_scale_rows;
    be->rtc_error = cpu_rtc_error;
    be->rtc_correct = cpu_rtc_correct;
    *out = be;
    return PI0_OK;
}
