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
    int fp8;         /* some weight is in E4M3 (the products' scratch holds integers: cpu_f8_ints) */
    cpu_q8 *e;       /* [n + 1] */
} cpu_wstore;

/* E4M3 codes as integers: code c's value is v * 2^-9 (|v| <= 448 * 2^9 < 2^18). In place where v == (int32_t *)q:
 * the codes in its first n bytes. */
void cpu_f8_ints(const uint8_t *q, int32_t *v, int n);
/* The sum of the products of two rows of E4M3 values given as cpu_f8_ints's integers, exact (each product is below
 * 2^36, the sum of up to 2^14 below 2^50, in int64), rounded once to fp32: docs/precision.md 8's acc. */
float cpu_dot_f8(const int32_t *a, const int32_t *b, int n);

#endif
