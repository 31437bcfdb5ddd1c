/* quant.c — which tensors an 8-bit precision quantises, and the weights' quantisation (quant.h). */
#include <math.h>

#include "quant.h"
#include "util.h"

static int in_layer(const pi0_wt *t, const void *layers, size_t size, int depth) {
    const char *p = (const char *)t, *a = (const char *)layers;
    return layers && p >= a && p < a + size * (size_t)depth;
}

unsigned quant_stage(const pi0_weights *w, const pi0_config *c, const pi0_wt *t) {
    if (in_layer(t, w->vis, sizeof *w->vis, c->vis.depth)) {
        const pi0_vis_layer *V = &w->vis[((const char *)t - (const char *)w->vis) / sizeof *w->vis];
        return t == &V->q_w || t == &V->k_w || t == &V->v_w || t == &V->o_w || t == &V->fc1_w || t == &V->fc2_w
                   ? PI0_STAGE_VISION : 0;
    }
    for (int e = 0; e < 2; e++) {
        const pi0_gemma_layer *ls = e ? w->ex : w->lm;
        if (!in_layer(t, ls, sizeof *ls, c->lm.depth)) continue;
        const pi0_gemma_layer *L = &ls[((const char *)t - (const char *)ls) / sizeof *ls];
        int proj = t == &L->q || t == &L->k || t == &L->v || t == &L->o || t == &L->gate || t == &L->up || t == &L->down;
        return proj ? (e ? PI0_STAGE_EXPERT : PI0_STAGE_PREFIX) : 0;
    }
    return 0;
}

int quant_wants(const pi0_quant *q, const pi0_weights *w, const pi0_config *c, const pi0_wt *t) {
    return q && q->precision != PI0_PRECISION_BF16 && (quant_stage(w, c, t) & q->stages);
}

void quant_weight(const pi0_wt *t, pi0_precision precision, void *qv, float *s) {
    const int f8 = precision == PI0_PRECISION_FP8;
    const float top = f8 ? 448.0f : 127.0f;
    int64_t K = t->cols;
    #pragma omp parallel for schedule(static)   /* rows are independent: the same bits with any thread count */
    for (int64_t r = 0; r < t->rows; r++) {
        float row[512];
        float amax = 0.0f;
        for (int64_t k0 = 0; k0 < K; k0 += 512) {   /* the bf16 values, a chunk at a time */
            int n = (int)(K - k0 < 512 ? K - k0 : 512);
            pi0_to_f32(row, (const char *)t->data + (size_t)(r * K + k0) * pi0_dtype_size(t->dtype), t->dtype, (size_t)n);
            for (int k = 0; k < n; k++) {
                float a = fabsf(pi0_bf16_to_f32(pi0_f32_to_bf16(row[k])));
                if (a > amax) amax = a;
            }
        }
        float sc = amax / top;
        s[r] = sc;
        for (int64_t k0 = 0; k0 < K; k0 += 512) {
            int n = (int)(K - k0 < 512 ? K - k0 : 512);
            pi0_to_f32(row, (const char *)t->data + (size_t)(r * K + k0) * pi0_dtype_size(t->dtype), t->dtype, (size_t)n);
            for (int k = 0; k < n; k++) {
                float v = pi0_bf16_to_f32(pi0_f32_to_bf16(row[k]));
                if (f8) ((uint8_t *)qv)[r * K + k0 + k] = sc > 0.0f ? f8_code(v / sc) : 0;
                else ((int8_t *)qv)[r * K + k0 + k] = quant_i8(v, sc);
            }
        }
    }
}
