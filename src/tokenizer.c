/* tokenizer.c — SentencePiece `.model` reader, BPE encoder and decoder (see tokenizer.h).
 * Encoding follows SentencePiece's bpe_model.cc: normalise, split into characters (user-defined pieces
 * matched first, longest prefix, and never merged), then repeatedly merge the adjacent pair whose
 * concatenation is a piece with the highest score (ties: leftmost), resegment UNUSED pieces into their
 * parts, and map pieces missing from the vocabulary to <0xXX> byte pieces (byte fallback) or <unk>. */
#include "tokenizer.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

enum { T_NORMAL = 1, T_UNKNOWN = 2, T_CONTROL = 3, T_USER = 4, T_UNUSED = 5, T_BYTE = 6 };
enum { MAX_PIECES = 1 << 20, MAX_PIECE_LEN = 1024, MAX_TEXT = 1 << 20 };

typedef struct {
    char *s;
    uint32_t len;
    float score;
    int type;
} piece;

struct pi0_tokenizer {
    piece *p;
    int n;
    int32_t *hash;          /* open addressing, piece index or -1 */
    uint32_t hmask;
    int unk, bos, eos, model_type, byte_fallback;
    int add_dummy_prefix, remove_extra_ws, escape_ws;
    int denormalizer;       /* the model carries a denormalizer charsmap: decoding would need it */
    char *unk_surface;      /* what decoding writes for <unk>: trainer_spec.unk_surface or SentencePiece's default */
    size_t unk_surface_len;
    int byte_id[256];
    int32_t *user;          /* USER_DEFINED piece indices, for prefix matching */
    int n_user;
    uint8_t user_first[256];
};

/* ---- protobuf wire format ---- */

typedef struct {
    const uint8_t *p, *end;
} rd;

static int varint(rd *r, uint64_t *v) {
    uint64_t x = 0;
    for (int sh = 0; sh < 64; sh += 7) {
        if (r->p >= r->end) return 0;
        uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80)) { *v = x; return 1; }
    }
    return 0;
}

/* Next field: number, wire type, and for length-delimited fields the payload; fixed/varint in *v. */
static int field(rd *r, uint32_t *num, int *wt, uint64_t *v, rd *sub) {
    uint64_t tag;
    if (!varint(r, &tag) || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) return 0;
    *num = (uint32_t)(tag >> 3);
    *wt = (int)(tag & 7);
    switch (*wt) {
    case 0: return varint(r, v);
    case 1: if (r->end - r->p < 8) return 0; memcpy(v, r->p, 8); r->p += 8; return 1;
    case 5: { if (r->end - r->p < 4) return 0; uint32_t u; memcpy(&u, r->p, 4); r->p += 4; *v = u; return 1; }
    case 2:
        if (!varint(r, v) || *v > (uint64_t)(r->end - r->p)) return 0;
        sub->p = r->p;
        sub->end = r->p + *v;
        r->p += *v;
        return 1;
    default: return 0;   /* groups (3, 4) and reserved types are not used by .model files */
    }
}

static uint32_t fnv(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

/* The byte of a BYTE piece: exactly "<0xHH>" with two upper-case hex digits, as SentencePiece names them; -1 for
 * anything else. Written out by hand: sscanf's %X takes a sign and leading spaces ("<0x-9>" read as 4294967287). */
static int byte_piece_value(const char *s, size_t n) {
    static const char hex[] = "0123456789ABCDEF";
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>' || !s[3] || !s[4]) return -1;
    const char *h = strchr(hex, s[3]), *l = strchr(hex, s[4]);
    return h && l ? (int)(h - hex) * 16 + (int)(l - hex) : -1;
}

static int lookup(const tokenizer *t, const char *s, size_t n) {
    for (uint32_t h = fnv(s, n) & t->hmask;; h = (h + 1) & t->hmask) {
        int32_t i = t->hash[h];
        if (i < 0) return -1;
        if (t->p[i].len == n && !memcmp(t->p[i].s, s, n)) return i;
    }
}

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) free(t->p[i].s);
    free(t->p);
    free(t->hash);
    free(t->user);
    free(t->unk_surface);
    free(t);
}

