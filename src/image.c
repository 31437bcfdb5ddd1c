/* image.c — openpi's image preprocessing (spec 3.1/3.2, appendix A): resize_with_pad of uint8 HWC RGB
 * images to R x R, bit-exact with Pillow's BILINEAR convolution resampler (antialiased when
 * downscaling, 22-bit fixed-point coefficients, horizontal pass then vertical, each only when that
 * dimension changes), pasted onto a black canvas; and uint8 -> [-1, 1] as (u / 255) * 2 - 1 in fp32.
 * JPEG/PNG decoding and the robot transforms are not here. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

enum { PB = 22 };   /* Pillow's PRECISION_BITS for 8-bit images: 32 - 8 - 2 */

typedef struct {
    int *lo, *n;      /* first input index and tap count per output */
    int32_t *k;       /* fixed-point weights, ksize per output */
    int ksize;
} coeffs;

static double tri(double x) {
    if (x < 0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Pillow's precompute_coeffs + normalize_coeffs_8bpc for one axis (box = the whole input). */
static int make_coeffs(coeffs *c, int in, int out) {
    double scale = (double)in / out, fs = scale > 1.0 ? scale : 1.0, support = 1.0 * fs;
    c->ksize = (int)ceil(support) * 2 + 1;
    c->lo = malloc((size_t)out * sizeof(int));
    c->n = malloc((size_t)out * sizeof(int));
    c->k = calloc((size_t)out * c->ksize, sizeof(int32_t));
    double *w = malloc((size_t)c->ksize * sizeof(double));
    if (!c->lo || !c->n || !c->k || !w) { free(w); return 0; }
    for (int o = 0; o < out; o++) {
        double center = (o + 0.5) * scale, ww = 0.0, ss = 1.0 / fs;
        int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);   /* C truncation, as Pillow */
        if (lo < 0) lo = 0;
        if (hi > in) hi = in;
        int n = hi - lo;
        if (n > c->ksize) n = c->ksize;
        for (int x = 0; x < n; x++) { w[x] = tri((x + lo - center + 0.5) * ss); ww += w[x]; }
        for (int x = 0; x < n; x++) {
            double v = ww != 0.0 ? w[x] / ww : w[x];
            c->k[(size_t)o * c->ksize + x] = v < 0 ? (int32_t)(-0.5 + v * (1 << PB)) : (int32_t)(0.5 + v * (1 << PB));
        }
        c->lo[o] = lo;
        c->n[o] = n;
    }
    free(w);
    return 1;
}

static void free_coeffs(coeffs *c) { free(c->lo); free(c->n); free(c->k); }

static uint8_t clip8(int32_t v) { return v <= 0 ? 0 : v >= (1 << PB << 8) ? 255 : (uint8_t)(v >> PB); }

/* Output row y of the horizontal pass (w_out pixels from a row of w_in). */
static void hrow(uint8_t *restrict d, const uint8_t *restrict s, int w_out, const int *lo, const int *n, const int32_t *kk,
                 int ksize) {
    for (int x = 0; x < w_out; x++)
        for (int ch = 0; ch < 3; ch++) {
            int32_t acc = 1 << (PB - 1);
            const int32_t *k = kk + (size_t)x * ksize;
            for (int t = 0; t < n[x]; t++) acc += s[(lo[x] + t) * 3 + ch] * k[t];
            d[x * 3 + ch] = clip8(acc);
        }
}

/* Output row y of the vertical pass: taps n rows from `s` (input row lo[y]), rows of w pixels. */
static void vrow(uint8_t *restrict d, const uint8_t *restrict s, int w, int n, const int32_t *k) {
    for (int x = 0; x < w * 3; x++) {
        int32_t acc = 1 << (PB - 1);
        for (int t = 0; t < n; t++) acc += s[(size_t)t * w * 3 + x] * k[t];
        d[x] = clip8(acc);
    }
}

/* One 1-D pass: out[y][x][ch] from in along x (horizontal) or y (vertical). Output rows are independent, so large
 * passes split them over threads, with the same values (each output is one integer sum in a fixed order). Three
 * 640 x 480 camera frames took 7.7 ms on one core of the dev VM (RESULTS.md session 24). */
static void pass(uint8_t *dst, const uint8_t *src, int h, int w_in, int w_out, const coeffs *c, int horizontal,
                 int h_out) {
    const int rows = horizontal ? h : h_out, par = (double)rows * (horizontal ? w_out : w_in) * c->ksize > 2e5;
    #pragma omp parallel for schedule(static) if (par)
    for (int y = 0; y < rows; y++) {
        if (horizontal)
            hrow(dst + (size_t)y * w_out * 3, src + (size_t)y * w_in * 3, w_out, c->lo, c->n, c->k, c->ksize);
        else
            vrow(dst + (size_t)y * w_in * 3, src + (size_t)c->lo[y] * w_in * 3, w_in, c->n[y], c->k + (size_t)y * c->ksize);
    }
}

pi0_status pi0_image_resize_with_pad(const uint8_t *src, int h, int w, int size, uint8_t *dst) {
    /* 8192 per side bounds the scratch (~200 MB) an untrusted request can make us allocate */
    if (!src || !dst || h < 1 || w < 1 || size < 1 || h > 8192 || w > 8192 || size > 8192)
        return pi0_fail(PI0_ERR_ARG, "resize_with_pad: image %d x %d to %d: expected 1..8192 pixels per side", w, h, size);
    if (h == size && w == size) {
        memcpy(dst, src, (size_t)size * size * 3);
        return PI0_OK;
    }
    /* openpi image_tools.resize_with_pad: scale by the larger ratio, truncate, centre on black */
    double ratio = fmax((double)w / size, (double)h / size);
    int rh = (int)(h / ratio), rw = (int)(w / ratio);
    if (rh < 1 || rw < 1)   /* Pillow refuses a zero-sized resize, so openpi fails on these too */
        return pi0_fail(PI0_ERR_ARG, "image %d x %d is too thin to resize to %d x %d (a side would be 0 pixels)", w, h,
                        size, size);
    uint8_t *tmp = malloc((size_t)h * rw * 3), *res = malloc((size_t)rh * rw * 3);
    coeffs cx = {0}, cy = {0};
    pi0_status st = PI0_OK;
    if (!tmp || !res || !make_coeffs(&cx, w, rw) || !make_coeffs(&cy, h, rh)) {
        st = pi0_fail(PI0_ERR_NOMEM, "out of memory resizing a %d x %d image", w, h);
        goto done;
    }
    /* Pillow: horizontal pass only if the width changes, then vertical only if the height changes */
    const uint8_t *cur = src;
    if (rw != w) { pass(tmp, src, h, w, rw, &cx, 1, h); cur = tmp; }
    if (rh != h) pass(res, cur, h, rw, rw, &cy, 0, rh);
    else memcpy(res, cur, (size_t)h * rw * 3);
    memset(dst, 0, (size_t)size * size * 3);
    int top = (size - rh) / 2, left = (size - rw) / 2;
    for (int y = 0; y < rh; y++) memcpy(dst + ((size_t)(y + top) * size + left) * 3, res + (size_t)y * rw * 3, (size_t)rw * 3);
done:
    free_coeffs(&cx);
    free_coeffs(&cy);
    free(tmp);
    free(res);
    return st;
}

void pi0_image_to_model(const uint8_t *src, size_t n, float *dst) {
    for (size_t i = 0; i < n; i++) dst[i] = ((float)src[i] / 255.0f) * 2.0f - 1.0f;   /* spec 3.1, in fp32 */
}
