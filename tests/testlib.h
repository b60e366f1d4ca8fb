/* A minimal test harness: named cases, checks that report file:line, and the final
 * "N passed, N failed" line that tests/run sums over every test program. */
#ifndef DI_TESTLIB_H
#define DI_TESTLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void t_check(bool ok, const char *expr, const char *file, int line);
void t_checkf(bool ok, const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void t_check_eq(long long a, long long b, const char *ea, const char *eb, const char *file, int line);
void t_check_str(const char *a, const char *b, const char *ea, const char *eb, const char *file, int line);
void t_run(const char *name, void (*fn)(void));
/* A case that cannot run here (no GPU, say): counted as skipped, never as passed. */
void t_skip(const char *name, const char *why);
/* Prints the summary line and returns the process exit code. */
int t_finish(void);

/* Path of a data file (DI_DATA or the repo's data/ folder). */
const char *t_data_path(const char *rel);

#define CHECK(cond) t_check(!!(cond), #cond, __FILE__, __LINE__)
#define CHECKF(cond, ...) t_checkf(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
/* Each operand is evaluated once. */
#define CHECK_EQ(a, b) t_check_eq((long long)(a), (long long)(b), #a, #b, __FILE__, __LINE__)
#define CHECK_STR(a, b) t_check_str((a), (b), #a, #b, __FILE__, __LINE__)
#define RUN(fn) t_run(#fn, fn)

#endif
