/* test_policy.c — norm stats against openpi's Normalize / Unnormalize as restated by
 * tests/policy_check.py (numpy float64): z-score and quantile, state normalisation, the float64 state
 * round trip and float32 action unnormalisation (stats padded / sliced to 32 dims). Every value must be
 * bit-equal (same operation order in double). Plus malformed norm_stats.json files.
 * Usage: test_policy DIR (written by policy_check.py) */
#include <stdlib.h>

#include "norm_stats.h"
#include "test.h"
#include "util.h"

static int equal(const char *what, const double *a, const void *b, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&a[i], (const double *)b + i, sizeof(double)) != 0;
    printf("%-44s n=%-5zu %s\n", what, n, bad ? "FAIL" : "OK (bit-equal)");
    return bad == 0;
}

static pi0_status parse(const char *json) {
    norm_stats ns;
    pi0_status st = norm_stats_parse(&ns, "x.json", json, strlen(json));
    norm_stats_free(&ns);
    return st;
}

int main(int argc, char **argv) {
    if (argc < 2) { printf("usage: test_policy DIR\n"); return 2; }
    char path[512];
    norm_stats ns;
    snprintf(path, sizeof path, "%s/norm_stats.json", argv[1]);
    pi0_status st = norm_stats_load(&ns, path);
    CHECK(st == PI0_OK && ns.state.n == 8 && ns.actions.n == 7 && ns.state.q01, "load %s: %s", path, pi0_last_error());
    pi0_tensors *t = NULL;
    snprintf(path, sizeof path, "%s/norm_cases.safetensors", argv[1]);
    CHECK(pi0_tensors_open(&t, path) == PI0_OK, "open %s: %s", path, pi0_last_error());
    const void *x, *sz, *sq, *a, *az, *aq, *rz, *rq;
    if (st == PI0_OK && t && pi0_tensors_get(t, "state", NULL, NULL, NULL, &x) == PI0_OK &&
        pi0_tensors_get(t, "state_z", NULL, NULL, NULL, &sz) == PI0_OK &&
        pi0_tensors_get(t, "state_q", NULL, NULL, NULL, &sq) == PI0_OK &&
        pi0_tensors_get(t, "model_actions", NULL, NULL, NULL, &a) == PI0_OK &&
        pi0_tensors_get(t, "actions_z", NULL, NULL, NULL, &az) == PI0_OK &&
        pi0_tensors_get(t, "actions_q", NULL, NULL, NULL, &aq) == PI0_OK &&
        pi0_tensors_get(t, "state_rt_z", NULL, NULL, NULL, &rz) == PI0_OK &&
        pi0_tensors_get(t, "state_rt_q", NULL, NULL, NULL, &rq) == PI0_OK) {
        static double in[20 * 10 * 32], out[20 * 10 * 32], pad[20 * 32];
        int ok = 1;
        for (int i = 0; i < 160; i++) in[i] = ((const float *)x)[i];   /* float32 state -> float64, as numpy */
        for (int r = 0; r < 20 && ok; r++) ok = norm_apply(&ns.state, 0, in + r * 8, 8, out + r * 8) == PI0_OK;
        CHECK(ok && equal("normalize state, z-score", out, sz, 160), "z-score normalize");
        memset(pad, 0, sizeof pad);
        for (int r = 0; r < 20; r++) memcpy(pad + r * 32, out + r * 8, 8 * sizeof(double));
        CHECK(norm_invert(&ns.state, 0, pad, 0, 20, 32, out) == PI0_OK && equal("state round trip, z-score (float64)", out, rz, 640),
              "z-score state round trip");
        for (int r = 0; r < 20 && ok; r++) ok = norm_apply(&ns.state, 1, in + r * 8, 8, out + r * 8) == PI0_OK;
        CHECK(ok && equal("normalize state, quantile", out, sq, 160), "quantile normalize");
        memset(pad, 0, sizeof pad);
        for (int r = 0; r < 20; r++) memcpy(pad + r * 32, out + r * 8, 8 * sizeof(double));
        CHECK(norm_invert(&ns.state, 1, pad, 0, 20, 32, out) == PI0_OK && equal("state round trip, quantile (float64)", out, rq, 640),
              "quantile state round trip");
        for (int i = 0; i < 6400; i++) in[i] = ((const float *)a)[i];
        CHECK(norm_invert(&ns.actions, 0, in, 1, 200, 32, out) == PI0_OK && equal("unnormalize actions, z-score (pad 0/1)", out, az, 6400),
              "z-score unnormalize");
        CHECK(norm_invert(&ns.actions, 1, in, 1, 200, 32, out) == PI0_OK && equal("unnormalize actions, quantile (7 of 32)", out, aq, 6400),
              "quantile unnormalize");
        double nan_in[9] = {0, 0, NAN, 0, 0, 0, 0, 0, 0};
        CHECK(norm_apply(&ns.state, 0, nan_in, 8, out) == PI0_ERR_ARG, "NaN state refused");
        CHECK(norm_apply(&ns.state, 0, nan_in, 9, out) == PI0_ERR_SHAPE && strstr(pi0_last_error(), "8 values"),
              "state longer than the stats refused: %s", pi0_last_error());
        CHECK(norm_invert(&ns.actions, 0, in, 1, 1, 5, out) == PI0_ERR_SHAPE, "actions shorter than the stats refused");
    }
    pi0_tensors_free(t);
    norm_stats_free(&ns);
    /* malformed files */
    CHECK(parse("{\"norm_stats\": {\"state\": {\"mean\": [1], \"std\": [1]}}}") == PI0_ERR_FORMAT &&
          strstr(pi0_last_error(), "norm_stats.actions"), "missing actions: %s", pi0_last_error());
    CHECK(parse("{\"norm_stats\": {\"state\": {\"mean\": [1, 2], \"std\": [1]}, \"actions\": {\"mean\": [1], \"std\": [1]}}}") ==
          PI0_ERR_FORMAT && strstr(pi0_last_error(), "norm_stats.state.std has 1 values, expected 2"),
          "length mismatch: %s", pi0_last_error());
    CHECK(parse("{\"norm_stats\": {\"state\": {\"mean\": [\"a\"], \"std\": [1]}, \"actions\": {\"mean\": [1], \"std\": [1]}}}") ==
          PI0_ERR_FORMAT && strstr(pi0_last_error(), "mean[0] is not a finite number"), "non-number: %s", pi0_last_error());
    CHECK(parse("{\"norm_stats\": {\"state\": {\"mean\": [1], \"std\": [1], \"q01\": [0]}, \"actions\": {\"mean\": [1], \"std\": [1]}}}") ==
          PI0_ERR_FORMAT && strstr(pi0_last_error(), "only one of q01"), "q01 without q99: %s", pi0_last_error());
    CHECK(parse("{\"norm_stats\": [") == PI0_ERR_FORMAT && strstr(pi0_last_error(), "invalid JSON"), "bad JSON");
    CHECK(parse("{\"norm_stats\": {\"state\": {\"mean\": [1], \"std\": [1], \"q01\": null, \"q99\": null}, "
                "\"actions\": {\"mean\": [1], \"std\": [1]}}}") == PI0_OK, "null quantiles accepted (pi0 files)");
    norm_stats_load(&ns, "/nonexistent/norm_stats.json");
    CHECK(strstr(pi0_last_error(), "/nonexistent/norm_stats.json"), "missing file named");
    return test_summary("test_policy");
}
