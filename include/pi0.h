/* pi0.h — inference engine for Physical Intelligence's π0, π0.5 and π0-FAST policies (openpi).
 *
 * Usage:
 *     pi0_model *m = NULL; pi0_session *s = NULL;
 *     if (pi0_model_load(&m, "ckpt_dir", NULL) != PI0_OK) { fprintf(stderr, "%s\n", pi0_last_error()); ... }
 *     pi0_session_create(&s, m, &(pi0_session_params){ .max_batch = 1 });
 *     pi0_inputs in = { .batch = 1, .images = img, .image_masks = im, .state = st,
 *                       .tokens = ids, .token_mask = tm, .n_tokens = L, .noise = NULL, .seed = 42 };
 *     float actions[50 * 32];                        // [B, H, A]
 *     pi0_infer(s, &in, actions);
 *     pi0_session_free(s); pi0_model_free(m);
 *
 * Two handles: pi0_model (weights, immutable after load, shareable across threads) and pi0_session
 * (one inference stream with its activations and KV cache; use from one thread at a time).
 * Every fallible function returns pi0_status; pi0_last_error() gives this thread's message.
 * The library never exits or aborts on bad input.
 */
#ifndef PI0_H
#define PI0_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PI0_OK = 0,
    PI0_ERR_ARG,         /* bad argument from the caller */
    PI0_ERR_IO,          /* file missing, unreadable or unwritable */
    PI0_ERR_FORMAT,      /* malformed file contents (safetensors, JSON, ...) */
    PI0_ERR_SHAPE,       /* a tensor or input has the wrong shape or dtype */
    PI0_ERR_NOMEM,       /* allocation failed */
    PI0_ERR_CUDA,        /* CUDA runtime or library failure */
    PI0_ERR_UNSUPPORTED  /* valid request this build cannot serve (e.g. no CUDA backend) */
} pi0_status;

/* Static name of a status ("PI0_ERR_SHAPE"). */
const char *pi0_status_str(pi0_status st);

/* The layout version of this header's structures and enums, raised whenever one changes: bindings that restate the
 * structures (the Python package) compare it with the library's before they use it. */
#define PI0_ABI_VERSION 4
int pi0_abi_version(void);
/* Detail message of the last failure on this thread ("" if none). Valid until the next call. */
const char *pi0_last_error(void);

typedef enum { PI0_BACKEND_DEFAULT = 0, PI0_BACKEND_CPU, PI0_BACKEND_CUDA } pi0_backend_kind;

typedef enum {
    PI0_DT_F32 = 0, PI0_DT_F16, PI0_DT_BF16, PI0_DT_I32, PI0_DT_I64, PI0_DT_U8, PI0_DT_BOOL, PI0_DT_F64,
    PI0_DT_COUNT
} pi0_dtype;

typedef struct pi0_model pi0_model;
typedef struct pi0_session pi0_session;

/* The precision of the large products (docs/precision.md): bf16 weights and activations, or 8-bit codes with one
 * scale per weight row (made at load from the checkpoint) and one per activation row (from the live values): integers
 * with the products accumulated in int32, or FP8 (E4M3, the vision and prefix stages only, GPUs from sm_89 on) with
 * the products accumulated in fp32. Attention, softmax, norms, residuals and RoPE stay as they are. */
typedef enum { PI0_PRECISION_BF16 = 0, PI0_PRECISION_INT8 = 1, PI0_PRECISION_FP8 = 2 } pi0_precision;
/* The stages an 8-bit precision applies to: the vision encoder's, the prefix's (PaliGemma's) and the action expert's
 * projections. */
enum { PI0_STAGE_VISION = 1, PI0_STAGE_PREFIX = 2, PI0_STAGE_EXPERT = 4, PI0_STAGE_ALL = 7 };

