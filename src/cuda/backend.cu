// backend.cu — the CUDA backend's lifecycle and plumbing: device weight arena (one cudaMalloc per
// model; bf16 matrices, fp32 + bf16 copies of 1-D tensors), per-session stream / cuBLASLt handle /
// workspace / attention scratch, buffer allocation, uploads and downloads, CUDA-graph capture and
// replay keyed by the launch shapes, and the op table. The ops themselves live in gemm.cu,
// attention.cu, norm.cu and elementwise.cu. Nothing here allocates during an inference.
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

static pi0_status check_device(int device) {
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
    pi0_status st = check_device(device);
    int hopper, major;
    return st != PI0_OK ? st : device_path(device, &hopper, &major);
}

// ---- weights ----
// The model's weights in one device allocation, owned here and keyed by tensor id (weights.h): a bf16 copy of every
// tensor, and an fp32 copy of those the kernels read in fp32. The layout is this backend's plan: the members of a group
// (one attention layer's q, k, v; one MLP's gate, up; SigLIP's three biases) are placed in order, each right after the
// previous one when its byte size is a multiple of 256 (so every start stays 256-byte aligned), and the store records
// that link (cuda_wentry.next), which lets the ops run a group as one product.

static size_t up256(size_t n) { return (n + 255) & ~(size_t)255; }

static const size_t STAGE = (size_t)1 << 24;   // elements converted per host chunk

static pi0_status upload_bf16(cuda_wstore *s, const pi0_wt *t, char *dst, uint16_t *stage, const char *name) {
    size_t n = (size_t)(t->rows * t->cols), esz = pi0_dtype_size(t->dtype);
    for (size_t i = 0; i < n; i += STAGE) {
        size_t m = n - i < STAGE ? n - i : STAGE;
        const char *src = (const char *)t->data + i * esz;
        const void *h = src;
        if (t->dtype != PI0_DT_BF16) {   // F32 / F16 file: round to bf16 on the host
            float tmp[256];
            for (size_t j = 0; j < m; j += 256) {
                size_t k = m - j < 256 ? m - j : 256;
                pi0_to_f32(tmp, src + j * esz, t->dtype, k);
                for (size_t q = 0; q < k; q++) stage[j + q] = pi0_f32_to_bf16(tmp[q]);
            }
            h = stage;
        }
        cudaError_t e = cudaMemcpy(dst + i * 2, h, m * 2, cudaMemcpyHostToDevice);
        if (e != cudaSuccess) return pi0_fail(PI0_ERR_CUDA, "uploading %s: %s", name, cudaGetErrorString(e));
    }
    (void)s;
    return PI0_OK;
}

static pi0_status upload_f32(const pi0_wt *t, char *dst, const char *name) {
    size_t n = (size_t)(t->rows * t->cols);
    float *f = (float *)malloc(n * sizeof(float));
    if (!f) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    pi0_to_f32(f, t->data, t->dtype, n);   // the file's values, widened
    cudaError_t e = cudaMemcpy(dst, f, n * 4, cudaMemcpyHostToDevice);
    free(f);
    return e == cudaSuccess ? PI0_OK : pi0_fail(PI0_ERR_CUDA, "uploading %s: %s", name, cudaGetErrorString(e));
}

extern "C" void cuda_weights_free(void *store) {
    cuda_wstore *s = (cuda_wstore *)store;
    if (!s) return;
    cudaSetDevice(s->device);
    cudaFree(s->base);
    free(s->e);
    free(s);
}

