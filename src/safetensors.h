/* safetensors.h — bounds-checked mmap reader and streaming writer for the safetensors format.
 * Format: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}},
 * optional "__metadata__" {str: str}, then the data block. The reader validates everything a hostile
 * file can get wrong (lengths, offsets, overlaps, dtype sizes, overflow) and never copies tensor data.
 * It does not interpret tensor names: that is weights.c's job. */
#ifndef PI0_SAFETENSORS_H
#define PI0_SAFETENSORS_H

#include <stdint.h>
#include <stdio.h>

#include "pi0.h"

#define ST_MAX_DIMS 8

typedef struct {
    char *name;
    pi0_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;        /* byte offsets into the data block */
    const void *data;           /* points into the mapping */
} st_tensor;

typedef struct {
    char *path;
    void *map;                  /* whole-file mapping */
    size_t map_len;
    st_tensor *tensors;         /* sorted by name */
    int n_tensors;
    char **meta_keys, **meta_vals;   /* __metadata__ entries */
    int n_meta;
    int finite_checked;         /* 1: the producer already checked every value is finite (Orbax reader) */
    void **owned;               /* aligned copies of tensors whose data sat at an address not a multiple of their */
    int n_owned;                /* element size (an unpadded header): readers load them through typed pointers */
} st_file;

/* Opens and validates path. Messages name the file and the offending tensor. */
pi0_status st_open(st_file **out, const char *path);
/* Validates an in-memory buffer (used by st_open and the fuzz target); takes no ownership of buf. */
pi0_status st_parse(st_file **out, const char *label, const uint8_t *buf, size_t len);
void st_close(st_file *f);
/* Hands the pages of [p, p + n) that lie wholly inside f's mapping back to the system (others: nothing): a file
 * mapping's pages are read from the file again if touched, an anonymous one's (Orbax's decoded tensors) read as zeros,
 * so only for data that nothing reads any more (a backend's store has its own copy: api_model.c). */
void st_release(const st_file *f, const void *p, size_t n);
const st_tensor *st_find(const st_file *f, const char *name);
const char *st_meta(const st_file *f, const char *key);
int64_t st_numel(const st_tensor *t);
/* "(2048, 1024) BF16" into buf. */
const char *st_describe(char *buf, size_t n, int ndim, const int64_t *shape, pi0_dtype dt);

/* Streaming writer: the header is written from the full tensor list, then data in the same order. */
typedef struct {
    const char *name;
    pi0_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
} st_entry;

typedef struct {
    FILE *fp;
    char *path;
    uint64_t expected, written;
} st_writer;

pi0_status st_writer_open(st_writer *w, const char *path, const st_entry *e, int n,
                          const char *const *meta_kv, int n_meta);
pi0_status st_writer_write(st_writer *w, const void *data, size_t bytes);
pi0_status st_writer_close(st_writer *w);   /* checks that exactly the declared bytes were written */
void st_writer_abort(st_writer *w);         /* closes and removes the partial file */

#endif
