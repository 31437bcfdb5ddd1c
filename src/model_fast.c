/* model_fast.c — π0-FAST's inference (docs/model.md 7), written against backend.h like model.c: PaliGemma alone reads
 * the images and the prompt, then decodes action tokens one at a time with a KV cache, exactly as openpi's
 * Pi0FAST.sample_actions does, its alignment, positions and decode mask included (7.2-7.4). The tokens are the
 * result; turning them into actions is the FAST tokenizer's (fast_tokenizer.c).
 *
 * Layout. openpi rotates each sample's prefix so that its last valid token ends the row, and the decoded tokens see
 * the last prefill_len slots of it (prefill_len: the valid tokens). Where those slots are the valid tokens (no masked
 * token after the first valid one: every camera present, prompt padding at the end), masked tokens feed nothing that
 * is read, and only the valid rows are computed ("compact" samples). Otherwise (a masked camera after the first
 * valid token, a hole in the token mask) the window holds masked rows, whose values come from their all-masked
 * attention rows (a uniform average over every cache slot, 7.2): such a sample ("full") computes all P rows.
 * Rows of the prefill: first every sample's valid rows (sample after sample), then the masked rows of the full samples.
 * The cache holds RS = P + max_steps rows per sample: its valid rows, its masked rows, then the decoded tokens. After
 * the prefill a full sample's window rows are moved to the front of its cache, so that every sample decodes over
 * cache rows [0, prefill_len + step]. */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

#define EPS 1e-6f
#define MAX_FAST_BUFS 128

struct fast_sess {
    pi0_backend *be;
    const pi0_config *c;
    const pi0_weights *w;
    int max_b, max_steps, N, T, P, RS, D, F, Hq, Kv, Dh, V, depth;
    pt bufs[MAX_FAST_BUFS];
    int n_bufs, alloc_failed;
    pi0_vision_bufs vis;
    pt ids, id_rows, img_rows, pos, h, y, q, att, g, u, kx, vx, zero, crow, wsrc, wdst, zdst, zsrc, last, xl, tok, top2;
    pt step, drows;   /* step: a decode step's inputs, [4][B] I32 (decode_step) */
    pt *kc, *vc;   /* [depth] */
    /* host scratch, sized at create */
    int32_t *h_sel, *h_voff, *h_ids, *h_idrows, *h_imgrows, *h_pos, *h_crow, *h_wsrc, *h_wdst, *h_zdst, *h_last;
    int32_t *h_qoff, *h_koff, *h_kend;   /* the valid rows' attention segments (one per block of the prefix-LM mask) */
    int32_t *h_moff, *h_mkoff, *h_mkend; /* the masked rows' (one per full sample) */
    int32_t *h_tok, *h_step, *h_dq, *h_dk, *h_dkend;
    int32_t *h_plen;
    float *h_top2;
    uint8_t *h_valid;
    int32_t *h_order, *h_cum, *h_inv;   /* [P] one sample's rows in cache order, cumsum of its ar mask, inverse order */
    int32_t *h_vcount;                  /* [P] the valid tokens up to each index of the sample's row */
};

static pt fbuf(void *user, size_t n, int kind) {
    fast_sess *s = user;
    pt t = {NULL, kind};
    if (s->alloc_failed) return t;
    if (s->n_bufs == MAX_FAST_BUFS) {
        s->alloc_failed = 1;
        pi0_fail(PI0_ERR_NOMEM, "more than %d session buffers", MAX_FAST_BUFS);
        return t;
    }
    t = s->be->alloc(s->be, n, kind);
    if (t.p) s->bufs[s->n_bufs++] = t;
    else s->alloc_failed = 1;
    return t;
}

void fast_sess_free(fast_sess *s) {
    if (!s) return;
    for (int i = 0; i < s->n_bufs; i++) s->be->release(s->be, s->bufs[i]);
    free(s->kc); free(s->vc);
    free(s->h_sel); free(s->h_voff); free(s->h_ids); free(s->h_idrows); free(s->h_imgrows); free(s->h_pos); free(s->h_crow);
    free(s->h_wsrc); free(s->h_wdst); free(s->h_zdst); free(s->h_last); free(s->h_qoff); free(s->h_koff); free(s->h_kend);
    free(s->h_moff); free(s->h_mkoff); free(s->h_mkend); free(s->h_tok); free(s->h_step); free(s->h_dq);
    free(s->h_dk); free(s->h_dkend); free(s->h_plen); free(s->h_top2); free(s->h_valid); free(s->h_order); free(s->h_cum);
    free(s->h_inv); free(s->h_vcount);
    free(s);
}

