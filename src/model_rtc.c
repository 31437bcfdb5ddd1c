/* model_rtc.c — real-time chunking in the model (docs/model.md 3.11, pi0.h pi0_rtc_mode): the guidance inputs of an
 * inference (leftover, prefix weights, each step's guidance weight, each sample's form) and the exact form's pass:
 * the expert's forward that keeps what its transpose needs (model_rtc_expert_layers), and the vector-Jacobian product
 * of a step's velocity through the action expert (model_rtc_guidance). Written against backend.h like model.c, whose
 * session (model_sess.h) it shares; LeRobot's form is one op (rtc_guide) that model.c's denoise calls itself. */
#include <math.h>

#include "model_sess.h"
#include "util.h"

static int cat_ld(pi0_backend *be, int width) {
    int ld = be->cat_ld ? be->cat_ld(be, width) : width;
    PI0_ASSERT(ld >= width);
    return ld;
}

static pi0_status exact_buffers(model_sess *s) {
    if (s->exact_ready) return PI0_OK;
    pi0_backend *be = s->be;
    if (!be->mlp_up_save || !be->residual_save || !be->linear_t || !be->linear_t_cat || !be->norm_bwd ||
        !be->gelu_mul_bwd || !be->swish_bwd || !be->rope_bwd || !be->attention_bwd || !be->scale_rows || !be->rtc_error ||
        !be->rtc_correct)
        return pi0_fail(PI0_ERR_ARG, "exact real-time chunking: the %s backend lacks the expert's transpose ops", be->name);
    size_t Ms = (size_t)s->max_b * s->S, Mh = (size_t)s->max_b * s->H, depth = (size_t)s->c->ex.depth;
    size_t qw = (size_t)s->Hq * s->Dh, kvw = (size_t)s->Kv * s->Dh;
    s->xh = model_buf(s, depth * Ms * s->De, PT_ACT);
    s->xh2 = model_buf(s, depth * Ms * s->De, PT_ACT);
    s->xq = model_buf(s, depth * Ms * qw, PT_ACT);
    s->xk = model_buf(s, depth * Ms * kvw, PT_ACT);
    s->xv = model_buf(s, depth * Ms * kvw, PT_ACT);
    s->xg = model_buf(s, depth * Ms * s->Fe, PT_ACT);
    s->xu = model_buf(s, depth * Ms * s->Fe, PT_ACT);
    s->az = model_buf(s, Mh * s->De, PT_F32);
    s->d_s = model_buf(s, Ms * s->De, PT_ACT);
    s->d_sy = model_buf(s, Ms * s->De, PT_ACT);
    s->d_tmp = model_buf(s, Ms * s->De, PT_ACT);
    s->d_a = model_buf(s, Ms * s->Fe, PT_ACT);
    /* the rows of the side-by-side cotangents, of the stride the backend asks for (backend.h cat_ld), the columns past
     * the cotangents zero (alloc zero-fills; no op writes them) */
    s->ld_gu = cat_ld(be, 2 * s->Fe);
    s->ld_qkv = cat_ld(be, (int)(qw + 2 * kvw));
    s->d_gu = model_buf(s, Ms * s->ld_gu, PT_ACT);
    s->d_qkv = model_buf(s, Ms * s->ld_qkv, PT_ACT);
    s->d_vin = model_buf(s, Mh * s->De, PT_F32);
    s->d_act = model_buf(s, Mh * s->De, PT_F32);
    s->d_hid = model_buf(s, Mh * s->De, PT_F32);
    s->d_x = model_buf(s, Mh * s->A, PT_F32);
    s->err = model_buf(s, Mh * s->A, PT_F32);
    s->zero_row = model_buf(s, (size_t)s->max_b * s->De, PT_F32);
    s->rtc_jac = model_buf(s, (size_t)s->max_b, PT_F32);
    if (s->alloc_failed) {
        pi0_error_prefix("exact real-time chunking's buffers (%s, batch %d)", s->be->name, s->max_b);
        return PI0_ERR_NOMEM;
    }
    s->exact_ready = 1;
    return PI0_OK;
}

