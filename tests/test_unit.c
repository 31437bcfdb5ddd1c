/* test_unit.c — unit checks of the pieces below the model: bf16/f16 conversion, RNG, safetensors
 * round trip and page release, config variants and consistency rules, gen-checkpoint output (openpi key layout,
 * tied-embedding alias, orphan lm_head), and engine properties the fixtures cannot show alone:
 * determinism across thread counts, batch = concatenation of single runs, seeded noise. */
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"
#include "pi0.h"
#include "quant.h"
#include "safetensors.h"
#include "test.h"
#include "util.h"

static char tmpdir[] = "/tmp/pi0-unit-XXXXXX";

static void test_conversions(void) {
    CHECK(pi0_f32_to_bf16(1.0f) == 0x3f80, "bf16(1)");
    CHECK(pi0_bf16_to_f32(0xc000) == -2.0f, "bf16 -2");
    /* round to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 -> 1 */
    CHECK(pi0_f32_to_bf16(1.00390625f) == 0x3f80, "tie to even");
    CHECK(pi0_f32_to_bf16(1.005859375f) == 0x3f81, "round up");
    CHECK(pi0_f16_to_f32(0x3c00) == 1.0f && pi0_f16_to_f32(0xc000) == -2.0f, "f16");
    CHECK(pi0_f16_to_f32(0x0001) == ldexpf(1, -24), "f16 subnormal");
    pi0_rng r;
    pi0_rng_seed(&r, 42);
    double s = 0, s2 = 0;
    for (int i = 0; i < 100000; i++) { double x = pi0_rng_normal(&r); s += x; s2 += x * x; }
    CHECK(fabs(s / 1e5) < 0.02 && fabs(s2 / 1e5 - 1) < 0.02, "normal mean %.4f var %.4f", s / 1e5, s2 / 1e5);
}

/* A safetensors buffer from header text and data bytes (the header is not padded: its length is what it is). */
static size_t st_buffer(uint8_t *buf, const char *header, const void *data, size_t n) {
    uint64_t hl = strlen(header);
    memcpy(buf, &hl, 8);
    memcpy(buf + 8, header, hl);
    memcpy(buf + 8 + hl, data, n);
    return 8 + hl + n;
}

/* Hardening: unaligned tensor data is read through aligned copies (ASan/UBSan would trap a misaligned
 * typed load in `make debug`), and an overlap hidden behind an empty tensor is found. */
static void test_safetensors_hostile(void) {
    uint8_t buf[512];
    float fv[3] = {1.5f, -2.25f, 3.0f};
    uint16_t hv[2] = {0x3f80, 0xc000};
    uint8_t data[16];
    memcpy(data, hv, 4);
    memcpy(data + 4, fv, 12);
    /* header length 83 (odd): the data block starts at byte 91 */
    const char *h = "{\"h\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                    "\"f\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[4,16]}}";
    st_file *f = NULL;
    size_t n = st_buffer(buf + 1, h, data, sizeof data);   /* buf + 1: odd addresses whatever the header */
    CHECK(st_parse(&f, "odd", buf + 1, n) == PI0_OK, "unaligned tensors parse: %s", pi0_last_error());
    const st_tensor *tf = f ? st_find(f, "f") : NULL, *th = f ? st_find(f, "h") : NULL;
    float got[3] = {0}, goth[2] = {0};
    if (tf) pi0_to_f32(got, tf->data, tf->dtype, 3);
    if (th) pi0_to_f32(goth, th->data, th->dtype, 2);
    CHECK(tf && th && (uintptr_t)tf->data % 4 == 0 && (uintptr_t)th->data % 2 == 0 && !memcmp(got, fv, sizeof fv) &&
          goth[0] == 1.0f && goth[1] == -2.0f, "unaligned F32 / BF16 read through aligned copies");
    st_close(f);
    const char *ov = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[2,2]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
    n = st_buffer(buf, ov, data, sizeof data);
    f = NULL;
    CHECK(st_parse(&f, "overlap", buf, n) == PI0_ERR_FORMAT && strstr(pi0_last_error(), "overlap"),
          "overlap behind an empty tensor refused: %s", f ? "accepted" : pi0_last_error());
    st_close(f);
}

