/* test_cuda_ops.c — the GPU op tests (`make test-cuda`, on the device machine): every CUDA op against its CPU twin
 * (the fp32 reference backend) on random inputs, one table of cases per op ({shapes, epilogue / variant, tolerance,
 * why}: the real π0 shapes, the shapes that select each kernel path, and awkward ones). Inputs are bf16-representable
 * so both sides see identical values; outputs are poisoned first so an unwritten element fails; each output is
 * judged by its rel L2 error, its worst row's and its largest absolute error (compare_ex), one line per check.
 * Seeded RNG (seed printed). Tolerances and the worst values seen: tests/README.md. End-to-end GPU tests:
 * test_cuda_e2e.c. */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cuda/testing.h"
#include "pi0.h"
#include "test.h"
#include "util.h"

static pi0_backend *cpu, *gpu;
static pi0_rng rng;
static const uint64_t SEED = 20261122;

typedef struct {
    pt c, g;
    size_t n;
    int kind;
} dbuf;

static dbuf mk(size_t n, int kind) {
    dbuf b = {cpu->alloc(cpu, n, kind), gpu->alloc(gpu, n, kind), n, kind};
    if (!b.c.p || !b.g.p) { printf("alloc of %zu failed: %s\n", n, pi0_last_error()); exit(1); }
    return b;
}

static void rel(dbuf *b) {
    cpu->release(cpu, b->c);
    gpu->release(gpu, b->g);
}

static float bfr(float x) { return pi0_bf16_to_f32(pi0_f32_to_bf16(x)); }

/* Sets both copies to the same values (rounded to bf16 for ACT buffers). */
static void set(dbuf *b, const float *v) {
    float *h = malloc(b->n * sizeof(float));
    for (size_t i = 0; i < b->n; i++) h[i] = b->kind == PT_ACT ? bfr(v[i]) : v[i];
    if (b->kind == PT_ACT) {
        cpu->upload(cpu, (pt){b->c.p, PT_F32}, h, b->n);
        pt tmp = gpu->alloc(gpu, b->n, PT_F32);
        gpu->upload(gpu, tmp, h, b->n);
        gpu->copy_rows(gpu, b->g, (pt){0}, tmp, (pt){0}, 1, (int)b->n);
        gpu->sync(gpu);
        gpu->release(gpu, tmp);
    } else {
        cpu->upload(cpu, b->c, h, b->n);
        gpu->upload(gpu, b->g, h, b->n);
    }
    free(h);
}

static void set_rand(dbuf *b, float scale) {
    float *v = calloc(b->n, sizeof(float));
    for (size_t i = 0; i < b->n; i++) v[i] = (float)(scale * pi0_rng_normal(&rng));
    set(b, v);
    free(v);
}

static void set_ints(dbuf *b, const int32_t *v) {
    cpu->upload(cpu, b->c, v, b->n);
    gpu->upload(gpu, b->g, v, b->n);
}

static void poison(dbuf *b) {
    float *v = calloc(b->n, sizeof(float));
    for (size_t i = 0; i < b->n; i++) v[i] = 1e30f;
    set(b, v);
    free(v);
}

static double worst_ratio;

/* The worst row may err ROW_SLACK x the bound (rows are short: their error varies more than the whole output's);
 * the largest absolute error ABS_SLACK x the bound x the largest reference value. */
enum { ROW_SLACK = 4, ABS_SLACK = 2 };

/* Judges a GPU output against its CPU twin three ways and prints one line: the whole output's rel L2 error (<= bound);
 * its worst row's (rows of row_len values; <= row_bound, or ROW_SLACK x bound when 0): a defect confined to a few
 * rows, one block's slice of a tile or a race, moves the whole output's error too little; and the largest absolute
 * error against the largest reference value (<= ABS_SLACK x bound): one wild element. "used" is the largest of the
 * three errors as a share of its bound. A bound of 0 demands equality. */
static void compare_ex(const char *op, const char *shape, dbuf *b, size_t row_len, double bound, double row_bound) {
    float *hc = malloc(b->n * sizeof(float)), *hg = malloc(b->n * sizeof(float));
    pi0_status s1 = cpu->download(cpu, hc, b->c, b->n), s2 = gpu->download(gpu, hg, b->g, b->n);
    double mx = INFINITY, r = INFINITY, worst = INFINITY, ref = 0;
    size_t at = 0;
    if (s1 || s2) printf("  download: %s\n", pi0_last_error());
    else {
        r = rel_l2(hg, hc, b->n, &mx);
        worst = 0;
        for (size_t i = 0; i + row_len <= b->n; i += row_len) {
            double e = rel_l2(hg + i, hc + i, row_len, NULL);
            if (!(e <= worst)) { worst = e; at = i / row_len; }
        }
        for (size_t i = 0; i < b->n; i++) {   /* a compare, not fmax: GCC 12's aarch64 vectoriser crashes on fmax reductions */
            double v = fabs((double)hc[i]);
            if (v > ref) ref = v;
        }
    }
    if (!row_bound) row_bound = ROW_SLACK * bound;
    double abs_bound = ABS_SLACK * bound * ref, rel_abs = ref > 0 ? mx / ref : mx;
    int ok = r <= bound && worst <= row_bound && mx <= abs_bound;
    double used = fmax(fmax(bound ? r / bound : 0, row_bound ? worst / row_bound : 0), abs_bound ? mx / abs_bound : 0);
    if (!ok && used < 1) used = INFINITY;   /* an error where the bound is 0 */
    if (used > worst_ratio) worst_ratio = used;
    printf("%-12s %-44s rel_l2=%.2e row=%.2e (%zu) max_abs=%.2e (%.1e of max) used=%3.0f%% %s\n", op, shape, r, worst, at, mx,
           rel_abs, 100 * used, ok ? "OK" : "FAIL");
    CHECK(ok, "%s %s: rel_l2 %.3e (bound %.0e), worst row %zu %.3e (bound %.1e), max_abs %.3e (bound %.2e)", op, shape, r,
          bound, at, worst, row_bound, mx, abs_bound);
    free(hc);
    free(hg);
}

#define compare(op, shape, b, row_len, bound) compare_ex(op, shape, b, row_len, bound, 0)

/* A random bf16 weight (rows x cols, cols == 1 for vectors) uploaded with its siblings by upload_wts; f32: the store
 * also keeps an fp32 copy, as cuda_weights_upload does for vectors, the patch weight and the fp32 products. */
typedef struct {
    pi0_wt w;
    uint16_t *data;
    int f32;
    int i8;   /* both stores keep it in 8 bits (quant.h): PI0_PRECISION_INT8 or PI0_PRECISION_FP8 */
} hwt;

static int last_id;   /* ids are unique in the process, as within a model */

static hwt mkw(int64_t rows, int64_t cols, float scale, float offset) {
    hwt h = {{0}, malloc((size_t)(rows * cols) * 2), cols == 1, 0};
    h.w.id = ++last_id;
    for (int64_t i = 0; i < rows * cols; i++) h.data[i] = pi0_f32_to_bf16(offset + (float)(scale * pi0_rng_normal(&rng)));
    h.w.data = h.data;
    h.w.dtype = PI0_DT_BF16;
    h.w.rows = rows;
    h.w.cols = cols;
    return h;
}

/* The same from an F32 file whose values bf16 cannot hold (the fp32 products read them from the fp32 copy). */
static hwt mkw_f32(int64_t rows, int64_t cols, float scale) {
    hwt h = {{0}, malloc((size_t)(rows * cols) * 4), 1, 0};
    h.w.id = ++last_id;
    float *f = (float *)h.data;
    for (int64_t i = 0; i < rows * cols; i++) f[i] = (float)(scale * pi0_rng_normal(&rng));
    h.w.data = h.data;
    h.w.dtype = PI0_DT_F32;
    h.w.rows = rows;
    h.w.cols = cols;
    return h;
}

/* The store the GPU backend reads: ws, with group[i] > 1 starting a group the ops may run as one product (NULL: none). */
static void *cpu_store;   /* the CPU twin's int8 weights of the upload in use */

static void *upload_grouped(hwt **ws, int n, const int *group) {
    const pi0_wt *list[8];
    int fmt[8], i8[8], one[8], any8 = 0;
    PI0_ASSERT(n <= 8);
    for (int i = 0; i < n; i++) {
        list[i] = &ws[i]->w;
        fmt[i] = (ws[i]->f32 ? 1 : 0) | (ws[i]->i8 == PI0_PRECISION_FP8 ? 4 : ws[i]->i8 ? 2 : 0);
        i8[i] = ws[i]->i8;
        any8 |= i8[i];
        one[i] = 1;
    }
    void *store = NULL;
    pi0_status st = cuda_upload_list(&store, list, fmt, group ? group : one, n, last_id, 0);
    CHECK(st == PI0_OK, "upload weights: %s", pi0_last_error());
    cuda_use_weights(gpu, store);
    if (any8) {
        CHECK(cpu_weights_list(&cpu_store, list, i8, n, last_id) == PI0_OK, "cpu int8 weights: %s", pi0_last_error());
        cpu_use_weights(cpu, cpu_store);
        /* the 8-bit products' scratch is sized at reserve for the store's widest int8 weight, as a session does */
        CHECK(cpu->reserve(cpu, 4096, 4096, 1, (size_t)788 * 32768) == PI0_OK, "cpu reserve: %s", pi0_last_error());
        CHECK(gpu->reserve(gpu, 4096, 4096, 1, (size_t)788 * 32768) == PI0_OK, "gpu reserve: %s", pi0_last_error());
    }
    return store;
}

static void *upload_wts(hwt **ws, int n) { return upload_grouped(ws, n, NULL); }

static void free_wts(void *store, hwt **ws, int n) {
    cuda_forget_transposes(gpu);
    cuda_use_weights(gpu, NULL);
    cuda_weights_free(store);
    cpu_use_weights(cpu, NULL);
    cpu_weights_free(cpu_store);
    cpu_store = NULL;
    for (int i = 0; i < n; i++) free(ws[i]->data);
}

static const char *ename(enum pi0_epi e) { return e == EPI_ADD ? "add" : e == EPI_GELU ? "gelu" : "store"; }

/* The backend's path: 1 = the Hopper kernels, 0 = the portable path (PI0_CUDA_PATH=portable or a non-Hopper GPU),
 * where every check that a Hopper kernel ran becomes a check that it did not (hopper_ran). */
static int hopper = 1;

/* A Hopper kernel's launch count went from `before` to `now`: on the Hopper path it must have run (`want` more launches,
 * or any when want is 0), on the portable path not at all. */
static void hopper_ran(const char *kernel, const char *op, const char *shape, long before, long now, long want) {
    if (!hopper) CHECK(now == before, "%s %s: the portable path ran %s (%ld launches)", op, shape, kernel, now - before);
    else if (want) CHECK(now == before + want, "%s %s: %ld launches of %s, want %ld", op, shape, now - before, kernel, want);
    else CHECK(now > before, "%s %s: %s did not run", op, shape, kernel);
}

/* 17 to 64 bf16 rows run on gemv.cu's warpgroup kernel: `before` is cuda_gemv_wg_launches() before the op
 * (a silent fallback to cuBLASLt would pass the value check without testing the kernel). */
static void want_wg(const char *op, const char *shape, int M, long before) {
    if (M > 16 && M <= 64) hopper_ran("the warpgroup kernel", op, shape, before, cuda_gemv_wg_launches(), 0);
}

/* gemv.cu's few-row shapes: up to 16 bf16 rows, K a multiple of 1024 up to 8192, N and the weight's row stride
 * multiples of 8 (the pair layouts: pairs of a multiple of 8 columns) */
static int gemv_shape(int M, int N, int K, int ldw) {
    return M >= 1 && M <= 16 && K % 1024 == 0 && K <= 8192 && N % 8 == 0 && ldw % 8 == 0;
}

/* In its shapes (`fits`), `launches` of gemv.cu's few-row kernel ran on the Hopper path (none on the portable path);
 * outside them none did. `before` is cuda_gemv_launches() before the op. */
static void want_gemv(const char *op, const char *shape, int fits, long before, long launches) {
    if (fits) hopper_ran("the few-row kernel", op, shape, before, cuda_gemv_launches(), launches);
    else CHECK(cuda_gemv_launches() == before, "%s %s: gemv.cu's few-row kernel ran outside its shapes", op, shape);
}

static void t_linear(int M, int N, int K, int k0, int kcols, int bias, enum pi0_epi epi, int f32, double bound) {
    hwt W = f32 == 3 ? mkw_f32(N, kcols, 1.0f / sqrtf((float)K)) : mkw(N, kcols, 1.0f / sqrtf((float)K), 0);
    hwt b = mkw(N, 1, 0.1f, 0);
    W.f32 = f32 >= 2;   /* an fp32 copy, as cuda_weights_upload keeps for the fp32 products */
    hwt *ws[2] = {&W, &b};
    void *ar = upload_wts(ws, 2);
    int kind = f32 ? PT_F32 : PT_ACT;
    dbuf x = mk((size_t)M * K, kind), y = mk((size_t)M * N, kind);
    set_rand(&x, 1.0f);
    if (epi == EPI_ADD) set_rand(&y, 1.0f); else poison(&y);
    cpu->linear(cpu, y.c, x.c, &W.w, bias ? &b.w : NULL, M, N, K, k0, epi);
    long n0 = cuda_gemv_wg_launches(), p0 = cuda_gemv_launches();
    gpu->linear(gpu, y.g, x.g, &W.w, bias ? &b.w : NULL, M, N, K, k0, epi);
    char shape[80];
    snprintf(shape, sizeof shape, "%s M=%d N=%d K=%d k0=%d %s%s", f32 == 3 ? "f32w" : f32 == 2 ? "f32c" : f32 ? "f32" : "bf16", M, N, K, k0,
             ename(epi), bias ? "+b" : "");
    if (!f32) want_wg("linear", shape, M, n0);
    if (!f32) want_gemv("linear", shape, gemv_shape(M, N, K, kcols) && k0 % 8 == 0, p0, 1);
    compare("linear", shape, &y, (size_t)N, bound);
    rel(&x); rel(&y);
    free_wts(ar, ws, 2);
}

/* π0.5's gated residual x += gate * (y . W^T), the gate rows of a modulation (stride 3N) shared by `per` rows */
static void t_linear_gated(int M, int N, int K, int per) {
    hwt W = mkw(N, K, 1.0f / sqrtf((float)K), 0);
    hwt *ws[1] = {&W};
    void *ar = upload_wts(ws, 1);
    dbuf x = mk((size_t)M * N, PT_ACT), tmp = mk((size_t)M * N, PT_ACT), y = mk((size_t)M * K, PT_ACT);
    dbuf mod = mk((size_t)((M + per - 1) / per) * 3 * N, PT_F32);
    set_rand(&x, 1.0f);
    set_rand(&y, 1.0f);
    set_rand(&mod, 0.5f);
    poison(&tmp);
    cpu->linear_gated(cpu, x.c, tmp.c, y.c, &W.w, M, N, K, pt_at(cpu, mod.c, 2 * (size_t)N), 3 * N, per);
    long n0 = cuda_gemv_wg_launches(), p0 = cuda_gemv_launches();
    gpu->linear_gated(gpu, x.g, tmp.g, y.g, &W.w, M, N, K, pt_at(gpu, mod.g, 2 * (size_t)N), 3 * N, per);
    char shape[64];
    snprintf(shape, sizeof shape, "M=%d N=%d K=%d rows/gate=%d", M, N, K, per);
    want_wg("linear_gated", shape, M, n0);
    want_gemv("linear_gated", shape, gemv_shape(M, N, K, K), p0, 1);
    compare("linear_gated", shape, &x, (size_t)N, 8e-3);
    rel(&x); rel(&tmp); rel(&y); rel(&mod);
    free_wts(ar, ws, 1);
}

/* RoPE positions of M rows, random in [0, 1000) */
static dbuf rand_positions(int M) {
    dbuf pos = mk((size_t)M, PT_I32);
    int32_t *pv = malloc((size_t)M * 4);
    for (int i = 0; i < M; i++) pv[i] = (int32_t)(pi0_rng_next(&rng) % 1000);
    set_ints(&pos, pv);
    free(pv);
    return pos;
}

/* fused projections: q|k|v and gate|up, adjacent (one product) or not (separate products) */

