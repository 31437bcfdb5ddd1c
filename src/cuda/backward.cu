// backward.cu — exact real-time chunking's ops (backend.h, docs/model.md 3.11, the paper's form): the transposes of
// the action expert's ops, which carry the cotangent of one denoising step's velocity back to x_t. linear_t (cuBLASLt
// for ACT rows, a kernel or cuBLASLt in fp32 for F32 rows), norm_bwd, gelu_mul_bwd, swish_bwd, rope_bwd, attention_bwd,
// scale_rows, rtc_error, rtc_correct. CPU twins: cpu_<op> in src/cpu/cpu_backend.c (double sums, the definition).
// bf16 storage (ACT), fp32 math (double for the guided velocity's few values, as the twins: rtc_error / rtc_correct).
// No Hopper-only instruction (attention_bwd's products use mma.sync, compute capability 8.0): the Hopper and the portable
// path run the same kernels. Nothing here allocates: attention_bwd keeps its logits in the attention scratch that
// reserve sized (backend.cu).
// Layout legend: M rows, N out features of the forward product, K its in features, D width, H heads, Dh head dim.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mma.cuh"

#define GRID(n) dim3(cdiv((long long)(n), 256)), dim3(256), 0

// ---- linear_t: out (M, K) [op]= dy (M, N) . W[:, k0:k0+K], W row-major [N, cols] ----