pi0_status fast_sess_create(fast_sess **out, pi0_backend *be, const pi0_config *c, const pi0_weights *w, int max_b,
                            int max_steps) {
    *out = NULL;
    fast_sess *s = calloc(1, sizeof *s);
    if (!s) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    s->be = be; s->c = c; s->w = w; s->max_b = max_b; s->max_steps = max_steps;
    s->N = c->n_cameras; s->T = cfg_tokens_per_image(c); s->P = cfg_prefix_len(c); s->RS = s->P + max_steps;
    s->D = c->lm.width; s->F = c->lm.mlp_dim; s->Hq = c->lm.num_heads; s->Kv = c->lm.num_kv_heads; s->Dh = c->lm.head_dim;
    s->V = c->lm.vocab_size; s->depth = c->lm.depth;
    size_t B = (size_t)max_b, rows = B * s->P, nimg = B * s->N, qw = (size_t)s->Hq * s->Dh, kvw = (size_t)s->Kv * s->Dh;
    size_t L = (size_t)c->max_token_len, cache = B * s->RS;
    pi0_status st = PI0_ERR_NOMEM;
    s->kc = calloc((size_t)s->depth, sizeof(pt));
    s->vc = calloc((size_t)s->depth, sizeof(pt));
    if (!s->kc || !s->vc) goto fail;
    if (!vision_bufs_alloc(&s->vis, be, c, nimg, fbuf, s)) goto fail;
    s->ids = fbuf(s, B * L, PT_I32);
    s->id_rows = fbuf(s, B * L, PT_I32);
    s->img_rows = fbuf(s, nimg * s->T, PT_I32);
    s->pos = fbuf(s, rows, PT_I32);
    s->h = fbuf(s, rows * s->D, PT_ACT);
    s->y = fbuf(s, rows * s->D, PT_ACT);
    s->q = fbuf(s, rows * qw, PT_ACT);
    s->att = fbuf(s, rows * qw, PT_ACT);
    s->g = fbuf(s, rows * s->F, PT_ACT);
    s->u = fbuf(s, rows * s->F, PT_ACT);
    s->kx = fbuf(s, rows * kvw, PT_ACT);
    s->vx = fbuf(s, rows * kvw, PT_ACT);
    s->zero = fbuf(s, kvw, PT_ACT);
    s->crow = fbuf(s, rows, PT_I32);
    s->wsrc = fbuf(s, rows, PT_I32);
    s->wdst = fbuf(s, rows, PT_I32);
    s->zdst = fbuf(s, B * max_steps, PT_I32);
    s->zsrc = fbuf(s, B * max_steps, PT_I32);   /* all 0: row 0 of `zero` */
    s->last = fbuf(s, B, PT_I32);
    s->xl = fbuf(s, B * s->D, PT_ACT);
    s->tok = fbuf(s, B, PT_I32);
    s->top2 = fbuf(s, 2 * B, PT_F32);
    s->step = fbuf(s, 4 * B, PT_I32);
    s->drows = fbuf(s, B, PT_I32);
    for (int l = 0; l < s->depth; l++) {
        s->kc[l] = fbuf(s, cache * kvw, PT_ACT);
        s->vc[l] = fbuf(s, cache * kvw, PT_ACT);
    }
    if (s->alloc_failed) goto fail;
    s->h_sel = malloc(nimg * 4); s->vis.voff = s->h_voff = malloc((nimg + 1) * 4);
    s->h_ids = malloc(B * L * 4); s->h_idrows = malloc(B * L * 4); s->h_imgrows = malloc(nimg * s->T * 4);
    s->h_pos = malloc(rows * 4); s->h_crow = malloc(rows * 4); s->h_wsrc = malloc(rows * 4); s->h_wdst = malloc(rows * 4);
    s->h_zdst = malloc(B * max_steps * 4); s->h_last = malloc(B * 4);
    s->h_qoff = malloc((rows + 1) * 4); s->h_koff = malloc((rows + 1) * 4); s->h_kend = malloc((rows + 1) * 4);
    s->h_moff = malloc((B + 1) * 4); s->h_mkoff = malloc((B + 1) * 4); s->h_mkend = malloc((B + 1) * 4);
    s->h_tok = malloc(B * 4); s->h_step = malloc(4 * B * 4); s->h_dq = malloc((B + 1) * 4);
    s->h_dk = malloc((B + 1) * 4); s->h_dkend = malloc((B + 1) * 4); s->h_plen = malloc(B * 4);
    s->h_top2 = malloc(2 * B * sizeof(float)); s->h_valid = malloc((size_t)s->P); s->h_order = malloc((size_t)s->P * 4);
    s->h_cum = malloc((size_t)s->P * 4); s->h_inv = malloc((size_t)s->P * 4); s->h_vcount = malloc((size_t)s->P * 4);
    if (!s->h_sel || !s->h_voff || !s->h_ids || !s->h_idrows || !s->h_imgrows || !s->h_pos || !s->h_crow || !s->h_wsrc ||
        !s->h_wdst || !s->h_zdst || !s->h_last || !s->h_qoff || !s->h_koff || !s->h_kend || !s->h_moff || !s->h_mkoff ||
        !s->h_mkend || !s->h_tok || !s->h_step || !s->h_dq || !s->h_dk || !s->h_dkend || !s->h_plen ||
        !s->h_top2 || !s->h_valid || !s->h_order || !s->h_cum || !s->h_inv || !s->h_vcount)
        goto fail;
    /* zsrc all 0 and zero a zero row: the allocator zero-fills */
    size_t wide = qw + 2 * kvw > 2 * (size_t)s->F ? qw + 2 * kvw : 2 * (size_t)s->F;
    size_t vrows = nimg * s->T, max_rows = rows > vrows ? rows : vrows;
    size_t sc_prefix = (size_t)s->P * s->Hq * (s->RS + 8), sc_vis = (size_t)s->T * c->vis.num_heads * (s->T + 8);
    if ((st = be->reserve(be, max_rows, (size_t)s->RS, sc_prefix > sc_vis ? sc_prefix : sc_vis, rows * wide)) != PI0_OK)
        goto fail;
    for (int i = 0; i < max_b; i++) s->h_tok[i] = i;
    if ((st = be->upload(be, s->drows, s->h_tok, B)) != PI0_OK) goto fail;
    *out = s;
    return PI0_OK;
fail:
    if (st == PI0_ERR_NOMEM) pi0_error_prefix("creating a %s π0-FAST session for batch %d", be->name, max_b);
    fast_sess_free(s);
    return st;
}

