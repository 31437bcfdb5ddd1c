/* fuzz_image.c — libFuzzer target for camera images as `pi0 run` reads them: JPEG / PNG bytes through the CLI's
 * decoder (tools/imagefile.c: TurboJPEG, libspng, our checks and RGB conversion), then the library's
 * resize_with_pad to 224 and the [-1, 1] conversion. Nothing may crash, leak or read out of bounds. Seeds: a
 * small JPEG and PNG of each colour type that Pillow writes (made by `make fuzz`). */
#include <stdint.h>
#include <stdlib.h>

#include "../../tools/imagefile.h"
#include "pi0.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *rgb = NULL;
    int h = 0, w = 0;
    char err[512];
    if (imagefile_decode("fuzz", data, size, &rgb, &h, &w, err, sizeof err) == 0) {
        static uint8_t out[224 * 224 * 3];
        static float f[224 * 224 * 3];
        if (pi0_image_resize_with_pad(rgb, h, w, 224, out) == PI0_OK) pi0_image_to_model(out, sizeof out, f);
        free(rgb);
    }
    return 0;
}
