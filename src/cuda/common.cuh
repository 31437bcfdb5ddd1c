// common.cuh — shared by the CUDA backend's files: the session context, error capture, bf16 helpers.
// Ops return void (backend.h), so the first CUDA/cuBLASLt failure of a session is kept in ctx->err
// with its message and reported by the next sync/download. Layout legend: M rows, D width, bf16 = ACT.
#pragma once

#include <cublasLt.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdint.h>

extern "C" {
#include "../backend.h"
#include "../util.h"

// Instructions of one GPU generation (the portable path, docs/gpu.md): the backend is compiled for several targets (the
// Makefile's CUDA_ARCHS); a helper whose instruction the target lacks traps there, and the runtime dispatch (backend.cu:
// the Hopper kernels only on compute capability 9.0) never launches a kernel that reaches one. PI0_SM90: clusters,
// mbarrier transactions, bulk and tensor copies, st.async, stmatrix (compute capability 9.0 and later); PI0_SM90A:
// wgmma and setmaxnreg (the sm_90a target itself: not on Blackwell).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define PI0_SM90(...) __trap()
#else
#define PI0_SM90(...) __VA_ARGS__
#endif
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PI0_SM90A(...) __trap()
#else
#define PI0_SM90A(...) __VA_ARGS__
#endif
// a kernel's thread-block cluster shape: an attribute the older targets refuse (their copy of the kernel is never run)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define PI0_CLUSTER_DIMS(x, y, z)
#else
#define PI0_CLUSTER_DIMS(x, y, z) __cluster_dims__(x, y, z)
#endif
}
// The tests' hooks (testing.h: launch counters, injected graph faults, forced tile widths) exist only in the objects
// the CUDA tests link, compiled again with PI0_CUDA_TESTING (the Makefile's testhooks/); the library has none.
#include "cuda_backend.h"
#ifdef PI0_CUDA_TESTING
#include "testing.h"
#define PI0_TEST_HOOK(...) __VA_ARGS__
#else
#define PI0_TEST_HOOK(...)
#endif

typedef __nv_bfloat16 bf16;

struct gemm_cache;   // gemm.cu

struct cuda_graph_entry {
    int32_t *key;
    int keylen;
    cudaGraphExec_t exec;
    uint64_t last_use;
};

enum { CUDA_MAX_GRAPHS = 32, CUDA_MAX_CARVED = 64 };

// One tensor's copies in the model's weight store (backend.cu): bf16, or for the weights an 8-bit precision selects
// int8 or E4M3 codes (fp8 set) with one scale per row (quant.h) instead; fp32 for those the kernels read in fp32; and
// `next`, the id of the tensor placed right after it as one [rows, cols] bf16 matrix (a group the layout planned), or 0.
struct cuda_wentry {
    bf16 *bf;
    float *f32;
    int8_t *q8;
    float *s8;
    int next;
    int fp8;
};

// cuda_upload_list's formats of a tensor: an fp32 copy too; int8, no bf16; E4M3, no bf16
enum { CUDA_W_F32 = 1, CUDA_W_I8 = 2, CUDA_W_F8 = 4, CUDA_W_8BIT = CUDA_W_I8 | CUDA_W_F8 };

struct cuda_wstore {
    char **slab;       // [nslab] device allocations that hold the copies (wstore.cu)
    int nslab;
    size_t bytes_bf16, bytes_f32, bytes_i8;   // the copies' bytes by format (8-bit: with the row scales)
    int device;
    int n;             // ids 1 .. n
    cuda_wentry *e;    // [n + 1], by id
    int64_t q8_k, q8_n;   // the largest columns and rows of an 8-bit weight (the 8-bit products' scratch), 0: none
};

// A weight as the kernels read it: its copies and shape. From a pi0_wt by cuda_wv, or made by gemm_bwd.cu for a
// transposed copy it owns.
struct wview {
    const bf16 *bf;
    const float *f32;
    const int8_t *q8;   // int8 codes, or E4M3 codes where fp8
    const float *s8;
    int64_t rows, cols;
    pi0_dtype dtype;
    int next;
    int fp8;
};

