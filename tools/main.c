/* main.c — the `pi0` command-line front end of libpi0 (uses include/pi0.h only): dispatch, usage and the small
 * commands (infer, gen-checkpoint, info, convert, tokenize); run.c and bench.c hold the large ones, cli.c the helpers.
 *   pi0 run --checkpoint DIR --config NAME|--robot R --tokenizer FILE --image KEY=FILE ... --state .. --prompt ..
 *   pi0 infer --checkpoint DIR --inputs IN.safetensors --output OUT.safetensors [--steps N] [--seed S] [--dump]
 *   pi0 gen-checkpoint --variant pi0|pi05|pi0-fast|tiny-pi0|tiny-pi05|tiny-pi0-fast --seed S [--dtype bf16|f32]
 *                      [--force] DIR
 *   pi0 bench [--workload NAME|all] [--full] [--checkpoint DIR] [--iters N] [--warmup N] [--csv FILE]
 *   pi0 info --checkpoint DIR
 *   pi0 convert --checkpoint SRC --out DIR [--dtype bf16|f32|keep] [--config NAME] [--action-horizon N] [--force]
 *   pi0 tokenize --tokenizer FILE [TEXT]
 * `pi0 CMD --help` prints a command's usage; timing logic lives in bench.c of this folder, `pi0 run` in run.c. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pi0.h"
#include "cli.h"

/* Each command's usage: `pi0 CMD --help` prints it (exit 0); a usage error prints it after the message (exit 2). */
static const struct { const char *name, *usage; } CMDS[] = {
    {"run", NULL},   /* its own, longer help: run.c */
    {"infer", "pi0 infer --checkpoint DIR --inputs IN.safetensors --output OUT.safetensors\n"
              "          [--backend cpu|cuda] [--device N] [--steps N] [--seed S] [--threads N] [--dump]\n"
              "          [--precision bf16|int8|fp8 [--quant-stages vision,prefix,expert]]   (default bf16; int8: every\n"
              "           stage, fp8: vision and prefix, unless --quant-stages names some; docs/precision.md)\n"
              "          [--max-decoding-steps N (256)] [--temperature T (0: greedy)]   (π0-FAST: output_tokens [B, N])\n"
              "          [--action-horizon N] [--max-token-len N]   (default: the inputs' noise [B, H, A] and tokens\n"
              "           [B, L] when present, else the checkpoint's; Orbax checkpoints store neither)\n"
              "          [--rtc exact|lerobot --rtc-delay D --rtc-horizon S [--rtc-leftover N] --rtc-schedule zeros|ones|linear|exp\n"
              "           --rtc-max-weight W]   (real-time chunking towards the inputs' rtc_prev [B, H, A]; defaults 0, 10,\n"
              "           H, linear, 10 as LeRobot's RTCConfig)\n"
              "  runs the model on model-level inputs (images in [-1, 1], tokens, masks, state, optional noise)\n"},
    {"gen-checkpoint", "pi0 gen-checkpoint --variant pi0|pi05|pi0-fast|tiny-pi0|tiny-pi05|tiny-pi0-fast --seed S\n"
                       "                   [--dtype bf16|f32] [--force] DIR\n"
                       "  writes a random-weight checkpoint (full size: about 7 GB); refuses to overwrite one unless --force\n"},
    {"bench", "pi0 bench [--workload NAME|all] [--backend cpu|cuda] [--device N] [--full] [--checkpoint DIR]\n"
              "          [--precision bf16|int8|fp8 [--quant-stages vision,prefix,expert]]\n"
              "          [--iters N] [--warmup N] [--threads N] [--no-graph] [--csv FILE] [--trace FILE]\n"
              "          [--vary-tokens K]  (run i drops i % K prompt tokens: new prefix lengths)\n"
              "          [--list]  (the workloads)\n"},
    {"info", "pi0 info --checkpoint DIR [--backend cuda [--device N] [--max-batch B]] [--precision int8|fp8 [--quant-stages L]]\n  the format found (safetensors, lerobot, orbax-ocdbt, orbax-zarr) and every dimension; for a LeRobot\n"
             "  policy also its cameras, state and action features, normalisation modes and prompt format; with\n"
             "  --backend cuda the device memory a session for B observations (default 1) takes: its weights (bf16,\n"
             "  8-bit), its activations and scratch, all in use, and whether the GPU shares the host's memory\n"},
    {"convert", "pi0 convert --checkpoint SRC --out DIR [--dtype bf16|f32|keep] [--config NAME] [--action-horizon N]\n"
                "            [--max-token-len N] [--force]\n"
                "  any checkpoint (Orbax above all) -> model.safetensors + config.json + assets/\n"},
    {"check-precision", "pi0 check-precision --checkpoint DIR [--obs IN.safetensors] [--backend cpu|cuda] [--device N]\n"
                        "          [--batch B] [--seed S] [--threads N]\n"
                        "  how far int8 (each stage alone, and all) and fp8 (vision, prefix, both) move the actions from bf16,\n"
                        "  next to how far +-1 intensity\n"
                        "  level of noise on every camera moves them in bf16, on your observations (model-level inputs as\n"
                        "  `pi0 infer` reads them) or B random ones; a verdict per run and the options line to use\n"
                        "  (docs/precision.md)\n"},
    {"tokenize", "pi0 tokenize --tokenizer FILE [[--] TEXT]   plain SentencePiece ids (no TEXT: one line per stdin line)\n"
                 "pi0 tokenize --tokenizer FILE --format pi0|pi05 [--state v1,v2,...] [--max-len N] TEXT\n"
                 "  the model's prompt tokens and mask\n"},
};
#define N_CMDS ((int)(sizeof CMDS / sizeof *CMDS))

