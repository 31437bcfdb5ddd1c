/* lerobot_pipeline.c — LeRobot's π0 / π0.5 policy pipeline (see lerobot.h), restated from LeRobot's source
 * (docs/checkpoints.md, "LeRobot's pipeline", names the files): the processor files of a LeRobot policy directory,
 * then per observation what its preprocessor and PI0Policy / PI05Policy.predict_action_chunk do before the model and
 * what its postprocessor does after it. Arithmetic follows LeRobot's tensors: float32, or float64 for a float64 state
 * (the normaliser casts its stats to the input's dtype). Compiled with -ffp-contract=off: every operation rounds
 * where PyTorch's does. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lerobot.h"
#include "safetensors.h"
#include "util.h"

#define LR_MAX_DIM 128   /* the most state / action dims (max_action_dim) the pipeline takes */

#define LR_MAX_JSON (16u << 20)
#define LR_MAX_SIDE 8192

static const char *const mode_names[] = {"IDENTITY", "MEAN_STD", "MIN_MAX", "QUANTILES", "QUANTILE10"};
static const char *const stat_names[][2] = {{"", ""}, {"mean", "std"}, {"min", "max"}, {"q01", "q99"}, {"q10", "q90"}};

static void norm_free(lr_norm *n) { free(n->lo); free(n->hi); n->lo = n->hi = NULL; }

void lerobot_pipeline_free(lerobot_pipeline *p) {
    if (!p) return;
    for (int i = 0; p->cams && i < p->N; i++) free(p->cams[i]);
    free(p->cams);
    norm_free(&p->state); norm_free(&p->action); free(p->action_stats);
    for (int i = 0; i < p->n_rename; i++) { free(p->ren_from[i]); free(p->ren_to[i]); }
    free(p->ren_from); free(p->ren_to);
    free(p->metadata); free(p->summary);
    free(p);
}

/* DIR/NAME as a JSON object into *out (path: the file's path, for messages) */
static pi0_status load_json(json_t **out, const char *dir, const char *name, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", dir, name);
    *out = NULL;
    size_t len;
    char *text = pi0_read_file(path, &len, LR_MAX_JSON);
    if (!text) return pi0_last_status();
    json_error_t e;
    json_t *r = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
    free(text);
    if (!r) return pi0_fail(PI0_ERR_FORMAT, "%s: line %d, column %d: %s", path, e.line, e.column, pi0_json_reason(e.text));
    if (!json_is_object(r)) {
        json_decref(r);
        return pi0_fail(PI0_ERR_FORMAT, "%s: expected a JSON object", path);
    }
    *out = r;
    return PI0_OK;
}

/* what a JSON value is, for messages */
static const char *json_kind(const json_t *v) {
    switch (v ? json_typeof(v) : JSON_NULL) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return v ? "null" : "nothing";
    }
}

/* shape[0] of a feature ({"type": ..., "shape": [n, ...]}); the product of the shape for cameras is not needed */
static int feature_dim(json_t *f, const char *file, const char *key, int *dim) {
    json_t *sh = json_object_get(f, "shape"), *d0 = json_array_get(sh, 0);
    if (!json_is_array(sh) || !json_is_integer(d0) || json_integer_value(d0) < 1 || json_integer_value(d0) > 4096) {
        pi0_fail(PI0_ERR_FORMAT, "%s: feature %s: \"shape\" must be a list of positive integers", file, key);
        return 0;
    }
    *dim = (int)json_integer_value(d0);
    return 1;
}

/* One normaliser step: its config (features, norm_map, eps, normalize_observation_keys) and its stats file. */
typedef struct {
    json_t *cfg;            /* borrowed */
    st_file *stats;         /* NULL when the step names no state_file */
    char file[4096];        /* the stats file, for messages */
    int index;
} norm_step;

static lr_mode mode_for(const norm_step *s, const char *type, pi0_status *st, const char *json_path) {
    json_t *m = json_object_get(json_object_get(s->cfg, "norm_map"), type);
    if (!m) return LR_IDENTITY;
    const char *name = json_string_value(m);
    for (int i = 0; name && i < 5; i++)
        if (!strcmp(name, mode_names[i])) return (lr_mode)i;
    *st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: step %d: norm_map.%s: '%s' (expected IDENTITY, MEAN_STD, MIN_MAX, QUANTILES or "
                   "QUANTILE10)", json_path, s->index, type, name ? name : "?");
    return LR_IDENTITY;
}

/* Fills n for feature `key` of `type` with dimension dim from the step's stats. LeRobot passes a feature through when
 * the mode is IDENTITY or the stats lack the key; a mode whose two stats are not both there is an error. */
