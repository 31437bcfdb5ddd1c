/* weights.c — THE tensor table (checkpoint key, shape, which model type, init rule, struct field) and
 * everything driven by it: binding and validation at load, random generation, counting.
 * Key names follow openpi's PyTorch checkpoint (docs/model.md 2.1/2.2). */
#include "weights.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define VM "paligemma_with_expert.paligemma.model.vision_tower.vision_model."
#define LM "paligemma_with_expert.paligemma.model.language_model."
#define EX "paligemma_with_expert.gemma_expert."
#define EMBED_NAME LM "embed_tokens.weight"
#define TIED_NAME "paligemma_with_expert.paligemma.lm_head.weight"

enum scope { SC_GLOBAL, SC_VIS, SC_LM, SC_EX };
/* ND_ALL: PaliGemma, which all three model families have; ND_BOTH: π0 and π0.5 (the action expert and its
 * projections, absent from π0-FAST); ND_ORPHAN: written by gen for π0 / π0.5, ignored at load */
enum need { ND_ALL, ND_BOTH, ND_PI0, ND_PI05, ND_ORPHAN };
enum dim {
    D_1, D_3, D_PATCH, D_VT, D_VW, D_VF, D_LW, D_LF, D_LQ, D_LKV, D_EW, D_EF, D_EQ, D_EKV, D_E2, D_E3, D_A, D_VOCAB
};
/* Random init for gen-checkpoint: every weight matters, activations stay O(1). */
enum init { IN_LINEAR, IN_BIAS, IN_LN, IN_RMS, IN_EMBED, IN_POS };

typedef struct {
    const char *fmt;      /* key, %d = layer index for layer scopes */
    enum scope scope;
    enum need need;
    size_t off;           /* offset of the pi0_wt field in pi0_weights / pi0_vis_layer / pi0_gemma_layer */
    int ndim;
    enum dim d[4];
    enum init init;
} wdesc;

#define G(f) offsetof(pi0_weights, f)
#define V(f) offsetof(pi0_vis_layer, f)
#define L(f) offsetof(pi0_gemma_layer, f)

