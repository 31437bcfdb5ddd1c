/* image.c — openpi's image preprocessing (docs/model.md 3.1/3.2, appendix A): resize_with_pad of uint8 HWC RGB
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

/* Output row y of the horizontal pass (w_out pixels from a row of w_in): the three channels of a pixel in one tap
 * loop. */
static void hrow(uint8_t *restrict d, const uint8_t *restrict s, int w_out, const int *lo, const int *n,
                 const int32_t *kk, int ksize) {
    for (int x = 0; x < w_out; x++) {
        int32_t a0 = 1 << (PB - 1), a1 = a0, a2 = a0;
        const int32_t *k = kk + (size_t)x * ksize;
        const uint8_t *p = s + (size_t)lo[x] * 3;
        for (int t = 0; t < n[x]; t++, p += 3) {
            a0 += p[0] * k[t];
            a1 += p[1] * k[t];
            a2 += p[2] * k[t];
        }
        d[x * 3] = clip8(a0);
        d[x * 3 + 1] = clip8(a1);
        d[x * 3 + 2] = clip8(a2);
    }
}

/* Output row y of the vertical pass: n taps over the rows from `s` (input row lo[y]), rows of w pixels, summed tap
 * by tap over the whole row (contiguous, so the compiler vectorises it) in acc (w * 3 values). */
static void vrow(uint8_t *restrict d, const uint8_t *restrict s, int w, int n, const int32_t *k,
                 int32_t *restrict acc) {
    const int m = w * 3;
    for (int x = 0; x < m; x++) acc[x] = 1 << (PB - 1);
    for (int t = 0; t < n; t++) {
        const uint8_t *r = s + (size_t)t * m;
        const int32_t kt = k[t];
        for (int x = 0; x < m; x++) acc[x] += r[x] * kt;
    }
    for (int x = 0; x < m; x++) d[x] = clip8(acc[x]);
}

/* One 1-D pass: out[y][x][ch] from in along x (horizontal) or y (vertical); 0 when out of memory. Output rows are
 * independent, so large passes split them over threads, with the same values (each output is one integer sum in a
 * fixed order). A tap loop per channel and output was slow for a camera-sized frame on one core
 * (bench/RESULTS.md L105). */
static int pass(uint8_t *dst, const uint8_t *src, int h, int w_in, int w_out, const coeffs *c, int horizontal,
                int h_out) {
    const int rows = horizontal ? h : h_out, par = (double)rows * (horizontal ? w_out : w_in) * c->ksize > 2e5;
    int oom = 0;
    #pragma omp parallel if (par) reduction(|:oom)
    {
        int32_t *acc = horizontal ? NULL : malloc((size_t)w_in * 3 * sizeof(int32_t));
        oom = !horizontal && !acc;
        #pragma omp for schedule(static)
        for (int y = 0; y < rows; y++) {
            if (horizontal)
                hrow(dst + (size_t)y * w_out * 3, src + (size_t)y * w_in * 3, w_out, c->lo, c->n, c->k, c->ksize);
            else if (acc)
                vrow(dst + (size_t)y * w_in * 3, src + (size_t)c->lo[y] * w_in * 3, w_in, c->n[y],
                     c->k + (size_t)y * c->ksize, acc);
        }
        free(acc);
    }
    return !oom;
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
    if (rh != h) {
        if (!pass(res, cur, h, rw, rw, &cy, 0, rh)) {
            st = pi0_fail(PI0_ERR_NOMEM, "out of memory resizing a %d x %d image", w, h);
            goto done;
        }
    } else {
        memcpy(res, cur, (size_t)h * rw * 3);
    }
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
    for (size_t i = 0; i < n; i++) dst[i] = ((float)src[i] / 255.0f) * 2.0f - 1.0f;   /* docs/model.md 3.1, in fp32 */
}