// F32 rows (the action / time projections, docs/model.md 1.5: fp32). Block: LT_ROWS rows x LT_COLS output columns
// (lane: columns lane and lane + 32 of the block's 64), its 8 warps splitting the N products (warp w takes n = w, w + 8,
// ...) and meeting in shared memory in a fixed order (deterministic). dy staged through shared memory in chunks of
// LT_CHUNK, transposed ([n][row]), so one row value feeds the 16 products of a weight pair. K = 32 (action_in_w) uses
// 32 of the 64 columns: the split over N keeps 8 warps busy there.
enum { LT_ROWS = 8, LT_COLS = 64, LT_WARPS = 8, LT_CHUNK = 256 };
template <typename WT>
__global__ void __launch_bounds__(32 * LT_WARPS) linear_t_f32_kernel(float *out, const float *dy, const WT *w, int M,
                                                                     int N, int K, int ldw, int add) {
    __shared__ __align__(16) float ys[LT_CHUNK][LT_ROWS];
    __shared__ float part[LT_WARPS][LT_ROWS][LT_COLS];
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, m0 = blockIdx.y * LT_ROWS, j0 = blockIdx.x * LT_COLS;
    int rows = M - m0 < LT_ROWS ? M - m0 : LT_ROWS, ja = j0 + lane, jb = j0 + 32 + lane;
    float acc[LT_ROWS][2] = {};
    for (int n0 = 0; n0 < N; n0 += LT_CHUNK) {
        int nn = N - n0 < LT_CHUNK ? N - n0 : LT_CHUNK;
        __syncthreads();   // the previous chunk is read
        for (int idx = threadIdx.x; idx < LT_CHUNK * LT_ROWS; idx += blockDim.x) {
            int i = idx / LT_CHUNK, n = idx % LT_CHUNK;   // consecutive threads read consecutive dy values
            ys[n][i] = i < rows && n < nn ? dy[(size_t)(m0 + i) * N + n0 + n] : 0.0f;
        }
        __syncthreads();
        for (int n = warp; n < nn; n += LT_WARPS) {
            const WT *wr = w + (size_t)(n0 + n) * ldw;
            float wa = ja < K ? ldf(wr, ja) : 0.0f, wb = jb < K ? ldf(wr, jb) : 0.0f;
            float4 y0 = *(const float4 *)&ys[n][0], y1 = *(const float4 *)&ys[n][4];
            float yv[LT_ROWS] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
#pragma unroll
            for (int i = 0; i < LT_ROWS; i++) {
                acc[i][0] += yv[i] * wa;
                acc[i][1] += yv[i] * wb;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < LT_ROWS; i++) {
        part[warp][i][lane] = acc[i][0];
        part[warp][i][32 + lane] = acc[i][1];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < LT_ROWS * LT_COLS; idx += blockDim.x) {
        int i = idx / LT_COLS, jj = idx % LT_COLS, j = j0 + jj;
        if (i >= rows || j >= K) continue;
        float v = 0;
        for (int wp = 0; wp < LT_WARPS; wp++) v += part[wp][i][jj];
        float *o = out + (size_t)(m0 + i) * K + j;
        *o = add ? *o + v : v;
    }
}

// out [K, N] = w [N, K]^T, 32 x 32 tiles through shared memory (once per weight and session)
__global__ void transpose_kernel(bf16 *out, const bf16 *w, int N, int K) {
    __shared__ bf16 tile[32][33];
    int k0 = blockIdx.x * 32, n0 = blockIdx.y * 32;
    for (int i = threadIdx.y; i < 32; i += 8)
        if (n0 + i < N && k0 + threadIdx.x < K) tile[i][threadIdx.x] = w[(size_t)(n0 + i) * K + k0 + threadIdx.x];
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8)
        if (k0 + i < K && n0 + threadIdx.x < N) out[(size_t)(k0 + i) * N + n0 + threadIdx.x] = tile[threadIdx.x][i];
}

// The transposed bf16 copy [K, N] of W [N, K] (the whole matrix), keyed by its device address (a session's backend
// never outlives the model whose weights it reads), made at its first use; NULL where it cannot be had
// (out of memory, or first met while a graph is being captured: then cuBLASLt reads W as it is). The expert's
// transposes cost the weights' size again (π0: 0.6 GB), kept until the session ends.
static const bf16 *transposed(cuda_ctx *c, const pi0_wt *W, int N, int K) {
    for (int i = 0; i < c->n_wts; i++)
        if (c->wts[i].w == W->dev) return (const bf16 *)c->wts[i].wt;
    cudaStreamCaptureStatus cs;
    if (cudaStreamIsCapturing(c->stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) return NULL;
    if (c->n_wts == c->cap_wts) {
        int cap = c->cap_wts ? 2 * c->cap_wts : 256;
        void *p = realloc(c->wts, (size_t)cap * sizeof *c->wts);
        if (!p) return NULL;
        c->wts = (struct cuda_ctx::cuda_wt_t *)p;
        c->cap_wts = cap;
    }
    void *wt = NULL;
    if (cudaMalloc(&wt, (size_t)N * K * sizeof(bf16)) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    transpose_kernel<<<dim3(cdiv(K, 32), cdiv(N, 32)), dim3(32, 8), 0, c->stream>>>((bf16 *)wt, (const bf16 *)W->dev, N, K);
    c->wts[c->n_wts].w = W->dev;
    c->wts[c->n_wts++].wt = wt;
    return (const bf16 *)wt;
}

extern "C" void cuda_forget_transposes(pi0_backend *be) {
    cuda_ctx *c = CTX(be);
    cudaStreamSynchronize(c->stream);
    for (int i = 0; i < c->n_wts; i++) cudaFree(c->wts[i].wt);
    c->n_wts = 0;
}

void cuda_linear_t(pi0_backend *be, pt out, pt dy, const pi0_wt *W, int M, int N, int K, int k0, enum pi0_epi epi) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0 || K <= 0) return;
    int add = epi == EPI_ADD;
    if (dy.kind == PT_F32) {
        PI0_ASSERT(out.kind == PT_F32);
        // 64 rows and more (B >= 2 at the 50-step horizon): cuBLASLt in fp32 on the fp32 copy, as cuda_linear does
        // (gemm.cu: the kernel's shape suits few rows)
        if (M >= 64 && W->dev32) {
            cuda_gemm_ex(c, 0, M, K, N, 1.0f, dy.p, N, CUDA_R_32F, (const float *)W->dev32 + k0, (int)W->cols, CUDA_R_32F,
                         add ? 1.0f : 0.0f, out.p, K, CUDA_R_32F, NULL, 1, 0, 0, 0, 0, 0);
            return;
        }
        dim3 grid(cdiv(K, LT_COLS), cdiv(M, LT_ROWS));
        if (W->dev32 && W->dtype != PI0_DT_BF16)   // an F32 / F16 file: its own values, as cuda_linear reads them
            cuda_launch(c, linear_t_f32_kernel<float>, grid, dim3(32 * LT_WARPS), 0, (float *)out.p, (const float *)dy.p,
                        (const float *)W->dev32 + k0, M, N, K, (int)W->cols, add);
        else
            cuda_launch(c, linear_t_f32_kernel<bf16>, grid, dim3(32 * LT_WARPS), 0, (float *)out.p, (const float *)dy.p,
                        (const bf16 *)W->dev + k0, M, N, K, (int)W->cols, add);
        return;
    }
    PI0_ASSERT(dy.kind == PT_ACT && out.kind == PT_ACT);
    // few rows (the denoise at small batches): the product with a transposed copy of the whole weight, as a forward
    // linear, so that gemv.cu's few-row kernel streams it (cuBLASLt reading the weight untransposed took ~3x as long
    // at 51 rows: bench/RESULTS.md L136)
    const bf16 *wt = M <= GEMV_ROWS && k0 == 0 && K == W->cols ? transposed(c, W, N, K) : NULL;
    if (wt) {
        pi0_wt T = {};
        T.dtype = PI0_DT_BF16; T.rows = K; T.cols = N; T.dev = (void *)wt;
        cuda_linear(be, out, dy, &T, NULL, M, K, N, 0, epi);
        return;
    }
    // gemm.cu's trans_w = 0: the weight as it is stored, row-major [N, cols] read as [inner N, out K] with row
    // stride cols; EPI_ADD as beta = 1 (formed in fp32, rounded to bf16 once)
    cuda_gemm_ex(c, 0, M, K, N, 1.0f, dy.p, N, CUDA_R_16BF, (const bf16 *)W->dev + k0, (int)W->cols, CUDA_R_16BF,
                 add ? 1.0f : 0.0f, out.p, K, CUDA_R_16BF, NULL, 1, 0, 0, 0, 0, 0);
}

// ---- norm_bwd: one block of 256 threads per row; both row sums in fp32 (block_sum), then the row ----

__global__ void __launch_bounds__(256) norm_bwd_kernel(bf16 *dx, const bf16 *dy, const bf16 *x, const float *w,
                                                       const float *mod, int rows_per_mod, int D, float eps, int add) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    size_t off = (size_t)blockIdx.x * D;
    const float *a = w ? w : mod + (size_t)(blockIdx.x / rows_per_mod) * 3 * D;   // the scale part: a = 1 + a[i]
    float ss = 0, dot = 0;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float xv = __bfloat162float(x[off + i]);
        ss += xv * xv;
        dot += (1.0f + a[i]) * __bfloat162float(dy[off + i]) * xv;
    }
    ss = block_sum(ss);
    dot = block_sum(dot);
    float r = 1.0f / sqrtf(ss / D + eps), cf = r * r * r / D * dot;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float v = r * (1.0f + a[i]) * __bfloat162float(dy[off + i]) - __bfloat162float(x[off + i]) * cf;
        dx[off + i] = __float2bfloat16(add ? __bfloat162float(dx[off + i]) + v : v);
    }
}

