/* tensors.c — include/pi0.h's tensor sets (pi0_tensors_*): a safetensors file opened read-only (mmapped and
 * validated by safetensors.c) or an in-memory set built with pi0_tensors_add and saved as a safetensors file; the
 * tools' model-level input / output files and the fixtures. Owns the set's copies; knows nothing of the model (what
 * the names mean: api_inputs.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pi0.h"
#include "safetensors.h"
#include "util.h"

typedef struct {
    char *name;
    pi0_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    void *data;
    size_t bytes;
} mem_tensor;

struct pi0_tensors {
    st_file *file;     /* opened file, or NULL for an in-memory set */
    mem_tensor *mem;
    int n_mem, cap;
};

pi0_status pi0_tensors_open(pi0_tensors **out, const char *path) {
    if (!out || !path) return pi0_fail(PI0_ERR_ARG, "pi0_tensors_open: NULL argument");
    *out = NULL;
    pi0_tensors *t = calloc(1, sizeof *t);
    if (!t) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    pi0_status st = st_open(&t->file, path);
    if (st != PI0_OK) { free(t); return st; }
    *out = t;
    return PI0_OK;
}

pi0_status pi0_tensors_new(pi0_tensors **out) {
    if (!out) return pi0_fail(PI0_ERR_ARG, "pi0_tensors_new: NULL argument");
    *out = calloc(1, sizeof **out);
    return *out ? PI0_OK : pi0_fail(PI0_ERR_NOMEM, "out of memory");
}

void pi0_tensors_free(pi0_tensors *t) {
    if (!t) return;
    st_close(t->file);
    for (int i = 0; i < t->n_mem; i++) { free(t->mem[i].name); free(t->mem[i].data); }
    free(t->mem);
    free(t);
}

pi0_status pi0_tensors_get(const pi0_tensors *t, const char *name, pi0_dtype *dtype, int *ndim, int64_t *shape,
                           const void **data) {
    if (!t || !name) return pi0_fail(PI0_ERR_ARG, "pi0_tensors_get: NULL argument");
    if (t->file) {
        const st_tensor *x = st_find(t->file, name);
        if (!x) return pi0_fail(PI0_ERR_ARG, "%s: no tensor '%s'", t->file->path, name);
        if (dtype) *dtype = x->dtype;
        if (ndim) *ndim = x->ndim;
        if (shape) memcpy(shape, x->shape, sizeof x->shape);
        if (data) *data = x->data;
        return PI0_OK;
    }
    for (int i = 0; i < t->n_mem; i++)
        if (!strcmp(t->mem[i].name, name)) {
            if (dtype) *dtype = t->mem[i].dtype;
            if (ndim) *ndim = t->mem[i].ndim;
            if (shape) memcpy(shape, t->mem[i].shape, sizeof t->mem[i].shape);
            if (data) *data = t->mem[i].data;
            return PI0_OK;
        }
    return pi0_fail(PI0_ERR_ARG, "no tensor '%s'", name);
}

int pi0_tensors_count(const pi0_tensors *t) {
    return !t ? 0 : t->file ? t->file->n_tensors : t->n_mem;
}

const char *pi0_tensors_name(const pi0_tensors *t, int i) {
    if (i < 0 || i >= pi0_tensors_count(t)) return NULL;
    return t->file ? t->file->tensors[i].name : t->mem[i].name;
}

pi0_status pi0_tensors_add(pi0_tensors *t, const char *name, pi0_dtype dtype, int ndim, const int64_t *shape,
                           const void *data) {
    if (!t || !name || (ndim && !shape) || !data) return pi0_fail(PI0_ERR_ARG, "pi0_tensors_add: NULL argument");
    if (t->file) return pi0_fail(PI0_ERR_ARG, "pi0_tensors_add: set was opened from a file (read-only)");
    if ((unsigned)dtype >= PI0_DT_COUNT || ndim < 0 || ndim > ST_MAX_DIMS)
        return pi0_fail(PI0_ERR_ARG, "pi0_tensors_add: '%s': bad dtype or ndim %d", name, ndim);
    size_t n = pi0_dtype_size(dtype);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return pi0_fail(PI0_ERR_ARG, "pi0_tensors_add: '%s': negative dimension", name);
        n *= (size_t)shape[i];
    }
    if (t->n_mem == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        mem_tensor *m = realloc(t->mem, (size_t)cap * sizeof *m);
        if (!m) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
        t->mem = m;
        t->cap = cap;
    }
    mem_tensor *m = &t->mem[t->n_mem];
    memset(m, 0, sizeof *m);
    m->name = strdup(name);
    m->data = malloc(n ? n : 1);
    if (!m->name || !m->data) { free(m->name); free(m->data); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    memcpy(m->data, data, n);
    m->dtype = dtype;
    m->ndim = ndim;
    if (ndim) memcpy(m->shape, shape, (size_t)ndim * sizeof *shape);
    m->bytes = n;
    t->n_mem++;
    return PI0_OK;
}

pi0_status pi0_tensors_save(const pi0_tensors *t, const char *path) {
    if (!t || !path) return pi0_fail(PI0_ERR_ARG, "pi0_tensors_save: NULL argument");
    st_entry *e = calloc((size_t)t->n_mem + 1, sizeof *e);
    if (!e) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    for (int i = 0; i < t->n_mem; i++) {
        e[i].name = t->mem[i].name;
        e[i].dtype = t->mem[i].dtype;
        e[i].ndim = t->mem[i].ndim;
        memcpy(e[i].shape, t->mem[i].shape, sizeof e[i].shape);
    }
    st_writer w;
    pi0_status st = st_writer_open(&w, path, e, t->n_mem, NULL, 0);
    free(e);
    for (int i = 0; i < t->n_mem && st == PI0_OK; i++) st = st_writer_write(&w, t->mem[i].data, t->mem[i].bytes);
    if (st == PI0_OK) return st_writer_close(&w);
    st_writer_abort(&w);
    return st;
}
