/* test_fast_model.c — π0-FAST's model on the CPU (docs/model.md 7): the golden tokens of tests/fixtures/tiny-pi0-fast
 * (an independent float64 restatement of openpi's Pi0FAST.sample_actions, tools/reference/pi0_fast_ref.py); a sample's
 * tokens do not depend on its batch neighbours; sampling is reproducible from the seed; how a π0-FAST checkpoint is
 * recognised; and every refusal (missing or bad prefix-LM mask, the wrong entry point, bad decode parameters), in the
 * API and in `pi0 infer`. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "pi0.h"
#include "test.h"
#include "util.h"
#include "weights.h"

#define FIX "tests/fixtures/tiny-pi0-fast"
static char tmp[] = "/tmp/pi0-fast-XXXXXX";
static const char *PI0 = "build/pi0";

#define EXPECT_ERR(call, code, needle)                                                                             \
    do {                                                                                                           \
        pi0_status st_ = (call);                                                                                   \
        CHECK(st_ == (code) && strstr(pi0_last_error(), needle), "%s: got %s '%s', want %s containing '%s'", #call, \
              pi0_status_str(st_), pi0_last_error(), pi0_status_str(code), needle);                                 \
    } while (0)

/* Decodes the inputs of `file` (fixture format) with m; tokens [B, n] (caller frees). */
static int32_t *decode_file(pi0_model *m, const char *file, int n, int *B_out, int *run) {
    pi0_tensors *t = NULL;
    pi0_inputs_buf *ib = NULL;
    pi0_session *s = NULL;
    pi0_inputs in;
    int32_t *tok = NULL;
    if (pi0_tensors_open(&t, file) != PI0_OK || pi0_inputs_from_tensors(m, t, file, &in, &ib) != PI0_OK ||
        pi0_session_create(&s, m, &(pi0_session_params){.max_batch = in.batch, .max_decoding_steps = n}) != PI0_OK ||
        !(tok = malloc((size_t)in.batch * n * 4)) ||
        pi0_generate(s, &in, &(pi0_decode_params){.max_decoding_steps = n}, tok, run) != PI0_OK) {
        printf("  %s: %s\n", file, pi0_last_error());
        free(tok);
        tok = NULL;
    } else {
        *B_out = in.batch;
    }
    pi0_session_free(s);
    pi0_inputs_buf_free(ib);
    pi0_tensors_free(t);
    return tok;
}

/* Every case of the fixture directory: output_tokens equal, step for step. */
static void test_golden(void) {
    pi0_model *m = NULL;
    if (pi0_model_load(&m, FIX, &(pi0_model_params){.quiet = 1}) != PI0_OK) {
        CHECK(0, "load %s: %s", FIX, pi0_last_error());
        return;
    }
    pi0_model_info info;
    pi0_model_get_info(m, &info);
    CHECK(info.fast == 1 && info.action_expert.width == 0, "%s: fast %d, expert width %d", FIX, info.fast,
          info.action_expert.width);
    static const char *cases[] = {"b1", "b1-masked", "b2", "b1-ar", "b2-eos"};   /* tests/fixtures/tiny-pi0-fast/README.md */
    int ncases = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const char *name = cases[ci];
        char in_p[256], out_p[256];
        snprintf(in_p, sizeof in_p, FIX "/%s.in.safetensors", name);
        snprintf(out_p, sizeof out_p, FIX "/%s.out.safetensors", name);
        pi0_tensors *exp = NULL;
        pi0_dtype dt;
        int nd;
        int64_t shape[8];
        const void *want = NULL;
        if (pi0_tensors_open(&exp, out_p) != PI0_OK ||
            pi0_tensors_get(exp, "output_tokens", &dt, &nd, shape, &want) != PI0_OK || dt != PI0_DT_I32 || nd != 2) {
            CHECK(0, "%s: output_tokens I32 [B, N]: %s", out_p, pi0_last_error());
            pi0_tensors_free(exp);
            continue;
        }
        int B = 0, run = 0, n = (int)shape[1];
        int32_t *got = decode_file(m, in_p, n, &B, &run);
        int same = got && B == shape[0], first = -1;
        for (int i = 0; same && i < B * n; i++)
            if (got[i] != ((const int32_t *)want)[i]) { same = 0; first = i; }
        printf("golden %-24s B=%d N=%d: %d steps run, %s\n", name, B, n, run, same ? "tokens equal" : "DIFFER");
        CHECK(same, "%s: tokens differ from the reference (first at sample %d step %d: %d, want %d)", name,
              first < 0 ? -1 : first / n, first < 0 ? -1 : first % n, first < 0 || !got ? -1 : got[first],
              first < 0 ? -1 : ((const int32_t *)want)[first]);
        free(got);
        pi0_tensors_free(exp);
        ncases++;
    }
    CHECK(ncases == 5, "%s: %d of 5 cases read", FIX, ncases);
    pi0_model_free(m);
}

