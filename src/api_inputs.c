/* api_inputs.c — pi0_inputs, what include/pi0.h's pi0_infer reads: its checks (batch, token ids, finite state and
 * noise, real-time chunking fields, pixel range; pi0_infer runs them), LeRobot's RTC prefix weights
 * (pi0_rtc_prefix_weights) that callers put in it, and pi0_inputs_from_tensors, which reads it from a tensor set
 * (docs/formats.md 2). Owns only the buffers pi0_inputs_from_tensors returns; runs no model and holds no session. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "safetensors.h"
#include "util.h"

/* 1 if every x[i] is finite and in [lo, hi]: no branch per element, so the compiler vectorises it */
static int floats_ok(const float *x, size_t n, float lo, float hi) {
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= (x[i] >= lo) & (x[i] <= hi) & (fabsf(x[i]) <= FLT_MAX);   /* NaN: 0 */
    return ok;
}

/* The first index of a value that is not finite or outside [lo, hi], or -1. Blocks of BAD_BLOCK values are
 * tested by floats_ok (in parallel from 4M values) and only the first failing block element by element. The
 * scalar loop with an early exit was a visible share of every pi0_infer, for one π0 inference's images
 * (3 x 224 x 224 x 3) and more so for a batch of 64 (bench/RESULTS.md L100, L101). */
enum { BAD_BLOCK = 4096 };
long long api_bad_float(const float *x, size_t n, float lo, float hi) {
    long long nb = (long long)((n + BAD_BLOCK - 1) / BAD_BLOCK), first = LLONG_MAX;
    #pragma omp parallel for if (n >= ((size_t)1 << 22)) schedule(static) reduction(min:first)
    for (long long b = 0; b < nb; b++) {
        size_t i0 = (size_t)b * BAD_BLOCK, m = n - i0 < BAD_BLOCK ? n - i0 : BAD_BLOCK;
        if (b < first && !floats_ok(x + i0, m, lo, hi)) first = b;
    }
    if (first == LLONG_MAX) return -1;
    for (size_t i = (size_t)first * BAD_BLOCK; i < n; i++)
        if (!floats_ok(x + i, 1, lo, hi)) return (long long)i;
    return -1;   /* not reached: the block holds one */
}

/* π0-FAST embeds every prompt token, masked ones included (docs/model.md 7.2), and needs a valid token per sample. */
static pi0_status check_fast(const pi0_config *c, const pi0_inputs *in) {
    int L = in->n_tokens;
    for (int k = 0; k < in->batch * L; k++) {
        if (in->tokens[k] < 0 || in->tokens[k] >= c->lm.vocab_size)
            return pi0_fail(PI0_ERR_ARG, "inputs: tokens[%d][%d] = %d, expected 0..%d (vocab_size - 1)", k / L, k % L,
                            in->tokens[k], c->lm.vocab_size - 1);
        if (in->token_ar_mask[k] != 0 && in->token_ar_mask[k] != 1)
            return pi0_fail(PI0_ERR_ARG, "inputs: token_ar_mask[%d][%d] = %d, expected 0 or 1", k / L, k % L,
                            in->token_ar_mask[k]);
    }
    for (int b = 0; b < in->batch; b++) {
        int any = 0;
        for (int j = 0; j < c->n_cameras; j++) any |= !in->image_masks || in->image_masks[b * c->n_cameras + j];
        for (int j = 0; j < L; j++) any |= in->token_mask[b * L + j] != 0;
        if (!any) return pi0_fail(PI0_ERR_ARG, "inputs: sample %d has no camera and no prompt token: nothing to decode from", b);
    }
    return PI0_OK;
}