static pi0_status norm_load(lr_norm *n, const norm_step *s, const char *key, const char *type, int dim, const char *json_path) {
    pi0_status st = PI0_OK;
    memset(n, 0, sizeof *n);
    n->n = dim;
    json_t *eps = json_object_get(s->cfg, "eps");
    n->eps = json_is_number(eps) ? json_number_value(eps) : 1e-8;
    if (!s->cfg) return PI0_OK;
    json_t *only = json_object_get(s->cfg, "normalize_observation_keys");
    if (strcmp(type, "ACTION") && json_is_array(only)) {
        int listed = 0;
        size_t i;
        json_t *v;
        json_array_foreach(only, i, v) listed |= json_is_string(v) && !strcmp(json_string_value(v), key);
        if (!listed) return PI0_OK;
    }
    lr_mode mode = mode_for(s, type, &st, json_path);
    if (st != PI0_OK || mode == LR_IDENTITY || !s->stats) return st;
    char name[600];
    int any = 0;
    for (int i = 0; i < s->stats->n_tensors; i++) {
        const char *t = s->stats->tensors[i].name, *dot = strrchr(t, '.');
        any |= dot && (size_t)(dot - t) == strlen(key) && !strncmp(t, key, strlen(key));
    }
    if (!any) return PI0_OK;
    float *dst[2];
    for (int k = 0; k < 2; k++) {
        snprintf(name, sizeof name, "%s.%s", key, stat_names[mode][k]);
        const st_tensor *t = st_find(s->stats, name);
        if (!t) {
            norm_free(n);
            return pi0_fail(PI0_ERR_FORMAT, "%s: no '%s': %s normalisation of %s needs %s and %s", s->file, name,
                            mode_names[mode], key, stat_names[mode][0], stat_names[mode][1]);
        }
        if (st_numel(t) != dim || (t->dtype != PI0_DT_F32 && t->dtype != PI0_DT_F64 && t->dtype != PI0_DT_BF16 &&
                                   t->dtype != PI0_DT_F16)) {
            char d[96];
            norm_free(n);
            return pi0_fail(PI0_ERR_SHAPE, "%s: '%s' is %s, the feature has %d values (expected a float tensor of %d)",
                            s->file, name, st_describe(d, sizeof d, t->ndim, t->shape, t->dtype), dim, dim);
        }
        if (!(dst[k] = pi0_malloc((size_t)dim * sizeof(float), "normaliser stats"))) { norm_free(n); return PI0_ERR_NOMEM; }
        (k ? &n->hi : &n->lo)[0] = dst[k];
        if (t->dtype == PI0_DT_F64)   /* LeRobot loads every stat as float32 */
            for (int i = 0; i < dim; i++) dst[k][i] = (float)((const double *)t->data)[i];
        else pi0_to_f32(dst[k], t->data, t->dtype, (size_t)dim);
        for (int i = 0; i < dim; i++)
            if (!isfinite(dst[k][i])) {
                norm_free(n);
                return pi0_fail(PI0_ERR_FORMAT, "%s: '%s'[%d] is not finite", s->file, name, i);
            }
    }
    n->mode = mode;
    return PI0_OK;
}

/* Normalises x in place (n values, float32), as NormalizerProcessorStep._apply_transform does on float32 tensors. */
static void norm_f32(const lr_norm *s, float *x, int n) {
    if (s->mode == LR_IDENTITY) return;
    float eps = (float)s->eps;
    for (int i = 0; i < n; i++) {
        float lo = s->lo[i], hi = s->hi[i];
        if (s->mode == LR_MEAN_STD) x[i] = (x[i] - lo) / (hi + eps);
        else {
            float d = hi - lo;
            if (d == 0) d = eps;
            x[i] = 2.0f * (x[i] - lo) / d - 1.0f;
        }
    }
}

static void norm_f64(const lr_norm *s, double *x, int n) {
    if (s->mode == LR_IDENTITY) return;
    for (int i = 0; i < n; i++) {
        double lo = s->lo[i], hi = s->hi[i];
        if (s->mode == LR_MEAN_STD) x[i] = (x[i] - lo) / (hi + s->eps);
        else {
            double d = hi - lo;
            if (d == 0) d = s->eps;
            x[i] = 2.0 * (x[i] - lo) / d - 1.0;
        }
    }
}

/* UnnormalizerProcessorStep on the float32 action chunk */
static float unnorm_f32(const lr_norm *s, float x, int i) {
    float lo, hi, d;
    switch (s->mode) {
    case LR_MEAN_STD: return x * s->hi[i] + s->lo[i];
    case LR_MIN_MAX:
        lo = s->lo[i]; hi = s->hi[i]; d = hi - lo;
        if (d == 0) d = (float)s->eps;
        return (x + 1.0f) / 2.0f * d + lo;
    case LR_QUANTILES: case LR_QUANTILE10:
        lo = s->lo[i]; hi = s->hi[i]; d = hi - lo;
        if (d == 0) d = (float)s->eps;
        return (x + 1.0f) * d / 2.0f + lo;
    default: return x;
    }
}

static int step_enabled_false(json_t *step) {
    json_t *e = json_object_get(json_object_get(step, "config"), "enabled");
    return !e || json_is_false(e);
}

/* A normaliser step's config as NormalizerProcessorStep takes it: norm_map an object (its dataclass has no default),
 * eps a number, normalize_observation_keys a list or null. Anything else is refused: read as IDENTITY it would leave
 * the model's inputs or actions unnormalised without a word. */
static pi0_status check_step_config(json_t *cfg, int index, const char *json_path) {
    if (!json_is_object(cfg))
        return pi0_fail(PI0_ERR_FORMAT, "%s: step %d: \"config\": expected an object, found %s", json_path, index,
                        json_kind(cfg));
    json_t *nm = json_object_get(cfg, "norm_map"), *eps = json_object_get(cfg, "eps"),
           *keys = json_object_get(cfg, "normalize_observation_keys");
    if (!json_is_object(nm))
        return pi0_fail(PI0_ERR_FORMAT, "%s: step %d: config.norm_map: expected an object of feature type -> mode, found %s",
                        json_path, index, json_kind(nm));
    if (eps && (!json_is_number(eps) || !(json_number_value(eps) >= 0) || !isfinite(json_number_value(eps))))
        return pi0_fail(PI0_ERR_FORMAT, "%s: step %d: config.eps: expected a finite number >= 0, found %s", json_path, index,
                        json_kind(eps));
    if (keys && !json_is_array(keys) && !json_is_null(keys))
        return pi0_fail(PI0_ERR_FORMAT, "%s: step %d: config.normalize_observation_keys: expected a list or null, found %s",
                        json_path, index, json_kind(keys));
    return PI0_OK;
}

