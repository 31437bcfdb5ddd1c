// linear_i8.cu — linear with an int8 weight (backend.h linear; the format: quant.h, docs/precision.md), and with an
// E4M3 one (cuda_linear_f8, at the end). The input rows
// (bf16) are quantised first, one scale per row (quant_rows_kernel); then the int32 products: up to I8_FEW_ROWS rows
// by i8_smem_kernel (or i8_rows_kernel for shapes it lacks), which streams each weight row once (the denoise's few rows
// read little else), more by cuBLASLt's
// int8 kernels (tensor cores) into int32 scratch, in chunks of the scratch's rows, and i8_dequant_kernel. The output is
// quant_dequant's, one fused multiply-add in fp32, then the epilogue, rounded once to bf16. The products are exact, so
// the result is the CPU twin's (cpu_linear's int8 path) up to that rounding and the GELU's few ulp.
#include <cuda_fp8.h>
#include <float.h>

#include "common.cuh"

enum { I8_FEW_ROWS = 64, I8_PASS = 16, I8_WARPS = 4, I8_ACC_BYTES = 64 << 20 };

// quant.h quant_i8 and quant_row_i8, on the device: the same operations, so the same bits.
__device__ __forceinline__ int8_t quant_i8_dev(float x, float s) {
    if (!(s > 0.0f)) return 0;
    float v = rintf(__fdiv_rn(x, s));
    return (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
}

__device__ __forceinline__ float amax_op(float a, float b) { return b > a || b != b ? b : a; }   // NaN sticks

// f8_code on the device: the conversion rounds to nearest even and saturates to 448, as f8_code does.
__device__ __forceinline__ uint8_t f8_code_dev(float v) { return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3); }

// One block per row: the row's absolute maximum (NaN kept), its scale, its codes: int8 (quant_row_i8) or E4M3
// (quant_row_f8, F8).
template <bool F8>
__global__ void __launch_bounds__(256) quant_rows_kernel(int8_t *q, float *s, const bf16 *x, int K) {
    pdl_wait();
    pdl_trigger();
    __shared__ float part[8];
    const bf16 *xr = x + (size_t)blockIdx.x * K;
    float a = 0.0f;
    for (int k = threadIdx.x; k < K; k += blockDim.x) a = amax_op(a, fabsf(__bfloat162float(xr[k])));
    for (int o = 16; o; o >>= 1) a = amax_op(a, __shfl_xor_sync(0xffffffffu, a, o));
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = a;
    __syncthreads();
    a = part[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) a = amax_op(a, part[w]);
    float sc = a <= FLT_MAX ? __fdiv_rn(a, F8 ? 448.0f : 127.0f) : __int_as_float(0x7fc00000);
    if (threadIdx.x == 0) s[blockIdx.x] = sc;
    int8_t *qr = q + (size_t)blockIdx.x * K;
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
        float v = __bfloat162float(xr[k]);
        qr[k] = !(sc > 0.0f) ? 0 : F8 ? (int8_t)f8_code_dev(__fdiv_rn(v, sc)) : quant_i8_dev(v, sc);   // (NaN sc: 0)
    }
}

// quant_dequant and the epilogue (an int8 product's int32 acc rounded to fp32 on the way in)
__device__ __forceinline__ float i8_out(float acc, float sx, float sw, float b, const bf16 *old, int epi) {
    float v = __fmaf_rn(acc, __fmul_rn(sx, sw), b);
    if (epi == EPI_ADD) v = __fadd_rn(__bfloat162float(*old), v);
    else if (epi == EPI_GELU) v = gelu_tanh(v);
    return v;
}

__device__ __forceinline__ int dot4(int a, int b, int c) { return __dp4a(a, b, c); }

