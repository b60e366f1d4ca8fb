#include "util.h"
#include "log.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Noreturn void out_of_memory(size_t n)
{
    die("out of memory allocating %zu bytes", n);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) out_of_memory(n);
    return p;
}

void *xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) out_of_memory(count * size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) out_of_memory(n);
    return q;
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    char *d = xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", log_program());
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000u;
}

void buf_reserve(buf_t *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1) cap *= 2;
    b->data = xrealloc(b->data, cap);
    b->cap = cap;
}

void buf_append(buf_t *b, const void *p, size_t n)
{
    if (!n) return;
    buf_reserve(b, n);
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void buf_putc(buf_t *b, uint8_t c)
{
    buf_reserve(b, 1);
    b->data[b->len++] = c;
}

void buf_puts(buf_t *b, const char *s)
{
    buf_append(b, s, strlen(s));
}

void buf_printf(buf_t *b, const char *fmt, ...)
{
    va_list ap;
    char probe[1];
    va_start(ap, fmt);
    int n = vsnprintf(probe, sizeof probe, fmt, ap);
    va_end(ap);
    if (n <= 0) return;
    buf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

const char *buf_cstr(buf_t *b)
{
    buf_reserve(b, 0);
    b->data[b->len] = 0;
    return (const char *)b->data;
}

void buf_clear(buf_t *b)
{
    b->len = 0;
}

void buf_free(buf_t *b)
{
    free(b->data);
    *b = (buf_t){0};
}

void ids_push(ids_t *a, uint32_t id)
{
    ids_append(a, &id, 1);
}

void ids_append(ids_t *a, const uint32_t *ids, size_t n)
{
    if (a->n + n > a->cap) {
        size_t cap = a->cap ? a->cap : 16;
        while (cap < a->n + n) cap *= 2;
        a->v = xrealloc(a->v, cap * sizeof *a->v);
        a->cap = cap;
    }
    if (n) memcpy(a->v + a->n, ids, n * sizeof *ids);
    a->n += n;
}

void ids_free(ids_t *a)
{
    free(a->v);
    *a = (ids_t){0};
}

char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    buf_t b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) buf_append(&b, chunk, n);
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        buf_free(&b);
        errno = EIO;
        return NULL;
    }
    buf_cstr(&b);
    if (len) *len = b.len;
    return (char *)b.data;
}

bool parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < min || v > max) return false;
    *out = v;
    return true;
}

bool parse_f64(const char *s, double *out)
{
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}
