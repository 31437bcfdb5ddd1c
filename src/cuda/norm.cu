// norm.cu — LayerNorm (SigLIP), Gemma RMSNorm with (1 + w), and adaRMS (π0.5 expert); spec 3.4/3.7.
// One block of 256 threads per row; statistics in fp32; bf16 in and out; weights fp32 (dev32).
// CPU twins: cpu_layernorm, cpu_rmsnorm, cpu_adarms.
#include "common.cuh"

__global__ void layernorm_kernel(bf16 *y, const bf16 *x, const float *w, const float *b, int D, float eps) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    const bf16 *xr = x + (size_t)blockIdx.x * D;
    bf16 *yr = y + (size_t)blockIdx.x * D;
    float s = 0;
    for (int i = threadIdx.x; i < D; i += blockDim.x) s += __bfloat162float(xr[i]);
    float mean = block_sum(s) / D, v = 0;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float d = __bfloat162float(xr[i]) - mean;
        v += d * d;
    }
    float inv = rsqrtf(block_sum(v) / D + eps);
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        yr[i] = __float2bfloat16((__bfloat162float(xr[i]) - mean) * inv * w[i] + b[i]);
}

// mod == NULL: RMSNorm, y = x r (1 + w); else adaRMS, y = x r (1 + scale) + shift with the row's
// modulation [scale | shift | gate] (fp32, 3D) at mod + (row / rows_per_mod) * 3D.
__global__ void rmsnorm_kernel(bf16 *y, const bf16 *x, const float *w, const float *mod, int rows_per_mod, int D,
                               float eps) {
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    const bf16 *xr = x + (size_t)blockIdx.x * D;
    bf16 *yr = y + (size_t)blockIdx.x * D;
    float s = 0;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float v = __bfloat162float(xr[i]);
        s += v * v;
    }
    float inv = rsqrtf(block_sum(s) / D + eps);
    if (!mod) {
        for (int i = threadIdx.x; i < D; i += blockDim.x)
            yr[i] = __float2bfloat16(__bfloat162float(xr[i]) * inv * (1.0f + w[i]));
    } else {
        const float *m = mod + (size_t)(blockIdx.x / rows_per_mod) * 3 * D;
        for (int i = threadIdx.x; i < D; i += blockDim.x)
            yr[i] = __float2bfloat16(__bfloat162float(xr[i]) * inv * (1.0f + m[i]) + m[D + i]);
    }
}

void cuda_layernorm(pi0_backend *be, pt out, pt x, const pi0_wt *w, const pi0_wt *b, int M, int D, float eps) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0) return;
    cuda_launch(c, layernorm_kernel, dim3(M), dim3(256), 0, (bf16 *)out.p, (const bf16 *)x.p, (const float *)w->dev32,
                                                (const float *)b->dev32, D, eps);
}

void cuda_rmsnorm(pi0_backend *be, pt out, pt x, const pi0_wt *w, int M, int D, float eps) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0) return;
    cuda_launch(c, rmsnorm_kernel, dim3(M), dim3(256), 0, (bf16 *)out.p, (const bf16 *)x.p, (const float *)w->dev32,
                NULL, 1, D, eps);
}

void cuda_adarms(pi0_backend *be, pt out, pt x, pt mod, int rows_per_mod, int M, int D, float eps) {
    cuda_ctx *c = CTX(be);
    if (c->err || M <= 0) return;
    cuda_launch(c, rmsnorm_kernel, dim3(M), dim3(256), 0, (bf16 *)out.p, (const bf16 *)x.p, NULL, (const float *)mod.p,
                                              rows_per_mod, D, eps);
}