static const wdesc table[] = {
    {VM "embeddings.patch_embedding.weight", SC_GLOBAL, ND_ALL, G(patch_w), 4, {D_VW, D_3, D_PATCH, D_PATCH}, IN_LINEAR},
    {VM "embeddings.patch_embedding.bias", SC_GLOBAL, ND_ALL, G(patch_b), 1, {D_VW}, IN_BIAS},
    {VM "embeddings.position_embedding.weight", SC_GLOBAL, ND_ALL, G(pos), 2, {D_VT, D_VW}, IN_POS},
    {VM "encoder.layers.%d.layer_norm1.weight", SC_VIS, ND_ALL, V(ln1_w), 1, {D_VW}, IN_LN},
    {VM "encoder.layers.%d.layer_norm1.bias", SC_VIS, ND_ALL, V(ln1_b), 1, {D_VW}, IN_BIAS},
    {VM "encoder.layers.%d.self_attn.q_proj.weight", SC_VIS, ND_ALL, V(q_w), 2, {D_VW, D_VW}, IN_LINEAR},
    {VM "encoder.layers.%d.self_attn.q_proj.bias", SC_VIS, ND_ALL, V(q_b), 1, {D_VW}, IN_BIAS},
    {VM "encoder.layers.%d.self_attn.k_proj.weight", SC_VIS, ND_ALL, V(k_w), 2, {D_VW, D_VW}, IN_LINEAR},
    {VM "encoder.layers.%d.self_attn.k_proj.bias", SC_VIS, ND_ALL, V(k_b), 1, {D_VW}, IN_BIAS},
    {VM "encoder.layers.%d.self_attn.v_proj.weight", SC_VIS, ND_ALL, V(v_w), 2, {D_VW, D_VW}, IN_LINEAR},
    {VM "encoder.layers.%d.self_attn.v_proj.bias", SC_VIS, ND_ALL, V(v_b), 1, {D_VW}, IN_BIAS},
    {VM "encoder.layers.%d.self_attn.out_proj.weight", SC_VIS, ND_ALL, V(o_w), 2, {D_VW, D_VW}, IN_LINEAR},
    {VM "encoder.layers.%d.self_attn.out_proj.bias", SC_VIS, ND_ALL, V(o_b), 1, {D_VW}, IN_BIAS},
    {VM "encoder.layers.%d.layer_norm2.weight", SC_VIS, ND_ALL, V(ln2_w), 1, {D_VW}, IN_LN},
    {VM "encoder.layers.%d.layer_norm2.bias", SC_VIS, ND_ALL, V(ln2_b), 1, {D_VW}, IN_BIAS},
    {VM "encoder.layers.%d.mlp.fc1.weight", SC_VIS, ND_ALL, V(fc1_w), 2, {D_VF, D_VW}, IN_LINEAR},
    {VM "encoder.layers.%d.mlp.fc1.bias", SC_VIS, ND_ALL, V(fc1_b), 1, {D_VF}, IN_BIAS},
    {VM "encoder.layers.%d.mlp.fc2.weight", SC_VIS, ND_ALL, V(fc2_w), 2, {D_VW, D_VF}, IN_LINEAR},
    {VM "encoder.layers.%d.mlp.fc2.bias", SC_VIS, ND_ALL, V(fc2_b), 1, {D_VW}, IN_BIAS},
    {VM "post_layernorm.weight", SC_GLOBAL, ND_ALL, G(vis_norm_w), 1, {D_VW}, IN_LN},
    {VM "post_layernorm.bias", SC_GLOBAL, ND_ALL, G(vis_norm_b), 1, {D_VW}, IN_BIAS},
    {"paligemma_with_expert.paligemma.model.multi_modal_projector.linear.weight", SC_GLOBAL, ND_ALL, G(proj_w), 2, {D_LW, D_VW}, IN_LINEAR},
    {"paligemma_with_expert.paligemma.model.multi_modal_projector.linear.bias", SC_GLOBAL, ND_ALL, G(proj_b), 1, {D_LW}, IN_BIAS},
    {EMBED_NAME, SC_GLOBAL, ND_ALL, G(embed), 2, {D_VOCAB, D_LW}, IN_EMBED},
    {LM "layers.%d.input_layernorm.weight", SC_LM, ND_ALL, L(attn_norm), 1, {D_LW}, IN_RMS},
    {LM "layers.%d.self_attn.q_proj.weight", SC_LM, ND_ALL, L(q), 2, {D_LQ, D_LW}, IN_LINEAR},
    {LM "layers.%d.self_attn.k_proj.weight", SC_LM, ND_ALL, L(k), 2, {D_LKV, D_LW}, IN_LINEAR},
    {LM "layers.%d.self_attn.v_proj.weight", SC_LM, ND_ALL, L(v), 2, {D_LKV, D_LW}, IN_LINEAR},
    {LM "layers.%d.self_attn.o_proj.weight", SC_LM, ND_ALL, L(o), 2, {D_LW, D_LQ}, IN_LINEAR},
    {LM "layers.%d.post_attention_layernorm.weight", SC_LM, ND_ALL, L(mlp_norm), 1, {D_LW}, IN_RMS},
    {LM "layers.%d.mlp.gate_proj.weight", SC_LM, ND_ALL, L(gate), 2, {D_LF, D_LW}, IN_LINEAR},
    {LM "layers.%d.mlp.up_proj.weight", SC_LM, ND_ALL, L(up), 2, {D_LF, D_LW}, IN_LINEAR},
    {LM "layers.%d.mlp.down_proj.weight", SC_LM, ND_ALL, L(down), 2, {D_LW, D_LF}, IN_LINEAR},
    {LM "norm.weight", SC_GLOBAL, ND_ALL, G(lm_norm), 1, {D_LW}, IN_RMS},
    {EX "model.layers.%d.input_layernorm.weight", SC_EX, ND_PI0, L(attn_norm), 1, {D_EW}, IN_RMS},
    {EX "model.layers.%d.input_layernorm.dense.weight", SC_EX, ND_PI05, L(attn_norm_dw), 2, {D_E3, D_EW}, IN_LINEAR},
    {EX "model.layers.%d.input_layernorm.dense.bias", SC_EX, ND_PI05, L(attn_norm_db), 1, {D_E3}, IN_BIAS},
    {EX "model.layers.%d.self_attn.q_proj.weight", SC_EX, ND_BOTH, L(q), 2, {D_EQ, D_EW}, IN_LINEAR},
    {EX "model.layers.%d.self_attn.k_proj.weight", SC_EX, ND_BOTH, L(k), 2, {D_EKV, D_EW}, IN_LINEAR},
    {EX "model.layers.%d.self_attn.v_proj.weight", SC_EX, ND_BOTH, L(v), 2, {D_EKV, D_EW}, IN_LINEAR},
    {EX "model.layers.%d.self_attn.o_proj.weight", SC_EX, ND_BOTH, L(o), 2, {D_EW, D_EQ}, IN_LINEAR},
    {EX "model.layers.%d.post_attention_layernorm.weight", SC_EX, ND_PI0, L(mlp_norm), 1, {D_EW}, IN_RMS},
    {EX "model.layers.%d.post_attention_layernorm.dense.weight", SC_EX, ND_PI05, L(mlp_norm_dw), 2, {D_E3, D_EW}, IN_LINEAR},
    {EX "model.layers.%d.post_attention_layernorm.dense.bias", SC_EX, ND_PI05, L(mlp_norm_db), 1, {D_E3}, IN_BIAS},
    {EX "model.layers.%d.mlp.gate_proj.weight", SC_EX, ND_BOTH, L(gate), 2, {D_EF, D_EW}, IN_LINEAR},
    {EX "model.layers.%d.mlp.up_proj.weight", SC_EX, ND_BOTH, L(up), 2, {D_EF, D_EW}, IN_LINEAR},
    {EX "model.layers.%d.mlp.down_proj.weight", SC_EX, ND_BOTH, L(down), 2, {D_EW, D_EF}, IN_LINEAR},
    {EX "model.norm.weight", SC_GLOBAL, ND_PI0, G(ex_norm), 1, {D_EW}, IN_RMS},
    {EX "model.norm.dense.weight", SC_GLOBAL, ND_PI05, G(ex_norm_dw), 2, {D_E3, D_EW}, IN_LINEAR},
    {EX "model.norm.dense.bias", SC_GLOBAL, ND_PI05, G(ex_norm_db), 1, {D_E3}, IN_BIAS},
    {EX "lm_head.weight", SC_GLOBAL, ND_ORPHAN, 0, 2, {D_VOCAB, D_EW}, IN_EMBED},
    {"action_in_proj.weight", SC_GLOBAL, ND_BOTH, G(action_in_w), 2, {D_EW, D_A}, IN_LINEAR},
    {"action_in_proj.bias", SC_GLOBAL, ND_BOTH, G(action_in_b), 1, {D_EW}, IN_BIAS},
    {"action_out_proj.weight", SC_GLOBAL, ND_BOTH, G(action_out_w), 2, {D_A, D_EW}, IN_LINEAR},
    {"action_out_proj.bias", SC_GLOBAL, ND_BOTH, G(action_out_b), 1, {D_A}, IN_BIAS},
    {"state_proj.weight", SC_GLOBAL, ND_PI0, G(state_w), 2, {D_EW, D_A}, IN_LINEAR},
    {"state_proj.bias", SC_GLOBAL, ND_PI0, G(state_b), 1, {D_EW}, IN_BIAS},
    {"action_time_mlp_in.weight", SC_GLOBAL, ND_PI0, G(atm_in_w), 2, {D_EW, D_E2}, IN_LINEAR},
    {"action_time_mlp_in.bias", SC_GLOBAL, ND_PI0, G(atm_in_b), 1, {D_EW}, IN_BIAS},
    {"action_time_mlp_out.weight", SC_GLOBAL, ND_PI0, G(atm_out_w), 2, {D_EW, D_EW}, IN_LINEAR},
    {"action_time_mlp_out.bias", SC_GLOBAL, ND_PI0, G(atm_out_b), 1, {D_EW}, IN_BIAS},
    {"time_mlp_in.weight", SC_GLOBAL, ND_PI05, G(time_in_w), 2, {D_EW, D_EW}, IN_LINEAR},
    {"time_mlp_in.bias", SC_GLOBAL, ND_PI05, G(time_in_b), 1, {D_EW}, IN_BIAS},
    {"time_mlp_out.weight", SC_GLOBAL, ND_PI05, G(time_out_w), 2, {D_EW, D_EW}, IN_LINEAR},
    {"time_mlp_out.bias", SC_GLOBAL, ND_PI05, G(time_out_b), 1, {D_EW}, IN_BIAS},
};
#define N_TABLE ((int)(sizeof table / sizeof *table))

