/* backends.c — the backends this build carries, as providers for the API layer (backend.h): the CPU reference always,
 * the CUDA backend when it was built. The only file outside src/cuda/ that knows whether it was (PI0_HAVE_CUDA: make
 * found nvcc). Owns no backend instance: api_model.c and api_session.c create them through these providers. */
#include "backend.h"

#ifdef PI0_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

static pi0_status cpu_create(pi0_backend **out, int device, int n_threads, const void *weights) {
    (void)device;
    return cpu_backend_create(out, n_threads, weights);
}

static const pi0_backend_provider cpu = {.name = "cpu", .create = cpu_create, .weights_upload = cpu_weights_upload,
                                         .weights_free = cpu_weights_free};

#ifdef PI0_HAVE_CUDA
static pi0_status cuda_create(pi0_backend **out, int device, int n_threads, const void *weights) {
    (void)n_threads;
    return cuda_backend_create(out, device, weights);
}

static const pi0_backend_provider cuda = {.name = "cuda", .check = cuda_device_check, .create = cuda_create,
                                          .weights_upload = cuda_weights_upload, .weights_free = cuda_weights_free,
                                          .host_alloc = cuda_host_alloc, .host_free = cuda_host_free};
#endif

const pi0_backend_provider *backend_provider(pi0_backend_kind kind) {
    switch (kind) {
    case PI0_BACKEND_DEFAULT: case PI0_BACKEND_CPU: return &cpu;
#ifdef PI0_HAVE_CUDA
    case PI0_BACKEND_CUDA: return &cuda;
#endif
    default: return NULL;
    }
}

const pi0_backend_provider *backend_pinned_provider(void) {
#ifdef PI0_HAVE_CUDA
    return &cuda;
#else
    return NULL;
#endif
}
