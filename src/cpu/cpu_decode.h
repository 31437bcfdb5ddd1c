/* cpu_decode.h — the CPU backend's next_token (backend.h), in cpu_decode.c: the logits over a whole vocabulary and their
 * arg max, kept apart from cpu_backend.c's products because nothing else reads a weight a row at a time this way. */
#ifndef PI0_CPU_DECODE_H
#define PI0_CPU_DECODE_H

#include <stdint.h>

#include "../weights.h"

/* backend.h's next_token on host arrays: ids [M], top2 [M, 2] or NULL, x [M, K] fp32; n_threads OpenMP threads. */
void cpu_next_token_rows(int32_t *ids, float *top2, const float *x, const pi0_wt *W, int M, int V, int K, float temperature,
                         uint64_t seed, int n_threads);

#endif
