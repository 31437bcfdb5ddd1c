/* fast_tokenizer.c — the FAST action tokenizer's decoding (see fast_tokenizer.h, docs/fast.md): reads the processor's
 * tokenizer.json (fast_json.c: the vocabulary has a NUL key) and its processor_config.json (jansson), decodes FAST
 * ids like Hugging Face tokenizers' ByteLevel BPE, turns code points into DCT coefficients and those into actions,
 * and wraps it all in openpi's FASTTokenizer.extract_actions. Mirrors the processor's decode and openpi's
 * extract_actions step by step, zero fallbacks included; the prompt side is fast_prompt.c. */
#include "fast_tokenizer.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fast_json.h"
#include "util.h"

enum { MAX_IDS = 1 << 20, MAX_HA = 1 << 20 };

struct fast_tokenizer {
    fast_tokenizer_info info;
    uint8_t *bytes;       /* every token's bytes after the byte-level table, back to back */
    size_t *off;          /* (n_ids + 1) offsets into bytes; an id without a token has an empty range */
    uint8_t *known;       /* (n_ids) 1 where the vocabulary has the id */
};

const char *fast_outcome_str(fast_outcome o) {
    switch (o) {
    case FAST_DECODED: return "decoded";
    case FAST_NO_ACTION: return "no \"Action: \" in the generated text: zeros (as openpi)";
    case FAST_BAD_ID: return "a FAST id below 0 (one of PaliGemma's last 128 ids): zeros (as the FAST processor)";
    case FAST_BAD_SIZE: return "the FAST tokens hold a number of coefficients other than horizon x action_dim: zeros (as the FAST processor)";
    }
    return "unknown outcome";
}

/* ---- the byte-level table (GPT-2's, as tokenizers' ByteLevel builds it; docs/fast.md 2.4) ----
 * Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves; the other 68 bytes (0x00..0x20, 0x7F..0xA0,
 * 0xAD), in increasing order, are U+0100 + 0, 1, 2, ... The byte a character stands for, or -1. */
static int byte_of(uint32_t c) {
    if ((c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff)) return (int)c;
    if (c < 0x100 || c >= 0x100 + 68) return -1;
    uint32_t n = c - 0x100;
    return n < 33 ? (int)n : n < 67 ? (int)(0x7f + n - 33) : 0xad;
}

/* One code point of valid UTF-8 (the JSON reader checked the vocabulary). */
static size_t next_cp(const uint8_t *s, uint32_t *c) {
    if (s[0] < 0x80) { *c = s[0]; return 1; }
    size_t l = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : 2;
    *c = s[0] & (0x7f >> l);
    for (size_t k = 1; k < l; k++) *c = *c << 6 | (s[k] & 0x3fu);
    return l;
}

/* Rust's String::from_utf8_lossy, one step: the next character and the bytes it took, or U+FFFD for the longest
 * prefix of a valid sequence that the next byte (or the end) breaks, at least one byte. */
static size_t lossy_next(const uint8_t *s, size_t n, uint32_t *c) {
    uint8_t b = s[0];
    *c = 0xfffd;
    if (b < 0x80) { *c = b; return 1; }
    size_t w = b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
    if (!w) return 1;
    /* the second byte's range depends on the lead (no overlong forms, no surrogates, nothing past U+10FFFF) */
    uint8_t lo = b == 0xe0 ? 0xa0 : b == 0xf0 ? 0x90 : 0x80, hi = b == 0xed ? 0x9f : b == 0xf4 ? 0x8f : 0xbf;
    if (n < 2 || s[1] < lo || s[1] > hi) return 1;
    for (size_t k = 2; k < w; k++)
        if (n <= k || (s[k] & 0xc0) != 0x80) return k;
    next_cp(s, c);
    return w;
}

/* ---- loading ---- */

void fast_tokenizer_free(fast_tokenizer *f) {
    if (!f) return;
    free(f->bytes);
    free(f->off);
    free(f->known);
    free(f);
}

void fast_tokenizer_get_info(const fast_tokenizer *f, fast_tokenizer_info *info) { *info = f->info; }

