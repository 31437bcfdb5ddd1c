/* pi0_policy.c — the public policy API (pi0_policy_*, pi0_prepared_*): openpi's Policy.infer (docs/model.md 4.1)
 * on top of pi0_model / pi0_session: norm-stats asset selection, the robot transforms of robot.c, resize,
 * prompt format, batching of prepared observations into one pi0_infer, float64 output transforms. What π0-FAST
 * does differently (cameras, prompt, decoding, action tokens) is fast_policy.c's; the structures both share are in
 * policy.h. Image files are not decoded here (the CLI does that); no network code (the server does that). */
#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "policy.h"

pi0_status policy_output(pi0_policy *p, int b, int x_f32, const double *state, int n_state, double *out) {
    pi0_status st;
    if ((st = norm_invert(&p->ns.actions, p->quantile, p->chunk, x_f32, p->H, p->A, p->chunk)) != PI0_OK ||
        (st = norm_invert(&p->ns.state, p->quantile, state, 0, 1, n_state, p->state_rt)) != PI0_OK) {
        pi0_error_prefix("batch element %d: assets/%s/norm_stats.json", b, p->asset_id);
        return st;
    }
    robot_output(p->robot, p->chunk, p->H, p->A, p->state_rt, p->delta, out);
    for (size_t i = 0; i < (size_t)p->H * p->D; i++)
        if (!isfinite(out[i]))
            return pi0_fail(PI0_ERR_FORMAT, "batch element %d: the %s robot's output transform%s gave %g at step %zu, "
                            "dimension %zu from finite unnormalised actions", b, robot_name(p->robot),
                            p->delta ? " (the state added to delta actions)" : "", out[i], i / (size_t)p->D,
                            i % (size_t)p->D);
    return PI0_OK;
}

double policy_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static char *path_join(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = pi0_malloc(n, "path");
    if (p) snprintf(p, n, "%s/%s", a, b);
    return p;
}

/* Collects asset ids (paths relative to DIR/assets, up to 3 levels deep) that hold a norm_stats.json. */
static void find_assets(const char *root, const char *rel, int depth, char *list, size_t cap, int *count) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s%s%s", root, *rel ? "/" : "", rel);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char sub[1024], full[4096], ns[4096];
        if ((size_t)snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name) >= sizeof sub ||
            (size_t)snprintf(full, sizeof full, "%s/%s", root, sub) >= sizeof full ||
            (size_t)snprintf(ns, sizeof ns, "%s/norm_stats.json", full) >= sizeof ns) continue;
        struct stat sb;
        if (stat(full, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        if (stat(ns, &sb) == 0 && S_ISREG(sb.st_mode)) {
            size_t k = strlen(list);
            if (k + strlen(sub) + 3 < cap) snprintf(list + k, cap - k, "%s%s", k ? "\n" : "", sub);
            (*count)++;
        }
        if (depth < 3) find_assets(root, sub, depth + 1, list, cap, count);
    }
    closedir(d);
}

