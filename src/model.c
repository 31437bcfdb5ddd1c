/* model.c — the π0 / π0.5 inference (docs/model.md 3.4-3.13), written once against the op table of backend.h: the
 * session's buffers (all allocated at create), vision, prefill with the prefix KV cache, and the denoise loop.
 * Owns no weights (weights.c binds them) and checks no inputs (api_inputs.c); real-time chunking's inputs and the
 * exact form's transpose pass are model_rtc.c's (the session's state, model_sess.h, is shared with it). */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model_sess.h"
#include "util.h"

/* Layout: every sample's prefix is COMPACTED (docs/model.md 3.3/3.13): masked cameras and padded tokens are
 * dropped, positions run 0..Np-1, and the prefixes of all samples are concatenated row-wise
 * ("varlen"): sample b owns rows [p_off[b], p_off[b+1]). Row-wise ops (linear, norms, RoPE) run on
 * all rows at once; only attention sees the segments. Suffix rows are b*S + i.
 * The time-dependent terms (π0: action_time_mlp_in's time half; π0.5: time MLP and every adaRMS
 * modulation) depend only on t, which takes a fixed sequence, so they are computed at session create
 * with the same ops (docs/model.md 3.13).
 *
 * Pitfalls that have bitten (keep in mind when editing):
 *  - Gemma RMSNorm scales by (1 + w), SigLIP LayerNorm by w; eps 1e-6 for both.
 *  - RoPE is half-split (x[0:hd/2], x[hd/2:]), not interleaved; q and k both rotate, v does not.
 *  - π0 suffix = [state token, H action tokens]; the state token sees only itself in the suffix,
 *    action tokens see the state token and all action tokens (block0 = 1). π0.5: block0 = 0.
 *  - action_time_mlp_in input is concat(action_emb, time_emb): action columns first.
 *  - posemb(t): sin block first, then cos; period = 0.004 * 1000^(i/(half-1)).
 *  - π0.5 swish comes after BOTH time MLP layers; the final adaRMS gate is unused.
 *  - t accumulates in fp32 (1.0, 0.9, ...); dt = -1/steps in fp32; x += dt * v in fp32.
 *  - Text embeddings are scaled by sqrt(width); image tokens are not.
 *  - A batch may mix exact and LeRobot real-time chunking (and none: zero weights); each sample keeps its own form's
 *    arithmetic, or a request's actions change with its batch neighbours.
 */

static pt vis_buf(void *s, size_t n, int kind) { return model_buf(s, n, kind); }

pt model_buf(model_sess *s, size_t n, int kind) {
    pt t = {NULL, kind};
    if (s->alloc_failed) return t;   /* stop at the first failure: its message is the useful one */
    if (s->n_bufs == MAX_BUFS) {
        s->alloc_failed = 1;
        pi0_fail(PI0_ERR_NOMEM, "more than %d session buffers", MAX_BUFS);
        return t;
    }
    t = s->be->alloc(s->be, n, kind);
    if (t.p) s->bufs[s->n_bufs++] = t;
    else s->alloc_failed = 1;
    return t;
}

void model_sess_free(model_sess *s) {
    if (!s) return;
    for (int i = 0; i < s->n_bufs; i++) s->be->release(s->be, s->bufs[i]);
    free(s->kc); free(s->vc); free(s->tvals);
    free(s->h_sel); free(s->h_voff); free(s->h_ids); free(s->h_idrows); free(s->h_imgrows);
    free(s->h_pos); free(s->h_poff); free(s->h_spos); free(s->h_soff); free(s->h_full); free(s->h_noise); free(s->h_rtc_g);
    free(s->h_mods); free(s->h_rtc_jac);
    free(s);
}

/* Sinusoidal time embedding (docs/model.md 3.10), computed in double and rounded to fp32 like the PT ref. */
static void posemb(float *out, float t, int dim) {
    int half = dim / 2;
    for (int i = 0; i < half; i++) {
        double frac = half > 1 ? (double)i / (half - 1) : 0.0;
        double period = 0.004 * pow(1000.0, frac), w = 2.0 * M_PI / period;
        out[i] = (float)sin((double)t * w);
        out[half + i] = (float)cos((double)t * w);
    }
}

static pt mod_at(model_sess *s, int norm, int step) {   /* norm: 2l attn, 2l+1 mlp, 2*depth final */
    return pt_at(s->be, s->mods, ((size_t)norm * s->steps + step) * 3 * s->De);
}

