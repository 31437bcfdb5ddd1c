/* test_cuda_e2e.c — the GPU end-to-end tests (`make test-cuda`, on the device machine):
 *  1. the tiny fixtures on the GPU against the CPU reference and the PyTorch fixtures, graph replay against the
 *     un-captured run, repeat runs bit for bit; new prompt lengths; a graph that cannot be captured; bad pixels on
 *     the graph path; images read in place (PI0_CUDA_ZERO_COPY, an integrated GPU's default) against copied ones;
 *  2. resources: session create/free cycles leak no device memory; an impossible session fails with a clear
 *     out-of-memory error and the model stays usable; a broken checkpoint and a missing device are refused;
 *     what pi0_session_memory_info reports; the weight store in a slab per group;
 *  3. with --full DIR_PI0 DIR_PI05: full-size random checkpoints, GPU bf16 vs CPU fp32 actions at B = 2 and B = 1; the
 *     host view released once the weights are on the device;
 *  4. π0-FAST's tokens against the CPU's (tiny fixture, and with --fast DIR a full-size random checkpoint).
 * Seeded RNG (seed printed). Tolerances and the worst values seen: tests/README.md. Op tests: test_cuda_ops.c. */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "backend.h"
#include "cuda/testing.h"
#include "pi0.h"
#include "test.h"
#include "util.h"

static pi0_rng rng;
static const uint64_t SEED = 20261122;

/* ---- end to end ---- */

typedef struct {
    float *act;
    size_t n;
} result;

static int infer(pi0_model *m, const pi0_inputs *in, int stage_timing, result *r) {
    pi0_session *s = NULL;
    pi0_model_info info;
    pi0_model_get_info(m, &info);
    r->n = (size_t)in->batch * info.action_horizon * info.action_dim;
    r->act = malloc(r->n * sizeof(float));
    int ok = pi0_session_create(&s, m, &(pi0_session_params){.max_batch = in->batch}) == PI0_OK;
    if (ok) pi0_session_set_stage_timing(s, stage_timing);
    ok = ok && pi0_infer(s, in, r->act) == PI0_OK;
    if (!ok) printf("  inference: %s\n", pi0_last_error());
    pi0_session_free(s);
    return ok;
}

/* One session: the first call (a new graph key: run un-captured, the graph captured behind it), a staged run (stage
 * timing), a staged run on other noise (so the replay cannot pass on the actions it finds), then the graph replay.
 * The GEMM algorithms are chosen once per session (timed), so within a session the three results must agree bit for
 * bit. */
static int infer3(pi0_model *m, const pi0_inputs *in, result *g, result *st, result *g2) {
    pi0_session *s = NULL;
    pi0_model_info info;
    pi0_model_get_info(m, &info);
    size_t n = (size_t)in->batch * info.action_horizon * info.action_dim;
    result *r[3] = {g, st, g2};
    for (int i = 0; i < 3; i++) { r[i]->n = n; r[i]->act = malloc(n * sizeof(float)); }
    /* the repeat run reads its images from page-locked memory (pi0_host_alloc): same result bit for bit */
    size_t ni = (size_t)in->batch * info.n_cameras * info.image_size * info.image_size * 3;
    float *pinned = pi0_host_alloc(ni * sizeof(float));
    pi0_inputs in2 = *in;
    if (pinned) { memcpy(pinned, in->images, ni * sizeof(float)); in2.images = pinned; }
    pi0_inputs other = *in;
    other.noise = NULL;
    other.seed = in->seed + 1;
    int ok = pinned && pi0_session_create(&s, m, &(pi0_session_params){.max_batch = in->batch}) == PI0_OK;
    long replays = cuda_graph_replays();
    for (int i = 0; ok && i < 3; i++) {
        pi0_session_set_stage_timing(s, i == 1);
        ok = pi0_infer(s, i == 2 ? &in2 : in, r[i]->act) == PI0_OK;
        if (ok && i == 1) ok = pi0_infer(s, &other, r[2]->act) == PI0_OK;   /* (overwritten by the replay) */
    }
    if (ok && cuda_graph_replays() != replays + 1) {
        printf("  expected one graph replay, found %ld\n", cuda_graph_replays() - replays);
        ok = 0;
    }
    if (!ok) printf("  inference: %s\n", pi0_last_error());
    pi0_session_free(s);
    pi0_host_free(pinned);
    return ok;
}

/* Real-time chunking on `in` (batch B, horizon H, width A): a random leftover, weights 1 for two rows then linear to
 * row 4, cap 10; buf holds them (freed by the caller). */
static float *with_rtc(pi0_inputs *in, pi0_rtc_mode mode, int H, int A) {
    int B = in->batch;
    float *buf = malloc(((size_t)B * H * A + (size_t)B * H + B) * sizeof(float));
    float *prev = buf, *w = buf + (size_t)B * H * A, *mw = w + (size_t)B * H;
    for (size_t i = 0; i < (size_t)B * H * A; i++) prev[i] = (float)pi0_rng_normal(&rng);
    for (int b = 0; b < B; b++) pi0_rtc_prefix_weights(PI0_RTC_LINEAR, 2, 4, H, H, w + (size_t)b * H);
    for (int b = 0; b < B; b++) mw[b] = 10.0f;
    in->rtc = mode;
    in->rtc_prev = prev;
    in->rtc_weights = w;
    in->rtc_max_weights = mw;
    return buf;
}

/* Exact real-time chunking (the expert's transpose on the GPU) against the CPU reference, B = 1 (the suffix keys in
 * the cache's tail) and B = 2 (source 2); with its graph replay bit for bit, and unlike LeRobot's form. */
static void e2e_rtc_exact(void) {
    const char *models[2] = {"tests/fixtures/tiny-pi0", "tests/fixtures/tiny-pi05"};
    const char *cases[2] = {"b1", "b2"};
    for (int mi = 0; mi < 2; mi++) {
        pi0_model *mc = NULL, *mg = NULL;
        int ok = pi0_model_load(&mc, models[mi], &(pi0_model_params){.quiet = 1}) == PI0_OK &&
                 pi0_model_load(&mg, models[mi], &(pi0_model_params){.quiet = 1, .backend = PI0_BACKEND_CUDA}) == PI0_OK;
        CHECK(ok, "load %s: %s", models[mi], pi0_last_error());
        pi0_model_info info;
        if (ok) pi0_model_get_info(mc, &info);
        for (int ci = 0; ok && ci < 2; ci++) {
            char in_path[256];
            snprintf(in_path, sizeof in_path, "%s/%s.in.safetensors", models[mi], cases[ci]);
            pi0_tensors *t = NULL;
            pi0_inputs_buf *ib = NULL;
            pi0_inputs in;
            result rc = {0}, rg = {0}, rn = {0}, rg2 = {0}, rl = {0};
            float *rbuf = NULL;
            int ok2 = pi0_tensors_open(&t, in_path) == PI0_OK && pi0_inputs_from_tensors(mc, t, in_path, &in, &ib) == PI0_OK;
            if (ok2) rbuf = with_rtc(&in, PI0_RTC_EXACT, info.action_horizon, info.action_dim);
            ok2 = ok2 && infer(mc, &in, 0, &rc) && infer3(mg, &in, &rg, &rn, &rg2);
            if (ok2) {
                in.rtc = PI0_RTC_LEROBOT;
                ok2 = infer(mg, &in, 0, &rl);
            }
            CHECK(ok2, "rtc exact %s/%s: %s", models[mi], cases[ci], pi0_last_error());
            if (ok2) {
                double m1, r1 = rel_l2(rg.act, rc.act, rc.n, &m1), d = rel_l2(rl.act, rg.act, rc.n, NULL);
                printf("e2e rtc exact %-14s %-4s gpu-vs-cpu rel_l2=%.2e max_abs=%.2e bound 2e-2; LeRobot's form differs by "
                       "%.2e %s\n", models[mi] + 15, cases[ci], r1, m1, d, r1 < 2e-2 && d > 5 * r1 ? "OK" : "FAIL");
                CHECK(r1 < 2e-2 && d > 5 * r1, "rtc exact %s %s: gpu-vs-cpu %.3e, lerobot diff %.3e", models[mi], cases[ci],
                      r1, d);
                CHECK(!memcmp(rg.act, rn.act, rc.n * 4) && !memcmp(rg.act, rg2.act, rc.n * 4),
                      "rtc exact %s %s: first call == staged == graph replay bit for bit", models[mi], cases[ci]);
            }
            free(rc.act); free(rg.act); free(rn.act); free(rg2.act); free(rl.act); free(rbuf);
            pi0_inputs_buf_free(ib);
            pi0_tensors_free(t);
        }
        pi0_model_free(mc);
        pi0_model_free(mg);
    }
}