static void usage(FILE *f) {
    fprintf(f, "usage: pi0 <command> [options]   (pi0 <command> --help for one command)\ncommands:\n"
               "  run             the whole policy: robot observation in, action chunk out (pi0 run --help)\n");
    for (int i = 1; i < N_CMDS; i++) fprintf(f, "  %s", CMDS[i].usage);
}

static void cmd_usage(FILE *f, const char *name) {
    for (int i = 0; i < N_CMDS; i++)
        if (!strcmp(CMDS[i].name, name) && CMDS[i].usage) fprintf(f, "usage: %s", CMDS[i].usage);
}

/* ---- infer ---- */

static void dump_cb(void *user, const char *name, const float *data, int ndim, const int64_t *shape) {
    pi0_tensors *out = user;
    if (pi0_tensors_add(out, name, PI0_DT_F32, ndim, shape, data) != PI0_OK)
        fprintf(stderr, "pi0: warning: dropping dump '%s': %s\n", name, pi0_last_error());
}

/* π0-FAST: the action tokens as openpi's sample_actions returns them, output_tokens I32 [B, N]. */
static int infer_fast(const pi0_model *m, const pi0_inputs *in, int n, float temperature, const char *outp) {
    pi0_session *s = NULL;
    pi0_tensors *out_t = NULL;
    int32_t *tokens = NULL;
    int rc = 1, run = 0;
    if (!n) n = 256;   /* openpi's default */
    pi0_session_params sp = {.max_batch = in->batch, .max_decoding_steps = n};
    if (pi0_session_create(&s, m, &sp) != PI0_OK) { rc = cli_fail("creating a session"); goto done; }
    if (!(tokens = malloc((size_t)in->batch * n * sizeof *tokens))) { fprintf(stderr, "pi0: out of memory\n"); goto done; }
    if (pi0_generate(s, in, &(pi0_decode_params){.max_decoding_steps = n, .temperature = temperature}, tokens, &run) !=
        PI0_OK) {
        rc = cli_fail("decoding");
        goto done;
    }
    int64_t shape[2] = {in->batch, n};
    if (pi0_tensors_new(&out_t) != PI0_OK || pi0_tensors_add(out_t, "output_tokens", PI0_DT_I32, 2, shape, tokens) != PI0_OK ||
        pi0_tensors_save(out_t, outp) != PI0_OK) {
        rc = cli_fail("writing the output");
        goto done;
    }
    pi0_timing tm;
    pi0_session_get_timing(s, &tm);
    fprintf(stderr, "pi0: pi0-fast, B=%d, %d of %d decoding steps on %s: %.1f ms (prefill %.1f, decoding %.1f) -> %s\n",
            in->batch, run, n, pi0_session_backend(s), tm.total_ms, tm.prefill_ms, tm.denoise_ms, outp);
    rc = 0;
done:
    free(tokens);
    pi0_tensors_free(out_t);
    pi0_session_free(s);
    return rc;
}