static pi0_status open_step_stats(norm_step *ns, json_t *step, int index, const char *dir, const char *json_path) {
    ns->cfg = json_object_get(step, "config");
    ns->index = index;
    pi0_status st = check_step_config(ns->cfg, index, json_path);
    if (st != PI0_OK) return st;
    json_t *sf = json_object_get(step, "state_file");
    if (!sf) return PI0_OK;
    const char *f = json_string_value(sf);
    if (!f || !*f || strchr(f, '/') || strstr(f, ".."))
        return pi0_fail(PI0_ERR_FORMAT, "%s: step %d: state_file: expected a file name in the policy directory", json_path, index);
    snprintf(ns->file, sizeof ns->file, "%s/%s", dir, f);
    struct stat sb;
    if (stat(ns->file, &sb) != 0)
        return pi0_fail(PI0_ERR_IO, "%s: step %d names the stats file %s, which does not exist", json_path, index, ns->file);
    return st_open(&ns->stats, ns->file);
}

static int add_rename(lerobot_pipeline *p, json_t *map, const char *json_path) {
    if (!map) return 1;
    if (!json_is_object(map)) { pi0_fail(PI0_ERR_FORMAT, "%s: rename_map: expected an object", json_path); return 0; }
    size_t n = json_object_size(map);
    p->ren_from = pi0_calloc(n + 1, sizeof(char *), "rename map");
    p->ren_to = pi0_calloc(n + 1, sizeof(char *), "rename map");
    if (!p->ren_from || !p->ren_to) return 0;
    const char *k;
    json_t *v;
    json_object_foreach(map, k, v) {
        if (!json_is_string(v)) { pi0_fail(PI0_ERR_FORMAT, "%s: rename_map.%s: expected a string", json_path, k); return 0; }
        p->ren_from[p->n_rename] = strdup(k);
        p->ren_to[p->n_rename] = strdup(json_string_value(v));
        if (!p->ren_from[p->n_rename++] || !p->ren_to[p->n_rename - 1]) { pi0_fail(PI0_ERR_NOMEM, "out of memory"); return 0; }
    }
    return 1;
}

/* appends printf output to a growing string */
static void cat(char **s, size_t *cap, const char *fmt, ...) PI0_PRINTF(3, 4);
static void cat(char **s, size_t *cap, const char *fmt, ...) {
    if (!*s) return;
    size_t len = strlen(*s);
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(*s + len, *cap - len, fmt, ap);
        va_end(ap);
        if (k < 0) return;
        if (len + (size_t)k < *cap) return;
        char *g = realloc(*s, *cap * 2 + (size_t)k);
        if (!g) { free(*s); *s = NULL; return; }
        *s = g;
        *cap = *cap * 2 + (size_t)k;
    }
}

static void describe_norm(char **s, size_t *cap, const lr_norm *n) {
    if (n->mode == LR_IDENTITY) cat(s, cap, "IDENTITY (no normalisation)");
    else cat(s, cap, "%s (%s, %s)", mode_names[n->mode], stat_names[n->mode][0], stat_names[n->mode][1]);
}

static pi0_status make_texts(lerobot_pipeline *p) {
    size_t cap = 1024;
    char *s = calloc(1, cap);
    cat(&s, &cap, "lerobot: type %s; %d camera%s:", p->pi05 ? "pi05" : "pi0", p->N, p->N > 1 ? "s" : "");
    for (int i = 0; i < p->N; i++) cat(&s, &cap, "%s %s", i ? "," : "", p->cams[i]);
    cat(&s, &cap, "\n  observation.state [%d]: ", p->state_dim);
    describe_norm(&s, &cap, &p->state);
    cat(&s, &cap, "%s\n  action [%d] of %d: ", p->pi05 && p->state_prompt ? ", discretised into the prompt" : "", p->action_dim, p->A);
    describe_norm(&s, &cap, &p->action);
    cat(&s, &cap, "\n  task: %s; chunk %d, n_action_steps %d returned; %d denoising steps",
        p->pi05 && p->state_prompt ? "\"Task: <task>, State: <bins>;\\nAction: \"" : p->newline ? "<task> + \"\\n\"" : "<task>",
        p->H, p->n_action_steps, p->num_steps);
    for (int i = 0; i < p->n_rename; i++) cat(&s, &cap, "%s %s -> %s", i ? "," : "\n  renamed:", p->ren_from[i], p->ren_to[i]);
    static const char *const sched[] = {"ZEROS", "ONES", "LINEAR", "EXP"};
    cat(&s, &cap, "\n  real-time chunking (guided) defaults: execution_horizon %d, %s, max_guidance_weight %g", p->rtc_horizon,
        sched[p->rtc_schedule], (double)p->rtc_max_weight);
    /* the metadata through jansson: camera keys come from config.json and may hold any character */
    json_t *cams = json_array(), *lr = json_pack("{s:s, s:o, s:s, s:i, s:i, s:i, s:s}", "type", p->pi05 ? "pi05" : "pi0",
                                                 "cameras", cams, "state", "observation.state", "state_dim", p->state_dim,
                                                 "action_dim", p->action_dim, "n_action_steps", p->n_action_steps,
                                                 "prompt_key", "task");
    int ok = lr != NULL;
    for (int i = 0; ok && i < p->N; i++) ok = !json_array_append_new(cams, json_string(p->cams[i]));
    json_t *root = ok ? json_pack("{s:O}", "lerobot", lr) : NULL;
    p->metadata = root ? json_dumps(root, JSON_ENSURE_ASCII) : NULL;
    json_decref(root);
    json_decref(lr);
    if (p->metadata) cat(&s, &cap, "\n  metadata sent to clients: %s", p->metadata);
    p->summary = s;
    return s && p->metadata ? PI0_OK : pi0_fail(PI0_ERR_NOMEM, "out of memory");
}

static int cam_index(const lerobot_pipeline *p, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (!strcmp(p->cams[i], key)) return i;
    return -1;
}

