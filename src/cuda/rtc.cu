// rtc.cu — real-time chunking's guidance of the velocity (backend.h, docs/model.md 3.11, pi0.h pi0_rtc_mode):
// LeRobot's form in one op (rtc_guide), and the exact form's two ops around the expert's transpose pass (rtc_error,
// then rtc_correct once dx = err^T dv/dx_t is known), which give a sample of LeRobot's form rtc_guide's answer bit
// for bit. F32 rows of A values, one thread per value. CPU twins: cpu_rtc_guide, cpu_rtc_error, cpu_rtc_correct.
// The transposes themselves sit beside their forward ops (gemm_bwd.cu, norm.cu, elementwise.cu, attn_bwd.cu).
#include "common.cuh"

#define GRID(n) dim3(cdiv((long long)(n), 256)), dim3(256), 0

// LeRobot's real-time-chunking guidance of one value in two halves, err = (y - (x - t v)) w and v - g err (CPU
// twins: guide_err, guide_step in cpu_backend.c): rtc_guide_kernel calls both, and so do rtc_error_kernel and
// rtc_correct_kernel for a sample of LeRobot's form, which makes its answer the guide's bit for bit whatever the batch
// holds (backend.h). Each operation rounded on its own, as PyTorch's elementwise kernels (no contraction).
__device__ __forceinline__ float rtc_guide_err(float v, float x, float y, float w, float t) {
    return __fmul_rn(__fsub_rn(y, __fsub_rn(x, __fmul_rn(t, v))), w);
}
__device__ __forceinline__ float rtc_guide_step(float v, float g, float err) { return __fsub_rn(v, __fmul_rn(g, err)); }

__global__ void rtc_guide_kernel(float *v, const float *x, const float *y, const float *w, const float *g, int steps, int k,
                                 float t, int rows, int H, int A) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * A) return;
    v[i] = rtc_guide_step(v[i], g[(i / A / H) * steps + k], rtc_guide_err(v[i], x[i], y[i], w[i / A], t));
}

void cuda_rtc_guide(pi0_backend *be, pt v, pt x, pt y, pt w, pt g, int steps, int k, float t, int rows, int H, int A) {
    cuda_ctx *c = CTX(be);
    if (c->err || rows < 1) return;
    size_t n = (size_t)rows * A;
    cuda_launch(c, rtc_guide_kernel, GRID(n), (float *)v.p, (const float *)x.p, (const float *)y.p, (const float *)w.p,
                (const float *)g.p, steps, k, t, rows, H, A);
}

// ---- the guided velocity: rows x A values (at most B * H * 32), each sample in its form (backend.h): jac != 0 in
// double as the CPU twins compute it, jac 0 with rtc_guide's fp32 steps (the helpers above) ----

__global__ void rtc_error_kernel(float *err, const float *v, const float *x, const float *y, const float *w,
                                 const float *jac, float t, int rows, int H, int A) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * A) return;
    err[i] = jac[i / A / H] != 0.0f ? (float)(((double)y[i] - ((double)x[i] - (double)t * v[i])) * w[i / A])
                                    : rtc_guide_err(v[i], x[i], y[i], w[i / A], t);
}

void cuda_rtc_error(pi0_backend *be, pt err, pt v, pt x, pt y, pt w, pt jac, float t, int rows, int H, int A) {
    cuda_ctx *c = CTX(be);
    if (c->err || rows < 1) return;
    cuda_launch(c, rtc_error_kernel, GRID((size_t)rows * A), (float *)err.p, (const float *)v.p, (const float *)x.p,
                (const float *)y.p, (const float *)w.p, (const float *)jac.p, t, rows, H, A);
}

__global__ void rtc_correct_kernel(float *v, const float *err, const float *dx, const float *g, const float *jac,
                                   int steps, int k, float t, int rows, int H, int A) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * A) return;
    int b = i / A / H;
    float gk = g[(size_t)b * steps + k], j = jac[b];
    v[i] = j != 0.0f ? (float)(v[i] - (double)gk * (err[i] - (double)j * t * dx[i])) : rtc_guide_step(v[i], gk, err[i]);
}

void cuda_rtc_correct(pi0_backend *be, pt v, pt err, pt dx, pt g, pt jac, int steps, int k, float t, int rows, int H,
                      int A) {
    cuda_ctx *c = CTX(be);
    if (c->err || rows < 1) return;
    cuda_launch(c, rtc_correct_kernel, GRID((size_t)rows * A), (float *)v.p, (const float *)err.p, (const float *)dx.p,
                (const float *)g.p, (const float *)jac.p, steps, k, t, rows, H, A);
}
