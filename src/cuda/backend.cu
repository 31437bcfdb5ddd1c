// backend.cu — the CUDA backend's lifecycle and plumbing: per-session stream / cuBLASLt handle / workspace /
// attention scratch, buffer allocation, uploads and downloads, CUDA-graph capture and replay keyed by the launch
// shapes, page-locked host memory, and the op table. The model's weights are wstore.cu's; the ops themselves live in
// gemm.cu, attention.cu, norm.cu and elementwise.cu. Nothing here allocates during an inference.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvtx3/nvToolsExt.h>   // header-only NVTX v3: a no-op unless a profiler injects itself

#include "attention.cuh"
#include "common.cuh"

int cuda_note(cuda_ctx *c, cudaError_t e, const char *what, const char *file, int line) {
    if (e == cudaSuccess) return 0;
    if (!c->err) {
        c->err = e == cudaErrorMemoryAllocation ? PI0_ERR_NOMEM : PI0_ERR_CUDA;
        snprintf(c->errmsg, sizeof c->errmsg, "%s failed: %s (%s:%d)", what, cudaGetErrorString(e), file, line);
    }
    return 1;
}

int cublas_note(cuda_ctx *c, cublasStatus_t s, const char *what, const char *file, int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    if (!c->err) {
        c->err = PI0_ERR_CUDA;
        snprintf(c->errmsg, sizeof c->errmsg, "%s failed: cuBLAS status %d (%s:%d)", what, (int)s, file, line);
    }
    return 1;
}

static pi0_status report(cuda_ctx *c) {
    return c->err ? pi0_fail(c->err, "CUDA device %d: %s", c->device, c->errmsg) : PI0_OK;
}

pi0_status cuda_select_device(int device) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return pi0_fail(PI0_ERR_CUDA, "no usable CUDA device: %s", cudaGetErrorString(e));
    if (device < 0 || device >= n) return pi0_fail(PI0_ERR_ARG, "CUDA device %d: expected 0..%d", device, n - 1);
    e = cudaSetDevice(device);
    return e == cudaSuccess ? PI0_OK : pi0_fail(PI0_ERR_CUDA, "cudaSetDevice(%d): %s", device, cudaGetErrorString(e));
}

// A kernel every build carries: whether this binary has code the device can run (its SASS, or PTX to compile).
__global__ void probe_kernel(int *p) { if (p) *p = 0; }

// The kernel path of a device (docs/gpu.md): Hopper's own kernels on compute capability 9.0, the portable ones on every
// other GPU from 8.0 on, or everywhere with PI0_CUDA_PATH=portable (to test and time them on a Hopper GPU).
static pi0_status device_path(int device, int *hopper, int *major) {
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, device);
    if (e != cudaSuccess) return pi0_fail(PI0_ERR_CUDA, "CUDA device %d: %s", device, cudaGetErrorString(e));
    *major = p.major;
    if (p.major < 8)
        return pi0_fail(PI0_ERR_UNSUPPORTED, "CUDA device %d (%s) has compute capability %d.%d; the CUDA backend needs 8.0 "
                        "or later (Ampere, Ada, Hopper, Blackwell)", device, p.name, p.major, p.minor);
    cudaFuncAttributes fa;
    if ((e = cudaFuncGetAttributes(&fa, probe_kernel)) != cudaSuccess) {
        cudaGetLastError();
        return pi0_fail(PI0_ERR_UNSUPPORTED, "CUDA device %d (%s, compute capability %d.%d): this build has no code for it "
                        "(%s); rebuild with its architecture in CUDA_ARCHS (README, GPU)", device, p.name, p.major, p.minor,
                        cudaGetErrorString(e));
    }
    const char *path = getenv("PI0_CUDA_PATH");
    if (path && strcmp(path, "portable") && strcmp(path, "hopper"))
        return pi0_fail(PI0_ERR_ARG, "PI0_CUDA_PATH=%s: expected portable or hopper", path);
    if (path && !strcmp(path, "hopper") && p.major != 9)
        return pi0_fail(PI0_ERR_UNSUPPORTED, "PI0_CUDA_PATH=hopper: CUDA device %d (%s) has compute capability %d.%d, not 9.0",
                        device, p.name, p.major, p.minor);
    /* The Hopper kernels exist only in sm_90a code. A build without it (CUDA_ARCHS lacking 90a) runs on a Hopper GPU
       from older PTX (compute_80), where those kernels are compiled as traps: the probe kernel's PTX version says
       which. (It reads 90 for compute_90 as for compute_90a; the Makefile refuses 90 without the a.) */
    int has_sm90a = fa.ptxVersion >= 90;
    if (path && !strcmp(path, "hopper") && !has_sm90a)
        return pi0_fail(PI0_ERR_UNSUPPORTED, "PI0_CUDA_PATH=hopper: this build has no sm_90a code (the device runs it from "
                        "compute_%d PTX); rebuild with 90a in CUDA_ARCHS (README, GPU)", fa.ptxVersion);
    *hopper = p.major == 9 && has_sm90a && !(path && !strcmp(path, "portable"));
    if (p.major == 9 && !has_sm90a && !path) {
        static int told;
        if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "pi0: warning: CUDA device %d (%s) is a Hopper GPU but this build has no sm_90a code (it runs "
                            "from compute_%d PTX): it runs the slower portable kernels; rebuild with 90a in CUDA_ARCHS\n",
                    device, p.name, fa.ptxVersion);
    }
    return PI0_OK;
}