/* A tiny π0-FAST checkpoint from the engine's generator, and inputs for it. */
static pi0_config cfg;
static char gen_dir[256];

static int make_checkpoint(void) {
    snprintf(gen_dir, sizeof gen_dir, "%s/gen", tmp);
    char p[300];
    if (config_from_variant(&cfg, "tiny-pi0-fast") != PI0_OK || mkdir(gen_dir, 0755)) return 0;
    snprintf(p, sizeof p, "%s/model.safetensors", gen_dir);
    if (weights_generate(&cfg, p, 5, PI0_DT_BF16) != PI0_OK) return 0;
    char *json = config_to_json(&cfg);
    snprintf(p, sizeof p, "%s/config.json", gen_dir);
    FILE *f = fopen(p, "w");
    int ok = json && f && fputs(json, f) >= 0;
    if (f) fclose(f);
    free(json);
    return ok;
}

typedef struct {
    float *img;
    int32_t *tok, *ar;
    uint8_t *tm, im[12];
    pi0_inputs in;
} fast_in;

/* Sample b: prompt of 8 - 3b tokens; camera `masked_cam` of sample 0 masked (-1: none). */
static void make_inputs(fast_in *x, int B, int masked_cam, uint64_t seed) {
    int N = cfg.n_cameras, R = cfg.vis.image_size, L = cfg.max_token_len;
    pi0_rng r, rt;   /* two streams: sample 0's pixels and tokens do not depend on B */
    pi0_rng_seed(&r, seed);
    pi0_rng_seed(&rt, seed + 1000);
    x->img = malloc((size_t)B * N * R * R * 3 * 4);
    x->tok = calloc((size_t)B * L, 4);
    x->ar = calloc((size_t)B * L, 4);
    x->tm = calloc((size_t)B * L, 1);
    for (size_t i = 0; i < (size_t)B * N * R * R * 3; i++) x->img[i] = (float)(2 * pi0_rng_uniform(&r) - 1);
    for (int i = 0; i < B * N; i++) x->im[i] = !(i == masked_cam);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < 8 - 3 * b; j++) {
            x->tm[b * L + j] = 1;
            x->tok[b * L + j] = (int32_t)(2 + pi0_rng_next(&rt) % (uint64_t)(cfg.lm.vocab_size - 2));
        }
    x->in = (pi0_inputs){.batch = B, .images = x->img, .image_masks = x->im, .tokens = x->tok, .token_mask = x->tm,
                         .n_tokens = L, .token_ar_mask = x->ar};
}

static void free_inputs(fast_in *x) { free(x->img); free(x->tok); free(x->ar); free(x->tm); }

static int generate(pi0_model *m, const pi0_inputs *in, int n, float temperature, uint64_t seed, int32_t *tok) {
    pi0_session *s = NULL;
    pi0_inputs c = *in;
    c.seed = seed;
    int run = 0, ok = pi0_session_create(&s, m, &(pi0_session_params){.max_batch = in->batch, .max_decoding_steps = n}) ==
                            PI0_OK &&
                      pi0_generate(s, &c, &(pi0_decode_params){.temperature = temperature}, tok, &run) == PI0_OK;
    if (!ok) printf("  generate: %s\n", pi0_last_error());
    pi0_session_free(s);
    return ok ? run : -1;
}

/* A sample's tokens are the same alone and beside another (compact and full samples), and sampling depends on the
 * seed alone. */
