// gemm.cu — the only cuBLASLt caller, and the linear op (backend.h `linear`).
// Row-major Y[M,N] = X[M,K] . W^T is computed by cuBLASLt (column-major) as Y^T = W . X^T: A = W with
// transa = T (W row-major [N, ldw] is column-major [ldw, N]), B = X with transb = N, D = Y^T with ld = ldy.
// Descriptors, layouts and the fastest of the heuristic's candidates (timed once, see tune) are made
// once per shape and cached. Linear with fp32 input (the small head projections and time MLPs, docs/model.md 1.5:
// computed in fp32) uses linear_f32_kernel, or for 64 rows and more cuBLASLt in fp32 on the weights' fp32 copies (at
// B = 64 the kernel was slow: each x value it reads from shared memory feeds two FMAs;
// bench/RESULTS.md L73, L76). The copies hold the file's values: for an F32 checkpoint the fp32 weights that the PT reference uses
// (docs/model.md 1.5), which the kernel reads too, so that every batch size computes with them; for a BF16 one the kernel
// reads the bf16 copy (the same values, half the bytes). Few bf16 rows (M <= GEMV_ROWS) go to gemv.cu. CPU twin: cpu_linear.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"

struct gemm_key {
    int trans_w, M, N, K, ldx, ldw, ldy, tx, tw, ty, has_bias, batch, gelu;
    int f8_outer;                 // FP8 operands with one fp32 scale per row of each (OUTER_VEC_32F) and an fp32 bias
    float alpha, beta;            // the tuning times the call's own (cuBLASLt runs other kernels for beta != 0)
    int al_x, al_w, al_y, al_b;   // pointer alignments in bytes (cuBLASLt assumes 256 unless told)
    long long sx, sw, sy, sb;   // batch strides in elements (sb: the bias)
};

static int alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && (a % (uintptr_t)al)) al >>= 1;
    return al;
}

enum { GEMM_CANDIDATES = 16, GEMM_TUNE_ROUNDS = 3 };

struct gemm_plan {
    gemm_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;                     // the fastest candidate (tune) or the heuristic's first
    cublasLtMatmulAlgo_t cand[GEMM_CANDIDATES];
    int n_cand;
    int tuned;                                     // algo is a timed choice (its own, or a sibling's: share_tuned)
    int declined;                                  // a probe that cuBLASLt has no algorithm for (kept: not asked again)
};

struct gemm_cache {
    gemm_plan *plans;
    int n, cap;
};

gemm_cache *gemm_cache_new(void) { return (gemm_cache *)calloc(1, sizeof(gemm_cache)); }

void gemm_cache_free(gemm_cache *g) {
    if (!g) return;
    for (int i = 0; i < g->n; i++) {
        if (g->plans[i].declined) continue;
        cublasLtMatmulDescDestroy(g->plans[i].desc);
        cublasLtMatrixLayoutDestroy(g->plans[i].la);
        cublasLtMatrixLayoutDestroy(g->plans[i].lb);
        cublasLtMatrixLayoutDestroy(g->plans[i].lc);
    }
    free(g->plans);
    free(g);
}

static int set_batch(cuda_ctx *c, cublasLtMatrixLayout_t l, int batch, long long stride) {
    if (batch <= 1) return 1;
    int32_t b = batch;
    int64_t s = stride;
    return !CUBLAS_NOTE(c, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b)) &&
           !CUBLAS_NOTE(c, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof s));
}

