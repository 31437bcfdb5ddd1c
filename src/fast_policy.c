/* fast_policy.c — π0-FAST behind the policy API (docs/fast.md 5): what openpi's served policy does around
 * Pi0FAST.sample_actions for a pi0_fast_* config, where it differs from π0: the PI0_FAST branches of the robot
 * transforms (camera slots, no masked camera), FASTTokenizer's prompt of the unpadded state (fast_prompt.c), greedy
 * decoding of up to 256 tokens (pi0_generate), ExtractFASTActions (fast_tokenizer.c), then the same Unnormalize and
 * robot output transforms as π0. Owns the policy's FAST tokenizer and decoding buffers; the life cycle, the norm stats
 * and the robot's request arrays are pi0_policy.c's and robot.c's. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "policy.h"

/* PaliGemma's end token, at which openpi's decoding of one observation stops (docs/model.md 7.3) */
enum { END_TOKEN = 1 };

/* The FAST processor's directory: path itself, or the directory of a tokenizer.json. Caller frees. */
static pi0_status fast_dir(const char *path, char **dir) {
    struct stat sb;
    *dir = NULL;
    if (stat(path, &sb) != 0)
        return pi0_fail(PI0_ERR_IO, "FAST tokenizer %s: %s (expected the directory of Hugging Face's "
                        "physical-intelligence/fast, holding tokenizer.json and processor_config.json)", path,
                        strerror(errno));
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    if (S_ISDIR(sb.st_mode)) *dir = strdup(path);
    else if (!strcmp(base, "tokenizer.json"))
        *dir = slash == path ? strdup("/") : slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
    else
        return pi0_fail(PI0_ERR_ARG, "FAST tokenizer %s: expected the processor's directory or its tokenizer.json",
                        path);
    return *dir ? PI0_OK : pi0_fail(PI0_ERR_NOMEM, "out of memory");
}

pi0_status fast_policy_load(pi0_policy *p, const char *path, const char *tokenizer_path, const pi0_model_info *mi) {
    /* openpi maps FAST ids to PaliGemma ids counting back from the end of the SentencePiece vocabulary: with another
     * vocabulary than the model's the ids would name other pieces, and generated ids could lie outside it */
    int v = tokenizer_vocab_size(p->tok);
    if (v != mi->vocab_size)
        return pi0_fail(PI0_ERR_ARG, "tokenizer %s has %d pieces, the π0-FAST model's vocabulary %d: its action tokens are "
                        "the last ids of PaliGemma's vocabulary, so the two must be the same", tokenizer_path, v,
                        mi->vocab_size);
    if ((int64_t)p->H * p->A > (1 << 20))
        return pi0_fail(PI0_ERR_ARG, "a chunk of %d x %d actions: at most 1048576 values decode from FAST tokens", p->H,
                        p->A);
    char *dir;
    pi0_status st = fast_dir(path, &dir);
    if (st == PI0_OK) st = fast_tokenizer_load(&p->fast_tok, dir);
    free(dir);
    if (st != PI0_OK) return st;
    size_t B = (size_t)p->max_batch;
    p->ar = pi0_calloc(B * p->L, sizeof(int32_t), "policy batch token_ar_mask");
    p->out_tokens = pi0_malloc(B * FAST_POLICY_STEPS * sizeof(int32_t), "policy batch output tokens");
    return p->ar && p->out_tokens ? PI0_OK : PI0_ERR_NOMEM;
}

void fast_policy_free(pi0_policy *p) {
    fast_tokenizer_free(p->fast_tok);
    free(p->ar);
    free(p->out_tokens);
}

/* openpi's robot transforms for ModelType.PI0_FAST: DROID's cameras are base_0_rgb (the exterior camera), base_1_rgb
 * (zeros) and wrist_0_rgb; LIBERO's base_0_rgb, left_wrist_0_rgb and right_wrist_0_rgb (zeros), as for π0; neither
 * masks its zero image ("We don't mask out padding images for FAST models"). ALOHA's transform has no such branch: its
 * absent cameras stay masked. (These are also the names' sorted order, in which jax.tree.map hands openpi's model the
 * images.) */
pi0_status fast_policy_cameras(const pi0_policy *p, const robot_input *in, pi0_prepared *x) {
    static const int DROID[ROBOT_CAMS] = {0, -1, 1}, SAME[ROBOT_CAMS] = {0, 1, 2};
    const int *src = p->robot == PI0_ROBOT_DROID ? DROID : SAME;
    size_t img = (size_t)p->R * p->R * 3;
    for (int c = 0; c < ROBOT_CAMS; c++) {
        const int k = src[c];
        const uint8_t *im = k >= 0 ? in->img[k] : NULL;
        x->masks[c] = p->robot == PI0_ROBOT_ALOHA ? im != NULL : 1;
        pi0_status st = im ? pi0_image_resize_with_pad(im, in->h[k], in->w[k], p->R, x->images + c * img) : PI0_OK;
        if (st != PI0_OK) return st;
    }
    return PI0_OK;
}

