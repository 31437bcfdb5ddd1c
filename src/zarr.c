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
#include <zstd_errors.h>

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
    if (!r) return pi0_fail(PI0_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", label, jerr.line, jerr.column, pi0_json_reason(jerr.text));
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
    int64_t n = 1, c = 1;
    for (int i = 0; i < a->ndim; i++) {
        if ((a->shape[i] && n > ZARR_MAX_BYTES / a->shape[i]) || c > ZARR_MAX_BYTES / a->chunks[i]) {
            pi0_fail(st, "%s: shape or chunks too large", label);
            goto done;
        }
        n *= a->shape[i];
        c *= a->chunks[i];
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

#define ZARR_ZSTD_WINDOWLOG_MAX 27   /* zstd's own default limit for a streaming decoder: 128 MiB */

/* A pull reader over one stored chunk: zstd (streamed), raw, or absent (fill_value). Reads must add up to exactly
 * the chunk's decoded size; rd_close checks that the zstd frame ends there. */
typedef struct {
    ZSTD_DCtx *z;
    ZSTD_inBuffer in;
    const uint8_t *src;         /* the stored chunk, for zarr_store.release */
    size_t slen;
    const uint8_t *raw;
    int fill;
    size_t total, done, last;   /* last: ZSTD_decompressStream's last return (0: a frame just ended) */
    char what[1300];
} reader;

static pi0_status rd_open(reader *r, const zarr_array *a, const uint8_t *src, size_t slen, int found, size_t total) {
    r->z = NULL; r->raw = NULL; r->fill = !found; r->total = total; r->done = 0; r->last = 1;
    r->src = found ? src : NULL;
    r->slen = slen;
    if (!found) return PI0_OK;
    if (!a->zstd) {
        if (slen != total) return pi0_fail(PI0_ERR_FORMAT, "%s: %zu bytes, expected %zu (raw chunk)", r->what, slen, total);
        r->raw = src;
        return PI0_OK;
    }
    if (!(r->z = ZSTD_createDCtx())) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    /* zstd's default limit on the window a frame may declare, made explicit. A frame without a content size (what
     * the pinned tensorstore writes) declares its compression level's window whatever the chunk's size, so a tighter
     * limit taken from the chunk would refuse legitimate high-level frames. The decoder reserves the declared window
     * but writes only what it decodes, so 64 chunks decoded side by side reserve at most 8 GiB of address space and
     * use no more than the chunks themselves. */
    size_t e = ZSTD_DCtx_setParameter(r->z, ZSTD_d_windowLogMax, ZARR_ZSTD_WINDOWLOG_MAX);
    if (ZSTD_isError(e)) return pi0_fail(PI0_ERR_FORMAT, "%s: zstd: %s", r->what, ZSTD_getErrorName(e));
    r->in = (ZSTD_inBuffer){src, slen, 0};
    return PI0_OK;
}

static pi0_status rd_read(reader *r, const zarr_array *a, uint8_t *dst, size_t n) {
    PI0_ASSERT(r->done + n <= r->total);
    if (r->fill) fill_elems(a, dst, (int64_t)(n / pi0_dtype_size(a->dtype)));
    else if (r->raw) memcpy(dst, r->raw + r->done, n);
    else {
        ZSTD_outBuffer o = {dst, n, 0};
        while (o.pos < o.size) {
            size_t ip = r->in.pos, op = o.pos, ret = r->last = ZSTD_decompressStream(r->z, &o, &r->in);
            if (ZSTD_isError(ret) && ZSTD_getErrorCode(ret) == ZSTD_error_frameParameter_windowTooLarge)
                return pi0_fail(PI0_ERR_FORMAT, "%s: the zstd frame asks for a window larger than %zu bytes (the most this reader "
                                "allows), for a chunk of %zu bytes", r->what, (size_t)1 << ZARR_ZSTD_WINDOWLOG_MAX, r->total);
            if (ZSTD_isError(ret)) return pi0_fail(PI0_ERR_FORMAT, "%s: zstd: %s", r->what, ZSTD_getErrorName(ret));
            if (o.pos == op && r->in.pos == ip)
                return pi0_fail(PI0_ERR_FORMAT, "%s: decodes to %zu bytes, expected %zu (truncated?)", r->what, r->done + o.pos, r->total);
        }
    }
    r->done += n;
    return PI0_OK;
}

static pi0_status rd_skip(reader *r, const zarr_array *a, size_t n) {   /* edge-chunk padding */
    uint8_t sink[1 << 14];
    pi0_status st = PI0_OK;
    for (size_t k; n && st == PI0_OK; n -= k) st = rd_read(r, a, sink, (k = n < sizeof sink ? n : sizeof sink));
    return st;
}

static pi0_status rd_close(reader *r, pi0_status st) {
    if (r->z && st == PI0_OK) {   /* the frame must end exactly at the chunk's size */
        uint8_t extra;
        ZSTD_outBuffer ob = {&extra, 1, 0};
        size_t ret = r->last ? ZSTD_decompressStream(r->z, &ob, &r->in) : 0;   /* e.g. the checksum still to read */
        if (ZSTD_isError(ret)) st = pi0_fail(PI0_ERR_FORMAT, "%s: zstd: %s", r->what, ZSTD_getErrorName(ret));
        else if (ob.pos) st = pi0_fail(PI0_ERR_FORMAT, "%s: decodes to more than the %zu bytes expected", r->what, r->total);
        else if (ret != 0) st = pi0_fail(PI0_ERR_FORMAT, "%s: zstd frame truncated", r->what);
        else if (r->in.pos != r->in.size) st = pi0_fail(PI0_ERR_FORMAT, "%s: %zu bytes after the zstd frame", r->what, r->in.size - r->in.pos);
    }
    ZSTD_freeDCtx(r->z);
    r->z = NULL;
    return st;
}

static void chunk_key(const zarr_array *a, const char *name, const int64_t *idx, char *key, size_t n) {
    size_t k = (size_t)snprintf(key, n, "%s/", name);
    if (!a->ndim) { snprintf(key + k, n - k, "0"); return; }
    for (int i = 0; i < a->ndim && k < n; i++)
        k += (size_t)snprintf(key + k, n - k, "%s%lld", i ? (a->sep == '/' ? "/" : ".") : "", (long long)idx[i]);
}

#define ZARR_MAX_INNER 64   /* chunks across the non-leading axes, decoded side by side */

pi0_status zarr_read(const zarr_array *a, const zarr_store *s, const char *name, const char *label,
                     int64_t block_rows, void *buf, zarr_block_fn fn, void *user) {
    zarr_array g = *a;   /* a scalar is one row of one element */
    if (!g.ndim) { g.ndim = 1; g.shape[0] = g.chunks[0] = 1; }
    PI0_ASSERT(block_rows > 0 && g.shape[0] % block_rows == 0);
    if (zarr_numel(&g) == 0) return PI0_OK;
    const size_t esz = pi0_dtype_size(a->dtype);
    const int nd = g.ndim;
    int64_t grid[ZARR_MAX_DIMS], K = 1;
    size_t row_bytes = esz, crow_bytes = esz;   /* one leading-axis row of the array / of a chunk */
    int direct = 1;                             /* chunk rows are whole array rows */
    for (int i = 0; i < nd; i++) {
        grid[i] = (g.shape[i] + g.chunks[i] - 1) / g.chunks[i];
        if (i == 0) continue;
        K *= grid[i];
        row_bytes *= (size_t)g.shape[i];
        crow_bytes *= (size_t)g.chunks[i];
        direct &= g.chunks[i] == g.shape[i];
    }
    if (K > ZARR_MAX_INNER)
        return pi0_fail(PI0_ERR_UNSUPPORTED, "%s: %s: %lld chunks across the inner axes (at most %d supported)", label, name,
                        (long long)K, ZARR_MAX_INNER);
    reader *rd = calloc((size_t)K, sizeof *rd);
    uint8_t *tmp = direct ? NULL : malloc(crow_bytes);
    if (!rd || (!direct && !tmp)) { free(rd); free(tmp); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    pi0_status st = PI0_OK;
    const int64_t c0 = g.chunks[0];
    for (int64_t j0 = 0; j0 < grid[0] && st == PI0_OK; j0++) {
        int64_t idx[ZARR_MAX_DIMS] = {j0}, opened = 0;
        for (int64_t k = 0; k < K && st == PI0_OK; k++, opened++) {   /* inner chunk k: idx[1..] in C order */
            for (int i = nd - 1, q = (int)k; i >= 1; q /= (int)grid[i], i--) idx[i] = q % grid[i];
            char key[1200];
            chunk_key(a, name, idx, key, sizeof key);
            snprintf(rd[k].what, sizeof rd[k].what, "%s: chunk %s", label, key);
            const uint8_t *d = NULL;
            size_t n = 0;
            int found = 0;
            if ((st = s->get(s->user, key, &d, &n, &found)) != PI0_OK) break;
            if (!found && !a->has_fill) { st = pi0_fail(PI0_ERR_FORMAT, "%s: missing, and the array has no fill_value", rd[k].what); break; }
            st = rd_open(&rd[k], a, d, n, found, (size_t)c0 * crow_bytes);
        }
        const int64_t rows = g.shape[0] - j0 * c0 < c0 ? g.shape[0] - j0 * c0 : c0;
        for (int64_t r = 0, take; r < rows && st == PI0_OK; r += take) {
            const int64_t row = j0 * c0 + r, in_block = row % block_rows;
            uint8_t *dst = (uint8_t *)buf + (size_t)in_block * row_bytes;
            if (direct) {   /* as many rows as the block still takes, in one read */
                take = rows - r < block_rows - in_block ? rows - r : block_rows - in_block;
                st = rd_read(&rd[0], a, dst, (size_t)take * row_bytes);
            } else {        /* one row: each inner chunk's slice of it, copied into place run by run */
                take = 1;
                for (int64_t k = 0; k < K && st == PI0_OK; k++) {
                    if ((st = rd_read(&rd[k], a, tmp, crow_bytes)) != PI0_OK) break;
                    int64_t ci[ZARR_MAX_DIMS], ext[ZARR_MAX_DIMS], in[ZARR_MAX_DIMS] = {0};
                    for (int i = nd - 1, q = (int)k; i >= 1; q /= (int)grid[i], i--) {
                        ci[i] = q % grid[i];
                        ext[i] = g.shape[i] - ci[i] * g.chunks[i] < g.chunks[i] ? g.shape[i] - ci[i] * g.chunks[i] : g.chunks[i];
                    }
                    for (;;) {
                        int64_t so = 0, dof = 0;
                        for (int i = 1; i < nd; i++) {
                            so = so * g.chunks[i] + in[i];
                            dof = dof * g.shape[i] + ci[i] * g.chunks[i] + in[i];
                        }
                        memcpy(dst + (size_t)dof * esz, tmp + (size_t)so * esz, (size_t)ext[nd - 1] * esz);
                        int i = nd - 2;
                        while (i >= 1 && ++in[i] == ext[i]) in[i--] = 0;
                        if (i < 1) break;
                    }
                }
            }
            if (st == PI0_OK && (row + take) % block_rows == 0) st = fn(user, (row + take) / block_rows - 1, buf);
        }
        for (int64_t k = 0; k < opened; k++) {   /* padding rows of the last chunk row, then the frame end */
            if (st == PI0_OK && rows < c0) st = rd_skip(&rd[k], a, (size_t)(c0 - rows) * crow_bytes);
            st = rd_close(&rd[k], st);
            if (rd[k].src && s->release) s->release(s->user, rd[k].src, rd[k].slen);
        }
    }
    free(rd);
    free(tmp);
    return st;
}
