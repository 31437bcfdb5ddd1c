/* zarr.c — see zarr.h. Chunk grid: chunk (i0, i1, ...) covers rows [i0 c0, (i0 + 1) c0) of axis 0 and so on;
 * edge chunks are stored at the full chunk shape (zarr v2), the part past the array's end is dropped.
 * When the chunks span every axis but the first (Orbax writes one chunk per array), chunks are
 * decompressed straight into the caller's block buffer; any other grid is assembled in a temporary copy of
 * the whole array first. */
#include "zarr.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "util.h"

#define ZARR_MAX_BYTES ((int64_t)1 << 40)

int64_t zarr_numel(const zarr_array *a) {
    int64_t n = 1;
    for (int i = 0; i < a->ndim; i++) n *= a->shape[i];
    return n;
}

static int dims(json_t *j, int64_t *out, int *n, int min) {
    if (!json_is_array(j) || json_array_size(j) > ZARR_MAX_DIMS) return 0;
    *n = (int)json_array_size(j);
    for (int i = 0; i < *n; i++) {
        json_t *d = json_array_get(j, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < min || json_integer_value(d) > ZARR_MAX_BYTES) return 0;
        out[i] = json_integer_value(d);
    }
    return 1;
}

pi0_status zarr_parse_meta(zarr_array *a, const char *label, const char *text, size_t len) {
    memset(a, 0, sizeof *a);
    json_error_t jerr;
    json_t *r = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!r) return pi0_fail(PI0_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", label, jerr.line, jerr.column, jerr.text);
    pi0_status st = PI0_ERR_FORMAT;
    int nc = 0;
    json_t *fmt = json_object_get(r, "zarr_format"), *dt = json_object_get(r, "dtype"), *comp = json_object_get(r, "compressor"),
           *filt = json_object_get(r, "filters"), *ord = json_object_get(r, "order"), *fill = json_object_get(r, "fill_value"),
           *sep = json_object_get(r, "dimension_separator");
    if (!json_is_object(r) || !json_is_integer(fmt) || json_integer_value(fmt) != 2) {
        pi0_fail(st, "%s: expected a zarr v2 .zarray object with \"zarr_format\": 2", label);
        goto done;
    }
    if (!dims(json_object_get(r, "shape"), a->shape, &a->ndim, 0) || !dims(json_object_get(r, "chunks"), a->chunks, &nc, 1) ||
        nc != a->ndim) {
        pi0_fail(st, "%s: shape / chunks: expected two arrays of the same length (at most %d) of non-negative / positive "
                 "integers", label, ZARR_MAX_DIMS);
        goto done;
    }
    int64_t n = 1;
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] && n > ZARR_MAX_BYTES / a->shape[i]) { pi0_fail(st, "%s: shape too large", label); goto done; }
        n *= a->shape[i];
        if (a->chunks[i] > ZARR_MAX_BYTES / (n ? n : 1)) { pi0_fail(st, "%s: chunks too large", label); goto done; }
    }
    const char *d = json_is_string(dt) ? json_string_value(dt) : "";
    if (!strcmp(d, "<f4")) a->dtype = PI0_DT_F32;
    else if (!strcmp(d, "<f2")) a->dtype = PI0_DT_F16;
    else if (!strcmp(d, "bfloat16")) a->dtype = PI0_DT_BF16;
    else {
        pi0_fail(st, "%s: dtype '%s': expected \"<f4\", \"<f2\" or \"bfloat16\" (model parameters)", label, d);
        goto done;
    }
    if (json_is_null(comp) || !comp) a->zstd = 0;
    else {
        json_t *id = json_object_get(comp, "id");
        if (!json_is_string(id) || strcmp(json_string_value(id), "zstd")) {
            pi0_fail(st, "%s: compressor '%s': this reader handles zstd (what tensorstore writes) and none", label,
                     json_is_string(id) ? json_string_value(id) : "?");
            goto done;
        }
        a->zstd = 1;
    }
    if (filt && !json_is_null(filt) && !(json_is_array(filt) && json_array_size(filt) == 0)) {
        pi0_fail(st, "%s: filters are not supported (expected null)", label);
        goto done;
    }
    if (!json_is_string(ord) || strcmp(json_string_value(ord), "C")) {
        pi0_fail(st, "%s: order: expected \"C\" (Fortran order is not supported)", label);
        goto done;
    }
    if (json_is_number(fill)) { a->has_fill = 1; a->fill = json_number_value(fill); }
    else if (json_is_string(fill)) {
        const char *f = json_string_value(fill);
        a->has_fill = 1;
        a->fill = !strcmp(f, "NaN") ? NAN : !strcmp(f, "Infinity") ? INFINITY : !strcmp(f, "-Infinity") ? -INFINITY : 0;
        if (a->fill == 0) { pi0_fail(st, "%s: fill_value '%s' is not a number", label, f); goto done; }
    } else if (fill && !json_is_null(fill)) { pi0_fail(st, "%s: fill_value: expected a number or null", label); goto done; }
    /* a chunk larger than 4x the array (or 1 MB) only inflates padding: refuse what no writer produces */
    int64_t cb = (int64_t)pi0_dtype_size(a->dtype), ab = (int64_t)pi0_dtype_size(a->dtype) * n;
    for (int i = 0; i < a->ndim; i++) cb *= a->chunks[i];
    if (cb > 4 * (ab > (1 << 20) ? ab : (1 << 20))) {
        pi0_fail(st, "%s: chunks of %lld bytes for an array of %lld bytes", label, (long long)cb, (long long)ab);
        goto done;
    }
    a->sep = '.';
    if (sep && !json_is_null(sep)) {
        const char *s = json_is_string(sep) ? json_string_value(sep) : "";
        if (strcmp(s, ".") && strcmp(s, "/")) { pi0_fail(st, "%s: dimension_separator: expected \".\" or \"/\"", label); goto done; }
        a->sep = s[0];
    }
    st = PI0_OK;
