#include "log.h"

#include <stdarg.h>
#include <stdio.h>

static const char *program = "di";
static log_level_t level = LOG_WARN;

void log_init(const char *name)
{
    program = name;
}

const char *log_program(void)
{
    return program;
}

void log_set_level(log_level_t l)
{
    level = l;
}

log_level_t log_get_level(void)
{
    return level;
}

void log_msg(log_level_t l, const char *fmt, ...)
{
    static const char *names[] = {"error", "warning", "info", "debug"};
    if (l > level) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: %s: ", program, names[l]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
