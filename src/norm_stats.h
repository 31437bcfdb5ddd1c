/* norm_stats.h — norm stats around the model (docs/model.md 4.2): norm_stats.json and state/action
 * (un)normalisation, z-score (π0) and quantile (π0.5), as openpi's transforms.Normalize / Unnormalize.
 * Math and results in double (openpi's float64). The robot transforms are robot.h's, the policy API pi0_policy.c's. */
#ifndef PI0_NORM_STATS_H
#define PI0_NORM_STATS_H

#include <stddef.h>

#include "pi0.h"

typedef struct {
    int n;                         /* vector length (raw dimension of the dataset) */
    double *mean, *std, *q01, *q99;/* q01 / q99 NULL when the file has none (null or missing) */
} norm_vec;

typedef struct {
    norm_vec state, actions;
} norm_stats;

/* Reads DIR/assets/<id>/norm_stats.json (path given): {"norm_stats": {"state": {...}, "actions": {...}}}. */
pi0_status norm_stats_load(norm_stats *ns, const char *path);
pi0_status norm_stats_parse(norm_stats *ns, const char *label, const char *json, size_t len);
void norm_stats_free(norm_stats *ns);

/* Normalize: out[i] = (x[i] - mean[i]) / (std[i] + 1e-6)  or, quantile,
 * (x[i] - q01[i]) / (q99[i] - q01[i] + 1e-6) * 2 - 1, for the first d dims (stats sliced to d). */
pi0_status norm_apply(const norm_vec *v, int quantile, const double *x, int d, double *out);
/* Unnormalize rows of d values: z-score x * (std + 1e-6) + mean with mean padded by 0 and std by 1 to d;
 * quantile (x + 1) / 2 * (q99 - q01 + 1e-6) + q01 on the first n dims ((x + 1) / 2 in float32, as numpy
 * does for float32 model outputs: x_f32 = 1), the rest passed through. float64 results, as openpi returns. */
pi0_status norm_invert(const norm_vec *v, int quantile, const double *x, int x_f32, int rows, int d, double *out);

#endif
