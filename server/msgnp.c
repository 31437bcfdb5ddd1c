/* msgnp.c — openpi's msgpack-numpy requests decoded (see msgnp.h; docs/protocol.md 4), and the UTF-8 helpers the
 * server's messages share; replies and metadata are encoded by msgnp_encode.c. Decoding runs in two passes.
 * scan() walks the raw bytes once without allocating: every container must claim no more items than bytes remain,
 * nesting and the object count are bounded, nothing may trail. Only then does msgpack-c build its object tree, so a
 * 5-byte "array of 2^32 items" cannot make it allocate 100 GB. The tree walk (walk_map) turns numpy maps into
 * pi0_arrays that point into the message (zero copy) unless the data is big-endian or misaligned for its element
 * type. */
#include "msgnp.h"

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "msgnp.c assumes a little-endian host (numpy '<' data is used in place)"
#endif

static pi0_status fail(char *err, size_t errlen, pi0_status st, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* ---- pass 1: structural scan of the raw msgpack bytes ---- */

static uint64_t be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

/* Checks that buf holds exactly one msgpack object within the limits. */
static pi0_status scan(const uint8_t *buf, size_t len, size_t max_objects, char *err, size_t errlen) {
    uint64_t todo[MSGNP_MAX_DEPTH + 1]; /* items still to read at each open nesting level */
    int depth = 0;
    size_t pos = 0, objects = 0;
    todo[0] = 1;
    while (depth >= 0) {
        if (todo[depth] == 0) { depth--; continue; }
        todo[depth]--;
        if (pos >= len) return fail(err, errlen, PI0_ERR_FORMAT, "truncated msgpack: message ends at byte %zu", len);
        if (++objects > max_objects)
            return fail(err, errlen, PI0_ERR_FORMAT, "msgpack message has more than %zu objects", max_objects);
        uint8_t b = buf[pos++];
        uint64_t skip = 0, items = 0; /* payload bytes to skip; items of a container */
        int hdr = 0, container = 0;   /* length-field bytes; 1 = array, 2 = map */
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
        } else if ((b & 0xf0) == 0x80) { container = 2; items = b & 0x0f;
        } else if ((b & 0xf0) == 0x90) { container = 1; items = b & 0x0f;
        } else if ((b & 0xe0) == 0xa0) { skip = b & 0x1f;
        } else {
            switch (b) {
            case 0xc4: case 0xd9: hdr = 1; break;           /* bin8, str8 */
            case 0xc5: case 0xda: hdr = 2; break;           /* bin16, str16 */
            case 0xc6: case 0xdb: hdr = 4; break;           /* bin32, str32 */
            case 0xc7: hdr = 1; skip = 1; break;            /* ext8: length, type */
            case 0xc8: hdr = 2; skip = 1; break;
            case 0xc9: hdr = 4; skip = 1; break;
            case 0xca: case 0xce: case 0xd2: skip = 4; break;
            case 0xcb: case 0xcf: case 0xd3: skip = 8; break;
            case 0xcc: case 0xd0: skip = 1; break;
            case 0xcd: case 0xd1: skip = 2; break;
            case 0xd4: skip = 2; break;                     /* fixext1..16: type + data */
            case 0xd5: skip = 3; break;
            case 0xd6: skip = 5; break;
            case 0xd7: skip = 9; break;
            case 0xd8: skip = 17; break;
            case 0xdc: hdr = 2; container = 1; break;
            case 0xdd: hdr = 4; container = 1; break;
            case 0xde: hdr = 2; container = 2; break;
            case 0xdf: hdr = 4; container = 2; break;
            default:
                return fail(err, errlen, PI0_ERR_FORMAT, "invalid msgpack type byte 0x%02x at byte %zu", b, pos - 1);
            }
        }
        if (hdr) {
            if (len - pos < (size_t)hdr)
                return fail(err, errlen, PI0_ERR_FORMAT, "truncated msgpack: length field at byte %zu", pos);
            uint64_t n = be(buf + pos, hdr);
            pos += hdr;
            if (container) items = n;
            else skip += n;
        }
        if (skip > len - pos)
            return fail(err, errlen, PI0_ERR_FORMAT, "truncated msgpack: %llu bytes claimed at byte %zu, %zu remain",
                        (unsigned long long)skip, pos, len - pos);
        pos += skip;
        if (container) {
            uint64_t need = items * container; /* items <= 2^32, no overflow */
            if (need > len - pos)
                return fail(err, errlen, PI0_ERR_FORMAT, "truncated msgpack: %s of %llu items at byte %zu, %zu bytes remain",
                            container == 2 ? "map" : "array", (unsigned long long)items, pos, len - pos);
            if (need) {
                if (depth + 1 >= MSGNP_MAX_DEPTH)
                    return fail(err, errlen, PI0_ERR_FORMAT, "msgpack nested deeper than %d levels", MSGNP_MAX_DEPTH);
                todo[++depth] = need;
            }
        }
    }
    if (pos != len)
        return fail(err, errlen, PI0_ERR_FORMAT, "%zu bytes of extra data after the msgpack object", len - pos);
    return PI0_OK;
}