static void test_batch_and_sampling(pi0_model *m) {
    enum { N = 12 };
    for (int masked = -1; masked <= 1; masked += 2) {   /* camera 1 masked: sample 0's decode window holds masked rows */
        fast_in x2, x1;
        make_inputs(&x2, 2, masked, 11);
        make_inputs(&x1, 1, masked, 11);
        int32_t t2[2 * N], t1[N];
        int r2 = generate(m, &x2.in, N, 0, 0, t2), r1 = generate(m, &x1.in, N, 0, 0, t1);
        /* with B = 1 decoding may stop earlier (the other sample no longer holds it back): compare what both ran */
        int upto = r1 < r2 ? r1 : r2, same = r1 > 0 && r2 > 0;
        for (int k = 0; same && k < upto; k++) same = t1[k] == t2[k];
        CHECK(same, "masked camera %d: sample 0's tokens change with a second sample in the batch", masked);
        free_inputs(&x2);
        free_inputs(&x1);
    }
    fast_in x;
    make_inputs(&x, 2, -1, 12);
    int32_t a[2 * N], b[2 * N], c[2 * N], g[2 * N];
    int ra = generate(m, &x.in, N, 1.0f, 7, a), rb = generate(m, &x.in, N, 1.0f, 7, b);
    int rc = generate(m, &x.in, N, 1.0f, 8, c), rg = generate(m, &x.in, N, 0, 7, g);
    CHECK(ra > 0 && ra == rb && !memcmp(a, b, sizeof a), "sampling with the same seed differs");
    CHECK(rc > 0 && memcmp(a, c, sizeof a), "sampling with seeds 7 and 8 gives the same tokens");
    CHECK(rg > 0 && memcmp(a, g, sizeof a), "sampling at temperature 1 gives the greedy tokens");
    free_inputs(&x);
}

static void test_refusals(pi0_model *m) {
    enum { N = 4 };
    fast_in x;
    make_inputs(&x, 1, -1, 13);
    pi0_session *s = NULL;
    int32_t tok[N];
    float act[1024];
    if (pi0_session_create(&s, m, &(pi0_session_params){.max_decoding_steps = N}) != PI0_OK) {
        CHECK(0, "session: %s", pi0_last_error());
        free_inputs(&x);
        return;
    }
    EXPECT_ERR(pi0_infer(s, &x.in, act), PI0_ERR_UNSUPPORTED, "pi0_generate");
    EXPECT_ERR(pi0_generate(s, &x.in, &(pi0_decode_params){.max_decoding_steps = N + 1}, tok, NULL), PI0_ERR_ARG,
               "max_decoding_steps 5");
    EXPECT_ERR(pi0_generate(s, &x.in, &(pi0_decode_params){.temperature = -1}, tok, NULL), PI0_ERR_ARG, "temperature");
    pi0_inputs bad = x.in;
    bad.token_ar_mask = NULL;
    EXPECT_ERR(pi0_generate(s, &bad, NULL, tok, NULL), PI0_ERR_ARG, "token_ar_mask");
    x.ar[2] = 2;
    EXPECT_ERR(pi0_generate(s, &x.in, NULL, tok, NULL), PI0_ERR_ARG, "token_ar_mask[0][2] = 2");
    x.ar[2] = 0;
    x.tok[cfg.max_token_len - 1] = cfg.lm.vocab_size;   /* a masked token: π0-FAST embeds it all the same */
    EXPECT_ERR(pi0_generate(s, &x.in, NULL, tok, NULL), PI0_ERR_ARG, "expected 0..511");
    x.tok[cfg.max_token_len - 1] = 0;
    memset(x.im, 0, sizeof x.im);
    memset(x.tm, 0, (size_t)cfg.max_token_len);
    EXPECT_ERR(pi0_generate(s, &x.in, NULL, tok, NULL), PI0_ERR_ARG, "nothing to decode from");
    pi0_session_free(s);
    free_inputs(&x);
    pi0_model *p0 = NULL;
    if (pi0_model_load(&p0, "tests/fixtures/tiny-pi0", &(pi0_model_params){.quiet = 1}) == PI0_OK &&
        pi0_session_create(&s, p0, NULL) == PI0_OK) {
        make_inputs(&x, 1, -1, 13);
        EXPECT_ERR(pi0_generate(s, &x.in, NULL, tok, NULL), PI0_ERR_UNSUPPORTED, "π0 model, which pi0_infer runs");
        free_inputs(&x);
    }
    pi0_session_free(s);
    pi0_model_free(p0);
    pi0_policy *pol = NULL;   /* a policy on it needs the FAST tokenizer: refused at load, naming what is missing */
    EXPECT_ERR(pi0_policy_load(&pol, gen_dir, &(pi0_policy_params){.robot = "libero", .tokenizer = "/nonexistent"}),
               PI0_ERR_ARG, "needs the FAST action tokenizer");
    CHECK(!pol, "a π0-FAST policy was returned");
}

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    int ok = f && fputs(text, f) >= 0;
    if (f) fclose(f);
    return ok;
}