// Few rows: one warp per output feature n streams its weight row once (16 bytes per lane and step, VEC: K % 16 == 0),
// up to I8_PASS rows at a time read from L1 / L2, and writes the rows' outputs.
template <bool VEC>
__global__ void __launch_bounds__(32 * I8_WARPS) i8_rows_kernel(bf16 *y, const int8_t *xq, const float *xs,
                                                                  const int8_t *w, const float *ws, const float *bias,
                                                                  int M, int N, int K, int epi) {
    const int lane = threadIdx.x & 31, n = blockIdx.x * I8_WARPS + (threadIdx.x >> 5);
    pdl_wait();
    pdl_trigger();
    if (n >= N) return;
    const int8_t *wr = w + (size_t)n * K;
    for (int m0 = 0; m0 < M; m0 += I8_PASS) {
        const int rows = M - m0 < I8_PASS ? M - m0 : I8_PASS;
        int acc[I8_PASS] = {};
        if (VEC) {
            for (int k = lane * 16; k < K; k += 32 * 16) {
                int4 wv = __ldg((const int4 *)(wr + k));
#pragma unroll
                for (int r = 0; r < I8_PASS; r++) {
                    if (r >= rows) break;
                    int4 xv = __ldg((const int4 *)(xq + (size_t)(m0 + r) * K + k));
                    acc[r] = dot4(wv.x, xv.x, dot4(wv.y, xv.y, dot4(wv.z, xv.z, dot4(wv.w, xv.w, acc[r]))));
                }
            }
        } else {
            for (int k = lane; k < K; k += 32) {
                int wk = wr[k];
#pragma unroll
                for (int r = 0; r < I8_PASS; r++)
                    if (r < rows) acc[r] += wk * (int)xq[(size_t)(m0 + r) * K + k];
            }
        }
#pragma unroll
        for (int r = 0; r < I8_PASS; r++)
            for (int o = 16; o; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
        const float b = bias ? bias[n] : 0.0f, sw = ws[n];
#pragma unroll
        for (int r = 0; r < I8_PASS; r++)
            if (lane == r && r < rows) {
                bf16 *o = y + (size_t)(m0 + r) * N + n;
                *o = __float2bfloat16(i8_out(acc[r], xs[m0 + r], sw, b, o, epi));
            }
    }
}

// Few rows, K % 16 == 0 and the rows' int8 values fit in shared memory: they are staged there once per block, and each
// of the block's I8S_WARPS warps streams I8S_FEAT weight rows, 16 bytes per lane and step, against every staged row
// (i8_rows_kernel reads the rows from L1 / L2 once per feature, which cost more than the weights themselves).
enum { I8S_WARPS = 4, I8S_FEAT = 2 };
__global__ void __launch_bounds__(32 * I8S_WARPS) i8_smem_kernel(bf16 *y, const int8_t *xq, const float *xs,
                                                                   const int8_t *w, const float *ws, const float *bias,
                                                                   int M, int N, int K, int epi) {
    extern __shared__ int4 xsm[];   // [rows][K / 16]
    const int lane = threadIdx.x & 31, n0 = (blockIdx.x * I8S_WARPS + (threadIdx.x >> 5)) * I8S_FEAT, kv = K / 16;
    pdl_wait();
    pdl_trigger();
    for (int i = threadIdx.x; i < M * kv; i += blockDim.x) xsm[i] = __ldg((const int4 *)xq + i);
    __syncthreads();
    if (n0 >= N) return;
    const int4 *wr[I8S_FEAT];
#pragma unroll
    for (int f = 0; f < I8S_FEAT; f++) wr[f] = (const int4 *)(w + (size_t)(n0 + f < N ? n0 + f : N - 1) * K);
    for (int m0 = 0; m0 < M; m0 += I8_PASS) {
        const int rows = M - m0 < I8_PASS ? M - m0 : I8_PASS;
        int acc[I8S_FEAT][I8_PASS] = {};
#pragma unroll 2
        for (int k = lane; k < kv; k += 32) {
            int4 wv[I8S_FEAT];
#pragma unroll
            for (int f = 0; f < I8S_FEAT; f++) wv[f] = __ldg(wr[f] + k);
#pragma unroll
            for (int r = 0; r < I8_PASS; r++) {
                if (r >= rows) break;
                int4 xv = xsm[(m0 + r) * kv + k];
#pragma unroll
                for (int f = 0; f < I8S_FEAT; f++)
                    acc[f][r] = dot4(wv[f].x, xv.x, dot4(wv[f].y, xv.y, dot4(wv[f].z, xv.z, dot4(wv[f].w, xv.w, acc[f][r]))));
            }
        }
#pragma unroll
        for (int f = 0; f < I8S_FEAT; f++)
#pragma unroll
            for (int r = 0; r < I8_PASS; r++)
                for (int o = 16; o; o >>= 1) acc[f][r] += __shfl_xor_sync(0xffffffffu, acc[f][r], o);
#pragma unroll
        for (int f = 0; f < I8S_FEAT; f++)
#pragma unroll
            for (int r = 0; r < I8_PASS; r++)
                if (lane == f * I8_PASS + r && r < rows && n0 + f < N) {
                    const int n = n0 + f;
                    bf16 *o = y + (size_t)(m0 + r) * N + n;
                    *o = __float2bfloat16(i8_out(acc[f][r], xs[m0 + r], ws[n], bias ? bias[n] : 0.0f, o, epi));
                }
    }
}

// The outputs of `rows` rows from cuBLASLt's int32 (int8) or fp32 (E4M3) products (row-major, N per row).
template <typename ACC>
__global__ void i8_dequant_kernel(bf16 *y, const ACC *acc, const float *xs, const float *ws, const float *bias,
                                  int rows, int N, int epi) {
    pdl_wait();
    pdl_trigger();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)rows * N) return;
    int m = (int)(i / N), n = (int)(i % N);
    y[i] = __float2bfloat16(i8_out((float)acc[i], xs[m], ws[n], bias ? bias[n] : 0.0f, y + i, epi));
}