/* A member's "type" string equal to want: PI0_OK; otherwise an error naming field, expected and found. */
static pi0_status want_type(const char *label, const fast_json *root, const char *field, const char *want) {
    const fast_json *o = fast_json_get(root, field), *t = fast_json_get(o, "type");
    if (!o || o->type != FAST_JSON_OBJECT)
        return pi0_fail(PI0_ERR_FORMAT, "%s: %s: expected an object with \"type\": \"%s\", found %s", label, field, want,
                        fast_json_type_name(o));
    if (!t || t->type != FAST_JSON_STRING)
        return pi0_fail(PI0_ERR_FORMAT, "%s: %s.type: expected a string (\"%s\"), found %s", label, field, want,
                        fast_json_type_name(t));
    if (strlen(want) != t->len || memcmp(t->s, want, t->len))
        return pi0_fail(PI0_ERR_UNSUPPORTED, "%s: %s.type is \"%.40s\", expected \"%s\" (the FAST processor's tokenizer: "
                        "tokenizers' ByteLevel BPE)", label, field, t->s, want);
    return PI0_OK;
}

static pi0_status parse_tokenizer_json(fast_tokenizer *f, const char *label, const char *text, size_t len) {
    fast_json *root = NULL;
    pi0_status st = fast_json_parse(&root, label, text, len);
    if (st != PI0_OK) return st;
    const fast_json *added = fast_json_get(root, "added_tokens"), *norm = fast_json_get(root, "normalizer"), *vocab;
    if (root->type != FAST_JSON_OBJECT) {
        st = pi0_fail(PI0_ERR_FORMAT, "%s: expected an object at the top, found %s", label, fast_json_type_name(root));
        goto done;
    }
    if ((st = want_type(label, root, "model", "BPE")) != PI0_OK || (st = want_type(label, root, "decoder", "ByteLevel")) != PI0_OK ||
        (st = want_type(label, root, "pre_tokenizer", "ByteLevel")) != PI0_OK)
        goto done;
    /* added tokens and a normalizer would change what ids decode to; the processor trains with neither */
    if (added && (added->type != FAST_JSON_ARRAY || added->n)) {
        st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: added_tokens: expected an empty list (the FAST processor adds no special "
                      "tokens), found %s%s", label, fast_json_type_name(added), added->type == FAST_JSON_ARRAY ? " that is not empty" : "");
        goto done;
    }
    if (norm && norm->type != FAST_JSON_NULL) {
        st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: normalizer: expected null (the FAST processor has none), found %s", label,
                      fast_json_type_name(norm));
        goto done;
    }
    vocab = fast_json_get(fast_json_get(root, "model"), "vocab");
    if (!vocab || vocab->type != FAST_JSON_OBJECT) {
        st = pi0_fail(PI0_ERR_FORMAT, "%s: model.vocab: expected an object {token: id}, found %s", label, fast_json_type_name(vocab));
        goto done;
    }
    /* ids first: the table's size is the largest id + 1 */
    size_t n_ids = 0, total = 0;
    for (size_t i = 0; i < vocab->n; i++) {
        int64_t id;
        const fast_json *k = &vocab->items[2 * i];
        if (!fast_json_int(&vocab->items[2 * i + 1], &id) || id < 0 || id >= MAX_IDS) {
            st = pi0_fail(PI0_ERR_FORMAT, "%s: model.vocab[\"%.40s\"]: expected an integer id in 0..%d, found %s%s%.40s", label,
                          k->s, MAX_IDS - 1, fast_json_type_name(&vocab->items[2 * i + 1]),
                          vocab->items[2 * i + 1].type == FAST_JSON_NUMBER ? " " : "",
                          vocab->items[2 * i + 1].type == FAST_JSON_NUMBER ? vocab->items[2 * i + 1].s : "");
            goto done;
        }
        if ((size_t)id + 1 > n_ids) n_ids = (size_t)id + 1;
        total += k->len;
    }
    f->info.n_ids = n_ids;
    f->off = calloc(n_ids + 1, sizeof *f->off);
    f->known = calloc(n_ids ? n_ids : 1, 1);
    f->bytes = malloc(total ? total : 1);
    size_t *src = malloc((n_ids ? n_ids : 1) * sizeof *src);   /* the vocab member of each id */
    if (!f->off || !f->known || !f->bytes || !src) {
        free(src);
        st = pi0_fail(PI0_ERR_NOMEM, "out of memory reading %s", label);
        goto done;
    }
    for (size_t i = 0; i < vocab->n; i++) {
        int64_t id;
        fast_json_int(&vocab->items[2 * i + 1], &id);
        if (f->known[id]) {
            st = pi0_fail(PI0_ERR_FORMAT, "%s: model.vocab: id %lld is given to both \"%.40s\" and \"%.40s\"", label,
                          (long long)id, vocab->items[2 * src[id]].s, vocab->items[2 * i].s);
            break;
        }
        f->known[id] = 1;
        src[id] = i;
    }
    /* each token's bytes: its characters through the byte-level table, or its own UTF-8 when one is not in it */
    for (size_t id = 0, m = 0; id < n_ids && st == PI0_OK; id++) {
        f->off[id] = m;
        if (!f->known[id]) continue;
        const fast_json *k = &vocab->items[2 * src[id]];
        const uint8_t *s = (const uint8_t *)k->s;
        size_t m0 = m;
        for (size_t j = 0; j < k->len;) {
            uint32_t c;
            j += next_cp(s + j, &c);
            int b = byte_of(c);
            if (b < 0) {
                memcpy(f->bytes + m0, s, k->len);
                m = m0 + k->len;
                break;
            }
            f->bytes[m++] = (uint8_t)b;
        }
        f->off[id + 1] = m;
    }
    free(src);