static void test_safetensors_roundtrip(void) {
    pi0_tensors *t;
    CHECK(pi0_tensors_new(&t) == PI0_OK, "new");
    float a[6] = {1, 2, 3, 4, 5, 6};
    int32_t b[3] = {7, -8, 9};
    uint8_t c[2] = {1, 0};
    int64_t sa[2] = {2, 3}, sb[1] = {3}, sc[2] = {1, 2};
    CHECK(pi0_tensors_add(t, "a", PI0_DT_F32, 2, sa, a) == PI0_OK, "add a");
    CHECK(pi0_tensors_add(t, "b", PI0_DT_I32, 1, sb, b) == PI0_OK, "add b");
    CHECK(pi0_tensors_add(t, "c", PI0_DT_BOOL, 2, sc, c) == PI0_OK, "add c");
    char path[300];
    snprintf(path, sizeof path, "%s/rt.safetensors", tmpdir);
    CHECK(pi0_tensors_save(t, path) == PI0_OK, "save: %s", pi0_last_error());
    pi0_tensors_free(t);
    st_file *f;
    CHECK(st_open(&f, path) == PI0_OK, "reopen: %s", pi0_last_error());
    if (!f) return;
    CHECK(f->n_tensors == 3, "3 tensors");
    const st_tensor *x = st_find(f, "a");
    CHECK(x && x->dtype == PI0_DT_F32 && x->ndim == 2 && x->shape[1] == 3 && !memcmp(x->data, a, sizeof a), "a back");
    x = st_find(f, "b");
    CHECK(x && x->dtype == PI0_DT_I32 && !memcmp(x->data, b, sizeof b), "b back");
    x = st_find(f, "c");
    CHECK(x && x->dtype == PI0_DT_BOOL && !memcmp(x->data, c, sizeof c), "c back");
    CHECK(((8 + *(const uint64_t *)f->map) % 8) == 0, "data block 8-aligned");
    st_close(f);
}

/* Resident kB of the mapping that holds addr (its Rss in /proc/self/smaps), or -1: the tensor's own pages, not the
 * process's (whose other memory, an emulator's translated code among it, comes and goes meanwhile). */
static long mapping_rss_kb(const void *addr) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    long rss = -1;
    int in = 0;
    uintptr_t a = (uintptr_t)addr;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            if (in) break;
            in = a >= lo && a < hi;
        } else if (in && sscanf(line, "Rss: %ld kB", &rss) == 1) {
            break;
        }
    }
    fclose(f);
    return rss;
}

/* Whether madvise(MADV_DONTNEED) drops pages here: qemu-user (the emulated suite) ignores it. */
static int madvise_drops(void) {
    long pg = sysconf(_SC_PAGESIZE);
    volatile char *p = mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 0;
    p[0] = 1;
    madvise((void *)p, (size_t)pg, MADV_DONTNEED);
    int dropped = p[0] == 0;
    munmap((void *)p, (size_t)pg);
    return dropped;
}

/* st_release (what a GPU's weight store calls once it has its copy): the tensor's pages leave the process, its data
 * reads back the same from the file, and memory outside the mapping is left alone. */
