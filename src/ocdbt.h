/* ocdbt.h — read-only reader of tensorstore's OCDBT key-value store, the default layout of Orbax
 * checkpoints (docs/checkpoints.md). Reads the manifest (single or numbered kind), takes the latest
 * version's B+tree root, walks the whole tree once and keeps a sorted table of keys with their value
 * locations (inline bytes, or file + offset + length into a data file). Every node's length, CRC-32C,
 * varints, key order and references are checked, and what one open decodes and builds is bounded (ocdbt.c,
 * docs/checkpoints.md); a hostile file gets an error naming it, never a crash.
 * It does not write, does not read older versions, and does not interpret values (zarr.c does).
 * Files are read through `ocdbt_files` so that the fuzz target can serve them from memory. */
#ifndef PI0_OCDBT_H
#define PI0_OCDBT_H

#include <stddef.h>
#include <stdint.h>

#include "pi0.h"

/* File access: maps the file at `path` (relative to the database root) and returns its bytes, valid
 * until the ocdbt is closed. *found = 0 (and PI0_OK) when the file does not exist. */
typedef struct {
    pi0_status (*map)(void *user, const char *path, const uint8_t **data, size_t *len, int *found);
    void *user;
} ocdbt_files;

typedef struct {
    char *key;                /* NUL-terminated (keys with NUL bytes are refused) */
    const uint8_t *inline_v;  /* inline value (points into the table's own copy), or NULL */
    int file;                 /* data file index (ocdbt_file_path), -1 when inline */
    uint64_t offset, length;  /* indirect value location; length is also the inline length */
} ocdbt_entry;

typedef struct ocdbt ocdbt;

/* Opens the database in directory `dir` (mmap-backed), or with `files` when not NULL (then `dir` only
 * labels messages). */
pi0_status ocdbt_open(ocdbt **out, const char *dir, const ocdbt_files *files);
void ocdbt_close(ocdbt *db);
int ocdbt_count(const ocdbt *db);
const ocdbt_entry *ocdbt_at(const ocdbt *db, int i);         /* sorted by key */
const ocdbt_entry *ocdbt_find(const ocdbt *db, const char *key);
const char *ocdbt_file_path(const ocdbt *db, int file);
/* The value's bytes (inline, or mapped from its data file and bounds-checked). */
pi0_status ocdbt_value(ocdbt *db, const ocdbt_entry *e, const uint8_t **data, size_t *len);

/* CRC-32C (Castagnoli), as OCDBT's node footers use. */
uint32_t ocdbt_crc32c(const uint8_t *p, size_t n);

#endif