static int cmd_infer(int argc, char **argv) {
    const char *ckpt = NULL, *inp = NULL, *outp = NULL;
    long long steps = 10, seed = 0, threads = 0, device = 0, horizon = 0, max_len = 0;
    long long rtc_delay = 0, rtc_horizon = 10, rtc_leftover = -1, dec_steps = 0;
    int dump = 0;
    const char *temp = "0";
    const char *rtc = NULL, *rtc_schedule = "linear", *rtc_max = "10";
    pi0_backend_kind backend = PI0_BACKEND_CPU;
    pi0_precision prec = PI0_PRECISION_BF16;
    unsigned stages = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--checkpoint") && v) ckpt = argv[++i];
        else if (!strcmp(a, "--precision") && v) { if (!cli_precision(argv[++i], &prec)) return 2; }
        else if (!strcmp(a, "--quant-stages") && v) { if (!cli_stages(argv[++i], &stages)) return 2; }
        else if (!strcmp(a, "--inputs") && v) inp = argv[++i];
        else if (!strcmp(a, "--output") && v) outp = argv[++i];
        else if (!strcmp(a, "--steps")) { if (!cli_parse_int(a, v, 1, 1000, &steps)) return 2; i++; }
        else if (!strcmp(a, "--seed")) { if (!cli_parse_int(a, v, 0, INT64_MAX, &seed)) return 2; i++; }
        else if (!strcmp(a, "--threads")) { if (!cli_parse_int(a, v, 0, 1024, &threads)) return 2; i++; }
        else if (!strcmp(a, "--device")) { if (!cli_parse_int(a, v, 0, 64, &device)) return 2; i++; }
        else if (!strcmp(a, "--backend") && v) { if (!cli_backend(argv[++i], &backend)) return 2; }
        else if (!strcmp(a, "--action-horizon")) { if (!cli_parse_int(a, v, 1, 4096, &horizon)) return 2; i++; }
        else if (!strcmp(a, "--max-token-len")) { if (!cli_parse_int(a, v, 1, 4096, &max_len)) return 2; i++; }
        else if (!strcmp(a, "--dump")) dump = 1;
        else if (!strcmp(a, "--max-decoding-steps")) { if (!cli_parse_int(a, v, 1, 65536, &dec_steps)) return 2; i++; }
        else if (!strcmp(a, "--temperature") && v) temp = argv[++i];
        else if (!strcmp(a, "--rtc") && v) rtc = argv[++i];
        else if (!strcmp(a, "--rtc-delay")) { if (!cli_parse_int(a, v, 0, 4096, &rtc_delay)) return 2; i++; }
        else if (!strcmp(a, "--rtc-horizon")) { if (!cli_parse_int(a, v, 0, 4096, &rtc_horizon)) return 2; i++; }
        else if (!strcmp(a, "--rtc-leftover")) { if (!cli_parse_int(a, v, 0, 4096, &rtc_leftover)) return 2; i++; }
        else if (!strcmp(a, "--rtc-schedule") && v) rtc_schedule = argv[++i];
        else if (!strcmp(a, "--rtc-max-weight") && v) rtc_max = argv[++i];
        else { fprintf(stderr, "pi0 infer: unknown or incomplete option '%s'\n", a); return 2; }
    }
    if (!ckpt || !inp || !outp) {
        fprintf(stderr, "pi0 infer: --checkpoint, --inputs and --output are required\n");
        return 2;
    }
    if (stages && prec == PI0_PRECISION_BF16) {
        fprintf(stderr, "pi0 infer: --quant-stages needs --precision int8 or fp8\n");
        return 2;
    }
    static const char *const schedules[] = {"zeros", "ones", "linear", "exp"};
    int sched = -1;
    for (int k = 0; k < 4; k++) if (!strcmp(rtc_schedule, schedules[k])) sched = k;
    char *end;
    double temperature = strtod(temp, &end);
    if (*end || !(temperature >= 0) || !isfinite(temperature)) {
        fprintf(stderr, "pi0 infer: --temperature %s: expected a finite number >= 0\n", temp);
        return 2;
    }
    double maxw = strtod(rtc_max, &end);
    if ((rtc && strcmp(rtc, "lerobot") && strcmp(rtc, "exact")) || sched < 0 || *end || !(maxw > 0) || !isfinite(maxw)) {
        fprintf(stderr, "pi0 infer: --rtc exact|lerobot, --rtc-schedule zeros|ones|linear|exp, --rtc-max-weight > 0 (got %s, %s, %s)\n",
                rtc ? rtc : "-", rtc_schedule, rtc_max);
        return 2;
    }
    pi0_model *m = NULL;
    pi0_session *s = NULL;
    pi0_tensors *in_t = NULL, *out_t = NULL;
    pi0_inputs_buf *ib = NULL;
    float *actions = NULL, *rtc_w = NULL;
    int rc = 1;
    pi0_inputs in;
    pi0_model_info info;
    if (pi0_tensors_open(&in_t, inp) != PI0_OK) {
        rc = cli_fail("reading inputs");
        goto done;
    }
    /* without flags the inputs size the model: the noise's horizon and the tokens' length (an Orbax checkpoint stores
     * neither, and a config's values would only refuse what the user gave) */
    int64_t shape_in[8];
    int ndim_in = 0;
    if (!horizon && pi0_tensors_get(in_t, "noise", NULL, &ndim_in, shape_in, NULL) == PI0_OK && ndim_in == 3 &&
        shape_in[1] >= 1 && shape_in[1] <= 4096)
        horizon = shape_in[1];
    if (!max_len && pi0_tensors_get(in_t, "tokens", NULL, &ndim_in, shape_in, NULL) == PI0_OK && ndim_in == 2 &&
        shape_in[1] >= 1 && shape_in[1] <= 4096)
        max_len = shape_in[1];
    if (pi0_model_load(&m, ckpt, &(pi0_model_params){.backend = backend, .n_threads = (int)threads, .device = (int)device,
                                                     .action_horizon = (int)horizon, .max_token_len = (int)max_len,
                                                     .precision = prec, .quant_stages = stages}) != PI0_OK) {
        rc = cli_fail("loading the checkpoint");
        goto done;
    }
    pi0_model_get_info(m, &info);
    if (pi0_inputs_from_tensors(m, in_t, inp, &in, &ib) != PI0_OK) {
        rc = cli_fail("reading inputs");
        goto done;
    }
    if (!in.noise) in.seed = (uint64_t)seed;
    if (info.fast) {
        if (rtc || dump) {
            fprintf(stderr, "pi0 infer: %s is a π0-FAST model: --rtc and --dump are for π0 / π0.5\n", ckpt);
            goto done;
        }
        rc = infer_fast(m, &in, (int)dec_steps, (float)temperature, outp);
        goto done;
    }
    if (dec_steps || temperature > 0) {
        fprintf(stderr, "pi0 infer: --max-decoding-steps and --temperature are for π0-FAST models; %s is a %s model\n", ckpt,
                info.pi05 ? "π0.5" : "π0");
        goto done;
    }
    if (rtc) {   /* real-time chunking: the inputs' rtc_prev, prefix weights from the options (every sample alike) */
        int H = info.action_horizon;
        if (!in.rtc_prev) { fprintf(stderr, "pi0 infer: --rtc needs an rtc_prev tensor [B, H, A] in %s\n", inp); goto done; }
        if (!(rtc_w = malloc((size_t)in.batch * (H + 1) * sizeof(float)))) { fprintf(stderr, "pi0: out of memory\n"); goto done; }
        if (pi0_rtc_prefix_weights((pi0_rtc_schedule)sched, (int)rtc_delay, (int)rtc_horizon,
                                   rtc_leftover < 0 ? H : (int)rtc_leftover, H, rtc_w) != PI0_OK) { rc = cli_fail("--rtc"); goto done; }
        for (int b = 1; b < in.batch; b++) memcpy(rtc_w + (size_t)b * H, rtc_w, (size_t)H * sizeof(float));
        in.rtc = strcmp(rtc, "exact") ? PI0_RTC_LEROBOT : PI0_RTC_EXACT;
        in.rtc_weights = rtc_w;
        for (int b = 0; b < in.batch; b++) rtc_w[(size_t)in.batch * H + b] = (float)maxw;   /* the caps, after W */
        in.rtc_max_weights = rtc_w + (size_t)in.batch * H;
    }
    if (pi0_tensors_new(&out_t) != PI0_OK) { rc = cli_fail("output"); goto done; }
    pi0_session_params sp = {.max_batch = in.batch, .num_steps = (int)steps, .dump = dump ? dump_cb : NULL,
                             .dump_user = out_t};
    if (pi0_session_create(&s, m, &sp) != PI0_OK) { rc = cli_fail("creating a session"); goto done; }
    size_t na = (size_t)in.batch * info.action_horizon * info.action_dim;
    if (!(actions = malloc(na * sizeof(float)))) { fprintf(stderr, "pi0: out of memory\n"); goto done; }
    if (pi0_infer(s, &in, actions) != PI0_OK) { rc = cli_fail("inference"); goto done; }
    int64_t shape[3] = {in.batch, info.action_horizon, info.action_dim};
    if (pi0_tensors_add(out_t, "actions", PI0_DT_F32, 3, shape, actions) != PI0_OK ||
        pi0_tensors_save(out_t, outp) != PI0_OK) {
        rc = cli_fail("writing the output");
        goto done;
    }
    pi0_timing tm;
    pi0_session_get_timing(s, &tm);
    fprintf(stderr, "pi0: %s, B=%d, %lld steps on %s: %.1f ms (vision %.1f, prefill %.1f, denoise %.1f) -> %s\n",
            info.pi05 ? "pi0.5" : "pi0", in.batch, steps, pi0_session_backend(s), tm.total_ms, tm.vision_ms,
            tm.prefill_ms, tm.denoise_ms, outp);
    rc = 0;
