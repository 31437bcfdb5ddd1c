/* cli.c — helpers shared by the CLI's command files (main.c, bench.c, run.c): error printing and argument parsing. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_fail(const char *what) {
    fprintf(stderr, "pi0: %s: %s\n", what, pi0_last_error());
    return 1;
}

int cli_parse_int(const char *flag, const char *v, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || errno || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "pi0: %s: expected an integer in %lld..%lld, got '%s'\n", flag, lo, hi, v ? v : "(nothing)");
        return 0;
    }
    *out = x;
    return 1;
}

int cli_precision(const char *v, pi0_precision *out) {
    if (!strcmp(v, "bf16")) { *out = PI0_PRECISION_BF16; return 1; }
    if (!strcmp(v, "int8")) { *out = PI0_PRECISION_INT8; return 1; }
    if (!strcmp(v, "fp8")) { *out = PI0_PRECISION_FP8; return 1; }
    fprintf(stderr, "pi0: --precision: expected bf16, int8 or fp8, got '%s'\n", v);
    return 0;
}

int cli_stages(const char *v, unsigned *out) {
    static const struct { const char *name; unsigned bit; } st[] = {
        {"vision", PI0_STAGE_VISION}, {"prefix", PI0_STAGE_PREFIX}, {"expert", PI0_STAGE_EXPERT}};
    unsigned bits = 0;
    const char *p = v;
    while (*p) {
        size_t n = strcspn(p, ",");
        unsigned bit = 0;
        for (size_t k = 0; k < sizeof st / sizeof *st; k++)
            if (n == strlen(st[k].name) && !strncmp(p, st[k].name, n)) bit = st[k].bit;
        if (!bit) {
            fprintf(stderr, "pi0: --quant-stages: expected a comma-separated list of vision, prefix, expert; got '%s'\n", v);
            return 0;
        }
        bits |= bit;
        p += n + (p[n] == ',');
    }
    if (!bits) { fprintf(stderr, "pi0: --quant-stages: empty list\n"); return 0; }
    *out = bits;
    return 1;
}

const char *cli_precision_name(pi0_precision p, unsigned stages, char *buf, size_t n) {
    if (p == PI0_PRECISION_BF16 || !stages) { snprintf(buf, n, "bf16"); return buf; }
    snprintf(buf, n, "%s:%s%s%s", p == PI0_PRECISION_FP8 ? "fp8" : "int8", stages & PI0_STAGE_VISION ? "v" : "", stages & PI0_STAGE_PREFIX ? "p" : "",
             stages & PI0_STAGE_EXPERT ? "e" : "");
    return buf;
}

int cli_backend(const char *v, pi0_backend_kind *out) {
    if (!strcmp(v, "cpu")) { *out = PI0_BACKEND_CPU; return 1; }
    if (!strcmp(v, "cuda")) { *out = PI0_BACKEND_CUDA; return 1; }
    fprintf(stderr, "pi0: --backend: expected cpu or cuda, got '%s'\n", v);
    return 0;
}
