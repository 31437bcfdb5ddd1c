// wstore.cu — the CUDA backend's weight store (backend.h weights_upload): the plan of which copies each weight gets
// and where (its fused ops' groups placed together), the upload from the host view, and cuda_wv, through which the ops
// find a weight's copies by tensor id. The ops themselves and the sessions are backend.cu's and the op files'.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"

// The model's weights in device memory owned here, keyed by tensor id (weights.h): a bf16 copy of every tensor (or,
// for the weights an 8-bit precision selects, an int8 copy with its row scales), and an fp32 copy of those the kernels
// read in fp32. The layout is this backend's plan: the members of a group (one attention layer's q, k, v; one MLP's
// gate, up; SigLIP's three biases) are placed in order, each right after the previous one when its byte size is a
// multiple of 256 (so every start stays 256-byte aligned), and the store records that link (cuda_wentry.next), which
// lets the ops run a group as one product.
//
// The copies fill slabs of at most slab_max bytes (a larger group alone in one), each allocated when the upload reaches
// it, and each tensor's host view is handed back (done) once its copies are made. On a GPU that shares the host's
// memory (a Jetson) the host view of a decoded checkpoint (Orbax's: anonymous memory) then shrinks as the device copy
// grows: the two hold the model once plus a slab, where one allocation made up front holds it twice at its peak.

static size_t up256(size_t n) { return (n + 255) & ~(size_t)255; }

static const size_t STAGE = (size_t)1 << 24;   // elements converted per host chunk
static size_t slab_max = (size_t)256 << 20;    // (the largest unit, π0's token embedding, is 1.05 GB alone)
PI0_TEST_HOOK(extern "C" void cuda_weights_slab(size_t bytes) { slab_max = bytes ? bytes : (size_t)256 << 20; })

