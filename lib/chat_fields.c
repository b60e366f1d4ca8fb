/* Typed reading of request fields (see chat_fields.h). */
#include "chat_fields.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int chat_fail(chat_ctx_t *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= c->errlen && c->errlen > 1) {
        /* Drop a character cut in half: the message may quote request text. */
        size_t len = c->errlen - 1, lead = len;
        while (lead > 0 && ((unsigned char)c->err[lead - 1] & 0xC0) == 0x80) lead--;
        if (lead > 0) {
            unsigned char b = (unsigned char)c->err[lead - 1];
            size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
            if (len - (lead - 1) < need) c->err[lead - 1] = 0;
        }
    }
    return -1;
}

const char *chat_type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    default: return "null";
    }
}

/* A field, or NULL when it is absent or null. */
const json_t *chat_field(const json_t *obj, const char *key) {
    const json_t *v = json_object_get(obj, key);
    return v && !json_is_null(v) ? v : NULL;
}

void chat_set_buf(buf_t *b, const json_t *s) { buf_append(b, json_string_value(s), json_string_length(s)); }
json_t *chat_json_buf(const buf_t *b) { return json_stringn(b->len ? (const char *)b->data : "", b->len); }

int chat_want_string(chat_ctx_t *c, const json_t *v, const char *what) {
    return json_is_string(v) ? 0 : chat_fail(c, "%s: expected a string, got %s", what, chat_type_name(v));
}

int chat_opt_bool(chat_ctx_t *c, const json_t *obj, const char *key, const char *what, bool *out) {
    const json_t *v = chat_field(obj, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return chat_fail(c, "%s: expected a boolean, got %s", what, chat_type_name(v));
    *out = json_is_true(v);
    return 0;
}

/* An optional unsigned integer no larger than max (the Rust field's width). 1 if present. */
int chat_opt_uint(chat_ctx_t *c, const json_t *obj, const char *key, uint64_t max, uint64_t *out) {
    const json_t *v = chat_field(obj, key);
    if (!v) return 0;
    if (!json_is_integer(v)) return chat_fail(c, "'%s': expected an integer, got %s", key, chat_type_name(v));
    json_int_t i = json_integer_value(v);
    if (i < 0 || (uint64_t)i > max) return chat_fail(c, "'%s': %lld is out of range", key, (long long)i);
    *out = (uint64_t)i;
    return 1;
}

/* An optional number read as a float32, like recipe's f32 fields. 1 if present. */
int chat_opt_f32(chat_ctx_t *c, const json_t *obj, const char *key, double *out) {
    const json_t *v = chat_field(obj, key);
    if (!v) return 0;
    if (!json_is_number(v)) return chat_fail(c, "'%s': expected a number, got %s", key, chat_type_name(v));
    *out = (double)(float)json_number_value(v);
    return 1;
}

/* The name an enum value spells: a string, or where recipe's field is an external enum also
 * the map spelling {"name": null}. NULL if it is neither. */
static const char *enum_spelling(const json_t *v, bool map_ok) {
    if (json_is_string(v)) return json_string_value(v);
    if (!map_ok || !json_is_object(v) || json_object_size(v) != 1) return NULL;
    const char *key = json_object_iter_key(json_object_iter((json_t *)v));
    return json_is_null(json_object_get(v, key)) ? key : NULL;
}

bool chat_is_function_tag(const json_t *type) {
    const char *s = enum_spelling(type, true);
    return s && !strcmp(s, "function");
}

int chat_enum_value(chat_ctx_t *c, const json_t *v, const char *what, const char *const *names, size_t n, bool map_ok) {
    const char *s = enum_spelling(v, map_ok);
    if (!s) return chat_fail(c, "%s: expected a string, got %s", what, chat_type_name(v));
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s, names[i])) return (int)i;
    return chat_fail(c, "%s: unknown value '%s'", what, s);
}

bool chat_same(const buf_t *a, const buf_t *b) { return a->len == b->len && !memcmp(a->data, b->data, a->len); }