// The plan of k, made at its first call. Where cuBLASLt has no algorithm for it: an error and NULL, or for a probe a
// plan marked declined, so that later calls do not ask the heuristic again.
static gemm_plan *get_plan(cuda_ctx *c, const gemm_key *k, int probe) {
    gemm_cache *g = c->gemms;
    for (int i = 0; i < g->n; i++)
        if (!memcmp(&g->plans[i].key, k, sizeof *k)) return &g->plans[i];
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 64;
        gemm_plan *p = (gemm_plan *)realloc(g->plans, (size_t)cap * sizeof *p);
        if (!p) { pi0_fail(PI0_ERR_NOMEM, "out of memory"); c->err = c->err ? c->err : PI0_ERR_NOMEM; return NULL; }
        g->plans = p;
        g->cap = cap;
    }
    gemm_plan *p = &g->plans[g->n];
    memset(p, 0, sizeof *p);
    memcpy(&p->key, k, sizeof *k);   // padding bytes included (memcmp above)
    cublasOperation_t ta = k->trans_w ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    // int8 operands (linear_i8.cu): exact int32 products, int32 alpha and beta
    int i8 = k->tx == CUDA_R_8I;
    if (CUBLAS_NOTE(c, cublasLtMatmulDescCreate(&p->desc, i8 ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F,
                                                i8 ? CUDA_R_32I : CUDA_R_32F)))
        return NULL;
    CUBLAS_NOTE(c, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_NOTE(c, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (k->f8_outer) {
        cublasLtMatmulMatrixScale_t sm = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        cudaDataType bt = CUDA_R_32F;
        CUBLAS_NOTE(c, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &sm, sizeof sm));
        CUBLAS_NOTE(c, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &sm, sizeof sm));
        // the heuristic offers nothing for vector scales without their pointers (seen on the H200: every shape
        // declined); each call sets its own, so any device address stands in here
        CUBLAS_NOTE(c, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &c->workspace,
                                                      sizeof c->workspace));
        CUBLAS_NOTE(c, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &c->workspace,
                                                      sizeof c->workspace));
        if (k->has_bias)
            CUBLAS_NOTE(c, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    if (k->has_bias || k->gelu) {
        cublasLtEpilogue_t ep = k->gelu ? (k->has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU)
                                        : CUBLASLT_EPILOGUE_BIAS;
        CUBLAS_NOTE(c, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
    }
    if (k->has_bias && k->batch > 1) {
        int64_t sb = k->sb;
        CUBLAS_NOTE(c, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &sb, sizeof sb));
    }
    // A = W: column-major [K, N] (trans) or [N, K] (no trans); B = X: [K, M]; C = D = Y: [N, M]
    uint64_t ar = k->trans_w ? k->K : k->N, ac = k->trans_w ? k->N : k->K;
    if (CUBLAS_NOTE(c, cublasLtMatrixLayoutCreate(&p->la, (cudaDataType)k->tw, ar, ac, k->ldw)) ||
        CUBLAS_NOTE(c, cublasLtMatrixLayoutCreate(&p->lb, (cudaDataType)k->tx, k->K, k->M, k->ldx)) ||
        CUBLAS_NOTE(c, cublasLtMatrixLayoutCreate(&p->lc, (cudaDataType)k->ty, k->N, k->M, k->ldy)))
        return NULL;
    if (!set_batch(c, p->la, k->batch, k->sw) || !set_batch(c, p->lb, k->batch, k->sx) ||
        !set_batch(c, p->lc, k->batch, k->sy))
        return NULL;
    cublasLtMatmulPreference_t pref;
    if (CUBLAS_NOTE(c, cublasLtMatmulPreferenceCreate(&pref))) return NULL;
    CUBLAS_NOTE(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &c->ws_size,
                                                        sizeof c->ws_size));
    uint32_t al[4] = {(uint32_t)k->al_w, (uint32_t)k->al_x, (uint32_t)k->al_y, (uint32_t)k->al_y};
    CUBLAS_NOTE(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4));
    CUBLAS_NOTE(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4));
    CUBLAS_NOTE(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4));
    CUBLAS_NOTE(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], 4));
    cublasLtMatmulHeuristicResult_t res[GEMM_CANDIDATES];
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, GEMM_CANDIDATES,
                                                      res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
        if (!c->err && !probe) {
            c->err = PI0_ERR_CUDA;
            snprintf(c->errmsg, sizeof c->errmsg, "cuBLASLt has no algorithm for GEMM M=%d N=%d K=%d (ldx %d ldw %d ldy %d, "
                     "types %d/%d/%d, batch %d): status %d", k->M, k->N, k->K, k->ldx, k->ldw, k->ldy, k->tx, k->tw, k->ty,
                     k->batch, (int)s);
        }
        cublasLtMatmulDescDestroy(p->desc);
        cublasLtMatrixLayoutDestroy(p->la);
        cublasLtMatrixLayoutDestroy(p->lb);
        cublasLtMatrixLayoutDestroy(p->lc);
        if (!probe) return NULL;
        p->declined = 1;
        g->n++;
        return p;
    }
    p->algo = res[0].algo;
    p->n_cand = found;
    for (int i = 0; i < found; i++) p->cand[i] = res[i].algo;
    g->n++;
    return p;
}

/* Row buckets of the tuning: the prefill's row count follows the prompt length (padding is skipped, docs/model.md 3.13),
 * and π0.5's prompt holds the state, so a server meets a new row count every few requests. Timing every candidate
 * again was a large cost per new length (bench/RESULTS.md L116). Shapes that differ only in M within one bucket of
 * GEMM_MBUCKET
 * rows take the timed choice of the first one met (as long as cuBLASLt accepts it for the new layout): M is
 * cuBLASLt's N here, and rows within 64 fill the same tiles of every candidate up to 64 wide. So the algorithm of a
 * length depends on which length of its bucket came first; within a process it never changes (graph replays and
 * un-captured runs agree bit for bit), across processes it could differ, as the timing's noise already could. */
enum { GEMM_MBUCKET = 64 };

static int share_tuned(cuda_ctx *c, gemm_plan *p) {
    gemm_cache *g = c->gemms;
    gemm_key k;
    memcpy(&k, &p->key, sizeof k);   // with its (zeroed) padding bytes, which take part in memcmp
    for (int i = 0; i < g->n; i++) {
        gemm_plan *q = &g->plans[i];
        if (q == p || !q->tuned || q->n_cand < 2 || (q->key.M - 1) / GEMM_MBUCKET != (k.M - 1) / GEMM_MBUCKET) continue;
        k.M = q->key.M;
        int same = !memcmp(&k, &q->key, sizeof k);
        k.M = p->key.M;
        if (!same) continue;
        cublasLtMatmulHeuristicResult_t r;
        if (cublasLtMatmulAlgoCheck(c->lt, p->desc, p->la, p->lb, p->lc, p->lc, &q->algo, &r) == CUBLAS_STATUS_SUCCESS &&
            r.workspaceSize <= c->ws_size) {
            p->algo = q->algo;
            p->tuned = 1;
            return 1;
        }
    }
    return 0;
}

/* The heuristic's order is not speed order (bench/RESULTS.md L6: a timed choice among its top 8), so a new shape
 * (without a timed sibling, share_tuned) met outside graph capture times every candidate on the call's own operands
 * (into a scratch output, since beta may be 1) and keeps the fastest. One timing of 5 runs chose a clearly
 * slower kernel for SigLIP's fc2 in one of two processes (ncu, bench/RESULTS.md L47): each candidate's time
 * is the best of GEMM_TUNE_ROUNDS rounds taken in turn over the candidates, with the call's alpha and beta (the
 * output then holds garbage, which costs the same). */