pi0_status api_check_inputs(const pi0_session *s, const pi0_inputs *in) {
    const pi0_config *c = &s->m->cfg;
    if (!in) return pi0_fail(PI0_ERR_ARG, "inputs: NULL");
    if (in->batch < 1 || in->batch > s->max_batch)
        return pi0_fail(PI0_ERR_ARG, "inputs: batch %d, expected 1..%d (the session's max_batch)", in->batch, s->max_batch);
    if (in->n_tokens < 1 || in->n_tokens > c->max_token_len)
        return pi0_fail(PI0_ERR_ARG, "inputs: n_tokens %d, expected 1..%d (max_token_len)", in->n_tokens, c->max_token_len);
    int plain = !c->pi05 && !c->fast;   /* π0: the state is an input of the model (π0.5, π0-FAST: of the prompt) */
    if (!in->images || !in->tokens || !in->token_mask || (plain && !in->state) || (c->fast && !in->token_ar_mask))
        return pi0_fail(PI0_ERR_ARG, "inputs: images, tokens, token_mask%s are required", plain ? " and state" :
                        c->fast ? " and token_ar_mask (π0-FAST's prefix-LM mask, all 0 at inference)" : "");
    int B = in->batch, A = c->action_dim, H = c->action_horizon;
    long long i;
    if (c->fast) return check_fast(c, in);
    if (!c->pi05 && (i = api_bad_float(in->state, (size_t)B * A, -INFINITY, INFINITY)) >= 0)
        return pi0_fail(PI0_ERR_ARG, "inputs: state[%lld] is not finite", i);
    if (in->noise && (i = api_bad_float(in->noise, (size_t)B * H * A, -INFINITY, INFINITY)) >= 0)
        return pi0_fail(PI0_ERR_ARG, "inputs: noise[%lld] is not finite", i);
    for (int k = 0; k < B * in->n_tokens; k++)
        if (in->token_mask[k] && (in->tokens[k] < 0 || in->tokens[k] >= c->lm.vocab_size))
            return pi0_fail(PI0_ERR_ARG, "inputs: tokens[%d][%d] = %d, expected 0..%d (vocab_size - 1)",
                            k / in->n_tokens, k % in->n_tokens, in->tokens[k], c->lm.vocab_size - 1);
    return PI0_OK;
}

/* The pixel values: scanned while a graph replay runs (backends never index with them). */
pi0_status api_check_images(const pi0_inputs *in, const pi0_config *c) {
    size_t n = (size_t)in->batch * c->n_cameras * c->vis.image_size * c->vis.image_size * 3;
    long long i;
    /* 1e-5 slack: [-1, 1] images made in float64 and rounded may land a hair outside */
    if ((i = api_bad_float(in->images, n, -1.00001f, 1.00001f)) >= 0)
        return pi0_fail(PI0_ERR_ARG, "inputs: images[%lld] = %g, expected a finite value in [-1, 1] (preprocessed "
                        "pixels; uint8 images must be mapped with x/255*2-1)", i, (double)in->images[i]);
    return PI0_OK;
}

/* ---- real-time chunking ---- */

pi0_status pi0_rtc_prefix_weights(pi0_rtc_schedule schedule, int delay, int horizon, int leftover, int H, float *w) {
    if (!w || H < 1 || delay < 0 || horizon < 0 || leftover < 0 || schedule < PI0_RTC_ZEROS || schedule > PI0_RTC_EXP)
        return pi0_fail(PI0_ERR_ARG, "pi0_rtc_prefix_weights: schedule %d, delay %d, horizon %d, leftover %d, H %d: "
                        "expected a schedule, counts >= 0 and H >= 1", (int)schedule, delay, horizon, leftover, H);
    int end = horizon < leftover ? horizon : leftover;   /* LeRobot clamps the horizon to the leftover's rows */
    int start = delay < end ? delay : end;
    for (int i = 0; i < H; i++) {
        double v;
        if (schedule == PI0_RTC_ZEROS) v = i < start;
        else if (schedule == PI0_RTC_ONES) v = i < end;
        else if (i < start) v = 1;
        else if (i >= end) v = 0;
        else {   /* linspace(1, 0, n + 2)[1:-1] over the n = end - start rows between */
            int n = end - start;
            v = 1.0 - (double)(i - start + 1) / (n + 1);
            if (schedule == PI0_RTC_EXP) v = v * expm1(v) / (M_E - 1);
        }
        w[i] = (float)v;
    }
    return PI0_OK;
}

