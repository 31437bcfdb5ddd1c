/* check.c — `pi0 check-precision`: how far the 8-bit precision moves a checkpoint's actions, next to how far one
 * intensity level of camera noise moves them at the backend's own precision (bf16 on a GPU, fp32 on the CPU), on the user's observations (or random ones). Every run uses the
 * same observations and the same flow noise, so the differences are the precision's alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pi0.h"

/* splitmix64: the observations and the image noise, reproducible from --seed */
static uint64_t next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double uniform(uint64_t *s) { return (double)(next(s) >> 11) * 0x1.0p-53; }
static double normal(uint64_t *s) { return sqrt(-2.0 * log(1.0 - uniform(s))) * cos(6.283185307179586 * uniform(s)); }

typedef struct {
    const char *ckpt;
    pi0_backend_kind backend;
    int device, threads, batch;
    uint64_t seed;
} check_opts;

typedef struct {
    pi0_inputs in;       /* the observations, B of them, with fixed flow noise */
    float *images, *state, *noise;
    int32_t *tokens;
    uint8_t *tmask, *imask;
    pi0_tensors *file;   /* --obs: the inputs' own arrays */
    pi0_inputs_buf *buf;
} obs;

/* Actions [B, H, A] of the checkpoint at one precision on the observations; NULL after a message (*unsupported set, when
 * given, where the backend refused the precision at load: fp8 on a GPU without it). */
static float *run(const check_opts *o, pi0_precision p, unsigned stages, const pi0_inputs *in, size_t n, int *unsupported) {
    pi0_model *m = NULL;
    pi0_session *s = NULL;
    float *act = malloc(n * sizeof *act);
    pi0_model_params mp = {.backend = o->backend, .device = o->device, .n_threads = o->threads, .quiet = 1,
                           .precision = p, .quant_stages = stages};
    pi0_model_info mi;
    pi0_status st = act ? pi0_model_load(&m, o->ckpt, &mp) : PI0_ERR_NOMEM;
    int ok = st == PI0_OK;
    if (unsupported && st == PI0_ERR_UNSUPPORTED) {
        *unsupported = 1;
        fprintf(stderr, "check-precision: %s\n", pi0_last_error());
        free(act);
        return NULL;
    }
    if (ok) {
        pi0_model_get_info(m, &mi);
        ok = pi0_session_create(&s, m, &(pi0_session_params){.max_batch = in->batch}) == PI0_OK &&
             pi0_infer(s, in, act) == PI0_OK;
    }
    if (!ok) {
        cli_fail("check-precision");
        free(act);
        act = NULL;
    }
    pi0_session_free(s);
    pi0_model_free(m);
    return act;
}

/* Relative L2 of a against the reference r, and the smallest cosine of one sample's [H, A] against its reference (cos
 * of the whole in *cos_all). */
static double deviation(const float *a, const float *r, int B, size_t per, double *cos_min, double *cos_all) {
    double d = 0, n = 0, ab = 0, aa = 0, rr = 0;
    *cos_min = 1;
    for (int b = 0; b < B; b++) {
        double sab = 0, saa = 0, srr = 0;
        for (size_t i = (size_t)b * per; i < (size_t)(b + 1) * per; i++) {
            d += ((double)a[i] - r[i]) * ((double)a[i] - r[i]);
            n += (double)r[i] * r[i];
            sab += (double)a[i] * r[i];
            saa += (double)a[i] * a[i];
            srr += (double)r[i] * r[i];
        }
        double c = saa > 0 && srr > 0 ? sab / sqrt(saa * srr) : saa == srr ? 1 : 0;
        if (c < *cos_min) *cos_min = c;
        ab += sab; aa += saa; rr += srr;
    }
    *cos_all = aa > 0 && rr > 0 ? ab / sqrt(aa * rr) : aa == rr ? 1 : 0;
    return n > 0 ? sqrt(d / n) : sqrt(d);
}

/* Random observations in the model's ranges: images uniform in [-1, 1] (every camera present), a prompt of
 * 20 valid tokens, a state of 8 normal values, and the flow noise. */