done:
    json_decref(r);
    return st;
}

pi0_status zarr_open(zarr_array *a, const zarr_store *s, const char *name, const char *label) {
    char key[1024], lab[1200];
    snprintf(key, sizeof key, "%s/.zarray", name);
    snprintf(lab, sizeof lab, "%s: %s", label, key);
    const uint8_t *d;
    size_t n;
    int found = 0;
    pi0_status st = s->get(s->user, key, &d, &n, &found);
    if (st != PI0_OK) return st;
    if (!found) return pi0_fail(PI0_ERR_FORMAT, "%s: missing", lab);
    return zarr_parse_meta(a, lab, (const char *)d, n);
}

static void fill_elems(const zarr_array *a, uint8_t *dst, int64_t n) {
    float f = (float)a->fill;
    uint16_t h = a->dtype == PI0_DT_BF16 ? pi0_f32_to_bf16(f) : 0;
    if (a->dtype == PI0_DT_F16) {   /* fills other than 0 are not written by Orbax; keep F16 exact for 0 and NaN */
        uint32_t u; memcpy(&u, &f, 4);
        h = f == 0 ? (uint16_t)((u >> 16) & 0x8000) : 0x7e00;
    }
    for (int64_t i = 0; i < n; i++) {
        if (a->dtype == PI0_DT_F32) memcpy(dst + 4 * i, &f, 4);
        else memcpy(dst + 2 * i, &h, 2);
    }
}

/* Decodes one stored chunk (zstd or raw) of exactly `total` bytes into the spans that `next` hands out: next(ctx,
 * done, &span) says where decoded bytes [done, done + span.n) go. */
typedef struct { uint8_t *p; size_t n; } span;
typedef pi0_status (*next_fn)(void *ctx, size_t done, span *out);