done:
    fast_json_free(root);
    return st;
}

/* An integer member or the processor's default when absent; PI0_ERR_FORMAT naming it otherwise. */
static pi0_status get_int(const char *label, json_t *root, const char *key, int64_t dflt, int64_t lo, int64_t hi, int null_ok,
                          int64_t *out) {
    json_t *v = json_object_get(root, key);
    *out = dflt;
    if (!v || (null_ok && json_is_null(v))) return PI0_OK;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        char found[64];
        if (json_is_integer(v)) snprintf(found, sizeof found, "%lld", (long long)json_integer_value(v));
        else if (json_is_real(v)) snprintf(found, sizeof found, "%g", json_real_value(v));
        else snprintf(found, sizeof found, "%s", json_is_string(v) ? "a string" : json_is_null(v) ? "null" : "another type");
        return pi0_fail(PI0_ERR_FORMAT, "%s: \"%s\": expected %san integer in %lld..%lld, found %s", label, key,
                        null_ok ? "null or " : "", (long long)lo, (long long)hi, found);
    }
    *out = json_integer_value(v);
    return PI0_OK;
}

/* The processor's parameters; absent ones take UniversalActionProcessor's defaults (scale 10, vocab_size 1024,
 * min_token 0, no horizon or dimension), as ProcessorMixin.from_pretrained passes only the keys it finds. */