pi0_status fast_policy_prompt(const pi0_policy *p, const pi0_observation *obs, const char *prompt, pi0_prepared *x) {
    if (obs->noise)   /* openpi's Policy.infer passes noise on to sample_actions, which π0-FAST's does not take */
        return pi0_fail(PI0_ERR_ARG, "observation noise: a π0-FAST policy decodes tokens and takes no noise");
    if (obs->rtc && (obs->rtc->prev || obs->rtc->n_prev))
        return pi0_fail(PI0_ERR_ARG, "real-time chunking guides π0 / π0.5's flow matching: a π0-FAST policy decodes "
                        "tokens");
    uint8_t *ar = pi0_malloc((size_t)p->L, "prompt ar mask");
    if (!ar) return PI0_ERR_NOMEM;
    pi0_status st = fast_tokenizer_prompt(p->tok, prompt, x->state, x->n_state, p->L, x->tokens, x->token_mask, ar,
                                          NULL);
    free(ar);
    if (st != PI0_OK) pi0_error_prefix("prompt");
    return st;
}

pi0_status fast_policy_run(pi0_policy *p, pi0_prepared *const *batch, int n, double *actions, pi0_policy_timing *timing) {
    size_t img = (size_t)p->N * p->R * p->R * 3, ha = (size_t)p->H * p->A, L = (size_t)p->L, S = FAST_POLICY_STEPS;
    for (int b = 0; b < n; b++) {   /* each sample decodes on its own: the batch keeps its order */
        const pi0_prepared *x = batch[b];
        p->slot[b] = b;
        pi0_image_to_model(x->images, img, p->images + b * img);
        memcpy(p->image_masks + (size_t)b * p->N, x->masks, (size_t)p->N);
        memcpy(p->tokens + b * L, x->tokens, L * sizeof(int32_t));
        memcpy(p->token_mask + b * L, x->token_mask, L);
    }
    pi0_inputs in = {.batch = n, .images = p->images, .image_masks = p->image_masks, .tokens = p->tokens,
                     .token_mask = p->token_mask, .n_tokens = p->L, .token_ar_mask = p->ar};
    double m0 = policy_now_ms();
    pi0_status st = pi0_generate(p->session, &in, NULL, p->out_tokens, NULL);   /* greedy, openpi's 256 steps */
    double m1 = policy_now_ms();
    p->last_batch = st == PI0_OK ? n : 0;
    if (st != PI0_OK) return st;
    int zeros = 0;
    for (int b = 0; b < n; b++) {
        int32_t *row = p->out_tokens + b * S;
        /* openpi serves one observation at a time: its decoding stops at the row's end token and leaves the later
         * steps 0, while a row of a batch decodes on until every row has ended */
        size_t e = 0;
        while (e < S && row[e] != END_TOKEN) e++;
        for (size_t i = e + 1; i < S; i++) row[i] = 0;
        fast_outcome oc;
        if ((st = fast_tokenizer_extract_actions(p->fast_tok, p->tok, row, S, p->H, p->A, p->chunk, &oc)) != PI0_OK) {
            pi0_error_prefix("batch element %d: the generated tokens", b);
            return st;
        }
        if (oc != FAST_DECODED && !p->warming) {
            zeros++;
            if (!p->warned && !p->quiet) {
                fprintf(stderr, "pi0: warning: π0-FAST: %s; the chunk is openpi's zeros, unnormalised (warned once per "
                        "policy; pi0_policy_timing.zero_chunks counts them)\n", fast_outcome_str(oc));
                p->warned = 1;
            }
        }
        for (size_t i = 0; i < ha; i++) p->actions[b * ha + i] = (float)p->chunk[i];   /* pi0_policy_chunk's */
        /* Unnormalize (the float64 chunk and the unpadded state), then the robot's AbsoluteActions and slice */
        st = policy_output(p, b, 0, batch[b]->state, batch[b]->n_state, actions + (size_t)b * p->H * p->D);
        if (st != PI0_OK) return st;
    }
    if (timing) *timing = (pi0_policy_timing){.model_ms = m1 - m0, .zero_chunks = zeros};
    return PI0_OK;
}
