/* Small helpers every file uses: checked allocation, growable byte buffers, clocks, fatal exit. */
#ifndef DI_UTIL_H
#define DI_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DI_VERSION "0.1.0"

#define DI_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Allocation that cannot fail quietly: out of memory is fatal for a stage. */
void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

/* Print "<program>: <reason>" on stderr and exit(1). For fatal misuse only (bad flags,
 * missing files); a bad request never reaches this. */
_Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Monotonic nanoseconds, for durations inside one process. */
uint64_t now_ns(void);
/* Wall-clock microseconds since the epoch, for traces that cross machines. */
uint64_t wall_us(void);

/* A growable byte buffer. Zero-initialised is empty and valid. */
typedef struct {
    uint8_t *data;
    size_t len;
    size_t cap;
} buf_t;

void buf_reserve(buf_t *b, size_t extra);
void buf_append(buf_t *b, const void *p, size_t n);
void buf_putc(buf_t *b, uint8_t c);
void buf_puts(buf_t *b, const char *s);
void buf_printf(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Make data a NUL-terminated C string (the NUL is not counted in len). */
const char *buf_cstr(buf_t *b);
void buf_clear(buf_t *b);
void buf_free(buf_t *b);

/* A growable array of token ids. Zero-initialised is empty and valid. */
typedef struct {
    uint32_t *v;
    size_t n;
    size_t cap;
} ids_t;

void ids_push(ids_t *a, uint32_t id);
void ids_append(ids_t *a, const uint32_t *ids, size_t n);
void ids_free(ids_t *a);

/* Read a whole file; returns NULL and sets errno on failure. The result is NUL-terminated. */
char *read_file(const char *path, size_t *len);

/* Strict number parsing for flags: the whole string must be a number in range. */
bool parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);
bool parse_f64(const char *s, double *out);

#endif
