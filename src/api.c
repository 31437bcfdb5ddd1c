/* api.c — the public API of include/pi0.h: model and session lifecycle, input validation, pi0_infer,
 * tensor files for tools, checkpoint generation. The math lives in model.c, files in safetensors.c,
 * the tensor table in weights.c. Everything a caller, a file or a peer can get wrong is reported
 * through pi0_status + pi0_last_error(), never by aborting. */
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "backend.h"
#include "config.h"
#include "model.h"
#include "lerobot.h"
#include "openpi_config.h"
#include "orbax.h"
#include "safetensors.h"
#include "util.h"
#include "weights.h"

struct pi0_model {
    char *dir;
    char *root;            /* the checkpoint directory that holds assets/ */
    const char *format;    /* "safetensors", "lerobot", "orbax-ocdbt", "orbax-zarr" */
    pi0_config cfg;
    st_file *file;
    pi0_weights w;
    const pi0_backend_provider *prov;   /* the backend sessions of this model run on (backends.c) */
    int n_threads, device;
    double load_s;         /* Orbax: reading and re-laying out the parameters */
    void *arena;           /* the weights in the backend's memory (one device allocation on CUDA), or NULL */
};

struct pi0_session {
    const pi0_model *m;
    pi0_backend *be;
    model_sess *ms;
    int max_batch;
    pi0_dump_fn dump;
    void *dump_user;
    model_timing timing;
};

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

void pi0_model_free(pi0_model *m) {
    if (!m) return;
    if (m->arena) m->prov->weights_free(m->arena);
    weights_free(&m->w);
    st_close(m->file);
    free(m->dir);
    free(m->root);
    free(m);
}

static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static pi0_status find_provider(pi0_backend_kind backend, const pi0_backend_provider **out) {
    if (backend != PI0_BACKEND_DEFAULT && backend != PI0_BACKEND_CPU && backend != PI0_BACKEND_CUDA)
        return pi0_fail(PI0_ERR_ARG, "backend %d: expected PI0_BACKEND_CPU or PI0_BACKEND_CUDA", (int)backend);
    if (!(*out = backend_provider(backend)))
        return pi0_fail(PI0_ERR_UNSUPPORTED, "the CUDA backend is not in this build (make found no nvcc)");
    return PI0_OK;
}

pi0_status pi0_backend_check(pi0_backend_kind backend, int device) {
    const pi0_backend_provider *prov;
    pi0_status st = find_provider(backend, &prov);
    return st != PI0_OK ? st : prov->check ? prov->check(device) : PI0_OK;
}

/* openpi's PyTorch conversion, or LeRobot's policy directory: DIR/config.json + DIR/model.safetensors. */
static pi0_status load_safetensors(pi0_model *m, const char *dir) {
    char *cfg_path = join(dir, "config.json"), *st_path = join(dir, "model.safetensors"), *text = NULL;
    pi0_status st = PI0_ERR_NOMEM;
    size_t len = 0;
    if (!cfg_path || !st_path || !(m->root = strdup(dir))) { pi0_fail(st, "out of memory"); goto done; }
    if (!(text = pi0_read_file(cfg_path, &len, 1 << 20))) { st = PI0_ERR_IO; goto done; }
    int lerobot = lerobot_is_config(text, len);
    m->format = lerobot ? "lerobot" : "safetensors";
    if ((st = lerobot ? lerobot_config(&m->cfg, cfg_path, text, len) : config_parse(&m->cfg, cfg_path, text, len)) != PI0_OK)
        goto done;
    if ((st = st_open(&m->file, st_path)) != PI0_OK) goto done;
    if (lerobot && (st = lerobot_fix_keys(m->file, m->cfg.pi05)) != PI0_OK) goto done;
    int has_marker = st_find(m->file, PI0_PI05_MARKER) != NULL;
    if (m->cfg.pi05 < 0) m->cfg.pi05 = has_marker;
    else if (m->cfg.pi05 != has_marker)
        st = pi0_fail(PI0_ERR_FORMAT, "%s: %s, but %s %s the adaRMS tensor '%s'", cfg_path,
                      lerobot ? (m->cfg.pi05 ? "\"type\": \"pi05\"" : "\"type\": \"pi0\"") : m->cfg.pi05 ? "\"pi05\": true" : "\"pi05\": false",
                      st_path, has_marker ? "has" : "lacks", PI0_PI05_MARKER);
done:
    free(text);
    free(cfg_path);
    free(st_path);
    return st;
}

/* openpi's Orbax checkpoint: DIR/params (or DIR = params/, or a training run's newest DIR/<step>/params). */
static pi0_status load_orbax(pi0_model *m, const char *params, int quiet) {
    orbax_info oi;
    pi0_status st = orbax_load(&m->file, &m->cfg, &oi, params, quiet);
    if (st != PI0_OK) return st;
    m->format = oi.ocdbt ? "orbax-ocdbt" : "orbax-zarr";
    m->load_s = oi.decode_s;
    const char *slash = strrchr(params, '/');   /* assets/ sits beside params/ */
    size_t n = slash ? (size_t)(slash - params) : 1;
    if (!(m->root = malloc(n + 1))) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    memcpy(m->root, slash ? params : ".", n);
    m->root[n] = 0;
    return PI0_OK;
}

