/* safetensors.c — the safetensors reader and writer (see safetensors.h). The header JSON is parsed with jansson
 * (duplicate names rejected) and every length, offset and shape checked against the file before a tensor is handed
 * out; tensor data stays in the mapping, never copied. Tensor names mean nothing here (weights.c binds them). */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define ST_MAX_HEADER (512u << 20)   /* real headers are < 1 MB; refuse absurd ones early */

static int parse_dtype(const char *s, pi0_dtype *dt) {
    for (int i = 0; i < PI0_DT_COUNT; i++)
        if (!strcmp(s, pi0_dtype_name((pi0_dtype)i))) { *dt = (pi0_dtype)i; return 1; }
    return 0;
}

const char *st_describe(char *buf, size_t n, int ndim, const int64_t *shape, pi0_dtype dt) {
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "%s) %s", ndim == 1 ? "," : "", pi0_dtype_name(dt));
    return buf;
}

int64_t st_numel(const st_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int cmp_begin(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

void st_close(st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    for (int i = 0; i < f->n_meta; i++) { free(f->meta_keys[i]); free(f->meta_vals[i]); }
    for (int i = 0; i < f->n_owned; i++) free(f->owned[i]);
    free(f->owned);
    free(f->tensors); free(f->meta_keys); free(f->meta_vals);
    if (f->map) munmap(f->map, f->map_len);
    free(f->path);
    free(f);
}

static pi0_status parse_entry(st_file *f, const char *label, const char *name, json_t *v,
                              uint64_t data_len, st_tensor *t) {
    if (!json_is_object(v))
        return pi0_fail(PI0_ERR_FORMAT, "%s: tensor '%s': header entry is not an object", label, name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo) || json_array_size(jo) != 2)
        return pi0_fail(PI0_ERR_FORMAT, "%s: tensor '%s': expected dtype (string), shape (array) and "
                        "data_offsets (array of 2)", label, name);
    if (!parse_dtype(json_string_value(jd), &t->dtype))
        return pi0_fail(PI0_ERR_FORMAT, "%s: tensor '%s': unsupported dtype '%s' (expected one of F32, "
                        "F16, BF16, I32, I64, U8, BOOL)", label, name, json_string_value(jd));
    size_t nd = json_array_size(js);
    if (nd > ST_MAX_DIMS)
        return pi0_fail(PI0_ERR_FORMAT, "%s: tensor '%s': %zu dimensions (at most %d supported)",
                        label, name, nd, ST_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return pi0_fail(PI0_ERR_FORMAT, "%s: tensor '%s': shape[%zu] is not a non-negative integer",
                            label, name, i);
        t->shape[i] = json_integer_value(d);
        if (t->shape[i] && numel > UINT64_MAX / 16 / (uint64_t)t->shape[i])
            return pi0_fail(PI0_ERR_FORMAT, "%s: tensor '%s': shape overflows", label, name);
        numel *= (uint64_t)t->shape[i];
    }
    json_t *b = json_array_get(jo, 0), *e = json_array_get(jo, 1);
    if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
        json_integer_value(e) < json_integer_value(b))
        return pi0_fail(PI0_ERR_FORMAT, "%s: tensor '%s': data_offsets must be integers 0 <= begin <= end",
                        label, name);
    t->begin = (uint64_t)json_integer_value(b);
    t->end = (uint64_t)json_integer_value(e);
    if (t->end > data_len)
        return pi0_fail(PI0_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] past the end of the "
                        "data block (%llu bytes; file truncated?)", label, name,
                        (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)data_len);
    uint64_t want = numel * pi0_dtype_size(t->dtype);
    if (t->end - t->begin != want)
        return pi0_fail(PI0_ERR_FORMAT, "%s: tensor '%s': shape and dtype need %llu bytes, data_offsets "
                        "span %llu", label, name, (unsigned long long)want,
                        (unsigned long long)(t->end - t->begin));
    (void)f;
    return PI0_OK;
}

