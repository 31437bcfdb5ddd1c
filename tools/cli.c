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

int cli_backend(const char *v, pi0_backend_kind *out) {
    if (!strcmp(v, "cpu")) { *out = PI0_BACKEND_CPU; return 1; }
    if (!strcmp(v, "cuda")) { *out = PI0_BACKEND_CUDA; return 1; }
    fprintf(stderr, "pi0: --backend: expected cpu or cuda, got '%s'\n", v);
    return 0;
}