pi0_status pi0_model_load(pi0_model **out, const char *dir, const pi0_model_params *p) {
    if (!out || !dir) return pi0_fail(PI0_ERR_ARG, "pi0_model_load: NULL argument");
    *out = NULL;
    pi0_model_params def = {0};
    if (!p) p = &def;
    const pi0_backend_provider *prov;
    pi0_status st = find_provider(p->backend, &prov);
    if (st != PI0_OK) return st;
    if (p->action_horizon < 0 || p->max_token_len < 0)
        return pi0_fail(PI0_ERR_ARG, "action_horizon %d / max_token_len %d: expected >= 0", p->action_horizon, p->max_token_len);
    pi0_model *m = calloc(1, sizeof *m);
    char *st_path = join(dir, "model.safetensors"), params[4200];
    st = PI0_ERR_NOMEM;
    if (!m || !st_path || !(m->dir = strdup(dir))) { pi0_fail(st, "out of memory"); goto fail; }
    m->prov = prov;
    m->n_threads = p->n_threads;
    m->device = p->device;
    if (exists(st_path)) st = load_safetensors(m, dir);
    else if (orbax_find_params(dir, params, sizeof params)) st = load_orbax(m, params, p->quiet);
    else st = pi0_fail(PI0_ERR_IO, "%s: no checkpoint found: expected model.safetensors + config.json (openpi's PyTorch "
                       "conversion) or an Orbax checkpoint (params/_METADATA, as openpi publishes and trains)", dir);
    if (st != PI0_OK) goto fail;
    if (p->action_horizon) m->cfg.action_horizon = p->action_horizon;
    if (p->max_token_len) m->cfg.max_token_len = p->max_token_len;
    if ((st = config_finish(&m->cfg, dir)) != PI0_OK) goto fail;
    if ((st = weights_bind(&m->w, &m->cfg, m->file, p->quiet)) != PI0_OK) goto fail;
    if (prov->weights_upload && (st = prov->weights_upload(&m->arena, &m->w, &m->cfg, m->device)) != PI0_OK) {
        pi0_error_prefix("%s", dir);
        goto fail;
    }
    free(st_path);
    *out = m;
    return PI0_OK;
fail:
    free(st_path);
    pi0_model_free(m);
    return st;
}

void pi0_model_get_info(const pi0_model *m, pi0_model_info *info) {
    const pi0_config *c = &m->cfg;
    *info = (pi0_model_info){.pi05 = c->pi05, .action_dim = c->action_dim, .action_horizon = c->action_horizon,
                             .max_token_len = c->max_token_len, .n_cameras = c->n_cameras,
                             .image_size = c->vis.image_size, .vocab_size = c->lm.vocab_size,
                             .n_params = m->w.n_params, .format = m->format, .root = m->root, .load_s = m->load_s,
                             .vision = {c->vis.width, c->vis.depth, c->vis.mlp_dim, c->vis.num_heads, c->vis.patch_size},
                             .paligemma = {c->lm.width, c->lm.depth, c->lm.mlp_dim, c->lm.num_heads, c->lm.num_kv_heads,
                                           c->lm.head_dim},
                             .action_expert = {c->ex.width, c->ex.depth, c->ex.mlp_dim, c->ex.num_heads,
                                               c->ex.num_kv_heads, c->ex.head_dim}};
}

/* pi0_host_alloc: a 64-byte header records which allocator made the block (the provider whose host_alloc did, or
 * NULL for aligned_alloc); the pointer after it stays 64-byte aligned, as cudaMallocHost's and glibc's large blocks
 * are. */
enum { HOST_HDR = 64 };

static void *host_alloc(const pi0_backend_provider *prov, size_t bytes) {
    if (bytes > SIZE_MAX - 2 * HOST_HDR) return NULL;
    char *b = prov && prov->host_alloc ? prov->host_alloc(bytes + HOST_HDR) : NULL;
    if (!b) prov = NULL;
    if (!b && !(b = aligned_alloc(HOST_HDR, (bytes + 2 * HOST_HDR - 1) / HOST_HDR * HOST_HDR))) return NULL;
    memcpy(b, &prov, sizeof prov);
    return b + HOST_HDR;
}

void *pi0_host_alloc(size_t bytes) { return host_alloc(backend_pinned_provider(), bytes); }

void *pi0_session_host_alloc(const pi0_session *s, size_t bytes) { return host_alloc(s ? s->m->prov : NULL, bytes); }

void pi0_host_free(void *p) {
    if (!p) return;
    char *b = (char *)p - HOST_HDR;
    const pi0_backend_provider *prov;
    memcpy(&prov, b, sizeof prov);
    if (prov) prov->host_free(b);
    else free(b);
}

void pi0_session_free(pi0_session *s) {
    if (!s) return;
    model_sess_free(s->ms);
    if (s->be) s->be->destroy(s->be);
    free(s);
}

pi0_status pi0_session_create(pi0_session **out, const pi0_model *m, const pi0_session_params *p) {
    if (!out || !m) return pi0_fail(PI0_ERR_ARG, "pi0_session_create: NULL argument");
    *out = NULL;
    pi0_session_params def = {0};
    if (!p) p = &def;
    int max_b = p->max_batch ? p->max_batch : 1, steps = p->num_steps ? p->num_steps : 10;
    if (max_b < 1 || max_b > 4096) return pi0_fail(PI0_ERR_ARG, "max_batch %d: expected 1..4096", p->max_batch);
    if (steps < 1 || steps > 1000) return pi0_fail(PI0_ERR_ARG, "num_steps %d: expected 1..1000", p->num_steps);
    pi0_session *s = calloc(1, sizeof *s);
    if (!s) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    s->m = m;
    s->max_batch = max_b;
    s->dump = p->dump;
    s->dump_user = p->dump_user;
    /* One backend instance per session (its scratch, stream and graphs are not shared between
     * threads); the weights are the model's (mapping on the CPU, device arena on CUDA). */
    pi0_status st = m->prov->create(&s->be, m->device, m->n_threads);
    if (st == PI0_OK) st = model_sess_create(&s->ms, s->be, &m->cfg, (pi0_weights *)&m->w, max_b, steps);
    if (st != PI0_OK) { pi0_session_free(s); return st; }
    *out = s;
    return PI0_OK;
}

void pi0_session_get_timing(const pi0_session *s, pi0_timing *t) {
    *t = (pi0_timing){s->timing.vision_ms, s->timing.prefill_ms, s->timing.denoise_ms, s->timing.total_ms};
}

