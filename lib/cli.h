/* Command-line parsing shared by every tool: a table of options, the flags every stage has
 * (--in, --out, --stats, --help, --version, --verbose, --quiet), and strict values. */
#ifndef DI_CLI_H
#define DI_CLI_H

#include <stdbool.h>
#include <stdint.h>

typedef enum { CLI_FLAG, CLI_STRING, CLI_INT, CLI_DOUBLE } cli_kind_t;

typedef struct {
    const char *name;     /* without the leading "--" */
    cli_kind_t kind;
    void *target;         /* bool*, const char**, int64_t*, double* by kind */
    const char *metavar;  /* shown in --help for options with a value */
    const char *help;
    int64_t min, max;     /* CLI_INT range; both 0 means any int64 */
} cli_opt_t;

/* The options every stage takes; defaults filled in by cli_parse. */
typedef struct {
    const char *in;       /* "-" or a ZeroMQ endpoint (see io.h) */
    const char *out;
    bool stats;
    int64_t hwm;          /* ZeroMQ high-water mark, frames */
    double eos_timeout;   /* seconds queued frames may wait for a peer once none is connected */
    int64_t out_peers;    /* processes sharing a socket output; eos waits until that many took it */
    double idle_timeout;  /* seconds a socket input waits, incomplete, once every upstream peer left */
} cli_common_t;

typedef struct {
    const char *name;     /* program name, e.g. "di-tokenize" */
    const char *usage;    /* one line after the name, e.g. "[options] < in.jsonl" */
    const char *summary;  /* a paragraph for --help */
    cli_opt_t *opts;      /* the tool's own options, terminated by {0} */
} cli_spec_t;

/* Parses argv; prints help/version and exits 0 when asked; dies with a one-line reason on
 * misuse. Positional arguments are refused. */
void cli_parse(const cli_spec_t *spec, int argc, char **argv, cli_common_t *common);

#endif
