/* A strict, bounded msgpack reader over a byte range. Every length is checked against the
 * bytes that remain before anything is read or allocated, nesting is limited, and running
 * out of bytes is told apart from malformed bytes (a stream reader waits for more). */
#ifndef DI_MPREAD_H
#define DI_MPREAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MPR_MAX_DEPTH 32

typedef enum { MPR_OK = 0, MPR_SHORT, MPR_BAD } mpr_status_t;

typedef struct {
    const uint8_t *p, *end;
    mpr_status_t status; /* first failure sticks; every call after it fails */
    char err[160];
} mpr_t;

typedef enum {
    MPT_NIL, MPT_BOOL, MPT_UINT, MPT_INT, MPT_FLOAT, MPT_STR, MPT_BIN, MPT_ARRAY, MPT_MAP, MPT_EXT, MPT_INVALID
} mpr_type_t;

void mpr_init(mpr_t *r, const void *data, size_t len);
bool mpr_ok(const mpr_t *r);
/* Record a failure (format string) unless one is recorded already; returns false. */
bool mpr_fail(mpr_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

mpr_type_t mpr_peek(mpr_t *r);
const char *mpr_type_name(mpr_type_t t);

bool mpr_nil(mpr_t *r);
bool mpr_bool(mpr_t *r, bool *v);
bool mpr_uint(mpr_t *r, uint64_t *v);   /* non-negative integers only */
bool mpr_int(mpr_t *r, int64_t *v);     /* any integer that fits int64 */
bool mpr_number(mpr_t *r, double *v);   /* float or integer */
bool mpr_str(mpr_t *r, const char **s, uint32_t *len);
bool mpr_bin(mpr_t *r, const uint8_t **data, uint32_t *len);
/* Container headers: n is checked against the remaining bytes (each element needs one). */
bool mpr_array(mpr_t *r, uint32_t *n);
bool mpr_map(mpr_t *r, uint32_t *n);
/* Skip one whole object, nesting limited to MPR_MAX_DEPTH. */
bool mpr_skip(mpr_t *r);

#endif
