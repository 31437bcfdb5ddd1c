/* fuzz_lerobot.c — libFuzzer target for LeRobot's untrusted inputs: config.json (lerobot_config) and observations
 * as a robot sends them to a LeRobot policy (lerobot_prepare on arrays whose keys, dtypes, shapes and bytes come
 * from the input, against a fixed pipeline: 2 cameras + an empty one, an 8-value MEAN_STD state, a rename map).
 * The harness keeps the API contract (data holds prod(shape) * itemsize bytes); no prompt, so the tokenizer is not
 * reached. Everything else is arbitrary and must give an error, never a crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lerobot.h"

static const char *KEYS[] = {"observation.images.top", "observation/images/top", "observation.images.wrist",
                             "observation.state", "observation/state", "observation.images.empty_camera_0",
                             "observation.images.other", "cam", "task"};
static const pi0_dtype DTYPES[] = {PI0_DT_U8, PI0_DT_F32, PI0_DT_F64, PI0_DT_I32, PI0_DT_I64, PI0_DT_BOOL, PI0_DT_F16};

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
    size_t n = (size_t)(data[0] >> 1) % 7, off = 1 + n * 6;
    if (size < off) return 0;
    const uint8_t *pool = data + off;
    size_t left = size - off;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *h = data + 1 + i * 6;
        a[i] = (pi0_array){.key = KEYS[h[0] % 9], .dtype = DTYPES[h[1] % 7], .ndim = h[2] % 5};
        size_t count = 1, item = a[i].dtype == PI0_DT_F16 ? 2 : a[i].dtype == PI0_DT_F64 || a[i].dtype == PI0_DT_I64 ? 8
                              : a[i].dtype == PI0_DT_U8 || a[i].dtype == PI0_DT_BOOL ? 1 : 4;
        for (int d = 0; d < a[i].ndim; d++) {
            a[i].shape[d] = d < 3 ? h[3 + d] % 40 : 3;
            count *= (size_t)a[i].shape[d];
        }
        if (count * item > left) { a[i].ndim = 1; a[i].shape[0] = (int64_t)(left / item); count = left / item; }
        a[i].data = pool;
    }
    pi0_observation obs = {.arrays = a, .n_arrays = (int)n};
    static float images[3 * 16 * 16 * 3], state[32];
    uint8_t masks[3], tmask[8];
    int32_t tokens[8];
    lerobot_prepare(&p, NULL, &obs, NULL, images, masks, state, tokens, tmask);
    float chunk[4 * 32] = {0};
    double out[4 * 7];
    lerobot_actions(&p, chunk, out);
    return 0;
}
