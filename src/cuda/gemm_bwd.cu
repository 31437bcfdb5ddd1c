// gemm_bwd.cu — linear's transposes for exact real-time chunking (backend.h linear_t, linear_t_cat; docs/model.md
// 3.11): out (M, K) [op]= dy (M, N) . W[:, k0:k0+K], W row-major [N, cols], and the same over weights that read one
// input side by side. ACT rows: cuBLASLt on the weight as stored (gemm.cu's cuda_gemm_ex: gemm.cu stays the only
// cuBLASLt caller), or for few rows the forward product (cuda_linear, gemv.cu) on a transposed copy of the weights,
// made once per weight and session and kept here. F32 rows: cuBLASLt in fp32, the forward fp32 product on a
// transposed copy, or linear_t_f32_kernel. CPU twins: cpu_linear_t, cpu_linear_t_cat (double sums).
// Layout legend: M rows, N out features of the forward product, K its in features.
#include <stdlib.h>

#include "common.cuh"

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

// out[k * ldo + n] = w[n * K + k] (w [N, K] row-major): 32 x 32 tiles through shared memory (once per weight and session)
template <typename T>
__global__ void transpose_kernel(T *out, int ldo, const T *w, int N, int K) {
    __shared__ T tile[32][33];
    int k0 = blockIdx.x * 32, n0 = blockIdx.y * 32;
    for (int i = threadIdx.y; i < 32; i += 8)
        if (n0 + i < N && k0 + threadIdx.x < K) tile[i][threadIdx.x] = w[(size_t)(n0 + i) * K + k0 + threadIdx.x];
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8)
        if (k0 + i < K && n0 + threadIdx.x < N) out[(size_t)(k0 + i) * ldo + n0 + threadIdx.x] = tile[threadIdx.x][i];
}

// The transposed copy [K, ld] of the weights W[0..nw) (rows[i] x K each, whole matrices) side by side: columns
// c_i .. c_i + rows[i] hold W[i]^T, c_i the rows before it, and the columns past their sum are zero; bf16, or with f32
// the weights' fp32 copies in fp32. Keyed by the first and last weights' ids, nw, K, ld and f32 (a session reads one
// model's weights), made at its first use, and the stream
// synchronised once then: its consumers read weights before their programmatic-launch wait, which only constants
// may (common.cuh). NULL where it cannot be had (out of memory, or first met while a graph is being captured: then
// the caller's fallback reads the weights as they are). The expert's transposes cost the weights' size again
// (π0: 614 MiB), kept until the session ends.
static const void *transposed(cuda_ctx *c, const pi0_wt *const *W, const int *rows, int nw, int K, int ld, int f32) {
    for (int i = 0; i < c->n_wts; i++)
        if (c->wts[i].w == W[0]->id && c->wts[i].wl == W[nw - 1]->id && c->wts[i].nw == nw && c->wts[i].k == K &&
            c->wts[i].ld == ld && c->wts[i].f32 == f32)
            return c->wts[i].wt;
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
    size_t es = f32 ? sizeof(float) : sizeof(bf16);
    if (cudaMalloc(&wt, (size_t)K * ld * es) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    int col = 0;
    for (int i = 0; i < nw; col += rows[i], i++) {
        dim3 grid(cdiv(K, 32), cdiv(rows[i], 32)), block(32, 8);
        if (f32) transpose_kernel<<<grid, block, 0, c->stream>>>((float *)wt + col, ld, cuda_wv(c, W[i]).f32, rows[i], K);
        else transpose_kernel<<<grid, block, 0, c->stream>>>((bf16 *)wt + col, ld, cuda_wv(c, W[i]).bf, rows[i], K);
    }
    if (col < ld) cudaMemset2DAsync((char *)wt + col * es, (size_t)ld * es, 0, (size_t)(ld - col) * es, K, c->stream);
    if (cudaStreamSynchronize(c->stream) != cudaSuccess) {   // (once per copy and session, never under capture)
        cudaGetLastError();
        cudaFree(wt);
        return NULL;
    }
    c->wts[c->n_wts].w = W[0]->id;
    c->wts[c->n_wts].wl = W[nw - 1]->id;
    c->wts[c->n_wts].k = K;
    c->wts[c->n_wts].nw = nw;
    c->wts[c->n_wts].ld = ld;
    c->wts[c->n_wts].f32 = f32;
    c->wts[c->n_wts++].wt = wt;
    return wt;
}

#ifdef PI0_CUDA_TESTING
extern "C" void cuda_forget_transposes(pi0_backend *be) {
    cuda_ctx *c = CTX(be);
    cudaStreamSynchronize(c->stream);
    for (int i = 0; i < c->n_wts; i++) cudaFree(c->wts[i].wt);
    c->n_wts = 0;
}
#endif

void cuda_linear_t(pi0_backend *be, pt out, pt dy, const pi0_wt *W, int M, int N, int K, int k0, enum pi0_epi epi) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0 || K <= 0) return;
    int add = epi == EPI_ADD;
    wview w = cuda_wv(c, W);
    if (dy.kind == PT_F32) {
        PI0_ASSERT(out.kind == PT_F32);
        // 64 rows and more (B >= 2 at the 50-step horizon): cuBLASLt in fp32 on the fp32 copy, as cuda_linear does
        // (gemm.cu: the kernel's shape suits few rows)
        if (M >= 64 && w.f32) {
            cuda_gemm_ex(c, 0, M, K, N, 1.0f, dy.p, N, CUDA_R_32F, w.f32 + k0, (int)W->cols, CUDA_R_32F,
                         add ? 1.0f : 0.0f, out.p, K, CUDA_R_32F, NULL, 1, 0, 0, 0, 0, 0);
            return;
        }
        // fewer: the forward fp32 kernel on a transposed copy (the weights' own values: bf16, or the fp32 copy of an
        // F32 / F16 file), which spreads the output columns over blocks; the kernel below walks all N rows in each
        // block and was slow at N = 1024 (the action MLP's transposes, bench/RESULTS.md L139)
        int f32w = w.f32 && W->dtype != PI0_DT_BF16;
        const void *tw = k0 == 0 && K == W->cols ? transposed(c, &W, &N, 1, K, N, f32w) : NULL;
        if (tw) {
            wview T = {};
            T.rows = K; T.cols = N;
            if (f32w) { T.dtype = PI0_DT_F32; T.f32 = (const float *)tw; }   // (no bf16 copy: bf stays NULL)
            else { T.dtype = PI0_DT_BF16; T.bf = (const bf16 *)tw; }
            cuda_linear_v(be, out, dy, &T, NULL, M, K, N, 0, epi);
            return;
        }
        dim3 grid(cdiv(K, LT_COLS), cdiv(M, LT_ROWS));
        if (w.f32 && W->dtype != PI0_DT_BF16)   // an F32 / F16 file: its own values, as cuda_linear reads them
            cuda_launch(c, linear_t_f32_kernel<float>, grid, dim3(32 * LT_WARPS), 0, (float *)out.p, (const float *)dy.p,
                        w.f32 + k0, M, N, K, (int)W->cols, add);
        else
            cuda_launch(c, linear_t_f32_kernel<bf16>, grid, dim3(32 * LT_WARPS), 0, (float *)out.p, (const float *)dy.p,
                        w.bf + k0, M, N, K, (int)W->cols, add);
        return;
    }
    PI0_ASSERT(dy.kind == PT_ACT && out.kind == PT_ACT);
    // few rows (the denoise at small batches): the product with a transposed copy of the whole weight, as a forward
    // linear, so that gemv.cu's few-row kernel streams it (cuBLASLt reading the weight untransposed was slower
    // at 51 rows: bench/RESULTS.md L136)
    const void *wt = M <= GEMV_ROWS && k0 == 0 && K == W->cols ? transposed(c, &W, &N, 1, K, N, 0) : NULL;
    if (wt) {
        wview T = {};
        T.dtype = PI0_DT_BF16; T.rows = K; T.cols = N; T.bf = (const bf16 *)wt;
        cuda_linear_v(be, out, dy, &T, NULL, M, K, N, 0, epi);
        return;
    }
    // gemm.cu's trans_w = 0: the weight as it is stored, row-major [N, cols] read as [inner N, out K] with row
    // stride cols; EPI_ADD as beta = 1 (formed in fp32, rounded to bf16 once)
    cuda_gemm_ex(c, 0, M, K, N, 1.0f, dy.p, N, CUDA_R_16BF, w.bf + k0, (int)W->cols, CUDA_R_16BF,
                 add ? 1.0f : 0.0f, out.p, K, CUDA_R_16BF, NULL, 1, 0, 0, 0, 0, 0);
}

