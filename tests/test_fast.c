/* test_fast.c — π0-FAST's action tokenizer (src/fast_*.c) and SentencePiece decoding (tokenizer_decode).
 *   test_fast TOK.model        checks that need no Python: the JSON reader's errors (line, column), tokenizer.json and
 *                              processor config refusals, the byte-level table and UTF-8 repair on hand-made
 *                              vocabularies, the inverse DCT against a forward DCT written here, the zero fallbacks,
 *                              decode(encode(text)) on the tiny PaliGemma-like model, the prompt's text and masks
 *   test_fast serve            a line protocol for tests/fast_check.py, which compares every answer with SentencePiece,
 *                              Hugging Face tokenizers / transformers and openpi's decoding restated in numpy / scipy:
 *     pg PATH | fast DIR                        load (answers "ok" or "error MESSAGE")
 *     spdecode ID...                            "ok HEX" of the decoded bytes
 *     bpe ID...                                 "ok CP..." code points of the FAST BPE decode
 *     actions H A ID... | extract H A ID...     "OUTCOME V..." (the processor's decode / openpi's extract_actions)
 *     prompt MAXLEN STATE|- HEX                 "ok TOKENS;MASK;AR_MASK;N_VALID" (STATE: comma-separated values)
 *     lower HEX                                 "ok HEX" of Python's str.lower() */
#include <stdlib.h>

#include "fast_json.h"
#include "fast_tokenizer.h"
#include "test.h"
#include "tokenizer.h"
#include "util.h"

#define EXPECT_ERR(expr, code, needle)                                                                                 \
    do {                                                                                                               \
        pi0_status st_ = (expr);                                                                                       \
        CHECK(st_ == (code) && strstr(pi0_last_error(), (needle)), "%s -> %s '%s' (wanted %s containing '%s')", #expr, \
              pi0_status_str(st_), pi0_last_error(), pi0_status_str(code), (needle));                                 \
    } while (0)

/* ---- the JSON reader ---- */

static pi0_status json(const char *text) {
    fast_json *v = NULL;
    pi0_status st = fast_json_parse(&v, "t.json", text, strlen(text));
    fast_json_free(v);
    return st;
}

static void test_json(void) {
    fast_json *v = NULL;
    const char *doc = "{\"a\\u0000b\": [1, -2.5e3, \"\\ud83e\\udd16\", true, null], \"\\u0000\": {}}";
    CHECK(fast_json_parse(&v, "t", doc, strlen(doc)) == PI0_OK, "%s", pi0_last_error());
    if (v) {
        CHECK(v->type == FAST_JSON_OBJECT && v->n == 2 && v->items[0].len == 3 && !memcmp(v->items[0].s, "a\0b", 3),
              "NUL inside a key");
        const fast_json *arr = &v->items[1];
        int64_t x = 0;
        CHECK(arr->type == FAST_JSON_ARRAY && arr->n == 5 && fast_json_int(&arr->items[0], &x) && x == 1 &&
              !fast_json_int(&arr->items[1], &x) && arr->items[2].len == 4 && !memcmp(arr->items[2].s, "\xf0\x9f\xa4\x96", 4),
              "array values, a surrogate pair");
        CHECK(v->items[2].len == 1 && v->items[2].s[0] == 0 && fast_json_get(v, "a") == NULL, "the key \"\\u0000\"");
    }
    fast_json_free(v);
    EXPECT_ERR(json("{\n  \"a\": 1,\n  \"b\" 2\n}"), PI0_ERR_FORMAT, "line 3 column 7: expected ':'");
    EXPECT_ERR(json("{\"a\": 1, \"a\": 2}"), PI0_ERR_FORMAT, "key \"a\" twice");
    EXPECT_ERR(json("[\"\\ud800\"]"), PI0_ERR_FORMAT, "lone leading surrogate");
    EXPECT_ERR(json("[\"\\udc00\"]"), PI0_ERR_FORMAT, "lone trailing surrogate");
    EXPECT_ERR(json("[\"a\tb\"]"), PI0_ERR_FORMAT, "control character");
    EXPECT_ERR(json("[1, 2,]"), PI0_ERR_FORMAT, "line 1 column 7: expected a value");
    EXPECT_ERR(json("[01]"), PI0_ERR_FORMAT, "expected ',' or ']'");
    EXPECT_ERR(json("{} x"), PI0_ERR_FORMAT, "text after the value");
    EXPECT_ERR(json("[\"\xc3\"]"), PI0_ERR_FORMAT, "not UTF-8");
    EXPECT_ERR(json("\"\xc3\xa9\xc3\xa9\" \x80"), PI0_ERR_FORMAT, "line 1 column 6: not UTF-8");
    EXPECT_ERR(json(""), PI0_ERR_FORMAT, "unexpected end");
    EXPECT_ERR(json("[\"abc"), PI0_ERR_FORMAT, "unterminated string");
    EXPECT_ERR(json("[NaN]"), PI0_ERR_FORMAT, "expected a value");
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    EXPECT_ERR(fast_json_parse(&v, "t", deep, 200), PI0_ERR_FORMAT, "deeper than 64");
    CHECK(json("[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]") == PI0_OK, "20 levels: %s", pi0_last_error());
}