static pi0_status upload_bf16(const pi0_wt *t, char *dst, uint16_t *stage, const char *name) {
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

static pi0_status upload_8bit(const pi0_wt *t, int fp8, int8_t *dq, float *ds) {
    size_t m = (size_t)(t->rows * t->cols);
    int8_t *q = (int8_t *)malloc(m);
    float *sc = (float *)malloc((size_t)t->rows * 4);
    pi0_status st = PI0_OK;
    if (!q || !sc) st = pi0_fail(PI0_ERR_NOMEM, "out of memory");
    else {
        quant_weight(t, fp8 ? PI0_PRECISION_FP8 : PI0_PRECISION_INT8, q, sc);   // quantised on the host
        cudaError_t e = cudaMemcpy(dq, q, m, cudaMemcpyHostToDevice);
        if (e == cudaSuccess) e = cudaMemcpy(ds, sc, (size_t)t->rows * 4, cudaMemcpyHostToDevice);
        if (e != cudaSuccess) st = pi0_fail(PI0_ERR_CUDA, "uploading weight %d: %s", t->id, cudaGetErrorString(e));
    }
    free(q);
    free(sc);
    return st;
}

extern "C" void cuda_weights_free(void *store) {
    cuda_wstore *s = (cuda_wstore *)store;
    if (!s) return;
    cudaSetDevice(s->device);
    for (int k = 0; k < s->nslab; k++) cudaFree(s->slab[k]);
    free(s->slab);
    free(s->e);
    free(s);
}

// The bytes of a tensor's copies: bf16, or 8-bit codes and their row scales; and fp32.
static size_t copies_bytes(const pi0_wt *t, int fmt) {
    size_t m = (size_t)(t->rows * t->cols);
    return (fmt & CUDA_W_8BIT ? up256(m) + up256((size_t)t->rows * 4) : up256(m * 2)) +
           (fmt & CUDA_W_F32 ? up256(m * 4) : 0);
}

// The tensors placed together from ts[i] on: a group (group[i] > 1 of them), or one.
static int unit_len(const int *group, int i, int n) { return group[i] > 1 ? (group[i] < n - i ? group[i] : n - i) : 1; }

// The copies of one unit ts[0 .. u) from `at` on: the bf16 copies in order (a group's members back to back, linked
// where the predecessor ends on a 256-byte boundary), then the 8-bit copies with their row scales, then the fp32 copies.
static pi0_status upload_unit(cuda_wstore *s, const pi0_wt *const *ts, const int *fmt, int u, char *at,
                              uint16_t *stage) {
    pi0_status st = PI0_OK;
    char name[48];
    for (int j = 0; j < u && st == PI0_OK; j++) {
        if (fmt[j] & CUDA_W_8BIT) continue;
        cuda_wentry *w = &s->e[ts[j]->id];
        w->bf = (bf16 *)at;
        at += up256((size_t)(ts[j]->rows * ts[j]->cols) * 2);
        snprintf(name, sizeof name, "weight %d", ts[j]->id);
        st = upload_bf16(ts[j], (char *)w->bf, stage, name);
    }
    for (int j = 0; u > 1 && !(fmt[0] & CUDA_W_8BIT) && j + 1 < u && (size_t)(ts[j]->rows * ts[j]->cols) * 2 % 256 == 0 &&
                    !(fmt[j + 1] & CUDA_W_8BIT) && ts[j + 1]->cols == ts[0]->cols; j++)
        s->e[ts[j]->id].next = ts[j + 1]->id;
    for (int j = 0; j < u && st == PI0_OK; j++) {
        if (!(fmt[j] & CUDA_W_8BIT)) continue;
        cuda_wentry *w = &s->e[ts[j]->id];
        w->q8 = (int8_t *)at;
        at += up256((size_t)(ts[j]->rows * ts[j]->cols));
        w->s8 = (float *)at;
        at += up256((size_t)ts[j]->rows * 4);
        w->fp8 = !!(fmt[j] & CUDA_W_F8);
        st = upload_8bit(ts[j], w->fp8, w->q8, w->s8);
    }
    for (int j = 0; j < u && st == PI0_OK; j++) {
        if (!(fmt[j] & CUDA_W_F32)) continue;
        cuda_wentry *w = &s->e[ts[j]->id];
        w->f32 = (float *)at;
        at += up256((size_t)(ts[j]->rows * ts[j]->cols) * 4);
        snprintf(name, sizeof name, "weight %d", ts[j]->id);
        st = upload_f32(ts[j], (char *)w->f32, name);
    }
    return st;
}

// Uploads n tensors: ts[i] in bf16, or in int8 / E4M3 with its row scales where fmt[i] & CUDA_W_I8 / CUDA_W_F8, an fp32
// copy too where
// fmt[i] & CUDA_W_F32, and group[i] > 1 starting a group of that many bf16 tensors (the members follow in ts). Each
// tensor's id must be 1 .. max_id and unique. done (may be NULL) as backend.h weights_upload.
static pi0_status upload_list(void **out, const pi0_wt *const *ts, const int *fmt, const int *group, int n, int max_id,
                              int device, void (*done)(void *user, const pi0_wt *t), void *user) {
    *out = NULL;
    pi0_status st = cuda_select_device(device);
    if (st != PI0_OK) return st;
    cuda_wstore *s = (cuda_wstore *)calloc(1, sizeof *s);
    if (!s) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    s->device = device;
    s->n = max_id;
    s->e = (cuda_wentry *)calloc((size_t)max_id + 1, sizeof *s->e);
    s->slab = (char **)calloc((size_t)n + 1, sizeof *s->slab);
    size_t *slab = (size_t *)calloc((size_t)n + 1, sizeof *slab);   // each slab's bytes
    int *in_slab = (int *)calloc((size_t)n + 1, sizeof *in_slab);  // the slab of the unit that starts at i
    uint16_t *stage = (uint16_t *)malloc((size_t)STAGE * 2);
    if (!s->e || !s->slab || !slab || !in_slab || !stage) st = pi0_fail(PI0_ERR_NOMEM, "out of memory");
    int ns = 0;
    for (int i = 0, u; i < n && st == PI0_OK; i += u) {
        u = unit_len(group, i, n);
        size_t b = 0;
        for (int j = i; j < i + u; j++) {
            size_t m = (size_t)(ts[j]->rows * ts[j]->cols);
            PI0_ASSERT(ts[j]->id >= 1 && ts[j]->id <= max_id && !s->e[ts[j]->id].next);
            s->e[ts[j]->id].next = -1;   // (marks the id taken until the upload below)
            b += copies_bytes(ts[j], fmt[j]);
            if (fmt[j] & CUDA_W_8BIT) {
                s->bytes_i8 += up256(m) + up256((size_t)ts[j]->rows * 4);
                if (ts[j]->cols > s->q8_k) s->q8_k = ts[j]->cols;
                if (ts[j]->rows > s->q8_n) s->q8_n = ts[j]->rows;
            } else s->bytes_bf16 += up256(m * 2);
            if (fmt[j] & CUDA_W_F32) s->bytes_f32 += up256(m * 4);
        }
        if (!ns || slab[ns - 1] + b > slab_max) ns++;
        slab[ns - 1] += b;
        in_slab[i] = ns - 1;
    }
    s->nslab = ns;
    for (int i = 0; i < n && st == PI0_OK; i++) s->e[ts[i]->id].next = 0;
    char *at = NULL;
    for (int i = 0, u; i < n && st == PI0_OK; i += u) {
        u = unit_len(group, i, n);
        int k = in_slab[i];
        if (!s->slab[k]) {
            cudaError_t e = cudaMalloc((void **)&s->slab[k], slab[k]);
            if (e != cudaSuccess) {
                size_t fr = 0, tot = 0, placed = 0;
                s->slab[k] = NULL;
                cudaGetLastError();
                cudaMemGetInfo(&fr, &tot);
                for (int j = 0; j < k; j++) placed += slab[j];
                st = pi0_fail(e == cudaErrorMemoryAllocation ? PI0_ERR_NOMEM : PI0_ERR_CUDA,
                              "weights need %.2f GB on CUDA device %d, which had %.2f GB free of %.2f GB with %.2f "
                              "GB of them placed: %s", (s->bytes_bf16 + s->bytes_f32 + s->bytes_i8) / 1e9, device,
                              fr / 1e9, tot / 1e9, placed / 1e9, cudaGetErrorString(e));
                break;
            }
            at = s->slab[k];
        }
        st = upload_unit(s, ts + i, fmt + i, u, at, stage);
        for (int j = i; j < i + u; j++) at += copies_bytes(ts[j], fmt[j]);
        for (int j = i; j < i + u && st == PI0_OK && done; j++) done(user, ts[j]);
    }
    free(stage);
    free(slab);
    free(in_slab);
    if (st != PI0_OK) { cuda_weights_free(s); return st; }
    *out = s;
    return PI0_OK;
}

extern "C" pi0_status cuda_upload_list(void **out, const pi0_wt *const *ts, const int *fmt, const int *group, int n,
                                       int max_id, int device) {
    return upload_list(out, ts, fmt, group, n, max_id, device, NULL, NULL);
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
        int fmt = (f32 ? CUDA_W_F32 : 0) |
                  (quant_wants(p->q, w, p->cfg, grp[i]) ? p->q->precision == PI0_PRECISION_FP8 ? CUDA_W_F8 : CUDA_W_I8 : 0);
        if (!plan_add(p->l, grp[i], fmt, i ? 0 : n)) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    }
    return PI0_OK;
}