struct cuda_ctx {
    int device;
    const cuda_wstore *ws;     // the weights of the model this session runs (cuda_backend_create)
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *workspace;           // cuBLASLt workspace
    size_t ws_size;
    gemm_cache *gemms;         // matmul descriptors + algorithms by shape
    float *scores;             // attention logits of one segment (fp32)
    bf16 *probs;               // attention probabilities (bf16, like the PT reference)
    float *att32;              // suffix attention accumulator (fp32)
    size_t scores_cap, att_cap;
    bf16 *fused;               // output of a fused q|k|v or gate|up product
    size_t fused_cap;
    void *tune_buf;            // scratch output for timing GEMM candidates
    size_t tune_cap;
    cuda_graph_entry graphs[CUDA_MAX_GRAPHS];
    uint64_t graph_clock;
    int graphs_enabled;        // PI0_CUDA_GRAPHS=0 turns graphs off
    int pdl;                   // programmatic dependent launch for cuda_launch (PI0_CUDA_PDL=0 turns it off)
    const void *carved[CUDA_MAX_CARVED];   // kernels whose shared memory carveout is set (cuda_prefer_smem)
    int ncarved;
    int fused_small;           // the few-row kernels of gemv.cu / decode attention (PI0_CUDA_SMALL=0: cuBLASLt)
    int dap_ok;                // the portable path's decode attention kernel (attn_decode.cu; PI0_CUDA_SMALL=0: off)
    float *pscratch;           // its partial results (CUDA_P_SCRATCH bytes) and counters (CUDA_P_COUNTERS, zero
    unsigned *pcounters;       // between launches)
    int sms;                   // streaming multiprocessors of the device
    int smem_optin;            // the most shared memory a block may ask for (cudaDevAttrMaxSharedMemoryPerBlockOptin)
    struct cuda_wt_t { int w, wl; void *wt; int nw, k, ld, f32; } *wts;   // exact RTC: transposed copies of weights by id (gemm_bwd.cu)
    int n_wts, cap_wts;
    struct cuda_buf_t { char *p; size_t n; } *bufs;   // alloc()'s buffers and their bytes (footprint)
    int n_bufs, cap_bufs;
    int integrated;            // the GPU shares the host's memory (cudaDevAttrIntegrated: a Jetson)
    int zero_copy;             // host_view reads mapped inputs in place (integrated; PI0_CUDA_ZERO_COPY=1 / 0 forces)
    char *stage;               // page-locked ring for small uploads (truly asynchronous copies); reset at sync
    size_t stage_cap, stage_used;
    int flash;                 // flash attention for prefix / SigLIP segments (PI0_CUDA_FLASH=0: cuBLASLt + softmax;
                               // =mma: the prefix on the mma.sync kernel instead of the wgmma one)
    int gateup;                // gateup.cu's product for the prefix MLP (PI0_CUDA_GATEUP=0: cuBLASLt + gelu * up pass)
    int hopper;                // the Hopper kernels may run (compute capability 9.0 and not PI0_CUDA_PATH=portable);
                               // else the portable path: cuBLASLt products, no PDL, clusters, TMA or wgmma
    int capturing;
    int untuned;               // a GEMM met during capture had no timed algorithm (gemm.cu tune): no graph
    int early_next;            // backend.h early_next: few-row products trigger their dependent at entry
    int8_t *xq;                // an 8-bit product's input rows in int8 (linear_i8.cu): xq_rows x the store's q8_k
    float *xs;                 // their scales
    int32_t *acc;              // the int32 products of xq_rows rows (cuBLASLt), xq_rows x the store's q8_n
    size_t xq_rows;
    int64_t xq_k, acc_n;       // the columns xq and acc were sized for
    void *tok_part;            // next_token's per-block picks (decode.cu), tok_cap bytes
    size_t tok_cap, tok_smem;  // and the shared memory its kernel was opted in to
    pi0_status err;            // first asynchronous failure (sticky)
    char errmsg[512];
};

#define CTX(be) ((cuda_ctx *)(be)->ctx)

extern "C" wview cuda_wv(const cuda_ctx *c, const pi0_wt *W);
static inline const bf16 *wbf(const cuda_ctx *c, const pi0_wt *W) { return W ? cuda_wv(c, W).bf : NULL; }
static inline const float *wf32(const cuda_ctx *c, const pi0_wt *W) { return W ? cuda_wv(c, W).f32 : NULL; }

// Records the first failure; returns 1 if `e` is an error.
int cuda_note(cuda_ctx *c, cudaError_t e, const char *what, const char *file, int line);
int cublas_note(cuda_ctx *c, cublasStatus_t s, const char *what, const char *file, int line);
// The device exists and is made current (backend.cu), or an error naming it.
pi0_status cuda_select_device(int device);
#define CUDA_NOTE(c, call) cuda_note((c), (call), #call, __FILE__, __LINE__)
#define CUBLAS_NOTE(c, call) cublas_note((c), (call), #call, __FILE__, __LINE__)

