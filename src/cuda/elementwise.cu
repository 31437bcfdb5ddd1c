// elementwise.cu — the small ops of backend.h: patch embedding (docs/model.md 3.4, fp32 math), RoPE (3.7,
// half-split, fp32 angles), the gated MLP product gelu_tanh(g) * u, token embedding x sqrt(D) (3.6), row
// gathers/scatters with dtype conversion, gated residual (adaRMS), bias + swish rows, the Euler update; beside their
// forward ops, the transposes exact real-time chunking needs (docs/model.md 3.11): gelu_mul_bwd, rope_bwd,
// scale_rows (the gate's cotangent), swish_bwd. bf16 storage, fp32 math. Each kernel's CPU twin is the cpu_<op> of
// src/cpu/cpu_backend.c. Real-time chunking's guidance itself is rtc.cu's.
#include <math.h>

#include "common.cuh"

#define GRID(n) dim3(cdiv((long long)(n), 256)), dim3(256), 0

// V = 8 elements per thread (16-byte accesses) when n % 8 == 0 and the pointers allow.
template <int V>
__global__ void gelu_mul_kernel(bf16 *o, const bf16 *g, const bf16 *u, size_t n) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= n) return;
    float a[V], b[V];
    ldv<V>(a, g + i);
    ldv<V>(b, u + i);
#pragma unroll
    for (int e = 0; e < V; e++) a[e] = gelu_tanh(a[e]) * b[e];
    stv<V>(o + i, a);
}

void cuda_gelu_mul(pi0_backend *be, pt out, pt g, pt u, int M, int F) {
    cuda_ctx *c = CTX(be);
    size_t n = (size_t)M * F;
    if (c->err || !n) return;
    bf16 *o = (bf16 *)out.p;
    const bf16 *gp = (const bf16 *)g.p, *up = (const bf16 *)u.p;
    if (n % 8 == 0 && aligned16(o) && aligned16(gp) && aligned16(up)) cuda_launch(c, gelu_mul_kernel<8>, GRID(n / 8), o, gp, up, n);
    else cuda_launch(c, gelu_mul_kernel<1>, GRID(n), o, gp, up, n);
}

// gelu_tanh'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) c (1 + 3 0.044715 x^2), th = tanh(c (x + 0.044715 x^3)), c = sqrt(2/pi).
// V = 8 elements per thread (16-byte accesses) when F and the row stride are multiples of 8 and the pointers allow.
template <int V>
__global__ void gelu_mul_bwd_kernel(bf16 *dg, bf16 *du, const bf16 *dy, const bf16 *g, const bf16 *u, size_t n, int F,
                                    int ld) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= n) return;
    float x[V], uu[V], t[V], og[V], ou[V];
    ldv<V>(x, g + i);
    ldv<V>(uu, u + i);
    ldv<V>(t, dy + i);
#pragma unroll
    for (int e = 0; e < V; e++) {
        const float cc = 0.7978845608028654f;
        float th = tanhf(cc * (x[e] + 0.044715f * x[e] * x[e] * x[e]));
        float d = 0.5f * (1.0f + th) + 0.5f * x[e] * (1.0f - th * th) * cc * (1.0f + 3.0f * 0.044715f * x[e] * x[e]);
        og[e] = t[e] * uu[e] * d;
        ou[e] = t[e] * 0.5f * x[e] * (1.0f + th);
    }
    size_t o = i / F * ld + i % F;   // (F % V == 0: the V elements share a row)
    stv<V>(dg + o, og);
    stv<V>(du + o, ou);
}

void cuda_gelu_mul_bwd(pi0_backend *be, pt dg, pt du, pt dy, pt g, pt u, int M, int F, int ld) {
    cuda_ctx *c = CTX(be);
    size_t n = (size_t)M * F;
    if (c->err || !n) return;
    bf16 *a = (bf16 *)dg.p, *b = (bf16 *)du.p;
    const bf16 *t = (const bf16 *)dy.p, *gp = (const bf16 *)g.p, *up = (const bf16 *)u.p;
    if (!ld) ld = F;
    if (F % 8 == 0 && ld % 8 == 0 && aligned16(a) && aligned16(b) && aligned16(t) && aligned16(gp) && aligned16(up))
        cuda_launch(c, gelu_mul_bwd_kernel<8>, GRID(n / 8), a, b, t, gp, up, n, F, ld);
    else
        cuda_launch(c, gelu_mul_bwd_kernel<1>, GRID(n), a, b, t, gp, up, n, F, ld);
}