static void e2e_fixtures(void) {
    const char *models[2] = {"tests/fixtures/tiny-pi0", "tests/fixtures/tiny-pi05"};
    const char *cases[3] = {"b1", "b1-masked", "b2"};
    for (int mi = 0; mi < 2; mi++) {
        pi0_model *mc = NULL, *mg = NULL;
        int ok = pi0_model_load(&mc, models[mi], &(pi0_model_params){.quiet = 1}) == PI0_OK &&
                 pi0_model_load(&mg, models[mi], &(pi0_model_params){.quiet = 1, .backend = PI0_BACKEND_CUDA}) == PI0_OK;
        CHECK(ok, "load %s: %s", models[mi], pi0_last_error());
        for (int ci = 0; ok && ci < 3; ci++) {
            char in_path[256], out_path[256];
            snprintf(in_path, sizeof in_path, "%s/%s.in.safetensors", models[mi], cases[ci]);
            snprintf(out_path, sizeof out_path, "%s/%s.out.safetensors", models[mi], cases[ci]);
            pi0_tensors *t = NULL, *e = NULL;
            pi0_inputs_buf *ib = NULL;
            pi0_inputs in;
            const void *exp_act = NULL;
            result rc = {0}, rg = {0}, rn = {0}, rg2 = {0};
            int ok2 = pi0_tensors_open(&t, in_path) == PI0_OK && pi0_tensors_open(&e, out_path) == PI0_OK &&
                      pi0_tensors_get(e, "actions", NULL, NULL, NULL, &exp_act) == PI0_OK &&
                      pi0_inputs_from_tensors(mc, t, in_path, &in, &ib) == PI0_OK && infer(mc, &in, 0, &rc) &&
                      infer3(mg, &in, &rg, &rn, &rg2);
            CHECK(ok2, "%s/%s: %s", models[mi], cases[ci], pi0_last_error());
            if (ok2) {
                double m1, m2;
                double r1 = rel_l2(rg.act, rc.act, rc.n, &m1), r2 = rel_l2(rg.act, exp_act, rc.n, &m2);
                printf("e2e %-24s %-10s gpu-vs-cpu rel_l2=%.2e max_abs=%.2e  gpu-vs-torch rel_l2=%.2e  bound 2e-2 %s\n",
                       models[mi] + 15, cases[ci], r1, m1, r2, r1 < 2e-2 && r2 < 2e-2 ? "OK" : "FAIL");
                CHECK(r1 < 2e-2 && r2 < 2e-2, "e2e %s %s", models[mi], cases[ci]);
                CHECK(!memcmp(rg.act, rn.act, rc.n * 4), "%s %s: first call == staged run bit for bit (one session)",
                      models[mi], cases[ci]);
                CHECK(!memcmp(rg.act, rg2.act, rc.n * 4), "%s %s: graph replay (page-locked images) bit for bit", models[mi],
                      cases[ci]);
            }
            free(rc.act); free(rg.act); free(rn.act); free(rg2.act);
            pi0_inputs_buf_free(ib);
            pi0_tensors_free(t);
            pi0_tensors_free(e);
        }
        pi0_model_free(mc);
        pi0_model_free(mg);
    }
}

/* The 8-bit precisions (docs/precision.md): the GPU's actions against the CPU twin's at the same precision, for all
 * stages and each alone (int8), for vision and prefix together and alone (fp8, which has no expert path), on both tiny
 * models; the graph replay equals the first run bit for bit. int8's bound is the bf16 path's, 1e-2: its products are
 * exact on both sides. fp8's is 4e-2: the two backends' activations differ (bf16 rows on the GPU, fp32 on the CPU), and
 * an E4M3 code that flips on that difference moves its product by up to 1/16 of the value where an int8 code moves
 * it 1/127 of the row's largest; measured on the H200 0.2-2.4e-2, where fp8 itself moves the actions 2-8e-2 from bf16
 * (a wrong scale or code moves them by O(1)). */
static double bound_8bit(pi0_precision p) { return p == PI0_PRECISION_FP8 ? 4e-2 : 1e-2; }

/* Whether the GPU has FP8 (sm_89 on); where it has not, an fp8 load must be refused naming it, and 0 comes back. */
static int fp8_here(const char *dir) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    if (10 * major + minor >= 89) return 1;
    pi0_model *m = NULL;
    pi0_status st = pi0_model_load(&m, dir, &(pi0_model_params){.quiet = 1, .backend = PI0_BACKEND_CUDA,
                                                                .precision = PI0_PRECISION_FP8});
    CHECK(st == PI0_ERR_UNSUPPORTED && !m && strstr(pi0_last_error(), "no FP8 tensor cores"),
          "fp8 on sm_%d%d refused: %s", major, minor, pi0_last_error());
    pi0_model_free(m);
    return 0;
}

