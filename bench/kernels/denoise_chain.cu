// denoise_chain.cu — the action expert's 18 layers of one denoise step at B = 1 (docs/model.md 3.8/3.13), made of
// the production ops exactly as model.c's denoise calls them (RMSNorm, q|k|v with RoPE into the KV cache,
// tail attention, o + residual, RMSNorm, gate|up with gelu * up, down + residual), captured as one graph and
// timed with CUDA events: the cost of a layer in the real chain of kernels, and of each op kind by
// leaving it out. Random weights (18 x 34.6 MB, more than the L2), prefix of 788 cached keys. Built as chain_prof
// (make lab) with LAB_PROF=1: per-block phase stamps of the few-row products in the chain, also with their weight
// copies switched off (wrong results: the chain's latency alone).
// Build and run: make lab, then build/lab/denoise_chain (or sh bench/kernels/run_lab.sh run OUTDIR).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/cuda/common.cuh"
#include "lab.cuh"

#ifdef GEMV_PROF   // gemv.cu built with -DGEMV_PROF: per-block phase stamps of the few-row products
void gemv_prof_set(unsigned long long *buf, unsigned cap);
unsigned gemv_prof_count(void);
void gemv_prof_nowt_set(int v);
void da_prof_set(unsigned long long *buf, unsigned cap);   // attn_decode.cu built with -DGEMV_PROF
unsigned da_prof_count(void);
enum { NS = 10, RS = 4 + 2 * NS };   // stamps per block record (lab_hooks.cuh LAB_WRITE), record size in words
static int cmp_end(const void *x, const void *y) {
    unsigned long long a = ((const unsigned long long *)x)[3 + NS], b = ((const unsigned long long *)y)[3 + NS];
    return a < b ? -1 : a > b;
}
// One graph replay of step(what) with stamps; per kernel: the gap from the previous kernel's last block end to
// this kernel's first wait release, then the phases of its blocks (means, clock64 at the measured rate).
// Decode attention's rows (N = 0) have their own phases: X = loads, W = S + row max, mma+red = P + sums,
// csync = P V, red = cluster wait, rbar = sends, epi = receive wait, tail = merge + store.
template <class F> static void prof_chain(const char *name, cudaStream_t st, int *capturing, F body) {
    cudaGraphExec_t exec = lab_capture(st, capturing, body);
    for (int i = 0; i < 3; i++) CK(cudaGraphLaunch(exec, st));
    CK(cudaStreamSynchronize(st));
    unsigned cap = 1 << 16;
    unsigned long long *d, *h = (unsigned long long *)malloc((size_t)cap * RS * 8);
    CK(cudaMalloc(&d, (size_t)cap * RS * 8));
    gemv_prof_set(d, cap / 2);
    da_prof_set(d + (size_t)cap / 2 * RS, cap / 2);
    CK(cudaGraphLaunch(exec, st));
    CK(cudaStreamSynchronize(st));
    unsigned n = gemv_prof_count(), na = da_prof_count();
    gemv_prof_set(NULL, 0);
    da_prof_set(NULL, 0);
    if (n > cap / 2) n = cap / 2;
    if (na > cap / 2) na = cap / 2;
    CK(cudaMemcpy(h, d, (size_t)n * RS * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h + (size_t)n * RS, d + (size_t)cap / 2 * RS, (size_t)na * RS * 8, cudaMemcpyDeviceToHost));
    n += na;
    qsort(h, n, RS * 8, cmp_end);
    double sc = 0, sg = 0;
    for (unsigned i = 0; i < n; i++) {
        sc += h[i * RS + RS - 1] - h[i * RS + 4 + NS];
        sg += h[i * RS + 3 + NS] - h[i * RS + 4];
    }
    if (!n) { printf("%s: no block records\n", name); CK(cudaFree(d)); free(h); CK(cudaGraphExecDestroy(exec)); return; }
    double ghz = sc / sg;   // clock64 ticks per ns
    printf("%s: %u block records, SM clock %.2f GHz\n", name, n, ghz);
    printf("  kernel   N blocks  launch-spread  gap(prev end->wait)  wait-spread  X  W  mma+red  csync  red  rbar  epi  tail  span  (us)"
           "  | first entry - prev trigger, first entry - prev end (us)\n");
    unsigned long long prev_end = 0, prev_trig = 0;
    for (unsigned i = 0; i < n;) {
        unsigned g = (unsigned)h[i * RS + 1], e = i + g > n ? n : i + g;
        unsigned long long e0 = ~0ull, e1 = 0, w0 = ~0ull, w1 = 0, end = 0;
        double ph[NS - 2] = {0};
        for (unsigned j = i; j < e; j++) {
            unsigned long long *r = h + (size_t)j * RS;
            if (r[4] < e0) e0 = r[4];
            if (r[4] > e1) e1 = r[4];
            if (r[5] < w0) w0 = r[5];
            if (r[5] > w1) w1 = r[5];
            if (r[3 + NS] > end) end = r[3 + NS];
            for (int p = 0; p < NS - 2; p++) ph[p] += (double)(r[6 + NS + p] - r[5 + NS + p]) / ghz / (e - i);
        }
        printf("  %4u %5llu %4u %8.2f %10.2f %10.2f %6.2f %5.2f %6.2f %6.2f %6.2f %6.2f %6.2f %5.2f %6.2f | %6.2f %6.2f\n", i,
               h[i * RS + 3], g, (e1 - e0) * 1e-3, prev_end ? ((double)w0 - (double)prev_end) * 1e-3 : 0.0,
               (w1 - w0) * 1e-3, ph[0], ph[1], ph[2], ph[3], ph[4], ph[5], ph[6], ph[7], (end - w0) * 1e-3,
               prev_trig ? ((double)e0 - (double)prev_trig) * 1e-3 : 0.0, prev_end ? ((double)e0 - (double)prev_end) * 1e-3 : 0.0);
        prev_end = end;
        prev_trig = w1;
        i = e;
    }
    printf("  first wait release to last end: %.2f us\n", ((double)h[(size_t)(n - 1) * RS + 3 + NS] - (double)h[5]) * 1e-3);
    CK(cudaFree(d));
    free(h);
    CK(cudaGraphExecDestroy(exec));
}
#endif