PI0_TEST_HOOK(extern "C" int cuda_backend_hopper(const pi0_backend *be) { return CTX(be)->hopper; })
PI0_TEST_HOOK(extern "C" void cuda_use_weights(pi0_backend *be, const void *weights) {
    CTX(be)->ws = (const cuda_wstore *)weights;
})

extern "C" pi0_status cuda_device_check(int device) {
    pi0_status st = cuda_select_device(device);
    int hopper, major;
    return st != PI0_OK ? st : device_path(device, &hopper, &major);
}

// ---- buffers and transfers ----

#ifdef PI0_CUDA_TESTING
static long host_views;   // (atomic: contexts may run on several threads)
extern "C" long cuda_host_views(void) { return __atomic_load_n(&host_views, __ATOMIC_RELAXED); }
#endif

static size_t cuda_elem_size(int kind) { return kind == PT_ACT ? 2 : 4; }

static pt cuda_alloc(pi0_backend *be, size_t n, int kind) {
    cuda_ctx *c = CTX(be);
    pt t = {NULL, kind};
    size_t bytes = (n ? n : 1) * cuda_elem_size(kind);
    if (c->n_bufs == c->cap_bufs) {
        int cap = c->cap_bufs ? 2 * c->cap_bufs : 128;
        void *p = realloc(c->bufs, (size_t)cap * sizeof *c->bufs);
        if (!p) { pi0_fail(PI0_ERR_NOMEM, "out of memory"); return t; }
        c->bufs = (struct cuda_ctx::cuda_buf_t *)p;
        c->cap_bufs = cap;
    }
    cudaError_t e = cudaMalloc((void **)&t.p, bytes);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        cudaGetLastError();   // clear the sticky allocation error
        pi0_fail(PI0_ERR_NOMEM, "CUDA device %d: cudaMalloc of %.1f MB failed (%.2f GB free of %.2f GB): %s",
                 c->device, bytes / 1e6, fr / 1e9, tot / 1e9, cudaGetErrorString(e));
        t.p = NULL;
        return t;
    }
    CUDA_NOTE(c, cudaMemsetAsync(t.p, 0, bytes, c->stream));
    c->bufs[c->n_bufs].p = t.p;
    c->bufs[c->n_bufs++].n = bytes;
    return t;
}

static void cuda_release(pi0_backend *be, pt t) {
    cuda_ctx *c = CTX(be);
    if (!t.p) return;
    for (int i = c->n_bufs - 1; i >= 0; i--)
        if (c->bufs[i].p == t.p) { c->bufs[i] = c->bufs[--c->n_bufs]; break; }
    cudaFree(t.p);
}

