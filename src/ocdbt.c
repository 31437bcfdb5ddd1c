/* ocdbt.c — see ocdbt.h. The format (tensorstore's kvstore/ocdbt documentation, "Storage format"):
 * every node is  magic (u32 BE) | length (u64 LE) | version (varint, 0) | compression (varint: 0 none,
 * 1 zstd) | body | CRC-32C of all before it (u32 LE). The manifest body is the config (uuid, manifest kind,
 * limits, compression) then, for the single-file kind, a data file table and the newest versions with
 * their B+tree roots. B+tree node bodies hold a height, a data file table and columnar entries: keys
 * prefix-compressed against the previous key, then (leaves) value lengths, kinds, file ids, offsets and
 * inline bytes, or (interior nodes) child locations and statistics. A child's keys are relative to the
 * parent's prefix plus the first subtree_common_prefix_length bytes of its entry key. Data file paths are
 * relative to the database root, prefixed by the "transitive" base paths of the nodes above. */
#include "ocdbt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "util.h"

/* Bounds on what one open decodes and builds, each checked before the memory is allocated (docs/checkpoints.md,
 * "OCDBT"). A tree builds more than it stores: a prefix-compressed key is rebuilt in full from the previous one (8
 * bytes of node can name a 64 KB key), a child's keys carry its parent's prefix, every varint becomes an 8-byte
 * column slot, every entry an allocation. A real checkpoint is far inside the bounds: openpi's largest params
 * (~3.3 B parameters) are a few hundred zarr arrays, each a .zarray and its chunks, so a few thousand keys (tens of
 * thousands at the very most) of under 200 bytes ("params.PaliGemma.llm.layers.attn.q_einsum.w/0.0.0.0"), a few MB
 * of keys, inline values (Orbax inlines values up to 1 KB) and nodes, and a few data files per writing process: the
 * bounds leave 10x-100x over that. Within them a hostile tree costs under about 200 MB. Versions need no bound: the
 * manifest holds at most 2^16 (arity_log2 <= 16) and nothing is kept per version. */
enum {
    MAGIC_MANIFEST = 0x0cdb3a2a, MAGIC_VERSION = 0x0cdb1234, MAGIC_BTREE = 0x0cdb20de,
    MAX_PATH = 65535, MAX_KEY = 65535, MAX_HEIGHT = 32,
    MAX_ENTRIES = 1 << 18,          /* B+tree entries (keys and child references), all nodes together */
    MAX_FILES = 1 << 16,            /* data file table entries, all tables together */
};
#define MAX_BUILT ((uint64_t)64 << 20)           /* bytes of keys, data file paths and inline values built */
#define DECODED_MAX_TOTAL ((uint64_t)64 << 20)   /* all nodes of one tree, decoded */
#define NODE_MAX_BYTES DECODED_MAX_TOTAL          /* cap on the config's max_decoded_node_bytes (Orbax writes 1e8) */
#define MANIFEST_MAX_BYTES ((uint64_t)8 << 20)    /* decoded manifest (Orbax's: < 1 KB; 2^16 versions: ~2 MB) */

typedef struct { char *path; void *map; size_t len; } mapping;
typedef struct { char *file; uint64_t off, len, h; } node_ref;

struct ocdbt {
    char *dir;
    ocdbt_files files;
    mapping *maps; int n_maps;              /* default file access: mmaps by path */
    char **paths; int n_paths, paths_cap;   /* data files that hold indirect values (dedupe_paths: each once) */
    ocdbt_entry *e; int n, cap;
    uint64_t max_node;                      /* decoded node size limit (config, capped) */
    int nodes;
    uint64_t decoded;                       /* bytes of all nodes decoded so far (DECODED_MAX_TOTAL) */
    uint64_t entries, n_files, built;       /* counted against MAX_ENTRIES, MAX_FILES, MAX_BUILT */
    node_ref *seen; size_t seen_cap;        /* the nodes visited: open addressing on (file, offset, length) */
};