static int random_obs(obs *ob, const pi0_model_info *mi, int B, uint64_t seed) {
    uint64_t r = seed;
    int N = mi->n_cameras, R = mi->image_size, L = mi->max_token_len, H = mi->action_horizon, A = mi->action_dim;
    size_t ni = (size_t)B * N * R * R * 3;
    ob->images = malloc(ni * sizeof(float));
    ob->state = calloc((size_t)B * A, sizeof(float));
    ob->noise = malloc((size_t)B * H * A * sizeof(float));
    ob->tokens = calloc((size_t)B * L, sizeof(int32_t));
    ob->tmask = calloc((size_t)B * L, 1);
    if (!ob->images || !ob->state || !ob->noise || !ob->tokens || !ob->tmask) return 0;
    for (size_t i = 0; i < ni; i++) ob->images[i] = (float)(2 * uniform(&r) - 1);
    for (int i = 0; i < B * A; i++) ob->state[i] = i % A < 8 ? (float)normal(&r) : 0.0f;
    for (int i = 0; i < B * H * A; i++) ob->noise[i] = (float)normal(&r);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < L && t < 20; t++) {
            ob->tokens[(size_t)b * L + t] = (int32_t)(2 + next(&r) % (uint64_t)(mi->vocab_size - 2));
            ob->tmask[(size_t)b * L + t] = 1;
        }
    ob->in = (pi0_inputs){.batch = B, .images = ob->images, .state = ob->state, .tokens = ob->tokens,
                          .token_mask = ob->tmask, .n_tokens = L, .noise = ob->noise};
    return 1;
}