static void t_fused(int M, int K, int nq, int nkv, int F, int hd, int i8) {
    pi0_gemma_layer L;
    memset(&L, 0, sizeof L);
    float s = 1.0f / sqrtf((float)K);
    hwt q = mkw(nq, K, s, 0), k = mkw(nkv, K, s, 0), v = mkw(nkv, K, s, 0), g = mkw(F, K, s, 0), u = mkw(F, K, s, 0);
    /* i8: the weights in int8, which form no group: the ops compose their int8 products as the CPU twins do */
    q.i8 = k.i8 = v.i8 = g.i8 = u.i8 = i8;
    /* SigLIP's form below: biases, no RoPE (the b vectors reuse random weights of the right length) */
    hwt bq = mkw(nq, 1, 0.1f, 0), bk = mkw(nkv, 1, 0.1f, 0), bv = mkw(nkv, 1, 0.1f, 0);
    hwt *ws[8] = {&q, &k, &v, &g, &u, &bq, &bk, &bv};
    const int groups[8] = {3, 0, 0, 2, 0, 3, 0, 0};   /* as cuda_weights_upload plans a layer */
    void *ar = upload_grouped(ws, 8, groups);
    L.q = q.w; L.k = k.w; L.v = v.w; L.gate = g.w; L.up = u.w;
    dbuf y = mk((size_t)M * K, PT_ACT), oq = mk((size_t)M * nq, PT_ACT), ok = mk((size_t)M * nkv, PT_ACT),
         ov = mk((size_t)M * nkv, PT_ACT), og = mk((size_t)M * F, PT_ACT), ot = mk((size_t)M * F, PT_ACT);
    set_rand(&y, 1.0f);
    poison(&oq); poison(&ok); poison(&ov); poison(&og);
    dbuf pos = rand_positions(M);
    pi0_proj3 pj = {{&L.q, &L.k, &L.v}, {NULL, NULL, NULL}};
    cpu->qkv(cpu, oq.c, ok.c, ov.c, y.c, &pj, M, K, pos.c, hd, NULL);
    char shape[80];
    snprintf(shape, sizeof shape, "%sM=%d K=%d q=%d kv=%d", i8 == PI0_PRECISION_FP8 ? "fp8 " : i8 ? "int8 " : "", M, K, nq, nkv);
    long n0 = cuda_gemv_wg_launches(), p0 = cuda_gemv_launches();
    gpu->qkv(gpu, oq.g, ok.g, ov.g, y.g, &pj, M, K, pos.g, hd, NULL);
    if (hd % 64 == 0 && !i8) want_wg("qkv", shape, M, n0);
    /* the RoPE split epilogue: whole heads, half-heads of a multiple of 8 columns (bf16 weights only) */
    want_gemv("qkv", shape, !i8 && gemv_shape(M, nq + 2 * nkv, K, K) && hd % 16 == 0 && nq % hd == 0 && nkv % hd == 0,
              p0, 1);
    rel(&pos);
    cpu->mlp_up(cpu, og.c, ot.c, y.c, &L, M, F, K, NULL);
    n0 = cuda_gemv_wg_launches();
    p0 = cuda_gemv_launches();
    long g0 = cuda_gateup_launches();
    gpu->mlp_up(gpu, og.g, ot.g, y.g, &L, M, F, K, NULL);
    if (F % 32 == 0 && K % 8 == 0 && !i8) want_wg("mlp_up", shape, M, n0);
    want_gemv("mlp_up", shape, !i8 && gemv_shape(M, 2 * F, K, K) && F % 8 == 0, p0, 1);
    /* 136 rows and more: gateup.cu (F % 64, K % 8) */
    if (M >= 136 && F % 64 == 0 && K % 8 == 0 && !i8) hopper_ran("gateup.cu", "mlp_up", shape, g0, cuda_gateup_launches(), 1);
    compare("qkv.q", shape, &oq, (size_t)nq, 8e-3);
    compare("qkv.k", shape, &ok, (size_t)nkv, 8e-3);
    compare("qkv.v", shape, &ov, (size_t)nkv, 8e-3);
    snprintf(shape, sizeof shape, "%sM=%d K=%d F=%d", i8 == PI0_PRECISION_FP8 ? "fp8 " : i8 ? "int8 " : "", M, K, F);
    compare("mlp_up", shape, &og, (size_t)F, 8e-3);
    pi0_proj3 pb = {{&L.q, &L.k, &L.v}, {&bq.w, &bk.w, &bv.w}};
    poison(&oq); poison(&ok); poison(&ov);
    cpu->qkv(cpu, oq.c, ok.c, ov.c, y.c, &pb, M, K, (pt){0}, 0, NULL);
    gpu->qkv(gpu, oq.g, ok.g, ov.g, y.g, &pb, M, K, (pt){0}, 0, NULL);
    snprintf(shape, sizeof shape, "+bias M=%d K=%d q=%d kv=%d", M, K, nq, nkv);
    compare("qkv.q", shape, &oq, (size_t)nq, 8e-3);
    compare("qkv.k", shape, &ok, (size_t)nkv, 8e-3);
    compare("qkv.v", shape, &ov, (size_t)nkv, 8e-3);
    /* q, k, v equally spaced in one buffer (as model.c allocates SigLIP's): a backend may run one batch */
    dbuf all = mk((size_t)3 * M * nq, PT_ACT);
    poison(&all);
    if (nq == nkv) {
        pt c3[3], g3[3];
        for (int i = 0; i < 3; i++) { c3[i] = pt_at(cpu, all.c, (size_t)i * M * nq); g3[i] = pt_at(gpu, all.g, (size_t)i * M * nq); }
        cpu->qkv(cpu, c3[0], c3[1], c3[2], y.c, &pb, M, K, (pt){0}, 0, NULL);
        gpu->qkv(gpu, g3[0], g3[1], g3[2], y.g, &pb, M, K, (pt){0}, 0, NULL);
        snprintf(shape, sizeof shape, "+bias one buffer M=%d K=%d q=k=v=%d", M, K, nq);
        compare("qkv", shape, &all, (size_t)nq, 8e-3);
    }
    rel(&all);
    rel(&y); rel(&oq); rel(&ok); rel(&ov); rel(&og); rel(&ot);
    free_wts(ar, ws, 8);
}

/* gateup.cu at each of its token tile widths (forced): 600 rows (3 tiles of 256 .. 5 of 136, the last one overlapping),
 * K = 200 (past the last 64), 3 feature tiles */
static void t_gateup_widths(void) {
    const int M = 600, K = 200, F = 192, widths[] = {136, 152, 168, 184, 200, 216, 232, 248, 256};
    pi0_gemma_layer L;
    memset(&L, 0, sizeof L);
    float s = 1.0f / sqrtf((float)K);
    hwt g = mkw(F, K, s, 0), u = mkw(F, K, s, 0);
    hwt *ws[2] = {&g, &u};
    const int groups[2] = {2, 0};
    void *ar = upload_grouped(ws, 2, groups);
    L.gate = g.w; L.up = u.w;
    dbuf y = mk((size_t)M * K, PT_ACT), og = mk((size_t)M * F, PT_ACT), ot = mk((size_t)M * F, PT_ACT);
    set_rand(&y, 1.0f);
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        poison(&og);
        cpu->mlp_up(cpu, og.c, ot.c, y.c, &L, M, F, K, NULL);
        cuda_gateup_force(widths[i]);
        long g0 = cuda_gateup_launches();
        gpu->mlp_up(gpu, og.g, ot.g, y.g, &L, M, F, K, NULL);
        cuda_gateup_force(0);
        char shape[80];
        snprintf(shape, sizeof shape, "gateup.cu width %d M=%d K=%d F=%d", widths[i], M, K, F);
        hopper_ran("gateup.cu", "mlp_up", shape, g0, cuda_gateup_launches(), 1);
        compare("mlp_up", shape, &og, (size_t)F, 8e-3);
    }
    rel(&y); rel(&og); rel(&ot);
    free_wts(ar, ws, 2);
}

/* qkv and mlp_up with the pre-norm (RMSNorm, or adaRMS with one modulation row): fused into the few-row
 * products at K = 1024 and M <= 16, a norm kernel then the product elsewhere. */
static void t_prenorm(int M, int K, int nq, int nkv, int F, int hd, int ada) {
    pi0_gemma_layer L;
    memset(&L, 0, sizeof L);
    float s = 1.0f / sqrtf((float)K);
    hwt q = mkw(nq, K, s, 0), k = mkw(nkv, K, s, 0), v = mkw(nkv, K, s, 0), g = mkw(F, K, s, 0), u = mkw(F, K, s, 0);
    hwt nw = mkw(K, 1, 0.3f, 0);
    hwt *ws[6] = {&q, &k, &v, &g, &u, &nw};
    const int groups[6] = {3, 0, 0, 2, 0, 1};
    void *ar = upload_grouped(ws, 6, groups);
    L.q = q.w; L.k = k.w; L.v = v.w; L.gate = g.w; L.up = u.w;
    dbuf x = mk((size_t)M * K, PT_ACT), tmp = mk((size_t)M * K, PT_ACT), mod = mk((size_t)3 * K, PT_F32);
    dbuf oq = mk((size_t)M * nq, PT_ACT), ok = mk((size_t)M * nkv, PT_ACT), ov = mk((size_t)M * nkv, PT_ACT);
    dbuf og = mk((size_t)M * F, PT_ACT), ot = mk((size_t)M * F, PT_ACT);
    set_rand(&x, 3.0f); set_rand(&mod, 0.3f);
    poison(&oq); poison(&ok); poison(&ov); poison(&og);
    dbuf pos = rand_positions(M);
    pi0_proj3 pj = {{&L.q, &L.k, &L.v}, {NULL, NULL, NULL}};
    pi0_prenorm pc = {.eps = 1e-6f, .out = tmp.c}, pg = {.eps = 1e-6f, .out = tmp.g};
    if (ada) { pc.mod = mod.c; pg.mod = mod.g; pc.rows_per_mod = pg.rows_per_mod = M; }
    else { pc.w = pg.w = &nw.w; }
    char shape[80];
    snprintf(shape, sizeof shape, "%s M=%d K=%d q=%d kv=%d", ada ? "adarms" : "rms", M, K, nq, nkv);
    long n0 = cuda_gemv_wg_launches(), p0 = cuda_gemv_launches();
    cpu->qkv(cpu, oq.c, ok.c, ov.c, x.c, &pj, M, K, pos.c, hd, &pc);
    gpu->qkv(gpu, oq.g, ok.g, ov.g, x.g, &pj, M, K, pos.g, hd, &pg);
    cpu->mlp_up(cpu, og.c, ot.c, x.c, &L, M, F, K, &pc);
    gpu->mlp_up(gpu, og.g, ot.g, x.g, &L, M, F, K, &pg);
    if (M > 16 && M <= 64) hopper_ran("the warpgroup kernel", "norm+qkv/mlp_up", shape, n0, cuda_gemv_wg_launches(), 2);
    /* the norm folded into the few-row kernel: K = 1024, and a free X row for adaRMS's shift */
    want_gemv("norm+qkv/mlp_up", shape, gemv_shape(M, nq + 2 * nkv, K, K) && K == 1024 && !(ada && M > 15), p0, 2);
    compare("norm+qkv.q", shape, &oq, (size_t)nq, 8e-3);
    compare("norm+qkv.k", shape, &ok, (size_t)nkv, 8e-3);
    compare("norm+qkv.v", shape, &ov, (size_t)nkv, 8e-3);
    snprintf(shape, sizeof shape, "%s M=%d K=%d F=%d", ada ? "adarms" : "rms", M, K, F);
    compare("norm+mlp_up", shape, &og, (size_t)F, 8e-3);
    /* mlp_up_save (exact RTC's forward): the same output, and the two products kept; one few-row launch where
     * mlp_up's norm folds in (else the products apart and gelu_mul) */
    dbuf so = mk((size_t)M * F, PT_ACT), sg = mk((size_t)M * F, PT_ACT), su = mk((size_t)M * F, PT_ACT);
    poison(&so); poison(&sg); poison(&su);
    long p1 = cuda_gemv_launches();
    cpu->mlp_up_save(cpu, so.c, sg.c, su.c, x.c, &L, M, F, K, &pc);
    gpu->mlp_up_save(gpu, so.g, sg.g, su.g, x.g, &L, M, F, K, &pg);
    if (M <= 16 && K == 1024 && !(ada && M > 15)) hopper_ran("the few-row kernel", "norm+mlp_up_save", shape, p1, cuda_gemv_launches(), 1);
    compare("mlp_up_save", shape, &so, (size_t)F, 8e-3);
    compare("mlp_up_save.g", shape, &sg, (size_t)F, 8e-3);
    compare("mlp_up_save.u", shape, &su, (size_t)F, 8e-3);
    {   /* the CPU twin's output is mlp_up's, bit for bit */
        float *a = malloc((size_t)M * F * sizeof(float)), *b2 = malloc((size_t)M * F * sizeof(float));
        int same = a && b2 && cpu->download(cpu, a, og.c, (size_t)M * F) == PI0_OK &&
                   cpu->download(cpu, b2, so.c, (size_t)M * F) == PI0_OK && !memcmp(a, b2, (size_t)M * F * sizeof(float));
        CHECK(same, "mlp_up_save %s: the CPU output differs from mlp_up's", shape);
        free(a); free(b2);
    }
    rel(&so); rel(&sg); rel(&su);
    rel(&x); rel(&tmp); rel(&mod); rel(&oq); rel(&ok); rel(&ov); rel(&og); rel(&ot); rel(&pos);
    free_wts(ar, ws, 6);
}

static void t_norms(int M, int D) {
    hwt w = mkw(D, 1, 0.2f, 1.0f), b = mkw(D, 1, 0.1f, 0), r = mkw(D, 1, 0.2f, 0);
    hwt *ws[3] = {&w, &b, &r};
    void *ar = upload_wts(ws, 3);
    dbuf x = mk((size_t)M * D, PT_ACT), y = mk((size_t)M * D, PT_ACT);
    char shape[64];
    snprintf(shape, sizeof shape, "M=%d D=%d", M, D);
    set_rand(&x, 3.0f);
    poison(&y);
    cpu->layernorm(cpu, y.c, x.c, &w.w, &b.w, M, D, 1e-6f);
    gpu->layernorm(gpu, y.g, x.g, &w.w, &b.w, M, D, 1e-6f);
    compare("layernorm", shape, &y, (size_t)D, 8e-3);
    poison(&y);
    cpu->rmsnorm(cpu, y.c, x.c, &r.w, M, D, 1e-6f);
    gpu->rmsnorm(gpu, y.g, x.g, &r.w, M, D, 1e-6f);
    compare("rmsnorm", shape, &y, (size_t)D, 8e-3);
    int per = M > 1 ? (M + 1) / 2 : 1;
    dbuf mod = mk((size_t)((M + per - 1) / per) * 3 * D, PT_F32);
    set_rand(&mod, 0.3f);
    poison(&y);
    cpu->adarms(cpu, y.c, x.c, mod.c, per, M, D, 1e-6f);
    gpu->adarms(gpu, y.g, x.g, mod.g, per, M, D, 1e-6f);
    compare("adarms", shape, &y, (size_t)D, 8e-3);
    rel(&x); rel(&y); rel(&mod);
    free_wts(ar, ws, 3);
}

/* RoPE, or (bwd) its transpose rope_bwd: the rotation by minus the same angles */
static void t_rope(int M, int qh, int kh, int hd, int bwd) {
    dbuf q = mk((size_t)M * qh * hd, PT_ACT), k = mk((size_t)M * (kh ? kh : 1) * hd, PT_ACT), pos = mk((size_t)M, PT_I32);
    int32_t *p = malloc((size_t)M * 4);
    for (int i = 0; i < M; i++) p[i] = (int32_t)(pi0_rng_next(&rng) % 1000);
    set_ints(&pos, p);
    set_rand(&q, 1.0f);
    set_rand(&k, 1.0f);
    if (bwd) {
        cpu->rope_bwd(cpu, q.c, qh, kh ? k.c : (pt){0}, kh, pos.c, M, hd, 0);
        gpu->rope_bwd(gpu, q.g, qh, kh ? k.g : (pt){0}, kh, pos.g, M, hd, 0);
    } else {
        cpu->rope(cpu, q.c, qh, kh ? k.c : (pt){0}, kh, pos.c, M, hd);
        gpu->rope(gpu, q.g, qh, kh ? k.g : (pt){0}, kh, pos.g, M, hd);
    }
    const char *op = bwd ? "rope_bwd" : "rope";
    char shape[64];
    snprintf(shape, sizeof shape, "M=%d q heads=%d hd=%d", M, qh, hd);
    compare(op, shape, &q, (size_t)qh * hd, 8e-3);
    snprintf(shape, sizeof shape, "M=%d k heads=%d hd=%d", M, kh, hd);
    compare(op, shape, &k, (size_t)(kh ? kh : 1) * hd, kh ? 8e-3 : 0);   /* kh = 0: k must be untouched (equal) */
    free(p);
    rel(&q); rel(&k); rel(&pos);
}

