/* cpu_decode.c — see cpu_decode.h. The definition of next_token (backend.h, docs/model.md 7.4): every logit as an fp32
 * sum over K in index order of eight interleaved partial sums, then the first index of the largest value (NaN never
 * wins: a comparison with it is false). */
#include "cpu_decode.h"

#include <math.h>
#include <stdlib.h>

#include "../backend.h"
#include "../util.h"

enum { CHUNK = 4096 };   /* vocabulary rows per task: each thread widens one weight row at a time */

static float dot8(const float *a, const float *b, int n) {
    float s[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += a[i + k] * b[i + k];
    for (; i < n; i++) s[i & 7] += a[i] * b[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

typedef struct { float best, second, score; int32_t id; } pick;

/* The better of two picks over consecutive token ranges, a's before b's: a tie keeps a's (the lower token). */
static pick merge(pick a, pick b) {
    pick r = b.score > a.score ? b : a;
    r.best = fmaxf(a.best, b.best);
    r.second = fmaxf(fminf(a.best, b.best), fmaxf(a.second, b.second));
    return r;
}

void cpu_next_token_rows(int32_t *ids, float *top2, const float *x, const pi0_wt *W, int M, int V, int K, float temperature,
                         uint64_t seed, int n_threads) {
    int nchunks = (V + CHUNK - 1) / CHUNK;
    pick *part = malloc((size_t)M * nchunks * sizeof *part);
    PI0_ASSERT(part);
    size_t esz = pi0_dtype_size(W->dtype);
    #pragma omp parallel num_threads(n_threads)
    {
        float *w = malloc((size_t)K * sizeof(float));
        PI0_ASSERT(w);
        #pragma omp for collapse(2) schedule(static)
        for (int r = 0; r < M; r++)
            for (int ch = 0; ch < nchunks; ch++) {
                pick p = {-INFINITY, -INFINITY, -INFINITY, -1};
                int j1 = (ch + 1) * CHUNK < V ? (ch + 1) * CHUNK : V;
                for (int j = ch * CHUNK; j < j1; j++) {
                    pi0_to_f32(w, (const char *)W->data + (size_t)j * K * esz, W->dtype, (size_t)K);
                    float l = dot8(x + (size_t)r * K, w, K);
                    float score = temperature > 0 ? l / temperature + pi0_gumbel(seed, (uint32_t)r, (uint32_t)j) : l;
                    if (score > p.score || p.id < 0) { p.score = score; p.id = j; }
                    if (l > p.best) { p.second = p.best; p.best = l; }
                    else if (l > p.second) p.second = l;
                }
                part[(size_t)r * nchunks + ch] = p;
            }
        free(w);
    }
    for (int r = 0; r < M; r++) {
        pick p = part[(size_t)r * nchunks];
        for (int ch = 1; ch < nchunks; ch++) p = merge(p, part[(size_t)r * nchunks + ch]);
        ids[r] = p.id;
        if (top2) { top2[2 * r] = p.best; top2[2 * r + 1] = p.second; }
    }
    free(part);
}
