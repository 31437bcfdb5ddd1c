// wprod_lab.cu — (session 21) wprod.cu's plain products (weights as the wgmma A operand; bias, GELU or residual in
// the epilogue; SigLIP's q|k|v as three output segments) against the production path (cuBLASLt, tuned, with its
// epilogue; SigLIP's q|k|v as the strided batch over the three projections, Gemma's as the product into the fused
// buffer and the split + RoPE pass), through the backend's linear / qkv ops.
// us per product, 10 in a graph, median of 9 replays, in two settings:
//   cold: the 10 products cycle over copies of the weights (> 100 MB in all), so they stream from DRAM as in the
//         pipeline; hot: one copy, in L2 after the first product (the labs before this one).
// Outputs are compared with cuBLASLt's (rel L2, one product from the same input; the residual reset first).
// `wprod_lab [name-prefix ...]` (default: every shape); build and run: sh bench/kernels/run_lab.sh build / run OUTDIR.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/cuda/common.cuh"
#include "lab.cuh"

struct shape {
    const char *name;
    int M, N, K, bias, epi, qkv;   // qkv 1: SigLIP's, three segments of N / 3; 2: Gemma's, q 2048, k and v 256, RoPE
};
static const shape shapes[] = {
    {"siglip-qkv", 768, 3456, 1152, 1, EPI_STORE, 1},
    {"siglip-o", 768, 1152, 1152, 1, EPI_ADD, 0},
    {"siglip-fc1", 768, 4304, 1152, 1, EPI_GELU, 0},
    {"siglip-fc2", 768, 1152, 4304, 1, EPI_ADD, 0},
    {"projector", 768, 2048, 1152, 1, EPI_STORE, 0},
    {"libero-siglip-qkv", 512, 3456, 1152, 1, EPI_STORE, 1},
    {"libero-siglip-o", 512, 1152, 1152, 1, EPI_ADD, 0},
    {"libero-siglip-fc1", 512, 4304, 1152, 1, EPI_GELU, 0},
    {"libero-siglip-fc2", 512, 1152, 4304, 1, EPI_ADD, 0},
    {"prefix-qkv-rope", 788, 2560, 2048, 0, EPI_STORE, 2},
    {"prefix-o", 788, 2048, 2048, 0, EPI_ADD, 0},
    {"prefix-down", 788, 2048, 16384, 0, EPI_ADD, 0},
    {"pi05-prefix-qkv-rope", 968, 2560, 2048, 0, EPI_STORE, 2},
    {"pi05-prefix-o", 968, 2048, 2048, 0, EPI_ADD, 0},
    {"pi05-prefix-down", 968, 2048, 16384, 0, EPI_ADD, 0},
    {"b8-expert-qkv-rope", 88, 2560, 1024, 0, EPI_STORE, 2},
    {"b8-expert-o", 88, 1024, 2048, 0, EPI_ADD, 0},
    {"b8-expert-gateup", 88, 8192, 1024, 0, EPI_STORE, 0},
    {"b8-expert-down", 88, 1024, 4096, 0, EPI_ADD, 0},
    {"b8-siglip-qkv", 6144, 3456, 1152, 1, EPI_STORE, 1},
    {"b8-siglip-fc1", 6144, 4304, 1152, 1, EPI_GELU, 0},
    {"b8-siglip-fc2", 6144, 1152, 4304, 1, EPI_ADD, 0},
    {"b8-prefix-qkv-rope", 6304, 2560, 2048, 0, EPI_STORE, 2},
    {"b8-prefix-o", 6304, 2048, 2048, 0, EPI_ADD, 0},
    {"b8-prefix-down", 6304, 2048, 16384, 0, EPI_ADD, 0},
    {"b64-siglip-fc1", 49152, 4304, 1152, 1, EPI_GELU, 0},
    {"b64-prefix-down", 50432, 2048, 16384, 0, EPI_ADD, 0},
};
static const int widths[] = {0, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256};

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

__global__ void widen_kernel(float *dst, const bf16 *src, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __bfloat162float(src[i]);
}