void cuda_norm_bwd(pi0_backend *be, pt dx, pt dy, pt x, const pi0_wt *w, pt mod, int rows_per_mod, int M, int D,
                   float eps, enum pi0_epi epi) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0) return;
    cuda_launch(c, norm_bwd_kernel, dim3(M), dim3(256), 0, (bf16 *)dx.p, (const bf16 *)dy.p, (const bf16 *)x.p,
                w ? (const float *)w->dev32 : NULL, (const float *)mod.p, rows_per_mod, D, eps, (int)(epi == EPI_ADD));
}

// ---- elementwise: gelu_mul_bwd (ACT), swish_bwd (F32), scale_rows (ACT), rope_bwd (ACT, in place) ----

// gelu_tanh'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) c (1 + 3 0.044715 x^2), th = tanh(c (x + 0.044715 x^3)), c = sqrt(2/pi).
// V = 8 elements per thread (16-byte accesses) when n % 8 == 0 and the pointers allow.
template <int V>
__global__ void gelu_mul_bwd_kernel(bf16 *dg, bf16 *du, const bf16 *dy, const bf16 *g, const bf16 *u, size_t n) {
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
    stv<V>(dg + i, og);
    stv<V>(du + i, ou);
}

void cuda_gelu_mul_bwd(pi0_backend *be, pt dg, pt du, pt dy, pt g, pt u, int M, int F) {
    cuda_ctx *c = CTX(be);
    size_t n = (size_t)M * F;
    if (c->err || !n) return;
    bf16 *a = (bf16 *)dg.p, *b = (bf16 *)du.p;
    const bf16 *t = (const bf16 *)dy.p, *gp = (const bf16 *)g.p, *up = (const bf16 *)u.p;
    if (n % 8 == 0 && aligned16(a) && aligned16(b) && aligned16(t) && aligned16(gp) && aligned16(up))
        cuda_launch(c, gelu_mul_bwd_kernel<8>, GRID(n / 8), a, b, t, gp, up, n);
    else
        cuda_launch(c, gelu_mul_bwd_kernel<1>, GRID(n), a, b, t, gp, up, n);
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

// rope_kernel's angle (elementwise.cu: double pow for inv_freq, the fp32 product, cosf / sinf), rotated by its
// negative: (x1, x2) -> (x1 cos + x2 sin, x2 cos - x1 sin). One thread per (row, head of q or k, i < hd/2).
__global__ void rope_bwd_kernel(bf16 *q, int qh, bf16 *k, int kh, const int32_t *pos, int M, int hd) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    int half = hd / 2, heads = qh + kh;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)M * heads * half;
    if (idx >= n) return;
    int i = (int)(idx % half), h = (int)((idx / half) % heads), r = (int)(idx / half / heads);
    float inv_freq = (float)pow(10000.0, -2.0 * i / hd), th = (float)pos[r] * inv_freq;
    float cs = cosf(th), sn = sinf(th);
    bf16 *v = h < qh ? q + ((size_t)r * qh + h) * hd : k + ((size_t)r * kh + h - qh) * hd;
    float x1 = __bfloat162float(v[i]), x2 = __bfloat162float(v[half + i]);
    v[i] = __float2bfloat16(x1 * cs + x2 * sn);
    v[half + i] = __float2bfloat16(x2 * cs - x1 * sn);
}

void cuda_rope_bwd(pi0_backend *be, pt q, int qh, pt k, int kh, pt pos, int M, int hd) {
    cuda_ctx *c = CTX(be);
    if (!k.p) kh = 0;
    size_t n = (size_t)M * (qh + kh) * (hd / 2);
    if (c->err || !n) return;
    cuda_launch(c, rope_bwd_kernel, GRID(n), (bf16 *)q.p, qh, (bf16 *)k.p, kh, (const int32_t *)pos.p, M, hd);
}

// ---- the guided velocity: rows x A values (at most B * H * 32), in double as the CPU twins compute them ----

__global__ void rtc_error_kernel(float *err, const float *v, const float *x, const float *y, const float *w, float t,
                                 int rows, int A) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * A) return;
    err[i] = (float)(((double)y[i] - ((double)x[i] - (double)t * v[i])) * w[i / A]);
}

void cuda_rtc_error(pi0_backend *be, pt err, pt v, pt x, pt y, pt w, float t, int rows, int A) {
    cuda_ctx *c = CTX(be);
    if (c->err || rows < 1) return;
    cuda_launch(c, rtc_error_kernel, GRID((size_t)rows * A), (float *)err.p, (const float *)v.p, (const float *)x.p,
                (const float *)y.p, (const float *)w.p, t, rows, A);
}

__global__ void rtc_correct_kernel(float *v, const float *err, const float *dx, const float *g, const float *jac,
                                   int steps, int k, float t, int rows, int H, int A) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * A) return;
    int b = i / A / H;
    double gk = g[(size_t)b * steps + k], jt = (double)jac[b] * t;
    v[i] = (float)(v[i] - gk * (err[i] - jt * dx[i]));
}

void cuda_rtc_correct(pi0_backend *be, pt v, pt err, pt dx, pt g, pt jac, int steps, int k, float t, int rows, int H,
                      int A) {
    cuda_ctx *c = CTX(be);
    if (c->err || rows < 1) return;
    cuda_launch(c, rtc_correct_kernel, GRID((size_t)rows * A), (float *)v.p, (const float *)err.p, (const float *)dx.p,
                (const float *)g.p, (const float *)jac.p, steps, k, t, rows, H, A);
}

