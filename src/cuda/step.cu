// step.cu — pi0_step_io (backend.h): the boundary between two denoise steps as one kernel. Before, it took
// six: the final norm, a row gather, action_out_proj, x += dt v, and the next step's input products (π0:
// action_in_proj, action_time_mlp_in, swish; π0.5: action_in_proj), each paying launch and grid-completion
// latency for a few microseconds of work.
// Grid: SIO_CL blocks per group of SIO_RB rows; the SIO_CL blocks of a group form a thread-block cluster.
// Before its PDL wait a block pulls the constants it reads into L2. Then it normalises the group's rows of
// s (one warp per row; the result rounded to bf16 in shared memory, like the norm kernels' output),
// computes the velocity outputs a with a % SIO_CL == its rank (one warp per (row, a) dot product), updates
// those x1 entries and keeps them in shared memory. After a cluster barrier every block gathers the
// group's whole x1 rows through distributed shared memory and computes its 1 / SIO_CL of the columns of e
// (K = A, fp32). Every x1 entry is read and written by one thread, so x1 may be x0. CPU twin: cpu_step_io.
#include <cooperative_groups.h>

#include "common.cuh"

namespace cg = cooperative_groups;

enum { SIO_CL = 8, SIO_RB = 16, SIO_T = 256, SIO_AMAX = 128, SIO_SMEM_MAX = 200 * 1024 };

struct step_args {
    const bf16 *s;
    int D;
    const float *nw, *mod;   // RMSNorm weights, or the adaRMS row [scale | shift | gate] of all rows
    float eps;
    const int32_t *out_rows;
    const bf16 *ow;          // NULL: no velocity, x1 = x0
    int ldo;
    const float *ob;
    float dt;
    const float *x0;
    float *x1, *vel;
    int M, A;
    const float *iw, *ib;    // NULL iw: no next input
    int N, swish;
    void *e;
    int e_bf16;
    const int32_t *e_rows;
};

// V = 8: rows and weights are read 16 bytes at a time (D % 8 == 0, aligned), else V = 1.
template <int V>
__global__ void __cluster_dims__(SIO_CL, 1, 1) __launch_bounds__(SIO_T) step_io_kernel(step_args a) {
    extern __shared__ __align__(16) bf16 ys[];    // [SIO_RB][D]: the group's normalised rows
    __shared__ float xs[SIO_RB * SIO_AMAX];       // x1 entries of this block's a (others unset)
    __shared__ float xf[SIO_RB * SIO_AMAX];       // x0 rows, then the group's whole x1 rows
    cg::cluster_group cl = cg::this_cluster();
    const int rank = (int)cl.block_rank(), warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r0 = blockIdx.y * SIO_RB, nr = min(SIO_RB, a.M - r0), D = a.D, A = a.A;
    const int na = (A - rank + SIO_CL - 1) / SIO_CL;   // this block's velocity outputs: rank, rank + SIO_CL, ...
    const int cn = (a.N + SIO_CL - 1) / SIO_CL, n0 = min(a.N, rank * cn), n1 = min(a.N, n0 + cn);   // its e columns
    // before the PDL wait: the constants this block reads, into L2 (the layers' weight stream evicts them)
    if (a.ow) {
        for (int j = 0; j < na; j++) prefetch_l2(a.ow + (size_t)(rank + SIO_CL * j) * a.ldo, (size_t)D * 2);
        prefetch_l2(a.nw ? a.nw : a.mod, (size_t)D * (a.nw ? 4 : 8));
    }
    if (a.iw) {
        for (int o = 0; o < A; o++) prefetch_l2(a.iw + (size_t)o * a.N + n0, (size_t)(n1 - n0) * 4);
        prefetch_l2(a.ib + n0, (size_t)(n1 - n0) * 4);
    }
    pdl_wait();   // programmatic dependent launch: see common.cuh
    pdl_trigger();
    if (a.ow) {
        for (int i = threadIdx.x; i < nr * A; i += SIO_T) xf[(i / A) * SIO_AMAX + i % A] = a.x0[(size_t)r0 * A + i];
        for (int i = warp; i < nr; i += SIO_T / 32) {   // norm: a warp per row
            const bf16 *x = a.s + (size_t)a.out_rows[r0 + i] * D;
            bf16 *y = ys + (size_t)i * D;
            float ss = 0.0f, v[V];
            for (int k = lane * V; k < D; k += 32 * V) {
                ldv<V>(v, x + k);
#pragma unroll
                for (int e = 0; e < V; e++) ss += v[e] * v[e];
                stv<V>(y + k, v);   // exact: x is bf16
            }
            const float inv = rsqrtf(warp_sum(ss) / D + a.eps);
            for (int k = lane * V; k < D; k += 32 * V) {   // the elements this lane stored
                ldv<V>(v, y + k);
#pragma unroll
                for (int e = 0; e < V; e++)
                    v[e] = a.nw ? v[e] * inv * (1.0f + a.nw[k + e]) : v[e] * inv * (1.0f + a.mod[k + e]) + a.mod[D + k + e];
                stv<V>(y + k, v);   // rounded to bf16, like the norm kernels' output
            }
        }
        __syncthreads();
        for (int t = warp; t < nr * na; t += SIO_T / 32) {   // velocity: a warp per (row, output)
            const int i = t / na, o = rank + SIO_CL * (t % na), r = r0 + i;
            const bf16 *w = a.ow + (size_t)o * a.ldo, *y = ys + (size_t)i * D;
            float acc = 0.0f, wf[V], yf[V];
            for (int k = lane * V; k < D; k += 32 * V) {
                ldv<V>(wf, w + k);
                ldv<V>(yf, y + k);
#pragma unroll
                for (int e = 0; e < V; e++) acc += yf[e] * wf[e];
            }
            acc = warp_sum(acc);
            if (lane == 0) {
                float v = acc + (a.ob ? a.ob[o] : 0.0f), x = xf[i * SIO_AMAX + o] + a.dt * v;
                if (a.vel) a.vel[(size_t)r * A + o] = v;
                a.x1[(size_t)r * A + o] = x;
                xs[i * SIO_AMAX + o] = x;
            }
        }
    } else {
        for (int t = threadIdx.x; t < nr * A; t += SIO_T) {
            const int i = t / A, o = t % A;
            if (o % SIO_CL != rank) continue;
            float x = a.x0[(size_t)(r0 + i) * A + o];
            a.x1[(size_t)(r0 + i) * A + o] = x;
            xs[i * SIO_AMAX + o] = x;
        }
    }
    if (!a.iw) return;   // uniform over the grid: no cluster barrier is left waiting
    cl.sync();
    for (int t = threadIdx.x; t < nr * A; t += SIO_T) {
        const int i = t / A, o = t % A;
        xf[i * SIO_AMAX + o] = cl.map_shared_rank(xs, o % SIO_CL)[i * SIO_AMAX + o];
    }
    cl.sync();   // the gather is complete everywhere: xs may go away, xf is visible to the block
    // columns [n0, n1) of e: two threads per column, each with half of the group's rows
    constexpr int HR = SIO_RB / 2;
    for (int t = threadIdx.x; t < 2 * (n1 - n0); t += SIO_T) {
        const int n = n0 + t / 2, i0 = (t & 1) * HR;
        float acc[HR];
#pragma unroll
        for (int i = 0; i < HR; i++) acc[i] = a.ib[n];
        for (int o = 0; o < A; o++) {
            const float w = a.iw[(size_t)o * a.N + n];
#pragma unroll
            for (int i = 0; i < HR; i++) acc[i] += xf[(i0 + i) * SIO_AMAX + o] * w;
        }
#pragma unroll
        for (int i = 0; i < HR; i++) {
            const int r = r0 + i0 + i;
            if (i0 + i >= nr) break;
            float z = a.swish ? acc[i] / (1.0f + __expf(-acc[i])) : acc[i];
            size_t at = (size_t)(a.e_rows ? a.e_rows[r] : r) * a.N + n;
            if (a.e_bf16) ((bf16 *)a.e)[at] = __float2bfloat16(z);
            else ((float *)a.e)[at] = z;
        }
    }
}