pi0_status api_check_rtc(const pi0_session *s, const pi0_inputs *in) {
    if (in->rtc == PI0_RTC_OFF) {
        if (in->rtc_prev || in->rtc_weights || in->rtc_exact)
            return pi0_fail(PI0_ERR_ARG, "inputs: rtc_prev / rtc_weights / rtc_exact given with rtc off (say which guidance to use)");
        return PI0_OK;
    }
    if (in->rtc != PI0_RTC_LEROBOT && in->rtc != PI0_RTC_EXACT)
        return pi0_fail(PI0_ERR_ARG, "inputs: rtc mode %d: expected PI0_RTC_OFF, PI0_RTC_LEROBOT or PI0_RTC_EXACT", (int)in->rtc);
    if (in->rtc_exact && in->rtc != PI0_RTC_EXACT)
        return pi0_fail(PI0_ERR_ARG, "inputs: rtc_exact given with rtc mode %d (it selects samples of a PI0_RTC_EXACT batch)", (int)in->rtc);
    /* the transpose pass reads the expert's weights in bf16, which an 8-bit expert does not keep */
    if (in->rtc == PI0_RTC_EXACT && (s->m->quant.stages & PI0_STAGE_EXPERT))
        return pi0_fail(PI0_ERR_UNSUPPORTED, "inputs: exact real-time chunking needs the action expert in bf16; this model "
                        "runs it in 8-bit (load it with the expert left out of the quantised stages)");
    if (!in->rtc_prev || !in->rtc_weights || !in->rtc_max_weights)
        return pi0_fail(PI0_ERR_ARG, "inputs: real-time chunking needs rtc_prev, rtc_weights and rtc_max_weights");
    for (int b = 0; b < in->batch; b++)
        if (!(in->rtc_max_weights[b] > 0) || !isfinite(in->rtc_max_weights[b]))
            return pi0_fail(PI0_ERR_ARG, "inputs: rtc_max_weights[%d] = %g: expected a finite value > 0", b,
                            (double)in->rtc_max_weights[b]);
    const pi0_config *c = &s->m->cfg;
    size_t np = (size_t)in->batch * c->action_horizon * c->action_dim, nw = (size_t)in->batch * c->action_horizon;
    long long i;
    if ((i = api_bad_float(in->rtc_prev, np, -INFINITY, INFINITY)) >= 0)
        return pi0_fail(PI0_ERR_ARG, "inputs: rtc_prev[%lld] is not finite", i);
    if ((i = api_bad_float(in->rtc_weights, nw, 0.0f, 1.0f)) >= 0)
        return pi0_fail(PI0_ERR_ARG, "inputs: rtc_weights[%lld] = %g, expected a value in [0, 1]", i, (double)in->rtc_weights[i]);
    return PI0_OK;
}

/* ---- model inputs from a tensor file (docs/formats.md 2) ---- */

struct pi0_inputs_buf {
    uint8_t *masks, *token_mask;
    int32_t *tokens, *ar;
};

void pi0_inputs_buf_free(pi0_inputs_buf *b) {
    if (!b) return;
    free(b->masks); free(b->token_mask); free(b->tokens); free(b->ar);
    free(b);
}