// backend.h host_view. An integrated GPU's copy of a page-locked input is one more pass over the DRAM both processors
// share, so its kernels read the caller's buffer where it is: memory from cuda_host_alloc is mapped for the device, and
// cudaPointerGetAttributes gives the device address of any byte inside such a block (pi0_host_alloc hands out an
// address past its header). Pageable memory (malloc, numpy) gets no address: it is copied as before. On a discrete GPU
// the kernels would read it over the bus: there only PI0_CUDA_ZERO_COPY=1 (the tests) turns this on.
static pt cuda_host_view(pi0_backend *be, const void *src, int kind) {
    cuda_ctx *c = CTX(be);
    pt t = {NULL, kind};
    cudaPointerAttributes a;
    if (!c->zero_copy || !src) return t;
    cudaSetDevice(c->device);
    if (cudaPointerGetAttributes(&a, src) != cudaSuccess) {
        cudaGetLastError();
        return t;
    }
    if (a.type != cudaMemoryTypeHost || !a.devicePointer) return t;
    t.p = (char *)a.devicePointer;
    PI0_TEST_HOOK(__atomic_add_fetch(&host_views, 1, __ATOMIC_RELAXED));
    return t;
}

// A copy from pageable memory is staged by the driver before cudaMemcpyAsync returns, even for a few bytes
// (bench/RESULTS.md L28). Small uploads (an inference's index arrays) go through this session's page-locked ring
// instead, which no copy reuses until the stream has been synchronised; large ones (images) go directly, which is
// asynchronous when the caller's memory is page-locked (pi0_host_alloc).
static pi0_status cuda_upload(pi0_backend *be, pt dst, const void *src, size_t n) {
    cuda_ctx *c = CTX(be);
    PI0_ASSERT(dst.kind != PT_ACT);
    cudaSetDevice(c->device);
    size_t bytes = n * 4, need = (bytes + 255) & ~(size_t)255;
    if (c->stage && need <= c->stage_cap - c->stage_used) {
        char *h = c->stage + c->stage_used;
        memcpy(h, src, bytes);
        c->stage_used += need;
        src = h;
    }
    CUDA_NOTE(c, cudaMemcpyAsync(dst.p, src, bytes, cudaMemcpyHostToDevice, c->stream));
    return report(c);
}

static pi0_status cuda_sync(pi0_backend *be) {
    cuda_ctx *c = CTX(be);
    if (!CUDA_NOTE(c, cudaStreamSynchronize(c->stream))) c->stage_used = 0;   // every staged copy is done
    return report(c);
}

static pi0_status cuda_download(pi0_backend *be, float *dst, pt src, size_t n) {
    cuda_ctx *c = CTX(be);
    if (src.kind != PT_ACT) {
        CUDA_NOTE(c, cudaMemcpyAsync(dst, src.p, n * 4, cudaMemcpyDeviceToHost, c->stream));
        return cuda_sync(be);
    }
    uint16_t *tmp = (uint16_t *)malloc(n * 2 + 2);   // bf16 downloads are for dumps only
    if (!tmp) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    CUDA_NOTE(c, cudaMemcpyAsync(tmp, src.p, n * 2, cudaMemcpyDeviceToHost, c->stream));
    pi0_status st = cuda_sync(be);
    for (size_t i = 0; i < n && st == PI0_OK; i++) dst[i] = pi0_bf16_to_f32(tmp[i]);
    free(tmp);
    return st;
}