static pi0_status parse_piece(tokenizer *t, const char *label, rd m) {
    piece *pc = &t->p[t->n];
    memset(pc, 0, sizeof *pc);
    pc->type = T_NORMAL;
    uint32_t num;
    int wt;
    uint64_t v;
    rd sub;
    pi0_status st = PI0_OK;
    while (m.p < m.end && st == PI0_OK) {
        if (!field(&m, &num, &wt, &v, &sub)) {
            st = pi0_fail(PI0_ERR_FORMAT, "%s: piece %d: malformed protobuf field", label, t->n);
        } else if (num == 1 && wt == 2) {
            if (v == 0 || v > MAX_PIECE_LEN) {
                st = pi0_fail(PI0_ERR_FORMAT, "%s: piece %d: length %llu, expected 1..%d bytes", label, t->n,
                              (unsigned long long)v, MAX_PIECE_LEN);
                break;
            }
            free(pc->s);
            if (!(pc->s = malloc(v + 1))) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); break; }
            memcpy(pc->s, sub.p, v);
            pc->s[v] = 0;
            pc->len = (uint32_t)v;
        } else if (num == 2 && wt == 5) {
            uint32_t u = (uint32_t)v;
            memcpy(&pc->score, &u, 4);
        } else if (num == 3 && wt == 0) {
            if (v < 1 || v > 6)
                st = pi0_fail(PI0_ERR_FORMAT, "%s: piece %d: type %llu, expected 1..6", label, t->n, (unsigned long long)v);
            else pc->type = (int)v;
        }
    }
    if (st == PI0_OK && !pc->s) st = pi0_fail(PI0_ERR_FORMAT, "%s: piece %d has no text", label, t->n);
    if (st != PI0_OK) {   /* not counted in t->n: free what it holds here */
        free(pc->s);
        pc->s = NULL;
        return st;
    }
    t->n++;
    return PI0_OK;
}

/* SentencePiece's default for trainer_spec.unk_surface: " ⁇ " */
static const uint8_t UNK_SURFACE[] = " \xe2\x81\x87 ";

static pi0_status set_unk_surface(tokenizer *t, rd s) {
    size_t n = (size_t)(s.end - s.p);
    free(t->unk_surface);
    if (!(t->unk_surface = malloc(n + 1))) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    memcpy(t->unk_surface, s.p, n);
    t->unk_surface[n] = 0;
    t->unk_surface_len = n;
    return PI0_OK;
}

static int as_id(uint64_t v) { return (int)(int32_t)(uint32_t)v; }   /* int32 fields: negatives are 10-byte varints */