static void e2e_int8(void) {
    const char *models[2] = {"tests/fixtures/tiny-pi0", "tests/fixtures/tiny-pi05"};
    const struct { pi0_precision p; unsigned stages; } runs[7] = {
        {PI0_PRECISION_INT8, PI0_STAGE_ALL}, {PI0_PRECISION_INT8, PI0_STAGE_VISION}, {PI0_PRECISION_INT8, PI0_STAGE_PREFIX},
        {PI0_PRECISION_INT8, PI0_STAGE_EXPERT}, {PI0_PRECISION_FP8, 0}, {PI0_PRECISION_FP8, PI0_STAGE_VISION},
        {PI0_PRECISION_FP8, PI0_STAGE_PREFIX}};
    for (int mi = 0; mi < 2; mi++)
        for (int si = 0; si < 7; si++) {
            const char *pn = runs[si].p == PI0_PRECISION_FP8 ? "fp8" : "int8";
            if (runs[si].p == PI0_PRECISION_FP8 && !fp8_here(models[mi])) continue;
            pi0_model_params pc = {.quiet = 1, .precision = runs[si].p, .quant_stages = runs[si].stages}, pg = pc;
            pg.backend = PI0_BACKEND_CUDA;
            pi0_model *mc = NULL, *mg = NULL;
            int ok = pi0_model_load(&mc, models[mi], &pc) == PI0_OK && pi0_model_load(&mg, models[mi], &pg) == PI0_OK;
            CHECK(ok, "load %s %s: %s", models[mi], pn, pi0_last_error());
            char in_path[256];
            snprintf(in_path, sizeof in_path, "%s/b2.in.safetensors", models[mi]);
            pi0_tensors *t = NULL;
            pi0_inputs_buf *ib = NULL;
            pi0_inputs in;
            result rc = {0}, rg = {0}, rn = {0}, rg2 = {0};
            int ok2 = ok && pi0_tensors_open(&t, in_path) == PI0_OK &&
                      pi0_inputs_from_tensors(mc, t, in_path, &in, &ib) == PI0_OK && infer(mc, &in, 0, &rc) &&
                      infer3(mg, &in, &rg, &rn, &rg2);
            CHECK(ok2, "%s %s stages %u: %s", models[mi], pn, runs[si].stages, pi0_last_error());
            if (ok2) {
                double m1, r1 = rel_l2(rg.act, rc.act, rc.n, &m1);
                double bd = bound_8bit(runs[si].p);
                printf("e2e %-4s %-19s stages %u  gpu-vs-cpu rel_l2=%.2e max_abs=%.2e  bound %.0e %s\n", pn, models[mi] + 15,
                       runs[si].stages, r1, m1, bd, r1 < bd ? "OK" : "FAIL");
                CHECK(r1 < bd, "e2e %s %s stages %u", pn, models[mi], runs[si].stages);
                CHECK(!memcmp(rg.act, rg2.act, rc.n * 4), "%s %s: graph replay bit for bit", models[mi], pn);
            }
            free(rc.act); free(rg.act); free(rn.act); free(rg2.act);
            pi0_inputs_buf_free(ib);
            pi0_tensors_free(t);
            pi0_model_free(mc);
            pi0_model_free(mg);
        }
}

/* A server meets a new prefix length every few requests (prompts differ; π0.5 writes the state into its prompt).
 * One session runs up to 12 prompt lengths down and back up. The lengths share GEMM timing buckets, so after the
 * first each new length takes the algorithms of its bucket (gemm.cu share_tuned); its first call runs un-captured and
 * captures the graph behind the run (cuda_run_graph), a later call replays that graph, and the way back up replays
 * cached graphs (the replay counter checks each). Every result must equal the staged (un-captured, stage-timed) run
 * of the same length and noise in the same session bit for bit, and the CPU result within the e2e bound. */
static void e2e_prompt_lengths(void) {
    const char *dir = "tests/fixtures/tiny-pi0", *in_path = "tests/fixtures/tiny-pi0/b1.in.safetensors";
    pi0_model *mc = NULL, *mg = NULL;
    pi0_tensors *t = NULL;
    pi0_inputs_buf *ib = NULL;
    pi0_session *sc = NULL, *sg = NULL;
    pi0_inputs in;
    int ok = pi0_model_load(&mc, dir, &(pi0_model_params){.quiet = 1}) == PI0_OK &&
             pi0_model_load(&mg, dir, &(pi0_model_params){.quiet = 1, .backend = PI0_BACKEND_CUDA}) == PI0_OK &&
             pi0_tensors_open(&t, in_path) == PI0_OK && pi0_inputs_from_tensors(mc, t, in_path, &in, &ib) == PI0_OK &&
             pi0_session_create(&sc, mc, &(pi0_session_params){.max_batch = 1}) == PI0_OK &&
             pi0_session_create(&sg, mg, &(pi0_session_params){.max_batch = 1}) == PI0_OK;
    CHECK(ok, "prompt lengths: setup: %s", pi0_last_error());
    pi0_model_info info;
    if (ok) pi0_model_get_info(mc, &info);
    size_t n = ok ? (size_t)info.action_horizon * info.action_dim : 1;
    int L = ok ? in.n_tokens : 0, lens = L < 12 ? L : 12, fails = 0, runs = 0;
    uint8_t *tm = malloc((size_t)L + 1);
    float *ac = malloc(n * 4), *ag = malloc(n * 4), *ar = malloc(n * 4), *as = malloc(n * 4), *as2 = malloc(n * 4);
    int replay_fails = 0;
    double worst = 0;
    for (int i = 0; ok && i < 2 * lens; i++) {
        int valid = i < lens ? L - i : L - (2 * lens - 1 - i);   /* L, L-1, ..., L-lens+1, then back up */
        for (int j = 0; j < L; j++) tm[j] = j < valid;
        pi0_inputs x = in;
        x.token_mask = tm;
        pi0_session_set_stage_timing(sg, 0);
        /* a new length runs un-captured and is captured behind the run; the staged run comes next, then a replay
         * on other noise (so it cannot pass on the actions it finds) against a staged run on that noise */
        pi0_inputs y = x;
        y.noise = NULL;
        y.seed = x.seed + 1 + i;
        long replays = cuda_graph_replays();
        ok = pi0_infer(sc, &x, ac) == PI0_OK && pi0_infer(sg, &x, ag) == PI0_OK;
        pi0_session_set_stage_timing(sg, 1);
        ok = ok && pi0_infer(sg, &x, as) == PI0_OK;
        pi0_session_set_stage_timing(sg, 0);
        ok = ok && pi0_infer(sg, &y, ar) == PI0_OK;
        pi0_session_set_stage_timing(sg, 1);
        ok = ok && pi0_infer(sg, &y, as2) == PI0_OK;
        if (!ok) break;
        replay_fails += cuda_graph_replays() - replays != (i < lens ? 1 : 2);
        fails += memcmp(ar, as2, n * 4) != 0 || memcmp(ar, as, n * 4) == 0;
        double mx, r = rel_l2(ag, ac, n, &mx);
        worst = r > worst ? r : worst;
        fails += r >= 2e-2 || memcmp(ag, as, n * 4) != 0;
        runs++;
    }
    CHECK(ok, "prompt lengths: inference: %s", pi0_last_error());
    printf("e2e prompt lengths: %d runs over %d lengths, worst gpu-vs-cpu rel_l2=%.2e, graph == staged bit for bit: %s\n",
           runs, lens, worst, fails ? "FAIL" : "OK");
    CHECK(runs == 2 * lens && lens >= 4 && !fails, "prompt lengths: %d of %d runs differ", fails, runs);
    CHECK(!replay_fails, "prompt lengths: %d of %d runs without the expected graph replays", replay_fails, runs);
    free(tm); free(ac); free(ag); free(ar); free(as); free(as2);
    pi0_session_free(sc);
    pi0_session_free(sg);
    pi0_inputs_buf_free(ib);
    pi0_tensors_free(t);
    pi0_model_free(mc);
    pi0_model_free(mg);
}

/* tiny-pi0's b1 inputs and a one-sample CUDA session of it (the e2e tests below); tiny_close frees what opened */
typedef struct {
    pi0_model *m;
    pi0_session *s;
    pi0_tensors *t;
    pi0_inputs_buf *ib;
    pi0_inputs in;
    size_t n_act;   /* floats of one call's actions */
} tiny_cuda;