extern "C" pi0_status cuda_weights_upload(void **out, const pi0_weights *w, const pi0_config *cfg, const pi0_quant *q,
                                          int device, void (*done)(void *user, const pi0_wt *t), void *user) {
    wt_plan l = {};
    plan_ctx p = {&l, w, cfg, q};
    *out = NULL;
    if (q && q->precision == PI0_PRECISION_FP8) {   // FP8 tensor cores: Ada (sm_89) and later
        cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, device) != cudaSuccess)
            return pi0_fail(PI0_ERR_CUDA, "CUDA device %d: its properties: %s", device, cudaGetErrorString(cudaGetLastError()));
        if (prop.major * 10 + prop.minor < 89)
            return pi0_fail(PI0_ERR_UNSUPPORTED, "precision fp8: CUDA device %d (%s, sm_%d%d) has no FP8 tensor cores (sm_89 "
                            "and later have them); use int8", device, prop.name, prop.major, prop.minor);
    }
    pi0_status st = weights_foreach((pi0_weights *)w, cfg, plan_one, &p);
    if (st == PI0_OK) st = upload_list(out, l.t, l.fmt, l.group, l.n, w->n_ids, device, done, user);
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
    wview v = {e->bf, e->f32, e->q8, e->s8, W->rows, W->cols, W->dtype, e->next, e->fp8};
    return v;
}