// L2 prefetch of [p, p + bytes) (bytes a multiple of 4096), 4 KB per instruction, no destination.
__global__ void l2_prefetch_kernel(const char *p, size_t bytes) {
    for (size_t off = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 4096; off < bytes;
         off += (size_t)gridDim.x * blockDim.x * 4096)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], 4096;" ::"l"(p + off) : "memory");
}

// A weight at *at in the lab's own store (ids in order of creation); `next`: it starts a group with the one made after it.
static pi0_wt mat(cuda_wstore *ws, char **at, int64_t rows, int64_t cols, int next) {
    pi0_wt w = {};
    w.rows = rows; w.cols = cols; w.dtype = PI0_DT_BF16; w.id = ++ws->n;
    ws->e[w.id].bf = (bf16 *)*at;
    ws->e[w.id].next = next ? w.id + 1 : 0;
    *at += (size_t)rows * cols * 2;
    return w;
}

static pi0_wt vec(cuda_wstore *ws, float *p, int64_t n) {
    pi0_wt w = {};
    w.rows = n; w.cols = 1; w.dtype = PI0_DT_BF16; w.id = ++ws->n;
    ws->e[w.id].bf = (bf16 *)p;   // (never read as bf16 here: the norms read the fp32 copy)
    ws->e[w.id].f32 = p;
    return w;
}

