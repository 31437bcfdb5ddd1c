/* test.h — the in-tree test harness: one line per check, a closing "name: N passed, N failed" line
 * (tests/run.sh adds them up). Seeds are printed by the tests that use randomness. */
#ifndef PI0_TEST_H
#define PI0_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int t_pass, t_fail;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (cond) t_pass++;                                                \
        else {                                                             \
            t_fail++;                                                      \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);         \
            printf(__VA_ARGS__);                                           \
            printf("\n");                                                  \
        }                                                                  \
    } while (0)

/* Relative L2 error ||a - b|| / ||b|| and max |a - b| (NaN in a counts as infinite error). */
static inline double rel_l2(const float *a, const float *b, size_t n, double *max_abs) {
    double num = 0, den = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        if (a[i] != a[i]) d = INFINITY;
        num += d * d;
        den += (double)b[i] * b[i];
        if (fabs(d) > mx) mx = fabs(d);
    }
    if (max_abs) *max_abs = mx;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline int test_summary(const char *name) {
    printf("%s: %d passed, %d failed\n", name, t_pass, t_fail);
    return t_fail ? 1 : 0;
}

#endif
