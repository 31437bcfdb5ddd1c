/* fuzz_tokenizer.c — libFuzzer target for the SentencePiece .model parser (tokenizer_parse): any bytes
 * give a model or an error, never a crash or leak; accepted models also encode a fixed text and a prompt in each format. */
#include <stdint.h>

#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tokenizer *t = NULL;
    if (tokenizer_parse(&t, "fuzz", data, size) == PI0_OK) {
        static const char text[] = "pick up the red block  \xf0\x9f\xa4\x96 <loc0001>\n42";
        int32_t ids[256];
        size_t n;
        tokenizer_encode(t, text, sizeof text - 1, ids, 256, &n);
        /* the prompt formats, with runs of spaces (each may become 3 byte tokens) and a state */
        static const char prompt[] = "a    b\n  c_d                                e ";
        const double state[3] = {-0.5, 0.25, 2.0};
        int32_t tok[64];
        uint8_t mask[64];
        for (int f = 0; f < 3; f++)
            pi0_tokenize_prompt(t, prompt, f == 0 ? PI0_PROMPT_PI0 : f == 1 ? PI0_PROMPT_PI05 : PI0_PROMPT_RAW, state, 3, 64,
                                tok, mask, NULL);
        tokenizer_free(t);
    }
    return 0;
}
