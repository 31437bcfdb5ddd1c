/* run.c — `pi0 run`: one observation through the whole policy (robot transform, norm stats, resize,
 * prompt, model, output transform) and the action chunk printed, as openpi's policy server returns it.
 * Observation arrays come from image files (--image KEY=FILE: JPEG/PNG; ALOHA cameras are sent CHW like
 * the real ALOHA client), a safetensors file of named arrays (--obs) and --state. Uses only pi0.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "imagefile.h"
#include "pi0.h"

#define MAX_ARRAYS 64

static void run_usage(FILE *f) {
    fprintf(f,
            "usage: pi0 run --checkpoint DIR [--config NAME | --robot libero|droid|aloha] --tokenizer FILE\n"
            "               [--fast-tokenizer DIR] [--action-dim N]   (π0-FAST: the FAST tokenizer, required; the chunk's width)\n"
            "               [--image KEY=FILE ...] [--obs FILE.safetensors] [--state v1,v2,...] [--prompt TEXT]\n"
            "               [--noise FILE.safetensors] [--seed N] [--json] [--dump-inputs FILE.safetensors]\n"
            "               [--asset-id ID] [--default-prompt TEXT] [--delta-actions on|off] [--max-token-len N]\n"
            "               [--action-horizon N] [--precision bf16|int8|fp8 [--quant-stages vision,prefix,expert]]\n"
            "               [--steps N] [--backend cpu|cuda] [--device N] [--threads N]\n"
            "               [--save-chunk FILE] [--rtc-prev FILE --rtc-delay D --rtc-horizon S --rtc-schedule zeros|ones|linear|exp\n"
            "                --rtc-max-weight W --rtc-mode lerobot|exact]   (real-time chunking: --save-chunk writes the model-space\n"
            "                chunk 'chunk' [H, A];\n"
            "                --rtc-prev reads the leftover 'rtc_prev' [n, A], e.g. the saved chunk's unexecuted rows; defaults 0,\n"
            "                10, linear, 10 as LeRobot's RTCConfig)\n"
            "KEY is the robot's request key: LIBERO observation/image, observation/wrist_image; DROID\n"
            "observation/exterior_image_1_left, observation/wrist_image_left; ALOHA images/cam_high,\n"
            "images/cam_left_wrist, images/cam_right_wrist, images/cam_low. --state fills the robot's state key(s)\n"
            "(DROID: 7 joints then the gripper). --obs adds arrays named by key (any shape / dtype the robot takes).\n"
            "DIR: openpi's PyTorch conversion (model.safetensors + config.json) or an Orbax checkpoint (params/), whose\n"
            "horizon and prompt length come from --config (or --action-horizon / --max-token-len), or a LeRobot policy\n"
            "directory (config.json with \"type\", policy_preprocessor.json, ...): then no --config / --robot; KEYs are its\n"
            "features (observation.images.<camera>, observation.state), --prompt is the task, and the chunk has its\n"
            "n_action_steps rows. A π0-FAST checkpoint decodes action tokens (greedy, up to 256) that --fast-tokenizer\n"
            "(the directory of Hugging Face's physical-intelligence/fast, or its tokenizer.json) turns into the chunk;\n"
            "a pi0_fast_* config sets its horizon, action dim and prompt length; no --noise, --steps or real-time chunking.\n"
            "Configs: pi0_aloha pi05_aloha pi0_aloha_towel pi0_aloha_tupperware pi0_aloha_pen_uncap pi05_aloha_pen_uncap\n"
            "pi0_aloha_sim pi0_libero pi05_libero pi0_droid pi05_droid pi05_droid_finetune pi05_full_droid_finetune\n"
            "pi05_droid_jointpos_polaris pi0_droid_jointpos_polaris pi0_droid_jointpos_100k_polaris pi0_fast_droid\n"
            "pi0_fast_libero pi0_fast_full_droid_finetune pi0_fast_droid_jointpos_polaris\n");
}

typedef struct {
    pi0_array a[MAX_ARRAYS];
    void *owned[MAX_ARRAYS];
    char *keys[MAX_ARRAYS];
    int n;
} arrays;

static int add(arrays *s, const char *key, pi0_dtype dt, int ndim, const int64_t *shape, const void *data, void *owned) {
    if (s->n == MAX_ARRAYS) { fprintf(stderr, "pi0 run: more than %d observation arrays\n", MAX_ARRAYS); free(owned); return 0; }
    pi0_array *a = &s->a[s->n];
    s->keys[s->n] = strdup(key);
    s->owned[s->n] = owned;
    *a = (pi0_array){.key = s->keys[s->n], .dtype = dt, .ndim = ndim, .data = data};
    for (int i = 0; i < ndim; i++) a->shape[i] = shape[i];
    s->n++;
    return 1;
}

static int add_image(arrays *s, const char *spec, int chw) {
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec || !eq[1]) { fprintf(stderr, "pi0 run: --image: expected KEY=FILE, got '%s'\n", spec); return 0; }
    char key[256], err[1024];
    snprintf(key, sizeof key, "%.*s", (int)(eq - spec), spec);
    uint8_t *rgb;
    int h, w;
    if (imagefile_load(eq + 1, &rgb, &h, &w, err, sizeof err) != 0) { fprintf(stderr, "pi0 run: --image %s: %s\n", key, err); return 0; }
    if (chw) {   /* the ALOHA client sends [3, H, W] */
        uint8_t *t = malloc((size_t)h * w * 3);
        if (!t) { free(rgb); fprintf(stderr, "pi0 run: out of memory\n"); return 0; }
        for (size_t p = 0; p < (size_t)h * w; p++)
            for (int c = 0; c < 3; c++) t[(size_t)c * h * w + p] = rgb[p * 3 + c];
        free(rgb);
        rgb = t;
    }
    int64_t shape[3] = {chw ? 3 : h, chw ? h : w, chw ? w : 3};
    return add(s, key, PI0_DT_U8, 3, shape, rgb, rgb);
}