/* The real-time chunking inputs of one inference (upload_inputs calls it after s->rtc is set): the exact form's
 * buffers (at its first inference) and each sample's form, then the leftover, prefix weights and each step's guidance
 * weight. Nothing without guidance. */
pi0_status model_rtc_upload(model_sess *s, const pi0_inputs *in) {
    pi0_backend *be = s->be;
    int B = in->batch;
    pi0_status st = PI0_OK;
    if (in->rtc == PI0_RTC_EXACT) {
        st = exact_buffers(s);
        for (int b = 0; b < B; b++) s->h_rtc_jac[b] = in->rtc_exact ? (in->rtc_exact[b] ? 1.0f : 0.0f) : 1.0f;
        if (st == PI0_OK) st = be->upload(be, s->rtc_jac, s->h_rtc_jac, (size_t)B);
    }
    if (st == PI0_OK && (in->rtc == PI0_RTC_LEROBOT || in->rtc == PI0_RTC_EXACT)) {
        /* the guidance weight of each step (LeRobot's denoise_step, in fp32 as its tensors): tau = 1 - t,
         * min(nan_to_num(c) * inv_r2, max) with infinities replaced by max */
        for (int bk = 0; bk < B * s->steps; bk++) {
            int k = bk % s->steps;
            float t = s->tvals[k], tau = 1.0f - t, mx = in->rtc_max_weights[bk / s->steps], omt = 1.0f - tau;
            volatile float sq = omt * omt, tt = tau * tau;   /* volatile: no fused multiply-add, as PyTorch */
            float inv_r2 = (sq + tt) / sq, c = omt / tau;
            if (isinf(c)) c = mx;
            float g = c * inv_r2;
            if (isinf(g) || isnan(g)) g = isnan(g) ? 0.0f : mx;
            s->h_rtc_g[bk] = g < mx ? g : mx;
        }
        st = be->upload(be, s->rtc_y, in->rtc_prev, (size_t)B * s->H * s->A);
        if (st == PI0_OK) st = be->upload(be, s->rtc_w, in->rtc_weights, (size_t)B * s->H);
        if (st == PI0_OK) st = be->upload(be, s->rtc_g, s->h_rtc_g, (size_t)B * s->steps);
    }
    return st;
}

static pt slab(model_sess *s, pt t, int l, size_t width) {   /* layer l's rows of a saved slab */
    return pt_at(s->be, t, (size_t)l * s->max_b * s->S * width);
}

/* A residual branch's add (ex_residual) that also keeps the result in `save` (NULL: not kept). */
static void ex_residual_save(pi0_backend *be, const pi0_expert_step *e, pt save, pt y, const pi0_wt *W, int K, int norm) {
    be->residual_save(be, e->s, save, e->stmp, y, W, e->M, e->D, K, ex_gate(be, e, norm), 3 * e->D, e->M);
}

/* expert_layers keeping each layer's values for expert_backward (same math: mlp_up_save and residual_save are
 * mlp_up and the residual adds that also store what they computed; the residual rows before each block are the
 * previous add's results). */