/* ---- helpers on msgpack-c objects ---- */

static int is_text(const msgpack_object *o) {
    return o->type == MSGPACK_OBJECT_STR || o->type == MSGPACK_OBJECT_BIN;
}
static size_t text_len(const msgpack_object *o) {
    return o->type == MSGPACK_OBJECT_STR ? o->via.str.size : o->via.bin.size;
}
/* Never NULL (msgpack-c gives empty strings a NULL pointer). */
static const char *text_ptr(const msgpack_object *o) {
    const char *p = o->type == MSGPACK_OBJECT_STR ? o->via.str.ptr : o->via.bin.ptr;
    return p ? p : "";
}
static int text_eq(const msgpack_object *o, const char *s) {
    return is_text(o) && text_len(o) == strlen(s) && memcmp(text_ptr(o), s, text_len(o)) == 0;
}
/* The value of key `name` (str or bin key: openpi writes numpy keys as bin) in a map, or NULL. */
static const msgpack_object *map_get(const msgpack_object *m, const char *name) {
    for (uint32_t i = 0; i < m->via.map.size; i++)
        if (text_eq(&m->via.map.ptr[i].key, name)) return &m->via.map.ptr[i].val;
    return NULL;
}
/* Printable copy of a short string for messages (non-printable bytes as '?'). */
static const char *show(const char *s, size_t n, char *out, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 4 < cap; i++) out[k++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    if (n > 0 && k < n && k + 4 >= cap) { memcpy(out + k, "...", 3); k += 3; }
    out[k] = 0;
    return out;
}

/* Length (1-4) of the strict UTF-8 sequence at s (what Python's bytes.decode("utf-8") accepts: no overlongs,
 * surrogates or > U+10FFFF), or 0 when the bytes there are not one. */
size_t msgnp_utf8_seq(const uint8_t *s, size_t n) {
    if (!n) return 0;
    uint8_t c = s[0];
    int k;
    uint32_t cp, min;
    if (c < 0x80) return 1;
    if ((c & 0xe0) == 0xc0) { k = 1; cp = c & 0x1f; min = 0x80; }
    else if ((c & 0xf0) == 0xe0) { k = 2; cp = c & 0x0f; min = 0x800; }
    else if ((c & 0xf8) == 0xf0) { k = 3; cp = c & 0x07; min = 0x10000; }
    else return 0;
    if (n <= (size_t)k) return 0;
    for (int j = 1; j <= k; j++) {
        if ((s[j] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[j] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return (size_t)k + 1;
}

static int valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = msgnp_utf8_seq(s + i, n - i))) return 0;
    return 1;
}

size_t msgnp_escape(char *dst, size_t cap, const char *src) {
    const uint8_t *s = (const uint8_t *)src;
    size_t n = strlen(src), o = 0;
    for (size_t i = 0, k; i < n; i += k) {
        k = msgnp_utf8_seq(s + i, n - i);
        int raw = k > 1 || (k == 1 && s[i] >= 0x20 && s[i] != 0x7f);
        size_t need = raw ? k : 4;
        if (o + need + 1 > cap) break;
        if (raw) memcpy(dst + o, s + i, k);
        else snprintf(dst + o, 5, "\\x%02x", s[i]);
        o += need;
        if (!k) k = 1;
    }
    if (cap) dst[o] = 0;
    return o;
}

/* ---- numpy dtypes ---- */

typedef struct {
    char kind;     /* 'b', 'u', 'i', 'f', 'U' (numpy kind characters) */
    int size;      /* bytes per element (U: 4 per code point) */
    int swap;      /* big-endian data of a multi-byte type */
    pi0_dtype dt;  /* numeric kinds */
} np_dtype;

/* Parses numpy's dtype.str ("<f4", "|u1", ">i8", "<U12"); 0 = ok, -1 = not supported. */
static int parse_dtype(const msgpack_object *o, np_dtype *d) {
    if (!o || !is_text(o)) return -1;
    const char *s = text_ptr(o);
    size_t n = text_len(o), i = 0;
    char order = '=';
    if (n && strchr("<>|=", s[0])) order = s[i++];
    if (i >= n) return -1;
    d->kind = s[i++];
    if (i >= n || n - i > 6) return -1;
    long v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    static const struct { char kind; int size; pi0_dtype dt; } ok[] = {
        {'b', 1, PI0_DT_BOOL}, {'u', 1, PI0_DT_U8}, {'i', 4, PI0_DT_I32}, {'i', 8, PI0_DT_I64},
        {'f', 4, PI0_DT_F32}, {'f', 8, PI0_DT_F64},
    };
    if (d->kind == 'U') {
        if (v < 1 || v > 65536) return -1;
        d->size = (int)v * 4;
        d->swap = order == '>';
        d->dt = PI0_DT_COUNT;
        return 0;
    }
    for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++)
        if (ok[k].kind == d->kind && ok[k].size == v) {
            d->size = (int)v;
            d->dt = ok[k].dt;
            d->swap = order == '>' && v > 1;
            return 0;
        }
    return -1;
}