const char *pi0_session_backend(const pi0_session *s) { return s->be->name; }

pi0_status pi0_session_memory(const pi0_session *s, size_t *used, size_t *total) {
    if (!s || !used || !total) return pi0_fail(PI0_ERR_ARG, "pi0_session_memory: NULL argument");
    if (!s->be->memory) return pi0_fail(PI0_ERR_UNSUPPORTED, "the %s backend has no device memory", s->be->name);
    return s->be->memory(s->be, used, total);
}
const char *pi0_session_device(const pi0_session *s) { return s->be->device; }
const char *pi0_session_driver(const pi0_session *s) { return s->be->driver; }

void pi0_session_set_stage_timing(pi0_session *s, int on) {
    if (s) model_set_stage_timing(s->ms, on);
}

/* First non-finite (or out of [lo, hi]) element, or -1. */
/* 1 if every x[i] is finite and in [lo, hi]: no branch per element, so the compiler vectorises it */
static int floats_ok(const float *x, size_t n, float lo, float hi) {
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= (x[i] >= lo) & (x[i] <= hi) & (fabsf(x[i]) <= FLT_MAX);   /* NaN: 0 */
    return ok;
}

/* The first index of a value that is not finite or outside [lo, hi], or -1. Blocks of BAD_BLOCK values are
 * tested by floats_ok (in parallel from 4M values) and only the first failing block element by element. The
 * scalar loop with an early exit took ~0.8 ms for one π0 inference's images (3 x 224 x 224 x 3) and ~50 ms for a
 * batch of 64, in every pi0_infer (bench/RESULTS.md L100, L101). */
enum { BAD_BLOCK = 4096 };
static long long bad_float(const float *x, size_t n, float lo, float hi) {
    long long nb = (long long)((n + BAD_BLOCK - 1) / BAD_BLOCK), first = LLONG_MAX;
    #pragma omp parallel for if (n >= ((size_t)1 << 22)) schedule(static) reduction(min:first)
    for (long long b = 0; b < nb; b++) {
        size_t i0 = (size_t)b * BAD_BLOCK, m = n - i0 < BAD_BLOCK ? n - i0 : BAD_BLOCK;
        if (b < first && !floats_ok(x + i0, m, lo, hi)) first = b;
    }
    if (first == LLONG_MAX) return -1;
    for (size_t i = (size_t)first * BAD_BLOCK; i < n; i++)
        if (!floats_ok(x + i, 1, lo, hi)) return (long long)i;
    return -1;   /* not reached: the block holds one */
}

static pi0_status check_rtc(const pi0_session *s, const pi0_inputs *in);

static pi0_status check_inputs(const pi0_session *s, const pi0_inputs *in) {
    const pi0_config *c = &s->m->cfg;
    if (!in) return pi0_fail(PI0_ERR_ARG, "inputs: NULL");
    if (in->batch < 1 || in->batch > s->max_batch)
        return pi0_fail(PI0_ERR_ARG, "inputs: batch %d, expected 1..%d (the session's max_batch)", in->batch, s->max_batch);
    if (in->n_tokens < 1 || in->n_tokens > c->max_token_len)
        return pi0_fail(PI0_ERR_ARG, "inputs: n_tokens %d, expected 1..%d (max_token_len)", in->n_tokens, c->max_token_len);
    if (!in->images || !in->tokens || !in->token_mask || (!c->pi05 && !in->state))
        return pi0_fail(PI0_ERR_ARG, "inputs: images, tokens, token_mask%s are required", c->pi05 ? "" : " and state");
    int B = in->batch, A = c->action_dim, H = c->action_horizon;
    long long i;
    if (!c->pi05 && (i = bad_float(in->state, (size_t)B * A, -INFINITY, INFINITY)) >= 0)
        return pi0_fail(PI0_ERR_ARG, "inputs: state[%lld] is not finite", i);
    if (in->noise && (i = bad_float(in->noise, (size_t)B * H * A, -INFINITY, INFINITY)) >= 0)
        return pi0_fail(PI0_ERR_ARG, "inputs: noise[%lld] is not finite", i);
    for (int k = 0; k < B * in->n_tokens; k++)
        if (in->token_mask[k] && (in->tokens[k] < 0 || in->tokens[k] >= c->lm.vocab_size))
            return pi0_fail(PI0_ERR_ARG, "inputs: tokens[%d][%d] = %d, expected 0..%d (vocab_size - 1)",
                            k / in->n_tokens, k % in->n_tokens, in->tokens[k], c->lm.vocab_size - 1);
    return PI0_OK;
}

/* The pixel values: scanned while a graph replay runs (backends never index with them). */
static pi0_status check_images(const pi0_inputs *in, const pi0_config *c) {
    size_t n = (size_t)in->batch * c->n_cameras * c->vis.image_size * c->vis.image_size * 3;
    long long i;
    /* 1e-5 slack: [-1, 1] images made in float64 and rounded may land a hair outside */
    if ((i = bad_float(in->images, n, -1.00001f, 1.00001f)) >= 0)
        return pi0_fail(PI0_ERR_ARG, "inputs: images[%lld] = %g, expected a finite value in [-1, 1] (preprocessed "
                        "pixels; uint8 images must be mapped with x/255*2-1)", i, (double)in->images[i]);
    return PI0_OK;
}

