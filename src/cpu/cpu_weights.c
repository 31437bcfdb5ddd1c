/* cpu_weights.c — the CPU backend's weight store (backend.h weights_upload): the 8-bit copies (int8 or E4M3) and row
 * scales of the weights an 8-bit precision selects (quant.h), by tensor id; every other weight is read from the mapping
 * in place. */
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

static float f8_tab[256];
static pthread_once_t f8_once = PTHREAD_ONCE_INIT;
static void f8_tab_fill(void) { for (int c = 0; c < 256; c++) f8_tab[c] = f8_value((uint8_t)c); }

/* Each product of two E4M3 values is exact in fp32 and the sum of up to 2^14 of them exact in float64 (every term is a
 * multiple of 2^-18 below 2^18), so the order of the additions does not matter. */
float cpu_dot_f8(const uint8_t *a, const uint8_t *b, int n) {
    double s = 0.0;
    for (int k = 0; k < n; k++) s += (double)(f8_tab[a[k]] * f8_tab[b[k]]);
    return (float)s;
}

static pi0_status q8_make(cpu_wstore *s, const pi0_wt *t, pi0_precision precision) {
    cpu_q8 *e = &s->e[t->id];
    e->q = malloc((size_t)(t->rows * t->cols));
    e->s = malloc((size_t)t->rows * sizeof(float));
    if (!e->q || !e->s) return pi0_fail(PI0_ERR_NOMEM, "out of memory for the 8-bit weights");
    e->fp8 = precision == PI0_PRECISION_FP8;
    if (e->fp8) pthread_once(&f8_once, f8_tab_fill);
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