/* config.json without "model_type" and no action expert: π0-FAST; "model_type": "pi0_fast" over π0 tensors, or an
 * unknown model_type: refused. */
static void test_recognition(void) {
    char d[300], p[400], q[400], cmd[1200];
    snprintf(d, sizeof d, "%s/untyped", tmp);
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    snprintf(q, sizeof q, "%s/model.safetensors", gen_dir);
    char full[PATH_MAX];
    CHECK(realpath(q, full) && !symlink(full, p), "symlink %s", p);
    snprintf(p, sizeof p, "%s/config.json", d);
    char *json = config_to_json(&cfg), *mt = json ? strstr(json, "\"model_type\"") : NULL;
    if (mt) {   /* drop the line */
        char *nl = strchr(mt, '\n');
        memmove(mt, nl + 1, strlen(nl + 1) + 1);
    }
    CHECK(json && write_text(p, json), "write %s", p);
    free(json);
    pi0_model *m = NULL;
    pi0_model_info info = {0};
    CHECK(pi0_model_load(&m, d, &(pi0_model_params){.quiet = 1}) == PI0_OK, "untyped: %s", pi0_last_error());
    if (m) pi0_model_get_info(m, &info);
    CHECK(info.fast == 1, "a checkpoint without the action expert loads as π0-FAST (fast = %d)", info.fast);
    pi0_model_free(m);
    snprintf(d, sizeof d, "%s/typed-pi0", tmp);
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    if (realpath("tests/fixtures/tiny-pi0/model.safetensors", full)) CHECK(!symlink(full, p), "symlink %s", p);
    snprintf(cmd, sizeof cmd, "%s/config.json", d);
    char *j0 = pi0_read_file("tests/fixtures/tiny-pi0/config.json", NULL, 1 << 20);
    if (j0) {
        char *brace = strchr(j0, '{');
        size_t n = strlen(j0) + 64;
        char *j1 = malloc(n);
        snprintf(j1, n, "{\n  \"model_type\": \"pi0_fast\",%s", brace + 1);
        CHECK(write_text(cmd, j1), "write %s", cmd);
        EXPECT_ERR(pi0_model_load(&m, d, &(pi0_model_params){.quiet = 1}), PI0_ERR_FORMAT, "action_in_proj.weight");
        snprintf(j1, n, "{\n  \"model_type\": \"pi1\",%s", brace + 1);
        CHECK(write_text(cmd, j1), "write %s", cmd);
        EXPECT_ERR(pi0_model_load(&m, d, &(pi0_model_params){.quiet = 1}), PI0_ERR_FORMAT, "model_type: unknown 'pi1'");
        snprintf(j1, n, "{\n  \"model_type\": \"pi05\",%s", brace + 1);   /* "pi05": false follows in the file */
        CHECK(write_text(cmd, j1), "write %s", cmd);
        EXPECT_ERR(pi0_model_load(&m, d, &(pi0_model_params){.quiet = 1}), PI0_ERR_FORMAT, "contradicts");
        free(j1);
    }
    free(j0);
}

static int sh(const char *cmd, const char *needle) {
    char full[2048];
    snprintf(full, sizeof full, "%s > %s/sh.out 2>&1", cmd, tmp);
    int rc = system(full);
    snprintf(full, sizeof full, "%s/sh.out", tmp);
    char *out = pi0_read_file(full, NULL, 1 << 20);
    int found = !needle || (out && strstr(out, needle));
    if (!found) printf("  `%s` printed: %s\n", cmd, out ? out : "(nothing)");
    free(out);
    return found ? rc : -1000;
}

