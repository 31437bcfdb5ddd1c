/* test_image.c — pi0_image_resize_with_pad against Pillow, byte for byte. tests/image_check.py writes
 * a safetensors file with source images "src.K" (h, w, 3) uint8 and Pillow's resize_with_pad result
 * "want.K" (224, 224, 3) (openpi_client's image_tools restated); this binary compares every byte.
 * Also checks the uint8 -> [-1, 1] mapping and bad arguments. Usage: test_image FILE */
#include <stdlib.h>

#include "pi0.h"
#include "test.h"

int main(int argc, char **argv) {
    float f[3];
    uint8_t u[3] = {0, 128, 255};
    pi0_image_to_model(u, 3, f);
    CHECK(f[0] == -1.0f && f[2] == 1.0f && f[1] == (128.0f / 255.0f) * 2.0f - 1.0f, "uint8 -> [-1, 1]");
    uint8_t out[224 * 224 * 3];
    CHECK(pi0_image_resize_with_pad(u, 0, 5, 224, out) == PI0_ERR_ARG, "empty image refused");
    CHECK(pi0_image_resize_with_pad(NULL, 5, 5, 224, out) == PI0_ERR_ARG, "NULL refused");
    CHECK(pi0_image_resize_with_pad(u, 9000, 1, 224, out) == PI0_ERR_ARG && strstr(pi0_last_error(), "8192"),
          "absurd size refused before any allocation: %s", pi0_last_error());
    uint8_t line[300 * 3] = {0};
    CHECK(pi0_image_resize_with_pad(line, 1, 300, 224, out) == PI0_ERR_ARG && strstr(pi0_last_error(), "too thin"),
          "1 x 300 image refused (a side would be 0 pixels, as in openpi): %s", pi0_last_error());
    if (argc < 2) { printf("usage: test_image FILE (written by tests/image_check.py)\n"); return 2; }
    pi0_tensors *t = NULL;
    if (pi0_tensors_open(&t, argv[1]) != PI0_OK) { printf("%s\n", pi0_last_error()); return 1; }
    int n = 0, worst = 0;
    for (int k = 0;; k++) {
        char name[32];
        int64_t sh[8], sw[8];
        const void *src, *want;
        snprintf(name, sizeof name, "src.%d", k);
        if (pi0_tensors_get(t, name, NULL, NULL, sh, &src) != PI0_OK) break;
        snprintf(name, sizeof name, "want.%d", k);
        if (pi0_tensors_get(t, name, NULL, NULL, sw, &want) != PI0_OK) break;
        pi0_status st = pi0_image_resize_with_pad(src, (int)sh[0], (int)sh[1], 224, out);
        int diff = 0, maxd = 0;
        for (size_t i = 0; st == PI0_OK && i < sizeof out; i++) {
            int d = abs((int)out[i] - (int)((const uint8_t *)want)[i]);
            diff += d != 0;
            if (d > maxd) maxd = d;
        }
        if (maxd > worst) worst = maxd;
        CHECK(st == PI0_OK && diff == 0, "image %d (%lld x %lld): %d bytes differ from Pillow (max %d)", k,
              (long long)sh[1], (long long)sh[0], diff, maxd);
        n++;
    }
    printf("resize_with_pad vs Pillow: %d images, largest byte difference %d\n", n, worst);
    CHECK(n >= 50, "at least 50 images compared (got %d)", n);
    pi0_tensors_free(t);
    return test_summary("test_image");
}