int cmd_check_precision(int argc, char **argv) {
    check_opts o = {.backend = PI0_BACKEND_CPU, .batch = 4, .seed = 1};
    const char *obs_path = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x;
        if (!strcmp(a, "--checkpoint") && v) o.ckpt = argv[++i];
        else if (!strcmp(a, "--obs") && v) obs_path = argv[++i];
        else if (!strcmp(a, "--backend") && v) { if (!cli_backend(argv[++i], &o.backend)) return 2; }
        else if (!strcmp(a, "--device")) { if (!cli_parse_int(a, v, 0, 64, &x)) return 2; o.device = (int)x; i++; }
        else if (!strcmp(a, "--threads")) { if (!cli_parse_int(a, v, 0, 1024, &x)) return 2; o.threads = (int)x; i++; }
        else if (!strcmp(a, "--batch")) { if (!cli_parse_int(a, v, 1, 64, &x)) return 2; o.batch = (int)x; i++; }
        else if (!strcmp(a, "--seed")) { if (!cli_parse_int(a, v, 0, INT64_MAX, &x)) return 2; o.seed = (uint64_t)x; i++; }
        else { fprintf(stderr, "pi0 check-precision: unknown or incomplete option '%s'\n", a); return 2; }
    }
    if (!o.ckpt) { fprintf(stderr, "pi0 check-precision: --checkpoint is required\n"); return 2; }
    int rc = 1;
    obs ob;
    memset(&ob, 0, sizeof ob);
    float *ref = NULL, *noisy = NULL, *img2 = NULL;
    pi0_model *m = NULL;
    if (pi0_model_load(&m, o.ckpt, &(pi0_model_params){.quiet = 1}) != PI0_OK) return cli_fail("loading the checkpoint");
    pi0_model_info mi;
    pi0_model_get_info(m, &mi);
    if (obs_path) {   /* model-level inputs as `pi0 infer` reads them; their noise if they hold one, else the seed's */
        if (pi0_tensors_open(&ob.file, obs_path) != PI0_OK ||
            pi0_inputs_from_tensors(m, ob.file, obs_path, &ob.in, &ob.buf) != PI0_OK) {
            rc = cli_fail("reading --obs");
            goto done;
        }
        if (!ob.in.noise) ob.in.seed = o.seed;
    } else if (!random_obs(&ob, &mi, o.batch, o.seed)) {
        fprintf(stderr, "pi0: out of memory\n");
        goto done;
    }
    pi0_model_free(m);
    m = NULL;
    int B = ob.in.batch;
    size_t per = (size_t)mi.action_horizon * mi.action_dim, n = (size_t)B * per;
    printf("checkpoint %s (%s), %d observation(s) %s, backend %s\n", o.ckpt, mi.pi05 ? "pi05" : "pi0", B,
           obs_path ? obs_path : "(random)", o.backend == PI0_BACKEND_CUDA ? "cuda" : "cpu");
    if (!(ref = run(&o, PI0_PRECISION_BF16, 0, &ob.in, n, NULL))) goto done;
    /* one intensity level (2/255 in [-1, 1]) up or down on every pixel of every camera, clamped to the range */
    size_t ni = (size_t)B * mi.n_cameras * mi.image_size * mi.image_size * 3;
    if (!(img2 = malloc(ni * sizeof *img2))) { fprintf(stderr, "pi0: out of memory\n"); goto done; }
    uint64_t r = o.seed ^ 0x5851f42d4c957f2dull;
    for (size_t i = 0; i < ni; i++) {
        float v = ob.in.images[i] + (next(&r) & 1 ? 2.0f : -2.0f) / 255.0f;
        img2[i] = v > 1.0f ? 1.0f : v < -1.0f ? -1.0f : v;
    }
    pi0_inputs in2 = ob.in;
    in2.images = img2;
    if (!(noisy = run(&o, PI0_PRECISION_BF16, 0, &in2, n, NULL))) goto done;
    double cmin, call, scale = deviation(noisy, ref, B, per, &cmin, &call);
    printf("%-26s %11s %12s %12s  %s\n", "run", "rel_l2", "cos (all)", "cos (min)", "verdict");
    printf("%-26s %11.3e %12.6f %12.6f  (the noise scale)\n",
           o.backend == PI0_BACKEND_CUDA ? "bf16, +-1 level on images" : "fp32, +-1 level on images", scale, call, cmin);
    /* fp8 has no expert path (docs/precision.md 8): its runs are vision, prefix and both */
    static const struct { const char *name; pi0_precision p; unsigned stages; } runs[] = {
        {"int8 vision", PI0_PRECISION_INT8, PI0_STAGE_VISION}, {"int8 prefix", PI0_PRECISION_INT8, PI0_STAGE_PREFIX},
        {"int8 expert", PI0_PRECISION_INT8, PI0_STAGE_EXPERT}, {"int8 all stages", PI0_PRECISION_INT8, PI0_STAGE_ALL},
        {"fp8 vision", PI0_PRECISION_FP8, PI0_STAGE_VISION}, {"fp8 prefix", PI0_PRECISION_FP8, PI0_STAGE_PREFIX},
        {"fp8 vision,prefix", PI0_PRECISION_FP8, PI0_STAGE_VISION | PI0_STAGE_PREFIX}};
    unsigned ok_stages = 0, all_ok = 0, f8_ok = 0;
    int f8_unsupported = 0;
    for (size_t k = 0; k < sizeof runs / sizeof *runs; k++) {
        int f8 = runs[k].p == PI0_PRECISION_FP8;
        if (f8 && f8_unsupported) continue;
        float *q = run(&o, runs[k].p, runs[k].stages, &ob.in, n, f8 ? &f8_unsupported : NULL);
        if (!q && f8_unsupported) { printf("%-26s (this GPU has no FP8: int8 only)\n", "fp8"); continue; }
        if (!q) goto done;
        double dev = deviation(q, ref, B, per, &cmin, &call);
        int noise_ok = dev <= scale, peer = call >= 0.999 && cmin >= 0.995;
        printf("%-26s %11.3e %12.6f %12.6f  %s (%.1fx the noise scale)\n", runs[k].name, dev, call, cmin,
               noise_ok ? "within sensor noise" : peer ? "peer level" : "not recommended", scale > 0 ? dev / scale : 0.0);
        if ((noise_ok || peer) && f8) {
            if (runs[k].stages == (PI0_STAGE_VISION | PI0_STAGE_PREFIX) || !f8_ok) f8_ok = runs[k].stages;
        } else if (noise_ok || peer) {   /* fp8: both stages, else the first that passed alone */
            if (runs[k].stages == PI0_STAGE_ALL) all_ok = 1;
            else ok_stages |= runs[k].stages;
        }
        free(q);
    }
    /* fp8's line (it covers vision and prefix at most, so int8 keeps the final one), then the options line: every stage
     * in int8 if all of them together passed, else the stages that passed alone */
    if (f8_ok)
        printf("fp8 alternative (on GPUs from sm_89 on): --precision fp8%s\n",
               f8_ok == (PI0_STAGE_VISION | PI0_STAGE_PREFIX) ? "" : f8_ok == PI0_STAGE_VISION ? " --quant-stages vision"
                                                                                       : " --quant-stages prefix");
    unsigned use = all_ok ? PI0_STAGE_ALL : ok_stages;
    if (!use) printf("options: --precision bf16   (no stage's int8 run passed)\n");
    else if (use == PI0_STAGE_ALL) printf("options: --precision int8\n");
    else
        printf("options: --precision int8 --quant-stages %s%s%s%s%s   (stages that passed alone; their combination was "
               "not run)\n", use & PI0_STAGE_VISION ? "vision" : "", use & PI0_STAGE_VISION && use & ~PI0_STAGE_VISION ? "," : "",
               use & PI0_STAGE_PREFIX ? "prefix" : "", use & PI0_STAGE_PREFIX && use & PI0_STAGE_EXPERT ? "," : "",
               use & PI0_STAGE_EXPERT ? "expert" : "");
    printf("random weights cannot say whether 8-bit is safe for a trained policy: run this on your checkpoint and your "
           "observations (--obs)\n");
    rc = 0;
done:
    pi0_model_free(m);
    free(ref); free(noisy); free(img2);
    free(ob.images); free(ob.state); free(ob.noise); free(ob.tokens); free(ob.tmask); free(ob.imask);
    pi0_inputs_buf_free(ob.buf);
    pi0_tensors_free(ob.file);
    return rc;
}