static pi0_status cuda_reserve(pi0_backend *be, size_t max_rows, size_t max_keys, size_t max_scores, size_t max_fused) {
    cuda_ctx *c = CTX(be);
    (void)max_keys;
    if (c->ws && c->ws->q8_k) {
        pi0_status st = cuda_reserve_i8(c, max_rows);
        if (st != PI0_OK) return st;
    }
    if (max_fused > c->fused_cap) {
        cudaFree(c->fused);
        c->fused = NULL;
        c->fused_cap = 0;
        if (CUDA_NOTE(c, cudaMalloc((void **)&c->fused, max_fused * 2))) {
            pi0_status st = report(c);
            c->err = PI0_OK;
            cudaGetLastError();
            return st;
        }
        c->fused_cap = max_fused;
    }
    if (max_scores <= c->scores_cap) return PI0_OK;
    cudaFree(c->scores);
    cudaFree(c->probs);
    cudaFree(c->att32);
    c->scores = NULL; c->probs = NULL; c->att32 = NULL;
    c->scores_cap = c->att_cap = 0;
    // att32 holds one segment's suffix attention output (query rows x head_dim), which is smaller
    // than its logits (query rows x keys) in every configuration; the launch checks both caps.
    if (CUDA_NOTE(c, cudaMalloc((void **)&c->scores, max_scores * 4)) ||
        CUDA_NOTE(c, cudaMalloc((void **)&c->probs, max_scores * 2)) ||
        CUDA_NOTE(c, cudaMalloc((void **)&c->att32, max_scores * 4))) {
        pi0_status st = report(c);
        c->err = PI0_OK;
        cudaGetLastError();
        return st;
    }
    c->scores_cap = c->att_cap = max_scores;
    return PI0_OK;
}

// ---- graphs ----

#ifdef PI0_CUDA_TESTING
static long graph_replays;   // (atomic: contexts may run on several threads)
extern "C" long cuda_graph_replays(void) { return __atomic_load_n(&graph_replays, __ATOMIC_RELAXED); }
static int graph_fault;   // cuda_graph_fault (tests): where the next capture in this process fails
extern "C" int cuda_graph_fault(int where) { return __atomic_exchange_n(&graph_fault, where, __ATOMIC_RELAXED); }
#endif

static pi0_status cuda_run_graph(pi0_backend *be, const int32_t *key, int keylen, void (*fn)(void *), void *arg) {
    cuda_ctx *c = CTX(be);
    if (c->err) return report(c);
    if (!c->graphs_enabled) {
        fn(arg);
        return report(c);
    }
    cuda_graph_entry *hit = NULL, *victim = &c->graphs[0];
    for (int i = 0; i < CUDA_MAX_GRAPHS; i++) {
        cuda_graph_entry *g = &c->graphs[i];
        if (g->exec && g->keylen == keylen && !memcmp(g->key, key, (size_t)keylen * 4)) { hit = g; break; }
        if (!g->exec || (victim->exec && g->last_use < victim->last_use)) victim = g;
    }
    if (!hit) {
        if (victim->exec) { cudaGraphExecDestroy(victim->exec); victim->exec = NULL; }
        free(victim->key);
        victim->key = (int32_t *)malloc((size_t)keylen * 4);
        if (!victim->key) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
        memcpy(victim->key, key, (size_t)keylen * 4);
        victim->keylen = keylen;
        /* A new key runs un-captured first: its new GEMM shapes are timed there (no timing can happen inside a
         * capture), and the GPU starts at once. The same launches are then captured and instantiated while the GPU
         * works through that run (host time for ~1300 nodes,
         * bench/RESULTS.md L119), and the graph is uploaded behind it; it first replays on the next call with this key. So a new prompt
         * length costs about the larger of the run and those host steps, where capturing first and then launching
         * paid them one after the other (bench/RESULTS.md L116). The run and the replays compute the same
         * launches with the same GEMM algorithms, so they agree bit for bit. */
        fn(arg);
        if (c->err) return report(c);
        cudaGraph_t graph = NULL;
        if (CUDA_NOTE(c, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal))) return report(c);
        c->capturing = 1;
        c->untuned = 0;
        fn(arg);
        c->capturing = 0;
        /* a test's fault goes through CUDA itself: a synchronisation is not allowed in a capture and invalidates
         * it; no instantiation takes all flags */
        int fault = 0;
        PI0_TEST_HOOK(fault = cuda_graph_fault(0));
        const unsigned long long flags = fault == 2 ? ~0ull : 0ull;
        if (fault == 1) cudaStreamSynchronize(c->stream);
        cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
        if (!c->err) cuda_note(c, e, "cudaStreamEndCapture", __FILE__, __LINE__);
        if (!c->err && !c->untuned) CUDA_NOTE(c, cudaGraphInstantiate(&victim->exec, graph, flags));
        if (!c->err && victim->exec) CUDA_NOTE(c, cudaGraphUpload(victim->exec, c->stream));
        if (graph) cudaGraphDestroy(graph);
        if (c->err) {   /* the run's result stands unless the run itself failed, which a sync shows */
            if (victim->exec) cudaGraphExecDestroy(victim->exec);
            victim->exec = NULL;
            char msg[sizeof c->errmsg];
            memcpy(msg, c->errmsg, sizeof msg);
            c->err = PI0_OK;
            cudaGetLastError();
            if (CUDA_NOTE(c, cudaStreamSynchronize(c->stream))) return report(c);
            fprintf(stderr, "pi0: warning: CUDA device %d: graph capture failed (%s); running without graphs\n",
                    c->device, msg);
            c->graphs_enabled = 0;
            return PI0_OK;
        }
        if (!victim->exec) return report(c);   /* an untimed GEMM in the capture (a guard: the run timed them all) */
        victim->last_use = ++c->graph_clock;
        return report(c);
    }
    hit->last_use = ++c->graph_clock;
    CUDA_NOTE(c, cudaGraphLaunch(hit->exec, c->stream));
    PI0_TEST_HOOK(__atomic_add_fetch(&graph_replays, 1, __ATOMIC_RELAXED));
    return report(c);
}