/* rope_bwd on q and k side by side in rows of stride ld (the model's q | k | v cotangent rows): the columns past k
 * start random and must stay as they were */
static void t_rope_bwd_ld(int M, int qh, int kh, int hd, int ld) {
    dbuf r = mk((size_t)M * ld, PT_ACT), pos = mk((size_t)M, PT_I32);
    int32_t *p = malloc((size_t)M * 4);
    for (int i = 0; i < M; i++) p[i] = (int32_t)(pi0_rng_next(&rng) % 1000);
    set_ints(&pos, p);
    set_rand(&r, 1.0f);
    size_t ko = (size_t)qh * hd;
    cpu->rope_bwd(cpu, r.c, qh, pt_at(cpu, r.c, ko), kh, pos.c, M, hd, ld);
    gpu->rope_bwd(gpu, r.g, qh, pt_at(gpu, r.g, ko), kh, pos.g, M, hd, ld);
    char shape[64];
    snprintf(shape, sizeof shape, "M=%d heads=%d+%d hd=%d ld=%d", M, qh, kh, hd, ld);
    compare("rope_bwd", shape, &r, (size_t)ld, 8e-3);
    free(p);
    rel(&r); rel(&pos);
}

/* nseg segments: query counts nq[s], source-1 key counts nk[s]; with_k2 adds the suffix source.
 * kramp > 0 scales source-1 key t of a segment by 1 + kramp * t / nk[s]: logits that grow along the keys,
 * so that an online softmax must move its running maximum late (flash attention's lazy rescaling). */
static void t_attention_ramp(const char *what, int nseg, const int *nq, const int *nk, int heads, int kv, int hd,
                             int with_k2, int block0, int tail, float kramp) {
    int32_t qo[65] = {0}, ko[65] = {0};
    for (int s = 0; s < nseg; s++) { qo[s + 1] = qo[s] + nq[s]; ko[s + 1] = ko[s] + nk[s]; }
    int Mq = qo[nseg], Mk = ko[nseg];
    dbuf q = mk((size_t)Mq * heads * hd, PT_ACT), o = mk((size_t)Mq * heads * hd, PT_ACT);
    dbuf k = mk((size_t)Mk * kv * hd, PT_ACT), v = mk((size_t)Mk * kv * hd, PT_ACT);
    dbuf k2 = mk((size_t)Mq * kv * hd, PT_ACT), v2 = mk((size_t)Mq * kv * hd, PT_ACT);
    set_rand(&q, 1.0f); set_rand(&k, 1.0f); set_rand(&v, 1.0f); set_rand(&k2, 1.0f); set_rand(&v2, 1.0f);
    if (kramp > 0) {
        float *kv_h = malloc(k.n * sizeof(float));
        for (int s = 0; s < nseg; s++)
            for (int t = 0; t < nk[s]; t++)
                for (int e = 0; e < kv * hd; e++)
                    kv_h[((size_t)ko[s] + t) * kv * hd + e] = (1.0f + kramp * t / nk[s]) * (float)pi0_rng_normal(&rng);
        set(&k, kv_h);
        free(kv_h);
    }
    poison(&o);
    size_t maxs = 0;
    for (int s = 0; s < nseg; s++) {
        maxs += (size_t)nq[s] * heads * (nk[s] + (with_k2 ? nq[s] : 0) + 8);   /* room to batch all segments */
    }
    cpu->reserve(cpu, (size_t)Mq + Mk, (size_t)Mk + Mq, maxs, 0);
    gpu->reserve(gpu, (size_t)Mq + Mk, (size_t)Mk + Mq, maxs, 0);
    pi0_attn a = {.nseg = nseg, .heads = heads, .kv_heads = kv, .head_dim = hd, .scale = 1.0f / sqrtf((float)hd),
                  .q_off = qo, .k_off = ko, .block0 = block0, .tail = tail};
    a.k1 = k.c; a.v1 = v.c;
    if (with_k2) { a.k2 = k2.c; a.v2 = v2.c; }
    cpu->attention(cpu, o.c, q.c, &a);
    a.k1 = k.g; a.v1 = v.g;
    if (with_k2) { a.k2 = k2.g; a.v2 = v2.g; }
    gpu->attention(gpu, o.g, q.g, &a);
    char shape[80];
    snprintf(shape, sizeof shape, "%s seg=%d q=%d k=%d h=%d/%d hd=%d", what, nseg, nq[0], nk[0], heads, kv, hd);
    compare_ex("attention", shape, &o, (size_t)hd, 1e-2, 5e-2);   /* rows: one head's hd values */
    rel(&q); rel(&o); rel(&k); rel(&v); rel(&k2); rel(&v2);
}

static void t_attention(const char *what, int nseg, const int *nq, const int *nk, int heads, int kv, int hd,
                        int with_k2, int block0, int tail) {
    t_attention_ramp(what, nseg, nq, nk, heads, kv, hd, with_k2, block0, tail, 0);
}

/* The prefix on the mma.sync kernel: PI0_CUDA_FLASH=mma, and the fallback where a tensor map cannot be made */
static void t_attention_mma(void) {
    pi0_backend *g0 = gpu, *g1 = NULL;
    setenv("PI0_CUDA_FLASH", "mma", 1);
    pi0_status st = cuda_backend_create(&g1, 0, NULL);
    unsetenv("PI0_CUDA_FLASH");
    if (st != PI0_OK) {
        CHECK(0, "backend with PI0_CUDA_FLASH=mma: %s", pi0_last_error());
        return;
    }
    gpu = g1;
    long n0 = cuda_flash_wg_launches();
    int p1[1] = {788}, w_q[3] = {400, 400, 400};
    t_attention_ramp("prefix-mma-ramp", 1, p1, p1, 8, 1, 256, 0, 0, 0, 6.0f);
    t_attention("flash-mqa-waves-mma", 3, w_q, w_q, 8, 1, 256, 0, 0, 0);   /* 32-key tiles: more blocks than SMs */
    CHECK(cuda_flash_wg_launches() == n0, "PI0_CUDA_FLASH=mma: the wgmma flash kernel ran");
    gpu = g0;
    g1->destroy(g1);
}

/* π0-FAST's attention: segments over key ranges that overlap (k_end), the prefix-LM blocks of one sample, the all-masked
 * rows at scale 0 (a uniform average), and one decoded row per sample over a cache of its own. */
static void t_attention_ranges(int heads, int hd) {
    int32_t qo[] = {0, 30, 40, 50, 75, 80, 81, 82, 83}, ko[] = {0, 0, 0, 64, 64, 0, 64, 128, 192};
    int32_t ke[] = {30, 40, 50, 89, 64 + 100, 1, 64 + 57, 128 + 64, 0};
    int nseg = 8, Mq = qo[nseg], Mk = 192;
    dbuf q = mk((size_t)Mq * heads * hd, PT_ACT), o = mk((size_t)Mq * heads * hd, PT_ACT);
    dbuf k = mk((size_t)Mk * hd, PT_ACT), v = mk((size_t)Mk * hd, PT_ACT);
    set_rand(&q, 1.0f); set_rand(&k, 1.0f); set_rand(&v, 1.0f); poison(&o);
    cpu->reserve(cpu, (size_t)Mq + Mk, (size_t)Mk, (size_t)Mq * heads * (Mk + 8), 0);
    gpu->reserve(gpu, (size_t)Mq + Mk, (size_t)Mk, (size_t)Mq * heads * (Mk + 8), 0);
    for (int uniform = 0; uniform < 2; uniform++) {   /* segment 4 (rows 75..79) at scale 0: the masked rows */
        int lo = uniform ? 4 : 0, hi = uniform ? 5 : 4;
        pi0_attn a = {.nseg = hi - lo, .heads = heads, .kv_heads = 1, .head_dim = hd,
                      .scale = uniform ? 0.0f : 1.0f / sqrtf((float)hd), .q_off = qo + lo, .k_off = ko + lo, .k_end = ke + lo};
        a.k1 = k.c; a.v1 = v.c;
        cpu->attention(cpu, o.c, q.c, &a);
        a.k1 = k.g; a.v1 = v.g;
        gpu->attention(gpu, o.g, q.g, &a);
    }
    pi0_attn d = {.nseg = 3, .heads = heads, .kv_heads = 1, .head_dim = hd, .scale = 1.0f / sqrtf((float)hd),
                  .q_off = qo + 5, .k_off = ko + 5, .k_end = ke + 5};   /* decoded rows 80..82 */
    d.k1 = k.c; d.v1 = v.c;
    cpu->attention(cpu, o.c, q.c, &d);
    d.k1 = k.g; d.v1 = v.g;
    gpu->attention(gpu, o.g, q.g, &d);
    char shape[64];
    snprintf(shape, sizeof shape, "key ranges h=%d hd=%d (prefix-LM, uniform, decode)", heads, hd);
    compare_ex("attention", shape, &o, (size_t)hd, 1e-2, 5e-2);
    float *hc = malloc(o.n * sizeof(float)), *hg = malloc(o.n * sizeof(float));   /* which segment, where it fails */
    if (cpu->download(cpu, hc, o.c, o.n) == PI0_OK && gpu->download(gpu, hg, o.g, o.n) == PI0_OK)
        for (int sg = 0; sg < nseg; sg++) {
            size_t a0 = (size_t)qo[sg] * heads * hd, n = (size_t)(qo[sg + 1] - qo[sg]) * heads * hd;
            double e = rel_l2(hg + a0, hc + a0, n, NULL);
            if (!(e <= 1e-2)) printf("  segment %d (rows %d..%d, keys %d..%d): rel_l2 %.2e\n", sg, qo[sg], qo[sg + 1], ko[sg], ke[sg], e);
        }
    free(hc); free(hg);
    rel(&q); rel(&o); rel(&k); rel(&v);
}

/* All-masked rows (π0-FAST's masked tokens): scale 0, a uniform average over every key, for enough rows that the
 * flash kernels take them, and a key count that leaves a partial last tile (masked keys in it). */
static void t_attention_uniform(int nq, int nk) {
    int heads = 8, hd = 256;
    int32_t qo[2] = {0, nq}, ko[2] = {0, nk};
    dbuf q = mk((size_t)nq * heads * hd, PT_ACT), o = mk((size_t)nq * heads * hd, PT_ACT);
    dbuf k = mk((size_t)nk * hd, PT_ACT), v = mk((size_t)nk * hd, PT_ACT);
    set_rand(&q, 1.0f); set_rand(&k, 1.0f); set_rand(&v, 1.0f); poison(&o);
    cpu->reserve(cpu, (size_t)nq + nk, (size_t)nk, (size_t)nq * heads * (nk + 8), 0);
    gpu->reserve(gpu, (size_t)nq + nk, (size_t)nk, (size_t)nq * heads * (nk + 8), 0);
    pi0_attn a = {.nseg = 1, .heads = heads, .kv_heads = 1, .head_dim = hd, .scale = 0.0f, .q_off = qo, .k_off = ko,
                  .k1 = k.c, .v1 = v.c};
    cpu->attention(cpu, o.c, q.c, &a);
    a.k1 = k.g; a.v1 = v.g;
    gpu->attention(gpu, o.g, q.g, &a);
    char shape[64];
    snprintf(shape, sizeof shape, "uniform (scale 0) %d rows x %d keys", nq, nk);
    compare_ex("attention", shape, &o, (size_t)hd, 1e-2, 5e-2);
    rel(&q); rel(&o); rel(&k); rel(&v);
}

/* Decoded rows against per-sample caches whose key counts are read on the device (pi0_attn.k_len, π0-FAST's graph
 * replays): the GPU with k_len and a bound against the CPU with the exact ranges. One query row per sample, caches
 * RS rows apart. At head_dim 256 a bound of 1024 or less takes the decode kernel (batched), more the flash kernel on
 * Hopper and the generic path on the portable one; head_dim 32 the generic path. */
static void t_attention_klen(int B, int RS, int bound, const int32_t *len, int hd) {
    int heads = 8;
    int32_t qo[65], ko[65], ke[64], kx[64];
    for (int b = 0; b <= B; b++) { qo[b] = b; ko[b] = b * RS; }
    for (int b = 0; b < B; b++) { ke[b] = b * RS + bound; kx[b] = b * RS + len[b]; }
    dbuf q = mk((size_t)B * heads * hd, PT_ACT), o = mk((size_t)B * heads * hd, PT_ACT);
    dbuf k = mk((size_t)B * RS * hd, PT_ACT), v = mk((size_t)B * RS * hd, PT_ACT), kl = mk((size_t)B, PT_I32);
    set_rand(&q, 1.0f); set_rand(&k, 1.0f); set_rand(&v, 1.0f); poison(&o);
    CHECK(gpu->upload(gpu, kl.g, len, (size_t)B) == PI0_OK, "k_len upload: %s", pi0_last_error());
    cpu->reserve(cpu, (size_t)B * RS, (size_t)RS, (size_t)heads * (RS + 8), 0);
    gpu->reserve(gpu, (size_t)B * RS, (size_t)RS, (size_t)heads * (RS + 8), 0);
    pi0_attn a = {.nseg = B, .heads = heads, .kv_heads = 1, .head_dim = hd, .scale = 1.0f / sqrtf((float)hd),
                  .q_off = qo, .k_off = ko, .k_end = kx, .k1 = k.c, .v1 = v.c};
    cpu->attention(cpu, o.c, q.c, &a);
    a.k_end = ke; a.k_len = kl.g; a.k1 = k.g; a.v1 = v.g;
    gpu->attention(gpu, o.g, q.g, &a);
    char shape[64];
    snprintf(shape, sizeof shape, "k_len B=%d RS=%d bound=%d hd=%d", B, RS, bound, hd);
    compare_ex("attention", shape, &o, (size_t)hd, 1e-2, 5e-2);
    rel(&q); rel(&o); rel(&k); rel(&v); rel(&kl);
}

/* next_token against its CPU twin: the token of every row (greedy or sampled) and the two largest logits. A greedy
 * token may differ only where the CPU's margin is a near-tie. */
static void t_next_token(int M, int V, int K, float temperature) {
    hwt tab = mkw(V, K, 1.0f / sqrtf((float)K), 0);
    hwt *ws[1] = {&tab};
    void *store = upload_wts(ws, 1);
    dbuf x = mk((size_t)M * K, PT_ACT), ids = mk((size_t)M, PT_I32), top = mk(2 * (size_t)M, PT_F32);
    set_rand(&x, 1.0f);
    uint64_t seed = 77;
    cpu->next_token(cpu, ids.c, top.c, x.c, &tab.w, M, V, K, temperature, seed);
    gpu->next_token(gpu, ids.g, top.g, x.g, &tab.w, M, V, K, temperature, seed);
    int32_t *ic = malloc((size_t)M * 4), *ig = malloc((size_t)M * 4);
    float *tc = malloc((size_t)M * 8);
    CHECK(cpu->download(cpu, (float *)(void *)ic, ids.c, (size_t)M) == PI0_OK &&
          gpu->download(gpu, (float *)(void *)ig, ids.g, (size_t)M) == PI0_OK &&
          cpu->download(cpu, tc, top.c, 2 * (size_t)M) == PI0_OK, "next_token download: %s", pi0_last_error());
    char shape[64];
    snprintf(shape, sizeof shape, "M=%d V=%d K=%d T=%g", M, V, K, (double)temperature);
    int bad = 0;
    for (int r = 0; r < M; r++) {
        double margin = tc[2 * r] - tc[2 * r + 1];
        if (ic[r] != ig[r] && (temperature > 0 || margin > 1e-3 * fabs(tc[2 * r]))) bad++;
        CHECK(ic[r] >= 0 && ic[r] < V, "next_token %s: row %d: token %d outside the vocabulary", shape, r, ic[r]);
    }
    CHECK(!bad, "next_token %s: %d of %d rows chose another token than the CPU, with no near-tie", shape, bad, M);
    printf("%-12s %-44s tokens %s\n", "next_token", shape, bad ? "FAIL" : "OK");
    compare("next_token", shape, &top, 2, 1e-3);
    free(ic); free(ig); free(tc);
    rel(&x); rel(&ids); rel(&top);
    free_wts(store, ws, 1);
}

