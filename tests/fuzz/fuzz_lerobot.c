/* fuzz_lerobot.c — libFuzzer target for LeRobot's untrusted inputs: config.json (lerobot_config) and observations
 * as a robot sends them to a LeRobot policy (lerobot_prepare on arrays whose keys, dtypes, shapes and bytes come
 * from the input, against a fixed pipeline: 2 cameras + an empty one, an 8-value MEAN_STD state, a rename map).
 * The harness keeps the API contract (data holds prod(shape) * itemsize bytes); no prompt, so the tokenizer is not
 * reached. Everything else is arbitrary and must give an error, never a crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_arrays.h"
#include "lerobot.h"

static const char *KEYS[] = {"observation.images.top", "observation/images/top", "observation.images.wrist",
                             "observation.state", "observation/state", "observation.images.empty_camera_0",
                             "observation.images.other", "cam", "task"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] & 1) {   /* config.json */
        pi0_config c;
        lerobot_config(&c, "fuzz", (const char *)data + 1, size - 1);
        return 0;
    }
    static float mean[8], stdv[8] = {1, 2, 3, 4, 0, 1, 1, 1};
    static char *cams[] = {"observation.images.top", "observation.images.wrist", "observation.images.empty_camera_0"};
    static char *from[] = {"cam"}, *to[] = {"observation.images.wrist"};
    lerobot_pipeline p = {.pi05 = 0, .H = 4, .A = 32, .N = 3, .R = 16, .L = 8, .cams = cams, .state_dim = 8,
                          .action_dim = 7, .n_action_steps = 4, .num_steps = 2, .newline = 1, .n_rename = 1,
                          .ren_from = from, .ren_to = to,
                          .state = {.mode = LR_MEAN_STD, .n = 8, .lo = mean, .hi = stdv, .eps = 1e-8}};
    pi0_array a[6];
    int n = fuzz_arrays(data, size, KEYS, 9, 40, a);
    pi0_observation obs = {.arrays = a, .n_arrays = n};
    static float images[3 * 16 * 16 * 3], state[32];
    uint8_t masks[3], tmask[8];
    int32_t tokens[8];
    lerobot_prepare(&p, NULL, &obs, NULL, images, masks, state, tokens, tmask);
    float chunk[4 * 32] = {0};
    double out[4 * 7];
    lerobot_actions(&p, chunk, out);
    return 0;
}