static pi0_status load_norm_stats(pi0_policy *p, const char *dir, const char *asset_id) {
    char *assets = path_join(dir, "assets");
    if (!assets) return PI0_ERR_NOMEM;
    pi0_status st = PI0_OK;
    char found[8192] = "";
    if (!asset_id) {
        int count = 0;
        find_assets(assets, "", 0, found, sizeof found, &count);
        if (count != 1) {
            for (char *c = found; *c; c++) if (*c == '\n') *c = ',';
            st = count == 0 ? pi0_fail(PI0_ERR_IO, "no assets/<asset_id>/norm_stats.json found (openpi checkpoints keep "
                                       "their norm stats there)")
                            : pi0_fail(PI0_ERR_ARG, "%d norm-stats folders under assets/ (%s): choose one with --asset-id",
                                       count, found);
            goto done;
        }
        asset_id = found;
    }
    if (strstr(asset_id, "..") || asset_id[0] == '/') { st = pi0_fail(PI0_ERR_ARG, "asset id '%s': expected a folder name under assets/", asset_id); goto done; }
    p->asset_id = strdup(asset_id);
    char *sdir = path_join(assets, asset_id), *path = sdir ? path_join(sdir, "norm_stats.json") : NULL;
    free(sdir);
    if (!p->asset_id || !path) { free(path); st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    st = norm_stats_load(&p->ns, path);
    const norm_vec *s = &p->ns.state, *a = &p->ns.actions;
    int need = robot_state_dim(p->robot);
    if (st == PI0_OK && s->n < need)
        st = pi0_fail(PI0_ERR_FORMAT, "%s: norm_stats.state has %d values, the %s state has %d", path, s->n, robot_name(p->robot), need);
    else if (st == PI0_OK && p->fast && s->n > need)   /* openpi's Unnormalize of the unpadded state fails to broadcast */
        st = pi0_fail(PI0_ERR_FORMAT, "%s: norm_stats.state has %d values, the %s state %d: π0-FAST does not pad the state, "
                      "and openpi cannot unnormalise it with longer stats", path, s->n, robot_name(p->robot), need);
    else if (st == PI0_OK && p->fast && a->n > p->A)
        st = pi0_fail(PI0_ERR_FORMAT, "%s: norm_stats.actions has %d values, the chunk π0-FAST's tokens decode to has %d "
                      "action dims", path, a->n, p->A);
    else if (st == PI0_OK && !p->fast && (s->n > p->A || a->n > p->A))
        st = pi0_fail(PI0_ERR_FORMAT, "%s: norm stats have %d state / %d action values, the model's action_dim is %d", path,
                      s->n, a->n, p->A);
    if (st == PI0_OK && p->quantile && (!s->q01 || !a->q01))
        st = pi0_fail(PI0_ERR_FORMAT, "%s: %s uses quantile normalisation but norm_stats.%s has no q01/q99", path,
                      p->fast ? "π0-FAST" : "π0.5", !s->q01 ? "state" : "actions");
    free(path);
done:
    free(assets);
    return st;
}

void pi0_policy_free(pi0_policy *p) {
    if (!p) return;
    pi0_session_free(p->session);
    pi0_model_free(p->model);
    pi0_tokenizer_free(p->tok);
    lerobot_pipeline_free(p->lr);
    norm_stats_free(&p->ns);
    free(p->asset_id); free(p->default_prompt);
    pi0_host_free(p->images);
    free(p->state); free(p->noise); free(p->actions); free(p->rtc_prev); free(p->rtc_w); free(p->rtc_max); free(p->rtc_exact);
    free(p->slot); free(p->order);
    free(p->image_masks); free(p->token_mask); free(p->tokens);
    free(p->chunk); free(p->state_rt);
    fast_policy_free(p);
    free(p);
}

pi0_status pi0_policy_load(pi0_policy **out, const char *dir, const pi0_policy_params *params) {
    if (!out || !dir || !params) return pi0_fail(PI0_ERR_ARG, "pi0_policy_load: NULL argument");
    *out = NULL;
    pi0_status st;
    pi0_policy *p = pi0_calloc(1, sizeof *p, "policy");
    if (!p) return PI0_ERR_NOMEM;
    if (params->config && !(p->cfg = openpi_config_find(params->config))) {
        st = pi0_fail(PI0_ERR_ARG, "unknown config '%s' (known: %s)", params->config, openpi_config_names());
        goto fail;
    }
    p->robot = params->robot ? robot_from_name(params->robot) : p->cfg ? p->cfg->robot : PI0_ROBOT_NONE;
    if (params->robot && p->robot == PI0_ROBOT_NONE) {
        st = pi0_fail(PI0_ERR_ARG, "unknown robot '%s' (expected libero, droid or aloha)", params->robot);
        goto fail;
    }
    if (p->cfg && p->robot != p->cfg->robot) {
        st = pi0_fail(PI0_ERR_ARG, "config %s is for robot %s, not %s", p->cfg->name, robot_name(p->cfg->robot), params->robot);
        goto fail;
    }
    if (!params->tokenizer) { st = pi0_fail(PI0_ERR_ARG, "a tokenizer model is required (paligemma_tokenizer.model)"); goto fail; }
    /* An Orbax checkpoint stores no horizon or prompt length: the openpi config supplies them (explicit values win);
     * openpi's PyTorch conversion writes them to config.json, which the model loader reads. A π0-FAST config sets
     * them and the action dim whatever the checkpoint: they are its tokenizers' (FASTTokenizer's max_len,
     * ExtractFASTActions' chunk shape), and a conversion without the config wrote Pi0FASTConfig's defaults. */
    pi0_model_params mp = params->model;
    char *st_path = path_join(dir, "model.safetensors");
    if (!st_path) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto fail; }
    struct stat sb;
    int fast_cfg = p->cfg && p->cfg->model == OPENPI_PI0_FAST;
    if (p->cfg && (fast_cfg || stat(st_path, &sb) != 0)) {
        if (!mp.action_horizon) mp.action_horizon = p->cfg->action_horizon;
        if (!mp.max_token_len) mp.max_token_len = p->cfg->max_token_len;
        if (!mp.action_dim) mp.action_dim = p->cfg->action_dim;
    }
    free(st_path);
    if ((st = pi0_model_load(&p->model, dir, &mp)) != PI0_OK) goto fail;
    pi0_model_info mi;
    pi0_model_get_info(p->model, &mi);
    p->fast = mi.fast;
    p->quiet = params->model.quiet;
    if (p->cfg && p->cfg->model != openpi_model_of(&mi)) {
        st = pi0_fail(PI0_ERR_ARG, "config %s is for a %s checkpoint, %s holds a %s model", p->cfg->name,
                      openpi_model_name(p->cfg->model), dir, openpi_model_name(openpi_model_of(&mi)));
        goto fail;
    }
    const char *fast_only = params->fast_tokenizer ? "a FAST tokenizer" : params->model.action_dim ? "an action dim" : NULL;
    if (!mi.fast && fast_only) {   /* the model's own action_dim is its weights' */
        st = pi0_fail(PI0_ERR_ARG, "%s holds a %s model: %s is for π0-FAST checkpoints", dir,
                      openpi_model_name(openpi_model_of(&mi)), fast_only);
        goto fail;
    }
    if (mi.fast && !params->fast_tokenizer) {
        st = pi0_fail(PI0_ERR_ARG, "%s holds a π0-FAST model, which needs the FAST action tokenizer (fast_tokenizer, "
                      "--fast-tokenizer): the directory of Hugging Face's physical-intelligence/fast, with tokenizer.json "
                      "and processor_config.json", dir);
        goto fail;
    }
    if (mi.fast && params->num_steps) {
        st = pi0_fail(PI0_ERR_ARG, "num_steps %d: %s holds a π0-FAST model, which decodes tokens and has no flow-matching "
                      "steps", params->num_steps, dir);
        goto fail;
    }
    p->pi05 = mi.pi05; p->quantile = mi.pi05 || mi.fast;   /* openpi: quantile norm whenever the model is not plain π0 */
    p->H = mi.action_horizon; p->A = mi.action_dim; p->N = mi.n_cameras; p->R = mi.image_size; p->L = mi.max_token_len;
    p->T = mi.vision.patch_size > 0 ? (mi.image_size / mi.vision.patch_size) * (mi.image_size / mi.vision.patch_size) : 0;
    int num_steps = params->num_steps;
    if (!strcmp(mi.format, "lerobot")) {   /* LeRobot's features, processors and stats replace openpi's robot transforms */
        const char *opt = p->cfg ? "an openpi config" : params->robot ? "a robot" : params->asset_id ? "an asset id"
                        : params->delta_actions ? "delta actions" : NULL;
        if (opt) {
            st = pi0_fail(PI0_ERR_ARG, "%s is a LeRobot policy: its config.json and processor files define the observation "
                          "keys, normalisation and actions, so %s does not apply", dir, opt);
            goto fail;
        }
        if (p->A > PI0_POLICY_MAX_A) {   /* the policy's per-observation state buffers (the model alone takes more) */
            st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: max_action_dim %d: the policy supports at most %d action dims", dir, p->A,
                          PI0_POLICY_MAX_A);
            goto fail;
        }
        if ((st = lerobot_pipeline_load(&p->lr, mi.root, &mi)) != PI0_OK) goto fail;
        p->metadata = p->lr->metadata;
        if (!num_steps) num_steps = p->lr->num_steps;
        p->D = p->lr->action_dim;
        if (params->default_prompt && !(p->default_prompt = strdup(params->default_prompt))) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto fail; }
        goto tokenizer;
    }
    if (p->robot == PI0_ROBOT_NONE) {
        st = pi0_fail(PI0_ERR_ARG, "a robot (libero, droid, aloha) or an openpi config name is required (%s is an openpi "
                      "checkpoint)", dir);
        goto fail;
    }
    p->D = robot_action_dim(p->robot);
    if (p->fast && (p->N != ROBOT_CAMS || p->A < p->D)) {   /* (no padding: no upper bound) */
        st = pi0_fail(PI0_ERR_SHAPE, "%s: the %s robot transforms need 3 cameras and a chunk of at least %d action dims; the "
                      "model has %d cameras and its tokens decode to %d action dims (the openpi config or the action dim "
                      "option sets them)", dir, robot_name(p->robot), p->D, p->N, p->A);
        goto fail;
    }
    if (!p->fast && (p->N != ROBOT_CAMS || p->A < p->D || p->A > PI0_POLICY_MAX_A)) {
        st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: the robot transforms need 3 cameras and %d..%d action dims, the model has %d / %d",
                      dir, p->D, PI0_POLICY_MAX_A, p->N, p->A);
        goto fail;
    }
    p->delta = params->delta_actions ? params->delta_actions > 0 : p->cfg ? p->cfg->delta : robot_default_delta(p->robot, p->pi05);
    p->discrete = p->cfg ? p->cfg->discrete_state : p->pi05 || p->fast;
    p->metadata = p->cfg ? p->cfg->metadata_json : robot_default_metadata(p->robot);
    const char *dp = params->default_prompt ? params->default_prompt : p->cfg ? p->cfg->default_prompt : NULL;
    if (dp && !(p->default_prompt = strdup(dp))) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto fail; }
    if ((st = load_norm_stats(p, mi.root, params->asset_id ? params->asset_id : p->cfg ? p->cfg->asset_id : NULL)) != PI0_OK) goto fail;