static void tune(cuda_ctx *c, gemm_plan *p, const void *X, const void *W, const void *bias, size_t ybytes) {
    if (p->tuned || c->err) return;
    if (p->n_cand < 2) {   // nothing to time
        p->tuned = 1;
        return;
    }
    if (share_tuned(c, p)) return;
    if (c->capturing) {   // no timing inside a capture (a guard: cuda_run_graph's run before each capture times all)
        c->untuned = 1;
        return;
    }
    p->tuned = 1;
    if (ybytes > c->tune_cap) {
        cudaFree(c->tune_buf);
        c->tune_buf = NULL;
        c->tune_cap = 0;
        if (CUDA_NOTE(c, cudaMalloc(&c->tune_buf, ybytes))) return;
        c->tune_cap = ybytes;
    }
    if (bias) CUBLAS_NOTE(c, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    cudaEvent_t e0, e1;
    if (CUDA_NOTE(c, cudaEventCreate(&e0)) || CUDA_NOTE(c, cudaEventCreate(&e1))) return;
    const float alpha = p->key.alpha, beta = p->key.beta;
    const int32_t ialpha = (int32_t)alpha, ibeta = (int32_t)beta;
    const void *pa = p->key.tx == CUDA_R_8I ? (const void *)&ialpha : &alpha;
    const void *pb = p->key.tx == CUDA_R_8I ? (const void *)&ibeta : &beta;
    float best = 1e30f;
    for (int i = 0; i < p->n_cand * GEMM_TUNE_ROUNDS; i++) {
        const cublasLtMatmulAlgo_t *al = &p->cand[i % p->n_cand];
        float ms = 0;
        int ok = cublasLtMatmul(c->lt, p->desc, pa, W, p->la, X, p->lb, pb, c->tune_buf, p->lc, c->tune_buf,
                                p->lc, al, c->workspace, c->ws_size, c->stream) == CUBLAS_STATUS_SUCCESS;
        cudaEventRecord(e0, c->stream);
        for (int r = 0; ok && r < 5; r++)
            ok = cublasLtMatmul(c->lt, p->desc, pa, W, p->la, X, p->lb, pb, c->tune_buf, p->lc, c->tune_buf,
                                p->lc, al, c->workspace, c->ws_size, c->stream) == CUBLAS_STATUS_SUCCESS;
        cudaEventRecord(e1, c->stream);
        cudaEventSynchronize(e1);
        if (ok && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms < best) { best = ms; p->algo = *al; }
    }
    cudaGetLastError();   // a candidate that refused to run is simply skipped
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

void cuda_gemm_ex(cuda_ctx *c, int trans_w, int M, int N, int K, float alpha, const void *X, int ldx, cudaDataType tx,
                  const void *W, int ldw, cudaDataType tw, float beta, void *Y, int ldy, cudaDataType ty,
                  const void *bias, int batch, long long sx, long long sw, long long sy, long long sb, int gelu) {
    if (c->err || M <= 0 || N <= 0) return;
    gemm_key k;
    memset(&k, 0, sizeof k);   // padding bytes take part in memcmp
    k.trans_w = trans_w; k.M = M; k.N = N; k.K = K; k.ldx = ldx; k.ldw = ldw; k.ldy = ldy;
    k.tx = tx; k.tw = tw; k.ty = ty; k.has_bias = bias != NULL; k.batch = batch;
    k.al_x = alignment(X); k.al_w = alignment(W); k.al_y = alignment(Y); k.al_b = bias ? alignment(bias) : 0;
    k.sx = batch > 1 ? sx : 0; k.sw = batch > 1 ? sw : 0; k.sy = batch > 1 ? sy : 0; k.sb = batch > 1 ? sb : 0;
    k.gelu = gelu; k.alpha = alpha; k.beta = beta;
    gemm_plan *p = get_plan(c, &k, 0);
    if (!p) return;
    if (!p->tuned)
        tune(c, p, X, W, bias, ((batch > 1 ? (size_t)(batch - 1) * (size_t)sy : 0) + (size_t)M * ldy) *
                                   (ty == CUDA_R_32F || ty == CUDA_R_32I ? 4 : 2));
    if (bias) CUBLAS_NOTE(c, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const int32_t ialpha = (int32_t)alpha, ibeta = (int32_t)beta;
    const void *pa = tx == CUDA_R_8I ? (const void *)&ialpha : &alpha, *pb = tx == CUDA_R_8I ? (const void *)&ibeta : &beta;
    CUBLAS_NOTE(c, cublasLtMatmul(c->lt, p->desc, pa, W, p->la, X, p->lb, pb, Y, p->lc, Y, p->lc, &p->algo,
                                  c->workspace, c->ws_size, c->stream));
}

int cuda_gemm_f8(cuda_ctx *c, int M, int N, int K, const void *X, const void *W, void *Y, cudaDataType ty,
                 const float *sx, const float *sw, const float *bias, float beta, int gelu) {
    if (c->err || M <= 0 || N <= 0) return 1;
    int outer = ty != CUDA_R_32F;
    PI0_ASSERT(outer || (!bias && !gelu && beta == 0.0f));
    gemm_key k;
    memset(&k, 0, sizeof k);
    k.trans_w = 1; k.M = M; k.N = N; k.K = K; k.ldx = K; k.ldw = K; k.ldy = N;
    k.tx = k.tw = CUDA_R_8F_E4M3; k.ty = ty; k.has_bias = bias != NULL; k.batch = 1;
    k.al_x = alignment(X); k.al_w = alignment(W); k.al_y = alignment(Y); k.al_b = bias ? alignment(bias) : 0;
    k.gelu = gelu; k.alpha = 1.0f; k.beta = beta; k.f8_outer = outer;
    gemm_plan *p = get_plan(c, &k, 1);
    if (!p || p->declined) return 0;
    if (outer) {   // W is cuBLASLt's A (a scale per output feature), X its B (a scale per row)
        CUBLAS_NOTE(c, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sw, sizeof sw));
        CUBLAS_NOTE(c, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sx, sizeof sx));
    }
    if (!p->tuned) tune(c, p, X, W, bias, (size_t)M * N * (ty == CUDA_R_32F ? 4 : 2));
    if (bias) CUBLAS_NOTE(c, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const float alpha = 1.0f;
    CUBLAS_NOTE(c, cublasLtMatmul(c->lt, p->desc, &alpha, W, p->la, X, p->lb, &beta, Y, p->lc, Y, p->lc, &p->algo,
                                  c->workspace, c->ws_size, c->stream));
    return 1;
}

void cuda_gemm(cuda_ctx *c, int trans_w, int M, int N, int K, float alpha, const void *X, int ldx, cudaDataType tx,
               const void *W, int ldw, cudaDataType tw, float beta, void *Y, int ldy, cudaDataType ty,
               const void *bias, int batch, long long sx, long long sw, long long sy) {
    cuda_gemm_ex(c, trans_w, M, N, K, alpha, X, ldx, tx, W, ldw, tw, beta, Y, ldy, ty, bias, batch, sx, sw, sy, 0, 0);
}

// y[m, n] (=, +=, gelu) sum_k x[m, k] * w[n, k0 + k] + b[n] with fp32 x. Block: 8 warps, LF_N = 16 features
// (2 per warp) x LF_M = 8 rows; x staged through shared memory in chunks of LF_K columns, shared by the 8
// warps; a lane takes 8 consecutive k of every 256 (16-byte weight loads) and the warp sums its lanes.
// The previous version (one warp per 4 features reading x from L2, 2 warps per scheduler) took as long
// at M = 10, K = 1024 for N = 32 as for N = 1024, and 4 such
// products run in every denoise step (action_in, action_time_mlp in/out, action_out; bench/RESULTS.md L23).
enum { LF_N = 16, LF_M = 8, LF_K = 1024 };
// Eight consecutive weights: bf16 (one 16-byte load) or, for F32 checkpoints, fp32 (two).
template <typename WT> struct w8 {
    uint4 raw[sizeof(WT) / 2];
    __device__ __forceinline__ void load(const WT *p) {
#pragma unroll
        for (int i = 0; i < (int)(sizeof(WT) / 2); i++) raw[i] = __ldg((const uint4 *)p + i);
    }
    __device__ __forceinline__ float operator[](int e) const {
        if constexpr (sizeof(WT) == 2) return __bfloat162float(((const bf16 *)raw)[e]);
        else return ((const float *)raw)[e];
    }
};
template <typename WT>
__global__ void __launch_bounds__(256) linear_f32_kernel(float *y, const float *x, const WT *w, const float *b, int M,
                                                         int N, int K, int ldw, int epi, int vec) {
    __shared__ __align__(16) float xs[LF_M][LF_K];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, m0 = blockIdx.y * LF_M, n0 = blockIdx.x * LF_N + 2 * warp;
    const WT *wr[2] = {w + (size_t)(n0 < N ? n0 : N - 1) * ldw, w + (size_t)(n0 + 1 < N ? n0 + 1 : N - 1) * ldw};
    // the first chunk's weights are constants: loaded before the programmatic-launch wait (common.cuh)
    w8<WT> w0[LF_K / 256][2];
#pragma unroll
    for (int it = 0; it < LF_K / 256; it++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            if (vec && lane * 8 + it * 256 < (K < LF_K ? K : LF_K)) w0[it][j].load(wr[j] + lane * 8 + it * 256);
    pdl_wait();
    pdl_trigger();
    const int rows = M - m0 < LF_M ? M - m0 : LF_M;
    float acc[LF_M][2] = {};
    for (int kc = 0; kc < K; kc += LF_K) {
        const int kn = K - kc < LF_K ? K - kc : LF_K;
        __syncthreads();   // the previous chunk has been read
        if (vec)
            for (int i = threadIdx.x; i < rows * (kn / 4); i += blockDim.x)
                *(float4 *)&xs[i / (kn / 4)][(i % (kn / 4)) * 4] =
                    __ldcg((const float4 *)(x + (size_t)(m0 + i / (kn / 4)) * K + kc) + i % (kn / 4));
        else
            for (int i = threadIdx.x; i < rows * kn; i += blockDim.x)
                xs[i / kn][i % kn] = x[(size_t)(m0 + i / kn) * K + kc + i % kn];
        __syncthreads();
        if (vec) {
#pragma unroll
            for (int it = 0; it < LF_K / 256; it++) {
                const int k = lane * 8 + it * 256;
                if (k >= kn) break;
                float wf[2][8];
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    w8<WT> wq = w0[it][j];
                    if (kc) wq.load(wr[j] + kc + k);
#pragma unroll
                    for (int e = 0; e < 8; e++) wf[j][e] = wq[e];
                }
#pragma unroll
                for (int i = 0; i < LF_M; i++) {
                    if (i >= rows) break;
                    float4 p = *(const float4 *)&xs[i][k], q = *(const float4 *)&xs[i][k + 4];
                    float xe[8] = {p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w};
#pragma unroll
                    for (int j = 0; j < 2; j++)
#pragma unroll
                        for (int e = 0; e < 8; e++) acc[i][j] += xe[e] * wf[j][e];
                }
            }
        } else {
            for (int k = lane; k < kn; k += 32)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    float wv = ldf(wr[j], kc + k);
#pragma unroll
                    for (int i = 0; i < LF_M; i++)
                        if (i < rows) acc[i][j] += xs[i][k] * wv;
                }
        }
    }
#pragma unroll
    for (int i = 0; i < LF_M; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
            float v = warp_sum(acc[i][j]);
            int n = n0 + j;
            if (lane == 0 && i < rows && n < N) {
                v += b ? b[n] : 0.0f;
                float *o = y + (size_t)(m0 + i) * N + n;
                if (epi == EPI_ADD) v += *o;
                else if (epi == EPI_GELU) v = gelu_tanh(v);
                *o = v;
            }
        }
}

void cuda_linear_v(pi0_backend *be, pt out, pt x, const wview *W, const wview *b, int M, int N, int K, int k0,
                   enum pi0_epi epi) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0) return;
    const bf16 *w = W->bf + k0;
    if (W->q8) {   // 8-bit weights (linear_i8.cu)
        PI0_ASSERT(k0 == 0 && K == W->cols && x.kind == PT_ACT && out.kind == PT_ACT);
        (W->fp8 ? cuda_linear_f8 : cuda_linear_i8)(CTX(be), out, x, W, b ? b->f32 : NULL, M, N, K, epi);
        return;
    }
    if (x.kind == PT_F32) {
        PI0_ASSERT(out.kind == PT_F32);
        if (M >= 64 && W->f32) {   // batches: cuBLASLt in fp32 (CUBLAS_COMPUTE_32F, no TF32) on the fp32 copy
            cuda_gemm_ex(c, 1, M, N, K, 1.0f, x.p, K, CUDA_R_32F, W->f32 + k0, (int)W->cols, CUDA_R_32F,
                         epi == EPI_ADD ? 1.0f : 0.0f, out.p, N, CUDA_R_32F, b ? b->f32 : NULL, 1, 0, 0, 0, 0,
                         epi == EPI_GELU);
            return;
        }
        dim3 grid(cdiv(N, LF_N), cdiv(M, LF_M));
        int vec = K % 8 == 0 && W->cols % 8 == 0 && k0 % 8 == 0 && !((uintptr_t)x.p & 15);
        const float *bp = b ? b->f32 : NULL;
        if (W->f32 && W->dtype != PI0_DT_BF16)   // F32 / F16 file: its own values, as at 64 rows and more
            cuda_launch(c, linear_f32_kernel<float>, grid, dim3(256), 0, (float *)out.p, (const float *)x.p,
                        W->f32 + k0, bp, M, N, K, (int)W->cols, (int)epi, vec);
        else
            cuda_launch(c, linear_f32_kernel<bf16>, grid, dim3(256), 0, (float *)out.p, (const float *)x.p, w, bp, M, N, K,
                        (int)W->cols, (int)epi, vec);
        return;
    }
    PI0_ASSERT(x.kind == PT_ACT && out.kind == PT_ACT);
    if (c->fused_small && M <= GEMV_ROWS) {   // few rows: gemv.cu streams the weights in one launch
        gemv_args g = {};
        g.x = (const bf16 *)x.p; g.w = w; g.M = M; g.N = N; g.K = K; g.ldx = K; g.ldw = (int)W->cols;
        g.epi = epi == EPI_ADD ? GEMV_ADD : epi == EPI_GELU ? GEMV_GELU : GEMV_STORE;
        g.bias = b ? b->f32 : NULL;
        g.y = (bf16 *)out.p; g.ldy = N;
        if (cuda_gemv(c, &g, 0)) return;
    }
    // bias (and GELU) epilogue in the output type (bf16): formed in fp32 and rounded once. cuBLASLt's GELU is
    // the tanh form of docs/model.md 3.4 (checked in fp32 against both forms: bench/kernels/gelu_epilogue.cu)
    cuda_gemm_ex(c, 1, M, N, K, 1.0f, x.p, K, CUDA_R_16BF, w, (int)W->cols, CUDA_R_16BF, epi == EPI_ADD ? 1.0f : 0.0f,
                 out.p, N, CUDA_R_16BF, b ? b->bf : NULL, 1, 0, 0, 0, 0, epi == EPI_GELU);
}

