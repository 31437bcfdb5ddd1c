// fw_prof.cu — clock64 stamps of attn_flash_wg.cu's flash_wg_kernel (built with -DFW_PROF: lab_hooks.cuh) at one prefix layer of pi0-3cam
// (788 tokens x 8 heads, head_dim 256, one K/V head): thread 0 of each warpgroup stamps the kernel entry, the Q wait,
// the first S and softmax, each step's phases, the last P V, the merge and the end. Prints means over the 99 blocks in
// cycles (5 launches; the last one's stamps). Run it with PI0_CUDA_PDL=0, or the entry stamp includes the time
// spent in the programmatic-launch wait for the previous launch. Built by make lab.
#include <stdio.h>
#include <stdlib.h>
#include "../../src/cuda/common.cuh"
extern "C" void fw_prof_read(unsigned long long *dst);
static unsigned long long st[128][2][8][10];
__global__ void fillk(bf16 *p, size_t n, unsigned salt) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16((((i + salt) * 2654435761u) % 1000) / 500.0f - 1.0f);
}
static double mean(int nb, int w, int slot, int a, int b) {   // stamp b - stamp a of a slot, mean over blocks that have b
    double d = 0;
    int n = 0;
    for (int i = 0; i < nb; i++)
        if (st[i][w][slot][b]) { d += (double)(st[i][w][slot][b] - st[i][w][slot][a]); n++; }
    return n ? d / n : 0;
}
int main() {
    pi0_backend *be;
    if (cuda_backend_create(&be, 0, NULL) != PI0_OK) { fprintf(stderr, "%s\n", pi0_last_error()); return 1; }
    const int T = 788, H = 8, hd = 256, nb = (T * H + 63) / 64;
    pt q = be->alloc(be, (size_t)T * H * hd, PT_ACT), k = be->alloc(be, (size_t)T * hd, PT_ACT);
    pt v = be->alloc(be, (size_t)T * hd, PT_ACT), o = be->alloc(be, (size_t)T * H * hd, PT_ACT);
    fillk<<<256, 256>>>((bf16 *)q.p, (size_t)T * H * hd, 1);
    fillk<<<256, 256>>>((bf16 *)k.p, (size_t)T * hd, 2);
    fillk<<<256, 256>>>((bf16 *)v.p, (size_t)T * hd, 3);
    cudaDeviceSynchronize();
    int32_t off[2] = {0, T};
    pi0_attn a = {.nseg = 1, .heads = H, .kv_heads = 1, .head_dim = hd, .scale = 0.0625f, .q_off = off, .k_off = off,
                  .k1 = k, .v1 = v};
    for (int rep = 0; rep < 5; rep++) be->attention(be, o, q, &a);
    if (be->sync(be) != PI0_OK || cuda_flash_wg_launches() != 5) {
        fprintf(stderr, "flash_wg_kernel did not run: %s\n", pi0_last_error());
        return 1;
    }
    fw_prof_read(&st[0][0][0][0]);
    static const char *nm[8] = {"K wait + S issue", "V wait + PV issue", "S landed", "refill K (barrier)", "softmax",
                                "PV landed", "rescale", "refill V (barrier)"};
    printf("flash_wg_kernel, %d blocks, cycles (mean over blocks), thread 0 of each warpgroup\n", nb);
    for (int w = 0; w < 2; w++) {
        printf("warpgroup %d: entry -> Q wait %.0f | Q landed %.0f | K0 wait + S0 issue %.0f | S0 landed %.0f | softmax0 %.0f\n",
               w, mean(nb, w, 0, 0, 1), mean(nb, w, 0, 1, 2), mean(nb, w, 0, 2, 3), mean(nb, w, 0, 3, 4),
               mean(nb, w, 0, 4, 5));
        for (int i = 1; i < 7; i++) {
            if (mean(nb, w, i, 0, 8) == 0) continue;
            printf("  step %d:", i);
            for (int j = 0; j < 8; j++) printf(" %s %.0f |", nm[j], mean(nb, w, i, j, j + 1));
            printf(" total %.0f\n", mean(nb, w, i, 0, 8));
        }
        printf("  last P V %.0f | merge %.0f", mean(nb, w, 7, 0, 1), mean(nb, w, 7, 1, 2));
        if (w == 0) {   // warpgroup 0 finishes the block
            double all = 0;
            for (int i = 0; i < nb; i++) all += (double)(st[i][0][7][3] - st[i][0][0][0]) / nb;
            printf(" | combine + O out %.0f | entry -> end %.0f", mean(nb, w, 7, 2, 3), all);
        }
        printf("\n");
    }
    return 0;
}