// ---- attention_bwd ----
// Pairs (query row r, head h) of a segment see its n1 cache keys (source 1, constants) and then the first
// lim = (j < block0 ? block0 : ns) of its ns suffix keys (source 2, or the last ns keys of the source-1 range).
// Four kernels per chunk of segments, the logits of every (pair, key) in the attention scratch (scores: s, then P;
// att32: dP = dout . v, then dS), row (r - r0) H + h of stride ld:
//  1. ab_logits_kernel: s = scale q . k and dP = dout . v on the tensor cores (mma m16n8k16, bf16 in, fp32 sums: the
//     inputs are bf16 already, so the products are exact and only the summation order differs from the CPU twin);
//     block = AB_PT pairs of one segment and kv head (for MQA: 4 query rows x 8 heads) x AB_KT keys;
//  2. ab_softmax_kernel: one warp per pair: the masked softmax P (fp32), dsum = sum P dP (= dout . o), dS = P (dP - dsum)
//     written back; unseen suffix keys get P = dS = 0;
//  3. ab_dq_kernel: dq = scale dS . K, block = 16 pairs x 64 head-dim columns, on the tensor cores with dS split into
//     bf16 hi + lo (below);
//  4. ab_dkv_kernel: dk = scale dS^T . q and dv = P^T . dout over the segment's pairs of the kv head, block = 16 suffix
//     key rows x 64 columns x one of the two products, the same way.
// Deterministic: no atomics, every sum in a fixed order. A chunk is as many segments as the scratch (reserve's
// one-segment logits: query rows x heads x keys) and the launch's segment table (AB_SEGS, passed by value: a CUDA graph
// bakes it in) hold. Measured (H200, bench over a CUDA graph, π0 B = 1: 51 query rows x 8 heads, 867 keys, head_dim
// 256): 36 us per call, the forward attention 11 us; under ncu 9.6 / 6.2 / 11.5 / 8.6 us for the four kernels. B = 64
// (one chunk of 64 segments, 816 + 51 keys): 1.1 ms, the forward 0.14 ms. A first version (the logits on the fp32
// units, one warp per pair summing dq and one block per suffix key summing dk / dv through dependent loads) took
// 345 us at B = 1: latency-bound chains on 51 SMs.
// AB_PT x AB_KT: logits block (pairs x keys); AB_RW: softmax warps per block; AB_NR: keys per lane held at once;
// AB_DC: head-dim columns of a dq / dk dv block (16 rows), AB_TW its warps
enum { AB_SEGS = 64, AB_PT = 32, AB_KT = 64, AB_RW = 4, AB_NR = 16, AB_DC = 64, AB_TW = 8 };

struct ab_segs {
    int n;                  // segments in the chunk
    int r0;                 // its first query row
    int qo[AB_SEGS + 1];    // query rows [qo[i], qo[i + 1]) of segment i (rows of q)
    int ko[AB_SEGS];        // its first source-1 key row
    int n1[AB_SEGS];        // its cache keys (source-1 keys before the suffix keys)
    int ns[AB_SEGS];        // its suffix keys
    int to[AB_SEGS + 1];    // its first block of ab_logits_kernel
    int mo[AB_SEGS + 1];    // its first block of ab_dq_kernel (along x)
    int uo[AB_SEGS + 1];    // its first block of ab_dkv_kernel (along x)
};

struct ab_args {
    const bf16 *q, *dout, *k1, *v1, *k2, *v2;   // k2 == NULL: the suffix keys are the source-1 range's tail
    bf16 *dq, *dk, *dv;
    float *S, *G;                                // scratch rows: s -> P, dP -> dS
    int H, group, kv_heads, hd, ld, block0;
    float scale;
};

// The segment s whose range [off[s], off[s + 1]) holds x (off ascending from off[0] <= x; empty segments skipped): a
// binary search (a linear one cost ~200 instructions per warp at B = 64).
__device__ __forceinline__ int ab_find(const int *off, int n, int x) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (off[mid] <= x) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// The pair's rows: query row and head of pair i of (segment s, kv head kvh), as r H + h.
__device__ __forceinline__ int ab_pair_row(int H, int group, const ab_segs *sg, int s, int kvh, int i) {
    if (group == H) return sg->qo[s] * H + i;   // one kv head (MQA): the pairs are consecutive rows
    return (sg->qo[s] + i / group) * H + kvh * group + i % group;
}

// 8 consecutive bf16 of a row from column d as 4 bf16 pairs. V = 8: one 16-byte load with no bounds (head_dim % 64 == 0,
// aligned rows: the blocks' 32- and 64-column spans never pass the row's end); V = 1: zeros past hd.
template <int V>
__device__ __forceinline__ uint4 ab_row8(const bf16 *row, int d, int hd) {
    if constexpr (V == 8) {
        return __ldg((const uint4 *)(row + d));
    } else {
        uint32_t w[4];
#pragma unroll
        for (int x = 0; x < 4; x++) {
            uint32_t lo = d + 2 * x < hd ? __bfloat16_as_ushort(row[d + 2 * x]) : 0u;
            uint32_t hi = d + 2 * x + 1 < hd ? __bfloat16_as_ushort(row[d + 2 * x + 1]) : 0u;
            w[x] = lo | hi << 16;
        }
        return make_uint4(w[0], w[1], w[2], w[3]);
    }
}

// Key rows of segment s for kv head kvh: row t is kc + t kvw for t < n1 (the cache), else kx + (t - n1) kvw.
struct ab_keys {
    const bf16 *kc, *kx;
    __device__ __forceinline__ const bf16 *row(int t, int n1, int kvw) const {
        return t < n1 ? kc + (size_t)t * kvw : kx + (size_t)(t - n1) * kvw;
    }
};
__device__ __forceinline__ ab_keys ab_key_rows(const bf16 *src1, const bf16 *src2, const ab_segs *sg, int s, int kvw,
                                               int off) {
    const bf16 *kc = src1 + (size_t)sg->ko[s] * kvw + off;
    return {kc, src2 ? src2 + (size_t)sg->qo[s] * kvw + off : kc + (size_t)sg->n1[s] * kvw};
}