void model_rtc_expert_layers(model_sess *s, const pi0_expert_step *e) {
    pi0_backend *be = s->be;
    pi0_attn a = e->attn;
    int M = e->M, D = e->D, qw = a.heads * a.head_dim;
    size_t kvw = (size_t)a.kv_heads * a.head_dim;
    be->copy_rows(be, slab(s, s->xh, 0, D), (pt){0}, e->s, (pt){0}, M, D);   /* the first layer's input */
    for (int l = 0; l < e->depth; l++) {
        const pi0_gemma_layer *L = &e->layers[l];
        pi0_prenorm pn = ex_prenorm(e, &L->attn_norm, 2 * l);
        pt sk = a.tail ? pt_at(be, e->kc[l], e->kv_tail) : slab(s, s->xk, l, kvw);
        pt sv = a.tail ? pt_at(be, e->vc[l], e->kv_tail) : slab(s, s->xv, l, kvw);
        pi0_proj3 pj = {{&L->q, &L->k, &L->v}, {NULL, NULL, NULL}};
        be->qkv(be, slab(s, s->xq, l, qw), sk, sv, e->s, &pj, M, D, e->pos, a.head_dim, &pn);
        a.k1 = e->kc[l];
        a.v1 = e->vc[l];
        if (!a.tail) { a.k2 = sk; a.v2 = sv; }
        be->attention(be, e->att, slab(s, s->xq, l, qw), &a);
        ex_residual_save(be, e, slab(s, s->xh2, l, D), e->att, &L->o, qw, 2 * l);
        pn = ex_prenorm(e, &L->mlp_norm, 2 * l + 1);
        be->mlp_up_save(be, e->g, slab(s, s->xg, l, e->F), slab(s, s->xu, l, e->F), e->s, L, M, e->F, D, &pn);
        ex_residual_save(be, e, l + 1 < e->depth ? slab(s, s->xh, l + 1, D) : (pt){0}, e->g, &L->down, e->F, 2 * l + 1);
    }
}

/* The cotangent of a norm's input (plain RMSNorm weights, or adaRMS modulation `norm` of this step), [op]= into dx. */
static void ex_norm_bwd(pi0_backend *be, const pi0_expert_step *e, pt dx, pt dy, pt x, const pi0_wt *plain, int norm,
                        enum pi0_epi epi) {
    if (e->mods) be->norm_bwd(be, dx, dy, x, NULL, e->mods[norm], e->M, e->M, e->D, e->eps, epi);
    else be->norm_bwd(be, dx, dy, x, plain, (pt){0}, 1, e->M, e->D, e->eps, epi);
}

/* The cotangent through a residual branch's product: dy . W (gated: (dy * gate) . W), into out. */
static void ex_residual_bwd(model_sess *s, const pi0_expert_step *e, pt out, pt dy, const pi0_wt *W, int K, int norm) {
    pi0_backend *be = s->be;
    if (e->mods) {
        be->scale_rows(be, s->d_tmp, dy, ex_gate(be, e, norm), 3 * e->D, e->M, e->M, e->D);
        dy = s->d_tmp;
    }
    be->linear_t(be, out, dy, W, e->M, e->D, K, 0, EPI_STORE);
}

/* d_s (M, D) holds the cotangent of the last layer's output; leaves the cotangent of the first layer's input there. */
static void expert_backward(model_sess *s, const pi0_expert_step *e) {
    pi0_backend *be = s->be;
    pi0_attn a = e->attn;
    int M = e->M, D = e->D, Fd = e->F, qw = a.heads * a.head_dim;
    size_t kvw = (size_t)a.kv_heads * a.head_dim;
    for (int l = e->depth - 1; l >= 0; l--) {
        const pi0_gemma_layer *L = &e->layers[l];
        /* MLP: s += down(gelu(gate(n)) * up(n)), n = norm(xh2) */
        ex_residual_bwd(s, e, s->d_a, s->d_s, &L->down, Fd, 2 * l + 1);
        be->gelu_mul_bwd(be, s->d_gu, pt_at(be, s->d_gu, (size_t)Fd), s->d_a, slab(s, s->xg, l, Fd),
                         slab(s, s->xu, l, Fd), M, Fd, s->ld_gu);
        const pi0_wt *gu[2] = {&L->gate, &L->up}, *qkv[3] = {&L->q, &L->k, &L->v};
        be->linear_t_cat(be, s->d_sy, s->d_gu, s->ld_gu, gu, 2, M, D, EPI_STORE);
        ex_norm_bwd(be, e, s->d_s, s->d_sy, slab(s, s->xh2, l, D), &L->mlp_norm, 2 * l + 1, EPI_ADD);
        /* attention: s += o(attn(rope(q(n)), [cache, rope(k(n))], [cache, v(n)])), n = norm(xh) */
        ex_residual_bwd(s, e, e->att, s->d_s, &L->o, qw, 2 * l);   /* att: the attention output's cotangent */
        a.k1 = e->kc[l];
        a.v1 = e->vc[l];
        if (!a.tail) { a.k2 = slab(s, s->xk, l, kvw); a.v2 = slab(s, s->xv, l, kvw); }
        pt dq = s->d_qkv, dk = pt_at(be, dq, (size_t)qw), dv = pt_at(be, dk, kvw);
        be->attention_bwd(be, dq, dk, dv, e->att, slab(s, s->xq, l, qw), &a, s->ld_qkv);
        be->rope_bwd(be, dq, a.heads, dk, a.kv_heads, e->pos, M, a.head_dim, s->ld_qkv);
        be->linear_t_cat(be, s->d_sy, s->d_qkv, s->ld_qkv, qkv, 3, M, D, EPI_STORE);
        ex_norm_bwd(be, e, s->d_s, s->d_sy, slab(s, s->xh, l, D), &L->attn_norm, 2 * l, EPI_ADD);
    }
}