static pi0_status decode_chunk(const zarr_array *a, const uint8_t *src, size_t slen, size_t total, const char *what,
                               next_fn next, void *ctx) {
    pi0_status st = PI0_OK;
    span o;
    if (!a->zstd) {
        if (slen != total) return pi0_fail(PI0_ERR_FORMAT, "%s: %zu bytes, expected %zu (raw chunk)", what, slen, total);
        for (size_t done = 0; done < total && st == PI0_OK; done += o.n) {
            if ((st = next(ctx, done, &o)) != PI0_OK) break;
            if (o.n > total - done) o.n = total - done;
            memcpy(o.p, src + done, o.n);
        }
        return st;
    }
    ZSTD_DCtx *z = ZSTD_createDCtx();
    if (!z) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    ZSTD_inBuffer in = {src, slen, 0};
    size_t done = 0, ret = 1;
    while (done < total) {
        if ((st = next(ctx, done, &o)) != PI0_OK) goto done;
        ZSTD_outBuffer ob = {o.p, o.n < total - done ? o.n : total - done, 0};
        while (ob.pos < ob.size) {
            size_t in_before = in.pos, out_before = ob.pos;
            ret = ZSTD_decompressStream(z, &ob, &in);
            if (ZSTD_isError(ret)) { st = pi0_fail(PI0_ERR_FORMAT, "%s: zstd: %s", what, ZSTD_getErrorName(ret)); goto done; }
            if ((ret == 0 && in.pos == in.size) || (in.pos == in_before && ob.pos == out_before)) break;
        }
        done += ob.pos;
        if (ob.pos < ob.size) {
            st = pi0_fail(PI0_ERR_FORMAT, "%s: decodes to %zu bytes, expected %zu (truncated?)", what, done, total);
            goto done;
        }
    }
    if (ret != 0) {   /* the frame must end exactly at `total` bytes */
        uint8_t extra;
        ZSTD_outBuffer ob = {&extra, 1, 0};
        ret = ZSTD_decompressStream(z, &ob, &in);
        if (ZSTD_isError(ret)) st = pi0_fail(PI0_ERR_FORMAT, "%s: zstd: %s", what, ZSTD_getErrorName(ret));
        else if (ob.pos) st = pi0_fail(PI0_ERR_FORMAT, "%s: decodes to more than the %zu bytes expected", what, total);
        else if (ret != 0) st = pi0_fail(PI0_ERR_FORMAT, "%s: zstd frame truncated", what);
    }
    if (st == PI0_OK && in.pos != in.size) st = pi0_fail(PI0_ERR_FORMAT, "%s: %zu bytes after the zstd frame", what, in.size - in.pos);
done:
    ZSTD_freeDCtx(z);
    return st;
}

static void chunk_key(const zarr_array *a, const char *name, const int64_t *idx, char *key, size_t n) {
    size_t k = (size_t)snprintf(key, n, "%s/", name);
    if (!a->ndim) { snprintf(key + k, n - k, "0"); return; }
    for (int i = 0; i < a->ndim && k < n; i++)
        k += (size_t)snprintf(key + k, n - k, "%s%lld", i ? (a->sep == '/' ? "/" : ".") : "", (long long)idx[i]);
}

/* Rows of the array stream into the block buffer; a block is handed to fn as soon as its last row is in.
 * Edge-chunk padding goes to a scratch span. */
typedef struct {
    uint8_t *buf;
    size_t row_bytes, block_bytes;
    uint64_t pos0, valid;                  /* array byte offset of the chunk's first row; its valid bytes */
    int64_t next_block;
    zarr_block_fn fn; void *user;
    uint8_t scratch[1 << 16];
} rows_ctx;

static pi0_status flush(rows_ctx *x, uint64_t upto) {   /* emits every block that ends at or before byte `upto` */
    pi0_status st = PI0_OK;
    while (st == PI0_OK && (uint64_t)(x->next_block + 1) * x->block_bytes <= upto)
        st = x->fn(x->user, x->next_block++, x->buf);
    return st;
}

static pi0_status rows_next(void *c, size_t done, span *o) {
    rows_ctx *x = c;
    if (done >= x->valid) { *o = (span){x->scratch, sizeof x->scratch}; return flush(x, x->pos0 + x->valid); }
    pi0_status st = flush(x, x->pos0 + done);
    uint64_t in_block = (x->pos0 + done) % x->block_bytes, n = x->block_bytes - in_block;
    *o = (span){x->buf + in_block, (size_t)(n < x->valid - done ? n : x->valid - done)};
    return st;
}

static pi0_status whole_next(void *c, size_t done, span *o) {
    *o = (span){(uint8_t *)c + done, SIZE_MAX};
    return PI0_OK;
}

static pi0_status get_chunk(const zarr_array *a, const zarr_store *s, const char *name, const char *label, const int64_t *idx,
                            const uint8_t **d, size_t *n, int *found, char *what, size_t wn) {
    char key[1200];
    chunk_key(a, name, idx, key, sizeof key);
    snprintf(what, wn, "%s: chunk %s", label, key);
    pi0_status st = s->get(s->user, key, d, n, found);
    if (st == PI0_OK && !*found && !a->has_fill)
        st = pi0_fail(PI0_ERR_FORMAT, "%s: missing, and the array has no fill_value", what);
    return st;
}