/* `pi0 infer` on a π0-FAST checkpoint: output_tokens, and the reason when token_ar_mask is missing. */
static void test_cli(void) {
    char cmd[1200], in[300], out[300];
    snprintf(in, sizeof in, "%s/noar.in.safetensors", tmp);
    snprintf(out, sizeof out, "%s/out.safetensors", tmp);
    fast_in x;
    make_inputs(&x, 1, -1, 14);
    pi0_tensors *t = NULL;
    int64_t si[5] = {1, cfg.n_cameras, cfg.vis.image_size, cfg.vis.image_size, 3}, sm[2] = {1, cfg.n_cameras},
            st[2] = {1, cfg.max_token_len};
    int ok = pi0_tensors_new(&t) == PI0_OK && pi0_tensors_add(t, "images", PI0_DT_F32, 5, si, x.img) == PI0_OK &&
             pi0_tensors_add(t, "image_masks", PI0_DT_BOOL, 2, sm, x.im) == PI0_OK &&
             pi0_tensors_add(t, "tokens", PI0_DT_I32, 2, st, x.tok) == PI0_OK &&
             pi0_tensors_add(t, "token_mask", PI0_DT_BOOL, 2, st, x.tm) == PI0_OK && pi0_tensors_save(t, in) == PI0_OK;
    CHECK(ok, "inputs without token_ar_mask: %s", pi0_last_error());
    snprintf(cmd, sizeof cmd, "%s infer --checkpoint %s --inputs %s --output %s", PI0, gen_dir, in, out);
    CHECK(sh(cmd, "missing tensor 'token_ar_mask'") > 0, "pi0 infer without token_ar_mask: not refused with the reason");
    ok = pi0_tensors_add(t, "token_ar_mask", PI0_DT_I32, 2, st, x.ar) == PI0_OK && pi0_tensors_save(t, in) == PI0_OK;
    snprintf(cmd, sizeof cmd, "%s infer --checkpoint %s --inputs %s --output %s --max-decoding-steps 7", PI0, gen_dir, in,
             out);
    CHECK(ok && sh(cmd, "decoding steps") == 0, "pi0 infer on π0-FAST failed");
    pi0_tensors *o = NULL;
    pi0_dtype dt;
    int nd = 0;
    int64_t shape[8] = {0};
    CHECK(pi0_tensors_open(&o, out) == PI0_OK && pi0_tensors_get(o, "output_tokens", &dt, &nd, shape, NULL) == PI0_OK &&
              dt == PI0_DT_I32 && nd == 2 && shape[0] == 1 && shape[1] == 7,
          "output_tokens: want I32 [1, 7]: %s", pi0_last_error());
    pi0_tensors_free(o);
    snprintf(cmd, sizeof cmd, "%s infer --checkpoint tests/fixtures/tiny-pi0 --inputs tests/fixtures/tiny-pi0/b1.in.safetensors "
             "--output %s --max-decoding-steps 7", PI0, out);
    CHECK(sh(cmd, "are for π0-FAST models") > 0, "pi0 infer --max-decoding-steps on π0: not refused");
    snprintf(cmd, sizeof cmd, "%s info --checkpoint %s", PI0, gen_dir);
    CHECK(sh(cmd, "model: pi0_fast") == 0, "pi0 info does not name π0-FAST");
    pi0_tensors_free(t);
    free_inputs(&x);
}

int main(int argc, char **argv) {
    (void)argc; (void)argv;
    if (getenv("PI0_BIN")) PI0 = getenv("PI0_BIN");   /* tests/run.sh: the build's CLI */
    if (!mkdtemp(tmp)) { perror("mkdtemp"); return 1; }
    test_golden();
    if (!make_checkpoint()) {
        CHECK(0, "tiny π0-FAST checkpoint: %s", pi0_last_error());
        return test_summary("test_fast_model");
    }
    pi0_model *m = NULL;
    if (pi0_model_load(&m, gen_dir, &(pi0_model_params){.quiet = 1}) != PI0_OK) {
        CHECK(0, "load %s: %s", gen_dir, pi0_last_error());
        return test_summary("test_fast_model");
    }
    test_batch_and_sampling(m);
    test_refusals(m);
    pi0_model_free(m);
    test_recognition();
    test_cli();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd)) printf("could not remove %s\n", tmp);
    return test_summary("test_fast_model");
}