pi0_status lerobot_pipeline_load(lerobot_pipeline **out, const char *dir, const pi0_model_info *mi) {
    *out = NULL;
    pi0_status st = PI0_OK;
    char cfg_path[4096], pre_path[4096], post_path[4096];
    json_t *cfg = NULL, *pre = NULL, *post = NULL;
    norm_step pre_n = {0}, post_n = {0};
    lerobot_pipeline *p = pi0_calloc(1, sizeof *p, "LeRobot pipeline");
    if (!p) return PI0_ERR_NOMEM;
    p->pi05 = mi->pi05; p->H = mi->action_horizon; p->A = mi->action_dim; p->N = mi->n_cameras;
    p->R = mi->image_size; p->L = mi->max_token_len;
    if ((st = load_json(&cfg, dir, "config.json", cfg_path, sizeof cfg_path)) != PI0_OK) goto done;
    if ((st = load_json(&pre, dir, "policy_preprocessor.json", pre_path, sizeof pre_path)) != PI0_OK ||
        (st = load_json(&post, dir, "policy_postprocessor.json", post_path, sizeof post_path)) != PI0_OK) {
        struct stat sb;   /* a file that is there but unreadable or malformed keeps load_json's error */
        if (stat(pre ? post_path : pre_path, &sb) == 0 || errno != ENOENT) goto done;
        st = pi0_fail(PI0_ERR_IO, "%s: a LeRobot policy directory needs policy_preprocessor.json and "
                      "policy_postprocessor.json (LeRobot's processor files; checkpoints saved before LeRobot 0.4 keep "
                      "their norm stats in model.safetensors: convert them with LeRobot's migrate_policy_normalization.py)",
                      pre ? post_path : pre_path);
        goto done;
    }
    /* features: cameras in input_features order, then the empty cameras; state and action dimensions */
    p->cams = pi0_calloc((size_t)p->N, sizeof *p->cams, "cameras");
    if (!p->cams) { st = PI0_ERR_NOMEM; goto done; }
    json_t *in = json_object_get(cfg, "input_features"), *f, *outf = json_object_get(cfg, "output_features");
    const char *key;
    int nc = 0;
    p->state_dim = p->A;   /* validate_features: a missing state / action feature is max_state_dim / max_action_dim wide */
    p->action_dim = p->A;
    json_object_foreach(in, key, f) {
        const char *type = json_string_value(json_object_get(f, "type"));
        if (type && !strcmp(type, "VISUAL")) {
            if (strncmp(key, "observation.images.", 19) && strcmp(key, "observation.image")) {
                st = pi0_fail(PI0_ERR_FORMAT, "%s: input_features.%s: a VISUAL feature is expected to be named "
                              "observation.images.<camera>", cfg_path, key);
                goto done;
            }
            if (nc < p->N && !(p->cams[nc++] = strdup(key))) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
        } else if (!strcmp(key, "observation.state")) {
            if (!feature_dim(f, cfg_path, key, &p->state_dim)) { st = PI0_ERR_FORMAT; goto done; }
        }
    }
    json_t *ec = json_object_get(cfg, "empty_cameras");
    for (int i = 0; ec && i < json_integer_value(ec) && nc < p->N; i++) {
        char k[64];
        snprintf(k, sizeof k, "observation.images.empty_camera_%d", i);
        if (cam_index(p, nc, k) < 0 && !(p->cams[nc++] = strdup(k))) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    }
    if (nc != p->N) {   /* lerobot_config counts them the same way, so only a caller's mismatched model info gets here */
        st = pi0_fail(PI0_ERR_FORMAT, "%s: %d cameras (VISUAL input_features + empty_cameras), the model was loaded with %d",
                      cfg_path, nc, p->N);
        goto done;
    }
    if (p->A > LR_MAX_DIM) {   /* lerobot_prepare's state buffers */
        st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: max_action_dim %d: at most %d is supported", cfg_path, p->A, LR_MAX_DIM);
        goto done;
    }
    if ((f = json_object_get(outf, "action")) && !feature_dim(f, cfg_path, "action", &p->action_dim)) { st = PI0_ERR_FORMAT; goto done; }
    if (p->state_dim > p->A || p->action_dim > p->A) {
        st = pi0_fail(PI0_ERR_SHAPE, "%s: the state has %d values and the action %d, the model takes at most %d (max_state_dim "
                      "/ max_action_dim)", cfg_path, p->state_dim, p->action_dim, p->A);
        goto done;
    }
    json_t *v = json_object_get(cfg, "n_action_steps");
    /* in int64 before the int: 4294967297 must not pass as 1 */
    json_int_t nas = !v ? 50 : json_is_integer(v) ? json_integer_value(v) : 0;
    p->n_action_steps = nas >= 1 && nas <= p->H ? (int)nas : 0;
    if (!p->n_action_steps) {
        st = pi0_fail(PI0_ERR_FORMAT, "%s: n_action_steps %lld: expected 1..chunk_size (%d)", cfg_path, (long long)nas, p->H);
        goto done;
    }
    /* rtc_config: the defaults of a request's real-time chunking (LeRobot's RTCConfig: 10, LINEAR, 10) */
    p->rtc_horizon = 10;
    p->rtc_schedule = PI0_RTC_LINEAR;
    p->rtc_max_weight = 10.0f;
    json_t *rc = json_object_get(cfg, "rtc_config");
    if (json_is_object(rc)) {
        json_t *h = json_object_get(rc, "execution_horizon"), *mw = json_object_get(rc, "max_guidance_weight");
        const char *sch = json_string_value(json_object_get(rc, "prefix_attention_schedule"));
        static const char *const names[] = {"ZEROS", "ONES", "LINEAR", "EXP"};
        int found = !sch;
        for (int k = 0; sch && k < 4; k++) if (!strcmp(sch, names[k])) { p->rtc_schedule = (pi0_rtc_schedule)k; found = 1; }
        if (!found || (h && (!json_is_integer(h) || json_integer_value(h) < 0 || json_integer_value(h) > 4096)) ||
            (mw && (!json_is_number(mw) || !(json_number_value(mw) > 0)))) {
            st = pi0_fail(PI0_ERR_FORMAT, "%s: rtc_config: expected prefix_attention_schedule ZEROS|ONES|LINEAR|EXP, "
                          "execution_horizon 0..4096, max_guidance_weight > 0", cfg_path);
            goto done;
        }
        if (h) p->rtc_horizon = (int)json_integer_value(h);
        if (mw) p->rtc_max_weight = (float)json_number_value(mw);
    }
    v = json_object_get(cfg, "num_inference_steps");
    json_int_t ns = !v ? 10 : json_is_integer(v) ? json_integer_value(v) : 0;
    p->num_steps = ns >= 1 && ns <= 1000 ? (int)ns : 0;
    if (!p->num_steps) {
        st = pi0_fail(PI0_ERR_FORMAT, "%s: num_inference_steps: expected an integer 1..1000", cfg_path);
        goto done;
    }

    /* the preprocessor's steps: each one known, in an order whose meaning the engine implements */
    json_t *steps = json_object_get(pre, "steps"), *step;
    size_t i;
    int tokenizer_at = -1, norm_at = -1, state_at = -1;
    if (!json_is_array(steps)) { st = pi0_fail(PI0_ERR_FORMAT, "%s: \"steps\": expected a list", pre_path); goto done; }
    json_array_foreach(steps, i, step) {
        const char *reg = json_string_value(json_object_get(step, "registry_name"));
        json_t *c = json_object_get(step, "config");
        if (!reg) {
            st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: step %zu (%s) has no registry_name: custom processor steps are not supported",
                          pre_path, i, json_string_value(json_object_get(step, "class")) ? json_string_value(json_object_get(step, "class")) : "?");
            goto done;
        }
        if (!strcmp(reg, "rename_observations_processor")) {
            if (!add_rename(p, json_object_get(c, "rename_map"), pre_path)) { st = PI0_ERR_FORMAT; goto done; }
        } else if (!strcmp(reg, "to_batch_processor") || !strcmp(reg, "device_processor")) {
        } else if (!strcmp(reg, "pi0_new_line_processor") && !p->pi05) {
            p->newline = 1;
        } else if (!strcmp(reg, "pi05_prepare_state_tokenizer_processor_step") && p->pi05) {
            json_t *inc = json_object_get(c, "include_state_in_prompt");
            if (inc && !json_is_true(inc)) {
                st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: step %zu: include_state_in_prompt false (proprioceptive memory) is not "
                              "supported", pre_path, i);
                goto done;
            }
            p->state_prompt = 1;
            state_at = (int)i;
        } else if (!strcmp(reg, "tokenizer_processor")) {
            json_t *ml = json_object_get(c, "max_length"), *side = json_object_get(c, "padding_side"),
                   *pad = json_object_get(c, "padding"), *tr = json_object_get(c, "truncation"), *tk = json_object_get(c, "task_key");
            if (ml && (!json_is_integer(ml) || json_integer_value(ml) != p->L)) {
                st = pi0_fail(PI0_ERR_FORMAT, "%s: step %zu: max_length %lld, config.json's tokenizer_max_length is %d", pre_path, i,
                              (long long)json_integer_value(ml), p->L);
                goto done;
            }
            if ((side && strcmp(json_string_value(side) ? json_string_value(side) : "", "right")) ||
                (pad && strcmp(json_string_value(pad) ? json_string_value(pad) : "", "max_length")) || (tr && !json_is_true(tr)) ||
                (tk && strcmp(json_string_value(tk) ? json_string_value(tk) : "", "task"))) {
                st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: step %zu: the engine tokenizes the task right-padded to max_length with "
                              "truncation (padding_side \"right\", padding \"max_length\", truncation true, task_key \"task\")",
                              pre_path, i);
                goto done;
            }
            tokenizer_at = (int)i;
        } else if (!strcmp(reg, "relative_actions_processor")) {
            if (!step_enabled_false(step)) {
                st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: step %zu: relative actions (enabled true) are not supported", pre_path, i);
                goto done;
            }
        } else if (!strcmp(reg, "normalizer_processor")) {
            if (norm_at >= 0) { st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: two normalizer_processor steps", pre_path); goto done; }
            norm_at = (int)i;
            if ((st = open_step_stats(&pre_n, step, (int)i, dir, pre_path)) != PI0_OK) goto done;
        } else {
            st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: step %zu: processor '%s' is not supported for a %s policy", pre_path, i, reg,
                          p->pi05 ? "pi05" : "pi0");
            goto done;
        }
    }
    if (tokenizer_at < 0) { st = pi0_fail(PI0_ERR_FORMAT, "%s: no tokenizer_processor step (the model needs the task's tokens)", pre_path); goto done; }
    if (state_at >= 0 && (norm_at > state_at || state_at > tokenizer_at)) {
        st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: pi05_prepare_state_tokenizer_processor_step must come after the normalizer and "
                      "before the tokenizer", pre_path);
        goto done;
    }
    /* the postprocessor: unnormalizer (+ disabled absolute actions, device) */
    steps = json_object_get(post, "steps");
    int unnorm_at = -1;
    if (!json_is_array(steps)) { st = pi0_fail(PI0_ERR_FORMAT, "%s: \"steps\": expected a list", post_path); goto done; }
    json_array_foreach(steps, i, step) {
        const char *reg = json_string_value(json_object_get(step, "registry_name"));
        if (reg && !strcmp(reg, "unnormalizer_processor") && unnorm_at < 0) {
            unnorm_at = (int)i;
            if ((st = open_step_stats(&post_n, step, (int)i, dir, post_path)) != PI0_OK) goto done;
        } else if (reg && !strcmp(reg, "absolute_actions_processor")) {
            if (!step_enabled_false(step)) {
                st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: step %zu: absolute actions (enabled true) are not supported", post_path, i);
                goto done;
            }
        } else if (!reg || strcmp(reg, "device_processor")) {
            st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: step %zu: processor '%s' is not supported", post_path, i, reg ? reg : "(custom class)");
            goto done;
        }
    }
    /* the stats: state from the preprocessor's normaliser, action from the postprocessor's unnormaliser */
    if ((st = norm_load(&p->state, &pre_n, "observation.state", "STATE", p->state_dim, pre_path)) != PI0_OK ||
        (st = norm_load(&p->action, &post_n, "action", "ACTION", p->action_dim, post_path)) != PI0_OK)
        goto done;
    if (post_n.stats && !(p->action_stats = strdup(post_n.file))) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    for (int c = 0; c < p->N; c++) {   /* SigLIP takes [-1, 1] pixels: LeRobot's π0 / π0.5 configs leave images alone */
        lr_norm cn;
        if ((st = norm_load(&cn, &pre_n, p->cams[c], "VISUAL", 3, pre_path)) != PI0_OK) goto done;
        norm_free(&cn);
        if (cn.mode != LR_IDENTITY) {
            st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: norm_map.VISUAL %s with stats for %s: normalising camera images is not "
                          "supported (π0's SigLIP takes pixels in [-1, 1]; LeRobot's π0 / π0.5 configs use IDENTITY)",
                          pre_path, mode_names[cn.mode], p->cams[c]);
            goto done;
        }
    }
    if (p->pi05 && p->state_prompt && p->state.mode == LR_IDENTITY)
        fprintf(stderr, "pi0: warning: %s: the π0.5 state is discretised into the prompt on [-1, 1] but is not normalised "
                "(no STATE stats)\n", pre_path);
    st = make_texts(p);
