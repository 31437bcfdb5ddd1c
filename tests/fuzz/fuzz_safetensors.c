/* fuzz_safetensors.c — libFuzzer target for the safetensors header parser (st_parse): any bytes must
 * give PI0_OK or an error message, never a crash, leak or out-of-bounds read. On success every tensor
 * view is touched to prove it lies inside the buffer. */
#include <stdint.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_file *f = NULL;
    if (st_parse(&f, "fuzz", data, size) == PI0_OK) {
        volatile uint8_t sink = 0;
        for (int i = 0; i < f->n_tensors; i++) {
            const st_tensor *t = &f->tensors[i];
            if (t->end > t->begin) sink ^= ((const uint8_t *)t->data)[t->end - t->begin - 1];
            (void)st_find(f, t->name);
        }
        (void)sink;
        st_close(f);
    }
    return 0;
}