static pi0_status parse_config(fast_tokenizer *f, const char *label, const char *text, size_t len) {
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return pi0_fail(PI0_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", label, jerr.line, jerr.column,
                        pi0_json_reason(jerr.text));
    pi0_status st = PI0_OK;
    json_t *cls = json_object_get(root, "processor_class"), *scale = json_object_get(root, "scale");
    int64_t h = 0, a = 0;
    if (!json_is_object(root)) st = pi0_fail(PI0_ERR_FORMAT, "%s: expected a JSON object", label);
    else if (cls && (!json_is_string(cls) || strcmp(json_string_value(cls), "UniversalActionProcessor")))
        st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: \"processor_class\" is %s%.60s%s, expected \"UniversalActionProcessor\" (the "
                      "FAST processor)", label, json_is_string(cls) ? "\"" : "", json_is_string(cls) ? json_string_value(cls) : "not a string",
                      json_is_string(cls) ? "\"" : "");
    else if (scale && (!json_is_number(scale) || !(json_number_value(scale) > 0) || !isfinite(json_number_value(scale))))
        st = pi0_fail(PI0_ERR_FORMAT, "%s: \"scale\": expected a number > 0, found %s", label,
                      json_is_number(scale) ? "one that is not" : "another type");
    if (st == PI0_OK) {
        f->info.scale = scale ? json_number_value(scale) : 10;
        /* min_token: far enough from the int64 limits that code point + min_token cannot overflow */
        st = get_int(label, root, "min_token", 0, -((int64_t)1 << 53), (int64_t)1 << 53, 0, &f->info.min_token);
    }
    if (st == PI0_OK) st = get_int(label, root, "vocab_size", 1024, 1, INT32_MAX, 0, &f->info.vocab_size);
    if (st == PI0_OK) st = get_int(label, root, "time_horizon", 0, 1, MAX_HA, 1, &h);
    if (st == PI0_OK) st = get_int(label, root, "action_dim", 0, 1, MAX_HA, 1, &a);
    f->info.time_horizon = (int)h;
    f->info.action_dim = (int)a;
    json_decref(root);
    return st;
}

pi0_status fast_tokenizer_parse(fast_tokenizer **out, const char *label, const char *tokenizer_json, size_t tlen,
                                const char *config_json, size_t clen) {
    *out = NULL;
    fast_tokenizer *f = calloc(1, sizeof *f);
    if (!f) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    char tl[1024], cl[1024];
    snprintf(tl, sizeof tl, "%s/tokenizer.json", label);
    snprintf(cl, sizeof cl, "%s/processor_config.json", label);
    pi0_status st = parse_tokenizer_json(f, tl, tokenizer_json, tlen);
    if (st == PI0_OK) st = parse_config(f, cl, config_json, clen);
    if (st != PI0_OK) {
        fast_tokenizer_free(f);
        return st;
    }
    *out = f;
    return PI0_OK;
}

/* tokenizer_config.json, when present: transformers' decode would tidy spaces before punctuation with
 * clean_up_tokenization_spaces, which changes the code points; the processor saves it false. */
static pi0_status check_tokenizer_config(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return PI0_OK;
    fclose(fp);
    size_t len;
    char *text = pi0_read_file(path, &len, 16u << 20);
    if (!text) return PI0_ERR_IO;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_DECODE_INT_AS_REAL, &jerr);   /* model_max_length is 1e30 */
    free(text);
    if (!root)
        return pi0_fail(PI0_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", path, jerr.line, jerr.column,
                        pi0_json_reason(jerr.text));
    json_t *c = json_object_get(root, "clean_up_tokenization_spaces");
    pi0_status st = c && !json_is_false(c) && !json_is_null(c)
        ? pi0_fail(PI0_ERR_UNSUPPORTED, "%s: \"clean_up_tokenization_spaces\" must be false (as the FAST processor saves "
                   "it): tidying spaces would change the decoded coefficients", path)
        : PI0_OK;
    json_decref(root);
    return st;
}

pi0_status fast_tokenizer_load(fast_tokenizer **out, const char *dir) {
    *out = NULL;
    if (!dir) return pi0_fail(PI0_ERR_ARG, "fast_tokenizer_load: NULL directory");
    char path[4096], cpath[4096];
    size_t tlen = 0, clen = 0;
    char *tj = NULL, *cj = NULL;
    pi0_status st = PI0_OK;
    if ((size_t)snprintf(path, sizeof path, "%s/tokenizer_config.json", dir) >= sizeof path)
        return pi0_fail(PI0_ERR_ARG, "directory name too long: %s", dir);
    if ((st = check_tokenizer_config(path)) != PI0_OK) return st;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    snprintf(cpath, sizeof cpath, "%s/processor_config.json", dir);
    FILE *fp = fopen(cpath, "rb");
    int have_config = fp != NULL;
    if (fp) fclose(fp);
    else snprintf(cpath, sizeof cpath, "%s/preprocessor_config.json", dir);
    if (!(tj = pi0_read_file(path, &tlen, 64u << 20)) || !(cj = pi0_read_file(cpath, &clen, 1u << 20))) {
        st = pi0_last_status();
        if (!have_config && tj) pi0_error_prefix("%s has neither processor_config.json nor preprocessor_config.json", dir);
        goto done;
    }
    fast_tokenizer *f = calloc(1, sizeof *f);
    if (!f) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    if ((st = parse_tokenizer_json(f, path, tj, tlen)) == PI0_OK) st = parse_config(f, cpath, cj, clen);
    if (st != PI0_OK) fast_tokenizer_free(f);
    else *out = f;
done:
    free(tj);
    free(cj);
    return st;
}