tokenizer:
    if ((st = pi0_tokenizer_load(&p->tok, params->tokenizer)) != PI0_OK) goto fail;
    p->max_batch = params->max_batch > 0 ? params->max_batch : 1;
    if (p->fast && (st = fast_policy_load(p, params->fast_tokenizer, params->tokenizer, &mi)) != PI0_OK) goto fail;
    /* (pi0_policy_run's ordering keys hold the batch index in 16 bits: the session allows 4096 at most) */
    pi0_session_params sp = {.max_batch = p->max_batch, .num_steps = num_steps,
                             .max_decoding_steps = p->fast ? FAST_POLICY_STEPS : 0};
    if ((st = pi0_session_create(&p->session, p->model, &sp)) != PI0_OK) goto fail;
    size_t B = (size_t)p->max_batch, img = (size_t)p->N * p->R * p->R * 3, ha = (size_t)p->H * p->A;
    p->images = pi0_session_host_alloc(p->session, B * img * sizeof(float));   /* page-locked for a GPU: fast uploads */
    if (!p->images) pi0_fail(PI0_ERR_NOMEM, "out of memory (%zu bytes for policy batch images)", B * img * sizeof(float));
    p->state = pi0_malloc(B * p->A * sizeof(float), "policy batch state");
    p->noise = pi0_malloc(B * ha * sizeof(float), "policy batch noise");
    p->actions = pi0_malloc(B * ha * sizeof(float), "policy batch actions");
    p->rtc_prev = pi0_malloc(B * ha * sizeof(float), "policy batch RTC leftovers");
    p->rtc_w = pi0_malloc(B * (size_t)p->H * sizeof(float), "policy batch RTC weights");
    p->rtc_max = pi0_malloc(B * sizeof(float), "policy batch RTC caps");
    p->rtc_exact = pi0_malloc(B, "policy batch RTC forms");
    p->slot = pi0_malloc(B * sizeof(int), "policy batch order");
    p->order = pi0_malloc(B * sizeof(long long), "policy batch order");
    p->image_masks = pi0_malloc(B * p->N, "policy batch masks");
    p->token_mask = pi0_malloc(B * p->L, "policy batch token mask");
    p->tokens = pi0_malloc(B * p->L * sizeof(int32_t), "policy batch tokens");
    p->chunk = pi0_malloc(ha * sizeof(double), "policy chunk");
    p->state_rt = pi0_malloc((size_t)(p->A > ROBOT_MAX_STATE ? p->A : ROBOT_MAX_STATE) * sizeof(double), "policy state");
    if (!p->images || !p->state || !p->noise || !p->actions || !p->image_masks || !p->token_mask || !p->tokens ||
        !p->chunk || !p->state_rt || !p->rtc_prev || !p->rtc_w || !p->rtc_max || !p->rtc_exact || !p->slot || !p->order) {
        st = PI0_ERR_NOMEM;
        goto fail;
    }
    pi0_rng_seed(&p->rng, (uint64_t)policy_now_ms() ^ (uint64_t)(uintptr_t)p);
    *out = p;
    return PI0_OK;