int main(void) {
    const int L = 18, M = 11, D = 1024, F = 4096, Hq = 8, hd = 256, P = 788, n1 = P + M;
    pi0_backend *be = NULL;
    if (cuda_backend_create(&be, 0, NULL) != PI0_OK) { printf("backend: %s\n", pi0_last_error()); return 1; }
    cuda_ctx *c = CTX(be);
    be->reserve(be, 4096, 4096, (size_t)M * Hq * (n1 + 8), (size_t)M * 2 * F);
    size_t per = (size_t)(Hq * hd + 2 * hd) * D + (size_t)D * Hq * hd + 2 * (size_t)F * D + (size_t)D * F;
    char *arena, *at;
    CK(cudaMalloc(&arena, per * 2 * L));
    fill_kernel<<<2048, 256>>>((bf16 *)arena, per * L, 3, 0.03f);
    float *norms;
    CK(cudaMalloc(&norms, (size_t)2 * L * D * 4));
    CK(cudaMemset(norms, 0, (size_t)2 * L * D * 4));
    pi0_gemma_layer *ly = (pi0_gemma_layer *)calloc(L, sizeof *ly);
    cuda_wstore ws = {};
    ws.e = (cuda_wentry *)calloc((size_t)9 * L + 1, sizeof *ws.e);
    at = arena;
    for (int l = 0; l < L; l++) {   // q|k|v and gate|up groups, as backend.cu's plan places them
        ly[l].q = mat(&ws, &at, Hq * hd, D, 1); ly[l].k = mat(&ws, &at, hd, D, 1); ly[l].v = mat(&ws, &at, hd, D, 0);
        ly[l].o = mat(&ws, &at, D, Hq * hd, 0); ly[l].gate = mat(&ws, &at, F, D, 1); ly[l].up = mat(&ws, &at, F, D, 0);
        ly[l].down = mat(&ws, &at, D, F, 0);
        ly[l].attn_norm = vec(&ws, norms + (size_t)2 * l * D, D);
        ly[l].mlp_norm = vec(&ws, norms + (size_t)(2 * l + 1) * D, D);
    }
    c->ws = &ws;
    pt s = be->alloc(be, (size_t)M * D, PT_ACT), sy = be->alloc(be, (size_t)M * D, PT_ACT);
    pt sq = be->alloc(be, (size_t)M * Hq * hd, PT_ACT), satt = be->alloc(be, (size_t)M * Hq * hd, PT_ACT);
    pt sg = be->alloc(be, (size_t)M * F, PT_ACT), su = be->alloc(be, (size_t)M * F, PT_ACT);
    pt spos = be->alloc(be, M, PT_I32);
    pt *kc = (pt *)calloc(L, sizeof(pt)), *vc = (pt *)calloc(L, sizeof(pt));
    for (int l = 0; l < L; l++) {
        kc[l] = be->alloc(be, (size_t)n1 * hd, PT_ACT);
        vc[l] = be->alloc(be, (size_t)n1 * hd, PT_ACT);
        fill_kernel<<<256, 256>>>((bf16 *)kc[l].p, (size_t)n1 * hd, 10 + l, 1.0f);
        fill_kernel<<<256, 256>>>((bf16 *)vc[l].p, (size_t)n1 * hd, 50 + l, 1.0f);
    }
    fill_kernel<<<64, 256>>>((bf16 *)s.p, (size_t)M * D, 5, 1.0f);
    int32_t pos[M];
    for (int i = 0; i < M; i++) pos[i] = P + i;
    be->upload(be, spos, pos, M);
    CK(cudaDeviceSynchronize());
    int32_t qo[2] = {0, M}, ko[2] = {0, n1};
    pi0_attn a = {.nseg = 1, .heads = Hq, .kv_heads = 1, .head_dim = hd, .scale = 1.0f / 16.0f, .q_off = qo,
                  .k_off = ko, .block0 = 1, .tail = M};
    // what: 1 q|k|v, 2 attention, 4 o, 8 gate|up, 16 down, 32 the RMSNorm before q|k|v, 64 the one before gate|up
    // (separate kernels), 128: both norms fused into the products (backend.h pi0_prenorm)
    cudaStream_t side;
    CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    cudaEvent_t evf[18], evj;
    for (int l = 0; l < L; l++) CK(cudaEventCreateWithFlags(&evf[l], cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&evj, cudaEventDisableTiming));
    auto step = [&](int what) {
        for (int l = 0; l < L; l++) {
            pi0_gemma_layer *Ly = &ly[l];
            pi0_proj3 pj = {{&Ly->q, &Ly->k, &Ly->v}, {NULL, NULL, NULL}};
            pt sk = pt_at(be, kc[l], (size_t)P * hd), sv = pt_at(be, vc[l], (size_t)P * hd);
            if (what & (512 | 1024)) {   // side stream: L2 prefetch of this layer's o|gate|up|down (1024: gate|up|down)
                const char *p0 = (const char *)((what & 512) ? wbf(c, &Ly->o) : wbf(c, &Ly->gate));
                size_t n = (const char *)wbf(c, &Ly->down) + (size_t)D * F * 2 - p0;
                CK(cudaEventRecord(evf[l], c->stream));
                CK(cudaStreamWaitEvent(side, evf[l], 0));
                l2_prefetch_kernel<<<132, 32, 0, side>>>(p0, n);
            }
            if (what & 32) be->rmsnorm(be, sy, s, &Ly->attn_norm, M, D, 1e-6f);
            pi0_prenorm pa = {.w = &Ly->attn_norm, .eps = 1e-6f, .out = sy}, pm = {.w = &Ly->mlp_norm, .eps = 1e-6f, .out = sy};
            if (what & 1) be->qkv(be, sq, sk, sv, (what & 128) ? s : sy, &pj, M, D, spos, hd, (what & 128) ? &pa : NULL);
            a.k1 = kc[l]; a.v1 = vc[l];
            if (what & 2) be->attention(be, satt, sq, &a);
            if (what & 4) {   // as model.c's expert_layers: gate|up may start during attention and o
                if (be->early_next) be->early_next(be, 1);
                be->linear(be, s, satt, &Ly->o, NULL, M, D, Hq * hd, 0, EPI_ADD);
                if (be->early_next) be->early_next(be, 0);
            }
            if (what & 64) be->rmsnorm(be, sy, s, &Ly->mlp_norm, M, D, 1e-6f);
            if (what & 8) be->mlp_up(be, sg, su, (what & 128) ? s : sy, Ly, M, F, D, (what & 128) ? &pm : NULL);
            if (what & 16) be->linear(be, s, sg, &Ly->down, NULL, M, D, F, 0, EPI_ADD);
        }
        if (what & (512 | 1024)) {
            CK(cudaEventRecord(evj, side));
            CK(cudaStreamWaitEvent(c->stream, evj, 0));
        }
    };
    struct { const char *name; int what, pdl, small; } vers[] = {
        {"layer (norms fused)", 159, 1, 1}, {"  no PDL", 159, 0, 1},          {"  cuBLASLt/GEMM path", 159, 1, 0},
        {"layer (norm kernels)", 127, 1, 1}, {"  norm+q|k|v fused", 129, 1, 1}, {"  norm+gate|up fused", 136, 1, 1},
        {"  without attention", 125, 1, 1}, {"  norms fused, no attention", 157, 1, 1}, {"  without norms", 31, 1, 1},     {"  only norm+q|k|v", 33, 1, 1},
        {"  only q|k|v", 1, 1, 1},          {"  only attention", 2, 1, 1},     {"  only o", 4, 1, 1},
        {"  only norm+gate|up", 72, 1, 1},  {"  only gate|up", 8, 1, 1},       {"  only down", 16, 1, 1},
        {"  only norms", 96, 1, 1},          {"layer + L2 prefetch o..down", 159 | 512, 1, 1},
        {"layer + L2 prefetch gate..down", 159 | 1024, 1, 1}, {"layer (norms fused), again", 159, 1, 1}};
#ifdef GEMV_PROF
    if (getenv("LAB_PROF")) {
        int whats[7] = {4, 16, 1, 8, 159, 159, 157};
        const char *names[7] = {"only o", "only down", "only q|k|v", "only gate|up", "layer (norms fused)",
                                "layer (norms fused), no weight copies (wrong results: the chain's latency)",
                                "layer without attention, no weight copies"};
        for (int i = 0; i < 7; i++) {
            gemv_prof_nowt_set(i >= 5);
            step(whats[i]);
            CK(cudaStreamSynchronize(c->stream));
            prof_chain(names[i], c->stream, &c->capturing, [&] { step(whats[i]); });
        }
        return 0;
    }
#endif
    printf("%-24s %12s\n", "18 layers, one step", "us per layer");
    for (auto &v : vers) {
        c->pdl = v.pdl && c->hopper;   // the portable path (PI0_CUDA_PATH=portable) has no PDL
        c->fused_small = v.small;
        step(v.what);   // un-captured first run: cuBLASLt plans and timing
        CK(cudaStreamSynchronize(c->stream));
        if (c->err) { printf("%s: %s\n", v.name, c->errmsg); return 1; }
        float med = lab_graph_median_ms(c->stream, &c->capturing, [&] { step(v.what); });
        printf("%-24s %12.2f\n", v.name, med * 1e3 / L);
    }
    be->destroy(be);
    return 0;
}