uint32_t ocdbt_crc32c(const uint8_t *p, size_t n) {
    static uint32_t table[256];
    static int ready;   /* benign race: every thread writes the same values */
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

/* ---- file access (default: mmap under dir, regular files only, paths that stay inside dir) ---- */

static pi0_status default_map(void *user, const char *path, const uint8_t **data, size_t *len, int *found) {
    ocdbt *db = user;
    for (int i = 0; i < db->n_maps; i++)
        if (!strcmp(db->maps[i].path, path)) { *data = db->maps[i].map; *len = db->maps[i].len; *found = 1; return PI0_OK; }
    size_t n = strlen(db->dir) + strlen(path) + 2;
    char *full = malloc(n);
    mapping *grown = realloc(db->maps, (size_t)(db->n_maps + 1) * sizeof *grown);
    if (!full || !grown) { free(full); if (grown) db->maps = grown; return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    db->maps = grown;
    snprintf(full, n, "%s/%s", db->dir, path);
    struct stat sb;
    *found = 0;
    if (stat(full, &sb) != 0) {
        int e = errno;
        free(full);
        return e == ENOENT || e == ENOTDIR ? PI0_OK : pi0_fail(PI0_ERR_IO, "%s/%s: %s", db->dir, path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) { free(full); return pi0_fail(PI0_ERR_IO, "%s/%s: not a regular file", db->dir, path); }
    int fd = open(full, O_RDONLY | O_NONBLOCK);
    if (fd < 0) { pi0_status st = pi0_fail(PI0_ERR_IO, "%s: %s", full, strerror(errno)); free(full); return st; }
    void *map = (void *)"";
    size_t size = (size_t)sb.st_size;
    if (size && (map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
        pi0_status st = pi0_fail(PI0_ERR_IO, "%s: mmap: %s", full, strerror(errno));
        close(fd); free(full);
        return st;
    }
    close(fd);
    free(full);
    char *copy = strdup(path);
    if (!copy) { if (size) munmap(map, size); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    db->maps[db->n_maps++] = (mapping){copy, size ? map : NULL, size};
    *data = map; *len = size; *found = 1;
    return PI0_OK;
}

/* A path named by the database itself: relative, no "." / ".." components, no NUL. */
static int safe_path(const char *p, size_t n) {
    if (!n || p[0] == '/') return 0;
    for (size_t i = 0; i < n; i++) {
        if (!p[i]) return 0;
        if (i == 0 || p[i - 1] == '/') {
            size_t k = i;
            while (k < n && p[k] != '/') k++;
            if ((k - i == 1 && p[i] == '.') || (k - i == 2 && p[i] == '.' && p[i + 1] == '.')) return 0;
        }
    }
    return 1;
}

static pi0_status map_file(ocdbt *db, const char *path, const uint8_t **data, size_t *len) {
    int found = 0;
    pi0_status st = db->files.map(db->files.user, path, data, len, &found);
    if (st == PI0_OK && !found) st = pi0_fail(PI0_ERR_IO, "%s: data file '%s' is missing", db->dir, path);
    return st;
}

/* Counts `more` against one of the bounds above before it is built; the error names the node or manifest, what was
 * counted, the count and the limit. */
static pi0_status charge(uint64_t *used, uint64_t more, uint64_t limit, const char *what, const char *counted) {
    if (more <= limit - *used) { *used += more; return PI0_OK; }
    return pi0_fail(PI0_ERR_FORMAT, "%s: %s: %llu more after %llu, over this reader's limit of %llu (docs/checkpoints.md)",
                    what, counted, (unsigned long long)more, (unsigned long long)*used, (unsigned long long)limit);
}
#define BUILT_WHAT "bytes of keys, data file paths and inline values built"

/* ---- byte reader ---- */

typedef struct { const uint8_t *p, *end; } rd;

static int rd_varint(rd *r, uint64_t *v) {
    uint64_t x = 0;
    for (int s = 0; s <= 63; s += 7) {
        if (r->p >= r->end) return 0;
        uint8_t b = *r->p++;
        if (s == 63 && b > 1) return 0;
        x |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) { *v = x; return 1; }
    }
    return 0;
}
static int rd_u8(rd *r, uint8_t *v) { if (r->p >= r->end) return 0; *v = *r->p++; return 1; }
static int rd_u64le(rd *r, uint64_t *v) {
    if (r->end - r->p < 8) return 0;
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = (x << 8) | r->p[i];
    r->p += 8; *v = x;
    return 1;
}
static uint64_t rd_left(const rd *r) { return (uint64_t)(r->end - r->p); }
/* n varints into a fresh array (n bounded by the bytes left: one byte per varint at least). */
static uint64_t *rd_column(rd *r, uint64_t n) {
    if (n > rd_left(r)) return NULL;
    uint64_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return NULL;
    for (uint64_t i = 0; i < n; i++) if (!rd_varint(r, &v[i])) { free(v); return NULL; }
    return v;
}

static int rd_skip_varints(rd *r, uint64_t n) {
    uint64_t v;
    for (uint64_t i = 0; i < n; i++) if (!rd_varint(r, &v)) return 0;
    return 1;
}

/* ---- node framing ---- */

/* Checks the framing of an encoded node and returns its body (malloc'd; decompressed when zstd), refused past
 * `cap` bytes (`cap_what` says which limit that is). */
static pi0_status decode_frame(const uint8_t *buf, size_t len, uint32_t magic, uint64_t cap, const char *cap_what,
                               const char *what, uint8_t **body, size_t *body_len) {
    *body = NULL;
    if (len < 16) return pi0_fail(PI0_ERR_FORMAT, "%s: %zu bytes, too short for an OCDBT node (16 at least)", what, len);
    uint32_t m = (uint32_t)buf[0] << 24 | (uint32_t)buf[1] << 16 | (uint32_t)buf[2] << 8 | buf[3];
    if (m != magic) return pi0_fail(PI0_ERR_FORMAT, "%s: magic %08x, expected %08x", what, m, magic);
    rd r = {buf + 4, buf + len - 4};
    uint64_t length = 0, version, comp;
    rd_u64le(&r, &length);
    if (length != len)
        return pi0_fail(PI0_ERR_FORMAT, "%s: length field %llu, but the node is %zu bytes (truncated?)", what,
                        (unsigned long long)length, len);
    uint32_t want = (uint32_t)buf[len - 4] | (uint32_t)buf[len - 3] << 8 | (uint32_t)buf[len - 2] << 16 |
                    (uint32_t)buf[len - 1] << 24;
    uint32_t got = ocdbt_crc32c(buf, len - 4);
    if (want != got) return pi0_fail(PI0_ERR_FORMAT, "%s: CRC-32C %08x, stored %08x (corrupt file)", what, got, want);
    if (!rd_varint(&r, &version) || !rd_varint(&r, &comp))
        return pi0_fail(PI0_ERR_FORMAT, "%s: header truncated", what);
    if (version != 0) return pi0_fail(PI0_ERR_FORMAT, "%s: format version %llu (only 0 is defined)", what, (unsigned long long)version);
    if (comp == 0) {
        size_t n = rd_left(&r);
        if (n > cap)
            return pi0_fail(PI0_ERR_FORMAT, "%s: %zu bytes of body, more than %llu (%s)", what, n, (unsigned long long)cap, cap_what);
        if (!(*body = malloc(n ? n : 1))) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
        memcpy(*body, r.p, n);
        *body_len = n;
        return PI0_OK;
    }
    if (comp != 1) return pi0_fail(PI0_ERR_FORMAT, "%s: compression format %llu (expected 0 none or 1 zstd)", what, (unsigned long long)comp);
    ZSTD_DCtx *z = ZSTD_createDCtx();
    size_t cap_now = cap < 4096 ? (size_t)cap : 4096, n = 0;
    uint8_t *out = malloc(cap_now ? cap_now : 1);
    pi0_status st = PI0_OK;
    if (!z || !out) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    ZSTD_inBuffer in = {r.p, rd_left(&r), 0};
    for (;;) {
        if (n == cap_now) {
            if (cap_now >= cap) {
                st = pi0_fail(PI0_ERR_FORMAT, "%s: decodes to more than %llu bytes (%s)", what, (unsigned long long)cap, cap_what);
                goto done;
            }
            size_t nc = cap_now * 2 > cap ? (size_t)cap : cap_now * 2;
            uint8_t *g = realloc(out, nc);
            if (!g) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
            out = g; cap_now = nc;
        }
        ZSTD_outBuffer o = {out, cap_now, n};
        size_t ret = ZSTD_decompressStream(z, &o, &in);
        n = o.pos;
        if (ZSTD_isError(ret)) { st = pi0_fail(PI0_ERR_FORMAT, "%s: zstd: %s", what, ZSTD_getErrorName(ret)); goto done; }
        if (ret == 0) break;
        if (in.pos == in.size && o.pos < o.size) { st = pi0_fail(PI0_ERR_FORMAT, "%s: zstd stream truncated", what); goto done; }
    }
    if (in.pos != in.size) st = pi0_fail(PI0_ERR_FORMAT, "%s: %zu bytes after the zstd frame", what, in.size - in.pos);
done:
    ZSTD_freeDCtx(z);
    if (st != PI0_OK) { free(out); return st; }
    *body = out;
    *body_len = n;
    return PI0_OK;
}

/* ---- data file tables ---- */

typedef struct { uint64_t n; char **full, **trans; } dft;   /* per file: path from the root; child transitive path */

static void dft_free(dft *t) {
    for (uint64_t i = 0; i < t->n; i++) { free(t->full[i]); free(t->trans[i]); }
    free(t->full); free(t->trans);
    memset(t, 0, sizeof *t);
}

/* Reads a data file table: its size is counted against MAX_FILES, its paths (each built in full, plus its base
 * path) against MAX_BUILT, both before they are built. */
static pi0_status parse_dft(ocdbt *db, rd *r, const char *transitive, const char *what, dft *t) {
    memset(t, 0, sizeof *t);
    uint64_t n, *pre = NULL, *suf = NULL, *base = NULL;
    size_t tl = strlen(transitive);
    pi0_status st = PI0_OK;
    if (!rd_varint(r, &n) || n > rd_left(r)) return pi0_fail(PI0_ERR_FORMAT, "%s: data file table truncated", what);
    if ((st = charge(&db->n_files, n, MAX_FILES, what, "data files named (all data file tables)")) != PI0_OK) return st;
    if (!(pre = rd_column(r, n ? n - 1 : 0)) || !(suf = rd_column(r, n)) || !(base = rd_column(r, n))) {
        st = pi0_fail(PI0_ERR_FORMAT, "%s: data file table truncated", what);
        goto done;
    }
    uint64_t bytes = 0, stored = 0, prev_len = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t p = i ? pre[i - 1] : 0, len = p + suf[i];
        if (p > prev_len || suf[i] > rd_left(r) - stored || len + tl > MAX_PATH || base[i] > len) {
            st = pi0_fail(PI0_ERR_FORMAT, "%s: data file table entry %llu: inconsistent path lengths", what, (unsigned long long)i);
            goto done;
        }
        stored += suf[i];
        bytes += 2 * (tl + 1) + len + base[i];
        prev_len = len;
    }
    if ((st = charge(&db->built, bytes, MAX_BUILT, what, BUILT_WHAT)) != PI0_OK) goto done;
    t->full = calloc((size_t)(n ? n : 1), sizeof *t->full);
    t->trans = calloc((size_t)(n ? n : 1), sizeof *t->trans);
    if (!t->full || !t->trans) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    t->n = n;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t p = i ? pre[i - 1] : 0, len = p + suf[i];
        char *full = malloc(tl + len + 1), *tr = malloc(tl + base[i] + 1);
        if (!full || !tr) { free(full); free(tr); st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
        memcpy(full, transitive, tl);
        if (p) memcpy(full + tl, t->full[i - 1] + tl, (size_t)p);
        memcpy(full + tl + p, r->p, (size_t)suf[i]);
        r->p += suf[i];
        full[tl + len] = 0;
        memcpy(tr, full, tl + base[i]);
        tr[tl + base[i]] = 0;
        t->full[i] = full;
        t->trans[i] = tr;
        if (len && !safe_path(full, tl + len)) {
            st = pi0_fail(PI0_ERR_FORMAT, "%s: data file path '%s' leaves the database directory", what, full);
            goto done;
        }
    }
done:
    free(pre); free(suf); free(base);
    if (st != PI0_OK) dft_free(t);
    return st;
}

/* ---- B+tree walk ---- */

/* Appends data file p to db->paths (counted against MAX_BUILT) and sets *ix to its index + 1. A leaf appends each
 * table entry that its values name once; a file named by several tables is merged by dedupe_paths at the end, so
 * that no lookup scans the paths (a hostile tree names up to MAX_FILES of them, MAX_ENTRIES times). */
static pi0_status add_path(ocdbt *db, const char *p, const char *what, int *ix) {
    pi0_status st = charge(&db->built, strlen(p) + 1, MAX_BUILT, what, BUILT_WHAT);
    if (st != PI0_OK) return st;
    if (db->n_paths == db->paths_cap) {
        int nc = db->paths_cap ? 2 * db->paths_cap : 16;
        char **g = realloc(db->paths, (size_t)nc * sizeof *g);
        if (!g) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
        db->paths = g; db->paths_cap = nc;
    }
    if (!(db->paths[db->n_paths] = strdup(p))) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    *ix = ++db->n_paths;
    return PI0_OK;
}

typedef struct { char *path; int i; } path_ref;
static int cmp_path(const void *a, const void *b) { return strcmp(((const path_ref *)a)->path, ((const path_ref *)b)->path); }

/* Keeps one copy of each data file in db->paths (sorted) and renumbers the entries' file indices. */
static pi0_status dedupe_paths(ocdbt *db) {
    int n = db->n_paths, kept = 0;
    path_ref *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    int *to = malloc((size_t)(n ? n : 1) * sizeof *to);
    if (!v || !to) { free(v); free(to); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    for (int i = 0; i < n; i++) v[i] = (path_ref){db->paths[i], i};
    qsort(v, (size_t)n, sizeof *v, cmp_path);
    for (int k = 0; k < n; k++) {
        if (kept && !strcmp(v[k].path, db->paths[kept - 1])) free(v[k].path);
        else db->paths[kept++] = v[k].path;
        to[v[k].i] = kept - 1;
    }
    db->n_paths = kept;
    for (int i = 0; i < db->n; i++) if (db->e[i].file >= 0) db->e[i].file = to[db->e[i].file];
    free(v); free(to);
    return PI0_OK;
}

static pi0_status add_entry(ocdbt *db, const char *prefix, size_t plen, const uint8_t *key, size_t klen,
                            ocdbt_entry e, const uint8_t *inline_v, const char *what) {
    if (memchr(key, 0, klen) || memchr(prefix, 0, plen))
        return pi0_fail(PI0_ERR_FORMAT, "%s: a key holds a NUL byte", what);
    pi0_status st = charge(&db->built, plen + klen + 1 + (inline_v ? e.length : 0), MAX_BUILT, what, BUILT_WHAT);
    if (st != PI0_OK) return st;
    if (db->n == db->cap) {
        int nc = db->cap ? 2 * db->cap : 64;
        ocdbt_entry *g = realloc(db->e, (size_t)nc * sizeof *g);
        if (!g) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
        db->e = g; db->cap = nc;
    }
    e.key = malloc(plen + klen + 1);
    uint8_t *v = NULL;
    if (inline_v && !(v = malloc(e.length ? (size_t)e.length : 1))) { free(e.key); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    if (!e.key) { free(v); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    memcpy(e.key, prefix, plen);
    memcpy(e.key + plen, key, klen);
    e.key[plen + klen] = 0;
    if (v) memcpy(v, inline_v, (size_t)e.length);
    e.inline_v = v;
    db->e[db->n++] = e;
    return PI0_OK;
}

static pi0_status walk(ocdbt *db, const char *file, const char *trans, uint64_t off, uint64_t len, int height,
                       const char *prefix, size_t plen);

/* Reads one node's keys (both node kinds share the layout up to the suffix bytes) into one buffer *buf: key i at
 * (*keys)[i], (*klen)[i] bytes. Their lengths are checked and their sum counted against MAX_BUILT first. */
static pi0_status read_keys(ocdbt *db, rd *r, uint64_t n, int interior, const char *what, uint8_t **buf,
                            uint8_t ***keys, size_t **klen, uint64_t **scp) {
    uint64_t *pre = rd_column(r, n - 1), *suf = pre ? rd_column(r, n) : NULL;
    *scp = suf && interior ? rd_column(r, n) : NULL;
    *buf = NULL; *keys = NULL; *klen = NULL;
    pi0_status st = PI0_OK;
    if (!suf || (interior && !*scp)) { st = pi0_fail(PI0_ERR_FORMAT, "%s: entries truncated", what); goto done; }
    uint64_t total = 0, stored = 0, prev = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t p = i ? pre[i - 1] : 0;
        if (p > prev || suf[i] > rd_left(r) - stored || p + suf[i] > MAX_KEY || (interior && (*scp)[i] > p + suf[i])) {
            st = pi0_fail(PI0_ERR_FORMAT, "%s: entry %llu: inconsistent key lengths", what, (unsigned long long)i);
            goto done;
        }
        stored += suf[i];
        total += prev = p + suf[i];
    }
    if ((st = charge(&db->built, total, MAX_BUILT, what, BUILT_WHAT)) != PI0_OK) goto done;
    *buf = malloc(total ? (size_t)total : 1);
    *keys = calloc((size_t)n, sizeof **keys);
    *klen = calloc((size_t)n, sizeof **klen);
    if (!*buf || !*keys || !*klen) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    uint8_t *at = *buf;
    for (uint64_t i = 0; i < n; i++) {
        size_t p = i ? (size_t)pre[i - 1] : 0, kl = p + (size_t)suf[i];
        (*keys)[i] = at;
        if (p) memcpy(at, (*keys)[i - 1], p);
        memcpy(at + p, r->p, (size_t)suf[i]);
        r->p += suf[i];
        at += kl;
        (*klen)[i] = kl;
        if (i) {   /* strictly increasing */
            size_t m = kl < (*klen)[i - 1] ? kl : (*klen)[i - 1];
            int c = memcmp((*keys)[i - 1], (*keys)[i], m);
            if (c > 0 || (c == 0 && (*klen)[i - 1] >= kl)) {
                st = pi0_fail(PI0_ERR_FORMAT, "%s: keys out of order at entry %llu", what, (unsigned long long)i);
                goto done;
            }
        }
    }
done:
    free(pre); free(suf);
    return st;
}

static pi0_status walk_body(ocdbt *db, rd *r, const char *trans, int height, const char *prefix, size_t plen,
                            const char *what) {
    uint8_t h;
    uint64_t n, *scp = NULL, *vlen = NULL, *fid = NULL, *offs = NULL, *lens = NULL;
    uint8_t *kbuf = NULL, **keys = NULL, *kind = NULL;
    size_t *klen = NULL;
    int *file_ix = NULL;   /* per data file table entry: its index in db->paths + 1, 0 until a value names it */
    dft t = {0};
    pi0_status st;
    if (!rd_u8(r, &h)) return pi0_fail(PI0_ERR_FORMAT, "%s: truncated", what);
    if (h != height) return pi0_fail(PI0_ERR_FORMAT, "%s: height %u, expected %d", what, h, height);
    if ((st = parse_dft(db, r, trans, what, &t)) != PI0_OK) return st;
    if (!rd_varint(r, &n) || n == 0 || n > rd_left(r)) { st = pi0_fail(PI0_ERR_FORMAT, "%s: bad entry count", what); goto done; }
    if ((st = charge(&db->entries, n, MAX_ENTRIES, what, "B+tree entries (all nodes)")) != PI0_OK) goto done;
    if ((st = read_keys(db, r, n, height > 0, what, &kbuf, &keys, &klen, &scp)) != PI0_OK) goto done;
    if (height > 0) {
        if (!(fid = rd_column(r, n)) || !(offs = rd_column(r, n)) || !(lens = rd_column(r, n))) {
            st = pi0_fail(PI0_ERR_FORMAT, "%s: child references truncated", what);
            goto done;
        }
        /* statistics: num_keys, num_tree_bytes, num_indirect_value_bytes */
        if (!rd_skip_varints(r, 3 * n)) { st = pi0_fail(PI0_ERR_FORMAT, "%s: statistics truncated", what); goto done; }
        for (uint64_t i = 0; i < n && st == PI0_OK; i++) {
            if (fid[i] >= t.n) { st = pi0_fail(PI0_ERR_FORMAT, "%s: child %llu names data file %llu of %llu", what, (unsigned long long)i, (unsigned long long)fid[i], (unsigned long long)t.n); break; }
            size_t cl = plen + (size_t)scp[i];
            if ((st = charge(&db->built, cl + 1, MAX_BUILT, what, BUILT_WHAT)) != PI0_OK) break;
            char *cp = malloc(cl + 1);
            if (!cp) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); break; }
            memcpy(cp, prefix, plen);
            memcpy(cp + plen, keys[i], (size_t)scp[i]);
            cp[cl] = 0;
            st = walk(db, t.full[fid[i]], t.trans[fid[i]], offs[i], lens[i], height - 1, cp, cl);
            free(cp);
        }
        goto done;
    }
    if (!(vlen = rd_column(r, n)) || n > rd_left(r) || !(kind = malloc((size_t)n))) {
        st = pi0_fail(PI0_ERR_FORMAT, "%s: value lengths truncated", what);
        goto done;
    }
    uint64_t n_ind = 0;
    for (uint64_t i = 0; i < n; i++) {
        rd_u8(r, &kind[i]);
        if (kind[i] > 1) { st = pi0_fail(PI0_ERR_FORMAT, "%s: value kind %u (expected 0 inline or 1 indirect)", what, kind[i]); goto done; }
        n_ind += kind[i];
    }
    if (!(fid = rd_column(r, n_ind)) || !(offs = rd_column(r, n_ind))) {
        st = pi0_fail(PI0_ERR_FORMAT, "%s: value references truncated", what);
        goto done;
    }
    if (!(file_ix = calloc((size_t)(t.n ? t.n : 1), sizeof *file_ix))) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    for (uint64_t i = 0, k = 0; i < n && st == PI0_OK; i++) {
        ocdbt_entry e = {.file = -1, .length = vlen[i]};
        const uint8_t *v = NULL;
        if (kind[i]) {
            if (fid[k] >= t.n || !t.full[fid[k]][0]) { st = pi0_fail(PI0_ERR_FORMAT, "%s: value %llu names data file %llu of %llu", what, (unsigned long long)i, (unsigned long long)fid[k], (unsigned long long)t.n); break; }
            if (!file_ix[fid[k]] && (st = add_path(db, t.full[fid[k]], what, &file_ix[fid[k]])) != PI0_OK) break;
            e.file = file_ix[fid[k]] - 1;
            e.offset = offs[k++];
        } else {
            if (vlen[i] > rd_left(r)) { st = pi0_fail(PI0_ERR_FORMAT, "%s: inline value %llu truncated", what, (unsigned long long)i); break; }
            v = r->p;
            r->p += vlen[i];
        }
        st = add_entry(db, prefix, plen, keys[i], klen[i], e, v, what);
    }
    if (st == PI0_OK && rd_left(r)) st = pi0_fail(PI0_ERR_FORMAT, "%s: %llu stray bytes after the entries", what, (unsigned long long)rd_left(r));
done:
    free(kbuf); free(keys); free(klen); free(scp); free(vlen); free(kind); free(fid); free(offs); free(lens); free(file_ix);
    dft_free(&t);
    return st;
}

/* 1 if (file, off, len) was visited before, else records it (0); -1 out of memory. A B+tree shares no nodes: a
 * node reached twice would multiply its subtree's entries (a few KB of hostile tree can name billions). */
static int seen_before(ocdbt *db, const char *file, uint64_t off, uint64_t len) {
    uint64_t h = 1469598103934665603ull;
    for (const char *c = file; *c; c++) h = (h ^ (uint8_t)*c) * 1099511628211ull;
    h = (h ^ off) * 1099511628211ull;
    h = (h ^ len) * 1099511628211ull;
    if ((size_t)db->nodes * 2 > db->seen_cap) {   /* grow (load <= 1/2); nodes counts the one being added */
        size_t nc = db->seen_cap ? 2 * db->seen_cap : 256;
        node_ref *g = calloc(nc, sizeof *g);
        if (!g) return -1;
        for (size_t i = 0; i < db->seen_cap; i++)
            if (db->seen[i].file) {
                size_t j = db->seen[i].h & (nc - 1);
                while (g[j].file) j = (j + 1) & (nc - 1);
                g[j] = db->seen[i];
            }
        free(db->seen);
        db->seen = g;
        db->seen_cap = nc;
    }
    size_t j = h & (db->seen_cap - 1);
    for (; db->seen[j].file; j = (j + 1) & (db->seen_cap - 1))
        if (db->seen[j].h == h && db->seen[j].off == off && db->seen[j].len == len && !strcmp(db->seen[j].file, file))
            return 1;
    if (!(db->seen[j].file = strdup(file))) return -1;
    db->seen[j].off = off; db->seen[j].len = len; db->seen[j].h = h;
    return 0;
}

static pi0_status walk(ocdbt *db, const char *file, const char *trans, uint64_t off, uint64_t len, int height,
                       const char *prefix, size_t plen) {
    char what[512];
    snprintf(what, sizeof what, "%s: B+tree node %s@%llu+%llu", db->dir, file, (unsigned long long)off, (unsigned long long)len);
    if (height < 0 || height > MAX_HEIGHT) return pi0_fail(PI0_ERR_FORMAT, "%s: height %d out of range", what, height);
    /* nodes: at most MAX_ENTRIES + 1, each but the root being a child reference counted in its parent */
    db->nodes++;
    pi0_status st = charge(&db->built, strlen(file) + 1, MAX_BUILT, what, BUILT_WHAT);   /* seen_before's copy */
    if (st != PI0_OK) return st;
    int again = seen_before(db, file, off, len);
    if (again < 0) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
    if (again) return pi0_fail(PI0_ERR_FORMAT, "%s: referenced a second time (B+tree nodes have one parent)", what);
    const uint8_t *data;
    size_t flen;
    if ((st = map_file(db, file, &data, &flen)) != PI0_OK) return st;
    if (off > flen || len > flen - off)
        return pi0_fail(PI0_ERR_FORMAT, "%s: past the end of the file (%zu bytes; truncated?)", what, flen);
    uint8_t *body;
    size_t blen;
    uint64_t left = DECODED_MAX_TOTAL - db->decoded;
    char cap_what[160];
    if (db->max_node <= left)
        snprintf(cap_what, sizeof cap_what, "the decoded node size limit: the config's max_decoded_node_bytes, at most %llu",
                 (unsigned long long)NODE_MAX_BYTES);
    else
        snprintf(cap_what, sizeof cap_what, "what is left of the %llu bytes all B+tree nodes may decode to",
                 (unsigned long long)DECODED_MAX_TOTAL);
    if ((st = decode_frame(data + off, (size_t)len, MAGIC_BTREE, db->max_node <= left ? db->max_node : left, cap_what,
                           what, &body, &blen)) != PI0_OK)
        return st;
    db->decoded += blen;
    rd r = {body, body + blen};
    st = walk_body(db, &r, trans, height, prefix, plen, what);
    free(body);
    return st;
}

/* ---- manifest ---- */

/* The newest numbered manifest "manifest.<16 hex digits>" in dir (numbered manifest kind), or "" when none. */
static void latest_numbered(const char *dir, char name[32]) {
    name[0] = 0;
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *de; (de = readdir(d));) {
        const char *s = de->d_name;
        if (strncmp(s, "manifest.", 9) || strlen(s) != 25 || strspn(s + 9, "0123456789abcdef") != 16) continue;
        if (strcmp(s, name) > 0) memcpy(name, s, 26);   /* 25 characters and the NUL */
    }
    closedir(d);
}

static pi0_status read_manifest(ocdbt *db, const char *name, int depth) {
    char what[512];
    snprintf(what, sizeof what, "%s/%s", db->dir, name);
    const uint8_t *data;
    size_t len;
    int found = 0;
    pi0_status st = db->files.map(db->files.user, name, &data, &len, &found);
    if (st != PI0_OK) return st;
    if (!found) return pi0_fail(PI0_ERR_IO, "%s: missing (not an OCDBT database)", what);
    uint8_t *body;
    size_t blen;
    if ((st = decode_frame(data, len, MAGIC_MANIFEST, MANIFEST_MAX_BYTES, "the manifest size limit", what, &body, &blen)) != PI0_OK)
        return st;
    rd r = {body, body + blen};
    uint64_t kind, max_inline, max_node, comp;
    uint8_t arity;
    dft t = {0};
    if (rd_left(&r) < 16) { st = pi0_fail(PI0_ERR_FORMAT, "%s: config truncated", what); goto done; }
    r.p += 16;   /* uuid */
    if (!rd_varint(&r, &kind) || !rd_varint(&r, &max_inline) || !rd_varint(&r, &max_node) || !rd_u8(&r, &arity) ||
        !rd_varint(&r, &comp)) { st = pi0_fail(PI0_ERR_FORMAT, "%s: config truncated", what); goto done; }
    if (comp > 1 || (comp == 1 && rd_left(&r) < 4)) { st = pi0_fail(PI0_ERR_FORMAT, "%s: compression method %llu (expected 0 none or 1 zstd)", what, (unsigned long long)comp); goto done; }
    if (comp == 1) r.p += 4;   /* zstd level: for writers */
    if (arity == 0 || arity > 16) { st = pi0_fail(PI0_ERR_FORMAT, "%s: version_tree_arity_log2 %u out of range", what, arity); goto done; }
    db->max_node = max_node && max_node < NODE_MAX_BYTES ? max_node : NODE_MAX_BYTES;
    if (kind == 1) {   /* numbered: the config only; versions in the newest manifest.<generation> */
        char num[32];
        latest_numbered(db->dir, num);
        if (depth || !num[0]) { st = pi0_fail(PI0_ERR_FORMAT, "%s: numbered manifest kind, but no manifest.<generation> file to read", what); goto done; }
        free(body);
        return read_manifest(db, num, 1);
    }
    if (kind != 0) { st = pi0_fail(PI0_ERR_FORMAT, "%s: manifest kind %llu (expected 0 single or 1 numbered)", what, (unsigned long long)kind); goto done; }
    if ((st = parse_dft(db, &r, "", what, &t)) != PI0_OK) goto done;
    uint64_t nv, gen = 0, g, fid = 0, off = 0, len_ = 0;
    uint8_t h = 0;
    if (!rd_varint(&r, &nv) || nv == 0 || nv > ((uint64_t)1 << arity) || nv > rd_left(&r)) {
        st = pi0_fail(PI0_ERR_FORMAT, "%s: bad number of versions", what);
        goto done;
    }
    for (uint64_t i = 0; i < nv; i++) {   /* generation numbers, strictly increasing, the newest last */
        if (!rd_varint(&r, &g) || g <= gen) { st = pi0_fail(PI0_ERR_FORMAT, "%s: bad generation numbers", what); goto done; }
        gen = g;
    }
    int ok = 1;
    for (uint64_t i = 0; i < nv; i++) ok &= rd_u8(&r, &h);                         /* root heights */
    uint64_t v;
    for (uint64_t i = 0; i < nv; i++) ok &= rd_varint(&r, i + 1 == nv ? &fid : &v);  /* root locations */
    for (uint64_t i = 0; i < nv; i++) ok &= rd_varint(&r, i + 1 == nv ? &off : &v);
    for (uint64_t i = 0; i < nv; i++) ok &= rd_varint(&r, i + 1 == nv ? &len_ : &v);
    if (!ok) { st = pi0_fail(PI0_ERR_FORMAT, "%s: versions truncated", what); goto done; }
    if (fid >= t.n) { st = pi0_fail(PI0_ERR_FORMAT, "%s: root names data file %llu of %llu", what, (unsigned long long)fid, (unsigned long long)t.n); goto done; }
    if (!t.full[fid][0] || !len_) { st = pi0_fail(PI0_ERR_FORMAT, "%s: the newest version (generation %llu) holds no keys", what, (unsigned long long)gen); goto done; }
    st = walk(db, t.full[fid], t.trans[fid], off, len_, h, "", 0);
done:
    dft_free(&t);
    free(body);
    return st;
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const ocdbt_entry *)a)->key, ((const ocdbt_entry *)b)->key);
}

