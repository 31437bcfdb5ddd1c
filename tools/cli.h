/* cli.h — the CLI's shared helpers (cli.c) and its command entry points (bench.c, run.c), called by main.c. */
#ifndef PI0_CLI_H
#define PI0_CLI_H

#include "pi0.h"

int cli_fail(const char *what);   /* prints "pi0: what: <last error>", returns 1 */
int cli_parse_int(const char *flag, const char *v, long long lo, long long hi, long long *out);
int cli_backend(const char *v, pi0_backend_kind *out);
/* --precision bf16|int8 and --quant-stages vision,prefix,expert (any of them): 1, or 0 after a message */
int cli_precision(const char *v, pi0_precision *out);
int cli_stages(const char *v, unsigned *out);
/* "bf16", or "int8:" and the stages' initials (v, p, e), into buf */
const char *cli_precision_name(pi0_precision p, unsigned stages, char *buf, size_t n);

int cmd_bench(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_check_precision(int argc, char **argv);   /* check.c */

#endif