static int tiny_open(tiny_cuda *x) {
    const char *dir = "tests/fixtures/tiny-pi0", *in_path = "tests/fixtures/tiny-pi0/b1.in.safetensors";
    memset(x, 0, sizeof *x);
    int ok = pi0_model_load(&x->m, dir, &(pi0_model_params){.quiet = 1, .backend = PI0_BACKEND_CUDA}) == PI0_OK &&
             pi0_tensors_open(&x->t, in_path) == PI0_OK &&
             pi0_inputs_from_tensors(x->m, x->t, in_path, &x->in, &x->ib) == PI0_OK &&
             pi0_session_create(&x->s, x->m, &(pi0_session_params){.max_batch = 1}) == PI0_OK;
    pi0_model_info info;
    if (ok) pi0_model_get_info(x->m, &info);
    x->n_act = ok ? (size_t)info.action_horizon * info.action_dim : 1;
    return ok;
}

static void tiny_close(tiny_cuda *x) {
    pi0_session_free(x->s);
    pi0_inputs_buf_free(x->ib);
    pi0_tensors_free(x->t);
    pi0_model_free(x->m);
}

/* A graph that cannot be captured or instantiated must not fail the call (cuda_run_graph): the run's result stands,
 * and the context warns once and runs without graphs from then on. cuda_graph_fault makes CUDA itself refuse the next
 * capture (a synchronisation inside it) or instantiation (invalid flags). Three calls with one key: the first meets
 * the fault, the next two would capture and then replay if graphs were still on. Each must equal a staged run on the
 * same noise bit for bit, and no graph may replay. */
static void e2e_graph_fault(void) {
    for (int where = 1; where <= 2; where++) {
        tiny_cuda x;
        int ok = tiny_open(&x);
        size_t n = x.n_act;
        float *a = malloc(n * 4), *st = malloc(n * 4);
        long replays = cuda_graph_replays();
        int same = 1, pending = -1;
        cuda_graph_fault(where);
        for (int i = 0; ok && i < 3; i++) {
            pi0_inputs y = x.in;
            y.noise = NULL;
            y.seed = x.in.seed + 1 + i;   /* other noise each call: a result cannot pass on the one before it */
            pi0_session_set_stage_timing(x.s, 0);
            ok = pi0_infer(x.s, &y, a) == PI0_OK;
            if (i == 0) pending = cuda_graph_fault(0);
            pi0_session_set_stage_timing(x.s, 1);
            ok = ok && pi0_infer(x.s, &y, st) == PI0_OK;
            same &= ok && !memcmp(a, st, n * 4);
        }
        cuda_graph_fault(0);
        CHECK(ok, "graph fault %d: %s", where, pi0_last_error());
        CHECK(!ok || pending == 0, "graph fault %d: the fault was not taken by a capture (pending %d)", where, pending);
        CHECK(!ok || same, "graph fault %d: a call without graphs differs from the staged run", where);
        CHECK(cuda_graph_replays() == replays, "graph fault %d: %ld graph replays after the fault", where,
              cuda_graph_replays() - replays);
        printf("e2e graph fault at %s: 3 calls, equal to the staged runs and no replays: %s\n",
               where == 1 ? "capture" : "instantiation",
               ok && pending == 0 && same && cuda_graph_replays() == replays ? "OK" : "FAIL");
        free(a); free(st);
        tiny_close(&x);
    }
}

/* Pixel values are scanned while the graph replays (model_infer's late check): a bad one still fails the call with
 * its index, after the GPU is done with the buffer, and the next valid call gives the first call's actions. */
static void e2e_bad_image(void) {
    tiny_cuda x;
    int ok = tiny_open(&x);
    pi0_session *s = x.s;
    pi0_inputs in = x.in;
    CHECK(ok, "bad image: setup: %s", pi0_last_error());
    if (ok) {
        pi0_model_info info;
        pi0_model_get_info(x.m, &info);
        size_t ni = (size_t)info.n_cameras * info.image_size * info.image_size * 3;
        size_t na = x.n_act;
        float *img = malloc(ni * sizeof(float)), *a1 = malloc(na * sizeof(float)), *a2 = malloc(na * sizeof(float));
        memcpy(img, in.images, ni * sizeof(float));
        pi0_inputs bad = in;
        bad.images = img;
        long replays = cuda_graph_replays();   /* (also: graphs work again after e2e_graph_fault's contexts) */
        int ok1 = pi0_infer(s, &in, a1) == PI0_OK && pi0_infer(s, &in, a1) == PI0_OK;   /* the second one replays */
        CHECK(ok1, "bad image: valid runs: %s", pi0_last_error());
        CHECK(cuda_graph_replays() == replays + 1, "bad image: %ld graph replays in two valid runs, expected 1",
              cuda_graph_replays() - replays);
        img[ni - 5] = NAN;
        pi0_status st = pi0_infer(s, &bad, a2);
        CHECK(st == PI0_ERR_ARG && strstr(pi0_last_error(), "] = nan"), "bad image: got %s '%s'", pi0_status_str(st),
              pi0_last_error());
        img[ni - 5] = 0;
        img[7] = 1.25f;
        st = pi0_infer(s, &bad, a2);
        CHECK(st == PI0_ERR_ARG && strstr(pi0_last_error(), "images[7] = 1.25"), "bad image: got %s '%s'",
              pi0_status_str(st), pi0_last_error());
        CHECK(pi0_infer(s, &in, a2) == PI0_OK && !memcmp(a1, a2, na * sizeof(float)),
              "bad image: the valid call after the failures gives the same actions: %s", pi0_last_error());
        printf("e2e bad image (late check on the graph path): %s\n", ok1 ? "done" : "FAIL");
        free(img); free(a1); free(a2);
    }
    tiny_close(&x);
}

/* Images read in place (backend.h host_view), as an integrated GPU (a Jetson) does by default and PI0_CUDA_ZERO_COPY=1
 * forces here: in one session (its GEMM algorithms are timed once), pageable images (copied) and page-locked ones (read
 * where they lie: the host-view counter) give the same actions bit for bit, on two noises, first run and replay. A
 * replay reads the buffer's images as they are now (new images give the copied run's actions for them), and a second
 * buffer gets a graph of its own (the key carries the address: the first buffer's graph would read the first buffer,
 * which holds other images by then). Without the variable a discrete GPU copies; a value but 0 or 1 is refused. */
