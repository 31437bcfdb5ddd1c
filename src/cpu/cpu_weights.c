/* cpu_weights.c — the CPU backend's weight store (backend.h weights_upload): the int8 copies and row scales of the
 * weights an 8-bit precision selects (quant.h), by tensor id; every other weight is read from the mapping in place. */
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

static pi0_status q8_make(cpu_wstore *s, const pi0_wt *t) {
    cpu_q8 *e = &s->e[t->id];
    e->q = malloc((size_t)(t->rows * t->cols));
    e->s = malloc((size_t)t->rows * sizeof(float));
    if (!e->q || !e->s) return pi0_fail(PI0_ERR_NOMEM, "out of memory for the 8-bit weights");
    quant_weight_i8(t, e->q, e->s);
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
    return quant_wants(b->q, b->w, b->c, t) ? q8_make(b->s, t) : PI0_OK;
}

pi0_status cpu_weights_list(void **out, const pi0_wt *const *ts, const int *i8, int n, int max_id) {
    *out = NULL;
    cpu_wstore *s = calloc(1, sizeof *s);
    if (s) s->e = calloc((size_t)max_id + 1, sizeof *s->e);
    if (!s || !s->e) { free(s); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    s->n = max_id;
    pi0_status st = PI0_OK;
    for (int i = 0; i < n && st == PI0_OK; i++)
        if (i8[i]) {
            PI0_ASSERT(ts[i]->id >= 1 && ts[i]->id <= max_id);
            st = q8_make(s, ts[i]);
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