#define DTYPES_OK "|u1 |b1 <f4 <f8 <i4 <i8 (or '>' big-endian)"

#define MSGNP_MAX_SPAN (1ull << 40)   /* the most elements an empty array's non-zero dimensions may name */

/* "[2, 224, 224, 3]" into out (112 bytes hold 4 int64 dimensions). */
static const char *shape_str(int ndim, const int64_t *shape, char *out) {
    int k = sprintf(out, "[");
    for (int i = 0; i < ndim; i++) k += sprintf(out + k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    sprintf(out + k, "]");
    return out;
}

/* A numpy map ({__ndarray__, data, dtype, shape}) checked and described: data/bytes, dtype, shape. */
typedef struct {
    const uint8_t *data;
    size_t bytes;
    np_dtype dt;
    int ndim;
    int64_t shape[4];
    uint64_t count;
} np_array;

static pi0_status parse_ndarray(const msgpack_object *m, const char *key, np_array *a, char *err, size_t errlen) {
    const msgpack_object *data = map_get(m, "data"), *dtype = map_get(m, "dtype"), *shape = map_get(m, "shape");
    char tmp[40];
    if (!data || data->type != MSGPACK_OBJECT_BIN)
        return fail(err, errlen, PI0_ERR_FORMAT, "%s: numpy array without bin 'data'", key);
    if (!dtype || !is_text(dtype))
        return fail(err, errlen, PI0_ERR_FORMAT, "%s: numpy array without a str 'dtype'", key);
    if (parse_dtype(dtype, &a->dt) != 0)
        return fail(err, errlen, PI0_ERR_SHAPE, "%s: unsupported dtype '%s' (supported: " DTYPES_OK ")", key,
                    show(text_ptr(dtype), text_len(dtype), tmp, sizeof tmp));
    if (!shape || shape->type != MSGPACK_OBJECT_ARRAY)
        return fail(err, errlen, PI0_ERR_FORMAT, "%s: numpy array without an array 'shape'", key);
    if (shape->via.array.size > 4)
        return fail(err, errlen, PI0_ERR_SHAPE, "%s: %u dimensions, at most 4 are supported", key, shape->via.array.size);
    a->ndim = (int)shape->via.array.size;
    a->count = 1;
    int overflow = 0;
    uint64_t span = 1;   /* the product with zero dimensions taken as 1: what any part of the shape multiplies to */
    for (int i = 0; i < a->ndim; i++) {
        const msgpack_object *e = &shape->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER || e->via.u64 > (uint64_t)INT64_MAX)
            return fail(err, errlen, PI0_ERR_SHAPE, "%s: shape[%d] is not a non-negative integer", key, i);
        a->shape[i] = (int64_t)e->via.u64;
        overflow |= __builtin_mul_overflow(a->count, e->via.u64, &a->count);
        overflow |= __builtin_mul_overflow(span, e->via.u64 ? e->via.u64 : 1, &span);
    }
    /* an empty array (a zero dimension) may name any other sizes; its consumers multiply them in int64 */
    if (!overflow && a->count == 0 && span > MSGNP_MAX_SPAN) {
        char sh[112];
        return fail(err, errlen, PI0_ERR_SHAPE, "%s: shape %s: its non-zero dimensions multiply to %llu, more than %llu",
                    key, shape_str(a->ndim, a->shape, sh), (unsigned long long)span, (unsigned long long)MSGNP_MAX_SPAN);
    }
    uint64_t need;
    overflow |= __builtin_mul_overflow(a->count, (uint64_t)a->dt.size, &need);
    if (overflow || need != data->via.bin.size) {
        char sh[112];
        shape_str(a->ndim, a->shape, sh);
        if (overflow)
            return fail(err, errlen, PI0_ERR_SHAPE, "%s: shape %s overflows the array size", key, sh);
        return fail(err, errlen, PI0_ERR_SHAPE, "%s: shape %s of dtype '%s' needs %llu bytes, data has %u", key, sh,
                    show(text_ptr(dtype), text_len(dtype), tmp, sizeof tmp), (unsigned long long)need,
                    data->via.bin.size);
    }
    a->data = data->via.bin.size ? (const uint8_t *)data->via.bin.ptr : (const uint8_t *)""; /* never NULL */
    a->bytes = data->via.bin.size;
    return PI0_OK;
}