static int parse_values(const char *arg, double *v, int cap) {
    int n = 0;
    for (const char *p = arg; *p;) {
        char *end;
        errno = 0;
        double x = strtod(p, &end);
        if (end == p || errno || n == cap) { fprintf(stderr, "pi0 run: --state: expected up to %d numbers separated by commas, got '%s'\n", cap, arg); return -1; }
        v[n++] = x;
        p = end;
        if (*p == ',') p++;
        else if (*p) { fprintf(stderr, "pi0 run: --state: unexpected '%c'\n", *p); return -1; }
    }
    return n;
}

static int add_state(arrays *s, const char *robot, const char *arg) {
    double v[64];
    int n = parse_values(arg, v, 64);
    if (n < 0) return 0;
    if (!strcmp(robot, "droid")) {
        if (n != 8) { fprintf(stderr, "pi0 run: --state: DROID takes 8 values (7 joint positions, then the gripper), got %d\n", n); return 0; }
        double *j = malloc(7 * sizeof *j), *g = malloc(sizeof *g);
        if (!j || !g) { free(j); free(g); return 0; }
        memcpy(j, v, 7 * sizeof *j);
        g[0] = v[7];
        int64_t s7 = 7, s1 = 1;
        return add(s, "observation/joint_position", PI0_DT_F64, 1, &s7, j, j) &&
               add(s, "observation/gripper_position", PI0_DT_F64, 1, &s1, g, g);
    }
    if (!strcmp(robot, "lerobot")) {   /* float32, as LeRobot's robots and datasets give it */
        float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
        if (!f) return 0;
        for (int i = 0; i < n; i++) f[i] = (float)v[i];
        int64_t sn = n;
        return add(s, "observation.state", PI0_DT_F32, 1, &sn, f, f);
    }
    double *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    if (!d) return 0;
    memcpy(d, v, (size_t)n * sizeof *d);
    int64_t sn = n;
    return add(s, !strcmp(robot, "aloha") ? "state" : "observation/state", PI0_DT_F64, 1, &sn, d, d);
}

static int add_obs_file(arrays *s, pi0_tensors *t) {
    for (int i = 0; i < pi0_tensors_count(t); i++) {
        const char *name = pi0_tensors_name(t, i);
        pi0_dtype dt;
        int nd;
        int64_t shape[8];
        const void *data;
        if (pi0_tensors_get(t, name, &dt, &nd, shape, &data) != PI0_OK) return cli_fail("--obs");
        if (nd > 4) { fprintf(stderr, "pi0 run: --obs: '%s' has %d dimensions, at most 4\n", name, nd); return 0; }
        if (!add(s, name, dt, nd, shape, data, NULL)) return 0;
    }
    return 1;
}

