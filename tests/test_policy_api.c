/* test_policy_api.c — the public policy API (pi0_policy_*) on the tiny fixtures: info per config, a
 * batched run equal to single runs bit for bit, seeded noise, ownership and batch-size checks, load-time
 * errors (configs, robots, model type, norm-stats folders and lengths) and observation errors that the
 * end-to-end script (tests/policy_e2e.py) does not reach through the CLI: float images outside [0, 1],
 * duplicate keys, bad dtypes, absurd sizes, NaN noise, HWC ALOHA images (accepted, same as CHW).
 * Values against openpi are checked by policy_e2e.py; this file checks behaviour.
 * Usage: test_policy_api WORKDIR TOKENIZER.model (run.sh trains the tokenizer). */
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pi0.h"
#include "test.h"

static const char *work, *tok;

static void write_stats(const char *path, int ns, int na, int quantiles) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "{\"norm_stats\": {");
    for (int k = 0; k < 2; k++) {
        int n = k ? na : ns;
        fprintf(f, "%s\"%s\": {\"mean\": [", k ? ", " : "", k ? "actions" : "state");
        for (int i = 0; i < n; i++) fprintf(f, "%s%g", i ? ", " : "", 0.1 * i - 0.3);
        fprintf(f, "], \"std\": [");
        for (int i = 0; i < n; i++) fprintf(f, "%s%g", i ? ", " : "", 0.5 + 0.05 * i);
        if (quantiles) {
            fprintf(f, "], \"q01\": [");
            for (int i = 0; i < n; i++) fprintf(f, "%s%g", i ? ", " : "", -1.0 - 0.1 * i);
            fprintf(f, "], \"q99\": [");
            for (int i = 0; i < n; i++) fprintf(f, "%s%g", i ? ", " : "", 1.0 + 0.07 * i);
        }
        fprintf(f, "]}");
    }
    fprintf(f, "}}\n");
    fclose(f);
}

/* WORK/name: links to a fixture's weights and config, plus assets/<asset>/norm_stats.json */
static const char *make_dir(const char *name, const char *fixture, const char *asset, int ns, int na, int quantiles) {
    static char dirs[16][512];
    static int k;
    char *d = dirs[k++ % 16], p[1024], cwd[512];
    snprintf(d, 512, "%s/%s", work, name);
    mkdir(work, 0755);
    mkdir(d, 0755);
    if (!getcwd(cwd, sizeof cwd)) return d;
    const char *files[] = {"model.safetensors", "config.json"};
    for (int i = 0; i < 2; i++) {
        char src[1024];
        snprintf(src, sizeof src, "%s/tests/fixtures/%s/%s", cwd, fixture, files[i]);
        snprintf(p, sizeof p, "%s/%s", d, files[i]);
        unlink(p);
        if (symlink(src, p) != 0) perror(p);
    }
    if (asset) {
        char a[600];
        snprintf(p, sizeof p, "%s/assets", d);
        mkdir(p, 0755);
        snprintf(a, sizeof a, "%s", asset);
        for (char *c = a; *c; c++)   /* nested asset ids ("physical-intelligence/libero") */
            if (*c == '/') { *c = 0; snprintf(p, sizeof p, "%s/assets/%s", d, a); mkdir(p, 0755); *c = '/'; }
        snprintf(p, sizeof p, "%s/assets/%s", d, a);
        mkdir(p, 0755);
        snprintf(p, sizeof p, "%s/assets/%s/norm_stats.json", d, a);
        write_stats(p, ns, na, quantiles);
    }
    return d;
}

static uint8_t img_a[32 * 40 * 3], img_b[20 * 20 * 3], img_chw[3 * 30 * 24], img_hwc[30 * 24 * 3];