// Uploads n tensors: ts[i] in bf16, or in int8 with its row scales where fmt[i] & CUDA_W_I8, an fp32 copy too where
// fmt[i] & CUDA_W_F32, and group[i] > 1 starting a group of that many bf16 tensors (the members follow in ts). Each
// tensor's id must be 1 .. max_id and unique.
extern "C" pi0_status cuda_upload_list(void **out, const pi0_wt *const *ts, const int *fmt, const int *group, int n,
                                       int max_id, int device) {
    *out = NULL;
    pi0_status st = check_device(device);
    if (st != PI0_OK) return st;
    cuda_wstore *s = (cuda_wstore *)calloc(1, sizeof *s);
    if (!s) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    s->device = device;
    s->n = max_id;
    s->e = (cuda_wentry *)calloc((size_t)max_id + 1, sizeof *s->e);
    if (!s->e) { free(s); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        size_t m = (size_t)(ts[i]->rows * ts[i]->cols);
        PI0_ASSERT(ts[i]->id >= 1 && ts[i]->id <= max_id && !s->e[ts[i]->id].next);
        s->e[ts[i]->id].next = -1;   // (marks the id taken until the upload below)
        bytes += (fmt[i] & CUDA_W_I8 ? up256(m) + up256((size_t)ts[i]->rows * 4) : up256(m * 2)) +
                 (fmt[i] & CUDA_W_F32 ? up256(m * 4) : 0);
        if (fmt[i] & CUDA_W_I8) {
            if (ts[i]->cols > s->q8_k) s->q8_k = ts[i]->cols;
            if (ts[i]->rows > s->q8_n) s->q8_n = ts[i]->rows;
        }
    }
    cudaError_t e = cudaMalloc((void **)&s->base, bytes ? bytes : 256);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaGetLastError();
        cudaMemGetInfo(&fr, &tot);
        cuda_weights_free(s);
        return pi0_fail(e == cudaErrorMemoryAllocation ? PI0_ERR_NOMEM : PI0_ERR_CUDA,
                        "weights need %.2f GB on CUDA device %d, which has %.2f GB free of %.2f GB: %s",
                        bytes / 1e9, device, fr / 1e9, tot / 1e9, cudaGetErrorString(e));
    }
    s->bytes = bytes;
    uint16_t *stage = (uint16_t *)malloc((size_t)STAGE * 2);
    if (!stage) { cuda_weights_free(s); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    size_t used = 0;
    char name[48];
    for (int i = 0; i < n; i++) s->e[ts[i]->id].next = 0;
    for (int i = 0; i < n && st == PI0_OK; i++) {   // bf16 copies in list order: a group's members back to back
        const pi0_wt *t = ts[i];
        if (fmt[i] & CUDA_W_I8) continue;
        size_t b = (size_t)(t->rows * t->cols) * 2;
        cuda_wentry *w = &s->e[t->id];
        w->bf = (bf16 *)(s->base + used);
        used += up256(b);
        snprintf(name, sizeof name, "weight %d", t->id);
        st = upload_bf16(s, t, (char *)w->bf, stage, name);
        if (group[i] > 1)   // link the bf16 members whose predecessors end on a 256-byte boundary
            for (int j = i; j + 1 < i + group[i] && j + 1 < n && ((size_t)(ts[j]->rows * ts[j]->cols) * 2) % 256 == 0 &&
                            !(fmt[j + 1] & CUDA_W_I8) && ts[j + 1]->cols == ts[i]->cols; j++)
                s->e[ts[j]->id].next = ts[j + 1]->id;
    }
    for (int i = 0; i < n && st == PI0_OK; i++) {   // int8 copies and their row scales, quantised on the host
        if (!(fmt[i] & CUDA_W_I8)) continue;
        const pi0_wt *t = ts[i];
        size_t m = (size_t)(t->rows * t->cols);
        cuda_wentry *w = &s->e[t->id];
        w->q8 = (int8_t *)(s->base + used);
        used += up256(m);
        w->s8 = (float *)(s->base + used);
        used += up256((size_t)t->rows * 4);
        int8_t *q = (int8_t *)malloc(m);
        float *sc = (float *)malloc((size_t)t->rows * 4);
        if (!q || !sc) st = pi0_fail(PI0_ERR_NOMEM, "out of memory");
        else {
            quant_weight_i8(t, q, sc);
            cudaError_t e = cudaMemcpy(w->q8, q, m, cudaMemcpyHostToDevice);
            if (e == cudaSuccess) e = cudaMemcpy(w->s8, sc, (size_t)t->rows * 4, cudaMemcpyHostToDevice);
            if (e != cudaSuccess) st = pi0_fail(PI0_ERR_CUDA, "uploading weight %d: %s", t->id, cudaGetErrorString(e));
        }
        free(q);
        free(sc);
    }
    for (int i = 0; i < n && st == PI0_OK; i++) {
        if (!(fmt[i] & CUDA_W_F32)) continue;
        cuda_wentry *w = &s->e[ts[i]->id];
        w->f32 = (float *)(s->base + used);
        used += up256((size_t)(ts[i]->rows * ts[i]->cols) * 4);
        snprintf(name, sizeof name, "weight %d", ts[i]->id);
        st = upload_f32(ts[i], (char *)w->f32, name);
    }
    free(stage);
    if (st != PI0_OK) { cuda_weights_free(s); return st; }
    *out = s;
    return PI0_OK;
}

struct wt_plan {
    const pi0_wt **t;
    int *fmt, *group;
    int n, cap;
};

static int plan_add(wt_plan *l, const pi0_wt *t, int fmt, int group) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 256;
        const pi0_wt **nt = (const pi0_wt **)realloc(l->t, (size_t)cap * sizeof *nt);
        if (nt) l->t = nt;
        int *nf = (int *)realloc(l->fmt, (size_t)cap * sizeof *nf);
        if (nf) l->fmt = nf;
        int *ng = (int *)realloc(l->group, (size_t)cap * sizeof *ng);
        if (ng) l->group = ng;
        if (!nt || !nf || !ng) return 0;
        l->cap = cap;
    }
    l->t[l->n] = t;
    l->fmt[l->n] = fmt;
    l->group[l->n++] = group;
    return 1;
}

struct plan_ctx {
    wt_plan *l;
    const pi0_weights *w;
    const pi0_config *cfg;
    const pi0_quant *q;
};