static void e2e_zero_copy(void) {
    setenv("PI0_CUDA_ZERO_COPY", "1", 1);
    tiny_cuda x;
    int ok = tiny_open(&x);   /* (the session reads the variable at create) */
    unsetenv("PI0_CUDA_ZERO_COPY");
    CHECK(ok, "zero copy: setup: %s", pi0_last_error());
    pi0_model_info info;
    if (ok) pi0_model_get_info(x.m, &info);
    size_t ni = ok ? (size_t)info.n_cameras * info.image_size * info.image_size * 3 : 1, na = x.n_act;
    float *pa = pi0_host_alloc(ni * 4), *pb = pi0_host_alloc(ni * 4), *qx = malloc(ni * 4), *qy = malloc(ni * 4);
    float *r[8];
    for (int i = 0; i < 8; i++) r[i] = malloc(na * 4);
    ok = ok && pa && pb && qx && qy;
    if (ok) {
        memcpy(qx, x.in.images, ni * 4);
        for (size_t i = 0; i < ni; i++) qy[i] = -qx[i];   /* other images, still in [-1, 1] */
        memcpy(pa, qx, ni * 4);
        memcpy(pb, qx, ni * 4);
    }
    /* (images, seed) per call: copied X, in place X (buffer a), again on seed 2, copied X on seed 2, buffer a now
     * holding Y, copied Y, buffer b holding X (a new key), again on seed 2 */
    const float *img[8] = {qx, pa, pa, qx, pa, qy, pb, pb};
    const int seed[8] = {1, 1, 2, 2, 1, 1, 1, 2};
    long views = cuda_host_views(), replays = cuda_graph_replays();
    for (int i = 0; ok && i < 8; i++) {
        if (i == 4) memcpy(pa, qy, ni * 4);
        pi0_inputs in = x.in;
        in.images = img[i];
        in.noise = NULL;
        in.seed = x.in.seed + (uint64_t)seed[i];
        ok = pi0_infer(x.s, &in, r[i]) == PI0_OK;
    }
    CHECK(ok, "zero copy: inference: %s", pi0_last_error());
    if (ok) {
        long v = cuda_host_views() - views, rp = cuda_graph_replays() - replays;
        int same = !memcmp(r[1], r[0], na * 4) && !memcmp(r[2], r[3], na * 4) && !memcmp(r[4], r[5], na * 4) &&
                   !memcmp(r[6], r[0], na * 4) && !memcmp(r[7], r[3], na * 4);
        int differ = memcmp(r[5], r[0], na * 4) && memcmp(r[3], r[0], na * 4);
        printf("e2e zero copy (PI0_CUDA_ZERO_COPY=1): %ld in-place reads, %ld replays; in place == copied bit for bit: %s\n",
               v, rp, same && differ && v == 5 && rp == 5 ? "OK" : "FAIL");
        CHECK(v == 5, "zero copy: %ld of the 5 page-locked calls read in place", v);
        CHECK(rp == 5, "zero copy: %ld graph replays, expected 5", rp);
        CHECK(same, "zero copy: in-place images give the copied images' actions (first run, replay, new images, "
                    "second buffer)");
        CHECK(differ, "zero copy: other images and other noise change the actions");
    }
    tiny_close(&x);
    /* the default: in place only on an integrated GPU */
    int integrated = 0;
    cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, 0);
    ok = tiny_open(&x) && pa;
    long views0 = cuda_host_views();
    pi0_inputs in = x.in;
    in.images = pa;
    ok = ok && pi0_infer(x.s, &in, r[0]) == PI0_OK;
    CHECK(ok && (cuda_host_views() - views0 == 1) == integrated, "zero copy: by default %s (integrated %d): %s",
          integrated ? "in place" : "copied", integrated, pi0_last_error());
    tiny_close(&x);
    setenv("PI0_CUDA_ZERO_COPY", "yes", 1);
    ok = tiny_open(&x);
    unsetenv("PI0_CUDA_ZERO_COPY");
    CHECK(!ok && strstr(pi0_last_error(), "PI0_CUDA_ZERO_COPY=yes: expected 0 or 1"), "zero copy: a bad value: %s",
          pi0_last_error());
    tiny_close(&x);
    for (int i = 0; i < 8; i++) free(r[i]);
    pi0_host_free(pa);
    pi0_host_free(pb);
    free(qx);
    free(qy);
}

static size_t free_mem(void) {
    size_t fr = 0, tot = 0;
    cudaDeviceSynchronize();
    cudaMemGetInfo(&fr, &tot);
    return fr;
}

/* What pi0_session_memory_info reports (pi0 info prints it) on tiny-pi0 at B = 2: the weights by format (bf16 with its
 * fp32 copies; int8 on every stage), the session's own bytes, and whether the GPU is integrated. Slabs only place the
 * copies: with a slab per group (cuda_weights_slab) the store holds the same bytes, the ops find the groups linked as
 * before (as many few-row product launches per inference) and the actions are the CPU's within the e2e bound. */
static void e2e_memory_info(void) {
    const char *dir = "tests/fixtures/tiny-pi0", *in_path = "tests/fixtures/tiny-pi0/b2.in.safetensors";
    pi0_model *mc = NULL, *mg[3] = {NULL, NULL, NULL};   /* default slabs, a slab per group, int8 */
    pi0_tensors *t = NULL;
    pi0_inputs_buf *ib = NULL;
    pi0_inputs in;
    int ok = pi0_model_load(&mc, dir, &(pi0_model_params){.quiet = 1}) == PI0_OK &&
             pi0_tensors_open(&t, in_path) == PI0_OK && pi0_inputs_from_tensors(mc, t, in_path, &in, &ib) == PI0_OK;
    for (int i = 0; ok && i < 3; i++) {
        cuda_weights_slab(i == 1 ? 1 : 0);
        ok = pi0_model_load(&mg[i], dir, &(pi0_model_params){.quiet = 1, .backend = PI0_BACKEND_CUDA,
                                                             .precision = i == 2 ? PI0_PRECISION_INT8 : PI0_PRECISION_BF16})
             == PI0_OK;
    }
    cuda_weights_slab(0);
    CHECK(ok, "memory info: setup: %s", pi0_last_error());
    result rc = {0};
    float *act[3] = {NULL, NULL, NULL};
    pi0_memory_info mi[3];
    long launches[3] = {0, 0, 0};
    ok = ok && infer(mc, &in, 0, &rc);
    for (int i = 0; ok && i < 3; i++) {
        pi0_session *s = NULL;
        act[i] = malloc(rc.n * sizeof(float));
        ok = pi0_session_create(&s, mg[i], &(pi0_session_params){.max_batch = in.batch}) == PI0_OK &&
             pi0_session_memory_info(s, &mi[i]) == PI0_OK;
        long before = cuda_gemv_launches() + cuda_gemv_wg_launches();
        ok = ok && pi0_infer(s, &in, act[i]) == PI0_OK;
        launches[i] = cuda_gemv_launches() + cuda_gemv_wg_launches() - before;
        pi0_session_free(s);
    }
    CHECK(ok, "memory info: inference: %s", pi0_last_error());
    if (ok) {
        int integrated = 0;
        cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, 0);
        printf("e2e memory info tiny-pi0 B=2: weights bf16 %zu + fp32 %zu bytes, int8 on every stage: bf16 %zu + fp32 %zu "
               "+ 8-bit %zu; session %zu (int8: %zu); integrated %d\n", mi[0].weights_bf16, mi[0].weights_f32,
               mi[2].weights_bf16, mi[2].weights_f32, mi[2].weights_8bit, mi[0].session, mi[2].session, mi[0].integrated);
        CHECK(mi[0].weights_bf16 && mi[0].weights_f32 && !mi[0].weights_8bit && mi[0].session && mi[0].integrated == integrated,
              "memory info: bf16 weights, fp32 copies, no 8-bit, a session, integrated %d", integrated);
        CHECK(mi[2].weights_8bit && mi[2].weights_bf16 < mi[0].weights_bf16 && mi[2].weights_f32 == mi[0].weights_f32 &&
              mi[2].session > mi[0].session, "memory info: int8 weights replace bf16 ones and add the 8-bit scratch");
        CHECK(mi[1].weights_bf16 == mi[0].weights_bf16 && mi[1].weights_f32 == mi[0].weights_f32 &&
              mi[1].session == mi[0].session, "memory info: a slab per group holds the same bytes");
        double r0 = rel_l2(act[0], rc.act, rc.n, NULL), r1 = rel_l2(act[1], rc.act, rc.n, NULL);
        printf("e2e weight slabs: a slab per group gpu-vs-cpu rel_l2=%.2e (default %.2e), few-row launches %ld / %ld %s\n",
               r1, r0, launches[1], launches[0], r1 < 2e-2 && launches[1] == launches[0] ? "OK" : "FAIL");
        CHECK(r1 < 2e-2 && r0 < 2e-2, "weight slabs: gpu-vs-cpu %.3e (default slabs %.3e)", r1, r0);
        CHECK(launches[1] == launches[0], "weight slabs: %ld few-row launches, %ld with one slab (groups unlinked?)",
              launches[1], launches[0]);
    }
    for (int i = 0; i < 3; i++) { free(act[i]); pi0_model_free(mg[i]); }
    free(rc.act);
    pi0_inputs_buf_free(ib);
    pi0_tensors_free(t);
    pi0_model_free(mc);
}