static int64_t dim_value(const pi0_config *c, enum dim d) {
    switch (d) {
    case D_1: return 1;
    case D_3: return 3;
    case D_PATCH: return c->vis.patch_size;
    case D_VT: return cfg_tokens_per_image(c);
    case D_VW: return c->vis.width;
    case D_VF: return c->vis.mlp_dim;
    case D_LW: return c->lm.width;
    case D_LF: return c->lm.mlp_dim;
    case D_LQ: return (int64_t)c->lm.num_heads * c->lm.head_dim;
    case D_LKV: return (int64_t)c->lm.num_kv_heads * c->lm.head_dim;
    case D_EW: return c->ex.width;
    case D_EF: return c->ex.mlp_dim;
    case D_EQ: return (int64_t)c->ex.num_heads * c->ex.head_dim;
    case D_EKV: return (int64_t)c->ex.num_kv_heads * c->ex.head_dim;
    case D_E2: return 2 * (int64_t)c->ex.width;
    case D_E3: return 3 * (int64_t)c->ex.width;
    case D_A: return c->action_dim;
    case D_VOCAB: return c->lm.vocab_size;
    }
    return 0;
}

static int needed(const wdesc *d, const pi0_config *c) {
    if (d->need == ND_ALL) return 1;
    if (c->fast > 0) return 0;
    return d->need == ND_BOTH || (d->need == ND_PI0 && !c->pi05) || (d->need == ND_PI05 && c->pi05);
}

