#include "mpread.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void mpr_init(mpr_t *r, const void *data, size_t len)
{
    r->p = data;
    r->end = r->p + len;
    r->status = MPR_OK;
    r->err[0] = 0;
}

bool mpr_ok(const mpr_t *r)
{
    return r->status == MPR_OK;
}

static bool fail_as(mpr_t *r, mpr_status_t status, const char *fmt, va_list ap)
{
    if (r->status != MPR_OK) return false;
    r->status = status;
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    return false;
}

bool mpr_fail(mpr_t *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_as(r, MPR_BAD, fmt, ap);
    va_end(ap);
    return false;
}

static bool fail_short(mpr_t *r)
{
    if (r->status != MPR_OK) return false;
    r->status = MPR_SHORT;
    snprintf(r->err, sizeof r->err, "truncated msgpack data");
    return false;
}

static size_t remaining(const mpr_t *r)
{
    return (size_t)(r->end - r->p);
}

/* Take n bytes; false (short) when they are not there. */
static bool take(mpr_t *r, size_t n, const uint8_t **out)
{
    if (r->status != MPR_OK) return false;
    if (remaining(r) < n) return fail_short(r);
    *out = r->p;
    r->p += n;
    return true;
}

/* The type byte, after mpr_peek/expect has seen it is there. */
static uint8_t type_byte(mpr_t *r)
{
    return *r->p++;
}

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

/* Read a big-endian length of n bytes. */
static bool take_len(mpr_t *r, int n, uint32_t *len)
{
    const uint8_t *p;
    if (!take(r, (size_t)n, &p)) return false;
    *len = (uint32_t)be(p, n);
    return true;
}

mpr_type_t mpr_peek(mpr_t *r)
{
    if (r->status != MPR_OK) return MPT_INVALID;
    if (!remaining(r)) {
        fail_short(r);
        return MPT_INVALID;
    }
    uint8_t b = *r->p;
    if (b <= 0x7f || (b >= 0xcc && b <= 0xcf)) return MPT_UINT;
    if (b >= 0xe0 || (b >= 0xd0 && b <= 0xd3)) return MPT_INT;
    if (b <= 0x8f || b == 0xde || b == 0xdf) return MPT_MAP;
    if (b <= 0x9f || b == 0xdc || b == 0xdd) return MPT_ARRAY;
    if (b <= 0xbf || (b >= 0xd9 && b <= 0xdb)) return MPT_STR;
    switch (b) {
    case 0xc0: return MPT_NIL;
    case 0xc2: case 0xc3: return MPT_BOOL;
    case 0xc4: case 0xc5: case 0xc6: return MPT_BIN;
    case 0xca: case 0xcb: return MPT_FLOAT;
    case 0xc7: case 0xc8: case 0xc9: case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: return MPT_EXT;
    default: return MPT_INVALID; /* 0xc1 is never used */
    }
}

const char *mpr_type_name(mpr_type_t t)
{
    static const char *names[] = {"nil", "bool", "unsigned integer", "integer", "float", "string",
                                  "binary", "array", "map", "extension", "invalid byte"};
    return names[t];
}

static bool expect(mpr_t *r, mpr_type_t want, const char *what)
{
    mpr_type_t t = mpr_peek(r);
    if (t == MPT_INVALID) return r->status == MPR_OK ? mpr_fail(r, "invalid msgpack byte 0x%02x", *r->p) : false;
    if (t != want) return mpr_fail(r, "expected %s, got %s", what, mpr_type_name(t));
    return true;
}

bool mpr_nil(mpr_t *r)
{
    if (!expect(r, MPT_NIL, "nil")) return false;
    type_byte(r);
    return true;
}

bool mpr_bool(mpr_t *r, bool *v)
{
    if (!expect(r, MPT_BOOL, "boolean")) return false;
    *v = type_byte(r) == 0xc3;
    return true;
}

/* Reads any integer as (negative?, magnitude-or-value). */
static bool read_integer(mpr_t *r, bool *negative, uint64_t *u, int64_t *s)
{
    mpr_type_t t = mpr_peek(r);
    if (t != MPT_UINT && t != MPT_INT) {
        if (t == MPT_INVALID) return false;
        return mpr_fail(r, "expected integer, got %s", mpr_type_name(t));
    }
    uint8_t b = type_byte(r);
    if (b <= 0x7f) { *negative = false; *u = b; return true; }
    if (b >= 0xe0) { *negative = true; *s = (int8_t)b; return true; }
    int n = 1 << ((b & 3));
    const uint8_t *q;
    if (!take(r, (size_t)n, &q)) return false;
    uint64_t raw = be(q, n);
    if (b >= 0xcc && b <= 0xcf) { *negative = false; *u = raw; return true; }
    switch (n) {
    case 1: *s = (int8_t)raw; break;
    case 2: *s = (int16_t)raw; break;
    case 4: *s = (int32_t)raw; break;
    default: *s = (int64_t)raw; break;
    }
    *negative = *s < 0;
    if (!*negative) *u = (uint64_t)*s;
    return true;
}