/* Time-only terms for every step, with the same ops as the per-step path (docs/model.md 3.13). */
static pi0_status precompute_time(model_sess *s) {
    pi0_backend *be = s->be;
    pi0_weights *w = s->w;
    int De = s->De, K = s->steps;
    float *temb = malloc((size_t)K * De * sizeof(float));
    if (!temb) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    for (int k = 0; k < K; k++) posemb(temb + (size_t)k * De, s->tvals[k], De);
    pt te = model_buf(s, (size_t)K * De, PT_F32), h1 = model_buf(s, (size_t)K * De, PT_F32);
    pt cond = model_buf(s, (size_t)K * De, PT_F32);
    pi0_status st = te.p && h1.p && cond.p ? be->upload(be, te, temb, (size_t)K * De) : pi0_fail(PI0_ERR_NOMEM, "out of memory");
    free(temb);
    if (st != PI0_OK) return st;
    if (!s->c->pi05) {
        /* action_time_mlp_in(concat(action_in(x), temb)) = atm_act_w.x + (W[:, De:].temb + atm_act_b), with
         * atm_act_* = W[:, :De] composed with action_in (weights.h) */
        be->linear(be, s->time_terms, te, &w->atm_in_w, &w->atm_act_b, K, De, De, De, EPI_STORE);
        return PI0_OK;
    }
    pt zero = model_buf(s, (size_t)De, PT_F32);
    if (!zero.p) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    be->linear(be, h1, te, &w->time_in_w, &w->time_in_b, K, De, De, 0, EPI_STORE);
    be->add_rows(be, h1, zero, K, K, De, ACT_SWISH);
    be->linear(be, cond, h1, &w->time_out_w, &w->time_out_b, K, De, De, 0, EPI_STORE);
    be->add_rows(be, cond, zero, K, K, De, ACT_SWISH);
    int depth = s->c->ex.depth;
    for (int l = 0; l < depth; l++) {
        be->linear(be, mod_at(s, 2 * l, 0), cond, &w->ex[l].attn_norm_dw, &w->ex[l].attn_norm_db, K, 3 * De, De, 0, EPI_STORE);
        be->linear(be, mod_at(s, 2 * l + 1, 0), cond, &w->ex[l].mlp_norm_dw, &w->ex[l].mlp_norm_db, K, 3 * De, De, 0, EPI_STORE);
    }
    be->linear(be, mod_at(s, 2 * depth, 0), cond, &w->ex_norm_dw, &w->ex_norm_db, K, 3 * De, De, 0, EPI_STORE);
    return PI0_OK;
}

