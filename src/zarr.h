/* zarr.h — reader of zarr v2 arrays as tensorstore writes them for Orbax checkpoints (docs/checkpoints.md):
 * `<name>/.zarray` JSON metadata and chunks `<name>/<i>.<j>...`, each one zstd frame (or raw), C order,
 * dtypes "<f4", "<f2" and tensorstore's "bfloat16". Keys come from a zarr_store (an OCDBT database or a
 * directory). Arrays are delivered in blocks of leading-axis rows so that a caller can transform a stacked
 * layer at a time without holding the decoded array twice. Not handled: zarr v3, filters, F order,
 * big-endian dtypes, compressors other than zstd. */
#ifndef PI0_ZARR_H
#define PI0_ZARR_H

#include <stddef.h>
#include <stdint.h>

#include "pi0.h"

#define ZARR_MAX_DIMS 8

/* Looks a key up: PI0_OK with *found = 0 when absent; the bytes stay valid while the store is open. */
typedef struct {
    pi0_status (*get)(void *user, const char *key, const uint8_t **data, size_t *len, int *found);
    void *user;
    void (*release)(void *user, const uint8_t *data, size_t len);   /* optional: a chunk's bytes are no longer needed */
} zarr_store;

typedef struct {
    int ndim;                         /* 0 for a scalar */
    int64_t shape[ZARR_MAX_DIMS], chunks[ZARR_MAX_DIMS];
    pi0_dtype dtype;                  /* F32, F16 or BF16 */
    int zstd;                         /* 1 = zstd chunks, 0 = raw */
    int has_fill;                     /* fill_value given: absent chunks hold it */
    double fill;
    char sep;                         /* chunk key separator, '.' or '/' */
} zarr_array;

/* Parses .zarray text; label names it in messages. */
pi0_status zarr_parse_meta(zarr_array *a, const char *label, const char *json, size_t len);
/* Reads `<name>/.zarray` from the store. */
pi0_status zarr_open(zarr_array *a, const zarr_store *s, const char *name, const char *label);
int64_t zarr_numel(const zarr_array *a);

/* Called once per block, in order: block b holds leading-axis rows [b * block_rows, ...) in buf. */
typedef pi0_status (*zarr_block_fn)(void *user, int64_t block, void *buf);
/* Decodes the whole array (one decompression pass) into buf in blocks of block_rows leading-axis rows
 * (block_rows must divide shape[0]; a scalar is one row). buf holds block_rows rows. */
pi0_status zarr_read(const zarr_array *a, const zarr_store *s, const char *name, const char *label,
                     int64_t block_rows, void *buf, zarr_block_fn fn, void *user);

#endif
