/* policy.h — the policy handle's insides (struct pi0_policy, struct pi0_prepared), shared by the two files that
 * implement include/pi0.h's policy API: pi0_policy.c (life cycle, openpi's π0 / π0.5 pipeline, LeRobot directories)
 * and fast_policy.c (what differs for π0-FAST: cameras, prompt, decoding, action tokens; docs/fast.md 5). Nothing
 * else includes it. Letters: B batch, N cameras, R image side, L prompt length, H horizon, A model action dim, D the
 * robot's action dim, S decoding steps. */
#ifndef PI0_POLICY_H
#define PI0_POLICY_H

#include <stdint.h>

#include "fast_tokenizer.h"
#include "lerobot.h"
#include "norm_stats.h"
#include "openpi_config.h"
#include "pi0.h"
#include "robot.h"
#include "util.h"

/* The most action dims (the model's action_dim, which the state is padded to) that a π0 / π0.5 policy takes: openpi's
 * and LeRobot's use 32. The model alone (pi0_model_*) is not limited by this, nor is π0-FAST, whose state is not
 * padded. */
#define PI0_POLICY_MAX_A 32
/* π0-FAST: the most tokens one observation decodes, openpi's sample_actions default (its served policies pass no
 * other); it sizes the session's KV cache. */
#define FAST_POLICY_STEPS 256

struct pi0_policy {
    pi0_model *model;
    pi0_session *session;
    pi0_tokenizer *tok;
    norm_stats ns;
    pi0_robot robot;
    const openpi_config *cfg;     /* NULL when loaded by robot name */
    lerobot_pipeline *lr;        /* a LeRobot policy directory: its own features and processors instead of a robot */
    char *asset_id, *default_prompt;
    const char *metadata;
    int pi05, quantile, delta, discrete, max_batch;
    int H, A, N, R, L, D;        /* horizon, model action dim, cameras, image size, prompt length, robot dims */
    /* batch buffers for pi0_infer, sized for max_batch at load */
    float *images, *state, *noise, *actions;
    float *rtc_prev, *rtc_w, *rtc_max;   /* the batch's real-time chunking inputs (B x H x A, B x H, B) */
    uint8_t *rtc_exact;                  /* [B] 1 = the sample's guidance is exact (a batch mixing both forms) */
    int last_batch;              /* batch elements of the last run (pi0_policy_chunk) */
    int *slot;                   /* the last run's model slot of each batch element (pi0_policy_run's order) */
    int T;                       /* prefix rows per valid image ((image_size / patch_size)^2) */
    long long *order;            /* scratch of pi0_policy_run: (prefix length, element) pairs, sorted */
    uint8_t *image_masks, *token_mask;
    int32_t *tokens;
    double *chunk, *state_rt;    /* (H, A) and (max(A, ROBOT_MAX_STATE)) float64 scratch */
    pi0_rng rng;                 /* noise of observations without noise and seed */
    /* π0-FAST (fast_policy.c) */
    int fast;                    /* 1 = a π0-FAST checkpoint */
    fast_tokenizer *fast_tok;
    int32_t *ar;                 /* (B, L) the prompt's token_ar_mask: all 0 at inference */
    int32_t *out_tokens;         /* (B, S) the generated tokens */
    int quiet;                   /* no warning on stderr (pi0_model_params.quiet) */
    int warned;                  /* the zero-chunk warning was given (once per policy) */
    int warming;                 /* a warm-up runs: its chunks are neither warned about nor counted */
};

struct pi0_prepared {
    const pi0_policy *owner;
    uint8_t *images;             /* (N, R, R, 3) resized uint8 */
    float *fimages;              /* LeRobot: (N, R, R, 3) model input in [-1, 1] (images NULL) */
    uint8_t masks[16];
    double state[PI0_POLICY_MAX_A > ROBOT_MAX_STATE ? PI0_POLICY_MAX_A : ROBOT_MAX_STATE];   /* normalised, zero-padded to A (float64) */
    int n_state;                 /* the robot's state values in state (π0-FAST reads no padding) */
    int32_t *tokens;             /* (L) */
    uint8_t *token_mask;         /* (L) */
    float *noise;                /* (H, A) or NULL */
    uint64_t seed;
    float *rtc_prev, *rtc_w;     /* real-time chunking: leftover (H, A) zero-padded and prefix weights (H), or NULL */
    float rtc_max;
    int rtc_exact;               /* 1 = PI0_RTC_EXACT was asked for */
};

double policy_now_ms(void);
/* openpi's output transforms of batch element b's chunk, in p->chunk (float64; x_f32: it holds float32 model outputs):
 * Unnormalize, with the state's stats over its first n_state values, then the robot's AbsoluteActions and slice into
 * out (H x D); a non-finite result is refused. */
pi0_status policy_output(pi0_policy *p, int b, int x_f32, const double *state, int n_state, double *out);

/* ---- π0-FAST (fast_policy.c) ---- */
/* At load, once the PaliGemma tokenizer is loaded: the checks that only π0-FAST needs (the chunk's size, the
 * tokenizer's vocabulary against the model's), its FAST tokenizer (path: the processor's directory or its
 * tokenizer.json) and the decoding buffers. */
pi0_status fast_policy_load(pi0_policy *p, const char *path, const char *tokenizer_path, const pi0_model_info *mi);
void fast_policy_free(pi0_policy *p);
/* The model's camera slots and masks of one observation (openpi's PI0_FAST branches of the robot transforms). */
pi0_status fast_policy_cameras(const pi0_policy *p, const robot_input *in, pi0_prepared *x);
/* FASTTokenizer's prompt of the normalised, unpadded state; refuses what π0-FAST cannot take (noise, real-time
 * chunking). */
pi0_status fast_policy_prompt(const pi0_policy *p, const pi0_observation *obs, const char *prompt, pi0_prepared *x);
/* pi0_policy_run for π0-FAST (arguments already checked): decode, extract the actions, output transforms. */
pi0_status fast_policy_run(pi0_policy *p, pi0_prepared *const *batch, int n, double *actions, pi0_policy_timing *timing);

#endif