pi0_status model_sess_create(model_sess **out, pi0_backend *be, const pi0_config *c, pi0_weights *w, int max_b,
                             int steps) {
    *out = NULL;
    model_sess *s = calloc(1, sizeof *s);
    if (!s) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    s->be = be; s->c = c; s->w = w; s->max_b = max_b; s->steps = steps;
    s->N = c->n_cameras; s->T = cfg_tokens_per_image(c); s->R = c->vis.image_size; s->L = c->max_token_len;
    s->P = cfg_prefix_len(c); s->S = cfg_suffix_len(c); s->H = c->action_horizon; s->A = c->action_dim;
    s->Dv = c->vis.width; s->Fv = c->vis.mlp_dim; s->Hv = c->vis.num_heads;
    s->D = c->lm.width; s->F = c->lm.mlp_dim; s->De = c->ex.width; s->Fe = c->ex.mlp_dim;
    s->Hq = c->lm.num_heads; s->Kv = c->lm.num_kv_heads; s->Dh = c->lm.head_dim;
    int depth = c->lm.depth, B = max_b;
    size_t nimg = (size_t)B * s->N, vrows = nimg * s->T, prow = (size_t)B * s->P, srow = (size_t)B * s->S;
    size_t hrow = (size_t)B * s->H, qw = (size_t)s->Hq * s->Dh, kvw = (size_t)s->Kv * s->Dh;
    pi0_status st = PI0_ERR_NOMEM;

    /* t sequence: t0 = 1, t += dt in fp32, exactly `steps` iterations (docs/model.md 3.11); LeRobot computes each t_k in double */
    s->dt = -1.0f / (float)steps;
    s->tvals = malloc((size_t)steps * sizeof(float));
    s->kc = calloc((size_t)depth, sizeof(pt));
    s->vc = calloc((size_t)depth, sizeof(pt));
    if (!s->tvals || !s->kc || !s->vc) goto fail;
    float t = 1.0f;
    for (int k = 0; k < steps; k++) { s->tvals[k] = c->lerobot_time ? (float)(1.0 + k * (-1.0 / steps)) : t; t = t + s->dt; }

    if (!vision_bufs_alloc(&s->vis, be, c, nimg, vis_buf, s)) goto fail;
    s->ids = model_buf(s, (size_t)B * s->L, PT_I32);
    s->id_rows = model_buf(s, (size_t)B * s->L, PT_I32);
    s->img_rows = model_buf(s, vrows, PT_I32);
    s->pos = model_buf(s, prow, PT_I32);
    s->h = model_buf(s, prow * s->D, PT_ACT);
    s->y = model_buf(s, prow * s->D, PT_ACT);
    s->q = model_buf(s, prow * qw, PT_ACT);
    s->att = model_buf(s, prow * qw, PT_ACT);
    s->g = model_buf(s, prow * s->F, PT_ACT);
    s->u = model_buf(s, prow * s->F, PT_ACT);
    /* S spare rows after the prefix: at B = 1 the suffix K/V go right after the cached prefix (one key
     * range for the suffix attention, see denoise) */
    for (int l = 0; l < depth; l++) {
        s->kc[l] = model_buf(s, (prow + s->S) * kvw, PT_ACT);
        s->vc[l] = model_buf(s, (prow + s->S) * kvw, PT_ACT);
    }
    s->s = model_buf(s, srow * s->De, PT_ACT);
    s->sy = model_buf(s, srow * s->De, PT_ACT);
    s->stmp = model_buf(s, srow * s->De, PT_ACT);
    s->sq = model_buf(s, srow * qw, PT_ACT);
    s->sk = model_buf(s, srow * kvw, PT_ACT);
    s->sv = model_buf(s, srow * kvw, PT_ACT);
    s->satt = model_buf(s, srow * qw, PT_ACT);
    s->sg = model_buf(s, srow * s->Fe, PT_ACT);
    s->su = model_buf(s, srow * s->Fe, PT_ACT);
    s->spos = model_buf(s, srow, PT_I32);
    s->act_rows = model_buf(s, hrow, PT_I32);
    s->st_rows = model_buf(s, (size_t)B, PT_I32);
    s->out_rows = model_buf(s, hrow, PT_I32);
    s->x = model_buf(s, hrow * s->A, PT_F32);
    s->x0 = model_buf(s, hrow * s->A, PT_F32);
    s->vel = model_buf(s, hrow * s->A, PT_F32);
    s->rtc_y = model_buf(s, hrow * s->A, PT_F32);
    s->rtc_w = model_buf(s, hrow, PT_F32);
    s->rtc_g = model_buf(s, (size_t)B * steps, PT_F32);
    s->state = model_buf(s, (size_t)B * s->A, PT_F32);
    s->st_tok = model_buf(s, (size_t)B * s->De, PT_F32);
    s->a_emb = model_buf(s, hrow * s->De, PT_F32);
    s->a_hid = model_buf(s, hrow * s->De, PT_F32);
    s->a_out = model_buf(s, hrow * s->De, PT_F32);
    s->vin = model_buf(s, hrow * s->De, PT_F32);
    if (c->pi05) s->mods = model_buf(s, (size_t)(2 * depth + 1) * steps * 3 * s->De, PT_F32);
    else s->time_terms = model_buf(s, (size_t)steps * s->De, PT_F32);
    if (s->alloc_failed) goto fail;

    s->h_sel = malloc(nimg * 4); s->vis.voff = s->h_voff = malloc((nimg + 1) * 4);
    s->h_ids = malloc((size_t)B * s->L * 4); s->h_idrows = malloc((size_t)B * s->L * 4);
    s->h_imgrows = malloc(vrows * 4); s->h_pos = malloc(prow * 4); s->h_poff = malloc(((size_t)B + 1) * 4);
    s->h_spos = malloc(srow * 4); s->h_soff = malloc(((size_t)B + 1) * 4); s->h_full = malloc(prow * 4);
    s->h_noise = malloc(hrow * s->A * sizeof(float));
    s->h_rtc_g = malloc((size_t)B * steps * sizeof(float));
    s->h_mods = calloc((size_t)2 * c->ex.depth, sizeof(pt));
    s->h_rtc_jac = malloc((size_t)B * sizeof(float));
    if (!s->h_rtc_jac ||
        !s->h_sel || !s->h_voff || !s->h_ids || !s->h_idrows || !s->h_imgrows || !s->h_pos || !s->h_poff ||
        !s->h_spos || !s->h_soff || !s->h_full || !s->h_noise || !s->h_rtc_g || !s->h_mods)
        goto fail;

    size_t max_rows = prow > vrows ? prow : vrows;
    if (max_rows < (size_t)steps) max_rows = (size_t)steps;   /* precompute_time runs `steps` rows at once */
    /* attention logits of one segment; rows padded to 8 keys (aligned GEMM operands) */
    size_t sc_prefix = (size_t)s->P * s->Hq * (s->P + s->S + 8), sc_vis = (size_t)s->T * s->Hv * (s->T + 8);
    size_t wide = qw + 2 * kvw > 2 * (size_t)s->F ? qw + 2 * kvw : 2 * (size_t)s->F;
    if ((st = be->reserve(be, max_rows, (size_t)s->P + s->S, sc_prefix > sc_vis ? sc_prefix : sc_vis, prow * wide)) !=
        PI0_OK)
        goto fail;
    if ((st = precompute_time(s)) != PI0_OK) goto fail;
    *out = s;
    return PI0_OK;
fail:
    if (st == PI0_ERR_NOMEM) pi0_error_prefix("creating a %s session for batch %d", be->name, max_b);
    model_sess_free(s);
    return st;
}

