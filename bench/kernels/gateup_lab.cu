// gateup_lab.cu — (bench/RESULTS.md L92) the prefix's gate|up product with gelu(gate) * up fused (src/cuda/gateup.cu, every
// token tile width) against the path before it: cuBLASLt's product into the fused [M, 2F] buffer (tuned, as gemm.cu
// runs it) and the gelu * up pass. us per product (10 in a graph, median of 9 replays); outputs compared (rel L2);
// "auto" is the width that gateup.cu picks.
// `gateup_lab [M ...]` (default 788 543 968 6304); build and run: sh bench/kernels/run_lab.sh build / run OUTDIR.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/cuda/common.cuh"
#include "lab.cuh"

// the production pass (gemm.cu's gelu_mul_split_kernel<8>)
__global__ void pass_kernel(bf16 *out, const bf16 *f, int M, int F) {
    pdl_wait();
    pdl_trigger();
    const int per = F / 8;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)M * per) return;
    size_t r = idx / per;
    int col = (int)(idx % per) * 8;
    float g[8], u[8];
    ldv<8>(g, f + r * 2 * F + col);
    ldv<8>(u, f + r * 2 * F + F + col);
#pragma unroll
    for (int e = 0; e < 8; e++) g[e] = gelu_tanh(g[e]) * u[e];
    stv<8>(out + r * F + col, g);
}

static double rel_l2(const bf16 *a, const bf16 *b, size_t n, double *worst) {
    bf16 *ha = (bf16 *)malloc(n * 2), *hb = (bf16 *)malloc(n * 2);
    CK(cudaMemcpy(ha, a, n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb, b, n * 2, cudaMemcpyDeviceToHost));
    double d = 0, r = 0, w = 0;
    for (size_t i = 0; i < n; i++) {
        double x = __bfloat162float(ha[i]), y = __bfloat162float(hb[i]);
        d += (x - y) * (x - y);
        r += y * y;
        w = fmax(w, fabs(x - y));
    }
    free(ha);
    free(hb);
    *worst = w;
    return sqrt(d / (r > 0 ? r : 1));
}

static int gateup_any(cuda_ctx *c, int bn, bf16 *out, const bf16 *x, const bf16 *w, int M, int F, int K) {
    return cuda_gateup(c, out, x, K, w, M, F, K, bn);
}

// `gateup_lab [M ...]`: the table; `gateup_lab once M BN` (BN = -1: cuBLASLt + pass, 0: the picked width): 3 runs, for ncu
int main(int argc, char **argv) {
    const int once = argc == 4 && !strcmp(argv[1], "once");
    int Ms[16], nm = 0;
    for (int i = once ? 2 : 1; i < (once ? 3 : argc) && nm < 16; i++) Ms[nm++] = atoi(argv[i]);
    if (!nm) { Ms[0] = 788; Ms[1] = 543; Ms[2] = 968; Ms[3] = 6304; nm = 4; }
    pi0_backend *be = NULL;
    if (cuda_backend_create(&be, 0, NULL) != PI0_OK) { printf("backend: %s\n", pi0_last_error()); return 1; }
    cuda_ctx *c = CTX(be);
    const int F = 16384, K = 2048, reps = 10;
    const int bns[] = {0, 136, 152, 168, 184, 200, 216, 232, 248, 256}, nb = 10;
    int maxm = 0;
    for (int i = 0; i < nm; i++) maxm = Ms[i] > maxm ? Ms[i] : maxm;
    bf16 *X, *W, *Yf, *Y0, *Y1;
    CK(cudaMalloc(&X, (size_t)maxm * K * 2));
    CK(cudaMalloc(&W, (size_t)2 * F * K * 2));
    CK(cudaMalloc(&Yf, (size_t)maxm * 2 * F * 2));
    CK(cudaMalloc(&Y0, (size_t)maxm * F * 2));
    CK(cudaMalloc(&Y1, (size_t)maxm * F * 2));
    fill_kernel<<<1024, 256>>>(X, (size_t)maxm * K, 1, 1.0f);
    fill_kernel<<<1024, 256>>>(W, (size_t)2 * F * K, 2, 0.03f);
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < nm; i++) {
        const int M = Ms[i];
        const size_t ny = (size_t)M * F;
        auto lt = [&] {
            cuda_gemm_ex(c, 1, M, 2 * F, K, 1.0f, X, K, CUDA_R_16BF, W, K, CUDA_R_16BF, 0.0f, Yf, 2 * F, CUDA_R_16BF, NULL, 1,
                         0, 0, 0, 0, 0);
        };
        auto pass = [&] { cuda_launch(c, pass_kernel, dim3((unsigned)((ny / 8 + 255) / 256)), dim3(256), 0, Y0, (const bf16 *)Yf, M, F); };
        lt();   // tunes
        pass();
        CK(cudaStreamSynchronize(c->stream));
        if (c->err) { printf("lt: %s\n", c->errmsg); return 1; }
        if (once) {
            const int bn = atoi(argv[3]);
            for (int r = 0; r < 3; r++) {
                if (bn >= 0) gateup_any(c, bn, Y1, X, W, M, F, K);
                else { lt(); pass(); }
            }
            CK(cudaStreamSynchronize(c->stream));
            printf("once M=%d bn=%d: %s\n", M, bn, c->err ? c->errmsg : "ok");
            return 0;
        }
        float t_lt = lab_graph_median_ms(c->stream, &c->capturing, [&] { for (int r = 0; r < reps; r++) lt(); });
        float t_pass = lab_graph_median_ms(c->stream, &c->capturing, [&] { for (int r = 0; r < reps; r++) pass(); });
        float t_sum = lab_graph_median_ms(c->stream, &c->capturing, [&] { for (int r = 0; r < reps; r++) { lt(); pass(); } });
        printf("M=%d: cuBLASLt %.2f + pass %.2f, together %.2f us\n", M, t_lt * 1e3 / reps, t_pass * 1e3 / reps,
               t_sum * 1e3 / reps);
        for (int v = 0; v < nb; v++) {
            const int bn = bns[v], tiles = bn ? (M + bn - 1) / bn : 0;
            if (bn && bn < 184 && M > 1024) continue;
            CK(cudaMemsetAsync(Y1, 0, ny * 2, c->stream));
            if (!gateup_any(c, bn, Y1, X, W, M, F, K)) { printf("gateup refused M=%d bn=%d\n", M, bn); return 1; }
            CK(cudaStreamSynchronize(c->stream));
            if (c->err) { printf("gateup: %s\n", c->errmsg); return 1; }
            double worst, err = rel_l2(Y1, Y0, ny, &worst);
            float t = lab_graph_median_ms(c->stream, &c->capturing, [&] { for (int r = 0; r < reps; r++) gateup_any(c, bn, Y1, X, W, M, F, K); });
            char label[16];
            snprintf(label, sizeof label, bn ? "%d" : "auto", bn);
            printf("  gateup bn=%4s: %2d token tiles (%5d rows, +%4.1f%%)  %8.2f us  %5.0f TFLOP/s useful  rel L2 %.1e (worst %.3g)\n",
                   label, tiles, tiles * bn, 100.0 * (tiles * bn - M) / M, t * 1e3 / reps,
                   2.0 * M * 2 * F * K / (t * 1e-3 / reps) / 1e12, err, worst);
        }
    }
    be->destroy(be);
    return 0;
}