done:
    if (pre_n.stats) st_close(pre_n.stats);
    if (post_n.stats) st_close(post_n.stats);
    json_decref(cfg); json_decref(pre); json_decref(post);
    if (st != PI0_OK) { lerobot_pipeline_free(p); return st; }
    *out = p;
    return PI0_OK;
}

/* ---- images ---- */

typedef struct { int *i0, *i1; float *w0, *w1; } axis_w;

/* PyTorch's linear weights for align_corners=False without antialias, in float32 as its kernels compute them
 * (torch 2.7-2.11, CPU and CUDA alike): src = max(fma(in / out, dst + 0.5, -0.5), 0), i0 = floor, lambda = src - i0. */
static int axis_weights(axis_w *a, int in, int out) {
    a->i0 = malloc((size_t)out * sizeof(int)); a->i1 = malloc((size_t)out * sizeof(int));
    a->w0 = malloc((size_t)out * sizeof(float)); a->w1 = malloc((size_t)out * sizeof(float));
    if (!a->i0 || !a->i1 || !a->w0 || !a->w1) return 0;
    float scale = (float)in / (float)out;
    for (int d = 0; d < out; d++) {
        float src = fmaf(scale, (float)d + 0.5f, -0.5f);
        if (src < 0) src = 0;
        int i0 = (int)floorf(src);
        if (i0 > in - 1) i0 = in - 1;
        float lam = src - (float)i0;
        if (lam < 0) lam = 0;
        if (lam > 1) lam = 1;
        a->i0[d] = i0;
        a->i1[d] = i0 < in - 1 ? i0 + 1 : i0;
        a->w0[d] = 1.0f - lam;
        a->w1[d] = lam;
    }
    return 1;
}