// Block (tile, key chunk): AB_PT pairs (two m tiles of 16) x AB_KT keys, 8 warps: warp w takes m tile w & 1 and keys
// 16 (w >> 1) .. + 15 (two n tiles of 8). Fragments come straight from global memory (q and dout rows are shared by
// the block's warps through L1): the sum over the head dim runs in a permuted order, the same for both operands, so that
// a lane reads 16 contiguous bytes: in head-dim block b of 32, lane (g = lane / 4, c = lane % 4) holds dims b + 8c ..
// b + 8c + 7 of its rows; k step 0 takes dims +0, +1 as the mma's k slots 2c, 2c + 1 and +2, +3 as slots 2c + 8,
// 2c + 9, k step 1 dims +4 .. +7. Rows past the pairs or keys are read as the last one and never stored.
template <int V>
__global__ void __launch_bounds__(256) ab_logits_kernel(ab_args a, const __grid_constant__ ab_segs sg) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    int s = ab_find(sg.to, sg.n, blockIdx.x);
    int np = (sg.qo[s + 1] - sg.qo[s]) * a.group, per_kv = (np + AB_PT - 1) / AB_PT;
    int local = blockIdx.x - sg.to[s], kvh = local / per_kv, kvw = a.kv_heads * a.hd;
    int nk = sg.n1[s] + sg.ns[s], warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    int i0 = (local % per_kv) * AB_PT + 16 * (warp & 1), tw = blockIdx.y * AB_KT + 16 * (warp >> 1);
    if (tw >= nk) return;   // (no block-wide synchronisation in this kernel)
    int ia = i0 + g < np ? i0 + g : np - 1, ib = i0 + 8 + g < np ? i0 + 8 + g : np - 1;
    int ra = ab_pair_row(a.H, a.group, &sg, s, kvh, ia), rb = ab_pair_row(a.H, a.group, &sg, s, kvh, ib);
    const bf16 *qa = a.q + (size_t)ra * a.hd, *qb = a.q + (size_t)rb * a.hd;
    const bf16 *ga = a.dout + (size_t)ra * a.hd, *gb = a.dout + (size_t)rb * a.hd;
    ab_keys K = ab_key_rows(a.k1, a.k2, &sg, s, kvw, kvh * a.hd), W = ab_key_rows(a.v1, a.v2, &sg, s, kvw, kvh * a.hd);
    int t0 = tw + g < nk ? tw + g : nk - 1, t1 = tw + 8 + g < nk ? tw + 8 + g : nk - 1, n1 = sg.n1[s];
    const bf16 *k0 = K.row(t0, n1, kvw), *k1 = K.row(t1, n1, kvw), *v0 = W.row(t0, n1, kvw), *v1 = W.row(t1, n1, kvw);
    float cs[2][4] = {}, cg[2][4] = {};
#pragma unroll 2
    for (int b = 8 * c; b < a.hd + 8 * c; b += 32) {
        uint4 A0 = ab_row8<V>(qa, b, a.hd), A1 = ab_row8<V>(qb, b, a.hd), G0 = ab_row8<V>(ga, b, a.hd),
              G1 = ab_row8<V>(gb, b, a.hd), B[2] = {ab_row8<V>(k0, b, a.hd), ab_row8<V>(k1, b, a.hd)},
              U[2] = {ab_row8<V>(v0, b, a.hd), ab_row8<V>(v1, b, a.hd)};
#pragma unroll
        for (int n = 0; n < 2; n++) {
            mma_bf16(cs[n], A0.x, A1.x, A0.y, A1.y, B[n].x, B[n].y);
            mma_bf16(cs[n], A0.z, A1.z, A0.w, A1.w, B[n].z, B[n].w);
            mma_bf16(cg[n], G0.x, G1.x, G0.y, G1.y, U[n].x, U[n].y);
            mma_bf16(cg[n], G0.z, G1.z, G0.w, G1.w, U[n].z, U[n].w);
        }
    }
    // accumulator fragment: row g holds keys 2c, 2c + 1 of the n tile in [0], [1]; row g + 8 in [2], [3]
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (i0 + 8 * h + g >= np) continue;
        size_t pr = (size_t)(h ? rb : ra) - (size_t)sg.r0 * a.H;
#pragma unroll
        for (int n = 0; n < 2; n++) {
            int t = tw + 8 * n + 2 * c;
            float *so = a.S + pr * a.ld + t, *go = a.G + pr * a.ld + t;
            float s0 = cs[n][2 * h] * a.scale, s1 = cs[n][2 * h + 1] * a.scale;
            if (t + 1 < nk) {   // (ld and t even: 8-byte aligned)
                *(float2 *)so = make_float2(s0, s1);
                *(float2 *)go = make_float2(cg[n][2 * h], cg[n][2 * h + 1]);
            } else if (t < nk) {
                so[0] = s0;
                go[0] = cg[n][2 * h];
            }
        }
    }
}