static inline int cdiv(long long a, long long b) { return (int)((a + b - 1) / b); }

// ---- programmatic dependent launch (PDL, CUDA programming guide "Programmatic Dependent Launch") ----
// A kernel started by cuda_launch may begin while its predecessor in the stream still runs. Contract
// for every such kernel: it calls pdl_wait() before it reads or writes anything that an earlier kernel
// writes or reads, and pdl_trigger() only after that wait. Then, when a kernel starts, every kernel
// before its immediate predecessor has completed, and the only work it overlaps is its predecessor's
// tail: it may prefetch weights (constant) and older data (e.g. the prefix KV cache) before the wait.
// One exception, asked for by the caller (backend.h early_next): a few-row product that triggers at entry, so
// its dependent may start while the product's own predecessor still runs. That dependent may then read only
// constants before its wait.
// A kernel launched without the attribute (cuBLASLt) simply starts after its predecessor completes.
// Before compute capability 9.0 there is no PDL (backend.cu never asks for it there): both are no-ops.
__device__ __forceinline__ void pdl_wait() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Every kernel prefers the largest shared memory carveout (228 KB of the SM's 256 KB), so the SM never has to
// drain to change its L1 / shared memory split between two kernels: the overlap that PDL allows (the next
// few-row product's weights fetched while this kernel runs) needs both kernels resident at once
// (bench/RESULTS.md L41). Set once per kernel and context.
static inline void cuda_prefer_smem(cuda_ctx *c, const void *kernel) {
    for (int i = 0; i < c->ncarved; i++)
        if (c->carved[i] == kernel) return;
    if (c->ncarved < CUDA_MAX_CARVED) c->carved[c->ncarved++] = kernel;
    CUDA_NOTE(c, cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                      (int)cudaSharedmemCarveoutMaxShared));
}

template <typename T> struct launch_arg { typedef T type; };   // no deduction from the arguments: they convert
template <typename... P>
static void cuda_launch(cuda_ctx *c, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                        typename launch_arg<P>::type... args) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = c->pdl ? 1 : 0;
    cuda_prefer_smem(c, (const void *)kernel);
    cuda_note(c, cudaLaunchKernelEx(&cfg, kernel, args...), "cudaLaunchKernelEx", __FILE__, __LINE__);
}

// Value of an element of an ACT (bf16) or F32 buffer as fp32, and the store back.
template <typename T> __device__ __forceinline__ float ldf(const T *p, size_t i);
template <> __device__ __forceinline__ float ldf<float>(const float *p, size_t i) { return p[i]; }
template <> __device__ __forceinline__ float ldf<bf16>(const bf16 *p, size_t i) { return __bfloat162float(p[i]); }
template <typename T> __device__ __forceinline__ void stf(T *p, size_t i, float v);
template <> __device__ __forceinline__ void stf<float>(float *p, size_t i, float v) { p[i] = v; }
template <> __device__ __forceinline__ void stf<bf16>(bf16 *p, size_t i, float v) { p[i] = __float2bfloat16(v); }

// 2^x in one MUFU.EX2 (exp2f adds a range check and two multiplies for results below 2^-126; callers here need
// none: such results flush to 0).
__device__ __forceinline__ float ex2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// docs/model.md 3.4/3.7: GELU, tanh approximation, 0.5 x (1 + tanh(u)) with u = sqrt(2 / pi) (x + 0.044715 x^3), computed as
// the equal x / (1 + e^(-2u)): one ex2 and one reciprocal (MUFU) and four other instructions, where tanhf needs ~17
// (bench/RESULTS.md L107; the gelu * up epilogue of gateup.cu was bound by them). Both are within a few ulp of the
// exact value. Limits:
// e^(-2u) = inf (x < ~-10) gives x * 0 = -0, as tanh gives 0.5 x (1 - 1); x = +inf gives inf, x = -inf NaN, as before.
__device__ __forceinline__ float gelu_tanh(float x) {
    const float a = -2.0f * 0.7978845608028654f * 1.4426950408889634f;   // -2 sqrt(2 / pi) log2(e)
    return __fdividef(x, 1.0f + ex2_ftz(x * fmaf(a * 0.044715f, x * x, a)));
}

