/* backend.h — the op table that model.c is written against, filled by the CPU reference (src/cpu/)
 * and the CUDA backend (src/cuda/), and the providers the API layer (api_model.c, api_session.c) creates them
 * through (backends.c). Ops enqueue work and never synchronise, except download.
 *
 * Buffers (pt) are allocated by the backend at session create; model.c never dereferences them.
 * A pt has a kind: PT_ACT is the backend's activation storage (fp32 on the CPU, bf16 on the GPU),
 * PT_F32 is always fp32 (flow state x_t, velocities, time terms), PT_I32 holds indices.
 * All matrices are row-major. Shape letters: M rows, N out features, K in features, D width.
 * Every op documents the docs/model.md section it implements; the CPU twin is the definition. */
#ifndef PI0_BACKEND_H
#define PI0_BACKEND_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "pi0.h"
#include "quant.h"
#include "weights.h"

/* The ops are primitive (a product, a norm, an attention) where fusion can live inside a backend, with four
 * exceptions kept in the table because the fusion changes what crosses the op boundary: qkv (three projections,
 * + RoPE, and an optional pre-norm), mlp_up (gate|up + gelu * up, optional pre-norm) and linear_gated (π0.5's
 * gated residual). At the denoise's 11-51 rows a launch costs as much as its work, and the fused forms read each
 * input once and skip the intermediates (bench/RESULTS.md: the few-row products L15-L17, the folded norms L56 /
 * L61, gateup.cu L92); their CPU twins compose the primitive ops, so the definition stays primitive. Two host
 * hints stay too: run_graph's key is the host-side shape signature only the model knows, and early_next is a
 * dataflow fact about the model's op order (the next op reads only constants), which no backend can infer. */

enum { PT_ACT = 0, PT_F32 = 1, PT_I32 = 2 };

typedef struct {
    char *p;     /* backend address (device pointer on GPUs): never dereferenced outside the backend */
    int kind;
} pt;

enum pi0_epi { EPI_STORE, EPI_ADD, EPI_GELU };   /* linear epilogues: y=, y+=, y=gelu_tanh() */
enum pi0_act { ACT_NONE, ACT_SWISH };

/* Attention over segments (one per image or batch element), docs/model.md 3.6/3.7/3.10.
 * Query rows of segment s: [q_off[s], q_off[s+1]); rows of out outside [q_off[0], q_off[nseg]) are left as they are.
 * Keys/values come from source 1 (rows [k_off[s], k_off[s+1]) of k1/v1) and optionally source 2 (k2/v2, rows aligned
 * with the queries).
 * Query j of a segment sees all of its source-1 keys and source-2 keys [0, j < block0 ? block0 : n).
 * With tail > 0 (and no source 2) the last `tail` source-1 keys of each segment are the suffix keys
 * instead and follow the same rule: query j sees the first n1 - tail keys and then
 * [0, j < block0 ? block0 : tail) of the tail.
 * Heads: query head h reads kv head h / (heads / kv_heads). Logits scaled by `scale`, softmax in fp32.
 * With tail > 0 the first n1 - tail keys, and with a second source all source-1 keys, are a cache that the op
 * just before did not write (a backend may start reading them before that op finishes).
 * The offsets are HOST arrays: backends launch per segment (a CUDA graph bakes them in). */
typedef struct {
    int nseg, heads, kv_heads, head_dim;
    float scale;
    const int32_t *q_off, *k_off;   /* host [nseg + 1] */
    /* host [nseg] or NULL: segment s reads source-1 keys [k_off[s], k_end[s]) instead, ranges that may overlap or
     * leave gaps (π0-FAST: each block of its prefix-LM mask sees the keys up to its end; each decoded row its own
     * sample's cache). Only with no source 2 and tail 0; attention_bwd takes none. */
    const int32_t *k_end;
    /* NULL p, or with k_end a DEVICE array [nseg] (I32) read when the op runs: segment s reads its first
     * min(k_len[s], k_end[s] - k_off[s]) source-1 keys, k_len[s] >= 1; the host's k_end is the bound the launches are
     * sized for. So a graph captured once replays over a cache that grows (π0-FAST's decode steps). */
    pt k_len;
    pt k1, v1;            /* rows of kv_heads*head_dim */
    pt k2, v2;            /* optional (p == NULL): suffix keys */
    int block0;
    int tail;
} pi0_attn;

