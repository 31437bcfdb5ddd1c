/* fast_json.c — strict JSON reader (see fast_json.h): recursive descent over UTF-8 text checked up front, strings
 * decoded into fresh buffers (escapes, surrogate pairs), numbers kept as their literal, duplicate keys found by
 * sorting each object's keys. The grammar is RFC 8259's; nothing is extended (no comments, no NaN, no trailing
 * commas), as serde_json reads tokenizer.json. */
#include "fast_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

enum { MAX_DEPTH = 64 };

typedef struct {
    const char *t, *label;
    size_t n, i;
    int depth;
    pi0_status st;
} parser;

/* Records the first error with its line and column (characters, counted from 1). */
static int bad(parser *p, size_t at, const char *what) {
    if (p->st != PI0_OK) return 0;
    size_t line = 1, col = 1;
    for (size_t k = 0; k < at && k < p->n; k++) {
        if (p->t[k] == '\n') { line++; col = 1; }
        else if (((uint8_t)p->t[k] & 0xc0) != 0x80) col++;
    }
    p->st = pi0_fail(PI0_ERR_FORMAT, "%s: invalid JSON at line %zu column %zu: %s", p->label, line, col, what);
    return 0;
}

static int oom(parser *p) {
    if (p->st == PI0_OK) p->st = pi0_fail(PI0_ERR_NOMEM, "out of memory reading %s", p->label);
    return 0;
}

/* Length of the well-formed UTF-8 character at s (shortest form, no surrogates, at most U+10FFFF), or 0. */
static size_t utf8_char(const uint8_t *s, size_t n) {
    if (s[0] < 0x80) return 1;
    size_t l = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
    if (!l || l > n) return 0;
    for (size_t k = 1; k < l; k++)
        if ((s[k] & 0xc0) != 0x80) return 0;
    if (s[0] == 0xe0 && s[1] < 0xa0) return 0;   /* overlong */
    if (s[0] == 0xed && s[1] >= 0xa0) return 0;  /* surrogate */
    if (s[0] == 0xf0 && s[1] < 0x90) return 0;   /* overlong */
    if (s[0] == 0xf4 && s[1] >= 0x90) return 0;  /* above U+10FFFF */
    return l;
}

static void skip_ws(parser *p) {
    while (p->i < p->n && (p->t[p->i] == ' ' || p->t[p->i] == '\t' || p->t[p->i] == '\n' || p->t[p->i] == '\r')) p->i++;
}