/* ---- FAST tokenizers made here ---- */

/* tokenizer.json with the given vocab members (JSON text, "\"tok\": id, ..."); the other fields as the processor saves
 * them, except for the field `swap` replaced by `with` when given. */
static char *tok_json(const char *vocab, const char *swap, const char *with) {
    static char buf[8192];
    const char *fields[][2] = {{"added_tokens", "[]"},
                               {"normalizer", "null"},
                               {"pre_tokenizer", "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}"},
                               {"decoder", "{\"type\": \"ByteLevel\"}"},
                               {"model", NULL}};
    size_t n = (size_t)snprintf(buf, sizeof buf, "{\"version\": \"1.0\"");
    for (int i = 0; i < 5; i++) {
        const char *v = swap && !strcmp(swap, fields[i][0]) ? with : fields[i][1];
        if (!v) {
            if (i == 4) n += (size_t)snprintf(buf + n, sizeof buf - n, ", \"model\": {\"type\": \"BPE\", \"vocab\": {%s}, \"merges\": []}", vocab);
            continue;
        }
        n += (size_t)snprintf(buf + n, sizeof buf - n, ", \"%s\": %s", fields[i][0], v);
    }
    snprintf(buf + n, sizeof buf - n, "}");
    return buf;
}

static pi0_status fast_parse(fast_tokenizer **f, const char *tj, const char *cfg) {
    return fast_tokenizer_parse(f, "mem", tj, strlen(tj), cfg, strlen(cfg));
}

static const char CFG[] = "{\"processor_class\": \"UniversalActionProcessor\", \"scale\": 10, \"min_token\": -3, "
                          "\"vocab_size\": 16, \"time_horizon\": null, \"action_dim\": null}";

/* The vocabulary of the byte-level checks: U+0100 is byte 0x00, "!" 0x21, U+0120 0x20 (a space), U+00C3 and U+00A9 the
 * bytes of "é", U+0190 and "\u0000" are outside the table (their own UTF-8), U+0143 is byte 0xAD. */
static const char VOCAB[] = "\"\\u0100\": 0, \"!\": 1, \"\\u0120\": 2, \"\\u00c3\": 3, \"\\u00a9\": 4, \"\\u0190\": 5, "
                            "\"\\u0000\": 6, \"a\\u0190\": 7, \"\\u0143\": 8, \"\\u00e0\": 9, \"\\u0122\": 10, \"\\u00c3\\u00a9\": 12";

static int decode_is(const fast_tokenizer *f, const int64_t *ids, size_t n, const uint32_t *want, size_t nw) {
    uint32_t cps[64];
    size_t k = 0;
    if (fast_tokenizer_decode(f, ids, n, cps, 64, &k) != PI0_OK || k != nw) return 0;
    return !memcmp(cps, want, nw * sizeof *want);
}