fail:
    pi0_error_prefix("policy %s", dir);
    pi0_policy_free(p);
    return st;
}

void pi0_policy_get_info(const pi0_policy *p, pi0_policy_info *info) {
    memset(info, 0, sizeof *info);
    if (!p) return;
    info->robot = p->robot;
    info->robot_name = p->lr ? "lerobot" : robot_name(p->robot);
    info->config = p->cfg ? p->cfg->name : "";
    info->action_horizon = p->lr ? p->lr->n_action_steps : p->H;
    info->lerobot = p->lr ? p->lr->summary : NULL;
    info->rtc_horizon = p->lr ? p->lr->rtc_horizon : 10;
    info->rtc_schedule = p->lr ? p->lr->rtc_schedule : PI0_RTC_LINEAR;
    info->rtc_max_weight = p->lr ? p->lr->rtc_max_weight : 10.0f;
    info->action_dim = p->D;
    info->max_batch = p->max_batch;
    info->quantile = p->quantile;
    info->delta_actions = p->delta;
    info->discrete_state = p->discrete;
    info->asset_id = p->asset_id;
    info->default_prompt = p->default_prompt;
    info->metadata_json = p->metadata;
    info->model = p->model;
    info->session = p->session;
}

pi0_status pi0_lerobot_describe(const pi0_model *m, char **text) {
    if (!m || !text) return pi0_fail(PI0_ERR_ARG, "pi0_lerobot_describe: NULL argument");
    *text = NULL;
    pi0_model_info mi;
    pi0_model_get_info(m, &mi);
    if (strcmp(mi.format, "lerobot")) return pi0_fail(PI0_ERR_ARG, "%s is not a LeRobot policy directory", mi.root);
    lerobot_pipeline *lr;
    pi0_status st = lerobot_pipeline_load(&lr, mi.root, &mi);
    if (st != PI0_OK) return st;
    *text = lr->summary;
    lr->summary = NULL;
    lerobot_pipeline_free(lr);
    return PI0_OK;
}

void pi0_prepared_free(pi0_prepared *x) {
    if (!x) return;
    free(x->images); free(x->fimages); free(x->tokens); free(x->rtc_prev); free(x->rtc_w); free(x->token_mask); free(x->noise);
    free(x);
}

/* Real-time chunking: the leftover zero-padded to (H, A) and LeRobot's prefix weights (H) */
static pi0_status copy_rtc(const pi0_policy *p, const pi0_observation *obs, pi0_prepared *x) {
    const pi0_rtc_request *r = obs->rtc;
    if (!r || !r->prev || r->n_prev == 0) return PI0_OK;
    if (r->n_prev < 0 || r->n_prev > p->H || r->delay < 0 || r->horizon < 0 || r->max_weight < 0 || !isfinite(r->max_weight))
        return pi0_fail(PI0_ERR_ARG, "real-time chunking: %d leftover rows (expected 0..%d), delay %d, horizon %d, max weight "
                        "%g (expected counts >= 0, a weight >= 0)", r->n_prev, p->H, r->delay, r->horizon, (double)r->max_weight);
    size_t ha = (size_t)p->H * p->A;
    if (!(x->rtc_prev = pi0_calloc(ha, sizeof(float), "RTC leftover")) ||
        !(x->rtc_w = pi0_malloc((size_t)p->H * sizeof(float), "RTC weights"))) return PI0_ERR_NOMEM;
    memcpy(x->rtc_prev, r->prev, (size_t)r->n_prev * p->A * sizeof(float));
    for (size_t i = 0; i < (size_t)r->n_prev * p->A; i++)
        if (!isfinite(x->rtc_prev[i])) return pi0_fail(PI0_ERR_ARG, "real-time chunking: leftover value %zu is not finite", i);
    x->rtc_max = r->max_weight > 0 ? r->max_weight : 10.0f;
    if (r->mode != PI0_RTC_OFF && r->mode != PI0_RTC_LEROBOT && r->mode != PI0_RTC_EXACT)
        return pi0_fail(PI0_ERR_ARG, "real-time chunking: mode %d: expected PI0_RTC_LEROBOT or PI0_RTC_EXACT", (int)r->mode);
    x->rtc_exact = r->mode == PI0_RTC_EXACT;
    return pi0_rtc_prefix_weights(r->schedule, r->delay, r->horizon, r->n_prev, p->H, x->rtc_w);
}