static void t_misc(void) {
    /* gelu_mul */
    int M = 788, F = 4096;
    dbuf g = mk((size_t)M * F, PT_ACT), u = mk((size_t)M * F, PT_ACT), o = mk((size_t)M * F, PT_ACT);
    set_rand(&g, 2.0f); set_rand(&u, 1.0f); poison(&o);
    cpu->gelu_mul(cpu, o.c, g.c, u.c, M, F);
    gpu->gelu_mul(gpu, o.g, g.g, u.g, M, F);
    compare("gelu_mul", "M=788 F=4096", &o, (size_t)F, 8e-3);
    rel(&g); rel(&u); rel(&o);
    /* embed into scattered rows */
    hwt tab = mkw(1000, 2048, 1.0f / 45.25f, 0);
    hwt *ws[1] = {&tab};
    void *ar = upload_wts(ws, 1);
    dbuf out = mk((size_t)40 * 2048, PT_ACT), rows = mk(20, PT_I32), ids = mk(20, PT_I32);
    int32_t r[20], id[20];
    for (int i = 0; i < 20; i++) { r[i] = 39 - 2 * i; id[i] = (int32_t)(pi0_rng_next(&rng) % 1000); }
    set_ints(&rows, r); set_ints(&ids, id);
    float *zero = calloc((size_t)40 * 2048, sizeof(float));
    set(&out, zero);
    cpu->embed(cpu, out.c, rows.c, ids.c, 20, &tab.w, sqrtf(2048.0f));
    gpu->embed(gpu, out.g, rows.g, ids.g, 20, &tab.w, sqrtf(2048.0f));
    compare("embed", "n=20 D=2048 V=1000", &out, 2048, 8e-3);
    free(zero);
    rel(&out); rel(&rows); rel(&ids);
    free_wts(ar, ws, 1);
    /* copy_rows across kinds, with gather and scatter */
    dbuf a16 = mk((size_t)30 * 64, PT_ACT), b32 = mk((size_t)30 * 64, PT_F32), idx = mk(10, PT_I32);
    int32_t ix[10];
    for (int i = 0; i < 10; i++) ix[i] = (i * 7) % 30;
    set_ints(&idx, ix);
    set_rand(&a16, 1.0f); poison(&b32);
    cpu->copy_rows(cpu, b32.c, (pt){0}, a16.c, idx.c, 10, 64);
    gpu->copy_rows(gpu, b32.g, (pt){0}, a16.g, idx.g, 10, 64);
    cpu->copy_rows(cpu, a16.c, idx.c, b32.c, (pt){0}, 10, 64);
    gpu->copy_rows(gpu, a16.g, idx.g, b32.g, (pt){0}, 10, 64);
    compare("copy_rows", "bf16->f32 gather, f32->bf16 scatter", &a16, 64, 1e-6);
    rel(&a16); rel(&b32); rel(&idx);
    /* add_rows + swish (F32 and ACT), axpy */
    dbuf x = mk((size_t)10 * 1024, PT_F32), vv = mk(1024, PT_F32), xa = mk((size_t)4 * 24, PT_ACT), va = mk(2 * 24, PT_F32);
    set_rand(&x, 2.0f); set_rand(&vv, 1.0f); set_rand(&xa, 2.0f); set_rand(&va, 1.0f);
    cpu->add_rows(cpu, x.c, vv.c, 10, 10, 1024, ACT_SWISH);
    gpu->add_rows(gpu, x.g, vv.g, 10, 10, 1024, ACT_SWISH);
    compare("add_rows", "f32 M=10 D=1024 swish", &x, 1024, 1e-6);
    cpu->add_rows(cpu, xa.c, va.c, 2, 4, 24, ACT_NONE);
    gpu->add_rows(gpu, xa.g, va.g, 2, 4, 24, ACT_NONE);
    compare("add_rows", "bf16 M=4 D=24 two vectors", &xa, 24, 8e-3);
    cpu->axpy(cpu, x.c, vv.c, -0.1f, 1024);
    gpu->axpy(gpu, x.g, vv.g, -0.1f, 1024);
    compare("axpy", "n=1024", &x, 1024, 1e-6);
    rel(&x); rel(&vv); rel(&xa); rel(&va);
    /* real-time chunking's guidance: 2 samples x 50 rows of 32, prefix weights from 1 down to 0, step 3 of 10 */
    dbuf rv = mk(100 * 32, PT_F32), rx = mk(100 * 32, PT_F32), ry = mk(100 * 32, PT_F32), rw = mk(100, PT_F32),
         rg = mk(10, PT_F32);
    set_rand(&rv, 1.0f); set_rand(&rx, 1.0f); set_rand(&ry, 1.0f); set_rand(&rg, 3.0f);
    float wv[100];
    for (int i = 0; i < 100; i++) wv[i] = i % 50 < 5 ? 1.0f : i % 50 < 20 ? (float)(20 - i % 50) / 16.0f : 0.0f;
    set(&rw, wv);
    cpu->rtc_guide(cpu, rv.c, rx.c, ry.c, rw.c, rg.c, 5, 3, 0.7f, 100, 50, 32);   /* g: 2 samples x 5 steps */
    gpu->rtc_guide(gpu, rv.g, rx.g, ry.g, rw.g, rg.g, 5, 3, 0.7f, 100, 50, 32);
    compare("rtc_guide", "2 x 50 rows of 32, k=3 t=0.7", &rv, 32, 1e-6);
    rel(&rv); rel(&rx); rel(&ry); rel(&rw); rel(&rg);
}

static void t_patch(int R, int P, int Dv, int nimg) {
    int CK = 3 * P * P, T = (R / P) * (R / P);
    hwt w = mkw(Dv, CK, 1.0f / sqrtf((float)CK), 0), b = mkw(Dv, 1, 0.1f, 0), pos = mkw(T, Dv, 0.5f, 0);
    w.f32 = 1;   /* as cuda_weights_upload keeps for the patch weight */
    hwt *ws[3] = {&w, &b, &pos};
    gpu->reserve(gpu, 0, 0, (size_t)T * (CK > Dv ? CK : Dv), 0);   /* one image per chunk at the least */
    void *ar = upload_wts(ws, 3);
    dbuf img = mk((size_t)(nimg + 1) * R * R * 3, PT_F32), sel = mk((size_t)nimg, PT_I32),
         out = mk((size_t)nimg * T * Dv, PT_ACT);
    float *px = calloc(img.n, sizeof(float));
    for (size_t i = 0; i < img.n; i++) px[i] = (float)(2.0 * pi0_rng_uniform(&rng) - 1.0);
    set(&img, px);
    free(px);
    int32_t s[8];
    for (int i = 0; i < nimg; i++) s[i] = (i + 1) % (nimg + 1);   /* skip slot 0: selection matters */
    set_ints(&sel, s);
    poison(&out);
    cpu->patch_embed(cpu, out.c, img.c, sel.c, nimg, &w.w, &b.w, &pos.w, R, P);
    gpu->patch_embed(gpu, out.g, img.g, sel.g, nimg, &w.w, &b.w, &pos.w, R, P);
    char shape[64];
    snprintf(shape, sizeof shape, "%d images R=%d P=%d Dv=%d", nimg, R, P, Dv);
    compare("patch_embed", shape, &out, (size_t)Dv, 8e-3);
    rel(&img); rel(&sel); rel(&out);
    free_wts(ar, ws, 3);
}

/* ---- exact real-time chunking: the transposes of the expert's ops (gemm_bwd.cu, norm.cu, elementwise.cu,
 * attn_bwd.cu) and the guided velocity (rtc.cu) against their CPU twins ---- */

/* linear_t: out (M, K) [op]= dy (M, N) . W[:, k0:k0+K], W (N, kcols); f32 as t_linear's (0: bf16 rows: few rows through
 * a transposed copy, else cuBLASLt with the weight as stored; 1: fp32 rows: whole weights through a transposed copy
 * and the forward fp32 kernel, a column block (k0, K < cols) through linear_t's own fp32 kernel; 2: fp32 rows with
 * the weight's fp32 copy, cuBLASLt in fp32 from 64 rows; 3: an F32 file's weights) */
static void t_linear_t(int M, int N, int K, int k0, int kcols, enum pi0_epi epi, int f32, double bound) {
    hwt W = f32 == 3 ? mkw_f32(N, kcols, 1.0f / sqrtf((float)N)) : mkw(N, kcols, 1.0f / sqrtf((float)N), 0);
    W.f32 = f32 >= 2;
    hwt *ws[1] = {&W};
    void *ar = upload_wts(ws, 1);
    int kind = f32 ? PT_F32 : PT_ACT;
    dbuf dy = mk((size_t)M * N, kind), out = mk((size_t)M * K, kind);
    set_rand(&dy, 1.0f);
    if (epi == EPI_ADD) set_rand(&out, 1.0f); else poison(&out);
    cpu->linear_t(cpu, out.c, dy.c, &W.w, M, N, K, k0, epi);
    gpu->linear_t(gpu, out.g, dy.g, &W.w, M, N, K, k0, epi);
    char shape[80];
    snprintf(shape, sizeof shape, "%s M=%d N=%d K=%d k0=%d %s", f32 == 3 ? "f32w" : f32 == 2 ? "f32c" : f32 ? "f32" : "bf16",
             M, N, K, k0, ename(epi));
    compare("linear_t", shape, &out, (size_t)K, bound);
    rel(&dy); rel(&out);
    free_wts(ar, ws, 1);
}

/* linear_t_cat: out (M, K) [op]= the weights' transposes applied to dy's column groups side by side (rows of ld, the
 * columns past the groups random: they must count for nothing) */
static void t_linear_t_cat(int M, const int *rows, int nw, int K, int ld, enum pi0_epi epi) {
    hwt W[4], *ws[4];
    const pi0_wt *wl[4];
    PI0_ASSERT(nw <= 4);
    for (int i = 0; i < nw; i++) {
        W[i] = mkw(rows[i], K, 1.0f / sqrtf((float)rows[i]), 0);
        ws[i] = &W[i];
        wl[i] = &W[i].w;
    }
    void *ar = upload_wts(ws, nw);
    dbuf dy = mk((size_t)M * ld, PT_ACT), out = mk((size_t)M * K, PT_ACT);
    set_rand(&dy, 1.0f);
    if (epi == EPI_ADD) set_rand(&out, 1.0f); else poison(&out);
    cpu->linear_t_cat(cpu, out.c, dy.c, ld, wl, nw, M, K, epi);
    gpu->linear_t_cat(gpu, out.g, dy.g, ld, wl, nw, M, K, epi);
    char shape[96];
    int n = snprintf(shape, sizeof shape, "M=%d rows=", M);
    for (int i = 0; i < nw; i++) n += snprintf(shape + n, sizeof shape - n, "%s%d", i ? "|" : "", rows[i]);
    snprintf(shape + n, sizeof shape - n, " K=%d ld=%d %s", K, ld, ename(epi));
    compare("linear_t_cat", shape, &out, (size_t)K, 8e-3);
    rel(&dy); rel(&out);
    free_wts(ar, ws, nw);
}

static int gpu_cc;   /* the GPU's compute capability, 10 * major + minor */

/* linear with an 8-bit weight (quant.h). int8: the products are exact on both sides, so the GPU's output is the CPU
 * twin's rounded to bf16 (GELU: a few ulp more); rows up to 64 take linear_i8.cu's rows kernels (K % 16: their 16-byte
 * loads), more cuBLASLt's int8 kernels (K and N multiples of 4) in chunks, else the rows kernel again. E4M3
 * (docs/precision.md 8), with `form` the first form tried (cuda_f8_force): the CPU twin sums the decoded products
 * exactly, the GPU in fp32, so the outputs differ by that and the bf16 rounding; the form asked for must run where it
 * exists: the rows kernel always, cuBLASLt's (with the scaling pass) where the shape allows it on a GPU with FP8
 * (sm_89 on), and the scales in the kernel on Hopper for every unbiased product (the library declines them with an fp32
 * bias); elsewhere the line says what ran. (qkv and mlp_up on 8-bit weights: t_fused.) */
static void t_linear_8(int M, int N, int K, int bias, enum pi0_epi epi, pi0_precision prec, int form) {
    hwt W = mkw(N, K, 1.0f / sqrtf((float)K), 0), b = mkw(N, 1, 0.1f, 0);
    W.i8 = prec;
    hwt *ws[2] = {&W, &b};
    void *ar = upload_wts(ws, 2);
    dbuf x = mk((size_t)M * K, PT_ACT), y = mk((size_t)M * N, PT_ACT);
    set_rand(&x, 1.0f);
    if (epi == EPI_ADD) set_rand(&y, 1.0f); else poison(&y);
    int f8 = prec == PI0_PRECISION_FP8;
    long ran[3] = {0};
    if (f8) {
        cuda_f8_force(form);
        for (int f = 0; f < 3; f++) ran[f] = cuda_f8_launches(f);
    }
    cpu->linear(cpu, y.c, x.c, &W.w, bias ? &b.w : NULL, M, N, K, 0, epi);
    gpu->linear(gpu, y.g, x.g, &W.w, bias ? &b.w : NULL, M, N, K, 0, epi);
    char shape[96];
    snprintf(shape, sizeof shape, "%s M=%d N=%d K=%d %s%s", f8 ? (const char *[]){"fp8 form 0", "fp8 form 1", "fp8 form 2"}[form]
             : "int8", M, N, K, ename(epi), bias ? "+b" : "");
    compare("linear", shape, &y, (size_t)N, 2.5e-3);
    if (f8) {
        cuda_f8_force(0);
        int lt = M > 64 && K % 16 == 0 && N % 16 == 0, got = -1;
        for (int f = 2; f >= 0; f--)
            if (cuda_f8_launches(f) > ran[f]) got = f;
        int want = form == 2 || !lt || gpu_cc < 89 ? 2 : form == 1 || bias ? 1 : 0;
        if (want == 0 && gpu_cc != 90) want = got >= 0 && got <= 1 ? got : 1;   /* the in-kernel scales: Hopper's library */
        CHECK(got == want, "linear %s: form %d ran, expected %d (sm_%d)", shape, got, want, gpu_cc);
    }
    rel(&x); rel(&y);
    free_wts(ar, ws, 2);
}

/* backend.h early_next's contract: the expert's o product with the hint on, then gate|up with its RMSNorm folded in
 * (the next op, which reads the product's output), give the bits they give with the hint off; and the CPU twin's values
 * within the op bound. A gate|up that read its input before the product ended would differ. */
