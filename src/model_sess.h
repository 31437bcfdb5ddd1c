/* model_sess.h — the model session's state, shared by model.c (the forward pass) and model_rtc.c (real-time
 * chunking's inputs and the exact form's transpose pass) and by nothing else: the API layer sees model_sess only
 * through model.h. Also the expert helpers both files build their layers from. */
#ifndef PI0_MODEL_SESS_H
#define PI0_MODEL_SESS_H

#include "backend.h"
#include "model.h"

#define EPS 1e-6f
#define MAX_BUFS 128

/* One inference after upload_inputs; run directly (staged, with dumps or stage timing) or as the
 * body of a CUDA graph. Kept in the session from model_start to model_finish. */
struct run_args {
    struct model_sess *s;
    int B, nimg, Mp;
    pi0_dump_fn dump;
    void *user;
    double t[3];   /* clock after vision, after prefill, after denoise (staged runs) */
    double t0;     /* clock at model_start */
    int replay;    /* 1 = run as a CUDA graph (the work is queued when model_start returns) */
};

struct model_sess {
    pi0_backend *be;
    const pi0_config *c;
    pi0_weights *w;
    int max_b, steps;
    int N, T, R, L, P, S, H, A;      /* cameras, tokens/image, image size, max tokens, P, S, horizon, A */
    int Dv, Fv, Hv, D, F, De, Fe, Hq, Kv, Dh;
    float dt;
    float *tvals;                    /* [steps] t at the start of each step (fp32 accumulation) */
    pt bufs[MAX_BUFS];
    int n_bufs, alloc_failed;        /* alloc_failed: some buf() returned NULL (message already set) */
    pi0_vision_bufs vis;             /* vision (voff: h_voff) */
    pt img_in;                       /* this inference's images: vis.img, or the caller's buffer read in place */
    /* prefix */
    pt ids, id_rows, img_rows, pos, h, y, q, att, g, u;
    pt *kc, *vc;                     /* [depth] prefix KV cache, rows of Kv*Dh */
    /* suffix */
    pt s, sy, sq, sk, sv, satt, sg, su, stmp, spos, act_rows, st_rows, out_rows;
    pt x, x0, vel, state, st_tok, a_emb, a_hid, a_out, vin;   /* x0: the start noise, x: x_t */
    pt rtc_y, rtc_w, rtc_g;          /* real-time chunking: leftover [B*H, A], prefix weights [B*H], weight per step */
    int rtc;                         /* this inference's pi0_rtc_mode (set by upload_inputs) */
    /* exact RTC (docs/model.md 3.11), allocated at the first exact inference: each expert layer's saved values
     * (residual in, residual after attention, q after RoPE, suffix k / v, gate and up before gelu) and the
     * cotangents of the backward pass */
    int exact_ready;
    pt xh, xh2, xq, xk, xv, xg, xu;  /* [depth] slabs of (Ms, width) rows */
    pt az;                           /* π0: the action MLP's pre-swish rows (Mh, De) F32 */
    pt d_s, d_sy, d_tmp, d_a;        /* cotangents (ACT), (Ms, De) and (Ms, Fe) */
    pt d_gu, d_qkv;                  /* cotangents of gate | up and q | k | v side by side, rows of ld_gu, ld_qkv */
    int ld_gu, ld_qkv;
    pt d_vin, d_act, d_hid, d_x, err, zero_row, rtc_jac; /* F32 */
    float *h_rtc_jac;
    float *h_rtc_g;                  /* [steps] host copy of rtc_g */
    pt time_terms;                   /* π0: [steps, De] = W_in[:, De:] . posemb(t) + b_in */
    pt mods;                         /* π0.5: [(2*depth+1) * steps, 3De] adaRMS modulations */
    int stage_timing;                /* 1: no graph, sync + clock between stages */
    struct run_args run;             /* the inference between model_start and model_finish */
    /* host index scratch (sized at create); h_voff/h_poff/h_soff are the attention segments */
    int32_t *h_sel, *h_voff, *h_ids, *h_idrows, *h_imgrows, *h_pos, *h_poff, *h_spos, *h_soff;
    int32_t *h_full;                 /* compacted prefix row -> uncompacted (b*P + j), for dumps */
    int32_t h_tail_off[2];           /* B = 1: keys [0, Np + S) of the cache, prefix then suffix */
    pt *h_mods;                      /* π0.5: this step's 2*depth layer modulations (expert_layers) */
    float *h_noise;
};

/* A backend buffer of n elements of kind, released with the session; p NULL on failure (the first failure's message
 * is kept, later calls return NULL at once). */
pt model_buf(model_sess *s, size_t n, int kind);

/* Expert norm l (2l attention, 2l+1 MLP): plain RMSNorm (π0) or adaRMS with this step's modulation (π0.5),
 * as the input of the following product (qkv / mlp_up), which a backend may fuse into it; the normalised
 * rows, where written, go to sy. */
static inline pi0_prenorm ex_prenorm(const pi0_expert_step *e, const pi0_wt *plain, int norm) {
    pi0_prenorm p = {.eps = e->eps, .out = e->sy};
    if (e->mods) {
        p.mod = e->mods[norm];
        p.rows_per_mod = e->M;
    } else {
        p.w = plain;
    }
    return p;
}

/* π0.5's residual gate of norm `norm` (the third part of its modulation row, stride 3D); none for π0 */
static inline pt ex_gate(pi0_backend *be, const pi0_expert_step *e, int norm) {
    return e->mods ? pt_at(be, e->mods[norm], 2 * (size_t)e->D) : (pt){0};
}

/* model_rtc.c: the real-time chunking inputs of one inference (s->rtc set); the expert layers of one step keeping
 * each layer's values (exact form); the exact guidance of step k, which replaces the velocity's rows in place. */
pi0_status model_rtc_upload(model_sess *s, const pi0_inputs *in);
void model_rtc_expert_layers(model_sess *s, const pi0_expert_step *e);
void model_rtc_guidance(model_sess *s, const pi0_expert_step *e, const pi0_prenorm *fin, int B, int k);

#endif