/* A LIBERO observation; state values shifted by `shift` so observations differ. */
typedef struct { pi0_array a[4]; double state[8]; } libero_obs;
static pi0_observation libero(libero_obs *o, double shift, const char *prompt, const float *noise, uint64_t seed) {
    for (int i = 0; i < 8; i++) o->state[i] = 0.1 * i + shift;
    o->a[0] = (pi0_array){.key = "observation/image", .dtype = PI0_DT_U8, .ndim = 3, .shape = {32, 40, 3}, .data = img_a};
    o->a[1] = (pi0_array){.key = "observation/wrist_image", .dtype = PI0_DT_U8, .ndim = 3, .shape = {20, 20, 3}, .data = img_b};
    o->a[2] = (pi0_array){.key = "observation/state", .dtype = PI0_DT_F64, .ndim = 1, .shape = {8}, .data = o->state};
    o->a[3] = (pi0_array){.key = "extra/ignored", .dtype = PI0_DT_BOOL, .ndim = 1, .shape = {1}, .data = img_b};
    return (pi0_observation){.arrays = o->a, .n_arrays = 4, .prompt = prompt, .noise = noise, .seed = seed};
}

static pi0_status load(pi0_policy **p, const char *dir, const char *config, const char *robot, int max_batch) {
    return pi0_policy_load(p, dir, &(pi0_policy_params){.config = config, .robot = robot, .tokenizer = tok,
                                                         .max_batch = max_batch, .model = {.quiet = 1, .max_token_len = 24}});
}

static pi0_status prep_err(pi0_policy *p, pi0_observation *o) {
    pi0_prepared *x = NULL;
    pi0_status st = pi0_policy_prepare(p, o, &x);
    pi0_prepared_free(x);
    return st;
}