pi0_status ocdbt_open(ocdbt **out, const char *dir, const ocdbt_files *files) {
    *out = NULL;
    ocdbt *db = calloc(1, sizeof *db);
    if (!db || !(db->dir = strdup(dir))) { free(db); return pi0_fail(PI0_ERR_NOMEM, "out of memory"); }
    db->files = files ? *files : (ocdbt_files){default_map, db};
    db->max_node = NODE_MAX_BYTES;
    pi0_status st = read_manifest(db, "manifest.ocdbt", 0);
    if (st == PI0_OK) st = dedupe_paths(db);
    if (st == PI0_OK) {
        qsort(db->e, (size_t)db->n, sizeof *db->e, cmp_entry);
        for (int i = 1; i < db->n && st == PI0_OK; i++)
            if (!strcmp(db->e[i - 1].key, db->e[i].key))
                st = pi0_fail(PI0_ERR_FORMAT, "%s: key '%s' appears twice in the B+tree", dir, db->e[i].key);
        /* map every data file now: ocdbt_value then only reads the cache (callers decode in parallel) */
        const uint8_t *d;
        size_t l;
        for (int i = 0; i < db->n_paths && st == PI0_OK; i++) st = map_file(db, db->paths[i], &d, &l);
    }
    if (st != PI0_OK) { ocdbt_close(db); return st; }
    *out = db;
    return PI0_OK;
}