pi0_status st_parse(st_file **out, const char *label, const uint8_t *buf, size_t len) {
    *out = NULL;
    if (len < 8)
        return pi0_fail(PI0_ERR_FORMAT, "%s: %zu bytes, too short for a safetensors file (need at least 8)",
                        label, len);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | buf[i];
    if (hl > len - 8)
        return pi0_fail(PI0_ERR_FORMAT, "%s: header length %llu runs past the end of the file (%zu bytes; "
                        "truncated or not a safetensors file)", label, (unsigned long long)hl, len);
    if (hl > ST_MAX_HEADER)
        return pi0_fail(PI0_ERR_FORMAT, "%s: header length %llu exceeds the %u bytes allowed", label,
                        (unsigned long long)hl, ST_MAX_HEADER);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)hl, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return pi0_fail(PI0_ERR_FORMAT, "%s: header JSON invalid at line %d column %d: %s", label,
                        jerr.line, jerr.column, pi0_json_reason(jerr.text));
    st_file *f = calloc(1, sizeof *f);
    st_tensor **order = NULL;
    pi0_status st = PI0_OK;
    if (!f) { st = pi0_fail(PI0_ERR_NOMEM, "%s: out of memory", label); goto fail; }
    if (!json_is_object(root)) { st = pi0_fail(PI0_ERR_FORMAT, "%s: header is not a JSON object", label); goto fail; }
    size_t n = json_object_size(root);
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    f->meta_keys = calloc(n ? n : 1, sizeof(char *));
    f->meta_vals = calloc(n ? n : 1, sizeof(char *));
    if (!f->tensors || !f->meta_keys || !f->meta_vals) { st = pi0_fail(PI0_ERR_NOMEM, "%s: out of memory", label); goto fail; }
    const uint8_t *data = buf + 8 + hl;
    uint64_t data_len = len - 8 - hl;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(v)) { st = pi0_fail(PI0_ERR_FORMAT, "%s: __metadata__ is not an object", label); goto fail; }
            size_t mn = json_object_size(v);
            char **nk = realloc(f->meta_keys, (mn ? mn : 1) * sizeof(char *));
            if (nk) f->meta_keys = nk;
            char **nv = realloc(f->meta_vals, (mn ? mn : 1) * sizeof(char *));
            if (nv) f->meta_vals = nv;
            if (!nk || !nv) { st = pi0_fail(PI0_ERR_NOMEM, "%s: out of memory", label); goto fail; }
            const char *mk;
            json_t *mv;
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv)) {
                    st = pi0_fail(PI0_ERR_FORMAT, "%s: __metadata__ value of '%s' is not a string", label, mk);
                    goto fail;
                }
                f->meta_keys[f->n_meta] = strdup(mk);
                f->meta_vals[f->n_meta] = strdup(json_string_value(mv));
                f->n_meta++;
                if (!f->meta_keys[f->n_meta - 1] || !f->meta_vals[f->n_meta - 1]) {
                    st = pi0_fail(PI0_ERR_NOMEM, "%s: out of memory", label); goto fail;
                }
            }
            continue;
        }
        st_tensor *t = &f->tensors[f->n_tensors];
        if (!(t->name = strdup(key))) { st = pi0_fail(PI0_ERR_NOMEM, "%s: out of memory", label); goto fail; }
        f->n_tensors++;
        if ((st = parse_entry(f, label, key, v, data_len, t)) != PI0_OK) goto fail;
        t->data = data + t->begin;
    }
    /* Overlap check: sort by begin; each tensor must start at or after the previous end. */
    order = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *order);
    if (!order) { st = pi0_fail(PI0_ERR_NOMEM, "%s: out of memory", label); goto fail; }
    for (int i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n_tensors, sizeof *order, cmp_begin);
    /* every non-empty range against the furthest-reaching earlier one (empty tensors overlap nothing) */
    const st_tensor *reach = NULL;
    for (int i = 0; i < f->n_tensors; i++) {
        const st_tensor *b = order[i];
        if (b->end == b->begin) continue;
        if (reach && b->begin < reach->end) {
            st = pi0_fail(PI0_ERR_FORMAT, "%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap", label,
                          reach->name, (unsigned long long)reach->begin, (unsigned long long)reach->end, b->name,
                          (unsigned long long)b->begin, (unsigned long long)b->end);
            goto fail;
        }
        if (!reach || b->end > reach->end) reach = b;
    }
    /* Tensors at addresses that are not a multiple of their element size (a header not padded to 8 bytes, or
     * offsets that break alignment) get an aligned copy: every reader loads elements through typed pointers. */
    for (int i = 0; i < f->n_tensors; i++) {
        st_tensor *t = &f->tensors[i];
        size_t esz = pi0_dtype_size(t->dtype), bytes = (size_t)(t->end - t->begin);
        if (!bytes || (uintptr_t)t->data % esz == 0) continue;
        void **grown = realloc(f->owned, (size_t)(f->n_owned + 1) * sizeof *grown);
        void *copy = grown ? malloc(bytes) : NULL;   /* malloc's alignment covers every dtype */
        if (grown) f->owned = grown;
        if (!copy) { st = pi0_fail(PI0_ERR_NOMEM, "%s: out of memory", label); goto fail; }
        memcpy(copy, t->data, bytes);
        f->owned[f->n_owned++] = copy;
        t->data = copy;
    }
    free(order);
    order = NULL;
    qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_name);
    json_decref(root);
    *out = f;
    return PI0_OK;
fail:
    free(order);
    json_decref(root);
    st_close(f);
    return st;
}