static void test_fast_files(void) {
    fast_tokenizer *f = NULL;
    char *tj = strdup(tok_json(VOCAB, NULL, NULL));   /* tok_json's buffer is reused below */
    CHECK(fast_parse(&f, tj, CFG) == PI0_OK, "%s", pi0_last_error());
    if (!f) { free(tj); return; }
    fast_tokenizer_info info;
    fast_tokenizer_get_info(f, &info);
    CHECK(info.scale == 10 && info.min_token == -3 && info.vocab_size == 16 && info.time_horizon == 0 &&
          info.action_dim == 0 && info.n_ids == 13, "info %g %lld %lld %d %d %zu", info.scale, (long long)info.min_token,
          (long long)info.vocab_size, info.time_horizon, info.action_dim, info.n_ids);
    /* the byte-level table and Rust's lossy UTF-8 */
    CHECK(decode_is(f, (int64_t[]){0, 1, 2, 8}, 4, (uint32_t[]){0, 0x21, 0x20, 0xfffd}, 4), "table bytes; 0xAD alone is U+FFFD");
    CHECK(decode_is(f, (int64_t[]){3, 4}, 2, (uint32_t[]){0xe9}, 1), "two tokens make one character");
    CHECK(decode_is(f, (int64_t[]){12, 12}, 2, (uint32_t[]){0xe9, 0xe9}, 2), "a merged token");
    CHECK(decode_is(f, (int64_t[]){3, 1}, 2, (uint32_t[]){0xfffd, 0x21}, 2), "a cut character is U+FFFD");
    CHECK(decode_is(f, (int64_t[]){5, 6, 7}, 3, (uint32_t[]){0x190, 0, 'a', 0x190}, 4), "tokens outside the table: their UTF-8");
    CHECK(decode_is(f, (int64_t[]){1, 11, 13, 99999, 1}, 5, (uint32_t[]){0x21, 0x21}, 2), "ids without a token are skipped");
    /* U+00E0 is byte 0xE0, U+0122 byte 0x80: E0 needs A0..BF next, so E0 80 is two bad bytes (an overlong form) */
    CHECK(decode_is(f, (int64_t[]){9, 10}, 2, (uint32_t[]){0xfffd, 0xfffd}, 2), "E0 80");
    CHECK(decode_is(f, (int64_t[]){9, 9}, 2, (uint32_t[]){0xfffd, 0xfffd}, 2), "E0 E0");
    size_t k;
    EXPECT_ERR(fast_tokenizer_decode(f, (int64_t[]){1, -1}, 2, NULL, 0, &k), PI0_ERR_ARG, "position 1");
    /* the processor's fallbacks: zeros */
    double act[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    fast_outcome o = FAST_DECODED;
    CHECK(fast_tokenizer_actions(f, (int64_t[]){1, 1, 1}, 3, 2, 2, act, &o) == PI0_OK && o == FAST_BAD_SIZE && act[0] == 0 &&
          act[3] == 0, "3 coefficients for 2 x 2: %s", fast_outcome_str(o));
    act[0] = 1;
    CHECK(fast_tokenizer_actions(f, (int64_t[]){1, 1, -5, 1}, 4, 2, 2, act, &o) == PI0_OK && o == FAST_BAD_ID && act[0] == 0,
          "a negative id: %s", fast_outcome_str(o));
    CHECK(fast_tokenizer_actions(f, NULL, 0, 1, 1, act, &o) == PI0_OK && o == FAST_BAD_SIZE, "no ids");
    EXPECT_ERR(fast_tokenizer_actions(f, (int64_t[]){1}, 1, 0, 2, act, &o), PI0_ERR_ARG, "horizon 0 x action_dim 2");
    /* "!" is 0x21 = 33 -> coefficient 30 -> 3.0; H = 1: the inverse DCT is the identity */
    CHECK(fast_tokenizer_actions(f, (int64_t[]){1, 2}, 2, 1, 2, act, &o) == PI0_OK && o == FAST_DECODED &&
          act[0] == 3.0 && act[1] == 2.9, "H = 1: %g %g", act[0], act[1]);
    fast_tokenizer_free(f);

    /* refusals, each naming its field */
    EXPECT_ERR(fast_parse(&f, tok_json(VOCAB, "decoder", "{\"type\": \"Metaspace\"}"), CFG), PI0_ERR_UNSUPPORTED,
               "decoder.type is \"Metaspace\", expected \"ByteLevel\"");
    EXPECT_ERR(fast_parse(&f, tok_json(VOCAB, "decoder", "null"), CFG), PI0_ERR_FORMAT, "decoder: expected an object");
    EXPECT_ERR(fast_parse(&f, tok_json(VOCAB, "pre_tokenizer", "{\"type\": \"Whitespace\"}"), CFG), PI0_ERR_UNSUPPORTED,
               "pre_tokenizer.type");
    EXPECT_ERR(fast_parse(&f, tok_json(VOCAB, "normalizer", "{\"type\": \"NFC\"}"), CFG), PI0_ERR_UNSUPPORTED, "normalizer");
    EXPECT_ERR(fast_parse(&f, tok_json(VOCAB, "added_tokens", "[{\"id\": 0}]"), CFG), PI0_ERR_UNSUPPORTED, "added_tokens");
    EXPECT_ERR(fast_parse(&f, tok_json("\"a\": 0, \"b\": 0", NULL, NULL), CFG), PI0_ERR_FORMAT, "id 0 is given to both");
    EXPECT_ERR(fast_parse(&f, tok_json("\"a\": 1.5", NULL, NULL), CFG), PI0_ERR_FORMAT, "model.vocab[\"a\"]: expected an integer id");
    EXPECT_ERR(fast_parse(&f, tok_json("\"a\": -1", NULL, NULL), CFG), PI0_ERR_FORMAT, "found a number -1");
    EXPECT_ERR(fast_parse(&f, tok_json(VOCAB, "model", "{\"type\": \"WordPiece\", \"vocab\": {}}"), CFG), PI0_ERR_UNSUPPORTED,
               "model.type is \"WordPiece\"");
    EXPECT_ERR(fast_parse(&f, "{\"model\": 3", CFG), PI0_ERR_FORMAT, "mem/tokenizer.json: invalid JSON at line 1 column 12");
    EXPECT_ERR(fast_parse(&f, tj, "{\"scale\": 10,\n \"min_token\": }"), PI0_ERR_FORMAT,
               "mem/processor_config.json: invalid JSON at line 2 column 15");
    EXPECT_ERR(fast_parse(&f, tj, "{\"scale\": -1}"), PI0_ERR_FORMAT, "\"scale\": expected a number > 0");
    EXPECT_ERR(fast_parse(&f, tj, "{\"min_token\": 1.5}"), PI0_ERR_FORMAT, "\"min_token\": expected an integer");
    EXPECT_ERR(fast_parse(&f, tj, "{\"time_horizon\": 0}"), PI0_ERR_FORMAT, "\"time_horizon\": expected null or an integer in 1..");
    EXPECT_ERR(fast_parse(&f, tj, "{\"processor_class\": \"Other\"}"), PI0_ERR_UNSUPPORTED, "\"processor_class\" is \"Other\"");
    /* absent fields take the processor's defaults; a horizon in the config serves calls that pass 0 */
    CHECK(fast_parse(&f, tj, "{\"time_horizon\": 1, \"action_dim\": 2}") == PI0_OK, "%s", pi0_last_error());
    if (f) {
        fast_tokenizer_get_info(f, &info);
        CHECK(info.scale == 10 && info.min_token == 0 && info.vocab_size == 1024, "defaults");
        CHECK(fast_tokenizer_actions(f, (int64_t[]){1, 2}, 2, 0, 0, act, &o) == PI0_OK && o == FAST_DECODED &&
              act[0] == 3.3 && act[1] == 3.2, "the config's shape: %g %g", act[0], act[1]);
    }
    fast_tokenizer_free(f);
    free(tj);
}

/* ---- the inverse DCT against a forward DCT-II (orthonormal) written out here ---- */

static void test_idct(void) {
    /* vocabulary: code points 0..1023 as raw tokens outside the table (U+0400 + k, min_token -0x400 - 200) */
    static char vocab[1024 * 24];
    size_t n = 0;
    for (int k = 0; k < 1024; k++) n += (size_t)snprintf(vocab + n, sizeof vocab - n, "%s\"\\u%04x\": %d", k ? ", " : "", 0x400 + k, k);
    static char tj[sizeof vocab + 512];
    snprintf(tj, sizeof tj, "{\"added_tokens\": [], \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}, "
             "\"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {%s}}}", vocab);
    fast_tokenizer *f = NULL;
    CHECK(fast_parse(&f, tj, "{\"scale\": 7.5, \"min_token\": -1224}") == PI0_OK, "%s", pi0_last_error());
    if (!f) return;
    pi0_rng r;
    pi0_rng_seed(&r, 11);
    printf("test_fast: idct seed 11\n");
    const int shapes[][2] = {{1, 1}, {2, 3}, {10, 7}, {50, 8}, {17, 1}};
    for (int s = 0; s < 5; s++) {
        int H = shapes[s][0], A = shapes[s][1];
        double x[50 * 8], c[50 * 8], y[50 * 8];
        int64_t ids[50 * 8];
        for (int i = 0; i < H * A; i++) x[i] = pi0_rng_normal(&r);
        for (int k = 0; k < H; k++)   /* X[k] = w_k sum_t x[t] cos(pi k (2t + 1) / 2H), quantised as the processor does */
            for (int a = 0; a < A; a++) {
                double acc = 0;
                for (int t = 0; t < H; t++) acc += x[t * A + a] * cos(M_PI * k * (2 * t + 1) / (2.0 * H));
                c[k * A + a] = round(acc * (k ? sqrt(2.0 / H) : sqrt(1.0 / H)) * 7.5);
                ids[k * A + a] = (int64_t)c[k * A + a] + 200;
            }
        fast_outcome o;
        CHECK(fast_tokenizer_actions(f, ids, (size_t)(H * A), H, A, y, &o) == PI0_OK && o == FAST_DECODED, "%d x %d", H, A);
        /* the quantisation error: each coefficient within 0.5 / 7.5, so each column within that times sqrt(H) in L2 */
        double worst = 0;
        for (int a = 0; a < A; a++) {
            double e = 0;
            for (int t = 0; t < H; t++) e += (y[t * A + a] - x[t * A + a]) * (y[t * A + a] - x[t * A + a]);
            if (sqrt(e) > worst) worst = sqrt(e);
        }
        CHECK(worst <= 0.5 / 7.5 * sqrt(H) + 1e-12, "%d x %d: column error %g", H, A, worst);
        /* exactness: the forward DCT of the output gives back the quantised coefficients / scale */
        double dmax = 0;
        for (int k = 0; k < H; k++)
            for (int a = 0; a < A; a++) {
                double acc = 0;
                for (int t = 0; t < H; t++) acc += y[t * A + a] * cos(M_PI * k * (2 * t + 1) / (2.0 * H));
                acc *= k ? sqrt(2.0 / H) : sqrt(1.0 / H);
                if (fabs(acc - c[k * A + a] / 7.5) > dmax) dmax = fabs(acc - c[k * A + a] / 7.5);
            }
        CHECK(dmax < 1e-12, "%d x %d: forward(inverse) off by %g", H, A, dmax);
        printf("idct %2d x %d  column error %.3g (bound %.3g)  round trip %.2g  OK\n", H, A, worst, 0.5 / 7.5 * sqrt(H), dmax);
    }
    fast_tokenizer_free(f);
}

/* ---- SentencePiece decoding and the prompt on the tiny PaliGemma-like model ---- */

static int decode_str(const tokenizer *t, const int32_t *ids, size_t n, char *out, size_t cap) {
    size_t len = 0;
    if (tokenizer_decode(t, ids, n, out, cap - 1, &len) != PI0_OK || len >= cap) return 0;
    out[len] = 0;
    return 1;
}

static void test_paligemma(const char *model) {
    tokenizer *t = NULL;
    CHECK(tokenizer_load(&t, model) == PI0_OK, "%s", pi0_last_error());
    if (!t) return;
    const char *texts[] = {"pick up the red block", "  two  spaces\n", "caf\xc3\xa9 \xf0\x9f\xa4\x96 42", ""};
    for (int i = 0; i < 4; i++) {
        int32_t ids[256];
        size_t n = 0;
        char out[512];
        tokenizer_encode(t, texts[i], strlen(texts[i]), ids, 256, &n);
        CHECK(decode_str(t, ids, n, out, sizeof out) && !strcmp(out, texts[i]), "decode(encode(%s)) = '%s'", texts[i], out);
    }
    char out[64];
    int32_t bos = tokenizer_bos_id(t), eos = tokenizer_eos_id(t), ctl[3] = {bos, 0, eos};
    CHECK(decode_str(t, ctl, 3, out, sizeof out) && !out[0], "control pieces vanish");
    size_t len;
    EXPECT_ERR(tokenizer_decode(t, (int32_t[]){5, tokenizer_vocab_size(t)}, 2, NULL, 0, &len), PI0_ERR_ARG, "position 1");
    EXPECT_ERR(tokenizer_decode(t, (int32_t[]){-1}, 1, NULL, 0, &len), PI0_ERR_ARG, "id -1");

    /* the FAST prompt: its text, masks and padding */
    int32_t tok[96], ids[96];
    uint8_t mask[96], ar[96];
    int nv = 0;
    const double state[3] = {-1.0, 0.0, 0.9921875};
    CHECK(fast_tokenizer_prompt(t, "  Pick_Up the CUP\n ", state, 3, 96, tok, mask, ar, &nv) == PI0_OK, "%s", pi0_last_error());
    const char want[] = "Task: pick up the cup, State: 0 128 255;\n";
    size_t n = 0;
    tokenizer_encode(t, want, strlen(want), ids, 96, &n);
    CHECK(nv == (int)n + 1 && tok[0] == bos && !memcmp(tok + 1, ids, n * sizeof *ids) && tok[nv] == 0 && mask[nv - 1] == 1 &&
          mask[nv] == 0 && ar[0] == 0 && ar[nv - 1] == 0, "prompt: %d tokens, want %zu + BOS", nv, n);
    CHECK(fast_tokenizer_prompt(t, "pick", state, 3, 4, tok, mask, ar, &nv) == PI0_OK && nv == 4 && mask[3] == 1,
          "truncated to 4: %d", nv);
    EXPECT_ERR(fast_tokenizer_prompt(t, "pick", (double[]){0.5, NAN}, 2, 96, tok, mask, ar, &nv), PI0_ERR_ARG, "state[1] is nan");
    EXPECT_ERR(fast_tokenizer_prompt(t, "pick", (double[]){INFINITY}, 1, 96, tok, mask, ar, &nv), PI0_ERR_ARG, "state[0] is inf");
    EXPECT_ERR(fast_tokenizer_prompt(t, "pi\xc3", NULL, 0, 96, tok, mask, ar, &nv), PI0_ERR_ARG, "not UTF-8 (byte 2");
    tokenizer_free(t);
}

static void test_lower(void) {
    const char *cases[][2] = {{"ABC \xc3\x80\xc3\x89", "abc \xc3\xa0\xc3\xa9"},              /* Latin-1 */
                              {"\xc4\xb0", "i\xcc\x87"},                                      /* U+0130 -> i + U+0307 */
                              {"\xce\x91\xce\xa3", "\xce\xb1\xcf\x82"},                       /* final sigma */
                              {"\xce\xa3", "\xcf\x83"},                                       /* alone: not final */
                              {"\xce\x91\xce\xa3\xce\x91", "\xce\xb1\xcf\x83\xce\xb1"},       /* inside a word */
                              {"\xce\x91'\xce\xa3'", "\xce\xb1'\xcf\x82'"},                   /* apostrophes are ignorable */
                              {"\xf0\x90\x90\x80", "\xf0\x90\x90\xa8"}};                      /* Deseret, 4 bytes */
    for (int i = 0; i < 7; i++) {
        char out[32];
        size_t n = 0;
        CHECK(fast_py_lower(cases[i][0], strlen(cases[i][0]), out, sizeof out, &n) == PI0_OK && n == strlen(cases[i][1]) &&
              !memcmp(out, cases[i][1], n), "lower case %d", i);
    }
    CHECK(fast_py_isspace(0x3000) && fast_py_isspace(0x1c) && fast_py_isspace(0x85) && !fast_py_isspace(0x200b) &&
          !fast_py_isspace('a'), "isspace");
}

/* ---- serve: the line protocol of tests/fast_check.py ---- */

static int unhex(const char *h, char *out, size_t *n) {
    size_t l = strlen(h);
    if (l % 2) return 0;
    for (size_t i = 0; i < l / 2; i++) {
        unsigned v;
        if (sscanf(h + 2 * i, "%2x", &v) != 1) return 0;
        out[i] = (char)v;
    }
    *n = l / 2;
    return 1;
}

static void print_hex(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) printf("%02x", (uint8_t)s[i]);
}

