/* fast_prompt.c — openpi's π0-FAST prompt (FASTTokenizer.tokenize at inference, docs/fast.md 1) and the two Python
 * string methods it leans on, str.lower() and str.isspace(), with the tables of src/fast_unicode.h (generated from
 * Python's own behaviour by tests/fast_unicode_table.py). Unlike the π0 / π0.5 prompts (tokenizer.c), this one is
 * lower-cased, keeps its newlines, and has no "Action: " (the model writes it). */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fast_tokenizer.h"
#include "fast_unicode.h"
#include "util.h"

enum { MAX_TEXT = 1 << 20, MAX_STATE = 4096 };

int fast_py_isspace(uint32_t c) {
    for (size_t i = 0; i < sizeof SPACES / sizeof *SPACES && SPACES[i] <= c; i++)
        if (SPACES[i] == c) return 1;
    return 0;
}

/* The single code point lower() gives for c (c itself when it has no mapping). */
static uint32_t lower1(uint32_t c) {
    size_t lo = 0, hi = sizeof LOWER_RUNS / sizeof *LOWER_RUNS;
    while (hi - lo > 1) {   /* the last run starting at or before c */
        size_t mid = (lo + hi) / 2;
        if (LOWER_RUNS[mid].lo <= c) lo = mid;
        else hi = mid;
    }
    uint32_t d = c - LOWER_RUNS[lo].lo;
    if (c >= LOWER_RUNS[lo].lo && d % LOWER_RUNS[lo].stride == 0 && d / LOWER_RUNS[lo].stride < LOWER_RUNS[lo].n)
        return (uint32_t)((int32_t)c + LOWER_RUNS[lo].delta);
    return c;
}

enum { OTHER = 0, CASED = 1, IGNORABLE = 2 };

static int sigma_class(uint32_t c) {
    size_t lo = 0, hi = sizeof SIGMA_CLASS / sizeof *SIGMA_CLASS;
    if (c < SIGMA_CLASS[0] >> 2) return OTHER;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (SIGMA_CLASS[mid] >> 2 <= c) lo = mid;
        else hi = mid;
    }
    return (int)(SIGMA_CLASS[lo] & 3);
}

/* CPython's handle_capital_sigma: final sigma when a cased character comes before (case-ignorable ones skipped) and
 * no cased one after. */
static uint32_t lower_sigma(const uint32_t *cp, size_t n, size_t i) {
    size_t j = i;
    while (j > 0 && sigma_class(cp[j - 1]) == IGNORABLE) j--;
    if (j == 0 || sigma_class(cp[j - 1]) != CASED) return 0x3c3;
    for (j = i + 1; j < n && sigma_class(cp[j]) == IGNORABLE; j++) {}
    return j < n && sigma_class(cp[j]) == CASED ? 0x3c3 : 0x3c2;
}