typedef struct {
    pi0_backend_kind backend;/* 0 = CPU; PI0_BACKEND_CUDA needs a build with CUDA (nvcc found by make) */
    int n_threads;         /* CPU threads; 0 = all cores */
    int device;            /* CUDA device index */
    int quiet;             /* 1 = no warnings on stderr (unknown tensors etc.) */
    int action_horizon;    /* overrides config.json's H (weights do not depend on it); 0 = keep */
    int max_token_len;     /* overrides the prompt length limit; 0 = keep */
    pi0_precision precision;   /* 0 = bf16 */
    unsigned quant_stages; /* PI0_STAGE_* bits that run in `precision`; 0 = all it has a path for (fp8: vision and
                              prefix; ignored for bf16) */
    int action_dim;        /* π0-FAST: overrides the action dim its tokens decode to (openpi's config sets it, the weights
                              do not); 0 = keep. Ignored by π0 / π0.5, whose weights fix it */
} pi0_model_params;

/* Whether `backend` can run here, without loading anything: PI0_OK for the CPU; for CUDA, PI0_ERR_UNSUPPORTED when
 * this build has no CUDA backend, else an error unless device exists, has compute capability 8.0 or later and this
 * build carries code for it (Hopper runs its own kernels, other GPUs the portable path; README, GPU).
 * Cheap next to a model load: tools call it before expensive work (generating a checkpoint, say). */
pi0_status pi0_backend_check(pi0_backend_kind backend, int device);

/* Loads a checkpoint directory and validates every tensor. Two formats (docs/checkpoints.md):
 * - openpi's PyTorch conversion: DIR/model.safetensors + DIR/config.json (BF16/F16/F32 weights);
 * - LeRobot's π0 / π0.5 policy directory (config.json with "type": "pi0" | "pi05", keys under "model."): the model
 *   only, so far (LeRobot's processor pipeline, its normaliser stats and prompt steps, is not read yet);
 * - openpi's Orbax checkpoints as published and as its JAX trainer writes them: DIR/params/ (OCDBT or plain
 *   zarr), DIR itself being params/, or a training run DIR/<step>/ (the highest step). Every dimension comes
 *   from the parameter shapes; the action horizon (weights do not fix it) is 50 and the prompt length 48 / 200
 *   (π0 / π0.5) unless params set them, as in openpi's Pi0Config.
 * params may be NULL. On failure *out is NULL. */
pi0_status pi0_model_load(pi0_model **out, const char *dir, const pi0_model_params *params);
void pi0_model_free(pi0_model *m);

typedef struct {
    int pi05;            /* 1 = π0.5 (adaRMS expert, state in the prompt) */
    int action_dim;      /* A: 32 for openpi checkpoints (π0-FAST: the chunk width its tokens decode to) */
    int action_horizon;  /* H */
    int max_token_len;   /* L of the tokenizer: 48 (π0), 200 (π0.5) unless config.json overrides */
    int n_cameras;       /* N: 3 (base_0_rgb, left_wrist_0_rgb, right_wrist_0_rgb) */
    int image_size;      /* R: 224 */
    int vocab_size;
    int64_t n_params;    /* parameters used by inference (orphan lm_head excluded) */
    const char *format;  /* "safetensors" (openpi's PyTorch conversion), "lerobot", "orbax-ocdbt" or "orbax-zarr" */
    const char *root;    /* the checkpoint directory: it holds assets/<asset_id>/norm_stats.json */
    double load_s;       /* Orbax: seconds spent reading, decompressing and re-laying out the parameters */
    pi0_precision precision;   /* of the stages in quant_stages (the others run in bf16) */
    unsigned quant_stages;     /* PI0_STAGE_* bits; 0 with bf16 */
    struct { int width, depth, mlp_dim, num_heads, patch_size; } vision;
    struct { int width, depth, mlp_dim, num_heads, num_kv_heads, head_dim; } paligemma, action_expert;
    int fast;            /* 1 = π0-FAST: PaliGemma alone, decoding action tokens (pi0_generate); action_expert is 0 */
} pi0_model_info;
void pi0_model_get_info(const pi0_model *m, pi0_model_info *info);

/* Named fp32 intermediate ("vision.out", "prefix.k.03", "denoise.v.07"), shape in row-major order.
 * Called from pi0_infer on the calling thread; data valid only during the call. */
typedef void (*pi0_dump_fn)(void *user, const char *name, const float *data, int ndim, const int64_t *shape);

