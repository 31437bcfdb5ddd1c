#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include "pi0.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec * 1e-6; }
int main(int argc, char **argv) {
    int h = atoi(argv[1]), w = atoi(argv[2]);
    uint8_t *src = malloc((size_t)h * w * 3), *dst = malloc(224 * 224 * 3);
    for (size_t i = 0; i < (size_t)h * w * 3; i++) src[i] = (uint8_t)(i * 2654435761u >> 24);
    double best = 1e9;
    for (int r = 0; r < 20; r++) {
        double t0 = now();
        pi0_image_resize_with_pad(src, h, w, 224, dst);
        double t = now() - t0; if (t < best) best = t;
    }
    printf("%dx%d -> 224: best %.3f ms\n", w, h, best);
}