static void t_early_next(int M) {
    const int D = 1024, K = 2048, F = 4096;
    hwt o = mkw(D, K, 1.0f / sqrtf((float)K), 0), g = mkw(F, D, 1.0f / sqrtf((float)D), 0),
        u = mkw(F, D, 1.0f / sqrtf((float)D), 0), nw = mkw(D, 1, 0.3f, 0);
    hwt *ws[4] = {&o, &g, &u, &nw};
    const int groups[4] = {1, 2, 0, 1};
    void *ar = upload_grouped(ws, 4, groups);
    pi0_gemma_layer L;
    memset(&L, 0, sizeof L);
    L.o = o.w; L.gate = g.w; L.up = u.w;
    dbuf x0 = mk((size_t)M * D, PT_ACT), x = mk((size_t)M * D, PT_ACT), att = mk((size_t)M * K, PT_ACT);
    dbuf tmp = mk((size_t)M * D, PT_ACT), out = mk((size_t)M * F, PT_ACT), t2 = mk((size_t)M * F, PT_ACT);
    set_rand(&x0, 1.0f);
    set_rand(&att, 1.0f);
    float *res[2];
    pi0_prenorm pg = {.w = &nw.w, .eps = 1e-6f, .out = tmp.g};
    for (int on = 0; on < 2; on++) {
        res[on] = malloc((size_t)M * F * sizeof(float));
        gpu->copy_rows(gpu, x.g, (pt){0}, x0.g, (pt){0}, M, D);
        poison(&out);
        gpu->early_next(gpu, on);
        gpu->linear(gpu, x.g, att.g, &L.o, NULL, M, D, K, 0, EPI_ADD);
        gpu->early_next(gpu, 0);
        gpu->mlp_up(gpu, out.g, t2.g, x.g, &L, M, F, D, &pg);
        CHECK(gpu->download(gpu, res[on], out.g, (size_t)M * F) == PI0_OK, "early_next: %s", pi0_last_error());
    }
    CHECK(!memcmp(res[0], res[1], (size_t)M * F * sizeof(float)), "early_next M=%d: gate|up differs with the hint on", M);
    pi0_prenorm pc = {.w = &nw.w, .eps = 1e-6f, .out = tmp.c};
    cpu->copy_rows(cpu, x.c, (pt){0}, x0.c, (pt){0}, M, D);
    cpu->linear(cpu, x.c, att.c, &L.o, NULL, M, D, K, 0, EPI_ADD);
    cpu->mlp_up(cpu, out.c, t2.c, x.c, &L, M, F, D, &pc);
    char shape[48];
    snprintf(shape, sizeof shape, "early_next M=%d", M);
    compare("o, norm + mlp_up", shape, &out, (size_t)F, 8e-3);
    free(res[0]); free(res[1]);
    rel(&x0); rel(&x); rel(&att); rel(&tmp); rel(&out); rel(&t2);
    free_wts(ar, ws, 4);
}

/* residual_save (exact RTC's forward): x += y . W^T, plain or gated (a gate row per `per` rows), and the result kept
 * in save (which must equal x bit for bit); one few-row launch up to 16 rows at K a multiple of 1024 */
static void t_residual_save(int M, int N, int K, int gated, int per) {
    hwt W = mkw(N, K, 1.0f / sqrtf((float)K), 0);
    hwt *ws[1] = {&W};
    void *ar = upload_wts(ws, 1);
    dbuf x = mk((size_t)M * N, PT_ACT), y = mk((size_t)M * K, PT_ACT), sv = mk((size_t)M * N, PT_ACT);
    dbuf tmp = mk((size_t)M * N, PT_ACT), gate = mk((size_t)((M + per - 1) / per) * 3 * N, PT_F32);
    set_rand(&x, 1.0f); set_rand(&y, 1.0f); set_rand(&gate, 0.5f); poison(&sv);
    pt gc = gated ? pt_at(cpu, gate.c, 2 * (size_t)N) : (pt){0}, gg = gated ? pt_at(gpu, gate.g, 2 * (size_t)N) : (pt){0};
    long p0 = cuda_gemv_launches();
    cpu->residual_save(cpu, x.c, sv.c, tmp.c, y.c, &W.w, M, N, K, gc, 3 * N, per);
    gpu->residual_save(gpu, x.g, sv.g, tmp.g, y.g, &W.w, M, N, K, gg, 3 * N, per);
    char shape[80];
    snprintf(shape, sizeof shape, "%s M=%d N=%d K=%d rows/gate=%d", gated ? "gated" : "plain", M, N, K, gated ? per : 0);
    if (M <= 16 && K % 1024 == 0) hopper_ran("the few-row kernel", "residual_save", shape, p0, cuda_gemv_launches(), 1);
    compare("residual_save.x", shape, &x, (size_t)N, 8e-3);
    compare("residual_save.save", shape, &sv, (size_t)N, 8e-3);
    float *a = malloc((size_t)M * N * sizeof(float)), *b = malloc((size_t)M * N * sizeof(float));
    int same = a && b && gpu->download(gpu, a, x.g, (size_t)M * N) == PI0_OK &&
               gpu->download(gpu, b, sv.g, (size_t)M * N) == PI0_OK && !memcmp(a, b, (size_t)M * N * sizeof(float));
    CHECK(same, "residual_save %s: the GPU's saved rows differ from its result", shape);
    /* save NULL: the add alone */
    cpu->residual_save(cpu, x.c, (pt){0}, tmp.c, y.c, &W.w, M, N, K, gc, 3 * N, per);
    gpu->residual_save(gpu, x.g, (pt){0}, tmp.g, y.g, &W.w, M, N, K, gg, 3 * N, per);
    compare("residual_save.nosave", shape, &x, (size_t)N, 8e-3);
    free(a); free(b);
    rel(&x); rel(&y); rel(&sv); rel(&tmp); rel(&gate);
    free_wts(ar, ws, 1);
}

/* norm_bwd: the cotangent through RMSNorm (weights) or adaRMS (modulation rows shared by `per` rows) */
static void t_norm_bwd(int M, int D, int ada, int per, enum pi0_epi epi) {
    hwt w = mkw(D, 1, 0.2f, 0);
    hwt *ws[1] = {&w};
    void *ar = upload_wts(ws, 1);
    dbuf x = mk((size_t)M * D, PT_ACT), dy = mk((size_t)M * D, PT_ACT), dx = mk((size_t)M * D, PT_ACT);
    dbuf mod = mk((size_t)((M + per - 1) / per) * 3 * D, PT_F32);
    set_rand(&x, 3.0f); set_rand(&dy, 1.0f); set_rand(&mod, 0.3f);
    if (epi == EPI_ADD) set_rand(&dx, 1.0f); else poison(&dx);
    cpu->norm_bwd(cpu, dx.c, dy.c, x.c, ada ? NULL : &w.w, ada ? mod.c : (pt){0}, ada ? per : 1, M, D, 1e-6f, epi);
    gpu->norm_bwd(gpu, dx.g, dy.g, x.g, ada ? NULL : &w.w, ada ? mod.g : (pt){0}, ada ? per : 1, M, D, 1e-6f, epi);
    char shape[64];
    snprintf(shape, sizeof shape, "%s M=%d D=%d rows/mod=%d %s", ada ? "adarms" : "rms", M, D, ada ? per : 0, ename(epi));
    compare("norm_bwd", shape, &dx, (size_t)D, 8e-3);
    rel(&x); rel(&dy); rel(&dx); rel(&mod);
    free_wts(ar, ws, 1);
}

/* gelu_mul_bwd and scale_rows (ACT), swish_bwd (F32, apart and in place) */
static void t_elementwise_bwd(int M, int F) {
    char shape[64];
    snprintf(shape, sizeof shape, "M=%d F=%d", M, F);
    dbuf g = mk((size_t)M * F, PT_ACT), u = mk((size_t)M * F, PT_ACT), dy = mk((size_t)M * F, PT_ACT);
    dbuf dg = mk((size_t)M * F, PT_ACT), du = mk((size_t)M * F, PT_ACT);
    set_rand(&g, 2.0f); set_rand(&u, 1.0f); set_rand(&dy, 1.0f); poison(&dg); poison(&du);
    cpu->gelu_mul_bwd(cpu, dg.c, du.c, dy.c, g.c, u.c, M, F, 0);
    gpu->gelu_mul_bwd(gpu, dg.g, du.g, dy.g, g.g, u.g, M, F, 0);
    compare("gelu_mul_bwd.g", shape, &dg, (size_t)F, 8e-3);
    compare("gelu_mul_bwd.u", shape, &du, (size_t)F, 8e-3);
    /* dg | du side by side in rows of 2F + 8 (the model's gate | up cotangent rows); the padding must stay */
    int ld = 2 * F + 8;
    dbuf gu = mk((size_t)M * ld, PT_ACT);
    set_rand(&gu, 1.0f);
    cpu->gelu_mul_bwd(cpu, gu.c, pt_at(cpu, gu.c, (size_t)F), dy.c, g.c, u.c, M, F, ld);
    gpu->gelu_mul_bwd(gpu, gu.g, pt_at(gpu, gu.g, (size_t)F), dy.g, g.g, u.g, M, F, ld);
    snprintf(shape, sizeof shape, "M=%d F=%d ld=%d", M, F, ld);
    compare("gelu_mul_bwd.gu", shape, &gu, (size_t)ld, 8e-3);
    rel(&gu);
    snprintf(shape, sizeof shape, "M=%d F=%d", M, F);
    /* scale_rows: the gate part (offset 2F, stride 3F) of modulation rows shared by ceil(M / 3) rows */
    int per = (M + 2) / 3;
    dbuf mod = mk((size_t)3 * 3 * F, PT_F32);
    set_rand(&mod, 0.5f); poison(&dg);
    cpu->scale_rows(cpu, dg.c, dy.c, pt_at(cpu, mod.c, 2 * (size_t)F), 3 * F, per, M, F);
    gpu->scale_rows(gpu, dg.g, dy.g, pt_at(gpu, mod.g, 2 * (size_t)F), 3 * F, per, M, F);
    snprintf(shape, sizeof shape, "M=%d D=%d rows/vec=%d", M, F, per);
    compare("scale_rows", shape, &dg, (size_t)F, 8e-3);
    rel(&g); rel(&u); rel(&dy); rel(&dg); rel(&du); rel(&mod);
    dbuf z = mk((size_t)M * F, PT_F32), d32 = mk((size_t)M * F, PT_F32), dz = mk((size_t)M * F, PT_F32);
    set_rand(&z, 2.0f); set_rand(&d32, 1.0f); poison(&dz);
    cpu->swish_bwd(cpu, dz.c, d32.c, z.c, M, F);
    gpu->swish_bwd(gpu, dz.g, d32.g, z.g, M, F);
    snprintf(shape, sizeof shape, "f32 M=%d D=%d", M, F);
    compare("swish_bwd", shape, &dz, (size_t)F, 1e-6);
    cpu->swish_bwd(cpu, d32.c, d32.c, z.c, M, F);   /* in place, as the model runs it */
    gpu->swish_bwd(gpu, d32.g, d32.g, z.g, M, F);
    snprintf(shape, sizeof shape, "f32 in place M=%d D=%d", M, F);
    compare("swish_bwd", shape, &d32, (size_t)F, 1e-6);
    rel(&z); rel(&d32); rel(&dz);
}

/* attention_bwd: dq, dk, dv for a random output cotangent, segments as t_attention_ramp's (nq[s] queries, nk[s] source-1
 * keys; the suffix keys a second source or the range's last `tail`). tight: on a second backend whose scratch holds one
 * segment's logits (reserve's contract), so that each segment is a chunk of its own. */
static void t_attention_bwd(const char *what, int nseg, const int *nq, const int *nk, int heads, int kv, int hd,
                            int with_k2, int block0, int tail, int tight, int side) {
    int32_t qo[129] = {0}, ko[129] = {0};
    PI0_ASSERT(nseg <= 128);
    size_t all = 0, one = 0;
    for (int s = 0; s < nseg; s++) {
        qo[s + 1] = qo[s] + nq[s];
        ko[s + 1] = ko[s] + nk[s];
        size_t n = (size_t)nq[s] * heads * (((nk[s] + (with_k2 ? nq[s] : 0)) + 3) & ~3);
        all += n + (size_t)nq[s] * heads * 8;
        one = n > one ? n : one;
    }
    int Mq = qo[nseg], Mk = ko[nseg];
    size_t nqv = (size_t)Mq * heads * hd, nkv = (size_t)Mk * kv * hd, nsv = (size_t)Mq * kv * hd;
    dbuf q = mk(nqv, PT_ACT), g = mk(nqv, PT_ACT), dq = mk(nqv, PT_ACT), k = mk(nkv, PT_ACT), v = mk(nkv, PT_ACT);
    dbuf k2 = mk(nsv, PT_ACT), v2 = mk(nsv, PT_ACT), dk = mk(nsv, PT_ACT), dv = mk(nsv, PT_ACT);
    set_rand(&q, 1.0f); set_rand(&g, 1.0f); set_rand(&k, 1.0f); set_rand(&v, 1.0f); set_rand(&k2, 1.0f); set_rand(&v2, 1.0f);
    poison(&dq); poison(&dk); poison(&dv);
    /* side: dq | dk | dv side by side in rows of ld (the model's layout), one head's width of padding that starts
     * random and must stay */
    int ld = side ? (heads + 2 * kv + 1) * hd : 0;
    dbuf all3 = mk(side ? (size_t)Mq * ld : 1, PT_ACT);
    set_rand(&all3, 1.0f);
    pt dqc = dq.c, dkc = dk.c, dvc = dv.c, dqg = dq.g, dkg = dk.g, dvg = dv.g;
    if (side) {
        size_t ok = (size_t)heads * hd, ov = ok + (size_t)kv * hd;
        dqc = all3.c; dkc = pt_at(cpu, all3.c, ok); dvc = pt_at(cpu, all3.c, ov);
        dqg = all3.g; dkg = pt_at(gpu, all3.g, ok); dvg = pt_at(gpu, all3.g, ov);
    }
    pi0_backend *gb = gpu;
    if (tight && cuda_backend_create(&gb, 0, NULL) != PI0_OK) {
        CHECK(0, "second backend: %s", pi0_last_error());
        gb = NULL;
    }
    if (gb) {
        gb->reserve(gb, 0, 0, tight ? one : all, 0);
        pi0_attn a = {.nseg = nseg, .heads = heads, .kv_heads = kv, .head_dim = hd, .scale = 1.0f / sqrtf((float)hd),
                      .q_off = qo, .k_off = ko, .block0 = block0, .tail = tail};
        a.k1 = k.c; a.v1 = v.c;
        if (with_k2) { a.k2 = k2.c; a.v2 = v2.c; }
        cpu->attention_bwd(cpu, dqc, dkc, dvc, g.c, q.c, &a, ld);
        a.k1 = k.g; a.v1 = v.g;
        if (with_k2) { a.k2 = k2.g; a.v2 = v2.g; }
        gb->attention_bwd(gb, dqg, dkg, dvg, g.g, q.g, &a, ld);
        CHECK(gb->sync(gb) == PI0_OK, "attention_bwd %s: %s", what, pi0_last_error());
        char shape[96];
        snprintf(shape, sizeof shape, "%s seg=%d q=%d k=%d h=%d/%d hd=%d%s", what, nseg, nq[0], nk[0], heads, kv, hd,
                 tight ? " tight" : side ? " side by side" : "");
        if (side) {   /* the whole rows: dq, dk, dv and the untouched padding */
            compare_ex("attn_bwd.dqkv", shape, &all3, (size_t)hd, 1e-2, 5e-2);
            if (tight) gb->destroy(gb);
            rel(&q); rel(&g); rel(&dq); rel(&k); rel(&v); rel(&k2); rel(&v2); rel(&dk); rel(&dv); rel(&all3);
            return;
        }
        compare_ex("attn_bwd.dq", shape, &dq, (size_t)hd, 1e-2, 5e-2);   /* rows: one head's hd values */
        compare_ex("attn_bwd.dk", shape, &dk, (size_t)hd, 1e-2, 5e-2);
        compare_ex("attn_bwd.dv", shape, &dv, (size_t)hd, 1e-2, 5e-2);
        /* deterministic: a second run gives the same bits */
        size_t nall = nqv + 2 * nsv;
        float *h = malloc(2 * nall * sizeof(float));
        int same = 0;
        if (h) {
            for (int run = 0; run < 2; run++) {
                if (run) gb->attention_bwd(gb, dq.g, dk.g, dv.g, g.g, q.g, &a, 0);
                float *o = h + run * nall;
                same = gpu->download(gpu, o, dq.g, nqv) == PI0_OK && gpu->download(gpu, o + nqv, dk.g, nsv) == PI0_OK &&
                       gpu->download(gpu, o + nqv + nsv, dv.g, nsv) == PI0_OK;
            }
            same = same && !memcmp(h, h + nall, nall * sizeof(float));
            free(h);
        }
        printf("%-12s %-44s %s\n", "attn_bwd.det", shape, same ? "second run bit-identical OK" : "FAIL");
        CHECK(same, "attention_bwd %s: a second run differs", what);
        if (tight) gb->destroy(gb);
    }
    rel(&q); rel(&g); rel(&dq); rel(&k); rel(&v); rel(&k2); rel(&v2); rel(&dk); rel(&dv); rel(&all3);
}