done:
    free(actions);
    free(rtc_w);
    pi0_inputs_buf_free(ib);
    pi0_tensors_free(in_t);
    pi0_tensors_free(out_t);
    pi0_session_free(s);
    pi0_model_free(m);
    return rc;
}

/* ---- gen-checkpoint ---- */

static int cmd_gen(int argc, char **argv) {
    const char *variant = NULL, *dir = NULL;
    long long seed = -1;
    int f32 = 0, force = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--variant") && v) variant = argv[++i];
        else if (!strcmp(a, "--seed")) { if (!cli_parse_int(a, v, 0, INT64_MAX, &seed)) return 2; i++; }
        else if (!strcmp(a, "--dtype") && v) {
            v = argv[++i];
            if (!strcmp(v, "f32")) f32 = 1;
            else if (strcmp(v, "bf16")) { fprintf(stderr, "pi0 gen-checkpoint: --dtype: expected bf16 or f32\n"); return 2; }
        } else if (!strcmp(a, "--force")) force = 1;
        else if (a[0] != '-' && !dir) dir = a;
        else { fprintf(stderr, "pi0 gen-checkpoint: unknown or incomplete option '%s'\n", a); return 2; }
    }
    if (!variant || !dir || seed < 0) {
        fprintf(stderr, "pi0 gen-checkpoint: --variant, --seed and DIR are required\n");
        return 2;
    }
    if (pi0_checkpoint_generate(dir, &(pi0_gen_params){.variant = variant, .seed = (uint64_t)seed, .f32 = f32,
                                                       .force = force}) != PI0_OK)
        return cli_fail("gen-checkpoint");
    fprintf(stderr, "pi0: wrote %s checkpoint (seed %lld, %s) to %s\n", variant, seed, f32 ? "F32" : "BF16", dir);
    return 0;
}

