/* util.h — internal helpers shared by the library: error reporting, dtype sizes and bf16/f16 conversion, the RNG,
 * bounded file reading, allocation with a message. Owns the thread-local last-error message (pi0_last_error). No
 * model logic here. */
#ifndef PI0_UTIL_H
#define PI0_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pi0.h"

#if defined(__GNUC__)
#define PI0_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define PI0_PRINTF(a, b)
#endif

/* Records this thread's error message and returns st, so callers write `return pi0_fail(...)`. */
pi0_status pi0_fail(pi0_status st, const char *fmt, ...) PI0_PRINTF(2, 3);
/* A JSON parser's reason without the text it quotes: jansson ends some reasons with "near '<token>'", and a
 * checkpoint's file may be a symlink to a file the reader of the message should not see. Cuts text in place. */
char *pi0_json_reason(char *text);
/* The status the last pi0_fail on this thread recorded: for callers of functions that return NULL on failure. */
pi0_status pi0_last_status(void);
/* Prefixes the current message with context ("loading DIR: <old message>"). */
void pi0_error_prefix(const char *fmt, ...) PI0_PRINTF(1, 2);
void pi0_clear_error(void);

/* Internal invariant (our bug, never user input): prints and aborts. */
#define PI0_ASSERT(c) do { if (!(c)) pi0_assert_fail(#c, __FILE__, __LINE__); } while (0)
void pi0_assert_fail(const char *expr, const char *file, int line);

size_t pi0_dtype_size(pi0_dtype dt);
const char *pi0_dtype_name(pi0_dtype dt);   /* safetensors spelling: "BF16", "F32", ... */

static inline float pi0_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f;
}
/* Round to nearest even, NaN kept NaN (same rule as PyTorch's float -> bfloat16). */
static inline uint16_t pi0_f32_to_bf16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
float pi0_f16_to_f32(uint16_t h);

/* Converts n elements of a BF16/F16/F32 array to fp32. */
void pi0_to_f32(float *dst, const void *src, pi0_dtype dt, size_t n);

/* splitmix64-seeded xoshiro256** generator; normal() is Box-Muller in double. */
typedef struct { uint64_t s[4]; int has_spare; double spare; } pi0_rng;
void pi0_rng_seed(pi0_rng *r, uint64_t seed);
uint64_t pi0_rng_next(pi0_rng *r);
double pi0_rng_uniform(pi0_rng *r);   /* [0, 1) */
double pi0_rng_normal(pi0_rng *r);

/* malloc/calloc that set a PI0_ERR_NOMEM message on failure. */
void *pi0_malloc(size_t n, const char *what);
void *pi0_calloc(size_t n, size_t size, const char *what);

/* Reads a whole (small) file; *len gets its size; NUL-terminated. NULL + message on failure. */
char *pi0_read_file(const char *path, size_t *len, size_t max_len);

#endif