static void axis_free(axis_w *a) { free(a->i0); free(a->i1); free(a->w0); free(a->w1); }

pi0_status lerobot_resize_with_pad(const float *src, int h, int w, int size, float *dst) {
    if (h < 1 || w < 1 || h > LR_MAX_SIDE || w > LR_MAX_SIDE || size < 1)
        return pi0_fail(PI0_ERR_SHAPE, "image of %d x %d pixels: expected sides of 1..%d", h, w, LR_MAX_SIDE);
    size_t plane = (size_t)size * size;
    memset(dst, 0, 3 * plane * sizeof(float));
    if (h == size && w == size) {
        memcpy(dst, src, 3 * plane * sizeof(float));
        return PI0_OK;
    }
    double ratio = fmax((double)w / size, (double)h / size);   /* resize_with_pad_torch: int() of the scaled sides */
    int rh = (int)(h / ratio), rw = (int)(w / ratio);
    if (rh < 1 || rw < 1)
        return pi0_fail(PI0_ERR_SHAPE, "image of %d x %d pixels resizes to %d x %d for %d x %d: too thin", h, w, rh, rw, size, size);
    int top = (size - rh) / 2, left = (size - rw) / 2;   /* divmod: the odd pixel goes to the bottom / right */
    axis_w ay = {0}, ax = {0};
    pi0_status st = PI0_OK;
    if (!axis_weights(&ay, h, rh) || !axis_weights(&ax, w, rw)) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    for (int c = 0; c < 3; c++) {
        const float *s = src + (size_t)c * h * w;
        for (int y = 0; y < rh; y++) {
            const float *r0 = s + (size_t)ay.i0[y] * w, *r1 = s + (size_t)ay.i1[y] * w;
            float wy0 = ay.w0[y], wy1 = ay.w1[y];
            float *o = dst + (size_t)c * plane + (size_t)(top + y) * size + left;
            for (int x = 0; x < rw; x++) {   /* PyTorch's order of fused multiply-adds, bit for bit */
                int x0 = ax.i0[x], x1 = ax.i1[x];
                float wx0 = ax.w0[x], wx1 = ax.w1[x];
                float t0 = fmaf(wx0, r0[x0], wx1 * r0[x1]), t1 = fmaf(wx0, r1[x0], wx1 * r1[x1]);
                float v = fmaf(wy0, t0, wy1 * t1);
                o[x] = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
            }
        }
    }
done:
    axis_free(&ay);
    axis_free(&ax);
    return st;
}