/* Looks up name and checks dtype (one of two) and shape; -1 in want means "any, returned in got". */
static pi0_status expect(const pi0_tensors *t, const char *what, const char *name, pi0_dtype d1, pi0_dtype d2,
                         int ndim, const int64_t *want, int64_t *got, pi0_dtype *dt, const void **data) {
    int nd;
    int64_t shape[ST_MAX_DIMS];
    if (pi0_tensors_get(t, name, dt, &nd, shape, data) != PI0_OK)
        return pi0_fail(PI0_ERR_SHAPE, "%s: missing tensor '%s'", what, name);
    int ok = (*dt == d1 || *dt == d2) && nd == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = want[i] < 0 || shape[i] == want[i];
    if (!ok) {
        char w[128], g[128];
        int64_t ws[ST_MAX_DIMS];
        for (int i = 0; i < ndim; i++) ws[i] = want[i] < 0 ? shape[i] : want[i];
        st_describe(w, sizeof w, ndim, ws, d1);
        return pi0_fail(PI0_ERR_SHAPE, "%s: tensor '%s': expected %s%s%s, found %s", what, name, w,
                        d1 != d2 ? " or " : "", d1 != d2 ? pi0_dtype_name(d2) : "", st_describe(g, sizeof g, nd, shape, *dt));
    }
    if (got) memcpy(got, shape, (size_t)ndim * sizeof *shape);
    return PI0_OK;
}

static pi0_status bool_array(const char *what, const char *name, const uint8_t *src, size_t n, uint8_t **dst) {
    for (size_t i = 0; i < n; i++)
        if (src[i] > 1) return pi0_fail(PI0_ERR_FORMAT, "%s: '%s'[%zu] = %d, expected 0 or 1", what, name, i, src[i]);
    *dst = malloc(n ? n : 1);
    if (!*dst) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    memcpy(*dst, src, n);
    return PI0_OK;
}