static void test_st_release(void) {
    size_t n = (size_t)4 << 20;   /* 16 MB of f32 */
    float *x = malloc(n * sizeof(float));
    if (!x) { CHECK(0, "st_release: out of memory"); return; }
    for (size_t i = 0; i < n; i++) x[i] = (float)(i % 1000);
    char path[300];
    snprintf(path, sizeof path, "%s/release.safetensors", tmpdir);
    st_entry e = {.name = "t", .dtype = PI0_DT_F32, .ndim = 1, .shape = {(int64_t)n}};
    st_writer w;
    st_file *f = NULL;
    int ok = st_writer_open(&w, path, &e, 1, NULL, 0) == PI0_OK && st_writer_write(&w, x, n * sizeof(float)) == PI0_OK &&
             st_writer_close(&w) == PI0_OK && st_open(&f, path) == PI0_OK;
    CHECK(ok, "st_release: write and open %s: %s", path, pi0_last_error());
    const st_tensor *t = ok ? st_find(f, "t") : NULL;
    if (t) {
        CHECK(!memcmp(t->data, x, n * sizeof(float)), "st_release: the tensor as written");   /* every page touched */
        long before = mapping_rss_kb(t->data);
        st_release(f, t->data, n * sizeof(float));
        long after = mapping_rss_kb(t->data), want = (long)(n * sizeof(float)) / 1024 * 9 / 10;
        if (before < 0)
            printf("st_release: no /proc/self/smaps entry for the mapping here: resident size not checked\n");
        else if (madvise_drops())
            CHECK(before - after >= want, "st_release: the mapping's resident size %ld kB -> %ld kB, expected at least "
                  "%ld kB less", before, after, want);
        else printf("st_release: madvise(MADV_DONTNEED) drops nothing here (qemu-user): resident size not checked\n");
        CHECK(!memcmp(t->data, x, n * sizeof(float)), "st_release: the data reads back from the file");
        st_release(f, x, n * sizeof(float));   /* not in the mapping: untouched */
        CHECK(x[n - 1] == (float)((n - 1) % 1000), "st_release: memory outside the mapping is left alone");
    }
    st_close(f);
    free(x);
}

static void test_config(void) {
    pi0_config c;
    CHECK(config_from_variant(&c, "pi0") == PI0_OK && c.lm.width == 2048 && c.ex.width == 1024 &&
          c.vis.mlp_dim == 4304 && c.max_token_len == 48 && c.action_horizon == 50 && cfg_prefix_len(&c) == 816 &&
          cfg_suffix_len(&c) == 51, "pi0 variant (docs/model.md 1.2, 5.1)");
    CHECK(config_from_variant(&c, "pi05") == PI0_OK && c.max_token_len == 200 && cfg_prefix_len(&c) == 968 &&
          cfg_suffix_len(&c) == 50, "pi05 variant");
    CHECK(config_from_variant(&c, "pi1") == PI0_ERR_ARG, "unknown variant refused");
    const char *j1 = "{\"action_dim\": 32, \"action_horizon\": 10, \"paligemma_variant\": \"gemma_2b_lora\","
                     " \"action_expert_variant\": \"gemma_300m\", \"precision\": \"bfloat16\"}";
    CHECK(config_parse(&c, "j1", j1, strlen(j1)) == PI0_OK && config_finish(&c, "j1") == PI0_OK &&
          c.action_horizon == 10 && c.lm.width == 2048 && c.pi05 == 0, "openpi config.json with _lora name");
    const char *j2 = "{\"paligemma_variant\": \"gemma_2b\", \"action_expert_variant\": \"dummy\"}";
    CHECK(config_parse(&c, "j2", j2, strlen(j2)) == PI0_OK && config_finish(&c, "j2") == PI0_ERR_FORMAT &&
          strstr(pi0_last_error(), "must share"), "experts of different depth refused: %s", pi0_last_error());
    /* round trip through config_to_json */
    CHECK(config_from_variant(&c, "tiny-pi05") == PI0_OK, "tiny-pi05");
    char *js = config_to_json(&c);
    pi0_config d;
    CHECK(js && config_parse(&d, "rt", js, strlen(js)) == PI0_OK && config_finish(&d, "rt") == PI0_OK &&
          !memcmp(&c.vis, &d.vis, sizeof c.vis) && !memcmp(&c.lm, &d.lm, sizeof c.lm) && d.pi05 == 1 &&
          d.ex.width == c.ex.width && d.max_token_len == c.max_token_len, "config json round trip");
    free(js);
}

static int n_with_prefix(const st_file *f, const char *prefix) {
    int n = 0;
    for (int i = 0; i < f->n_tensors; i++) n += !strncmp(f->tensors[i].name, prefix, strlen(prefix));
    return n;
}

