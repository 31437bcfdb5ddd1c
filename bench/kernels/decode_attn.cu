// decode_attn.cu — kernel lab for the denoise-step attention at B = 1 (docs/model.md 3.10): 11 queries x 8 heads
// against the 788 cached prefix keys + 11 suffix keys (MQA, head_dim 256), the `tail` form of backend.h.
//   version 0: the production GEMM path (cuBLASLt Q.K^T, softmax kernel, P.V; PI0_CUDA_SMALL=0);
//   version 1: the production decode_attn_kernel (attention.cu), without and with PDL.
// Checked against version 0 (rel L2), timed with CUDA events over graph replays of 36 launches that
// rotate over 18 layers' caches (the replay's caches do not all fit the L2 between uses, as in a step).
// Build and run: sh bench/kernels/run_lab.sh build / run OUTDIR.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/cuda/common.cuh"
#include "lab.cuh"


int main(int argc, char **argv) {
    int nq = argc > 1 ? atoi(argv[1]) : 11, prefix = argc > 2 ? atoi(argv[2]) : 788, layers = 18, REP = 36;
    int H = 8, hd = 256, n1 = prefix + nq;
    pi0_backend *be = NULL;
    if (cuda_backend_create(&be, 0, NULL) != PI0_OK) { printf("backend: %s\n", pi0_last_error()); return 1; }
    cuda_ctx *c = CTX(be);
    be->reserve(be, 4096, 4096, (size_t)nq * H * (n1 + 8), 0);
    size_t cache = (size_t)n1 * hd;
    bf16 *Q, *O, *K, *V;
    CK(cudaMalloc(&Q, (size_t)nq * H * hd * 2));
    CK(cudaMalloc(&O, (size_t)nq * H * hd * 2));
    CK(cudaMalloc(&K, cache * layers * 2));
    CK(cudaMalloc(&V, cache * layers * 2));
    fill_kernel<<<64, 256>>>(Q, (size_t)nq * H * hd, 7, 1.0f);
    fill_kernel<<<1024, 256>>>(K, cache * layers, 8, 1.0f);
    fill_kernel<<<1024, 256>>>(V, cache * layers, 9, 1.0f);
    CK(cudaDeviceSynchronize());
    int32_t qo[2] = {0, nq}, ko[2] = {0, n1};
    pi0_attn a = {.nseg = 1, .heads = H, .kv_heads = 1, .head_dim = hd, .scale = 1.0f / 16.0f, .q_off = qo, .k_off = ko,
                  .block0 = 1, .tail = nq};
    bf16 *ref = (bf16 *)malloc((size_t)nq * H * hd * 2), *got = (bf16 *)malloc((size_t)nq * H * hd * 2);
    struct { const char *name; int small, pdl; } vers[] = {{"v0 cuBLASLt path", 0, 0}, {"v1 decode", 1, 0}, {"v2 decode pdl", 1, 1}};
    printf("q=%d keys=%d: %-18s %10s %10s\n", nq, n1, "version", "us/launch", "rel_l2");
    for (auto &v : vers) {
        c->fused_small = v.small;
        c->pdl = v.pdl;
        auto call = [&](int i) {
            a.k1 = (pt){(char *)(K + (size_t)(i % layers) * cache), PT_ACT};
            a.v1 = (pt){(char *)(V + (size_t)(i % layers) * cache), PT_ACT};
            be->attention(be, (pt){(char *)O, PT_ACT}, (pt){(char *)Q, PT_ACT}, &a);
        };
        CK(cudaMemset(O, 0xff, (size_t)nq * H * hd * 2));
        call(0);
        CK(cudaStreamSynchronize(c->stream));
        if (c->err) { printf("%s: %s\n", v.name, c->errmsg); return 1; }
        CK(cudaMemcpy(v.small ? got : ref, O, (size_t)nq * H * hd * 2, cudaMemcpyDeviceToHost));
        double num = 0, den = 0;
        for (int i = 0; v.small && i < nq * H * hd; i++) {
            double d = (double)__bfloat162float(got[i]) - __bfloat162float(ref[i]);
            num += d * d;
            den += (double)__bfloat162float(ref[i]) * __bfloat162float(ref[i]);
        }
        float med = lab_graph_median_ms(c->stream, &c->capturing, [&] { for (int r = 0; r < REP; r++) call(r); });
        printf("q=%d keys=%d: %-18s %10.2f %10.2e\n", nq, n1, v.name, med * 1e3 / REP, v.small ? sqrt(num / den) : 0.0);
    }
    be->destroy(be);
    return 0;
}