// Rows of scratch per cuBLASLt chunk: the int32 products of I8_ACC_BYTES, whole tiles of 64 rows, at most max_rows.
static size_t chunk_rows(const cuda_wstore *s, size_t max_rows) {
    size_t r = (size_t)I8_ACC_BYTES / 4 / (size_t)s->q8_n;
    r = r < 64 ? 64 : r / 64 * 64;
    return r < max_rows ? r : max_rows;
}

// Scratch for the rows of one pass: all of them up to I8_FEW_ROWS (the rows kernel's products take one pass), else a
// cuBLASLt chunk (at least I8_FEW_ROWS rows).
pi0_status cuda_reserve_i8(cuda_ctx *c, size_t max_rows) {
    size_t rows = max_rows;
    if (max_rows > I8_FEW_ROWS) {
        rows = chunk_rows(c->ws, max_rows);
        if (rows < I8_FEW_ROWS) rows = I8_FEW_ROWS;
    }
    if (rows <= c->xq_rows && c->ws->q8_k <= c->xq_k && c->ws->q8_n <= c->acc_n) return PI0_OK;
    if (rows < c->xq_rows) rows = c->xq_rows;
    cudaFree(c->xq);
    cudaFree(c->xs);
    cudaFree(c->acc);
    c->xq = NULL; c->xs = NULL; c->acc = NULL; c->xq_rows = 0; c->xq_k = c->acc_n = 0;
    if (CUDA_NOTE(c, cudaMalloc((void **)&c->xq, rows * (size_t)c->ws->q8_k)) ||
        CUDA_NOTE(c, cudaMalloc((void **)&c->xs, rows * sizeof(float))) ||
        CUDA_NOTE(c, cudaMalloc((void **)&c->acc, rows * (size_t)c->ws->q8_n * 4))) {
        pi0_status st = pi0_fail(c->err, "CUDA device %d: the 8-bit products' scratch: %s", c->device, c->errmsg);
        c->err = PI0_OK;
        cudaGetLastError();
        return st;
    }
    c->xq_rows = rows;
    c->xq_k = c->ws->q8_k;
    c->acc_n = c->ws->q8_n;
    return PI0_OK;
}