/* Exact guidance of step k (pi0.h PI0_RTC_EXACT): err = (Y - x1) w with x1 = x_t - t v, then dx = err^T dv/dx_t by
 * the transpose of the step (action_out, final norm, the layers, the action embedding), and the guided velocity. The
 * batch's samples of LeRobot's form (rtc_jac 0) get rtc_guide's fp32 arithmetic from rtc_error and rtc_correct
 * (backend.h), so that each sample's actions are those it gets in a batch of its own form. */
void model_rtc_guidance(model_sess *s, const pi0_expert_step *e, const pi0_prenorm *fin, int B, int k) {
    pi0_backend *be = s->be;
    pi0_weights *w = s->w;
    int Mh = B * s->H, Ms = e->M, De = s->De;
    float t = s->tvals[k];
    be->rtc_error(be, s->err, s->vel, s->x, s->rtc_y, s->rtc_w, s->rtc_jac, t, Mh, s->H, s->A);
    be->linear_t(be, s->d_vin, s->err, &w->action_out_w, Mh, s->A, De, 0, EPI_STORE);
    be->copy_rows(be, s->d_sy, s->out_rows, s->d_vin, (pt){0}, Mh, De);
    if (!s->c->pi05) be->copy_rows(be, s->d_sy, s->st_rows, s->zero_row, (pt){0}, B, De);   /* v reads no state row */
    if (fin->w) be->norm_bwd(be, s->d_s, s->d_sy, s->s, fin->w, (pt){0}, 1, Ms, De, EPS, EPI_STORE);
    else be->norm_bwd(be, s->d_s, s->d_sy, s->s, NULL, fin->mod, fin->rows_per_mod, Ms, De, EPS, EPI_STORE);
    expert_backward(s, e);
    be->copy_rows(be, s->d_act, (pt){0}, s->d_s, s->act_rows, Mh, De);   /* the action rows' token cotangents */
    if (s->c->pi05) {
        be->linear_t(be, s->d_x, s->d_act, &w->action_in_w, Mh, De, s->A, 0, EPI_STORE);
    } else {
        be->linear_t(be, s->d_hid, s->d_act, &w->atm_out_w, Mh, De, De, 0, EPI_STORE);
        be->swish_bwd(be, s->d_hid, s->d_hid, s->az, Mh, De);
        be->linear_t(be, s->d_x, s->d_hid, &w->atm_act_w, Mh, De, s->A, 0, EPI_STORE);
    }
    be->rtc_correct(be, s->vel, s->err, s->d_x, s->rtc_g, s->rtc_jac, s->steps, k, t, Mh, s->H, s->A);
}