void cuda_linear(pi0_backend *be, pt out, pt x, const pi0_wt *W, const pi0_wt *b, int M, int N, int K, int k0,
                 enum pi0_epi epi) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0) return;
    wview w = cuda_wv(c, W), bv = b ? cuda_wv(c, b) : wview{};
    cuda_linear_v(be, out, x, &w, b ? &bv : NULL, M, N, K, k0, epi);
}

// x += [gate *] bf16(y . W^T) in gemv.cu's epilogue, the result also stored to save if not NULL: 1 if it ran. A save
// takes the few-row kernel itself (up to 16 rows); past 16 rows cuda_gemv takes gemv_wg, which has none.
static int residual_gemv(cuda_ctx *c, pt x, pt save, pt y, const pi0_wt *W, int M, int N, int K, pt gate,
                         int gate_stride, int rows_per_gate) {
    if (!c->fused_small || M > (save.p ? 16 : GEMV_ROWS) || cuda_wv(c, W).q8) return 0;   // (int8: linear's own path)
    gemv_args g = {};
    g.x = (const bf16 *)y.p; g.w = wbf(c, W); g.M = M; g.N = N; g.K = K; g.ldx = K; g.ldw = (int)W->cols;
    g.epi = gate.p ? GEMV_GATED_ADD : GEMV_ADD;
    g.y = (bf16 *)x.p; g.ldy = N; g.save = (bf16 *)save.p;
    g.gate = (const float *)gate.p; g.gate_stride = gate_stride; g.rows_per_gate = rows_per_gate;
    return cuda_gemv(c, &g, 0);
}

