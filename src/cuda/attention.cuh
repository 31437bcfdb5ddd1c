// attention.cuh — the attention paths' entry points: attention.cu dispatches between them, each file holds one path
// (attn_decode.cu, attn_flash_wg.cu, attn_flash.cu). Shared by those files only; the op table sees cuda_attention
// (common.cuh), and attention's transpose (attn_bwd.cu) is no path of the forward op.
#pragma once
#include "common.cuh"

// attn_decode.cu: g equal segments of few query rows (returns 0 when the path does not apply)
int cuda_decode_attention(cuda_ctx *c, bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *k2,
                          const bf16 *v2, int g, int nq, const pi0_attn *a, int n1, int ks, const int *nkd);
void cuda_decode_attention_setup(cuda_ctx *c);
void cuda_decode_attention_p_setup(cuda_ctx *c, int device);   // the portable path
// attn_flash_wg.cu: the prefix's g segments on the wgmma kernel (returns 0 when the tensor maps cannot be made)
int cuda_flash_wg(cuda_ctx *c, bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v, int g, int rows, int nk, float sl2);
void cuda_flash_wg_setup(cuda_ctx *c);
// attn_flash.cu: flash attention on mma.sync
enum { FA_BM = 64 };   // query rows per block
#define FA_SLACK 8.0f  // lazy rescaling: the running max moves only past this many (base-2) units (both flash kernels)
void cuda_flash_mma(cuda_ctx *c, dim3 grid, int many, int tail, bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v,
                    const bf16 *k2, const bf16 *v2, int rows, int nk, int block0, int H, int hd, int q_rs, int kvw,
                    long long q_seg, long long kv_seg, long long k2_seg, int mha_hd, float sl2, const int *nkd);
void cuda_flash_mma_setup(cuda_ctx *c);
