/* fuzz_ocdbt.c — libFuzzer target for the OCDBT reader (ocdbt.c) and the zarr array reader (zarr.c) on what
 * it returns. Input: u32 LE length n, n bytes served as manifest.ocdbt, the rest served as every other file the
 * database names (B+tree nodes, data files). Every key is then read; keys ending in "/.zarray" are parsed as
 * zarr metadata and, when that works and the array is small, the array is decoded. Nothing may crash, leak or
 * read out of bounds. Seeds: tests/fuzz/seeds_ocdbt (real files of orbax-checkpoint 0.11.13). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ocdbt.h"
#include "util.h"
#include "zarr.h"

typedef struct { const uint8_t *m, *d; size_t mn, dn; } mem;

static pi0_status mem_map(void *user, const char *path, const uint8_t **data, size_t *len, int *found) {
    mem *x = user;
    int man = !strcmp(path, "manifest.ocdbt");
    *data = man ? x->m : x->d;
    *len = man ? x->mn : x->dn;
    *found = 1;
    return PI0_OK;
}

static pi0_status db_get(void *user, const char *key, const uint8_t **d, size_t *n, int *found) {
    const ocdbt_entry *e = ocdbt_find(user, key);
    *found = e != NULL;
    return e ? ocdbt_value(user, e, d, n) : PI0_OK;
}

static pi0_status sink(void *user, int64_t block, void *buf) { (void)user; (void)block; (void)buf; return PI0_OK; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    uint32_t n = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
    if (n > size - 4) return 0;
    mem x = {data + 4, data + 4 + n, n, size - 4 - n};
    ocdbt *db;
    if (ocdbt_open(&db, "fuzz", &(ocdbt_files){mem_map, &x}) != PI0_OK) return 0;
    zarr_store s = {db_get, db, NULL};
    for (int i = 0; i < ocdbt_count(db); i++) {
        const ocdbt_entry *e = ocdbt_at(db, i);
        const uint8_t *v;
        size_t vn;
        if (ocdbt_value(db, e, &v, &vn) != PI0_OK) continue;
        size_t kl = strlen(e->key);
        if (kl < 8 || strcmp(e->key + kl - 8, "/.zarray")) continue;
        zarr_array a;
        if (zarr_parse_meta(&a, "fuzz", (const char *)v, vn) != PI0_OK || zarr_numel(&a) > (1 << 16)) continue;
        int64_t rows = a.ndim ? a.shape[0] : 1, cb = (int64_t)pi0_dtype_size(a.dtype);
        for (int k = 0; k < a.ndim; k++) cb *= a.chunks[k];
        if (!rows || cb > (1 << 20)) continue;
        void *buf = malloc((size_t)zarr_numel(&a) * pi0_dtype_size(a.dtype) + 1);
        char name[1024];
        snprintf(name, sizeof name, "%.*s", (int)(kl - 8), e->key);
        if (buf) zarr_read(&a, &s, name, "fuzz", rows, buf, sink, NULL);
        free(buf);
    }
    ocdbt_close(db);
    return 0;
}