static void test_gen_checkpoint(void) {
    const char *variants[2] = {"tiny-pi0", "tiny-pi05"};
    int counts[2] = {89, 92};   /* the independent reference's tensor counts for the same dims */
    for (int v = 0; v < 2; v++) {
        char dir[300], path[400];
        snprintf(dir, sizeof dir, "%s/%s", tmpdir, variants[v]);
        pi0_status st = pi0_checkpoint_generate(dir, &(pi0_gen_params){.variant = variants[v], .seed = 3});
        CHECK(st == PI0_OK, "gen %s: %s", variants[v], pi0_last_error());
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        st_file *f = NULL;
        CHECK(st_open(&f, path) == PI0_OK, "open gen: %s", pi0_last_error());
        if (!f) continue;
        CHECK(f->n_tensors == counts[v], "%s: %d tensors, expected %d", variants[v], f->n_tensors, counts[v]);
        CHECK(st_find(f, "paligemma_with_expert.paligemma.lm_head.weight") &&
              !st_find(f, "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight") &&
              st_meta(f, "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"),
              "tied embedding under the lm_head name with the metadata alias");
        CHECK(st_find(f, "paligemma_with_expert.gemma_expert.lm_head.weight") != NULL, "orphan expert lm_head written");
        CHECK(n_with_prefix(f, "state_proj") == (v ? 0 : 2) && n_with_prefix(f, "time_mlp") == (v ? 4 : 0),
              "pi0/pi05 head projections");
        int all_bf16 = 1;
        for (int i = 0; i < f->n_tensors; i++) all_bf16 &= f->tensors[i].dtype == PI0_DT_BF16;
        CHECK(all_bf16, "every tensor BF16 by default");
        st_close(f);
        pi0_model *m = NULL;
        CHECK(pi0_model_load(&m, dir, &(pi0_model_params){.quiet = 1}) == PI0_OK, "load gen %s: %s", variants[v],
              pi0_last_error());
        pi0_model_info info;
        if (m) pi0_model_get_info(m, &info);
        CHECK(m && info.pi05 == v, "pi05 detected from tensors");
        pi0_model_free(m);
    }
}

/* Runs inference on a fixture input with optional batch slicing and thread count. */
static int run(const char *model_dir, const char *inputs, int threads, int slice, int use_noise, uint64_t seed,
               float *out, size_t *n_out) {
    pi0_model *m = NULL;
    pi0_session *s = NULL;
    pi0_tensors *t = NULL;
    pi0_inputs_buf *ib = NULL;
    pi0_inputs in;
    int ok = pi0_model_load(&m, model_dir, &(pi0_model_params){.quiet = 1, .n_threads = threads}) == PI0_OK &&
             pi0_tensors_open(&t, inputs) == PI0_OK && pi0_inputs_from_tensors(m, t, inputs, &in, &ib) == PI0_OK;
    if (ok) {
        pi0_model_info info;
        pi0_model_get_info(m, &info);
        int N = info.n_cameras, R = info.image_size, A = info.action_dim, H = info.action_horizon, L = in.n_tokens;
        if (slice >= 0) {   /* sample `slice` alone */
            in.images += (size_t)slice * N * R * R * 3;
            in.image_masks += slice * N;
            if (in.state) in.state += slice * A;
            in.tokens += slice * L;
            in.token_mask += slice * L;
            if (in.noise) in.noise += (size_t)slice * H * A;
            in.batch = 1;
        }
        if (!use_noise) in.noise = NULL;
        in.seed = seed;
        *n_out = (size_t)in.batch * H * A;
        ok = pi0_session_create(&s, m, &(pi0_session_params){.max_batch = in.batch}) == PI0_OK &&
             pi0_infer(s, &in, out) == PI0_OK;
    }
    if (!ok) printf("run %s: %s\n", inputs, pi0_last_error());
    pi0_session_free(s);
    pi0_inputs_buf_free(ib);
    pi0_tensors_free(t);
    pi0_model_free(m);
    return ok;
}

/* A session made for 1 thread runs pi0_infer on another thread whose OpenMP default is 4 threads (a server worker,
 * a Python thread): the session keeps its own count (its per-thread scratch is sized for it; the default once wrote
 * past it) and gives the 1-thread result bit for bit. */