typedef struct {
    int max_batch;       /* B the session is sized for; 0 = 1 */
    int num_steps;       /* flow-matching steps; 0 = 10 */
    pi0_dump_fn dump;    /* optional intermediates callback (slows inference) */
    void *dump_user;
    int max_decoding_steps; /* π0-FAST: the most tokens one pi0_generate decodes (sizes the KV cache); 0 = 256 */
} pi0_session_params;

pi0_status pi0_session_create(pi0_session **out, const pi0_model *m, const pi0_session_params *params);
void pi0_session_free(pi0_session *s);

/* Real-time chunking's guidance (Black et al. 2025, "Real-Time Execution of Action Chunking Flow Policies"), in the
 * form LeRobot computes it (policies/rtc/modeling_rtc.py: v_t is evaluated before x_t requires a gradient, so the
 * correction is the weighted error itself): at each step with time t (1 -> 0), x1 = x_t - t v, err = (Y - x1) w,
 * v <- v - min(c / r^2, max_weight) err with tau = 1 - t, c = (1 - tau) / tau, 1 / r^2 = ((1 - tau)^2 + tau^2) /
 * (1 - tau)^2 (infinities become max_weight). docs/model.md 3.11. */
/* PI0_RTC_EXACT is the paper's guidance (its Algorithm 1, the Kinetix code's jax.vjp): the correction is
 * err^T dx1/dx_t = err - t (dv/dx_t)^T err, the vector-Jacobian product through the action expert (the prefix's
 * keys and values held constant), at the cost of one transpose pass of the expert per step. */
typedef enum { PI0_RTC_OFF = 0, PI0_RTC_LEROBOT = 1, PI0_RTC_EXACT = 2 } pi0_rtc_mode;
typedef enum { PI0_RTC_ZEROS = 0, PI0_RTC_ONES, PI0_RTC_LINEAR, PI0_RTC_EXP } pi0_rtc_schedule;
/* LeRobot's prefix weights (RTCProcessor.get_prefix_weights) of H action rows: 1 for the first `delay` rows, then by
 * the schedule down to 0 at row `horizon` (clamped to leftover, the rows the previous chunk left), 0 after. */
pi0_status pi0_rtc_prefix_weights(pi0_rtc_schedule schedule, int delay, int horizon, int leftover, int H, float *w);

/* Model-level inputs (docs/formats.md 2). All arrays are caller-owned and read during the call only. */
typedef struct {
    int batch;                   /* B, 1..max_batch */
    const float *images;         /* [B, N, R, R, 3] HWC RGB in [-1, 1] */
    const uint8_t *image_masks;  /* [B, N], 1 = camera present; NULL = all present */
    const float *state;          /* [B, A] normalised, zero-padded (ignored by π0.5) */
    const int32_t *tokens;       /* [B, n_tokens] prompt ids */
    const uint8_t *token_mask;   /* [B, n_tokens], 1 = real token */
    int n_tokens;                /* 1..max_token_len */
    const float *noise;          /* [B, H, A] start x(t=1); NULL = N(0,1) draw from seed */
    uint64_t seed;
    /* Real-time chunking (RTC): guidance of every denoising step towards the previous chunk's leftover. */
    pi0_rtc_mode rtc;            /* PI0_RTC_OFF (default), PI0_RTC_LEROBOT, PI0_RTC_EXACT */
    const float *rtc_prev;       /* [B, H, A] the previous chunk's leftover in model space (normalised), zero-padded */
    const float *rtc_weights;    /* [B, H] the prefix weight of each action row (pi0_rtc_prefix_weights), in [0, 1] */
    const float *rtc_max_weights;/* [B] the guidance weight's cap per sample (LeRobot's max_guidance_weight), > 0 */
    const uint8_t *rtc_exact;    /* [B] with PI0_RTC_EXACT: 1 = the sample's guidance is exact, 0 = LeRobot's form
                                    (a batch mixing both); NULL = every sample exact. Refused with other modes. */
    const int32_t *token_ar_mask;/* π0-FAST: [B, n_tokens], 0 or 1: openpi's prefix-LM mask (a token with 1 starts a
                                    block that earlier tokens cannot see); required there, all 0 at inference. Unused
                                    by π0 / π0.5, whose prefix is one block. */
} pi0_inputs;

