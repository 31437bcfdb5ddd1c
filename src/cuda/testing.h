/* testing.h — hooks of the CUDA backend for tests/test_cuda_ops.c and test_cuda_e2e.c only: launch counters that show
 * a kernel path ran, forced tile widths, injected graph faults. They exist only in the CUDA objects the tests link,
 * compiled again with PI0_CUDA_TESTING (the Makefile's testhooks/, common.cuh's PI0_TEST_HOOK); the library has none.
 * cuda_upload_list, the upload of a list of tensors, is the library's own (the model's upload uses it). */
#ifndef PI0_CUDA_TESTING_H
#define PI0_CUDA_TESTING_H

#include "cuda_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A weight store for a list of tensors (op tests), as cuda_weights_upload makes the model's: ts[i] with an fp32 copy
 * where fmt[i] & 1, in int8 (quant.h) instead of bf16 where fmt[i] & 2, in E4M3 where fmt[i] & 4, group[i] > 1 starting a group of that many that
 * the ops may run as one product (the members follow in ts); ids unique, 1 .. max_id. Free with cuda_weights_free. */
pi0_status cuda_upload_list(void **store, const pi0_wt *const *ts, const int *fmt, const int *group, int n, int max_id,
                            int device);
/* The op tests: the store the backend's ops read from now on (cuda_backend_create's). */
void cuda_use_weights(pi0_backend *be, const void *weights);
/* Launches of gemv.cu's warpgroup kernel (17 to 64 rows) in this process: the op tests check that it ran. */
long cuda_gemv_wg_launches(void);
/* Launches of gemv.cu's few-row kernel (up to 16 rows, Hopper) in this process. */
long cuda_gemv_launches(void);
/* Launches of attn_decode.cu's decode kernels (Hopper's cluster kernel, or the portable one) in this process. */
long cuda_decode_attention_launches(void);
/* Launches of attention.cu's wgmma flash kernel (the prefix: head_dim 256, MQA) in this process. */
long cuda_flash_wg_launches(void);
/* 8-bit E4M3 products in this process by the form that ran them (linear_i8.cu: 0 cuBLASLt with the scales in the
 * kernel, 1 cuBLASLt and a scaling pass, 2 the rows kernel), and the first form tried from now on (0: the library's). */
long cuda_f8_launches(int form);
void cuda_f8_force(int form);
/* Launches of gateup.cu's gate|up + gelu * up kernel (the prefix MLP, M >= 136) in this process. */
long cuda_gateup_launches(void);
/* Frees the backend's transposed weight copies (linear_t, gemm_bwd.cu), which it keys by tensor id and keeps for the
 * session: the op tests run many stores on one backend. */
void cuda_forget_transposes(pi0_backend *be);
/* 1 when the backend runs the Hopper kernels, 0 on the portable path (another GPU, or PI0_CUDA_PATH=portable): the op
 * tests then check that no Hopper kernel ran. */
int cuda_backend_hopper(const pi0_backend *be);
/* Graph replays (cuda_run_graph with a cached graph) in this process: the e2e tests check that they ran. */
long cuda_graph_replays(void);
/* Inputs read in place (host_view gave a device address for the caller's memory) in this process. */
long cuda_host_views(void);
/* The e2e tests: the most bytes of one slab of the weight stores made from now on in this process (wstore.cu; a group
 * larger than that gets a slab of its own); 0 returns to the default. */
void cuda_weights_slab(size_t bytes);
/* The tests: the next graph capture in this process (any context or thread) fails, through CUDA, at its capture
 * (where = 1) or at its instantiation (2; a capture with an untimed GEMM, which is not instantiated, takes the fault
 * without failing); 0 clears. Returns the fault that was pending (0 once a capture has taken it). */
int cuda_graph_fault(int where);
/* The op tests: gateup.cu's token tile width from now on in this process (136 to 248 in steps of 16, or 256;
 * a width it lacks or above M makes it refuse, so cuBLASLt runs); 0 returns to the width picked per M. */
void cuda_gateup_force(int bn);

#ifdef __cplusplus
}
#endif

#endif