/* Strict UTF-8 (shortest forms, no surrogates): the next code point and its length, or 0. */
static size_t utf8_next(const uint8_t *s, size_t n, uint32_t *c) {
    if (s[0] < 0x80) { *c = s[0]; return 1; }
    size_t l = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
    if (!l || l > n) return 0;
    *c = s[0] & (0x7fu >> l);
    for (size_t k = 1; k < l; k++) {
        if ((s[k] & 0xc0) != 0x80) return 0;
        *c = *c << 6 | (s[k] & 0x3fu);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    return *c < least[l] || (*c >= 0xd800 && *c < 0xe000) || *c > 0x10ffff ? 0 : l;
}

static size_t put_utf8(char *o, size_t cap, size_t n, uint32_t c) {
    static const uint8_t lead[5] = {0, 0, 0xc0, 0xe0, 0xf0};
    char b[4];
    size_t l = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    for (size_t k = l - 1; k > 0; k--, c >>= 6) b[k] = (char)(0x80 | (c & 0x3f));
    b[0] = (char)(lead[l] | c);
    for (size_t k = 0; k < l; k++)
        if (n + k < cap) o[n + k] = b[k];
    return l;
}

pi0_status fast_py_lower(const char *s, size_t len, char *out, size_t cap, size_t *n) {
    *n = 0;
    uint32_t *cp = malloc((len ? len : 1) * sizeof *cp);
    if (!cp) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    size_t m = 0;
    for (size_t i = 0; i < len; m++) {
        size_t l = utf8_next((const uint8_t *)s + i, len - i, &cp[m]);
        if (!l) {
            free(cp);
            return pi0_fail(PI0_ERR_ARG, "the prompt is not UTF-8 (byte %zu, 0x%02x)", i, (uint8_t)s[i]);
        }
        i += l;
    }
    size_t k = 0;
    if (!out) cap = 0;
    for (size_t i = 0; i < m; i++) {
        if (cp[i] == 0x130) {   /* U+0130 lowers to "i" + U+0307, the one full mapping of lower() */
            k += put_utf8(out, cap, k, 'i');
            k += put_utf8(out, cap, k, 0x307);
        } else k += put_utf8(out, cap, k, cp[i] == 0x3a3 ? lower_sigma(cp, m, i) : lower1(cp[i]));
    }
    free(cp);
    *n = k;
    return PI0_OK;
}

pi0_status fast_tokenizer_prompt(const tokenizer *pg, const char *prompt, const double *state, int n_state, int max_len,
                                 int32_t *tokens, uint8_t *mask, uint8_t *ar_mask, int *n_valid) {
    if (!pg || !prompt || !tokens || !mask || !ar_mask || max_len < 1 || n_state < 0 || n_state > MAX_STATE ||
        (n_state && !state))
        return pi0_fail(PI0_ERR_ARG, "fast_tokenizer_prompt: bad argument (NULL pointer, max_len %d < 1 or n_state %d "
                        "outside 0..%d)", max_len, n_state, MAX_STATE);
    for (int i = 0; i < n_state; i++)
        if (!isfinite(state[i]))   /* numpy would bin NaN as 255 and infinities as -1 / 255: a broken state, refused */
            return pi0_fail(PI0_ERR_ARG, "state[%d] is %g: the FAST prompt needs a finite normalised state", i, state[i]);
    size_t plen = strlen(prompt), ll = 0, cap = 0, n = 0, k = 0;
    if (plen > MAX_TEXT) return pi0_fail(PI0_ERR_ARG, "prompt of %zu bytes, at most %d are accepted", plen, MAX_TEXT);
    pi0_status st = fast_py_lower(prompt, plen, NULL, 0, &ll);
    if (st != PI0_OK) return st;
    /* "Task: " + text + ", State: " + up to 5 bytes per bin + ";\n" */
    char *text = malloc(ll + (size_t)n_state * 5 + 32);
    int32_t *ids = NULL;
    if (!text) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    size_t len = (size_t)sprintf(text, "Task: ");
    if ((st = fast_py_lower(prompt, plen, text + len, ll, &ll)) != PI0_OK) goto done;
    /* .strip(), then "_" -> " " */
    size_t a = 0, b = ll;
    uint32_t c;
    for (size_t l; a < b && (l = utf8_next((uint8_t *)text + len + a, b - a, &c)) && fast_py_isspace(c);) a += l;
    for (int cut = 1; cut && b > a;) {
        cut = 0;
        for (size_t l = 1; l <= 3 && l <= b - a && !cut; l++)
            if (utf8_next((uint8_t *)text + len + b - l, l, &c) == l && fast_py_isspace(c)) { b -= l; cut = 1; }
    }
    memmove(text + len, text + len + a, b - a);
    for (size_t i = len; i < len + b - a; i++)
        if (text[i] == '_') text[i] = ' ';
    len += b - a;
    len += (size_t)sprintf(text + len, ", State: ");
    for (int i = 0; i < n_state; i++) len += (size_t)sprintf(text + len, "%s%d", i ? " " : "", tokenizer_state_bin(state[i]));
    len += (size_t)sprintf(text + len, ";\n");
    if ((st = tokenizer_encode(pg, text, len, NULL, 0, &k)) != PI0_OK) goto done;
    cap = k + 1;
    if (!(ids = malloc(cap * sizeof *ids))) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    ids[n++] = tokenizer_bos_id(pg);
    if ((st = tokenizer_encode(pg, text, len, ids + 1, k, &k)) != PI0_OK) goto done;
    n += k;
    int valid = (int)(n < (size_t)max_len ? n : (size_t)max_len);   /* openpi truncates longer prompts */
    static atomic_int warned;   /* openpi logs a warning every time; once per process here */
    if (n > (size_t)max_len && !atomic_exchange(&warned, 1))
        fprintf(stderr, "pi0: warning: a FAST prompt of %zu tokens exceeds max_token_len %d and is truncated, as openpi "
                "does (logged once)\n", n, max_len);
    for (int i = 0; i < max_len; i++) {
        tokens[i] = i < valid ? ids[i] : 0;
        mask[i] = i < valid;
        ar_mask[i] = 0;
    }
    if (n_valid) *n_valid = valid;
done:
    free(text);
    free(ids);
    return st;
}