// Patch embedding as an fp32 GEMM (docs/model.md 3.4: convolution in fp32): im2col_kernel gathers each patch in
// the (c, y, x) order of the OIHW weight, cuBLASLt multiplies by the fp32 weights (plain fp32, no TF32),
// patch_finish_kernel adds bias and position embedding and rounds to bf16. Images in chunks that fit
// the attention scratch (reused here: no attention runs during the patch embedding).
__global__ void im2col_kernel(float *cols, const float *img, const int32_t *sel, int i0, int n, int R, int P) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    int G = R / P, T = G * G, CK = 3 * P * P;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)n * T * CK) return;
    int k = (int)(idx % CK), t = (int)((idx / CK) % T), i = (int)(idx / CK / T);
    int ch = k / (P * P), y = (k / P) % P, x = k % P, py = t / G, px = t % G;
    const float *im = img + (size_t)sel[i0 + i] * R * R * 3;
    cols[idx] = im[((size_t)(py * P + y) * R + (px * P + x)) * 3 + ch];
}

__global__ void patch_finish_kernel(bf16 *out, const float *y, const float *b, const bf16 *pos, int n, int T, int Dv) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)n * T * Dv) return;
    int d = (int)(idx % Dv), t = (int)((idx / Dv) % T);
    out[idx] = __float2bfloat16(y[idx] + b[d] + __bfloat162float(pos[(size_t)t * Dv + d]));
}

void cuda_patch_embed(pi0_backend *be, pt out, pt img, pt sel, int n, const pi0_wt *w, const pi0_wt *b,
                      const pi0_wt *pos, int R, int P) {
    cuda_ctx *c = CTX(be);
    if (c->err || n <= 0) return;
    int G = R / P, T = G * G, CK = 3 * P * P, Dv = (int)w->rows;
    size_t per_img = (size_t)T * (CK > Dv ? CK : Dv);
    int chunk = (int)(c->scores_cap / per_img < c->att_cap / per_img ? c->scores_cap / per_img : c->att_cap / per_img);
    if (chunk < 1) {
        if (!c->err) {
            c->err = PI0_ERR_ARG;
            snprintf(c->errmsg, sizeof c->errmsg, "patch embedding: scratch of %zu floats holds no image", c->scores_cap);
        }
        return;
    }
    for (int i0 = 0; i0 < n; i0 += chunk) {
        int m = n - i0 < chunk ? n - i0 : chunk;
        cuda_launch(c, im2col_kernel, GRID((size_t)m * T * CK), c->scores, (const float *)img.p, (const int32_t *)sel.p,
                    i0, m, R, P);
        cuda_gemm(c, 1, m * T, Dv, CK, 1.0f, c->scores, CK, CUDA_R_32F, wf32(c, w), CK, CUDA_R_32F, 0.0f, c->att32, Dv,
                  CUDA_R_32F, NULL, 1, 0, 0, 0);
        cuda_launch(c, patch_finish_kernel, GRID((size_t)m * T * Dv), (bf16 *)out.p + (size_t)i0 * T * Dv, c->att32,
                                                          wf32(c, b), wbf(c, pos), m, T, Dv);
    }
}

