/* main.c — pi0-server: a drop-in replacement for openpi's websocket policy server
 * (scripts/serve_policy.py, src/openpi/serving/websocket_policy_server.py). Options, policy loading,
 * signals; the protocol is in ws.c and msgnp.c, the inference pipeline in engine.c. server/README.md
 * is the manual. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "pi0.h"
#include "policy_backend.h"
#include "ws.h"

static const char usage[] =
    "usage: pi0-server --checkpoint DIR --tokenizer FILE (--robot libero|droid|aloha | --config NAME) [options]\n"
    "       pi0-server --checkpoint LEROBOT_DIR --tokenizer FILE [options]   (LeRobot's keys, \"task\" as the prompt)\n"
    "  --checkpoint DIR        openpi checkpoint: PyTorch conversion (model.safetensors, config.json) or Orbax\n"
    "                          (params/, as openpi publishes and trains), with assets/<id>/norm_stats.json\n"
    "  --tokenizer FILE        SentencePiece model (paligemma_tokenizer.model)\n"
    "  --fast-tokenizer DIR    π0-FAST's action tokenizer (required for it): the directory of Hugging Face's\n"
    "                          physical-intelligence/fast (tokenizer.json, processor_config.json) or its tokenizer.json\n"
    "  --robot NAME            libero | droid | aloha (required unless --config names it)\n"
    "  --config NAME           openpi config (pi0_libero, pi05_droid, pi0_aloha_sim, pi0_fast_droid, ...)\n"
    "  --asset-id ID           norm stats folder under DIR/assets (default: the config's, else the only one)\n"
    "  --default-prompt TEXT   prompt for observations without one\n"
    "  --host H                address to bind (default 0.0.0.0: every IPv4 interface)\n"
    "  --port N                default 8000; 0 = any free port (printed)\n"
    "  --backend cpu|cuda      default cpu\n"
    "  --device N              CUDA device (one server process per GPU)\n"
    "  --threads N             CPU threads for the model (default: all cores)\n"
    "  --steps N               flow-matching steps (default 10; π0-FAST has none)\n"
    "  --action-horizon N      actions per chunk (default: config.json's, else the --config's, else 50)\n"
    "  --action-dim N          π0-FAST: the chunk's width its tokens decode to (default: the --config's, else\n"
    "                          config.json's, else 32)\n"
    "  --max-token-len N       prompt length limit (default: config.json's, else the --config's, else 48 / 200)\n"
    "  --precision bf16|int8|fp8  the large products' precision (default bf16; docs/precision.md)\n"
    "  --quant-stages LIST     the 8-bit stages, of vision,prefix,expert (default: all the precision has a path for)\n"
    "  --api-key KEY           require 'Authorization: Api-Key KEY' (or set PI0_API_KEY)\n"
    "  --max-batch N           run up to N concurrent requests as one batch (default 1)\n"
    "  --batch-window-ms T     after a request, wait up to T ms for others to batch with it (default 0)\n"
    "  --max-wait-ms T         and wait up to T ms for requests that have arrived and are still being prepared, so\n"
    "                          that a fleet's requests, which come back together, make one batch (default 50; 0 off)\n"
    "  --rtc-horizon S, --rtc-schedule zeros|ones|linear|exp, --rtc-max-weight W, --rtc-mode lerobot|exact\n"
    "                          real-time chunking's defaults for requests with \"rtc\" that name none (a LeRobot\n"
    "                          directory's rtc_config, else 10, linear, 10 as LeRobot's RTCConfig; LeRobot's form;\n"
    "                          exact = the paper's guidance through the expert's transpose, about 2x the denoise)\n"
    "  --max-message-bytes N   refuse larger requests (default 67108864)\n"
    "  --max-pending-bytes N   bytes all connections' incomplete requests may hold together; past it a request\n"
    "                          gets an error and close 1013, try again later (default 268435456)\n"
    "  --message-timeout-s T   refuse a request still incomplete after T seconds, close 1008 (default 30)\n"
    "  --warmup 0|1|all        run synthetic batches before listening: 1 = of 1 and --max-batch, all = of every\n"
    "                          size 1..--max-batch (default: 1 on cuda or with --warmup-prompt, else 0)\n"
    "  --warmup-prompt TEXT    the warm-up's prompt (repeatable, up to 8: the warm-up runs for each): the prompt the\n"
    "                          robots will send, so that their first batches do not pay for a new prompt length\n"
    "                          (pi05 with discrete state: the state's digits change the length too)\n";

static ws_server *volatile g_server;

/* First signal: graceful stop. A second one, or one before the server runs: exit now. */
static void on_signal(int sig) {
    static volatile sig_atomic_t seen;
    ws_server *s = g_server;
    if (seen++ || !s) _exit(128 + sig);
    ws_server_stop(s);
}