/* The end of segment s's source-1 keys. */
static inline int32_t attn_k1_end(const pi0_attn *a, int s) { return a->k_end ? a->k_end[s] : a->k_off[s + 1]; }

/* The q, k, v projections of one attention layer: weights [N_i, K] and optional biases (NULL). */
typedef struct {
    const pi0_wt *w[3], *b[3];
} pi0_proj3;

/* Optional norm of the input rows of qkv / mlp_up (docs/model.md 3.7): the product reads norm(y), the Gemma RMSNorm
 * (w != NULL) or adaRMS (mod rows, rows_per_mod, as the adarms op), with eps. `out` (M, K) is scratch that
 * may receive norm(y); a backend that fuses the norm into the product need not write it. */
typedef struct {
    const pi0_wt *w;
    pt mod;
    int rows_per_mod;
    float eps;
    pt out;
} pi0_prenorm;

typedef struct pi0_backend pi0_backend;
struct pi0_backend {
    const char *name;
    char device[192], driver[64];   /* filled at create, for reports */
    void *ctx;
    pt (*alloc)(pi0_backend *be, size_t n, int kind);   /* zero-filled; p == NULL on failure */
    void (*release)(pi0_backend *be, pt t);             /* frees one alloc() result; NULL p is a no-op */
    /* Scratch for the largest linear (max_rows rows), attention row (max_keys), one segment's
     * attention logits (max_scores = query rows x heads x keys) and one fused projection output
     * (max_fused = rows x (q + k + v or gate + up widths)); called at session create. */
    pi0_status (*reserve)(pi0_backend *be, size_t max_rows, size_t max_keys, size_t max_scores, size_t max_fused);
    pi0_status (*sync)(pi0_backend *be);                /* waits for queued work; reports async errors */
    /* Runs fn(arg) as a CUDA graph per key (the host-side sizes the launches depend on, and the address of any input
     * read in place: host_view); NULL = the backend has no graphs (fn is called directly). On a new key fn is called
     * twice: once run directly (its result is the call's), once captured; the graph replays from the next call with
     * that key on. So fn only enqueues work on the backend's stream and may be called repeatedly with the same
     * effect. */
    pi0_status (*run_graph)(pi0_backend *be, const int32_t *key, int keylen, void (*fn)(void *), void *arg);
    void (*destroy)(pi0_backend *be);
    /* Profiling annotation (NVTX ranges on CUDA): opens a range `name`, or closes the innermost open one for
     * name == NULL. Host-side only, no effect on results; NULL = the backend has none. */
    void (*range)(pi0_backend *be, const char *name);
    /* Scheduling hint; NULL = the backend has none. While on, a product lets the kernel after it start (and fetch its
     * weights) at once rather than when the product's own inputs are ready. Only for products whose next op reads
     * nothing before its inputs are ready but constants (weights, norm factors): the expert's o before gate|up
     * (bench/RESULTS.md L112). Contract: results are bit for bit those with the hint off (test_cuda_ops checks the
     * expert's o, gate|up sequence both ways). */
    void (*early_next)(pi0_backend *be, int on);
    /* The row stride (>= width) that linear_t_cat reads fastest for cotangents `width` columns wide; the model
     * allocates its side-by-side cotangent buffers with it and keeps the columns past width zero. NULL: width. */
    int (*cat_ld)(pi0_backend *be, int width);
    /* The device's memory in use and in all (for reports); NULL = the backend has no device memory (the CPU). */
    pi0_status (*memory)(pi0_backend *be, size_t *used, size_t *total);
    /* What this session and its model's weight store hold in the device's memory (pi0.h pi0_memory_info); NULL = the
     * backend has no device memory. */
    pi0_status (*footprint)(pi0_backend *be, pi0_memory_info *out);
    pi0_status (*upload)(pi0_backend *be, pt dst, const void *src, size_t n);    /* n elements, host kind = dst kind */
    /* An input read in place instead of uploaded: a pt through which the ops read the caller's host memory src (of
     * `kind`), or p == NULL where the backend cannot (then upload). For page-locked memory the device can address (the
     * provider's host_alloc) on a GPU that shares the host's memory, where a copy would be one more pass over the same
     * DRAM. The caller keeps src unchanged until the inference is synchronised (download, sync), as for an upload,
     * whose copy is asynchronous too; a captured graph bakes the address in, so the run_graph key must carry it. NULL =
     * the backend has none. */
    pt (*host_view)(pi0_backend *be, const void *src, int kind);
    pi0_status (*download)(pi0_backend *be, float *dst, pt src, size_t n);       /* any float kind -> fp32, syncs */
    size_t (*elem_size)(int kind);

