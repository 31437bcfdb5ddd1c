// gemv_smallm.cu — kernel lab for the few-row product Y[M, N] = X[M, K] . W[N, K]^T at the action
// expert's shapes (M = 11: one state token + 10 actions; docs/model.md 3.8): q|k|v, o, gate|up, down.
//   version 0: the production cuBLASLt path (cuda_gemm in src/cuda/gemm.cu, timed algorithm choice);
//   version 1..: the production gemv.cu kernel (cuda_gemv) with its block shape (NT n-tiles of 8 rows
//   per block) forced, with and without programmatic dependent launch;
//   "epilogue": gemv with the denoise step's epilogue (RoPE split into q / cache, gelu(gate) * up).
// Each version is checked against a CPU product in double (rel L2), then timed with CUDA events over
// replays of a graph of 64 back-to-back launches that rotate over >= 256 MB of weights (so the 50 MB L2
// serves nothing twice). Prints microseconds per launch and the weight stream in TB/s.
// Build and run: make lab, then build/lab/gemv_smallm on the device machine (or sh bench/kernels/run_lab.sh run OUTDIR).
// `gemv_smallm M` takes M rows (default 11; 17 to 64 run gemv.cu's warpgroup kernel, whatever the block shape);
// `gemv_smallm once [SHAPE VERSION [M]]` runs every version (or one) 3 times without graphs (for ncu).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/cuda/common.cuh"
#include "lab.cuh"


static float b2f(bf16 v) { return __bfloat162float(v); }

struct shape { const char *name; int N, K; int fused; };   // fused: 1 qkv+rope, 2 gate|up