// Page-locked for every device, and mapped into the devices' address space so that an integrated GPU reads inputs in
// place (cuda_host_view; with unified addressing, which every 64-bit platform has, it is mapped anyway).
extern "C" void *cuda_host_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
        cudaGetLastError();   // no device, or no page-locked memory: the caller falls back to malloc
        return NULL;
    }
    return p;
}

extern "C" void cuda_host_free(void *p) { cudaFreeHost(p); }

static void cuda_early_next(pi0_backend *be, int on) { CTX(be)->early_next = on; }

// linear_t_cat runs few rows as one product over its transposed weights (gemm_bwd.cu), which gemv.cu reads in slices
// of 1024 columns of its inner dimension: a stride of whole slices (the expert's q|k|v, 2560 columns, as 3072) keeps
// the group one product.
static int cuda_cat_ld(pi0_backend *be, int width) {
    (void)be;
    return (width + 1023) / 1024 * 1024;
}

static pi0_status cuda_memory(pi0_backend *be, size_t *used, size_t *total) {
    cuda_ctx *c = CTX(be);
    size_t fr = 0, tot = 0;
    cudaSetDevice(c->device);
    cudaError_t e = cudaMemGetInfo(&fr, &tot);
    if (e != cudaSuccess) return pi0_fail(PI0_ERR_CUDA, "cudaMemGetInfo: %s", cudaGetErrorString(e));
    *used = tot - fr;
    *total = tot;
    return PI0_OK;
}

static pi0_status cuda_footprint(pi0_backend *be, pi0_memory_info *out) {
    const cuda_ctx *c = CTX(be);
    size_t n = c->ws_size + c->tune_cap + c->scores_cap * (4 + 2 + 4) + c->fused_cap * 2 +
               c->xq_rows * ((size_t)c->xq_k + 4 + (size_t)c->acc_n * 4) +
               (c->pscratch ? CUDA_P_SCRATCH + CUDA_P_COUNTERS * sizeof(unsigned) : 0);
    for (int i = 0; i < c->n_bufs; i++) n += c->bufs[i].n;
    for (int i = 0; i < c->n_wts; i++) n += (size_t)c->wts[i].k * c->wts[i].ld * (c->wts[i].f32 ? 4 : 2);
    *out = (pi0_memory_info){.weights_bf16 = c->ws ? c->ws->bytes_bf16 : 0, .weights_f32 = c->ws ? c->ws->bytes_f32 : 0,
                             .weights_8bit = c->ws ? c->ws->bytes_i8 : 0, .session = n, .integrated = c->integrated};
    return PI0_OK;
}

