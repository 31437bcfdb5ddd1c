/* robot.c — openpi's LIBERO / DROID / ALOHA transforms. See robot.h (the config table is openpi_config.c's).
 * Arithmetic follows numpy's order and precision (float64, no FMA: built with -ffp-contract=off) so
 * that the returned actions are bit-equal to openpi's. Deliberate differences, all on inputs openpi
 * mishandles: images may be CHW or HWC for every robot (openpi's ALOHA assumes CHW), float images
 * outside [0, 1] and non-finite or wrong-length states are refused instead of wrapping or broadcasting. */
#include "robot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openpi_config.h"
#include "util.h"

static const char *NAMES[] = {"none", "libero", "droid", "aloha"};

pi0_robot robot_from_name(const char *name) {
    for (int r = PI0_ROBOT_LIBERO; name && r <= PI0_ROBOT_ALOHA; r++)
        if (!strcmp(NAMES[r], name)) return (pi0_robot)r;
    return PI0_ROBOT_NONE;
}

const char *robot_name(pi0_robot r) { return (unsigned)r <= PI0_ROBOT_ALOHA ? NAMES[r] : "?"; }
int robot_state_dim(pi0_robot r) { return r == PI0_ROBOT_ALOHA ? 14 : 8; }
int robot_action_dim(pi0_robot r) { return r == PI0_ROBOT_ALOHA ? 14 : r == PI0_ROBOT_DROID ? 8 : 7; }
int robot_default_delta(pi0_robot r, int pi05) { return r == PI0_ROBOT_ALOHA || (r == PI0_ROBOT_LIBERO && !pi05); }
const char *robot_default_metadata(pi0_robot r) { return r == PI0_ROBOT_ALOHA ? OPENPI_ALOHA_METADATA : "{}"; }

/* ---- request arrays ---- */

static pi0_status find(const pi0_observation *obs, const char *key, const pi0_array **out) {
    *out = NULL;
    for (int i = 0; i < obs->n_arrays; i++) {
        const pi0_array *a = &obs->arrays[i];
        if (!a->key || strcmp(a->key, key)) continue;
        if (*out) return pi0_fail(PI0_ERR_ARG, "key '%s' given twice", key);
        *out = a;
    }
    return PI0_OK;
}