/* rtc_error and rtc_correct: 3 samples x 50 rows of 32, prefix weights from 1 down to 0, step 3 of 5; LeRobot's form
 * (jac 0) for samples 0 and 2, the exact form (jac 1) for sample 1, whose neighbours' dx is NaN (not read). Against the
 * CPU twin; and on each backend the LeRobot samples equal that backend's rtc_guide bit for bit (backend.h: a sample's
 * answer must not depend on its batch). */
static void t_rtc_exact(void) {
    enum { NS = 3, H = 50, A = 32, R = NS * H };
    dbuf v = mk(R * A, PT_F32), x = mk(R * A, PT_F32), y = mk(R * A, PT_F32), w = mk(R, PT_F32), g = mk(NS * 5, PT_F32),
         err = mk(R * A, PT_F32), dx = mk(R * A, PT_F32), jac = mk(NS, PT_F32), gv = mk(R * A, PT_F32);
    set_rand(&v, 1.0f); set_rand(&x, 1.0f); set_rand(&y, 1.0f); set_rand(&g, 3.0f); poison(&err);
    static float wv[R], dv[R * A], vv[R * A];
    float jv[NS] = {0.0f, 1.0f, 0.0f};
    for (int i = 0; i < R; i++) wv[i] = i % H < 5 ? 1.0f : i % H < 20 ? (float)(20 - i % H) / 16.0f : 0.0f;
    for (int i = 0; i < R * A; i++) dv[i] = jv[i / A / H] != 0.0f ? (float)pi0_rng_normal(&rng) : NAN;
    set(&w, wv);
    set(&jac, jv);
    set(&dx, dv);
    cpu->download(cpu, vv, v.c, R * A);
    set(&gv, vv);
    cpu->rtc_error(cpu, err.c, v.c, x.c, y.c, w.c, jac.c, 0.7f, R, H, A);
    gpu->rtc_error(gpu, err.g, v.g, x.g, y.g, w.g, jac.g, 0.7f, R, H, A);
    compare("rtc_error", "3 x 50 rows of 32, t=0.7, jac 0 / 1 / 0", &err, A, 1e-6);
    cpu->rtc_correct(cpu, v.c, err.c, dx.c, g.c, jac.c, 5, 3, 0.7f, R, H, A);
    gpu->rtc_correct(gpu, v.g, err.g, dx.g, g.g, jac.g, 5, 3, 0.7f, R, H, A);
    compare("rtc_correct", "3 x 50 rows of 32, k=3 t=0.7, jac 0 / 1 / 0", &v, A, 1e-6);
    cpu->rtc_guide(cpu, gv.c, x.c, y.c, w.c, g.c, 5, 3, 0.7f, R, H, A);
    gpu->rtc_guide(gpu, gv.g, x.g, y.g, w.g, g.g, 5, 3, 0.7f, R, H, A);
    static float hv[R * A], hg[R * A];
    for (int side = 0; side < 2; side++) {
        pi0_backend *b = side ? gpu : cpu;
        int same = b->download(b, hv, side ? v.g : v.c, R * A) == PI0_OK &&
                   b->download(b, hg, side ? gv.g : gv.c, R * A) == PI0_OK;
        for (int s = 0; s < NS; s++)
            if (jv[s] == 0.0f) same = same && !memcmp(hv + s * H * A, hg + s * H * A, H * A * sizeof(float));
        const char *what = side ? "gpu: jac 0 samples == its rtc_guide" : "cpu: jac 0 samples == its rtc_guide";
        printf("%-12s %-44s %s\n", "rtc_correct", what, same ? "bit for bit OK" : "FAIL");
        CHECK(same, "%s: rtc_error + rtc_correct of LeRobot's form differ from its rtc_guide", side ? "gpu" : "cpu");
    }
    rel(&v); rel(&x); rel(&y); rel(&w); rel(&g); rel(&err); rel(&dx); rel(&jac); rel(&gv);
}

/* ---- the op cases: one table per op, each row {shapes, epilogue / variant, tolerance, why} ----
 * Tolerances: rel L2 8e-3 for ops with bf16 outputs, 1e-5 where both sides compute in fp32 (tests/README.md says
 * why); compare_ex adds the per-row and max-abs judgements. */
typedef struct {
    int M, N, K, k0, kcols, bias;
    enum pi0_epi epi;
    int f32;   /* 0 bf16 x; 1 fp32 x (the kernel); 2 fp32 x with the weights' fp32 copy; 3 an F32 file's weights */
    double tol;
    const char *why;
} linear_case;

static const linear_case LINEAR[] = {
    {788, 2048, 2048, 0, 2048, 0, EPI_STORE, 0, 8e-3, "Gemma prefix q|o (cuBLASLt)"},
    {788, 256, 2048, 0, 2048, 0, EPI_STORE, 0, 8e-3, "Gemma prefix k / v (MQA)"},
    {788, 2048, 16384, 0, 16384, 0, EPI_ADD, 0, 8e-3, "Gemma prefix down + residual"},
    {768, 4304, 1152, 0, 1152, 1, EPI_GELU, 0, 8e-3, "SigLIP fc1 + bias + GELU epilogue (3 images)"},
    {768, 1152, 4304, 0, 4304, 1, EPI_ADD, 0, 8e-3, "SigLIP fc2 + bias + residual"},
    {11, 4096, 1024, 0, 1024, 0, EPI_STORE, 0, 8e-3, "expert gate at B = 1 (gemv.cu)"},
    {11, 1024, 4096, 0, 4096, 0, EPI_ADD, 0, 8e-3, "expert down + residual at B = 1 (gemv.cu, K slices)"},
    {11, 2560, 1024, 0, 1024, 0, EPI_STORE, 0, 8e-3, "expert q|k|v as one product (gemv.cu)"},
    {11, 1024, 2048, 0, 2048, 0, EPI_ADD, 0, 8e-3, "expert o + residual (gemv.cu)"},
    {11, 8192, 1024, 0, 1024, 0, EPI_STORE, 0, 8e-3, "expert gate|up as one product (gemv.cu)"},
    {16, 1000, 1024, 0, 1024, 1, EPI_GELU, 0, 8e-3, "gemv.cu: a partial row block with bias + GELU"},
    {1, 1024, 4096, 0, 4096, 0, EPI_ADD, 0, 8e-3, "gemv.cu: one row"},
    {11, 1024, 1024, 1024, 2048, 1, EPI_STORE, 0, 8e-3, "gemv.cu: a column offset k0 into the weight"},
    {16, 2561, 1024, 0, 1024, 1, EPI_GELU, 0, 8e-3, "gemv.cu: few rows, odd N"},
    {7, 1024, 4104, 0, 4104, 0, EPI_ADD, 0, 8e-3, "gemv.cu: K not a multiple of 16"},
    {17, 1024, 1024, 0, 1024, 0, EPI_STORE, 0, 8e-3, "17 rows: the warpgroup kernel's smallest case"},
    {16, 1024, 3072, 0, 3072, 0, EPI_ADD, 0, 8e-3, "gemv.cu: 3 K slices, rank 0 finishes 6 of the 16 rows"},
    {15, 1024, 7168, 0, 7168, 0, EPI_STORE, 0, 8e-3, "gemv.cu: 7 K slices, 3 rows for ranks 0 and 1"},
    {51, 1024, 4096, 0, 4096, 0, EPI_ADD, 0, 8e-3, "warpgroup kernel (17-64 rows), 50-step horizon: down, 8 K slices"},
    {51, 1024, 2048, 0, 2048, 0, EPI_ADD, 0, 8e-3, "warpgroup kernel, 50-step horizon: o"},
    {51, 2560, 1024, 0, 1024, 0, EPI_STORE, 0, 8e-3, "warpgroup kernel, 50-step horizon: q|k|v, 3 uneven K slices"},
    {51, 8192, 1024, 0, 1024, 0, EPI_STORE, 0, 8e-3, "warpgroup kernel, 50-step horizon: gate|up, 1 K slice"},
    {64, 1000, 1024, 0, 1024, 1, EPI_GELU, 0, 8e-3, "warpgroup kernel: 64 rows, N not a multiple of the 64-row tile"},
    {33, 1024, 1048, 0, 1048, 0, EPI_ADD, 0, 8e-3, "warpgroup kernel: a K tail past the 64-column tensor boxes"},
    {22, 1024, 1024, 1024, 2048, 1, EPI_STORE, 0, 8e-3, "warpgroup kernel: a column offset"},
    {63, 72, 40, 0, 40, 1, EPI_STORE, 0, 8e-3, "warpgroup kernel: tiny N and K"},
    {51, 1280, 2048, 0, 2048, 0, EPI_ADD, 0, 8e-3, "warpgroup kernel: 7 K slices (on 132 SMs)"},
    {37, 1536, 2048, 0, 2048, 1, EPI_STORE, 0, 8e-3, "warpgroup kernel: 6 K slices"},
    {51, 1856, 2048, 0, 2048, 0, EPI_ADD, 0, 8e-3, "warpgroup kernel: 5 K slices"},
    {45, 2112, 2048, 0, 2048, 0, EPI_GELU, 0, 8e-3, "warpgroup kernel: 4 K slices, GELU"},
    {51, 4096, 2048, 0, 2048, 0, EPI_ADD, 0, 8e-3, "warpgroup kernel: 2 K slices"},
    {65, 1024, 1024, 0, 1024, 0, EPI_ADD, 0, 8e-3, "past 64 rows: cuBLASLt"},
    {1, 24, 40, 0, 40, 1, EPI_STORE, 0, 8e-3, "one row, tiny N and K"},
    {5, 33, 48, 0, 48, 0, EPI_ADD, 0, 8e-3, "odd N"},
    {10, 1024, 32, 0, 32, 1, EPI_STORE, 1, 1e-5, "fp32 x: action_in_proj (K = 32)"},
    {10, 1024, 1024, 1024, 2048, 0, EPI_STORE, 1, 1e-5, "fp32 x: the time MLP's second half (k0)"},
    {50, 32, 1024, 0, 1024, 1, EPI_STORE, 1, 1e-5, "fp32 x: action_out_proj at the 50-step horizon"},
    {3, 7, 5, 0, 5, 1, EPI_ADD, 1, 1e-5, "fp32 x: tiny"},
    {17, 40, 2056, 0, 2056, 1, EPI_ADD, 1, 1e-5, "fp32 x in 3 shared-memory chunks, 3 row blocks"},
    {3, 17, 1500, 0, 1500, 0, EPI_STORE, 1, 1e-5, "fp32 x, K % 8 != 0: the scalar path, 2 chunks"},
    {9, 20, 64, 0, 64, 1, EPI_GELU, 1, 1e-5, "fp32 x with GELU"},
    {640, 1024, 1024, 1024, 2048, 1, EPI_STORE, 2, 1e-5, "fp32 copy, 64+ rows: cuBLASLt in fp32 at B = 64, a K offset"},
    {640, 32, 1024, 0, 1024, 1, EPI_ADD, 2, 1e-5, "fp32 copy: action_out_proj at B = 64"},
    {130, 40, 300, 0, 300, 1, EPI_GELU, 2, 1e-5, "fp32 copy: GELU"},
    {10, 1024, 1024, 1024, 2048, 0, EPI_STORE, 3, 1e-5, "an F32 file's weights (not bf16-representable), few rows: 1e-5 fails if rounded"},
    {3, 17, 1500, 0, 1500, 1, EPI_ADD, 3, 1e-5, "an F32 file's weights, the scalar path"},
    {640, 32, 1024, 0, 1024, 1, EPI_ADD, 3, 1e-5, "an F32 file's weights, many rows"},
    {64, 17, 1500, 0, 1500, 0, EPI_STORE, 2, 1e-5, "fp32 copy at exactly 64 rows, no bias"},
    {640, 1024, 1024, 0, 1024, 1, EPI_STORE, 1, 1e-5, "fp32 x, no fp32 copy: the kernel at many rows"},
};

typedef struct { int M, N, K, per; const char *why; } gated_case;   /* per: rows sharing one gate row */
static const gated_case GATED[] = {
    {10, 1024, 2048, 10, "π0.5 expert o at B = 1: gemv.cu's gated epilogue (K slices)"},
    {10, 1024, 4096, 10, "π0.5 expert down at B = 1"},
    {16, 1000, 1024, 5, "a partial row block, several gate rows"},
    {20, 1024, 2048, 10, "B = 2: the warpgroup kernel's gated epilogue"},
    {51, 1024, 4096, 17, "the 50-step horizon, 3 samples"},
    {80, 1024, 2048, 10, "B = 8: the product, then the gated add"},
};

typedef struct { int M, K, nq, nkv, F, hd; const char *why; } fused_case;   /* q|k|v (+RoPE, +bias) and gate|up */
static const fused_case FUSED[] = {
    {788, 2048, 2048, 256, 16384, 256, "PaliGemma layer"},
    {11, 1024, 2048, 256, 4096, 256, "action expert at B = 1 (gemv.cu: RoPE split and gelu * up epilogues)"},
    {3, 1024, 2048, 256, 4096, 256, "few rows, most of the 16 padded"},
    {51, 1024, 2048, 256, 4096, 256, "50-step horizon: the warpgroup kernel's pair epilogues"},
    {64, 1024, 2048, 256, 4096, 256, "64 rows: the warpgroup kernel's largest case"},
    {17, 2048, 2048, 256, 16384, 256, "PaliGemma widths at 17 rows"},
    {88, 1024, 2048, 256, 4096, 256, "B = 8: cuBLASLt, then the split kernels"},
    {768, 1152, 1152, 1152, 4304, 72, "SigLIP layer (fc1 as gate|up only as a shape check)"},
    {543, 2048, 512, 256, 1024, 256, "gateup.cu: 4 token tiles of 136, the last one overlapping"},
    {136, 1000, 256, 64, 192, 64, "gateup.cu: one tile of the narrowest width, K past the last 64"},
    {300, 512, 256, 64, 320, 64, "gateup.cu: 3 tiles, F of 5 feature tiles"},
    {2600, 2048, 256, 64, 1024, 64, "gateup.cu: 16 x 16 tiles (width 168), blocks walk over 2 panels"},
    {200, 40, 64, 64, 64, 64, "gateup.cu: one feature tile, K under one 64-wide block"},
    {5, 40, 24, 12, 36, 4, "sizes not multiples of 256 bytes: separate products"},
};

typedef struct { int M, K, nq, nkv, F, hd, ada; const char *why; } prenorm_case;   /* ada: adaRMS, else RMSNorm */
static const prenorm_case PRENORM[] = {
    {11, 1024, 2048, 256, 4096, 256, 0, "expert at B = 1: RMSNorm fused into gemv.cu's prologue"},
    {11, 1024, 2048, 256, 4096, 256, 1, "π0.5 expert at B = 1: adaRMS fused"},
    {3, 1024, 2048, 256, 4096, 256, 1, "adaRMS fused, few rows"},
    {15, 1024, 2048, 256, 4096, 256, 1, "the adaRMS shift as X row 15, the last one"},
    {16, 1024, 2048, 256, 4096, 256, 1, "adaRMS, no row left for the shift: norm kernel, then the product"},
    {16, 1024, 2048, 256, 4096, 256, 0, "RMSNorm fused at 16 rows"},
    {22, 1024, 2048, 256, 4096, 256, 0, "B = 2: norm kernel, then the warpgroup kernel"},
    {51, 1024, 2048, 256, 4096, 256, 1, "adaRMS at the 50-step horizon: norm kernel, then the warpgroup kernel"},
    {51, 1024, 2048, 256, 4096, 256, 0, "RMSNorm at the 50-step horizon"},
    {11, 2048, 2048, 256, 4096, 256, 0, "K != 1024: norm kernel, then the few-row product"},
};

typedef struct { int M, D; const char *why; } norm_case;   /* layernorm, rmsnorm, adarms */
static const norm_case NORMS[] = {
    {768, 1152, "SigLIP (3 images)"},
    {788, 2048, "Gemma prefix"},
    {22, 1024, "expert at B = 2"},
    {3, 40, "tiny"},
    {1, 24, "one row"},
    {3, 1030, "D % 8 != 0: the block-per-row kernel"},
    {2, 4096, "D > 2048: the block-per-row kernel"},
};

