/* fuzz_msgpack.c — libFuzzer target for pi0-server's request decoder (server/msgnp.c: the structural
 * scan, msgpack-c, the numpy checks): any bytes give an observation or an error, never a crash or a
 * leak, and every accepted array, prompt and noise buffer can be read in full. Seeds:
 * tests/server/fuzz_seeds.py (openpi-client's messages for LIBERO, DROID, ALOHA). */
#include <stdint.h>
#include <string.h>

#include "msgnp.h"

static size_t itemsize(pi0_dtype t) {
    return t == PI0_DT_U8 || t == PI0_DT_BOOL ? 1 : t == PI0_DT_I32 || t == PI0_DT_F32 ? 4 : 8;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const msgnp_limits lim = {.max_objects = 4096, .noise_h = 5, .noise_a = 32};
    msgnp_request *r = NULL;
    char err[512];
    if (msgnp_decode(data, size, &lim, &r, err, sizeof err) != PI0_OK) return 0;
    volatile uint8_t sink = 0;
    for (int i = 0; i < r->obs.n_arrays; i++) {
        const pi0_array *a = &r->obs.arrays[i];
        size_t n = itemsize(a->dtype);
        for (int d = 0; d < a->ndim; d++) n *= (size_t)a->shape[d];
        for (size_t k = 0; k < n; k++) sink ^= ((const uint8_t *)a->data)[k];
        sink ^= (uint8_t)strlen(a->key);
    }
    if (r->obs.prompt) sink ^= (uint8_t)strlen(r->obs.prompt);
    if (r->obs.noise)
        for (int k = 0; k < 5 * 32; k++) {
            uint8_t b[4];
            memcpy(b, &r->obs.noise[k], 4);
            sink ^= b[0];
        }
    (void)sink;
    msgnp_request_free(r);
    return 0;
}
