/* util.c — the library's small shared services (see util.h): the thread's last error and pi0_status names, dtype
 * sizes, names and conversions, the seeded RNG, bounded file reading. Also built into the fuzz targets and tests.
 * No model logic and no format parsing. */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static _Thread_local char g_err[2048];
static _Thread_local pi0_status g_status;

pi0_status pi0_fail(pi0_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    g_status = st;
    return st;
}

pi0_status pi0_last_status(void) { return g_status; }

char *pi0_json_reason(char *text) {
    char *near = strstr(text, " near '");
    if (near) *near = 0;
    return text;
}

void pi0_error_prefix(const char *fmt, ...) {
    char pre[1024], old[sizeof g_err];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, g_err, sizeof old);
    int k = snprintf(g_err, sizeof g_err, "%s: ", pre);
    if (k < 0 || (size_t)k >= sizeof g_err) return;
    size_t ol = strlen(old), room = sizeof g_err - (size_t)k - 1;
    if (ol > room) ol = room;
    memcpy(g_err + k, old, ol);
    g_err[(size_t)k + ol] = 0;
}

void pi0_clear_error(void) { g_err[0] = 0; g_status = PI0_OK; }
const char *pi0_last_error(void) { return g_err; }

void pi0_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "pi0: internal error: %s (%s:%d)\n", expr, file, line);
    abort();
}

int pi0_abi_version(void) { return PI0_ABI_VERSION; }

const char *pi0_status_str(pi0_status st) {
    switch (st) {
    case PI0_OK: return "PI0_OK";
    case PI0_ERR_ARG: return "PI0_ERR_ARG";
    case PI0_ERR_IO: return "PI0_ERR_IO";
    case PI0_ERR_FORMAT: return "PI0_ERR_FORMAT";
    case PI0_ERR_SHAPE: return "PI0_ERR_SHAPE";
    case PI0_ERR_NOMEM: return "PI0_ERR_NOMEM";
    case PI0_ERR_CUDA: return "PI0_ERR_CUDA";
    case PI0_ERR_UNSUPPORTED: return "PI0_ERR_UNSUPPORTED";
    }
    return "PI0_ERR_UNKNOWN";
}

size_t pi0_dtype_size(pi0_dtype dt) {
    switch (dt) {
    case PI0_DT_F32: case PI0_DT_I32: return 4;
    case PI0_DT_F16: case PI0_DT_BF16: return 2;
    case PI0_DT_I64: case PI0_DT_F64: return 8;
    case PI0_DT_U8: case PI0_DT_BOOL: return 1;
    default: return 0;
    }
}

const char *pi0_dtype_name(pi0_dtype dt) {
    static const char *names[PI0_DT_COUNT] = {"F32", "F16", "BF16", "I32", "I64", "U8", "BOOL", "F64"};
    return (unsigned)dt < PI0_DT_COUNT ? names[dt] : "?";
}

float pi0_f16_to_f32(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0) v = ldexpf((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexpf((float)(m | 1024), e - 25);
    return s ? -v : v;
}

void pi0_to_f32(float *dst, const void *src, pi0_dtype dt, size_t n) {
    if (dt == PI0_DT_F32) { memcpy(dst, src, n * 4); return; }
    const uint16_t *h = src;
    if (dt == PI0_DT_BF16) for (size_t i = 0; i < n; i++) dst[i] = pi0_bf16_to_f32(h[i]);
    else if (dt == PI0_DT_F16) for (size_t i = 0; i < n; i++) dst[i] = pi0_f16_to_f32(h[i]);
    else PI0_ASSERT(!"pi0_to_f32: not a float dtype");
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void pi0_rng_seed(pi0_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
    r->has_spare = 0;
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t pi0_rng_next(pi0_rng *r) {
    uint64_t *s = r->s, res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
    return res;
}

double pi0_rng_uniform(pi0_rng *r) { return (double)(pi0_rng_next(r) >> 11) * 0x1.0p-53; }

double pi0_rng_normal(pi0_rng *r) {
    if (r->has_spare) { r->has_spare = 0; return r->spare; }
    double u1 = pi0_rng_uniform(r), u2 = pi0_rng_uniform(r);
    double rad = sqrt(-2.0 * log(1.0 - u1)), th = 6.283185307179586 * u2;
    r->spare = rad * sin(th); r->has_spare = 1;
    return rad * cos(th);
}

void *pi0_malloc(size_t n, const char *what) {
    void *p = malloc(n ? n : 1);
    if (!p) pi0_fail(PI0_ERR_NOMEM, "out of memory allocating %zu bytes for %s", n, what);
    return p;
}

void *pi0_calloc(size_t n, size_t size, const char *what) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) pi0_fail(PI0_ERR_NOMEM, "out of memory allocating %zu x %zu bytes for %s", n, size, what);
    return p;
}

char *pi0_read_file(const char *path, size_t *len, size_t max_len) {
    /* O_NONBLOCK: a FIFO or device named as a file must not block the open; only regular files are read */
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) { pi0_fail(PI0_ERR_IO, "%s: cannot open: %s", path, strerror(errno)); return NULL; }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) { close(fd); pi0_fail(PI0_ERR_IO, "%s: not a regular file", path); return NULL; }
    FILE *f = fdopen(fd, "rb");
    if (!f) { close(fd); pi0_fail(PI0_ERR_IO, "%s: cannot open: %s", path, strerror(errno)); return NULL; }
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(f); pi0_fail(PI0_ERR_NOMEM, "%s: out of memory", path); return NULL; }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (n > max_len) {
            free(buf); fclose(f);
            pi0_fail(PI0_ERR_FORMAT, "%s: file larger than the %zu bytes allowed", path, max_len);
            return NULL;
        }
        if (r == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) { free(buf); pi0_fail(PI0_ERR_IO, "%s: read error", path); return NULL; }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}