void cuda_linear_i8(cuda_ctx *c, pt out, pt x, const wview *W, const float *bias, int M, int N, int K, enum pi0_epi epi) {
    if (c->err || M <= 0) return;
    PI0_ASSERT(c->xq_rows > 0 && K <= c->xq_k && N <= c->acc_n);
    const bf16 *xb = (const bf16 *)x.p;
    bf16 *yb = (bf16 *)out.p;
    // cuBLASLt's int8 kernels want the dimensions in multiples of 4 (their TN layout); the rows kernel takes the rest
    int lt = M > I8_FEW_ROWS && K % 4 == 0 && N % 4 == 0;
    size_t chunk = lt ? c->xq_rows : (size_t)M < c->xq_rows ? (size_t)M : c->xq_rows;
    for (int m0 = 0; m0 < M; m0 += (int)chunk) {
        int rows = M - m0 < (int)chunk ? M - m0 : (int)chunk;
        cuda_launch(c, quant_rows_kernel<false>, dim3(rows), dim3(256), 0, c->xq, c->xs, xb + (size_t)m0 * K, K);
        bf16 *y = yb + (size_t)m0 * N;
        if (lt) {
            cuda_gemm_ex(c, 1, rows, N, K, 1.0f, c->xq, K, CUDA_R_8I, W->q8, K, CUDA_R_8I, 0.0f, c->acc, N, CUDA_R_32I,
                         NULL, 1, 0, 0, 0, 0, 0);
            cuda_launch(c, i8_dequant_kernel<int32_t>, dim3(cdiv((long long)rows * N, 256)), dim3(256), 0, y, c->acc, c->xs, W->s8,
                        bias, rows, N, (int)epi);
        } else if (K % 16 == 0 && (size_t)rows * K <= (size_t)c->smem_optin) {   // (the expert's 51 rows: 204 KB at most)
            size_t smem = (size_t)rows * K;
            if (smem > 48 << 10)
                CUDA_NOTE(c, cudaFuncSetAttribute(i8_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, c->smem_optin));
            cuda_launch(c, i8_smem_kernel, dim3(cdiv(N, I8S_WARPS * I8S_FEAT)), dim3(32 * I8S_WARPS), smem, y, c->xq, c->xs,
                        W->q8, W->s8, bias, rows, N, K, (int)epi);
        } else {
            int vec = K % 16 == 0;
            cuda_launch(c, vec ? i8_rows_kernel<true> : i8_rows_kernel<false>, dim3(cdiv(N, I8_WARPS)), dim3(32 * I8_WARPS),
                        0, y, c->xq, c->xs, W->q8, W->s8, bias, rows, N, K, (int)epi);
        }
    }
}

// ---- E4M3 (docs/precision.md 8) ----

// 16 E4M3 codes to fp32 (exact: every E4M3 value is a half)
__device__ __forceinline__ void f8_unpack16(uint4 v, float *f) {
    const __nv_fp8x2_storage_t *p = (const __nv_fp8x2_storage_t *)&v;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        __half2 h = __half2(__nv_cvt_fp8x2_to_halfraw2(p[i], __NV_E4M3));
        float2 t = __half22float2(h);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}

__device__ __forceinline__ float f8_val(uint8_t c) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(c, __NV_E4M3))); }