/* Runs the whole inference; writes actions [B, H, A] (normalised action space). */
pi0_status pi0_infer(pi0_session *s, const pi0_inputs *in, float *actions);

/* π0-FAST (pi0_model_info.fast): the action tokens, as openpi's Pi0FAST.sample_actions returns them (docs/model.md 7).
 * in holds images, image_masks, tokens, token_mask and token_ar_mask (state and noise are not read: the state is in
 * the prompt, docs/fast.md). tokens [B, max_decoding_steps] gets each decoded id, 0 after the last step run; decoding
 * stops at the first step where every sample's token is the end token (id 1), so a sample that ended earlier keeps
 * decoding. *steps (may be NULL) gets the steps run. pi0_infer refuses a π0-FAST session. */
typedef struct {
    int max_decoding_steps;  /* 1..the session's max_decoding_steps; 0 = the session's */
    float temperature;       /* 0 = greedy (openpi's default); > 0 = sampled, reproducibly from in->seed (not JAX's
                                random stream: docs/model.md 7.4) */
} pi0_decode_params;
pi0_status pi0_generate(pi0_session *s, const pi0_inputs *in, const pi0_decode_params *p, int32_t *tokens, int *steps);
/* Host memory for pi0_inputs (above all the images): page-locked when a CUDA device is present, so that
 * pi0_infer's copies to the GPU run at bus speed without a staging copy (the driver stages pageable memory
 * first: bench/RESULTS.md L28), and mapped for the GPU, whose kernels read the images from it in place where the GPU
 * shares the host's memory (a Jetson: docs/jetson.md); plain malloc otherwise. NULL when out of memory. Free with
 * pi0_host_free (NULL is a no-op). Thread-safe. */
void *pi0_host_alloc(size_t bytes);
/* The same for the backend of session s: page-locked for a CUDA session, plain for a CPU one (no GPU context is
 * made for it). Free with pi0_host_free. */
void *pi0_session_host_alloc(const pi0_session *s, size_t bytes);
void pi0_host_free(void *p);

/* Wall-clock time of the last pi0_infer on this session, in milliseconds. The vision/prefill/denoise
 * split is filled when stage timing is on (always on the CPU backend); otherwise it is 0. */
typedef struct {
    double vision_ms, prefill_ms, denoise_ms, total_ms;
} pi0_timing;
void pi0_session_get_timing(const pi0_session *s, pi0_timing *t);
/* 1 = synchronise between stages to time them (on CUDA: no graph, slower); 0 = fastest path. */
void pi0_session_set_stage_timing(pi0_session *s, int on);
/* Name of the backend the session runs on ("cpu", "cuda"). */
const char *pi0_session_backend(const pi0_session *s);
/* The session's device memory in use (by every process) and in all; PI0_ERR_UNSUPPORTED on the CPU backend. */
pi0_status pi0_session_memory(const pi0_session *s, size_t *used, size_t *total);
/* What a session holds in the device's memory, in bytes (docs/jetson.md, Memory): its model's weights, which every
 * session of the model shares, and the session's own buffers; whether the GPU shares the host's memory (a Jetson: then
 * all of it comes out of the host's RAM). PI0_ERR_UNSUPPORTED on the CPU backend. */
typedef struct {
    size_t weights_bf16;   /* the weights kept in bf16 */
    size_t weights_f32;    /* the fp32 copies of those the kernels read in fp32 (norms, biases, patch, action, time) */
    size_t weights_8bit;   /* the weights --precision int8 / fp8 selects: 8-bit codes and their fp32 row scales */
    size_t session;        /* activations, the prefix KV cache and scratch made at create, and what calls added since
                              (the GEMM timing scratch at the first call, exact real-time chunking's transposes) */
    int integrated;        /* 1: the GPU shares the host's memory (cudaDevAttrIntegrated) */
} pi0_memory_info;
pi0_status pi0_session_memory_info(const pi0_session *s, pi0_memory_info *info);
/* The processor it runs on ("NVIDIA H100 80GB HBM3, 132 SMs" / the CPU model) and the driver
 * ("CUDA driver 13.0", or "-" on the CPU); static strings owned by the session. */
