/* test_cuda.c — GPU tests (`make test-cuda`, on the device machine):
 *  1. every CUDA op against its CPU twin (the fp32 reference backend) on random inputs at the real π0
 *     shapes and awkward ones; inputs are bf16-representable so both sides see identical values;
 *     outputs are poisoned first so an unwritten element fails;
 *  2. end to end: the tiny fixtures on the GPU against the CPU reference and the PyTorch fixtures,
 *     graph replay against the un-captured run, repeat runs bit for bit;
 *  3. resources: session create/free cycles leak no device memory; an impossible session fails with
 *     a clear out-of-memory error and the model stays usable;
 *  4. with --full DIR_PI0 DIR_PI05: full-size random checkpoints, GPU bf16 vs CPU fp32 actions at B = 2 and B = 1.
 * Seeded RNG (seed printed). Tolerances and the worst values seen: tests/README.md. */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

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
    float *v = malloc(b->n * sizeof(float));
    for (size_t i = 0; i < b->n; i++) v[i] = (float)(scale * pi0_rng_normal(&rng));
    set(b, v);
    free(v);
}

static void set_ints(dbuf *b, const int32_t *v) {
    cpu->upload(cpu, b->c, v, b->n);
    gpu->upload(gpu, b->g, v, b->n);
}

static void poison(dbuf *b) {
    float *v = malloc(b->n * sizeof(float));
    for (size_t i = 0; i < b->n; i++) v[i] = 1e30f;
    set(b, v);
    free(v);
}

static double worst_ratio;

static void compare(const char *op, const char *shape, dbuf *b, double bound) {
    float *hc = malloc(b->n * sizeof(float)), *hg = malloc(b->n * sizeof(float));
    pi0_status s1 = cpu->download(cpu, hc, b->c, b->n), s2 = gpu->download(gpu, hg, b->g, b->n);
    double mx, r = (s1 || s2) ? INFINITY : rel_l2(hg, hc, b->n, &mx);
    if (s1 || s2) { mx = INFINITY; printf("  download: %s\n", pi0_last_error()); }
    if (r / bound > worst_ratio) worst_ratio = r / bound;
    printf("%-12s %-34s max_abs=%.2e rel_l2=%.2e bound=%.0e %s\n", op, shape, mx, r, bound, r <= bound ? "OK" : "FAIL");
    CHECK(r <= bound, "%s %s: rel_l2 %.3e > %.0e", op, shape, r, bound);
    free(hc);
    free(hg);
}

/* A random bf16 weight (rows x cols, cols == 1 for vectors) uploaded with its siblings by upload_wts. */
typedef struct {
    pi0_wt w;
    uint16_t *data;
} hwt;

static hwt mkw(int64_t rows, int64_t cols, float scale, float offset) {
    hwt h = {{0}, malloc((size_t)(rows * cols) * 2)};
    for (int64_t i = 0; i < rows * cols; i++) h.data[i] = pi0_f32_to_bf16(offset + (float)(scale * pi0_rng_normal(&rng)));
    h.w.data = h.data;
    h.w.dtype = PI0_DT_BF16;
    h.w.rows = rows;
    h.w.cols = cols;
    return h;
}

/* The same from an F32 file whose values bf16 cannot hold (the fp32 products read them from the fp32 copy). */
static hwt mkw_f32(int64_t rows, int64_t cols, float scale) {
    hwt h = {{0}, malloc((size_t)(rows * cols) * 4)};
    float *f = (float *)h.data;
    for (int64_t i = 0; i < rows * cols; i++) f[i] = (float)(scale * pi0_rng_normal(&rng));
    h.w.data = h.data;
    h.w.dtype = PI0_DT_F32;
    h.w.rows = rows;
    h.w.cols = cols;
    h.w.want32 = 1;
    return h;
}

static void *upload_wts(hwt **ws, int n) {
    pi0_wt *list[8];
    PI0_ASSERT(n <= 8);
    for (int i = 0; i < n; i++) list[i] = &ws[i]->w;
    void *arena = NULL;
    pi0_status st = cuda_upload_list(&arena, list, n, 0);
    CHECK(st == PI0_OK, "upload weights: %s", pi0_last_error());
    return arena;
}

static void free_wts(void *arena, hwt **ws, int n) {
    cuda_weights_free(arena);
    for (int i = 0; i < n; i++) free(ws[i]->data);
}

static const char *ename(enum pi0_epi e) { return e == EPI_ADD ? "add" : e == EPI_GELU ? "gelu" : "store"; }

/* 17 to 64 bf16 rows run on gemv.cu's warpgroup kernel: `before` is cuda_gemv_wg_launches() before the op
 * (a silent fallback to cuBLASLt would pass the value check without testing the kernel). */
static void want_wg(const char *op, const char *shape, int M, long before) {
    if (M > 16 && M <= 64) CHECK(cuda_gemv_wg_launches() > before, "%s %s: the warpgroup kernel did not run", op, shape);
}

static void t_linear(int M, int N, int K, int k0, int kcols, int bias, enum pi0_epi epi, int f32, double bound) {
    hwt W = f32 == 3 ? mkw_f32(N, kcols, 1.0f / sqrtf((float)K)) : mkw(N, kcols, 1.0f / sqrtf((float)K), 0);
    hwt b = mkw(N, 1, 0.1f, 0);
    W.w.want32 = f32 >= 2;   /* an fp32 copy, as cuda_weights_upload keeps for the fp32 products */
    hwt *ws[2] = {&W, &b};
    void *ar = upload_wts(ws, 2);
    int kind = f32 ? PT_F32 : PT_ACT;
    dbuf x = mk((size_t)M * K, kind), y = mk((size_t)M * N, kind);
    set_rand(&x, 1.0f);
    if (epi == EPI_ADD) set_rand(&y, 1.0f); else poison(&y);
    cpu->linear(cpu, y.c, x.c, &W.w, bias ? &b.w : NULL, M, N, K, k0, epi);
    long n0 = cuda_gemv_wg_launches();
    gpu->linear(gpu, y.g, x.g, &W.w, bias ? &b.w : NULL, M, N, K, k0, epi);
    char shape[80];
    snprintf(shape, sizeof shape, "%s M=%d N=%d K=%d k0=%d %s%s", f32 == 3 ? "f32w" : f32 == 2 ? "f32c" : f32 ? "f32" : "bf16", M, N, K, k0,
             ename(epi), bias ? "+b" : "");
    if (!f32) want_wg("linear", shape, M, n0);
    compare("linear", shape, &y, bound);
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
    long n0 = cuda_gemv_wg_launches();
    gpu->linear_gated(gpu, x.g, tmp.g, y.g, &W.w, M, N, K, pt_at(gpu, mod.g, 2 * (size_t)N), 3 * N, per);
    char shape[64];
    snprintf(shape, sizeof shape, "M=%d N=%d K=%d rows/gate=%d", M, N, K, per);
    want_wg("linear_gated", shape, M, n0);
    compare("linear_gated", shape, &x, 8e-3);
    rel(&x); rel(&tmp); rel(&y); rel(&mod);
    free_wts(ar, ws, 1);
}

/* fused projections: q|k|v and gate|up, adjacent (one product) or not (separate products) */
static void compare_rows(const char *op, const char *shape, dbuf *b, size_t row_len, double bound);

