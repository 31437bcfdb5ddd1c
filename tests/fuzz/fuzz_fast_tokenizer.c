/* fuzz_fast_tokenizer.c — libFuzzer target for the FAST action tokenizer's files (fast_tokenizer_parse: tokenizer.json
 * through fast_json.c, processor_config.json through jansson) and its decoding of untrusted FAST ids. Input:
 * [u16 n: tokenizer.json's length][tokenizer.json][u8 m: the config's length][config][ids: int16 each, so negative
 * and past-the-vocabulary ids occur]. Any bytes give a tokenizer or an error, never a crash or leak; accepted
 * tokenizers decode the ids to code points and to actions of a few shapes. Seeds: make_seed_fast.py. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fast_tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    size_t n = (size_t)data[0] | (size_t)data[1] << 8, at = 2;
    if (n > size - at) n = size - at;
    const char *tj = (const char *)data + at;
    at += n;
    size_t m = at < size ? data[at++] : 0;
    if (m > size - at) m = size - at;
    const char *cfg = (const char *)data + at;
    at += m;
    fast_tokenizer *f = NULL;
    if (fast_tokenizer_parse(&f, "fuzz", tj, n, cfg, m) != PI0_OK) return 0;
    size_t nid = (size - at) / 2;
    int64_t *ids = malloc((nid ? nid : 1) * sizeof *ids);
    uint32_t cps[64];
    double act[64];
    if (ids) {
        for (size_t i = 0; i < nid; i++) ids[i] = (int16_t)(data[at + 2 * i] | data[at + 2 * i + 1] << 8);
        size_t k;
        fast_tokenizer_decode(f, ids, nid, cps, 64, &k);
        fast_outcome o;
        const int shapes[][2] = {{1, 1}, {2, 3}, {8, 8}, {0, 0}};   /* 0 x 0: the config's, if it has one */
        fast_tokenizer_info info;
        fast_tokenizer_get_info(f, &info);
        for (int s = 0; s < 4; s++)
            if (s < 3 || (int64_t)info.time_horizon * info.action_dim <= 64)
                fast_tokenizer_actions(f, ids, nid, shapes[s][0], shapes[s][1], act, &o);
    }
    free(ids);
    fast_tokenizer_free(f);
    return 0;
}