/* written by weights_generate: the used tensors, and π0 / π0.5's orphan lm_head as openpi's conversion leaves it */
static int written(const wdesc *d, const pi0_config *c) {
    return needed(d, c) || (d->need == ND_ORPHAN && c->fast <= 0);
}

static int n_layers(const wdesc *d, const pi0_config *c) {
    return d->scope == SC_GLOBAL ? 1 : d->scope == SC_VIS ? c->vis.depth : c->lm.depth;
}

static pi0_wt *field(pi0_weights *w, const wdesc *d, int layer) {
    char *base = d->scope == SC_GLOBAL ? (char *)w
               : d->scope == SC_VIS    ? (char *)&w->vis[layer]
               : d->scope == SC_LM     ? (char *)&w->lm[layer]
                                       : (char *)&w->ex[layer];
    return (pi0_wt *)(base + d->off);
}

static void key_name(char *buf, size_t n, const wdesc *d, int layer) {
    if (d->scope == SC_GLOBAL) snprintf(buf, n, "%s", d->fmt);
    else snprintf(buf, n, d->fmt, layer);
}

static void expected_shape(const wdesc *d, const pi0_config *c, int64_t *shape) {
    for (int i = 0; i < d->ndim; i++) shape[i] = dim_value(c, d->d[i]);
}

static int alloc_layers(pi0_weights *w, const pi0_config *c) {
    w->vis = calloc((size_t)c->vis.depth, sizeof *w->vis);
    w->lm = calloc((size_t)c->lm.depth, sizeof *w->lm);
    w->ex = calloc((size_t)c->ex.depth, sizeof *w->ex);
    return w->vis && w->lm && w->ex;
}

void weights_free(pi0_weights *w) {
    if (!w) return;
    free(w->vis); free(w->lm); free(w->ex); free(w->derived);
    memset(w, 0, sizeof *w);
}

/* Scans a float tensor for NaN/Inf (all exponent bits set); returns the first bad index or -1. */
static int64_t first_nonfinite(const st_tensor *t) {
    int64_t n = st_numel(t), bad = n;
    const unsigned char *p = t->data;
    #pragma omp parallel for reduction(min:bad) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        int inf_nan;
        if (t->dtype == PI0_DT_F32) {
            uint32_t u; memcpy(&u, p + 4 * i, 4);
            inf_nan = (u & 0x7f800000u) == 0x7f800000u;
        } else {
            uint16_t h; memcpy(&h, p + 2 * i, 2);
            inf_nan = t->dtype == PI0_DT_BF16 ? (h & 0x7f80u) == 0x7f80u : (h & 0x7c00u) == 0x7c00u;
        }
        if (inf_nan && i < bad) bad = i;
    }
    return bad == n ? -1 : bad;
}

/* π0's action path into action_time_mlp_in as one affine map (weights.h atm_act_*). The MLP's input is
 * [action_in(x), temb] (docs/model.md 3.10), so its action half is W_in[:, :De] (W_ai x + b_ai): one product of K = A on
 * x instead of action_in and a K = De product each denoise step. Sums in double, stored in fp32 (the reference's
 * two fp32 products differ from it by ~1e-7 relative). */
