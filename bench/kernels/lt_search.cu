// lt_search.cu — how far past the production tuning (the heuristic's first 16 candidates, gemm.cu) a cuBLASLt
// search reaches for the under-filled B = 1 shapes of vision and prefill: up to 64 heuristic candidates, and
// split-K variants (CUBLASLT_ALGO_CONFIG_SPLITK_NUM x each supported reduction scheme) of every candidate whose
// capabilities allow it. Each variant: 10 launches in a graph, median of 9 replays (lab.cuh), us per product.
// Usage: lt_search [shape-name-substring]
#include <string.h>
#include <vector>

#include <cublasLt.h>
#include <cuda_bf16.h>

#include "lab.cuh"

#define LT(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { printf("%s: %d\n", #x, (int)s_); exit(1); } } while (0)

struct shape { const char *name; int M, N, K, bias, gelu; float beta; };

static const shape shapes[] = {
    {"siglip q|k|v", 768, 3456, 1152, 1, 0, 0.f},
    {"siglip o +res", 768, 1152, 1152, 1, 0, 1.f},
    {"siglip fc1 gelu", 768, 4304, 1152, 1, 1, 0.f},
    {"siglip fc2 +res", 768, 1152, 4304, 1, 0, 1.f},
    {"prefix q|k|v", 788, 2560, 2048, 0, 0, 0.f},
    {"prefix o +res", 788, 2048, 2048, 0, 0, 1.f},
    {"prefix gate|up", 788, 32768, 2048, 0, 0, 0.f},
    {"prefix down +res", 788, 2048, 16384, 0, 0, 1.f},
};

static int capturing;

int main(int argc, char **argv) {
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cublasLtHandle_t lt;
    LT(cublasLtCreate(&lt));
    size_t ws_size = 32u << 20;
    void *ws;
    CK(cudaMalloc(&ws, ws_size));
    int ids[512], nids = 0;
    LT(cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                                512, ids, &nids));
    printf("cublasLt %zu: %d algo ids for bf16 / fp32 compute:", cublasLtGetVersion(), nids);
    for (int i = 0; i < nids; i++) printf(" %d", ids[i]);
    printf("\n");
    for (const shape &sh : shapes) {
        if (argc > 1 && !strstr(sh.name, argv[1])) continue;
        const int M = sh.M, N = sh.N, K = sh.K;
        __nv_bfloat16 *X, *W, *Y, *bias;
        CK(cudaMalloc(&X, (size_t)M * K * 2));
        CK(cudaMalloc(&W, (size_t)N * K * 2));
        CK(cudaMalloc(&Y, (size_t)M * N * 2));
        CK(cudaMalloc(&bias, (size_t)N * 2));
        CK(cudaMemset(X, 0, (size_t)M * K * 2));
        CK(cudaMemset(W, 0, (size_t)N * K * 2));
        CK(cudaMemset(Y, 0, (size_t)M * N * 2));
        CK(cudaMemset(bias, 0, (size_t)N * 2));
        cublasLtMatmulDesc_t desc;
        LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
        if (sh.bias || sh.gelu) {
            cublasLtEpilogue_t ep = sh.gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
            LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
            LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        }
        cublasLtMatrixLayout_t la, lb, lc;
        LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, N, K));
        LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, M, K));
        LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, N, M, N));
        cublasLtMatmulPreference_t pref;
        LT(cublasLtMatmulPreferenceCreate(&pref));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size, sizeof ws_size));
        cublasLtMatmulHeuristicResult_t res[64];
        int found = 0;
        LT(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 64, res, &found));
        const float alpha = 1.f, beta = sh.beta;
        auto time_us = [&](const cublasLtMatmulAlgo_t *al) -> float {
            if (cublasLtMatmul(lt, desc, &alpha, W, la, X, lb, &beta, Y, lc, Y, lc, al, ws, ws_size, st) !=
                CUBLAS_STATUS_SUCCESS || cudaStreamSynchronize(st) != cudaSuccess) {
                cudaGetLastError();
                return -1.f;
            }
            return lab_graph_median_ms(st, &capturing, [&] {
                for (int r = 0; r < 10; r++)
                    cublasLtMatmul(lt, desc, &alpha, W, la, X, lb, &beta, Y, lc, Y, lc, al, ws, ws_size, st);
            }) * 100.f;
        };
        auto cfg = [](const cublasLtMatmulAlgo_t *al, cublasLtMatmulAlgoConfigAttributes_t at) {
            uint32_t v = 0;
            size_t w = 0;
            cublasLtMatmulAlgoConfigGetAttribute(al, at, &v, sizeof v, &w);
            return (int)v;
        };
        const double gf = 2.0 * M * N * K * 1e-9;
        printf("\n== %s: M %d N %d K %d beta %g, %d heuristic candidates\n", sh.name, M, N, K, beta, found);
        float best16 = 1e30f, best64 = 1e30f, bestsk = 1e30f;
        for (int i = 0; i < found; i++) {
            const cublasLtMatmulAlgo_t *al = &res[i].algo;
            int sk_sup = 0, red_mask = 0;
            size_t w = 0;
            cublasLtMatmulAlgoCapGetAttribute(al, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &sk_sup, sizeof sk_sup, &w);
            cublasLtMatmulAlgoCapGetAttribute(al, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &red_mask, sizeof red_mask, &w);
            float t = time_us(al);
            printf("  cand %2d: id %3d tile %3d stages %3d cluster %2d splitk %d (sup %d, red mask %#x) ws %zu: %7.2f us"
                   " %5.0f TFLOP/s\n", i, cfg(al, CUBLASLT_ALGO_CONFIG_ID), cfg(al, CUBLASLT_ALGO_CONFIG_TILE_ID),
                   cfg(al, CUBLASLT_ALGO_CONFIG_STAGES_ID), cfg(al, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
                   cfg(al, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), sk_sup, red_mask, res[i].workspaceSize, t,
                   t > 0 ? gf / t * 1e3 : 0.0);
            if (t > 0 && i < 16 && t < best16) best16 = t;
            if (t > 0 && t < best64) best64 = t;
            if (!sk_sup) continue;
            for (int sk = 2; sk <= 8; sk++) {
                for (int red = 1; red <= 4; red <<= 1) {
                    if (!(red_mask & red)) continue;
                    cublasLtMatmulAlgo_t v = *al;
                    uint32_t s32 = sk, r32 = red;
                    if (cublasLtMatmulAlgoConfigSetAttribute(&v, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &s32, sizeof s32) ||
                        cublasLtMatmulAlgoConfigSetAttribute(&v, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &r32, sizeof r32))
                        continue;
                    cublasLtMatmulHeuristicResult_t chk;
                    if (cublasLtMatmulAlgoCheck(lt, desc, la, lb, lc, lc, &v, &chk) != CUBLAS_STATUS_SUCCESS ||
                        chk.workspaceSize > ws_size)
                        continue;
                    float ts = time_us(&v);
                    printf("    split-K %d red %d ws %zu: %7.2f us\n", sk, red, chk.workspaceSize, ts);
                    if (ts > 0 && ts < bestsk) bestsk = ts;
                }
            }
        }
        printf("  best: first 16 %.2f us (%.0f TFLOP/s), all %d %.2f us, split-K variants %.2f us\n", best16,
               gf / best16 * 1e3, found, best64, bestsk < 1e29f ? bestsk : 0.f);
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(desc);
        cudaFree(X); cudaFree(W); cudaFree(Y); cudaFree(bias);
    }
    return 0;
}