static long resident_bytes(void) {
    long size = 0, pages = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld %ld", &size, &pages) != 2) pages = -1;
    if (f) fclose(f);
    return pages * sysconf(_SC_PAGESIZE);
}

/* A full-size checkpoint's host view leaves the process as the CUDA store takes its copy (backend.h weights_upload's
 * done): the load adds far less than the weights to the resident size, where it added all of them (the file's pages,
 * or Orbax's decoded tensors); the device memory it takes is what the store counts. Prints a session's bytes at B = 1
 * (docs/jetson.md, Memory). */
static void e2e_host_memory(const char *dir) {
    size_t dev0 = free_mem();
    long rss0 = resident_bytes();
    pi0_model *m = NULL;
    pi0_session *s = NULL;
    int ok = pi0_model_load(&m, dir, &(pi0_model_params){.quiet = 1, .backend = PI0_BACKEND_CUDA}) == PI0_OK;
    long rss1 = resident_bytes();
    size_t dev1 = free_mem();
    pi0_memory_info mi;
    ok = ok && pi0_session_create(&s, m, NULL) == PI0_OK && pi0_session_memory_info(s, &mi) == PI0_OK;
    CHECK(ok, "host memory %s: %s", dir, pi0_last_error());
    if (ok) {
        size_t w = mi.weights_bf16 + mi.weights_f32 + mi.weights_8bit, took = dev0 - dev1;
        printf("full-size %s on CUDA: the load added %.3f GB to the resident size; weights %.3f GB on the device (bf16 %.3f, "
               "fp32 %.3f), the load took %.3f GB of device memory; a session at B = 1 %.3f GB %s\n", dir,
               (rss1 - rss0) / 1e9, w / 1e9, mi.weights_bf16 / 1e9, mi.weights_f32 / 1e9, took / 1e9, mi.session / 1e9,
               rss1 - rss0 < (long)(w / 4) && took + (64u << 20) >= w && took <= w + w / 50 + (64u << 20) ? "OK" : "FAIL");
        CHECK(rss1 - rss0 < (long)(w / 4), "host memory: the load added %.3f GB to the resident size, the weights are %.3f GB",
              (rss1 - rss0) / 1e9, w / 1e9);
        CHECK(took + (64u << 20) >= w && took <= w + w / 50 + (64u << 20),
              "host memory: the load took %.3f GB of device memory, the store counts %.3f GB", took / 1e9, w / 1e9);
    }
    pi0_session_free(s);
    pi0_model_free(m);
}

static void resources(const char *dir, int expect_oom) {
    pi0_model *m = NULL;
    if (pi0_model_load(&m, dir, &(pi0_model_params){.quiet = 1, .backend = PI0_BACKEND_CUDA}) != PI0_OK) {
        CHECK(0, "load %s: %s", dir, pi0_last_error());
        return;
    }
    pi0_session *s = NULL;
    pi0_session_create(&s, m, &(pi0_session_params){.max_batch = 2});
    pi0_session_free(s);   /* warm: cuBLASLt and the runtime allocate once per process */
    size_t before = free_mem();
    for (int i = 0; i < 5; i++) {
        s = NULL;
        CHECK(pi0_session_create(&s, m, &(pi0_session_params){.max_batch = 2}) == PI0_OK, "session %d", i);
        pi0_session_free(s);
    }
    size_t after = free_mem();
    printf("session create/free x5: device free memory %zu -> %zu bytes\n", before, after);
    CHECK(after == before, "device memory leaked: %lld bytes", (long long)before - (long long)after);
    s = NULL;
    if (!expect_oom) { pi0_model_free(m); return; }
    pi0_status st = pi0_session_create(&s, m, &(pi0_session_params){.max_batch = 4096});
    printf("max_batch 4096: %s: %s\n", pi0_status_str(st), pi0_last_error());
    CHECK(st == PI0_ERR_NOMEM && strstr(pi0_last_error(), "cudaMalloc") && !s,
          "impossible session: clear out-of-memory error");
    size_t after_oom = free_mem();
    /* the driver may return cached pages after a failed allocation, so free memory can only grow */
    CHECK(after_oom >= before, "failed session creation released everything (%zu -> %zu bytes)", before, after_oom);
    CHECK(pi0_session_create(&s, m, NULL) == PI0_OK, "model still usable after OOM: %s", pi0_last_error());
    pi0_session_free(s);
    pi0_model_free(m);
}

/* Full-size random checkpoint: B=2 (sample 1 with a masked camera and padded prompt), GPU vs CPU. */
static int full_8bit_only;   /* --full-8bit: e2e_full's 8-bit checks alone */

