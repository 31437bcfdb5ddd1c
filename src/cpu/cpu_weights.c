/* cpu_weights.c — the CPU backend's weight store (backend.h weights_upload): the 8-bit copies (int8 or E4M3) and row
 * scales of the weights an 8-bit precision selects (quant.h), by tensor id; every other weight is read from the mapping
 * in place. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "../backend.h"
#include "../util.h"
#include "cpu_weights.h"

void cpu_weights_free(void *store) {
    cpu_wstore *s = store;
    if (!s) return;
    for (int i = 0; i <= s->n; i++) { free(s->e[i].q); free(s->e[i].s); }
    free(s->e);
    free(s);
}

static int32_t f8_int[256];   /* E4M3 code -> its value * 2^9 (NaN, never produced, as 0) */
static pthread_once_t f8_once = PTHREAD_ONCE_INIT;
static void f8_tab_fill(void) {
    for (int c = 0; c < 256; c++) {
        float v = f8_value((uint8_t)c);
        f8_int[c] = v == v ? (int32_t)ldexpf(v, 9) : 0;
    }
}

/* Backwards, so that in place each code is read before the integer written over it (bytes 4k..4k+3 hold codes >= k). */
void cpu_f8_ints(const uint8_t *q, int32_t *v, int n) {
    for (int k = n - 1; k >= 0; k--) v[k] = f8_int[q[k]];
}

/* Every E4M3 value is an integer times 2^-9, so a product is an integer times 2^-18 and the int64 sum is exact: the
 * order of the additions does not matter, and the one rounding is the conversion to fp32. */
float cpu_dot_f8(const int32_t *a, const int32_t *b, int n) {
    int64_t s = 0;
    for (int k = 0; k < n; k++) s += (int64_t)a[k] * b[k];
    return (float)ldexp((double)s, -18);
}

static pi0_status q8_make(cpu_wstore *s, const pi0_wt *t, pi0_precision precision) {
    cpu_q8 *e = &s->e[t->id];
    e->q = malloc((size_t)(t->rows * t->cols));
    e->s = malloc((size_t)t->rows * sizeof(float));
    if (!e->q || !e->s) return pi0_fail(PI0_ERR_NOMEM, "out of memory for the 8-bit weights");
    e->fp8 = precision == PI0_PRECISION_FP8;
    if (e->fp8) pthread_once(&f8_once, f8_tab_fill);
    s->fp8 |= e->fp8;
    quant_weight(t, precision, e->q, e->s);
    if (t->cols > s->max_k) s->max_k = t->cols;
    return PI0_OK;
}

typedef struct {
    cpu_wstore *s;
    const pi0_quant *q;
    const pi0_weights *w;
    const pi0_config *c;
} q8_build;

static pi0_status q8_one(void *user, const char *name, pi0_wt *t) {
    q8_build *b = user;
    (void)name;
    return quant_wants(b->q, b->w, b->c, t) ? q8_make(b->s, t, b->q->precision) : PI0_OK;
}

pi0_status cpu_weights_list(void **out, const pi0_wt *const *ts, const int *fmt, int n, int max_id) {
    *out = NULL;
    cpu_wstore *s = calloc(1, sizeof *s);
    if (s) s->e = calloc((size_t)max_id + 1, sizeof *s->e);
    if (!s || !s->e) { free(s); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    s->n = max_id;
    pi0_status st = PI0_OK;
    for (int i = 0; i < n && st == PI0_OK; i++)
        if (fmt[i]) {
            PI0_ASSERT(ts[i]->id >= 1 && ts[i]->id <= max_id);
            st = q8_make(s, ts[i], (pi0_precision)fmt[i]);
        }
    if (st != PI0_OK) { cpu_weights_free(s); return st; }
    *out = s;
    return PI0_OK;
}

/* done is never called: the CPU backend reads its other weights from the host view for as long as the model lives. */
pi0_status cpu_weights_upload(void **out, const pi0_weights *w, const pi0_config *c, const pi0_quant *q, int device,
                              void (*done)(void *user, const pi0_wt *t), void *user) {
    (void)device;
    (void)done;
    (void)user;
    *out = NULL;
    if (!q || q->precision == PI0_PRECISION_BF16) return PI0_OK;   /* everything read in place */
    cpu_wstore *s = calloc(1, sizeof *s);
    if (s) s->e = calloc((size_t)w->n_ids + 1, sizeof *s->e);
    if (!s || !s->e) { free(s); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    s->n = w->n_ids;
    q8_build b = {s, q, w, c};
    pi0_status st = weights_foreach((pi0_weights *)w, c, q8_one, &b);
    if (st != PI0_OK) { cpu_weights_free(s); return st; }
    *out = s;
    return PI0_OK;
}