// One warp per pair; the row in chunks of 32 AB_NR keys held in registers (each chunk's loads issued at once): an online
// pass for the maximum, the sum and sum e dP (the running maximum is the warp's, so lanes' partial sums add up), then
// the pass that writes P and dS (0 past the visible keys).
__global__ void __launch_bounds__(32 * AB_RW) ab_softmax_kernel(ab_args a, const __grid_constant__ ab_segs sg, int npairs) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    int pr = blockIdx.x * AB_RW + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (pr >= npairs) return;
    int r = sg.r0 + pr / a.H, s = ab_find(sg.qo, sg.n, r), j = r - sg.qo[s];
    int n1 = sg.n1[s], ns = sg.ns[s], lim = j < a.block0 ? a.block0 : ns, vis = n1 + (lim < ns ? lim : ns);
    float *Sr = a.S + (size_t)pr * a.ld, *Gr = a.G + (size_t)pr * a.ld;
    float mx = -INFINITY, sum = 0, sdp = 0;
    for (int t0 = 0; t0 < vis; t0 += 32 * AB_NR) {
        float sv[AB_NR], gv[AB_NR], cm = -INFINITY;
#pragma unroll
        for (int x = 0; x < AB_NR; x++) {
            int t = t0 + lane + 32 * x;
            sv[x] = t < vis ? Sr[t] : -INFINITY;
            gv[x] = t < vis ? Gr[t] : 0.0f;
        }
#pragma unroll
        for (int x = 0; x < AB_NR; x++) cm = fmaxf(cm, sv[x]);
        float nm = fmaxf(mx, warp_max(cm)), f = expf(mx - nm);   // (f = 0 for the first chunk)
        sum *= f;
        sdp *= f;
#pragma unroll
        for (int x = 0; x < AB_NR; x++) {
            float e = expf(sv[x] - nm);
            sum += e;
            sdp += e * gv[x];
        }
        mx = nm;
    }
    sum = warp_sum(sum);
    float inv = sum > 0 ? 1.0f / sum : 0.0f, dsum = warp_sum(sdp) * inv;   // (no visible key: all 0)
    for (int t0 = 0; t0 < n1 + ns; t0 += 32 * AB_NR) {
        float sv[AB_NR], gv[AB_NR];
#pragma unroll
        for (int x = 0; x < AB_NR; x++) {
            int t = t0 + lane + 32 * x;
            sv[x] = t < vis ? Sr[t] : 0.0f;
            gv[x] = t < vis ? Gr[t] : 0.0f;
        }
#pragma unroll
        for (int x = 0; x < AB_NR; x++) {
            int t = t0 + lane + 32 * x;
            float p = t < vis ? expf(sv[x] - mx) * inv : 0.0f;
            if (t < n1 + ns) {
                Sr[t] = p;
                Gr[t] = p * (gv[x] - dsum);
            }
        }
    }
}

// ---- dq and dk, dv: C (16 x 64) = A . B on the tensor cores, A fp32 (dS or P) split into bf16 hi + lo parts (so the
// product keeps ~16 more bits than one bf16 rounding: A's own rounding error is 2^-17 relative), B bf16 rows (keys or
// q / dout rows) x 64 head-dim columns. Fragments straight from global memory, no shared memory: the k (reduction)
// order is free, and so is the mapping of the 8 n tiles to columns as long as the stores follow it: n tile t's column
// n is head-dim column 8n + t. Lane (g = lane / 4, c = lane % 4) then loads columns 8g .. 8g + 7 of the 4 B rows of its
// k slots (2c, 2c + 1, 2c + 8, 2c + 9) with four 16-byte loads, and ends holding columns 16c .. 16c + 15 of C rows g
// and g + 8. The block's warps split the k steps and add their tiles in shared memory in a fixed order. ----

// Element e (0..7) of rows a and b (8 bf16 each) as a bf16 pair: a's in the low half (the lower k slot).
__device__ __forceinline__ uint32_t ab_pick(const uint4 &a, const uint4 &b, int e) {
    uint32_t wa = u4_get(a, e >> 1), wb = u4_get(b, e >> 1);
    return e & 1 ? __byte_perm(wa, wb, 0x7632) : __byte_perm(wa, wb, 0x5410);
}

// x0, x1 as bf16 pairs hi + lo with hi + lo = x to ~2^-17.
__device__ __forceinline__ void ab_split(float x0, float x1, uint32_t &hi, uint32_t &lo) {
    hi = f2_to_bf2(x0, x1);
    float2 h = bf2_to_f2(hi);
    lo = f2_to_bf2(x0 - h.x, x1 - h.y);
}

// acc (8 n tiles) += A . B for one k step: av[r][x] = A[row g + 8r][k slot 2c + (x & 1) + 8 (x >> 1)], brow[x] = the
// lane's 8 columns of B row (k slot 2c + (x & 1) + 8 (x >> 1)).
__device__ __forceinline__ void ab_mma_step(float (&acc)[8][4], const float (&av)[2][4], const uint4 (&brow)[4]) {
    uint32_t ah[4], al[4];
    ab_split(av[0][0], av[0][1], ah[0], al[0]);   // row g, slots 2c, 2c + 1
    ab_split(av[1][0], av[1][1], ah[1], al[1]);   // row g + 8
    ab_split(av[0][2], av[0][3], ah[2], al[2]);   // row g, slots 2c + 8, 2c + 9
    ab_split(av[1][2], av[1][3], ah[3], al[3]);
#pragma unroll
    for (int t = 0; t < 8; t++) {
        uint32_t b0 = ab_pick(brow[0], brow[1], t), b1 = ab_pick(brow[2], brow[3], t);
        mma_bf16(acc[t], ah[0], ah[1], ah[2], ah[3], b0, b1);
        mma_bf16(acc[t], al[0], al[1], al[2], al[3], b0, b1);
    }
}