/* Element data usable in place, or a copy (big-endian -> native, or realigned). *copy gets what to free. */
static const void *native_data(const np_array *a, void **copy) {
    *copy = NULL;
    int sz = a->dt.size;
    if (!a->dt.swap && ((uintptr_t)a->data % sz) == 0) return a->data;
    uint8_t *c = malloc(a->bytes ? a->bytes : 1);
    if (!c) return NULL;
    if (a->dt.swap)
        for (size_t i = 0; i < a->bytes; i += sz)
            for (int j = 0; j < sz; j++) c[i + j] = a->data[i + sz - 1 - j];
    else
        memcpy(c, a->data, a->bytes);
    *copy = c;
    return c;
}

/* ---- pass 2: the observation ---- */

static pi0_status add_array(msgnp_request *r, const char *key, pi0_dtype dt, int ndim, const int64_t *shape,
                            const void *data, void *copy, char *err, size_t errlen) {
    for (int i = 0; i < r->obs.n_arrays; i++)
        if (strcmp(r->keys[i], key) == 0) {
            free(copy);
            return fail(err, errlen, PI0_ERR_FORMAT, "%s: duplicate key", key);
        }
    if (r->obs.n_arrays >= MSGNP_MAX_ARRAYS) {
        free(copy);
        return fail(err, errlen, PI0_ERR_FORMAT, "more than %d arrays in one observation", MSGNP_MAX_ARRAYS);
    }
    int i = r->obs.n_arrays++;
    snprintf(r->keys[i], MSGNP_MAX_KEY, "%s", key);
    pi0_array *a = &r->arrays[i];
    a->key = r->keys[i];
    a->dtype = dt;
    a->ndim = ndim;
    for (int d = 0; d < ndim; d++) a->shape[d] = shape[d];
    a->data = data;
    r->copies[i] = copy;
    return PI0_OK;
}

/* A 0-d array holding one value (msgpack scalars and numpy scalars). */
static pi0_status add_scalar(msgnp_request *r, const char *key, pi0_dtype dt, const msgpack_object *v, char *err,
                             size_t errlen) {
    double f = 0;
    int64_t i = 0;
    switch (v->type) {
    case MSGPACK_OBJECT_BOOLEAN: i = v->via.boolean; f = i; break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (v->via.u64 > (uint64_t)INT64_MAX) return fail(err, errlen, PI0_ERR_SHAPE, "%s: integer out of range", key);
        i = (int64_t)v->via.u64; f = (double)i; break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: i = v->via.i64; f = (double)i; break;
    case MSGPACK_OBJECT_FLOAT32: case MSGPACK_OBJECT_FLOAT64: f = v->via.f64; i = (int64_t)0; break;
    default: return fail(err, errlen, PI0_ERR_FORMAT, "%s: numpy scalar without a numeric 'data'", key);
    }
    int is_float = v->type == MSGPACK_OBJECT_FLOAT32 || v->type == MSGPACK_OBJECT_FLOAT64;
    if (dt == PI0_DT_COUNT) dt = is_float ? PI0_DT_F64 : v->type == MSGPACK_OBJECT_BOOLEAN ? PI0_DT_BOOL : PI0_DT_I64;
    if (is_float && dt != PI0_DT_F32 && dt != PI0_DT_F64)
        return fail(err, errlen, PI0_ERR_SHAPE, "%s: float value for an integer dtype", key);
    if (dt == PI0_DT_F32 && is_float && fabs(f) > FLT_MAX && isfinite(f))
        return fail(err, errlen, PI0_ERR_SHAPE, "%s: %g is out of the float32 range", key, f);
    void *c = malloc(8);
    if (!c) return fail(err, errlen, PI0_ERR_NOMEM, "out of memory");
    switch (dt) {
    case PI0_DT_F32: { float x = is_float ? (float)f : (float)i; memcpy(c, &x, 4); break; }
    case PI0_DT_F64: { double x = is_float ? f : (double)i; memcpy(c, &x, 8); break; }
    case PI0_DT_I32: { int32_t x = (int32_t)i; memcpy(c, &x, 4); break; }
    case PI0_DT_I64: memcpy(c, &i, 8); break;
    default: { uint8_t x = (uint8_t)i; memcpy(c, &x, 1); break; } /* U8, BOOL */
    }
    return add_array(r, key, dt, 0, NULL, c, c, err, errlen);
}

/* A flat list of numbers (a Python list sent instead of an array) -> 1-d float64. Other lists: NULL. */
static pi0_status add_list(msgnp_request *r, const char *key, const msgpack_object *v, char *err, size_t errlen) {
    uint32_t n = v->via.array.size;
    for (uint32_t k = 0; k < n; k++) {
        msgpack_object_type t = v->via.array.ptr[k].type;
        if (t != MSGPACK_OBJECT_POSITIVE_INTEGER && t != MSGPACK_OBJECT_NEGATIVE_INTEGER &&
            t != MSGPACK_OBJECT_FLOAT32 && t != MSGPACK_OBJECT_FLOAT64)
            return PI0_OK; /* not numeric: ignored like any key the policy does not read */
    }
    double *c = malloc(n ? n * sizeof(double) : 1);
    if (!c) return fail(err, errlen, PI0_ERR_NOMEM, "out of memory");
    for (uint32_t k = 0; k < n; k++) {
        const msgpack_object *e = &v->via.array.ptr[k];
        c[k] = e->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (double)e->via.u64
             : e->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? (double)e->via.i64 : e->via.f64;
    }
    int64_t shape[1] = {n};
    return add_array(r, key, PI0_DT_F64, 1, shape, c, c, err, errlen);
}