// Rows of q (qh heads) and k (kh heads) rotated by pos[r] * 10000^(-2i/hd): (x1, x2) ->
// (x1 cos - x2 sin, x2 cos + x1 sin); one thread per (row, head of q or k, i < hd/2), one launch for both.
// TRANSPOSE: the rotation by minus the same angle, RoPE's transpose (backend.h rope_bwd, exact RTC).
template <bool TRANSPOSE>
__global__ void rope_kernel(bf16 *q, int qh, bf16 *k, int kh, const int32_t *pos, int M, int hd, int ldq, int ldk) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    int half = hd / 2, heads = qh + kh;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)M * heads * half;
    if (idx >= n) return;
    int i = (int)(idx % half), h = (int)((idx / half) % heads), r = (int)(idx / half / heads);
    float inv_freq = (float)pow(10000.0, -2.0 * i / hd), th = (float)pos[r] * inv_freq;
    float cs = cosf(th), sn = sinf(th);
    bf16 *v = h < qh ? q + (size_t)r * ldq + (size_t)h * hd : k + (size_t)r * ldk + (size_t)(h - qh) * hd;
    float x1 = __bfloat162float(v[i]), x2 = __bfloat162float(v[half + i]);
    if (TRANSPOSE) {
        v[i] = __float2bfloat16(x1 * cs + x2 * sn);
        v[half + i] = __float2bfloat16(x2 * cs - x1 * sn);
    } else {
        v[i] = __float2bfloat16(x1 * cs - x2 * sn);
        v[half + i] = __float2bfloat16(x2 * cs + x1 * sn);
    }
}

static void launch_rope(pi0_backend *be, pt q, int qh, pt k, int kh, pt pos, int M, int hd, int ld, bool transpose) {
    cuda_ctx *c = CTX(be);
    if (!k.p) kh = 0;
    size_t n = (size_t)M * (qh + kh) * (hd / 2);
    if (c->err || !n) return;
    cuda_launch(c, transpose ? rope_kernel<true> : rope_kernel<false>, GRID(n), (bf16 *)q.p, qh, (bf16 *)k.p, kh,
                (const int32_t *)pos.p, M, hd, ld ? ld : qh * hd, ld ? ld : kh * hd);
}

void cuda_rope(pi0_backend *be, pt q, int qh, pt k, int kh, pt pos, int M, int hd) {
    launch_rope(be, q, qh, k, kh, pos, M, hd, 0, false);
}

void cuda_rope_bwd(pi0_backend *be, pt q, int qh, pt k, int kh, pt pos, int M, int hd, int ld) {
    launch_rope(be, q, qh, k, kh, pos, M, hd, ld, true);
}

__global__ void embed_kernel(bf16 *out, const int32_t *rows, const int32_t *ids, int n, const bf16 *table, int D,
                             float scale) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)n * D) return;
    int i = (int)(idx / D), d = (int)(idx % D);
    out[(size_t)rows[i] * D + d] = __float2bfloat16(__bfloat162float(table[(size_t)ids[i] * D + d]) * scale);
}

void cuda_embed(pi0_backend *be, pt out, pt rows, pt ids, int n, const pi0_wt *table, float scale) {
    cuda_ctx *c = CTX(be);
    int D = (int)table->cols;
    if (c->err || n <= 0) return;
    cuda_launch(c, embed_kernel, GRID((size_t)n * D), (bf16 *)out.p, (const int32_t *)rows.p, (const int32_t *)ids.p, n,
                                          wbf(c, table), D, scale);
}

template <typename TD, typename TS>
__global__ void copy_rows_kernel(TD *dst, const int32_t *di, const TS *src, const int32_t *si, int n, int D) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)n * D) return;
    int i = (int)(idx / D), d = (int)(idx % D);
    size_t dr = di ? (size_t)di[i] : (size_t)i, sr = si ? (size_t)si[i] : (size_t)i;
    stf<TD>(dst, dr * D + d, ldf<TS>(src, sr * D + d));
}

void cuda_copy_rows(pi0_backend *be, pt dst, pt di, pt src, pt si, int n, int D) {
    cuda_ctx *c = CTX(be);
    if (c->err || n <= 0) return;
    const int32_t *dix = (const int32_t *)di.p, *six = (const int32_t *)si.p;
    size_t total = (size_t)n * D;
    if (dst.kind == PT_ACT && src.kind == PT_ACT)
        cuda_launch(c, copy_rows_kernel<bf16, bf16>, GRID(total), (bf16 *)dst.p, dix, (const bf16 *)src.p, six, n, D);
    else if (dst.kind == PT_ACT)
        cuda_launch(c, copy_rows_kernel<bf16, float>, GRID(total), (bf16 *)dst.p, dix, (const float *)src.p, six, n, D);
    else if (src.kind == PT_ACT)
        cuda_launch(c, copy_rows_kernel<float, bf16>, GRID(total), (float *)dst.p, dix, (const bf16 *)src.p, six, n, D);
    else
        cuda_launch(c, copy_rows_kernel<float, float>, GRID(total), (float *)dst.p, dix, (const float *)src.p, six, n, D);
}