static pi0_status compose_action_mlp(pi0_weights *w) {
    const int64_t De = w->atm_in_w.rows, A = w->action_in_w.cols;
    float *out = malloc((size_t)(De * A + De) * sizeof(float)), *wa = malloc((size_t)(De * A + 2 * De) * sizeof(float));
    if (!out || !wa) { free(out); free(wa); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    float *ba = wa + De * A, *bi = ba + De;
    pi0_to_f32(wa, w->action_in_w.data, w->action_in_w.dtype, (size_t)(De * A));
    pi0_to_f32(ba, w->action_in_b.data, w->action_in_b.dtype, (size_t)De);
    pi0_to_f32(bi, w->atm_in_b.data, w->atm_in_b.dtype, (size_t)De);
    int fail = 0;
    #pragma omp parallel reduction(|:fail)
    {
        float *wi = malloc((size_t)De * sizeof(float));
        double *acc = malloc((size_t)(A + 1) * sizeof(double));
        fail = !wi || !acc;
        #pragma omp for schedule(static)
        for (int64_t i = 0; i < De; i++) {
            if (fail) continue;
            size_t esz = pi0_dtype_size(w->atm_in_w.dtype);
            pi0_to_f32(wi, (const char *)w->atm_in_w.data + (size_t)(i * w->atm_in_w.cols) * esz, w->atm_in_w.dtype,
                       (size_t)De);   /* row i, action columns [0, De) */
            for (int64_t j = 0; j <= A; j++) acc[j] = 0;
            acc[A] = bi[i];
            for (int64_t k = 0; k < De; k++) {
                const double x = wi[k];
                for (int64_t j = 0; j < A; j++) acc[j] += x * wa[k * A + j];
                acc[A] += x * ba[k];
            }
            for (int64_t j = 0; j < A; j++) out[i * A + j] = (float)acc[j];
            out[De * A + i] = (float)acc[A];
        }
        free(wi);
        free(acc);
    }
    free(wa);
    if (fail) { free(out); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    w->derived = out;
    w->atm_act_w = (pi0_wt){.data = out, .dtype = PI0_DT_F32, .rows = De, .cols = A};
    w->atm_act_b = (pi0_wt){.data = out + De * A, .dtype = PI0_DT_F32, .rows = De, .cols = 1};
    return PI0_OK;
}

/* The file's tensor for table entry d under `name`; the tied embedding may be stored under the lm_head name (or the
 * name a __metadata__ alias gives). */
static const st_tensor *lookup(const st_file *f, const wdesc *d, const char *name) {
    const st_tensor *t = st_find(f, name);
    if (!t && !strcmp(d->fmt, EMBED_NAME)) {
        const char *alias = st_meta(f, EMBED_NAME);
        t = st_find(f, alias ? alias : TIED_NAME);
    }
    return t;
}

/* Gives each bound tensor its id, counting from 1. */
static pi0_status number(void *user, const char *name, pi0_wt *t) {
    (void)name;
    t->id = ++*(int *)user;
    return PI0_OK;
}

pi0_status weights_bind(pi0_weights *w, const pi0_config *c, const st_file *f, int quiet) {
    memset(w, 0, sizeof *w);
    if (!alloc_layers(w, c)) { weights_free(w); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    char *used = calloc((size_t)f->n_tensors + 1, 1);
    if (!used) { weights_free(w); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    pi0_status st = PI0_OK;
    char name[256], want[128], got[128];
    for (int i = 0; i < N_TABLE && st == PI0_OK; i++) {
        const wdesc *d = &table[i];
        for (int l = 0; l < n_layers(d, c) && st == PI0_OK; l++) {
            key_name(name, sizeof name, d, l);
            const st_tensor *t = lookup(f, d, name);
            if (t) used[t - f->tensors] = 1;
            if (!needed(d, c)) continue;
            int64_t shape[4];
            expected_shape(d, c, shape);
            st_describe(want, sizeof want, d->ndim, shape, PI0_DT_BF16);
            if (!t) {
                st = pi0_fail(PI0_ERR_SHAPE, "%s: missing tensor '%s' (expected %s, F16 or F32)%s", f->path, name, want,
                              !strcmp(d->fmt, EMBED_NAME) ? " (also looked for " TIED_NAME ")" : "");
                break;
            }
            int ok = t->ndim == d->ndim && (t->dtype == PI0_DT_BF16 || t->dtype == PI0_DT_F16 || t->dtype == PI0_DT_F32);
            for (int k = 0; ok && k < d->ndim; k++) ok = t->shape[k] == shape[k];
            if (!ok) {
                st = pi0_fail(PI0_ERR_SHAPE, "%s: tensor '%s': expected %s (or F16/F32), found %s", f->path, name, want,
                              st_describe(got, sizeof got, t->ndim, t->shape, t->dtype));
                break;
            }
            int64_t bad = f->finite_checked ? -1 : first_nonfinite(t);
            if (bad >= 0) {
                st = pi0_fail(PI0_ERR_FORMAT, "%s: tensor '%s': non-finite value at flat index %lld", f->path, name,
                              (long long)bad);
                break;
            }
            pi0_wt *x = field(w, d, l);
            x->data = t->data;
            x->dtype = t->dtype;
            x->rows = shape[0];
            x->cols = st_numel(t) / (shape[0] ? shape[0] : 1);
            w->n_params += st_numel(t);
        }
    }
    const st_tensor *lm = st_find(f, TIED_NAME);   /* LeRobot saves an lm_head beside embed_tokens: known, unused */
    if (lm) used[lm - f->tensors] = 1;
    if (st == PI0_OK && !quiet) {
        int unknown = 0;
        const char *first = NULL;
        for (int i = 0; i < f->n_tensors; i++)
            if (!used[i]) { unknown++; if (!first) first = f->tensors[i].name; }
        if (unknown)
            fprintf(stderr, "pi0: warning: %s: %d unknown tensor(s) ignored (first: '%s')\n", f->path, unknown, first);
    }
    free(used);
    if (st == PI0_OK && !c->pi05 && c->fast <= 0) st = compose_action_mlp(w);
    if (st == PI0_OK) st = weights_foreach(w, c, number, &w->n_ids);
    if (st != PI0_OK) weights_free(w);
    return st;
}

pi0_status weights_foreach(pi0_weights *w, const pi0_config *c, weights_visit_fn fn, void *user) {
    char name[256];
    for (int i = 0; i < N_TABLE; i++) {
        const wdesc *d = &table[i];
        if (!needed(d, c) || d->need == ND_ORPHAN) continue;
        for (int l = 0; l < n_layers(d, c); l++) {
            key_name(name, sizeof name, d, l);
            pi0_status st = fn(user, name, field(w, d, l));
            if (st != PI0_OK) return st;
        }
    }
    if (!w->derived) return PI0_OK;
    pi0_status st = fn(user, "(derived) action_time_mlp_in . action_in weight", &w->atm_act_w);
    return st == PI0_OK ? fn(user, "(derived) action_time_mlp_in . action_in bias", &w->atm_act_b) : st;
}

/* Value for element i of a tensor with fan-in `fan`: uniform with the std of the init rule. */
static float init_value(pi0_rng *r, enum init in, int64_t fan) {
    double u = 2.0 * pi0_rng_uniform(r) - 1.0;   /* U(-1,1): std 1/sqrt(3) */
    switch (in) {
    case IN_LINEAR: return (float)(u * sqrt(3.0 / (double)fan));
    case IN_BIAS: return (float)(0.1 * u);
    case IN_LN: return (float)(1.0 + 0.2 * u);
    case IN_RMS: return (float)(0.2 * u);        /* used as 1 + w */
    case IN_EMBED: return (float)(u * sqrt(3.0 / (double)fan));
    case IN_POS: return (float)(0.5 * u);
    }
    return 0;
}

int weights_used(const pi0_config *c, const st_file *f, const st_tensor **t, char (*names)[256], int cap) {
    int n = 0;
    char name[256];
    for (int i = 0; i < N_TABLE; i++) {
        const wdesc *d = &table[i];
        if (!needed(d, c)) continue;
        for (int l = 0; l < n_layers(d, c); l++) {
            key_name(name, sizeof name, d, l);
            const st_tensor *x = lookup(f, d, name);
            if (!x || n == cap) continue;
            t[n] = x;
            snprintf(names[n++], 256, "%s", name);
        }
    }
    return n;
}

uint64_t weights_file_bytes(const pi0_config *c, pi0_dtype dtype) {
    uint64_t n = 0;
    int64_t shape[4];
    for (int i = 0; i < N_TABLE; i++) {
        const wdesc *d = &table[i];
        if (!written(d, c)) continue;
        expected_shape(d, c, shape);
        int64_t e = 1;
        for (int k = 0; k < d->ndim; k++) e *= shape[k];
        n += (uint64_t)e * (uint64_t)n_layers(d, c);
    }
    return n * pi0_dtype_size(dtype);
}

pi0_status weights_generate(const pi0_config *c, const char *path, uint64_t seed, pi0_dtype dtype) {
    int n = 0;
    for (int i = 0; i < N_TABLE; i++) if (written(&table[i], c)) n += n_layers(&table[i], c);
    st_entry *e = calloc((size_t)n, sizeof *e);
    char **names = calloc((size_t)n, sizeof *names);
    const wdesc **desc = calloc((size_t)n, sizeof *desc);
    pi0_status st = PI0_OK;
    if (!e || !names || !desc) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    int k = 0;
    char name[256];
    for (int i = 0; i < N_TABLE; i++) {
        const wdesc *d = &table[i];
        if (!written(d, c)) continue;
        for (int l = 0; l < n_layers(d, c); l++, k++) {
            key_name(name, sizeof name, d, l);
            /* safetensors.torch.save_model keeps one name per shared tensor: the tied embedding lands
             * under the lm_head name and the dropped name is recorded in __metadata__ (docs/model.md 2.2). */
            names[k] = strdup(strcmp(name, EMBED_NAME) ? name : TIED_NAME);
            if (!names[k]) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
            e[k].name = names[k];
            e[k].dtype = dtype;
            e[k].ndim = d->ndim;
            expected_shape(d, c, e[k].shape);
            desc[k] = d;
        }
    }
    const char *meta[] = {"format", "pt", EMBED_NAME, TIED_NAME};
    st_writer wr;
    if ((st = st_writer_open(&wr, path, e, n, meta, 2)) != PI0_OK) goto done;
    /* Values are generated in parallel, 64K-element chunks each with its own RNG stream
     * (seed, tensor, chunk), so the file does not depend on the thread count. */
    enum { CHUNK = 1 << 16, SUPER = 256 };   /* SUPER chunks (16M elements) per write */
    float *buf = malloc((size_t)CHUNK * SUPER * sizeof(float));
    uint16_t *hbuf = malloc((size_t)CHUNK * SUPER * sizeof(uint16_t));
    if (!buf || !hbuf) { free(buf); free(hbuf); st_writer_abort(&wr); st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    for (int t = 0; t < n && st == PI0_OK; t++) {
        int64_t numel = 1;
        for (int d = 0; d < e[t].ndim; d++) numel *= e[t].shape[d];
        int64_t fan = numel / e[t].shape[0], nchunks = (numel + CHUNK - 1) / CHUNK;
        for (int64_t c0 = 0; c0 < nchunks && st == PI0_OK; c0 += SUPER) {
            int64_t c1 = c0 + SUPER < nchunks ? c0 + SUPER : nchunks;
            #pragma omp parallel for schedule(dynamic, 1)
            for (int64_t ch = c0; ch < c1; ch++) {
                pi0_rng r;
                pi0_rng_seed(&r, (seed * 1000003u + (uint64_t)t) * 0x9e3779b97f4a7c15ull + (uint64_t)ch);
                int64_t i0 = ch * CHUNK, m = numel - i0 < CHUNK ? numel - i0 : CHUNK;
                float *dst = buf + (ch - c0) * CHUNK;
                for (int64_t j = 0; j < m; j++) dst[j] = init_value(&r, desc[t]->init, fan);
                if (dtype == PI0_DT_BF16)
                    for (int64_t j = 0; j < m; j++) hbuf[(ch - c0) * CHUNK + j] = pi0_f32_to_bf16(dst[j]);
            }
            int64_t cnt = (c1 * CHUNK < numel ? c1 * CHUNK : numel) - c0 * CHUNK;
            st = dtype == PI0_DT_BF16 ? st_writer_write(&wr, hbuf, (size_t)cnt * 2) : st_writer_write(&wr, buf, (size_t)cnt * 4);
        }
    }
    free(buf);
    free(hbuf);
    if (st == PI0_OK) st = st_writer_close(&wr);
    else st_writer_abort(&wr);
done:
    if (names) for (int i = 0; i < n; i++) free(names[i]);
    free(names); free(e); free(desc);
    return st;
}
