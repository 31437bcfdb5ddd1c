/* fuzz_config.c — libFuzzer target for config.json parsing and validation (config_parse +
 * config_finish): arbitrary bytes must never crash; accepted configs must serialise again. */
#include <stdint.h>
#include <stdlib.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pi0_config c;
    if (config_parse(&c, "fuzz", (const char *)data, size) == PI0_OK && config_finish(&c, "fuzz") == PI0_OK)
        free(config_to_json(&c));
    return 0;
}