__global__ void gated_add_kernel(bf16 *x, const bf16 *y, const float *gate, int gate_stride, int rows_per_gate, int M,
                                 int D) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)M * D) return;
    int r = (int)(idx / D), d = (int)(idx % D);
    float g = gate[(size_t)(r / rows_per_gate) * gate_stride + d];
    x[idx] = __float2bfloat16(__bfloat162float(x[idx]) + g * __bfloat162float(y[idx]));
}

void cuda_gated_add(pi0_backend *be, pt x, pt y, pt gate, int gate_stride, int rows_per_gate, int M, int D) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0) return;
    cuda_launch(c, gated_add_kernel, GRID((size_t)M * D), (bf16 *)x.p, (const bf16 *)y.p, (const float *)gate.p, gate_stride,
                                              rows_per_gate, M, D);
}

__global__ void scale_rows_kernel(bf16 *out, const bf16 *x, const float *v, int stride, int rows_per_vec, int M, int D) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)M * D) return;
    int r = (int)(idx / D), i = (int)(idx % D);
    out[idx] = __float2bfloat16(__bfloat162float(x[idx]) * v[(size_t)(r / rows_per_vec) * stride + i]);
}

void cuda_scale_rows(pi0_backend *be, pt out, pt x, pt v, int stride, int rows_per_vec, int M, int D) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0 || D <= 0) return;
    cuda_launch(c, scale_rows_kernel, GRID((size_t)M * D), (bf16 *)out.p, (const bf16 *)x.p, (const float *)v.p, stride,
                rows_per_vec, M, D);
}

template <typename T>
__global__ void add_rows_kernel(T *x, const float *v, int rows_per_vec, int M, int D, int swish) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)M * D) return;
    int r = (int)(idx / D), d = (int)(idx % D);
    float z = ldf<T>(x, idx) + v[(size_t)(r / rows_per_vec) * D + d];
    stf<T>(x, idx, swish ? z / (1.0f + expf(-z)) : z);
}

void cuda_add_rows(pi0_backend *be, pt x, pt v, int rows_per_vec, int M, int D, enum pi0_act act) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0) return;
    if (x.kind == PT_F32)
        cuda_launch(c, add_rows_kernel<float>, GRID((size_t)M * D), (float *)x.p, (const float *)v.p, rows_per_vec, M, D,
                                                        act == ACT_SWISH);
    else
        cuda_launch(c, add_rows_kernel<bf16>, GRID((size_t)M * D), (bf16 *)x.p, (const float *)v.p, rows_per_vec, M, D,
                                                       act == ACT_SWISH);
}

// dz may be dy (the model runs it in place): each thread reads its element before it writes it.
__global__ void swish_bwd_kernel(float *dz, const float *dy, const float *z, size_t n) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = z[i], s = 1.0f / (1.0f + expf(-x));
    dz[i] = dy[i] * s * (1.0f + x * (1.0f - s));
}

void cuda_swish_bwd(pi0_backend *be, pt dz, pt dy, pt z, int M, int D) {
    cuda_ctx *c = CTX(be);
    size_t n = (size_t)M * D;
    if (c->err || !n) return;
    cuda_launch(c, swish_bwd_kernel, GRID(n), (float *)dz.p, (const float *)dy.p, (const float *)z.p, n);
}

__global__ void axpy_kernel(float *x, const float *y, float alpha, size_t n) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += alpha * y[i];
}

void cuda_axpy(pi0_backend *be, pt x, pt y, float alpha, size_t n) {
    cuda_ctx *c = CTX(be);
    if (c->err || !n) return;
    cuda_launch(c, axpy_kernel, GRID(n), (float *)x.p, (const float *)y.p, alpha, n);
}

__global__ void f32_to_bf16_kernel(bf16 *d, const float *s, size_t n) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d[i] = __float2bfloat16(s[i]);
}

void cuda_f32_to_bf16(cuda_ctx *c, bf16 *dst, const float *src, size_t n) {
    if (c->err || !n) return;
    cuda_launch(c, f32_to_bf16_kernel, GRID(n), dst, src, n);
}
