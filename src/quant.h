/* quant.h — the 8-bit formats' definition (docs/precision.md), shared by the backends so that each quantises the
 * weights identically: symmetric int8 or FP8 (E4M3) with one fp32 scale per row, for the weight rows (made once at
 * load) and for the activation rows (made per product from the live values). The product of an int8 row pair is exact
 * in int32, of an E4M3 row pair exact in float64 (rounded once to fp32); the result is acc * (scale_x * scale_w) + bias,
 * one fused multiply-add in fp32 (quant_dequant). */
#ifndef PI0_QUANT_H
#define PI0_QUANT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

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

/* The rows of t (any float dtype, each value first rounded to bf16, the values the bf16 path reads) to 8-bit codes of
 * `precision` (PI0_PRECISION_INT8: s[r] = max |w[r, :]| / 127, q = quant_i8(w, s[r]); PI0_PRECISION_FP8: / 448 and
 * f8_code(w / s[r])). q [rows, cols] (int8_t or uint8_t codes), s [rows]. */
void quant_weight(const pi0_wt *t, pi0_precision precision, void *q, float *s);

/* round-half-even(x / s) within [-127, 127] (a subnormal s can put x / s past 127), 0 where s = 0 */
static inline int8_t quant_i8(float x, float s) {
    if (!(s > 0.0f)) return 0;
    float v = rintf(x / s);
    return (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
}

/* The scale of one activation row for an 8-bit format whose largest code is `top` (127: int8, 448: E4M3): max |x| / top.
 * A non-finite value gives NaN, with the row's K codes (bytes at q) zeroed, so that the product's output is NaN as the
 * bf16 path's would be. */
static inline float quant_row_scale(const float *x, int K, float top, void *q) {
    float amax = 0.0f;
    for (int k = 0; k < K; k++) {
        float a = fabsf(x[k]);
        amax = a > amax || a != a ? a : amax;
    }
    if (amax <= 3.4028235e38f) return amax / top;
    memset(q, 0, (size_t)K);
    return NAN;
}

/* One activation row of K values: returns its scale s = max |x| / 127 and writes q = quant_i8(x, s). A non-finite
 * value gives s = NaN and q = 0, so that the product's output is NaN as the bf16 path's would be. */
static inline float quant_row_i8(const float *x, int K, int8_t *q) {
    float s = quant_row_scale(x, K, 127.0f, q);
    if (s == s)
        for (int k = 0; k < K; k++) q[k] = quant_i8(x[k], s);
    return s;
}

/* The output of one 8-bit product: acc * (sx * sw) + b as one fused multiply-add (b = 0 without a bias); an int8
 * product's int32 acc is first rounded to fp32. */
static inline float quant_dequant(float acc, float sx, float sw, float b) { return fmaf(acc, sx * sw, b); }

/* FP8 E4M3 (docs/precision.md 8): the value of code c: (8 + m) 2^(e - 10) for exponent field e >= 1, m 2^-9 for e = 0
 * (0x7f / 0xff, NaN, is never produced). */
static inline float f8_value(uint8_t c) {
    int e = (c >> 3) & 15, m = c & 7;
    float v = e == 15 && m == 7 ? NAN : e ? ldexpf((float)(8 + m), e - 10) : ldexpf((float)m, -9);
    return c & 0x80 ? -v : v;
}

/* The E4M3 code nearest to v (finite), ties to the even mantissa, magnitudes above 448 to 448; the sign is kept (a
 * negative value that rounds to 0 gives 0x80, -0), as the GPU's conversion keeps it. */
static inline uint8_t f8_code(float v) {
    uint8_t sign = signbit(v) ? 0x80 : 0;
    float a = fabsf(v);
    if (a > 448.0f) a = 448.0f;
    if (a < 0x1p-6f) return (uint8_t)(sign | (int)rintf(a * 0x1p9f));   /* subnormals (8 rounds up to 2^-6, code 8) */
    int e;
    frexpf(a, &e);                                                     /* a in [2^(e-1), 2^e) */
    int q = (int)rintf(ldexpf(a, 4 - e));                              /* the mantissa in 8..16 (16: the next binade) */
    return (uint8_t)(sign | (((e + 6) << 3) + q - 8));
}

/* One activation row to E4M3 as quant_row_i8 does to int8: s = max |x| / 448, q = f8_code(x / s); 0 codes for s = 0;
 * NaN and 0 codes for a non-finite row. */
static inline float quant_row_f8(const float *x, int K, uint8_t *q) {
    float s = quant_row_scale(x, K, 448.0f, q);
    if (s == s)
        for (int k = 0; k < K; k++) q[k] = s > 0.0f ? f8_code(x[k] / s) : 0;
    return s;
}

#endif
