/* cuda_backend.h — the CUDA backend's entry points for backends.c (the provider registry) and its tests. */
#ifndef PI0_CUDA_BACKEND_H
#define PI0_CUDA_BACKEND_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CUDA backend (src/cuda/): one stream, cuBLASLt handle and workspace per session. Weights live in
 * one device arena per model, made by cuda_weights_upload (fills every pi0_wt's dev / dev32). */
pi0_status cuda_backend_create(pi0_backend **out, int device);
/* The device exists, can be selected, and is a Hopper GPU (compute capability 9.x: the kernels are sm_90a). */
pi0_status cuda_device_check(int device);
pi0_status cuda_weights_upload(void **arena, pi0_weights *w, const pi0_config *c, int device);
void cuda_weights_free(void *arena);
/* Page-locked host memory (cudaMallocHost); NULL when no device or memory is available. */
void *cuda_host_alloc(size_t bytes);
void cuda_host_free(void *p);
/* exact real-time chunking's ops (backend.h; CPU twins cpu_<op>): gemm.cu (mlp_up_save), gemm_bwd.cu, norm.cu,
 * elementwise.cu, attn_bwd.cu, rtc.cu */
void cuda_mlp_up_save(pi0_backend *be, pt out, pt gs, pt us, pt y, const pi0_gemma_layer *L, int M, int F, int K,
                      const pi0_prenorm *pre);
void cuda_linear_t(pi0_backend *be, pt out, pt dy, const pi0_wt *W, int M, int N, int K, int k0, enum pi0_epi epi);
void cuda_linear_t_cat(pi0_backend *be, pt out, pt dy, int ld, const pi0_wt *const *W, int nw, int M, int K,
                       enum pi0_epi epi);
void cuda_norm_bwd(pi0_backend *be, pt dx, pt dy, pt x, const pi0_wt *w, pt mod, int rows_per_mod, int M, int D,
                   float eps, enum pi0_epi epi);
void cuda_gelu_mul_bwd(pi0_backend *be, pt dg, pt du, pt dy, pt g, pt u, int M, int F, int ld);
void cuda_swish_bwd(pi0_backend *be, pt dz, pt dy, pt z, int M, int D);
void cuda_rope_bwd(pi0_backend *be, pt q, int qh, pt k, int kh, pt pos, int M, int head_dim, int ld);
void cuda_attention_bwd(pi0_backend *be, pt dq, pt dk, pt dv, pt dout, pt q, const pi0_attn *a, int ld);
void cuda_scale_rows(pi0_backend *be, pt out, pt x, pt v, int stride, int rows_per_vec, int M, int D);
void cuda_rtc_error(pi0_backend *be, pt err, pt v, pt x, pt y, pt w, pt jac, float t, int rows, int H, int A);
void cuda_rtc_correct(pi0_backend *be, pt v, pt err, pt dx, pt g, pt jac, int steps, int k, float t, int rows, int H,
                      int A);

#ifdef __cplusplus
}
#endif

#endif