// V consecutive bf16 <-> fp32: one 16-byte access for V = 8 (the caller checks alignment), else scalar.
template <int V> __device__ __forceinline__ void ldv(float (&d)[V], const bf16 *p) {
    if constexpr (V == 8) {
        uint4 q = *(const uint4 *)p;
        const bf16 *b = (const bf16 *)&q;
#pragma unroll
        for (int e = 0; e < 8; e++) d[e] = __bfloat162float(b[e]);
    } else {
#pragma unroll
        for (int e = 0; e < V; e++) d[e] = __bfloat162float(p[e]);
    }
}
template <int V> __device__ __forceinline__ void stv(bf16 *p, const float (&s)[V]) {
    if constexpr (V == 8) {
        uint4 q;
        bf16 *b = (bf16 *)&q;
#pragma unroll
        for (int e = 0; e < 8; e++) b[e] = __float2bfloat16(s[e]);
        *(uint4 *)p = q;
    } else {
#pragma unroll
        for (int e = 0; e < V; e++) p[e] = __float2bfloat16(s[e]);
    }
}
static inline int aligned16(const void *p) { return !((uintptr_t)p & 15); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over a block of up to 1024 threads (blockDim.x a multiple of 32); every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float part[32];
    __shared__ float total;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();   // part[] may still be read by a previous call
    if (lane == 0) part[w] = v;
    __syncthreads();
    if (w == 0) {
        float x = lane < (int)(blockDim.x >> 5) ? part[lane] : 0.0f;
        x = warp_sum(x);
        if (lane == 0) total = x;
    }
    __syncthreads();
    return total;
}

// ---- entry points shared between the .cu files (the op table is assembled in backend.cu) ----
// gemm.cu: Y[M,N] (row-major, ldy) = alpha * X[M,K] (ldx) . op(W) + beta * Y (+ bias[N]), op(W) = W^T
// for W row-major [N, K] (trans_w = 1) or W for W row-major [K, N] (trans_w = 0); types are
// CUDA_R_16BF or CUDA_R_32F; fp32 accumulation. batch > 1: strided batch with element strides.
void cuda_gemm(cuda_ctx *c, int trans_w, int M, int N, int K, float alpha, const void *X, int ldx, cudaDataType tx,
               const void *W, int ldw, cudaDataType tw, float beta, void *Y, int ldy, cudaDataType ty,
               const void *bias, int batch, long long sx, long long sw, long long sy);
// The same with an epilogue GELU (tanh form) after the bias, and a bias batch stride sb (elements).
void cuda_gemm_ex(cuda_ctx *c, int trans_w, int M, int N, int K, float alpha, const void *X, int ldx, cudaDataType tx,
                  const void *W, int ldw, cudaDataType tw, float beta, void *Y, int ldy, cudaDataType ty,
                  const void *bias, int batch, long long sx, long long sw, long long sy, long long sb, int gelu);
// FP8 (E4M3) operands X [M, K] and W [N, K], both row-major with ld K: Y (ldy N) = per-row scales sx[m] sw[n] applied
// to the fp32-accumulated product, + bias (fp32), GELU, + beta Y, in bf16 (ty CUDA_R_16BF); or (ty CUDA_R_32F) the
// unscaled fp32 product alone. 0 where cuBLASLt has no algorithm for it here (nothing ran, no error set).
int cuda_gemm_f8(cuda_ctx *c, int M, int N, int K, const void *X, const void *W, void *Y, cudaDataType ty,
                 const float *sx, const float *sw, const float *bias, float beta, int gelu);
gemm_cache *gemm_cache_new(void);
void gemm_cache_free(gemm_cache *g);
// linear_i8.cu: linear with an int8 or E4M3 weight (backend.h linear), and the scratch it needs for rows of the
// store's widest 8-bit weight (at reserve)
void cuda_linear_i8(cuda_ctx *c, pt out, pt x, const wview *W, const float *bias, int M, int N, int K, enum pi0_epi epi);
void cuda_linear_f8(cuda_ctx *c, pt out, pt x, const wview *W, const float *bias, int M, int N, int K, enum pi0_epi epi);
pi0_status cuda_reserve_i8(cuda_ctx *c, size_t max_rows);
// cuda_linear on a weight view: a pi0_wt's copies (cuda_wv) or a copy the caller owns (gemm_bwd.cu's transposes)
void cuda_linear_v(pi0_backend *be, pt out, pt x, const wview *W, const wview *b, int M, int N, int K, int k0,
                   enum pi0_epi epi);