// x += gate * bf16(y . W^T) (backend.h linear_gated): gemv.cu's epilogue for few rows, else the product into tmp
// and the gated add (the same roundings either way)
void cuda_linear_gated(pi0_backend *be, pt x, pt tmp, pt y, const pi0_wt *W, int M, int N, int K, pt gate,
                       int gate_stride, int rows_per_gate) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0) return;
    if (residual_gemv(c, x, pt{}, y, W, M, N, K, gate, gate_stride, rows_per_gate)) return;
    cuda_linear(be, tmp, y, W, NULL, M, N, K, 0, EPI_STORE);
    cuda_gated_add(be, x, tmp, gate, gate_stride, rows_per_gate, M, N);
}

// Up to 16 rows: the residual add in gemv.cu's epilogue, which stores the result twice; else the add, then a copy.
void cuda_residual_save(pi0_backend *be, pt x, pt save, pt tmp, pt y, const pi0_wt *W, int M, int N, int K, pt gate,
                        int gate_stride, int rows_per_gate) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0) return;
    if (residual_gemv(c, x, save, y, W, M, N, K, gate, gate_stride, rows_per_gate)) return;
    if (gate.p) cuda_linear_gated(be, x, tmp, y, W, M, N, K, gate, gate_stride, rows_per_gate);
    else cuda_linear(be, x, y, W, NULL, M, N, K, 0, EPI_ADD);
    if (save.p) cuda_copy_rows(be, save, pt{}, x, pt{}, M, N);
}