/* One inference's plan (host side; api_inputs.c checked the inputs). */
typedef struct {
    int B, P, n_steps, nimg, ntext, M, nvalid, nseg, nmask, nwin, nzero;
} plan;

/* The rows of every sample, their positions and cache rows, the attention segments, and for full samples the slots to
 * zero and the window to move (docs/model.md 7.2/7.3). */
static void plan_inputs(fast_sess *s, const pi0_inputs *in, int n_steps, plan *p) {
    int B = in->batch, N = s->N, T = s->T, L = in->n_tokens, P = N * T + L, RS = s->RS;
    *p = (plan){.B = B, .P = P, .n_steps = n_steps};
    uint8_t *valid = s->h_valid;
    int32_t *order = s->h_order, *cum = s->h_cum, *inv = s->h_inv, *vcount = s->h_vcount;
    for (int b = 0; b < B; b++) {
        int plen = 0;
        for (int c = 0; c < N; c++) plen += T * (!in->image_masks || in->image_masks[b * N + c]);
        for (int j = 0; j < L; j++) plen += in->token_mask[b * L + j] != 0;
        s->h_plen[b] = plen;
        p->nvalid += plen;
    }
    int vrow = 0, mrow = p->nvalid;
    for (int b = 0; b < B; b++) {
        int base = b * RS, last = -1, plen = s->h_plen[b], first = vrow;
        for (int i = 0; i < P; i++) {
            int img = i < N * T;
            valid[i] = img ? !in->image_masks || in->image_masks[b * N + i / T] : in->token_mask[b * L + i - N * T] != 0;
            cum[i] = (i ? cum[i - 1] : 0) + (img ? 0 : in->token_ar_mask[b * L + i - N * T]);
            vcount[i] = (i ? vcount[i - 1] : 0) + valid[i];
            if (valid[i]) last = i;
        }
        int seqlen = last + 1, full = 0;   /* openpi rotates the row left by seqlen */
        for (int i = seqlen - plen; i < seqlen; i++) full |= !valid[i];
        int n = 0;
        for (int i = 0; i < P; i++) if (valid[i]) order[n++] = i;
        if (full) for (int i = 0; i < P; i++) if (!valid[i]) order[n++] = i;
        for (int k = 0; k < n; k++) {
            int o = order[k], r = valid[o] ? vrow++ : mrow++;
            inv[o] = k;
            /* positions: cumsum(mask) - 1 over the rotated row = the valid tokens up to o, less 1 (-1 after the last) */
            s->h_pos[r] = o < seqlen ? vcount[o] - 1 : -1;
            s->h_crow[r] = base + k;
            if (o < N * T) {   /* image rows: a camera's T rows are consecutive in this order */
                if (o % T == 0) {
                    s->h_sel[p->nimg] = b * N + o / T;
                    s->h_voff[p->nimg] = p->nimg * T;
                    p->nimg++;
                }
                s->h_imgrows[(p->nimg - 1) * T + o % T] = r;
            } else {
                s->h_ids[p->ntext] = in->tokens[b * L + o - N * T];
                s->h_idrows[p->ntext++] = r;
            }
        }
        /* valid rows: a segment per block of equal cumsum (the prefix-LM mask), seeing the sample's keys up to its end */
        for (int k = 0; k < plen; k++) {
            if (k == 0 || cum[order[k]] != cum[order[k - 1]]) {
                s->h_qoff[p->nseg] = first + k;
                s->h_koff[p->nseg++] = base;
            }
            s->h_kend[p->nseg - 1] = base + k + 1;
        }
        s->h_last[b] = first + plen - 1;   /* the last valid token: its logits give the first decoded token */
        if (!full) continue;
        s->h_moff[p->nmask] = mrow - (n - plen);   /* masked rows: uniform over all P + n_steps slots */
        s->h_mkoff[p->nmask] = base;
        s->h_mkend[p->nmask++] = base + P + n_steps;
        for (int k = 0; k < n_steps; k++) s->h_zdst[p->nzero++] = base + P + k;
        for (int k = 0; k < plen; k++) {   /* the decode window: the rotated row's last plen slots */
            s->h_wsrc[p->nwin] = base + inv[seqlen - plen + k];
            s->h_wdst[p->nwin++] = base + k;
        }
    }
    s->h_qoff[p->nseg] = p->nvalid;
    s->h_koff[p->nseg] = B * RS;
    s->h_moff[p->nmask] = mrow;
    s->h_mkoff[p->nmask] = B * RS;
    s->h_voff[p->nimg] = p->nimg * T;
    p->M = mrow;
}

