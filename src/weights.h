/* weights.h — binds checkpoint tensors to struct pi0_weights through ONE table (weights.c) that
 * drives validation, sizing, random checkpoint generation and parameter counting. Views point into
 * the mmapped model.safetensors (no copies). A backend that keeps its own copies (the GPU's memory, a converted
 * format) keys them by each tensor's id, in storage it owns: a pi0_wt holds no backend state.
 * Legend: Dv vision width, Fv vision mlp, D/F Gemma width/mlp, Hq query heads, K kv heads, Dh head dim,
 * A action dim, V vocab. Linear weights are [out, in] (PyTorch layout). */
#ifndef PI0_WEIGHTS_H
#define PI0_WEIGHTS_H

#include "config.h"
#include "safetensors.h"

typedef struct {
    const void *data;    /* host view into the file mapping */
    pi0_dtype dtype;     /* BF16, F16 or F32 */
    int64_t rows, cols;  /* [out, in] for matrices; 1-D: rows = n, cols = 1; conv: cols = C*P*P */
    int id;              /* 1 .. n_ids, unique within the model (weights_foreach's order); 0: not bound */
} pi0_wt;

typedef struct {   /* SigLIP encoder block (docs/model.md 3.4) */
    pi0_wt ln1_w, ln1_b;        /* (Dv) */
    pi0_wt q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b;   /* (Dv, Dv), (Dv) */
    pi0_wt ln2_w, ln2_b;        /* (Dv) */
    pi0_wt fc1_w, fc1_b;        /* (Fv, Dv), (Fv) */
    pi0_wt fc2_w, fc2_b;        /* (Dv, Fv), (Dv) */
} pi0_vis_layer;

typedef struct {   /* one Gemma layer of one expert (docs/model.md 3.7/3.8) */
    pi0_wt attn_norm;                 /* (D) RMSNorm scale, used as 1 + w; absent for adaRMS */
    pi0_wt attn_norm_dw, attn_norm_db;/* π0.5 expert: adaRMS dense (3D, D), (3D) */
    pi0_wt q, k, v, o;                /* (Hq*Dh, D), (K*Dh, D), (K*Dh, D), (D, Hq*Dh) */
    pi0_wt mlp_norm;                  /* (D) */
    pi0_wt mlp_norm_dw, mlp_norm_db;  /* π0.5 expert: (3D, D), (3D) */
    pi0_wt gate, up, down;            /* (F, D), (F, D), (D, F) */
} pi0_gemma_layer;

typedef struct {
    pi0_wt patch_w, patch_b;          /* (Dv, 3*P*P) OIHW flattened, (Dv) */
    pi0_wt pos;                       /* (T, Dv) */
    pi0_vis_layer *vis;               /* [vis.depth] */
    pi0_wt vis_norm_w, vis_norm_b;    /* (Dv) */
    pi0_wt proj_w, proj_b;            /* (D, Dv), (D) multi-modal projector */
    pi0_wt embed;                     /* (V, D) token embedding (tied with lm_head) */
    pi0_gemma_layer *lm, *ex;         /* [depth] expert 0 and expert 1 */
    pi0_wt lm_norm;                   /* (D) final norm of expert 0 (unused at inference) */
    pi0_wt ex_norm, ex_norm_dw, ex_norm_db;   /* π0: (De); π0.5: (3De, De), (3De) */
    pi0_wt action_in_w, action_in_b;  /* (De, A), (De) */
    pi0_wt action_out_w, action_out_b;/* (A, De), (A) */
    pi0_wt state_w, state_b;          /* π0: (De, A), (De) */
    pi0_wt atm_in_w, atm_in_b;        /* π0: (De, 2De), (De) — columns [0,De) action, [De,2De) time */
    pi0_wt atm_out_w, atm_out_b;      /* π0: (De, De), (De) */
    pi0_wt time_in_w, time_in_b;      /* π0.5: (De, De), (De) */
    pi0_wt time_out_w, time_out_b;    /* π0.5: (De, De), (De) */
    /* π0, derived at bind (not in the file): the action half of action_time_mlp_in composed with action_in,
     * W_in[:, :De] . W_ai (De, A) and W_in[:, :De] . b_ai + b_in (De), F32 in `derived` */
    pi0_wt atm_act_w, atm_act_b;
    float *derived;
    int64_t n_params;
    int n_ids;                        /* the largest id of a bound tensor */
} pi0_weights;

/* The π0.5 marker tensor (docs/model.md 2.1). */
#define PI0_PI05_MARKER "paligemma_with_expert.gemma_expert.model.layers.0.input_layernorm.dense.weight"
/* A tensor every π0 and π0.5 checkpoint has and π0-FAST's lacks (it has no action expert). */
#define PI0_EXPERT_MARKER "action_in_proj.weight"

/* Validates every tensor of f against cfg (presence, shape, float dtype, finite values) and fills w.
 * Unknown tensors: one warning line unless quiet. */
pi0_status weights_bind(pi0_weights *w, const pi0_config *cfg, const st_file *f, int quiet);
void weights_free(pi0_weights *w);

/* Visits every bound weight, the derived ones included, in id order (for uploads by a backend). */
typedef pi0_status (*weights_visit_fn)(void *user, const char *name, pi0_wt *t);
pi0_status weights_foreach(pi0_weights *w, const pi0_config *cfg, weights_visit_fn fn, void *user);

/* Writes a random-weight model.safetensors for cfg (every tensor of the table, orphan lm_head included,
 * embedding under the tied lm_head name as safetensors.torch.save_model does). */
pi0_status weights_generate(const pi0_config *cfg, const char *path, uint64_t seed, pi0_dtype dtype);
/* The tensors of f that the model uses (after weights_bind succeeded), under their table names (the tied embedding as
 * ...embed_tokens.weight whatever name it is stored under). Fills up to cap; returns how many. */
int weights_used(const pi0_config *cfg, const st_file *f, const st_tensor **t, char (*names)[256], int cap);
/* Bytes of tensor data weights_generate writes for cfg (the file is this plus a header of a few hundred KB). */
uint64_t weights_file_bytes(const pi0_config *cfg, pi0_dtype dtype);

#endif