struct other_thread { pi0_session *s; const pi0_inputs *in; float *out; int ok; };
static void *other_thread_infer(void *arg) {
    struct other_thread *o = arg;
    omp_set_num_threads(4);
    o->ok = pi0_infer(o->s, o->in, o->out) == PI0_OK;
    return NULL;
}

static int run_on_other_thread(const char *model_dir, const char *inputs, float *out) {
    pi0_model *m = NULL;
    pi0_session *s = NULL;
    pi0_tensors *t = NULL;
    pi0_inputs_buf *ib = NULL;
    pi0_inputs in;
    struct other_thread o = {0};
    pthread_t th;
    if (pi0_model_load(&m, model_dir, &(pi0_model_params){.quiet = 1, .n_threads = 1}) == PI0_OK &&
        pi0_tensors_open(&t, inputs) == PI0_OK && pi0_inputs_from_tensors(m, t, inputs, &in, &ib) == PI0_OK &&
        pi0_session_create(&s, m, &(pi0_session_params){.max_batch = in.batch}) == PI0_OK) {
        o = (struct other_thread){.s = s, .in = &in, .out = out};
        if (pthread_create(&th, NULL, other_thread_infer, &o) == 0) pthread_join(th, NULL);
    }
    pi0_session_free(s);
    pi0_inputs_buf_free(ib);
    pi0_tensors_free(t);
    pi0_model_free(m);
    return o.ok;
}

static void test_engine_properties(void) {
    static float a[2048], b[2048], c[2048];
    size_t na, nb, nc;
    const char *mods[2] = {"tests/fixtures/tiny-pi0", "tests/fixtures/tiny-pi05"};
    for (int v = 0; v < 2; v++) {
        char in[256];
        snprintf(in, sizeof in, "%s/b2.in.safetensors", mods[v]);
        int ok = run(mods[v], in, 1, -1, 1, 0, a, &na) && run(mods[v], in, 2, -1, 1, 0, b, &nb);
        CHECK(ok && na == nb && !memcmp(a, b, na * sizeof(float)), "%s: 1 thread == 2 threads bit for bit", mods[v]);
        CHECK(ok && run_on_other_thread(mods[v], in, b) && !memcmp(a, b, na * sizeof(float)),
              "%s: a 1-thread session run from a thread whose OpenMP default is 4: the same bits", mods[v]);
        ok = run(mods[v], in, 0, 0, 1, 0, b, &nb) && run(mods[v], in, 0, 1, 1, 0, c, &nc);
        CHECK(ok && nb + nc == na && !memcmp(a, b, nb * sizeof(float)) && !memcmp(a + nb, c, nc * sizeof(float)),
              "%s: batch of 2 == two batches of 1 bit for bit", mods[v]);
        ok = run(mods[v], in, 0, -1, 0, 11, a, &na) && run(mods[v], in, 0, -1, 0, 11, b, &nb) &&
             run(mods[v], in, 0, -1, 0, 12, c, &nc);
        CHECK(ok && !memcmp(a, b, na * sizeof(float)) && memcmp(a, c, na * sizeof(float)),
              "%s: seeded noise reproducible, different seeds differ", mods[v]);
    }
}

/* pi0_host_alloc: usable, aligned memory (page-locked only where a CUDA device is present); NULL frees. */
static void test_host_alloc(void) {
    size_t n = (size_t)3 * 224 * 224 * 3;
    float *p = pi0_host_alloc(n * sizeof(float)), *q = pi0_host_alloc(1);
    CHECK(p && q && !((uintptr_t)p % 64) && !((uintptr_t)q % 64), "pi0_host_alloc: two blocks, 64-byte aligned");
    if (p) {
        for (size_t i = 0; i < n; i++) p[i] = (float)i;
        CHECK(p[n - 1] == (float)(n - 1), "pi0_host_alloc: the whole block is writable");
    }
    pi0_host_free(p);
    pi0_host_free(q);
    pi0_host_free(NULL);
    CHECK(pi0_host_alloc(SIZE_MAX) == NULL, "pi0_host_alloc(SIZE_MAX) fails cleanly");
}