static pi0_status upload_plan(fast_sess *s, const pi0_inputs *in, const plan *p) {
    pi0_backend *be = s->be;
    size_t R3 = (size_t)s->c->vis.image_size * s->c->vis.image_size * 3;
    pi0_status st = PI0_OK;
    if (p->nimg) {
        st = be->upload(be, s->vis.img, in->images, (size_t)p->B * s->N * R3);
        if (st == PI0_OK) st = be->upload(be, s->vis.sel, s->h_sel, (size_t)p->nimg);
        if (st == PI0_OK) st = be->upload(be, s->img_rows, s->h_imgrows, (size_t)p->nimg * s->T);
    }
    if (st == PI0_OK && p->ntext) st = be->upload(be, s->ids, s->h_ids, (size_t)p->ntext);
    if (st == PI0_OK && p->ntext) st = be->upload(be, s->id_rows, s->h_idrows, (size_t)p->ntext);
    if (st == PI0_OK) st = be->upload(be, s->pos, s->h_pos, (size_t)p->M);
    if (st == PI0_OK) st = be->upload(be, s->crow, s->h_crow, (size_t)p->M);
    if (st == PI0_OK) st = be->upload(be, s->last, s->h_last, (size_t)p->B);
    if (st == PI0_OK && p->nwin) st = be->upload(be, s->wsrc, s->h_wsrc, (size_t)p->nwin);
    if (st == PI0_OK && p->nwin) st = be->upload(be, s->wdst, s->h_wdst, (size_t)p->nwin);
    if (st == PI0_OK && p->nzero) st = be->upload(be, s->zdst, s->h_zdst, (size_t)p->nzero);
    return st;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* One Gemma layer over M rows of h whose K / V go to cache rows `crow`, or with crow.p NULL straight to cache rows
 * 0 .. M - 1 (a single sample's prefill: no copy); attended through a (and, with masked rows, m as well). The norms go
 * with the products that read them (a backend may fold them in: the few-row products of a decoded token do). */
static void layer(fast_sess *s, int l, int M, pt pos, pt crow, const pi0_attn *a, const pi0_attn *m) {
    pi0_backend *be = s->be;
    const pi0_gemma_layer *L = &s->w->lm[l];
    int D = s->D, qw = s->Hq * s->Dh, kvw = s->Kv * s->Dh;
    pi0_proj3 pj = {{&L->q, &L->k, &L->v}, {NULL, NULL, NULL}};
    pi0_prenorm pn = {.w = &L->attn_norm, .eps = EPS, .out = s->y};
    pt k = crow.p ? s->kx : s->kc[l], v = crow.p ? s->vx : s->vc[l];
    be->qkv(be, s->q, k, v, s->h, &pj, M, D, pos, s->Dh, &pn);
    if (crow.p) {
        be->copy_rows(be, s->kc[l], crow, k, (pt){0}, M, kvw);
        be->copy_rows(be, s->vc[l], crow, v, (pt){0}, M, kvw);
    }
    pi0_attn aa = *a;
    aa.k1 = s->kc[l];
    aa.v1 = s->vc[l];
    be->attention(be, s->att, s->q, &aa);
    if (m) {
        pi0_attn mm = *m;
        mm.k1 = s->kc[l];
        mm.v1 = s->vc[l];
        be->attention(be, s->att, s->q, &mm);
    }
    be->linear(be, s->h, s->att, &L->o, NULL, M, D, qw, 0, EPI_ADD);
    pn.w = &L->mlp_norm;
    be->mlp_up(be, s->g, s->u, s->h, L, M, s->F, D, &pn);
    be->linear(be, s->h, s->g, &L->down, NULL, M, D, s->F, 0, EPI_ADD);
}

/* The final norm of the B rows `rows` of h (NULL: rows 0 .. B - 1, the decoded tokens) and the next token of each. */
static void next_tokens(fast_sess *s, int B, pt rows, float temperature, uint64_t seed) {
    pi0_backend *be = s->be;
    if (rows.p) be->copy_rows(be, s->xl, (pt){0}, s->h, rows, B, s->D);
    be->rmsnorm(be, s->y, rows.p ? s->xl : s->h, &s->w->lm_norm, B, s->D, EPS);
    be->next_token(be, s->tok, s->top2, s->y, &s->w->embed, B, s->V, s->D, temperature, seed);
}

static void prefill(fast_sess *s, const plan *p) {
    pi0_backend *be = s->be;
    int kvw = s->Kv * s->Dh, M = p->M;
    if (p->nimg) vision_tower(be, s->w, s->c, &s->vis, p->nimg);
    if (p->nimg) be->copy_rows(be, s->h, s->img_rows, s->vis.vout, (pt){0}, p->nimg * s->T, s->D);
    if (p->ntext) be->embed(be, s->h, s->id_rows, s->ids, p->ntext, &s->w->embed, sqrtf((float)s->D));
    float scale = 1.0f / sqrtf((float)s->Dh);
    pi0_attn a = {.nseg = p->nseg, .heads = s->Hq, .kv_heads = s->Kv, .head_dim = s->Dh, .scale = scale,
                  .q_off = s->h_qoff, .k_off = s->h_koff, .k_end = s->h_kend};
    /* all-masked rows: every logit is the same masked value, so the softmax is uniform: scale 0 gives it */
    pi0_attn m = {.nseg = p->nmask, .heads = s->Hq, .kv_heads = s->Kv, .head_dim = s->Dh, .scale = 0.0f,
                  .q_off = s->h_moff, .k_off = s->h_mkoff, .k_end = s->h_mkend};
    for (int l = 0; l < s->depth; l++) {
        if (p->nzero) {   /* the decode slots of full samples read as zeros in the masked rows' average */
            be->copy_rows(be, s->kc[l], s->zdst, s->zero, s->zsrc, p->nzero, kvw);
            be->copy_rows(be, s->vc[l], s->zdst, s->zero, s->zsrc, p->nzero, kvw);
        }
        layer(s, l, M, s->pos, p->B == 1 ? (pt){0} : s->crow, &a, p->nmask ? &m : NULL);
        if (p->nwin) {   /* full samples: the window to the front of the cache (through kx / vx) */
            be->copy_rows(be, s->kx, (pt){0}, s->kc[l], s->wsrc, p->nwin, kvw);
            be->copy_rows(be, s->kc[l], s->wdst, s->kx, (pt){0}, p->nwin, kvw);
            be->copy_rows(be, s->vx, (pt){0}, s->vc[l], s->wsrc, p->nwin, kvw);
            be->copy_rows(be, s->vc[l], s->wdst, s->vx, (pt){0}, p->nwin, kvw);
        }
    }
}

/* The prefill and the first token as one CUDA graph: its launches depend on the plan's sizes and attention segments
 * (the key below) and on nothing else the host holds, so a robot's repeated observation shape replays it. */
typedef struct {
    fast_sess *s;
    const plan *p;
} prefill_arg;

static void prefill_first(void *arg) {
    prefill_arg *a = arg;
    prefill(a->s, a->p);
    next_tokens(a->s, a->p->B, a->s->last, 0.0f, 0);   /* greedy only: a sampled token's seed is an argument */
}

/* The graph key of the prefill: its length, or 0 when it would pass cap (the prefill then runs without a graph). */
static int prefill_key(const fast_sess *s, const plan *p, int32_t *key, int cap) {
    int n = 0;
    int32_t head[] = {0x46505245, p->B, p->P, p->nimg, p->ntext, p->M, p->nseg, p->nmask, p->nwin, p->nzero};   /* "FPRE" */
    if (10 + 3 * (p->nseg + 1) + 3 * (p->nmask + 1) > cap) return 0;
    for (int i = 0; i < 10; i++) key[n++] = head[i];
    for (int i = 0; i <= p->nseg; i++) { key[n++] = s->h_qoff[i]; key[n++] = s->h_koff[i]; }
    for (int i = 0; i < p->nseg; i++) key[n++] = s->h_kend[i];
    for (int i = 0; i <= p->nmask; i++) { key[n++] = s->h_moff[i]; key[n++] = s->h_mkoff[i]; }
    for (int i = 0; i < p->nmask; i++) key[n++] = s->h_mkend[i];
    return n;
}

/* The seed of step k's sampling noise (a SplitMix64 step of the caller's seed per step). */
static uint64_t step_seed(uint64_t seed, int k) { return seed ^ (0x2545f4914f6cdd1dull * (uint64_t)(k + 1)); }

/* Decode steps read their varying inputs from the device: s->step holds, for each of the B samples, the token to
 * embed, its position, its cache row and its key count, uploaded by the host before each step. The launches depend
 * only on B and on the key bound of the attention (a->k_end, the launches' size; k_len holds the counts), so a CUDA
 * backend captures them once as a graph and replays it per token while the bound holds: the per-launch host cost
 * was most of a token's time. */
typedef struct {
    fast_sess *s;
    int B;
    pi0_attn a;
    float temperature;
    uint64_t seed;
} step_arg;

static void decode_step(void *arg) {
    step_arg *t = arg;
    fast_sess *s = t->s;
    pi0_backend *be = s->be;
    int B = t->B;
    pt tok = s->step, pos = pt_at(be, s->step, (size_t)B), slot = pt_at(be, s->step, 2 * (size_t)B);
    be->embed(be, s->h, s->drows, tok, B, &s->w->embed, sqrtf((float)s->D));
    for (int l = 0; l < s->depth; l++) layer(s, l, B, pos, slot, &t->a, NULL);
    next_tokens(s, B, (pt){0}, t->temperature, t->seed);
}

pi0_status fast_generate(fast_sess *s, const pi0_inputs *in, int n_steps, float temperature, int32_t *tokens,
                         int *n_run, float *top2, model_timing *tm) {
    pi0_backend *be = s->be;
    double t0 = now_ms(), t1, t2;
    plan p;
    plan_inputs(s, in, n_steps, &p);
    pi0_status st = upload_plan(s, in, &p);
    int B = p.B, RS = s->RS;
    memset(tokens, 0, (size_t)B * n_steps * sizeof *tokens);
    if (top2) memset(top2, 0, 2 * (size_t)B * n_steps * sizeof *top2);
    *n_run = 0;
    if (st != PI0_OK) { be->sync(be); return st; }
    int32_t pkey[4096];
    int nkey = temperature > 0.0f || !be->run_graph ? 0 : prefill_key(s, &p, pkey, 4096);
    if (nkey) {
        prefill_arg pa = {s, &p};
        st = be->run_graph(be, pkey, nkey, prefill_first, &pa);
    } else {
        prefill(s, &p);
        next_tokens(s, B, s->last, temperature, step_seed(in->seed, 0));
    }
    if (st != PI0_OK || (st = be->sync(be)) != PI0_OK) {
        be->sync(be);
        return st;
    }
    t1 = now_ms();
    step_arg sa = {.s = s, .B = B, .temperature = temperature,
                   .a = {.nseg = B, .heads = s->Hq, .kv_heads = s->Kv, .head_dim = s->Dh, .scale = 1.0f / sqrtf((float)s->Dh),
                         .q_off = s->h_dq, .k_off = s->h_dk, .k_end = s->h_dkend,
                         .k_len = pt_at(be, s->step, 3 * (size_t)B)}};
    int most = 0;
    for (int b = 0; b < B; b++) most = s->h_plen[b] > most ? s->h_plen[b] : most;
    for (int b = 0; b <= B; b++) { s->h_dq[b] = b; s->h_dk[b] = b * RS; }
    for (int k = 0;; k++) {
        if ((st = be->download(be, (float *)(void *)s->h_tok, s->tok, (size_t)B)) != PI0_OK) break;
        if (top2 && (st = be->download(be, s->h_top2, s->top2, 2 * (size_t)B)) != PI0_OK) break;
        int all_end = 1;
        for (int b = 0; b < B; b++) {
            tokens[(size_t)b * n_steps + k] = s->h_tok[b];
            if (top2) memcpy(top2 + 2 * ((size_t)b * n_steps + k), s->h_top2 + 2 * b, 2 * sizeof *top2);
            all_end &= s->h_tok[b] == PI0_FAST_END_TOKEN;
        }
        *n_run = k + 1;
        if (all_end || k + 1 == n_steps) break;
        /* decode step k (7.3): the token at position prefill_len + k + 1 into openpi's slot P + k, which is row
         * prefill_len + k of this cache (its window at the front); it sees rows [0, prefill_len + k] */
        int32_t *tk = s->h_step, *ps = tk + B, *sl = ps + B, *kl = sl + B;
        for (int b = 0; b < B; b++) {
            tk[b] = s->h_tok[b];
            ps[b] = s->h_plen[b] + k + 1;
            sl[b] = b * RS + s->h_plen[b] + k;
            kl[b] = s->h_plen[b] + k + 1;
        }
        /* the bound: the longest sample's count rounded up to 128 keys (capped at the cache), so that a graph
         * serves 128 steps */
        int bound = (most + k + 1 + 127) / 128 * 128;
        bound = bound < RS ? bound : RS;
        for (int b = 0; b < B; b++) s->h_dkend[b] = b * RS + bound;
        if ((st = be->upload(be, s->step, s->h_step, 4 * (size_t)B)) != PI0_OK) break;
        sa.seed = step_seed(in->seed, k + 1);
        if (temperature > 0.0f || !be->run_graph) {   /* the seed changes per step: no graph */
            decode_step(&sa);
            continue;
        }
        const int32_t key[4] = {0x46415354, B, bound, s->depth};   /* "FAST" */
        if ((st = be->run_graph(be, key, 4, decode_step, &sa)) != PI0_OK) break;
    }
    if (st == PI0_OK) st = be->sync(be);
    t2 = now_ms();
    if (tm) *tm = (model_timing){0, t1 - t0, t2 - t1, t2 - t0};
    return st;
}