pi0_status pi0_infer(pi0_session *s, const pi0_inputs *in, float *actions) {
    if (!s || !actions) return pi0_fail(PI0_ERR_ARG, "pi0_infer: NULL argument");
    pi0_status st = check_inputs(s, in);
    if (st == PI0_OK) st = check_rtc(s, in);
    if (st != PI0_OK) return st;
    /* the pixels are checked while a queued run computes (the 64-sample images: ~4 ms), else before it */
    int queued = model_queues(s->ms, s->dump);
    if (!queued && (st = check_images(in, &s->m->cfg)) != PI0_OK) return st;
    if ((st = model_start(s->ms, in, s->dump, s->dump_user)) != PI0_OK) return st;
    if (queued && (st = check_images(in, &s->m->cfg)) != PI0_OK) {
        model_abort(s->ms);   /* the backend no longer reads the inputs when the error is returned */
        return st;
    }
    if ((st = model_finish(s->ms, actions, &s->timing)) != PI0_OK) return st;
    const pi0_config *c = &s->m->cfg;
    long long i = bad_float(actions, (size_t)in->batch * c->action_horizon * c->action_dim, -INFINITY, INFINITY);
    if (i >= 0)
        return pi0_fail(PI0_ERR_FORMAT, "inference produced a non-finite action at index %lld (weights of %s overflow?)",
                        i, s->m->dir);
    return PI0_OK;
}

/* ---- real-time chunking ---- */

pi0_status pi0_rtc_prefix_weights(pi0_rtc_schedule schedule, int delay, int horizon, int leftover, int H, float *w) {
    if (!w || H < 1 || delay < 0 || horizon < 0 || leftover < 0 || schedule < PI0_RTC_ZEROS || schedule > PI0_RTC_EXP)
        return pi0_fail(PI0_ERR_ARG, "pi0_rtc_prefix_weights: schedule %d, delay %d, horizon %d, leftover %d, H %d: "
                        "expected a schedule, counts >= 0 and H >= 1", (int)schedule, delay, horizon, leftover, H);
    int end = horizon < leftover ? horizon : leftover;   /* LeRobot clamps the horizon to the leftover's rows */
    int start = delay < end ? delay : end;
    for (int i = 0; i < H; i++) {
        double v;
        if (schedule == PI0_RTC_ZEROS) v = i < start;
        else if (schedule == PI0_RTC_ONES) v = i < end;
        else if (i < start) v = 1;
        else if (i >= end) v = 0;
        else {   /* linspace(1, 0, n + 2)[1:-1] over the n = end - start rows between */
            int n = end - start;
            v = 1.0 - (double)(i - start + 1) / (n + 1);
            if (schedule == PI0_RTC_EXP) v = v * expm1(v) / (M_E - 1);
        }
        w[i] = (float)v;
    }
    return PI0_OK;
}

static pi0_status check_rtc(const pi0_session *s, const pi0_inputs *in) {
    if (in->rtc == PI0_RTC_OFF) {
        if (in->rtc_prev || in->rtc_weights || in->rtc_exact)
            return pi0_fail(PI0_ERR_ARG, "inputs: rtc_prev / rtc_weights / rtc_exact given with rtc off (say which guidance to use)");
        return PI0_OK;
    }
    if (in->rtc != PI0_RTC_LEROBOT && in->rtc != PI0_RTC_EXACT)
        return pi0_fail(PI0_ERR_ARG, "inputs: rtc mode %d: expected PI0_RTC_OFF, PI0_RTC_LEROBOT or PI0_RTC_EXACT", (int)in->rtc);
    if (in->rtc_exact && in->rtc != PI0_RTC_EXACT)
        return pi0_fail(PI0_ERR_ARG, "inputs: rtc_exact given with rtc mode %d (it selects samples of a PI0_RTC_EXACT batch)", (int)in->rtc);
    if (!in->rtc_prev || !in->rtc_weights || !in->rtc_max_weights)
        return pi0_fail(PI0_ERR_ARG, "inputs: real-time chunking needs rtc_prev, rtc_weights and rtc_max_weights");
    for (int b = 0; b < in->batch; b++)
        if (!(in->rtc_max_weights[b] > 0) || !isfinite(in->rtc_max_weights[b]))
            return pi0_fail(PI0_ERR_ARG, "inputs: rtc_max_weights[%d] = %g: expected a finite value > 0", b,
                            (double)in->rtc_max_weights[b]);
    const pi0_config *c = &s->m->cfg;
    size_t np = (size_t)in->batch * c->action_horizon * c->action_dim, nw = (size_t)in->batch * c->action_horizon;
    long long i;
    if ((i = bad_float(in->rtc_prev, np, -INFINITY, INFINITY)) >= 0)
        return pi0_fail(PI0_ERR_ARG, "inputs: rtc_prev[%lld] is not finite", i);
    if ((i = bad_float(in->rtc_weights, nw, 0.0f, 1.0f)) >= 0)
        return pi0_fail(PI0_ERR_ARG, "inputs: rtc_weights[%lld] = %g, expected a value in [0, 1]", i, (double)in->rtc_weights[i]);
    return PI0_OK;
}

/* ---- tensor files ---- */

typedef struct {
    char *name;
    pi0_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    void *data;
    size_t bytes;
} mem_tensor;

struct pi0_tensors {
    st_file *file;     /* opened file, or NULL for an in-memory set */
    mem_tensor *mem;
    int n_mem, cap;
};

pi0_status pi0_tensors_open(pi0_tensors **out, const char *path) {
    if (!out || !path) return pi0_fail(PI0_ERR_ARG, "pi0_tensors_open: NULL argument");
    *out = NULL;
    pi0_tensors *t = calloc(1, sizeof *t);
    if (!t) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    pi0_status st = st_open(&t->file, path);
    if (st != PI0_OK) { free(t); return st; }
    *out = t;
    return PI0_OK;
}

pi0_status pi0_tensors_new(pi0_tensors **out) {
    if (!out) return pi0_fail(PI0_ERR_ARG, "pi0_tensors_new: NULL argument");
    *out = calloc(1, sizeof **out);
    return *out ? PI0_OK : pi0_fail(PI0_ERR_NOMEM, "out of memory");
}

void pi0_tensors_free(pi0_tensors *t) {
    if (!t) return;
    st_close(t->file);
    for (int i = 0; i < t->n_mem; i++) { free(t->mem[i].name); free(t->mem[i].data); }
    free(t->mem);
    free(t);
}