/* The next space-separated word of the line being served, or "" at its end. */
static char *word(void) {
    char *w = strtok(NULL, " ");
    return w ? w : (char *)"";
}

static int serve(void) {
    static char line[1 << 22];
    tokenizer *pg = NULL;
    fast_tokenizer *f = NULL;
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        int64_t *ids = malloc((strlen(line) / 2 + 1) * sizeof *ids);   /* a number and a space at least per id */
        char *cmd = strtok(line, " "), *arg;
        size_t n = 0;
        pi0_status st = PI0_OK;
        if (!cmd || !ids) { printf("error empty line\n"); free(ids); continue; }
        if (!strcmp(cmd, "pg") || !strcmp(cmd, "fast")) {
            arg = strtok(NULL, "");
            if (*cmd == 'p') { tokenizer_free(pg); pg = NULL; st = tokenizer_load(&pg, arg ? arg : ""); }
            else { fast_tokenizer_free(f); f = NULL; st = fast_tokenizer_load(&f, arg ? arg : ""); }
            if (st == PI0_OK) printf("ok\n");
        } else if (!strcmp(cmd, "lower") || !strcmp(cmd, "prompt")) {
            long max_len = 0;
            double state[4096];
            int ns = 0;
            if (*cmd == 'p') {
                max_len = strtol(word(), NULL, 10);
                char *s = word(), *save = NULL;
                for (char *v = strcmp(s, "-") ? strtok_r(s, ",", &save) : NULL; v && ns < 4096; v = strtok_r(NULL, ",", &save))
                    state[ns++] = strtod(v, NULL);
                if (max_len < 1 || max_len > 4096) max_len = 1;
            }
            arg = word();
            char *text = malloc(strlen(arg) / 2 + 1), *out = NULL;
            size_t tl = 0, ol = 0;
            if (!text || !unhex(arg, text, &tl)) { free(text); free(ids); printf("error bad hex\n"); continue; }
            text[tl] = 0;
            if (*cmd == 'l') {
                if ((st = fast_py_lower(text, tl, NULL, 0, &ol)) == PI0_OK && (out = malloc(ol + 1)) &&
                    (st = fast_py_lower(text, tl, out, ol, &ol)) == PI0_OK) {
                    printf("ok ");
                    print_hex(out, ol);
                    printf("\n");
                }
            } else {
                int32_t *tok = malloc((size_t)max_len * sizeof *tok);
                uint8_t *mask = malloc((size_t)max_len), *ar = malloc((size_t)max_len);
                int nv = -1;
                if (!tok || !mask || !ar) st = pi0_fail(PI0_ERR_NOMEM, "out of memory");
                else if ((st = fast_tokenizer_prompt(pg, text, state, ns, (int)max_len, tok, mask, ar, &nv)) == PI0_OK) {
                    printf("ok");
                    for (long i = 0; i < max_len; i++) printf("%s%d", i ? " " : " ", tok[i]);
                    printf(";");
                    for (long i = 0; i < max_len; i++) printf("%s%d", i ? " " : "", mask[i]);
                    printf(";");
                    for (long i = 0; i < max_len; i++) printf("%s%d", i ? " " : "", ar[i]);
                    printf(";%d\n", nv);
                }
                free(tok);
                free(mask);
                free(ar);
            }
            free(text);
            free(out);
        } else {
            int h = 0, a = 0, acts = !strcmp(cmd, "actions") || !strcmp(cmd, "extract");
            if (acts) {
                h = (int)strtol(word(), NULL, 10);
                a = (int)strtol(word(), NULL, 10);
            }
            while ((arg = strtok(NULL, " "))) ids[n++] = strtoll(arg, NULL, 10);
            if (!strcmp(cmd, "spdecode")) {
                int32_t *id32 = malloc((n ? n : 1) * sizeof *id32);
                size_t len = 0;
                char *out = NULL;
                for (size_t i = 0; i < n; i++) id32[i] = (int32_t)ids[i];
                if (!pg) st = pi0_fail(PI0_ERR_ARG, "no pg loaded");
                else if ((st = tokenizer_decode(pg, id32, n, NULL, 0, &len)) == PI0_OK && (out = malloc(len + 1)) &&
                         (st = tokenizer_decode(pg, id32, n, out, len, &len)) == PI0_OK) {
                    printf("ok ");
                    print_hex(out, len);
                    printf("\n");
                }
                free(id32);
                free(out);
            } else if (!strcmp(cmd, "bpe")) {
                size_t k = 0;
                uint32_t *cps = NULL;
                if (!f) st = pi0_fail(PI0_ERR_ARG, "no fast tokenizer loaded");
                else if ((st = fast_tokenizer_decode(f, ids, n, NULL, 0, &k)) == PI0_OK && (cps = malloc((k + 1) * sizeof *cps)) &&
                         (st = fast_tokenizer_decode(f, ids, n, cps, k, &k)) == PI0_OK) {
                    printf("ok");
                    for (size_t i = 0; i < k; i++) printf(" %u", cps[i]);
                    printf("\n");
                }
                free(cps);
            } else if (acts) {
                double *act = h >= 1 && h <= 1024 && a >= 1 && a <= 1024 ? malloc((size_t)h * a * sizeof *act) : NULL;
                fast_outcome o = FAST_DECODED;
                int32_t *id32 = malloc((n ? n : 1) * sizeof *id32);
                for (size_t i = 0; i < n; i++) id32[i] = (int32_t)ids[i];
                if (!f || (*cmd == 'e' && !pg)) st = pi0_fail(PI0_ERR_ARG, "load the tokenizers first");
                else if (!act || !id32) st = pi0_fail(PI0_ERR_ARG, "H and A: 1..1024 each");
                else if (*cmd == 'a') st = fast_tokenizer_actions(f, ids, n, h, a, act, &o);
                else st = fast_tokenizer_extract_actions(f, pg, id32, n, h, a, act, &o);
                if (st == PI0_OK) {
                    static const char *const names[] = {"decoded", "no_action", "bad_id", "bad_size"};
                    printf("%s", names[o]);
                    for (int i = 0; i < h * a; i++) printf(" %.17g", act[i]);
                    printf("\n");
                }
                free(act);
                free(id32);
            } else st = pi0_fail(PI0_ERR_ARG, "unknown command '%s'", cmd);
        }
        if (st != PI0_OK) printf("error %s %s\n", pi0_status_str(st), pi0_last_error());
        fflush(stdout);
        free(ids);
    }
    tokenizer_free(pg);
    fast_tokenizer_free(f);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "serve")) return serve();
    if (argc != 2) {
        fprintf(stderr, "usage: test_fast TOK.model | test_fast serve\n");
        return 2;
    }
    test_json();
    test_fast_files();
    test_idct();
    test_paligemma(argv[1]);
    test_lower();
    return test_summary("test_fast");
}