/* The prompt: str, bin (decoded as UTF-8, as openpi's DROID policy does) or a one-element numpy
 * unicode array (openpi's TokenizePrompt calls .item()). nil = no prompt. */
static pi0_status parse_prompt(msgnp_request *r, const msgpack_object *v, char *err, size_t errlen) {
    const uint8_t *s = NULL;
    size_t n = 0;
    char *out = NULL;
    if (v->type == MSGPACK_OBJECT_NIL) return PI0_OK;
    if (is_text(v)) {
        s = (const uint8_t *)text_ptr(v);
        n = text_len(v);
        if (!valid_utf8(s, n)) return fail(err, errlen, PI0_ERR_FORMAT, "prompt: invalid UTF-8");
        if (memchr(s, 0, n)) return fail(err, errlen, PI0_ERR_FORMAT, "prompt: contains a NUL character");
        out = malloc(n + 1);
        if (!out) return fail(err, errlen, PI0_ERR_NOMEM, "out of memory");
        memcpy(out, s, n);
        out[n] = 0;
    } else if (v->type == MSGPACK_OBJECT_MAP && map_get(v, "__ndarray__")) {
        np_array a;
        pi0_status st = parse_ndarray(v, "prompt", &a, err, errlen);
        if (st) return st;
        if (a.dt.kind != 'U' || a.count != 1)
            return fail(err, errlen, PI0_ERR_SHAPE, "prompt: expected a str or a one-element numpy unicode array");
        size_t chars = a.bytes / 4, k = 0;
        out = malloc(chars * 4 + 1);
        if (!out) return fail(err, errlen, PI0_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < chars; i++) {
            const uint8_t *p = a.data + 4 * i;
            uint32_t cp = a.dt.swap ? (uint32_t)be(p, 4) : (uint32_t)p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
            if (cp == 0) break; /* numpy pads with NULs and strips them */
            if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
                free(out);
                return fail(err, errlen, PI0_ERR_FORMAT, "prompt: invalid code point U+%X", cp);
            }
            if (cp < 0x80) out[k++] = (char)cp;
            else if (cp < 0x800) { out[k++] = (char)(0xc0 | cp >> 6); out[k++] = (char)(0x80 | (cp & 0x3f)); }
            else if (cp < 0x10000) {
                out[k++] = (char)(0xe0 | cp >> 12); out[k++] = (char)(0x80 | (cp >> 6 & 0x3f));
                out[k++] = (char)(0x80 | (cp & 0x3f));
            } else {
                out[k++] = (char)(0xf0 | cp >> 18); out[k++] = (char)(0x80 | (cp >> 12 & 0x3f));
                out[k++] = (char)(0x80 | (cp >> 6 & 0x3f)); out[k++] = (char)(0x80 | (cp & 0x3f));
            }
        }
        out[k] = 0;
    } else {
        return fail(err, errlen, PI0_ERR_FORMAT, "prompt: expected a str, found msgpack type %d", (int)v->type);
    }
    r->prompt = out;
    r->obs.prompt = out;
    return PI0_OK;
}

/* a numpy array of float32 / float64 [rows, cols] (rows in lo..hi) -> an owned float32 copy; every value finite */
static pi0_status float_rows(const msgpack_object *v, const char *what, int lo, int hi, int cols, float **outp, int *rows,
                             char *err, size_t errlen) {
    np_array a;
    if (v->type != MSGPACK_OBJECT_MAP || !map_get(v, "__ndarray__"))
        return fail(err, errlen, PI0_ERR_FORMAT, "%s: expected a numpy array", what);
    pi0_status st = parse_ndarray(v, what, &a, err, errlen);
    if (st) return st;
    if (a.dt.dt != PI0_DT_F32 && a.dt.dt != PI0_DT_F64)
        return fail(err, errlen, PI0_ERR_SHAPE, "%s: expected dtype <f4 or <f8", what);
    if (a.ndim != 2 || a.shape[0] < lo || a.shape[0] > hi || a.shape[1] != cols) {
        char sh[112], want[32];
        if (lo == hi) snprintf(want, sizeof want, "%d", lo);
        else snprintf(want, sizeof want, "%d..%d", lo, hi);
        return fail(err, errlen, PI0_ERR_SHAPE, "%s: expected shape [%s, %d], found %s", what, want, cols,
                    shape_str(a.ndim, a.shape, sh));
    }
    float *out = malloc((a.count ? a.count : 1) * sizeof(float));
    if (!out) return fail(err, errlen, PI0_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < a.count; i++) {
        uint8_t b[8];
        const uint8_t *p = a.data + i * a.dt.size;
        for (int j = 0; j < a.dt.size; j++) b[j] = a.dt.swap ? p[a.dt.size - 1 - j] : p[j];
        double d;
        if (a.dt.size == 4) { float f; memcpy(&f, b, 4); d = f; }
        else memcpy(&d, b, 8);
        if (!(fabs(d) <= FLT_MAX)) { /* NaN, infinite, or beyond float32 */
            free(out);
            return fail(err, errlen, PI0_ERR_SHAPE, "%s: element %llu is not a finite float32 value", what,
                        (unsigned long long)i);
        }
        out[i] = (float)d;
    }
    *outp = out;
    *rows = (int)a.shape[0];
    return PI0_OK;
}

