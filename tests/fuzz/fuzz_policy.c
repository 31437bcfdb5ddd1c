/* fuzz_policy.c — libFuzzer target for the policy's untrusted inputs: norm_stats.json (norm_stats_parse)
 * and robot observations (robot_input_make for LIBERO, DROID and ALOHA on arrays whose keys, dtypes,
 * shapes and bytes come from the input). The harness keeps the API contract (data holds
 * prod(shape) * itemsize bytes); everything else is arbitrary and must give an error, never a crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "robot.h"

static const char *KEYS[] = {"observation/image", "observation/wrist_image", "observation/state",
                             "observation/exterior_image_1_left", "observation/wrist_image_left",
                             "observation/joint_position", "observation/gripper_position", "state", "images/cam_high",
                             "images/cam_low", "images/cam_left_wrist", "images/cam_right_wrist", "images/cam_x", "prompt"};
static const pi0_dtype DTYPES[] = {PI0_DT_U8, PI0_DT_F32, PI0_DT_F64, PI0_DT_I32, PI0_DT_I64, PI0_DT_BOOL, PI0_DT_F16};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] & 1) {   /* norm stats JSON */
        norm_stats ns;
        if (norm_stats_parse(&ns, "fuzz", (const char *)data + 1, size - 1) == PI0_OK) {
            double x[8] = {0}, out[64];
            norm_apply(&ns.state, 0, x, ns.state.n < 8 ? ns.state.n : 8, out);
            if (ns.actions.n <= 32) norm_invert(&ns.actions, ns.actions.q01 != NULL, out, 1, 1, 32, out);
            norm_stats_free(&ns);
        }
        return 0;
    }
    /* observation: up to 6 array headers of 6 bytes (key, dtype, ndim, 3 dims), then the data */
    pi0_array a[6];
    size_t n = (size_t)(data[0] >> 1) % 7, off = 1 + n * 6;
    if (size < off) return 0;
    const uint8_t *pool = data + off;
    size_t left = size - off;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *h = data + 1 + i * 6;
        a[i] = (pi0_array){.key = KEYS[h[0] % 14], .dtype = DTYPES[h[1] % 7], .ndim = h[2] % 5};
        size_t count = 1, item = a[i].dtype == PI0_DT_F16 ? 2 : a[i].dtype == PI0_DT_F64 || a[i].dtype == PI0_DT_I64 ? 8
                              : a[i].dtype == PI0_DT_U8 || a[i].dtype == PI0_DT_BOOL ? 1 : 4;
        for (int d = 0; d < a[i].ndim; d++) {
            a[i].shape[d] = d < 3 ? h[3 + d] % 20 : 3;
            count *= (size_t)a[i].shape[d];
        }
        if (count * item > left) { a[i].ndim = 1; a[i].shape[0] = (int64_t)(left / item); count = left / item; }
        a[i].data = pool;
    }
    pi0_observation obs = {.arrays = a, .n_arrays = (int)n};
    for (int r = PI0_ROBOT_LIBERO; r <= PI0_ROBOT_ALOHA; r++) {
        robot_input in;
        if (robot_input_make((pi0_robot)r, &obs, &in) == PI0_OK) robot_input_free(&in);
    }
    return 0;
}
