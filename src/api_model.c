/* api_model.c — the model handle of include/pi0.h: pi0_model_load (openpi's PyTorch conversion, LeRobot's policy
 * directory or an Orbax checkpoint: config, tensors bound and validated, weights copied to the backend),
 * pi0_model_free, pi0_model_get_info, and pi0_backend_check, which finds the backend a model would run on. Owns the
 * model's file mapping and its weights in the backend's memory; parses no format itself (config.c, lerobot.c,
 * orbax.c, safetensors.c, weights.c do) and runs nothing (sessions: api_session.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api.h"
#include "lerobot.h"
#include "orbax.h"
#include "util.h"

char *api_path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

void pi0_model_free(pi0_model *m) {
    if (!m) return;
    if (m->store) m->prov->weights_free(m->store);
    weights_free(&m->w);
    st_close(m->file);
    free(m->dir);
    free(m->root);
    free(m);
}

int api_path_exists(const char *path) {
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
    char *cfg_path = api_path_join(dir, "config.json"), *st_path = api_path_join(dir, "model.safetensors"), *text = NULL;
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
    int has_marker = st_find(m->file, PI0_PI05_MARKER) != NULL, has_expert = st_find(m->file, PI0_EXPERT_MARKER) != NULL;
    if (m->cfg.fast < 0 && !has_expert) {   /* PaliGemma alone: π0-FAST */
        if (m->cfg.pi05 > 0) {
            st = pi0_fail(PI0_ERR_FORMAT, "%s: \"pi05\": true, but %s lacks the action expert ('%s')", cfg_path, st_path,
                          PI0_EXPERT_MARKER);
            goto done;
        }
        m->cfg.fast = 1;
        m->cfg.pi05 = 0;
    }
    if (m->cfg.fast > 0) {
        if (has_expert)
            st = pi0_fail(PI0_ERR_FORMAT, "%s: \"model_type\": \"pi0_fast\", but %s has the action expert's '%s' (π0 / π0.5)",
                          cfg_path, st_path, PI0_EXPERT_MARKER);
        goto done;
    }
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

/* weights_upload's done: the backend's store holds its own copy of t, and nothing reads t's host view again (the
 * model runs on that backend alone), so its pages leave this process (backend.h weights_upload). */
static void release_view(void *file, const pi0_wt *t) {
    st_release(file, t->data, (size_t)(t->rows * t->cols) * pi0_dtype_size(t->dtype));
}

pi0_status pi0_model_load(pi0_model **out, const char *dir, const pi0_model_params *p) {
    if (!out || !dir) return pi0_fail(PI0_ERR_ARG, "pi0_model_load: NULL argument");
    *out = NULL;
    pi0_model_params def = {0};
    if (!p) p = &def;
    const pi0_backend_provider *prov;
    pi0_status st = find_provider(p->backend, &prov);
    if (st != PI0_OK) return st;
    if (p->action_horizon < 0 || p->max_token_len < 0 || p->action_dim < 0)
        return pi0_fail(PI0_ERR_ARG, "action_horizon %d / max_token_len %d / action_dim %d: expected >= 0", p->action_horizon,
                        p->max_token_len, p->action_dim);
    if (p->precision != PI0_PRECISION_BF16 && p->precision != PI0_PRECISION_INT8 && p->precision != PI0_PRECISION_FP8)
        return pi0_fail(PI0_ERR_ARG, "precision %d: expected PI0_PRECISION_BF16 (0), PI0_PRECISION_INT8 (1) or "
                        "PI0_PRECISION_FP8 (2)", (int)p->precision);
    if (p->quant_stages & ~(unsigned)PI0_STAGE_ALL)
        return pi0_fail(PI0_ERR_ARG, "quant_stages 0x%x: expected PI0_STAGE_VISION | PI0_STAGE_PREFIX | PI0_STAGE_EXPERT bits",
                        p->quant_stages);
    if (p->precision == PI0_PRECISION_FP8 && (p->quant_stages & PI0_STAGE_EXPERT))
        return pi0_fail(PI0_ERR_ARG, "quant_stages: fp8 has no path for the expert stage (its few-row products stream their "
                        "weights, where fp8 saves what int8 saves at a larger error; docs/precision.md 8): quantise vision "
                        "and prefix, or use int8 for the expert");
    if (p->precision != PI0_PRECISION_BF16 && !prov->weights_upload)
        return pi0_fail(PI0_ERR_UNSUPPORTED, "the %s backend has no 8-bit path", prov->name);
    pi0_model *m = calloc(1, sizeof *m);
    char *st_path = api_path_join(dir, "model.safetensors"), params[4200];
    st = PI0_ERR_NOMEM;
    if (!m || !st_path || !(m->dir = strdup(dir))) { pi0_fail(st, "out of memory"); goto fail; }
    m->prov = prov;
    m->n_threads = p->n_threads;
    m->device = p->device;
    m->quant.precision = p->precision;
    m->quant.stages = p->precision == PI0_PRECISION_BF16 ? 0
                      : p->quant_stages                 ? p->quant_stages
                      : p->precision == PI0_PRECISION_FP8 ? PI0_STAGE_VISION | PI0_STAGE_PREFIX
                                                        : PI0_STAGE_ALL;
    if (api_path_exists(st_path)) st = load_safetensors(m, dir);
    else if (orbax_find_params(dir, params, sizeof params)) st = load_orbax(m, params, p->quiet);
    else st = pi0_fail(PI0_ERR_IO, "%s: no checkpoint found: expected model.safetensors + config.json (openpi's PyTorch "
                       "conversion) or an Orbax checkpoint (params/_METADATA, as openpi publishes and trains)", dir);
    if (st != PI0_OK) goto fail;
    if (p->action_horizon) m->cfg.action_horizon = p->action_horizon;
    if (p->max_token_len) m->cfg.max_token_len = p->max_token_len;
    if (p->action_dim && m->cfg.fast > 0) m->cfg.action_dim = p->action_dim;   /* π0 / π0.5: the weights' */
    if ((st = config_finish(&m->cfg, dir)) != PI0_OK) goto fail;
    if ((st = weights_bind(&m->w, &m->cfg, m->file, p->quiet)) != PI0_OK) goto fail;
    if (prov->weights_upload &&
        (st = prov->weights_upload(&m->store, &m->w, &m->cfg, &m->quant, m->device, release_view, m->file)) != PI0_OK) {
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
                             .precision = m->quant.precision, .quant_stages = m->quant.stages,
                             .vision = {c->vis.width, c->vis.depth, c->vis.mlp_dim, c->vis.num_heads, c->vis.patch_size},
                             .paligemma = {c->lm.width, c->lm.depth, c->lm.mlp_dim, c->lm.num_heads, c->lm.num_kv_heads,
                                           c->lm.head_dim},
                             .action_expert = {c->ex.width, c->ex.depth, c->ex.mlp_dim, c->ex.num_heads,
                                               c->ex.num_kv_heads, c->ex.head_dim}, .fast = c->fast};
    if (c->fast) memset(&info->action_expert, 0, sizeof info->action_expert);
}