pi0_status pi0_tensors_get(const pi0_tensors *t, const char *name, pi0_dtype *dtype, int *ndim, int64_t *shape,
                           const void **data) {
    if (!t || !name) return pi0_fail(PI0_ERR_ARG, "pi0_tensors_get: NULL argument");
    if (t->file) {
        const st_tensor *x = st_find(t->file, name);
        if (!x) return pi0_fail(PI0_ERR_ARG, "%s: no tensor '%s'", t->file->path, name);
        if (dtype) *dtype = x->dtype;
        if (ndim) *ndim = x->ndim;
        if (shape) memcpy(shape, x->shape, sizeof x->shape);
        if (data) *data = x->data;
        return PI0_OK;
    }
    for (int i = 0; i < t->n_mem; i++)
        if (!strcmp(t->mem[i].name, name)) {
            if (dtype) *dtype = t->mem[i].dtype;
            if (ndim) *ndim = t->mem[i].ndim;
            if (shape) memcpy(shape, t->mem[i].shape, sizeof t->mem[i].shape);
            if (data) *data = t->mem[i].data;
            return PI0_OK;
        }
    return pi0_fail(PI0_ERR_ARG, "no tensor '%s'", name);
}

int pi0_tensors_count(const pi0_tensors *t) {
    return !t ? 0 : t->file ? t->file->n_tensors : t->n_mem;
}

const char *pi0_tensors_name(const pi0_tensors *t, int i) {
    if (i < 0 || i >= pi0_tensors_count(t)) return NULL;
    return t->file ? t->file->tensors[i].name : t->mem[i].name;
}

pi0_status pi0_tensors_add(pi0_tensors *t, const char *name, pi0_dtype dtype, int ndim, const int64_t *shape,
                           const void *data) {
    if (!t || !name || (ndim && !shape) || !data) return pi0_fail(PI0_ERR_ARG, "pi0_tensors_add: NULL argument");
    if (t->file) return pi0_fail(PI0_ERR_ARG, "pi0_tensors_add: set was opened from a file (read-only)");
    if ((unsigned)dtype >= PI0_DT_COUNT || ndim < 0 || ndim > ST_MAX_DIMS)
        return pi0_fail(PI0_ERR_ARG, "pi0_tensors_add: '%s': bad dtype or ndim %d", name, ndim);
    size_t n = pi0_dtype_size(dtype);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return pi0_fail(PI0_ERR_ARG, "pi0_tensors_add: '%s': negative dimension", name);
        n *= (size_t)shape[i];
    }
    if (t->n_mem == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        mem_tensor *m = realloc(t->mem, (size_t)cap * sizeof *m);
        if (!m) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
        t->mem = m;
        t->cap = cap;
    }
    mem_tensor *m = &t->mem[t->n_mem];
    memset(m, 0, sizeof *m);
    m->name = strdup(name);
    m->data = malloc(n ? n : 1);
    if (!m->name || !m->data) { free(m->name); free(m->data); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    memcpy(m->data, data, n);
    m->dtype = dtype;
    m->ndim = ndim;
    if (ndim) memcpy(m->shape, shape, (size_t)ndim * sizeof *shape);
    m->bytes = n;
    t->n_mem++;
    return PI0_OK;
}

pi0_status pi0_tensors_save(const pi0_tensors *t, const char *path) {
    if (!t || !path) return pi0_fail(PI0_ERR_ARG, "pi0_tensors_save: NULL argument");
    st_entry *e = calloc((size_t)t->n_mem + 1, sizeof *e);
    if (!e) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    for (int i = 0; i < t->n_mem; i++) {
        e[i].name = t->mem[i].name;
        e[i].dtype = t->mem[i].dtype;
        e[i].ndim = t->mem[i].ndim;
        memcpy(e[i].shape, t->mem[i].shape, sizeof e[i].shape);
    }
    st_writer w;
    pi0_status st = st_writer_open(&w, path, e, t->n_mem, NULL, 0);
    free(e);
    for (int i = 0; i < t->n_mem && st == PI0_OK; i++) st = st_writer_write(&w, t->mem[i].data, t->mem[i].bytes);
    if (st == PI0_OK) return st_writer_close(&w);
    st_writer_abort(&w);
    return st;
}

/* ---- model inputs from a tensor file (docs/formats.md 2) ---- */

struct pi0_inputs_buf {
    uint8_t *masks, *token_mask;
    int32_t *tokens;
};

void pi0_inputs_buf_free(pi0_inputs_buf *b) {
    if (!b) return;
    free(b->masks); free(b->token_mask); free(b->tokens);
    free(b);
}

/* Looks up name and checks dtype (one of two) and shape; -1 in want means "any, returned in got". */
static pi0_status expect(const pi0_tensors *t, const char *what, const char *name, pi0_dtype d1, pi0_dtype d2,
                         int ndim, const int64_t *want, int64_t *got, pi0_dtype *dt, const void **data) {
    int nd;
    int64_t shape[ST_MAX_DIMS];
    if (pi0_tensors_get(t, name, dt, &nd, shape, data) != PI0_OK)
        return pi0_fail(PI0_ERR_SHAPE, "%s: missing tensor '%s'", what, name);
    int ok = (*dt == d1 || *dt == d2) && nd == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = want[i] < 0 || shape[i] == want[i];
    if (!ok) {
        char w[128], g[128];
        int64_t ws[ST_MAX_DIMS];
        for (int i = 0; i < ndim; i++) ws[i] = want[i] < 0 ? shape[i] : want[i];
        st_describe(w, sizeof w, ndim, ws, d1);
        return pi0_fail(PI0_ERR_SHAPE, "%s: tensor '%s': expected %s%s%s, found %s", what, name, w,
                        d1 != d2 ? " or " : "", d1 != d2 ? pi0_dtype_name(d2) : "", st_describe(g, sizeof g, nd, shape, *dt));
    }
    if (got) memcpy(got, shape, (size_t)ndim * sizeof *shape);
    return PI0_OK;
}