static void t_fused(int M, int K, int nq, int nkv, int F, int hd) {
    pi0_gemma_layer L;
    memset(&L, 0, sizeof L);
    float s = 1.0f / sqrtf((float)K);
    hwt q = mkw(nq, K, s, 0), k = mkw(nkv, K, s, 0), v = mkw(nkv, K, s, 0), g = mkw(F, K, s, 0), u = mkw(F, K, s, 0);
    hwt *ws[5] = {&q, &k, &v, &g, &u};
    void *ar = upload_wts(ws, 5);
    L.q = q.w; L.k = k.w; L.v = v.w; L.gate = g.w; L.up = u.w;
    dbuf y = mk((size_t)M * K, PT_ACT), oq = mk((size_t)M * nq, PT_ACT), ok = mk((size_t)M * nkv, PT_ACT),
         ov = mk((size_t)M * nkv, PT_ACT), og = mk((size_t)M * F, PT_ACT), ot = mk((size_t)M * F, PT_ACT);
    set_rand(&y, 1.0f);
    poison(&oq); poison(&ok); poison(&ov); poison(&og);
    dbuf pos = mk((size_t)M, PT_I32);
    int32_t *pv = malloc((size_t)M * 4);
    for (int i = 0; i < M; i++) pv[i] = (int32_t)(pi0_rng_next(&rng) % 1000);
    set_ints(&pos, pv);
    free(pv);
    pi0_proj3 pj = {{&L.q, &L.k, &L.v}, {NULL, NULL, NULL}};
    cpu->qkv(cpu, oq.c, ok.c, ov.c, y.c, &pj, M, K, pos.c, hd, NULL);
    char shape[80];
    snprintf(shape, sizeof shape, "M=%d K=%d q=%d kv=%d", M, K, nq, nkv);
    long n0 = cuda_gemv_wg_launches();
    gpu->qkv(gpu, oq.g, ok.g, ov.g, y.g, &pj, M, K, pos.g, hd, NULL);
    if (hd % 64 == 0) want_wg("qkv", shape, M, n0);
    rel(&pos);
    cpu->mlp_up(cpu, og.c, ot.c, y.c, &L, M, F, K, NULL);
    n0 = cuda_gemv_wg_launches();
    long g0 = cuda_gateup_launches();
    gpu->mlp_up(gpu, og.g, ot.g, y.g, &L, M, F, K, NULL);
    if (F % 32 == 0 && K % 8 == 0) want_wg("mlp_up", shape, M, n0);
    /* 136 rows and more: gateup.cu (F % 64, K % 8) */
    if (M >= 136 && F % 64 == 0 && K % 8 == 0)
        CHECK(cuda_gateup_launches() == g0 + 1, "mlp_up %s: gateup.cu did not run", shape);
    compare("qkv.q", shape, &oq, 8e-3);
    compare("qkv.k", shape, &ok, 8e-3);
    compare("qkv.v", shape, &ov, 8e-3);
    snprintf(shape, sizeof shape, "M=%d K=%d F=%d", M, K, F);
    compare("mlp_up", shape, &og, 8e-3);
    compare_rows("mlp_up", shape, &og, (size_t)F, 3e-2);
    /* SigLIP form: biases, no RoPE (the b vectors reuse random weights of the right length) */
    hwt bq = mkw(nq, 1, 0.1f, 0), bk = mkw(nkv, 1, 0.1f, 0), bv = mkw(nkv, 1, 0.1f, 0);
    hwt *bs[3] = {&bq, &bk, &bv};
    void *ar2 = upload_wts(bs, 3);
    pi0_proj3 pb = {{&L.q, &L.k, &L.v}, {&bq.w, &bk.w, &bv.w}};
    poison(&oq); poison(&ok); poison(&ov);
    cpu->qkv(cpu, oq.c, ok.c, ov.c, y.c, &pb, M, K, (pt){0}, 0, NULL);
    gpu->qkv(gpu, oq.g, ok.g, ov.g, y.g, &pb, M, K, (pt){0}, 0, NULL);
    snprintf(shape, sizeof shape, "+bias M=%d K=%d q=%d kv=%d", M, K, nq, nkv);
    compare("qkv.q", shape, &oq, 8e-3);
    compare("qkv.k", shape, &ok, 8e-3);
    compare("qkv.v", shape, &ov, 8e-3);
    /* q, k, v equally spaced in one buffer (as model.c allocates SigLIP's): a backend may run one batch */
    dbuf all = mk((size_t)3 * M * nq, PT_ACT);
    poison(&all);
    if (nq == nkv) {
        pt c3[3], g3[3];
        for (int i = 0; i < 3; i++) { c3[i] = pt_at(cpu, all.c, (size_t)i * M * nq); g3[i] = pt_at(gpu, all.g, (size_t)i * M * nq); }
        cpu->qkv(cpu, c3[0], c3[1], c3[2], y.c, &pb, M, K, (pt){0}, 0, NULL);
        gpu->qkv(gpu, g3[0], g3[1], g3[2], y.g, &pb, M, K, (pt){0}, 0, NULL);
        snprintf(shape, sizeof shape, "+bias one buffer M=%d K=%d q=k=v=%d", M, K, nq);
        compare("qkv", shape, &all, 8e-3);
    }
    rel(&all);
    free_wts(ar2, bs, 3);
    rel(&y); rel(&oq); rel(&ok); rel(&ov); rel(&og); rel(&ot);
    free_wts(ar, ws, 5);
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
    void *ar = upload_wts(ws, 2);
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
        CHECK(cuda_gateup_launches() == g0 + 1, "mlp_up %s: gateup.cu did not run", shape);
        compare("mlp_up", shape, &og, 8e-3);
        compare_rows("mlp_up", shape, &og, (size_t)F, 3e-2);
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
    void *ar = upload_wts(ws, 6);
    L.q = q.w; L.k = k.w; L.v = v.w; L.gate = g.w; L.up = u.w;
    dbuf x = mk((size_t)M * K, PT_ACT), tmp = mk((size_t)M * K, PT_ACT), mod = mk((size_t)3 * K, PT_F32);
    dbuf oq = mk((size_t)M * nq, PT_ACT), ok = mk((size_t)M * nkv, PT_ACT), ov = mk((size_t)M * nkv, PT_ACT);
    dbuf og = mk((size_t)M * F, PT_ACT), ot = mk((size_t)M * F, PT_ACT), pos = mk((size_t)M, PT_I32);
    set_rand(&x, 3.0f); set_rand(&mod, 0.3f);
    poison(&oq); poison(&ok); poison(&ov); poison(&og);
    int32_t *pv = malloc((size_t)M * 4);
    for (int i = 0; i < M; i++) pv[i] = (int32_t)(pi0_rng_next(&rng) % 1000);
    set_ints(&pos, pv);
    free(pv);
    pi0_proj3 pj = {{&L.q, &L.k, &L.v}, {NULL, NULL, NULL}};
    pi0_prenorm pc = {.eps = 1e-6f, .out = tmp.c}, pg = {.eps = 1e-6f, .out = tmp.g};
    if (ada) { pc.mod = mod.c; pg.mod = mod.g; pc.rows_per_mod = pg.rows_per_mod = M; }
    else { pc.w = pg.w = &nw.w; }
    char shape[80];
    snprintf(shape, sizeof shape, "%s M=%d K=%d q=%d kv=%d", ada ? "adarms" : "rms", M, K, nq, nkv);
    long n0 = cuda_gemv_wg_launches();
    cpu->qkv(cpu, oq.c, ok.c, ov.c, x.c, &pj, M, K, pos.c, hd, &pc);
    gpu->qkv(gpu, oq.g, ok.g, ov.g, x.g, &pj, M, K, pos.g, hd, &pg);
    cpu->mlp_up(cpu, og.c, ot.c, x.c, &L, M, F, K, &pc);
    gpu->mlp_up(gpu, og.g, ot.g, x.g, &L, M, F, K, &pg);
    if (M > 16 && M <= 64) CHECK(cuda_gemv_wg_launches() == n0 + 2, "norm+qkv/mlp_up %s: %ld warpgroup launches, want 2",
                                 shape, cuda_gemv_wg_launches() - n0);
    compare("norm+qkv.q", shape, &oq, 8e-3);
    compare("norm+qkv.k", shape, &ok, 8e-3);
    compare("norm+qkv.v", shape, &ov, 8e-3);
    snprintf(shape, sizeof shape, "%s M=%d K=%d F=%d", ada ? "adarms" : "rms", M, K, F);
    compare("norm+mlp_up", shape, &og, 8e-3);
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
    compare("layernorm", shape, &y, 8e-3);
    poison(&y);
    cpu->rmsnorm(cpu, y.c, x.c, &r.w, M, D, 1e-6f);
    gpu->rmsnorm(gpu, y.g, x.g, &r.w, M, D, 1e-6f);
    compare("rmsnorm", shape, &y, 8e-3);
    int per = M > 1 ? (M + 1) / 2 : 1;
    dbuf mod = mk((size_t)((M + per - 1) / per) * 3 * D, PT_F32);
    set_rand(&mod, 0.3f);
    poison(&y);
    cpu->adarms(cpu, y.c, x.c, mod.c, per, M, D, 1e-6f);
    gpu->adarms(gpu, y.g, x.g, mod.g, per, M, D, 1e-6f);
    compare("adarms", shape, &y, 8e-3);
    rel(&x); rel(&y); rel(&mod);
    free_wts(ar, ws, 3);
}

