/* test_errors.c — bad input never crashes and always names what is wrong: malformed safetensors
 * headers (in memory and as files), broken checkpoints (missing/mis-shaped/mis-typed/non-finite
 * tensors, truncated files, bad config.json), bad model inputs, and the CLI's exit codes and
 * messages. Run under ASan+UBSan by `make debug`. */
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include "ocdbt.h"
#include "pi0.h"
#include "safetensors.h"
#include "test.h"
#include "util.h"

static char tmp[] = "/tmp/pi0-err-XXXXXX";
static const char *PI0 = "build/pi0";

/* ---- safetensors headers in memory ---- */

static pi0_status parse_hdr(const char *hdr, size_t data_len) {
    size_t hl = strlen(hdr), n = 8 + hl + data_len;
    uint8_t *buf = calloc(n, 1);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, hdr, hl);
    st_file *f = NULL;
    pi0_status st = st_parse(&f, "mem", buf, n);
    st_close(f);
    free(buf);
    return st;
}

#define EXPECT_ERR(expr, code, needle)                                                                     \
    do {                                                                                                   \
        pi0_status st_ = (expr);                                                                           \
        CHECK(st_ == (code) && strstr(pi0_last_error(), (needle)), "%s -> %s '%s' (wanted %s containing '%s')", \
              #expr, pi0_status_str(st_), pi0_last_error(), pi0_status_str(code), (needle));               \
    } while (0)

static void test_headers(void) {
    st_file *f = NULL;
    EXPECT_ERR(st_parse(&f, "mem", (const uint8_t *)"abc", 3), PI0_ERR_FORMAT, "too short");
    uint8_t big[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0};
    EXPECT_ERR(st_parse(&f, "mem", big, sizeof big), PI0_ERR_FORMAT, "runs past the end");
    uint8_t huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    EXPECT_ERR(st_parse(&f, "mem", huge, sizeof huge), PI0_ERR_FORMAT, "runs past the end");
    EXPECT_ERR(parse_hdr("{\"a\": ", 0), PI0_ERR_FORMAT, "header JSON invalid");
    EXPECT_ERR(parse_hdr("[1, 2]", 0), PI0_ERR_FORMAT, "not a JSON object");
    EXPECT_ERR(parse_hdr("{\"a\": 5}", 0), PI0_ERR_FORMAT, "not an object");
    EXPECT_ERR(parse_hdr("{\"a\": {\"dtype\": \"C64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", 8), PI0_ERR_FORMAT,
               "unsupported dtype 'C64'");
    EXPECT_ERR(parse_hdr("{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4), PI0_ERR_FORMAT,
               "non-negative");
    EXPECT_ERR(parse_hdr("{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 8), PI0_ERR_FORMAT,
               "past the end of the data block");
    EXPECT_ERR(parse_hdr("{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 12]}}", 16), PI0_ERR_FORMAT,
               "need 16 bytes");
    EXPECT_ERR(parse_hdr("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                         " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 12),
               PI0_ERR_FORMAT, "overlap");
    EXPECT_ERR(parse_hdr("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                         " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8),
               PI0_ERR_FORMAT, "duplicate");
    EXPECT_ERR(parse_hdr("{\"__metadata__\": {\"k\": 1}}", 0), PI0_ERR_FORMAT, "__metadata__");
    EXPECT_ERR(parse_hdr("{\"a\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4294967296],"
                         " \"data_offsets\": [0, 4]}}", 4), PI0_ERR_FORMAT, "overflows");
    EXPECT_ERR(parse_hdr("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", 8), PI0_ERR_FORMAT,
               "begin <= end");
    EXPECT_ERR(parse_hdr("{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}", 4),
               PI0_ERR_FORMAT, "dimensions");
    EXPECT_ERR(parse_hdr("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 4), PI0_ERR_FORMAT,
               "data_offsets");
    CHECK(parse_hdr("{\"a\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [0, 0]},"
                    " \"b\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 4) == PI0_OK,
          "empty tensor next to another is fine: %s", pi0_last_error());
}

/* ---- broken checkpoints: copy tiny-pi0 with one change ---- */

typedef enum { MOD_NONE, MOD_DROP, MOD_SHAPE, MOD_DTYPE, MOD_NAN } mod_kind;

static void copy_file(const char *from, const char *to) {
    size_t n;
    char *d = pi0_read_file(from, &n, 1 << 24);
    FILE *f = fopen(to, "wb");
    if (d && f) fwrite(d, 1, n, f);
    if (f) fclose(f);
    free(d);
}

/* Writes tmp/<name>/ = tiny-pi0 with tensor `target` modified; returns the dir. */
static const char *make_ckpt(const char *name, mod_kind mod, const char *target) {
    static char dir[400];
    char path[500];
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    copy_file("tests/fixtures/tiny-pi0/config.json", path);
    st_file *f;
    if (st_open(&f, "tests/fixtures/tiny-pi0/model.safetensors") != PI0_OK) return dir;
    st_entry *e = calloc((size_t)f->n_tensors, sizeof *e);
    int n = 0;
    for (int i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = &f->tensors[i];
        int hit = !strcmp(t->name, target);
        if (hit && mod == MOD_DROP) continue;
        e[n] = (st_entry){.name = t->name, .dtype = t->dtype, .ndim = t->ndim};
        memcpy(e[n].shape, t->shape, sizeof t->shape);
        if (hit && mod == MOD_SHAPE) { e[n].shape[0] = t->shape[0] / 2; e[n].shape[1] = t->shape[1] * 2; }
        if (hit && mod == MOD_DTYPE) { e[n].dtype = PI0_DT_I32; e[n].shape[0] = t->shape[0] / 2; }
        n++;
    }
    const char *meta[2] = {"paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight",
                           "paligemma_with_expert.paligemma.lm_head.weight"};
    st_writer w;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (st_writer_open(&w, path, e, n, meta, 1) == PI0_OK) {
        for (int i = 0, k = 0; i < f->n_tensors; i++) {
            const st_tensor *t = &f->tensors[i];
            if (mod == MOD_DROP && !strcmp(t->name, target)) continue;
            size_t bytes = t->end - t->begin;
            uint8_t *copy = malloc(bytes ? bytes : 1);
            memcpy(copy, t->data, bytes);
            if (mod == MOD_NAN && !strcmp(t->name, target) && bytes >= 6) { copy[4] = 0xc0; copy[5] = 0x7f; }
            st_writer_write(&w, copy, bytes);
            free(copy);
            k++;
        }
        st_writer_close(&w);
    }
    free(e);
    st_close(f);
    return dir;
}

static pi0_status load(const char *dir) {
    pi0_model *m = NULL;
    pi0_status st = pi0_model_load(&m, dir, &(pi0_model_params){.quiet = 1});
    CHECK((st == PI0_OK) == (m != NULL), "out pointer NULL on failure");
    pi0_model_free(m);
    return st;
}

static void write_text(const char *dir, const char *file, const char *text) {
    char path[500];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "wb");
    if (f) { fputs(text, f); fclose(f); }
}

static void test_checkpoints(void) {
    CHECK(load(make_ckpt("ok", MOD_NONE, "")) == PI0_OK, "unmodified copy loads: %s", pi0_last_error());
    EXPECT_ERR(load(make_ckpt("drop", MOD_DROP, "action_out_proj.bias")), PI0_ERR_SHAPE,
               "missing tensor 'action_out_proj.bias' (expected (32,) BF16");
    EXPECT_ERR(load(make_ckpt("drop-emb", MOD_DROP, "paligemma_with_expert.paligemma.lm_head.weight")), PI0_ERR_SHAPE,
               "also looked for");
    EXPECT_ERR(load(make_ckpt("shape", MOD_SHAPE, "state_proj.weight")), PI0_ERR_SHAPE,
               "'state_proj.weight': expected (32, 32) BF16 (or F16/F32), found (16, 64) BF16");
    EXPECT_ERR(load(make_ckpt("dtype", MOD_DTYPE, "action_in_proj.bias")), PI0_ERR_SHAPE, "found (16,) I32");
    EXPECT_ERR(load(make_ckpt("nan", MOD_NAN, "paligemma_with_expert.gemma_expert.model.layers.1.mlp.up_proj.weight")),
               PI0_ERR_FORMAT, "non-finite value at flat index 2");
    /* truncated file */
    const char *d = make_ckpt("trunc", MOD_NONE, "");
    char path[500];
    snprintf(path, sizeof path, "%s/model.safetensors", d);
    if (truncate(path, 300000) != 0) perror("truncate");
    EXPECT_ERR(load(d), PI0_ERR_FORMAT, "past the end of the data block");
    if (truncate(path, 5) != 0) perror("truncate");
    EXPECT_ERR(load(d), PI0_ERR_FORMAT, "too short");
    remove(path);
    EXPECT_ERR(load(d), PI0_ERR_IO, "no checkpoint found: expected model.safetensors");
    /* config.json problems */
    d = make_ckpt("cfg", MOD_NONE, "");
    write_text(d, "config.json", "{\"action_dim\": 32,,}");
    EXPECT_ERR(load(d), PI0_ERR_FORMAT, "invalid JSON at line 1");
    /* a file's content is never quoted in a parse error: checkpoint files may be symlinks to any file (the
     * Hugging Face cache links every file into a blob store, so links are followed) */
    write_text(d, "config.json", "root:x:0:0:secret\n");
    EXPECT_ERR(load(d), PI0_ERR_FORMAT, "invalid JSON at line 1 column");
    CHECK(!strstr(pi0_last_error(), "root") && !strstr(pi0_last_error(), "secret"), "content quoted: %s", pi0_last_error());
    write_text(d, "config.json", "{\"action_horizon\": \"ten\"}");
    EXPECT_ERR(load(d), PI0_ERR_FORMAT, "action_horizon: expected a positive integer");
    write_text(d, "config.json", "{\"paligemma_variant\": \"gemma_7b\"}");
    EXPECT_ERR(load(d), PI0_ERR_FORMAT, "unknown 'gemma_7b'");
    write_text(d, "config.json", "{\"pi05\": true}");
    EXPECT_ERR(load(d), PI0_ERR_FORMAT, "lacks the adaRMS tensor");
    write_text(d, "config.json", "{\"paligemma\": {\"width\": 64, \"depth\": 2, \"mlp_dim\": 128, \"num_heads\": 4, "
                                 "\"num_kv_heads\": 1, \"head_dim\": 16, \"vocab_size\": 512}, \"vision\": {\"width\": 32, "
                                 "\"depth\": 2, \"mlp_dim\": 48, \"num_heads\": 4, \"patch_size\": 14, \"image_size\": 56}}");
    EXPECT_ERR(load(d), PI0_ERR_FORMAT, "must share");   /* expert left at gemma_300m: depth 18 != 2 */
    write_text(d, "config.json", "{\"vision\": {\"image_size\": 57}}");
    EXPECT_ERR(load(d), PI0_ERR_FORMAT, "not a multiple of vision.patch_size");
    /* the fuzzer's find: 1109658 patches a side used to square past int before the size check */
    write_text(d, "config.json", "{\"vision\": {\"image_size\": 15535212}}");
    EXPECT_ERR(load(d), PI0_ERR_FORMAT, "gives 1231340876964 patches per image");
    write_text(d, "config.json", "{\"action_horizon\": 70000}");
    EXPECT_ERR(load(d), PI0_ERR_FORMAT, "action_horizon is 70000, at most 65536 is supported");
    snprintf(path, sizeof path, "%s/config.json", d);
    remove(path);
    EXPECT_ERR(load(d), PI0_ERR_IO, "config.json: cannot open");
    EXPECT_ERR(load("/nonexistent/dir"), PI0_ERR_IO, "/nonexistent/dir: no checkpoint found");
    /* a FIFO named as a file is refused at once (open() used to block on it); the alarm turns a hang into a
     * failure of this test binary */
    alarm(30);
    d = make_ckpt("fifo", MOD_NONE, "");
    snprintf(path, sizeof path, "%s/config.json", d);
    remove(path);
    if (mkfifo(path, 0600) != 0) perror("mkfifo");
    EXPECT_ERR(load(d), PI0_ERR_IO, "config.json: not a regular file");
    remove(path);
    write_text(d, "config.json", "{}");
    snprintf(path, sizeof path, "%s/model.safetensors", d);
    remove(path);
    if (mkfifo(path, 0600) != 0) perror("mkfifo");
    EXPECT_ERR(load(d), PI0_ERR_IO, "model.safetensors: not a regular file");
    pi0_tokenizer *tok = NULL;
    EXPECT_ERR(pi0_tokenizer_load(&tok, path), PI0_ERR_IO, "not a regular file");
    alarm(0);
    /* the CUDA backend on a machine without a GPU (or a build without nvcc): a clear error, no crash */
    pi0_model *m = NULL;
    pi0_status st = pi0_model_load(&m, "tests/fixtures/tiny-pi0", &(pi0_model_params){.quiet = 1, .backend = PI0_BACKEND_CUDA});
#ifdef PI0_HAVE_CUDA
    CHECK(st == PI0_OK || (st == PI0_ERR_CUDA && strstr(pi0_last_error(), "CUDA device")), "cuda without a GPU: %s %s",
          pi0_status_str(st), pi0_last_error());
#else
    CHECK(st == PI0_ERR_UNSUPPORTED && strstr(pi0_last_error(), "not in this build"), "cuda not built: %s",
          pi0_last_error());
#endif
    pi0_model_free(m);
    EXPECT_ERR(pi0_model_load(&m, "tests/fixtures/tiny-pi0", &(pi0_model_params){.backend = (pi0_backend_kind)7}),
               PI0_ERR_ARG, "backend 7");
}

/* ---- bad model inputs ---- */

static void test_inputs(void) {
    pi0_model *m = NULL;
    if (pi0_model_load(&m, "tests/fixtures/tiny-pi0", &(pi0_model_params){.quiet = 1}) != PI0_OK) {
        CHECK(0, "load: %s", pi0_last_error());
        return;
    }
    enum { B = 1, N = 3, R = 56, L = 12, H = 5, A = 32 };
    static float img[B * N * R * R * 3], state[B * A], noise[B * H * A], act[B * H * A];
    static int32_t tok[B * L];
    static uint8_t tm[B * L], im[B * N];
    for (int i = 0; i < B * L; i++) { tok[i] = i + 1; tm[i] = 1; }
    for (int i = 0; i < B * N; i++) im[i] = 1;
    int64_t s_img[5] = {B, N, R, R, 3}, s_mask[2] = {B, N}, s_state[2] = {B, A}, s_tok[2] = {B, L},
            s_noise[3] = {B, H, A}, s_bad_img[5] = {B, N, R, R, 4}, s_long[2] = {B, L + 1};
    struct {
        const char *what;
        int drop;
        const char *name;
        pi0_dtype dt;
        int ndim;
        const int64_t *shape;
        const char *needle;
    } cases[] = {
        {"missing images", 1, "images", 0, 0, NULL, "missing tensor 'images'"},
        {"images 4 channels", 0, "images", PI0_DT_F32, 5, s_bad_img,
         "expected (1, 3, 56, 56, 3) F32, found (1, 3, 56, 56, 4) F32"},
        {"tokens too long", 0, "tokens", PI0_DT_I32, 2, s_long, "length 13, expected 1..12"},
        {"tokens as F32", 0, "tokens", PI0_DT_F32, 2, s_tok, "expected (1, 12) I32 or I64, found (1, 12) F32"},
        {"noise wrong shape", 0, "noise", PI0_DT_F32, 2, s_state, "'noise': expected (1, 5, 32) F32"},
        {"missing state (pi0)", 1, "state", 0, 0, NULL, "missing tensor 'state'"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        pi0_tensors *t;
        pi0_tensors_new(&t);
        static float scratch[B * N * R * R * 4];
        const char *names[6] = {"images", "image_masks", "state", "tokens", "token_mask", "noise"};
        for (int k = 0; k < 6; k++) {
            if (!strcmp(names[k], cases[c].name)) {
                if (!cases[c].drop) pi0_tensors_add(t, names[k], cases[c].dt, cases[c].ndim, cases[c].shape, scratch);
                continue;
            }
            if (k == 0) pi0_tensors_add(t, "images", PI0_DT_F32, 5, s_img, img);
            if (k == 1) pi0_tensors_add(t, "image_masks", PI0_DT_BOOL, 2, s_mask, im);
            if (k == 2) pi0_tensors_add(t, "state", PI0_DT_F32, 2, s_state, state);
            if (k == 3) pi0_tensors_add(t, "tokens", PI0_DT_I32, 2, s_tok, tok);
            if (k == 4) pi0_tensors_add(t, "token_mask", PI0_DT_BOOL, 2, s_tok, tm);
            if (k == 5) pi0_tensors_add(t, "noise", PI0_DT_F32, 3, s_noise, noise);
        }
        pi0_inputs in;
        pi0_inputs_buf *ib = NULL;
        pi0_status st = pi0_inputs_from_tensors(m, t, "in", &in, &ib);
        CHECK(st != PI0_OK && strstr(pi0_last_error(), cases[c].needle), "%s: got %s '%s'", cases[c].what,
              pi0_status_str(st), pi0_last_error());
        pi0_inputs_buf_free(ib);
        pi0_tensors_free(t);
    }
    /* value errors through pi0_infer */
    pi0_session *s = NULL;
    CHECK(pi0_session_create(&s, m, NULL) == PI0_OK, "session");
    pi0_inputs ok_in = {.batch = 1, .images = img, .image_masks = im, .state = state, .tokens = tok, .token_mask = tm,
                        .n_tokens = L, .noise = noise};
    CHECK(pi0_infer(s, &ok_in, act) == PI0_OK, "valid inputs run: %s", pi0_last_error());
    pi0_inputs in = ok_in;
    in.batch = 2;
    EXPECT_ERR(pi0_infer(s, &in, act), PI0_ERR_ARG, "batch 2, expected 1..1");
    img[1000] = 3.0f;
    EXPECT_ERR(pi0_infer(s, &ok_in, act), PI0_ERR_ARG, "images[1000] = 3");
    img[1000] = NAN;
    EXPECT_ERR(pi0_infer(s, &ok_in, act), PI0_ERR_ARG, "images[1000] = nan");
    img[1000] = 0;
    /* the first bad value is named, wherever the blocks of the scan fall */
    size_t nimg_vals = sizeof img / sizeof *img;
    img[nimg_vals - 1] = -INFINITY;
    EXPECT_ERR(pi0_infer(s, &ok_in, act), PI0_ERR_ARG, "] = -inf");
    img[4097] = 1.5f;
    img[4095] = NAN;
    EXPECT_ERR(pi0_infer(s, &ok_in, act), PI0_ERR_ARG, "images[4095] = nan");
    img[4095] = 0;
    EXPECT_ERR(pi0_infer(s, &ok_in, act), PI0_ERR_ARG, "images[4097] = 1.5");
    img[4097] = 0;
    img[nimg_vals - 1] = 0;
    state[3] = INFINITY;
    EXPECT_ERR(pi0_infer(s, &ok_in, act), PI0_ERR_ARG, "state[3] is not finite");
    state[3] = 0;
    noise[7] = NAN;
    EXPECT_ERR(pi0_infer(s, &ok_in, act), PI0_ERR_ARG, "noise[7] is not finite");
    noise[7] = 0;
    tok[2] = 512;
    EXPECT_ERR(pi0_infer(s, &ok_in, act), PI0_ERR_ARG, "tokens[0][2] = 512, expected 0..511");
    tm[2] = 0;
    CHECK(pi0_infer(s, &ok_in, act) == PI0_OK, "an out-of-range id under a zero mask is ignored: %s", pi0_last_error());
    tok[2] = 3;
    tm[2] = 1;
    in = ok_in;
    in.n_tokens = 13;
    EXPECT_ERR(pi0_infer(s, &in, act), PI0_ERR_ARG, "n_tokens 13");
    in = ok_in;
    in.tokens = NULL;
    EXPECT_ERR(pi0_infer(s, &in, act), PI0_ERR_ARG, "required");
    /* real-time chunking's inputs: a mode outside the enum, the per-sample form mask without exact, missing arrays */
    float prev[5 * 32] = {0}, rw[5] = {1, 1, 0.5f, 0, 0}, mw[1] = {10};
    uint8_t ex[1] = {1};
    in = ok_in;
    in.rtc = (pi0_rtc_mode)7;
    in.rtc_prev = prev; in.rtc_weights = rw; in.rtc_max_weights = mw;
    EXPECT_ERR(pi0_infer(s, &in, act), PI0_ERR_ARG, "rtc mode 7: expected PI0_RTC_OFF, PI0_RTC_LEROBOT or PI0_RTC_EXACT");
    in.rtc = PI0_RTC_LEROBOT;
    in.rtc_exact = ex;
    EXPECT_ERR(pi0_infer(s, &in, act), PI0_ERR_ARG, "rtc_exact given with rtc mode 1");
    in.rtc = PI0_RTC_OFF;
    EXPECT_ERR(pi0_infer(s, &in, act), PI0_ERR_ARG, "given with rtc off");
    in.rtc = PI0_RTC_EXACT;
    in.rtc_weights = NULL;
    EXPECT_ERR(pi0_infer(s, &in, act), PI0_ERR_ARG, "needs rtc_prev, rtc_weights and rtc_max_weights");
    in.rtc_weights = rw;
    rw[1] = 2;
    EXPECT_ERR(pi0_infer(s, &in, act), PI0_ERR_ARG, "rtc_weights[1] = 2");
    rw[1] = 1;
    CHECK(pi0_infer(s, &in, act) == PI0_OK, "exact RTC with a valid leftover runs: %s", pi0_last_error());
    /* everything masked still gives finite actions (the suffix attends to itself) */
    memset(im, 0, sizeof im);
    memset(tm, 0, sizeof tm);
    CHECK(pi0_infer(s, &ok_in, act) == PI0_OK, "all cameras and tokens masked: %s", pi0_last_error());
    pi0_memory_info mi;   /* a CPU session holds no device memory */
    EXPECT_ERR(pi0_session_memory_info(s, &mi), PI0_ERR_UNSUPPORTED, "the cpu backend has no device memory");
    EXPECT_ERR(pi0_session_memory_info(s, NULL), PI0_ERR_ARG, "pi0_session_memory_info: NULL argument");
    pi0_session_free(s);
    EXPECT_ERR(pi0_session_create(&s, m, &(pi0_session_params){.max_batch = -3}), PI0_ERR_ARG, "max_batch");
    pi0_model_free(m);
}

/* ---- CLI ---- */

static int sh(const char *cmd, const char *needle) {
    char full[2048], errf[400];
    snprintf(errf, sizeof errf, "%s/stderr.txt", tmp);
    snprintf(full, sizeof full, "%s > /dev/null 2> %s", cmd, errf);
    int rc = system(full);
    rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
    if (needle) {
        char *text = pi0_read_file(errf, NULL, 1 << 20);
        int found = text && strstr(text, needle);
        if (!found) printf("  stderr of '%s': %s\n", cmd, text ? text : "(none)");
        free(text);
        if (!found) return -1;
    }
    return rc;
}

/* Runs cmd; *out / *err get its stdout / stderr (malloc'd, "" when empty). Returns the exit status (128: a signal). */
static int run_cli(const char *cmd, char **out, char **err) {
    char full[2048], of[400], ef[400];
    snprintf(of, sizeof of, "%s/stdout.txt", tmp);
    snprintf(ef, sizeof ef, "%s/stderr.txt", tmp);
    snprintf(full, sizeof full, "%s > %s 2> %s", cmd, of, ef);
    int rc = system(full);
    rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
    *out = pi0_read_file(of, NULL, 1 << 20);
    *err = pi0_read_file(ef, NULL, 1 << 20);
    if (!*out) *out = strdup("");
    if (!*err) *err = strdup("");
    return rc;
}

/* First contact: every command's --help, usage after a usage error, no overwrite without --force, a
 * missing GPU found before a 7 GB checkpoint is generated, bench's header and labels, no temporary files left
 * after SIGINT. */
static void test_cli_first_contact(void) {
    char cmd[1024], *o, *e;
    const char *cmds[] = {"run", "infer", "gen-checkpoint", "bench", "info", "convert", "tokenize"};
    for (int i = 0; i < 7; i++)
        for (int h = 0; h < 2; h++) {
            snprintf(cmd, sizeof cmd, "%s %s %s", PI0, cmds[i], h ? "-h" : "--help");
            char want[160];
            snprintf(want, sizeof want, "usage: pi0 %s", cmds[i]);
            int rc = run_cli(cmd, &o, &e);
            CHECK(rc == 0 && strstr(o, want), "pi0 %s %s: exit %d, usage on stdout", cmds[i], h ? "-h" : "--help", rc);
            free(o); free(e);
        }
    snprintf(cmd, sizeof cmd, "%s info", PI0);
    int rc = run_cli(cmd, &o, &e);
    CHECK(rc == 2 && strstr(e, "usage: pi0 info --checkpoint DIR"), "usage error prints the command's usage: %d %s", rc, e);
    free(o); free(e);
    /* pi0 info's device footprint options: checked before the checkpoint is read */
    snprintf(cmd, sizeof cmd, "%s info --checkpoint %s/none --max-batch 2", PI0, tmp);
    rc = run_cli(cmd, &o, &e);
    CHECK(rc == 2 && strstr(e, "--max-batch sizes a CUDA session's footprint: it needs --backend cuda"),
          "info --max-batch without --backend cuda: %d %s", rc, e);
    free(o); free(e);
    snprintf(cmd, sizeof cmd, "%s info --checkpoint %s/none --device 1", PI0, tmp);
    rc = run_cli(cmd, &o, &e);
    CHECK(rc == 2 && strstr(e, "--device picks the GPU of a CUDA session's footprint: it needs --backend cuda"),
          "info --device without --backend cuda: %d %s", rc, e);
    free(o); free(e);
    snprintf(cmd, sizeof cmd, "%s info --checkpoint %s/none --backend cuda --max-batch 0", PI0, tmp);
    rc = run_cli(cmd, &o, &e);
    CHECK(rc == 2 && strstr(e, "--max-batch"), "info --max-batch 0: %d %s", rc, e);
    free(o); free(e);
    snprintf(cmd, sizeof cmd, "%s gen-checkpoint --variant tiny-pi0 --seed 1 %s/gc", PI0, tmp);
    CHECK(sh(cmd, NULL) == 0, "gen-checkpoint writes");
    CHECK(sh(cmd, "a checkpoint is already there (pass force / --force") == 1, "gen-checkpoint refuses to overwrite");
    snprintf(cmd, sizeof cmd, "%s gen-checkpoint --variant tiny-pi0 --seed 2 --force %s/gc", PI0, tmp);
    CHECK(sh(cmd, NULL) == 0, "gen-checkpoint --force overwrites");
    /* no GPU on this machine (or no CUDA in this build): refused before generating anything */
    snprintf(cmd, sizeof cmd, "mkdir -p %s/bt && TMPDIR=%s/bt %s bench --backend cuda", tmp, tmp, PI0);
    rc = run_cli(cmd, &o, &e);
    char ls[600];
    snprintf(ls, sizeof ls, "test -z \"$(ls -A %s/bt)\"", tmp);
    CHECK(rc == 1 && !strstr(e, "generating") && !strstr(o, "workload") && system(ls) == 0,
          "bench --backend cuda without a usable GPU: refused first, no checkpoint, no header: %d %s", rc, e);
    free(o); free(e);
    snprintf(cmd, sizeof cmd, "%s bench --workload pi0-3cam --iters 2 --warmup 0", PI0);
    rc = run_cli(cmd, &o, &e);
    CHECK(rc == 0 && strstr(o, "machine: ") && strstr(o, "p50_ms") && strstr(o, "vision_ms") && strstr(o, "denoise_ms") &&
          strstr(o, "separate runs that synchronise"), "bench prints the machine, units and how the split is measured");
    free(o); free(e);
    /* SIGINT while the full-size checkpoint is being written: the temporary folder is removed */
    snprintf(cmd, sizeof cmd, "TMPDIR=%s/bt timeout -s INT 3 %s bench --full --workload pi0-3cam", tmp, PI0);
    rc = run_cli(cmd, &o, &e);
    CHECK(rc != 0 && strstr(e, "generating a random pi0 checkpoint") && system(ls) == 0,
          "bench interrupted while generating: nothing left in TMPDIR (exit %d)", rc);
    free(o); free(e);
}

static void test_cli(void) {
    char cmd[1024], out[400];
    snprintf(out, sizeof out, "%s/out.safetensors", tmp);
    snprintf(cmd, sizeof cmd, "%s infer --checkpoint tests/fixtures/tiny-pi05 --inputs "
             "tests/fixtures/tiny-pi05/b2.in.safetensors --output %s --dump", PI0, out);
    CHECK(sh(cmd, "pi0.5, B=2, 10 steps on cpu") == 0, "pi0 infer runs");
    pi0_tensors *got = NULL, *exp = NULL;
    const void *a = NULL, *b = NULL;
    int64_t sh1[8], sh2[8];
    int ok = pi0_tensors_open(&got, out) == PI0_OK &&
             pi0_tensors_open(&exp, "tests/fixtures/tiny-pi05/b2.out.safetensors") == PI0_OK &&
             pi0_tensors_get(got, "actions", NULL, NULL, sh1, &a) == PI0_OK &&
             pi0_tensors_get(exp, "actions", NULL, NULL, sh2, &b) == PI0_OK &&
             pi0_tensors_get(got, "prefix.k.01", NULL, NULL, NULL, NULL) == PI0_OK;
    CHECK(ok && sh1[0] == 2 && sh1[1] == 5 && sh1[2] == 32 && rel_l2(a, b, 320, NULL) < 1e-5,
          "pi0 infer output equals the fixture and carries the dumps");
    pi0_tensors_free(got);
    pi0_tensors_free(exp);
    snprintf(cmd, sizeof cmd, "%s infer --checkpoint tests/fixtures/tiny-pi0 --inputs /nonexistent.safetensors "
             "--output %s", PI0, out);
    CHECK(sh(cmd, "/nonexistent.safetensors: cannot open") == 1, "missing inputs file: exit 1 with the path");
    /* an explicit prompt length wins over the inputs' (without it, the tokens' length sizes the model) */
    snprintf(cmd, sizeof cmd, "%s infer --checkpoint tests/fixtures/tiny-pi0 --max-token-len 12 --inputs "
             "tests/fixtures/tiny-pi05/b1.in.safetensors --output %s", PI0, out);
    CHECK(sh(cmd, "tokens: length 16, expected 1..12") == 1, "16 tokens with --max-token-len 12: clear error");
    snprintf(cmd, sizeof cmd, "%s infer --checkpoint tests/fixtures/tiny-pi0 --steps 0", PI0);
    CHECK(sh(cmd, "--steps: expected an integer in 1..1000") == 2, "bad --steps: exit 2");
    snprintf(cmd, sizeof cmd, "%s infer --frobnicate", PI0);
    CHECK(sh(cmd, "unknown or incomplete option '--frobnicate'") == 2, "unknown option: exit 2");
    snprintf(cmd, sizeof cmd, "%s gen-checkpoint --variant pi7 --seed 1 %s/g", PI0, tmp);
    CHECK(sh(cmd, "unknown variant 'pi7'") == 1, "gen-checkpoint bad variant");
    snprintf(cmd, sizeof cmd, "%s bench --workload nope", PI0);
    CHECK(sh(cmd, "unknown workload 'nope'") == 2, "bench unknown workload");
    snprintf(cmd, sizeof cmd, "%s bench --workload pi0-libero --iters 2 --warmup 1", PI0);
    CHECK(sh(cmd, "REDUCED workload") == 0, "bench default runs and says it is reduced on the CPU");
    snprintf(cmd, sizeof cmd, "%s frob", PI0);
    CHECK(sh(cmd, "unknown command 'frob'") == 2, "unknown command");
}

/* A tokenizer whose spaces become three byte tokens each ("\xe2\x96\x81" with byte fallback but no byte pieces):
 * the π0 prompt once overran its token buffer (more tokens than bytes) and wrote past it on the second encode. */
static void test_tokenizer_expansion(void) {
    static const uint8_t model[] = {   /* pieces <unk> and "a", BPE, byte fallback, no whitespace cleanup */
        0x0a, 0x09, 0x0a, 0x05, 0x3c, 0x75, 0x6e, 0x6b, 0x3e, 0x18, 0x02, 0x0a, 0x05, 0x0a, 0x01, 0x61, 0x18,
        0x01, 0x12, 0x05, 0x18, 0x02, 0x98, 0x02, 0x01, 0x1a, 0x02, 0x20, 0x00};
    char path[600], prompt[103];
    snprintf(path, sizeof path, "%s/spaces.model", tmp);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(model, 1, sizeof model, f) == sizeof model && fclose(f) == 0, "writing %s", path);
    pi0_tokenizer *tok = NULL;
    CHECK(pi0_tokenizer_load(&tok, path) == PI0_OK, "loading %s: %s", path, pi0_last_error());
    memset(prompt, ' ', sizeof prompt);
    prompt[0] = prompt[101] = 'a';
    prompt[102] = 0;
    int32_t ids[400];
    uint8_t mask[400];
    const double state[2] = {0.5, -0.5};
    for (int fmt = 0; tok && fmt < 3; fmt++) {
        int n = 0;
        pi0_status st = pi0_tokenize_prompt(tok, prompt, fmt == 0 ? PI0_PROMPT_PI0 : fmt == 1 ? PI0_PROMPT_PI05 : PI0_PROMPT_RAW,
                                            state, 2, 400, ids, mask, &n);
        /* 100 spaces alone are 300 tokens: more tokens than the prompt has bytes, all kept */
        CHECK(st == PI0_OK && n > 300 && n < 400, "format %d: %s, %d tokens", fmt, pi0_status_str(st), n);
    }
    pi0_tokenizer_free(tok);
}

/* A BYTE piece's name is exactly "<0xHH>" (two upper-case hex digits): "<0x-9>" was once read by sscanf as byte
 * 4294967287 and written past the 256-entry byte table. Each model: <unk>, the byte piece, BPE with byte fallback. */
static void test_tokenizer_byte_pieces(void) {
    static const struct { const char name[7]; int ok; } cases[] = {
        {"<0x41>", 1}, {"<0xFF>", 1}, {"<0x-9>", 0}, {"<0x+9>", 0}, {"<0x 9>", 0}, {"<0xab>", 0}, {"<0xG0>", 0},
        {"<0x41)", 0}, {"[0x41>", 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint8_t model[64] = {0x0a, 0x09, 0x0a, 0x05, '<', 'u', 'n', 'k', '>', 0x18, 0x02,   /* <unk>, UNKNOWN */
                             0x0a, 0x0a, 0x0a, 0x06};                                      /* the piece, 6 bytes */
        size_t n = 15;
        memcpy(model + n, cases[c].name, 6);
        n += 6;
        static const uint8_t tail[] = {0x18, 0x06,                                         /* BYTE */
                                       0x12, 0x05, 0x18, 0x02, 0x98, 0x02, 0x01,           /* BPE, byte fallback */
                                       0x1a, 0x02, 0x20, 0x00};                            /* identity, no cleanup */
        memcpy(model + n, tail, sizeof tail);
        n += sizeof tail;
        char path[600];
        snprintf(path, sizeof path, "%s/byte%zu.model", tmp, c);
        FILE *f = fopen(path, "wb");
        CHECK(f && fwrite(model, 1, n, f) == n && fclose(f) == 0, "writing %s", path);
        pi0_tokenizer *tok = NULL;
        if (cases[c].ok) {
            CHECK(pi0_tokenizer_load(&tok, path) == PI0_OK, "byte piece %s: %s", cases[c].name, pi0_last_error());
        } else {
            char want[160];
            snprintf(want, sizeof want, "byte piece 1 '%s', expected <0xXX>", cases[c].name);
            EXPECT_ERR(pi0_tokenizer_load(&tok, path), PI0_ERR_FORMAT, want);
        }
        pi0_tokenizer_free(tok);
    }
}

/* OCDBT: a B+tree whose nodes are reached more than once. tests/fuzz/regress_ocdbt/shared-nodes (u32 length, the
 * manifest, then the node file): a root of 40 references to one interior node of 40 references to one leaf of 40
 * keys, 1.3 KB naming 64000 entries (a 15 KB one once took 2 GB). Refused at the second visit. */
typedef struct { const uint8_t *m, *d; size_t mn, dn; } mem_db;
static pi0_status mem_map(void *user, const char *path, const uint8_t **data, size_t *len, int *found) {
    mem_db *x = user;
    int man = !strcmp(path, "manifest.ocdbt");
    *data = man ? x->m : x->d;
    *len = man ? x->mn : x->dn;
    *found = 1;
    return PI0_OK;
}
static void test_ocdbt_shared_nodes(void) {
    size_t n = 0;
    uint8_t *buf = (uint8_t *)pi0_read_file("tests/fuzz/regress_ocdbt/shared-nodes", &n, 1 << 20);
    CHECK(buf && n > 4, "reading tests/fuzz/regress_ocdbt/shared-nodes: %s", pi0_last_error());
    if (!buf || n <= 4) { free(buf); return; }
    uint32_t m = (uint32_t)buf[0] | (uint32_t)buf[1] << 8 | (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 24;
    CHECK(m <= n - 4, "manifest length %u of %zu bytes", m, n);
    mem_db x = {buf + 4, buf + 4 + m, m, n - 4 - m};
    ocdbt *db = NULL;
    EXPECT_ERR(ocdbt_open(&db, "shared", &(ocdbt_files){mem_map, &x}), PI0_ERR_FORMAT,
               "referenced a second time (B+tree nodes have one parent)");
    ocdbt_close(db);
    free(buf);
}

/* OCDBT: trees that build far more memory than they store. A prefix-compressed key is rebuilt in full from the
 * previous key (8 bytes of node name a 64 KB key), a child's keys carry its parent's prefix, and a data file table
 * entry is a few bytes; the reader bounds what it builds (docs/checkpoints.md, OCDBT). Each tree is written here,
 * opened in a child process whose peak RSS (getrusage) must stay under 256 MB, and must be refused with the limit
 * named. Without the bounds the first three take 0.5 GB each and the fourth loads (sizes chosen to stay near that;
 * RLIMIT_AS caps the child at 2 GB outside sanitizer builds, whose shadow memory such a limit breaks). The last is
 * within the bounds and loads, but names 25000 data files 250000 times: a reader that looks each name up among the
 * files seen so far compares ~10^12 bytes, and the child's 60 s CPU limit (RLIMIT_CPU) ends it; the load needs well
 * under a second. */
typedef struct { uint8_t *p; size_t n, cap; } bytes;
static void put(bytes *b, const void *s, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) { printf("out of memory\n"); _exit(3); }
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static void put_u8(bytes *b, uint8_t v) { put(b, &v, 1); }
static void put_fill(bytes *b, uint8_t v, size_t n) { for (size_t i = 0; i < n; i++) put_u8(b, v); }
static void put_var(bytes *b, uint64_t v) {
    for (; v >= 0x80; v >>= 7) put_u8(b, (uint8_t)(v | 0x80));
    put_u8(b, (uint8_t)v);
}
/* magic (BE) | length (LE) | version 0 | compression (0 none, 1 zstd) | body | CRC-32C (LE); frees body */
static void put_node(bytes *out, uint32_t magic, bytes *body, int zstd) {
    bytes n = {0};
    for (int i = 3; i >= 0; i--) put_u8(&n, (uint8_t)(magic >> (8 * i)));
    put_fill(&n, 0, 8);
    put_u8(&n, 0);
    put_u8(&n, (uint8_t)zstd);
    if (zstd) {
        size_t cap = ZSTD_compressBound(body->n), at = n.n;
        put_fill(&n, 0, cap);
        n.n = at + ZSTD_compress(n.p + at, cap, body->p, body->n, 3);
    } else {
        put(&n, body->p, body->n);
    }
    for (int i = 0; i < 8; i++) n.p[4 + i] = (uint8_t)((uint64_t)(n.n + 4) >> (8 * i));
    uint32_t c = ocdbt_crc32c(n.p, n.n);
    for (int i = 0; i < 4; i++) put_u8(&n, (uint8_t)(c >> (8 * i)));
    put(out, n.p, n.n);
    free(n.p); free(body->p);
    *body = (bytes){0};
}
/* The data file table of one file, "d/x" (every file but the manifest is the node blob in mem_map). */
static void put_dft_dx(bytes *b) { put_var(b, 1); put_var(b, 3); put_var(b, 0); put(b, "d/x", 3); }
/* A single-file manifest (config as Orbax writes it, uncompressed nodes) whose newest version's root is at
 * d/x@off+len, or, with files > 0, whose data file table names that many 100-byte paths instead. */
static void put_manifest(bytes *out, int height, uint64_t off, uint64_t len, uint64_t files) {
    bytes b = {0};
    put_fill(&b, 0x11, 16);
    put_var(&b, 0); put_var(&b, 1024); put_var(&b, 100000000); put_u8(&b, 4); put_var(&b, 0);
    if (files) {   /* each path the previous one's first 99 bytes and one more: 4 bytes an entry */
        put_var(&b, files);
        for (uint64_t i = 1; i < files; i++) put_var(&b, 99);
        put_var(&b, 100);
        for (uint64_t i = 1; i < files; i++) put_var(&b, 1);
        for (uint64_t i = 0; i < files; i++) put_var(&b, 100);
        put_fill(&b, 'c', 100);
        for (uint64_t i = 1; i < files; i++) put_u8(&b, (uint8_t)('a' + i % 26));
    } else {
        put_dft_dx(&b);
    }
    put_var(&b, 1); put_var(&b, 1); put_u8(&b, (uint8_t)height); put_var(&b, 0); put_var(&b, off); put_var(&b, len);
    put_fill(&b, 0, 4);   /* statistics and commit time: not read */
    put_node(out, 0x0cdb3a2a, &b, files > 0);
}
/* A leaf of n keys with empty inline values: the first key `first` bytes, then each key the previous one's first
 * `first - 3` bytes and a 3-byte counter (no NUL bytes, increasing). */
static void put_leaf(bytes *out, uint64_t n, uint64_t first, uint8_t fill) {
    bytes b = {0};
    put_u8(&b, 0);
    put_var(&b, 0);   /* no data files */
    put_var(&b, n);
    for (uint64_t i = 1; i < n; i++) put_var(&b, first - 3);
    put_var(&b, first);
    for (uint64_t i = 1; i < n; i++) put_var(&b, 3);
    put_fill(&b, fill, first - 3);
    for (uint64_t i = 0; i < n; i++) {
        put_u8(&b, (uint8_t)(1 + i / 65025));
        put_u8(&b, (uint8_t)(1 + i / 255 % 255));
        put_u8(&b, (uint8_t)(1 + i % 255));
    }
    for (uint64_t i = 0; i < n; i++) put_var(&b, 0);
    put_fill(&b, 0, n);   /* kinds: inline */
    put_node(out, 0x0cdb20de, &b, 0);
}

typedef struct { const char *label; int kind; pi0_status want; const char *needles[4]; } hostile_case;

/* This process's resident set in KB (/proc/self/statm), 0 when unknown. */
static long rss_kb(void) {
    long pages = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
    if (f) fclose(f);
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* In the child: builds case k's files, opens them, writes "RSS at start (KB)|status|message" to fd. */
static void hostile_open(int k, int fd) {
    long start = rss_kb();
    bytes man = {0}, d = {0};
    if (k == 0) {            /* one 100 KB leaf of 4000 keys of 64 KB each: 262 MB of keys, built twice */
        put_leaf(&d, 4000, 65535, 'a');
        put_manifest(&man, 0, 0, d.n, 0);
    } else if (k == 1) {     /* 24 leaves of 400 three-byte keys under a root whose 60 KB keys prefix them */
        const int C = 24, M = 400;
        uint64_t off[24], len[24];
        for (int c = 0; c < C; c++) { off[c] = d.n; put_leaf(&d, M, 3, 'b'); len[c] = d.n - off[c]; }
        bytes b = {0};
        put_u8(&b, 1);
        put_dft_dx(&b);
        put_var(&b, (uint64_t)C);
        for (int c = 1; c < C; c++) put_var(&b, 59998);
        put_var(&b, 60000);
        for (int c = 1; c < C; c++) put_var(&b, 2);
        for (int c = 0; c < C; c++) put_var(&b, 60000);   /* subtree common prefix: the whole key */
        put_fill(&b, 'r', 59998);
        for (int c = 0; c < C; c++) { put_u8(&b, 1); put_u8(&b, (uint8_t)(1 + c)); }
        for (int c = 0; c < C; c++) put_var(&b, 0);
        for (int c = 0; c < C; c++) put_var(&b, off[c]);
        for (int c = 0; c < C; c++) put_var(&b, len[c]);
        put_fill(&b, 0, 3 * (size_t)C);   /* statistics */
        uint64_t root = d.n;
        put_node(&d, 0x0cdb20de, &b, 0);
        put_manifest(&man, 1, root, d.n - root, 0);
    } else if (k == 2) {     /* a zstd manifest whose data file table names 2 million 100-byte paths */
        put_manifest(&man, 0, 0, 16, 2000000);
    } else if (k == 3) {     /* one 2 MB leaf of 300000 three-byte keys */
        put_leaf(&d, 300000, 3, 'k');
        put_manifest(&man, 0, 0, d.n, 0);
    } else {                 /* a zstd leaf of 250000 values in 25000 data files of 1000-byte paths, scattered */
        const uint64_t F = 25000, n = 250000;
        bytes b = {0};
        put_u8(&b, 0);
        put_var(&b, F);
        for (uint64_t i = 1; i < F; i++) put_var(&b, 996);
        for (uint64_t i = 0; i < F; i++) put_var(&b, i ? 4 : 1000);
        for (uint64_t i = 0; i < F; i++) put_var(&b, 0);
        put_fill(&b, 'p', 996);
        for (uint64_t i = 0; i < F; i++) { char x[8]; snprintf(x, sizeof x, "%04llx", (unsigned long long)i); put(&b, x, 4); }
        put_var(&b, n);
        for (uint64_t i = 1; i < n; i++) put_var(&b, 0);
        for (uint64_t i = 0; i < n; i++) put_var(&b, 3);
        for (uint64_t i = 0; i < n; i++) {
            put_u8(&b, (uint8_t)(1 + i / 65025)); put_u8(&b, (uint8_t)(1 + i / 255 % 255)); put_u8(&b, (uint8_t)(1 + i % 255));
        }
        for (uint64_t i = 0; i < n; i++) put_var(&b, 0);   /* value lengths */
        put_fill(&b, 1, n);                                 /* kinds: in a data file */
        for (uint64_t i = 0; i < n; i++) put_var(&b, i * 7919 % F);
        for (uint64_t i = 0; i < n; i++) put_var(&b, 0);   /* offsets */
        put_node(&d, 0x0cdb20de, &b, 1);
        put_manifest(&man, 0, 0, d.n, 0);
    }
    mem_db x = {man.p, d.p, man.n, d.n};
    ocdbt *db = NULL;
    pi0_status st = ocdbt_open(&db, "hostile", &(ocdbt_files){mem_map, &x});
    ocdbt_close(db);
    dprintf(fd, "%ld|%d|%s", start, (int)st, st == PI0_OK ? "" : pi0_last_error());
}

static void test_ocdbt_amplification(void) {
    static const hostile_case cases[] = {
        {"a leaf of 4000 keys of 64 KB", 0, PI0_ERR_FORMAT, {"hostile: B+tree node d/x@0+", "bytes of keys", "67108864", "262140000"}},
        {"24 leaves under 60 KB prefixes", 1, PI0_ERR_FORMAT, {"hostile: B+tree node d/x@", "bytes of keys", "67108864"}},
        {"a manifest naming 2 million data files", 2, PI0_ERR_FORMAT, {"hostile/manifest.ocdbt", "data files", "65536", "2000000"}},
        {"a leaf of 300000 keys", 3, PI0_ERR_FORMAT, {"hostile: B+tree node d/x@0+", "B+tree entries", "262144", "300000"}},
        {"250000 values in 25000 data files", 4, PI0_OK, {""}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        int fds[2];
        if (pipe(fds) != 0) { CHECK(0, "pipe"); return; }
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_UNDEFINED__)
            setrlimit(RLIMIT_AS, &(struct rlimit){(rlim_t)2 << 30, (rlim_t)2 << 30});
#endif
            setrlimit(RLIMIT_CPU, &(struct rlimit){60, 60});
            hostile_open(cases[k].kind, fds[1]);
            _exit(0);
        }
        close(fds[1]);
        char msg[1024] = "";
        size_t got = 0;
        for (ssize_t r; got < sizeof msg - 1 && (r = read(fds[0], msg + got, sizeof msg - 1 - got)) > 0;) got += (size_t)r;
        msg[got] = 0;
        close(fds[0]);
        int wst = 0;
        struct rusage ru = {0};
        wait4(pid, &wst, 0, &ru);
        /* the load's own peak: the child's peak less what it had at the fork (this test binary's pages) */
        char *status = strchr(msg, '|'), *text = status ? strchr(status + 1, '|') : NULL;
        long mb = (ru.ru_maxrss - atol(msg)) / 1024;
        int ok = WIFEXITED(wst) && WEXITSTATUS(wst) == 0 && text && atoi(status + 1) == (int)cases[k].want;
        for (int i = 0; i < 4 && cases[k].needles[i]; i++) ok &= text && strstr(text, cases[k].needles[i]) != NULL;
        CHECK(ok, "%s: wanted %s naming '%s'; got %s %d, '%s'", cases[k].label, pi0_status_str(cases[k].want),
              cases[k].needles[0], WIFSIGNALED(wst) ? "signal" : "exit status",
              WIFSIGNALED(wst) ? WTERMSIG(wst) : WEXITSTATUS(wst), msg);
        CHECK(mb < 256, "%s: peak RSS %ld MB above the %ld MB at the fork (bound 256 MB)", cases[k].label, mb, atol(msg) / 1024);
        printf("ocdbt %-40s peak RSS %4ld MB (+ %ld MB at the fork)  %s: %s\n", cases[k].label, mb, atol(msg) / 1024,
               ok && mb < 256 ? "OK" : "FAIL", text ? text + 1 : msg);
    }
}

int main(void) {
    if (!mkdtemp(tmp)) { perror("mkdtemp"); return 1; }
    if (getenv("PI0_BIN")) PI0 = getenv("PI0_BIN");
    test_headers();
    test_checkpoints();
    test_inputs();
    test_cli();
    test_cli_first_contact();
    test_tokenizer_expansion();
    test_tokenizer_byte_pieces();
    test_ocdbt_shared_nodes();
    test_ocdbt_amplification();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", tmp);
    return test_summary("test_errors");
}
