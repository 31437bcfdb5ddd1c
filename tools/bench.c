/* bench.c — `pi0 bench`: the reference workloads of docs/formats.md 3 with random weights.
 * Prints p50/p90/p99/mean latency, Hz and the vision/prefill/denoise split, as a table and optionally
 * as CSV (commit, device, driver). Without --full on the CPU backend it runs a REDUCED workload: the
 * tiny model (same architecture, toy widths) with the workload's batch, camera masks, prompt
 * lengths and horizon, so the default command finishes in seconds on any machine. */
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#ifndef PI0_COMMIT
#define PI0_COMMIT "unknown"
#endif

typedef struct {
    const char *name;
    int pi05;   /* the model: 0 π0, 1 π0.5, 2 π0-FAST (horizon: its decoding steps) */
    int batch, cams_valid, tok_valid, tok_padded, horizon;
    int rtc;   /* pi0_rtc_mode: real-time chunking's guidance towards a random leftover (delay 3, linear to row 8) */
} workload;

static const workload workloads[] = {
    {"pi0-3cam", 0, 1, 3, 20, 20, 10, PI0_RTC_OFF},
    {"pi0-libero", 0, 1, 2, 20, 48, 10, PI0_RTC_OFF},
    {"pi0-h50", 0, 1, 3, 20, 20, 50, PI0_RTC_OFF},
    {"pi05-3cam", 1, 1, 3, 64, 200, 10, PI0_RTC_OFF},
    {"pi0-3cam-b8", 0, 8, 3, 20, 20, 10, PI0_RTC_OFF},
    {"pi0-3cam-b64", 0, 64, 3, 20, 20, 10, PI0_RTC_OFF},
    {"pi0-3cam-rtc", 0, 1, 3, 20, 20, 10, PI0_RTC_LEROBOT},
    {"pi0-3cam-rtc-exact", 0, 1, 3, 20, 20, 10, PI0_RTC_EXACT},
    {"pi05-3cam-rtc-exact", 1, 1, 3, 64, 200, 10, PI0_RTC_EXACT},
    {"pi0-3cam-b8-rtc-exact", 0, 8, 3, 20, 20, 10, PI0_RTC_EXACT},
    {"pi0fast-3cam", 2, 1, 3, 40, 48, 50, PI0_RTC_OFF},
    {"pi0fast-3cam-b8", 2, 8, 3, 40, 48, 50, PI0_RTC_OFF},
};
#define N_WORKLOADS ((int)(sizeof workloads / sizeof *workloads))

static int parse_workload(const char *name, workload *w) {
    for (int i = 0; i < N_WORKLOADS; i++)
        if (!strcmp(name, workloads[i].name)) { *w = workloads[i]; return 1; }
    int b;
    char tail;
    if (sscanf(name, "pi0-3cam-b%d%c", &b, &tail) == 1 && b >= 1 && b <= 4096) {   /* pi0-3cam-bN */
        *w = workloads[0];
        w->batch = b;
        w->name = name;
        return 1;
    }
    return 0;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *sorted, int n, double p) {   /* nearest rank */
    int k = (int)ceil(p / 100.0 * n) - 1;
    return sorted[k < 0 ? 0 : k >= n ? n - 1 : k];
}

/* The generated checkpoints' paths (files first, then folders), made before generation so that SIGINT / SIGTERM can
 * remove a half-written 7 GB file with async-signal-safe calls only. */
static char g_paths[3][6][300];
static volatile sig_atomic_t g_armed[3];

static void remove_tree(int t) {   /* only what gen-checkpoint writes */
    for (int i = 0; i < 3; i++) unlink(g_paths[t][i]);
    for (int i = 3; i < 6; i++) rmdir(g_paths[t][i]);
    g_armed[t] = 0;
}