int main(int argc, char **argv) {
    pi0_backend *be = NULL;
    if (cuda_backend_create(&be, 0) != PI0_OK) { printf("backend: %s\n", pi0_last_error()); return 1; }
    cuda_ctx *c = CTX(be);
    const int reps = 10;
    printf("wprod_lab: %d SMs; us per product (10 per graph, median of 9 replays); cold = weights from DRAM\n", c->sms);
    for (const shape &sh : shapes) {
        int want = argc < 2;
        for (int i = 1; i < argc; i++) want |= !strncmp(sh.name, argv[i], strlen(argv[i]));
        if (!want) continue;
        const int M = sh.M, N = sh.N, K = sh.K, hd = 256;
        const int rows[3] = {sh.qkv == 1 ? N / 3 : sh.qkv == 2 ? N - 2 * hd : N, sh.qkv == 1 ? N / 3 : hd, sh.qkv == 1 ? N / 3 : hd};
        const size_t wbytes = (size_t)N * K * 2;
        const int copies = (int)fmin(reps, ceil(100e6 / wbytes));
        bf16 *X, *W, *Y, *Y0, *R, *B;
        float *B32;
        int32_t *P;
        CK(cudaMalloc(&X, (size_t)M * K * 2));
        CK(cudaMalloc(&W, wbytes * copies));
        CK(cudaMalloc(&Y, (size_t)M * N * 2));
        CK(cudaMalloc(&Y0, (size_t)M * N * 2));
        CK(cudaMalloc(&R, (size_t)M * N * 2));
        CK(cudaMalloc(&B, (size_t)N * 2));
        CK(cudaMalloc(&B32, (size_t)N * 4));
        CK(cudaMalloc(&P, (size_t)M * 4));
        {
            int32_t *hp = (int32_t *)malloc((size_t)M * 4);
            for (int i = 0; i < M; i++) hp[i] = (i * 7919) % 1000;   // positions as at B > 1: repeated, not sorted
            CK(cudaMemcpy(P, hp, (size_t)M * 4, cudaMemcpyHostToDevice));
            free(hp);
        }
        if (be->reserve(be, 0, 0, 0, (size_t)M * N) != PI0_OK) { printf("reserve: %s\n", pi0_last_error()); return 1; }
        fill_kernel<<<1024, 256>>>(X, (size_t)M * K, 1, 1.0f);
        fill_kernel<<<1024, 256>>>(W, (size_t)N * K * copies, 2, 1.7f / sqrtf((float)K));
        fill_kernel<<<1024, 256>>>(R, (size_t)M * N, 3, 1.0f);
        fill_kernel<<<64, 256>>>(B, (size_t)N, 4, 0.1f);
        widen_kernel<<<(N + 255) / 256, 256>>>(B32, B, N);
        CK(cudaDeviceSynchronize());
        // the weights as the backend sees them (copy i of each: dev at W + i N K)
        pi0_wt w3[3][reps], b3[3];
        memset(w3, 0, sizeof w3);
        memset(b3, 0, sizeof b3);
        for (int j = 0, r0 = 0; j < (sh.qkv ? 3 : 1); r0 += rows[j], j++) {
            for (int i = 0; i < reps; i++) {
                pi0_wt &w = w3[j][i];
                w.dtype = PI0_DT_BF16; w.rows = rows[j]; w.cols = K;
                w.dev = W + (size_t)(i % copies) * N * K + (size_t)r0 * K;
            }
            b3[j].dtype = PI0_DT_BF16; b3[j].rows = rows[j]; b3[j].cols = 1;
            b3[j].dev = B + r0; b3[j].dev32 = B32 + r0;
        }
        const enum pi0_epi epi = (enum pi0_epi)sh.epi;
        auto run = [&](int i) {
            const pt y = {(char *)Y, PT_ACT}, x = {(char *)X, PT_ACT};
            if (sh.qkv) {   // q, k, v one after the other in Y
                pi0_proj3 p = {{&w3[0][i], &w3[1][i], &w3[2][i]}, {&b3[0], &b3[1], &b3[2]}};
                if (sh.qkv == 2) p.b[0] = p.b[1] = p.b[2] = NULL;
                const pt k = {(char *)(Y + (size_t)M * rows[0]), PT_ACT}, v = {(char *)(Y + (size_t)M * (rows[0] + rows[1])), PT_ACT};
                be->qkv(be, y, k, v, x, &p, M, K, sh.qkv == 2 ? pt{(char *)P, PT_I32} : pt{}, sh.qkv == 2 ? hd : 0, NULL);
            } else {
                be->linear(be, y, x, &w3[0][i], sh.bias ? &b3[0] : NULL, M, N, K, 0, epi);
            }
        };
        auto once = [&](bf16 *dst) {   // one product from the reset residual, into dst
            CK(cudaMemcpyAsync(Y, R, (size_t)M * N * 2, cudaMemcpyDeviceToDevice, c->stream));
            run(0);
            CK(cudaMemcpyAsync(dst, Y, (size_t)M * N * 2, cudaMemcpyDeviceToDevice, c->stream));
            CK(cudaStreamSynchronize(c->stream));
            if (c->err) { printf("%s: %s\n", sh.name, c->errmsg); exit(1); }
        };
        cuda_wprod_force(0);
        once(Y0);   // cuBLASLt (tunes)
        float lt_cold = lab_graph_median_ms(c->stream, &c->capturing, [&] { for (int r = 0; r < reps; r++) run(r); });
        float lt_hot = lab_graph_median_ms(c->stream, &c->capturing, [&] { for (int r = 0; r < reps; r++) run(0); });
        const double flop = 2.0 * M * N * K;
        printf("%s M=%d N=%d K=%d %s%s (%d weight copies): cuBLASLt cold %.2f hot %.2f us (%.0f / %.0f TFLOP/s)\n", sh.name, M, N,
               K, epi == EPI_ADD ? "add" : epi == EPI_GELU ? "gelu" : "store", sh.bias ? "+b" : "", copies, lt_cold * 1e3 / reps,
               lt_hot * 1e3 / reps, flop / (lt_cold * 1e-3 / reps) / 1e12, flop / (lt_hot * 1e-3 / reps) / 1e12);
        for (int bn : widths) {
            if (bn > M || (bn && bn < 128 && M > 4096)) continue;
            cuda_wprod_force(bn ? bn : -1);
            long l0 = cuda_wprod_launches();
            once(Y);
            if (cuda_wprod_launches() != l0 + 1) { printf("  width %d: refused\n", bn); continue; }
            double worst, err = rel_l2(Y, Y0, (size_t)M * N, &worst);
            float cold = lab_graph_median_ms(c->stream, &c->capturing, [&] { for (int r = 0; r < reps; r++) run(r); });
            float hot = bn ? 0 : lab_graph_median_ms(c->stream, &c->capturing, [&] { for (int r = 0; r < reps; r++) run(0); });
            const int tt = bn ? (M + bn - 1) / bn : 0, tiles = tt * ((N + 127) / 128);
            char label[16];
            snprintf(label, sizeof label, bn ? "%d" : "auto", bn);
            printf("  wprod %4s: %4d tiles (%3d token tiles)  cold %8.2f us (%4.0f TFLOP/s, %+5.1f%%)%s", label, tiles, tt,
                   cold * 1e3 / reps, flop / (cold * 1e-3 / reps) / 1e12, 100.0 * (cold / lt_cold - 1), bn ? "" : "  hot");
            if (!bn) printf(" %8.2f us (%+5.1f%%)", hot * 1e3 / reps, 100.0 * (hot / lt_hot - 1));
            printf("  rel L2 %.1e (worst %.3g)\n", err, worst);
        }
        cuda_wprod_force(0);
        CK(cudaFree(X)); CK(cudaFree(W)); CK(cudaFree(Y)); CK(cudaFree(Y0)); CK(cudaFree(R)); CK(cudaFree(B)); CK(cudaFree(B32)); CK(cudaFree(P));
    }
    be->destroy(be);
    return 0;
}