pi0_status tokenizer_parse(tokenizer **out, const char *label, const uint8_t *buf, size_t len) {
    *out = NULL;
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    t->unk = 0; t->bos = 1; t->eos = 2; t->model_type = 1;   /* SentencePiece's defaults */
    t->add_dummy_prefix = t->remove_extra_ws = t->escape_ws = 1;
    int cap = 0, have_trainer = 0;
    rd r = {buf, buf + len}, sub;
    uint32_t num;
    int wt;
    uint64_t v;
    pi0_status st = PI0_OK;
    char norm_name[64] = "";
    size_t charsmap = 0;
    while (r.p < r.end && st == PI0_OK) {
        if (!field(&r, &num, &wt, &v, &sub)) {
            st = pi0_fail(PI0_ERR_FORMAT, "%s: malformed protobuf at byte %zu (not a SentencePiece model?)", label,
                          (size_t)(r.p - buf));
            break;
        }
        if (num == 1 && wt == 2) {
            if (t->n == MAX_PIECES) { st = pi0_fail(PI0_ERR_FORMAT, "%s: more than %d pieces", label, MAX_PIECES); break; }
            if (t->n == cap) {
                cap = cap ? 2 * cap : 1024;
                piece *np = realloc(t->p, (size_t)cap * sizeof *np);
                if (!np) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); break; }
                t->p = np;
            }
            st = parse_piece(t, label, sub);
        } else if (num == 2 && wt == 2) {
            have_trainer = 1;
            while (sub.p < sub.end && st == PI0_OK) {
                rd s2;
                if (!field(&sub, &num, &wt, &v, &s2)) { st = pi0_fail(PI0_ERR_FORMAT, "%s: malformed trainer_spec", label); break; }
                if (num == 44 && wt == 2) { st = set_unk_surface(t, s2); continue; }
                if (wt != 0) continue;
                if (num == 3) t->model_type = (int)v;
                else if (num == 35) t->byte_fallback = v != 0;
                else if (num == 40) t->unk = as_id(v);
                else if (num == 41) t->bos = as_id(v);
                else if (num == 42) t->eos = as_id(v);
            }
        } else if (num == 3 && wt == 2) {
            while (sub.p < sub.end && st == PI0_OK) {
                rd s2;
                if (!field(&sub, &num, &wt, &v, &s2)) { st = pi0_fail(PI0_ERR_FORMAT, "%s: malformed normalizer_spec", label); break; }
                if (num == 1 && wt == 2) snprintf(norm_name, sizeof norm_name, "%.*s", (int)(v < 63 ? v : 63), (const char *)s2.p);
                else if (num == 2 && wt == 2) charsmap = (size_t)v;
                else if (num == 3 && wt == 0) t->add_dummy_prefix = v != 0;
                else if (num == 4 && wt == 0) t->remove_extra_ws = v != 0;
                else if (num == 5 && wt == 0) t->escape_ws = v != 0;
            }
        } else if (num == 5 && wt == 2) {   /* denormalizer_spec: SentencePiece applies it only with a charsmap */
            while (sub.p < sub.end && st == PI0_OK) {
                rd s2;
                if (!field(&sub, &num, &wt, &v, &s2)) { st = pi0_fail(PI0_ERR_FORMAT, "%s: malformed denormalizer_spec", label); break; }
                if (num == 2 && wt == 2 && v) t->denormalizer = 1;
            }
        }
    }
    if (st == PI0_OK && !t->unk_surface) st = set_unk_surface(t, (rd){UNK_SURFACE, UNK_SURFACE + sizeof UNK_SURFACE - 1});
    if (st == PI0_OK && t->n == 0) st = pi0_fail(PI0_ERR_FORMAT, "%s: no pieces (not a SentencePiece model?)", label);
    if (st == PI0_OK && have_trainer && t->model_type != 2)
        st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: model_type %d, only BPE (2) models are supported (PaliGemma's is BPE)",
                      label, t->model_type);
    if (st == PI0_OK && charsmap)
        st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: normalizer '%s' with a precompiled charsmap is not supported "
                      "(expected the identity normalizer of PaliGemma's tokenizer)", label, norm_name);
    if (st == PI0_OK && (t->unk < 0 || t->unk >= t->n || t->p[t->unk].type != T_UNKNOWN))
        st = pi0_fail(PI0_ERR_FORMAT, "%s: unk_id %d is not an UNKNOWN piece of the %d", label, t->unk, t->n);
    if (st == PI0_OK) {   /* hash table, byte pieces, user-defined pieces */
        uint32_t hc = 1;
        while (hc < 2u * (uint32_t)t->n) hc <<= 1;
        t->hmask = hc - 1;
        t->hash = malloc(hc * sizeof *t->hash);
        t->user = malloc((size_t)t->n * sizeof *t->user);
        if (!t->hash || !t->user) st = pi0_fail(PI0_ERR_NOMEM, "out of memory");
        else memset(t->hash, 0xff, hc * sizeof *t->hash);
        for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
        for (int i = 0; i < t->n && st == PI0_OK; i++) {
            piece *pc = &t->p[i];
            if (lookup(t, pc->s, pc->len) >= 0) {
                st = pi0_fail(PI0_ERR_FORMAT, "%s: piece %d '%s' is a duplicate", label, i, pc->s);
                break;
            }
            uint32_t h = fnv(pc->s, pc->len) & t->hmask;
            while (t->hash[h] >= 0) h = (h + 1) & t->hmask;
            t->hash[h] = i;
            if (pc->type == T_BYTE) {
                int bv = byte_piece_value(pc->s, pc->len);
                if (bv < 0) {
                    st = pi0_fail(PI0_ERR_FORMAT, "%s: byte piece %d '%.*s', expected <0xXX> with two upper-case hex "
                                  "digits", label, i, pc->len > 32 ? 32 : (int)pc->len, pc->s);
                    break;
                }
                t->byte_id[bv] = i;
            } else if (pc->type == T_USER) {
                t->user[t->n_user++] = i;
                t->user_first[(uint8_t)pc->s[0]] = 1;
            }
        }
    }
    if (st != PI0_OK) { tokenizer_free(t); return st; }
    *out = t;
    return PI0_OK;
}