static pi0_status bool_array(const char *what, const char *name, const uint8_t *src, size_t n, uint8_t **dst) {
    for (size_t i = 0; i < n; i++)
        if (src[i] > 1) return pi0_fail(PI0_ERR_FORMAT, "%s: '%s'[%zu] = %d, expected 0 or 1", what, name, i, src[i]);
    *dst = malloc(n ? n : 1);
    if (!*dst) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    memcpy(*dst, src, n);
    return PI0_OK;
}

pi0_status pi0_inputs_from_tensors(const pi0_model *m, const pi0_tensors *t, const char *what, pi0_inputs *in,
                                   pi0_inputs_buf **bufp) {
    if (!m || !t || !in || !bufp) return pi0_fail(PI0_ERR_ARG, "pi0_inputs_from_tensors: NULL argument");
    *bufp = NULL;
    if (!what) what = "inputs";
    const pi0_config *c = &m->cfg;
    pi0_inputs_buf *b = calloc(1, sizeof *b);
    if (!b) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    memset(in, 0, sizeof *in);
    pi0_dtype dt;
    const void *data;
    int64_t got[5];
    pi0_status st;
    int64_t w_img[5] = {-1, c->n_cameras, c->vis.image_size, c->vis.image_size, 3};
    if ((st = expect(t, what, "images", PI0_DT_F32, PI0_DT_F32, 5, w_img, got, &dt, &data)) != PI0_OK) goto fail;
    int64_t B = got[0];
    if (B < 1 || B > 4096) { st = pi0_fail(PI0_ERR_SHAPE, "%s: batch %lld, expected 1..4096", what, (long long)B); goto fail; }
    in->batch = (int)B;
    in->images = data;
    int64_t w_mask[2] = {B, c->n_cameras};
    if ((st = expect(t, what, "image_masks", PI0_DT_BOOL, PI0_DT_U8, 2, w_mask, NULL, &dt, &data)) != PI0_OK) goto fail;
    if ((st = bool_array(what, "image_masks", data, (size_t)(B * c->n_cameras), &b->masks)) != PI0_OK) goto fail;
    in->image_masks = b->masks;
    int64_t w_state[2] = {B, c->action_dim};
    if (!c->pi05 || pi0_tensors_get(t, "state", NULL, NULL, NULL, NULL) == PI0_OK) {
        if ((st = expect(t, what, "state", PI0_DT_F32, PI0_DT_F32, 2, w_state, NULL, &dt, &data)) != PI0_OK) goto fail;
        in->state = data;
    }
    int64_t w_tok[2] = {B, -1};
    if ((st = expect(t, what, "tokens", PI0_DT_I32, PI0_DT_I64, 2, w_tok, got, &dt, &data)) != PI0_OK) goto fail;
    int64_t L = got[1];
    if (L < 1 || L > c->max_token_len) {
        st = pi0_fail(PI0_ERR_SHAPE, "%s: tokens: length %lld, expected 1..%d (max_token_len)", what, (long long)L,
                      c->max_token_len);
        goto fail;
    }
    in->n_tokens = (int)L;
    if (!(b->tokens = malloc((size_t)(B * L) * sizeof(int32_t)))) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto fail; }
    for (int64_t i = 0; i < B * L; i++) {
        int64_t v = dt == PI0_DT_I64 ? ((const int64_t *)data)[i] : ((const int32_t *)data)[i];
        if (v < 0 || v >= c->lm.vocab_size) {
            st = pi0_fail(PI0_ERR_FORMAT, "%s: tokens[%lld][%lld] = %lld, expected 0..%d", what, (long long)(i / L),
                          (long long)(i % L), (long long)v, c->lm.vocab_size - 1);
            goto fail;
        }
        b->tokens[i] = (int32_t)v;
    }
    in->tokens = b->tokens;
    int64_t w_tm[2] = {B, L};
    if ((st = expect(t, what, "token_mask", PI0_DT_BOOL, PI0_DT_U8, 2, w_tm, NULL, &dt, &data)) != PI0_OK) goto fail;
    if ((st = bool_array(what, "token_mask", data, (size_t)(B * L), &b->token_mask)) != PI0_OK) goto fail;
    in->token_mask = b->token_mask;
    if (pi0_tensors_get(t, "noise", NULL, NULL, NULL, NULL) == PI0_OK) {
        int64_t w_noise[3] = {B, c->action_horizon, c->action_dim};
        if ((st = expect(t, what, "noise", PI0_DT_F32, PI0_DT_F32, 3, w_noise, NULL, &dt, &data)) != PI0_OK) goto fail;
        in->noise = data;
    }
    if (pi0_tensors_get(t, "rtc_prev", NULL, NULL, NULL, NULL) == PI0_OK) {   /* used only with pi0_inputs.rtc set */
        int64_t w_prev[3] = {B, c->action_horizon, c->action_dim};
        if ((st = expect(t, what, "rtc_prev", PI0_DT_F32, PI0_DT_F32, 3, w_prev, NULL, &dt, &data)) != PI0_OK) goto fail;
        in->rtc_prev = data;
    }
    pi0_clear_error();
    *bufp = b;
    return PI0_OK;
fail:
    pi0_inputs_buf_free(b);
    memset(in, 0, sizeof *in);
    return st;
}

/* ---- checkpoint generation ---- */

static pi0_status mkdir_p(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return pi0_fail(PI0_ERR_ARG, "path too long");
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return pi0_fail(PI0_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
            if (!c) break;
            *p = c;
        }
    }
    return PI0_OK;
}