/* the flow's given start (noise) and real-time chunking's inputs */
static pi0_status copy_flow_inputs(const pi0_policy *p, const pi0_observation *obs, pi0_prepared *x) {
    if (obs->rtc && (obs->rtc->n_prev || obs->rtc->prev)) {
        pi0_status st = copy_rtc(p, obs, x);
        if (st != PI0_OK) return st;
    }
    if (!obs->noise) return PI0_OK;
    size_t n = (size_t)p->H * p->A;
    if (!(x->noise = pi0_malloc(n * sizeof(float), "prepared noise"))) return PI0_ERR_NOMEM;
    memcpy(x->noise, obs->noise, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x->noise[i])) return pi0_fail(PI0_ERR_ARG, "observation noise: value %zu is not finite", i);
    return PI0_OK;
}

/* LeRobot's preprocessor and model preprocessing (lerobot_pipeline.c): float images, float32 state */
static pi0_status prepare_lerobot(pi0_policy *p, const pi0_observation *obs, pi0_prepared **out) {
    pi0_prepared *x = pi0_calloc(1, sizeof *x, "prepared observation");
    float state[PI0_POLICY_MAX_A];
    pi0_status st = PI0_OK;
    if (!x || !(x->fimages = pi0_malloc((size_t)p->N * p->R * p->R * 3 * sizeof(float), "prepared images")) ||
        !(x->tokens = pi0_malloc((size_t)p->L * sizeof(int32_t), "prepared tokens")) ||
        !(x->token_mask = pi0_malloc((size_t)p->L, "prepared token mask"))) st = PI0_ERR_NOMEM;
    if (st == PI0_OK) {
        x->owner = p;
        x->seed = obs->seed;
        st = lerobot_prepare(p->lr, p->tok, obs, p->default_prompt, x->fimages, x->masks, state, x->tokens, x->token_mask);
    }
    for (int i = 0; st == PI0_OK && i < p->A; i++) x->state[i] = state[i];
    if (st == PI0_OK) st = copy_flow_inputs(p, obs, x);
    if (st != PI0_OK) { pi0_prepared_free(x); return st; }
    *out = x;
    return PI0_OK;
}

pi0_status pi0_policy_prepare(pi0_policy *p, const pi0_observation *obs, pi0_prepared **out) {
    if (!p || !obs || !out) return pi0_fail(PI0_ERR_ARG, "pi0_policy_prepare: NULL argument");
    *out = NULL;
    if (p->lr) return prepare_lerobot(p, obs, out);
    robot_input in;
    pi0_status st = robot_input_make(p->robot, obs, &in);
    if (st != PI0_OK) return st;
    pi0_prepared *x = pi0_calloc(1, sizeof *x, "prepared observation");
    size_t img = (size_t)p->R * p->R * 3;
    if (!x || !(x->images = pi0_calloc((size_t)p->N, img, "prepared images")) ||
        !(x->tokens = pi0_malloc((size_t)p->L * sizeof(int32_t), "prepared tokens")) ||
        !(x->token_mask = pi0_malloc((size_t)p->L, "prepared token mask"))) { st = PI0_ERR_NOMEM; goto fail; }
    x->owner = p;
    x->seed = obs->seed;
    x->n_state = in.n_state;
    /* Normalize (state only at inference), then PadStatesAndActions: float64, zero-padded to A (π0-FAST: no padding,
     * and the state goes to the prompt alone) */
    if ((st = norm_apply(&p->ns.state, p->quantile, in.state, in.n_state, x->state)) != PI0_OK) {
        pi0_error_prefix("observation state");
        goto fail;
    }
    for (int i = 0; !p->fast && i < in.n_state; i++)   /* the model takes float32: say so rather than "not finite" later */
        if (fabs(x->state[i]) > FLT_MAX) {
            st = pi0_fail(PI0_ERR_ARG, "observation state: value %d (%g) normalises to %g, out of float32 range", i,
                          in.state[i], x->state[i]);
            goto fail;
        }
    /* ResizeImages: resize_with_pad of the uint8 images; an absent camera stays black with mask 0 */
    for (int c = 0; !p->fast && c < ROBOT_CAMS; c++) {
        x->masks[c] = in.img[c] != NULL;
        if (in.img[c] && (st = pi0_image_resize_with_pad(in.img[c], in.h[c], in.w[c], p->R, x->images + c * img)) != PI0_OK) goto fail;
    }
    if (p->fast && (st = fast_policy_cameras(p, &in, x)) != PI0_OK) goto fail;
    /* InjectDefaultPrompt, then TokenizePrompt (the normalised, un-padded state for π0.5's prompt) */
    const char *prompt = obs->prompt ? obs->prompt : p->default_prompt;
    if (!prompt) {
        st = pi0_fail(PI0_ERR_ARG, "Prompt is required: the observation has no prompt and the policy has no default "
                      "prompt (set one with --default-prompt or use a config that has one)");
        goto fail;
    }
    if (p->fast) st = fast_policy_prompt(p, obs, prompt, x);
    else if ((st = pi0_tokenize_prompt(p->tok, prompt, p->discrete ? PI0_PROMPT_PI05 : PI0_PROMPT_PI0, x->state, in.n_state,
                                       p->L, x->tokens, x->token_mask, NULL)) == PI0_OK)
        st = copy_flow_inputs(p, obs, x);
    if (st != PI0_OK) goto fail;
    robot_input_free(&in);
    *out = x;
    return PI0_OK;
fail:
    robot_input_free(&in);
    pi0_prepared_free(x);
    return st;
}

