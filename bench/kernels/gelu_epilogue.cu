// gelu_epilogue.cu — which GELU does cuBLASLt's GELU_BIAS epilogue compute, and what does it save?
// SigLIP's fc1 shape (M = 768 = 3 images x 256 tokens, N = 4304, K = 1152, docs/model.md 3.4): the product with the
// GELU_BIAS epilogue in fp32 output is compared with the tanh form and the erf form of GELU applied (in
// double, on the host) to the same product with the BIAS epilogue only. The tanh form must agree to fp32
// rounding and the erf form must not (they differ by up to ~1e-3 where |x| ~ 2). Then the bf16 timings:
// version 0 = bias epilogue + the separate GELU kernel (the path before), version 1 = GELU_BIAS epilogue.
// Build and run: sh bench/kernels/run_lab.sh build / run OUTDIR.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../src/cuda/common.cuh"
#include "lab.cuh"

// Version 0's GELU pass: the in-place kernel that src/cuda/elementwise.cu ran after the bias epilogue
// before the GELU moved into the epilogue (16-byte accesses, 6.7 us at this shape under ncu).
__global__ void gelu_kernel(bf16 *x, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= n) return;
    float v[8];
    ldv<8>(v, x + i);
#pragma unroll
    for (int e = 0; e < 8; e++) v[e] = gelu_tanh(v[e]);
    stv<8>(x + i, v);
}

int main(void) {
    const int M = 768, N = 4304, K = 1152;
    pi0_backend *be = NULL;
    if (cuda_backend_create(&be, 0, NULL) != PI0_OK) { printf("backend: %s\n", pi0_last_error()); return 1; }
    cuda_ctx *c = CTX(be);
    bf16 *X, *W, *Yb;
    float *b32, *Y0, *Y1;
    CK(cudaMalloc(&X, (size_t)M * K * 2));
    CK(cudaMalloc(&W, (size_t)N * K * 2));
    CK(cudaMalloc(&Yb, (size_t)M * N * 2));
    CK(cudaMalloc(&b32, (size_t)N * 4));
    CK(cudaMalloc(&Y0, (size_t)M * N * 4));
    CK(cudaMalloc(&Y1, (size_t)M * N * 4));
    fill_kernel<<<1024, 256>>>(X, (size_t)M * K, 1, 2.0f);
    fill_kernel<<<1024, 256>>>(W, (size_t)N * K, 2, 0.1f);   // pre-activations mostly within |x| < 4
    float *hb = (float *)malloc((size_t)N * 4);
    for (int i = 0; i < N; i++) hb[i] = 0.5f * sinf((float)i);
    CK(cudaMemcpy(b32, hb, (size_t)N * 4, cudaMemcpyHostToDevice));
    cuda_gemm_ex(c, 1, M, N, K, 1.0f, X, K, CUDA_R_16BF, W, K, CUDA_R_16BF, 0.0f, Y0, N, CUDA_R_32F, b32, 1, 0, 0, 0, 0, 0);
    cuda_gemm_ex(c, 1, M, N, K, 1.0f, X, K, CUDA_R_16BF, W, K, CUDA_R_16BF, 0.0f, Y1, N, CUDA_R_32F, b32, 1, 0, 0, 0, 0, 1);
    CK(cudaStreamSynchronize(c->stream));
    if (c->err) { printf("gemm: %s\n", c->errmsg); return 1; }
    float *y0 = (float *)malloc((size_t)M * N * 4), *y1 = (float *)malloc((size_t)M * N * 4);
    CK(cudaMemcpy(y0, Y0, (size_t)M * N * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(y1, Y1, (size_t)M * N * 4, cudaMemcpyDeviceToHost));
    double dt = 0, de = 0, nt = 0, ne = 0, mt = 0, me = 0, amax = 0;
    for (size_t i = 0; i < (size_t)M * N; i++) {
        double x = y0[i], gt = 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
        double ge = 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
        dt += (y1[i] - gt) * (y1[i] - gt); nt += gt * gt; mt = fmax(mt, fabs(y1[i] - gt));
        de += (y1[i] - ge) * (y1[i] - ge); ne += ge * ge; me = fmax(me, fabs(y1[i] - ge));
        amax = fmax(amax, fabs(x));
    }
    printf("GELU_BIAS epilogue (fp32 out, |x| <= %.2f) vs tanh form: rel_l2 %.2e max_abs %.2e; vs erf form: rel_l2 %.2e "
           "max_abs %.2e -> %s\n", amax, sqrt(dt / nt), mt, sqrt(de / ne), me,
           mt < 1e-4 && me > 10 * mt ? "tanh form" : mt < me ? "closer to tanh (check)" : "NOT the tanh form");
    bf16 *bb;   // bf16 bias for the bf16-output products
    CK(cudaMalloc(&bb, (size_t)N * 2));
    fill_kernel<<<16, 256>>>(bb, N, 3, 0.5f);
    struct { const char *name; int gelu; } vers[] = {{"v0 bias + gelu kernel", 0}, {"v1 GELU_BIAS epilogue", 1}};
    for (auto &v : vers) {
        auto body = [&] {
            cuda_gemm_ex(c, 1, M, N, K, 1.0f, X, K, CUDA_R_16BF, W, K, CUDA_R_16BF, 0.0f, Yb, N, CUDA_R_16BF, bb, 1, 0, 0, 0,
                         0, v.gelu);
            if (!v.gelu) gelu_kernel<<<cdiv((long long)M * N / 8, 256), 256, 0, c->stream>>>(Yb, (size_t)M * N);
        };
        body();
        CK(cudaStreamSynchronize(c->stream));
        float ms = lab_graph_median_ms(c->stream, &c->capturing, body);
        printf("fc1 M=%d N=%d K=%d  %-24s %8.2f us\n", M, N, K, v.name, ms * 1e3);
    }
    be->destroy(be);
    return 0;
}