const char *pi0_session_device(const pi0_session *s);
const char *pi0_session_driver(const pi0_session *s);

/* ---- Tensor files (safetensors), for tools: inputs/outputs of `pi0 infer`, fixtures. ---- */
typedef struct pi0_tensors pi0_tensors;

/* Opens a safetensors file read-only (mmap, validated). */
pi0_status pi0_tensors_open(pi0_tensors **out, const char *path);
/* Empty in-memory set for writing. */
pi0_status pi0_tensors_new(pi0_tensors **out);
void pi0_tensors_free(pi0_tensors *t);
/* Looks a tensor up; returns PI0_ERR_ARG (with message) when absent. Any out pointer may be NULL.
 * shape must hold 8 entries. data stays valid until pi0_tensors_free. */
pi0_status pi0_tensors_get(const pi0_tensors *t, const char *name, pi0_dtype *dtype, int *ndim,
                           int64_t *shape, const void **data);
/* Number of tensors and the name of tensor i (0..count-1; sorted by name for files), NULL out of range. */
int pi0_tensors_count(const pi0_tensors *t);
const char *pi0_tensors_name(const pi0_tensors *t, int i);
/* Copies a tensor into a set made by pi0_tensors_new. */
pi0_status pi0_tensors_add(pi0_tensors *t, const char *name, pi0_dtype dtype, int ndim,
                           const int64_t *shape, const void *data);
pi0_status pi0_tensors_save(const pi0_tensors *t, const char *path);

/* Reads model inputs from a tensor set (names of docs/formats.md 2) and checks every shape and
 * dtype against the model. The returned inputs point into `t` and a buffer owned by *buf
 * (free with pi0_inputs_buf_free after use). */
typedef struct pi0_inputs_buf pi0_inputs_buf;
pi0_status pi0_inputs_from_tensors(const pi0_model *m, const pi0_tensors *t, const char *what,
                                   pi0_inputs *in, pi0_inputs_buf **buf);
void pi0_inputs_buf_free(pi0_inputs_buf *b);

/* ---- SentencePiece tokenizer (PaliGemma's paligemma_tokenizer.model: BPE, byte fallback) ---- */
typedef struct pi0_tokenizer pi0_tokenizer;
/* Reads a SentencePiece .model file; BPE models with the identity normalizer. */
pi0_status pi0_tokenizer_load(pi0_tokenizer **out, const char *path);
void pi0_tokenizer_free(pi0_tokenizer *t);
/* Plain SentencePiece ids of len bytes of UTF-8 text (no BOS/EOS), like `spm_encode --output_format=id`.
 * Writes up to cap ids; *n gets the full count (call again with a larger buffer when *n > cap). */
pi0_status pi0_tokenize(const pi0_tokenizer *t, const char *text, size_t len, int32_t *ids, size_t cap, size_t *n);

/* The model's prompt tokens (docs/model.md 3.5, openpi's PaligemmaTokenizer): the prompt is stripped and its
 * '_' and '\n' become spaces; PI0_PROMPT_PI0: BOS + text + "\n"; PI0_PROMPT_PI05: BOS + "Task: <text>,
 * State: <s1 s2 ...>;\nAction: " with each normalised state value discretised into 256 bins on [-1, 1]
 * (n_state values, un-padded, compared in double as numpy does; must be finite); PI0_PROMPT_RAW: BOS + the prompt
 * exactly as given (no strip, no "\n": LeRobot's π0 pipeline, which appends the "\n" itself). Right-padded with id 0 / mask 0 to max_len, or truncated
 * to max_len. tokens and mask hold max_len entries; *n_valid gets the number of real tokens. */
typedef enum { PI0_PROMPT_PI0 = 0, PI0_PROMPT_PI05 = 1, PI0_PROMPT_RAW = 2 } pi0_prompt_format;
pi0_status pi0_tokenize_prompt(const pi0_tokenizer *t, const char *prompt, pi0_prompt_format format,
                               const double *state, int n_state, int max_len, int32_t *tokens, uint8_t *mask,
                               int *n_valid);