static int cmp_ll(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

pi0_status pi0_policy_run(pi0_policy *p, pi0_prepared *const *batch, int n, double *actions, pi0_policy_timing *timing) {
    double t0 = policy_now_ms();
    if (!p || !batch || !actions) return pi0_fail(PI0_ERR_ARG, "pi0_policy_run: NULL argument");
    if (n < 1 || n > p->max_batch) return pi0_fail(PI0_ERR_ARG, "pi0_policy_run: batch of %d, the policy holds 1..%d", n, p->max_batch);
    size_t img = (size_t)p->N * p->R * p->R * 3, ha = (size_t)p->H * p->A;
    for (int b = 0; b < n; b++)
        if (!batch[b] || batch[b]->owner != p)
            return pi0_fail(PI0_ERR_ARG, "pi0_policy_run: batch[%d] was not prepared by this policy", b);
    if (p->fast) {
        pi0_status st = fast_policy_run(p, batch, n, actions, timing);
        if (st == PI0_OK && timing) timing->total_ms = policy_now_ms() - t0;
        return st;
    }
    /* The model runs the elements ordered by prefix length (valid cameras x tokens per image + valid prompt tokens;
     * ties in batch order): a batch of several prompts then has its equal segments next to each other, which the attention runs as
     * one launch each (bench/RESULTS.md L134), and the same requests in another order are the same model inputs
     * (one graph). Each element's own computation does not depend on its slot; the noise is still drawn in batch
     * order, and the outputs come back in batch order. */
    for (int b = 0; b < n; b++) {
        const pi0_prepared *x = batch[b];
        long long cams = 0, toks = 0;
        for (int i = 0; i < p->N; i++) cams += x->masks[i] != 0;
        for (int i = 0; i < p->L; i++) toks += x->token_mask[i] != 0;
        p->order[b] = ((cams * p->T + toks) << 16) | b;   /* (prefix < 2^40, batch < 65536: 4096 at most) */
    }
    qsort(p->order, (size_t)n, sizeof *p->order, cmp_ll);
    for (int j = 0; j < n; j++) p->slot[p->order[j] & 0xffff] = j;
    for (int b = 0; b < n; b++) {
        const pi0_prepared *x = batch[b];
        const int j = p->slot[b];
        if (x->fimages) memcpy(p->images + j * img, x->fimages, img * sizeof(float));
        else pi0_image_to_model(x->images, img, p->images + j * img);
        memcpy(p->image_masks + (size_t)j * p->N, x->masks, (size_t)p->N);
        for (int i = 0; i < p->A; i++) p->state[(size_t)j * p->A + i] = (float)x->state[i];
        memcpy(p->tokens + (size_t)j * p->L, x->tokens, (size_t)p->L * sizeof(int32_t));
        memcpy(p->token_mask + (size_t)j * p->L, x->token_mask, (size_t)p->L);
        float *nz = p->noise + j * ha;
        if (x->noise) memcpy(nz, x->noise, ha * sizeof(float));
        else {   /* fresh noise like openpi's policy RNG; reproducible when the observation has a seed */
            pi0_rng r = p->rng;
            if (x->seed) pi0_rng_seed(&r, x->seed);
            for (size_t i = 0; i < ha; i++) nz[i] = (float)pi0_rng_normal(&r);
            if (!x->seed) p->rng = r;
        }
    }
    pi0_inputs in = {.batch = n, .images = p->images, .image_masks = p->image_masks, .state = p->state,
                     .tokens = p->tokens, .token_mask = p->token_mask, .n_tokens = p->L, .noise = p->noise};
    int rtc = 0, exact = 0;
    for (int b = 0; b < n; b++) {
        rtc |= batch[b]->rtc_prev != NULL;
        exact |= batch[b]->rtc_prev && batch[b]->rtc_exact;
    }
    if (rtc) {   /* real-time chunking: samples without it get zero weights, which leave their steps unguided */
        for (int b = 0; b < n; b++) {
            const pi0_prepared *x = batch[b];
            const int j = p->slot[b];
            if (x->rtc_prev) {
                memcpy(p->rtc_prev + j * ha, x->rtc_prev, ha * sizeof(float));
                memcpy(p->rtc_w + (size_t)j * p->H, x->rtc_w, (size_t)p->H * sizeof(float));
            } else {
                memset(p->rtc_prev + j * ha, 0, ha * sizeof(float));
                memset(p->rtc_w + (size_t)j * p->H, 0, (size_t)p->H * sizeof(float));
            }
            p->rtc_max[j] = x->rtc_prev ? x->rtc_max : 10.0f;
            p->rtc_exact[j] = x->rtc_prev && x->rtc_exact;
        }
        /* one exact sample makes the batch exact (the transpose pass runs for all); the others keep LeRobot's form */
        in.rtc = exact ? PI0_RTC_EXACT : PI0_RTC_LEROBOT;
        in.rtc_exact = exact ? p->rtc_exact : NULL;
        in.rtc_prev = p->rtc_prev;
        in.rtc_weights = p->rtc_w;
        in.rtc_max_weights = p->rtc_max;
    }
    double m0 = policy_now_ms();
    pi0_status st = pi0_infer(p->session, &in, p->actions);
    double m1 = policy_now_ms();
    p->last_batch = st == PI0_OK ? n : 0;
    if (st != PI0_OK) return st;
    /* outputs: Unnormalize (actions float32 from the model, the state round trip in float64),
     * then AbsoluteActions and the robot's output transform */
    /* every chunk leaves finite: the model's own output is checked (pi0_infer), each stage after it here */
    for (int b = 0; b < n && p->lr; b++)   /* LeRobot: n_action_steps rows, unnormalised by its postprocessor */
        if ((st = lerobot_actions(p->lr, p->actions + p->slot[b] * ha, actions + (size_t)b * p->lr->n_action_steps * p->D)) != PI0_OK) {
            pi0_error_prefix("batch element %d", b);
            return st;
        }
    for (int b = 0; b < n && !p->lr; b++) {
        for (size_t i = 0; i < ha; i++) p->chunk[i] = p->actions[p->slot[b] * ha + i];
        if ((st = policy_output(p, b, 1, batch[b]->state, p->A, actions + (size_t)b * p->H * p->D)) != PI0_OK) return st;
    }
    if (timing) *timing = (pi0_policy_timing){.model_ms = m1 - m0, .total_ms = policy_now_ms() - t0};
    return PI0_OK;
}

pi0_status pi0_policy_chunk(const pi0_policy *p, int b, float *out) {
    if (!p || !out) return pi0_fail(PI0_ERR_ARG, "pi0_policy_chunk: NULL argument");
    if (b < 0 || b >= p->last_batch)
        return pi0_fail(PI0_ERR_ARG, "pi0_policy_chunk: element %d, the last run had %d", b, p->last_batch);
    memcpy(out, p->actions + (size_t)p->slot[b] * p->H * p->A, (size_t)p->H * p->A * sizeof(float));
    return PI0_OK;
}

pi0_status pi0_policy_infer(pi0_policy *p, const pi0_observation *obs, double *actions, pi0_policy_timing *timing) {
    double t0 = policy_now_ms();
    pi0_prepared *x = NULL;
    pi0_status st = pi0_policy_prepare(p, obs, &x);
    if (st == PI0_OK) st = pi0_policy_run(p, &x, 1, actions, timing);
    pi0_prepared_free(x);
    if (st == PI0_OK && timing) timing->total_ms = policy_now_ms() - t0;
    return st;
}

/* LeRobot: black images on the checkpoint's cameras (empty cameras stay absent), zero state */
static pi0_status warmup_lerobot(pi0_policy *p, int batch, const char *prompt, double *ms, double t0) {
    pi0_array *a = pi0_calloc((size_t)p->N + 1, sizeof *a, "warm-up arrays");
    uint8_t *img = pi0_calloc((size_t)p->R * p->R, 3, "warm-up image");
    float state[PI0_POLICY_MAX_A] = {0};
    pi0_prepared **x = pi0_calloc((size_t)batch, sizeof *x, "warm-up batch");
    double *act = pi0_malloc((size_t)batch * p->lr->n_action_steps * p->D * sizeof(double), "warm-up actions");
    pi0_status st = a && img && x && act ? PI0_OK : PI0_ERR_NOMEM;
    int n = 0;
    if (st == PI0_OK) {
        a[n++] = (pi0_array){.key = "observation.state", .dtype = PI0_DT_F32, .ndim = 1, .shape = {p->lr->state_dim}, .data = state};
        for (int c = 0; c < p->N; c++)
            if (!strstr(p->lr->cams[c], ".empty_camera_"))
                a[n++] = (pi0_array){.key = p->lr->cams[c], .dtype = PI0_DT_U8, .ndim = 3, .shape = {p->R, p->R, 3}, .data = img};
    }
    pi0_observation obs = {.arrays = a, .n_arrays = n, .prompt = prompt ? prompt : p->default_prompt ? NULL : "warm up", .seed = 1};
    for (int b = 0; b < batch && st == PI0_OK; b++) st = pi0_policy_prepare(p, &obs, &x[b]);
    if (st == PI0_OK) st = pi0_policy_run(p, x, batch, act, NULL);
    for (int b = 0; x && b < batch; b++) pi0_prepared_free(x[b]);
    free(a); free(img); free(x); free(act);
    if (st != PI0_OK) pi0_error_prefix("warm-up");
    if (ms) *ms = policy_now_ms() - t0;
    return st;
}

pi0_status pi0_policy_warmup(pi0_policy *p, int batch, double *ms) { return pi0_policy_warmup_prompt(p, batch, NULL, ms); }

pi0_status pi0_policy_warmup_prompt(pi0_policy *p, int batch, const char *prompt, double *ms) {
    double t0 = policy_now_ms();
    if (!p) return pi0_fail(PI0_ERR_ARG, "pi0_policy_warmup: NULL policy");
    if (batch < 1 || batch > p->max_batch)
        return pi0_fail(PI0_ERR_ARG, "pi0_policy_warmup: batch of %d, the policy holds 1..%d", batch, p->max_batch);
    /* the robot's own keys (robot.c), images already at the model's size */
    static const char *keys[][5] = {
        [PI0_ROBOT_LIBERO] = {"observation/state", "observation/image", "observation/wrist_image"},
        [PI0_ROBOT_DROID] = {"observation/joint_position", "observation/exterior_image_1_left", "observation/wrist_image_left",
                             "observation/gripper_position"},
        [PI0_ROBOT_ALOHA] = {"state", "images/cam_high", "images/cam_left_wrist", "images/cam_right_wrist"},
    };
    if (p->lr) return warmup_lerobot(p, batch, prompt, ms, t0);
    if (p->robot != PI0_ROBOT_LIBERO && p->robot != PI0_ROBOT_DROID && p->robot != PI0_ROBOT_ALOHA)
        return pi0_fail(PI0_ERR_ARG, "pi0_policy_warmup: the policy has no robot transform");
    const char *const *k = keys[p->robot];
    double state[ROBOT_MAX_STATE] = {0};
    uint8_t *img = pi0_calloc((size_t)p->R * p->R, 3, "warm-up image");
    pi0_prepared **x = pi0_calloc((size_t)batch, sizeof *x, "warm-up batch");
    double *act = pi0_malloc((size_t)batch * p->H * p->D * sizeof(double), "warm-up actions");
    pi0_status st = img && x && act ? PI0_OK : PI0_ERR_NOMEM;
    pi0_array a[5];
    int n = 0;
    int ns = p->robot == PI0_ROBOT_ALOHA ? 14 : p->robot == PI0_ROBOT_DROID ? 7 : 8;
    a[n++] = (pi0_array){.key = k[0], .dtype = PI0_DT_F64, .ndim = 1, .shape = {ns}, .data = state};
    for (int i = 1; i < 5 && k[i]; i++) {
        if (!strcmp(k[i], "observation/gripper_position"))
            a[n++] = (pi0_array){.key = k[i], .dtype = PI0_DT_F64, .ndim = 1, .shape = {1}, .data = state};
        else
            a[n++] = (pi0_array){.key = k[i], .dtype = PI0_DT_U8, .ndim = 3, .shape = {p->R, p->R, 3}, .data = img};
    }
    /* a fixed seed: the policy's own noise stream (observations without a seed) is left as it was */
    pi0_observation obs = {.arrays = a, .n_arrays = n, .prompt = prompt ? prompt : p->default_prompt ? NULL : "warm up", .seed = 1};
    for (int b = 0; b < batch && st == PI0_OK; b++) st = pi0_policy_prepare(p, &obs, &x[b]);
    p->warming = 1;   /* (π0-FAST: black images may well decode to no actions; that is no robot's chunk) */
    if (st == PI0_OK) st = pi0_policy_run(p, x, batch, act, NULL);
    p->warming = 0;
    for (int b = 0; x && b < batch; b++) pi0_prepared_free(x[b]);
    free(img);
    free(x);
    free(act);
    if (st != PI0_OK) pi0_error_prefix("warm-up");
    if (ms) *ms = policy_now_ms() - t0;
    return st;
}

pi0_status pi0_prepared_save(const pi0_prepared *x, const char *path) {
    if (!x || !path) return pi0_fail(PI0_ERR_ARG, "pi0_prepared_save: NULL argument");
    const pi0_policy *p = x->owner;
    size_t img = (size_t)p->N * p->R * p->R * 3;
    /* π0-FAST: no state (the prompt holds it) and the prompt's token_ar_mask, all 0 */
    float *images = pi0_malloc(img * sizeof(float), "images"), *state = pi0_malloc((size_t)p->A * sizeof(float), "state");
    int32_t *ar = pi0_calloc((size_t)p->L, sizeof(int32_t), "token_ar_mask");
    pi0_tensors *t = NULL;
    pi0_status st = images && state && ar ? pi0_tensors_new(&t) : PI0_ERR_NOMEM;
    if (st == PI0_OK) {
        if (x->fimages) memcpy(images, x->fimages, img * sizeof(float));
        else pi0_image_to_model(x->images, img, images);
        for (int i = 0; !p->fast && i < p->A; i++) state[i] = (float)x->state[i];
        int64_t si[5] = {1, p->N, p->R, p->R, 3}, sm[2] = {1, p->N}, ss[2] = {1, p->A}, st_[2] = {1, p->L},
                sn[3] = {1, p->H, p->A};
        st = pi0_tensors_add(t, "images", PI0_DT_F32, 5, si, images);
        if (st == PI0_OK) st = pi0_tensors_add(t, "image_masks", PI0_DT_U8, 2, sm, x->masks);
        if (st == PI0_OK && !p->fast) st = pi0_tensors_add(t, "state", PI0_DT_F32, 2, ss, state);
        if (st == PI0_OK) st = pi0_tensors_add(t, "tokens", PI0_DT_I32, 2, st_, x->tokens);
        if (st == PI0_OK) st = pi0_tensors_add(t, "token_mask", PI0_DT_U8, 2, st_, x->token_mask);
        if (st == PI0_OK && p->fast) st = pi0_tensors_add(t, "token_ar_mask", PI0_DT_I32, 2, st_, ar);
        if (st == PI0_OK && x->noise) st = pi0_tensors_add(t, "noise", PI0_DT_F32, 3, sn, x->noise);
        if (st == PI0_OK) st = pi0_tensors_save(t, path);
    }
    pi0_tensors_free(t);
    free(images); free(state); free(ar);
    return st;
}
