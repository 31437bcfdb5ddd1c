/* fuzz_policy.c — libFuzzer target for the policy's untrusted inputs: norm_stats.json (norm_stats_parse)
 * and robot observations (robot_input_make for LIBERO, DROID and ALOHA on arrays whose keys, dtypes,
 * shapes and bytes come from the input). The harness keeps the API contract (data holds
 * prod(shape) * itemsize bytes); everything else is arbitrary and must give an error, never a crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_arrays.h"
#include "norm_stats.h"
#include "robot.h"

static const char *KEYS[] = {"observation/image", "observation/wrist_image", "observation/state",
                             "observation/exterior_image_1_left", "observation/wrist_image_left",
                             "observation/joint_position", "observation/gripper_position", "state", "images/cam_high",
                             "images/cam_low", "images/cam_left_wrist", "images/cam_right_wrist", "images/cam_x", "prompt"};

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
    int n = fuzz_arrays(data, size, KEYS, 14, 20, a);
    pi0_observation obs = {.arrays = a, .n_arrays = n};
    for (int r = PI0_ROBOT_LIBERO; r <= PI0_ROBOT_ALOHA; r++) {
        robot_input in;
        if (robot_input_make((pi0_robot)r, &obs, &in) == PI0_OK) robot_input_free(&in);
    }
    return 0;
}