static float *read_noise(const char *path, int H, int A) {
    pi0_tensors *t = NULL;
    pi0_dtype dt;
    int nd;
    int64_t sh[8];
    const void *data;
    float *out = NULL;
    if (pi0_tensors_open(&t, path) != PI0_OK || pi0_tensors_get(t, "noise", &dt, &nd, sh, &data) != PI0_OK) {
        cli_fail("--noise");
    } else if (dt != PI0_DT_F32 || !((nd == 2 && sh[0] == H && sh[1] == A) || (nd == 3 && sh[0] == 1 && sh[1] == H && sh[2] == A))) {
        fprintf(stderr, "pi0 run: --noise %s: expected tensor 'noise' F32 [%d, %d] or [1, %d, %d]\n", path, H, A, H, A);
    } else if ((out = malloc((size_t)H * A * sizeof *out))) {
        memcpy(out, data, (size_t)H * A * sizeof *out);
    }
    pi0_tensors_free(t);
    return out;
}

static void print_actions(const double *a, int H, int D, int json, const pi0_policy_timing *tm, const pi0_policy_info *pi) {
    if (json) {
        printf("{\"actions\": [");
        for (int t = 0; t < H; t++) {
            printf("%s[", t ? ", " : "");
            for (int i = 0; i < D; i++) printf("%s%.17g", i ? ", " : "", a[(size_t)t * D + i]);
            printf("]");
        }
        printf("], \"policy_timing\": {\"infer_ms\": %.3f}, \"server_timing\": {\"infer_ms\": %.3f}}\n", tm->model_ms, tm->total_ms);
        return;
    }
    printf("actions [%d, %d] (%s%s%s, float64, unnormalised)  model %.1f ms, policy %.1f ms%s\n", H, D, pi->robot_name,
           *pi->config ? ", config " : "", pi->config, tm->model_ms, tm->total_ms,
           tm->zero_chunks ? "  (π0-FAST: no actions decoded; openpi's zero chunk, unnormalised)" : "");
    for (int t = 0; t < H; t++) {
        for (int i = 0; i < D; i++) printf("%s%11.6f", i ? " " : "", a[(size_t)t * D + i]);
        printf("\n");
    }
}