/* noise [H, A] float32 or float64 -> an owned float32 copy. */
static pi0_status parse_noise(msgnp_request *r, const msgpack_object *v, const msgnp_limits *lim, char *err,
                              size_t errlen) {
    int rows;
    pi0_status st = float_rows(v, "noise", lim->noise_h, lim->noise_h, lim->noise_a, &r->noise, &rows, err, errlen);
    if (st == PI0_OK) r->obs.noise = r->noise;
    return st;
}

/* a non-negative integer of at most 4096 */
static int small_uint(const msgpack_object *v, int *out) {
    if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 > 4096) return 0;
    *out = (int)v->via.u64;
    return 1;
}

/* "rtc": {"executed", "inference_delay", "execution_horizon", "schedule", "max_guidance_weight", "prev_chunk", "mode"} */
static pi0_status parse_rtc(msgnp_request *r, const msgpack_object *v, const msgnp_limits *lim, char *err, size_t errlen) {
    if (v->type != MSGPACK_OBJECT_MAP) return fail(err, errlen, PI0_ERR_FORMAT, "rtc: expected a map");
    r->has_rtc = 1;
    r->rtc_executed = r->rtc_delay = r->rtc_horizon = r->rtc_schedule = r->rtc_mode = -1;
    char tmp[64];
    for (uint32_t i = 0; i < v->via.map.size; i++) {
        const msgpack_object *k = &v->via.map.ptr[i].key, *x = &v->via.map.ptr[i].val;
        if (!is_text(k)) return fail(err, errlen, PI0_ERR_FORMAT, "rtc: keys must be strings");
        const char *kn = show(text_ptr(k), text_len(k), tmp, sizeof tmp);
        if (!strcmp(kn, "executed") || !strcmp(kn, "inference_delay") || !strcmp(kn, "execution_horizon")) {
            int *dst = !strcmp(kn, "executed") ? &r->rtc_executed : !strcmp(kn, "inference_delay") ? &r->rtc_delay : &r->rtc_horizon;
            if (!small_uint(x, dst)) return fail(err, errlen, PI0_ERR_FORMAT, "rtc.%s: expected an integer 0..4096", kn);
        } else if (!strcmp(kn, "schedule")) {
            static const char *const names[] = {"zeros", "ones", "linear", "exp"};
            char sv[16] = "";
            if (is_text(x) && text_len(x) < sizeof sv)
                for (size_t j = 0; j < text_len(x); j++) sv[j] = (char)tolower((unsigned char)text_ptr(x)[j]);
            for (int j = 0; j < 4; j++) if (!strcmp(sv, names[j])) r->rtc_schedule = j;
            if (r->rtc_schedule < 0)
                return fail(err, errlen, PI0_ERR_FORMAT, "rtc.schedule: expected ZEROS, ONES, LINEAR or EXP (LeRobot's names)");
        } else if (!strcmp(kn, "mode")) {   /* the guidance's form: "exact" (the paper's) or "lerobot" */
            if (is_text(x) && text_len(x) == 5 && !memcmp(text_ptr(x), "exact", 5)) r->rtc_mode = PI0_RTC_EXACT;
            else if (is_text(x) && text_len(x) == 7 && !memcmp(text_ptr(x), "lerobot", 7)) r->rtc_mode = PI0_RTC_LEROBOT;
            else return fail(err, errlen, PI0_ERR_FORMAT, "rtc.mode: expected \"exact\" or \"lerobot\"");
        } else if (!strcmp(kn, "max_guidance_weight")) {
            double w = x->type == MSGPACK_OBJECT_FLOAT32 || x->type == MSGPACK_OBJECT_FLOAT64 ? x->via.f64
                     : x->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (double)x->via.u64 : -1;
            if (!(w > 0) || w > 1e30) return fail(err, errlen, PI0_ERR_FORMAT, "rtc.max_guidance_weight: expected a number > 0");
            r->rtc_max_weight = w;
        } else if (!strcmp(kn, "prev_chunk")) {
            if (r->rtc_prev) return fail(err, errlen, PI0_ERR_FORMAT, "rtc.prev_chunk: duplicate key");
            pi0_status st = float_rows(x, "rtc.prev_chunk", 0, lim->noise_h, lim->noise_a, &r->rtc_prev, &r->rtc_n_prev, err, errlen);
            if (st) return st;
        } else {
            return fail(err, errlen, PI0_ERR_FORMAT, "rtc: unknown key '%s' (expected executed, inference_delay, "
                        "execution_horizon, schedule, max_guidance_weight, prev_chunk, mode)", kn);
        }
    }
    return PI0_OK;
}