/* Plain ids of the text argument, or of every stdin line (like spm_encode). */
static int tokenize_print(const pi0_tokenizer *t, const char *text, size_t len) {
    size_t n = 0, cap = len + 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) { fprintf(stderr, "pi0: out of memory\n"); return 1; }
    if (pi0_tokenize(t, text, len, ids, cap, &n) != PI0_OK) { free(ids); return cli_fail("tokenize"); }
    for (size_t i = 0; i < n && i < cap; i++) printf("%s%d", i ? " " : "", ids[i]);
    printf("\n");
    free(ids);
    return 0;
}

/* --format pi0|pi05: the model's prompt tokens (first line) and mask (second line). */
static int print_prompt(const pi0_tokenizer *t, const char *text, int format, const char *state_arg, long long max_len) {
    double state[4096];
    int ns = 0;
    if (state_arg && *state_arg) {
        for (const char *p = state_arg; ns < 4096;) {
            char *end;
            errno = 0;
            double v = strtod(p, &end);
            if (end == p || errno) { fprintf(stderr, "pi0 tokenize: --state: expected numbers separated by commas, got '%s'\n", p); return 2; }
            state[ns++] = v;
            if (*end == 0) break;
            if (*end != ',') { fprintf(stderr, "pi0 tokenize: --state: unexpected '%c'\n", *end); return 2; }
            p = end + 1;
        }
    }
    int32_t *tok = malloc((size_t)max_len * sizeof *tok);
    uint8_t *mask = malloc((size_t)max_len);
    int nv = 0, rc = 0;
    if (!tok || !mask) { fprintf(stderr, "pi0: out of memory\n"); rc = 1; }
    else if (pi0_tokenize_prompt(t, text, format ? PI0_PROMPT_PI05 : PI0_PROMPT_PI0, state, ns, (int)max_len, tok, mask,
                                 &nv) != PI0_OK) rc = cli_fail("tokenize");
    else {
        for (long long i = 0; i < max_len; i++) printf("%s%d", i ? " " : "", tok[i]);
        printf("\n");
        for (long long i = 0; i < max_len; i++) printf("%s%d", i ? " " : "", mask[i]);
        printf("\n");
    }
    free(tok);
    free(mask);
    return rc;
}