int cmd_run(int argc, char **argv) {
    pi0_policy_params pp = {0};
    const char *ckpt = NULL, *obs_file = NULL, *state = NULL, *prompt = NULL, *noise_file = NULL, *dump = NULL;
    const char *rtc_file = NULL, *chunk_file = NULL, *rtc_schedule = "linear";
    long long rtc_delay = 0, rtc_horizon = 10;
    double rtc_max = 10;
    pi0_rtc_mode rtc_mode = PI0_RTC_LEROBOT;
    const char *images[MAX_ARRAYS];
    int n_images = 0, json = 0, rc = 1;
    long long v, seed = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (!strcmp(a, "--json")) { json = 1; takes = 0; }
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { run_usage(stdout); return 0; }
        else if (!val) { fprintf(stderr, "pi0 run: %s needs a value (or is unknown)\n", a); run_usage(stderr); return 2; }
        else if (!strcmp(a, "--checkpoint")) ckpt = val;
        else if (!strcmp(a, "--config")) pp.config = val;
        else if (!strcmp(a, "--robot")) pp.robot = val;
        else if (!strcmp(a, "--tokenizer")) pp.tokenizer = val;
        else if (!strcmp(a, "--fast-tokenizer")) pp.fast_tokenizer = val;
        else if (!strcmp(a, "--asset-id")) pp.asset_id = val;
        else if (!strcmp(a, "--default-prompt")) pp.default_prompt = val;
        else if (!strcmp(a, "--delta-actions")) {
            if (strcmp(val, "on") && strcmp(val, "off")) { fprintf(stderr, "pi0 run: --delta-actions: expected on or off\n"); return 2; }
            pp.delta_actions = !strcmp(val, "on") ? 1 : -1;
        } else if (!strcmp(a, "--max-token-len")) { if (!cli_parse_int(a, val, 1, 4096, &v)) return 2; pp.model.max_token_len = (int)v; }
        else if (!strcmp(a, "--action-horizon")) { if (!cli_parse_int(a, val, 1, 4096, &v)) return 2; pp.model.action_horizon = (int)v; }
        else if (!strcmp(a, "--action-dim")) { if (!cli_parse_int(a, val, 1, 4096, &v)) return 2; pp.model.action_dim = (int)v; }
        else if (!strcmp(a, "--steps")) { if (!cli_parse_int(a, val, 1, 1000, &v)) return 2; pp.num_steps = (int)v; }
        else if (!strcmp(a, "--device")) { if (!cli_parse_int(a, val, 0, 64, &v)) return 2; pp.model.device = (int)v; }
        else if (!strcmp(a, "--threads")) { if (!cli_parse_int(a, val, 0, 1024, &v)) return 2; pp.model.n_threads = (int)v; }
        else if (!strcmp(a, "--seed")) { if (!cli_parse_int(a, val, 0, (long long)1 << 62, &seed)) return 2; }
        else if (!strcmp(a, "--backend")) { if (!cli_backend(val, &pp.model.backend)) return 2; }
        else if (!strcmp(a, "--precision")) { if (!cli_precision(val, &pp.model.precision)) return 2; }
        else if (!strcmp(a, "--quant-stages")) { if (!cli_stages(val, &pp.model.quant_stages)) return 2; }
        else if (!strcmp(a, "--image")) { if (n_images == MAX_ARRAYS) { fprintf(stderr, "pi0 run: too many --image\n"); return 2; } images[n_images++] = val; }
        else if (!strcmp(a, "--obs")) obs_file = val;
        else if (!strcmp(a, "--state")) state = val;
        else if (!strcmp(a, "--prompt")) prompt = val;
        else if (!strcmp(a, "--noise")) noise_file = val;
        else if (!strcmp(a, "--dump-inputs")) dump = val;
        else if (!strcmp(a, "--rtc-prev")) rtc_file = val;
        else if (!strcmp(a, "--save-chunk")) chunk_file = val;
        else if (!strcmp(a, "--rtc-delay")) { if (!cli_parse_int(a, val, 0, 4096, &rtc_delay)) return 2; }
        else if (!strcmp(a, "--rtc-horizon")) { if (!cli_parse_int(a, val, 0, 4096, &rtc_horizon)) return 2; }
        else if (!strcmp(a, "--rtc-schedule")) rtc_schedule = val;
        else if (!strcmp(a, "--rtc-mode")) {
            if (!strcmp(val, "exact")) rtc_mode = PI0_RTC_EXACT;
            else if (!strcmp(val, "lerobot")) rtc_mode = PI0_RTC_LEROBOT;
            else { fprintf(stderr, "pi0 run: --rtc-mode: expected lerobot or exact\n"); return 2; }
        }
        else if (!strcmp(a, "--rtc-max-weight")) {
            char *end;
            rtc_max = strtod(val, &end);
            if (*end || !(rtc_max > 0) || !isfinite(rtc_max)) { fprintf(stderr, "pi0 run: --rtc-max-weight: expected a number > 0\n"); return 2; }
        }
        else { fprintf(stderr, "pi0 run: unknown option '%s'\n", a); run_usage(stderr); return 2; }
        i += takes;
    }
    if (!ckpt || !pp.tokenizer) {   /* --config / --robot: the policy says which it needs (a LeRobot directory: neither) */
        fprintf(stderr, "pi0 run: --checkpoint and --tokenizer are required\n");
        run_usage(stderr);
        return 2;
    }
    pi0_policy *p = NULL;
    pi0_tensors *obs_t = NULL;
    pi0_prepared *x = NULL;
    arrays s = {0};
    float *noise = NULL, *chunk = NULL;
    double *actions = NULL;
    pi0_tensors *rtc_t = NULL;
    pi0_rtc_request rtc = {0};
    static const char *const schedules[] = {"zeros", "ones", "linear", "exp"};
    int sched = -1;
    for (int k = 0; k < 4; k++) if (!strcmp(rtc_schedule, schedules[k])) sched = k;
    if (sched < 0) { fprintf(stderr, "pi0 run: --rtc-schedule: expected zeros, ones, linear or exp\n"); return 2; }
    if (pi0_policy_load(&p, ckpt, &pp) != PI0_OK) { cli_fail("loading the policy"); goto done; }
    pi0_policy_info pi;
    pi0_policy_get_info(p, &pi);
    pi0_model_info mi;
    pi0_model_get_info(pi.model, &mi);
    for (int i = 0; i < n_images; i++)
        if (!add_image(&s, images[i], pi.robot == PI0_ROBOT_ALOHA)) goto done;
    if (state && !add_state(&s, pi.robot_name, state)) goto done;
    if (obs_file && (pi0_tensors_open(&obs_t, obs_file) != PI0_OK ? !cli_fail("--obs") : !add_obs_file(&s, obs_t))) goto done;
    if (noise_file && !(noise = read_noise(noise_file, mi.action_horizon, mi.action_dim))) goto done;
    pi0_observation obs = {.arrays = s.a, .n_arrays = s.n, .prompt = prompt, .noise = noise, .seed = (uint64_t)seed};
    if (rtc_file) {   /* real-time chunking: the leftover in model space, tensor rtc_prev [n, A] */
        pi0_dtype dt;
        int nd;
        int64_t sh[8];
        const void *data;
        if (pi0_tensors_open(&rtc_t, rtc_file) != PI0_OK || pi0_tensors_get(rtc_t, "rtc_prev", &dt, &nd, sh, &data) != PI0_OK) {
            cli_fail("--rtc-prev");
            goto done;
        }
        if (dt != PI0_DT_F32 || nd != 2 || sh[0] > mi.action_horizon || sh[1] != mi.action_dim) {
            fprintf(stderr, "pi0 run: --rtc-prev %s: expected tensor 'rtc_prev' F32 [n <= %d, %d]\n", rtc_file, mi.action_horizon,
                    mi.action_dim);
            goto done;
        }
        rtc = (pi0_rtc_request){.prev = data, .n_prev = (int)sh[0], .delay = (int)rtc_delay, .horizon = (int)rtc_horizon,
                                .schedule = (pi0_rtc_schedule)sched, .max_weight = (float)rtc_max, .mode = rtc_mode};
        obs.rtc = &rtc;
    }
    if (!(actions = malloc((size_t)pi.action_horizon * pi.action_dim * sizeof *actions))) goto done;
    pi0_policy_timing tm;
    if (pi0_policy_prepare(p, &obs, &x) != PI0_OK) { cli_fail("preparing the observation"); goto done; }
    if (dump && pi0_prepared_save(x, dump) != PI0_OK) { cli_fail("--dump-inputs"); goto done; }
    if (pi0_policy_run(p, &x, 1, actions, &tm) != PI0_OK) { cli_fail("inference"); goto done; }
    if (chunk_file) {   /* the model-space chunk, for a later --rtc-prev */
        size_t n = (size_t)mi.action_horizon * mi.action_dim;
        int64_t sh[2] = {mi.action_horizon, mi.action_dim};
        pi0_tensors *ct = NULL;
        if (!(chunk = malloc(n * sizeof(float))) || pi0_policy_chunk(p, 0, chunk) != PI0_OK || pi0_tensors_new(&ct) != PI0_OK ||
            pi0_tensors_add(ct, "chunk", PI0_DT_F32, 2, sh, chunk) != PI0_OK || pi0_tensors_save(ct, chunk_file) != PI0_OK) {
            pi0_tensors_free(ct);
            cli_fail("--save-chunk");
            goto done;
        }
        pi0_tensors_free(ct);
    }
    print_actions(actions, pi.action_horizon, pi.action_dim, json, &tm, &pi);
    rc = 0;
done:
    for (int i = 0; i < s.n; i++) { free(s.owned[i]); free(s.keys[i]); }
    pi0_prepared_free(x);
    pi0_tensors_free(obs_t);
    pi0_tensors_free(rtc_t);
    pi0_policy_free(p);
    free(noise);
    free(chunk);
    free(actions);
    return rc;
}