static pi0_status walk_map(msgnp_request *r, const msgpack_object *m, const char *prefix, int level,
                           const msgnp_limits *lim, char *err, size_t errlen) {
    char key[MSGNP_MAX_KEY], tmp[64];
    int seen_prompt = 0, seen_noise = 0; /* level 0 only; a second one would leak or silently win */
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object *k = &m->via.map.ptr[i].key, *v = &m->via.map.ptr[i].val;
        if (!is_text(k)) return fail(err, errlen, PI0_ERR_FORMAT, "%smap key of msgpack type %d: keys must be strings",
                                     prefix, (int)k->type);
        size_t pl = strlen(prefix), kl = text_len(k);
        if (memchr(text_ptr(k), 0, kl) || pl + kl >= MSGNP_MAX_KEY)
            return fail(err, errlen, PI0_ERR_FORMAT, "%skey '%s' is longer than %d bytes or holds a NUL", prefix,
                        show(text_ptr(k), kl, tmp, sizeof tmp), MSGNP_MAX_KEY - 1);
        memcpy(key, prefix, pl);
        memcpy(key + pl, text_ptr(k), kl);
        key[pl + kl] = 0;
        pi0_status st = PI0_OK;
        if (level == 0 && (strcmp(key, "prompt") == 0 || (lim->task_key && strcmp(key, lim->task_key) == 0))) {
            if (seen_prompt++)
                return fail(err, errlen, PI0_ERR_FORMAT, "%s: duplicate key%s", key,
                            lim->task_key ? " (the prompt comes as 'prompt' or as 'task', once)" : "");
            st = parse_prompt(r, v, err, errlen);
        } else if (level == 0 && strcmp(key, "noise") == 0) {
            if (seen_noise++) return fail(err, errlen, PI0_ERR_FORMAT, "noise: duplicate key");
            st = parse_noise(r, v, lim, err, errlen);
        } else if (level == 0 && strcmp(key, "rtc") == 0) {
            if (r->has_rtc) return fail(err, errlen, PI0_ERR_FORMAT, "rtc: duplicate key");
            st = parse_rtc(r, v, lim, err, errlen);
        } else if (v->type == MSGPACK_OBJECT_MAP && map_get(v, "__ndarray__")) {
            np_array a;
            st = parse_ndarray(v, key, &a, err, errlen);
            if (st) return st;
            if (a.dt.kind == 'U') continue; /* strings other than the prompt are not read by any policy */
            void *copy;
            const void *data = native_data(&a, &copy);
            if (!data) return fail(err, errlen, PI0_ERR_NOMEM, "out of memory");
            st = add_array(r, key, a.dt.dt, a.ndim, a.shape, data, copy, err, errlen);
        } else if (v->type == MSGPACK_OBJECT_MAP && map_get(v, "__npgeneric__")) {
            const msgpack_object *d = map_get(v, "data");
            np_dtype dt;
            if (!d) return fail(err, errlen, PI0_ERR_FORMAT, "%s: numpy scalar without 'data'", key);
            st = add_scalar(r, key, parse_dtype(map_get(v, "dtype"), &dt) == 0 && dt.kind != 'U' ? dt.dt : PI0_DT_COUNT,
                            d, err, errlen);
        } else if (v->type == MSGPACK_OBJECT_MAP) {
            if (level + 1 >= 8) return fail(err, errlen, PI0_ERR_FORMAT, "%s: maps nested deeper than 8 levels", key);
            if (pl + kl + 1 >= MSGNP_MAX_KEY)   /* the '/' before the inner keys must fit as well */
                return fail(err, errlen, PI0_ERR_FORMAT, "%s: key of a map is longer than %d bytes with its '/'",
                            show(key, pl + kl, tmp, sizeof tmp), MSGNP_MAX_KEY - 2);
            key[pl + kl] = '/';
            key[pl + kl + 1] = 0;
            st = walk_map(r, v, key, level + 1, lim, err, errlen);
        } else if (v->type == MSGPACK_OBJECT_FLOAT32 || v->type == MSGPACK_OBJECT_FLOAT64 ||
                   v->type == MSGPACK_OBJECT_POSITIVE_INTEGER || v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ||
                   v->type == MSGPACK_OBJECT_BOOLEAN) {
            st = add_scalar(r, key, PI0_DT_COUNT, v, err, errlen);
        } else if (v->type == MSGPACK_OBJECT_ARRAY) {
            st = add_list(r, key, v, err, errlen);
        }
        else if (r->n_unread < 4) {   /* str, bin, nil, ext under other keys: ignored as openpi ignores them */
            snprintf(r->unread[r->n_unread], MSGNP_MAX_KEY, "%s", key);
            r->unread_type[r->n_unread++] = v->type == MSGPACK_OBJECT_STR ? "str" : v->type == MSGPACK_OBJECT_BIN ? "bin"
                                          : v->type == MSGPACK_OBJECT_NIL ? "nil" : "msgpack ext";
        }
        if (st) return st;
    }
    return PI0_OK;
}

