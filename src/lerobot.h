/* lerobot.h — LeRobot's π0 / π0.5 policy directories (what PI0Policy / PI05Policy.save_pretrained writes):
 * config.json with LeRobot's fields ("type": "pi0" | "pi05", chunk_size, tokenizer_max_length, max_action_dim,
 * image_resolution, ...) and model.safetensors under openpi's PyTorch names with a "model." prefix. This file maps
 * both onto the engine's config and tensor names, as LeRobot's from_pretrained does (docs/checkpoints.md,
 * "LeRobot"), and refuses the options the engine does not implement. The second half is LeRobot's policy pipeline
 * (lerobot_pipeline.c): its processor files (policy_preprocessor.json / policy_postprocessor.json and the normaliser
 * stats they name) and what PI0Policy / PI05Policy do around the model (cameras, resize, state padding, prompt,
 * action slicing), for pi0_policy.c. */
#ifndef PI0_LEROBOT_H
#define PI0_LEROBOT_H

#include <stddef.h>

#include <stdint.h>

#include "config.h"
#include "safetensors.h"

/* 1 when the config.json text is LeRobot's ("type" is a string), else 0. */
int lerobot_is_config(const char *json, size_t len);
/* Parses LeRobot's config.json into cfg (pi05 from "type"); refuses unknown types and unsupported options, naming
 * the field. The engine's explicit-dimension blocks ("vision", "paligemma", "action_expert") are honoured too. */
pi0_status lerobot_config(pi0_config *cfg, const char *label, const char *json, size_t len);
/* Renames f's tensors as LeRobot's from_pretrained does: "model." prefix removed; unprefixed time_mlp_* <->
 * action_time_mlp_* by policy type. A name left twice is an error. */
pi0_status lerobot_fix_keys(st_file *f, int pi05);

/* ---- LeRobot's policy pipeline (lerobot_pipeline.c) ---- */
typedef enum { LR_IDENTITY = 0, LR_MEAN_STD, LR_MIN_MAX, LR_QUANTILES, LR_QUANTILE10 } lr_mode;

typedef struct {
    lr_mode mode;      /* LR_IDENTITY also when the normaliser has no stats for the feature (LeRobot passes it through) */
    int n;             /* values: the feature's dimension, 3 channels for a camera */
    float *lo, *hi;    /* MEAN_STD: mean, std; MIN_MAX: min, max; QUANTILES: q01, q99; QUANTILE10: q10, q90 */
    double eps;        /* the step's eps (1e-8) */
} lr_norm;

typedef struct {
    int pi05, H, A, N, R, L;        /* the model's sizes */
    char **cams;                    /* N camera keys: VISUAL input_features in order, then the empty cameras */
    int state_dim, action_dim;      /* input_features observation.state / output_features action shape[0] */
    int n_action_steps, num_steps;  /* chunk rows returned (select_action's queue), denoising steps */
    lr_norm state, action;          /* the preprocessor's state stats, the postprocessor's action stats */
    char *action_stats;             /* the postprocessor's stats file (for messages), or NULL */
    int newline, state_prompt;      /* π0: pi0_new_line_processor; π0.5: pi05_prepare_state_tokenizer_processor_step */
    int n_rename;
    char **ren_from, **ren_to;      /* rename_observations_processor's rename_map */
    int rtc_horizon;                /* config.json's rtc_config (LeRobot's RTCConfig): real-time chunking's defaults */
    pi0_rtc_schedule rtc_schedule;
    float rtc_max_weight;
    char *metadata;                 /* what the server sends first */
    char *summary;                  /* what `pi0 info` prints */
} lerobot_pipeline;

/* Reads DIR/config.json's features and the processor files (errors name the file, step and field). mi: the model
 * loaded from DIR. */
pi0_status lerobot_pipeline_load(lerobot_pipeline **out, const char *dir, const pi0_model_info *mi);
void lerobot_pipeline_free(lerobot_pipeline *p);
/* One observation -> model inputs: images (N, R, R, 3) in [-1, 1], masks (N), state (A) float32, tokens / token_mask
 * (L). Keys are LeRobot's ("observation.images.<cam>", "observation.state"; '/' read as '.'); prompt = the task. */
pi0_status lerobot_prepare(const lerobot_pipeline *p, const pi0_tokenizer *tok, const pi0_observation *obs,
                           const char *default_prompt, float *images, uint8_t *masks, float *state, int32_t *tokens,
                           uint8_t *token_mask);
/* The model's chunk (H, A) float32 -> out (n_action_steps, action_dim) float64: sliced, then unnormalised in float32.
 * A value that overflows to a non-finite one is an error naming the stats file, step and dimension. */
pi0_status lerobot_actions(const lerobot_pipeline *p, const float *chunk, double *out);
/* Resize with padding as LeRobot's model does it (resize_with_pad_torch: bilinear, align_corners=False, no antialias,
 * centred zero padding), bit for bit as PyTorch 2.7-2.11 computes it in float32; src / dst are float32 CHW planes of
 * 3 channels, dst size x size. Clamped to [0, 1] where resized. */
pi0_status lerobot_resize_with_pad(const float *src, int h, int w, int size, float *dst);

#endif
