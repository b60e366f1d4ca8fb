#include "testlib.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed, skipped;
static int case_failures;
static const char *case_name = "?";

void t_check(bool ok, const char *expr, const char *file, int line)
{
    if (ok) return;
    case_failures++;
    fprintf(stderr, "  FAIL %s: %s:%d: %s\n", case_name, file, line, expr);
}

void t_checkf(bool ok, const char *file, int line, const char *fmt, ...)
{
    if (ok) return;
    case_failures++;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  FAIL %s: %s:%d: ", case_name, file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void t_check_eq(long long a, long long b, const char *ea, const char *eb, const char *file, int line)
{
    t_checkf(a == b, file, line, "%s == %s (%lld vs %lld)", ea, eb, a, b);
}

void t_check_str(const char *a, const char *b, const char *ea, const char *eb, const char *file, int line)
{
    t_checkf(a && b && !strcmp(a, b), file, line, "%s == %s (\"%s\" vs \"%s\")", ea, eb, a ? a : "(null)",
             b ? b : "(null)");
}

void t_run(const char *name, void (*fn)(void))
{
    case_name = name;
    case_failures = 0;
    fn();
    if (case_failures) {
        failed++;
        printf("not ok %s\n", name);
    } else {
        passed++;
        printf("ok %s\n", name);
    }
    fflush(stdout);
}

void t_skip(const char *name, const char *why)
{
    skipped++;
    printf("skip %s (%s)\n", name, why);
}

int t_finish(void)
{
    if (skipped)
        printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    else
        printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

const char *t_data_path(const char *rel)
{
    static char path[4096];
    const char *root = getenv("DI_DATA");
    snprintf(path, sizeof path, "%s/%s", root && *root ? root : "data", rel);
    return path;
}
