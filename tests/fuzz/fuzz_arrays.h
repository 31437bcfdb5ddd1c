/* fuzz_arrays.h — observation arrays from fuzz input, shared by the policy harnesses: data[0] >> 1 picks the count
 * (0..6), then one 6-byte header per array (key index, dtype index, ndim, 3 dims below max_dim), then a pool of bytes
 * that every array's data points into. The API contract holds: data has prod(shape) * itemsize bytes (a shape too
 * large for the pool becomes a 1-D array of what is left; a third-byte value of 250 or more makes an empty array whose
 * other sizes are up to 2^39, which the contract allows). Returns the count, 0 when the input is too short. */
#ifndef PI0_FUZZ_ARRAYS_H
#define PI0_FUZZ_ARRAYS_H

#include <stddef.h>
#include <stdint.h>

#include "pi0.h"

static const pi0_dtype FUZZ_DTYPES[] = {PI0_DT_U8, PI0_DT_F32, PI0_DT_F64, PI0_DT_I32, PI0_DT_I64, PI0_DT_BOOL, PI0_DT_F16};

static int fuzz_arrays(const uint8_t *data, size_t size, const char *const *keys, int n_keys, int max_dim, pi0_array *a) {
    size_t n = (size_t)(data[0] >> 1) % 7, off = 1 + n * 6;
    if (size < off) return 0;
    const uint8_t *pool = data + off;
    size_t left = size - off;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *h = data + 1 + i * 6;
        a[i] = (pi0_array){.key = keys[h[0] % n_keys], .dtype = FUZZ_DTYPES[h[1] % 7], .ndim = h[2] % 5};
        size_t count = 1, item = a[i].dtype == PI0_DT_F16 ? 2 : a[i].dtype == PI0_DT_F64 || a[i].dtype == PI0_DT_I64 ? 8
                              : a[i].dtype == PI0_DT_U8 || a[i].dtype == PI0_DT_BOOL ? 1 : 4;
        for (int d = 0; d < a[i].ndim; d++) {
            a[i].shape[d] = d < 3 ? h[3 + d] % max_dim : 3;
            count *= (size_t)a[i].shape[d];
        }
        if (count * item > left) { a[i].ndim = 1; a[i].shape[0] = (int64_t)(left / item); count = left / item; }
        if (h[2] >= 250) {   /* an empty array of any other sizes, as the server's decoder passes them */
            const int z = h[3] % 3;   /* which dimension is 0 */
            a[i].ndim = 3;
            for (int d = 0; d < 3; d++) a[i].shape[d] = d == z ? 0 : (int64_t)1 << (d == 0 ? 31 : 24 + h[4] % 16);
        }
        a[i].data = pool;
    }
    return (int)n;
}

#endif