// ---- fused projections: q|k|v and gate|up as one product when the weights are adjacent in the arena
// (backend.cu places them so), then one kernel splits (q, k, v) or applies gelu(gate) * up. ----

// The split kernels below take V = 8 columns per thread (16-byte accesses) when the widths and pointers
// allow it, else V = 1. The scalar versions (gelu*up at M = 788 moves 77 MB, the SigLIP q|k|v split 10.6 MB)
// ran well below the memory bandwidth (bench/RESULTS.md L22).

// Splits the fused [M, nq + nk + nv] product into q, k, v and applies RoPE to q and k (same formula as
// rope_kernel): one thread per (row, head of q|k|v, V consecutive i < hd/2), rotating the pairs (i, i + hd/2).
enum { ROPE_MAX_HALF = 256 };
template <int V>
__global__ void split3_rope_kernel(bf16 *q, bf16 *k, bf16 *v, const bf16 *f, const int32_t *pos, int M, int nq, int nk,
                                   int nv, int hd) {
    // inv_freq[i] in shared memory, made before the wait (it reads no input): one double pow per entry and
    // block instead of one per element (the per-element pow made this kernel slow at M = 788, bench/RESULTS.md L23)
    __shared__ float freq[ROPE_MAX_HALF];
    int half = hd / 2, w = nq + nk + nv, per = w / 2 / V;
    for (int i = threadIdx.x; i < half && i < ROPE_MAX_HALF; i += blockDim.x) freq[i] = (float)pow(10000.0, -2.0 * i / hd);
    __syncthreads();
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)M * per) return;
    int r = (int)(idx / per), p = (int)(idx % per) * V, head = p / half, i = p % half, col = head * hd + i;
    const bf16 *src = f + (size_t)r * w + col;
    float x1[V], x2[V], y1[V], y2[V];
    ldv<V>(x1, src);
    ldv<V>(x2, src + half);
    bf16 *dst;
    if (col < nq) dst = q + (size_t)r * nq + col;
    else if (col < nq + nk) dst = k + (size_t)r * nk + col - nq;
    else {
        dst = v + (size_t)r * nv + col - nq - nk;
        stv<V>(dst, x1);
        stv<V>(dst + half, x2);
        return;
    }
#pragma unroll
    for (int e = 0; e < V; e++) {
        float inv_freq = i + e < ROPE_MAX_HALF ? freq[i + e] : (float)pow(10000.0, -2.0 * (i + e) / hd);
        float th = (float)pos[r] * inv_freq;
        float cs = cosf(th), sn = sinf(th);
        y1[e] = x1[e] * cs - x2[e] * sn;
        y2[e] = x2[e] * cs + x1[e] * sn;
    }
    stv<V>(dst, y1);
    stv<V>(dst + half, y2);
}

// out (M, F) = gelu_tanh(gate) * up from the fused [M, 2F] product (gate columns first).
template <int V>
__global__ void gelu_mul_split_kernel(bf16 *out, const bf16 *f, int M, int F) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    int per = F / V;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)M * per) return;
    size_t r = idx / per;
    int col = (int)(idx % per) * V;
    float g[V], u[V];
    ldv<V>(g, f + r * 2 * F + col);
    ldv<V>(u, f + r * 2 * F + F + col);
#pragma unroll
    for (int e = 0; e < V; e++) g[e] = gelu_tanh(g[e]) * u[e];
    stv<V>(out + r * F + col, g);
}

// The n weights are one [sum rows, K] matrix: the store placed them as one group (backend.cu), in this order.
int cuda_adjacent(const cuda_ctx *c, const pi0_wt *const *w, int n) {
    for (int i = 0; i + 1 < n; i++)
        if (cuda_wv(c, w[i]).next != w[i + 1]->id) return 0;
    return 1;
}