    /* out[i] (M = n*T rows, Dv) = conv14(img[sel[i]]) + b + pos (docs/model.md 3.4, fp32 math); img F32 [*, R, R, 3] */
    void (*patch_embed)(pi0_backend *be, pt out, pt img, pt sel, int n, const pi0_wt *w, const pi0_wt *b,
                        const pi0_wt *pos, int image_size, int patch);
    void (*layernorm)(pi0_backend *be, pt out, pt x, const pi0_wt *w, const pi0_wt *b, int M, int D, float eps);
    /* Gemma RMSNorm: out = x * rsqrt(mean(x^2) + eps) * (1 + w) (docs/model.md 3.7) */
    void (*rmsnorm)(pi0_backend *be, pt out, pt x, const pi0_wt *w, int M, int D, float eps);
    /* adaRMS: out = x * rsqrt(mean(x^2)+eps) * (1 + scale) + shift; mod F32 rows of [scale|shift|gate]
     * (stride 3D), row r uses mod row r / rows_per_mod (docs/model.md 3.7). */
    void (*adarms)(pi0_backend *be, pt out, pt x, pt mod, int rows_per_mod, int M, int D, float eps);
    /* out (M, N) [op]= x (M, K) . W[:, k0:k0+K]^T + b; W has W->cols columns. b may be NULL. Where the store keeps W in
     * 8 bits (k0 = 0, K = W->cols), each row of x is quantised as quant_row_i8 / quant_row_f8 does and the output is
     * quant_dequant's
     * (ACT rows: the stored values, bf16 on the GPU); every op that takes weights (qkv, mlp_up, linear_gated, ...) then
     * computes its products so. */
    void (*linear)(pi0_backend *be, pt out, pt x, const pi0_wt *W, const pi0_wt *b, int M, int N, int K, int k0,
                   enum pi0_epi epi);
    /* In-place half-split RoPE of q (M rows of qh heads) and k (M rows of kh heads, k.p may be NULL),
     * head_dim hd, angles pos[row] * 10000^(-2i/hd) (docs/model.md 3.7). */
    void (*rope)(pi0_backend *be, pt q, int qh, pt k, int kh, pt pos, int M, int head_dim);
    void (*attention)(pi0_backend *be, pt out, pt q, const pi0_attn *a);
    /* q, k, v = y . W[i]^T (+ b[i]) for the three projections of an attention layer, y (M, K) (normalised
     * first by pre, if not NULL); then, if pos.p, RoPE on q and k at positions pos with head_dim hd (docs/model.md
     * 3.4/3.7). A backend may run it as one product and one kernel where its weight store holds the three as one
     * matrix. */
    void (*qkv)(pi0_backend *be, pt q, pt k, pt v, pt y, const pi0_proj3 *p, int M, int K, pt pos, int hd,
                const pi0_prenorm *pre);
    /* out = gelu_tanh(y . Wgate^T) * (y . Wup^T), (M, F), y normalised first by pre if not NULL; tmp (M, F)
     * is scratch (docs/model.md 3.7 MLP). */
    void (*mlp_up)(pi0_backend *be, pt out, pt tmp, pt y, const pi0_gemma_layer *L, int M, int F, int K,
                   const pi0_prenorm *pre);
    /* mlp_up that also keeps the two products as stored, g = y . Wgate^T and u = y . Wup^T, (M, F) each: exact
     * real-time chunking's forward keeps them for gelu_mul_bwd. */
    void (*mlp_up_save)(pi0_backend *be, pt out, pt g, pt u, pt y, const pi0_gemma_layer *L, int M, int F, int K,
                        const pi0_prenorm *pre);
    /* out = gelu_tanh(g) * u, (M, F) */
    void (*gelu_mul)(pi0_backend *be, pt out, pt g, pt u, int M, int F);
    /* out[rows[i]] = table[ids[i]] * scale, i < n (docs/model.md 3.6); ids were range-checked by the caller */
    void (*embed)(pi0_backend *be, pt out, pt rows, pt ids, int n, const pi0_wt *table, float scale);
    /* π0-FAST's next token for each of M rows (docs/model.md 7.4): the logits l_j = x[r] . W[j], j < V (W: the
     * embedding table, V rows of K; fp32 sums of the stored values); ids[r] = the first j of the largest l_j
     * (temperature 0, greedy), or of the largest l_j / temperature + g(seed, r, j) (pi0_gumbel: sampling with the
     * Gumbel-max rule). top2 (F32 [M, 2], p NULL = not wanted): the largest and the second-largest l_j, whose
     * difference is the greedy choice's margin. */
    void (*next_token)(pi0_backend *be, pt ids, pt top2, pt x, const pi0_wt *W, int M, int V, int K, float temperature,
                       uint64_t seed);
    /* dst[di ? di[i] : i] = src[si ? si[i] : i], n rows of D (kinds may differ: converts) */
    void (*copy_rows)(pi0_backend *be, pt dst, pt di, pt src, pt si, int n, int D);
    /* π0.5's gated residual (docs/model.md 3.7): x (M, N) += gate[r / rows_per_gate] * t, t = y (M, K) . W^T (no bias)
     * rounded to ACT as EPI_STORE would; gate F32 rows with stride gate_stride; tmp (M, N) ACT scratch that a
     * backend may use for t (one product and one add; the CUDA few-row product adds in its epilogue) */
    void (*linear_gated)(pi0_backend *be, pt x, pt tmp, pt y, const pi0_wt *W, int M, int N, int K, pt gate,
                         int gate_stride, int rows_per_gate);
    /* The expert's residual add that also keeps its result (exact real-time chunking's forward): x (M, N) += y (M, K)
     * . W^T as linear's EPI_ADD, or with gate.p as linear_gated; then save = x (M, N) unless save.p is NULL. */
    void (*residual_save)(pi0_backend *be, pt x, pt save, pt tmp, pt y, const pi0_wt *W, int M, int N, int K, pt gate,
                          int gate_stride, int rows_per_gate);
    /* x[r] = act(x[r] + v[r / rows_per_vec]) with v F32 rows of D */
    void (*add_rows)(pi0_backend *be, pt x, pt v, int rows_per_vec, int M, int D, enum pi0_act act);
    /* x += alpha * y (F32) */
    void (*axpy)(pi0_backend *be, pt x, pt y, float alpha, size_t n);
    /* Real-time chunking's guidance as LeRobot computes it (pi0.h pi0_rtc_mode, docs/model.md 3.11): for rows of A
     * values (F32), v -= g[(row / H) * steps + k] * ((y - (x - t * v)) * w[row]); g F32 [samples, steps] (each
     * sample's guidance weight per step), w F32 [rows] (the prefix weights), y the leftover. Each product and sum
     * rounded to fp32 as PyTorch's ops do. */
    void (*rtc_guide)(pi0_backend *be, pt v, pt x, pt y, pt w, pt g, int steps, int k, float t, int rows, int H, int A);