pi0_status tokenizer_load(tokenizer **out, const char *path) {
    size_t len;
    char *buf = pi0_read_file(path, &len, 64u << 20);
    if (!buf) { *out = NULL; return PI0_ERR_IO; }
    pi0_status st = tokenizer_parse(out, path, (const uint8_t *)buf, len);
    free(buf);
    return st;
}

int tokenizer_vocab_size(const tokenizer *t) { return t->n; }
int tokenizer_bos_id(const tokenizer *t) { return t->bos; }
int tokenizer_eos_id(const tokenizer *t) { return t->eos; }

/* ---- encoding ---- */

typedef struct {
    uint32_t start, len;
    int prev, next, freeze;
    int left, right;          /* the two symbols merged into this one (-1: a character) */
} sym;

typedef struct {
    float score;
    int left, right;          /* symbol indices */
    uint32_t llen, rlen;      /* their lengths when pushed (stale entries are skipped) */
} pair;

static int pair_before(const pair *a, const pair *b) {   /* max-heap: higher score, then leftmost */
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(pair *h, size_t *n, pair x) {
    size_t i = (*n)++;
    while (i && pair_before(&x, &h[(i - 1) / 2])) { h[i] = h[(i - 1) / 2]; i = (i - 1) / 2; }
    h[i] = x;
}

static pair heap_pop(pair *h, size_t *n) {
    pair top = h[0], x = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && pair_before(&h[c + 1], &h[c])) c++;
        if (!pair_before(&h[c], &x)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = x;
    return top;
}

static int mergeable(int type) { return type == T_NORMAL || type == T_USER || type == T_UNUSED; }

static void try_pair(const tokenizer *t, const char *s, sym *y, int l, pair *h, size_t *nh) {
    int r = y[l].next;
    if (l < 0 || r < 0 || y[l].freeze || y[r].freeze) return;
    int id = lookup(t, s + y[l].start, y[l].len + y[r].len);
    if (id < 0 || !mergeable(t->p[id].type)) return;
    heap_push(h, nh, (pair){t->p[id].score, l, r, y[l].len, y[r].len});
}

static void emit(size_t *n, int32_t *ids, size_t cap, int32_t id) {
    if (*n < cap) ids[*n] = id;
    (*n)++;
}

/* Emits one final symbol: its id, its parts if UNUSED (left first, with an explicit stack: a hostile model can nest
 * merges as deep as the text is long), or its bytes (byte fallback) / <unk>. stk holds as many ints as symbols. */
static void emit_sym(const tokenizer *t, const char *s, const sym *y, int i, int32_t *ids, size_t cap, size_t *n, int *stk) {
    int top = 0;
    stk[top++] = i;
    while (top) {
        const int j = stk[--top];
        int id = lookup(t, s + y[j].start, y[j].len);
        if (id >= 0 && t->p[id].type == T_UNUSED && y[j].left >= 0) {
            stk[top++] = y[j].right;
            stk[top++] = y[j].left;
            continue;
        }
        if (id >= 0 && (t->p[id].type == T_NORMAL || t->p[id].type == T_USER)) { emit(n, ids, cap, id); continue; }
        if (t->byte_fallback) {
            for (uint32_t k = 0; k < y[j].len; k++) {
                int b = t->byte_id[(uint8_t)s[y[j].start + k]];
                emit(n, ids, cap, b >= 0 ? b : t->unk);
            }
            continue;
        }
        emit(n, ids, cap, t->unk);
    }
}

static int utf8_len(const uint8_t *s, size_t n) {
    int l = s[0] < 0x80 ? 1 : (s[0] >> 5) == 6 ? 2 : (s[0] >> 4) == 14 ? 3 : (s[0] >> 3) == 30 ? 4 : 1;
    if ((size_t)l > n) return 1;
    for (int i = 1; i < l; i++)
        if ((s[i] & 0xc0) != 0x80) return 1;
    return l;
}

pi0_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, int32_t *ids, size_t cap, size_t *n) {
    *n = 0;
    if (len > MAX_TEXT) return pi0_fail(PI0_ERR_ARG, "text of %zu bytes, at most %d are accepted", len, MAX_TEXT);
    /* normalise: optional whitespace cleanup and dummy prefix; spaces become U+2581 (3 bytes) */
    char *s = malloc(3 * len + 4);
    /* at most len + 1 characters; each merge adds two history slots and pushes at most two pairs */
    sym *y = malloc((3 * len + 6) * sizeof *y);
    pair *h = malloc((3 * len + 6) * sizeof *h);
    if (!s || !y || !h) { free(s); free(y); free(h); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    size_t m = 0, a = 0, b = len;
    if (t->remove_extra_ws) {
        while (a < b && text[a] == ' ') a++;
        while (b > a && text[b - 1] == ' ') b--;
    }
    if (t->add_dummy_prefix && a < b) { memcpy(s, "\xe2\x96\x81", 3); m = 3; }
    for (size_t i = a; i < b; i++) {
        if (text[i] == ' ' && t->remove_extra_ws && i > a && text[i - 1] == ' ') continue;
        if (text[i] == ' ' && t->escape_ws) { memcpy(s + m, "\xe2\x96\x81", 3); m += 3; }
        else s[m++] = text[i];
    }
    /* symbols: user-defined pieces (longest match) or single characters */
    int ns = 0;
    for (size_t i = 0; i < m;) {
        uint32_t l = 0;
        int freeze = 0;
        if (t->user_first[(uint8_t)s[i]])
            for (int u = 0; u < t->n_user; u++) {
                const piece *pc = &t->p[t->user[u]];
                if (pc->len > l && pc->len <= m - i && !memcmp(s + i, pc->s, pc->len)) { l = pc->len; freeze = 1; }
            }
        if (!l) l = (uint32_t)utf8_len((const uint8_t *)s + i, m - i);
        y[ns] = (sym){(uint32_t)i, l, ns - 1, -1, freeze, -1, -1};
        if (ns) y[ns - 1].next = ns;
        ns++;
        i += l;
    }
    size_t nh = 0;
    for (int i = 0; i + 1 < ns; i++) try_pair(t, s, y, i, h, &nh);
    while (nh) {
        pair p = heap_pop(h, &nh);
        sym *L = &y[p.left], *R = &y[p.right];
        if (L->len != p.llen || R->len != p.rlen || L->next != p.right || !R->len) continue;   /* stale */
        /* merge R into L; keep the parts for UNUSED resegmentation in two fresh slots */
        int kl = ns, kr = ns + 1;
        y[kl] = *L;
        y[kr] = *R;
        ns += 2;
        L->left = kl;
        L->right = kr;
        L->len += R->len;
        L->next = R->next;
        if (R->next >= 0) y[R->next].prev = p.left;
        R->len = 0;
        if (L->prev >= 0) try_pair(t, s, y, L->prev, h, &nh);
        try_pair(t, s, y, p.left, h, &nh);
    }
    /* the parts of a symbol form a binary tree over the ns slots: a stack of ns + 1 always holds the pending ones */
    int *stk = malloc(((size_t)ns + 1) * sizeof *stk);
    if (!stk) { free(s); free(y); free(h); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    for (int i = m ? 0 : -1; i >= 0; i = y[i].next) emit_sym(t, s, y, i, ids, cap, n, stk);
    free(stk);
    free(s);
    free(y);
    free(h);
    return PI0_OK;
}

/* ---- decoding (SentencePiece's Decode in sentencepiece_processor.cc) ---- */

typedef struct {
    char *buf;
    size_t cap, n;
} sink;

static void put(sink *o, const void *p, size_t n) {
    if (o->n < o->cap) memcpy(o->buf + o->n, p, n < o->cap - o->n ? n : o->cap - o->n);
    o->n += n;
}

/* One character of a byte-piece run as SentencePiece's DecodeUTF8 reads it: its length when the bytes start a
 * well-formed, shortest-form encoding of a scalar value, else 0 (the byte then stands alone as U+FFFD). */
static size_t utf8_valid_len(const uint8_t *s, size_t n) {
    if (s[0] < 0x80) return 1;
    uint32_t cp;
    size_t l;
    if ((s[0] & 0xe0) == 0xc0) { l = 2; cp = s[0] & 0x1fu; }
    else if ((s[0] & 0xf0) == 0xe0) { l = 3; cp = s[0] & 0x0fu; }
    else if ((s[0] & 0xf8) == 0xf0) { l = 4; cp = s[0] & 0x07u; }
    else return 0;
    if (l > n) return 0;
    for (size_t i = 1; i < l; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3fu);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[l] || (cp >= 0xd800 && cp < 0xe000) || cp > 0x10ffff) return 0;
    return l;
}

static void flush_bytes(sink *o, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t l = utf8_valid_len(b + i, n - i);
        if (l) put(o, b + i, l);
        else put(o, "\xef\xbf\xbd", 3);
        i += l ? l : 1;
    }
}