static void e2e_full(const char *dir) {
    pi0_model *mc = NULL, *mg = NULL;
    if (pi0_model_load(&mc, dir, &(pi0_model_params){.quiet = 1, .action_horizon = 10}) != PI0_OK ||
        pi0_model_load(&mg, dir, &(pi0_model_params){.quiet = 1, .backend = PI0_BACKEND_CUDA, .action_horizon = 10}) !=
            PI0_OK) {
        CHECK(0, "load %s: %s", dir, pi0_last_error());
        pi0_model_free(mc);
        return;
    }
    pi0_model_info info;
    pi0_model_get_info(mc, &info);
    int B = 2, N = 3, R = info.image_size, L = info.pi05 ? 200 : 48, H = info.action_horizon, A = info.action_dim;
    size_t ni = (size_t)B * N * R * R * 3;
    float *img = malloc(ni * 4), *state = malloc((size_t)B * A * 4), *noise = malloc((size_t)B * H * A * 4);
    int32_t *tok = malloc((size_t)B * L * 4);
    uint8_t *tm = malloc((size_t)B * L), im[6] = {1, 1, 1, 1, 1, 0};
    for (size_t i = 0; i < ni; i++) img[i] = (float)(2 * pi0_rng_uniform(&rng) - 1);
    for (int i = 0; i < B * A; i++) state[i] = i % A < 8 ? (float)pi0_rng_normal(&rng) : 0;
    for (int i = 0; i < B * H * A; i++) noise[i] = (float)pi0_rng_normal(&rng);
    for (int i = 0; i < B * L; i++) {
        int valid = i < L ? (i % L) < 20 : (i % L) < (info.pi05 ? 64 : 13);
        tm[i] = (uint8_t)valid;
        tok[i] = valid ? (int32_t)(1 + pi0_rng_next(&rng) % 257000) : 0;
    }
    pi0_inputs in = {.batch = B, .images = img, .image_masks = im, .state = state, .tokens = tok, .token_mask = tm,
                     .n_tokens = L, .noise = noise};
    result rc = {0}, rg = {0};
    int ok = !full_8bit_only && infer(mc, &in, 0, &rc) && infer(mg, &in, 0, &rg);
    CHECK(ok || full_8bit_only, "full-size inference %s", dir);
    if (ok) {
        double mx, r = rel_l2(rg.act, rc.act, rc.n, &mx), r0 = rel_l2(rg.act, rc.act, rc.n / 2, NULL),
                   r1 = rel_l2(rg.act + rc.n / 2, rc.act + rc.n / 2, rc.n / 2, NULL);
        int nan = 0;
        for (size_t i = 0; i < rg.n; i++) nan |= rg.act[i] != rg.act[i];
        printf("full-size %s (%s): GPU bf16 vs CPU fp32 actions rel_l2=%.3e (sample 0 %.3e, sample 1 %.3e) "
               "max_abs=%.3e, NaN=%d, bound 2e-2 %s\n", dir, info.pi05 ? "pi05" : "pi0", r, r0, r1, mx, nan,
               r < 2e-2 && !nan ? "OK" : "FAIL");
        CHECK(r < 2e-2 && !nan, "full-size rel_l2 %.3e", r);
        /* B = 1 (sample 0 alone): the suffix keys after the cache and, where it applies, the fused expert step */
        in.batch = 1;
        result r1g = {0};
        CHECK(infer(mg, &in, 0, &r1g), "full-size B=1 inference %s", dir);
        if (r1g.act) {
            double mx1, rb = rel_l2(r1g.act, rc.act, rc.n / 2, &mx1);
            printf("full-size %s (%s) B=1: GPU vs CPU sample 0 rel_l2=%.3e max_abs=%.3e, bound 2e-2 %s\n", dir,
                   info.pi05 ? "pi05" : "pi0", rb, mx1, rb < 2e-2 ? "OK" : "FAIL");
            CHECK(rb < 2e-2, "full-size B=1 rel_l2 %.3e", rb);
        }
        free(r1g.act);
        /* exact real-time chunking at the real shapes, B = 2 and B = 1 */
        for (int b = 2; b >= 1; b--) {
            in.batch = b;
            float *rbuf = with_rtc(&in, PI0_RTC_EXACT, H, A);
            result xc = {0}, xg = {0};
            int okx = infer(mc, &in, 0, &xc) && infer(mg, &in, 0, &xg);
            CHECK(okx, "full-size rtc exact B=%d %s", b, dir);
            if (okx) {
                double mxx, rx = rel_l2(xg.act, xc.act, xc.n, &mxx);
                printf("full-size %s (%s) rtc exact B=%d: GPU vs CPU rel_l2=%.3e max_abs=%.3e, bound 2e-2 %s\n", dir,
                       info.pi05 ? "pi05" : "pi0", b, rx, mxx, rx < 2e-2 ? "OK" : "FAIL");
                CHECK(rx < 2e-2, "full-size rtc exact B=%d rel_l2 %.3e", b, rx);
            }
            free(xc.act); free(xg.act); free(rbuf);
            in.rtc = PI0_RTC_OFF;
            in.rtc_prev = in.rtc_weights = in.rtc_max_weights = NULL;
        }
    }
    pi0_model_free(mc);
    pi0_model_free(mg);
    mc = mg = NULL;
    /* int8, every stage: the GPU against the CPU twin at B = 2 (bound 1e-2) */
    in.batch = 2;
    in.rtc = PI0_RTC_OFF;
    in.rtc_prev = in.rtc_weights = in.rtc_max_weights = NULL;
    in.rtc_exact = NULL;
    /* int8 (every stage) and fp8 (vision and prefix): the GPU against the CPU twin at B = 2 (bound_8bit) */
    for (int f8 = 0; f8 < 2 && (!f8 || fp8_here(dir)); f8++) {
        const char *pn = f8 ? "fp8" : "int8";
        pi0_model_params q8 = {.quiet = 1, .action_horizon = 10, .precision = f8 ? PI0_PRECISION_FP8 : PI0_PRECISION_INT8},
                         q8g = q8;
        q8g.backend = PI0_BACKEND_CUDA;
        result qc = {0}, qg = {0};
        int okq = pi0_model_load(&mc, dir, &q8) == PI0_OK && pi0_model_load(&mg, dir, &q8g) == PI0_OK &&
                  infer(mc, &in, 0, &qc) && infer(mg, &in, 0, &qg);
        CHECK(okq, "full-size %s %s: %s", pn, dir, pi0_last_error());
        if (okq) {
            double mxq, rq = rel_l2(qg.act, qc.act, qc.n, &mxq), rb = rc.act ? rel_l2(qg.act, rc.act, qc.n, NULL) : 0;
            double bd = bound_8bit(q8.precision);
            printf("full-size %s (%s) %s: GPU vs CPU rel_l2=%.3e max_abs=%.3e, bound %.0e %s", dir, info.pi05 ? "pi05" : "pi0",
                   pn, rq, mxq, bd, rq < bd ? "OK" : "FAIL");
            if (rc.act) printf(" (%s vs fp32 CPU: %.3e)", pn, rb);
            printf("\n");
            CHECK(rq < bd, "full-size %s rel_l2 %.3e", pn, rq);
        }
        free(qc.act); free(qg.act);
        pi0_model_free(mc);
        pi0_model_free(mg);
        mc = mg = NULL;
    }
    free(rc.act); free(rg.act);
    free(img); free(state); free(noise); free(tok); free(tm);
    pi0_model_free(mc);
    pi0_model_free(mg);
}

/* ---- π0-FAST: the GPU's tokens against the CPU's ---- */

/* One decode on m (internal entry: the logits' top two per step come back too). */
static int fast_run(pi0_model *m, const pi0_inputs *in, int n, int32_t *tok, float *top2, int *run) {
    pi0_session *s = NULL;
    int ok = pi0_session_create(&s, m, &(pi0_session_params){.max_batch = in->batch, .max_decoding_steps = n}) == PI0_OK &&
             api_check_inputs(s, in) == PI0_OK && fast_generate(s->fs, in, n, 0, tok, run, top2, NULL) == PI0_OK;
    if (!ok) printf("  fast decode: %s\n", pi0_last_error());
    pi0_session_free(s);
    return ok;
}

/* Tokens equal for the first `want` steps (or all that ran) of every sample; where a sample's tokens part, the CPU's
 * margin at that step must be a near-tie: within 4x the largest difference between the two backends' top logits seen
 * while the tokens agreed. */