    /* ---- Exact real-time chunking (docs/model.md 3.11): the vector-Jacobian product of one denoising step's
     * velocity with respect to x_t, through the action expert, with the prefix K/V constant. Each op below is the
     * transpose (cotangent map) of the forward op it names: given the cotangent dy of that op's output it gives the
     * cotangent of its input(s). Cotangents live in the kind of the value they belong to. */
    /* out (M, K) [op]= dy (M, N) . W[:, k0:k0+K]: linear's input cotangent (op EPI_STORE or EPI_ADD). */
    void (*linear_t)(pi0_backend *be, pt out, pt dy, const pi0_wt *W, int M, int N, int K, int k0, enum pi0_epi epi);
    /* out (M, K) [op]= sum_i dy[:, c_i : c_i + W[i]->rows] . W[i], c_i = W[0]->rows + ... + W[i-1]->rows, K = the
     * weights' cols, dy rows of stride ld >= the sum of the rows: the transposes of products that read one input (q,
     * k, v; gate, up) as one product over their output cotangents side by side. The columns past the sum must be
     * finite (a backend may multiply them by zero weights, so that the ld it asks for in cat_ld makes one product of
     * the group); the model keeps them zero. */
    void (*linear_t_cat)(pi0_backend *be, pt out, pt dy, int ld, const pi0_wt *const *W, int nw, int M, int K,
                         enum pi0_epi epi);
    /* dx [op]= the input cotangent of rmsnorm (w != NULL) or adarms (w == NULL; mod, rows_per_mod as adarms) at
     * input x for the output cotangent dy: with r = rsqrt(mean(x^2) + eps), a = 1 + w (or 1 + scale),
     * dx_j = r a_j dy_j - x_j r^3 / D * sum_i(a_i dy_i x_i); the shift has no x dependence. */
    void (*norm_bwd)(pi0_backend *be, pt dx, pt dy, pt x, const pi0_wt *w, pt mod, int rows_per_mod, int M, int D,
                     float eps, enum pi0_epi epi);
    /* dg = dy * u * gelu_tanh'(g), du = dy * gelu_tanh(g): gelu_mul's cotangents, (M, F) each, rows of dg and du of
     * stride ld (0: F; dy, g, u packed). */
    void (*gelu_mul_bwd)(pi0_backend *be, pt dg, pt du, pt dy, pt g, pt u, int M, int F, int ld);
    /* dz = dy * swish'(z) = dy * s (1 + z (1 - s)), s = sigmoid(z), (M, D) F32: add_rows' ACT_SWISH cotangent. */
    void (*swish_bwd)(pi0_backend *be, pt dz, pt dy, pt z, int M, int D);
    /* RoPE's transpose, in place: the rotation of rope by minus the same angles (arguments as rope; rows of q and k
     * of stride ld, 0: packed). */
    void (*rope_bwd)(pi0_backend *be, pt q, int qh, pt k, int kh, pt pos, int M, int head_dim, int ld);
    /* attention's cotangents for the output cotangent dout (rows of q, as attention's out): dq (rows of q) and dk, dv
     * (rows aligned with the queries, rows of kv_heads*head_dim): the cotangents of the suffix keys and values, those
     * of source 2, or with tail > 0 the segment's last `tail` source-1 keys (then tail = the segment's query rows).
     * Source-1 keys before the tail are constants (the prefix cache). dk, dv are written (not accumulated). Rows of
     * dq, dk and dv of stride ld (0: packed, heads * head_dim and kv_heads * head_dim). */
    void (*attention_bwd)(pi0_backend *be, pt dq, pt dk, pt dv, pt dout, pt q, const pi0_attn *a, int ld);
    /* out[r] = x[r] * v[(r / rows_per_vec) * stride + i]: the cotangent of linear_gated's product through its gate;
     * x, out ACT (M, D), v F32. */
    void (*scale_rows)(pi0_backend *be, pt out, pt x, pt v, int stride, int rows_per_vec, int M, int D);
    /* The guided velocity (F32 rows of A), each sample b = row / H in its own form, jac[b] (F32 [samples]), so that a
     * sample's answer does not depend on the samples batched with it:
     * - jac != 0, the paper's exact guidance (err^T dx1/dx_t with x1 = x_t - t v): rtc_error gives
     *   err = (y - (x - t v)) * w[row] in double, rounded once to fp32; then, once dx = err^T dv/dx_t is known,
     *   rtc_correct gives v -= g[b * steps + k] * (err - jac[b] * t * dx) in double, rounded once.
     * - jac 0, LeRobot's form (err itself): rtc_error and rtc_correct together make rtc_guide's fp32 operations in its
     *   order (err = (y - (x - t * v)) * w[row], then v - g * err), so the result is rtc_guide's bit for bit; dx is
     *   not read. */
    void (*rtc_error)(pi0_backend *be, pt err, pt v, pt x, pt y, pt w, pt jac, float t, int rows, int H, int A);
    void (*rtc_correct)(pi0_backend *be, pt v, pt err, pt dx, pt g, pt jac, int steps, int k, float t, int rows, int H,
                        int A);
};