/* ---- dumps: download, expand compacted rows to the uncompacted layout (zeros elsewhere) ---- */

static void dump_rows(model_sess *s, pi0_dump_fn dump, void *user, const char *name, pt src, int rows, int width,
                      const int32_t *map, int ndim, const int64_t *shape) {
    size_t total = 1;
    for (int i = 0; i < ndim; i++) total *= (size_t)shape[i];
    float *tmp = malloc((size_t)rows * width * sizeof(float)), *full = calloc(total, sizeof(float));
    if (tmp && full && s->be->download(s->be, tmp, src, (size_t)rows * width) == PI0_OK) {
        for (int r = 0; r < rows; r++)
            memcpy(full + (size_t)(map ? map[r] : r) * width, tmp + (size_t)r * width, (size_t)width * sizeof(float));
        dump(user, name, full, ndim, shape);
    }
    free(tmp);
    free(full);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* ---- stages ---- */

static void range(model_sess *s, const char *name) {   /* profiler annotations (NVTX), NULL closes */
    if (s->be->range) s->be->range(s->be, name);
}


void vision_tower(pi0_backend *be, const pi0_weights *w, const pi0_config *c, const pi0_vision_bufs *v, int nimg) {
    int T = cfg_tokens_per_image(c), M = nimg * T, Dv = c->vis.width, Hv = c->vis.num_heads;
    be->patch_embed(be, v->vx, v->img, v->sel, nimg, &w->patch_w, &w->patch_b, &w->pos, c->vis.image_size, c->vis.patch_size);
    pi0_attn a = {.nseg = nimg, .heads = Hv, .kv_heads = Hv, .head_dim = Dv / Hv, .scale = 1.0f / sqrtf((float)(Dv / Hv)),
                  .q_off = v->voff, .k_off = v->voff, .k1 = v->vk, .v1 = v->vv};
    for (int l = 0; l < c->vis.depth; l++) {
        const pi0_vis_layer *L = &w->vis[l];
        be->layernorm(be, v->va, v->vx, &L->ln1_w, &L->ln1_b, M, Dv, EPS);
        pi0_proj3 pj = {{&L->q_w, &L->k_w, &L->v_w}, {&L->q_b, &L->k_b, &L->v_b}};
        be->qkv(be, v->vq, v->vk, v->vv, v->va, &pj, M, Dv, (pt){0}, 0, NULL);
        be->attention(be, v->vo, v->vq, &a);
        be->linear(be, v->vx, v->vo, &L->o_w, &L->o_b, M, Dv, Dv, 0, EPI_ADD);
        be->layernorm(be, v->va, v->vx, &L->ln2_w, &L->ln2_b, M, Dv, EPS);
        be->linear(be, v->vm, v->va, &L->fc1_w, &L->fc1_b, M, c->vis.mlp_dim, Dv, 0, EPI_GELU);
        be->linear(be, v->vx, v->vm, &L->fc2_w, &L->fc2_b, M, Dv, c->vis.mlp_dim, 0, EPI_ADD);
    }
    be->layernorm(be, v->va, v->vx, &w->vis_norm_w, &w->vis_norm_b, M, Dv, EPS);
    be->linear(be, v->vout, v->va, &w->proj_w, &w->proj_b, M, c->lm.width, Dv, 0, EPI_STORE);
}

int vision_bufs_alloc(pi0_vision_bufs *v, pi0_backend *be, const pi0_config *c, size_t nimg,
                      pt (*alloc)(void *user, size_t n, int kind), void *user) {
    size_t R = (size_t)c->vis.image_size, rows = nimg * cfg_tokens_per_image(c), Dv = (size_t)c->vis.width;
    v->img = alloc(user, nimg * R * R * 3, PT_F32);
    v->sel = alloc(user, nimg, PT_I32);
    v->vx = alloc(user, rows * Dv, PT_ACT);
    v->va = alloc(user, rows * Dv, PT_ACT);
    v->vq = alloc(user, 3 * rows * Dv, PT_ACT);   /* q, k, v in one buffer: a backend may fill them as one batch */
    v->vk = pt_at(be, v->vq, rows * Dv);
    v->vv = pt_at(be, v->vq, 2 * rows * Dv);
    v->vo = alloc(user, rows * Dv, PT_ACT);
    v->vm = alloc(user, rows * (size_t)c->vis.mlp_dim, PT_ACT);
    v->vout = alloc(user, rows * (size_t)c->lm.width, PT_ACT);
    return v->img.p && v->sel.p && v->vx.p && v->va.p && v->vq.p && v->vo.p && v->vm.p && v->vout.p;
}

/* One pre-norm MLP block: x += down(gelu(gate(y)) * up(y)) with y normalised (by pre, if not NULL). */
static void mlp(pi0_backend *be, pt x_or_tmp, pt y, pt g, pt u, const pi0_gemma_layer *L, int M, int D, int F,
                enum pi0_epi epi, const pi0_prenorm *pre) {
    be->mlp_up(be, g, u, y, L, M, F, D, pre);
    be->linear(be, x_or_tmp, g, &L->down, NULL, M, D, F, 0, epi);
}

static void prefill(model_sess *s, int Mp, int B, pi0_dump_fn dump, void *user) {
    pi0_backend *be = s->be;
    int D = s->D, depth = s->c->lm.depth, qw = s->Hq * s->Dh, kvw = s->Kv * s->Dh;
    pi0_attn a = {.nseg = B, .heads = s->Hq, .kv_heads = s->Kv, .head_dim = s->Dh, .scale = 1.0f / sqrtf((float)s->Dh),
                  .q_off = s->h_poff, .k_off = s->h_poff};
    for (int l = 0; l < depth; l++) {
        const pi0_gemma_layer *L = &s->w->lm[l];
        be->rmsnorm(be, s->y, s->h, &L->attn_norm, Mp, D, EPS);
        pi0_proj3 pj = {{&L->q, &L->k, &L->v}, {NULL, NULL, NULL}};
        be->qkv(be, s->q, s->kc[l], s->vc[l], s->y, &pj, Mp, D, s->pos, s->Dh, NULL);
        if (dump) {
            char name[32];
            int64_t shape[3] = {B, s->P, kvw};
            snprintf(name, sizeof name, "prefix.k.%02d", l);
            dump_rows(s, dump, user, name, s->kc[l], Mp, kvw, s->h_full, 3, shape);
            snprintf(name, sizeof name, "prefix.v.%02d", l);
            dump_rows(s, dump, user, name, s->vc[l], Mp, kvw, s->h_full, 3, shape);
        }
        if (l == depth - 1) break;   /* nothing reads the last layer's attention output or MLP (3.13) */
        a.k1 = s->kc[l];
        a.v1 = s->vc[l];
        be->attention(be, s->att, s->q, &a);
        be->linear(be, s->h, s->att, &L->o, NULL, Mp, D, qw, 0, EPI_ADD);
        be->rmsnorm(be, s->y, s->h, &L->mlp_norm, Mp, D, EPS);
        mlp(be, s->h, s->y, s->g, s->u, L, Mp, D, s->F, EPI_ADD, NULL);
    }
}

/* Residual s += y . W^T: plain (π0) or gated by norm `norm`'s gate (π0.5, docs/model.md 3.7; stmp is the scratch). */
static void ex_residual(pi0_backend *be, const pi0_expert_step *e, pt y, const pi0_wt *W, int K, int norm) {
    if (e->mods)
        be->linear_gated(be, e->s, e->stmp, y, W, e->M, e->D, K, ex_gate(be, e, norm), 3 * e->D, e->M);
    else
        be->linear(be, e->s, y, W, NULL, e->M, e->D, K, 0, EPI_ADD);
}

void expert_layers(pi0_backend *be, const pi0_expert_step *e) {
    pi0_attn a = e->attn;
    int M = e->M, D = e->D, qw = a.heads * a.head_dim;
    for (int l = 0; l < e->depth; l++) {
        const pi0_gemma_layer *L = &e->layers[l];
        pi0_prenorm pn = ex_prenorm(e, &L->attn_norm, 2 * l);
        pt sk = a.tail ? pt_at(be, e->kc[l], e->kv_tail) : e->k, sv = a.tail ? pt_at(be, e->vc[l], e->kv_tail) : e->v;
        pi0_proj3 pj = {{&L->q, &L->k, &L->v}, {NULL, NULL, NULL}};
        be->qkv(be, e->q, sk, sv, e->s, &pj, M, D, e->pos, a.head_dim, &pn);
        a.k1 = e->kc[l];
        a.v1 = e->vc[l];
        be->attention(be, e->att, e->q, &a);
        if (be->early_next) be->early_next(be, 1);   /* gate|up's weights stream in during attention and o */
        ex_residual(be, e, e->att, &L->o, qw, 2 * l);
        if (be->early_next) be->early_next(be, 0);
        pn = ex_prenorm(e, &L->mlp_norm, 2 * l + 1);
        be->mlp_up(be, e->g, e->u, e->s, L, M, e->F, D, &pn);
        ex_residual(be, e, e->g, &L->down, e->F, 2 * l + 1);
    }
}

static void suffix_embed(model_sess *s, int B, int step) {
    pi0_backend *be = s->be;
    pi0_weights *w = s->w;
    int Mh = B * s->H, De = s->De;
    if (s->c->pi05) {   /* suffix = action tokens, rows b*H + i */
        be->linear(be, s->a_emb, s->x, &w->action_in_w, &w->action_in_b, Mh, De, s->A, 0, EPI_STORE);
        be->copy_rows(be, s->s, (pt){0}, s->a_emb, (pt){0}, Mh, De);
        return;
    }
    /* π0: swish(W_in[:, :De].action_in(x) + time_term) then W_out, the first two maps as one (atm_act_w); state
     * token in row b*S */
    be->linear(be, s->a_hid, s->x, &w->atm_act_w, NULL, Mh, De, s->A, 0, EPI_STORE);
    if (s->rtc == PI0_RTC_EXACT) {   /* keep the pre-swish rows for the transpose (same values, two ops) */
        be->add_rows(be, s->a_hid, pt_at(be, s->time_terms, (size_t)step * De), Mh, Mh, De, ACT_NONE);
        be->copy_rows(be, s->az, (pt){0}, s->a_hid, (pt){0}, Mh, De);
        be->add_rows(be, s->a_hid, s->zero_row, Mh, Mh, De, ACT_SWISH);
    } else {
        be->add_rows(be, s->a_hid, pt_at(be, s->time_terms, (size_t)step * De), Mh, Mh, De, ACT_SWISH);
    }
    be->linear(be, s->a_out, s->a_hid, &w->atm_out_w, &w->atm_out_b, Mh, De, De, 0, EPI_STORE);
    be->copy_rows(be, s->s, s->act_rows, s->a_out, (pt){0}, Mh, De);
    be->copy_rows(be, s->s, s->st_rows, s->st_tok, (pt){0}, B, De);
}

static void denoise(model_sess *s, int B, pi0_dump_fn dump, void *user) {
    pi0_backend *be = s->be;
    pi0_weights *w = s->w;
    int depth = s->c->ex.depth, De = s->De, Ms = B * s->S, Mh = B * s->H;
    pi0_expert_step e = {.layers = w->ex, .depth = depth, .M = Ms, .D = De, .F = s->Fe, .s = s->s, .sy = s->sy,
                         .stmp = s->stmp, .q = s->sq, .k = s->sk, .v = s->sv, .att = s->satt, .g = s->sg, .u = s->su,
                         .kc = s->kc, .vc = s->vc, .pos = s->spos, .mods = s->c->pi05 ? s->h_mods : NULL, .eps = EPS,
                         .attn = {.nseg = B, .heads = s->Hq, .kv_heads = s->Kv, .head_dim = s->Dh,
                                  .scale = 1.0f / sqrtf((float)s->Dh), .q_off = s->h_soff, .k_off = s->h_poff,
                                  .k2 = s->sk, .v2 = s->sv, .block0 = s->c->pi05 ? 0 : 1}};
    /* B = 1: the suffix K/V are written into the cache's spare rows after the prefix, so attention
     * reads one key range whose last S keys follow the suffix mask (`tail`) */
    if (B == 1) {
        s->h_tail_off[0] = 0;
        s->h_tail_off[1] = s->h_poff[1] + s->S;
        e.attn.k_off = s->h_tail_off;
        e.attn.k2 = e.attn.v2 = (pt){0};
        e.attn.tail = s->S;
        e.kv_tail = (size_t)s->h_poff[1] * s->Kv * s->Dh;
    }
    /* x = noise, inside the computation so that a graph replay (or a second run) starts afresh */
    be->copy_rows(be, s->x, (pt){0}, s->x0, (pt){0}, B * s->H, s->A);
    if (!s->c->pi05)   /* the state token does not depend on x_t or t: once per inference */
        be->linear(be, s->st_tok, s->state, &w->state_w, &w->state_b, B, De, s->A, 0, EPI_STORE);
    for (int k = 0; k < s->steps; k++) {
        range(s, "denoise step");
        suffix_embed(s, B, k);
        if (s->c->pi05)
            for (int n = 0; n < 2 * depth; n++) s->h_mods[n] = mod_at(s, n, k);
        if (s->rtc == PI0_RTC_EXACT) model_rtc_expert_layers(s, &e);
        else expert_layers(be, &e);
        pi0_prenorm fin = {.eps = EPS, .out = s->sy};
        if (s->c->pi05) {
            fin.mod = mod_at(s, 2 * depth, k);
            fin.rows_per_mod = Ms;
        } else {
            fin.w = &w->ex_norm;
        }
        prenorm_rows(be, s->s, &fin, Ms, De);   /* into sy */
        be->copy_rows(be, s->vin, (pt){0}, s->sy, s->out_rows, Mh, De);   /* last H rows of each sample */
        be->linear(be, s->vel, s->vin, &w->action_out_w, &w->action_out_b, Mh, s->A, De, 0, EPI_STORE);
        if (s->rtc == PI0_RTC_LEROBOT)   /* real-time chunking: towards the previous chunk's leftover (pi0.h) */
            be->rtc_guide(be, s->vel, s->x, s->rtc_y, s->rtc_w, s->rtc_g, s->steps, k, s->tvals[k], Mh, s->H, s->A);
        else if (s->rtc == PI0_RTC_EXACT)
            model_rtc_guidance(s, &e, &fin, B, k);
        be->axpy(be, s->x, s->vel, s->dt, (size_t)Mh * s->A);
        range(s, NULL);
        if (dump) {
            char name[32];
            int64_t shape[3] = {B, s->H, s->A};
            snprintf(name, sizeof name, "denoise.v.%02d", k);
            dump_rows(s, dump, user, name, s->vel, Mh, s->A, NULL, 3, shape);
            snprintf(name, sizeof name, "denoise.x.%02d", k);
            dump_rows(s, dump, user, name, s->x, Mh, s->A, NULL, 3, shape);
        }
    }
}

/* Builds the compacted index arrays on the host and uploads them with the inputs. */
static pi0_status upload_inputs(model_sess *s, const pi0_inputs *in, int *nimg_out, int *Mp_out) {
    pi0_backend *be = s->be;
    int B = in->batch, N = s->N, T = s->T, nimg = 0, ntext = 0, Mp = 0;
    for (int b = 0; b < B; b++) {
        s->h_poff[b] = Mp;
        for (int c = 0; c < N; c++) {
            if (in->image_masks && !in->image_masks[b * N + c]) continue;
            for (int t = 0; t < T; t++) {
                s->h_imgrows[nimg * T + t] = Mp + t;
                s->h_full[Mp + t] = b * s->P + c * T + t;
            }
            s->h_voff[nimg] = nimg * T;
            s->h_sel[nimg++] = b * N + c;
            Mp += T;
        }
        for (int j = 0; j < in->n_tokens; j++) {
            if (!in->token_mask[b * in->n_tokens + j]) continue;
            s->h_ids[ntext] = in->tokens[b * in->n_tokens + j];
            s->h_idrows[ntext++] = Mp;
            s->h_full[Mp++] = b * s->P + N * T + j;
        }
        for (int r = s->h_poff[b]; r < Mp; r++) s->h_pos[r] = r - s->h_poff[b];   /* cumsum(valid) - 1 */
        for (int i = 0; i < s->S; i++) s->h_spos[b * s->S + i] = Mp - s->h_poff[b] + i;
        s->h_soff[b] = b * s->S;
    }
    s->h_poff[B] = Mp;
    s->h_soff[B] = B * s->S;
    s->h_voff[nimg] = nimg * T;
    size_t R3 = (size_t)s->R * s->R * 3;
    pi0_status st = PI0_OK;
    if (nimg) {   /* the images are read where the caller put them if the backend can (backend.h host_view) */
        s->img_in = be->host_view ? be->host_view(be, in->images, PT_F32) : (pt){0};
        if (!s->img_in.p) {
            s->img_in = s->vis.img;
            st = be->upload(be, s->vis.img, in->images, (size_t)B * N * R3);
        }
        if (st == PI0_OK) st = be->upload(be, s->vis.sel, s->h_sel, (size_t)nimg);
        if (st == PI0_OK) st = be->upload(be, s->img_rows, s->h_imgrows, (size_t)nimg * T);
    }
    if (st == PI0_OK && ntext) st = be->upload(be, s->ids, s->h_ids, (size_t)ntext);
    if (st == PI0_OK && ntext) st = be->upload(be, s->id_rows, s->h_idrows, (size_t)ntext);
    if (st == PI0_OK && Mp) st = be->upload(be, s->pos, s->h_pos, (size_t)Mp);
    if (st == PI0_OK) st = be->upload(be, s->spos, s->h_spos, (size_t)B * s->S);
    /* suffix row maps (reusing h_spos after its upload): outputs = last H rows of each sample, which are
     * also the action-token rows (π0: after the state token at b*S) */
    int32_t *rows = s->h_spos;
    if (st == PI0_OK) {
        for (int b = 0; b < B; b++)
            for (int j = 0; j < s->H; j++) rows[b * s->H + j] = b * s->S + (s->S - s->H) + j;
        st = be->upload(be, s->out_rows, rows, (size_t)B * s->H);
        if (st == PI0_OK) st = be->upload(be, s->act_rows, rows, (size_t)B * s->H);   /* actions follow the state token */
    }
    if (st == PI0_OK && !s->c->pi05) {
        for (int b = 0; b < B; b++) rows[b] = b * s->S;
        st = be->upload(be, s->st_rows, rows, (size_t)B);
        if (st == PI0_OK) st = be->upload(be, s->state, in->state, (size_t)B * s->A);
    }
    if (st == PI0_OK) {
        const float *noise = in->noise;
        if (!noise) {
            pi0_rng r;
            pi0_rng_seed(&r, in->seed);
            for (size_t i = 0; i < (size_t)B * s->H * s->A; i++) s->h_noise[i] = (float)pi0_rng_normal(&r);
            noise = s->h_noise;
        }
        st = be->upload(be, s->x0, noise, (size_t)B * s->H * s->A);
    }
    s->rtc = in->rtc;
    if (st == PI0_OK) st = model_rtc_upload(s, in);
    *nimg_out = nimg;
    *Mp_out = Mp;
    return st;
}


static double stage_mark(model_sess *s) {
    if (s->stage_timing) s->be->sync(s->be);
    return now_ms();
}

static void compute(void *arg) {
    struct run_args *r = arg;
    model_sess *s = r->s;
    pi0_backend *be = s->be;
    int B = r->B, nimg = r->nimg, Mp = r->Mp, ntext = Mp - nimg * s->T;
    range(s, "vision");
    if (nimg) {
        pi0_vision_bufs v = s->vis;
        v.img = s->img_in;   /* the session's copy, or the caller's buffer read in place */
        vision_tower(be, s->w, s->c, &v, nimg);
    }
    range(s, NULL);
    r->t[0] = stage_mark(s);
    if (r->dump && nimg) {
        int64_t shape[4] = {B, s->N, s->T, s->D};
        int32_t *map = malloc((size_t)nimg * s->T * sizeof(int32_t));
        if (map) {
            for (int i = 0; i < nimg; i++)
                for (int t = 0; t < s->T; t++) map[i * s->T + t] = s->h_sel[i] * s->T + t;
            dump_rows(s, r->dump, r->user, "vision.out", s->vis.vout, nimg * s->T, s->D, map, 4, shape);
            free(map);
        }
    }
    /* prefix embeddings: image tokens then text tokens scaled by sqrt(D) (docs/model.md 3.6) */
    if (nimg) be->copy_rows(be, s->h, s->img_rows, s->vis.vout, (pt){0}, nimg * s->T, s->D);
    if (ntext) be->embed(be, s->h, s->id_rows, s->ids, ntext, &s->w->embed, sqrtf((float)s->D));
    if (r->dump) {
        int64_t shape[3] = {B, s->P, s->D};
        dump_rows(s, r->dump, r->user, "prefix.emb", s->h, Mp, s->D, s->h_full, 3, shape);
    }
    range(s, "prefill");
    prefill(s, Mp, B, r->dump, r->user);
    range(s, NULL);
    r->t[1] = stage_mark(s);
    range(s, "denoise");
    denoise(s, B, r->dump, r->user);
    range(s, NULL);
    r->t[2] = stage_mark(s);
}

void model_set_stage_timing(model_sess *s, int on) { s->stage_timing = on; }

int model_queues(const model_sess *s, pi0_dump_fn dump) { return !dump && !s->stage_timing && s->be->run_graph; }

pi0_status model_start(model_sess *s, const pi0_inputs *in, pi0_dump_fn dump, void *user) {
    pi0_backend *be = s->be;
    struct run_args *r = &s->run;
    *r = (struct run_args){.s = s, .B = in->batch, .dump = dump, .user = user, .replay = model_queues(s, dump),
                           .t0 = now_ms()};
    pi0_status st = upload_inputs(s, in, &r->nimg, &r->Mp);
    if (st != PI0_OK) {
        be->sync(be);   /* no copy may still read the caller's (page-locked) buffers after we return */
        return st;
    }
    if (!r->replay) {
        compute(r);
        return PI0_OK;
    }
    /* the launches depend on B, the image count and every segment's length: the graph key */
    int32_t key[7 + 4096 + 1];
    int n = 0;
    key[n++] = in->batch;
    key[n++] = r->nimg;
    key[n++] = r->Mp;
    key[n++] = s->rtc;   /* guidance adds a launch per step */
    uint64_t img = r->nimg ? (uint64_t)(uintptr_t)s->img_in.p : 0;   /* images read in place: their address */
    key[n++] = (int32_t)(uint32_t)img;
    key[n++] = (int32_t)(uint32_t)(img >> 32);
    for (int b = 0; b <= in->batch && n < (int)(sizeof key / sizeof *key); b++) key[n++] = s->h_poff[b];
    st = be->run_graph(be, key, n, compute, r);
    if (st != PI0_OK) be->sync(be);
    return st;
}

void model_abort(model_sess *s) { s->be->sync(s->be); }

pi0_status model_finish(model_sess *s, float *actions, model_timing *tm) {
    struct run_args *r = &s->run;
    pi0_status st = s->be->download(s->be, actions, s->x, (size_t)r->B * s->H * s->A);
    double t3 = now_ms();
    if (tm) {
        if (!r->replay)
            *tm = (model_timing){r->t[0] - r->t0, r->t[1] - r->t[0], r->t[2] - r->t[1], t3 - r->t0};
        else
            *tm = (model_timing){0, 0, 0, t3 - r->t0};
    }
    return st;
}