/* ---- decoding ---- */

pi0_status fast_tokenizer_decode(const fast_tokenizer *f, const int64_t *ids, size_t n, uint32_t *cps, size_t cap,
                                 size_t *n_cps) {
    *n_cps = 0;
    size_t nb = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] > UINT32_MAX)
            return pi0_fail(PI0_ERR_ARG, "FAST id %lld at position %zu is outside 0..2^32-1", (long long)ids[i], i);
        if ((uint64_t)ids[i] < f->info.n_ids) nb += f->off[ids[i] + 1] - f->off[ids[i]];
    }
    uint8_t *b = malloc(nb ? nb : 1);
    if (!b) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    size_t m = 0, k = 0;
    for (size_t i = 0; i < n; i++)   /* ids with no token are skipped, as Tokenizer.decode does */
        if ((uint64_t)ids[i] < f->info.n_ids) {
            size_t l = f->off[ids[i] + 1] - f->off[ids[i]];
            memcpy(b + m, f->bytes + f->off[ids[i]], l);
            m += l;
        }
    for (size_t i = 0; i < m; k++) {
        uint32_t c;
        i += lossy_next(b + i, m - i, &c);
        if (k < cap) cps[k] = c;
    }
    free(b);
    *n_cps = k;
    return PI0_OK;
}

/* scipy.fft.idct(x, type=2, norm="ortho") along H, which is the orthonormal DCT-III (docs/fast.md 2.5):
 *   y[t] = sqrt(1/H) x[0] + sqrt(2/H) sum_{k>=1} x[k] cos(pi k (2t + 1) / (2H)).
 * The angle's multiple k (2t + 1) is reduced mod 4H in integers first, so large H keeps full precision. */
static void idct_ortho(const double *x, int H, int A, double *y) {
    const double s0 = sqrt(1.0 / H), s1 = sqrt(2.0 / H);
    for (int t = 0; t < H; t++)
        for (int a = 0; a < A; a++) {
            double acc = s0 * x[a];
            for (int k = 1; k < H; k++) {
                long long r = (long long)k * (2 * t + 1) % (4LL * H);
                acc += s1 * x[(size_t)k * A + a] * cos(M_PI * (double)r / (2.0 * H));
            }
            y[(size_t)t * A + a] = acc;
        }
}

static pi0_status shape(const fast_tokenizer *f, int *h, int *a) {
    if (*h == 0) *h = f->info.time_horizon;
    if (*a == 0) *a = f->info.action_dim;
    if (*h < 1 || *a < 1 || (int64_t)*h * *a > MAX_HA)
        return pi0_fail(PI0_ERR_ARG, "horizon %d x action_dim %d: expected both >= 1 (0 takes the processor config's, "
                        "which has %d x %d) and at most %d values", *h, *a, f->info.time_horizon, f->info.action_dim, MAX_HA);
    return PI0_OK;
}