// Without RoPE (SigLIP): split the fused product into q, k, v adding each projection's fp32 bias.
template <int V>
__global__ void split3_bias_kernel(bf16 *q, bf16 *k, bf16 *v, const bf16 *f, const float *bq, const float *bk,
                                   const float *bv, int M, int nq, int nk, int nv) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    int w = nq + nk + nv, per = w / V;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)M * per) return;
    int r = (int)(idx / per), col = (int)(idx % per) * V;
    float x[V];
    ldv<V>(x, f + (size_t)r * w + col);
    bf16 *dst;
    const float *b;
    if (col < nq) { dst = q + (size_t)r * nq + col; b = bq ? bq + col : NULL; }
    else if (col < nq + nk) { dst = k + (size_t)r * nk + col - nq; b = bk ? bk + col - nq : NULL; }
    else { dst = v + (size_t)r * nv + col - nq - nk; b = bv ? bv + col - nq - nk : NULL; }
    if (b)
#pragma unroll
        for (int e = 0; e < V; e++) x[e] += b[e];
    stv<V>(dst, x);
}



// Past 16 rows gemv.cu has no norm prologue: the norm kernel first (then *pre = NULL: nothing left to fold).
static pt gemv_prenorm(pi0_backend *be, pt y, const pi0_prenorm **pre, int M, int K) {
    if (M <= 16 || !*pre) return y;
    y = prenorm_rows(be, y, *pre, M, K);
    *pre = NULL;
    return y;
}

// The pre-norm (backend.h pi0_prenorm) as gemv.cu's prologue: RMSNorm weights or one adaRMS row for all M.
static void gemv_norm(const cuda_ctx *c, gemv_args *g, const pi0_prenorm *pre, int M, int K) {
    if (!pre || (!pre->w && pre->rows_per_mod < M)) return;
    g->norm_a = pre->w ? wf32(c, pre->w) : (const float *)pre->mod.p;
    g->norm_b = pre->w ? NULL : (const float *)pre->mod.p + K;
    g->eps = pre->eps;
}

void cuda_qkv(pi0_backend *be, pt q, pt k, pt v, pt y, const pi0_proj3 *p, int M, int K, pt pos, int hd,
              const pi0_prenorm *pre) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0) return;
    int nq = (int)p->w[0]->rows, nk = (int)p->w[1]->rows, nv = (int)p->w[2]->rows, n = nq + nk + nv;
    int rope = pos.p != NULL, biased = p->b[0] || p->b[1] || p->b[2];
    if (c->fused_small && M <= GEMV_ROWS && rope && !biased && cuda_adjacent(c, p->w, 3)) {   // product, RoPE, split
        y = gemv_prenorm(be, y, &pre, M, K);
        gemv_args g = {};
        g.x = (const bf16 *)y.p; g.w = wbf(c, p->w[0]); g.M = M; g.N = n; g.K = K; g.ldx = K; g.ldw = K;
        g.pair = hd / 2; g.epi = GEMV_QKV_ROPE;
        g.q = (bf16 *)q.p; g.k = (bf16 *)k.p; g.v = (bf16 *)v.p; g.nq = nq; g.nk = nk; g.hd = hd;
        g.pos = (const int32_t *)pos.p;
        gemv_norm(c, &g, pre, M, K);
        if ((!pre || g.norm_a) && cuda_gemv(c, &g, 0)) return;
    }
    y = prenorm_rows(be, y, pre, M, K);
    if (!cuda_adjacent(c, p->w, 3) || (size_t)M * n > c->fused_cap || (rope && (biased || nq % hd || nk % hd || nv % hd))) {
        pt out[3] = {q, k, v};
        for (int i = 0; i < 3; i++) cuda_linear(be, out[i], y, p->w[i], p->b[i], M, (int)p->w[i]->rows, K, 0, EPI_STORE);
        if (rope) cuda_rope(be, q, nq / hd, k, nk / hd, pos, M, hd);
        return;
    }
    // Equal widths, outputs and biases equally spaced (model.c allocates SigLIP's q, k, v as one buffer; the
    // store places a layer's three biases as one group): one strided-batched product over the three projections,
    // biases in the epilogue, nothing to split (the split pass was one more launch per SigLIP layer,
    // bench/RESULTS.md L27).
    const char *b0 = (const char *)wbf(c, p->b[0]), *b1 = (const char *)wbf(c, p->b[1]), *b2 = (const char *)wbf(c, p->b[2]);
    int bgroup = b0 && b1 && b2 && cuda_adjacent(c, p->b, 3);
    long long dq = (long long)(k.p - q.p), dk = (long long)(v.p - k.p), db = b0 ? (long long)(b1 - b0) : 0;
    // (non-overlapping outputs; every batch's output and bias as aligned as the first, which cuBLASLt assumes)
    if (!rope && nq == nk && nk == nv && dq == dk && dq >= 2LL * M * nq && dq % 256 == 0 && b0 && b1 && b2 &&
        bgroup && b2 - b1 == db && db > 0 && db % 256 == 0) {
        cuda_gemm_ex(c, 1, M, nq, K, 1.0f, y.p, K, CUDA_R_16BF, wbf(c, p->w[0]), K, CUDA_R_16BF, 0.0f, q.p, nq, CUDA_R_16BF,
                     b0, 3, 0, (long long)nq * K, dq / 2, db / 2, 0);
        return;
    }
    // bf16 product, then the split adds the fp32 bias: rounding differs from a bf16 bias epilogue by
    // at most one bf16 ulp (covered by the op test bound)
    cuda_gemm(c, 1, M, n, K, 1.0f, y.p, K, CUDA_R_16BF, wbf(c, p->w[0]), K, CUDA_R_16BF, 0.0f, c->fused, n, CUDA_R_16BF,
              NULL, 1, 0, 0, 0);
    if (rope) {
        int v8 = hd % 16 == 0 && aligned16(q.p) && aligned16(k.p) && aligned16(v.p);   // widths are multiples of hd
        cuda_launch(c, v8 ? split3_rope_kernel<8> : split3_rope_kernel<1>, dim3(cdiv((long long)M * n / 2 / (v8 ? 8 : 1), 256)),
                    dim3(256), 0, (bf16 *)q.p, (bf16 *)k.p, (bf16 *)v.p, c->fused, (const int32_t *)pos.p, M, nq, nk, nv, hd);
    } else {
        int v8 = nq % 8 == 0 && nk % 8 == 0 && nv % 8 == 0 && aligned16(q.p) && aligned16(k.p) && aligned16(v.p);
        cuda_launch(c, v8 ? split3_bias_kernel<8> : split3_bias_kernel<1>, dim3(cdiv((long long)M * n / (v8 ? 8 : 1), 256)),
                    dim3(256), 0, (bf16 *)q.p, (bf16 *)k.p, (bf16 *)v.p, c->fused, wf32(c, p->b[0]), wf32(c, p->b[1]),
                    wf32(c, p->b[2]), M, nq, nk, nv);
    }
}