/* The int8 format's definition (quant.h, docs/precision.md): the scale, round half to even, the clamp, zero and
 * non-finite rows, and the weights' rounding to bf16 first. */
static void test_quant(void) {
    int8_t q[8];
    /* amax 127: s = 1, so x / s = x: 2.5 -> 2, -3.5 -> -4, 0.5 -> 0 (half to even, not away from zero) */
    float x[5] = {127.0f, 2.5f, -3.5f, 0.5f, -127.0f};
    float s = quant_row_i8(x, 5, q);
    CHECK(s == 1.0f && q[0] == 127 && q[1] == 2 && q[2] == -4 && q[3] == 0 && q[4] == -127,
          "quant_row_i8: s %g, q %d %d %d %d %d", s, q[0], q[1], q[2], q[3], q[4]);
    float z[3] = {0, -0.0f, 0};
    s = quant_row_i8(z, 3, q);
    CHECK(s == 0.0f && !q[0] && !q[1] && !q[2], "quant_row_i8: a zero row");
    float bad[3] = {1.0f, NAN, 2.0f}, inf[2] = {INFINITY, 1.0f};
    memset(q, 5, sizeof q);
    s = quant_row_i8(bad, 3, q);
    CHECK(s != s && !q[0] && !q[1] && !q[2], "quant_row_i8: a NaN row gives scale NaN and zeros (s %g)", s);
    s = quant_row_i8(inf, 2, q);
    CHECK(s != s && !q[0] && !q[1], "quant_row_i8: an infinite row gives scale NaN (s %g)", s);
    /* a subnormal scale: x / s may pass 127 and must clamp */
    CHECK(quant_i8(1.0e-39f, 1.0e-39f / 127.0f) == 127 && quant_i8(-1.0e-39f, 1.0e-39f / 127.0f) == -127,
          "quant_i8: subnormal scale clamps to +-127 (%d)", quant_i8(1.0e-39f, 1.0e-39f / 127.0f));
    CHECK(quant_dequant(100, 0.5f, 0.25f, 1.0f) == 13.5f && quant_dequant(-3, 2.0f, 1.0f, 0.0f) == -6.0f,
          "quant_dequant: acc * (sx * sw) + b");
    /* weights: each value rounded to bf16 before the scale (127.25 is 127 in bf16: s = 1; unrounded, -3.5 would
     * quantise to -3), rows independent */
    float w[6] = {127.25f, 2.5f, -3.5f, 0.0f, 0.0f, 0.0f};
    pi0_wt t = {.data = w, .dtype = PI0_DT_F32, .rows = 2, .cols = 3, .id = 1};
    float ws[2];
    quant_weight(&t, PI0_PRECISION_INT8, q, ws);
    CHECK(ws[0] == 1.0f && q[0] == 127 && q[1] == 2 && q[2] == -4 && ws[1] == 0.0f && !q[3] && !q[4] && !q[5],
          "quant_weight int8: s %g %g, q %d %d %d", ws[0], ws[1], q[0], q[1], q[2]);
}

/* E4M3 (docs/precision.md 8): the values of the codes, and f8_code against a search of every code for the nearest value
 * (ties to the even mantissa) on midpoints, their neighbours, the subnormals, saturation and random values; the row and
 * weight scales. */