/* The CPU reference; weights: the store of cpu_weights_upload (the 8-bit weights), or NULL. */
pi0_status cpu_backend_create(pi0_backend **out, int n_threads, const void *weights);
pi0_status cpu_weights_upload(void **store, const pi0_weights *w, const pi0_config *c, const pi0_quant *q, int device,
                              void (*done)(void *user, const pi0_wt *t), void *user);
void cpu_weights_free(void *store);
/* The op tests' stores: ts[i] in the 8-bit format fmt[i] (a pi0_precision; 0: as it is; ids 1 .. max_id), and the
 * store a backend's ops read from now on. */
pi0_status cpu_weights_list(void **store, const pi0_wt *const *ts, const int *fmt, int n, int max_id);
void cpu_use_weights(pi0_backend *be, const void *store);

/* ---- the backends of this build (backends.c: the one place that knows which exist) ----
 * What the API layer (api_model.c, api_session.c) needs from a backend beyond its op table: whether a device suits
 * it, a backend instance per session, the model's weights in a store the backend owns, and host memory its uploads
 * read fast. */
typedef struct {
    const char *name;                                                   /* "cpu", "cuda" */
    pi0_status (*check)(int device);                                    /* NULL: always usable */
    /* weights: the model's store (weights_upload's), NULL where the backend has none */
    pi0_status (*create)(pi0_backend **out, int device, int n_threads, const void *weights);
    /* Copies the bound weights into a store the backend owns, keyed by each pi0_wt's id (weights.h), laid out as the
     * backend plans (its fused ops' groups placed together, the copies in the formats its kernels read); the ops of
     * every session created with the store find each weight there. The weights q selects are kept in q's 8-bit format
     * (quant.h) instead, and the ops read them so. w is not changed. A store that never reads the host view again calls
     * done(user, t) (done may be NULL) once it has read tensor t for the last time, so that the caller can release its
     * pages while the rest uploads: where the device's memory is the host's (a Jetson) a checkpoint's host view and
     * its copy would otherwise both hold the model. NULL: the backend reads the host mapping in place (and has no 8-bit
     * path). */
    pi0_status (*weights_upload)(void **store, const pi0_weights *w, const pi0_config *c, const pi0_quant *q,
                                 int device, void (*done)(void *user, const pi0_wt *t), void *user);
    void (*weights_free)(void *store);
    void *(*host_alloc)(size_t bytes);                                  /* NULL: plain host memory serves */
    void (*host_free)(void *p);
} pi0_backend_provider;