static void t_rope(int M, int qh, int kh, int hd) {
    dbuf q = mk((size_t)M * qh * hd, PT_ACT), k = mk((size_t)M * (kh ? kh : 1) * hd, PT_ACT), pos = mk((size_t)M, PT_I32);
    int32_t *p = malloc((size_t)M * 4);
    for (int i = 0; i < M; i++) p[i] = (int32_t)(pi0_rng_next(&rng) % 1000);
    set_ints(&pos, p);
    set_rand(&q, 1.0f);
    set_rand(&k, 1.0f);
    cpu->rope(cpu, q.c, qh, kh ? k.c : (pt){0}, kh, pos.c, M, hd);
    gpu->rope(gpu, q.g, qh, kh ? k.g : (pt){0}, kh, pos.g, M, hd);
    char shape[64];
    snprintf(shape, sizeof shape, "M=%d q heads=%d hd=%d", M, qh, hd);
    compare("rope", shape, &q, 8e-3);
    snprintf(shape, sizeof shape, "M=%d k heads=%d hd=%d", M, kh, hd);
    compare("rope", shape, &k, kh ? 8e-3 : 0);   /* kh = 0: k must be untouched (both sides equal) */
    free(p);
    rel(&q); rel(&k); rel(&pos);
}

/* The worst relative L2 error of one output row (hd values) against the CPU twin: a defect confined to a few rows
 * (one block's slice of a tile, a race) moves the whole-output error too little to fail `compare`. */
static void compare_rows(const char *op, const char *shape, dbuf *b, size_t row_len, double bound) {
    float *hc = malloc(b->n * sizeof(float)), *hg = malloc(b->n * sizeof(float));
    double worst = INFINITY, mx;
    size_t at = 0;
    if (!cpu->download(cpu, hc, b->c, b->n) && !gpu->download(gpu, hg, b->g, b->n)) {
        worst = 0;
        for (size_t r = 0; r + row_len <= b->n; r += row_len) {
            double e = rel_l2(hg + r, hc + r, row_len, &mx);
            if (!(e <= worst)) { worst = e; at = r / row_len; }
        }
    }
    printf("%-12s %-34s worst row %zu rel_l2=%.2e bound=%.0e %s\n", op, shape, at, worst, bound, worst <= bound ? "OK" : "FAIL");
    CHECK(worst <= bound, "%s %s: row %zu rel_l2 %.3e > %.0e", op, shape, at, worst, bound);
    free(hc);
    free(hg);
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
    compare("attention", shape, &o, 1e-2);
    compare_rows("attention", shape, &o, (size_t)hd, 5e-2);
    rel(&q); rel(&o); rel(&k); rel(&v); rel(&k2); rel(&v2);
}

static void t_attention(const char *what, int nseg, const int *nq, const int *nk, int heads, int kv, int hd,
                        int with_k2, int block0, int tail) {
    t_attention_ramp(what, nseg, nq, nk, heads, kv, hd, with_k2, block0, tail, 0);
}

/* hd-256 MQA segments without a suffix (the prefix) that the decode kernel does not take run on the wgmma flash
 * kernel: the op is compared with the CPU twin, and the kernel must have run */
static void t_attention_fw(const char *what, int nseg, const int *nq, const int *nk, float kramp) {
    long n0 = cuda_flash_wg_launches();
    t_attention_ramp(what, nseg, nq, nk, 8, 1, 256, 0, 0, 0, kramp);
    CHECK(cuda_flash_wg_launches() > n0, "attention %s: the wgmma flash kernel did not run", what);
}