static void on_signal(int sig) {
    for (int t = 0; t < 3; t++) if (g_armed[t]) remove_tree(t);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void arm(int t, const char *dir) {
    const char *rel[6] = {"model.safetensors", "config.json", "assets/random/norm_stats.json", "assets/random", "assets", ""};
    for (int i = 0; i < 6; i++) snprintf(g_paths[t][i], sizeof g_paths[t][i], "%s/%s", dir, rel[i]);
    g_armed[t] = 1;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
}

static int g_header;   /* the table header is printed with the first result, not before a failure */

static void header(const pi0_session *s) {
    if (g_header++) return;
    printf("machine: %s; driver: %s\n", pi0_session_device(s), pi0_session_driver(s));   /* CPU: model and threads */
    printf("%-14s %-7s %-4s %-5s %-5s %4s  %9s %9s %9s %9s %8s %9s  %10s %10s %10s\n", "workload", "scale", "be", "graph",
           "batch", "iter", "p50_ms", "p90_ms", "p99_ms", "mean_ms", "Hz", "samples/s", "vision_ms", "prefill_ms",
           "denoise_ms");
}

typedef struct {
    int full, iters, warmup, threads, device, no_graph;
    int vary;           /* --vary-tokens K: run i has tok_valid - i % K valid prompt tokens (a new prefix length) */
    pi0_backend_kind backend;
    pi0_precision precision;
    unsigned stages;
    const char *checkpoint;
    FILE *csv, *trace;
    int trace_events;
    char tmp[3][256];   /* generated checkpoints per model type, "" until made */
} bench_opts;

/* Chrome/Perfetto trace: one complete event ("ph": "X") per stage, microseconds. */
static void trace_event(bench_opts *o, const char *wl, const char *stage, double start_ms, double dur_ms) {
    if (!o->trace) return;
    fprintf(o->trace, "%s{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, "
            "\"pid\": 1, \"tid\": 1}", o->trace_events++ ? ",\n" : "", stage, wl, start_ms * 1e3, dur_ms * 1e3);
}

/* π0-FAST: w->horizon decoding steps (greedy; random weights rarely end early: the steps run are printed), the prefill
 * (vision included) and the time per decoded token apart. */
static int run_fast(bench_opts *o, const workload *w, pi0_model *m, const pi0_model_info *info) {
    int B = w->batch, N = info->n_cameras, R = info->image_size, L = w->tok_padded, n = w->horizon, rc = 1;
    pi0_session *s = NULL;
    if (pi0_session_create(&s, m, &(pi0_session_params){.max_batch = B, .max_decoding_steps = n}) != PI0_OK)
        return cli_fail("creating a session");
    size_t nimg = (size_t)B * N * R * R * 3;
    float *img = pi0_session_host_alloc(s, nimg * sizeof(float));
    int32_t *tok = malloc((size_t)B * L * 4), *ar = calloc((size_t)B * L, 4), *out = malloc((size_t)B * n * 4);
    uint8_t *tm = malloc((size_t)B * L), *im = malloc((size_t)B * N);
    double *lat = malloc((size_t)o->iters * 3 * sizeof(double)), *pre = lat + o->iters, *per = pre + o->iters;
    if (!img || !tok || !ar || !out || !tm || !im || !lat) { fprintf(stderr, "pi0 bench: out of memory\n"); goto done; }
    srand(7);
    for (size_t i = 0; i < nimg; i++) img[i] = 2.0f * rand() / (float)RAND_MAX - 1.0f;
    for (int i = 0; i < B * L; i++) { tm[i] = i % L < w->tok_valid; tok[i] = tm[i] ? 2 + rand() % (info->vocab_size - 2) : 0; }
    for (int i = 0; i < B * N; i++) im[i] = i % N < w->cams_valid;
    pi0_inputs in = {.batch = B, .images = img, .image_masks = im, .tokens = tok, .token_mask = tm, .n_tokens = L,
                     .token_ar_mask = ar};
    int steps = 0;
    for (int i = 0; i < o->warmup + o->iters; i++) {
        double t0 = now_ms();
        if (pi0_generate(s, &in, NULL, out, &steps) != PI0_OK) { rc = cli_fail("decoding"); goto done; }
        double dt = now_ms() - t0;
        pi0_timing tt;
        pi0_session_get_timing(s, &tt);
        if (i < o->warmup) continue;
        lat[i - o->warmup] = dt;
        pre[i - o->warmup] = tt.prefill_ms;
        per[i - o->warmup] = steps > 1 ? tt.denoise_ms / (steps - 1) : 0;
    }
    qsort(lat, (size_t)o->iters, sizeof *lat, cmp_d);
    qsort(pre, (size_t)o->iters, sizeof *pre, cmp_d);
    qsort(per, (size_t)o->iters, sizeof *per, cmp_d);
    printf("%-16s %-4s B=%-3d %4d  p50 %9.2f ms  p90 %9.2f ms  prefill p50 %8.2f ms  per token p50 %7.3f ms  (%d tokens, "
           "%d prompt tokens, %d cameras)\n", w->name, pi0_session_backend(s), B, o->iters, pct(lat, o->iters, 50),
           pct(lat, o->iters, 90), pct(pre, o->iters, 50), pct(per, o->iters, 50), steps, w->tok_valid, w->cams_valid);
    if (o->csv)
        fprintf(o->csv, "pi0fast,%s,%s,%s,%d,%d,%.3f,%.3f,%.3f,%d\n", PI0_COMMIT, pi0_session_device(s), w->name, B,
                o->iters, pct(lat, o->iters, 50), pct(pre, o->iters, 50), pct(per, o->iters, 50), steps);
    rc = 0;
done:
    pi0_host_free(img);
    free(tok); free(ar); free(out); free(tm); free(im); free(lat);
    pi0_session_free(s);
    return rc;
}

static int run_workload(bench_opts *o, const workload *w) {
    const char *dir = o->checkpoint;
    int t = w->pi05;
    if (!dir) {
        if (!o->tmp[t][0]) {
            snprintf(o->tmp[t], sizeof o->tmp[t], "%s/pi0-bench-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
            if (!mkdtemp(o->tmp[t])) { perror("pi0 bench: mkdtemp"); o->tmp[t][0] = 0; return 1; }
            arm(t, o->tmp[t]);
            int full = o->full || o->backend == PI0_BACKEND_CUDA;
            static const char *const variants[2][3] = {{"tiny-pi0", "tiny-pi05", "tiny-pi0-fast"}, {"pi0", "pi05", "pi0-fast"}};
            const char *variant = variants[full][t];
            fprintf(stderr, "pi0 bench: generating a random %s checkpoint in %s%s\n", variant, o->tmp[t],
                    full ? " (full size, about 7 GB)" : "");
            if (pi0_checkpoint_generate(o->tmp[t], &(pi0_gen_params){.variant = variant, .seed = 1}) != PI0_OK)
                return cli_fail("generating the checkpoint");
        }
        dir = o->tmp[t];
    }
    pi0_model *m = NULL;
    pi0_session *s = NULL;
    float *img = NULL, *state = NULL, *act = NULL, *rtc_prev = NULL, *rtc_w = NULL;
    int32_t *tok = NULL;
    uint8_t *tm = NULL, *im = NULL;
    double *lat = NULL;
    int rc = 1;
    pi0_model_params mp = {.backend = o->backend, .n_threads = o->threads, .device = o->device,
                           .action_horizon = w->horizon, .max_token_len = w->tok_padded, .quiet = 1,
                           .precision = o->precision, .quant_stages = o->stages};
    if (pi0_model_load(&m, dir, &mp) != PI0_OK) { rc = cli_fail("loading the checkpoint"); goto done; }
    pi0_model_info info;
    pi0_model_get_info(m, &info);
    if ((info.fast ? 2 : info.pi05) != w->pi05) {
        static const char *const kinds[] = {"pi0", "pi05", "pi0_fast"};
        fprintf(stderr, "pi0 bench: %s needs a %s checkpoint; skipped\n", w->name, kinds[w->pi05]);
        rc = 0;
        goto done;
    }
    if (info.fast) {
        rc = run_fast(o, w, m, &info);
        goto done;
    }
    if (pi0_session_create(&s, m, &(pi0_session_params){.max_batch = w->batch}) != PI0_OK) {
        rc = cli_fail("creating a session");
        goto done;
    }
    int B = w->batch, N = info.n_cameras, R = info.image_size, L = w->tok_padded;
    size_t nimg = (size_t)B * N * R * R * 3;
    img = pi0_session_host_alloc(s, nimg * sizeof(float));   /* page-locked for the GPU, as a robot's buffer should be */
    state = calloc((size_t)B * info.action_dim, sizeof(float));
    act = malloc((size_t)B * info.action_horizon * info.action_dim * sizeof(float));
    tok = malloc((size_t)B * L * sizeof(int32_t));
    tm = malloc((size_t)B * L);
    im = malloc((size_t)B * N);
    lat = malloc((size_t)(o->iters > 0 ? o->iters : 1) * sizeof(double));
    if (!img || !state || !act || !tok || !tm || !im || !lat) { fprintf(stderr, "pi0 bench: out of memory\n"); goto done; }
    srand(7);
    for (size_t i = 0; i < nimg; i++) img[i] = 2.0f * rand() / (float)RAND_MAX - 1.0f;
    for (int i = 0; i < B * L; i++) tok[i] = 1 + rand() % (info.vocab_size - 1);
    if (o->vary > w->tok_valid) {
        fprintf(stderr, "pi0 bench: --vary-tokens %d: %s has only %d valid prompt tokens\n", o->vary, w->name, w->tok_valid);
        goto done;
    }
    for (int i = 0; i < B * N; i++) im[i] = i % N < w->cams_valid;
    pi0_inputs in = {.batch = B, .images = img, .image_masks = im, .state = state, .tokens = tok, .token_mask = tm,
                     .n_tokens = L, .seed = 1};
    if (w->rtc) {
        size_t nh = (size_t)B * info.action_horizon;
        rtc_prev = malloc(nh * info.action_dim * sizeof(float));
        rtc_w = malloc((nh + B) * sizeof(float));
        if (!rtc_prev || !rtc_w) { fprintf(stderr, "pi0 bench: out of memory\n"); goto done; }
        for (size_t i = 0; i < nh * info.action_dim; i++) rtc_prev[i] = 2.0f * rand() / (float)RAND_MAX - 1.0f;
        for (int b = 0; b < B; b++)
            pi0_rtc_prefix_weights(PI0_RTC_LINEAR, 3, 8, info.action_horizon, info.action_horizon,
                                   rtc_w + (size_t)b * info.action_horizon);
        in.rtc = (pi0_rtc_mode)w->rtc;
        in.rtc_prev = rtc_prev;
        in.rtc_weights = rtc_w;
        for (int b = 0; b < B; b++) rtc_w[nh + b] = 10.0f;   /* the caps, after the weights */
        in.rtc_max_weights = rtc_w + nh;
    }
    int tty = isatty(2);
    if (!tty) fprintf(stderr, "pi0 bench: %s: %d warm-up + %d timed runs\n", w->name, o->warmup, o->iters);
    double first_new = 0, first_max = 0;   /* --vary-tokens: the runs that meet a prompt length for the first time */
    for (int i = 0; i < o->warmup + o->iters; i++) {
        int valid = w->tok_valid - (o->vary > 1 ? i % o->vary : 0);
        for (int j = 0; j < B * L; j++) tm[j] = j % L < valid;
        if (tty && i < o->warmup) fprintf(stderr, "\rpi0 bench: %s: warming up %d/%d", w->name, i + 1, o->warmup);
        else if (tty) fprintf(stderr, "\rpi0 bench: %s: run %d/%d      ", w->name, i - o->warmup + 1, o->iters);
        double t0 = now_ms();
        if (pi0_infer(s, &in, act) != PI0_OK) { fprintf(stderr, "\n"); rc = cli_fail("inference"); goto done; }
        double dt = now_ms() - t0;
        if (i >= o->warmup) lat[i - o->warmup] = dt;
        if (o->vary > 1 && i > 0 && i < o->vary) {
            first_new += dt / (o->vary - 1);
            first_max = dt > first_max ? dt : first_max;
        }
        if (o->vary > 1 && i == 0) fprintf(stderr, "pi0 bench: %s: first run %.2f ms\n", w->name, dt);
    }
    if (o->vary > 1 && o->warmup + o->iters >= o->vary)
        fprintf(stderr, "pi0 bench: %s: first runs of %d new prompt lengths: mean %.2f ms, max %.2f ms\n", w->name,
                o->vary - 1, first_new, first_max);
    if (tty) fprintf(stderr, "\r%60s\r", "");
    /* the stage split comes from separate runs that synchronise between stages (no graph), at the workload's length */
    for (int j = 0; j < B * L; j++) tm[j] = j % L < w->tok_valid;
    pi0_session_set_stage_timing(s, 1);
    int nsplit = o->iters < 3 ? o->iters : 3;
    double vis = 0, pre = 0, den = 0;
    for (int i = 0; i < nsplit; i++) {
        pi0_timing tt;
        double t0 = now_ms();
        if (pi0_infer(s, &in, act) != PI0_OK) { rc = cli_fail("inference"); goto done; }
        pi0_session_get_timing(s, &tt);
        vis += tt.vision_ms; pre += tt.prefill_ms; den += tt.denoise_ms;
        trace_event(o, w->name, "vision", t0, tt.vision_ms);
        trace_event(o, w->name, "prefill", t0 + tt.vision_ms, tt.prefill_ms);
        trace_event(o, w->name, "denoise", t0 + tt.vision_ms + tt.prefill_ms, tt.denoise_ms);
    }
    vis /= nsplit; pre /= nsplit; den /= nsplit;
    int n = o->iters;
    double mean = 0;
    for (int i = 0; i < n; i++) mean += lat[i];
    mean /= n;
    qsort(lat, (size_t)n, sizeof *lat, cmp_d);
    double p50 = pct(lat, n, 50), p90 = pct(lat, n, 90), p99 = pct(lat, n, 99);
    const char *scale = o->full || o->checkpoint || o->backend == PI0_BACKEND_CUDA ? "full" : "reduced";
    int graph = o->backend == PI0_BACKEND_CUDA && !o->no_graph;
    header(s);
    /* the backend column names an 8-bit precision too ("cuda+int8:vpe": vision, prefix, expert) */
    char be[64], pn[32];
    snprintf(be, sizeof be, "%s%s%s", pi0_session_backend(s), info.quant_stages ? "+" : "",
             info.quant_stages ? cli_precision_name(info.precision, info.quant_stages, pn, sizeof pn) : "");
    printf("%-14s %-7s %-4s %-5s B=%-3d %4d  %9.2f %9.2f %9.2f %9.2f %8.2f %9.2f  %10.2f %10.2f %10.2f\n", w->name, scale,
           be, graph ? "on" : "off", B, n, p50, p90, p99, mean, 1000.0 / p50, 1000.0 * B / p50, vis,
           pre, den);
    size_t used = 0, total = 0;   /* the footprint on a GPU this process has to itself (README, GPU: 12 GB cards) */
    if (pi0_session_memory(s, &used, &total) == PI0_OK)
        printf("  device memory in use after %s: %.2f GB of %.2f GB (every process on the device)\n", w->name, used / 1e9,
               total / 1e9);
    if (o->csv) {
        char date[32];
        time_t now = time(NULL);
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        fprintf(o->csv, "%s,%s,%s,%s,%s,%s,%s,%s,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", date, PI0_COMMIT,
                pi0_session_device(s), pi0_session_driver(s), be, graph ? "on" : "off", w->name,
                scale, B, n, p50, p90, p99, mean, 1000.0 / p50, 1000.0 * B / p50, vis, pre, den);
    }
    rc = 0;
done:
    pi0_host_free(img);
    free(state); free(act); free(tok); free(tm); free(im); free(lat); free(rtc_prev); free(rtc_w);
    pi0_session_free(s);
    pi0_model_free(m);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o = {.iters = -1, .warmup = -1, .backend = PI0_BACKEND_CPU};
    const char *wname = "pi0-3cam", *csv = NULL, *trace = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x;
        if (!strcmp(a, "--workload") && v) wname = argv[++i];
        else if (!strcmp(a, "--full")) o.full = 1;
        else if (!strcmp(a, "--checkpoint") && v) o.checkpoint = argv[++i];
        else if (!strcmp(a, "--csv") && v) csv = argv[++i];
        else if (!strcmp(a, "--trace") && v) trace = argv[++i];
        else if (!strcmp(a, "--no-graph")) o.no_graph = 1;
        else if (!strcmp(a, "--device")) { if (!cli_parse_int(a, v, 0, 64, &x)) return 2; o.device = (int)x; i++; }
        else if (!strcmp(a, "--backend") && v) { if (!cli_backend(argv[++i], &o.backend)) return 2; }
        else if (!strcmp(a, "--precision") && v) { if (!cli_precision(argv[++i], &o.precision)) return 2; }
        else if (!strcmp(a, "--quant-stages") && v) { if (!cli_stages(argv[++i], &o.stages)) return 2; }
        else if (!strcmp(a, "--iters")) { if (!cli_parse_int(a, v, 1, 100000, &x)) return 2; o.iters = (int)x; i++; }
        else if (!strcmp(a, "--warmup")) { if (!cli_parse_int(a, v, 0, 100000, &x)) return 2; o.warmup = (int)x; i++; }
        else if (!strcmp(a, "--vary-tokens")) { if (!cli_parse_int(a, v, 1, 4096, &x)) return 2; o.vary = (int)x; i++; }
        else if (!strcmp(a, "--threads")) { if (!cli_parse_int(a, v, 0, 1024, &x)) return 2; o.threads = (int)x; i++; }
        else if (!strcmp(a, "--list")) {
            printf("%-14s %-5s %3s %12s %18s %8s\n", "workload", "model", "B", "cams(valid)", "tokens(valid/pad)", "horizon");
            for (int k = 0; k < N_WORKLOADS; k++)
                printf("%-14s %-5s %3d %10d(%d) %12d/%-5d %8d\n", workloads[k].name, workloads[k].pi05 == 2 ? "fast" : workloads[k].pi05 ? "pi05" : "pi0",
                       workloads[k].batch, 3, workloads[k].cams_valid, workloads[k].tok_valid, workloads[k].tok_padded,
                       workloads[k].horizon);
            printf("pi0-3cam-bN    any batch N\n");
            return 0;
        } else { fprintf(stderr, "pi0 bench: unknown or incomplete option '%s'\n", a); return 2; }
    }
    if (o.backend == PI0_BACKEND_CPU)
        fprintf(stderr, "pi0 bench: CPU backend%s\n",
                o.full || o.checkpoint ? "" : ": REDUCED workload (tiny model, same batch/cameras/prompt/horizon); --full for real sizes");
    if (o.no_graph) setenv("PI0_CUDA_GRAPHS", "0", 1);
    int cpu_full = (o.full || o.checkpoint) && o.backend == PI0_BACKEND_CPU;
    if (o.iters < 0) o.iters = cpu_full ? 1 : o.backend == PI0_BACKEND_CUDA ? 50 : 20;
    if (o.warmup < 0) o.warmup = cpu_full ? 0 : o.backend == PI0_BACKEND_CUDA ? 5 : 2;
    if (trace) {
        if (!(o.trace = fopen(trace, "w"))) { perror(trace); return 1; }
        fprintf(o.trace, "{\"traceEvents\": [\n");
    }
    if (csv) {
        int exists = access(csv, F_OK) == 0;
        if (!(o.csv = fopen(csv, "a"))) { perror(csv); return 1; }
        if (!exists)
            fprintf(o.csv, "date,commit,device,driver,backend,graph,workload,scale,batch,iters,p50_ms,p90_ms,p99_ms,"
                           "mean_ms,hz,samples_per_s,vision_ms,prefill_ms,denoise_ms\n");
    }
    /* a missing GPU is found now, not after generating a 7 GB checkpoint */
    if (pi0_backend_check(o.backend, o.device) != PI0_OK) return cli_fail("bench");
    int rc = 0;
    if (!strcmp(wname, "all")) {
        for (int k = 0; k < N_WORKLOADS && !rc; k++) rc = run_workload(&o, &workloads[k]);
    } else {
        workload w;
        if (!parse_workload(wname, &w)) {
            fprintf(stderr, "pi0 bench: unknown workload '%s' (see pi0 bench --list)\n", wname);
            rc = 2;
        } else {
            rc = run_workload(&o, &w);
        }
    }
    for (int t = 0; t < 3; t++) if (o.tmp[t][0]) remove_tree(t);
    if (g_header)
        printf("(times in ms; vision/prefill/denoise: the mean of up to 3 separate runs that synchronise between stages,\n"
               " without a CUDA graph, so their sum can exceed p50)\n");
    if (o.csv) fclose(o.csv);
    if (o.trace) {
        fprintf(o.trace, "\n]}\n");
        fclose(o.trace);
    }
    return rc;
}