// The block's AB_TW warps' tiles summed into red[0] ([16][AB_DC], row-major) in a fixed order: warp w + AB_TW / 2 adds
// its tile to warp w's, then the AB_TW / 2 sums are added in warp order (red holds AB_TW / 2 tiles).
__device__ __forceinline__ void ab_reduce(float (*red)[16][AB_DC], float (&acc)[8][4], int warp, int lane) {
    constexpr int HALF = AB_TW / 2;
    int g = lane >> 2, c = lane & 3;
    float *r = red[warp % HALF][0];
    if (warp >= HALF)
#pragma unroll
        for (int t = 0; t < 8; t++) {
            r[g * AB_DC + 16 * c + t] = acc[t][0];
            r[g * AB_DC + 16 * c + 8 + t] = acc[t][1];
            r[(g + 8) * AB_DC + 16 * c + t] = acc[t][2];
            r[(g + 8) * AB_DC + 16 * c + 8 + t] = acc[t][3];
        }
    __syncthreads();
    if (warp < HALF)
#pragma unroll
        for (int t = 0; t < 8; t++) {
            r[g * AB_DC + 16 * c + t] += acc[t][0];
            r[g * AB_DC + 16 * c + 8 + t] += acc[t][1];
            r[(g + 8) * AB_DC + 16 * c + t] += acc[t][2];
            r[(g + 8) * AB_DC + 16 * c + 8 + t] += acc[t][3];
        }
    __syncthreads();
    for (int e = threadIdx.x; e < 16 * AB_DC; e += blockDim.x) {
        float v = 0;
        for (int w = 0; w < HALF; w++) v += red[w][0][e];
        red[0][0][e] = v;   // (only this thread reads element e of the tiles)
    }
    __syncthreads();
}

// A values of one k step for rows (g, g + 8): the fp32 pairs at k slots (2c, 2c + 1) and (2c + 8, 2c + 9) of row ar[h],
// columns kb + ..., 0 past n (the scratch past a row's keys is not written).
__device__ __forceinline__ void ab_arow(float (&av)[2][4], const float *const (&ar)[2], const bool (&ok)[2], int t, int n) {
#pragma unroll
    for (int x = 0; x < 2; x++) {
        int u = t + 8 * x;   // even, and ld % 4 == 0: an 8-byte aligned pair inside the row
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float2 v = ok[h] && u < n ? *(const float2 *)(ar[h] + u) : make_float2(0.0f, 0.0f);
            av[h][2 * x] = v.x;
            av[h][2 * x + 1] = u + 1 < n ? v.y : 0.0f;
        }
    }
}

// dq: block (16 pairs of a segment and kv head (for MQA 2 query rows x 8 heads), AB_DC columns); k = the keys (dS is 0
// past a pair's visible keys; keys past the segment's read as its last one with A = 0).
template <int V>
__global__ void __launch_bounds__(32 * AB_TW) ab_dq_kernel(ab_args a, const __grid_constant__ ab_segs sg) {
    __shared__ float red[AB_TW / 2][16][AB_DC];
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    int s = ab_find(sg.mo, sg.n, blockIdx.x);
    int np = (sg.qo[s + 1] - sg.qo[s]) * a.group, per_kv = (np + 15) / 16;
    int local = blockIdx.x - sg.mo[s], kvh = local / per_kv, i0 = (local % per_kv) * 16, c0 = blockIdx.z * AB_DC;
    int n1 = sg.n1[s], nk = n1 + sg.ns[s], kvw = a.kv_heads * a.hd;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const float *ar[2];
    bool ok[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int i = i0 + g + 8 * h;
        ok[h] = i < np;
        ar[h] = a.G + (size_t)(ab_pair_row(a.H, a.group, &sg, s, kvh, ok[h] ? i : 0) - sg.r0 * a.H) * a.ld;
    }
    ab_keys K = ab_key_rows(a.k1, a.k2, &sg, s, kvw, kvh * a.hd);
    float acc[8][4] = {};
#pragma unroll 2
    for (int kb = 16 * warp; kb < nk; kb += 16 * AB_TW) {
        float av[2][4];
        uint4 brow[4];
        ab_arow(av, ar, ok, kb + 2 * c, nk);
#pragma unroll
        for (int x = 0; x < 4; x++) {
            int t = kb + 2 * c + (x & 1) + 8 * (x >> 1);
            brow[x] = ab_row8<V>(K.row(t < nk ? t : nk - 1, n1, kvw), c0 + 8 * g, a.hd);
        }
        ab_mma_step(acc, av, brow);
    }
    ab_reduce(red, acc, warp, lane);
    for (int idx = threadIdx.x; idx < 16 * AB_DC; idx += blockDim.x) {
        int m = idx / AB_DC, e = c0 + idx % AB_DC, i = i0 + m;
        if (i < np && e < a.hd)
            a.dq[(size_t)ab_pair_row(a.H, a.group, &sg, s, kvh, i) * a.hd + e] = __float2bfloat16(red[0][m][idx % AB_DC] * a.scale);
    }
}

// dk or dv: block (16 suffix key rows u0 .. of a segment, kv head and product (y = 2 kv head + product), AB_DC columns);
// k = the segment's pairs of the kv head (query row major, then head): dk = scale dS^T q (product 0), dv = P^T dout
// (product 1); pairs past the segment's read as its last one with A = 0.
template <int V>
__global__ void __launch_bounds__(32 * AB_TW) ab_dkv_kernel(ab_args a, const __grid_constant__ ab_segs sg) {
    __shared__ float red[AB_TW / 2][16][AB_DC];
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    int s = ab_find(sg.uo, sg.n, blockIdx.x);
    int u0 = (blockIdx.x - sg.uo[s]) * 16, kvh = blockIdx.y >> 1, dv = blockIdx.y & 1, c0 = blockIdx.z * AB_DC;
    int nq = sg.qo[s + 1] - sg.qo[s], ns = sg.ns[s], np = nq * a.group, col = sg.n1[s] + u0;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    bool uok[2] = {u0 + g < ns, u0 + g + 8 < ns};
    const float *A = dv ? a.S : a.G;
    const bf16 *B = dv ? a.dout : a.q;
    float acc[8][4] = {};
#pragma unroll 2
    for (int kb = 16 * warp; kb < np; kb += 16 * AB_TW) {
        float av[2][4];
        uint4 brow[4];
#pragma unroll
        for (int x = 0; x < 4; x++) {
            int i = kb + 2 * c + (x & 1) + 8 * (x >> 1), row = ab_pair_row(a.H, a.group, &sg, s, kvh, i < np ? i : np - 1);
            size_t so = (size_t)(row - sg.r0 * a.H) * a.ld + col + g;
#pragma unroll
            for (int h = 0; h < 2; h++) av[h][x] = i < np && uok[h] ? A[so + 8 * h] : 0.0f;
            brow[x] = ab_row8<V>(B + (size_t)row * a.hd, c0 + 8 * g, a.hd);
        }
        ab_mma_step(acc, av, brow);
    }
    ab_reduce(red, acc, warp, lane);
    bf16 *out = dv ? a.dv : a.dk;
    float f = dv ? 1.0f : a.scale;
    for (int idx = threadIdx.x; idx < 16 * AB_DC; idx += blockDim.x) {
        int m = idx / AB_DC, e = c0 + idx % AB_DC, u = u0 + m;
        if (u >= nq || e >= a.hd) continue;   // rows past the segment's queries belong to the next segment
        out[(size_t)(sg.qo[s] + u) * a.kv_heads * a.hd + (size_t)kvh * a.hd + e] = __float2bfloat16(red[0][m][idx % AB_DC] * f);
    }
}