/* ---- Images (docs/model.md 3.1/3.2) ---- */
/* openpi's resize_with_pad: uint8 HWC RGB (h, w) -> (size, size), aspect kept, centred on black, resampled
 * bit-exactly like Pillow's BILINEAR; an image already size x size is copied. dst holds size*size*3.
 * Sides up to 8192 pixels; images so thin that a side would shrink to 0 pixels are refused. */
pi0_status pi0_image_resize_with_pad(const uint8_t *src, int h, int w, int size, uint8_t *dst);
/* uint8 -> model input: (u / 255) * 2 - 1 in fp32, n values. */
void pi0_image_to_model(const uint8_t *src, size_t n, float *dst);

/* ---- Policy: what openpi's served policy does around the model (docs/model.md 4.1) ----
 * Observation in (named arrays as the robot sends them + prompt), action chunk out (float64, the robot's
 * own action dimensions, unnormalised), with the robot transform, norm stats, image resize, prompt format,
 * padding and the delta/absolute action rule of the chosen openpi config. A π0-FAST checkpoint is served the same
 * way: its prompt carries the state, greedy decoding writes the action tokens (up to openpi's 256) and the FAST
 * tokenizer turns them into the chunk (docs/fast.md 5). */
typedef enum { PI0_ROBOT_NONE = 0, PI0_ROBOT_LIBERO, PI0_ROBOT_DROID, PI0_ROBOT_ALOHA } pi0_robot;

typedef struct pi0_policy pi0_policy;

typedef struct {
    pi0_model_params model;      /* backend, device, threads, horizon / token length (/ π0-FAST action dim) overrides */
    const char *config;          /* openpi config name ("pi0_libero", "pi05_droid", "pi0_fast_droid", ...) setting
                                    robot, model type, delta actions, default prompt, asset id and metadata (π0-FAST:
                                    also the chunk's horizon, action dim and prompt length); NULL = none */
    const char *robot;           /* "libero" | "droid" | "aloha"; required when config is NULL, else must agree */
    const char *tokenizer;       /* path of the SentencePiece model (paligemma_tokenizer.model); required */
    const char *asset_id;        /* DIR/assets/<asset_id>/norm_stats.json; NULL = the config's, else the only one */
    const char *default_prompt;  /* used when an observation has no prompt; NULL = the config's (if any) */
    int delta_actions;           /* 0 = the config's / robot's default, 1 = on, -1 = off (docs/model.md 4.3) */
    int max_batch;               /* observations per pi0_policy_run; 0 = 1 */
    int num_steps;               /* flow-matching steps; 0 = 10 (π0-FAST has none: must be 0) */
    const char *fast_tokenizer;  /* π0-FAST: the FAST action tokenizer, the directory of Hugging Face's
                                    physical-intelligence/fast (tokenizer.json, processor_config.json) or its
                                    tokenizer.json; required for π0-FAST, refused for π0 / π0.5 (docs/fast.md 5) */
} pi0_policy_params;

/* Loads DIR (checkpoint + norm stats), the tokenizer, and creates the inference session.
 * Errors name the file / field. On failure *out is NULL. */
pi0_status pi0_policy_load(pi0_policy **out, const char *dir, const pi0_policy_params *p);
void pi0_policy_free(pi0_policy *p);

typedef struct {
    pi0_robot robot;
    const char *robot_name;      /* "libero", ...; "lerobot" for a LeRobot policy directory */
    const char *config;          /* the config name, or "" */
    int action_horizon;          /* H of the returned chunk (LeRobot: n_action_steps) */
    int action_dim;              /* D of the returned chunk: 7 LIBERO, 8 DROID, 14 ALOHA; LeRobot: the action feature's */
    int max_batch;
    int quantile;                /* 1 = quantile norm (π0.5, π0-FAST), 0 = z-score */
    int delta_actions;           /* 1 = AbsoluteActions applied on output */
    int discrete_state;          /* 1 = state in the prompt (π0.5 except pi05_libero; π0-FAST) */
    const char *asset_id;        /* the norm-stats folder used */
    const char *default_prompt;  /* or NULL */
    const char *metadata_json;   /* what openpi's server sends first: "{}" or {"reset_pose": [...]} for ALOHA; for a
                                    LeRobot policy {"lerobot": {"type", "cameras", "state_dim", "action_dim", ...}} */
    const char *lerobot;         /* a LeRobot policy: its features, norm modes and steps in words; NULL otherwise */
    int rtc_horizon;             /* real-time chunking's defaults: a LeRobot policy's rtc_config, else LeRobot's */
    pi0_rtc_schedule rtc_schedule;   /* RTCConfig defaults (10, LINEAR, 10) */
    float rtc_max_weight;
    const pi0_model *model;
    const pi0_session *session;
} pi0_policy_info;
void pi0_policy_get_info(const pi0_policy *p, pi0_policy_info *info);
/* For a model loaded from a LeRobot policy directory: reads its processor files and writes (malloc'd, caller frees)
 * what the policy will do: cameras, state and action features with their normalisation, prompt format, chunk. */