static void describe(char *buf, size_t n, const pi0_array *a) {
    size_t k = (size_t)snprintf(buf, n, "%s [", pi0_dtype_name(a->dtype));
    for (int i = 0; i < a->ndim && i < 4 && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)a->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* element i of a numeric array as double (data may be unaligned: it can point into a network buffer) */
static double elem(const pi0_array *a, size_t i) {
    const uint8_t *p = (const uint8_t *)a->data + i * pi0_dtype_size(a->dtype);
    float f; double d; int32_t i32; int64_t i64;
    switch (a->dtype) {
    case PI0_DT_F32: memcpy(&f, p, 4); return f;
    case PI0_DT_F64: memcpy(&d, p, 8); return d;
    case PI0_DT_I32: memcpy(&i32, p, 4); return i32;
    case PI0_DT_I64: memcpy(&i64, p, 8); return (double)i64;
    case PI0_DT_U8: return *p;
    default: return NAN;
    }
}

/* A 1-D (or, with allow0, 0-d) numeric vector of exactly n finite values, appended to out. */
static pi0_status get_vector(const pi0_observation *obs, const char *key, int n, int allow0, double *out) {
    const pi0_array *a;
    pi0_status st = find(obs, key, &a);
    if (st != PI0_OK) return st;
    if (!a) return pi0_fail(PI0_ERR_ARG, "missing '%s' (expected %d numbers)", key, n);
    char d[96];
    describe(d, sizeof d, a);
    int ok_type = a->dtype == PI0_DT_F32 || a->dtype == PI0_DT_F64 || a->dtype == PI0_DT_I32 || a->dtype == PI0_DT_I64;
    int len = a->ndim == 0 ? 1 : a->ndim == 1 ? (int)(a->shape[0] < 0 || a->shape[0] > 4096 ? -1 : a->shape[0]) : -1;
    if (!ok_type || !a->data || (a->ndim == 0 && !allow0) || len != n)
        return pi0_fail(PI0_ERR_SHAPE, "observation '%s': expected %s%d numbers (float32/float64/int), found %s", key,
                        allow0 && n == 1 ? "a scalar or " : "", n, d);
    for (int i = 0; i < n; i++) {
        out[i] = elem(a, (size_t)i);
        if (!isfinite(out[i])) return pi0_fail(PI0_ERR_ARG, "observation '%s': value %d is not finite (%g)", key, i, out[i]);
    }
    return PI0_OK;
}

/* openpi's _parse_image: float images become uint8(255 * x) (truncating); CHW becomes HWC when the
 * first axis is 3. Result: (h, w, 3) uint8, owned by the caller. */
static pi0_status get_image(const pi0_array *a, const char *key, uint8_t **out, int *h, int *w) {
    char d[96];
    describe(d, sizeof d, a);
    *out = NULL;
    if (a->dtype != PI0_DT_U8 && a->dtype != PI0_DT_F32 && a->dtype != PI0_DT_F64)
        return pi0_fail(PI0_ERR_SHAPE, "observation '%s': expected a uint8 or float image, found %s", key, d);
    if (a->ndim != 3 || !a->data)
        return pi0_fail(PI0_ERR_SHAPE, "observation '%s': expected an image [H, W, 3] or [3, H, W], found %s", key, d);
    for (int i = 0; i < 3; i++)
        if (a->shape[i] < 1 || a->shape[i] > 8192)
            return pi0_fail(PI0_ERR_SHAPE, "observation '%s': image sides must be 1..8192 pixels, found %s", key, d);
    int chw = a->shape[0] == 3;
    if (!chw && a->shape[2] != 3)
        return pi0_fail(PI0_ERR_SHAPE, "observation '%s': expected 3 colour channels ([H, W, 3] or [3, H, W]), found %s", key, d);
    int H = (int)(chw ? a->shape[1] : a->shape[0]), W = (int)(chw ? a->shape[2] : a->shape[1]);
    uint8_t *img = pi0_malloc((size_t)H * W * 3, "image");
    if (!img) return PI0_ERR_NOMEM;
    size_t plane = (size_t)H * W;
    for (size_t p = 0; p < plane; p++)
        for (int c = 0; c < 3; c++) {
            size_t src = chw ? (size_t)c * plane + p : p * 3 + (size_t)c;
            if (a->dtype == PI0_DT_U8) { img[p * 3 + c] = ((const uint8_t *)a->data)[src]; continue; }
            /* numpy: 255 * x stays float32 for a float32 array (float64 for float64), then astype truncates */
            double v;
            if (a->dtype == PI0_DT_F32) { float f; memcpy(&f, (const uint8_t *)a->data + src * 4, 4); v = 255.0f * f; }
            else { double x; memcpy(&x, (const uint8_t *)a->data + src * 8, 8); v = 255.0 * x; }
            if (!(v > -1.0 && v < 256.0)) {
                free(img);
                return pi0_fail(PI0_ERR_ARG, "observation '%s': float image value %g at element %zu is outside [0, 1]", key,
                                v / 255.0, src);
            }
            img[p * 3 + c] = (uint8_t)(int)v;
        }
    *out = img; *h = H; *w = W;
    return PI0_OK;
}

static pi0_status camera(const pi0_observation *obs, const char *key, int required, robot_input *in, int slot) {
    const pi0_array *a;
    pi0_status st = find(obs, key, &a);
    if (st != PI0_OK) return st;
    if (!a) return required ? pi0_fail(PI0_ERR_ARG, "missing image '%s'", key) : PI0_OK;
    return get_image(a, key, &in->img[slot], &in->h[slot], &in->w[slot]);
}

/* ALOHA grippers (aloha_policy._gripper_to_angular): linear position -> angle -> pi0's [0, 1] range */
static double gripper_to_angular(double v) {
    v = v * (0.05800 - 0.01844) + 0.01844;
    double r = (0.022 * 0.022 + v * v - 0.036 * 0.036) / (2 * 0.022 * v);   /* horn 0.022, arm 0.036 */
    r = asin(r < -1.0 ? -1.0 : r > 1.0 ? 1.0 : r);
    return (r - 0.5476) / (1.6296 - 0.5476);
}

static const double ALOHA_FLIP[14] = {1, -1, -1, 1, 1, 1, 1, 1, -1, -1, 1, 1, 1, 1};
static const char *ALOHA_CAMS[] = {"cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist"};

static pi0_status aloha_inputs(const pi0_observation *obs, robot_input *in) {
    /* every images/<name> must be a known camera (openpi: "Expected images to contain ...") */
    for (int i = 0; i < obs->n_arrays; i++) {
        const char *k = obs->arrays[i].key;
        if (!k || strncmp(k, "images/", 7)) continue;
        int known = 0;
        for (int c = 0; c < 4; c++) known |= !strcmp(k + 7, ALOHA_CAMS[c]);
        if (!known)
            return pi0_fail(PI0_ERR_ARG, "unknown ALOHA camera '%s' (expected images/cam_high, images/cam_low, "
                            "images/cam_left_wrist, images/cam_right_wrist)", k);
    }
    pi0_status st = get_vector(obs, "state", 14, 0, in->state);
    if (st != PI0_OK) return st;
    in->n_state = 14;
    for (int i = 0; i < 14; i++) in->state[i] = ALOHA_FLIP[i] * in->state[i];
    in->state[6] = gripper_to_angular(in->state[6]);
    in->state[13] = gripper_to_angular(in->state[13]);
    if ((st = camera(obs, "images/cam_high", 1, in, 0)) != PI0_OK) return st;
    if ((st = camera(obs, "images/cam_left_wrist", 0, in, 1)) != PI0_OK) return st;
    if ((st = camera(obs, "images/cam_right_wrist", 0, in, 2)) != PI0_OK) return st;
    const pi0_array *low;   /* cam_low is accepted and not used, but must still be a well-formed image */
    if ((st = find(obs, "images/cam_low", &low)) != PI0_OK) return st;
    if (low) {
        uint8_t *tmp; int h, w;
        if ((st = get_image(low, "images/cam_low", &tmp, &h, &w)) != PI0_OK) return st;
        free(tmp);
    }
    return PI0_OK;
}

pi0_status robot_input_make(pi0_robot r, const pi0_observation *obs, robot_input *in) {
    memset(in, 0, sizeof *in);
    if (!obs || (obs->n_arrays && !obs->arrays) || obs->n_arrays < 0)
        return pi0_fail(PI0_ERR_ARG, "observation: bad arrays argument");
    pi0_status st;
    switch (r) {
    case PI0_ROBOT_LIBERO:   /* libero_policy.LiberoInputs: right wrist slot black, mask False */
        st = get_vector(obs, "observation/state", 8, 0, in->state);
        in->n_state = 8;
        if (st == PI0_OK) st = camera(obs, "observation/image", 1, in, 0);
        if (st == PI0_OK) st = camera(obs, "observation/wrist_image", 1, in, 1);
        break;
    case PI0_ROBOT_DROID:    /* droid_policy.DroidInputs: state = joints (7) ++ gripper (scalar or [1]) */
        st = get_vector(obs, "observation/joint_position", 7, 0, in->state);
        if (st == PI0_OK) st = get_vector(obs, "observation/gripper_position", 1, 1, in->state + 7);
        in->n_state = 8;
        if (st == PI0_OK) st = camera(obs, "observation/exterior_image_1_left", 1, in, 0);
        if (st == PI0_OK) st = camera(obs, "observation/wrist_image_left", 1, in, 1);
        break;
    case PI0_ROBOT_ALOHA:
        st = aloha_inputs(obs, in);
        break;
    default:
        st = pi0_fail(PI0_ERR_ARG, "unknown robot %d", (int)r);
    }
    if (st != PI0_OK) robot_input_free(in);
    return st;
}

void robot_input_free(robot_input *in) {
    if (!in) return;
    for (int i = 0; i < ROBOT_CAMS; i++) free(in->img[i]);
    memset(in, 0, sizeof *in);
}

/* AbsoluteActions masks (transforms.make_bool_mask): LIBERO (6, -1), DROID (7, -1), ALOHA (6, -1, 6, -1) */
static const uint8_t MASK_LIBERO[7] = {1, 1, 1, 1, 1, 1, 0};
static const uint8_t MASK_DROID[8] = {1, 1, 1, 1, 1, 1, 1, 0};
static const uint8_t MASK_ALOHA[14] = {1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0};

void robot_output(pi0_robot r, const double *actions, int H, int A, const double *state, int delta, double *out) {
    const uint8_t *mask = r == PI0_ROBOT_ALOHA ? MASK_ALOHA : r == PI0_ROBOT_DROID ? MASK_DROID : MASK_LIBERO;
    int D = robot_action_dim(r);
    for (int t = 0; t < H; t++) {
        const double *a = actions + (size_t)t * A;
        double *o = out + (size_t)t * D;
        for (int i = 0; i < D; i++) {
            double v = a[i];
            /* numpy adds where(mask, state, 0): unmasked dims get + 0.0 (which turns -0.0 into +0.0) */
            if (delta) v = v + (mask[i] ? state[i] : 0.0);
            if (r == PI0_ROBOT_ALOHA) {
                v = ALOHA_FLIP[i] * v;
                /* _gripper_from_angular: normalize(v + 0.5476, min -0.6213, max 1.4910) */
                if (i == 6 || i == 13) v = ((v + 0.5476) - (-0.6213)) / (1.4910 - (-0.6213));
            }
            o[i] = v;
        }
    }
}