bool mpr_uint(mpr_t *r, uint64_t *v)
{
    bool neg;
    uint64_t u = 0;
    int64_t s = 0;
    if (!read_integer(r, &neg, &u, &s)) return false;
    if (neg) return mpr_fail(r, "expected a non-negative integer, got %lld", (long long)s);
    *v = u;
    return true;
}

bool mpr_int(mpr_t *r, int64_t *v)
{
    bool neg;
    uint64_t u = 0;
    int64_t s = 0;
    if (!read_integer(r, &neg, &u, &s)) return false;
    if (!neg && u > (uint64_t)INT64_MAX) return mpr_fail(r, "integer %llu out of range", (unsigned long long)u);
    *v = neg ? s : (int64_t)u;
    return true;
}

bool mpr_number(mpr_t *r, double *v)
{
    mpr_type_t t = mpr_peek(r);
    if (t == MPT_UINT || t == MPT_INT) {
        int64_t i;
        uint64_t u;
        if (t == MPT_UINT) {
            if (!mpr_uint(r, &u)) return false;
            *v = (double)u;
        } else {
            if (!mpr_int(r, &i)) return false;
            *v = (double)i;
        }
        return true;
    }
    if (!expect(r, MPT_FLOAT, "number")) return false;
    const uint8_t *q;
    if (type_byte(r) == 0xca) {
        if (!take(r, 4, &q)) return false;
        uint32_t bits = (uint32_t)be(q, 4);
        float f;
        memcpy(&f, &bits, 4);
        *v = f;
    } else {
        if (!take(r, 8, &q)) return false;
        uint64_t bits = be(q, 8);
        memcpy(v, &bits, 8);
    }
    return true;
}

/* Length of a string whose type byte b was taken: fixstr or str8/16/32. */
static bool str_len(mpr_t *r, uint8_t b, uint32_t *len)
{
    if ((b & 0xe0) == 0xa0) {
        *len = b & 0x1f;
        return true;
    }
    return take_len(r, 1 << (b - 0xd9), len);
}

bool mpr_str(mpr_t *r, const char **s, uint32_t *len)
{
    const uint8_t *data;
    if (!expect(r, MPT_STR, "string")) return false;
    if (!str_len(r, type_byte(r), len)) return false;
    if (!take(r, *len, &data)) return false;
    *s = (const char *)data;
    return true;
}

bool mpr_bin(mpr_t *r, const uint8_t **data, uint32_t *len)
{
    if (!expect(r, MPT_BIN, "binary")) return false;
    if (!take_len(r, 1 << (type_byte(r) - 0xc4), len)) return false;
    return take(r, *len, data);
}

static bool container(mpr_t *r, mpr_type_t t, uint32_t *n)
{
    if (!expect(r, t, t == MPT_MAP ? "map" : "array")) return false;
    uint8_t b = type_byte(r);
    bool ok;
    if (b == 0xde || b == 0xdc) ok = take_len(r, 2, n);
    else if (b == 0xdf || b == 0xdd) ok = take_len(r, 4, n);
    else {
        *n = b & 0x0f;
        ok = true;
    }
    if (!ok) return false;
    uint64_t min_bytes = (uint64_t)*n * (t == MPT_MAP ? 2 : 1);
    if (min_bytes > remaining(r)) {
        /* The elements cannot fit in what is left: on a stream that may just mean "wait". */
        return fail_short(r);
    }
    return true;
}

bool mpr_array(mpr_t *r, uint32_t *n)
{
    return container(r, MPT_ARRAY, n);
}

bool mpr_map(mpr_t *r, uint32_t *n)
{
    return container(r, MPT_MAP, n);
}

static bool skip_depth(mpr_t *r, int depth)
{
    if (depth > MPR_MAX_DEPTH) return mpr_fail(r, "msgpack nested deeper than %d", MPR_MAX_DEPTH);
    mpr_type_t t = mpr_peek(r);
    const uint8_t *q;
    uint32_t n;
    switch (t) {
    case MPT_NIL: return mpr_nil(r);
    case MPT_BOOL: { bool b; return mpr_bool(r, &b); }
    case MPT_UINT: case MPT_INT: { int64_t i; uint64_t u; return t == MPT_UINT ? mpr_uint(r, &u) : mpr_int(r, &i); }
    case MPT_FLOAT: { double d; return mpr_number(r, &d); }
    case MPT_STR: { const char *s; return mpr_str(r, &s, &n); }
    case MPT_BIN: return mpr_bin(r, &q, &n);
    case MPT_EXT: {
        uint8_t b = type_byte(r);
        if (b >= 0xd4) n = 1u << (b - 0xd4);
        else if (!take_len(r, 1 << (b - 0xc7), &n)) return false;
        return take(r, (size_t)n + 1, &q); /* type byte + data */
    }
    case MPT_ARRAY: case MPT_MAP: {
        if (!container(r, t, &n)) return false;
        uint64_t items = (uint64_t)n * (t == MPT_MAP ? 2 : 1);
        for (uint64_t i = 0; i < items; i++)
            if (!skip_depth(r, depth + 1)) return false;
        return true;
    }
    case MPT_INVALID:
        if (r->status == MPR_OK) return mpr_fail(r, "invalid msgpack byte 0x%02x", *r->p);
        return false;
    }
    return false;
}

bool mpr_skip(mpr_t *r)
{
    return skip_depth(r, 1);
}