static int hex4(parser *p, size_t at, uint32_t *v) {
    *v = 0;
    if (p->n - at < 4) return bad(p, at, "unexpected end of a \\u escape");
    for (int k = 0; k < 4; k++) {
        char c = p->t[at + k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return bad(p, at + k, "invalid hex digit in a \\u escape");
        *v = *v << 4 | (uint32_t)d;
    }
    return 1;
}

static size_t put_utf8(char *o, uint32_t c) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xc0 | c >> 6); o[1] = (char)(0x80 | (c & 0x3f)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xe0 | c >> 12); o[1] = (char)(0x80 | ((c >> 6) & 0x3f)); o[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | c >> 18); o[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3f)); o[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

/* A string at p->i (the opening quote). The decoded text is never longer than the source. */
static int parse_string(parser *p, fast_json *v) {
    size_t start = ++p->i, end = start;
    while (end < p->n && p->t[end] != '"') end += p->t[end] == '\\' && end + 1 < p->n ? 2 : 1;
    if (end >= p->n) return bad(p, start - 1, "unterminated string");
    char *o = malloc(end - start + 1);
    if (!o) return oom(p);
    size_t m = 0;
    while (p->i < end) {
        uint8_t c = (uint8_t)p->t[p->i];
        if (c < 0x20) { free(o); return bad(p, p->i, "control character in a string (escape it)"); }
        if (c != '\\') { o[m++] = (char)c; p->i++; continue; }
        char e = p->t[p->i + 1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            o[m++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            p->i += 2;
            continue;
        }
        if (e != 'u') { free(o); return bad(p, p->i, "invalid escape in a string"); }
        uint32_t u, lo;
        if (!hex4(p, p->i + 2, &u)) { free(o); return 0; }
        p->i += 6;
        if (u >= 0xdc00 && u <= 0xdfff) { free(o); return bad(p, p->i - 6, "lone trailing surrogate in a \\u escape"); }
        if (u >= 0xd800 && u <= 0xdbff) {
            if (p->i + 1 >= end || p->t[p->i] != '\\' || p->t[p->i + 1] != 'u') {
                free(o);
                return bad(p, p->i - 6, "lone leading surrogate in a \\u escape");
            }
            if (!hex4(p, p->i + 2, &lo)) { free(o); return 0; }
            if (lo < 0xdc00 || lo > 0xdfff) { free(o); return bad(p, p->i, "a leading surrogate not followed by a trailing one"); }
            p->i += 6;
            u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
        }
        m += put_utf8(o + m, u);
    }
    p->i = end + 1;
    o[m] = 0;
    v->type = FAST_JSON_STRING;
    v->s = o;
    v->len = m;
    return 1;
}

static int parse_number(parser *p, fast_json *v) {
    size_t s = p->i, i = p->i;
    if (i < p->n && p->t[i] == '-') i++;
    if (i < p->n && p->t[i] == '0') i++;
    else if (i < p->n && p->t[i] >= '1' && p->t[i] <= '9') while (i < p->n && p->t[i] >= '0' && p->t[i] <= '9') i++;
    else return bad(p, s, "expected a value");
    if (i < p->n && p->t[i] == '.') {
        if (++i >= p->n || p->t[i] < '0' || p->t[i] > '9') return bad(p, i, "expected a digit after '.'");
        while (i < p->n && p->t[i] >= '0' && p->t[i] <= '9') i++;
    }
    if (i < p->n && (p->t[i] == 'e' || p->t[i] == 'E')) {
        if (++i < p->n && (p->t[i] == '+' || p->t[i] == '-')) i++;
        if (i >= p->n || p->t[i] < '0' || p->t[i] > '9') return bad(p, i, "expected a digit in the exponent");
        while (i < p->n && p->t[i] >= '0' && p->t[i] <= '9') i++;
    }
    if (!(v->s = malloc(i - s + 1))) return oom(p);
    memcpy(v->s, p->t + s, i - s);
    v->s[i - s] = 0;
    v->len = i - s;
    v->type = FAST_JSON_NUMBER;
    p->i = i;
    return 1;
}

typedef struct {
    const char *s;
    size_t len;
} key_ref;

static int key_cmp(const void *a, const void *b) {
    const key_ref *x = a, *y = b;
    int c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static int parse_value(parser *p, fast_json *v);

/* An array or object at p->i: values (objects: key, value pairs) gathered in a growing buffer, then kept. */
static int parse_list(parser *p, fast_json *v, int object) {
    size_t open = p->i++, n = 0, cap = 0;
    fast_json *items = NULL;
    char close = object ? '}' : ']';
    if (++p->depth > MAX_DEPTH) return bad(p, open, "nested deeper than 64 levels");
    skip_ws(p);
    if (p->i < p->n && p->t[p->i] == close) p->i++;
    else for (;;) {
        if (n + 2 > cap) {
            cap = cap ? 2 * cap : 8;
            fast_json *ni = realloc(items, cap * sizeof *ni);
            if (!ni) { oom(p); break; }
            items = ni;
        }
        skip_ws(p);
        if (object) {
            if (p->i >= p->n || p->t[p->i] != '"') { bad(p, p->i, "expected a string key"); break; }
            memset(&items[n], 0, sizeof items[n]);
            if (!parse_string(p, &items[n++])) break;
            skip_ws(p);
            if (p->i >= p->n || p->t[p->i] != ':') { bad(p, p->i, "expected ':' after a key"); break; }
            p->i++;
            skip_ws(p);
        }
        memset(&items[n], 0, sizeof items[n]);
        if (!parse_value(p, &items[n++])) break;
        skip_ws(p);
        if (p->i < p->n && p->t[p->i] == ',') { p->i++; continue; }
        if (p->i < p->n && p->t[p->i] == close) { p->i++; break; }
        bad(p, p->i, object ? "expected ',' or '}'" : "expected ',' or ']'");
        break;
    }
    p->depth--;
    if (object && n % 2) memset(&items[n++], 0, sizeof *items);   /* a key whose value failed: an empty value */
    v->type = object ? FAST_JSON_OBJECT : FAST_JSON_ARRAY;
    v->items = items;
    v->n = object ? n / 2 : n;
    if (p->st != PI0_OK) return 0;
    if (object && v->n > 1) {   /* duplicate keys */
        key_ref *k = malloc(v->n * sizeof *k);
        if (!k) return oom(p);
        for (size_t j = 0; j < v->n; j++) k[j] = (key_ref){items[2 * j].s, items[2 * j].len};
        qsort(k, v->n, sizeof *k, key_cmp);
        for (size_t j = 1; j < v->n && p->st == PI0_OK; j++)
            if (!key_cmp(&k[j - 1], &k[j])) {
                char what[160];
                snprintf(what, sizeof what, "the object opened here has the key \"%.*s\" twice", (int)(k[j].len > 64 ? 64 : k[j].len), k[j].s);
                bad(p, open, what);
            }
        free(k);
    }
    return p->st == PI0_OK;
}

static int literal(parser *p, const char *word) {
    size_t l = strlen(word);
    if (p->n - p->i < l || memcmp(p->t + p->i, word, l)) return bad(p, p->i, "expected a value");
    p->i += l;
    return 1;
}

static int parse_value(parser *p, fast_json *v) {
    if (p->i >= p->n) return bad(p, p->i, "unexpected end of text");
    switch (p->t[p->i]) {
    case '{': return parse_list(p, v, 1);
    case '[': return parse_list(p, v, 0);
    case '"': return parse_string(p, v);
    case 't': v->type = FAST_JSON_BOOL; v->boolean = 1; return literal(p, "true");
    case 'f': v->type = FAST_JSON_BOOL; return literal(p, "false");
    case 'n': v->type = FAST_JSON_NULL; return literal(p, "null");
    default: return parse_number(p, v);
    }
}

static void free_tree(fast_json *v) {
    size_t n = v->type == FAST_JSON_OBJECT ? 2 * v->n : v->type == FAST_JSON_ARRAY ? v->n : 0;
    for (size_t i = 0; i < n; i++) free_tree(&v->items[i]);
    free(v->items);
    free(v->s);
}

void fast_json_free(fast_json *v) {
    if (!v) return;
    free_tree(v);
    free(v);
}

pi0_status fast_json_parse(fast_json **out, const char *label, const char *text, size_t len) {
    *out = NULL;
    parser p = {text, label, len, 0, 0, PI0_OK};
    for (size_t i = 0; i < len;) {   /* UTF-8 first, as a Rust String must be */
        size_t l = utf8_char((const uint8_t *)text + i, len - i);
        if (!l) { bad(&p, i, "not UTF-8"); return p.st; }
        i += l;
    }
    fast_json *v = calloc(1, sizeof *v);
    if (!v) return pi0_fail(PI0_ERR_NOMEM, "out of memory reading %s", label);
    skip_ws(&p);
    if (parse_value(&p, v)) {
        skip_ws(&p);
        if (p.i != len) bad(&p, p.i, "text after the value");
    }
    if (p.st != PI0_OK) {
        fast_json_free(v);
        return p.st;
    }
    *out = v;
    return PI0_OK;
}

const fast_json *fast_json_get(const fast_json *v, const char *key) {
    if (!v || v->type != FAST_JSON_OBJECT) return NULL;
    size_t l = strlen(key);
    for (size_t i = 0; i < v->n; i++)
        if (v->items[2 * i].len == l && !memcmp(v->items[2 * i].s, key, l)) return &v->items[2 * i + 1];
    return NULL;
}

int fast_json_int(const fast_json *v, int64_t *out) {
    if (!v || v->type != FAST_JSON_NUMBER || strpbrk(v->s, ".eE")) return 0;
    const char *s = v->s;
    int neg = *s == '-';
    uint64_t x = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (s += neg; *s; s++) {
        uint64_t d = (uint64_t)(*s - '0');
        if (x > (lim - d) / 10) return 0;
        x = 10 * x + d;
    }
    *out = neg ? (int64_t)(0 - x) : (int64_t)x;
    return 1;
}

const char *fast_json_type_name(const fast_json *v) {
    if (!v) return "missing";
    static const char *const names[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    return names[v->type];
}
