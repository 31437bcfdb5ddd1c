// lt_fp8.cu — which FP8 (E4M3) forms this GPU's cuBLASLt offers for the B = 1 vision and prefill products, and what
// each costs next to the bf16 product (gemm.cu's fp8 forms, docs/precision.md 8): one fp32 scale per row of each
// operand inside the kernel (OUTER_VEC_32F) with bf16 out, with and without an fp32 bias, GELU and beta = 1; one scalar
// scale with fp32 out (the engine's fallback, which a second pass scales) and with bf16 out; 128-element blocks
// (VEC128_32F on X, BLK128x128_32F on W); each also with fast accumulation. For every form: the heuristic's answer
// (status, candidates) and the best of its first 8 candidates, 10 launches in a graph, median of 9 replays (lab.cuh).
// Usage: lt_fp8 [shape-name-substring]
#include <string.h>

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "lab.cuh"

#define LT(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { printf("%s: %d\n", #x, (int)s_); exit(1); } } while (0)

struct shape { const char *name; int M, N, K, bias, gelu; float beta; };

static const shape shapes[] = {
    {"siglip q|k|v", 768, 3456, 1152, 1, 0, 0.f},
    {"siglip fc1 gelu", 768, 4304, 1152, 1, 1, 0.f},
    {"siglip fc2 +res", 768, 1152, 4304, 1, 0, 1.f},
    {"prefix q|k|v", 816, 2560, 2048, 0, 0, 0.f},
    {"prefix o +res", 816, 2048, 2048, 0, 0, 1.f},
    {"prefix gate", 816, 16384, 2048, 0, 0, 0.f},
    {"prefix down +res", 816, 2048, 16384, 0, 0, 1.f},
};

// A form of the product: operand type, scale modes of A (W) and B (X), D type, bias type (0: the shape's bias off).
struct form { const char *name; int fp8, mode_w, mode_x; cudaDataType dt; int bias32, fast, epi; };

static int capturing;