pi0_status tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, char *text, size_t cap, size_t *len) {
    *len = 0;
    if (t->denormalizer)
        return pi0_fail(PI0_ERR_UNSUPPORTED, "decoding with a denormalizer (denormalizer_spec with a charsmap) is not "
                        "supported; PaliGemma's tokenizer has none");
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->n)
            return pi0_fail(PI0_ERR_ARG, "id %d at position %zu is out of range (the model has %d pieces)", ids[i], i, t->n);
    uint8_t *bytes = malloc(n ? n : 1);   /* the pending run of byte pieces */
    if (!bytes) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    sink o = {text, text ? cap : 0, 0};
    size_t nb = 0;
    /* The leading U+2581 of the first text piece is dropped when the model adds a dummy prefix or removes extra
     * whitespace: only while nothing has been written yet and no earlier piece had one dropped (with
     * remove_extra_whitespaces, every such piece until text appears). */
    int bos_ws = 1, bos_ws_seen = 0;
    for (size_t i = 0; i < n; i++) {
        const piece *pc = &t->p[ids[i]];
        if (pc->type == T_BYTE) {
            bytes[nb++] = (uint8_t)byte_piece_value(pc->s, pc->len);
            continue;
        }
        flush_bytes(&o, bytes, nb);
        nb = 0;
        if (bos_ws_seen || o.n) bos_ws = 0;
        bos_ws_seen = 0;
        if (pc->type == T_CONTROL) continue;
        if (pc->type == T_UNKNOWN) { put(&o, t->unk_surface, t->unk_surface_len); continue; }
        const char *s = pc->s, *end = pc->s + pc->len;
        if (bos_ws && (t->add_dummy_prefix || t->remove_extra_ws) && end - s >= 3 && !memcmp(s, "\xe2\x96\x81", 3)) {
            s += 3;
            bos_ws_seen = !t->remove_extra_ws;
        }
        while (s < end) {
            if (end - s >= 3 && !memcmp(s, "\xe2\x96\x81", 3)) { put(&o, " ", 1); s += 3; }
            else put(&o, s++, 1);
        }
    }
    flush_bytes(&o, bytes, nb);
    free(bytes);
    *len = o.n;
    return PI0_OK;
}