void cuda_linear(pi0_backend *be, pt out, pt x, const pi0_wt *W, const pi0_wt *b, int M, int N, int K, int k0,
                 enum pi0_epi epi);
void cuda_qkv(pi0_backend *be, pt q, pt k, pt v, pt y, const pi0_proj3 *p, int M, int K, pt pos, int hd,
              const pi0_prenorm *pre);
void cuda_mlp_up(pi0_backend *be, pt out, pt tmp, pt y, const pi0_gemma_layer *L, int M, int F, int K,
                 const pi0_prenorm *pre);
void cuda_mlp_up_save(pi0_backend *be, pt out, pt gs, pt us, pt y, const pi0_gemma_layer *L, int M, int F, int K,
                      const pi0_prenorm *pre);
void cuda_linear_gated(pi0_backend *be, pt x, pt tmp, pt y, const pi0_wt *W, int M, int N, int K, pt gate,
                       int gate_stride, int rows_per_gate);
void cuda_residual_save(pi0_backend *be, pt x, pt save, pt tmp, pt y, const pi0_wt *W, int M, int N, int K, pt gate,
                        int gate_stride, int rows_per_gate);
int cuda_adjacent(const cuda_ctx *c, const pi0_wt *const *w, int n);   // the store placed them as one matrix, in order
// gemm_bwd.cu: linear's transposes (exact real-time chunking)
void cuda_linear_t(pi0_backend *be, pt out, pt dy, const pi0_wt *W, int M, int N, int K, int k0, enum pi0_epi epi);
void cuda_linear_t_cat(pi0_backend *be, pt out, pt dy, int ld, const pi0_wt *const *W, int nw, int M, int K,
                       enum pi0_epi epi);
// gemv.cu: Y = X . W^T for M <= GEMV_ROWS rows with fused epilogues (see gemv.cu)
enum { GEMV_ROWS = 64 };
enum { GEMV_STORE, GEMV_ADD, GEMV_GELU, GEMV_GELU_MUL, GEMV_QKV_ROPE, GEMV_GATED_ADD };
struct gemv_args {
    const bf16 *x;            // (M, K) rows, stride ldx
    const bf16 *w;            // (N, ldw) row-major, columns [0, K) used
    int M, N, K, ldx, ldw;
    int pair;                 // 0, or P: a block's rows are [a0, a0 + R/2) and [a0 + P, a0 + P + R/2), so
                              // that the epilogue sees rows n and n + P together (GELU_MUL, QKV_ROPE)
    int epi;                  // GEMV_*
    const float *bias;        // (N) fp32 or NULL (not with pair)
    bf16 *y;                  // STORE/ADD/GELU/GATED_ADD: (M, ldy); GELU_MUL: (M, ldy) holding the N / 2 products
    int ldy;
    bf16 *gs, *us;            // GELU_MUL, M <= 16: also the products themselves, (M, N / 2) each, or NULL
    bf16 *save;               // STORE/ADD/GATED_ADD, M <= 16: also the outputs here, (M, ldy), or NULL
    bf16 *q, *k, *v;          // QKV_ROPE: (M, nq), (M, nk), (M, N - nq - nk); RoPE on q and k at pos
    int nq, nk, hd;
    const int32_t *pos;
    const float *norm_a;      // non-NULL: X rows are normalised first, x rsqrt(mean(x^2) + eps) (1 + norm_a[k])
    const float *norm_b;      //   (+ norm_b[k] if not NULL): RMSNorm (w) or adaRMS (scale, shift); K = 1024 and
                              //   M <= 16 only, M <= 15 with norm_b
    float eps;
    const float *gate;        // GATED_ADD: y += gate[m / rows_per_gate, n] * bf16(product); rows of gate_stride
    int gate_stride, rows_per_gate;
    int early;                // trigger the dependent launch at entry, not after the wait (backend.h early_next)
};
int cuda_gemv_ok(const gemv_args *a, int nt);

