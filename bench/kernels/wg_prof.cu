// wg_prof.cu — per-block phase stamps of gemv.cu's warpgroup kernel (17-64 rows) at the expert's four products:
// single launches (3 repeats, rotating weights), thread 0's clock64 at each phase boundary (-DWG_PROF: lab_hooks.cuh), mean over
// blocks in us at the nominal 1.98 GHz. Built by make lab; usage: wg_prof [M] (default 51).
#include <stdio.h>
#include <stdlib.h>
#include "../../src/cuda/common.cuh"
extern "C" void wgv_prof_read(unsigned long long *dst);
__global__ void fillk(bf16 *p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16(((i * 2654435761u) % 1000) / 1000.0f - 0.5f);
}
int main(int argc, char **argv) {
    int M = argc > 1 ? atoi(argv[1]) : 51;
    pi0_backend *be; cuda_backend_create(&be, 0, NULL); cuda_ctx *c = CTX(be);
    // ks: the K slices gemv.cu picks on 132 SMs (the stamps are indexed by block)
    struct { const char *n; int N, K, pair, epi, ks; } sh[] = {{"qkv", 2560, 1024, 128, GEMV_QKV_ROPE, 3},
                                                              {"o", 1024, 2048, 0, GEMV_ADD, 8},
                                                              {"gate|up", 8192, 1024, 4096, GEMV_GELU_MUL, 1},
                                                              {"down", 1024, 4096, 0, GEMV_ADD, 8}};
    bf16 *W, *X, *Y, *Q, *K, *V;
    int32_t *pos;
    cudaMalloc(&W, 8u << 27); cudaMalloc(&X, 64 * 4096 * 2); cudaMalloc(&Y, 64 * 8192 * 2);
    cudaMalloc(&Q, 64 * 2048 * 2); cudaMalloc(&K, 64 * 256 * 2); cudaMalloc(&V, 64 * 256 * 2); cudaMalloc(&pos, 256);
    cudaMemset(pos, 0, 256);
    fillk<<<1024, 256>>>(W, (8u << 27) / 2); fillk<<<64, 256>>>(X, 64 * 4096);
    cudaDeviceSynchronize();
    for (auto &s : sh) {
        for (int rep = 0; rep < 3; rep++) {   // weights rep (1 GB buffer: 8192 x 4096 per product slot)
            gemv_args g = {};
            g.x = X; g.w = W + (size_t)rep * 8192 * 4096; g.M = M; g.N = s.N; g.K = s.K; g.ldx = s.K; g.ldw = s.K;
            g.y = Y; g.ldy = s.N; g.pair = s.pair; g.epi = s.epi;
            g.q = Q; g.k = K; g.v = V; g.nq = 2048; g.nk = 256; g.hd = 256; g.pos = pos;
            if (s.epi == GEMV_GELU_MUL) g.ldy = 4096;
            cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
            cudaEventRecord(e0, c->stream);
            if (!cuda_gemv(c, &g, 0)) { printf("not run\n"); return 1; }
            cudaEventRecord(e1, c->stream);
            cudaStreamSynchronize(c->stream);
            float ms; cudaEventElapsedTime(&ms, e0, e1);
            static unsigned long long st[256][8]; wgv_prof_read(&st[0][0]);
            int nb = s.N / 64 * s.ks;
            double mean[8] = {0};
            for (int b = 0; b < nb; b++)
                for (int k = 1; k < 8; k++) mean[k] += (double)(st[b][k] - st[b][k - 1]) / 1.98e3 / nb;
            printf("%-8s rep %d event %.2f us | per block, us at 1.98 GHz: prologue %.2f pdl %.2f full0 %.2f loop %.2f "
                   "stage %.2f send+recv %.2f epilogue %.2f\n",
                   s.n, rep, ms * 1e3, mean[1], mean[2], mean[3], mean[4], mean[5], mean[6], mean[7]);
        }
    }
    return 0;
}
