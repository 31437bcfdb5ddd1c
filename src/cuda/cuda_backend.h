/* cuda_backend.h — the CUDA backend's entry points for backends.c (the provider registry) and its tests: create a
 * backend, check a device, the weights' device arena, page-locked host memory. C linkage, no CUDA types. The ops
 * themselves reach the model only through the op table (backend.h) that cuda_backend_create fills; their launchers are
 * declared in common.cuh, for the backend's own files. Test hooks: testing.h. */
#ifndef PI0_CUDA_BACKEND_H
#define PI0_CUDA_BACKEND_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CUDA backend (src/cuda/): one stream, cuBLASLt handle and workspace per session, reading the weights of one model:
 * its store, made by cuda_weights_upload in device memory and keyed by tensor id (the store outlives the session). */
pi0_status cuda_backend_create(pi0_backend **out, int device, const void *weights);
/* The device exists, can be selected, has compute capability 8.0 or later and this build carries code for it. */
pi0_status cuda_device_check(int device);
pi0_status cuda_weights_upload(void **store, const pi0_weights *w, const pi0_config *c, const pi0_quant *q, int device,
                               void (*done)(void *user, const pi0_wt *t), void *user);
void cuda_weights_free(void *store);
/* Page-locked host memory, mapped for every device (cudaHostAlloc); NULL when no device or memory is available. */
void *cuda_host_alloc(size_t bytes);
void cuda_host_free(void *p);

#ifdef __cplusplus
}
#endif

#endif
