/* fuzz_fast_decode.c — libFuzzer target for what π0-FAST does with PaliGemma's tokenizer: SentencePiece decoding
 * (tokenizer_decode) of untrusted ids with an untrusted .model, openpi's extract_actions on those ids (with a small
 * fixed FAST tokenizer), and the FAST prompt with Python's lower() / strip() on untrusted text. Input:
 * [u16 n: the .model's length][.model][rest: the generated ids, int16 each (negative and out-of-range ones occur),
 * and the same bytes as the prompt]. Errors are fine; crashes, leaks and undefined behaviour are not.
 * Seeds: make_seed_fast.py. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fast_tokenizer.h"
#include "tokenizer.h"

/* Byte-level tokens for the bytes 0x21..0x7E (the FAST ids 0..93), a "\u0000" token and two merged ones. */
static fast_tokenizer *fixed_fast(void) {
    static char tj[4096];
    size_t n = (size_t)snprintf(tj, sizeof tj, "{\"added_tokens\": [], \"normalizer\": null, \"pre_tokenizer\": {\"type\": "
                                "\"ByteLevel\"}, \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (int b = 0x21; b < 0x7f; b++)
        n += (size_t)snprintf(tj + n, sizeof tj - n, "\"%s%c\": %d, ", b == '"' || b == '\\' ? "\\" : "", b, b - 0x21);
    snprintf(tj + n, sizeof tj - n, "\"\\u0000\": 94, \"\\u00c3\\u00a9\": 95, \"AB\": 96}, \"merges\": []}}");
    static const char cfg[] = "{\"scale\": 10, \"min_token\": -50, \"time_horizon\": 2, \"action_dim\": 3}";
    fast_tokenizer *f = NULL;
    fast_tokenizer_parse(&f, "fixed", tj, strlen(tj), cfg, sizeof cfg - 1);
    return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fast_tokenizer *fast;
    if (!fast && !(fast = fixed_fast())) abort();   /* the harness's own tokenizer must load */
    if (size < 2) return 0;
    size_t n = (size_t)data[0] | (size_t)data[1] << 8, at = 2;
    if (n > size - at) n = size - at;
    tokenizer *t = NULL;
    if (tokenizer_parse(&t, "fuzz", data + at, n) != PI0_OK) return 0;
    at += n;
    size_t nid = (size - at) / 2, len = 0;
    int32_t *ids = malloc((nid ? nid : 1) * sizeof *ids);
    char *text = malloc(size - at + 1), out[256];
    if (ids && text) {
        for (size_t i = 0; i < nid; i++) ids[i] = (int16_t)(data[at + 2 * i] | data[at + 2 * i + 1] << 8);
        tokenizer_decode(t, ids, nid, out, sizeof out, &len);
        double act[6];
        fast_outcome o;
        fast_tokenizer_extract_actions(fast, t, ids, nid, 0, 0, act, &o);
        memcpy(text, data + at, size - at);
        text[size - at] = 0;
        int32_t tok[64];
        uint8_t mask[64], ar[64];
        const double state[3] = {-1.5, 0.25, 1.0};
        fast_tokenizer_prompt(t, text, state, 3, 64, tok, mask, ar, NULL);
    }
    free(ids);
    free(text);
    tokenizer_free(t);
    return 0;
}
