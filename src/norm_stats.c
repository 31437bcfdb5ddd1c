/* norm_stats.c — norm stats (docs/model.md 4.2; openpi transforms.Normalize / Unnormalize, shared/normalize.py):
 * reads norm_stats.json and (un)normalises state and action vectors. See norm_stats.h. The formulas keep openpi's
 * operation order so float64 results round the same way (built without FMA contraction). Owns no policy state: the
 * asset selection and the public policy API built on these are in pi0_policy.c. */
#include "norm_stats.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static void free_vec(norm_vec *v) {
    free(v->mean); free(v->std); free(v->q01); free(v->q99);
    memset(v, 0, sizeof *v);
}

void norm_stats_free(norm_stats *ns) {
    if (!ns) return;
    free_vec(&ns->state);
    free_vec(&ns->actions);
}

/* An array of finite numbers; *n must match when already set (>= 0). NULL/missing allowed if optional. */
static pi0_status get_array(json_t *o, const char *key, double **out, int *n, int optional, const char *label,
                            const char *where) {
    json_t *a = json_object_get(o, key);
    *out = NULL;
    if (!a || json_is_null(a)) {
        if (optional) return PI0_OK;
        return pi0_fail(PI0_ERR_FORMAT, "%s: norm_stats.%s.%s is missing", label, where, key);
    }
    if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > 65536)
        return pi0_fail(PI0_ERR_FORMAT, "%s: norm_stats.%s.%s: expected a non-empty array of numbers", label, where, key);
    int len = (int)json_array_size(a);
    if (*n >= 0 && len != *n)
        return pi0_fail(PI0_ERR_FORMAT, "%s: norm_stats.%s.%s has %d values, expected %d (the length of mean)", label,
                        where, key, len, *n);
    double *v = malloc((size_t)len * sizeof *v);
    if (!v) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    for (int i = 0; i < len; i++) {
        json_t *e = json_array_get(a, (size_t)i);
        if (!json_is_number(e) || !isfinite(json_number_value(e))) {
            free(v);
            return pi0_fail(PI0_ERR_FORMAT, "%s: norm_stats.%s.%s[%d] is not a finite number", label, where, key, i);
        }
        v[i] = json_number_value(e);
    }
    *n = len;
    *out = v;
    return PI0_OK;
}

static pi0_status parse_vec(json_t *root, const char *which, norm_vec *v, const char *label) {
    json_t *o = json_object_get(root, which);
    if (!json_is_object(o)) return pi0_fail(PI0_ERR_FORMAT, "%s: norm_stats.%s: expected an object", label, which);
    v->n = -1;
    pi0_status st = get_array(o, "mean", &v->mean, &v->n, 0, label, which);
    if (st == PI0_OK) st = get_array(o, "std", &v->std, &v->n, 0, label, which);
    int nq = -1;
    if (st == PI0_OK) st = get_array(o, "q01", &v->q01, &nq, 1, label, which);
    if (st == PI0_OK) st = get_array(o, "q99", &v->q99, &nq, 1, label, which);
    if (st == PI0_OK && (!v->q01) != (!v->q99))
        st = pi0_fail(PI0_ERR_FORMAT, "%s: norm_stats.%s has only one of q01 / q99", label, which);
    if (st == PI0_OK && v->q01 && nq != v->n)
        st = pi0_fail(PI0_ERR_FORMAT, "%s: norm_stats.%s: q01/q99 have %d values, mean has %d", label, which, nq, v->n);
    return st;
}

pi0_status norm_stats_parse(norm_stats *ns, const char *label, const char *text, size_t len) {
    memset(ns, 0, sizeof *ns);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return pi0_fail(PI0_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", label, jerr.line, jerr.column,
                        pi0_json_reason(jerr.text));
    json_t *s = json_object_get(root, "norm_stats");
    pi0_status st = json_is_object(s) ? PI0_OK : pi0_fail(PI0_ERR_FORMAT, "%s: expected {\"norm_stats\": {...}}", label);
    if (st == PI0_OK) st = parse_vec(s, "state", &ns->state, label);
    if (st == PI0_OK) st = parse_vec(s, "actions", &ns->actions, label);
    json_decref(root);
    if (st != PI0_OK) norm_stats_free(ns);
    return st;
}

pi0_status norm_stats_load(norm_stats *ns, const char *path) {
    size_t len;
    memset(ns, 0, sizeof *ns);
    char *text = pi0_read_file(path, &len, 16u << 20);
    if (!text) return PI0_ERR_IO;
    pi0_status st = norm_stats_parse(ns, path, text, len);
    free(text);
    return st;
}

pi0_status norm_apply(const norm_vec *v, int quantile, const double *x, int d, double *out) {
    if (d > v->n) return pi0_fail(PI0_ERR_SHAPE, "norm stats have %d values, the vector has %d", v->n, d);
    if (quantile && !v->q01) return pi0_fail(PI0_ERR_FORMAT, "quantile normalisation needs q01/q99 in the norm stats");
    for (int i = 0; i < d; i++) {
        if (!isfinite(x[i])) return pi0_fail(PI0_ERR_ARG, "value %d is not finite (%g)", i, x[i]);
        out[i] = quantile ? (x[i] - v->q01[i]) / (v->q99[i] - v->q01[i] + 1e-6) * 2.0 - 1.0
                          : (x[i] - v->mean[i]) / (v->std[i] + 1e-6);
    }
    return PI0_OK;
}

pi0_status norm_invert(const norm_vec *v, int quantile, const double *x, int x_f32, int rows, int d, double *out) {
    if (quantile && !v->q01) return pi0_fail(PI0_ERR_FORMAT, "quantile unnormalisation needs q01/q99 in the norm stats");
    if (v->n > d)   /* openpi pads (z-score) or slices (quantile) stats up to d; longer stats do not broadcast */
        return pi0_fail(PI0_ERR_SHAPE, "norm stats have %d values, the vector has %d", v->n, d);
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < d; i++) {
            double a = x[(size_t)r * d + i], y;
            if (quantile && i < v->n) {
                /* numpy keeps float32 for (x + 1.0) / 2.0 of a float32 array (Python scalars do not
                 * promote it); the product with the float64 stats is then float64 */
                double h = x_f32 ? (double)(((float)a + 1.0f) / 2.0f) : (a + 1.0) / 2.0;
                y = h * (v->q99[i] - v->q01[i] + 1e-6) + v->q01[i];
            } else if (quantile) y = a;
            else y = a * ((i < v->n ? v->std[i] : 1.0) + 1e-6) + (i < v->n ? v->mean[i] : 0.0);
            if (!isfinite(y))   /* finite stats can still overflow (a std of 1e308) */
                return pi0_fail(PI0_ERR_FORMAT, "unnormalising %g (row %d, dimension %d) gave %g: the stats of dimension %d "
                                "(%s) are too large", a, r, i, y, i, quantile ? "q01, q99" : "mean, std");
            out[(size_t)r * d + i] = y;
        }
    return PI0_OK;
}