static pi0_status write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return pi0_fail(PI0_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    int ok = fputs(text, f) >= 0;
    ok = (fclose(f) == 0) && ok;
    return ok ? PI0_OK : pi0_fail(PI0_ERR_IO, "%s: write failed", path);
}

/* Random but plausible norm stats (docs/model.md 4.2): 8-dim state, 7-dim actions (LIBERO-like). */
static char *norm_stats_json(uint64_t seed) {
    pi0_rng r;
    pi0_rng_seed(&r, seed ^ 0x5eedu);
    size_t cap = 8192, n = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    n += (size_t)snprintf(s + n, cap - n, "{\n  \"norm_stats\": {\n");
    const char *keys[2] = {"state", "actions"};
    int dims[2] = {8, 7};
    for (int k = 0; k < 2; k++) {
        double mean[8], std[8];
        for (int i = 0; i < dims[k]; i++) { mean[i] = pi0_rng_normal(&r) * 0.5; std[i] = 0.1 + pi0_rng_uniform(&r); }
        const char *fields[4] = {"mean", "std", "q01", "q99"};
        n += (size_t)snprintf(s + n, cap - n, "    \"%s\": {", keys[k]);
        for (int f = 0; f < 4; f++) {
            n += (size_t)snprintf(s + n, cap - n, "%s\"%s\": [", f ? ", " : "", fields[f]);
            for (int i = 0; i < dims[k]; i++) {
                double v = f == 0 ? mean[i] : f == 1 ? std[i] : f == 2 ? mean[i] - 2.3 * std[i] : mean[i] + 2.3 * std[i];
                n += (size_t)snprintf(s + n, cap - n, "%s%.6f", i ? ", " : "", v);
            }
            n += (size_t)snprintf(s + n, cap - n, "]");
        }
        n += (size_t)snprintf(s + n, cap - n, "}%s\n", k ? "" : ",");
    }
    snprintf(s + n, cap - n, "  }\n}\n");
    return s;
}

pi0_status pi0_checkpoint_generate(const char *dir, const pi0_gen_params *p) {
    if (!dir || !p || !p->variant) return pi0_fail(PI0_ERR_ARG, "pi0_checkpoint_generate: NULL argument");
    pi0_config c;
    pi0_status st = config_from_variant(&c, p->variant);
    if (st != PI0_OK) return st;
    snprintf(c.precision, sizeof c.precision, "%s", p->f32 ? "float32" : "bfloat16");
    if (p->action_horizon > 0) c.action_horizon = p->action_horizon;
    if (p->max_token_len > 0) c.max_token_len = p->max_token_len;
    if ((st = config_finish(&c, p->variant)) != PI0_OK) return st;
    char *cfg_json = config_to_json(&c), *stats = norm_stats_json(p->seed);
    char *cfg_path = join(dir, "config.json"), *st_path = join(dir, "model.safetensors");
    char *assets = join(dir, "assets/random"), *stats_path = join(dir, "assets/random/norm_stats.json");
    if (!cfg_json || !stats || !cfg_path || !st_path || !assets || !stats_path) st = pi0_fail(PI0_ERR_NOMEM, "out of memory");
    if (st == PI0_OK && !p->force && (exists(st_path) || exists(cfg_path)))
        st = pi0_fail(PI0_ERR_IO, "%s: a checkpoint is already there (pass force / --force to overwrite it)", dir);
    if (st == PI0_OK) st = mkdir_p(assets);
    struct statvfs fs;
    uint64_t need = weights_file_bytes(&c, p->f32 ? PI0_DT_F32 : PI0_DT_BF16) + (1u << 20);
    if (st == PI0_OK && statvfs(dir, &fs) == 0 && (uint64_t)fs.f_bavail * fs.f_frsize < need)
        st = pi0_fail(PI0_ERR_IO, "%s: the checkpoint needs %.2f GB, the file system has %.2f GB free", dir, need / 1e9,
                      (double)fs.f_bavail * fs.f_frsize / 1e9);
    if (st == PI0_OK) st = write_text(cfg_path, cfg_json);
    if (st == PI0_OK) st = write_text(stats_path, stats);
    if (st == PI0_OK) st = weights_generate(&c, st_path, p->seed, p->f32 ? PI0_DT_F32 : PI0_DT_BF16);
    free(cfg_json); free(stats); free(cfg_path); free(st_path); free(assets); free(stats_path);
    return st;
}

