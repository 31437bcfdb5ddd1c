/* test_grad.c — the transposes of the action expert's ops (backend.h, exact real-time chunking) on the CPU reference
 * backend against float64 finite differences. For each op, a float64 forward written here from the op's contract is
 * first checked against the engine's own forward op (so the derivative taken is of the engine's function), then the
 * scalar L(x) = sum(dy * f(x)) is differentiated by central differences in float64 with respect to every input
 * element, and the engine's cotangent op must match that gradient (rel L2 <= 1e-5: the ops compute in fp32 / float64
 * from fp32 values, the differences err by ~1e-9). Shapes are small and awkward (odd widths, two segments of unequal
 * prefix length, the B = 1 tail layout, block0 0 and 1). Seeded RNG (seed printed). The composition of these ops into
 * one step's vector-Jacobian product is checked against PyTorch's autograd by tests/rtc_check.py. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "test.h"
#include "util.h"

static pi0_backend *be;
static pi0_rng rng;
static const uint64_t SEED = 20261126;
static const double FD_H = 1e-5, BOUND = 1e-5;

static float *rnd(size_t n, double scale) {
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = (float)(scale * pi0_rng_normal(&rng));
    return v;
}

static pt dev(const float *v, size_t n, int kind) {   /* a backend buffer holding v (NULL: zeros) */
    pt t = be->alloc(be, n, kind);
    if (v) be->upload(be, t, v, n);
    return t;
}

static float *host(pt t, size_t n) {
    float *v = malloc(n * sizeof(float));
    be->download(be, v, t, n);
    return v;
}

static pi0_wt wt(const float *v, int64_t rows, int64_t cols) {
    return (pi0_wt){.data = v, .dtype = PI0_DT_F32, .rows = rows, .cols = cols};
}

/* A float64 forward: fills y (ny values) from the inputs x (the op's differentiated inputs, concatenated). */
typedef void (*fwd_fn)(void *ctx, const double *x, double *y);

/* Central-difference gradient of sum(dy * f(x)) at x (n inputs, ny outputs). */
static void fd_grad(fwd_fn f, void *ctx, const float *xf, size_t n, const float *dy, size_t ny, double *g) {
    double *x = malloc(n * sizeof(double)), *y = malloc(ny * sizeof(double));
    for (size_t i = 0; i < n; i++) x[i] = xf[i];
    for (size_t i = 0; i < n; i++) {
        double x0 = x[i], h = FD_H * fmax(1.0, fabs(x0)), lp = 0, lm = 0;
        x[i] = x0 + h;
        f(ctx, x, y);
        for (size_t j = 0; j < ny; j++) lp += (double)dy[j] * y[j];
        x[i] = x0 - h;
        f(ctx, x, y);
        for (size_t j = 0; j < ny; j++) lm += (double)dy[j] * y[j];
        x[i] = x0;
        g[i] = (lp - lm) / (2 * h);
    }
    free(x);
    free(y);
}