static int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *state = NULL;
    int format = -1;
    long long max_len = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--format") && i + 1 < argc) {
            const char *f = argv[++i];
            if (!strcmp(f, "pi0")) format = 0;
            else if (!strcmp(f, "pi05")) format = 1;
            else { fprintf(stderr, "pi0 tokenize: --format: expected pi0 or pi05, got '%s'\n", f); return 2; }
        } else if (!strcmp(argv[i], "--state") && i + 1 < argc) state = argv[++i];
        else if (!strcmp(argv[i], "--max-len")) { if (!cli_parse_int(argv[i], i + 1 < argc ? argv[i + 1] : NULL, 1, 4096, &max_len)) return 2; i++; }
        else if (!strcmp(argv[i], "--") && i + 1 < argc && !text) text = argv[++i];   /* text starting with '-' */
        else if (argv[i][0] != '-' && !text) text = argv[i];
        else { fprintf(stderr, "pi0 tokenize: unknown or incomplete option '%s'\n", argv[i]); return 2; }
    }
    if (!model) { fprintf(stderr, "pi0 tokenize: --tokenizer FILE is required\n"); return 2; }
    pi0_tokenizer *t;
    if (pi0_tokenizer_load(&t, model) != PI0_OK) return cli_fail("loading the tokenizer");
    int rc = 0;
    if (format >= 0) {
        if (!max_len) max_len = format ? 200 : 48;   /* openpi's max_token_len for π0 / π0.5 */
        rc = text ? print_prompt(t, text, format, state, max_len) : (fprintf(stderr, "pi0 tokenize: --format needs TEXT\n"), 2);
    } else if (text) rc = tokenize_print(t, text, strlen(text));
    else {
        char *line = NULL;
        size_t cap = 0;
        ssize_t len;
        while (!rc && (len = getline(&line, &cap, stdin)) >= 0) {
            if (len && line[len - 1] == '\n') len--;
            rc = tokenize_print(t, line, (size_t)len);
        }
        free(line);
    }
    pi0_tokenizer_free(t);
    return rc;
}

static int cmd_convert(int argc, char **argv) {
    const char *src = NULL, *out = NULL;
    long long n;
    pi0_convert_params cp = {0};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--checkpoint") && v) src = argv[++i];
        else if (!strcmp(a, "--out") && v) out = argv[++i];
        else if (!strcmp(a, "--force")) cp.force = 1;
        else if (!strcmp(a, "--config") && v) cp.config = argv[++i];
        else if (!strcmp(a, "--action-horizon")) { if (!cli_parse_int(a, v, 1, 4096, &n)) return 2; cp.action_horizon = (int)n; i++; }
        else if (!strcmp(a, "--max-token-len")) { if (!cli_parse_int(a, v, 1, 4096, &n)) return 2; cp.max_token_len = (int)n; i++; }
        else if (!strcmp(a, "--dtype") && v) {
            v = argv[++i];
            if (!strcmp(v, "bf16")) cp.dtype = PI0_CONVERT_BF16;
            else if (!strcmp(v, "f32")) cp.dtype = PI0_CONVERT_F32;
            else if (!strcmp(v, "keep")) cp.dtype = PI0_CONVERT_KEEP;
            else { fprintf(stderr, "pi0 convert: --dtype: expected bf16, f32 or keep, found '%s'\n", v); return 2; }
        } else { fprintf(stderr, "pi0 convert: unknown or incomplete option '%s'\n", a); return 2; }
    }
    if (!src || !out) {
        fprintf(stderr, "pi0 convert: --checkpoint and --out are required\n");
        return 2;
    }
    if (pi0_checkpoint_convert(src, out, &cp) != PI0_OK) return cli_fail("convert");
    fprintf(stderr, "pi0: wrote %s/model.safetensors, config.json and assets/ from %s\n", out, src);
    return 0;
}