/* Copies the regular files under src into dst (created), at most 4 levels deep: the assets folder. */
static pi0_status copy_tree(const char *src, const char *dst, int depth) {
    DIR *d = opendir(src);
    if (!d) return errno == ENOENT ? PI0_OK : pi0_fail(PI0_ERR_IO, "%s: %s", src, strerror(errno));
    pi0_status st = mkdir_p(dst);
    for (struct dirent *de; st == PI0_OK && (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        char *s = join(src, de->d_name), *t = join(dst, de->d_name);
        struct stat sb;
        if (!s || !t) st = pi0_fail(PI0_ERR_NOMEM, "out of memory");
        else if (stat(s, &sb) != 0) st = pi0_fail(PI0_ERR_IO, "%s: %s", s, strerror(errno));
        else if (S_ISDIR(sb.st_mode) && depth < 4) st = copy_tree(s, t, depth + 1);
        else if (S_ISREG(sb.st_mode)) {
            size_t len;
            char *text = pi0_read_file(s, &len, 256u << 20);
            FILE *f = text ? fopen(t, "wb") : NULL;
            if (!text) st = PI0_ERR_IO;
            else if (!f || fwrite(text, 1, len, f) != len) st = pi0_fail(PI0_ERR_IO, "%s: cannot write: %s", t, strerror(errno));
            if (f && fclose(f) != 0 && st == PI0_OK) st = pi0_fail(PI0_ERR_IO, "%s: cannot write: %s", t, strerror(errno));
            free(text);
        }
        free(s);
        free(t);
    }
    closedir(d);
    return st;
}

pi0_status pi0_checkpoint_convert(const char *src, const char *out, const pi0_convert_params *p) {
    if (!src || !out) return pi0_fail(PI0_ERR_ARG, "pi0_checkpoint_convert: NULL argument");
    pi0_convert_params def = {0};
    if (!p) p = &def;
    if (p->dtype != PI0_CONVERT_KEEP && p->dtype != PI0_CONVERT_BF16 && p->dtype != PI0_CONVERT_F32)
        return pi0_fail(PI0_ERR_ARG, "convert: dtype %d: expected PI0_CONVERT_KEEP, _BF16 or _F32", (int)p->dtype);
    char *st_path = join(out, "model.safetensors"), *cfg_path = join(out, "config.json"), *assets = join(out, "assets");
    pi0_model *m = NULL;
    st_entry *e = NULL;
    const st_tensor **used = NULL;
    char (*names)[256] = NULL;
    char *cfg_json = NULL, *src_assets = NULL;
    float *f32 = NULL;
    uint16_t *h = NULL;
    pi0_status st = PI0_OK;
    if (!st_path || !cfg_path || !assets) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    if (!p->force && (exists(st_path) || exists(cfg_path))) {
        st = pi0_fail(PI0_ERR_IO, "%s: a checkpoint is already there (pass force / --force to overwrite it)", out);
        goto done;
    }
    const openpi_config *rc = p->config ? openpi_config_find(p->config) : NULL;
    if (p->config && !rc) { st = pi0_fail(PI0_ERR_ARG, "unknown openpi config '%s' (known: %s)", p->config, openpi_config_names()); goto done; }
    pi0_model_params mp = {.quiet = p->quiet, .action_horizon = p->action_horizon ? p->action_horizon : rc ? rc->action_horizon : 0,
                           .max_token_len = p->max_token_len ? p->max_token_len : rc ? rc->max_token_len : 0};
    if ((st = pi0_model_load(&m, src, &mp)) != PI0_OK) goto done;
    if (rc && rc->pi05 != m->cfg.pi05) {
        st = pi0_fail(PI0_ERR_ARG, "config %s is for a %s checkpoint, %s holds a %s model", rc->name, rc->pi05 ? "π0.5" : "π0", src,
                      m->cfg.pi05 ? "π0.5" : "π0");
        goto done;
    }
    /* the tensors the model uses, under openpi's PyTorch names: a source's extras (LeRobot's untied lm_head, the
     * orphan expert lm_head, unknown tensors) are not carried over */
    const st_file *f = m->file;
    pi0_dtype want = p->dtype == PI0_CONVERT_F32 ? PI0_DT_F32 : p->dtype == PI0_CONVERT_BF16 ? PI0_DT_BF16 : PI0_DT_COUNT;
    if (!(e = calloc((size_t)f->n_tensors + 1, sizeof *e)) || !(used = calloc((size_t)f->n_tensors + 1, sizeof *used)) ||
        !(names = calloc((size_t)f->n_tensors + 1, sizeof *names))) {
        st = pi0_fail(PI0_ERR_NOMEM, "out of memory");
        goto done;
    }
    const int n_used = weights_used(&m->cfg, f, used, names, f->n_tensors + 1);
    int all_bf16 = 1, all_f32 = 1;
    for (int i = 0; i < n_used; i++) {
        const st_tensor *t = used[i];
        e[i] = (st_entry){.name = names[i], .dtype = want == PI0_DT_COUNT ? t->dtype : want, .ndim = t->ndim};
        memcpy(e[i].shape, t->shape, sizeof e[i].shape);
        all_bf16 &= e[i].dtype == PI0_DT_BF16;
        all_f32 &= e[i].dtype == PI0_DT_F32;
    }
    pi0_config c = m->cfg;
    snprintf(c.precision, sizeof c.precision, "%s", all_bf16 ? "bfloat16" : all_f32 ? "float32" : "mixed");
    if ((st = mkdir_p(out)) != PI0_OK) goto done;
    if (!(cfg_json = config_to_json(&c)) || !(src_assets = join(m->root, "assets"))) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    st_writer w;
    const char *meta[] = {"format", "pt"};
    if ((st = st_writer_open(&w, st_path, e, n_used, meta, 1)) != PI0_OK) goto done;
    enum { CH = 1 << 20 };
    if (!(f32 = malloc(CH * sizeof *f32)) || !(h = malloc(CH * sizeof *h))) { st_writer_abort(&w); st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    for (int i = 0; i < n_used && st == PI0_OK; i++) {
        const st_tensor *t = used[i];
        size_t n = (size_t)st_numel(t), esz = pi0_dtype_size(t->dtype);
        if (e[i].dtype == t->dtype) { st = st_writer_write(&w, t->data, n * esz); continue; }
        for (size_t k = 0; k < n && st == PI0_OK; k += CH) {   /* F32 -> BF16 rounds to nearest even, as torch */
            size_t m_ = n - k < CH ? n - k : CH;
            pi0_to_f32(f32, (const uint8_t *)t->data + k * esz, t->dtype, m_);
            if (e[i].dtype == PI0_DT_F32) { st = st_writer_write(&w, f32, m_ * 4); continue; }
            for (size_t j = 0; j < m_; j++) h[j] = pi0_f32_to_bf16(f32[j]);
            st = st_writer_write(&w, h, m_ * 2);
        }
    }
    if (st == PI0_OK) st = st_writer_close(&w);
    else st_writer_abort(&w);
    if (st == PI0_OK) st = write_text(cfg_path, cfg_json);
    if (st == PI0_OK) st = copy_tree(src_assets, assets, 0);
done:
    free(f32); free(h); free(e); free(used); free(names); free(cfg_json); free(src_assets);
    pi0_model_free(m);
    free(st_path); free(cfg_path); free(assets);
    return st;
}
