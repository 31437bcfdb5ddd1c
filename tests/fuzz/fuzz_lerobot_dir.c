/* fuzz_lerobot_dir.c — libFuzzer target for a LeRobot policy directory as the policy loads it: config.json's features,
 * policy_preprocessor.json / policy_postprocessor.json and the normaliser stats files they name (safetensors), read
 * by lerobot_pipeline_load; then, with what was loaded, one observation (every non-empty camera as an 8 x 8 RGB
 * image, the state) through lerobot_prepare without a prompt (it stops at the tokens, after images and state), and
 * one zero chunk through lerobot_actions. The model
 * the pipeline is checked against comes from the same config.json (lerobot_config + config_finish), as when a policy
 * loads, or is the tiny π0 when that config does not parse. Input: the directory as records (fuzz_dir.h). It may
 * fail, never crash, leak or read out of bounds. Seeds: tests/fuzz/seeds_lerobot_dir (tests/fuzz/make_seed_lerobot_dir.py,
 * from tests/lerobot_check.py's writers). With PI0_FUZZ_VERBOSE=1 each input's result goes to stderr
 * ("lerobot_pipeline_load: OK ..." or the error), which `make fuzz` uses to check that the seeds load. */
#include <stdio.h>
#include <stdlib.h>

#include "config.h"
#include "fuzz_dir.h"
#include "lerobot.h"
#include "util.h"

#define LR_FUZZ_MAX_STATE 128   /* the pipeline's own limit on state and action dims (LR_MAX_DIM) */

static char base[256];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    fuzz_dir_fresh(base, sizeof base, "lerobot");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char dir[300], path[400];
    snprintf(dir, sizeof dir, "%s/policy", base);
    int files = fuzz_dir_write(dir, data, size);
    if (files < 0) return 0;
    pi0_model_info mi = {.pi05 = 0, .action_dim = 32, .action_horizon = 5, .max_token_len = 12, .n_cameras = 3,
                         .image_size = 56, .format = "lerobot", .root = dir};
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len;
    char *text = pi0_read_file(path, &len, 1u << 20);
    pi0_config c;
    if (text && lerobot_config(&c, "fuzz", text, len) == PI0_OK && (c.pi05 = c.pi05 == 1, config_finish(&c, "fuzz")) == PI0_OK) {
        mi.pi05 = c.pi05;
        mi.action_dim = c.action_dim;
        mi.action_horizon = c.action_horizon;
        mi.max_token_len = c.max_token_len;
        mi.n_cameras = c.n_cameras;
        mi.image_size = c.vis.image_size;
    }
    free(text);
    lerobot_pipeline *p = NULL;
    pi0_status st = lerobot_pipeline_load(&p, dir, &mi);
    if (getenv("PI0_FUZZ_VERBOSE")) {
        if (st == PI0_OK) fprintf(stderr, "lerobot_pipeline_load: OK, %d files, %d cameras, state %d, actions %d\n", files, p->N,
                                  p->state_dim, p->action_dim);
        else fprintf(stderr, "lerobot_pipeline_load: %s\n", pi0_last_error());
    }
    if (st == PI0_OK && (size_t)p->N * p->R * p->R <= (1u << 20) && p->L <= 4096) {
        static uint8_t pixels[8 * 8 * 3];
        static float state_in[LR_FUZZ_MAX_STATE];
        pi0_array a[17];
        int n = 0;
        for (int i = 0; i < p->N && i < 16; i++)
            if (strncmp(p->cams[i], "observation.images.empty_camera_", 32))
                a[n++] = (pi0_array){.key = p->cams[i], .dtype = PI0_DT_U8, .ndim = 3, .shape = {8, 8, 3}, .data = pixels};
        if (p->state_dim <= LR_FUZZ_MAX_STATE)
            a[n++] = (pi0_array){.key = "observation.state", .dtype = PI0_DT_F32, .ndim = 1, .shape = {p->state_dim},
                                 .data = state_in};
        pi0_observation obs = {.arrays = a, .n_arrays = n};
        float *images = malloc((size_t)p->N * p->R * p->R * 3 * sizeof(float) + 1), *state = calloc((size_t)p->A + 1, sizeof(float));
        uint8_t *masks = malloc((size_t)p->N + 1), *tmask = malloc((size_t)p->L + 1);
        int32_t *tokens = malloc(((size_t)p->L + 1) * sizeof(int32_t));
        if (images && state && masks && tmask && tokens)   /* no prompt: it fails at the tokens, after images and state */
            lerobot_prepare(p, NULL, &obs, NULL, images, masks, state, tokens, tmask);
        /* the loaded action stats on a zero chunk, buffers as the API says: chunk (H, A), out (n_action_steps, action_dim) */
        float *chunk = calloc((size_t)p->H * p->A + 1, sizeof(float));
        double *out = malloc(((size_t)p->n_action_steps * p->action_dim + 1) * sizeof(double));
        if (chunk && out) lerobot_actions(p, chunk, out);
        free(chunk);
        free(out);
        free(images); free(state); free(masks); free(tmask); free(tokens);
    }
    lerobot_pipeline_free(p);
    fuzz_dir_remove(dir);
    return 0;
}