pi0_status pi0_lerobot_describe(const pi0_model *m, char **text);

/* One named array of an observation, as the robot sends it (openpi's msgpack-numpy arrays). Nested maps
 * are flattened with '/': ALOHA's images["cam_high"] is "images/cam_high". Data in C order, native
 * little-endian; read during the call only. */
typedef struct {
    const char *key;
    pi0_dtype dtype;             /* images: U8, F32, F64 (floats x255 -> uint8 as openpi); state: F32, F64, I32, I64 */
    int ndim;                    /* 0..4 */
    int64_t shape[4];
    const void *data;
} pi0_array;

/* Real-time chunking for one observation (docs/model.md 3.11): the previous chunk's rows the robot has not
 * executed, in model space (normalised, the model's action width: what pi0_policy_chunk returned, minus the rows
 * executed), and LeRobot's prefix-weight parameters. */
typedef struct {
    const float *prev;           /* [n_prev, A] (A = model action_dim); NULL or n_prev 0 = no guidance */
    int n_prev;                  /* 0..H */
    int delay;                   /* inference_delay: rows fully guided */
    int horizon;                 /* execution_horizon: guidance reaches 0 here (clamped to n_prev) */
    pi0_rtc_schedule schedule;
    float max_weight;            /* max_guidance_weight; 0 = 10 (LeRobot's default) */
    pi0_rtc_mode mode;           /* PI0_RTC_EXACT or PI0_RTC_LEROBOT; PI0_RTC_OFF (0) = LeRobot's form */
} pi0_rtc_request;

typedef struct {
    const pi0_array *arrays;
    int n_arrays;                /* keys the robot transform does not use are ignored, as in openpi */
    const char *prompt;          /* UTF-8; NULL = none (then the default prompt, else "Prompt is required") */
    const float *noise;          /* [H, A] (A = model action_dim, 32) start of the flow; NULL = N(0,1) from seed.
                                    π0-FAST has no flow: NULL (openpi's Pi0FAST takes no noise) */
    uint64_t seed;
    const pi0_rtc_request *rtc;  /* real-time chunking; NULL = none (π0-FAST: none, it has no flow to guide) */
} pi0_observation;

/* A transformed observation, ready for the model. Preparing is thread-safe and may run concurrently
 * with pi0_policy_run on another thread (the server prepares on connection threads). */
typedef struct pi0_prepared pi0_prepared;
/* Robot input transform, normalisation, resize, prompt; errors name the key, expected and found. */
pi0_status pi0_policy_prepare(pi0_policy *p, const pi0_observation *obs, pi0_prepared **out);
void pi0_prepared_free(pi0_prepared *x);

typedef struct {
    double model_ms;             /* openpi's policy_timing.infer_ms: the model call */
    double total_ms;             /* the whole run incl. output transforms */
    int zero_chunks;             /* π0-FAST: elements of the run whose tokens held no decodable action chunk, so that
                                    their chunk is openpi's zeros before the output transforms (docs/fast.md 2.6); 0
                                    for π0 / π0.5 */
} pi0_policy_timing;
/* Runs n (1..max_batch) prepared observations as one batch and writes actions [n, H, D] float64
 * (unnormalised, robot output transform applied). One thread at a time per policy. timing may be NULL. */