static double rel64(const float *got, const double *want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = got[i] - want[i];
        if (got[i] != got[i]) d = INFINITY;
        num += d * d;
        den += want[i] * want[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The engine's forward output against the float64 forward at the context's own inputs (f called with x NULL). */
static void check_fwd(const char *op, fwd_fn f, void *ctx, size_t ny, const float *engine_y) {
    double *y = malloc(ny * sizeof(double));
    f(ctx, NULL, y);
    double e = rel64(engine_y, y, ny);
    printf("%-14s forward vs float64 definition: rel L2 %.1e\n", op, e);
    CHECK(e <= BOUND, "%s forward: rel L2 %.3e", op, e);
    free(y);
}

static void check_grad(const char *op, const char *what, const float *got, const double *want, size_t n) {
    double e = rel64(got, want, n);
    printf("%-14s %-34s cotangent vs finite differences: rel L2 %.1e\n", op, what, e);
    CHECK(e <= BOUND && isfinite(e), "%s %s: rel L2 %.3e (bound %.0e)", op, what, e, BOUND);
}

/* ---- linear_t: out = dy . W[:, k0:k0+K] is the gradient of sum(dy * (x . W[:, k0:k0+K]^T)) ---- */
struct lin { int M, N, K, k0, cols; const float *W; const float *x0; };
static void f_lin(void *vc, const double *x, double *y) {
    struct lin *c = vc;
    for (int m = 0; m < c->M; m++)
        for (int n = 0; n < c->N; n++) {
            double a = 0;
            for (int k = 0; k < c->K; k++)
                a += (x ? x[(size_t)m * c->K + k] : c->x0[(size_t)m * c->K + k]) * c->W[(size_t)n * c->cols + c->k0 + k];
            y[(size_t)m * c->N + n] = a;
        }
}

static void t_linear_t(int M, int N, int K, int k0, int cols, enum pi0_epi epi) {
    char what[64];
    snprintf(what, sizeof what, "M %d N %d K %d k0 %d %s", M, N, K, k0, epi == EPI_ADD ? "add" : "store");
    float *W = rnd((size_t)N * cols, 0.3), *x = rnd((size_t)M * K, 1), *dy = rnd((size_t)M * N, 1), *o0 = rnd((size_t)M * K, 1);
    pi0_wt w = wt(W, N, cols);
    struct lin c = {M, N, K, k0, cols, W, x};
    pt px = dev(x, (size_t)M * K, PT_ACT), py = dev(NULL, (size_t)M * N, PT_ACT), pd = dev(dy, (size_t)M * N, PT_ACT),
       po = dev(o0, (size_t)M * K, PT_ACT);
    be->linear(be, py, px, &w, NULL, M, N, K, k0, EPI_STORE);
    float *y = host(py, (size_t)M * N);
    check_fwd("linear", f_lin, &c, (size_t)M * N, y);
    be->linear_t(be, po, pd, &w, M, N, K, k0, epi);
    float *got = host(po, (size_t)M * K);
    double *g = malloc((size_t)M * K * sizeof(double));
    fd_grad(f_lin, &c, x, (size_t)M * K, dy, (size_t)M * N, g);
    if (epi == EPI_ADD) for (size_t i = 0; i < (size_t)M * K; i++) g[i] += o0[i];
    check_grad("linear_t", what, got, g, (size_t)M * K);
    free(W); free(x); free(dy); free(o0); free(y); free(got); free(g);
    be->release(be, px); be->release(be, py); be->release(be, pd); be->release(be, po);
}

/* ---- linear_t_cat: the gradient of sum(dy * [x . W_0^T | x . W_1^T | ... | 0 padding]) (rows of ld) ---- */
struct linc { int M, K, ld, nw; const int *rows; float *const *W; const float *x0; };
static void f_linc(void *vc, const double *x, double *y) {
    struct linc *c = vc;
    for (int m = 0; m < c->M; m++) {
        int col = 0;
        for (int i = 0; i < c->nw; col += c->rows[i], i++)
            for (int n = 0; n < c->rows[i]; n++) {
                double a = 0;
                for (int k = 0; k < c->K; k++)
                    a += (x ? x[(size_t)m * c->K + k] : c->x0[(size_t)m * c->K + k]) * c->W[i][(size_t)n * c->K + k];
                y[(size_t)m * c->ld + col + n] = a;
            }
        for (; col < c->ld; col++) y[(size_t)m * c->ld + col] = 0;
    }
}

static void t_linear_t_cat(int M, int K, int ld, int nw, const int *rows, enum pi0_epi epi) {
    char what[64];
    int n = snprintf(what, sizeof what, "M %d K %d ld %d rows ", M, K, ld);
    for (int i = 0; i < nw; i++) n += snprintf(what + n, sizeof what - n, "%s%d", i ? "|" : "", rows[i]);
    snprintf(what + n, sizeof what - n, " %s", epi == EPI_ADD ? "add" : "store");
    float *W[3], *x = rnd((size_t)M * K, 1), *dy = rnd((size_t)M * ld, 1), *o0 = rnd((size_t)M * K, 1);
    pi0_wt w[3];
    const pi0_wt *wl[3];
    for (int i = 0; i < nw; i++) {
        W[i] = rnd((size_t)rows[i] * K, 0.3);
        w[i] = wt(W[i], rows[i], K);
        wl[i] = &w[i];
    }
    struct linc c = {M, K, ld, nw, rows, W, x};
    pt pd = dev(dy, (size_t)M * ld, PT_ACT), po = dev(o0, (size_t)M * K, PT_ACT);
    be->linear_t_cat(be, po, pd, ld, wl, nw, M, K, epi);
    float *got = host(po, (size_t)M * K);
    double *g = malloc((size_t)M * K * sizeof(double));
    fd_grad(f_linc, &c, x, (size_t)M * K, dy, (size_t)M * ld, g);
    if (epi == EPI_ADD) for (size_t i = 0; i < (size_t)M * K; i++) g[i] += o0[i];
    check_grad("linear_t_cat", what, got, g, (size_t)M * K);
    for (int i = 0; i < nw; i++) free(W[i]);
    free(x); free(dy); free(o0); free(got); free(g);
    be->release(be, pd); be->release(be, po);
}

/* ---- norm_bwd: Gemma RMSNorm x r (1 + w) and adaRMS x r (1 + scale) + shift ---- */
struct nrm { int M, D, per; const float *w, *mod, *x0; float eps; };
static void f_norm(void *vc, const double *x, double *y) {
    struct nrm *c = vc;
    for (int r = 0; r < c->M; r++) {
        const float *xr0 = c->x0 + (size_t)r * c->D;
        double ss = 0;
        for (int i = 0; i < c->D; i++) { double v = x ? x[(size_t)r * c->D + i] : xr0[i]; ss += v * v; }
        double rr = 1.0 / sqrt(ss / c->D + c->eps);
        const float *m = c->mod ? c->mod + (size_t)(r / c->per) * 3 * c->D : NULL;
        for (int i = 0; i < c->D; i++) {
            double v = x ? x[(size_t)r * c->D + i] : xr0[i];
            y[(size_t)r * c->D + i] = m ? v * rr * (1.0 + m[i]) + m[c->D + i] : v * rr * (1.0 + c->w[i]);
        }
    }
}

static void t_norm(int M, int D, int ada, enum pi0_epi epi) {
    char what[64];
    snprintf(what, sizeof what, "%s M %d D %d %s", ada ? "adarms" : "rmsnorm", M, D, epi == EPI_ADD ? "add" : "store");
    int per = 2;
    float *x = rnd((size_t)M * D, 1.5), *dy = rnd((size_t)M * D, 1), *w = rnd((size_t)D, 0.5),
          *mod = rnd((size_t)((M + per - 1) / per) * 3 * D, 0.5), *o0 = rnd((size_t)M * D, 1);
    pi0_wt pw = wt(w, D, 1);
    struct nrm c = {M, D, per, w, ada ? mod : NULL, x, 1e-6f};
    pt px = dev(x, (size_t)M * D, PT_ACT), py = dev(NULL, (size_t)M * D, PT_ACT), pd = dev(dy, (size_t)M * D, PT_ACT),
       po = dev(o0, (size_t)M * D, PT_ACT), pm = dev(mod, (size_t)((M + per - 1) / per) * 3 * D, PT_F32);
    if (ada) be->adarms(be, py, px, pm, per, M, D, 1e-6f);
    else be->rmsnorm(be, py, px, &pw, M, D, 1e-6f);
    float *y = host(py, (size_t)M * D);
    check_fwd(ada ? "adarms" : "rmsnorm", f_norm, &c, (size_t)M * D, y);
    be->norm_bwd(be, po, pd, px, ada ? NULL : &pw, pm, per, M, D, 1e-6f, epi);
    float *got = host(po, (size_t)M * D);
    double *g = malloc((size_t)M * D * sizeof(double));
    fd_grad(f_norm, &c, x, (size_t)M * D, dy, (size_t)M * D, g);
    if (epi == EPI_ADD) for (size_t i = 0; i < (size_t)M * D; i++) g[i] += o0[i];
    check_grad("norm_bwd", what, got, g, (size_t)M * D);
    free(x); free(dy); free(w); free(mod); free(o0); free(y); free(got); free(g);
    be->release(be, px); be->release(be, py); be->release(be, pd); be->release(be, po); be->release(be, pm);
}

/* ---- gelu_mul_bwd (inputs g then u), swish_bwd, scale_rows ---- */
struct ew { size_t n; const float *a0, *b0; const float *v; int D, stride, per; };
static double gelu64(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static void f_gelu_mul(void *vc, const double *x, double *y) {
    struct ew *c = vc;
    for (size_t i = 0; i < c->n; i++) {
        double g = x ? x[i] : c->a0[i], u = x ? x[c->n + i] : c->b0[i];
        y[i] = gelu64(g) * u;
    }
}
static void f_swish(void *vc, const double *x, double *y) {
    struct ew *c = vc;
    for (size_t i = 0; i < c->n; i++) { double z = x ? x[i] : c->a0[i]; y[i] = z / (1.0 + exp(-z)); }
}
static void f_scale(void *vc, const double *x, double *y) {
    struct ew *c = vc;
    for (size_t i = 0; i < c->n; i++) {
        size_t r = i / c->D;
        y[i] = (x ? x[i] : c->a0[i]) * c->v[(r / c->per) * c->stride + i % c->D];
    }
}

static void t_elementwise(int M, int D) {
    size_t n = (size_t)M * D;
    float *g = rnd(n, 2), *u = rnd(n, 1), *dy = rnd(n, 1), *gu = malloc(2 * n * sizeof(float));
    memcpy(gu, g, n * sizeof(float));
    memcpy(gu + n, u, n * sizeof(float));
    struct ew c = {n, g, u, NULL, D, 0, 1};
    pt pg = dev(g, n, PT_ACT), pu = dev(u, n, PT_ACT), pd = dev(dy, n, PT_ACT), po = dev(NULL, n, PT_ACT),
       pdg = dev(NULL, n, PT_ACT), pdu = dev(NULL, n, PT_ACT);
    be->gelu_mul(be, po, pg, pu, M, D);
    float *y = host(po, n);
    check_fwd("gelu_mul", f_gelu_mul, &c, n, y);
    be->gelu_mul_bwd(be, pdg, pdu, pd, pg, pu, M, D, 0);
    double *gr = malloc(2 * n * sizeof(double));
    fd_grad(f_gelu_mul, &c, gu, 2 * n, dy, n, gr);
    float *got_g = host(pdg, n), *got_u = host(pdu, n);
    check_grad("gelu_mul_bwd", "dg", got_g, gr, n);
    check_grad("gelu_mul_bwd", "du", got_u, gr + n, n);
    free(y);
    /* dg | du side by side in rows of 2D + 3 (the model's layout): the same values, the padding untouched */
    int ld = 2 * D + 3;
    float *pad = rnd((size_t)M * ld, 1), *want = malloc((size_t)M * ld * sizeof(float));
    memcpy(want, pad, (size_t)M * ld * sizeof(float));
    for (int r = 0; r < M; r++) {
        memcpy(want + (size_t)r * ld, got_g + (size_t)r * D, (size_t)D * sizeof(float));
        memcpy(want + (size_t)r * ld + D, got_u + (size_t)r * D, (size_t)D * sizeof(float));
    }
    pt pgu = dev(pad, (size_t)M * ld, PT_ACT);
    be->gelu_mul_bwd(be, pgu, pt_at(be, pgu, (size_t)D), pd, pg, pu, M, D, ld);
    y = host(pgu, (size_t)M * ld);
    CHECK(!memcmp(y, want, (size_t)M * ld * sizeof(float)), "gelu_mul_bwd: rows of stride %d differ from the packed ones", ld);
    printf("%-14s %-40s %s\n", "gelu_mul_bwd", "dg | du in rows of 2D + 3", "equal to packed, padding kept");
    free(y); free(pad); free(want);
    be->release(be, pgu);

    /* swish: forward as add_rows(ACT_SWISH) of a zero vector; cotangent in place (dz aliases dy), as model.c calls it */
    pt pz = dev(g, n, PT_F32), pzero = dev(NULL, (size_t)D, PT_F32), pdd = dev(dy, n, PT_F32);
    be->add_rows(be, pz, pzero, M, M, D, ACT_SWISH);
    y = host(pz, n);
    be->upload(be, pz, g, n);
    check_fwd("swish", f_swish, &c, n, y);
    be->swish_bwd(be, pdd, pdd, pz, M, D);
    float *got = host(pdd, n);
    fd_grad(f_swish, &c, g, n, dy, n, gr);
    check_grad("swish_bwd", "in place", got, gr, n);
    free(y); free(got);

    /* scale_rows: the gate of π0.5's gated residual, stride 3D, one gate row per 2 rows */
    int per = 2, stride = 3 * D;
    float *v = rnd((size_t)((M + per - 1) / per) * stride, 1);
    struct ew cs = {n, g, NULL, v, D, stride, per};
    pt pv = dev(v, (size_t)((M + per - 1) / per) * stride, PT_F32);
    be->scale_rows(be, po, pd, pv, stride, per, M, D);
    got = host(po, n);
    fd_grad(f_scale, &cs, g, n, dy, n, gr);
    check_grad("scale_rows", "stride 3D, 2 rows per gate", got, gr, n);
    free(got); free(v); free(g); free(u); free(dy); free(gu); free(gr); free(got_g); free(got_u);
    be->release(be, pg); be->release(be, pu); be->release(be, pd); be->release(be, po); be->release(be, pdg);
    be->release(be, pdu); be->release(be, pz); be->release(be, pzero); be->release(be, pdd); be->release(be, pv);
}

/* ---- rope_bwd: the transpose of RoPE (q and k together) ---- */
struct rp { int M, qh, kh, hd; const int32_t *pos; const float *x0; };
static void f_rope(void *vc, const double *x, double *y) {
    struct rp *c = vc;
    int half = c->hd / 2, rows = c->qh + c->kh;   /* q heads then k heads of each row, as the test lays them out */
    for (int r = 0; r < c->M; r++)
        for (int h = 0; h < rows; h++)
            for (int i = 0; i < half; i++) {
                size_t b = ((size_t)r * rows + h) * c->hd;
                double x1 = x ? x[b + i] : c->x0[b + i], x2 = x ? x[b + half + i] : c->x0[b + half + i];
                /* the angle as the engine forms it (fp32 product of the position and the fp32 frequency) */
                float th = (float)c->pos[r] * (float)pow(10000.0, -2.0 * i / c->hd);
                double cs = cosf(th), sn = sinf(th);
                y[b + i] = x1 * cs - x2 * sn;
                y[b + half + i] = x2 * cs + x1 * sn;
            }
}

static void t_rope_bwd(int M, int qh, int kh, int hd) {
    int rows = qh + kh;
    size_t n = (size_t)M * rows * hd, nq = (size_t)M * qh * hd, nk = (size_t)M * kh * hd;
    float *x = rnd(n, 1), *dy = rnd(n, 1), *q = malloc(nq * sizeof(float)), *k = malloc(nk * sizeof(float));
    float *dq = malloc(nq * sizeof(float)), *dk = malloc(nk * sizeof(float));
    int32_t *pos = malloc((size_t)M * sizeof(int32_t));
    for (int r = 0; r < M; r++) pos[r] = 37 * r + 811;
    for (int r = 0; r < M; r++) {   /* split the [q heads | k heads] rows into the op's q and k buffers */
        memcpy(q + (size_t)r * qh * hd, x + (size_t)r * rows * hd, (size_t)qh * hd * sizeof(float));
        memcpy(k + (size_t)r * kh * hd, x + ((size_t)r * rows + qh) * hd, (size_t)kh * hd * sizeof(float));
        memcpy(dq + (size_t)r * qh * hd, dy + (size_t)r * rows * hd, (size_t)qh * hd * sizeof(float));
        memcpy(dk + (size_t)r * kh * hd, dy + ((size_t)r * rows + qh) * hd, (size_t)kh * hd * sizeof(float));
    }
    struct rp c = {M, qh, kh, hd, pos, x};
    pt pq = dev(q, nq, PT_ACT), pk = dev(k, nk, PT_ACT), ppos = be->alloc(be, (size_t)M, PT_I32);
    be->upload(be, ppos, pos, (size_t)M);
    be->rope(be, pq, qh, pk, kh, ppos, M, hd);
    float *yq = host(pq, nq), *yk = host(pk, nk), *y = malloc(n * sizeof(float));
    for (int r = 0; r < M; r++) {
        memcpy(y + (size_t)r * rows * hd, yq + (size_t)r * qh * hd, (size_t)qh * hd * sizeof(float));
        memcpy(y + ((size_t)r * rows + qh) * hd, yk + (size_t)r * kh * hd, (size_t)kh * hd * sizeof(float));
    }
    check_fwd("rope", f_rope, &c, n, y);
    be->upload(be, pq, dq, nq);
    be->upload(be, pk, dk, nk);
    be->rope_bwd(be, pq, qh, pk, kh, ppos, M, hd, 0);
    float *gq = host(pq, nq), *gk = host(pk, nk), *got = malloc(n * sizeof(float));
    for (int r = 0; r < M; r++) {
        memcpy(got + (size_t)r * rows * hd, gq + (size_t)r * qh * hd, (size_t)qh * hd * sizeof(float));
        memcpy(got + ((size_t)r * rows + qh) * hd, gk + (size_t)r * kh * hd, (size_t)kh * hd * sizeof(float));
    }
    double *g = malloc(n * sizeof(double));
    fd_grad(f_rope, &c, x, n, dy, n, g);
    char what[64];
    snprintf(what, sizeof what, "M %d, %d q + %d k heads of %d", M, qh, kh, hd);
    check_grad("rope_bwd", what, got, g, n);
    /* q and k side by side in rows of ld = rows * hd (the model's q | k | v layout): dy as it is laid out */
    pt pqk = dev(dy, n, PT_ACT);
    be->rope_bwd(be, pqk, qh, pt_at(be, pqk, (size_t)qh * hd), kh, ppos, M, hd, rows * hd);
    float *gs = host(pqk, n);
    snprintf(what, sizeof what, "M %d, %d q + %d k heads of %d, one row", M, qh, kh, hd);
    check_grad("rope_bwd", what, gs, g, n);
    free(gs);
    be->release(be, pqk);
    free(x); free(dy); free(q); free(k); free(dq); free(dk); free(pos); free(yq); free(yk); free(y); free(gq); free(gk);
    free(got); free(g);
    be->release(be, pq); be->release(be, pk); be->release(be, ppos);
}

/* ---- attention_bwd: the suffix attention, differentiated in its queries and the suffix keys / values ----
 * Layouts: source 2 (B segments: prefix keys k1 rows [k_off[s], k_off[s+1]), suffix keys k2 aligned with the
 * queries) or tail (B = 1: the suffix keys are the last `tail` rows of k1). Inputs x = [q | k_suffix | v_suffix]. */
struct at { pi0_attn a; int nq_total, H, kvw, hd, tail; const float *k1c, *v1c, *x0; int nk1; };

static void f_attn(void *vc, const double *x, double *y) {
    struct at *c = vc;
    const pi0_attn *a = &c->a;
    size_t nqv = (size_t)c->nq_total * c->H * c->hd, nkv = (size_t)c->nq_total * c->kvw;
    double *xx = malloc((nqv + 2 * nkv) * sizeof(double));
    for (size_t i = 0; i < nqv + 2 * nkv; i++) xx[i] = x ? x[i] : c->x0[i];
    const double *q = xx, *ks = xx + nqv, *vs = xx + nqv + nkv;
    int group = a->heads / a->kv_heads;
    for (int s = 0; s < a->nseg; s++) {
        int nq = a->q_off[s + 1] - a->q_off[s], n1 = a->k_off[s + 1] - a->k_off[s] - c->tail;   /* prefix (cache) keys */
        for (int j = 0; j < nq; j++) {
            int r = a->q_off[s] + j, nsuf = j < a->block0 ? a->block0 : nq;
            for (int h = 0; h < a->heads; h++) {
                int kvh = h / group, nk = n1 + nsuf;
                double *p = malloc((size_t)nk * sizeof(double)), mx = -INFINITY, sum = 0;
                for (int t = 0; t < nk; t++) {
                    double d = 0;
                    for (int e = 0; e < c->hd; e++) {
                        double kv = t < n1 ? c->k1c[(size_t)(a->k_off[s] + t) * c->kvw + kvh * c->hd + e]
                                           : ks[(size_t)(a->q_off[s] + t - n1) * c->kvw + kvh * c->hd + e];
                        d += q[((size_t)r * a->heads + h) * c->hd + e] * kv;
                    }
                    p[t] = d * a->scale;
                    mx = fmax(mx, p[t]);
                }
                for (int t = 0; t < nk; t++) { p[t] = exp(p[t] - mx); sum += p[t]; }
                for (int e = 0; e < c->hd; e++) {
                    double o = 0;
                    for (int t = 0; t < nk; t++)
                        o += p[t] / sum * (t < n1 ? c->v1c[(size_t)(a->k_off[s] + t) * c->kvw + kvh * c->hd + e]
                                                  : vs[(size_t)(a->q_off[s] + t - n1) * c->kvw + kvh * c->hd + e]);
                    y[((size_t)r * a->heads + h) * c->hd + e] = o;
                }
                free(p);
            }
        }
    }
    free(xx);
}

static void t_attention_bwd(const char *what, int nseg, const int *np, int S, int heads, int kvh, int hd, int block0,
                            int tail_layout) {
    int kvw = kvh * hd, nq_total = nseg * S;
    int32_t qo[9], ko[9];
    qo[0] = ko[0] = 0;
    for (int s = 0; s < nseg; s++) {
        qo[s + 1] = qo[s] + S;
        ko[s + 1] = ko[s] + np[s] + (tail_layout ? S : 0);
    }
    size_t nqv = (size_t)nq_total * heads * hd, nkv = (size_t)nq_total * kvw, n1 = (size_t)ko[nseg] * kvw;
    float *k1 = rnd(n1, 1), *v1 = rnd(n1, 1), *x = rnd(nqv + 2 * nkv, 1), *dy = rnd(nqv, 1);
    if (tail_layout)   /* the suffix keys / values live in the cache's last S rows */
        for (int s = 0; s < nseg; s++) {
            memcpy(k1 + (size_t)(ko[s] + np[s]) * kvw, x + nqv + (size_t)qo[s] * kvw, (size_t)S * kvw * sizeof(float));
            memcpy(v1 + (size_t)(ko[s] + np[s]) * kvw, x + nqv + nkv + (size_t)qo[s] * kvw, (size_t)S * kvw * sizeof(float));
        }
    pt pk1 = dev(k1, n1, PT_ACT), pv1 = dev(v1, n1, PT_ACT), pq = dev(x, nqv, PT_ACT), pk2 = dev(x + nqv, nkv, PT_ACT),
       pv2 = dev(x + nqv + nkv, nkv, PT_ACT), po = dev(NULL, nqv, PT_ACT), pd = dev(dy, nqv, PT_ACT),
       pdq = dev(NULL, nqv, PT_ACT), pdk = dev(NULL, nkv, PT_ACT), pdv = dev(NULL, nkv, PT_ACT);
    pi0_attn a = {.nseg = nseg, .heads = heads, .kv_heads = kvh, .head_dim = hd, .scale = 1.0f / sqrtf((float)hd),
                  .q_off = qo, .k_off = ko, .k1 = pk1, .v1 = pv1, .block0 = block0};
    if (tail_layout) a.tail = S;
    else { a.k2 = pk2; a.v2 = pv2; }
    struct at c = {a, nq_total, heads, kvw, hd, tail_layout ? S : 0, k1, v1, x, 0};
    be->attention(be, po, pq, &a);
    float *y = host(po, nqv);
    check_fwd("attention", f_attn, &c, nqv, y);
    be->attention_bwd(be, pdq, pdk, pdv, pd, pq, &a, 0);
    float *got = malloc((nqv + 2 * nkv) * sizeof(float)), *t;
    t = host(pdq, nqv); memcpy(got, t, nqv * sizeof(float)); free(t);
    t = host(pdk, nkv); memcpy(got + nqv, t, nkv * sizeof(float)); free(t);
    t = host(pdv, nkv); memcpy(got + nqv + nkv, t, nkv * sizeof(float)); free(t);
    double *g = malloc((nqv + 2 * nkv) * sizeof(double));
    fd_grad(f_attn, &c, x, nqv + 2 * nkv, dy, nqv, g);
    char w2[96];
    snprintf(w2, sizeof w2, "%s dq", what);
    check_grad("attention_bwd", w2, got, g, nqv);
    snprintf(w2, sizeof w2, "%s dk", what);
    check_grad("attention_bwd", w2, got + nqv, g + nqv, nkv);
    snprintf(w2, sizeof w2, "%s dv", what);
    check_grad("attention_bwd", w2, got + nqv + nkv, g + nqv + nkv, nkv);
    free(k1); free(v1); free(x); free(dy); free(y); free(got); free(g);
    pt all[] = {pk1, pv1, pq, pk2, pv2, po, pd, pdq, pdk, pdv};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be->release(be, all[i]);
}

/* ---- rtc_error / rtc_correct: the guided velocity of three samples, LeRobot's form (jac 0) around an exact one (jac
 * 1). The exact sample against its formula in float64; a LeRobot sample equal to rtc_guide on its own bit for bit
 * (backend.h: its answer must not depend on the batch), and both near the float64 formula. Its dx is NaN: not read. */
static void t_rtc(void) {
    int H = 5, A = 8, ns = 3, rows = ns * H, steps = 5, k = 2;
    float t = 0.6f;
    size_t n = (size_t)rows * A;
    float *v = rnd(n, 1), *x = rnd(n, 1), *y = rnd(n, 1), *w = rnd((size_t)rows, 0.5), *dx = rnd(n, 1);
    float *g = rnd((size_t)ns * steps, 2), jac[3] = {0, 1, 0};
    for (size_t i = 0; i < n; i++)
        if (jac[i / A / H] == 0) dx[i] = NAN;
    pt pv = dev(v, n, PT_F32), px = dev(x, n, PT_F32), py = dev(y, n, PT_F32), pw = dev(w, (size_t)rows, PT_F32),
       pdx = dev(dx, n, PT_F32), pg = dev(g, (size_t)ns * steps, PT_F32), pj = dev(jac, (size_t)ns, PT_F32),
       pe = dev(NULL, n, PT_F32), pgv = dev(v, n, PT_F32);
    be->rtc_error(be, pe, pv, px, py, pw, pj, t, rows, H, A);
    be->rtc_correct(be, pv, pe, pdx, pg, pj, steps, k, t, rows, H, A);
    be->rtc_guide(be, pgv, px, py, pw, pg, steps, k, t, rows, H, A);
    float *ge = host(pe, n), *gv = host(pv, n), *guide = host(pgv, n);
    double *we = malloc(n * sizeof(double)), *wvv = malloc(n * sizeof(double));
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < A; i++) {
            size_t j = (size_t)r * A + i;
            double d = jac[r / H] ? dx[j] : 0;
            we[j] = ((double)y[j] - ((double)x[j] - (double)t * v[j])) * w[r];
            wvv[j] = v[j] - (double)g[(r / H) * steps + k] * (we[j] - jac[r / H] * (double)t * d);
        }
    for (int b = 0; b < ns; b++) {
        size_t o = (size_t)b * H * A, m = (size_t)H * A;
        double e1 = rel64(ge + o, we + o, m), e2 = rel64(gv + o, wvv + o, m);
        int same = !memcmp(gv + o, guide + o, m * sizeof(float));
        printf("rtc_error / rtc_correct, sample %d (%s): rel L2 %.1e / %.1e against the formulas%s\n", b,
               jac[b] ? "exact" : "LeRobot's form", e1, e2,
               jac[b] ? "" : same ? "; rtc_guide's bits" : "; NOT rtc_guide's bits");
        CHECK(e1 <= 1e-6 && e2 <= 1e-6, "sample %d: rtc_error %.3e, rtc_correct %.3e", b, e1, e2);
        if (!jac[b]) CHECK(same, "sample %d of LeRobot's form: rtc_error + rtc_correct == rtc_guide bit for bit", b);
    }
    free(v); free(x); free(y); free(w); free(dx); free(g); free(ge); free(gv); free(guide); free(we); free(wvv);
    pt all[] = {pv, px, py, pw, pdx, pg, pj, pe, pgv};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be->release(be, all[i]);
}

int main(void) {
    if (cpu_backend_create(&be, 2, NULL) != PI0_OK) { printf("cpu backend: %s\n", pi0_last_error()); return 1; }
    pi0_rng_seed(&rng, SEED);
    printf("seed %llu\n", (unsigned long long)SEED);
    if (be->reserve(be, 64, 4096, 1 << 16, 1 << 16) != PI0_OK) { printf("reserve: %s\n", pi0_last_error()); return 1; }
    t_linear_t(5, 7, 9, 0, 9, EPI_STORE);
    t_linear_t(3, 12, 16, 5, 24, EPI_ADD);
    t_linear_t(1, 300, 260, 0, 260, EPI_STORE);   /* more than one column block of the CPU op */
    t_linear_t_cat(3, 10, 20, 3, (const int[]){8, 4, 4}, EPI_STORE);   /* q | k | v, 4 columns of padding */
    t_linear_t_cat(2, 9, 14, 2, (const int[]){7, 7}, EPI_ADD);        /* gate | up, no padding */
    t_norm(5, 13, 0, EPI_STORE);
    t_norm(4, 16, 0, EPI_ADD);
    t_norm(5, 13, 1, EPI_STORE);
    t_norm(3, 24, 1, EPI_ADD);
    t_elementwise(3, 11);
    t_rope_bwd(3, 2, 1, 8);
    t_rope_bwd(2, 1, 1, 6);
    int np2[2] = {5, 7}, np1[1] = {6};
    t_attention_bwd("2 segments, source 2, block0 1", 2, np2, 3, 2, 1, 4, 1, 0);
    t_attention_bwd("2 segments, source 2, block0 0", 2, np2, 3, 4, 2, 4, 0, 0);
    t_attention_bwd("B = 1 tail, block0 1", 1, np1, 4, 2, 1, 6, 1, 1);
    t_attention_bwd("B = 1 tail, block0 0", 1, np1, 3, 2, 1, 4, 0, 1);
    t_rtc();
    be->destroy(be);
    return test_summary("test_grad");
}