int main(int argc, char **argv) {
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cublasLtHandle_t lt;
    LT(cublasLtCreate(&lt));
    size_t ws_size = 32u << 20;
    void *ws;
    CK(cudaMalloc(&ws, ws_size));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("cublasLt %zu on %s (sm_%d%d)\n", cublasLtGetVersion(), prop.name, prop.major, prop.minor);
    const int OV = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, SC = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F,
              B128 = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, V128 = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    const form forms[] = {
        {"bf16 (reference)", 0, SC, SC, CUDA_R_16BF, 0, 0, 1},
        {"fp8 row scales, bf16 out, epilogue", 1, OV, OV, CUDA_R_16BF, 1, 0, 1},
        {"fp8 row scales, bf16 out, no epilogue", 1, OV, OV, CUDA_R_16BF, 0, 0, 0},
        {"fp8 row scales, bf16 out, fast accum", 1, OV, OV, CUDA_R_16BF, 1, 1, 1},
        {"fp8 row scales, fp32 out", 1, OV, OV, CUDA_R_32F, 0, 0, 0},
        {"fp8 scalar, fp32 out (engine fallback)", 1, SC, SC, CUDA_R_32F, 0, 0, 0},
        {"fp8 scalar, bf16 out, epilogue", 1, SC, SC, CUDA_R_16BF, 0, 0, 1},
        {"fp8 scalar, bf16 out, fast accum", 1, SC, SC, CUDA_R_16BF, 0, 1, 1},
        {"fp8 blocks 128 (W 128x128, X 1x128), bf16", 1, B128, V128, CUDA_R_16BF, 0, 0, 0},
        {"fp8 blocks 128, bf16, fast accum", 1, B128, V128, CUDA_R_16BF, 0, 1, 0},
    };
    for (const shape &sh : shapes) {
        if (argc > 1 && !strstr(sh.name, argv[1])) continue;
        const int M = sh.M, N = sh.N, K = sh.K;
        void *X, *W, *Y, *bias, *sx, *sw;
        CK(cudaMalloc(&X, (size_t)M * K * 2));
        CK(cudaMalloc(&W, (size_t)N * K * 2));
        CK(cudaMalloc(&Y, (size_t)M * N * 4));
        CK(cudaMalloc(&bias, (size_t)N * 4));
        CK(cudaMalloc(&sx, (size_t)M * (K / 128 + 1) * 4));
        CK(cudaMalloc(&sw, (size_t)(N / 128 + 1) * (K / 128 + 1) * 4 + (size_t)N * 4));
        CK(cudaMemset(X, 0, (size_t)M * K * 2));
        CK(cudaMemset(W, 0, (size_t)N * K * 2));
        CK(cudaMemset(bias, 0, (size_t)N * 4));
        CK(cudaMemset(sx, 0, (size_t)M * (K / 128 + 1) * 4));
        CK(cudaMemset(sw, 0, (size_t)(N / 128 + 1) * (K / 128 + 1) * 4 + (size_t)N * 4));
        const double gf = 2.0 * M * N * K * 1e-9;
        printf("\n== %s: M %d N %d K %d bias %d gelu %d beta %g\n", sh.name, M, N, K, sh.bias, sh.gelu, sh.beta);
        for (const form &f : forms) {
            cudaDataType ti = f.fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
            cublasLtMatmulDesc_t desc;
            LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
            cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
            LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
            LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
            int use_bias = f.epi && sh.bias, use_gelu = f.epi && sh.gelu;
            float beta = f.epi && f.dt == CUDA_R_16BF ? sh.beta : 0.f;
            if (f.fp8) {
                int8_t fa = (int8_t)f.fast;
                cublasLtMatmulMatrixScale_t mw = (cublasLtMatmulMatrixScale_t)f.mode_w, mx = (cublasLtMatmulMatrixScale_t)f.mode_x;
                LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fa, sizeof fa));
                if (f.mode_w != SC) LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mw, sizeof mw));
                if (f.mode_x != SC) LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mx, sizeof mx));
                LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sw, sizeof sw));
                LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sx, sizeof sx));
                if (use_bias && f.bias32) {
                    cudaDataType bt = CUDA_R_32F;
                    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
                }
            }
            if (use_bias || use_gelu) {
                cublasLtEpilogue_t ep = use_gelu ? (use_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU)
                                                 : CUBLASLT_EPILOGUE_BIAS;
                LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
                LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
            }
            cublasLtMatrixLayout_t la, lb, lc;
            LT(cublasLtMatrixLayoutCreate(&la, ti, K, N, K));
            LT(cublasLtMatrixLayoutCreate(&lb, ti, K, M, K));
            LT(cublasLtMatrixLayoutCreate(&lc, f.dt, N, M, N));
            cublasLtMatmulPreference_t pref;
            LT(cublasLtMatmulPreferenceCreate(&pref));
            LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size, sizeof ws_size));
            cublasLtMatmulHeuristicResult_t res[8];
            int found = 0;
            cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 8, res, &found);
            float best = -1.f;
            const float alpha = 1.f;
            for (int i = 0; hs == CUBLAS_STATUS_SUCCESS && i < found; i++) {
                const cublasLtMatmulAlgo_t *al = &res[i].algo;
                if (cublasLtMatmul(lt, desc, &alpha, W, la, X, lb, &beta, Y, lc, Y, lc, al, ws, ws_size, st) !=
                        CUBLAS_STATUS_SUCCESS || cudaStreamSynchronize(st) != cudaSuccess) {
                    cudaGetLastError();
                    continue;
                }
                float t = lab_graph_median_ms(st, &capturing, [&] {
                    for (int r = 0; r < 10; r++)
                        cublasLtMatmul(lt, desc, &alpha, W, la, X, lb, &beta, Y, lc, Y, lc, al, ws, ws_size, st);
                }) * 100.f;
                if (best < 0 || t < best) best = t;
            }
            if (best > 0)
                printf("  %-44s %2d candidates  %8.2f us %5.0f TFLOP/s\n", f.name, found, best, gf / best * 1e3);
            else
                printf("  %-44s none (heuristic status %d, %d candidates)\n", f.name, (int)hs, found);
            cublasLtMatmulPreferenceDestroy(pref);
            cublasLtMatrixLayoutDestroy(la);
            cublasLtMatrixLayoutDestroy(lb);
            cublasLtMatrixLayoutDestroy(lc);
            cublasLtMatmulDescDestroy(desc);
        }
        cudaFree(X); cudaFree(W); cudaFree(Y); cudaFree(bias); cudaFree(sx); cudaFree(sw);
    }
    return 0;
}
