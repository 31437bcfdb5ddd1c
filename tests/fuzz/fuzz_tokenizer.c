/* fuzz_tokenizer.c — libFuzzer target for the SentencePiece .model parser (tokenizer_parse): any bytes
 * give a model or an error, never a crash or leak; accepted models also encode a fixed prompt. */
#include <stdint.h>

#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tokenizer *t = NULL;
    if (tokenizer_parse(&t, "fuzz", data, size) == PI0_OK) {
        static const char text[] = "pick up the red block  \xf0\x9f\xa4\x96 <loc0001>\n42";
        int32_t ids[256];
        size_t n;
        tokenizer_encode(t, text, sizeof text - 1, ids, 256, &n);
        tokenizer_free(t);
    }
    return 0;
}