typedef struct { int M, qh, kh, hd; const char *why; } rope_case;
static const rope_case ROPE[] = {
    {788, 8, 1, 256, "Gemma prefix q / k"},
    {11, 8, 1, 256, "expert suffix q / k"},
    {51, 8, 1, 256, "expert suffix q / k at the 50-step horizon"},
    {3, 2, 2, 16, "small, as many k heads as q heads"},
    {4, 3, 0, 8, "no k: it must stay untouched"},
};

#define N_OF(t) (sizeof t / sizeof t[0])

/* ATT_FLASH_WG: the wgmma flash kernel must run (hd 256 MQA; Hopper path); ATT_DECODE: the decode kernel must run (either
 * path: Hopper's cluster kernel or the portable one) */
typedef enum { ATT_ANY, ATT_FLASH_WG, ATT_DECODE } attn_path;
typedef struct {
    const char *name;
    int nseg;
    const int *nq, *nk;     /* per segment; NULL: uq / uk for every segment */
    int uq, uk;
    int heads, kv, hd, k2, block0, tail;   /* k2: suffix keys as a second source; block0: π0's state row block */
    float kramp;                           /* > 0: logits growing along the keys (the running max moves late) */
    attn_path path;
    const char *why;
} attn_case;

#define SEGS(...) (const int[]){__VA_ARGS__}
static const attn_case ATTN[] = {
    {"siglip", 3, NULL, NULL, 256, 256, 16, 16, 72, 0, 0, 0, 0, ATT_ANY, "SigLIP MHA per image"},
    {"siglip-batched", 20, NULL, NULL, 64, 64, 16, 16, 72, 0, 0, 0, 0, ATT_ANY, "more images than heads: batched over images"},
    {"prefix", 1, SEGS(788), SEGS(788), 0, 0, 8, 1, 256, 0, 0, 0, 0, ATT_FLASH_WG, "Gemma MQA prefix, B = 1"},
    {"prefix-b2", 2, SEGS(500, 300), SEGS(500, 300), 0, 0, 8, 1, 256, 0, 0, 0, 0, ATT_FLASH_WG, "prefix, B = 2 of two lengths"},
    {"suffix-pi0", 2, SEGS(11, 11), SEGS(788, 500), 0, 0, 8, 1, 256, 1, 1, 0, 0, ATT_ANY, "π0 suffix over the cache + suffix keys (state block)"},
    {"suffix-pi05", 2, SEGS(10, 10), SEGS(788, 500), 0, 0, 8, 1, 256, 1, 0, 0, 0, ATT_ANY, "π0.5 suffix (no state block)"},
    {"suffix-batched", 6, SEGS(11, 11, 11, 11, 11, 7), NULL, 0, 300, 8, 1, 256, 1, 1, 0, 0, ATT_ANY, "5 equal segments batched, then 1"},
    {"prefix-batched", 3, NULL, NULL, 40, 40, 4, 1, 16, 0, 0, 0, 0, ATT_ANY, "equal prefix segments batched"},
    {"tiny", 2, SEGS(3, 5), SEGS(7, 2), 0, 0, 4, 1, 16, 1, 1, 0, 0, ATT_ANY, "tiny, more queries than keys"},
    {"suffix-h50-b2", 2, NULL, NULL, 51, 600, 8, 1, 256, 1, 1, 0, 0, ATT_ANY, "B = 2, 50-step horizon: 2 x 408 rows, a second source"},
    {"suffix-many", 40, NULL, NULL, 11, 100, 8, 1, 256, 1, 1, 0, 0, ATT_ANY, "more equal segments than the decode kernel takes in two waves: flash with a second source (π0)"},
    {"flash-suffix-pi05", 40, NULL, NULL, 10, 120, 8, 1, 256, 1, 0, 0, 0, ATT_ANY, "the same for π0.5"},
    {"flash-suffix-ramp", 20, NULL, NULL, 11, 300, 8, 1, 256, 1, 1, 0, 6.0f, ATT_ANY, "flash with a second source, a late-moving maximum"},
    {"flash-suffix-h50", 3, NULL, NULL, 51, 600, 8, 1, 256, 1, 1, 0, 0, ATT_ANY, "flash at the 50-step horizon (7 row blocks per segment)"},
    {"flash-tail-pi0", 1, SEGS(130), SEGS(1100), 0, 0, 8, 1, 256, 0, 1, 130, 0, ATT_ANY, "a tail of 1040 rows: past the decode kernel"},
    {"flash-mqa-waves", 3, NULL, NULL, 400, 400, 8, 1, 256, 0, 0, 0, 0, ATT_FLASH_WG, "more than a wave of blocks: the 32-key tiles"},
    {"flash-mqa-waves-ramp", 3, NULL, NULL, 400, 400, 8, 1, 256, 0, 0, 0, 6.0f, ATT_FLASH_WG, "the same, a late-moving maximum"},
    {"flash-suffix-waves", 20, NULL, NULL, 51, 300, 8, 1, 256, 1, 1, 0, 0, ATT_ANY, "more than a wave, with a suffix"},
    {"suffix-tail-pi0", 1, SEGS(11), SEGS(799), 0, 0, 8, 1, 256, 0, 1, 11, 0, ATT_DECODE, "B = 1: suffix K/V after the cache (π0)"},
    {"suffix-tail-pi05", 1, SEGS(10), SEGS(978), 0, 0, 8, 1, 256, 0, 0, 10, 0, ATT_DECODE, "B = 1: suffix K/V after the cache (π0.5)"},
    {"suffix-tail-h50", 1, SEGS(51), SEGS(839), 0, 0, 8, 1, 256, 0, 1, 51, 0, ATT_DECODE, "408 query rows: 26 row tiles"},
    {"suffix-tail-33", 1, SEGS(33), SEGS(821), 0, 0, 8, 1, 256, 0, 1, 33, 0, ATT_DECODE, "17 row tiles, 2 per block: the last block's second tile is empty"},
    {"decode-short", 1, SEGS(3), SEGS(40), 0, 0, 8, 1, 256, 0, 1, 3, 0, ATT_DECODE, "key chunks past the keys"},
    {"flash-mqa-odd", 3, SEGS(1, 17, 130), SEGS(1, 17, 130), 0, 0, 8, 1, 256, 0, 0, 0, 0, ATT_FLASH_WG, "partial row and key tiles, one query row"},
    {"flash-mqa-cross", 2, SEGS(5, 200), SEGS(200, 40), 0, 0, 8, 1, 256, 0, 0, 0, 0, ATT_FLASH_WG, "fewer or more queries than keys"},
    {"flash-mqa-tiles", 3, NULL, SEGS(64, 128, 193), 200, 0, 8, 1, 256, 0, 0, 0, 0, ATT_FLASH_WG, "1, 2 (whole) and 4 key tiles of 64"},
    {"flash-mqa-wg1-tail", 3, NULL, NULL, 200, 100, 8, 1, 256, 0, 0, 0, 0, ATT_FLASH_WG, "warpgroup 1's partial tile reads the next segment"},
    {"flash-mqa-equal", 4, SEGS(130, 130, 130, 50), SEGS(130, 130, 130, 50), 0, 0, 8, 1, 256, 0, 0, 0, 0, ATT_FLASH_WG, "equal segments in one launch"},
    {"flash-mha-odd", 3, SEGS(100, 37, 256), SEGS(100, 37, 256), 0, 0, 16, 16, 72, 0, 0, 0, 0, ATT_ANY, "hd 72 MHA: partial tiles"},
    {"flash-mha-cross", 2, SEGS(3, 64), SEGS(65, 1), 0, 0, 16, 16, 72, 0, 0, 0, 0, ATT_ANY, "hd 72 MHA: one key, more keys than queries"},
    {"flash-mha-3-5-tiles", 2, SEGS(20, 70), SEGS(150, 300), 0, 0, 16, 16, 72, 0, 0, 0, 0, ATT_ANY, "odd key tile counts (2 groups)"},
    {"flash-mqa-ramp", 1, SEGS(788), SEGS(788), 0, 0, 8, 1, 256, 0, 0, 0, 6.0f, ATT_FLASH_WG, "the prefix, a late-moving maximum"},
    {"flash-mha-ramp", 3, NULL, NULL, 256, 256, 16, 16, 72, 0, 0, 0, 6.0f, ATT_ANY, "SigLIP, a late-moving maximum"},
};

/* exact real-time chunking's transposes (backend.h): linear_t runs each row at EPI_STORE and, with `add`, EPI_ADD too */
typedef struct { int M, N, K, k0, kcols, add, f32; double tol; const char *why; } linear_t_case;
static const linear_t_case LINEAR_T[] = {
    {51, 1024, 4096, 0, 4096, 1, 0, 8e-3, "expert down^T, 50-step horizon at B = 1"},
    {51, 4096, 1024, 0, 1024, 1, 0, 8e-3, "expert gate^T / up^T (up adds)"},
    {51, 1024, 2048, 0, 2048, 1, 0, 8e-3, "expert o^T"},
    {51, 256, 1024, 0, 1024, 1, 0, 8e-3, "expert k^T / v^T (they add)"},
    {51, 2048, 1024, 0, 1024, 1, 0, 8e-3, "expert q^T"},
    {3264, 1024, 4096, 0, 4096, 0, 0, 8e-3, "down^T at B = 64"},
    {3264, 4096, 1024, 0, 1024, 1, 0, 8e-3, "gate^T / up^T at B = 64"},
    {3264, 1024, 2048, 0, 2048, 0, 0, 8e-3, "o^T at B = 64"},
    {3264, 256, 1024, 0, 1024, 1, 0, 8e-3, "k^T / v^T at B = 64"},
    {3264, 2048, 1024, 0, 1024, 0, 0, 8e-3, "q^T at B = 64"},
    {7, 40, 24, 8, 40, 1, 0, 8e-3, "bf16: tiny, a column offset k0"},
    {50, 32, 1024, 0, 1024, 1, 1, 1e-5, "fp32 rows: action_out_proj^T (a transposed copy)"},
    {50, 1024, 1024, 0, 1024, 1, 1, 1e-5, "fp32 rows: action_time_mlp_out^T"},
    {50, 1024, 32, 0, 32, 0, 1, 1e-5, "fp32 rows: action_in_proj^T / the time MLP's action half^T (K = 32)"},
    {50, 1024, 1024, 0, 1024, 0, 3, 1e-5, "fp32 rows: an F32 file's weights (not bf16-representable)"},
    {5, 300, 47, 3, 60, 1, 1, 1e-5, "fp32 rows: odd K, a column offset, 2 dy chunks (linear_t's fp32 kernel)"},
    {7, 300, 40, 8, 64, 1, 3, 1e-5, "an F32 file's weights, a column offset (linear_t's fp32 kernel on fp32 weights)"},
    {100, 1024, 40, 8, 64, 1, 1, 1e-5, "fp32 rows, a column offset at 100 rows, no fp32 copy (linear_t's fp32 kernel)"},
    {3200, 1024, 1024, 0, 1024, 0, 2, 1e-5, "fp32 copy, 64+ rows: cuBLASLt in fp32 at B = 64"},
    {3200, 32, 1024, 0, 1024, 1, 2, 1e-5, "fp32 copy: action_out_proj^T at B = 64"},
    {100, 1024, 32, 0, 32, 0, 1, 1e-5, "fp32 rows, no fp32 copy, many rows (a transposed copy)"},
};

/* linear_t_cat: transposed groups side by side, each row at EPI_STORE and EPI_ADD */
typedef struct { int M, nw, rows[3], K, ld; const char *why; } linear_t_cat_case;
static const linear_t_cat_case LINEAR_T_CAT[] = {
    {11, 3, {2048, 256, 256}, 1024, 3072, "expert q|k|v^T at B = 1, 10 steps ahead (padded to 3072: the few-row kernel)"},
    {11, 2, {4096, 4096}, 1024, 8192, "expert gate|up^T at B = 1"},
    {51, 3, {2048, 256, 256}, 1024, 3072, "q|k|v^T at the 50-step horizon (17-64 rows)"},
    {51, 2, {4096, 4096}, 1024, 8192, "gate|up^T at the 50-step horizon"},
    {102, 3, {2048, 256, 256}, 1024, 3072, "q|k|v^T at B = 2: one cuBLASLt product per weight"},
    {5, 2, {40, 24}, 72, 80, "tiny, ld past the groups"},
    {3, 3, {16, 8, 8}, 48, 32, "tiny q|k|v, ld exactly the groups"},
};

typedef struct { int M, D, ada, per; enum pi0_epi epi; const char *why; } norm_bwd_case;
static const norm_bwd_case NORM_BWD[] = {
    {51, 1024, 0, 1, EPI_STORE, "the final RMSNorm^T, 50-step horizon"},
    {51, 1024, 0, 1, EPI_ADD, "a layer's RMSNorm^T into the residual's cotangent"},
    {51, 1024, 1, 51, EPI_STORE, "π0.5's final adaRMS^T, one modulation row"},
    {51, 1024, 1, 17, EPI_ADD, "adaRMS^T, 3 modulation rows"},
    {3264, 1024, 1, 51, EPI_ADD, "adaRMS^T at B = 64"},
    {5, 1029, 0, 1, EPI_ADD, "odd D"},
    {3, 1029, 1, 2, EPI_STORE, "odd D, adaRMS"},
    {1, 24, 0, 1, EPI_STORE, "one short row"},
};

typedef struct { int M, F; const char *why; } elem_bwd_case;   /* gelu_mul_bwd, scale_rows, swish_bwd */
static const elem_bwd_case ELEM_BWD[] = {
    {51, 4096, "expert MLP at the 50-step horizon (16-byte accesses)"},
    {50, 1024, "the time MLP's swish, expert width"},
    {3, 37, "odd sizes: scalar accesses"},
};

typedef struct {
    const char *name;
    int nseg;
    const int *nq, *nk;     /* per segment; NULL: uq / uk for every segment */
    int uq, uk;
    int heads, kv, hd, k2, block0, tail, tight;
    const char *why;
} attn_bwd_case;
static const attn_bwd_case ATTN_BWD[] = {
    {"pi0-b2", 2, SEGS(11, 11), SEGS(300, 417), 0, 0, 8, 1, 256, 1, 1, 0, 0, "π0 at B = 2: prefixes of two lengths, a second source, the state block"},
    {"pi0-b2-h50", 2, SEGS(51, 51), SEGS(300, 417), 0, 0, 8, 1, 256, 1, 1, 0, 0, "the same at the 50-step horizon"},
    {"pi05-b2", 2, SEGS(10, 10), SEGS(417, 300), 0, 0, 8, 1, 256, 1, 0, 0, 0, "π0.5 at B = 2 (no state block)"},
    {"tail-b1", 1, SEGS(11), SEGS(311), 0, 0, 8, 1, 256, 0, 0, 11, 0, "B = 1: the suffix keys as the cache's tail, block0 0"},
    {"tail-b1-state", 1, SEGS(11), SEGS(311), 0, 0, 8, 1, 256, 0, 1, 11, 0, "the same with π0's state block"},
    {"pi0-real", 1, SEGS(51), SEGS(867), 0, 0, 8, 1, 256, 0, 1, 51, 0, "π0 at B = 1, 3 cameras: prefix 816, horizon 50"},
    {"pi05-real", 1, SEGS(50), SEGS(866), 0, 0, 8, 1, 256, 0, 0, 50, 0, "π0.5 at B = 1, prefix 816"},
    {"pi0-b64", 64, NULL, NULL, 51, 816, 8, 1, 256, 1, 1, 0, 0, "π0 at B = 64: one chunk of 64 segments"},
    {"many-segs", 70, NULL, NULL, 5, 30, 8, 1, 256, 1, 1, 0, 0, "more segments than a launch's table: two chunks"},
    {"tight", 3, SEGS(51, 51, 20), SEGS(300, 417, 100), 0, 0, 8, 1, 256, 1, 1, 0, 1, "a scratch of one segment: three chunks"},
    {"tiny", 2, SEGS(3, 5), SEGS(7, 2), 0, 0, 4, 1, 16, 1, 1, 0, 0, "tiny, more queries than keys"},
    {"gqa", 2, SEGS(6, 9), SEGS(20, 33), 0, 0, 4, 2, 24, 1, 2, 0, 0, "2 kv heads of 2 query heads each"},
    {"hd20-tail", 1, SEGS(7), SEGS(47), 0, 0, 2, 1, 20, 0, 1, 7, 0, "head_dim % 8 != 0: scalar accesses"},
    {"hd264", 2, SEGS(5, 4), SEGS(40, 9), 0, 0, 2, 1, 264, 1, 1, 0, 0, "head_dim > 256: two column chunks"},
};