static void cuda_range(pi0_backend *be, const char *name) {
    (void)be;
    if (name) nvtxRangePushA(name);
    else nvtxRangePop();
}

// ---- lifecycle ----

static void cuda_destroy(pi0_backend *be) {
    if (!be) return;
    cuda_ctx *c = CTX(be);
    if (c) {
        cudaSetDevice(c->device);
        if (c->stream) cudaStreamSynchronize(c->stream);
        for (int i = 0; i < CUDA_MAX_GRAPHS; i++) {
            if (c->graphs[i].exec) cudaGraphExecDestroy(c->graphs[i].exec);
            free(c->graphs[i].key);
        }
        gemm_cache_free(c->gemms);
        cudaFree(c->scores);
        cudaFree(c->tok_part);
        cudaFree(c->probs);
        cudaFree(c->att32);
        cudaFree(c->tune_buf);
        cudaFree(c->fused);
        cudaFree(c->xq);
        cudaFree(c->xs);
        cudaFree(c->acc);
        cudaFree(c->workspace);
        cudaFree(c->pscratch);
        cudaFree(c->pcounters);
        for (int i = 0; i < c->n_wts; i++) cudaFree(c->wts[i].wt);
        free(c->wts);
        free(c->bufs);
        cudaFreeHost(c->stage);
        if (c->lt) cublasLtDestroy(c->lt);
        if (c->stream) cudaStreamDestroy(c->stream);
        free(c);
    }
    free(be);
}

