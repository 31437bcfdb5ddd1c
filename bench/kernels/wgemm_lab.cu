// wgemm_lab.cu — the wgmma product (wgemm.cuh) against cuBLASLt (tuned, as gemm.cu runs it) on the
// products of pi0-3cam (SigLIP M = 768, prefix M = 788), the 50-step horizon (M = 51) and batch 8, in us per
// product (10 products in a graph, median of 9 replays). Each wgmma result is checked against cuBLASLt's.
// Build and run: sh bench/kernels/run_lab.sh build / run OUTDIR.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/cuda/common.cuh"
#include "lab.cuh"
#include "wgemm.cuh"

static double rel_l2(const bf16 *a, const bf16 *b, size_t n) {
    bf16 *ha = (bf16 *)malloc(n * 2), *hb = (bf16 *)malloc(n * 2);
    CK(cudaMemcpy(ha, a, n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb, b, n * 2, cudaMemcpyDeviceToHost));
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        double x = __bfloat162float(ha[i]), y = __bfloat162float(hb[i]);
        d += (x - y) * (x - y);
        r += y * y;
    }
    free(ha);
    free(hb);
    return sqrt(d / (r > 0 ? r : 1));
}

struct shape { const char *name; int M, N, K, bias, epi; };

// `wgemm_lab once I BN`: product I of the table once on wgmma with BN-wide tiles (for ncu); no arguments: the table
int main(int argc, char **argv) {
    const int once = argc == 4 && !strcmp(argv[1], "once"), once_i = once ? atoi(argv[2]) : -1,
              once_bn = once ? atoi(argv[3]) : 0;
    pi0_backend *be = NULL;
    if (cuda_backend_create(&be, 0) != PI0_OK) { printf("backend: %s\n", pi0_last_error()); return 1; }
    cuda_ctx *lt = CTX(be), *wg = lt;
    const shape shapes[] = {
        {"siglip qkv", 768, 3456, 1152, 1, WG_STORE},  {"siglip o", 768, 1152, 1152, 1, WG_ADD},
        {"siglip fc1", 768, 4304, 1152, 1, WG_GELU},   {"siglip fc2", 768, 1152, 4304, 1, WG_ADD},
        {"prefix qkv", 788, 2560, 2048, 0, WG_STORE},  {"prefix o", 788, 2048, 2048, 0, WG_ADD},
        {"prefix gate|up", 788, 32768, 2048, 0, WG_STORE}, {"prefix down", 788, 2048, 16384, 0, WG_ADD},
        {"h50 qkv", 51, 2560, 1024, 0, WG_STORE},      {"h50 o", 51, 1024, 2048, 0, WG_ADD},
        {"h50 gate|up", 51, 8192, 1024, 0, WG_STORE},  {"h50 down", 51, 1024, 4096, 0, WG_ADD},
        {"b8 siglip fc2", 6144, 1152, 4304, 1, WG_ADD}, {"b8 prefix gate|up", 6304, 32768, 2048, 0, WG_STORE},
        {"b8 prefix down", 6304, 2048, 16384, 0, WG_ADD},
        {"one 128x256 tile", 128, 256, 16384, 0, WG_STORE}, {"8 tiles along N", 128, 2048, 16384, 0, WG_STORE},
    };
    size_t maxx = 0, maxw = 0, maxy = 0;
    for (const shape &s : shapes) {
        maxx = fmax(maxx, (size_t)s.M * s.K);
        maxw = fmax(maxw, (size_t)s.N * s.K);
        maxy = fmax(maxy, (size_t)s.M * s.N);
    }
    bf16 *X, *W, *Y0, *Y1, *B;
    CK(cudaMalloc(&X, maxx * 2));
    CK(cudaMalloc(&W, maxw * 2));
    CK(cudaMalloc(&Y0, maxy * 2));
    CK(cudaMalloc(&Y1, maxy * 2));
    CK(cudaMalloc(&B, 65536 * 2));
    fill_kernel<<<1024, 256>>>(X, maxx, 1, 1.0f);
    fill_kernel<<<1024, 256>>>(W, maxw, 2, 0.03f);
    fill_kernel<<<64, 256>>>(B, 65536, 3, 0.5f);
    CK(cudaDeviceSynchronize());
    const int reps = 10, n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    if (once) {
        if (once_i < 0 || once_i >= n_shapes) { printf("product index 0..%d\n", n_shapes - 1); return 1; }
        const shape &s = shapes[once_i];
        wg_args a = {};
        a.y = Y1; a.bias = s.bias ? B : NULL; a.M = s.M; a.N = s.N; a.K = s.K; a.ldy = s.N; a.epi = s.epi; a.group = s.N;
        for (int r = 0; r < 3; r++) cuda_wgemm(wg, once_bn, X, s.K, W, s.N, s.K, &a);
        CK(cudaStreamSynchronize(wg->stream));
        printf("%s on wg%d: %s\n", s.name, once_bn, wg->err ? wg->errmsg : "ok");
        return 0;
    }
    printf("%-20s %6s %6s %6s | %9s %9s %9s | %8s %8s | TFLOP/s best\n", "product", "M", "N", "K", "cuBLASLt", "wg128",
           "wg256", "err128", "err256");
    for (const shape &s : shapes) {
        size_t ny = (size_t)s.M * s.N;
        const bf16 *bias = s.bias ? B : NULL;
        float beta = s.epi == WG_ADD ? 1.0f : 0.0f;
        auto lt_run = [&] {
            cuda_gemm_ex(lt, 1, s.M, s.N, s.K, 1.0f, X, s.K, CUDA_R_16BF, W, s.K, CUDA_R_16BF, beta, Y0, s.N, CUDA_R_16BF,
                         bias, 1, 0, 0, 0, 0, s.epi == WG_GELU);
        };
        CK(cudaMemsetAsync(Y0, 0, ny * 2, lt->stream));
        lt_run();   // tunes, and the reference output (residual 0)
        CK(cudaStreamSynchronize(lt->stream));
        float t[3] = {0, 0, 0};
        double err[2] = {0, 0};
        t[0] = lab_graph_median_ms(lt->stream, &lt->capturing, [&] { for (int r = 0; r < reps; r++) lt_run(); });
        CK(cudaMemsetAsync(Y0, 0, ny * 2, lt->stream));
        lt_run();
        for (int v = 0; v < 2; v++) {
            int bn = v ? 256 : 128;
            wg_args a = {};
            a.y = Y1; a.bias = bias; a.M = s.M; a.N = s.N; a.K = s.K; a.ldy = s.N; a.epi = s.epi; a.group = s.N;
            CK(cudaMemsetAsync(Y1, 0, ny * 2, wg->stream));
            if (!cuda_wgemm(wg, bn, X, s.K, W, s.N, s.K, &a)) { printf("wgemm refused %s\n", s.name); return 1; }
            CK(cudaStreamSynchronize(wg->stream));
            if (wg->err) { printf("wgemm: %s\n", wg->errmsg); return 1; }
            err[v] = rel_l2(Y1, Y0, ny);
            t[1 + v] = lab_graph_median_ms(wg->stream, &wg->capturing, [&] {
                for (int r = 0; r < reps; r++) cuda_wgemm(wg, bn, X, s.K, W, s.N, s.K, &a);
            });
        }
        float best = fminf(t[0], fminf(t[1], t[2])) * 1e3f / reps;
        printf("%-20s %6d %6d %6d | %9.2f %9.2f %9.2f | %8.1e %8.1e | %.0f\n", s.name, s.M, s.N, s.K, t[0] * 1e3 / reps,
               t[1] * 1e3 / reps, t[2] * 1e3 / reps, err[0], err[1], 2.0 * s.M * s.N * s.K / (best * 1e-6) / 1e12);
    }
    // gate|up with gelu(gate) * up in the epilogue (F = 16384 outputs): the production path before it was cuBLASLt's
    // product (the gate|up rows above) and a gelu * up pass (24.5 us at M = 788 under ncu)
    for (int M : {788, 6304}) {
        const int F = 16384, K = 2048;
        wg_args a = {};
        a.y = Y1; a.M = M; a.N = F; a.K = K; a.ldy = F; a.epi = WG_GELU_MUL; a.group = F; a.pair = F;
        float tg = lab_graph_median_ms(wg->stream, &wg->capturing, [&] {
            for (int r = 0; r < reps; r++) cuda_wgemm(wg, 256, X, K, W, 2 * F, K, &a);
        });
        printf("prefix gate|up M=%d with the gelu*up epilogue (wg256): %.2f us\n", M, tg * 1e3 / reps);
    }
    be->destroy(be);
    return 0;
}