/* The provider of a backend kind (DEFAULT = CPU), or NULL when this build lacks it. */
const pi0_backend_provider *backend_provider(pi0_backend_kind kind);
/* The provider whose host_alloc makes page-locked memory in this build (the GPU's), or NULL. */
const pi0_backend_provider *backend_pinned_provider(void);

/* The unfused pre-norm: norm(y) into pre->out with the backend's own norm ops; returns the rows to use. */
static inline pt prenorm_rows(pi0_backend *be, pt y, const pi0_prenorm *pre, int M, int K) {
    if (!pre) return y;
    if (pre->w) be->rmsnorm(be, pre->out, y, pre->w, M, K, pre->eps);
    else be->adarms(be, pre->out, y, pre->mod, pre->rows_per_mod, M, K, pre->eps);
    return pre->out;
}

#ifdef __CUDACC__
#define PI0_HOST_DEVICE __host__ __device__
#else
#define PI0_HOST_DEVICE
#endif
/* next_token's Gumbel noise for row r and token j: u = (24 random bits + 0.5) / 2^24 in (0, 1) from a SplitMix64 hash
 * of (seed, r, j), then -log(-log(u)) in fp32. Every backend draws the same u; the logarithms may differ by an ulp. */
static inline PI0_HOST_DEVICE float pi0_gumbel(uint64_t seed, uint32_t r, uint32_t j) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * ((((uint64_t)r << 32) | j) + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    float u = ((float)(z >> 40) + 0.5f) * (1.0f / 16777216.0f);
    return -logf(-logf(u));
}

static inline pt pt_at(const pi0_backend *be, pt t, size_t elems) {
    t.p += elems * be->elem_size(t.kind);
    return t;
}

#endif