void cuda_step_io_setup(cuda_ctx *c) {   // the opt-in for more than 48 KB of shared memory (per device)
    CUDA_NOTE(c, cudaFuncSetAttribute(step_io_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, SIO_SMEM_MAX));
    CUDA_NOTE(c, cudaFuncSetAttribute(step_io_kernel<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, SIO_SMEM_MAX));
}

void cuda_step_io(pi0_backend *be, const pi0_step_io *p) {
    cuda_ctx *c = CTX(be);
    if (c->err || p->M <= 0) return;
    size_t smem = p->out_w ? (size_t)SIO_RB * p->D * sizeof(bf16) : 0;
    if (p->A > SIO_AMAX || smem > SIO_SMEM_MAX) {
        c->err = PI0_ERR_UNSUPPORTED;
        snprintf(c->errmsg, sizeof c->errmsg, "step_io: action dim %d (at most %d), width %d and input width %d need "
                 "%zu bytes of shared memory (at most %d)", p->A, (int)SIO_AMAX, p->D, p->N, smem, (int)SIO_SMEM_MAX);
        return;
    }
    PI0_ASSERT(p->x0.kind == PT_F32 && p->x1.kind == PT_F32 && (!p->out_w || p->s.kind == PT_ACT));
    PI0_ASSERT(!p->out_w || p->norm.w || p->norm.rows_per_mod >= p->Ms);
    step_args a = {};
    a.s = (const bf16 *)p->s.p; a.D = p->D;
    a.nw = p->norm.w ? (const float *)p->norm.w->dev32 : NULL;
    a.mod = (const float *)p->norm.mod.p; a.eps = p->norm.eps;
    a.out_rows = (const int32_t *)p->out_rows.p;
    a.ow = p->out_w ? (const bf16 *)p->out_w->dev : NULL; a.ldo = p->out_w ? (int)p->out_w->cols : 0;
    a.ob = p->out_b ? (const float *)p->out_b->dev32 : NULL; a.dt = p->dt;
    a.x0 = (const float *)p->x0.p; a.x1 = (float *)p->x1.p; a.vel = (float *)p->vel.p; a.M = p->M; a.A = p->A;
    a.iw = (const float *)p->in_w.p; a.ib = (const float *)p->in_b.p; a.N = p->N; a.swish = p->act == ACT_SWISH;
    a.e = p->e.p; a.e_bf16 = p->e.kind == PT_ACT; a.e_rows = (const int32_t *)p->e_rows.p;
    int vec = p->D % 8 == 0 && (!p->out_w || (p->out_w->cols % 8 == 0 && aligned16(a.ow))) && aligned16(a.s);
    if (vec) cuda_launch(c, step_io_kernel<8>, dim3(SIO_CL, cdiv(p->M, SIO_RB)), dim3(SIO_T), smem, a);
    else cuda_launch(c, step_io_kernel<1>, dim3(SIO_CL, cdiv(p->M, SIO_RB)), dim3(SIO_T), smem, a);
}