/* element i of an array of dtype dt as a double; data need not be aligned (memcpy loads) */
static double load(const void *data, pi0_dtype dt, size_t i) {
    const uint8_t *b = data;
    float f;
    double d;
    int32_t i32;
    int64_t i64;
    switch (dt) {
    case PI0_DT_U8: return b[i];
    case PI0_DT_F32: memcpy(&f, b + i * 4, 4); return f;
    case PI0_DT_F64: memcpy(&d, b + i * 8, 8); return d;
    case PI0_DT_I32: memcpy(&i32, b + i * 4, 4); return (float)i32;   /* integers become float32, as documented */
    case PI0_DT_I64: memcpy(&i64, b + i * 8, 8); return (float)i64;
    default: PI0_ASSERT(0); return 0;
    }
}

/* one camera array -> float32 CHW in [0, 1]: uint8 / 255 as LeRobot's prepare_observation_for_inference on the GPU,
 * where PyTorch divides by a scalar as a multiplication by its float32 reciprocal */
static pi0_status image_in(const pi0_array *a, const char *key, float **out, int *ph, int *pw) {
    int nd = a->ndim;
    const int64_t *sh = a->shape;
    if (nd == 4 && sh[0] == 1) { nd = 3; sh++; }
    if (nd != 3 || (sh[0] != 3 && sh[2] != 3))
        return pi0_fail(PI0_ERR_SHAPE, "observation '%s': expected an image (3, H, W) or (H, W, 3), found %d dimensions%s", key,
                        a->ndim, a->ndim == 3 || a->ndim == 4 ? " without a side of 3 channels" : "");
    if (a->dtype != PI0_DT_U8 && a->dtype != PI0_DT_F32 && a->dtype != PI0_DT_F64)
        return pi0_fail(PI0_ERR_ARG, "observation '%s': image dtype %s: expected uint8, float32 or float64", key, pi0_dtype_name(a->dtype));
    int chw = sh[0] == 3;
    int64_t h = chw ? sh[1] : sh[0], w = chw ? sh[2] : sh[1];
    if (h < 1 || w < 1 || h > LR_MAX_SIDE || w > LR_MAX_SIDE)
        return pi0_fail(PI0_ERR_SHAPE, "observation '%s': image of %lld x %lld pixels: expected sides of 1..%d", key,
                        (long long)h, (long long)w, LR_MAX_SIDE);
    size_t n = (size_t)(3 * h * w);
    float *img = pi0_malloc(n * sizeof(float), "image");
    if (!img) return PI0_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        size_t c = i / (size_t)(h * w), yx = i % (size_t)(h * w), src = chw ? i : yx * 3 + c;
        float v = a->dtype == PI0_DT_U8 ? (float)((const uint8_t *)a->data)[src] * (1.0f / 255.0f) : (float)load(a->data, a->dtype, src);
        if (!isfinite(v)) {
            free(img);
            return pi0_fail(PI0_ERR_ARG, "observation '%s': value %zu is not finite (or out of float32 range)", key, src);
        }
        img[i] = v;
    }
    *out = img;
    *ph = (int)h;
    *pw = (int)w;
    return PI0_OK;
}

/* the key as LeRobot's model sees it: '/' (nested maps) as '.', then the rename map */
static void model_key(const lerobot_pipeline *p, const char *key, char *buf, size_t cap) {
    snprintf(buf, cap, "%s", key);
    for (char *c = buf; *c; c++) if (*c == '/') *c = '.';
    for (int i = 0; i < p->n_rename; i++)
        if (!strcmp(buf, p->ren_from[i])) { snprintf(buf, cap, "%s", p->ren_to[i]); break; }
}

static void known_keys(const lerobot_pipeline *p, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "observation.state");
    for (int i = 0; i < p->N && k < cap; i++) k += (size_t)snprintf(buf + k, cap - k, ", %s", p->cams[i]);
}