extern "C" pi0_status cuda_backend_create(pi0_backend **out, int device, const void *weights) {
    *out = NULL;
    pi0_status st = cuda_select_device(device);
    int hopper = 0, major = 0;
    if (st == PI0_OK) st = device_path(device, &hopper, &major);
    if (st != PI0_OK) return st;
    const char *zc = getenv("PI0_CUDA_ZERO_COPY");
    if (zc && strcmp(zc, "0") && strcmp(zc, "1"))
        return pi0_fail(PI0_ERR_ARG, "PI0_CUDA_ZERO_COPY=%s: expected 0 or 1", zc);
    int integrated = 0;
    cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, device);
    pi0_backend *be = (pi0_backend *)calloc(1, sizeof *be);
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    if (!be || !c) { free(be); free(c); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    be->ctx = c;
    c->device = device;
    c->ws = (const cuda_wstore *)weights;
    c->ws_size = 32u << 20;
    c->integrated = integrated;
    c->zero_copy = zc ? zc[0] == '1' : integrated;
    const char *g = getenv("PI0_CUDA_GRAPHS");
    c->graphs_enabled = !(g && !strcmp(g, "0"));
    const char *pdl = getenv("PI0_CUDA_PDL"), *small = getenv("PI0_CUDA_SMALL");
    c->pdl = !(pdl && !strcmp(pdl, "0"));
    c->fused_small = !(small && !strcmp(small, "0"));
    const char *gu = getenv("PI0_CUDA_GATEUP");
    c->gateup = !(gu && !strcmp(gu, "0"));
    const char *flash = getenv("PI0_CUDA_FLASH");
    c->flash = flash && !strcmp(flash, "0") ? 0 : flash && !strcmp(flash, "mma") ? 2 : 1;
    c->hopper = hopper;
    if (!hopper) {   /* the portable path: none of the Hopper kernels (PDL, clusters, TMA, wgmma), no flash kernel (its
                        shared memory exceeds Ada's 99 KB per block): cuBLASLt products, the portable decode attention
                        (attn_decode.cu) and the plain kernels */
        c->pdl = c->fused_small = c->gateup = c->flash = 0;
        static int told;
        if (major != 9 && !__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "pi0: warning: CUDA device %d is not a Hopper GPU: it runs the portable kernels, which so far "
                            "have been tested on Hopper only (PI0_CUDA_PATH=portable)\n", device);
    }
    c->gemms = gemm_cache_new();
    if (!c->gemms) { cuda_destroy(be); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    if (CUDA_NOTE(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) ||
        CUBLAS_NOTE(c, cublasLtCreate(&c->lt)) || CUDA_NOTE(c, cudaMalloc(&c->workspace, c->ws_size))) {
        st = report(c);
        cuda_destroy(be);
        return st;
    }
    if (cudaHostAlloc((void **)&c->stage, (size_t)1 << 20, cudaHostAllocPortable) == cudaSuccess)
        c->stage_cap = (size_t)1 << 20;
    else { c->stage = NULL; cudaGetLastError(); }   // no ring: direct copies
    CUDA_NOTE(c, cudaDeviceGetAttribute(&c->sms, cudaDevAttrMultiProcessorCount, device));
    CUDA_NOTE(c, cudaDeviceGetAttribute(&c->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (hopper) {   /* the shared memory opt-ins of the Hopper kernels (more than other GPUs have) */
        cuda_attention_setup(c);
        cuda_gemv_setup(c);
        cuda_gateup_setup(c);
    } else if (!(small && !strcmp(small, "0")))
        cuda_decode_attention_p_setup(c, device);
    if (c->err) {
        st = report(c);
        cuda_destroy(be);
        return st;
    }
    be->name = "cuda";
    cudaDeviceProp prop;
    int drv = 0;
    int sm_khz = 0, mem_khz = 0;   /* the maximum clocks (CUDA 13 dropped them from cudaDeviceProp) */
    cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, device);
    cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device);
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess)
        snprintf(be->device, sizeof be->device, "%.80s; %d SMs; max clocks %d MHz SM, %d MHz memory", prop.name,
                 prop.multiProcessorCount, sm_khz / 1000, mem_khz / 1000);
    cudaDriverGetVersion(&drv);
    snprintf(be->driver, sizeof be->driver, "CUDA driver %d.%d", drv / 1000, (drv % 1000) / 10);
    be->alloc = cuda_alloc;
    be->release = cuda_release;
    be->reserve = cuda_reserve;
    be->sync = cuda_sync;
    be->run_graph = cuda_run_graph;
    be->destroy = cuda_destroy;
    be->range = cuda_range;
    be->memory = cuda_memory;
    be->footprint = cuda_footprint;
    be->host_view = cuda_host_view;
    be->early_next = cuda_early_next;
    be->cat_ld = cuda_cat_ld;
    be->upload = cuda_upload;
    be->download = cuda_download;
    be->elem_size = cuda_elem_size;
    be->patch_embed = cuda_patch_embed;
    be->layernorm = cuda_layernorm;
    be->rmsnorm = cuda_rmsnorm;
    be->adarms = cuda_adarms;
    be->linear = cuda_linear;
    be->rope = cuda_rope;
    be->attention = cuda_attention;
    be->gelu_mul = cuda_gelu_mul;
    be->qkv = cuda_qkv;
    be->mlp_up = cuda_mlp_up;
    be->embed = cuda_embed;
    be->copy_rows = cuda_copy_rows;
    be->next_token = cuda_next_token;
    be->linear_gated = cuda_linear_gated;
    be->add_rows = cuda_add_rows;
    be->axpy = cuda_axpy;
    be->rtc_guide = cuda_rtc_guide;
    be->linear_t = cuda_linear_t;
    be->mlp_up_save = cuda_mlp_up_save;
    be->residual_save = cuda_residual_save;
    be->linear_t_cat = cuda_linear_t_cat;
    be->norm_bwd = cuda_norm_bwd;
    be->gelu_mul_bwd = cuda_gelu_mul_bwd;
    be->swish_bwd = cuda_swish_bwd;
    be->rope_bwd = cuda_rope_bwd;
    be->attention_bwd = cuda_attention_bwd;
    be->scale_rows = cuda_scale_rows;
    be->rtc_error = cuda_rtc_error;
    be->rtc_correct = cuda_rtc_correct;
    *out = be;
    return PI0_OK;
}