static int cmd_info(int argc, char **argv) {
    const char *ckpt = NULL;
    long long device = 0, batch = 1;
    int device_set = 0;
    pi0_backend_kind backend = PI0_BACKEND_CPU;
    pi0_precision prec = PI0_PRECISION_BF16;
    unsigned stages = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--checkpoint") && v) ckpt = argv[++i];
        else if (!strcmp(a, "--backend") && v) { if (!cli_backend(argv[++i], &backend)) return 2; }
        else if (!strcmp(a, "--precision") && v) { if (!cli_precision(argv[++i], &prec)) return 2; }
        else if (!strcmp(a, "--quant-stages") && v) { if (!cli_stages(argv[++i], &stages)) return 2; }
        else if (!strcmp(a, "--device")) { if (!cli_parse_int(a, v, 0, 64, &device)) return 2; i++; device_set = 1; }
        else if (!strcmp(a, "--max-batch")) { if (!cli_parse_int(a, v, 1, 4096, &batch)) return 2; i++; }
        else { fprintf(stderr, "pi0 info: unknown or incomplete option '%s'\n", a); return 2; }
    }
    if (!ckpt) {
        fprintf(stderr, "pi0 info: --checkpoint DIR is required\n");
        return 2;
    }
    if ((batch != 1 || device_set) && backend != PI0_BACKEND_CUDA) {
        fprintf(stderr, "pi0 info: %s a CUDA session's footprint: it needs --backend cuda\n",
                device_set ? "--device picks the GPU of" : "--max-batch sizes");
        return 2;
    }
    pi0_model *m;
    if (pi0_model_load(&m, ckpt, &(pi0_model_params){.backend = backend, .device = (int)device, .precision = prec,
                                                     .quant_stages = stages}) != PI0_OK)
        return cli_fail("loading the checkpoint");
    pi0_model_info i;
    pi0_model_get_info(m, &i);

    printf("format: %s\nmodel: %s\nparameters: %lld\naction_dim: %d\naction_horizon: %d\nmax_token_len: %d\ncameras: %d\n"
           "image_size: %d\nvocab_size: %d\n", i.format, i.fast ? "pi0_fast" : i.pi05 ? "pi05" : "pi0", (long long)i.n_params, i.action_dim,
           i.action_horizon, i.max_token_len, i.n_cameras, i.image_size, i.vocab_size);
    printf("vision: width %d, depth %d, mlp_dim %d, num_heads %d, patch_size %d\n", i.vision.width, i.vision.depth,
           i.vision.mlp_dim, i.vision.num_heads, i.vision.patch_size);
    printf("paligemma: width %d, depth %d, mlp_dim %d, num_heads %d, num_kv_heads %d, head_dim %d\n", i.paligemma.width,
           i.paligemma.depth, i.paligemma.mlp_dim, i.paligemma.num_heads, i.paligemma.num_kv_heads, i.paligemma.head_dim);
    if (i.fast)
        printf("action_expert: none (π0-FAST decodes action tokens: pi0 infer writes output_tokens; pi0 run and pi0-server "
               "turn them into actions with --fast-tokenizer)\n");
    else printf("action_expert: width %d, depth %d, mlp_dim %d, num_heads %d, num_kv_heads %d, head_dim %d\n",
           i.action_expert.width, i.action_expert.depth, i.action_expert.mlp_dim, i.action_expert.num_heads,
           i.action_expert.num_kv_heads, i.action_expert.head_dim);
    char pn[32];   /* "int8:vpe": int8 for vision, prefix, expert (docs/precision.md) */
    printf("precision: %s\n", cli_precision_name(i.precision, i.quant_stages, pn, sizeof pn));
    if (!strncmp(i.format, "orbax", 5))
        printf("note: %s are openpi's defaults (an Orbax checkpoint stores none); pass them with --config or %s\n"
               "read: %.2f s\n", i.fast ? "action_dim, action_horizon and max_token_len" : "action_horizon and max_token_len",
               i.fast ? "--action-dim / --action-horizon / --max-token-len" : "--action-horizon / --max-token-len", i.load_s);
    if (!strcmp(i.format, "lerobot")) {   /* its features, stats and norm modes, from the processor files */
        char *text = NULL;
        if (pi0_lerobot_describe(m, &text) != PI0_OK) {
            /* A directory without processor files is a model alone (LeRobot before 0.4 kept none): pi0 infer and
             * convert run it, so info succeeds. Processor files that are there but unusable are an error: `pi0 run`
             * and the server refuse them, and a deployment script checks with `pi0 info`. */
            char pre[4096], post[4096];
            struct stat sb;
            snprintf(pre, sizeof pre, "%s/policy_preprocessor.json", i.root);
            snprintf(post, sizeof post, "%s/policy_postprocessor.json", i.root);
            int absent = stat(pre, &sb) != 0 && stat(post, &sb) != 0;
            printf("lerobot: %s (the model alone runs: pi0 infer, pi0 convert)\n",
                   absent ? "no policy pipeline: policy_preprocessor.json and policy_postprocessor.json are absent"
                          : "the policy pipeline cannot be used");
            if (!absent) {
                pi0_model_free(m);
                return cli_fail("reading the LeRobot policy pipeline");
            }
        } else printf("%s\n", text);
        free(text);
    }
    if (backend == PI0_BACKEND_CUDA) {   /* the footprint of a session: what a smaller card must hold (README, GPU) */
        pi0_session *s;
        size_t used = 0, total = 0;
        if (pi0_session_create(&s, m, &(pi0_session_params){.max_batch = (int)batch}) != PI0_OK) {
            pi0_model_free(m);
            return cli_fail("creating a session");
        }
        pi0_memory_info mi;
        pi0_status ms = pi0_session_memory(s, &used, &total);
        if (ms == PI0_OK) ms = pi0_session_memory_info(s, &mi);
        if (ms == PI0_OK)
            printf("device: %s\nintegrated GPU (shares the host's memory): %s\n"
                   "weights on the device: %.3f GB (bf16 %.3f, fp32 copies %.3f, 8-bit %.3f)\n"
                   "session for batch %lld on the device: %.3f GB (activations, KV cache and scratch; the first inference "
                   "may add GEMM timing scratch)\n"
                   "device memory in use with a session for batch %lld: %.2f GB of %.2f GB (every process on the device, "
                   "this one's CUDA context included%s)\n",
                   pi0_session_device(s), mi.integrated ? "yes" : "no",
                   (mi.weights_bf16 + mi.weights_f32 + mi.weights_8bit) / 1e9, mi.weights_bf16 / 1e9, mi.weights_f32 / 1e9,
                   mi.weights_8bit / 1e9, batch, mi.session / 1e9, batch, used / 1e9, total / 1e9,
                   mi.integrated ? "; integrated: the system's memory, the OS's included" : "");
        pi0_session_free(s);
        if (ms != PI0_OK) {
            pi0_model_free(m);
            return cli_fail("reading the device memory");
        }
    }
    pi0_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    static const struct { const char *name; int (*fn)(int, char **); } fns[] = {
        {"run", cmd_run}, {"infer", cmd_infer}, {"gen-checkpoint", cmd_gen}, {"bench", cmd_bench},
        {"info", cmd_info}, {"convert", cmd_convert}, {"tokenize", cmd_tokenize},
        {"check-precision", cmd_check_precision}};
    for (size_t k = 0; k < sizeof fns / sizeof *fns; k++) {
        if (strcmp(cmd, fns[k].name)) continue;
        for (int i = 2; i < argc && strcmp(cmd, "run"); i++) {   /* run answers --help itself */
            if (!strcmp(argv[i], "--")) break;
            if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { cmd_usage(stdout, cmd); return 0; }
        }
        int rc = fns[k].fn(argc - 2, argv + 2);
        if (rc == 2) cmd_usage(stderr, cmd);
        return rc;
    }
    fprintf(stderr, "pi0: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