/* The prefix on the mma.sync kernel: PI0_CUDA_FLASH=mma, and the fallback where a tensor map cannot be made */
static void t_attention_mma(void) {
    pi0_backend *g0 = gpu, *g1 = NULL;
    setenv("PI0_CUDA_FLASH", "mma", 1);
    pi0_status st = cuda_backend_create(&g1, 0);
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

static void t_misc(void) {
    /* gelu_mul */
    int M = 788, F = 4096;
    dbuf g = mk((size_t)M * F, PT_ACT), u = mk((size_t)M * F, PT_ACT), o = mk((size_t)M * F, PT_ACT);
    set_rand(&g, 2.0f); set_rand(&u, 1.0f); poison(&o);
    cpu->gelu_mul(cpu, o.c, g.c, u.c, M, F);
    gpu->gelu_mul(gpu, o.g, g.g, u.g, M, F);
    compare("gelu_mul", "M=788 F=4096", &o, 8e-3);
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
    compare("embed", "n=20 D=2048 V=1000", &out, 8e-3);
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
    compare("copy_rows", "bf16->f32 gather, f32->bf16 scatter", &a16, 1e-6);
    rel(&a16); rel(&b32); rel(&idx);
    /* add_rows + swish (F32 and ACT), axpy */
    dbuf x = mk((size_t)10 * 1024, PT_F32), vv = mk(1024, PT_F32), xa = mk((size_t)4 * 24, PT_ACT), va = mk(2 * 24, PT_F32);
    set_rand(&x, 2.0f); set_rand(&vv, 1.0f); set_rand(&xa, 2.0f); set_rand(&va, 1.0f);
    cpu->add_rows(cpu, x.c, vv.c, 10, 10, 1024, ACT_SWISH);
    gpu->add_rows(gpu, x.g, vv.g, 10, 10, 1024, ACT_SWISH);
    compare("add_rows", "f32 M=10 D=1024 swish", &x, 1e-6);
    cpu->add_rows(cpu, xa.c, va.c, 2, 4, 24, ACT_NONE);
    gpu->add_rows(gpu, xa.g, va.g, 2, 4, 24, ACT_NONE);
    compare("add_rows", "bf16 M=4 D=24 two vectors", &xa, 8e-3);
    cpu->axpy(cpu, x.c, vv.c, -0.1f, 1024);
    gpu->axpy(gpu, x.g, vv.g, -0.1f, 1024);
    compare("axpy", "n=1024", &x, 1e-6);
    rel(&x); rel(&vv); rel(&xa); rel(&va);
}

static void t_patch(int R, int P, int Dv, int nimg) {
    int CK = 3 * P * P, T = (R / P) * (R / P);
    hwt w = mkw(Dv, CK, 1.0f / sqrtf((float)CK), 0), b = mkw(Dv, 1, 0.1f, 0), pos = mkw(T, Dv, 0.5f, 0);
    w.w.want32 = 1;   /* as cuda_weights_upload marks the patch weight */
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
    compare("patch_embed", shape, &out, 8e-3);
    rel(&img); rel(&sel); rel(&out);
    free_wts(ar, ws, 3);
}

static void op_tests(void) {
    if (cpu_backend_create(&cpu, 0) != PI0_OK || cuda_backend_create(&gpu, 0) != PI0_OK) {
        CHECK(0, "backends: %s", pi0_last_error());
        return;
    }
    cpu->reserve(cpu, 4096, 4096, 1, (size_t)788 * 32768);
    gpu->reserve(gpu, 4096, 4096, 1, (size_t)788 * 32768);
    /* Gemma prefix (M = 788 rows), SigLIP (768 = 3 x 256), expert (M = 11), head projections, awkward */
    t_linear(788, 2048, 2048, 0, 2048, 0, EPI_STORE, 0, 8e-3);
    t_linear(788, 256, 2048, 0, 2048, 0, EPI_STORE, 0, 8e-3);
    t_linear(788, 2048, 16384, 0, 16384, 0, EPI_ADD, 0, 8e-3);
    t_linear(768, 4304, 1152, 0, 1152, 1, EPI_GELU, 0, 8e-3);
    t_linear(768, 1152, 4304, 0, 4304, 1, EPI_ADD, 0, 8e-3);
    t_linear(11, 4096, 1024, 0, 1024, 0, EPI_STORE, 0, 8e-3);
    t_linear(11, 1024, 4096, 0, 4096, 0, EPI_ADD, 0, 8e-3);
    /* M <= 16: gemv.cu (expert shapes, a partial block with bias + GELU, one row, a column offset) */
    t_linear(11, 2560, 1024, 0, 1024, 0, EPI_STORE, 0, 8e-3);
    t_linear(11, 1024, 2048, 0, 2048, 0, EPI_ADD, 0, 8e-3);
    t_linear(11, 8192, 1024, 0, 1024, 0, EPI_STORE, 0, 8e-3);
    t_linear(16, 1000, 1024, 0, 1024, 1, EPI_GELU, 0, 8e-3);
    t_linear(1, 1024, 4096, 0, 4096, 0, EPI_ADD, 0, 8e-3);
    t_linear(11, 1024, 1024, 1024, 2048, 1, EPI_STORE, 0, 8e-3);
    t_linear(16, 2561, 1024, 0, 1024, 1, EPI_GELU, 0, 8e-3);   /* few rows, odd N */
    t_linear(7, 1024, 4104, 0, 4104, 0, EPI_ADD, 0, 8e-3);     /* K not a multiple of 16 */
    t_linear(17, 1024, 1024, 0, 1024, 0, EPI_STORE, 0, 8e-3);
    t_linear(16, 1024, 3072, 0, 3072, 0, EPI_ADD, 0, 8e-3);    /* 3 K slices: rank 0 finishes 6 of the 16 rows */
    t_linear(15, 1024, 7168, 0, 7168, 0, EPI_STORE, 0, 8e-3);  /* 7 K slices: 3 rows for ranks 0 and 1 */
    /* 17 to 64 rows: gemv.cu's warpgroup kernel (K slices over a cluster: 8 for o / down, 3 uneven for q|k|v, 1 for
     * gate|up); a K tail past the 64-column tensor boxes; a column offset; N not a multiple of the 64-row tile */
    t_linear(51, 1024, 4096, 0, 4096, 0, EPI_ADD, 0, 8e-3);    /* 50-step horizon: down */
    t_linear(51, 1024, 2048, 0, 2048, 0, EPI_ADD, 0, 8e-3);    /* o */
    t_linear(51, 2560, 1024, 0, 1024, 0, EPI_STORE, 0, 8e-3);  /* q|k|v as one product */
    t_linear(51, 8192, 1024, 0, 1024, 0, EPI_STORE, 0, 8e-3);  /* gate|up */
    t_linear(64, 1000, 1024, 0, 1024, 1, EPI_GELU, 0, 8e-3);
    t_linear(33, 1024, 1048, 0, 1048, 0, EPI_ADD, 0, 8e-3);
    t_linear(22, 1024, 1024, 1024, 2048, 1, EPI_STORE, 0, 8e-3);
    t_linear(63, 72, 40, 0, 40, 1, EPI_STORE, 0, 8e-3);
    t_linear(51, 1280, 2048, 0, 2048, 0, EPI_ADD, 0, 8e-3);    /* 7 K slices (on 132 SMs), */
    t_linear(37, 1536, 2048, 0, 2048, 1, EPI_STORE, 0, 8e-3);  /* 6, */
    t_linear(51, 1856, 2048, 0, 2048, 0, EPI_ADD, 0, 8e-3);    /* 5, */
    t_linear(45, 2112, 2048, 0, 2048, 0, EPI_GELU, 0, 8e-3);   /* 4, */
    t_linear(51, 4096, 2048, 0, 2048, 0, EPI_ADD, 0, 8e-3);    /* 2 */
    t_linear(65, 1024, 1024, 0, 1024, 0, EPI_ADD, 0, 8e-3);    /* past 64 rows: cuBLASLt */
    t_linear(1, 24, 40, 0, 40, 1, EPI_STORE, 0, 8e-3);
    t_linear(5, 33, 48, 0, 48, 0, EPI_ADD, 0, 8e-3);
    t_linear(10, 1024, 32, 0, 32, 1, EPI_STORE, 1, 1e-5);
    t_linear(10, 1024, 1024, 1024, 2048, 0, EPI_STORE, 1, 1e-5);
    t_linear(50, 32, 1024, 0, 1024, 1, EPI_STORE, 1, 1e-5);
    t_linear(3, 7, 5, 0, 5, 1, EPI_ADD, 1, 1e-5);
    t_linear(17, 40, 2056, 0, 2056, 1, EPI_ADD, 1, 1e-5);    /* fp32 x in 3 shared-memory chunks, 3 row blocks */
    t_linear(3, 17, 1500, 0, 1500, 0, EPI_STORE, 1, 1e-5);   /* K % 8 != 0: scalar path, 2 chunks */
    t_linear(9, 20, 64, 0, 64, 1, EPI_GELU, 1, 1e-5);
    /* 64 rows and more with the fp32 copy (f32 = 2): cuBLASLt in fp32; B = 64 shapes, a K offset, GELU, no bias */
    t_linear(640, 1024, 1024, 1024, 2048, 1, EPI_STORE, 2, 1e-5);
    t_linear(640, 32, 1024, 0, 1024, 1, EPI_ADD, 2, 1e-5);
    t_linear(130, 40, 300, 0, 300, 1, EPI_GELU, 2, 1e-5);
    /* an F32 file's fp32 weights (not bf16-representable) at few rows and at many: 1e-5 fails if they are rounded */
    t_linear(10, 1024, 1024, 1024, 2048, 0, EPI_STORE, 3, 1e-5);
    t_linear(3, 17, 1500, 0, 1500, 1, EPI_ADD, 3, 1e-5);
    t_linear(640, 32, 1024, 0, 1024, 1, EPI_ADD, 3, 1e-5);
    t_linear(64, 17, 1500, 0, 1500, 0, EPI_STORE, 2, 1e-5);
    t_linear(640, 1024, 1024, 0, 1024, 1, EPI_STORE, 1, 1e-5);   /* no fp32 copy: the kernel */
    t_linear_gated(10, 1024, 2048, 10);   /* π0.5 expert o and down at B = 1: gemv.cu epilogue (K slices) */
    t_linear_gated(10, 1024, 4096, 10);
    t_linear_gated(16, 1000, 1024, 5);    /* partial row block, several gate rows */
    t_linear_gated(20, 1024, 2048, 10);   /* B = 2: the warpgroup kernel's epilogue */
    t_linear_gated(51, 1024, 4096, 17);
    t_linear_gated(80, 1024, 2048, 10);   /* B = 8: product, then the gated add */
    t_fused(788, 2048, 2048, 256, 16384, 256);   /* PaliGemma layer */
    t_fused(11, 1024, 2048, 256, 4096, 256);     /* action expert (gemv.cu: RoPE split and gelu * up epilogues) */
    t_fused(3, 1024, 2048, 256, 4096, 256);      /* few rows, most of the 16 padded */
    t_fused(51, 1024, 2048, 256, 4096, 256);     /* 50-step horizon: the warpgroup kernel's pair epilogues */
    t_fused(64, 1024, 2048, 256, 4096, 256);
    t_fused(17, 2048, 2048, 256, 16384, 256);
    t_fused(88, 1024, 2048, 256, 4096, 256);     /* B = 8: cuBLASLt, then the split kernels */
    t_fused(768, 1152, 1152, 1152, 4304, 72);    /* SigLIP layer (fc1 as "gate|up" only as a shape check) */
    t_fused(543, 2048, 512, 256, 1024, 256);     /* gateup.cu (4 token tiles of 136, the last one overlapping) */
    t_fused(136, 1000, 256, 64, 192, 64);        /* one tile of the narrowest width, K past the last 64 */
    t_fused(300, 512, 256, 64, 320, 64);         /* 3 tiles, F of 5 feature tiles */
    t_fused(2600, 2048, 256, 64, 1024, 64);      /* 16 x 16 tiles (width 168): blocks walk over 2 panels */
    t_fused(200, 40, 64, 64, 64, 64);            /* gateup.cu: one feature tile, K under one 64-wide block */
    t_gateup_widths();
    t_fused(5, 40, 24, 12, 36, 4);               /* sizes not multiples of 256 bytes: separate products */
    t_prenorm(11, 1024, 2048, 256, 4096, 256, 0);   /* expert at B = 1: fused into gemv.cu's prologue */
    t_prenorm(11, 1024, 2048, 256, 4096, 256, 1);
    t_prenorm(3, 1024, 2048, 256, 4096, 256, 1);
    t_prenorm(15, 1024, 2048, 256, 4096, 256, 1);   /* the adaRMS shift as X row 15, the last one */
    t_prenorm(16, 1024, 2048, 256, 4096, 256, 1);   /* no row left for it: norm kernel, then the product */
    t_prenorm(16, 1024, 2048, 256, 4096, 256, 0);
    t_prenorm(22, 1024, 2048, 256, 4096, 256, 0);   /* B = 2: norm kernel, then the warpgroup kernel */
    t_prenorm(51, 1024, 2048, 256, 4096, 256, 1);   /* norm kernel, then the warpgroup kernel */
    t_prenorm(51, 1024, 2048, 256, 4096, 256, 0);
    t_prenorm(11, 2048, 2048, 256, 4096, 256, 0);   /* K != 1024: norm kernel, then the few-row product */
    t_norms(768, 1152);
    t_norms(788, 2048);
    t_norms(22, 1024);
    t_norms(3, 40);
    t_norms(1, 24);
    t_norms(3, 1030);   /* D % 8 != 0 and D > 2048: the block-per-row kernel */
    t_norms(2, 4096);
    t_rope(788, 8, 1, 256);
    t_rope(11, 8, 1, 256);
    t_rope(3, 2, 2, 16);
    t_rope(4, 3, 0, 8);
    int v_q[3] = {256, 256, 256}, p1[1] = {788}, p2q[2] = {500, 300}, s_q[2] = {11, 11}, s_k[2] = {788, 500};
    int s5_q[2] = {10, 10}, t_q[2] = {3, 5}, t_k[2] = {7, 2};
    t_attention("siglip", 3, v_q, v_q, 16, 16, 72, 0, 0, 0);
    int v20[20];
    for (int i = 0; i < 20; i++) v20[i] = 64;
    t_attention("siglip-batched", 20, v20, v20, 16, 16, 72, 0, 0, 0);   /* >= heads images: batch over images */
    t_attention_fw("prefix", 1, p1, p1, 0);
    t_attention_fw("prefix-b2", 2, p2q, p2q, 0);
    t_attention("suffix-pi0", 2, s_q, s_k, 8, 1, 256, 1, 1, 0);
    t_attention("suffix-pi05", 2, s5_q, s_k, 8, 1, 256, 1, 0, 0);
    int e_q[6] = {11, 11, 11, 11, 11, 7}, e_k[6] = {300, 300, 300, 300, 300, 300}, pe[3] = {40, 40, 40};
    t_attention("suffix-batched", 6, e_q, e_k, 8, 1, 256, 1, 1, 0);   /* 5 equal segments batched, then 1 */
    t_attention("prefix-batched", 3, pe, pe, 4, 1, 16, 0, 0, 0);
    t_attention("tiny", 2, t_q, t_k, 4, 1, 16, 1, 1, 0);
    int h2_q[2] = {51, 51}, h2_k[2] = {600, 600};   /* B = 2, 50-step horizon: 2 x 408 rows with a second source */
    t_attention("suffix-h50-b2", 2, h2_q, h2_k, 8, 1, 256, 1, 1, 0);
    /* more equal segments than the decode kernel takes in two waves: flash attention with a second source (the
     * tail keys straddle a key tile), for π0 (block0 = 1) and π0.5, with a late-moving maximum, at the 50-step
     * horizon (7 row blocks per segment); and with a tail of the range (1040 rows: past the decode kernel) */
    int m_q[40], m_k[40], m5_q[40], m5_k[40], r_q[20], r_k[20], fh_q[3] = {51, 51, 51}, fh_k[3] = {600, 600, 600};
    for (int i = 0; i < 40; i++) { m_q[i] = 11; m_k[i] = 100; m5_q[i] = 10; m5_k[i] = 120; }
    for (int i = 0; i < 20; i++) { r_q[i] = 11; r_k[i] = 300; }
    t_attention("suffix-many", 40, m_q, m_k, 8, 1, 256, 1, 1, 0);
    t_attention("flash-suffix-pi05", 40, m5_q, m5_k, 8, 1, 256, 1, 0, 0);
    t_attention_ramp("flash-suffix-ramp", 20, r_q, r_k, 8, 1, 256, 1, 1, 0, 6.0f);
    t_attention("flash-suffix-h50", 3, fh_q, fh_k, 8, 1, 256, 1, 1, 0);
    int ft_q[1] = {130}, ft_k[1] = {1100};
    t_attention("flash-tail-pi0", 1, ft_q, ft_k, 8, 1, 256, 0, 1, 130);
    /* more than a wave of blocks (on a GPU of up to 139 SMs): the 32-key tiles, with and without a suffix */
    int w_q[3] = {400, 400, 400}, ws_q[20], ws_k[20];
    for (int i = 0; i < 20; i++) { ws_q[i] = 51; ws_k[i] = 300; }
    t_attention_fw("flash-mqa-waves", 3, w_q, w_q, 0);
    t_attention_fw("flash-mqa-waves-ramp", 3, w_q, w_q, 6.0f);
    t_attention("flash-suffix-waves", 20, ws_q, ws_k, 8, 1, 256, 1, 1, 0);
    int tl_q[1] = {11}, tl_k[1] = {799}, tl5_q[1] = {10}, tl5_k[1] = {978};
    t_attention("suffix-tail-pi0", 1, tl_q, tl_k, 8, 1, 256, 0, 1, 11);    /* B = 1: suffix K/V after the cache */
    t_attention("suffix-tail-pi05", 1, tl5_q, tl5_k, 8, 1, 256, 0, 0, 10);
    int h50_q[1] = {51}, h50_k[1] = {839}, sh_q[1] = {3}, sh_k[1] = {40};
    t_attention("suffix-tail-h50", 1, h50_q, h50_k, 8, 1, 256, 0, 1, 51);   /* 408 query rows: 26 row tiles */
    int o33_q[1] = {33}, o33_k[1] = {821};   /* 17 row tiles, 2 per block: the last block's second tile is empty */
    t_attention("suffix-tail-33", 1, o33_q, o33_k, 8, 1, 256, 0, 1, 33);
    t_attention("decode-short", 1, sh_q, sh_k, 8, 1, 256, 0, 1, 3);       /* key chunks past the keys */
    /* flash attention (no second source, no tail; hd 256 MQA and hd 72 MHA): partial row and key tiles,
     * one query row, fewer or more queries than keys, equal segments in one launch. MQA segments of up to
     * 128 queries (1024 rows) and 1024 keys take the decode kernel instead, so the flash cases use more */
    int fo_q[3] = {1, 17, 130}, fx_q[2] = {5, 200}, fx_k[2] = {200, 40}, fe[4] = {130, 130, 130, 50};
    int so_q[3] = {100, 37, 256}, sx_q[2] = {3, 64}, sx_k[2] = {65, 1}, st_q[2] = {20, 70}, st_k[2] = {150, 300};
    t_attention_fw("flash-mqa-odd", 3, fo_q, fo_q, 0);
    t_attention_fw("flash-mqa-cross", 2, fx_q, fx_k, 0);
    int ft2_q[3] = {200, 200, 200}, ft2_k[3] = {64, 128, 193};   /* 1, 2 (whole) and 4 key tiles of 64 */
    t_attention_fw("flash-mqa-tiles", 3, ft2_q, ft2_k, 0);
    int ft3_q[3] = {200, 200, 200}, ft3_k[3] = {100, 100, 100};   /* warpgroup 1's partial tile reads the next segment */
    t_attention_fw("flash-mqa-wg1-tail", 3, ft3_q, ft3_k, 0);
    t_attention_fw("flash-mqa-equal", 4, fe, fe, 0);
    t_attention("flash-mha-odd", 3, so_q, so_q, 16, 16, 72, 0, 0, 0);
    t_attention("flash-mha-cross", 2, sx_q, sx_k, 16, 16, 72, 0, 0, 0);
    t_attention("flash-mha-3-5-tiles", 2, st_q, st_k, 16, 16, 72, 0, 0, 0);   /* odd key tile counts (2 groups) */
    t_attention_fw("flash-mqa-ramp", 1, p1, p1, 6.0f);   /* the running max moves late */
    t_attention_ramp("flash-mha-ramp", 3, v_q, v_q, 16, 16, 72, 0, 0, 0, 6.0f);
    t_attention_mma();
    t_misc();
    t_patch(224, 14, 1152, 3);
    t_patch(56, 14, 32, 2);
    printf("worst op error / bound: %.2f\n", worst_ratio);
    cpu->destroy(cpu);
    gpu->destroy(gpu);
}

/* ---- end to end ---- */

typedef struct {
    float *act;
    size_t n;
} result;

static int infer(pi0_model *m, const pi0_inputs *in, int stage_timing, result *r) {
    pi0_session *s = NULL;
    pi0_model_info info;
    pi0_model_get_info(m, &info);
    r->n = (size_t)in->batch * info.action_horizon * info.action_dim;
    r->act = malloc(r->n * sizeof(float));
    int ok = pi0_session_create(&s, m, &(pi0_session_params){.max_batch = in->batch}) == PI0_OK;
    if (ok) pi0_session_set_stage_timing(s, stage_timing);
    ok = ok && pi0_infer(s, in, r->act) == PI0_OK;
    if (!ok) printf("  inference: %s\n", pi0_last_error());
    pi0_session_free(s);
    return ok;
}

/* One session: the first call (a new graph key: run un-captured, the graph captured behind it), a staged run (stage
 * timing), a staged run on other noise (so the replay cannot pass on the actions it finds), then the graph replay.
 * The GEMM algorithms are chosen once per session (timed), so within a session the three results must agree bit for
 * bit. */
static int infer3(pi0_model *m, const pi0_inputs *in, result *g, result *st, result *g2) {
    pi0_session *s = NULL;
    pi0_model_info info;
    pi0_model_get_info(m, &info);
    size_t n = (size_t)in->batch * info.action_horizon * info.action_dim;
    result *r[3] = {g, st, g2};
    for (int i = 0; i < 3; i++) { r[i]->n = n; r[i]->act = malloc(n * sizeof(float)); }
    /* the repeat run reads its images from page-locked memory (pi0_host_alloc): same result bit for bit */
    size_t ni = (size_t)in->batch * info.n_cameras * info.image_size * info.image_size * 3;
    float *pinned = pi0_host_alloc(ni * sizeof(float));
    pi0_inputs in2 = *in;
    if (pinned) { memcpy(pinned, in->images, ni * sizeof(float)); in2.images = pinned; }
    pi0_inputs other = *in;
    other.noise = NULL;
    other.seed = in->seed + 1;
    int ok = pinned && pi0_session_create(&s, m, &(pi0_session_params){.max_batch = in->batch}) == PI0_OK;
    long replays = cuda_graph_replays();
    for (int i = 0; ok && i < 3; i++) {
        pi0_session_set_stage_timing(s, i == 1);
        ok = pi0_infer(s, i == 2 ? &in2 : in, r[i]->act) == PI0_OK;
        if (ok && i == 1) ok = pi0_infer(s, &other, r[2]->act) == PI0_OK;   /* (overwritten by the replay) */
    }
    if (ok && cuda_graph_replays() != replays + 1) {
        printf("  expected one graph replay, found %ld\n", cuda_graph_replays() - replays);
        ok = 0;
    }
    if (!ok) printf("  inference: %s\n", pi0_last_error());
    pi0_session_free(s);
    pi0_host_free(pinned);
    return ok;
}

static void e2e_fixtures(void) {
    const char *models[2] = {"tests/fixtures/tiny-pi0", "tests/fixtures/tiny-pi05"};
    const char *cases[3] = {"b1", "b1-masked", "b2"};
    for (int mi = 0; mi < 2; mi++) {
        pi0_model *mc = NULL, *mg = NULL;
        int ok = pi0_model_load(&mc, models[mi], &(pi0_model_params){.quiet = 1}) == PI0_OK &&
                 pi0_model_load(&mg, models[mi], &(pi0_model_params){.quiet = 1, .backend = PI0_BACKEND_CUDA}) == PI0_OK;
        CHECK(ok, "load %s: %s", models[mi], pi0_last_error());
        for (int ci = 0; ok && ci < 3; ci++) {
            char in_path[256], out_path[256];
            snprintf(in_path, sizeof in_path, "%s/%s.in.safetensors", models[mi], cases[ci]);
            snprintf(out_path, sizeof out_path, "%s/%s.out.safetensors", models[mi], cases[ci]);
            pi0_tensors *t = NULL, *e = NULL;
            pi0_inputs_buf *ib = NULL;
            pi0_inputs in;
            const void *exp_act = NULL;
            result rc = {0}, rg = {0}, rn = {0}, rg2 = {0};
            int ok2 = pi0_tensors_open(&t, in_path) == PI0_OK && pi0_tensors_open(&e, out_path) == PI0_OK &&
                      pi0_tensors_get(e, "actions", NULL, NULL, NULL, &exp_act) == PI0_OK &&
                      pi0_inputs_from_tensors(mc, t, in_path, &in, &ib) == PI0_OK && infer(mc, &in, 0, &rc) &&
                      infer3(mg, &in, &rg, &rn, &rg2);
            CHECK(ok2, "%s/%s: %s", models[mi], cases[ci], pi0_last_error());
            if (ok2) {
                double m1, m2;
                double r1 = rel_l2(rg.act, rc.act, rc.n, &m1), r2 = rel_l2(rg.act, exp_act, rc.n, &m2);
                printf("e2e %-24s %-10s gpu-vs-cpu rel_l2=%.2e max_abs=%.2e  gpu-vs-torch rel_l2=%.2e  bound 2e-2 %s\n",
                       models[mi] + 15, cases[ci], r1, m1, r2, r1 < 2e-2 && r2 < 2e-2 ? "OK" : "FAIL");
                CHECK(r1 < 2e-2 && r2 < 2e-2, "e2e %s %s", models[mi], cases[ci]);
                CHECK(!memcmp(rg.act, rn.act, rc.n * 4), "%s %s: first call == staged run bit for bit (one session)",
                      models[mi], cases[ci]);
                CHECK(!memcmp(rg.act, rg2.act, rc.n * 4), "%s %s: graph replay (page-locked images) bit for bit", models[mi],
                      cases[ci]);
            }
            free(rc.act); free(rg.act); free(rn.act); free(rg2.act);
            pi0_inputs_buf_free(ib);
            pi0_tensors_free(t);
            pi0_tensors_free(e);
        }
        pi0_model_free(mc);
        pi0_model_free(mg);
    }
}

/* A server meets a new prefix length every few requests (prompts differ; π0.5 writes the state into its prompt).
 * One session runs up to 12 prompt lengths down and back up. The lengths share GEMM timing buckets, so after the
 * first each new length takes the algorithms of its bucket (gemm.cu share_tuned); its first call runs un-captured and
 * captures the graph behind the run (cuda_run_graph), a later call replays that graph, and the way back up replays
 * cached graphs (the replay counter checks each). Every result must equal the staged (un-captured, stage-timed) run
 * of the same length and noise in the same session bit for bit, and the CPU result within the e2e bound. */
static void e2e_prompt_lengths(void) {
    const char *dir = "tests/fixtures/tiny-pi0", *in_path = "tests/fixtures/tiny-pi0/b1.in.safetensors";
    pi0_model *mc = NULL, *mg = NULL;
    pi0_tensors *t = NULL;
    pi0_inputs_buf *ib = NULL;
    pi0_session *sc = NULL, *sg = NULL;
    pi0_inputs in;
    int ok = pi0_model_load(&mc, dir, &(pi0_model_params){.quiet = 1}) == PI0_OK &&
             pi0_model_load(&mg, dir, &(pi0_model_params){.quiet = 1, .backend = PI0_BACKEND_CUDA}) == PI0_OK &&
             pi0_tensors_open(&t, in_path) == PI0_OK && pi0_inputs_from_tensors(mc, t, in_path, &in, &ib) == PI0_OK &&
             pi0_session_create(&sc, mc, &(pi0_session_params){.max_batch = 1}) == PI0_OK &&
             pi0_session_create(&sg, mg, &(pi0_session_params){.max_batch = 1}) == PI0_OK;
    CHECK(ok, "prompt lengths: setup: %s", pi0_last_error());
    pi0_model_info info;
    if (ok) pi0_model_get_info(mc, &info);
    size_t n = ok ? (size_t)info.action_horizon * info.action_dim : 1;
    int L = ok ? in.n_tokens : 0, lens = L < 12 ? L : 12, fails = 0, runs = 0;
    uint8_t *tm = malloc((size_t)L + 1);
    float *ac = malloc(n * 4), *ag = malloc(n * 4), *ar = malloc(n * 4), *as = malloc(n * 4), *as2 = malloc(n * 4);
    int replay_fails = 0;
    double worst = 0;
    for (int i = 0; ok && i < 2 * lens; i++) {
        int valid = i < lens ? L - i : L - (2 * lens - 1 - i);   /* L, L-1, ..., L-lens+1, then back up */
        for (int j = 0; j < L; j++) tm[j] = j < valid;
        pi0_inputs x = in;
        x.token_mask = tm;
        pi0_session_set_stage_timing(sg, 0);
        /* a new length runs un-captured and is captured behind the run; the staged run comes next, then a replay
         * on other noise (so it cannot pass on the actions it finds) against a staged run on that noise */
        pi0_inputs y = x;
        y.noise = NULL;
        y.seed = x.seed + 1 + i;
        long replays = cuda_graph_replays();
        ok = pi0_infer(sc, &x, ac) == PI0_OK && pi0_infer(sg, &x, ag) == PI0_OK;
        pi0_session_set_stage_timing(sg, 1);
        ok = ok && pi0_infer(sg, &x, as) == PI0_OK;
        pi0_session_set_stage_timing(sg, 0);
        ok = ok && pi0_infer(sg, &y, ar) == PI0_OK;
        pi0_session_set_stage_timing(sg, 1);
        ok = ok && pi0_infer(sg, &y, as2) == PI0_OK;
        if (!ok) break;
        replay_fails += cuda_graph_replays() - replays != (i < lens ? 1 : 2);
        fails += memcmp(ar, as2, n * 4) != 0 || memcmp(ar, as, n * 4) == 0;
        double mx, r = rel_l2(ag, ac, n, &mx);
        worst = r > worst ? r : worst;
        fails += r >= 2e-2 || memcmp(ag, as, n * 4) != 0;
        runs++;
    }
    CHECK(ok, "prompt lengths: inference: %s", pi0_last_error());
    printf("e2e prompt lengths: %d runs over %d lengths, worst gpu-vs-cpu rel_l2=%.2e, graph == staged bit for bit: %s\n",
           runs, lens, worst, fails ? "FAIL" : "OK");
    CHECK(runs == 2 * lens && lens >= 4 && !fails, "prompt lengths: %d of %d runs differ", fails, runs);
    CHECK(!replay_fails, "prompt lengths: %d of %d runs without the expected graph replays", replay_fails, runs);
    free(tm); free(ac); free(ag); free(ar); free(as); free(as2);
    pi0_session_free(sc);
    pi0_session_free(sg);
    pi0_inputs_buf_free(ib);
    pi0_tensors_free(t);
    pi0_model_free(mc);
    pi0_model_free(mg);
}

/* tiny-pi0's b1 inputs and a one-sample CUDA session of it (the e2e tests below); tiny_close frees what opened */
typedef struct {
    pi0_model *m;
    pi0_session *s;
    pi0_tensors *t;
    pi0_inputs_buf *ib;
    pi0_inputs in;
    size_t n_act;   /* floats of one call's actions */
} tiny_cuda;

static int tiny_open(tiny_cuda *x) {
    const char *dir = "tests/fixtures/tiny-pi0", *in_path = "tests/fixtures/tiny-pi0/b1.in.safetensors";
    memset(x, 0, sizeof *x);
    int ok = pi0_model_load(&x->m, dir, &(pi0_model_params){.quiet = 1, .backend = PI0_BACKEND_CUDA}) == PI0_OK &&
             pi0_tensors_open(&x->t, in_path) == PI0_OK &&
             pi0_inputs_from_tensors(x->m, x->t, in_path, &x->in, &x->ib) == PI0_OK &&
             pi0_session_create(&x->s, x->m, &(pi0_session_params){.max_batch = 1}) == PI0_OK;
    pi0_model_info info;
    if (ok) pi0_model_get_info(x->m, &info);
    x->n_act = ok ? (size_t)info.action_horizon * info.action_dim : 1;
    return ok;
}

static void tiny_close(tiny_cuda *x) {
    pi0_session_free(x->s);
    pi0_inputs_buf_free(x->ib);
    pi0_tensors_free(x->t);
    pi0_model_free(x->m);
}

/* A graph that cannot be captured or instantiated must not fail the call (cuda_run_graph): the run's result stands,
 * and the context warns once and runs without graphs from then on. cuda_graph_fault makes CUDA itself refuse the next
 * capture (a synchronisation inside it) or instantiation (invalid flags). Three calls with one key: the first meets
 * the fault, the next two would capture and then replay if graphs were still on. Each must equal a staged run on the
 * same noise bit for bit, and no graph may replay. */
static void e2e_graph_fault(void) {
    for (int where = 1; where <= 2; where++) {
        tiny_cuda x;
        int ok = tiny_open(&x);
        size_t n = x.n_act;
        float *a = malloc(n * 4), *st = malloc(n * 4);
        long replays = cuda_graph_replays();
        int same = 1, pending = -1;
        cuda_graph_fault(where);
        for (int i = 0; ok && i < 3; i++) {
            pi0_inputs y = x.in;
            y.noise = NULL;
            y.seed = x.in.seed + 1 + i;   /* other noise each call: a result cannot pass on the one before it */
            pi0_session_set_stage_timing(x.s, 0);
            ok = pi0_infer(x.s, &y, a) == PI0_OK;
            if (i == 0) pending = cuda_graph_fault(0);
            pi0_session_set_stage_timing(x.s, 1);
            ok = ok && pi0_infer(x.s, &y, st) == PI0_OK;
            same &= ok && !memcmp(a, st, n * 4);
        }
        cuda_graph_fault(0);
        CHECK(ok, "graph fault %d: %s", where, pi0_last_error());
        CHECK(!ok || pending == 0, "graph fault %d: the fault was not taken by a capture (pending %d)", where, pending);
        CHECK(!ok || same, "graph fault %d: a call without graphs differs from the staged run", where);
        CHECK(cuda_graph_replays() == replays, "graph fault %d: %ld graph replays after the fault", where,
              cuda_graph_replays() - replays);
        printf("e2e graph fault at %s: 3 calls, equal to the staged runs and no replays: %s\n",
               where == 1 ? "capture" : "instantiation",
               ok && pending == 0 && same && cuda_graph_replays() == replays ? "OK" : "FAIL");
        free(a); free(st);
        tiny_close(&x);
    }
}

/* Pixel values are scanned while the graph replays (model_infer's late check): a bad one still fails the call with
 * its index, after the GPU is done with the buffer, and the next valid call gives the first call's actions. */
static void e2e_bad_image(void) {
    tiny_cuda x;
    int ok = tiny_open(&x);
    pi0_session *s = x.s;
    pi0_inputs in = x.in;
    CHECK(ok, "bad image: setup: %s", pi0_last_error());
    if (ok) {
        pi0_model_info info;
        pi0_model_get_info(x.m, &info);
        size_t ni = (size_t)info.n_cameras * info.image_size * info.image_size * 3;
        size_t na = x.n_act;
        float *img = malloc(ni * sizeof(float)), *a1 = malloc(na * sizeof(float)), *a2 = malloc(na * sizeof(float));
        memcpy(img, in.images, ni * sizeof(float));
        pi0_inputs bad = in;
        bad.images = img;
        long replays = cuda_graph_replays();   /* (also: graphs work again after e2e_graph_fault's contexts) */
        int ok1 = pi0_infer(s, &in, a1) == PI0_OK && pi0_infer(s, &in, a1) == PI0_OK;   /* the second one replays */
        CHECK(ok1, "bad image: valid runs: %s", pi0_last_error());
        CHECK(cuda_graph_replays() == replays + 1, "bad image: %ld graph replays in two valid runs, expected 1",
              cuda_graph_replays() - replays);
        img[ni - 5] = NAN;
        pi0_status st = pi0_infer(s, &bad, a2);
        CHECK(st == PI0_ERR_ARG && strstr(pi0_last_error(), "] = nan"), "bad image: got %s '%s'", pi0_status_str(st),
              pi0_last_error());
        img[ni - 5] = 0;
        img[7] = 1.25f;
        st = pi0_infer(s, &bad, a2);
        CHECK(st == PI0_ERR_ARG && strstr(pi0_last_error(), "images[7] = 1.25"), "bad image: got %s '%s'",
              pi0_status_str(st), pi0_last_error());
        CHECK(pi0_infer(s, &in, a2) == PI0_OK && !memcmp(a1, a2, na * sizeof(float)),
              "bad image: the valid call after the failures gives the same actions: %s", pi0_last_error());
        printf("e2e bad image (late check on the graph path): %s\n", ok1 ? "done" : "FAIL");
        free(img); free(a1); free(a2);
    }
    tiny_close(&x);
}

static size_t free_mem(void) {
    size_t fr = 0, tot = 0;
    cudaDeviceSynchronize();
    cudaMemGetInfo(&fr, &tot);
    return fr;
}

static void resources(const char *dir, int expect_oom) {
    pi0_model *m = NULL;
    if (pi0_model_load(&m, dir, &(pi0_model_params){.quiet = 1, .backend = PI0_BACKEND_CUDA}) != PI0_OK) {
        CHECK(0, "load %s: %s", dir, pi0_last_error());
        return;
    }
    pi0_session *s = NULL;
    pi0_session_create(&s, m, &(pi0_session_params){.max_batch = 2});
    pi0_session_free(s);   /* warm: cuBLASLt and the runtime allocate once per process */
    size_t before = free_mem();
    for (int i = 0; i < 5; i++) {
        s = NULL;
        CHECK(pi0_session_create(&s, m, &(pi0_session_params){.max_batch = 2}) == PI0_OK, "session %d", i);
        pi0_session_free(s);
    }
    size_t after = free_mem();
    printf("session create/free x5: device free memory %zu -> %zu bytes\n", before, after);
    CHECK(after == before, "device memory leaked: %lld bytes", (long long)before - (long long)after);
    s = NULL;
    if (!expect_oom) { pi0_model_free(m); return; }
    pi0_status st = pi0_session_create(&s, m, &(pi0_session_params){.max_batch = 4096});
    printf("max_batch 4096: %s: %s\n", pi0_status_str(st), pi0_last_error());
    CHECK(st == PI0_ERR_NOMEM && strstr(pi0_last_error(), "cudaMalloc") && !s,
          "impossible session: clear out-of-memory error");
    size_t after_oom = free_mem();
    /* the driver may return cached pages after a failed allocation, so free memory can only grow */
    CHECK(after_oom >= before, "failed session creation released everything (%zu -> %zu bytes)", before, after_oom);
    CHECK(pi0_session_create(&s, m, NULL) == PI0_OK, "model still usable after OOM: %s", pi0_last_error());
    pi0_session_free(s);
    pi0_model_free(m);
}

/* Full-size random checkpoint: B=2 (sample 1 with a masked camera and padded prompt), GPU vs CPU. */
static void e2e_full(const char *dir) {
    pi0_model *mc = NULL, *mg = NULL;
    if (pi0_model_load(&mc, dir, &(pi0_model_params){.quiet = 1, .action_horizon = 10}) != PI0_OK ||
        pi0_model_load(&mg, dir, &(pi0_model_params){.quiet = 1, .backend = PI0_BACKEND_CUDA, .action_horizon = 10}) !=
            PI0_OK) {
        CHECK(0, "load %s: %s", dir, pi0_last_error());
        pi0_model_free(mc);
        return;
    }
    pi0_model_info info;
    pi0_model_get_info(mc, &info);
    int B = 2, N = 3, R = info.image_size, L = info.pi05 ? 200 : 48, H = info.action_horizon, A = info.action_dim;
    size_t ni = (size_t)B * N * R * R * 3;
    float *img = malloc(ni * 4), *state = malloc((size_t)B * A * 4), *noise = malloc((size_t)B * H * A * 4);
    int32_t *tok = malloc((size_t)B * L * 4);
    uint8_t *tm = malloc((size_t)B * L), im[6] = {1, 1, 1, 1, 1, 0};
    for (size_t i = 0; i < ni; i++) img[i] = (float)(2 * pi0_rng_uniform(&rng) - 1);
    for (int i = 0; i < B * A; i++) state[i] = i % A < 8 ? (float)pi0_rng_normal(&rng) : 0;
    for (int i = 0; i < B * H * A; i++) noise[i] = (float)pi0_rng_normal(&rng);
    for (int i = 0; i < B * L; i++) {
        int valid = i < L ? (i % L) < 20 : (i % L) < (info.pi05 ? 64 : 13);
        tm[i] = (uint8_t)valid;
        tok[i] = valid ? (int32_t)(1 + pi0_rng_next(&rng) % 257000) : 0;
    }
    pi0_inputs in = {.batch = B, .images = img, .image_masks = im, .state = state, .tokens = tok, .token_mask = tm,
                     .n_tokens = L, .noise = noise};
    result rc = {0}, rg = {0};
    int ok = infer(mc, &in, 0, &rc) && infer(mg, &in, 0, &rg);
    CHECK(ok, "full-size inference %s", dir);
    if (ok) {
        double mx, r = rel_l2(rg.act, rc.act, rc.n, &mx), r0 = rel_l2(rg.act, rc.act, rc.n / 2, NULL),
                   r1 = rel_l2(rg.act + rc.n / 2, rc.act + rc.n / 2, rc.n / 2, NULL);
        int nan = 0;
        for (size_t i = 0; i < rg.n; i++) nan |= rg.act[i] != rg.act[i];
        printf("full-size %s (%s): GPU bf16 vs CPU fp32 actions rel_l2=%.3e (sample 0 %.3e, sample 1 %.3e) "
               "max_abs=%.3e, NaN=%d, bound 2e-2 %s\n", dir, info.pi05 ? "pi05" : "pi0", r, r0, r1, mx, nan,
               r < 2e-2 && !nan ? "OK" : "FAIL");
        CHECK(r < 2e-2 && !nan, "full-size rel_l2 %.3e", r);
        /* B = 1 (sample 0 alone): the suffix keys after the cache and, where it applies, the fused expert step */
        in.batch = 1;
        result r1g = {0};
        CHECK(infer(mg, &in, 0, &r1g), "full-size B=1 inference %s", dir);
        if (r1g.act) {
            double mx1, rb = rel_l2(r1g.act, rc.act, rc.n / 2, &mx1);
            printf("full-size %s (%s) B=1: GPU vs CPU sample 0 rel_l2=%.3e max_abs=%.3e, bound 2e-2 %s\n", dir,
                   info.pi05 ? "pi05" : "pi0", rb, mx1, rb < 2e-2 ? "OK" : "FAIL");
            CHECK(rb < 2e-2, "full-size B=1 rel_l2 %.3e", rb);
        }
        free(r1g.act);
    }
    free(rc.act); free(rg.act);
    free(img); free(state); free(noise); free(tok); free(tm);
    pi0_model_free(mc);
    pi0_model_free(mg);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);   /* a crash log ends at the last line printed */
    pi0_rng_seed(&rng, SEED);
    printf("seed %llu\n", (unsigned long long)SEED);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: test_cuda runs on the GPU machine (make test-cuda)\n");
        return test_summary("test_cuda") || 1;
    }
    op_tests();
    e2e_fixtures();
    e2e_prompt_lengths();
    e2e_graph_fault();
    e2e_bad_image();
    resources("tests/fixtures/tiny-pi05", 0);
    /* a broken checkpoint on the GPU path: refused before anything reaches the device */
    pi0_model *bad = NULL;
    pi0_status st = pi0_model_load(&bad, "/nonexistent", &(pi0_model_params){.backend = PI0_BACKEND_CUDA});
    CHECK(st == PI0_ERR_IO && !bad && strstr(pi0_last_error(), "no checkpoint found"), "bad checkpoint on CUDA: %s",
          pi0_last_error());
    st = pi0_model_load(&bad, "tests/fixtures/tiny-pi0", &(pi0_model_params){.backend = PI0_BACKEND_CUDA, .device = 9});
    CHECK(st == PI0_ERR_ARG && !bad && strstr(pi0_last_error(), "CUDA device 9"), "bad device: %s", pi0_last_error());
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--full")) {
            for (int j = i + 1; j < argc; j++) e2e_full(argv[j]);
            if (i + 1 < argc) resources(argv[i + 1], 1);
            break;
        }
    return test_summary("test_cuda");
}