pi0_status pi0_inputs_from_tensors(const pi0_model *m, const pi0_tensors *t, const char *what, pi0_inputs *in,
                                   pi0_inputs_buf **bufp) {
    if (!m || !t || !in || !bufp) return pi0_fail(PI0_ERR_ARG, "pi0_inputs_from_tensors: NULL argument");
    *bufp = NULL;
    if (!what) what = "inputs";
    const pi0_config *c = &m->cfg;
    pi0_inputs_buf *b = calloc(1, sizeof *b);
    if (!b) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    memset(in, 0, sizeof *in);
    pi0_dtype dt;
    const void *data;
    int64_t got[5];
    pi0_status st;
    int64_t w_img[5] = {-1, c->n_cameras, c->vis.image_size, c->vis.image_size, 3};
    if ((st = expect(t, what, "images", PI0_DT_F32, PI0_DT_F32, 5, w_img, got, &dt, &data)) != PI0_OK) goto fail;
    int64_t B = got[0];
    if (B < 1 || B > 4096) { st = pi0_fail(PI0_ERR_SHAPE, "%s: batch %lld, expected 1..4096", what, (long long)B); goto fail; }
    in->batch = (int)B;
    in->images = data;
    int64_t w_mask[2] = {B, c->n_cameras};
    if ((st = expect(t, what, "image_masks", PI0_DT_BOOL, PI0_DT_U8, 2, w_mask, NULL, &dt, &data)) != PI0_OK) goto fail;
    if ((st = bool_array(what, "image_masks", data, (size_t)(B * c->n_cameras), &b->masks)) != PI0_OK) goto fail;
    in->image_masks = b->masks;
    int64_t w_state[2] = {B, c->action_dim};
    if ((!c->pi05 && !c->fast) || pi0_tensors_get(t, "state", NULL, NULL, NULL, NULL) == PI0_OK) {
        if ((st = expect(t, what, "state", PI0_DT_F32, PI0_DT_F32, 2, w_state, NULL, &dt, &data)) != PI0_OK) goto fail;
        in->state = data;
    }
    int64_t w_tok[2] = {B, -1};
    if ((st = expect(t, what, "tokens", PI0_DT_I32, PI0_DT_I64, 2, w_tok, got, &dt, &data)) != PI0_OK) goto fail;
    int64_t L = got[1];
    if (L < 1 || L > c->max_token_len) {
        st = pi0_fail(PI0_ERR_SHAPE, "%s: tokens: length %lld, expected 1..%d (max_token_len)", what, (long long)L,
                      c->max_token_len);
        goto fail;
    }
    in->n_tokens = (int)L;
    if (!(b->tokens = malloc((size_t)(B * L) * sizeof(int32_t)))) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto fail; }
    for (int64_t i = 0; i < B * L; i++) {
        int64_t v = dt == PI0_DT_I64 ? ((const int64_t *)data)[i] : ((const int32_t *)data)[i];
        if (v < 0 || v >= c->lm.vocab_size) {
            st = pi0_fail(PI0_ERR_FORMAT, "%s: tokens[%lld][%lld] = %lld, expected 0..%d", what, (long long)(i / L),
                          (long long)(i % L), (long long)v, c->lm.vocab_size - 1);
            goto fail;
        }
        b->tokens[i] = (int32_t)v;
    }
    in->tokens = b->tokens;
    int64_t w_tm[2] = {B, L};
    if ((st = expect(t, what, "token_mask", PI0_DT_BOOL, PI0_DT_U8, 2, w_tm, NULL, &dt, &data)) != PI0_OK) goto fail;
    if ((st = bool_array(what, "token_mask", data, (size_t)(B * L), &b->token_mask)) != PI0_OK) goto fail;
    in->token_mask = b->token_mask;
    if (c->fast) {   /* openpi's model asserts it is there: without it the prefix-LM mask is unknown */
        if (pi0_tensors_get(t, "token_ar_mask", NULL, NULL, NULL, NULL) != PI0_OK) {
            st = pi0_fail(PI0_ERR_SHAPE, "%s: missing tensor 'token_ar_mask' (I32 [%lld, %lld]): a π0-FAST model needs its "
                          "prefix-LM mask (all 0 for a prompt at inference, as openpi's FASTTokenizer makes it)", what,
                          (long long)B, (long long)L);
            goto fail;
        }
        if ((st = expect(t, what, "token_ar_mask", PI0_DT_I32, PI0_DT_BOOL, 2, w_tm, NULL, &dt, &data)) != PI0_OK) goto fail;
        if (!(b->ar = malloc((size_t)(B * L) * sizeof(int32_t)))) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto fail; }
        for (int64_t i = 0; i < B * L; i++) {
            int32_t v = dt == PI0_DT_BOOL ? ((const uint8_t *)data)[i] : ((const int32_t *)data)[i];
            if (v != 0 && v != 1) {
                st = pi0_fail(PI0_ERR_FORMAT, "%s: token_ar_mask[%lld][%lld] = %d, expected 0 or 1", what, (long long)(i / L),
                              (long long)(i % L), (int)v);
                goto fail;
            }
            b->ar[i] = v;
        }
        in->token_ar_mask = b->ar;
    }
    if (pi0_tensors_get(t, "noise", NULL, NULL, NULL, NULL) == PI0_OK) {
        int64_t w_noise[3] = {B, c->action_horizon, c->action_dim};
        if ((st = expect(t, what, "noise", PI0_DT_F32, PI0_DT_F32, 3, w_noise, NULL, &dt, &data)) != PI0_OK) goto fail;
        in->noise = data;
    }
    if (pi0_tensors_get(t, "rtc_prev", NULL, NULL, NULL, NULL) == PI0_OK) {   /* used only with pi0_inputs.rtc set */
        int64_t w_prev[3] = {B, c->action_horizon, c->action_dim};
        if ((st = expect(t, what, "rtc_prev", PI0_DT_F32, PI0_DT_F32, 3, w_prev, NULL, &dt, &data)) != PI0_OK) goto fail;
        in->rtc_prev = data;
    }
    pi0_clear_error();
    *bufp = b;
    return PI0_OK;
fail:
    pi0_inputs_buf_free(b);
    memset(in, 0, sizeof *in);
    return st;
}