static void run_attn_case(const attn_case *c) {
    int q[64], k[64];
    PI0_ASSERT(c->nseg <= 64);
    for (int i = 0; i < c->nseg; i++) { q[i] = c->nq ? c->nq[i] : c->uq; k[i] = c->nk ? c->nk[i] : c->uk; }
    long n0 = cuda_flash_wg_launches(), d0 = cuda_decode_attention_launches();
    t_attention_ramp(c->name, c->nseg, q, k, c->heads, c->kv, c->hd, c->k2, c->block0, c->tail, c->kramp);
    if (c->path == ATT_DECODE)
        CHECK(cuda_decode_attention_launches() > d0, "attention %s: the decode kernel (%s path) did not run", c->name,
              hopper ? "Hopper" : "portable");
    if (c->path == ATT_FLASH_WG) hopper_ran("the wgmma flash kernel", "attention", c->name, n0, cuda_flash_wg_launches(), 0);
    else if (!hopper) hopper_ran("the wgmma flash kernel", "attention", c->name, n0, cuda_flash_wg_launches(), 0);
}

static void attn_bwd_rows(void) {
    for (size_t i = 0; i < N_OF(ATTN_BWD); i++) {
        const attn_bwd_case *c = &ATTN_BWD[i];
        int q[128], k[128];
        for (int s = 0; s < c->nseg; s++) { q[s] = c->nq ? c->nq[s] : c->uq; k[s] = c->nk ? c->nk[s] : c->uk; }
        printf("-- attention_bwd: %s\n", c->why);
        t_attention_bwd(c->name, c->nseg, q, k, c->heads, c->kv, c->hd, c->k2, c->block0, c->tail, c->tight, 0);
        if (c->nseg <= 2 && !c->tight)   /* the model's layout: dq | dk | dv side by side */
            t_attention_bwd(c->name, c->nseg, q, k, c->heads, c->kv, c->hd, c->k2, c->block0, c->tail, 0, 1);
    }
}

/* PI0_TEST_TIME_ATTN_BWD=1 (instead of the op tests; =2: after the attention_bwd rows): attention_bwd's time per call
 * at π0's shapes (51 query rows x 8 heads, 1 kv head, head_dim 256, 816 cache keys; B = 1: the suffix as the cache's
 * tail, B = 8 and 64: a second source), AB_REPS calls captured in one CUDA graph (run_graph), replayed AB_RUNS times
 * after a warm-up, wall clock over the replays. */
enum { AB_REPS = 20, AB_RUNS = 50 };
typedef struct {
    pt dq, dk, dv, g, q;
    pi0_attn a;
} ab_timing;
static void ab_time_fn(void *p) {
    ab_timing *t = p;
    for (int i = 0; i < AB_REPS; i++) gpu->attention_bwd(gpu, t->dq, t->dk, t->dv, t->g, t->q, &t->a, 0);
}
static void t_time_attention_bwd(void) {
    static const int batches[] = {1, 8, 64};
    const int nq = 51, n1 = 816, heads = 8, hd = 256;
    gpu->reserve(gpu, 0, 0, (size_t)64 * nq * heads * (((n1 + nq) + 3) & ~3), 0);   /* the largest first: one scratch */
    for (size_t b = 0; b < N_OF(batches); b++) {
        int B = batches[b], tail = B == 1 ? nq : 0, nk = n1 + tail;
        int32_t qo[65], ko[65];
        for (int s = 0; s <= B; s++) { qo[s] = s * nq; ko[s] = s * nk; }
        dbuf q = mk((size_t)B * nq * heads * hd, PT_ACT), g = mk((size_t)B * nq * heads * hd, PT_ACT),
             dq = mk((size_t)B * nq * heads * hd, PT_ACT), k = mk((size_t)B * nk * hd, PT_ACT), v = mk((size_t)B * nk * hd, PT_ACT),
             k2 = mk((size_t)B * nq * hd, PT_ACT), v2 = mk((size_t)B * nq * hd, PT_ACT), dk = mk((size_t)B * nq * hd, PT_ACT),
             dv = mk((size_t)B * nq * hd, PT_ACT);
        set_rand(&q, 1.0f); set_rand(&g, 1.0f); set_rand(&k, 1.0f); set_rand(&v, 1.0f); set_rand(&k2, 1.0f); set_rand(&v2, 1.0f);
        ab_timing t = {dq.g, dk.g, dv.g, g.g, q.g,
                       {.nseg = B, .heads = heads, .kv_heads = 1, .head_dim = hd, .scale = 1.0f / 16, .q_off = qo,
                        .k_off = ko, .k1 = k.g, .v1 = v.g, .block0 = 1, .tail = tail}};
        if (!tail) { t.a.k2 = k2.g; t.a.v2 = v2.g; }
        int32_t key[2] = {0x7ab, B};
        for (int i = 0; i < 3; i++) gpu->run_graph(gpu, key, 2, ab_time_fn, &t);
        CHECK(gpu->sync(gpu) == PI0_OK, "attention_bwd timing B=%d: %s", B, pi0_last_error());
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < AB_RUNS; i++) gpu->run_graph(gpu, key, 2, ab_time_fn, &t);
        CHECK(gpu->sync(gpu) == PI0_OK, "attention_bwd timing B=%d: %s", B, pi0_last_error());
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double us = ((t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) * 1e-3) / (AB_RUNS * AB_REPS);
        printf("attention_bwd time B=%-2d q=%d k=%d+%d h=%d/1 hd=%d: %8.2f us per call (%d graph replays of %d calls)\n", B, nq,
               n1, nq, heads, hd, us, AB_RUNS, AB_REPS);
        rel(&q); rel(&g); rel(&dq); rel(&k); rel(&v); rel(&k2); rel(&v2); rel(&dk); rel(&dv);
    }
}

static void op_tests(void) {
    if (cpu_backend_create(&cpu, 0, NULL) != PI0_OK || cuda_backend_create(&gpu, 0, NULL) != PI0_OK) {
        CHECK(0, "backends: %s", pi0_last_error());
        return;
    }
    hopper = cuda_backend_hopper(gpu);
    int dev_major = 0, dev_minor = 0;
    cudaDeviceGetAttribute(&dev_major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&dev_minor, cudaDevAttrComputeCapabilityMinor, 0);
    gpu_cc = 10 * dev_major + dev_minor;
    printf("-- kernel path: %s\n", hopper ? "Hopper (wgmma, TMA, clusters, PDL)" : "portable (PI0_CUDA_PATH=portable or not a "
           "Hopper GPU): every Hopper kernel's launch count must stay unchanged");
    cpu->reserve(cpu, 4096, 4096, 1, (size_t)788 * 32768);
    gpu->reserve(gpu, 4096, 4096, 1, (size_t)788 * 32768);
    for (size_t i = 0; i < N_OF(LINEAR); i++) {
        const linear_case *c = &LINEAR[i];
        printf("-- linear: %s\n", c->why);
        t_linear(c->M, c->N, c->K, c->k0, c->kcols, c->bias, c->epi, c->f32, c->tol);
    }
    for (size_t i = 0; i < N_OF(GATED); i++) {
        printf("-- linear_gated: %s\n", GATED[i].why);
        t_linear_gated(GATED[i].M, GATED[i].N, GATED[i].K, GATED[i].per);
    }
    for (size_t i = 0; i < N_OF(FUSED); i++) {
        const fused_case *c = &FUSED[i];
        printf("-- qkv / mlp_up: %s\n", c->why);
        t_fused(c->M, c->K, c->nq, c->nkv, c->F, c->hd, 0);
    }
    printf("-- mlp_up: gateup.cu at each of its token tile widths\n");
    t_gateup_widths();
    for (size_t i = 0; i < N_OF(PRENORM); i++) {
        const prenorm_case *c = &PRENORM[i];
        printf("-- norm + qkv / mlp_up: %s\n", c->why);
        t_prenorm(c->M, c->K, c->nq, c->nkv, c->F, c->hd, c->ada);
    }
    for (size_t i = 0; i < N_OF(NORMS); i++) {
        printf("-- norms: %s\n", NORMS[i].why);
        t_norms(NORMS[i].M, NORMS[i].D);
    }
    for (size_t i = 0; i < N_OF(ROPE); i++) {
        printf("-- rope / rope_bwd: %s\n", ROPE[i].why);
        t_rope(ROPE[i].M, ROPE[i].qh, ROPE[i].kh, ROPE[i].hd, 0);
        t_rope(ROPE[i].M, ROPE[i].qh, ROPE[i].kh, ROPE[i].hd, 1);
        if (ROPE[i].kh)
            t_rope_bwd_ld(ROPE[i].M, ROPE[i].qh, ROPE[i].kh, ROPE[i].hd, (ROPE[i].qh + 3 * ROPE[i].kh) * ROPE[i].hd);
    }
    for (size_t i = 0; i < N_OF(ATTN); i++) {
        printf("-- attention: %s\n", ATTN[i].why);
        run_attn_case(&ATTN[i]);
    }
    if (hopper) t_attention_mma();   /* the portable path has no flash kernel: its attention is the GEMM path above */
    t_misc();
    t_attention_ranges(8, 256);
    t_attention_ranges(4, 16);
    {
        static const int32_t l8[] = {809, 811, 860, 700, 896, 1, 833, 812}, l2[] = {1100, 1025}, l1[] = {5};
        printf("-- attention with device key counts (k_len): decode kernel (B = 8, B = 1), flash / generic, small heads\n");
        t_attention_klen(8, 1300, 896, l8, 256);
        t_attention_klen(2, 1300, 1152, l2, 256);
        t_attention_klen(1, 300, 128, l1, 256);
        t_attention_klen(8, 1300, 896, l8, 32);
        t_attention_uniform(300, 849);
        t_attention_uniform(64, 128);
    }
    t_next_token(1, 1000, 2048, 0);
    t_next_token(3, 257, 64, 0);
    t_next_token(9, 600, 72, 0);     /* two passes of 8 rows; K not a multiple of 8: the scalar loads */
    t_next_token(2, 300, 2048, 0.7f);
    t_next_token(1, 3000, 1024, 0.7f);   /* one row: next_token_row, sampled */
    t_next_token(1, 257, 64, 0);         /* one row, K below 256: the generic kernel */
    t_next_token(8, 3000, 2048, 0);      /* 8 rows, K = 2048: the loads issued together (π0-FAST at B = 8) */
    t_next_token(9, 2000, 1024, 0.7f);   /* two passes of those, sampled */
    for (size_t i = 0; i < N_OF(LINEAR_T); i++) {
        const linear_t_case *c = &LINEAR_T[i];
        printf("-- linear_t: %s\n", c->why);
        t_linear_t(c->M, c->N, c->K, c->k0, c->kcols, EPI_STORE, c->f32, c->tol);
        if (c->add) t_linear_t(c->M, c->N, c->K, c->k0, c->kcols, EPI_ADD, c->f32, c->tol);
    }
    for (size_t i = 0; i < N_OF(LINEAR_T_CAT); i++) {
        const linear_t_cat_case *c = &LINEAR_T_CAT[i];
        printf("-- linear_t_cat: %s\n", c->why);
        t_linear_t_cat(c->M, c->rows, c->nw, c->K, c->ld, EPI_STORE);
        t_linear_t_cat(c->M, c->rows, c->nw, c->K, c->ld, EPI_ADD);
    }
    {
        static const struct { int M, N, K; } I8[] = {{1, 2048, 1024}, {11, 2048, 1024}, {16, 1024, 2048}, {51, 1024, 4096},
                                                     {64, 256, 1024}, {65, 2048, 1024}, {300, 1152, 1152}, {788, 4096, 1024},
                                                     {788, 1024, 4096}, {100, 20, 36}, {5, 24, 40}, {130, 24, 42}};
        printf("-- linear int8: the rows kernel (1-64 rows, K %% 16 or not), cuBLASLt's int8 products (65-788 rows), odd shapes\n");
        for (size_t i = 0; i < N_OF(I8); i++) {
            t_linear_8(I8[i].M, I8[i].N, I8[i].K, 1, EPI_STORE, PI0_PRECISION_INT8, 0);
            t_linear_8(I8[i].M, I8[i].N, I8[i].K, 0, EPI_ADD, PI0_PRECISION_INT8, 0);
            t_linear_8(I8[i].M, I8[i].N, I8[i].K, 1, EPI_GELU, PI0_PRECISION_INT8, 0);
        }
        printf("-- linear fp8: cuBLASLt with the scales in the kernel, cuBLASLt and a scaling pass, the rows kernel "
               "(sm_%d)\n", gpu_cc);
        for (size_t i = 0; i < N_OF(I8); i++)
            for (int form = 0; form < 3; form++) {
                t_linear_8(I8[i].M, I8[i].N, I8[i].K, 1, EPI_STORE, PI0_PRECISION_FP8, form);
                t_linear_8(I8[i].M, I8[i].N, I8[i].K, 0, EPI_ADD, PI0_PRECISION_FP8, form);
                t_linear_8(I8[i].M, I8[i].N, I8[i].K, 1, EPI_ADD, PI0_PRECISION_FP8, form);   /* SigLIP's o, fc2 */
                t_linear_8(I8[i].M, I8[i].N, I8[i].K, 1, EPI_GELU, PI0_PRECISION_FP8, form);
            }
        printf("-- qkv / mlp_up on int8 weights (and SigLIP's biased form): the expert at B = 1, the prefix\n");
        t_fused(11, 1024, 2048, 256, 4096, 256, 1);
        t_fused(788, 2048, 2048, 256, 2048, 256, 1);
        t_fused(788, 2048, 2048, 256, 2048, 256, PI0_PRECISION_FP8);
        t_fused(11, 1024, 2048, 256, 4096, 256, PI0_PRECISION_FP8);
    }
    printf("-- early_next: the expert's o then gate|up, hint on and off, at B = 1 and 51 rows\n");
    t_early_next(11);
    t_early_next(51);
    printf("-- residual_save: the expert's o and down adds at B = 1 (the few-row kernel), 51 rows, tiny\n");
    t_residual_save(11, 1024, 2048, 0, 11);
    t_residual_save(11, 1024, 4096, 1, 11);
    t_residual_save(11, 1024, 2048, 1, 4);
    t_residual_save(51, 1024, 4096, 1, 51);
    t_residual_save(51, 1024, 2048, 0, 51);
    t_residual_save(3, 40, 24, 1, 2);
    for (size_t i = 0; i < N_OF(NORM_BWD); i++) {
        const norm_bwd_case *c = &NORM_BWD[i];
        printf("-- norm_bwd: %s\n", c->why);
        t_norm_bwd(c->M, c->D, c->ada, c->per, c->epi);
    }
    for (size_t i = 0; i < N_OF(ELEM_BWD); i++) {
        printf("-- gelu_mul_bwd / scale_rows / swish_bwd: %s\n", ELEM_BWD[i].why);
        t_elementwise_bwd(ELEM_BWD[i].M, ELEM_BWD[i].F);
    }
    attn_bwd_rows();
    t_rtc_exact();
    t_patch(224, 14, 1152, 3);
    t_patch(56, 14, 32, 2);
    printf("worst op error / bound: %.2f\n", worst_ratio);
    cpu->destroy(cpu);
    gpu->destroy(gpu);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);   /* a crash log ends at the last line printed */
    pi0_rng_seed(&rng, SEED);
    printf("seed %llu\n", (unsigned long long)SEED);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: test_cuda_ops runs on the GPU machine (make test-cuda)\n");
        return test_summary("test_cuda_ops") || 1;
    }
    if (getenv("PI0_TEST_TIME_ATTN_BWD") && atoi(getenv("PI0_TEST_TIME_ATTN_BWD"))) {
        if (cpu_backend_create(&cpu, 0, NULL) != PI0_OK || cuda_backend_create(&gpu, 0, NULL) != PI0_OK) {
            CHECK(0, "backends: %s", pi0_last_error());
        } else {
            if (atoi(getenv("PI0_TEST_TIME_ATTN_BWD")) == 2) attn_bwd_rows();
            t_time_attention_bwd();
            cpu->destroy(cpu);
            gpu->destroy(gpu);
        }
    } else {
        op_tests();
    }
    return test_summary("test_cuda_ops");
}
