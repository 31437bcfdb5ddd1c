/* quant.h — the 8-bit formats' definition (docs/precision.md), shared by the backends so that each quantises the
 * weights identically: symmetric int8 with one fp32 scale per row, for the weight rows (made once at load) and for the
 * activation rows (made per product from the live values). The product of an int8 row pair is exact in int32; the
 * result is acc * (scale_x * scale_w) + bias, one fused multiply-add in fp32 (quant_dequant). */
#ifndef PI0_QUANT_H
#define PI0_QUANT_H

#include <math.h>
#include <stdint.h>

#include "weights.h"

typedef struct {
    pi0_precision precision;   /* PI0_PRECISION_BF16: nothing is quantised */
    unsigned stages;           /* PI0_STAGE_* bits (never 0 here: the API turns 0 into all) */
} pi0_quant;

/* The stage whose 8-bit path reads t (PI0_STAGE_VISION / PREFIX / EXPERT: the projections of the SigLIP layers, of
 * PaliGemma's and of the expert's Gemma layers), or 0 for the tensors that stay as they are (norms, biases, embeddings,
 * the patch and projector weights, the action and time projections). */
unsigned quant_stage(const pi0_weights *w, const pi0_config *c, const pi0_wt *t);
/* Whether q quantises t. */
int quant_wants(const pi0_quant *q, const pi0_weights *w, const pi0_config *c, const pi0_wt *t);

/* The rows of t (any float dtype, each value first rounded to bf16, the values the bf16 path reads) to int8: s[r] =
 * max |w[r, :]| / 127, q = quant_i8(w, s[r]). q [rows, cols], s [rows]. */
void quant_weight_i8(const pi0_wt *t, int8_t *q, float *s);

/* round-half-even(x / s) within [-127, 127] (a subnormal s can put x / s past 127), 0 where s = 0 */
static inline int8_t quant_i8(float x, float s) {
    if (!(s > 0.0f)) return 0;
    float v = rintf(x / s);
    return (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
}

/* One activation row of K values: returns its scale s = max |x| / 127 and writes q = quant_i8(x, s). A non-finite
 * value gives s = NaN and q = 0, so that the product's output is NaN as the bf16 path's would be. */
static inline float quant_row_i8(const float *x, int K, int8_t *q) {
    float amax = 0.0f;
    for (int k = 0; k < K; k++) {
        float a = fabsf(x[k]);
        amax = a > amax || a != a ? a : amax;
    }
    if (!(amax <= 3.4028235e38f)) {
        for (int k = 0; k < K; k++) q[k] = 0;
        return NAN;
    }
    float s = amax / 127.0f;
    for (int k = 0; k < K; k++) q[k] = quant_i8(x[k], s);
    return s;
}

/* The output of one int8 product: acc * (sx * sw) + b as one fused multiply-add (b = 0 without a bias). */
static inline float quant_dequant(int32_t acc, float sx, float sw, float b) { return fmaf((float)acc, sx * sw, b); }

#endif