pi0_status fast_tokenizer_actions(const fast_tokenizer *f, const int64_t *ids, size_t n, int horizon, int action_dim,
                                  double *actions, fast_outcome *outcome) {
    pi0_status st = shape(f, &horizon, &action_dim);
    if (st != PI0_OK) return st;
    size_t ha = (size_t)horizon * action_dim, nc = 0;
    memset(actions, 0, ha * sizeof *actions);
    *outcome = FAST_BAD_ID;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] > UINT32_MAX) return PI0_OK;
    uint32_t *cps = malloc((ha + 1) * sizeof *cps);
    double *coef = malloc(ha * sizeof *coef);
    if (!cps || !coef) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    if ((st = fast_tokenizer_decode(f, ids, n, cps, ha + 1, &nc)) != PI0_OK) goto done;
    *outcome = FAST_BAD_SIZE;
    if (nc != ha) goto done;   /* the processor's reshape(-1, A) / shape assertion fails: zeros */
    *outcome = FAST_DECODED;
    for (size_t i = 0; i < ha; i++) coef[i] = (double)((int64_t)cps[i] + f->info.min_token) / f->info.scale;
    idct_ortho(coef, horizon, action_dim, actions);
done:
    free(cps);
    free(coef);
    return st;
}

/* Python's str.strip() on UTF-8 bytes (docs/fast.md 2.2): the range [*a, *b) without leading and trailing isspace() characters (all of
 * them are at most 3 bytes long; bytes that are not UTF-8 count as other characters). */
static void py_strip(const char *s, size_t len, size_t *a, size_t *b) {
    const uint8_t *u = (const uint8_t *)s;
    uint32_t c;
    *a = 0;
    *b = len;
    for (size_t l; *a < *b && (l = lossy_next(u + *a, *b - *a, &c)) && fast_py_isspace(c);) *a += l;
    for (int cut = 1; cut && *b > *a;) {
        cut = 0;
        for (size_t l = 1; l <= 3 && l <= *b - *a && !cut; l++)
            if (lossy_next(u + *b - l, l, &c) == l && fast_py_isspace(c)) { *b -= l; cut = 1; }
    }
}

static const char *find(const char *s, size_t n, const char *pat) {
    size_t l = strlen(pat);
    for (size_t i = 0; i + l <= n; i++)
        if (!memcmp(s + i, pat, l)) return s + i;
    return NULL;
}

pi0_status fast_tokenizer_extract_actions(const fast_tokenizer *f, const tokenizer *pg, const int32_t *tokens, size_t n,
                                          int horizon, int action_dim, double *actions, fast_outcome *outcome) {
    pi0_status st = shape(f, &horizon, &action_dim);
    if (st != PI0_OK) return st;
    memset(actions, 0, (size_t)horizon * action_dim * sizeof *actions);
    size_t len = 0, nid = 0;
    if ((st = tokenizer_decode(pg, tokens, n, NULL, 0, &len)) != PI0_OK) return st;
    char *text = malloc(len + 1);
    int32_t *pid = NULL;
    int64_t *fid = NULL;
    if (!text) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    if ((st = tokenizer_decode(pg, tokens, n, text, len, &len)) != PI0_OK) goto done;
    *outcome = FAST_NO_ACTION;
    const char *tag = find(text, len, "Action: ");
    if (!tag) goto done;
    /* decoded.split("Action: ")[1].split("|")[0].strip() */
    const char *seg = tag + 8, *end = find(seg, (size_t)(text + len - seg), "Action: ");
    size_t sl = (size_t)((end ? end : text + len) - seg), a, b;
    const char *bar = memchr(seg, '|', sl);
    if (bar) sl = (size_t)(bar - seg);
    py_strip(seg, sl, &a, &b);
    if ((st = tokenizer_encode(pg, seg + a, b - a, NULL, 0, &nid)) != PI0_OK) goto done;
    pid = malloc((nid ? nid : 1) * sizeof *pid);
    fid = malloc((nid ? nid : 1) * sizeof *fid);
    if (!pid || !fid) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    if ((st = tokenizer_encode(pg, seg + a, b - a, pid, nid, &nid)) != PI0_OK) goto done;
    for (size_t i = 0; i < nid; i++) fid[i] = fast_tokenizer_map_id(tokenizer_vocab_size(pg), pid[i]);
    st = fast_tokenizer_actions(f, fid, nid, horizon, action_dim, actions, outcome);
done:
    free(text);
    free(pid);
    free(fid);
    return st;
}
