/* cpu_weights.h — the CPU backend's store of 8-bit weights (cpu_weights.c builds it, cpu_backend.c's int8 products
 * read it), shared by the two files alone. */
#ifndef PI0_CPU_WEIGHTS_H
#define PI0_CPU_WEIGHTS_H

#include <stdint.h>

/* The model's 8-bit weights (quant.h), by tensor id; the others are read from the mapping. */
typedef struct {
    int8_t *q;   /* int8 codes, or E4M3 codes (uint8_t) where fp8 */
    float *s;
    int fp8;
} cpu_q8;

typedef struct {
    int n;           /* ids 1 .. n */
    int64_t max_k;   /* the widest 8-bit weight's columns */
    cpu_q8 *e;       /* [n + 1] */
} cpu_wstore;

/* The exact sum of the products of two rows of E4M3 codes (docs/precision.md 8), rounded once to fp32. */
float cpu_dot_f8(const uint8_t *a, const uint8_t *b, int n);

#endif
