#include "cli.h"
#include "log.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool verbose_flag, quiet_flag, help_flag, version_flag;

static cli_opt_t common_opts(cli_common_t *c, int i)
{
    cli_opt_t all[] = {
        {"in", CLI_STRING, &c->in, "SPEC", "input: - (stdin), tcp://HOST:PORT or ipc://PATH; prefix @ to bind", 0, 0},
        {"out", CLI_STRING, &c->out, "SPEC", "output: - (stdout), tcp://HOST:PORT or ipc://PATH; prefix @ to bind", 0, 0},
        {"hwm", CLI_INT, &c->hwm, "N", "ZeroMQ high-water mark in frames (backpressure)", 1, 10000000},
        {"out-peers", CLI_INT, &c->out_peers, "N", "processes sharing a socket --out: end-of-stream waits for N of them", 0, 100000},
        {"eos-timeout", CLI_DOUBLE, &c->eos_timeout, "SEC", "how long frames wait for a socket peer when none is connected (30)", 0, 0},
        {"idle-timeout", CLI_DOUBLE, &c->idle_timeout, "SEC", "a socket --in ends, incomplete, once every upstream peer has been gone SEC (10)", 0, 0},
        {"stats", CLI_FLAG, &c->stats, NULL, "print per-stage counts and timings on stderr at exit", 0, 0},
        {"verbose", CLI_FLAG, &verbose_flag, NULL, "log more (info messages too)", 0, 0},
        {"quiet", CLI_FLAG, &quiet_flag, NULL, "log errors only", 0, 0},
        {"help", CLI_FLAG, &help_flag, NULL, "show this help and exit", 0, 0},
        {"version", CLI_FLAG, &version_flag, NULL, "show the version and exit", 0, 0},
        {0},
    };
    return all[i];
}

static void print_opt(const cli_opt_t *o)
{
    char left[64];
    if (o->kind == CLI_FLAG)
        snprintf(left, sizeof left, "--%s", o->name);
    else
        snprintf(left, sizeof left, "--%s %s", o->name, o->metavar ? o->metavar : "VALUE");
    printf("  %-26s %s\n", left, o->help);
}

static void print_help(const cli_spec_t *spec, cli_common_t *c)
{
    printf("usage: %s %s\n\n%s\n\noptions:\n", spec->name, spec->usage, spec->summary);
    for (cli_opt_t *o = spec->opts; o && o->name; o++) print_opt(o);
    printf("\ncommon options:\n");
    for (int i = 0; common_opts(c, i).name; i++) {
        cli_opt_t o = common_opts(c, i);
        print_opt(&o);
    }
}

static bool set_value(const cli_opt_t *o, const char *value)
{
    switch (o->kind) {
    case CLI_FLAG: return false;
    case CLI_STRING: *(const char **)o->target = value; return true;
    case CLI_INT: {
        int64_t min = o->min, max = o->max;
        if (!min && !max) { min = INT64_MIN; max = INT64_MAX; }
        return parse_i64(value, min, max, (int64_t *)o->target);
    }
    case CLI_DOUBLE: return parse_f64(value, (double *)o->target);
    }
    return false;
}

static const cli_opt_t *find_opt(const cli_spec_t *spec, cli_common_t *c, const char *name, size_t len,
                                 cli_opt_t *scratch)
{
    for (cli_opt_t *o = spec->opts; o && o->name; o++)
        if (strlen(o->name) == len && !strncmp(o->name, name, len)) return o;
    for (int i = 0; common_opts(c, i).name; i++) {
        *scratch = common_opts(c, i);
        if (strlen(scratch->name) == len && !strncmp(scratch->name, name, len)) return scratch;
    }
    return NULL;
}

void cli_parse(const cli_spec_t *spec, int argc, char **argv, cli_common_t *c)
{
    log_init(spec->name);
    *c = (cli_common_t){.in = "-", .out = "-", .hwm = 1000, .eos_timeout = 30.0, .idle_timeout = 10.0};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0 || !arg[2])
            die("unexpected argument '%s' (see --help)", arg);
        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        cli_opt_t scratch;
        const cli_opt_t *o = find_opt(spec, c, name, len, &scratch);
        if (!o) die("unknown option --%.*s (see --help)", (int)len, name);
        if (o->kind == CLI_FLAG) {
            if (eq) die("option --%s takes no value", o->name);
            *(bool *)o->target = true;
            continue;
        }
        const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!value) die("option --%s needs a value", o->name);
        if (!set_value(o, value)) die("bad value '%s' for --%s", value, o->name);
    }
    if (help_flag) {
        print_help(spec, c);
        exit(0);
    }
    if (version_flag) {
        printf("%s %s\n", spec->name, DI_VERSION);
        exit(0);
    }
    if (c->eos_timeout < 0 || c->idle_timeout < 0) die("--eos-timeout and --idle-timeout must not be negative");
    if (verbose_flag) log_set_level(LOG_INFO);
    if (quiet_flag) log_set_level(LOG_ERROR);
}