int main(int argc, char **argv) {
    // `once [SHAPE VERSION]`: untimed single launches (for ncu), optionally of one shape / version index
    int once = argc > 1 && !strcmp(argv[1], "once");
    const int M = !once && argc > 1 ? atoi(argv[1]) : once && argc > 4 ? atoi(argv[4]) : 11, REP = 64;
    if (M < 1 || M > 64) { printf("M must be 1 to 64\n"); return 1; }
    const char *only_shape = once && argc > 3 ? argv[2] : NULL;
    int only_v = once && argc > 3 ? atoi(argv[3]) : -1;
    pi0_backend *be = NULL;
    if (cuda_backend_create(&be, 0, NULL) != PI0_OK) { printf("backend: %s\n", pi0_last_error()); return 1; }
    cuda_ctx *c = CTX(be);
    shape shapes[] = {{"qkv", 2560, 1024, 1}, {"o", 1024, 2048, 0}, {"gate|up", 8192, 1024, 2}, {"down", 1024, 4096, 0}};
    struct { const char *name; int nt, pdl, fused; } vers[] = {
        {"v0 cuBLASLt", 0, 0, 0}, {"v1 nt1", 1, 0, 0},     {"v2 nt2", 2, 0, 0},     {"v3 nt4", 4, 0, 0},
        {"v4 nt8", 8, 0, 0},      {"v5 nt1 pdl", 1, 1, 0}, {"v6 nt2 pdl", 2, 1, 0}, {"v7 nt4 pdl", 4, 1, 0},
        {"v8 nt8 pdl", 8, 1, 0},  {"v9 default pdl", 0, 1, 0}, {"v10 epilogue pdl", 0, 1, 1}};
    int nv = sizeof vers / sizeof *vers;
    printf("%-8s %-16s %10s %9s %10s\n", "shape", "version", "us/launch", "TB/s", "rel_l2");
    for (auto &sh : shapes) {
        if (only_shape && strcmp(only_shape, sh.name)) continue;
        size_t wbytes = (size_t)sh.N * sh.K * 2;
        int nbuf = (int)((256u << 20) / wbytes) + 1;
        bf16 *W, *X, *Y, *Q, *Kc, *V;
        int32_t *pos;
        CK(cudaMalloc(&W, wbytes * nbuf));
        CK(cudaMalloc(&X, (size_t)M * sh.K * 2));
        CK(cudaMalloc(&Y, (size_t)M * sh.N * 2));
        CK(cudaMalloc(&Q, (size_t)M * sh.N * 2));
        CK(cudaMalloc(&Kc, (size_t)M * 256 * 2));
        CK(cudaMalloc(&V, (size_t)M * 256 * 2));
        CK(cudaMalloc(&pos, M * 4));
        int32_t hp[64];
        for (int i = 0; i < M; i++) hp[i] = 788 + i;
        CK(cudaMemcpy(pos, hp, M * 4, cudaMemcpyHostToDevice));
        fill_kernel<<<1024, 256>>>(W, wbytes / 2 * nbuf, 1234, 1.0f / sqrtf((float)sh.K));
        fill_kernel<<<64, 256>>>(X, (size_t)M * sh.K, 99, 1.0f);
        CK(cudaDeviceSynchronize());
        // CPU reference for weight buffer 0
        size_t nw0 = (size_t)sh.N * sh.K;
        bf16 *hw = (bf16 *)malloc(nw0 * 2), *hx = (bf16 *)malloc((size_t)M * sh.K * 2), *hy = (bf16 *)malloc((size_t)M * sh.N * 2);
        double *ref = (double *)malloc((size_t)M * sh.N * sizeof(double));
        CK(cudaMemcpy(hw, W, nw0 * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hx, X, (size_t)M * sh.K * 2, cudaMemcpyDeviceToHost));
        for (int m = 0; m < M; m++)
            for (int n = 0; n < sh.N; n++) {
                double s = 0;
                for (int k = 0; k < sh.K; k++) s += (double)b2f(hx[(size_t)m * sh.K + k]) * b2f(hw[(size_t)n * sh.K + k]);
                ref[(size_t)m * sh.N + n] = s;
            }
        for (int vi = 0; vi < nv; vi++) {
            auto &v = vers[vi];
            if ((v.fused && !sh.fused) || (only_v >= 0 && vi != only_v && vi != 0)) continue;
            c->pdl = v.pdl;
            auto call = [&](int i) {
                const bf16 *w = W + (size_t)(i % nbuf) * nw0;
                if (!v.nt && !v.pdl) {
                    cuda_gemm(c, 1, M, sh.N, sh.K, 1.0f, X, sh.K, CUDA_R_16BF, w, sh.K, CUDA_R_16BF, 0.0f, Y, sh.N,
                              CUDA_R_16BF, NULL, 1, 0, 0, 0);
                    return;
                }
                gemv_args g = {};
                g.x = X; g.w = w; g.M = M; g.N = sh.N; g.K = sh.K; g.ldx = sh.K; g.ldw = sh.K; g.y = Y; g.ldy = sh.N;
                if (v.fused) {   // the denoise step's epilogue
                    if (sh.fused == 1) {
                        g.pair = 128; g.epi = GEMV_QKV_ROPE; g.q = Q; g.k = Kc; g.v = V; g.nq = 2048; g.nk = 256;
                        g.hd = 256; g.pos = pos;
                    } else {
                        g.pair = sh.N / 2; g.epi = GEMV_GELU_MUL; g.ldy = sh.N / 2;
                    }
                }
                if (!cuda_gemv(c, &g, v.nt)) printf("  (%s not supported for %s)\n", v.name, sh.name);
            };
            // check on weight buffer 0 (plain versions only: the fused ones change the function)
            CK(cudaMemset(Y, 0xff, (size_t)M * sh.N * 2));
            call(0);
            CK(cudaStreamSynchronize(c->stream));
            if (c->err) { printf("%s %s: %s\n", sh.name, v.name, c->errmsg); return 1; }
            double num = 0, den = 0;
            if (!v.fused) {
                CK(cudaMemcpy(hy, Y, (size_t)M * sh.N * 2, cudaMemcpyDeviceToHost));
                for (size_t i = 0; i < (size_t)M * sh.N; i++) {
                    double d = b2f(hy[i]) - ref[i];
                    num += d * d;
                    den += ref[i] * ref[i];
                }
            }
            double rl2 = v.fused ? NAN : sqrt(num / den);
            if (once) {
                for (int r = 0; r < 3; r++) call(r + 1);
                CK(cudaStreamSynchronize(c->stream));
                printf("%-8s %-16s %10s %9s %10.2e\n", sh.name, v.name, "-", "-", rl2);
                continue;
            }
            float med = lab_graph_median_ms(c->stream, &c->capturing, [&] { for (int r = 0; r < REP; r++) call(r); });
            double us = med * 1e3 / REP;
            printf("%-8s %-16s %10.2f %9.2f %10.2e\n", sh.name, v.name, us, wbytes / (us * 1e-6) / 1e12, rl2);
        }
        free(hw); free(hx); free(hy); free(ref);
        cudaFree(W); cudaFree(X); cudaFree(Y); cudaFree(Q); cudaFree(Kc); cudaFree(V); cudaFree(pos);
    }
    be->destroy(be);
    return 0;
}