// Launches when the shape is supported (returns 1), else returns 0 and does nothing. nt (output rows
// per block / 8: 1, 2, 4, 8) is 0 for the default choice (the lab sets it).
int cuda_gemv(cuda_ctx *c, const gemv_args *a, int nt);
void cuda_gemv_setup(cuda_ctx *c);
enum { CUDA_P_SCRATCH = 8 << 20, CUDA_P_COUNTERS = 4096 };
struct CUtensorMap_st;
// A 2-D bf16 tensor map (rows x cols, row stride ld elements) for boxes of box_rows x 64 with the 128-byte swizzle
// (the wgmma operand layout, mma.cuh); 0 if the driver refuses it.
int cuda_tensor_map(struct CUtensorMap_st *m, const void *p, int rows, int cols, int ld, int box_rows);
// The driver's encoder for maps of other shapes (gateup.cu), or NULL.
PFN_cuTensorMapEncodeTiled_v12000 cuda_tensor_map_encoder(void);
// gateup.cu: out (M, F) = gelu_tanh(X Wg^T) * (X Wu^T) on the warpgroup MMA, w = the adjacent [gate; up] rows
// (row stride K); bn = 0: the token tile width for M. Returns 0 (nothing launched) when the shape or the alignment
// does not fit (M below the narrowest tile, F % 64, K % 8, 16-byte bases) or PI0_CUDA_GATEUP=0.
int cuda_gateup(cuda_ctx *c, bf16 *out, const bf16 *x, int ldx, const bf16 *w, int M, int F, int K, int bn);
void cuda_gateup_setup(cuda_ctx *c);
// attention.cu
void cuda_attention(pi0_backend *be, pt out, pt q, const pi0_attn *a);
void cuda_attention_setup(cuda_ctx *c);
// attn_bwd.cu: attention's transpose
void cuda_attention_bwd(pi0_backend *be, pt dq, pt dk, pt dv, pt dout, pt q, const pi0_attn *a, int ld);
// norm.cu
void cuda_layernorm(pi0_backend *be, pt out, pt x, const pi0_wt *w, const pi0_wt *b, int M, int D, float eps);
void cuda_rmsnorm(pi0_backend *be, pt out, pt x, const pi0_wt *w, int M, int D, float eps);
void cuda_adarms(pi0_backend *be, pt out, pt x, pt mod, int rows_per_mod, int M, int D, float eps);
void cuda_norm_bwd(pi0_backend *be, pt dx, pt dy, pt x, const pi0_wt *w, pt mod, int rows_per_mod, int M, int D,
                   float eps, enum pi0_epi epi);
// elementwise.cu
void cuda_patch_embed(pi0_backend *be, pt out, pt img, pt sel, int n, const pi0_wt *w, const pi0_wt *b,
                      const pi0_wt *pos, int image_size, int patch);
void cuda_rope(pi0_backend *be, pt q, int qh, pt k, int kh, pt pos, int M, int head_dim);
void cuda_rope_bwd(pi0_backend *be, pt q, int qh, pt k, int kh, pt pos, int M, int head_dim, int ld);
void cuda_gelu_mul(pi0_backend *be, pt out, pt g, pt u, int M, int F);
void cuda_gelu_mul_bwd(pi0_backend *be, pt dg, pt du, pt dy, pt g, pt u, int M, int F, int ld);
void cuda_embed(pi0_backend *be, pt out, pt rows, pt ids, int n, const pi0_wt *table, float scale);
void cuda_copy_rows(pi0_backend *be, pt dst, pt di, pt src, pt si, int n, int D);
void cuda_next_token(pi0_backend *be, pt ids, pt top2, pt x, const pi0_wt *W, int M, int V, int K, float temperature,
                     uint64_t seed);
void cuda_gated_add(pi0_backend *be, pt x, pt y, pt gate, int gate_stride, int rows_per_gate, int M, int D);
void cuda_scale_rows(pi0_backend *be, pt out, pt x, pt v, int stride, int rows_per_vec, int M, int D);
void cuda_add_rows(pi0_backend *be, pt x, pt v, int rows_per_vec, int M, int D, enum pi0_act act);
void cuda_swish_bwd(pi0_backend *be, pt dz, pt dy, pt z, int M, int D);
void cuda_axpy(pi0_backend *be, pt x, pt y, float alpha, size_t n);
void cuda_f32_to_bf16(cuda_ctx *c, bf16 *dst, const float *src, size_t n);
// rtc.cu: real-time chunking's guidance
void cuda_rtc_guide(pi0_backend *be, pt v, pt x, pt y, pt w, pt g, int steps, int k, float t, int rows, int H, int A);
void cuda_rtc_error(pi0_backend *be, pt err, pt v, pt x, pt y, pt w, pt jac, float t, int rows, int H, int A);
void cuda_rtc_correct(pi0_backend *be, pt v, pt err, pt dx, pt g, pt jac, int steps, int k, float t, int rows, int H,
                      int A);
