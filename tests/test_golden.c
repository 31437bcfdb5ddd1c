/* test_golden.c — the CPU engine against fixtures made by the independent PyTorch reference
 * (tools/reference, float64). Every named intermediate is compared, so a failure points at a stage:
 * vision.out -> prefix.emb -> prefix.k/v.LL -> denoise.v/x.SS -> actions.
 * Bound: relative L2 error 1e-5 for every tensor (fp32 engine vs float64 reference); the worst
 * values seen are printed on every run (see tests/README.md for the table). */
#include <stdlib.h>

#include "pi0.h"
#include "test.h"

#define BOUND 1e-5

static const char *models[] = {"tiny-pi0", "tiny-pi05"};
static const char *cases[] = {"b1", "b1-masked", "b2"};

static void collect(void *user, const char *name, const float *data, int ndim, const int64_t *shape) {
    pi0_tensors_add(user, name, PI0_DT_F32, ndim, shape, data);
}

static double worst[2];

/* Compares every tensor of `expected` with the same name in `got`. */
static void compare_all(const char *label, const pi0_tensors *expected, const pi0_tensors *got, const char **names,
                        int n_names) {
    for (int i = 0; i < n_names; i++) {
        pi0_dtype dt;
        int nd, nd2;
        int64_t sh[8], sh2[8];
        const void *e, *g;
        if (pi0_tensors_get(expected, names[i], &dt, &nd, sh, &e) != PI0_OK) continue;
        int have = pi0_tensors_get(got, names[i], &dt, &nd2, sh2, &g) == PI0_OK;
        CHECK(have, "%s: engine did not produce '%s'", label, names[i]);
        if (!have) continue;
        size_t n = 1;
        int same = nd == nd2;
        for (int k = 0; k < nd && same; k++) { same = sh[k] == sh2[k]; n *= (size_t)sh[k]; }
        CHECK(same, "%s: '%s' shape differs", label, names[i]);
        if (!same) continue;
        double mx, r = rel_l2(g, e, n, &mx);
        int is_act = !strcmp(names[i], "actions");
        if (r > worst[is_act]) worst[is_act] = r;
        if (is_act || strstr(names[i], ".00") || !strcmp(names[i], "vision.out") || !strcmp(names[i], "prefix.emb") ||
            r > BOUND)
            printf("%-28s %-14s n=%-6zu max_abs=%.2e rel_l2=%.2e bound=%.0e %s\n", label, names[i], n, mx, r, BOUND,
                   r <= BOUND ? "OK" : "FAIL");
        CHECK(r <= BOUND, "%s: '%s' rel_l2 %.3e > %.0e", label, names[i], r, BOUND);
    }
}

int main(void) {
    const char *names[64];
    char buf[64][32];
    int nn = 0;
    names[nn++] = "actions";
    names[nn++] = "vision.out";
    names[nn++] = "prefix.emb";
    for (int l = 0; l < 2; l++) {
        snprintf(buf[nn], 32, "prefix.k.%02d", l); names[nn] = buf[nn]; nn++;
        snprintf(buf[nn], 32, "prefix.v.%02d", l); names[nn] = buf[nn]; nn++;
    }
    for (int s = 0; s < 10; s++) {
        snprintf(buf[nn], 32, "denoise.v.%02d", s); names[nn] = buf[nn]; nn++;
        snprintf(buf[nn], 32, "denoise.x.%02d", s); names[nn] = buf[nn]; nn++;
    }
    for (int mi = 0; mi < 2; mi++) {
        char dir[256];
        snprintf(dir, sizeof dir, "tests/fixtures/%s", models[mi]);
        pi0_model *m = NULL;
        pi0_status st = pi0_model_load(&m, dir, &(pi0_model_params){.quiet = 1});
        CHECK(st == PI0_OK, "load %s: %s", dir, pi0_last_error());
        if (st != PI0_OK) continue;
        for (int ci = 0; ci < 3; ci++) {
            char in_path[300], out_path[300], label[64];
            snprintf(in_path, sizeof in_path, "%s/%s.in.safetensors", dir, cases[ci]);
            snprintf(out_path, sizeof out_path, "%s/%s.out.safetensors", dir, cases[ci]);
            snprintf(label, sizeof label, "%s/%s", models[mi], cases[ci]);
            pi0_tensors *tin = NULL, *texp = NULL, *tgot = NULL;
            pi0_inputs_buf *ib = NULL;
            pi0_session *s = NULL;
            pi0_inputs in;
            int ok = pi0_tensors_open(&tin, in_path) == PI0_OK && pi0_tensors_open(&texp, out_path) == PI0_OK &&
                     pi0_tensors_new(&tgot) == PI0_OK && pi0_inputs_from_tensors(m, tin, in_path, &in, &ib) == PI0_OK;
            CHECK(ok, "%s: reading fixture: %s", label, pi0_last_error());
            if (ok) {
                pi0_model_info info;
                pi0_model_get_info(m, &info);
                size_t na = (size_t)in.batch * info.action_horizon * info.action_dim;
                float *act = malloc(na * sizeof(float));
                ok = act && pi0_session_create(&s, m, &(pi0_session_params){.max_batch = in.batch, .dump = collect,
                                                                           .dump_user = tgot}) == PI0_OK &&
                     pi0_infer(s, &in, act) == PI0_OK;
                CHECK(ok, "%s: inference: %s", label, pi0_last_error());
                if (ok) {
                    int64_t shape[3] = {in.batch, info.action_horizon, info.action_dim};
                    pi0_tensors_add(tgot, "actions", PI0_DT_F32, 3, shape, act);
                    compare_all(label, texp, tgot, names, nn);
                }
                free(act);
            }
            pi0_session_free(s);
            pi0_inputs_buf_free(ib);
            pi0_tensors_free(tin);
            pi0_tensors_free(texp);
            pi0_tensors_free(tgot);
        }
        pi0_model_free(m);
    }
    printf("worst rel_l2: actions %.2e, intermediates %.2e (bound %.0e)\n", worst[1], worst[0], BOUND);
    return test_summary("test_golden");
}