static void fast_compare(const char *what, pi0_model *mc, pi0_model *mg, const pi0_inputs *in, int n, int want) {
    int B = in->batch, rc = 0, rg = 0;
    int32_t *tc = calloc((size_t)B * n, 4), *tg = calloc((size_t)B * n, 4);
    float *pc = calloc((size_t)B * n * 2, 4), *pg = calloc((size_t)B * n * 2, 4);
    int ok = fast_run(mc, in, n, tc, pc, &rc) && fast_run(mg, in, n, tg, pg, &rg);
    CHECK(ok, "π0-FAST %s: decoding failed", what);
    for (int b = 0; ok && b < B; b++) {
        /* the steps both ran: once one sample's tokens part at a near-tie, the batch's stop rule may end one
         * backend's decoding before the other's */
        int first = -1, upto = want < rc ? want : rc;
        upto = upto < rg ? upto : rg;
        double err = 0, top = 0;
        int at = 0;
        for (int k = 0; k < upto && first < 0; k++) {
            const float *c2 = pc + 2 * ((size_t)b * n + k), *g2 = pg + 2 * ((size_t)b * n + k);
            if (tc[(size_t)b * n + k] != tg[(size_t)b * n + k]) first = k;
            else if (fabs(c2[0] - g2[0]) > err) { err = fabs(c2[0] - g2[0]); at = k; }
            if (fabs(c2[0]) > top) top = fabs(c2[0]);
        }
        if (first < 0) {
            const float *c2 = pc + 2 * ((size_t)b * n + at), *g2 = pg + 2 * ((size_t)b * n + at);
            /* the chosen token's logit, not only its index: bf16's error is a few hundredths (a wrong logit behind an
             * unchanged argmax once hid a kernel that mishandled the masked rows' scale 0) */
            CHECK(err <= 0.05 * (top > 1 ? top : 1), "π0-FAST %s sample %d: top logit |GPU - CPU| %.3e at step %d "
                  "(CPU %.4e, GPU %.4e)", what, b, err, at, c2[0], g2[0]);
            printf("π0-FAST %-34s sample %d: %d of %d tokens equal (CPU %d steps, GPU %d), top logit |GPU - CPU| <= %.2e "
                   "(top logits up to %.2e; the largest difference at step %d: CPU %.4e / %.4e, GPU %.4e / %.4e) OK\n",
                   what, b, upto, upto, rc, rg, err, top, at, c2[0], c2[1], g2[0], g2[1]);
            continue;
        }
        const float *c2 = pc + 2 * ((size_t)b * n + first);
        double margin = c2[0] - c2[1];
        int tie = margin <= 4 * err;
        printf("π0-FAST %-34s sample %d: tokens part at step %d (CPU %d, GPU %d); the CPU's margin there %.2e, the logits' "
               "error before %.2e: %s\n", what, b, first, tc[(size_t)b * n + first], tg[(size_t)b * n + first], margin, err,
               tie ? "a near-tie, OK" : "FAIL");
        CHECK(tie, "π0-FAST %s sample %d: tokens part at step %d with a margin of %.3e (error scale %.3e)", what, b, first,
              margin, err);
    }
    free(tc); free(tg); free(pc); free(pg);
}

/* Inputs for a π0-FAST model: sample 0 every camera and L0 prompt tokens; sample 1 a masked middle camera and fewer
 * tokens (the decode window holds masked rows); ar_tail tokens at the end of each prompt start causal blocks. */
static void e2e_fast(const char *dir, int n, int want) {
    pi0_model *mc = NULL, *mg = NULL;
    if (pi0_model_load(&mc, dir, &(pi0_model_params){.quiet = 1}) != PI0_OK ||
        pi0_model_load(&mg, dir, &(pi0_model_params){.quiet = 1, .backend = PI0_BACKEND_CUDA}) != PI0_OK) {
        CHECK(0, "load %s: %s", dir, pi0_last_error());
        pi0_model_free(mc);
        return;
    }
    pi0_model_info info;
    pi0_model_get_info(mc, &info);
    int B = 2, N = info.n_cameras, R = info.image_size, L = info.max_token_len < 48 ? info.max_token_len : 48;
    size_t ni = (size_t)B * N * R * R * 3;
    float *img = malloc(ni * 4);
    int32_t *tok = calloc((size_t)B * L, 4), *ar = calloc((size_t)B * L, 4);
    uint8_t *tm = calloc((size_t)B * L, 1), im[6] = {1, 1, 1, 1, 0, 1};
    for (size_t i = 0; i < ni; i++) img[i] = (float)(2 * pi0_rng_uniform(&rng) - 1);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < L; j++) {
            int len = b ? L / 2 : L - 2;
            tm[b * L + j] = j < len;
            tok[b * L + j] = j < len ? (int32_t)(2 + pi0_rng_next(&rng) % (uint64_t)(info.vocab_size - 2)) : 0;
        }
    pi0_inputs in = {.batch = B, .images = img, .image_masks = im, .tokens = tok, .token_mask = tm, .n_tokens = L,
                     .token_ar_mask = ar};
    char what[96];
    snprintf(what, sizeof what, "%s B=2", info.vocab_size > 1000 ? "full-size" : "tiny");
    fast_compare(what, mc, mg, &in, n, want);
    if (info.vocab_size > 1000) goto done;   /* full size: the CPU's prefill is slow; the B = 2 case holds both layouts */
    in.batch = 1;
    snprintf(what, sizeof what, "%s B=1", info.vocab_size > 1000 ? "full-size" : "tiny");
    fast_compare(what, mc, mg, &in, n, want);
    for (int b = 0; b < B; b++) ar[b * L + 3] = ar[b * L + 4] = 1;   /* two causal blocks inside the prompt */
    in.batch = B;
    snprintf(what, sizeof what, "%s B=2 prefix-LM blocks", info.vocab_size > 1000 ? "full-size" : "tiny");
    fast_compare(what, mc, mg, &in, n, want);
done:
    free(img); free(tok); free(ar); free(tm);
    pi0_model_free(mc);
    pi0_model_free(mg);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);   /* a crash log ends at the last line printed */
    pi0_rng_seed(&rng, SEED);
    printf("seed %llu\n", (unsigned long long)SEED);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: test_cuda_e2e runs on the GPU machine (make test-cuda)\n");
        return test_summary("test_cuda_e2e") || 1;
    }
    if (argc == 3 && !strcmp(argv[1], "--fast-only")) {   /* a π0-FAST checkpoint alone: quick checks of the decoder */
        e2e_fast(argv[2], 33, 32);
        return test_summary("test_cuda_e2e");
    }
    if (argc == 3 && !strcmp(argv[1], "--full-8bit")) {   /* a full-size π0 / π0.5: the int8 and fp8 checks alone */
        full_8bit_only = 1;
        e2e_full(argv[2]);
        return test_summary("test_cuda_e2e");
    }
    e2e_fixtures();
    e2e_int8();
    e2e_rtc_exact();
    e2e_prompt_lengths();
    e2e_graph_fault();
    e2e_bad_image();
    e2e_zero_copy();
    e2e_memory_info();
    e2e_fast("tests/fixtures/tiny-pi0-fast", 40, 32);
    resources("tests/fixtures/tiny-pi05", 0);
    /* a broken checkpoint on the GPU path: refused before anything reaches the device */
    pi0_model *bad = NULL;
    pi0_status st = pi0_model_load(&bad, "/nonexistent", &(pi0_model_params){.backend = PI0_BACKEND_CUDA});
    CHECK(st == PI0_ERR_IO && !bad && strstr(pi0_last_error(), "no checkpoint found"), "bad checkpoint on CUDA: %s",
          pi0_last_error());
    st = pi0_model_load(&bad, "tests/fixtures/tiny-pi0", &(pi0_model_params){.backend = PI0_BACKEND_CUDA, .device = 9});
    CHECK(st == PI0_ERR_ARG && !bad && strstr(pi0_last_error(), "CUDA device 9"), "bad device: %s", pi0_last_error());
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--fast")) e2e_fast(argv[i + 1], 33, 32);   /* a π0-FAST checkpoint (gen-checkpoint) */
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--full")) {
            for (int j = i + 1; j < argc; j++) {
                e2e_host_memory(argv[j]);
                e2e_full(argv[j]);
            }
            if (i + 1 < argc) resources(argv[i + 1], 1);
            break;
        }
    return test_summary("test_cuda_e2e");
}
