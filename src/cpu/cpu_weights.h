/* cpu_weights.h — the CPU backend's store of 8-bit weights (cpu_weights.c builds it, cpu_backend.c's int8 products
 * read it), shared by the two files alone. */
#ifndef PI0_CPU_WEIGHTS_H
#define PI0_CPU_WEIGHTS_H

#include <stdint.h>

/* The model's 8-bit weights (quant.h), by tensor id; the others are read from the mapping. */
typedef struct {
    int8_t *q;
    float *s;
} cpu_q8;

typedef struct {
    int n;           /* ids 1 .. n */
    int64_t max_k;   /* the widest 8-bit weight's columns */
    cpu_q8 *e;       /* [n + 1] */
} cpu_wstore;

#endif