// The products cuBLASLt does not take (few rows, sizes not multiples of 16, or no FP8 algorithm on this GPU): one warp
// per output feature streams its weight row (16 codes per lane and step where K % 16 == 0), up to I8_PASS rows at a
// time, fp32 accumulation.
template <bool VEC>
__global__ void __launch_bounds__(32 * I8_WARPS) f8_rows_kernel(bf16 *y, const uint8_t *xq, const float *xs,
                                                                  const uint8_t *w, const float *ws, const float *bias,
                                                                  int M, int N, int K, int epi) {
    const int lane = threadIdx.x & 31, n = blockIdx.x * I8_WARPS + (threadIdx.x >> 5);
    pdl_wait();
    pdl_trigger();
    if (n >= N) return;
    const uint8_t *wr = w + (size_t)n * K;
    for (int m0 = 0; m0 < M; m0 += I8_PASS) {
        const int rows = M - m0 < I8_PASS ? M - m0 : I8_PASS;
        float acc[I8_PASS] = {};
        if (VEC) {
            for (int k = lane * 16; k < K; k += 32 * 16) {
                float wf[16], xf[16];
                f8_unpack16(__ldg((const uint4 *)(wr + k)), wf);
#pragma unroll
                for (int r = 0; r < I8_PASS; r++) {
                    if (r >= rows) break;
                    f8_unpack16(__ldg((const uint4 *)(xq + (size_t)(m0 + r) * K + k)), xf);
#pragma unroll
                    for (int e = 0; e < 16; e++) acc[r] = __fmaf_rn(xf[e], wf[e], acc[r]);
                }
            }
        } else {
            for (int k = lane; k < K; k += 32) {
                float wk = f8_val(wr[k]);
#pragma unroll
                for (int r = 0; r < I8_PASS; r++)
                    if (r < rows) acc[r] = __fmaf_rn(f8_val(xq[(size_t)(m0 + r) * K + k]), wk, acc[r]);
            }
        }
#pragma unroll
        for (int r = 0; r < I8_PASS; r++)
            for (int o = 16; o; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
        const float b = bias ? bias[n] : 0.0f, sw = ws[n];
#pragma unroll
        for (int r = 0; r < I8_PASS; r++)
            if (lane == r && r < rows) {
                bf16 *o = y + (size_t)(m0 + r) * N + n;
                *o = __float2bfloat16(i8_out(acc[r], xs[m0 + r], sw, b, o, epi));
            }
    }
}

// The many-row products' forms: cuBLASLt with the scales in the kernel and bf16 out (0), cuBLASLt fp32 out and a pass
// that applies the scales (1), the rows kernel (2). Each is taken where the one before is not available; the op tests
// force the later ones (cuda_f8_force) to run each on one GPU, and count what ran.
static int f8_first;
#ifdef PI0_CUDA_TESTING
static long f8_ran[3];   // (atomic: contexts may run on several threads)
extern "C" void cuda_f8_force(int form) { f8_first = form; }
extern "C" long cuda_f8_launches(int form) { return __atomic_load_n(&f8_ran[form], __ATOMIC_RELAXED); }
#endif

void cuda_linear_f8(cuda_ctx *c, pt out, pt x, const wview *W, const float *bias, int M, int N, int K, enum pi0_epi epi) {
    if (c->err || M <= 0) return;
    PI0_ASSERT(c->xq_rows > 0 && K <= c->xq_k && N <= c->acc_n);
    const bf16 *xb = (const bf16 *)x.p;
    bf16 *yb = (bf16 *)out.p;
    const uint8_t *wq = (const uint8_t *)W->q8;
    uint8_t *xq = (uint8_t *)c->xq;
    // cuBLASLt's FP8 kernels want K and the leading dimensions in multiples of 16
    const int form = f8_first, lt = M > I8_FEW_ROWS && K % 16 == 0 && N % 16 == 0 && form < 2;
    size_t chunk = lt ? c->xq_rows : (size_t)M < c->xq_rows ? (size_t)M : c->xq_rows;
    for (int m0 = 0; m0 < M; m0 += (int)chunk) {
        int rows = M - m0 < (int)chunk ? M - m0 : (int)chunk;
        cuda_launch(c, quant_rows_kernel<true>, dim3(rows), dim3(256), 0, (int8_t *)xq, c->xs, xb + (size_t)m0 * K, K);
        bf16 *y = yb + (size_t)m0 * N;
        if (lt && form == 0 &&
            cuda_gemm_f8(c, rows, N, K, xq, wq, y, CUDA_R_16BF, c->xs, W->s8, bias, epi == EPI_ADD ? 1.0f : 0.0f,
                         epi == EPI_GELU)) {
            PI0_TEST_HOOK(__atomic_add_fetch(&f8_ran[0], 1, __ATOMIC_RELAXED));
            continue;
        }
        if (lt && cuda_gemm_f8(c, rows, N, K, xq, wq, c->acc, CUDA_R_32F, NULL, NULL, NULL, 0.0f, 0)) {
            cuda_launch(c, i8_dequant_kernel<float>, dim3(cdiv((long long)rows * N, 256)), dim3(256), 0, y,
                        (const float *)c->acc, c->xs, W->s8, bias, rows, N, (int)epi);
            PI0_TEST_HOOK(__atomic_add_fetch(&f8_ran[1], 1, __ATOMIC_RELAXED));
            continue;
        }
        PI0_TEST_HOOK(__atomic_add_fetch(&f8_ran[2], 1, __ATOMIC_RELAXED));
        int vec = K % 16 == 0;
        cuda_launch(c, vec ? f8_rows_kernel<true> : f8_rows_kernel<false>, dim3(cdiv(N, I8_WARPS)), dim3(32 * I8_WARPS), 0,
                    y, xq, c->xs, wq, W->s8, bias, rows, N, K, (int)epi);
    }
}
