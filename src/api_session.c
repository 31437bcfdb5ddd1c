/* api_session.c — the session handle of include/pi0.h: pi0_session_create / _free and its reports (timing,
 * backend, device, memory), pi0_infer (checks its inputs with api_inputs.c, runs model.c, checks the actions), and
 * host memory for inputs (pi0_host_alloc: page-locked through the backend that has it). Owns one backend instance
 * and one model_sess per session; the forward pass itself is model.c's, the weights the model's (api_model.c). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "util.h"

/* pi0_host_alloc: a 64-byte header records which allocator made the block (the provider whose host_alloc did, or
 * NULL for aligned_alloc); the pointer after it stays 64-byte aligned, as cudaMallocHost's and glibc's large blocks
 * are. */
enum { HOST_HDR = 64 };

static void *host_alloc(const pi0_backend_provider *prov, size_t bytes) {
    if (bytes > SIZE_MAX - 2 * HOST_HDR) return NULL;
    char *b = prov && prov->host_alloc ? prov->host_alloc(bytes + HOST_HDR) : NULL;
    if (!b) prov = NULL;
    if (!b && !(b = aligned_alloc(HOST_HDR, (bytes + 2 * HOST_HDR - 1) / HOST_HDR * HOST_HDR))) return NULL;
    memcpy(b, &prov, sizeof prov);
    return b + HOST_HDR;
}

void *pi0_host_alloc(size_t bytes) { return host_alloc(backend_pinned_provider(), bytes); }

void *pi0_session_host_alloc(const pi0_session *s, size_t bytes) { return host_alloc(s ? s->m->prov : NULL, bytes); }

void pi0_host_free(void *p) {
    if (!p) return;
    char *b = (char *)p - HOST_HDR;
    const pi0_backend_provider *prov;
    memcpy(&prov, b, sizeof prov);
    if (prov) prov->host_free(b);
    else free(b);
}

void pi0_session_free(pi0_session *s) {
    if (!s) return;
    model_sess_free(s->ms);
    fast_sess_free(s->fs);
    if (s->be) s->be->destroy(s->be);
    free(s);
}

pi0_status pi0_session_create(pi0_session **out, const pi0_model *m, const pi0_session_params *p) {
    if (!out || !m) return pi0_fail(PI0_ERR_ARG, "pi0_session_create: NULL argument");
    *out = NULL;
    pi0_session_params def = {0};
    if (!p) p = &def;
    int max_b = p->max_batch ? p->max_batch : 1, steps = p->num_steps ? p->num_steps : 10;
    if (max_b < 1 || max_b > 4096) return pi0_fail(PI0_ERR_ARG, "max_batch %d: expected 1..4096", p->max_batch);
    if (steps < 1 || steps > 1000) return pi0_fail(PI0_ERR_ARG, "num_steps %d: expected 1..1000", p->num_steps);
    int dec = p->max_decoding_steps ? p->max_decoding_steps : 256;   /* openpi's sample_actions default */
    if (dec < 1 || dec > 65536)
        return pi0_fail(PI0_ERR_ARG, "max_decoding_steps %d: expected 1..65536", p->max_decoding_steps);
    pi0_session *s = calloc(1, sizeof *s);
    if (!s) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    s->m = m;
    s->max_batch = max_b;
    s->max_decoding_steps = dec;
    s->dump = p->dump;
    s->dump_user = p->dump_user;
    /* One backend instance per session (its scratch, stream and graphs are not shared between
     * threads); the weights are the model's (the mapping on the CPU, its store on CUDA). */
    pi0_status st = m->prov->create(&s->be, m->device, m->n_threads, m->store);
    if (st == PI0_OK && m->cfg.fast) st = fast_sess_create(&s->fs, s->be, &m->cfg, &m->w, max_b, dec);
    else if (st == PI0_OK) st = model_sess_create(&s->ms, s->be, &m->cfg, (pi0_weights *)&m->w, max_b, steps);
    if (st != PI0_OK) { pi0_session_free(s); return st; }
    *out = s;
    return PI0_OK;
}

void pi0_session_get_timing(const pi0_session *s, pi0_timing *t) {
    *t = (pi0_timing){s->timing.vision_ms, s->timing.prefill_ms, s->timing.denoise_ms, s->timing.total_ms};
}

const char *pi0_session_backend(const pi0_session *s) { return s->be->name; }