int main(int argc, char **argv) {
    if (argc < 3) { printf("usage: test_policy_api WORKDIR TOKENIZER.model\n"); return 2; }
    work = argv[1]; tok = argv[2];
    for (size_t i = 0; i < sizeof img_a; i++) img_a[i] = (uint8_t)(i * 7 + 3);
    for (size_t i = 0; i < sizeof img_b; i++) img_b[i] = (uint8_t)(i * 13 + 1);
    for (int c = 0; c < 3; c++)
        for (int p = 0; p < 30 * 24; p++) img_chw[c * 720 + p] = img_hwc[p * 3 + c] = (uint8_t)(p * 5 + c * 40);

    const char *lib = make_dir("libero", "tiny-pi0", "physical-intelligence/libero", 8, 7, 1);
    pi0_policy *p = NULL, *p1 = NULL;
    pi0_status st = load(&p, lib, "pi0_libero", NULL, 3);
    CHECK(st == PI0_OK, "load pi0_libero: %s", pi0_last_error());
    if (st != PI0_OK) return test_summary("test_policy_api");
    pi0_policy_info pi;
    pi0_policy_get_info(p, &pi);
    CHECK(pi.robot == PI0_ROBOT_LIBERO && pi.action_horizon == 5 && pi.action_dim == 7 && pi.delta_actions == 1 &&
          !pi.quantile && !pi.discrete_state && !strcmp(pi.metadata_json, "{}") && !strcmp(pi.asset_id, "physical-intelligence/libero") &&
          pi.max_batch == 3 && !pi.default_prompt, "pi0_libero info (H %d, D %d, delta %d)", pi.action_horizon, pi.action_dim, pi.delta_actions);

    /* a batch of 3 equals three single runs, bit for bit (the CPU backend is batch-split invariant) */
    static float noise[3][5 * 32];
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < 5 * 32; i++) noise[b][i] = (float)sin(0.37 * i + b);
    libero_obs lo[3];
    pi0_observation obs[3] = {libero(&lo[0], 0.0, "pick up the fork", noise[0], 0), libero(&lo[1], 0.5, "open the drawer", noise[1], 0),
                              libero(&lo[2], -0.3, "", noise[2], 0)};
    pi0_prepared *x[3] = {0};
    int ok = 1;
    for (int b = 0; b < 3; b++) ok &= pi0_policy_prepare(p, &obs[b], &x[b]) == PI0_OK;
    CHECK(ok, "prepare 3 observations (one with an empty prompt, one with an unknown key): %s", pi0_last_error());
    double batch[3 * 5 * 7], single[5 * 7];
    pi0_policy_timing tm = {0};
    CHECK(ok && pi0_policy_run(p, x, 3, batch, &tm) == PI0_OK && tm.model_ms > 0 && tm.total_ms >= tm.model_ms,
          "batched run of 3: %s", pi0_last_error());
    for (int b = 0; b < 3 && ok; b++) {
        CHECK(pi0_policy_infer(p, &obs[b], single, NULL) == PI0_OK && !memcmp(single, batch + b * 35, sizeof single),
              "batch element %d == single run, bit for bit", b);
    }
    /* the model runs the elements ordered by prompt length ("" first here): pi0_policy_chunk(b) is still element b's */
    static float chunks[3][5 * 32], one[5 * 32];
    CHECK(ok && pi0_policy_run(p, x, 3, batch, NULL) == PI0_OK, "batched run of 3 again: %s", pi0_last_error());
    for (int b = 0; b < 3 && ok; b++) CHECK(pi0_policy_chunk(p, b, chunks[b]) == PI0_OK, "chunk %d of the batch", b);
    for (int b = 0; b < 3 && ok; b++)
        CHECK(pi0_policy_infer(p, &obs[b], single, NULL) == PI0_OK && pi0_policy_chunk(p, 0, one) == PI0_OK &&
              !memcmp(one, chunks[b], sizeof one), "pi0_policy_chunk(%d) of the batch == its single run's chunk", b);
    CHECK(pi0_policy_run(p, x, 0, batch, NULL) == PI0_ERR_ARG && pi0_policy_run(p, x, 4, batch, NULL) == PI0_ERR_ARG,
          "batch sizes 0 and 4 (> max_batch 3) refused");
    { /* seeded elements keep their own noise in a batch the model runs in another order: [long, short] == singles */
        libero_obs lu[2];
        pi0_observation u[2] = {libero(&lu[0], 0.1, "pick up the fork and the knife", NULL, 7),
                                libero(&lu[1], -0.2, "go", NULL, 8)};
        pi0_prepared *y[2] = {0};
        double ub[3 * 35], us[2][35];
        int uok = pi0_policy_prepare(p, &u[0], &y[0]) == PI0_OK && pi0_policy_prepare(p, &u[1], &y[1]) == PI0_OK &&
                  pi0_policy_run(p, y, 2, ub, NULL) == PI0_OK && pi0_policy_infer(p, &u[0], us[0], NULL) == PI0_OK &&
                  pi0_policy_infer(p, &u[1], us[1], NULL) == PI0_OK;
        CHECK(uok && !memcmp(ub, us[0], sizeof us[0]) && !memcmp(ub + 35, us[1], sizeof us[1]),
              "seeded batch [long, short] == its single runs: %s", uok ? "" : pi0_last_error());
        pi0_prepared_free(y[0]);
        pi0_prepared_free(y[1]);
    }

    { /* real-time chunking in a batch (a server batches the requests of several robots): each request keeps its own
       * form's arithmetic, so its actions are those it gets alone, bit for bit, whatever forms share its batch */
        static float prev[4 * 32];
        for (int i = 0; i < 4 * 32; i++) prev[i] = (float)cos(0.23 * i);
        pi0_rtc_request rl = {.prev = prev, .n_prev = 4, .delay = 2, .horizon = 4, .schedule = PI0_RTC_LINEAR,
                              .mode = PI0_RTC_LEROBOT}, re = rl;
        re.mode = PI0_RTC_EXACT;
        const pi0_rtc_request *forms[3] = {&rl, &re, NULL};
        const char *fname[3] = {"LeRobot's form", "exact", "no RTC"};
        libero_obs lr[4];
        pi0_observation ro[4];
        pi0_prepared *rx[4] = {0};
        double alone[4][35];
        int rok = 1;
        for (int f = 0; f < 4; f++) {   /* the three forms, and request 0 in the exact form (it must differ) */
            ro[f] = libero(&lr[f], 0.2 * (f % 3), f % 3 == 1 ? "pick up the fork" : "go", noise[f % 3], 0);
            ro[f].rtc = f < 3 ? forms[f] : &re;
            rok = rok && pi0_policy_prepare(p, &ro[f], &rx[f]) == PI0_OK &&
                  pi0_policy_run(p, &rx[f], 1, alone[f], NULL) == PI0_OK;
        }
        CHECK(rok && memcmp(alone[0], alone[3], sizeof alone[0]), "RTC requests alone; LeRobot's form and the exact one "
              "differ: %s", rok ? "" : pi0_last_error());
        static const int mixes[][4] = {{2, 0, 1}, {2, 1, 0}, {2, 2, 1}, {2, 1, 2}, {2, 0, 2},   /* {n, forms...} */
                                       {3, 0, 1, 2}, {3, 2, 0, 1}};
        for (size_t m = 0; rok && m < sizeof mixes / sizeof mixes[0]; m++) {
            int n = mixes[m][0];
            pi0_prepared *bx[3];
            double out[3 * 35];
            char what[96] = "";
            for (int j = 0; j < n; j++) {
                bx[j] = rx[mixes[m][1 + j]];
                snprintf(what + strlen(what), sizeof what - strlen(what), "%s%s", j ? ", " : "", fname[mixes[m][1 + j]]);
            }
            int run_ok = pi0_policy_run(p, bx, n, out, NULL) == PI0_OK;
            for (int j = 0; j < n && run_ok; j++) {
                const double *want = alone[mixes[m][1 + j]];
                double d = 0;
                for (int i = 0; i < 35; i++) d = fmax(d, fabs(out[j * 35 + i] - want[i]));
                CHECK(!memcmp(out + j * 35, want, sizeof alone[0]), "batch [%s]: element %d (%s) == its run alone, bit "
                      "for bit (max abs difference %.1e)", what, j, fname[mixes[m][1 + j]], d);
            }
            CHECK(run_ok, "batch [%s]: %s", what, pi0_last_error());
        }
        for (int f = 0; f < 4; f++) pi0_prepared_free(rx[f]);
    }

    /* seeded noise reproducible, other seeds differ; unseeded draws differ between calls */
    libero_obs ls;
    pi0_observation s5 = libero(&ls, 0.2, "stack", NULL, 5);
    double a1[35], a2[35], a3[35];
    pi0_policy_infer(p, &s5, a1, NULL);
    pi0_policy_infer(p, &s5, a2, NULL);
    s5.seed = 6;
    pi0_policy_infer(p, &s5, a3, NULL);
    CHECK(!memcmp(a1, a2, sizeof a1) && memcmp(a1, a3, sizeof a1), "seed 5 twice equal, seed 6 differs");
    s5.seed = 0;
    pi0_policy_infer(p, &s5, a1, NULL);
    pi0_policy_infer(p, &s5, a2, NULL);
    CHECK(memcmp(a1, a2, sizeof a1) != 0, "no noise and no seed: fresh noise per call");

    /* warm-up (pi0_policy_warmup): batches of 1 and 3 of synthetic observations; a warmed-up policy answers a seeded
     * observation as a fresh one does (the warm-up's own noise is seeded, so the policy's stream is not drawn from) */
    pi0_policy *pw = NULL, *pf = NULL;
    double wms = 0;
    CHECK(load(&pw, lib, "pi0_libero", NULL, 3) == PI0_OK && load(&pf, lib, "pi0_libero", NULL, 3) == PI0_OK,
          "two more pi0_libero policies: %s", pi0_last_error());
    CHECK(pw && pi0_policy_warmup(pw, 1, &wms) == PI0_OK && wms > 0 && pi0_policy_warmup(pw, 3, NULL) == PI0_OK,
          "warm-up, batches 1 and 3: %s", pi0_last_error());
    CHECK(pw && pi0_policy_warmup_prompt(pw, 2, "pick up the fork and the knife", &wms) == PI0_OK && wms > 0 &&
          pi0_policy_warmup_prompt(pw, 4, "x", NULL) == PI0_ERR_ARG, "warm-up with a prompt: %s", pi0_last_error());
    CHECK(pw && pi0_policy_warmup(pw, 0, NULL) == PI0_ERR_ARG && pi0_policy_warmup(pw, 4, NULL) == PI0_ERR_ARG &&
          strstr(pi0_last_error(), "batch of 4, the policy holds 1..3") && pi0_policy_warmup(NULL, 1, NULL) == PI0_ERR_ARG,
          "warm-up batch sizes 0 and 4 (> max_batch 3) and a NULL policy refused: %s", pi0_last_error());
    s5.seed = 5;
    CHECK(pw && pf && pi0_policy_infer(pw, &s5, a1, NULL) == PI0_OK && pi0_policy_infer(pf, &s5, a2, NULL) == PI0_OK &&
          !memcmp(a1, a2, sizeof a1), "after a warm-up, a seeded call gives the actions of a fresh policy");
    pi0_policy_free(pw);
    pi0_policy_free(pf);

    /* observation errors */
    libero_obs le;
    pi0_observation e = libero(&le, 0, "x", NULL, 1);
    float fimg[32 * 40 * 3];
    for (int i = 0; i < 32 * 40 * 3; i++) fimg[i] = (float)(i % 100) / 100.0f;
    fimg[77] = 1.5f;
    le.a[0] = (pi0_array){.key = "observation/image", .dtype = PI0_DT_F32, .ndim = 3, .shape = {32, 40, 3}, .data = fimg};
    CHECK(prep_err(p, &e) == PI0_ERR_ARG && strstr(pi0_last_error(), "outside [0, 1]"), "float image value 1.5: %s", pi0_last_error());
    fimg[77] = NAN;
    CHECK(prep_err(p, &e) == PI0_ERR_ARG && strstr(pi0_last_error(), "observation/image"), "float image NaN: %s", pi0_last_error());
    e = libero(&le, 0, "x", NULL, 1);
    le.a[3] = le.a[2];
    CHECK(prep_err(p, &e) == PI0_ERR_ARG && strstr(pi0_last_error(), "given twice"), "duplicate key: %s", pi0_last_error());
    e = libero(&le, 0, "x", NULL, 1);
    le.a[2].dtype = PI0_DT_BOOL;
    CHECK(prep_err(p, &e) == PI0_ERR_SHAPE && strstr(pi0_last_error(), "BOOL [8]"), "bool state: %s", pi0_last_error());
    e = libero(&le, 0, "x", NULL, 1);
    le.a[0].ndim = 2;
    CHECK(prep_err(p, &e) == PI0_ERR_SHAPE && strstr(pi0_last_error(), "expected an image"), "2-D image: %s", pi0_last_error());
    e = libero(&le, 0, "x", NULL, 1);
    le.a[0].shape[0] = 9000;
    CHECK(prep_err(p, &e) == PI0_ERR_SHAPE && strstr(pi0_last_error(), "1..8192"), "9000-pixel side: %s", pi0_last_error());
    e = libero(&le, 0, "x", NULL, 1);
    le.a[0].shape[0] = 1; le.a[0].shape[1] = 1000;   /* 3000 bytes: within img_a */
    CHECK(prep_err(p, &e) == PI0_ERR_ARG && strstr(pi0_last_error(), "too thin"), "1 x 1000 image: %s", pi0_last_error());
    e = libero(&le, 0, "x", NULL, 1);
    le.state[3] = 1e300;   /* finite in float64, not in float32 */
    CHECK(prep_err(p, &e) == PI0_ERR_ARG && strstr(pi0_last_error(), "out of float32 range"), "state 1e300: %s", pi0_last_error());
    float bad_noise[5 * 32] = {0};
    bad_noise[17] = INFINITY;
    e = libero(&le, 0, "x", bad_noise, 1);
    CHECK(prep_err(p, &e) == PI0_ERR_ARG && strstr(pi0_last_error(), "noise"), "infinite noise: %s", pi0_last_error());
    e = libero(&le, 0, "x", NULL, 1);
    e.n_arrays = -1;
    CHECK(prep_err(p, &e) == PI0_ERR_ARG, "negative array count refused");

    /* a prepared observation belongs to its policy */
    CHECK(load(&p1, lib, NULL, "libero", 1) == PI0_OK, "second policy (--robot libero): %s", pi0_last_error());
    CHECK(pi0_policy_run(p1, x, 1, batch, NULL) == PI0_ERR_ARG && strstr(pi0_last_error(), "not prepared by this policy"),
          "prepared of another policy refused");
    for (int b = 0; b < 3; b++) pi0_prepared_free(x[b]);
    pi0_policy_free(p1); p1 = NULL;
    /* more steps than the session's rows (the time terms of all steps are computed in one product) */
    CHECK(pi0_policy_load(&p1, lib, &(pi0_policy_params){.config = "pi0_libero", .tokenizer = tok, .num_steps = 300,
                                                           .model = {.quiet = 1}}) == PI0_OK &&
          pi0_policy_infer(p1, &obs[0], single, NULL) == PI0_OK && isfinite(single[0]), "300 steps: %s", pi0_last_error());
    pi0_policy_free(p1); p1 = NULL;
    pi0_policy_free(p); p = NULL;

    /* ALOHA: HWC images accepted and equal to CHW (openpi itself only takes CHW); metadata and defaults */
    const char *alo = make_dir("aloha", "tiny-pi0", "trossen", 14, 14, 0);
    CHECK(load(&p, alo, "pi0_aloha_towel", NULL, 1) == PI0_OK, "load pi0_aloha_towel: %s", pi0_last_error());
    CHECK(p && pi0_policy_warmup(p, 1, NULL) == PI0_OK, "warm-up of an ALOHA policy (its keys, default prompt): %s",
          pi0_last_error());
    if (p) {
        pi0_policy_get_info(p, &pi);
        CHECK(pi.action_dim == 14 && pi.delta_actions && pi.default_prompt && !strcmp(pi.default_prompt, "fold the towel") &&
              strstr(pi.metadata_json, "reset_pose"), "pi0_aloha_towel info");
        double st14[14];
        for (int i = 0; i < 14; i++) st14[i] = 0.05 * i;
        pi0_array arr[2] = {{.key = "state", .dtype = PI0_DT_F64, .ndim = 1, .shape = {14}, .data = st14},
                            {.key = "images/cam_high", .dtype = PI0_DT_U8, .ndim = 3, .shape = {3, 30, 24}, .data = img_chw}};
        pi0_observation ao = {.arrays = arr, .n_arrays = 2, .noise = noise[0]};
        double chw[5 * 14], hwc[5 * 14];
        CHECK(pi0_policy_infer(p, &ao, chw, NULL) == PI0_OK, "ALOHA CHW with the config's default prompt: %s", pi0_last_error());
        arr[1] = (pi0_array){.key = "images/cam_high", .dtype = PI0_DT_U8, .ndim = 3, .shape = {30, 24, 3}, .data = img_hwc};
        CHECK(pi0_policy_infer(p, &ao, hwc, NULL) == PI0_OK && !memcmp(chw, hwc, sizeof chw), "ALOHA HWC == CHW");
        pi0_policy_free(p); p = NULL;
    }

    /* DROID warm-up: its split state keys, π0.5's state in the prompt, no default prompt */
    CHECK(load(&p, make_dir("droidw", "tiny-pi05", "droid", 8, 8, 1), "pi05_droid", NULL, 2) == PI0_OK &&
          pi0_policy_warmup(p, 2, NULL) == PI0_OK, "warm-up of a pi05_droid policy, batch 2: %s", pi0_last_error());
    pi0_policy_free(p); p = NULL;

    /* load-time errors */
    CHECK(load(&p, lib, "pi0_nonsense", NULL, 1) == PI0_ERR_ARG && strstr(pi0_last_error(), "unknown config 'pi0_nonsense'") &&
          strstr(pi0_last_error(), "pi05_droid"), "unknown config: %s", pi0_last_error());
    CHECK(load(&p, lib, "pi0_libero", "aloha", 1) == PI0_ERR_ARG && strstr(pi0_last_error(), "is for robot libero"),
          "config / robot conflict: %s", pi0_last_error());
    CHECK(load(&p, lib, NULL, "ur5", 1) == PI0_ERR_ARG && strstr(pi0_last_error(), "unknown robot 'ur5'"), "unknown robot: %s", pi0_last_error());
    CHECK(load(&p, lib, NULL, NULL, 1) == PI0_ERR_ARG && strstr(pi0_last_error(), "is required"), "no robot: %s", pi0_last_error());
    CHECK(load(&p, lib, "pi05_libero", NULL, 1) == PI0_ERR_ARG && strstr(pi0_last_error(), "π0.5 checkpoint"),
          "pi05 config on a π0 checkpoint: %s", pi0_last_error());
    CHECK(pi0_policy_load(&p, lib, &(pi0_policy_params){.robot = "libero"}) == PI0_ERR_ARG && strstr(pi0_last_error(), "tokenizer"),
          "no tokenizer: %s", pi0_last_error());
    CHECK(pi0_policy_load(&p, lib, &(pi0_policy_params){.robot = "libero", .tokenizer = "/nonexistent.model"}) == PI0_ERR_IO &&
          strstr(pi0_last_error(), "/nonexistent.model"), "missing tokenizer file: %s", pi0_last_error());
    CHECK(load(&p, make_dir("short", "tiny-pi0", "droid", 7, 8, 0), NULL, "droid", 1) == PI0_ERR_FORMAT &&
          strstr(pi0_last_error(), "norm_stats.state has 7 values, the droid state has 8"), "state stats too short: %s", pi0_last_error());
    CHECK(load(&p, make_dir("long", "tiny-pi0", "droid", 8, 40, 0), NULL, "droid", 1) == PI0_ERR_FORMAT &&
          strstr(pi0_last_error(), "action_dim is 32"), "action stats longer than 32: %s", pi0_last_error());
    CHECK(load(&p, make_dir("none", "tiny-pi0", NULL, 0, 0, 0), NULL, "droid", 1) == PI0_ERR_IO &&
          strstr(pi0_last_error(), "no assets/"), "no norm stats: %s", pi0_last_error());
    CHECK(load(&p, make_dir("noq", "tiny-pi05", "droid", 8, 8, 0), "pi05_droid", NULL, 1) == PI0_ERR_FORMAT &&
          strstr(pi0_last_error(), "no q01/q99"), "π0.5 stats without quantiles: %s", pi0_last_error());
    CHECK(load(&p, lib, "pi0_droid", NULL, 1) == PI0_ERR_IO && strstr(pi0_last_error(), "assets/droid/norm_stats.json"),
          "config's asset folder missing: %s", pi0_last_error());
    CHECK(pi0_policy_load(&p, lib, &(pi0_policy_params){.robot = "libero", .tokenizer = tok, .asset_id = "../libero"}) == PI0_ERR_ARG,
          "asset id with '..' refused");
    CHECK(p == NULL, "failed loads leave *out NULL");

    /* finite stats whose unnormalised actions overflow: an error naming the stage, never inf returned as a success */
    for (int stage = 0; stage < 2; stage++) {
        const char *d = make_dir(stage ? "huge_delta" : "huge_std", "tiny-pi0", "physical-intelligence/libero", 8, 7, 0);
        char path[1024];
        snprintf(path, sizeof path, "%s/assets/physical-intelligence/libero/norm_stats.json", d);
        FILE *f = fopen(path, "w");
        /* stage 0: actions = a * 1.7e308 + 1.7e308 overflow for a > 0.06; stage 1: each action unnormalises to about
         * 1e308 and the state (1.7e308, through a mean and std of 1e308) is added to the delta dims: 2.7e308 */
        const char *am = stage ? "1e308" : "1.7e308", *as = stage ? "1" : "1.7e308", *sm = stage ? "1e308" : "0",
                   *ss = stage ? "1e308" : "1";
        if (f) {
            fprintf(f, "{\"norm_stats\": {\"state\": {\"mean\": [%s,%s,%s,%s,%s,%s,%s,%s], \"std\": [%s,%s,%s,%s,%s,%s,%s,%s]}, "
                    "\"actions\": {\"mean\": [%s,%s,%s,%s,%s,%s,%s], \"std\": [%s,%s,%s,%s,%s,%s,%s]}}}\n",
                    sm, sm, sm, sm, sm, sm, sm, sm, ss, ss, ss, ss, ss, ss, ss, ss, am, am, am, am, am, am, am, as, as, as, as,
                    as, as, as);
            fclose(f);
        }
        st = load(&p, d, "pi0_libero", NULL, 1);
        CHECK(st == PI0_OK, "load with huge stats (stage %d): %s", stage, pi0_last_error());
        libero_obs ho;
        pi0_observation o = libero(&ho, 0.0, "pick", noise[0], 0);
        for (int i = 0; i < 8 && stage; i++) ho.state[i] = 1.7e308;
        double out[5 * 7];
        const char *want = stage ? "the libero robot's output transform (the state added to delta actions)" :
                                   "assets/physical-intelligence/libero/norm_stats.json: unnormalising";
        CHECK(st == PI0_OK && pi0_policy_infer(p, &o, out, NULL) == PI0_ERR_FORMAT && strstr(pi0_last_error(), want),
              "overflowing %s refused: %s", stage ? "absolute actions" : "unnormalisation", pi0_last_error());
        pi0_policy_free(p);
        p = NULL;
    }
    return test_summary("test_policy_api");
}