// out = gelu(gate) * up in one few-row launch, the products also stored to gs, us if not NULL (then up to 16 rows:
// gemv_wg has no such store), the pre-norm folded in where gemv.cu can: 1 if it ran.
static int gateup_gemv(cuda_ctx *c, pt out, pt gs, pt us, pt y, const pi0_gemma_layer *L, int M, int F, int K,
                       const pi0_prenorm *pre) {
    const pi0_wt *w[2] = {&L->gate, &L->up};
    if (!c->fused_small || M > (gs.p ? 16 : GEMV_ROWS) || !cuda_adjacent(c, w, 2)) return 0;
    gemv_args g = {};
    g.x = (const bf16 *)y.p; g.w = wbf(c, &L->gate); g.M = M; g.N = 2 * F; g.K = K; g.ldx = K; g.ldw = K;
    g.pair = F; g.epi = GEMV_GELU_MUL; g.y = (bf16 *)out.p; g.ldy = F; g.gs = (bf16 *)gs.p; g.us = (bf16 *)us.p;
    gemv_norm(c, &g, pre, M, K);
    return (!pre || g.norm_a) && cuda_gemv(c, &g, 0);
}

void cuda_mlp_up(pi0_backend *be, pt out, pt tmp, pt y, const pi0_gemma_layer *L, int M, int F, int K,
                 const pi0_prenorm *pre) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0) return;
    const pi0_wt *w[2] = {&L->gate, &L->up};
    if (c->fused_small && M <= GEMV_ROWS && cuda_adjacent(c, w, 2)) {   // one launch: product, gelu(gate) * up
        y = gemv_prenorm(be, y, &pre, M, K);
        if (gateup_gemv(c, out, pt{}, pt{}, y, L, M, F, K, pre)) return;
    }
    y = prenorm_rows(be, y, pre, M, K);
    if (M > GEMV_ROWS && cuda_adjacent(c, w, 2) &&   // one launch: gateup.cu
        cuda_gateup(c, (bf16 *)out.p, (const bf16 *)y.p, K, wbf(c, &L->gate), M, F, K, 0))
        return;
    if (!cuda_adjacent(c, w, 2) || (size_t)M * 2 * F > c->fused_cap) {
        cuda_linear(be, out, y, &L->gate, NULL, M, F, K, 0, EPI_STORE);
        cuda_linear(be, tmp, y, &L->up, NULL, M, F, K, 0, EPI_STORE);
        cuda_gelu_mul(be, out, out, tmp, M, F);
        return;
    }
    cuda_gemm(c, 1, M, 2 * F, K, 1.0f, y.p, K, CUDA_R_16BF, wbf(c, &L->gate), K, CUDA_R_16BF, 0.0f, c->fused, 2 * F,
              CUDA_R_16BF, NULL, 1, 0, 0, 0);
    int v8 = F % 8 == 0 && aligned16(out.p);
    cuda_launch(c, v8 ? gelu_mul_split_kernel<8> : gelu_mul_split_kernel<1>, dim3(cdiv((long long)M * F / (v8 ? 8 : 1), 256)),
                dim3(256), 0, (bf16 *)out.p, c->fused, M, F);
}

// Up to 16 rows: mlp_up's one launch with the products stored as well (gemv.cu's GELU_MUL epilogue; the gelu reads
// them unrounded, as mlp_up does); else the products apart and gelu_mul on them, as the CPU twin composes it.
void cuda_mlp_up_save(pi0_backend *be, pt out, pt gs, pt us, pt y, const pi0_gemma_layer *L, int M, int F, int K,
                      const pi0_prenorm *pre) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0) return;
    if (gateup_gemv(c, out, gs, us, y, L, M, F, K, pre)) return;
    y = prenorm_rows(be, y, pre, M, K);
    cuda_linear(be, gs, y, &L->gate, NULL, M, F, K, 0, EPI_STORE);
    cuda_linear(be, us, y, &L->up, NULL, M, F, K, 0, EPI_STORE);
    cuda_gelu_mul(be, out, gs, us, M, F);
}