pi0_status pi0_policy_run(pi0_policy *p, pi0_prepared *const *batch, int n, double *actions, pi0_policy_timing *timing);
/* Runs one batch of `batch` (1..max_batch) synthetic observations (black images on every camera key of the robot,
 * zero state, the default prompt or "warm up", a fixed noise seed) and discards the actions. A process's first
 * inference pays one-time costs (CUDA module loading, GEMM algorithm timing, graph capture: bench/RESULTS.md has
 * them); a server calls this before it accepts robots. Prompts of other lengths later cost one graph capture the
 * first time each. The policy's noise stream for observations without a seed is not touched.
 * *ms (may be NULL) gets the time taken. */
pi0_status pi0_policy_warmup(pi0_policy *p, int batch, double *ms);
/* The same with this prompt (NULL: as pi0_policy_warmup): the prompt a fleet will send (one task over many robots),
 * so that its first batches replay the graphs and GEMM timings made here instead of paying for a new prefix length.
 * (π0.5 with discrete state puts the state's digits in the prompt: real states can still give other lengths.) */
pi0_status pi0_policy_warmup_prompt(pi0_policy *p, int batch, const char *prompt, double *ms);
/* Writes the model inputs of a prepared observation (docs/formats.md 2 names, batch 1; noise only when the
 * observation had one) as a safetensors file: for checking the transforms against a reference. */
pi0_status pi0_prepared_save(const pi0_prepared *x, const char *path);
/* The model-space chunk ([H, A] float32, normalised, before the output transforms) of batch element b of the last
 * pi0_policy_run: what a real-time-chunking client's next observation guides towards (pi0_rtc_request). π0-FAST:
 * the chunk its tokens decoded to (zeros where openpi falls back to zeros). */
pi0_status pi0_policy_chunk(const pi0_policy *p, int b, float *out);
/* prepare + run for one observation; actions holds H * D values. */
pi0_status pi0_policy_infer(pi0_policy *p, const pi0_observation *obs, double *actions, pi0_policy_timing *timing);

/* ---- Checkpoint generation (random weights, openpi layout) ---- */
typedef struct {
    const char *variant;   /* "pi0", "pi05", "tiny-pi0", "tiny-pi05" */
    uint64_t seed;
    int f32;               /* 0 = store BF16 (openpi's default conversion), 1 = F32 */
    int action_horizon;    /* 0 = the variant's (50 full size, 32 π0-FAST, 5 tiny) */
    int max_token_len;     /* 0 = the variant's */
    int force;             /* 1 = overwrite a checkpoint already in DIR */
} pi0_gen_params;
/* Writes DIR/model.safetensors, DIR/config.json, DIR/assets/<id>/norm_stats.json (creates DIR). Refuses a DIR that
 * already holds a checkpoint unless force, and a file system with too little free space, before writing anything. */
pi0_status pi0_checkpoint_generate(const char *dir, const pi0_gen_params *p);

/* ---- Checkpoint conversion ---- */
typedef enum { PI0_CONVERT_KEEP = 0, PI0_CONVERT_BF16, PI0_CONVERT_F32 } pi0_convert_dtype;
typedef struct {
    pi0_convert_dtype dtype;   /* KEEP: every tensor in its stored dtype (Orbax: bf16 or f32, possibly mixed) */
    const char *config;        /* openpi config name whose action horizon / prompt length (π0-FAST: and action dim) go
                                  to config.json; NULL = none */
    int action_horizon;        /* explicit values win over the config's; 0 = the source's (Orbax: openpi's defaults) */
    int max_token_len;
    int force;             /* 1 = overwrite a checkpoint already in the output directory */
    int quiet;
} pi0_convert_params;
/* Loads any checkpoint pi0_model_load takes (an Orbax one above all) and writes openpi's PyTorch layout to DIR:
 * model.safetensors (F32 -> BF16 rounds to nearest even, as torch), config.json with every dimension, and a copy
 * of the source's assets/ (norm stats). A server then starts from DIR without re-decoding the Orbax arrays. */
pi0_status pi0_checkpoint_convert(const char *src, const char *dir, const pi0_convert_params *p);

#ifdef __cplusplus
}
#endif
#endif