/* ---- public API (pi0.h) ---- */

pi0_status pi0_tokenizer_load(pi0_tokenizer **out, const char *path) {
    if (!out || !path) return pi0_fail(PI0_ERR_ARG, "pi0_tokenizer_load: NULL argument");
    return tokenizer_load(out, path);
}

void pi0_tokenizer_free(pi0_tokenizer *t) { tokenizer_free(t); }

pi0_status pi0_tokenize(const pi0_tokenizer *t, const char *text, size_t len, int32_t *ids, size_t cap, size_t *n) {
    if (!t || (!text && len) || !n || (!ids && cap)) return pi0_fail(PI0_ERR_ARG, "pi0_tokenize: NULL argument");
    return tokenizer_encode(t, text, len, ids, cap, n);
}

/* ---- prompt formats (docs/model.md 3.5) ---- */

/* Python's str.strip() for ASCII whitespace, then '_' and '\n' -> ' ' (openpi's cleaning order). */
static size_t clean_prompt(char *dst, const char *src) {
    size_t a = 0, b = strlen(src), n = 0;
    while (a < b && strchr(" \t\n\r\v\f", src[a])) a++;
    while (b > a && strchr(" \t\n\r\v\f", src[b - 1])) b--;
    for (size_t i = a; i < b; i++) dst[n++] = src[i] == '_' || src[i] == '\n' ? ' ' : src[i];
    dst[n] = 0;
    return n;
}