pi0_status msgnp_decode(const uint8_t *buf, size_t len, const msgnp_limits *lim, msgnp_request **out, char *err,
                        size_t errlen) {
    *out = NULL;
    if (err && errlen) err[0] = 0;
    size_t max_objects = lim->max_objects ? lim->max_objects : 65536;
    pi0_status st = scan(buf, len, max_objects, err, errlen);
    if (st) return st;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack_next(&up, (const char *)buf, len, &off);
    msgnp_request *r = NULL;
    if (ur != MSGPACK_UNPACK_SUCCESS || off != len) {
        st = fail(err, errlen, ur == MSGPACK_UNPACK_NOMEM_ERROR ? PI0_ERR_NOMEM : PI0_ERR_FORMAT,
                  "msgpack-c could not decode the message (%d)", (int)ur);
        goto fail;
    }
    if (up.data.type != MSGPACK_OBJECT_MAP) {
        st = fail(err, errlen, PI0_ERR_FORMAT, "expected a msgpack map (the observation), found msgpack type %d",
                  (int)up.data.type);
        goto fail;
    }
    r = calloc(1, sizeof *r);
    if (!r) { st = fail(err, errlen, PI0_ERR_NOMEM, "out of memory"); goto fail; }
    r->obs.arrays = r->arrays;
    const msgpack_object *bv = map_get(&up.data, "batch");
    if (bv) {   /* {"batch": [obs, ...]}: each element a request of its own */
        if (up.data.via.map.size != 1)
            { st = fail(err, errlen, PI0_ERR_FORMAT, "a batch request holds only the key 'batch'"); goto fail; }
        if (bv->type != MSGPACK_OBJECT_ARRAY || bv->via.array.size < 1 || bv->via.array.size > MSGNP_MAX_BATCH)
            { st = fail(err, errlen, PI0_ERR_FORMAT, "batch: expected a list of 1..%d observations", MSGNP_MAX_BATCH); goto fail; }
        r->batch = calloc(bv->via.array.size, sizeof *r->batch);
        r->batch_err = calloc(bv->via.array.size, sizeof *r->batch_err);
        if (!r->batch || !r->batch_err) { st = fail(err, errlen, PI0_ERR_NOMEM, "out of memory"); goto fail; }
        r->n_batch = (int)bv->via.array.size;
        for (int i = 0; i < r->n_batch; i++) {   /* an element that does not decode carries its reason */
            const msgpack_object *o = &bv->via.array.ptr[i];
            char eb[512];
            pi0_status es = PI0_OK;
            if (o->type != MSGPACK_OBJECT_MAP) es = fail(eb, sizeof eb, PI0_ERR_FORMAT, "expected a map (an observation)");
            else if (!(r->batch[i] = calloc(1, sizeof *r->batch[i]))) { st = fail(err, errlen, PI0_ERR_NOMEM, "out of memory"); goto fail; }
            else {
                r->batch[i]->obs.arrays = r->batch[i]->arrays;
                es = walk_map(r->batch[i], o, "", 0, lim, eb, sizeof eb);
            }
            if (es == PI0_ERR_NOMEM) { st = fail(err, errlen, PI0_ERR_NOMEM, "out of memory"); goto fail; }
            if (es) {
                msgnp_request_free(r->batch[i]);
                r->batch[i] = NULL;
                if (!(r->batch_err[i] = strdup(eb))) { st = fail(err, errlen, PI0_ERR_NOMEM, "out of memory"); goto fail; }
            }
        }
    } else if ((st = walk_map(r, &up.data, "", 0, lim, err, errlen))) {
        goto fail;
    }
    msgpack_unpacked_destroy(&up);
    *out = r;
    return PI0_OK;
fail:
    msgnp_request_free(r);
    msgpack_unpacked_destroy(&up);
    return st;
}

void msgnp_request_free(msgnp_request *r) {
    if (!r) return;
    for (int i = 0; i < r->obs.n_arrays; i++) free(r->copies[i]);
    free(r->prompt);
    free(r->noise);
    free(r->rtc_prev);
    for (int i = 0; i < r->n_batch; i++) {
        msgnp_request_free(r->batch[i]);
        if (r->batch_err) free(r->batch_err[i]);
    }
    free(r->batch);
    free(r->batch_err);
    free(r);
}