pi0_status lerobot_prepare(const lerobot_pipeline *p, const pi0_tokenizer *tok, const pi0_observation *obs,
                           const char *default_prompt, float *images, uint8_t *masks, float *state, int32_t *tokens,
                           uint8_t *token_mask) {
    const pi0_array *cam[16] = {0}, *st_arr = NULL;
    char key[512], known[2048];
    for (int i = 0; i < obs->n_arrays; i++) {
        const pi0_array *a = &obs->arrays[i];
        const char *ak = a->key ? a->key : "";   /* a C caller may leave a key NULL */
        model_key(p, ak, key, sizeof key);
        int c = cam_index(p, p->N, key);
        const pi0_array **slot = c >= 0 ? &cam[c] : !strcmp(key, "observation.state") ? &st_arr : NULL;
        if (!slot) {
            known_keys(p, known, sizeof known);
            return pi0_fail(PI0_ERR_ARG, "observation key '%s'%s%s%s is not a feature of this LeRobot checkpoint (its keys: %s)",
                            ak, strcmp(key, ak) ? " (read as '" : "", strcmp(key, ak) ? key : "", strcmp(key, ak) ? "')" : "",
                            known);
        }
        if (*slot) return pi0_fail(PI0_ERR_ARG, "observation key '%s' (%s) is given twice", ak, key);
        *slot = a;
    }
    /* _preprocess_images: present cameras in feature order, then the missing ones as -1 images with mask 0 */
    size_t plane = (size_t)p->R * p->R, img = 3 * plane;
    int slot = 0, present = 0;
    float *chw = pi0_malloc(img * sizeof(float), "image");
    if (!chw) return PI0_ERR_NOMEM;
    pi0_status st = PI0_OK;
    for (int c = 0; c < p->N && st == PI0_OK; c++) {
        if (!cam[c]) continue;
        float *src = NULL;
        int h = 0, w = 0;
        if ((st = image_in(cam[c], cam[c]->key, &src, &h, &w)) != PI0_OK) break;
        st = lerobot_resize_with_pad(src, h, w, p->R, chw);
        free(src);
        if (st != PI0_OK) { pi0_error_prefix("observation '%s'", cam[c]->key); break; }
        float *dst = images + (size_t)slot * img;   /* model layout (R, R, 3); x * 2.0 - 1.0 as LeRobot's model */
        for (size_t yx = 0; yx < plane; yx++)
            for (int ch = 0; ch < 3; ch++) dst[yx * 3 + ch] = chw[(size_t)ch * plane + yx] * 2.0f - 1.0f;
        masks[slot++] = 1;
        present++;
    }
    free(chw);
    if (st != PI0_OK) return st;
    if (!present) {
        known_keys(p, known, sizeof known);
        return pi0_fail(PI0_ERR_ARG, "observation has none of the checkpoint's cameras (%s): at least one is required", known + 19);
    }
    for (; slot < p->N; slot++) {
        for (size_t k = 0; k < img; k++) images[(size_t)slot * img + k] = -1.0f;
        masks[slot] = 0;
    }
    /* state: normalised in its own precision (float64 stays float64), padded with zeros to max_state_dim */
    if (!st_arr) return pi0_fail(PI0_ERR_ARG, "observation has no 'observation.state' (%d values)", p->state_dim);
    /* (n) or (1, n); the shape is checked before anything is multiplied (a request can name any sizes) */
    if (st_arr->ndim > 2 || (st_arr->ndim == 2 && st_arr->shape[0] != 1))
        return pi0_fail(PI0_ERR_SHAPE, "observation '%s': expected %d state values as (%d) or (1, %d), found a %d-dimensional "
                        "array%s", st_arr->key, p->state_dim, p->state_dim, p->state_dim, st_arr->ndim,
                        st_arr->ndim == 2 ? " whose first dimension is not 1" : "");
    const int64_t n = st_arr->ndim ? st_arr->shape[st_arr->ndim - 1] : 1;
    if (n != p->state_dim)
        return pi0_fail(PI0_ERR_SHAPE, "observation '%s': expected %d state values, found %lld", st_arr->key, p->state_dim, (long long)n);
    double sd[LR_MAX_DIM];   /* state_dim <= A <= LR_MAX_DIM (lerobot_pipeline_load) */
    float sf[LR_MAX_DIM];
    int f64 = st_arr->dtype == PI0_DT_F64;
    if (st_arr->dtype != PI0_DT_F64 && st_arr->dtype != PI0_DT_F32 && st_arr->dtype != PI0_DT_I32 && st_arr->dtype != PI0_DT_I64)
        return pi0_fail(PI0_ERR_ARG, "observation '%s': dtype %s: expected float32, float64 or integers", st_arr->key,
                        pi0_dtype_name(st_arr->dtype));
    for (int i = 0; i < p->state_dim; i++) {
        double v = load(st_arr->data, st_arr->dtype, (size_t)i);
        if (!isfinite(v) || (!f64 && fabs(v) > 3.4028234663852886e38))
            return pi0_fail(PI0_ERR_ARG, "observation '%s': value %d is not finite", st_arr->key, i);
        sd[i] = v;
        sf[i] = (float)v;
    }
    if (f64) norm_f64(&p->state, sd, p->state_dim);
    else {
        norm_f32(&p->state, sf, p->state_dim);
        for (int i = 0; i < p->state_dim; i++) sd[i] = sf[i];
    }
    for (int i = 0; i < p->A; i++) {
        state[i] = i < p->state_dim ? (float)sd[i] : 0.0f;
        if (i < p->state_dim && !isfinite(state[i]))
            return pi0_fail(PI0_ERR_ARG, "observation '%s': value %d normalises to %g, out of float32 range", st_arr->key, i, sd[i]);
    }
    /* the task: π0 "<task>\n", π0.5 "Task: ..., State: <bins>;\nAction: ", BOS first, right-padded */
    const char *task = obs->prompt ? obs->prompt : default_prompt;
    if (!task)
        return pi0_fail(PI0_ERR_ARG, "the observation has no task (LeRobot's 'task', the prompt) and the policy has no default "
                        "prompt (--default-prompt)");
    if (p->pi05 && p->state_prompt)
        return pi0_tokenize_prompt(tok, task, PI0_PROMPT_PI05, sd, p->state_dim, p->L, tokens, token_mask, NULL);
    size_t len = strlen(task);
    int nl = p->newline && (len == 0 || task[len - 1] != '\n');
    char *text = malloc(len + 2);
    if (!text) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    memcpy(text, task, len);
    strcpy(text + len, nl ? "\n" : "");
    st = pi0_tokenize_prompt(tok, text, PI0_PROMPT_RAW, NULL, 0, p->L, tokens, token_mask, NULL);
    free(text);
    return st;
}

pi0_status lerobot_actions(const lerobot_pipeline *p, const float *chunk, double *out) {
    for (int t = 0; t < p->n_action_steps; t++)
        for (int i = 0; i < p->action_dim; i++) {
            float x = chunk[(size_t)t * p->A + i], y = unnorm_f32(&p->action, x, i);
            if (!isfinite(y))   /* finite stats can still overflow float32 (a std of 3e38) */
                return pi0_fail(PI0_ERR_FORMAT, "LeRobot's unnormaliser (%s, %s) turned the model's action %g at step %d, "
                                "dimension %d into %g: the action stats are too large for float32",
                                p->action_stats ? p->action_stats : "no stats file", mode_names[p->action.mode], (double)x,
                                t, i, (double)y);
            out[(size_t)t * p->action_dim + i] = y;
        }
    return PI0_OK;
}