// The groups this backend runs as one product, each listed from its first member: q, k, v and gate, up of every
// layer (qkv, mlp_up), SigLIP's q, k, v biases (qkv's strided batch); the rest one by one. The fp32 copies: 1-D
// tensors (norm scales, biases), the patch embedding (docs/model.md 3.4 computes it in fp32) and the fp32 products of
// docs/model.md 1.5 (state, action and time projections: cuBLASLt in fp32 at 64 rows and more). The weights q selects:
// int8 only (a group of them is no group: the 8-bit products run one by one).
static pi0_status plan_one(void *user, const char *name, pi0_wt *t) {
    plan_ctx *p = (plan_ctx *)user;
    const pi0_weights *w = p->w;
    (void)name;
    const pi0_wt *grp[3] = {NULL, NULL, NULL};
    int member = 0;
    for (int li = 0; li < p->cfg->vis.depth && !grp[0] && !member; li++) {
        const pi0_vis_layer *V = &w->vis[li];
        if (t == &V->q_w) { grp[0] = &V->q_w; grp[1] = &V->k_w; grp[2] = &V->v_w; }
        else if (t == &V->q_b) { grp[0] = &V->q_b; grp[1] = &V->k_b; grp[2] = &V->v_b; }
        else member = t == &V->k_w || t == &V->v_w || t == &V->k_b || t == &V->v_b;
    }
    for (int e = 0; e < 2 && !grp[0] && !member; e++)
        for (int li = 0; li < p->cfg->lm.depth && !grp[0] && !member; li++) {
            const pi0_gemma_layer *L = e ? &w->ex[li] : &w->lm[li];
            if (t == &L->q) { grp[0] = &L->q; grp[1] = &L->k; grp[2] = &L->v; }
            else if (t == &L->gate) { grp[0] = &L->gate; grp[1] = &L->up; }
            else member = t == &L->k || t == &L->v || t == &L->up;
        }
    if (member) return PI0_OK;   // placed with its group's first
    const pi0_wt *f32w[] = {&w->patch_w, &w->action_in_w, &w->action_out_w, &w->state_w, &w->atm_in_w, &w->atm_out_w,
                            &w->time_in_w, &w->time_out_w, &w->atm_act_w};
    if (!grp[0]) grp[0] = t;
    int n = grp[2] ? 3 : grp[1] ? 2 : 1;
    for (int i = 0; i < n; i++) {
        int f32 = grp[i]->cols == 1;
        for (size_t j = 0; j < sizeof f32w / sizeof *f32w; j++) f32 |= grp[i] == f32w[j];
        int fmt = (f32 ? CUDA_W_F32 : 0) | (quant_wants(p->q, w, p->cfg, grp[i]) ? CUDA_W_I8 : 0);
        if (!plan_add(p->l, grp[i], fmt, i ? 0 : n)) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    }
    return PI0_OK;
}

extern "C" pi0_status cuda_weights_upload(void **out, const pi0_weights *w, const pi0_config *cfg, const pi0_quant *q,
                                          int device) {
    wt_plan l = {};
    plan_ctx p = {&l, w, cfg, q};
    *out = NULL;
    pi0_status st = weights_foreach((pi0_weights *)w, cfg, plan_one, &p);
    if (st == PI0_OK) st = cuda_upload_list(out, l.t, l.fmt, l.group, l.n, w->n_ids, device);
    free(l.t);
    free(l.fmt);
    free(l.group);
    return st;
}

extern "C" wview cuda_wv(const cuda_ctx *c, const pi0_wt *W) {
    const cuda_wstore *s = c->ws;
    // model.c passes only the bound tensors of the model whose store this session reads: any other is a bug
    PI0_ASSERT(s && W->id >= 1 && W->id <= s->n && (s->e[W->id].bf || s->e[W->id].q8));
    const cuda_wentry *e = &s->e[W->id];
    wview v = {e->bf, e->f32, e->q8, e->s8, W->rows, W->cols, W->dtype, e->next};
    return v;
}

// ---- buffers and transfers ----

static size_t cuda_elem_size(int kind) { return kind == PT_ACT ? 2 : 4; }

static pt cuda_alloc(pi0_backend *be, size_t n, int kind) {
    cuda_ctx *c = CTX(be);
    pt t = {NULL, kind};
    size_t bytes = (n ? n : 1) * cuda_elem_size(kind);
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
    return t;
}

static void cuda_release(pi0_backend *be, pt t) {
    (void)be;
    if (t.p) cudaFree(t.p);
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

extern "C" void *cuda_host_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {   // page-locked for every device
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
        cudaFreeHost(c->stage);
        if (c->lt) cublasLtDestroy(c->lt);
        if (c->stream) cudaStreamDestroy(c->stream);
        free(c);
    }
    free(be);
}

extern "C" pi0_status cuda_backend_create(pi0_backend **out, int device, const void *weights) {
    *out = NULL;
    pi0_status st = check_device(device);
    int hopper = 0, major = 0;
    if (st == PI0_OK) st = device_path(device, &hopper, &major);
    if (st != PI0_OK) return st;
    pi0_backend *be = (pi0_backend *)calloc(1, sizeof *be);
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    if (!be || !c) { free(be); free(c); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    be->ctx = c;
    c->device = device;
    c->ws = (const cuda_wstore *)weights;
    c->ws_size = 32u << 20;
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