pi0_status st_open(st_file **out, const char *path) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK);   /* a FIFO must not block the open: it is refused below */
    if (fd < 0) return pi0_fail(PI0_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return pi0_fail(PI0_ERR_IO, "%s: not a regular file", path);
    }
    size_t len = (size_t)sb.st_size;
    void *map = NULL;
    if (len > 0) {
        map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return pi0_fail(PI0_ERR_IO, "%s: mmap failed: %s", path, strerror(e));
        }
    }
    close(fd);
    st_file *f;
    pi0_status st = st_parse(&f, path, map ? map : (const void *)"", len);
    if (st != PI0_OK) { if (map) munmap(map, len); return st; }
    f->map = map;
    f->map_len = len;
    if (!(f->path = strdup(path))) { st_close(f); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    *out = f;
    return PI0_OK;
}

void st_release(const st_file *f, const void *p, size_t n) {
    if (!f || !f->map || !p) return;
    const uintptr_t lo = (uintptr_t)f->map, a0 = (uintptr_t)p, pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    if (a0 < lo || n > f->map_len || a0 - lo > f->map_len - n) return;   /* an aligned copy, derived data: not mapped */
    const uintptr_t a = (a0 + pg - 1) / pg * pg, b = (a0 + n) / pg * pg;   /* whole pages: the neighbours keep theirs */
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

const st_tensor *st_find(const st_file *f, const char *name) {
    st_tensor key = {.name = (char *)name};
    return bsearch(&key, f->tensors, (size_t)f->n_tensors, sizeof key, cmp_name);
}

const char *st_meta(const st_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta_keys[i], key)) return f->meta_vals[i];
    return NULL;
}

/* ---- writer ---- */

pi0_status st_writer_open(st_writer *w, const char *path, const st_entry *e, int n,
                          const char *const *meta_kv, int n_meta) {
    memset(w, 0, sizeof *w);
    json_t *root = json_object();
    if (!root) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    if (n_meta > 0) {
        json_t *m = json_object();
        for (int i = 0; i < n_meta; i++) json_object_set_new(m, meta_kv[2 * i], json_string(meta_kv[2 * i + 1]));
        json_object_set_new(root, "__metadata__", m);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        json_t *shape = json_array();
        uint64_t numel = 1;
        for (int d = 0; d < e[i].ndim; d++) {
            json_array_append_new(shape, json_integer(e[i].shape[d]));
            numel *= (uint64_t)e[i].shape[d];
        }
        uint64_t bytes = numel * pi0_dtype_size(e[i].dtype);
        json_t *t = json_object();
        json_object_set_new(t, "dtype", json_string(pi0_dtype_name(e[i].dtype)));
        json_object_set_new(t, "shape", shape);
        json_object_set_new(t, "data_offsets", json_pack("[I, I]", (json_int_t)off, (json_int_t)(off + bytes)));
        json_object_set_new(root, e[i].name, t);
        off += bytes;
    }
    char *hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!hdr) return pi0_fail(PI0_ERR_NOMEM, "out of memory serialising the safetensors header");
    size_t hl = strlen(hdr), padded = (hl + 7) & ~(size_t)7;   /* pad with spaces to 8 bytes */
    FILE *fp = fopen(path, "wb");
    if (!fp) { free(hdr); return pi0_fail(PI0_ERR_IO, "%s: cannot create: %s", path, strerror(errno)); }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int ok = fwrite(len8, 1, 8, fp) == 8 && fwrite(hdr, 1, hl, fp) == hl;
    for (size_t i = hl; i < padded && ok; i++) ok = fputc(' ', fp) != EOF;
    free(hdr);
    w->fp = fp;
    w->path = strdup(path);
    w->expected = off;
    if (!ok || !w->path) { st_writer_abort(w); return pi0_fail(PI0_ERR_IO, "%s: write failed", path); }
    return PI0_OK;
}

pi0_status st_writer_write(st_writer *w, const void *data, size_t bytes) {
    PI0_ASSERT(w->written + bytes <= w->expected);
    if (fwrite(data, 1, bytes, w->fp) != bytes)
        return pi0_fail(PI0_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    w->written += bytes;
    return PI0_OK;
}

pi0_status st_writer_close(st_writer *w) {
    PI0_ASSERT(w->written == w->expected);
    int err = fclose(w->fp) != 0;
    w->fp = NULL;
    pi0_status st = err ? pi0_fail(PI0_ERR_IO, "%s: write failed on close: %s", w->path, strerror(errno)) : PI0_OK;
    free(w->path);
    w->path = NULL;
    return st;
}

void st_writer_abort(st_writer *w) {
    if (w->fp) fclose(w->fp);
    if (w->path) remove(w->path);
    free(w->path);
    memset(w, 0, sizeof *w);
}
