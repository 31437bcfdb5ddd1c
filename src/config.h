/* config.h — model configuration: the named variants (docs/model.md 1.2-1.4) and config.json parsing with the
 * explicit-dimension extension of docs/formats.md 1. Every size in the engine comes from here;
 * no other file hard-codes 2048 or 4304. The tensor table that maps checkpoint keys to weights
 * lives in weights.c, sized from this struct. */
#ifndef PI0_CONFIG_H
#define PI0_CONFIG_H

#include "pi0.h"

typedef struct {
    int width, depth, mlp_dim, num_heads, patch_size, image_size;
} pi0_vision_cfg;

typedef struct {
    int width, depth, mlp_dim, num_heads, num_kv_heads, head_dim, vocab_size;
} pi0_gemma_cfg;

typedef struct {
    int pi05;               /* 1 = π0.5; -1 = not stated in config.json (decided from the tensors) */
    int fast;               /* 1 = π0-FAST (PaliGemma alone, decoding action tokens: docs/fast.md); -1 = not stated */
    int action_dim;         /* A (32) */
    int action_horizon;     /* H */
    int max_token_len;      /* 0 = default for the model type (48 / 200) */
    int n_cameras;          /* 3 image slots: base_0_rgb, left_wrist_0_rgb, right_wrist_0_rgb */
    int lerobot_time;       /* 1 = LeRobot's denoising times t_k = fp32(1 - k / steps) (computed in double); 0 = openpi's
                               t accumulated in fp32 (1, 0.9, 0.79999995, ...). Set for LeRobot policy directories */
    pi0_vision_cfg vis;     /* SigLIP */
    pi0_gemma_cfg lm;       /* PaliGemma Gemma (expert 0) */
    pi0_gemma_cfg ex;       /* action expert (expert 1); vocab_size unused */
    char paligemma_variant[32], action_expert_variant[32], precision[16];
} pi0_config;

/* Fills cfg for "pi0", "pi05", "pi0-fast", or their "tiny-" forms (gen-checkpoint and tests). */
pi0_status config_from_variant(pi0_config *cfg, const char *name);
/* Parses DIR/config.json (path given) into cfg. pi05 may stay -1. */
pi0_status config_load(pi0_config *cfg, const char *path);
/* Same from a buffer (fuzz target); label names the source in messages. */
pi0_status config_parse(pi0_config *cfg, const char *label, const char *json, size_t len);
/* Resolves defaults that depend on pi05 and checks consistency (shared depth/heads/head_dim, ...). */
pi0_status config_finish(pi0_config *cfg, const char *label);
/* config.json text (caller frees) with the named variants and every explicit dimension. */
char *config_to_json(const pi0_config *cfg);

/* Derived sizes. */
static inline int cfg_tokens_per_image(const pi0_config *c) {
    int g = c->vis.image_size / c->vis.patch_size;
    return g * g;
}
static inline int cfg_prefix_len(const pi0_config *c) {   /* P, uncompacted */
    return c->n_cameras * cfg_tokens_per_image(c) + c->max_token_len;
}
static inline int cfg_suffix_len(const pi0_config *c) {   /* S: π0 has the state token */
    return c->action_horizon + (c->pi05 ? 0 : 1);
}
/* The name of the model family ("π0", "π0.5", "π0-FAST"), for messages. */
static inline const char *cfg_model_name(const pi0_config *c) {
    return c->fast > 0 ? "π0-FAST" : c->pi05 > 0 ? "π0.5" : "π0";
}

#endif