static void test_quant_f8(void) {
    int bad = 0;
    /* the value table: code 0x7e is 448, 0x08 is 2^-6, 0x01 is 2^-9, 0x38 is 1; decoding is monotonic */
    CHECK(f8_value(0x7e) == 448.0f && f8_value(0x08) == 0x1p-6f && f8_value(0x01) == 0x1p-9f && f8_value(0x38) == 1.0f &&
          f8_value(0xb8) == -1.0f && f8_value(0x7f) != f8_value(0x7f), "f8_value: 448, 2^-6, 2^-9, 1, -1, NaN");
    for (int c = 1; c < 0x7f; c++) bad += !(f8_value((uint8_t)c) > f8_value((uint8_t)(c - 1)));
    CHECK(!bad, "f8_value: increasing over the positive codes (%d out of order)", bad);
    /* nearest by search: ties go to the even code (E4M3's mantissa is the code's low bits) */
    float probes[4096];
    int np = 0;
    for (int c = 0; c < 0x7e; c++) {
        float lo = f8_value((uint8_t)c), hi = f8_value((uint8_t)(c + 1)), mid = lo + (hi - lo) / 2;
        probes[np++] = mid;
        probes[np++] = nextafterf(mid, 0.0f);
        probes[np++] = nextafterf(mid, 1e9f);
        probes[np++] = lo;
    }
    probes[np++] = 448.0f; probes[np++] = 449.0f; probes[np++] = 464.0f; probes[np++] = 1e30f; probes[np++] = 1e-30f;
    uint64_t r = 12345;
    while (np < 4096) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        probes[np++] = ldexpf((float)(r >> 40) / (float)(1 << 24), (int)((r >> 20) % 24) - 14);
    }
    for (int i = 0; i < np; i++)
        for (int sg = 0; sg < 2; sg++) {
            float v = sg ? -probes[i] : probes[i], a = fabsf(v);
            int best = 0;
            for (int c = 1; c < 0x7f; c++) {
                float d = fabsf(f8_value((uint8_t)c) - a), db = fabsf(f8_value((uint8_t)best) - a);
                if (d < db || (d == db && !(c & 1))) best = c;
            }
            if (a > 448.0f) best = 0x7e;
            uint8_t want = (uint8_t)(best | (sg ? 0x80 : 0)), got = f8_code(v);
            if (got != want && bad++ < 5) printf("  f8_code(%.9g) = 0x%02x, nearest 0x%02x\n", v, got, want);
        }
    CHECK(!bad, "f8_code: the nearest code, ties to even, saturating (%d wrong of %d)", bad, 2 * np);
    /* a row: s = 448 / 448 = 1 gives codes of the values themselves; zero and non-finite rows as int8's */
    uint8_t q[8];
    float x[4] = {448.0f, 1.0625f, -0.3f, 0x1p-10f};
    float s = quant_row_f8(x, 4, q);
    CHECK(s == 1.0f && q[0] == 0x7e && q[1] == 0x38 && q[2] == f8_code(-0.3f) && q[3] == 0x00,
          "quant_row_f8: s %g, q %02x %02x %02x %02x (1.0625 is a tie: to 1, even)", s, q[0], q[1], q[2], q[3]);
    float nanrow[2] = {1.0f, NAN}, z[2] = {0.0f, 0.0f};
    memset(q, 5, sizeof q);
    s = quant_row_f8(nanrow, 2, q);
    CHECK(s != s && !q[0] && !q[1], "quant_row_f8: a NaN row gives scale NaN and zeros");
    s = quant_row_f8(z, 2, q);
    CHECK(s == 0.0f && !q[0] && !q[1], "quant_row_f8: a zero row");
    /* weights: bf16 first (448.5 is 448 in bf16: s = 1), rows independent */
    float w[6] = {448.5f, 2.5f, -3.5f, 0.0f, 0.0f, 0.0f}, ws[2];
    pi0_wt t = {.data = w, .dtype = PI0_DT_F32, .rows = 2, .cols = 3, .id = 1};
    quant_weight(&t, PI0_PRECISION_FP8, q, ws);
    CHECK(ws[0] == 1.0f && q[0] == 0x7e && q[1] == f8_code(2.5f) && q[2] == f8_code(-3.5f) && ws[1] == 0.0f && !q[3] &&
          !q[4] && !q[5], "quant_weight fp8: s %g %g, q %02x %02x %02x", ws[0], ws[1], q[0], q[1], q[2]);
}

int main(void) {
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    test_host_alloc();
    test_quant_f8();
    test_conversions();
    test_safetensors_roundtrip();
    test_safetensors_hostile();
    test_st_release();
    test_config();
    test_gen_checkpoint();
    test_engine_properties();
    test_quant();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", tmpdir);
    return test_summary("test_unit");
}