// Few rows: one product over the concatenated transposes (zero-padded to ld columns, so that a padded ld makes the
// inner dimension a multiple of gemv.cu's 1024-column slices: the expert's q|k|v, 2560 columns, as 3072); else one
// cuBLASLt product per weight on dy's columns (stride ld), the first storing or adding as asked, the rest adding.
void cuda_linear_t_cat(pi0_backend *be, pt out, pt dy, int ld, const pi0_wt *const *W, int nw, int M, int K,
                       enum pi0_epi epi) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0 || K <= 0 || nw <= 0) return;
    PI0_ASSERT(dy.kind == PT_ACT && out.kind == PT_ACT && nw <= 8);
    int rows[8], sum = 0;
    for (int i = 0; i < nw; i++) {
        PI0_ASSERT(W[i]->cols == K);
        rows[i] = (int)W[i]->rows;
        sum += rows[i];
    }
    PI0_ASSERT(ld >= sum);
    const void *wt = M <= GEMV_ROWS ? transposed(c, W, rows, nw, K, ld, 0) : NULL;
    if (wt) {
        wview T = {};
        T.dtype = PI0_DT_BF16; T.rows = K; T.cols = ld; T.bf = (const bf16 *)wt;
        cuda_linear_v(be, out, dy, &T, NULL, M, K, ld, 0, epi);
        return;
    }
    for (int i = 0, col = 0; i < nw; col += rows[i], i++)
        cuda_gemm_ex(c, 0, M, K, rows[i], 1.0f, (const bf16 *)dy.p + col, ld, CUDA_R_16BF, cuda_wv(c, W[i]).bf, K,
                     CUDA_R_16BF, i || epi == EPI_ADD ? 1.0f : 0.0f, out.p, K, CUDA_R_16BF, NULL, 1, 0, 0, 0, 0, 0);
}
