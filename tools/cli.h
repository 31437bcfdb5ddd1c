/* cli.h — helpers shared by the pi0 CLI's command files (pi0.c, bench.c, run.c). */
#ifndef PI0_CLI_H
#define PI0_CLI_H

#include "pi0.h"

int cli_fail(const char *what);   /* prints "pi0: what: <last error>", returns 1 */
int cli_parse_int(const char *flag, const char *v, long long lo, long long hi, long long *out);
int cli_backend(const char *v, pi0_backend_kind *out);
int cmd_bench(int argc, char **argv);
int cmd_run(int argc, char **argv);

#endif