static int parse_int(const char *opt, const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "pi0-server: %s: expected an integer in [%ld, %ld], got '%s'\n", opt, lo, hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

int main(int argc, char **argv) {
    const char *checkpoint = NULL, *backend = "cpu";
    pi0_policy_params pp = {0};
    ws_params wp = {.port = 8000, .api_key = getenv("PI0_API_KEY")};
    engine_params ep = {.max_batch = 1, .max_wait_ms = -1, .rtc_mode = PI0_RTC_LEROBOT};
    long v, warmup = -1;
    const char *warm_prompts[8];
    int n_warm_prompts = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage, stdout); return 0; }
        if (i + 1 >= argc) { fprintf(stderr, "pi0-server: unknown option or missing value: %s\n%s", a, usage); return 2; }
        const char *val = argv[++i];
        if (!strcmp(a, "--checkpoint")) checkpoint = val;
        else if (!strcmp(a, "--tokenizer")) pp.tokenizer = val;
        else if (!strcmp(a, "--fast-tokenizer")) pp.fast_tokenizer = val;
        else if (!strcmp(a, "--robot")) pp.robot = val;
        else if (!strcmp(a, "--config")) pp.config = val;
        else if (!strcmp(a, "--asset-id")) pp.asset_id = val;
        else if (!strcmp(a, "--default-prompt")) pp.default_prompt = val;
        else if (!strcmp(a, "--host")) wp.host = val;
        else if (!strcmp(a, "--api-key")) wp.api_key = val;
        else if (!strcmp(a, "--backend")) backend = val;
        else if (!strcmp(a, "--precision")) {
            if (strcmp(val, "bf16") && strcmp(val, "int8") && strcmp(val, "fp8")) {
                fprintf(stderr, "pi0-server: --precision: expected bf16, int8 or fp8, got '%s'\n", val);
                return 2;
            }
            pp.model.precision = !strcmp(val, "int8") ? PI0_PRECISION_INT8
                                 : !strcmp(val, "fp8") ? PI0_PRECISION_FP8 : PI0_PRECISION_BF16;
        } else if (!strcmp(a, "--quant-stages")) {
            unsigned bits = 0;
            char list[64];
            snprintf(list, sizeof list, "%s", val);
            for (char *t = strtok(list, ","); t; t = strtok(NULL, ","))
                bits |= !strcmp(t, "vision") ? PI0_STAGE_VISION : !strcmp(t, "prefix") ? PI0_STAGE_PREFIX
                        : !strcmp(t, "expert") ? PI0_STAGE_EXPERT : 0x100;
            if (!bits || bits & 0x100 || strlen(val) >= sizeof list) {
                fprintf(stderr, "pi0-server: --quant-stages: expected a list of vision, prefix, expert; got '%s'\n", val);
                return 2;
            }
            pp.model.quant_stages = bits;
        }
        else if (!strcmp(a, "--port")) { if (parse_int(a, val, 0, 65535, &v)) return 2; wp.port = (int)v; }
        else if (!strcmp(a, "--device")) { if (parse_int(a, val, 0, 1024, &v)) return 2; pp.model.device = (int)v; }
        else if (!strcmp(a, "--threads")) { if (parse_int(a, val, 0, 4096, &v)) return 2; pp.model.n_threads = (int)v; }
        else if (!strcmp(a, "--steps")) { if (parse_int(a, val, 1, 1000, &v)) return 2; pp.num_steps = (int)v; }
        else if (!strcmp(a, "--action-horizon")) { if (parse_int(a, val, 1, 4096, &v)) return 2; pp.model.action_horizon = (int)v; }
        else if (!strcmp(a, "--action-dim")) { if (parse_int(a, val, 1, 4096, &v)) return 2; pp.model.action_dim = (int)v; }
        else if (!strcmp(a, "--max-token-len")) { if (parse_int(a, val, 1, 4096, &v)) return 2; pp.model.max_token_len = (int)v; }
        else if (!strcmp(a, "--warmup")) {
            if (!strcmp(val, "all")) warmup = 2;
            else if (strcmp(val, "0") && strcmp(val, "1")) {
                fprintf(stderr, "pi0-server: --warmup: expected 0, 1 or all, got '%s'\n", val);
                return 2;
            } else warmup = val[0] - '0';
        }
        else if (!strcmp(a, "--warmup-prompt")) {
            if (n_warm_prompts == 8) { fprintf(stderr, "pi0-server: --warmup-prompt: at most 8\n"); return 2; }
            warm_prompts[n_warm_prompts++] = val;
        }
        else if (!strcmp(a, "--max-batch")) { if (parse_int(a, val, 1, 256, &v)) return 2; ep.max_batch = (int)v; }
        else if (!strcmp(a, "--batch-window-ms")) { if (parse_int(a, val, 0, 10000, &v)) return 2; ep.batch_window_ms = (double)v; }
        else if (!strcmp(a, "--max-wait-ms")) { if (parse_int(a, val, 0, 10000, &v)) return 2; ep.max_wait_ms = (double)v; }
        else if (!strcmp(a, "--rtc-horizon")) { if (parse_int(a, val, 1, 4096, &v)) return 2; ep.rtc_horizon = (int)v; }
        else if (!strcmp(a, "--rtc-schedule")) {
            static const char *const names[] = {"zeros", "ones", "linear", "exp"};
            ep.rtc_schedule_set = 0;
            for (int k = 0; k < 4; k++) if (!strcmp(val, names[k])) { ep.rtc_schedule = (pi0_rtc_schedule)k; ep.rtc_schedule_set = 1; }
            if (!ep.rtc_schedule_set) { fprintf(stderr, "pi0-server: --rtc-schedule: expected zeros, ones, linear or exp\n"); return 2; }
        } else if (!strcmp(a, "--rtc-mode")) {
            if (!strcmp(val, "exact")) ep.rtc_mode = PI0_RTC_EXACT;
            else if (!strcmp(val, "lerobot")) ep.rtc_mode = PI0_RTC_LEROBOT;
            else { fprintf(stderr, "pi0-server: --rtc-mode: expected lerobot or exact\n"); return 2; }
        } else if (!strcmp(a, "--rtc-max-weight")) {
            char *end;
            double w = strtod(val, &end);
            if (*end || !(w > 0) || w > 1e30) { fprintf(stderr, "pi0-server: --rtc-max-weight: expected a number > 0\n"); return 2; }
            ep.rtc_max_weight = (float)w;
        }
        else if (!strcmp(a, "--max-message-bytes")) {
            if (parse_int(a, val, 1024, 1L << 31, &v)) return 2;
            wp.max_message_bytes = (size_t)v;
        } else if (!strcmp(a, "--max-pending-bytes")) {
            if (parse_int(a, val, 1024, 1L << 40, &v)) return 2;
            wp.max_pending_bytes = (size_t)v;
        } else if (!strcmp(a, "--message-timeout-s")) {
            if (parse_int(a, val, 1, 86400, &v)) return 2;
            wp.message_timeout_s = (double)v;
        } else { fprintf(stderr, "pi0-server: unknown option %s\n%s", a, usage); return 2; }
    }
    if (!checkpoint || !pp.tokenizer) { fprintf(stderr, "pi0-server: --checkpoint and --tokenizer are required\n%s", usage); return 2; }
    if (!strcmp(backend, "cuda")) pp.model.backend = PI0_BACKEND_CUDA;
    else if (!strcmp(backend, "cpu")) pp.model.backend = PI0_BACKEND_CPU;
    else { fprintf(stderr, "pi0-server: --backend: expected cpu or cuda, got '%s'\n", backend); return 2; }
    pp.max_batch = ep.max_batch;
    int rtc_horizon_set = ep.rtc_horizon > 0, rtc_max_set = ep.rtc_max_weight > 0;
    if (n_warm_prompts && !warmup) {
        fprintf(stderr, "pi0-server: --warmup-prompt with --warmup 0: nothing would use the prompt\n");
        return 2;
    }
    if (warmup < 0) warmup = n_warm_prompts || pp.model.backend == PI0_BACKEND_CUDA;   /* the CPU has no one-time costs */
    ep.prepare_threads = ep.max_batch > 2 ? 4 : 2;

    pi0_policy *policy = NULL;
    pi0_status st = pi0_policy_load(&policy, checkpoint, &pp);
    if (st != PI0_OK) {
        srv_log("cannot load the policy from %s: %s (%s)", checkpoint, pi0_last_error(), pi0_status_str(st));
        return 1;
    }
    /* The first inference of a CUDA process pays one-time costs (module loading, GEMM algorithm timing, graph
     * capture: 0.4-0.6 s on an H100): paid here, before robots connect, for B = 1 and the largest batch */
    double warm_ms = 0;
    for (int k = 0; k < (n_warm_prompts ? n_warm_prompts : 1); k++) {
        const char *prompt = n_warm_prompts ? warm_prompts[k] : NULL;
        for (int bs = 1; warmup && bs <= ep.max_batch; bs = warmup == 2 || bs == ep.max_batch ? bs + 1 : ep.max_batch) {
            double ms = 0;
            if ((st = pi0_policy_warmup_prompt(policy, bs, prompt, &ms)) != PI0_OK) {
                srv_log("%s (%s)", pi0_last_error(), pi0_status_str(st));
                pi0_policy_free(policy);
                return 1;
            }
            srv_log("warm-up: batch %d%s%s%s in %.1f ms", bs, prompt ? " with \"" : "", prompt ? prompt : "",
                    prompt ? "\"" : "", ms);
            warm_ms += ms;
        }
    }
    if (warmup == 2)
        srv_log("warm-up: every batch size 1..%d%s in %.1f s", ep.max_batch,
                n_warm_prompts > 1 ? " for each prompt" : "", warm_ms / 1e3);
    pi0_policy_info info;
    pi0_policy_get_info(policy, &info);
    /* real-time chunking's defaults: the options, else the policy's (a LeRobot directory's rtc_config) */
    if (!rtc_horizon_set) ep.rtc_horizon = info.rtc_horizon;
    if (!rtc_max_set) ep.rtc_max_weight = info.rtc_max_weight;
    if (!ep.rtc_schedule_set) { ep.rtc_schedule = info.rtc_schedule; ep.rtc_schedule_set = 1; }
    srv_backend b;
    policy_backend_init(&b, policy);

    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    char err[512];
    ws_server *s = NULL;
    st = ws_server_create(&s, &wp, &b, &ep, err, sizeof err);
    if (st != PI0_OK) {
        srv_log("%s", err);
        pi0_policy_free(policy);
        return 1;
    }
    g_server = s;
    pi0_model_info mi;
    pi0_model_get_info(info.model, &mi);
    srv_log("policy %s%s%s (%s, robot %s, actions [%d, %d], asset %s) on %s %s; max batch %d, window %.0f ms%s",
            checkpoint, info.config && info.config[0] ? " config " : "", info.config ? info.config : "",
            mi.fast ? "π0-FAST, greedy decoding of up to 256 tokens" : mi.pi05 ? "π0.5" : "π0",
            info.robot_name, info.action_horizon, info.action_dim, info.asset_id ? info.asset_id : "-",
            pi0_session_backend(info.session), pi0_session_device(info.session), ep.max_batch, ep.batch_window_ms,
            wp.api_key ? ", API key required" : "");
    if (mi.quant_stages) {
        unsigned q = mi.quant_stages;
        srv_log("precision: %s for%s%s%s, bf16 for the rest", mi.precision == PI0_PRECISION_FP8 ? "fp8" : "int8",
                q & PI0_STAGE_VISION ? " vision" : "",
                q & PI0_STAGE_PREFIX ? " prefix" : "", q & PI0_STAGE_EXPERT ? " expert" : "");
    }
    srv_log("listening on %s:%d", wp.host && wp.host[0] ? wp.host : "0.0.0.0", ws_server_port(s));
    ws_server_run(s);
    engine_stats es;
    ws_server_get_stats(s, &es);
    g_server = NULL;
    ws_server_free(s);
    pi0_policy_free(policy);
    srv_log("stopped: %llu requests (%llu errors) in %llu batches, largest batch %d", (unsigned long long)es.requests,
            (unsigned long long)es.errors, (unsigned long long)es.batches, es.largest_batch);
    char hist[2048] = "";
    size_t k = 0;
    for (int n = 1; n <= 256 && k < sizeof hist - 32; n++)
        if (es.batch_sizes[n]) k += (size_t)snprintf(hist + k, sizeof hist - k, " %d:%llu", n, (unsigned long long)es.batch_sizes[n]);
    if (k) srv_log("batch sizes (size:runs):%s", hist);
    return 0;
}