void cuda_attention_bwd(pi0_backend *be, pt dq, pt dk, pt dv, pt dout, pt q, const pi0_attn *a) {
    cuda_ctx *c = CTX(be);
    if (c->err) return;
    PI0_ASSERT(a->kv_heads >= 1 && a->heads % a->kv_heads == 0);
    ab_args x = {};
    x.q = (const bf16 *)q.p; x.dout = (const bf16 *)dout.p;
    x.k1 = (const bf16 *)a->k1.p; x.v1 = (const bf16 *)a->v1.p;
    x.k2 = a->tail ? NULL : (const bf16 *)a->k2.p; x.v2 = a->tail ? NULL : (const bf16 *)a->v2.p;
    x.dq = (bf16 *)dq.p; x.dk = (bf16 *)dk.p; x.dv = (bf16 *)dv.p;
    x.S = c->scores; x.G = c->att32;
    x.H = a->heads; x.group = a->heads / a->kv_heads; x.kv_heads = a->kv_heads; x.hd = a->head_dim;
    x.block0 = a->block0; x.scale = a->scale;
    int vec = a->head_dim % AB_DC == 0 && aligned16(x.q) && aligned16(x.dout) && aligned16(x.k1) && aligned16(x.v1) &&
              aligned16(x.k2) && aligned16(x.v2);
    size_t cap = c->scores_cap < c->att_cap ? c->scores_cap : c->att_cap;
    for (int s = 0; s < a->nseg;) {
        ab_segs sg;
        memset(&sg, 0, sizeof sg);
        sg.r0 = a->q_off[s];
        int ld = 0, maxk = 0, tiles = 0, mtiles = 0, utiles = 0;
        while (s + sg.n < a->nseg && sg.n < AB_SEGS) {
            int i = s + sg.n, nq = a->q_off[i + 1] - a->q_off[i], n1 = a->k_off[i + 1] - a->k_off[i];
            // suffix keys: the range's tail, or source 2's rows aligned with the queries, or none (then dk, dv = 0)
            int ns = a->tail ? a->tail : a->k2.p ? nq : 0, nc = a->tail ? n1 - a->tail : n1, nk = nc + ns;
            int ld2 = ld > ((nk + 3) & ~3) ? ld : (nk + 3) & ~3;   // rows of 16-byte multiples
            size_t need = (size_t)(a->q_off[i + 1] - sg.r0) * a->heads * ld2;
            if (need > cap) {
                if (sg.n) break;
                if (!c->err) {
                    c->err = PI0_ERR_ARG;
                    snprintf(c->errmsg, sizeof c->errmsg, "attention_bwd: a segment of %d queries x %d keys exceeds the "
                             "reserved scratch (%zu floats)", nq, nk, cap);
                }
                return;
            }
            sg.qo[sg.n] = a->q_off[i]; sg.ko[sg.n] = a->k_off[i]; sg.n1[sg.n] = nc; sg.ns[sg.n] = ns;
            sg.to[sg.n] = tiles;
            sg.mo[sg.n] = mtiles;
            sg.uo[sg.n] = utiles;
            tiles += a->kv_heads * cdiv((long long)nq * x.group, AB_PT);
            mtiles += a->kv_heads * cdiv((long long)nq * x.group, 16);
            utiles += cdiv(nq, 16);
            ld = ld2;
            maxk = nk > maxk ? nk : maxk;
            sg.n++;
        }
        sg.qo[sg.n] = a->q_off[s + sg.n];
        sg.to[sg.n] = tiles;
        sg.mo[sg.n] = mtiles;
        sg.uo[sg.n] = utiles;
        s += sg.n;
        int rows = sg.qo[sg.n] - sg.r0;
        if (!rows) continue;
        x.ld = ld;
        int npairs = rows * a->heads;
        int colb = cdiv(a->head_dim, AB_DC);   // blocks of AB_DC head-dim columns
        cuda_launch(c, vec ? ab_logits_kernel<8> : ab_logits_kernel<1>, dim3(tiles, cdiv(maxk > 0 ? maxk : 1, AB_KT)),
                    dim3(256), 0, x, sg);
        cuda_launch(c, ab_softmax_kernel, dim3(cdiv(npairs, AB_RW)), dim3(32 * AB_RW), 0, x, sg, npairs);
        cuda_launch(c, vec ? ab_dq_kernel<8> : ab_dq_kernel<1>, dim3(mtiles, 1, colb), dim3(32 * AB_TW), 0, x, sg);
        cuda_launch(c, vec ? ab_dkv_kernel<8> : ab_dkv_kernel<1>, dim3(utiles, 2 * a->kv_heads, colb), dim3(32 * AB_TW), 0,
                    x, sg);
    }
}