pi0_status pi0_session_memory(const pi0_session *s, size_t *used, size_t *total) {
    if (!s || !used || !total) return pi0_fail(PI0_ERR_ARG, "pi0_session_memory: NULL argument");
    if (!s->be->memory) return pi0_fail(PI0_ERR_UNSUPPORTED, "the %s backend has no device memory", s->be->name);
    return s->be->memory(s->be, used, total);
}
pi0_status pi0_session_memory_info(const pi0_session *s, pi0_memory_info *info) {
    if (!s || !info) return pi0_fail(PI0_ERR_ARG, "pi0_session_memory_info: NULL argument");
    if (!s->be->footprint) return pi0_fail(PI0_ERR_UNSUPPORTED, "the %s backend has no device memory", s->be->name);
    return s->be->footprint(s->be, info);
}
const char *pi0_session_device(const pi0_session *s) { return s->be->device; }
const char *pi0_session_driver(const pi0_session *s) { return s->be->driver; }

void pi0_session_set_stage_timing(pi0_session *s, int on) {
    if (s && s->ms) model_set_stage_timing(s->ms, on);   /* π0-FAST's decoding synchronises every step anyway */
}

pi0_status pi0_generate(pi0_session *s, const pi0_inputs *in, const pi0_decode_params *p, int32_t *tokens, int *steps) {
    if (!s || !tokens) return pi0_fail(PI0_ERR_ARG, "pi0_generate: NULL argument");
    if (!s->fs)
        return pi0_fail(PI0_ERR_UNSUPPORTED, "pi0_generate: %s is a %s model, which pi0_infer runs (pi0_generate decodes "
                        "π0-FAST's action tokens)", s->m->dir, cfg_model_name(&s->m->cfg));
    pi0_decode_params def = {0};
    if (!p) p = &def;
    int n = p->max_decoding_steps ? p->max_decoding_steps : s->max_decoding_steps;
    if (n < 1 || n > s->max_decoding_steps)
        return pi0_fail(PI0_ERR_ARG, "pi0_generate: max_decoding_steps %d, expected 1..%d (the session's)", p->max_decoding_steps,
                        s->max_decoding_steps);
    if (!(p->temperature >= 0) || !isfinite(p->temperature))
        return pi0_fail(PI0_ERR_ARG, "pi0_generate: temperature %g, expected a finite value >= 0", (double)p->temperature);
    pi0_status st = api_check_inputs(s, in);
    if (st == PI0_OK && in->rtc != PI0_RTC_OFF)
        st = pi0_fail(PI0_ERR_ARG, "inputs: real-time chunking is for π0 / π0.5's flow matching, not π0-FAST's tokens");
    if (st == PI0_OK) st = api_check_images(in, &s->m->cfg);
    if (st != PI0_OK) return st;
    int run = 0;
    st = fast_generate(s->fs, in, n, p->temperature, tokens, &run, NULL, &s->timing);
    if (steps) *steps = run;
    return st;
}

pi0_status pi0_infer(pi0_session *s, const pi0_inputs *in, float *actions) {
    if (!s || !actions) return pi0_fail(PI0_ERR_ARG, "pi0_infer: NULL argument");
    if (s->fs)
        return pi0_fail(PI0_ERR_UNSUPPORTED, "pi0_infer: %s is a π0-FAST model: it decodes action tokens (pi0_generate), "
                        "which its FAST tokenizer turns into actions", s->m->dir);
    pi0_status st = api_check_inputs(s, in);
    if (st == PI0_OK) st = api_check_rtc(s, in);
    if (st != PI0_OK) return st;
    /* the pixels are checked while a queued run computes (the 64-sample images: bench/RESULTS.md L101), else before
     * it */
    int queued = model_queues(s->ms, s->dump);
    if (!queued && (st = api_check_images(in, &s->m->cfg)) != PI0_OK) return st;
    if ((st = model_start(s->ms, in, s->dump, s->dump_user)) != PI0_OK) return st;
    if (queued && (st = api_check_images(in, &s->m->cfg)) != PI0_OK) {
        model_abort(s->ms);   /* the backend no longer reads the inputs when the error is returned */
        return st;
    }
    if ((st = model_finish(s->ms, actions, &s->timing)) != PI0_OK) return st;
    const pi0_config *c = &s->m->cfg;
    long long i = api_bad_float(actions, (size_t)in->batch * c->action_horizon * c->action_dim, -INFINITY, INFINITY);
    if (i >= 0)
        return pi0_fail(PI0_ERR_FORMAT, "inference produced a non-finite action at index %lld (weights of %s overflow?)",
                        i, s->m->dir);
    return PI0_OK;
}
