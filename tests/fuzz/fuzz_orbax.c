/* fuzz_orbax.c — libFuzzer target for the Orbax checkpoint reader (orbax.c) on a whole params directory: the PyTree
 * metadata (_METADATA), the tree's mapping onto the model's parameters, the dimensions inferred from their shapes
 * and every check against them, each array's zarr metadata and chunks (one directory per array), and the re-layout
 * into the PyTorch tensors. Input: records of u16 LE name length, name, u32 LE data length, data; each record is a
 * file of the params directory (a relative path of [A-Za-z0-9._-] components joined by '/', no "." or ".."
 * component, at most 4 deep). The records are written under a fresh directory that orbax_load then reads; it may
 * fail, never crash, leak or read out of bounds. The load is capped at 64 MiB of parameters (orbax_limit_bytes):
 * a few KB of metadata whose chunks are absent (fill values) can describe a model of any size.
 * Seeds: tests/fuzz/seeds_orbax (tiny π0 and π0.5 checkpoints written by orbax-checkpoint: plain zarr with most
 * chunks replaced by fill values, and OCDBT with large arrays saved as zeros, one of them rewritten into small nodes:
 * tests/fuzz/make_seed_orbax.py). With PI0_FUZZ_VERBOSE=1 each input's result goes to stderr
 * ("orbax_load: OK ..." or the error), which `make fuzz` uses to check that the seeds load. */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_dir.h"
#include "orbax.h"
#include "util.h"

static char base[256];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    fuzz_dir_fresh(base, sizeof base, "orbax");
    orbax_limit_bytes = 64u << 20;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/params", base);
    int files = fuzz_dir_write(dir, data, size);
    if (files < 0) return 0;
    st_file *f = NULL;
    pi0_config cfg;
    orbax_info info;
    pi0_status st = orbax_load(&f, &cfg, &info, dir, 1);
    if (getenv("PI0_FUZZ_VERBOSE")) {
        if (st == PI0_OK) fprintf(stderr, "orbax_load: OK, %d files, %d leaves, %zu bytes of parameters\n", files, info.n_leaves, info.bytes);
        else fprintf(stderr, "orbax_load: %s\n", pi0_last_error());
    }
    if (st == PI0_OK) st_close(f);
    fuzz_dir_remove(dir);
    return 0;
}