void ocdbt_close(ocdbt *db) {
    if (!db) return;
    for (int i = 0; i < db->n; i++) { free(db->e[i].key); free((void *)db->e[i].inline_v); }
    for (int i = 0; i < db->n_paths; i++) free(db->paths[i]);
    for (int i = 0; i < db->n_maps; i++) { if (db->maps[i].map) munmap(db->maps[i].map, db->maps[i].len); free(db->maps[i].path); }
    for (size_t i = 0; i < db->seen_cap; i++) free(db->seen[i].file);
    free(db->e); free(db->paths); free(db->maps); free(db->dir); free(db->seen);
    free(db);
}

int ocdbt_count(const ocdbt *db) { return db->n; }
const ocdbt_entry *ocdbt_at(const ocdbt *db, int i) { return i >= 0 && i < db->n ? &db->e[i] : NULL; }
const char *ocdbt_file_path(const ocdbt *db, int file) { return file >= 0 && file < db->n_paths ? db->paths[file] : ""; }

const ocdbt_entry *ocdbt_find(const ocdbt *db, const char *key) {
    ocdbt_entry k = {.key = (char *)key};
    return bsearch(&k, db->e, (size_t)db->n, sizeof *db->e, cmp_entry);
}

pi0_status ocdbt_value(ocdbt *db, const ocdbt_entry *e, const uint8_t **data, size_t *len) {
    if (e->file < 0) { *data = e->inline_v; *len = (size_t)e->length; return PI0_OK; }
    const uint8_t *f;
    size_t flen;
    pi0_status st = map_file(db, db->paths[e->file], &f, &flen);
    if (st != PI0_OK) return st;
    if (e->offset > flen || e->length > flen - e->offset)
        return pi0_fail(PI0_ERR_FORMAT, "%s: value of '%s' at %s@%llu+%llu runs past the end of the file (%zu bytes; truncated?)",
                        db->dir, e->key, db->paths[e->file], (unsigned long long)e->offset, (unsigned long long)e->length, flen);
    *data = f + e->offset;
    *len = (size_t)e->length;
    return PI0_OK;
}