pi0_status zarr_read(const zarr_array *a, const zarr_store *s, const char *name, const char *label,
                     int64_t block_rows, void *buf, zarr_block_fn fn, void *user) {
    zarr_array g = *a;   /* a scalar is one row of one element */
    if (!g.ndim) { g.ndim = 1; g.shape[0] = g.chunks[0] = 1; }
    const size_t esz = pi0_dtype_size(a->dtype);
    size_t row_bytes = esz;
    int fast = 1;
    for (int i = 1; i < g.ndim; i++) { row_bytes *= (size_t)g.shape[i]; fast &= g.chunks[i] == g.shape[i]; }
    PI0_ASSERT(block_rows > 0 && g.shape[0] % block_rows == 0);
    if (zarr_numel(&g) == 0) return PI0_OK;
    char what[2048];
    int64_t idx[ZARR_MAX_DIMS] = {0};
    const uint8_t *d;
    size_t n;
    int found;
    pi0_status st = PI0_OK;
    if (fast) {
        rows_ctx *x = malloc(sizeof *x);
        if (!x) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
        *x = (rows_ctx){.buf = buf, .row_bytes = row_bytes, .block_bytes = row_bytes * (size_t)block_rows, .fn = fn, .user = user};
        const int64_t c0 = g.chunks[0];
        for (idx[0] = 0; idx[0] * c0 < g.shape[0] && st == PI0_OK; idx[0]++) {
            if ((st = get_chunk(a, s, name, label, idx, &d, &n, &found, what, sizeof what)) != PI0_OK) break;
            int64_t row0 = idx[0] * c0, valid = g.shape[0] - row0 < c0 ? g.shape[0] - row0 : c0;
            x->pos0 = (uint64_t)row0 * row_bytes;
            x->valid = (uint64_t)valid * row_bytes;
            if (found) st = decode_chunk(a, d, n, (size_t)c0 * row_bytes, what, rows_next, x);
            else {
                span o;
                for (size_t done = 0; done < x->valid && st == PI0_OK; done += o.n)
                    if ((st = rows_next(x, done, &o)) == PI0_OK) fill_elems(a, o.p, (int64_t)(o.n / esz));
            }
            if (st == PI0_OK) st = flush(x, x->pos0 + x->valid);
        }
        free(x);
        return st;
    }
    /* any other chunk grid: assemble the whole array, then hand it out block by block */
    size_t total = (size_t)zarr_numel(&g) * esz, cbytes = esz;
    for (int i = 0; i < g.ndim; i++) cbytes *= (size_t)g.chunks[i];
    uint8_t *all = pi0_malloc(total, "a zarr array"), *chunk = pi0_malloc(cbytes, "a zarr chunk");
    if (!all || !chunk) { free(all); free(chunk); return PI0_ERR_NOMEM; }
    int64_t grid[ZARR_MAX_DIMS];
    for (int i = 0; i < g.ndim; i++) grid[i] = (g.shape[i] + g.chunks[i] - 1) / g.chunks[i];
    for (;;) {
        if ((st = get_chunk(a, s, name, label, idx, &d, &n, &found, what, sizeof what)) != PI0_OK) break;
        if (found) { if ((st = decode_chunk(a, d, n, cbytes, what, whole_next, chunk)) != PI0_OK) break; }
        else fill_elems(a, chunk, (int64_t)(cbytes / esz));
        /* copy the chunk's valid region, one innermost run at a time */
        int64_t ext[ZARR_MAX_DIMS], in[ZARR_MAX_DIMS] = {0};
        for (int i = 0; i < g.ndim; i++) {
            int64_t lo = idx[i] * g.chunks[i];
            ext[i] = g.shape[i] - lo < g.chunks[i] ? g.shape[i] - lo : g.chunks[i];
        }
        const int last = g.ndim - 1;
        for (;;) {
            int64_t src = 0, dst = 0;
            for (int i = 0; i < g.ndim; i++) {
                src = src * g.chunks[i] + in[i];
                dst = dst * g.shape[i] + idx[i] * g.chunks[i] + in[i];
            }
            memcpy(all + (size_t)dst * esz, chunk + (size_t)src * esz, (size_t)ext[last] * esz);
            int k = last - 1;
            while (k >= 0 && ++in[k] == ext[k]) in[k--] = 0;
            if (k < 0) break;
        }
        int k = last;
        while (k >= 0 && ++idx[k] == grid[k]) idx[k--] = 0;
        if (k < 0) break;
    }
    size_t block_bytes = row_bytes * (size_t)block_rows;
    for (int64_t b = 0; st == PI0_OK && b < g.shape[0] / block_rows; b++) {
        memcpy(buf, all + (size_t)b * block_bytes, block_bytes);
        st = fn(user, b, buf);
    }
    free(all);
    free(chunk);
    return st;
}
