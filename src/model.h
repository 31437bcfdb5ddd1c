/* model.h — the π0 / π0.5 forward pass (docs/model.md 3.4-3.12), written once against backend.h.
 * A model_sess owns every activation buffer of one inference stream, sized at create for max_batch;
 * model_infer allocates nothing on the backend. */
#ifndef PI0_MODEL_H
#define PI0_MODEL_H

#include "backend.h"
#include "config.h"
#include "weights.h"

typedef struct model_sess model_sess;

typedef struct {
    double vision_ms, prefill_ms, denoise_ms, total_ms;
} model_timing;

pi0_status model_sess_create(model_sess **out, pi0_backend *be, const pi0_config *c, pi0_weights *w,
                             int max_batch, int steps);
void model_sess_free(model_sess *s);
/* 1 = synchronise and read the clock between stages (no CUDA graph): fills the vision/prefill/denoise
 * split of model_timing. 0 (default) = graph replay where the backend has graphs; only total_ms. */
void model_set_stage_timing(model_sess *s, int on);
/* One inference in two halves, so that the caller (api_session.c, the one place that validates inputs) can check the
 * pixel values while the GPU computes. model_start uploads the inputs (validated, but for what the caller checks
 * meanwhile) and runs the model: with model_queues(s, dump) true (a CUDA graph replay) the work is only queued
 * when it returns, otherwise it is done. Then model_finish reads the actions [B, H, A] (and the timing, tm may be
 * NULL), or model_abort waits for the queued work and drops it. dump may be NULL. */
int model_queues(const model_sess *s, pi0_dump_fn dump);
pi0_status model_start(model_sess *s, const pi0_inputs *in, pi0_dump_fn dump, void *user);
pi0_status model_finish(model_sess *s, float *actions, model_timing *tm);
void model_abort(model_sess *s);

/* The action expert's layers of one denoise step (docs/model.md 3.8/3.13), as model.c's expert_layers runs them op by
 * op (one persistent kernel for all of them was measured slower: bench/RESULTS.md L34, L69). Per layer l: norm (Gemma
 * RMSNorm with attn_norm / mlp_norm, or adaRMS with mods[2l] / mods[2l+1] for π0.5), q|k|v with RoPE at pos, attention
 * (attn with k1/v1 = kc[l]/vc[l]), o, the residual (plain add, or gated by the mod's gate for π0.5), norm, gate|up,
 * down, residual. The suffix K/V of layer l go to kc[l]/vc[l] at element offset kv_tail when attn.tail > 0 (B = 1: the
 * keys after the cached prefix), else to k/v. M = B x suffix rows. */
typedef struct {
    const pi0_gemma_layer *layers;
    int depth, M, D, F;
    pt s, sy, stmp, q, k, v, att, g, u;   /* s: residual rows (M, D), in and out; the rest scratch */
    const pt *kc, *vc;
    size_t kv_tail;
    pt pos;
    pi0_attn attn;
    const pt *mods;   /* NULL: π0 (RMSNorm weights of the layers) */
    float eps;
} pi0_expert_step;

/* The expert layers of one denoise step, op by op. */
void expert_layers(pi0_backend *be, const pi0_expert_step *e);

/* The vision tower (docs/model.md 3.4) over nimg images: img[sel[i]] (F32 [*, R, R, 3]) to vout (nimg x T rows of the
 * LLM width); the rest are scratch of nimg x T rows (vq: q, k, v side by side, each vk / vv at its offset). voff: host
 * [nimg + 1], the images' first rows (i x T). π0, π0.5 and π0-FAST run the same. */
typedef struct {
    pt img, sel, vx, va, vq, vk, vv, vo, vm, vout;
    const int32_t *voff;
} pi0_vision_bufs;
void vision_tower(pi0_backend *be, const pi0_weights *w, const pi0_config *c, const pi0_vision_bufs *v, int nimg);
/* The same buffers for up to nimg images, from model_buf-like allocator alloc(user, n, kind). */
int vision_bufs_alloc(pi0_vision_bufs *v, pi0_backend *be, const pi0_config *c, size_t nimg,
                      pt (*alloc)(void *user, size_t n, int kind), void *user);

/* ---- π0-FAST (model_fast.c, docs/model.md 7): a session of its own, decoding action tokens ---- */
typedef struct fast_sess fast_sess;
#define PI0_FAST_END_TOKEN 1   /* PaliGemma's EOS: decoding stops at the first step where every sample produced it */

/* Buffers for max_batch samples of up to the config's prefix and max_steps decoded tokens (the KV cache). */
pi0_status fast_sess_create(fast_sess **out, pi0_backend *be, const pi0_config *c, const pi0_weights *w, int max_batch,
                            int max_steps);
void fast_sess_free(fast_sess *s);
/* Decodes up to n_steps (<= max_steps) tokens for in (checked by the caller; token_ar_mask required): tokens [B, n_steps],
 * 0 after the last step run; *n_run = the steps run; top2 [B, n_steps, 2] (NULL: not wanted) = each step's largest and
 * second-largest logit (their difference: a greedy choice's margin). temperature 0: greedy; > 0: sampled with in->seed.
 * tm may be NULL (prefill_ms: vision and prefill; denoise_ms: the decoding). */
pi0_status fast_generate(fast_sess *s, const pi0_inputs *in, int n_steps, float temperature, int32_t *tokens, int *n_run,
                         float *top2, model_timing *tm);

#endif