int tokenizer_state_bin(double x) {
    int c = 0;
    for (int k = 0; k < 256; k++) c += x >= -1.0 + k / 128.0;
    return c - 1;
}

/* Appends the encoding of s to ids[*n ..], which holds cap ids in all: an error if it does not fit. */
static pi0_status encode_append(const tokenizer *t, const char *s, size_t len, int32_t *ids, size_t cap, size_t *n) {
    size_t k = 0;
    pi0_status st = tokenizer_encode(t, s, len, ids + *n, cap - *n, &k);
    if (st == PI0_OK && k > cap - *n)
        return pi0_fail(PI0_ERR_FORMAT, "the prompt encodes to more than %zu tokens (3 per byte)", cap);
    *n += k;
    return st;
}

pi0_status pi0_tokenize_prompt(const pi0_tokenizer *t, const char *prompt, pi0_prompt_format format,
                               const double *state, int n_state, int max_len, int32_t *tokens, uint8_t *mask,
                               int *n_valid) {
    if (!t || !prompt || !tokens || !mask || max_len < 1 || (format == PI0_PROMPT_PI05 && n_state && !state) ||
        n_state < 0 || n_state > 4096 || (format != PI0_PROMPT_PI0 && format != PI0_PROMPT_PI05 && format != PI0_PROMPT_RAW))
        return pi0_fail(PI0_ERR_ARG, "pi0_tokenize_prompt: bad argument");
    size_t plen = strlen(prompt);
    if (plen > MAX_TEXT) return pi0_fail(PI0_ERR_ARG, "prompt of %zu bytes, at most %d are accepted", plen, MAX_TEXT);
    char *text = malloc(plen + 32 + (size_t)n_state * 5 + 32);
    /* a byte becomes at most 3 ("\xe2\x96\x81" for a space), each at most one token (byte fallback or <unk>) */
    size_t cap = 3 * (plen + (size_t)n_state * 5 + 64) + 1, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    pi0_status st = PI0_OK;
    if (!text || !ids) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    ids[n++] = t->bos;
    if (format == PI0_PROMPT_RAW) {   /* LeRobot's π0: the text as given (its pipeline appended the "\n") */
        if ((st = encode_append(t, prompt, plen, ids, cap, &n)) != PI0_OK) goto done;
    } else if (format == PI0_PROMPT_PI0) {
        size_t len = clean_prompt(text, prompt);
        if ((st = encode_append(t, text, len, ids, cap, &n)) != PI0_OK) goto done;
        if ((st = encode_append(t, "\n", 1, ids, cap, &n)) != PI0_OK) goto done;   /* answer-start marker */
    } else {
        size_t len = (size_t)sprintf(text, "Task: ");
        len += clean_prompt(text + len, prompt);
        len += (size_t)sprintf(text + len, ", State: ");
        for (int i = 0; i < n_state; i++) {
            if (!isfinite(state[i])) { st = pi0_fail(PI0_ERR_ARG, "state[%d] is not finite", i); goto done; }
            len += (size_t)sprintf(text + len, "%s%d", i ? " " : "", tokenizer_state_bin(state[i]));
        }
        len += (size_t)sprintf(text + len, ";\nAction: ");
        if ((st = encode_append(t, text, len, ids, cap, &n)) != PI0_OK) goto done;
    }
    int valid = (int)(n < (size_t)max_len ? n : (size_t)max_len);   /* openpi truncates longer prompts */
    static atomic_int warned;   /* openpi logs a warning; once per process here, a server would repeat it per request */
    if (n > (size_t)max_len && !atomic_exchange(&warned, 1))
        fprintf(stderr, "pi0: warning: a prompt of %zu tokens exceeds max_token_len %d and is truncated, as openpi does "
                "(logged once; raise the prompt length if this happens often)\n", n, max_len);
    for (int i = 0; i < max_len; i++) {
        tokens[i] = i < valid ? ids[i] : 0;
        mask[i] = i < valid;
    }
    if (n_valid) *n_valid = valid;
done:
    free(text);
    free(ids);
    return st;
}
